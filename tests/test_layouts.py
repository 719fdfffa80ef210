"""The forward pass takes both layouts (bertfn/model/layout.py): texts laid end to end (``Segments``) give each text
the hidden states the padded batch gives it, within 1e-5 in fp32, member by member.

Tiny random models (``bertfn.init_model``, every LayerNorm and bias moved off its init), no transformers. Texts of
20, 7, 3 and 1 tokens (BERT's layer: some of one length too, which attend as one batch): every text's last hidden
states, and those at a few rows alone (``Segments.read``: the last layer's output there only), against the right-
(and left-) padded batch, on BERTFN_TEST_DEVICE (bench/gpu_check.sh runs them on a GPU: 1e-4 there). DeBERTa's
are in tests/test_deberta_layouts.py.
"""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, fp32_atol, on_device

import bertfn
from bertfn.model.layout import Segments

TOL = dict(atol=fp32_atol(1e-5), rtol=0)
LENGTHS = (20, 7, 3, 1)
READ = on_device(torch.tensor([0, 19, 20, 26, 29, 30]))
"""Rows of the texts laid end to end: the first text's ends, the second's, the third's last, the one-token text."""


def padded(rows: list[torch.Tensor], side: str, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` padded with ``pad`` on ``side`` to the longest: (B, S) and the 0/1 mask, on the tests' device."""
    S = max(len(r) for r in rows)
    out, mask = torch.full((len(rows), S), pad, dtype=torch.long), torch.zeros(len(rows), S, dtype=torch.long)
    for i, r in enumerate(rows):
        at = slice(0, len(r)) if side == "right" else slice(S - len(r), S)
        out[i, at], mask[i, at] = r, 1
    return on_device(out), on_device(mask)


def random_member(fields: dict) -> bertfn.Model:
    """A random model of the config ``fields`` on the tests' device, every norm and bias off its init."""
    model = bertfn.init_model(bertfn.BertConfig.from_dict(fields), parts=(), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    for name, t in model.state.items():
        if "norm" in name.lower() or name.endswith("bias"):
            t.add_(torch.randn(t.shape, generator=g) * 0.3)
    return model.to(DEVICE)


# --- BERT's layer (and the members that keep it) ------------------------------------------------------------

SMALL = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24,
             max_position_embeddings=64, initializer_range=0.3, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0)
BERT_LAYER = {
    "bert": dict(SMALL, model_type="bert"),
    "bert relative_key": dict(SMALL, model_type="bert", position_embedding_type="relative_key"),
    "bert relative_key_query": dict(SMALL, model_type="bert", position_embedding_type="relative_key_query"),
    "bert decoder": dict(SMALL, model_type="bert", is_decoder=True),
    "roberta": dict(SMALL, model_type="roberta", pad_token_id=1, max_position_embeddings=66),
    "distilbert": dict(model_type="distilbert", vocab_size=50, dim=16, n_layers=2, n_heads=2, hidden_dim=24,
                       max_position_embeddings=64, initializer_range=0.3, dropout=0.0, attention_dropout=0.0),
    "electra": dict(SMALL, model_type="electra", embedding_size=8),
    "albert": dict(SMALL, model_type="albert", embedding_size=8),
    "mpnet": dict(SMALL, model_type="mpnet", pad_token_id=1, max_position_embeddings=66),
}
"""BERT's post-LN layer: absolute and relative positions, a decoder's causal attention, RoBERTa's positions from
``padding_idx + 1``, DistilBERT's, ELECTRA's and ALBERT's embeddings (ALBERT's one shared layer), MPNet's relative
position bias."""
RUNS = (20, 7, 7, 3, 3, 3, 1)
"""Texts of which some share a length: those attend as one dense batch (``Segments.attend``'s runs)."""
RUNS_READ = on_device(torch.tensor([0, 19, 20, 27, 33, 39, 43]))
RUNS_BATCHES = {"runs": None, "some padded": (1, 2, 4), "one padded": (7,)}
"""How many texts each attention call takes (``Segments.batches``): one call per run of a length; the 20 alone, the
two 7s, the 3s with the 1 padded to 3; all seven padded to 20."""
BATCHES = {"runs": None, "some padded": (1, 3), "one padded": (4,)}
"""The same for LENGTHS: a call per text; the 20 alone and 7, 3, 1 padded to 7; all four padded to 20."""


@pytest.mark.parametrize("batches", list(RUNS_BATCHES))
@pytest.mark.parametrize("member", list(BERT_LAYER))
def test_bert_layer_texts_end_to_end_equal_the_padded_batch(member, batches):
    """Padded on the right (and on the left where positions count the real tokens: RoBERTa's, MPNet's bias); the
    texts attending run by run, or gathered into padded batches."""
    model = random_member(BERT_LAYER[member])
    g = torch.Generator().manual_seed(2)
    ids = [torch.randint(4, 24, (n,), generator=g) for n in RUNS]
    ends = on_device(torch.cat(ids)[None])  # (1, T)
    calls = RUNS_BATCHES[batches]
    with torch.inference_mode():
        every = bertfn.encoder(model, ends, Segments(RUNS, batches=calls)).last_hidden_state  # (1, T, H)
        some = bertfn.encoder(model, ends, Segments(RUNS, read=RUNS_READ, batches=calls)).last_hidden_state  # (1, r, H)
        for side in ("right", "left") if member in ("roberta", "mpnet") else ("right",):
            batch, mask = padded(ids, side, model.config.pad_token_id or 0)
            expected = bertfn.encoder(model, batch, mask).last_hidden_state[mask.bool()]  # (T, H): each text's rows
            torch.testing.assert_close(every[0], expected, **TOL)
            torch.testing.assert_close(some[0], expected[RUNS_READ], **TOL)


def test_segments_pool_each_text_and_refuse_what_they_do_not_run():
    """The pooler reads each text's first token; a cache, cross-attention, probabilities and dropout need the padded
    layout, and input that is not the texts' lengths end to end is refused (a trace runs there:
    tests/test_segment_traces.py)."""
    model = bertfn.init_model(bertfn.BertConfig.from_dict(dict(SMALL, model_type="bert")), parts=("pooler",),
                              generator=torch.Generator().manual_seed(0)).to(DEVICE)
    g = torch.Generator().manual_seed(2)
    ids = [torch.randint(4, 24, (n,), generator=g) for n in RUNS]
    batch, mask = padded(ids, "right", 0)
    with torch.inference_mode():
        pooled = bertfn.encoder(model, on_device(torch.cat(ids)[None]), Segments(RUNS)).pooler_output  # (b, H)
        torch.testing.assert_close(pooled, bertfn.encoder(model, batch, mask).pooler_output, **TOL)
        ends = on_device(torch.cat(ids)[None])
        for call in (lambda: bertfn.encoder(model, ends, Segments(RUNS), output_attentions=True),
                     lambda: bertfn.encoder(model, ends, Segments(RUNS), generator=torch.Generator()),
                     lambda: bertfn.encoder(model, ends, Segments(RUNS), use_cache=True),
                     lambda: bertfn.encoder(model, ends, Segments(RUNS[:-1]))):
            with pytest.raises(bertfn.InputError, match="end to end"):
                call()
    mpnet = random_member(BERT_LAYER["mpnet"])  # its own attention refuses as BERT's does
    with pytest.raises(bertfn.InputError, match="without dropout"):
        bertfn.encoder(mpnet, ends, Segments(RUNS), generator=torch.Generator())


# --- pre-LN members ---------------------------------------------------------------------------------------------

ESM = dict(model_type="esm", vocab_size=33, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
           intermediate_size=24, max_position_embeddings=64, pad_token_id=1, mask_token_id=32, token_dropout=True,
           layer_norm_eps=1e-5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.3)
"""ESM-2's layer, tiny: rotary positions, token dropout."""

PRE_LN = {
    "esm-2": dict(ESM, position_embedding_type="rotary"),
    "esm-1b": dict(ESM, position_embedding_type="absolute", emb_layer_norm_before=True, max_position_embeddings=66),
    "modernbert": dict(model_type="modernbert", vocab_size=50, hidden_size=16, num_hidden_layers=4,
                       num_attention_heads=2, intermediate_size=24, max_position_embeddings=64, pad_token_id=0,
                       local_attention=8, global_attn_every_n_layers=3, norm_bias=True, attention_bias=True,
                       mlp_bias=True, initializer_range=0.3),
}
"""ESM-2 (rotary), ESM-1b (a learned table from ``padding_idx + 1``, a LayerNorm on the embeddings) and ModernBERT
(layers 0 and 3 global, 1 and 2 local with a window of 4 either side, shorter than the longest text; every bias)."""


def pre_ln_texts(config) -> list[torch.Tensor]:
    """The texts' ids, each (n,); ESM's with masks in unequal shares (1 of 20, 2 of 7, 1 of 3, none of 1), so that
    token dropout scales each text by its own share."""
    g = torch.Generator().manual_seed(2)
    ids = [torch.randint(4, 24, (n,), generator=g) for n in LENGTHS]
    if config.model_type == "esm":
        ids[0][5] = ids[1][2] = ids[1][4] = ids[2][1] = config.mask_token_id
    return ids


@pytest.mark.parametrize("batches", list(BATCHES))
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("member", list(PRE_LN))
def test_pre_ln_texts_end_to_end_equal_the_padded_batch(member, side, batches):
    """Each text's own rotary positions, window (ModernBERT's local layers: a padded text's queries past its end see
    no key in their window) and share of masks (ESM's token dropout); text by text or in padded batches."""
    model = random_member(PRE_LN[member])
    ids = pre_ln_texts(model.config)
    batch, mask = padded(ids, side, model.config.pad_token_id)
    calls = BATCHES[batches]
    with torch.inference_mode():
        expected = bertfn.encoder(model, batch, mask).last_hidden_state[mask.bool()]  # (T, H): each text's rows
        ends = on_device(torch.cat(ids)[None])  # (1, T)
        every = bertfn.encoder(model, ends, Segments(LENGTHS, batches=calls)).last_hidden_state  # (1, T, H)
        some = bertfn.encoder(model, ends, Segments(LENGTHS, read=READ, batches=calls)).last_hidden_state  # (1, r, H)
    torch.testing.assert_close(every[0], expected, **TOL)
    torch.testing.assert_close(some[0], expected[READ], **TOL)


@pytest.mark.parametrize("batches", list(BATCHES))
@pytest.mark.parametrize("member", list(PRE_LN))
def test_pre_ln_attentions_on_segments_are_each_texts_own(member, batches):
    """With ``output_attentions`` each layer gives each text's probabilities (1, nh, n, n) (ESM-2's contact head reads
    them): those of its row of the padded batch, over its real tokens (cut from a padded batch's where it ran in
    one)."""
    model = random_member(PRE_LN[member])
    ids = pre_ln_texts(model.config)
    batch, mask = padded(ids, "right", model.config.pad_token_id)
    with torch.inference_mode():
        expected = bertfn.encoder(model, batch, mask, output_attentions=True).attentions  # L of (B, nh, S, S)
        got = bertfn.encoder(model, on_device(torch.cat(ids)[None]),
                             Segments(LENGTHS, read=READ[:1], batches=BATCHES[batches]),
                             output_attentions=True).attentions  # L of b (1, nh, n, n)
    assert len(got) == model.config.num_hidden_layers
    for layer, texts in zip(expected, got):
        assert len(texts) == len(LENGTHS)
        for b, (n, probs) in enumerate(zip(LENGTHS, texts)):
            torch.testing.assert_close(probs[0], layer[b, :, :n, :n], **TOL)


@pytest.mark.parametrize("member", list(PRE_LN))
def test_pre_ln_layers_leave_the_padding_rows_alone(member):
    """A layer on segments with zero rows after the texts (``Segments.pad``, the rows a kernel pads its products to)
    gives the texts' rows it gives without them; without position ids it counts each text's from its start."""
    model = random_member(PRE_LN[member])
    x = on_device(torch.randn(1, sum(LENGTHS), 16, generator=torch.Generator().manual_seed(3)))
    positions = on_device(torch.cat([torch.arange(n) for n in LENGTHS])[None])  # (1, T)
    p = model.params.scope("bert")
    with torch.inference_mode():
        for i in range(model.config.num_hidden_layers):
            layer = p.scope(f"encoder.layer.{i}")
            plain = model.family.layer(layer, x, Segments(LENGTHS), index=i, position_ids=positions).hidden
            extra = torch.cat([x, x.new_zeros(1, 3, 16)], dim=1)  # (1, T + 3, H)
            padded_rows = model.family.layer(layer, extra, Segments(LENGTHS, pad=3), index=i).hidden
            assert padded_rows.shape == (1, sum(LENGTHS) + 3, 16)
            torch.testing.assert_close(padded_rows[:, :sum(LENGTHS)], plain, **TOL)


def test_pre_ln_segments_refuse_what_inference_alone_runs_without():
    model = random_member(PRE_LN["modernbert"])
    ids = on_device(torch.cat(pre_ln_texts(model.config))[None])
    with pytest.raises(bertfn.InputError, match="Segments"):
        bertfn.encoder(model, ids, Segments(LENGTHS), generator=torch.Generator())
