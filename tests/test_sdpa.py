"""bertfn's two attention paths against transformers' own SDPA path, and which path each call takes.

The other parity tests pin transformers to eager attention, the reference that returns
probabilities. Here transformers runs ``attn_implementation="sdpa"`` (``BertSdpaSelfAttention`` and
its 4-D SDPA masks), so bertfn's fused path is checked against transformers' fused path: padded
batches, a decoder with cross-attention decoding token by token, and gradients. fp32, 1e-5.

Where the two libraries choose differently (docs/differences.md):
transformers picks SDPA once, at load time, and falls back to eager per call for relative
positions, output_attentions or a head mask; bertfn chooses per call (``impl=``, default "sdpa"),
keeps relative positions on SDPA (the bias joins the additive mask), and runs eager for attention
dropout, which it draws from the caller's generator (transformers' SDPA drops out inside the kernel).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import build_hf, hf_params

import bertfn

pytest.importorskip("transformers")
pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here

TOL = dict(atol=1e-5, rtol=1e-5)


def close(actual, expected, what):
    torch.testing.assert_close(actual, expected, **TOL, msg=lambda m: f"{what}: {m}")


def padded_batch(vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (3, 8), generator=g)
    mask = torch.ones(3, 8, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 2:] = 0
    return ids * mask, mask


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_encoder_and_gradients_equal_transformers_sdpa(impl):
    hf = build_hf("BertForPreTraining", seed=21, attn="sdpa")
    assert hf.config._attn_implementation == "sdpa"
    params = hf_params(hf, requires_grad=True)
    ids, mask = padded_batch(hf.config.vocab_size)
    labels = torch.randint(0, hf.config.vocab_size, ids.shape, generator=torch.Generator().manual_seed(1))
    labels = labels.masked_fill(mask == 0, -100)

    out = bertfn.encoder(params, ids, mask, impl=impl)
    assert out.attn_impl == impl
    loss = F.cross_entropy(bertfn.mlm_head(params, out.last_hidden_state).flatten(0, 1), labels.flatten())
    ref = hf(ids, mask, labels=labels, next_sentence_label=torch.zeros(3, dtype=torch.long), output_hidden_states=True)
    close(out.last_hidden_state, ref.hidden_states[-1], f"bertfn {impl} vs transformers sdpa")
    close(bertfn.nsp_head(params, out.pooler_output), ref.seq_relationship_logits, "NSP logits")

    mlm_loss = F.cross_entropy(ref.prediction_logits.flatten(0, 1), labels.flatten())
    mlm_loss.backward()
    ours = dict(zip(params.state, torch.autograd.grad(loss, list(params.state.values()), allow_unused=True,
                                                      materialize_grads=True)))
    for name, p in hf.named_parameters():  # the pooler and NSP head take no part: zero on both sides
        close(ours[name], p.grad if p.grad is not None else torch.zeros_like(p), f"grad of {name}")


def test_decoder_with_cross_attention_token_by_token_equals_transformers_sdpa():
    hf = build_hf("BertLMHeadModel", seed=22, attn="sdpa", is_decoder=True, add_cross_attention=True)
    params = hf_params(hf)
    g = torch.Generator().manual_seed(0)
    B, S, S_e = 2, 5, 4
    ids = torch.randint(1, hf.config.vocab_size, (B, S), generator=g)
    enc = torch.randn(B, S_e, hf.config.hidden_size, generator=g)
    enc_mask = torch.ones(B, S_e, dtype=torch.long)
    enc_mask[1, -1] = 0
    with torch.no_grad():
        full = bertfn.encoder(params, ids, encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
        ref = hf(ids, encoder_hidden_states=enc, encoder_attention_mask=enc_mask, use_cache=False,
                 output_hidden_states=True)
        close(full.last_hidden_state, ref.hidden_states[-1], "full causal pass vs transformers sdpa")
        cache, hf_cache = None, None
        for t in range(S):
            step = bertfn.encoder(params, ids[:, t:t + 1], encoder_hidden_states=enc, encoder_attention_mask=enc_mask,
                                  cache=cache, use_cache=True)
            r = hf(ids[:, t:t + 1], encoder_hidden_states=enc, encoder_attention_mask=enc_mask,
                   past_key_values=hf_cache, use_cache=True, output_hidden_states=True)
            cache, hf_cache = step.cache, r.past_key_values
            assert step.attn_impl == "sdpa"
            close(step.last_hidden_state, r.hidden_states[-1], f"step {t} vs transformers sdpa")
            close(step.last_hidden_state, full.last_hidden_state[:, t:t + 1], f"step {t} vs the full pass")


def test_which_path_runs():
    """bertfn's selection rules, one call each (``EncoderOutput.attn_impl`` says which path ran)."""
    hf = build_hf("BertModel", seed=23, position_embedding_type="relative_key", attention_probs_dropout_prob=0.1)
    params = hf_params(hf)
    ids = torch.randint(1, hf.config.vocab_size, (1, 6), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(0)
    runs = {
        "default": bertfn.encoder(params, ids),
        "impl='eager'": bertfn.encoder(params, ids, impl="eager"),
        "output_attentions": bertfn.encoder(params, ids, output_attentions=True),
        "head_mask": bertfn.encoder(params, ids, head_mask=torch.ones(hf.config.num_attention_heads)),
        "dropout (generator)": bertfn.encoder(params, ids, generator=g),
    }
    assert {k: v.attn_impl for k, v in runs.items()} == {
        "default": "sdpa",  # relative positions stay on SDPA (transformers falls back to eager)
        "impl='eager'": "eager",
        "output_attentions": "eager", "head_mask": "eager",
        "dropout (generator)": "eager",  # attention dropout from the generator needs the probabilities
    }
    no_attention_dropout = bertfn.Params(params.state, params.config.__class__.from_dict(
        {**params.config.to_dict(), "attention_probs_dropout_prob": 0.0}))
    assert bertfn.encoder(no_attention_dropout, ids, generator=g).attn_impl == "sdpa"  # hidden dropout only
