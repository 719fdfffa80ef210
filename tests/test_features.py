"""Every BERT feature the walkthroughs read, against transformers 4.57 (fp32, tolerance 1e-5).

The parity matrix lets hypothesis choose the config (sizes, position_embedding_type, hidden_act,
decoder or not, cross-attention or not, chunk size, head mask) and the inputs (batch, lengths,
padding side, token types, encoder length and padding), builds the transformers model with those
weights, and compares every output bertfn gives: all hidden states, attention and cross-attention
probabilities, the cache, the pooler / NSP logits and the LM logits.

Padding: all positions are compared, padded ones included. bertfn and transformers run the same
arithmetic there, and every query row keeps at least one key it may see, except with left padding in
a decoder, where the first positions of a padded row see no key at all; both libraries then attend
uniformly to every key (finfo.min everywhere), so even those rows agree. test_decoding.py, where the
cache makes such rows legitimately different, compares unpadded positions only.
"""

from __future__ import annotations

import pytest
import torch
from conftest import build_hf, hf_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bertfn

pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here
from bertfn.model.functional import ACTIVATIONS

TOL = dict(atol=1e-5, rtol=1e-5)
POSITION_TYPES = ("absolute", "relative_key", "relative_key_query")


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(actual, expected, **TOL, msg=lambda m: f"{what}: {m}")


def heads_of(x: torch.Tensor, nh: int) -> torch.Tensor:
    """(B, S, nh*hd) -> (B, nh, S, hd), the layout of the cache."""
    B, S, _ = x.shape
    return x.view(B, S, nh, -1).transpose(1, 2)


@st.composite
def cases(draw):
    """A config and inputs for one row of the parity matrix."""
    nh = draw(st.integers(1, 3))
    is_decoder = draw(st.booleans())
    S = draw(st.integers(1, 7))
    B = draw(st.integers(1, 3))
    cfg = dict(
        num_attention_heads=nh,
        hidden_size=nh * draw(st.sampled_from([4, 8])),
        num_hidden_layers=draw(st.integers(1, 2)),
        intermediate_size=draw(st.integers(4, 24)),
        max_position_embeddings=draw(st.sampled_from([8, 16])),
        position_embedding_type=draw(st.sampled_from(POSITION_TYPES)),
        hidden_act=draw(st.sampled_from(sorted(ACTIVATIONS))),
        is_decoder=is_decoder,
        add_cross_attention=is_decoder and draw(st.booleans()),
        # transformers' apply_chunking_to_forward needs the chunk size to divide the length
        chunk_size_feed_forward=draw(st.sampled_from([0] + [c for c in range(1, S + 1) if S % c == 0])),
    )
    lengths = draw(st.lists(st.integers(1, S), min_size=B, max_size=B))
    left = draw(st.booleans())
    pos, n = torch.arange(S)[None, :], torch.tensor(lengths)[:, None]
    mask = (pos >= S - n if left else pos < n).long()  # (B, S): 1 on the n real tokens of each row
    head_mask = draw(st.sampled_from([None, "one", "per-layer"]))
    S_e = draw(st.integers(1, 5))
    enc_lengths = draw(st.lists(st.integers(1, S_e), min_size=B, max_size=B))
    enc_mask = (torch.arange(S_e)[None, :] < torch.tensor(enc_lengths)[:, None]).long()
    return cfg, mask, head_mask, S_e, enc_mask, draw(st.integers(0, 2**16))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_parity_matrix(case):
    cfg, mask, head_mask_kind, S_e, enc_mask, seed = case
    cross = cfg["add_cross_attention"]
    hf = build_hf("BertLMHeadModel" if cfg["is_decoder"] else "BertForPreTraining", seed=seed, **cfg)
    params = hf_params(hf)
    L, nh, H = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["hidden_size"]
    B, S = mask.shape

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, hf.config.vocab_size, (B, S), generator=g)
    types = torch.randint(0, 2, (B, S), generator=g)
    head_mask = {None: None,
                 "one": torch.rand(nh, generator=g).round(),  # the same 0/1 heads in every layer
                 "per-layer": torch.rand(L, nh, generator=g)}[head_mask_kind]
    enc = torch.randn(B, S_e, H, generator=g) if cross else None
    extra = dict(encoder_hidden_states=enc, encoder_attention_mask=enc_mask if cross else None)

    with torch.no_grad():
        ref = hf(ids, mask, types, head_mask=head_mask, output_attentions=True, output_hidden_states=True,
                 **(dict(use_cache=False, **extra) if cfg["is_decoder"] else {}))
        out = bertfn.encoder(params, ids, mask, types, head_mask=head_mask, output_attentions=True,
                             output_hidden_states=True, use_cache=True, impl="eager", **extra)
        fast = bertfn.encoder(params, ids, mask, types, head_mask=head_mask, **extra)  # impl="sdpa"

    assert out.attn_impl == "eager"
    assert fast.attn_impl == ("sdpa" if head_mask is None else "eager")
    assert len(out.hidden_states) == L + 1 and len(out.attentions) == L
    for i, (a, b) in enumerate(zip(out.hidden_states, ref.hidden_states)):
        close(a, b, f"hidden state {i}")
    close(fast.last_hidden_state, ref.hidden_states[-1], f"last hidden state, {fast.attn_impl} path")
    for i, (a, b) in enumerate(zip(out.attentions, ref.attentions)):
        close(a, b, f"attention probabilities of layer {i}")
    if cross:
        assert len(out.cross_attentions) == L
        for i, (a, b) in enumerate(zip(out.cross_attentions, ref.cross_attentions)):
            close(a, b, f"cross-attention probabilities of layer {i}")
    else:
        assert out.cross_attentions is None

    # The cache of layer i holds the keys and values of layer i's input: transformers' own projections.
    with torch.no_grad():
        for i, hf_layer in enumerate(hf.bert.encoder.layer):
            k, v = out.cache.self_attention[i]
            close(k, heads_of(hf_layer.attention.self.key(ref.hidden_states[i]), nh), f"cached keys, layer {i}")
            close(v, heads_of(hf_layer.attention.self.value(ref.hidden_states[i]), nh), f"cached values, layer {i}")
            if cross:
                ck, cv = out.cache.cross_attention[i]
                close(ck, heads_of(hf_layer.crossattention.self.key(enc), nh), f"cross keys, layer {i}")
                close(cv, heads_of(hf_layer.crossattention.self.value(enc), nh), f"cross values, layer {i}")
    assert (out.cache.cross_attention is not None) == cross

    with torch.no_grad():
        logits = bertfn.mlm_head(params, out.last_hidden_state)
    close(logits, ref.logits if cfg["is_decoder"] else ref.prediction_logits, "LM logits")
    if not cfg["is_decoder"]:
        close(bertfn.nsp_head(params, out.pooler_output), ref.seq_relationship_logits, "NSP logits")
    else:
        assert out.pooler_output is None  # BertLMHeadModel has no pooler


@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_every_hidden_act(act):
    """Each activation bertfn knows, in the FFN and in the LM head's transform, against transformers' ACT2FN."""
    hf = build_hf("BertForMaskedLM", seed=3, hidden_act=act, num_hidden_layers=1)
    params = hf_params(hf)
    ids = torch.randint(1, hf.config.vocab_size, (2, 6))
    with torch.no_grad():
        logits = bertfn.mlm_head(params, bertfn.encoder(params, ids).last_hidden_state)
        close(logits, hf(ids).logits, f"MLM logits with hidden_act={act}")


# --- inputs -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def encoder_model():
    hf = build_hf("BertModel", seed=5, position_embedding_type="absolute", num_attention_heads=4)
    return hf, hf_params(hf)


def test_inputs_embeds_equal_ids_and_transformers(encoder_model):
    hf, params = encoder_model
    ids = torch.randint(1, hf.config.vocab_size, (2, 6))
    embeds = params["bert.embeddings.word_embeddings.weight"][ids] + 0.01 * torch.randn(2, 6, hf.config.hidden_size)
    with torch.no_grad():
        from_embeds = bertfn.encoder(params, inputs_embeds=embeds).last_hidden_state
        close(from_embeds, hf(inputs_embeds=embeds).last_hidden_state, "inputs_embeds")
        same = bertfn.encoder(params, inputs_embeds=params["bert.embeddings.word_embeddings.weight"][ids])
        close(same.last_hidden_state, bertfn.encoder(params, ids).last_hidden_state, "embeds of the ids vs ids")


def test_explicit_position_ids(encoder_model):
    hf, params = encoder_model
    ids = torch.randint(1, hf.config.vocab_size, (2, 6))
    positions = torch.tensor([[5, 1, 0, 9, 2, 2], [3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        close(bertfn.encoder(params, ids, position_ids=positions).last_hidden_state,
              hf(ids, position_ids=positions).last_hidden_state, "explicit (B, S) position_ids")
        shared = torch.arange(10, 16)
        close(bertfn.encoder(params, ids, position_ids=shared).last_hidden_state,
              hf(ids, position_ids=shared[None].expand(2, -1)).last_hidden_state, "one (S,) row for the batch")


def test_3d_and_4d_masks(encoder_model):
    """A full (B, S, S) 0/1 mask equals transformers'; (B, 1, S, S) equals it; (B, nh, S, S) masks per head."""
    hf, params = encoder_model
    B, S, nh = 2, 6, hf.config.num_attention_heads
    ids = torch.randint(1, hf.config.vocab_size, (B, S))
    g = torch.Generator().manual_seed(1)
    per_head = (torch.rand(B, nh, S, S, generator=g) > 0.4).long()
    per_head[..., 0] = 1  # every query keeps at least one key
    mask3 = per_head[:, 0]
    with torch.no_grad():
        ref = hf(ids, mask3, output_attentions=True)
        out3 = bertfn.encoder(params, ids, mask3, output_attentions=True)
        out4 = bertfn.encoder(params, ids, mask3[:, None], output_attentions=True)
        fast = bertfn.encoder(params, ids, mask3)
        heads = bertfn.encoder(params, ids, per_head, output_attentions=True)
    close(out3.last_hidden_state, ref.last_hidden_state, "3D mask")
    close(out3.attentions[0], ref.attentions[0], "3D mask probabilities")
    close(out4.last_hidden_state, out3.last_hidden_state, "4D (B, 1, S, S) mask vs 3D")
    close(fast.last_hidden_state, out3.last_hidden_state, "3D mask on the sdpa path")
    for h in range(nh):  # layer 0, head h, sees exactly the mask given for head h
        with torch.no_grad():
            alone = bertfn.encoder(params, ids, per_head[:, h], output_attentions=True)
        close(heads.attentions[0][:, h], alone.attentions[0][:, h], f"per-head 4D mask, head {h}")
    assert (heads.attentions[0] > 0).eq(per_head.bool()).all()


# --- fast path, chunking, outputs ----------------------------------------------------------------


@pytest.mark.parametrize("kind", POSITION_TYPES)
@pytest.mark.parametrize("decoder", [False, True])
def test_sdpa_folds_relative_bias_like_eager(kind, decoder):
    """transformers falls back to eager for relative positions; bertfn's fused path adds the bias to the mask."""
    hf = build_hf("BertModel", seed=7, position_embedding_type=kind, is_decoder=decoder, num_hidden_layers=3)
    params = hf_params(hf)
    ids = torch.randint(1, hf.config.vocab_size, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 2:] = 0
    with torch.no_grad():
        eager = bertfn.encoder(params, ids, mask, impl="eager")
        fast = bertfn.encoder(params, ids, mask, impl="sdpa")
        ref = hf(ids, mask, use_cache=False) if decoder else hf(ids, mask)
    assert (eager.attn_impl, fast.attn_impl) == ("eager", "sdpa")
    close(fast.last_hidden_state, eager.last_hidden_state, "sdpa vs eager")
    close(fast.last_hidden_state, ref.last_hidden_state, "sdpa vs transformers")


@settings(max_examples=15, deadline=None)
@given(S=st.integers(1, 12), chunk=st.integers(1, 13), seed=st.integers(0, 100))
def test_chunked_feed_forward_equals_unchunked(S, chunk, seed):
    """Any chunk size, also one that does not divide the length (transformers refuses those)."""
    from dataclasses import replace

    hf = build_hf("BertModel", seed=seed % 3)
    params = hf_params(hf)
    chunked = bertfn.Params(params.state, replace(params.config, chunk_size_feed_forward=chunk))
    ids = torch.randint(1, hf.config.vocab_size, (2, S), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        close(bertfn.encoder(chunked, ids).last_hidden_state, bertfn.encoder(params, ids).last_hidden_state,
              f"chunk {chunk} of {S}")


def test_outputs_are_named_and_only_what_was_asked(encoder_model):
    hf, params = encoder_model
    ids = torch.randint(1, hf.config.vocab_size, (2, 5))
    with torch.no_grad():
        plain = bertfn.encoder(params, ids)
    assert plain.hidden_states is None and plain.attentions is None and plain.cross_attentions is None
    assert plain.cache is None and plain.attn_impl == "sdpa"
    assert plain.last_hidden_state.shape == (2, 5, hf.config.hidden_size)
    assert plain.pooler_output.shape == (2, hf.config.hidden_size)
    with torch.no_grad():
        full = bertfn.encoder(params, ids, output_attentions=True, output_hidden_states=True, use_cache=True)
    assert full.attn_impl == "eager"  # probabilities were asked for: the fused kernel cannot give them
    nh, hd = hf.config.num_attention_heads, hf.config.hidden_size // hf.config.num_attention_heads
    assert [a.shape for a in full.attentions] == [(2, nh, 5, 5)] * hf.config.num_hidden_layers
    assert [k.shape for k, v in full.cache.self_attention] == [(2, nh, 5, hd)] * hf.config.num_hidden_layers
    assert full.cache.length == 5
    with pytest.raises(bertfn.InputError, match="impl must be one of"):
        bertfn.encoder(params, ids, impl="flash", output_attentions=True)


def test_cross_attention_needs_its_weights(encoder_model):
    hf, params = encoder_model
    ids = torch.randint(1, hf.config.vocab_size, (1, 4))
    with pytest.raises(bertfn.InputError, match="no cross-attention"):
        bertfn.encoder(params, ids, encoder_hidden_states=torch.randn(1, 3, hf.config.hidden_size))
