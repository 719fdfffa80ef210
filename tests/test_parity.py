"""bertfn vs transformers 4.57 on random-init checkpoints: every layer, pooler, MLM and NSP logits.

fp32 throughout; tolerance 1e-5 (absolute, on values of order 1; 1e-4 on a GPU, conftest.fp32_atol). Padded
positions are compared too for hidden states: both libraries compute them the same way, even if no one should use
them. Both sides run on BERTFN_TEST_DEVICE (conftest.DEVICE).
"""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, build_hf, fp32_atol, on_device, save_checkpoint

import bertfn

pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here

ATOL = fp32_atol(1e-5)

CONFIGS = [
    dict(hidden_size=48, num_attention_heads=3, num_hidden_layers=1, intermediate_size=64),
    dict(hidden_size=48, num_attention_heads=3, num_hidden_layers=3, intermediate_size=80),
    dict(hidden_size=36, num_attention_heads=4, num_hidden_layers=2, intermediate_size=50, hidden_act="gelu_new"),
    dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=40, hidden_act="relu",
         layer_norm_eps=1e-5, type_vocab_size=3),
]


def batch(vocab_size: int, type_vocab_size: int = 2, seed: int = 0):
    """Three rows of lengths 9, 5, 2 (padded with 0), with mixed token types, on DEVICE."""
    g = torch.Generator().manual_seed(seed)
    lengths = [9, 5, 2]
    ids = torch.randint(8, vocab_size, (3, 9), generator=g)
    mask = torch.zeros(3, 9, dtype=torch.long)
    for r, n in enumerate(lengths):
        mask[r, :n] = 1
    ids = ids * mask
    types = torch.randint(0, type_vocab_size, (3, 9), generator=g) * mask
    return on_device((ids, mask, types))


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"H{c['hidden_size']}-nh{c['num_attention_heads']}-L{c['num_hidden_layers']}")
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_pretraining_parity(cfg, impl, tmp_path):
    hf = build_hf("BertForPreTraining", seed=len(str(cfg)), **cfg)
    model = bertfn.load(save_checkpoint(hf, tmp_path), device=DEVICE)
    hf = on_device(hf)
    ids, mask, types = batch(hf.config.vocab_size, hf.config.type_vocab_size)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    out = bertfn.encoder(model.params, ids, mask, types, output_hidden_states=True, impl=impl)

    assert len(out.hidden_states) == hf.config.num_hidden_layers + 1
    for i, (mine, theirs) in enumerate(zip(out.hidden_states, ref.hidden_states)):
        torch.testing.assert_close(mine, theirs, atol=ATOL, rtol=0, msg=lambda m: f"hidden state {i}: {m}")
    logits = bertfn.mlm_head(model.params, out.last_hidden_state)
    torch.testing.assert_close(logits, ref.prediction_logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(bertfn.nsp_head(model.params, out.pooler_output), ref.seq_relationship_logits,
                               atol=ATOL, rtol=0)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_bert_model_parity_with_pooler(impl, tmp_path):
    hf = build_hf("BertModel", seed=5, hidden_size=48, num_attention_heads=3, num_hidden_layers=2)
    model = bertfn.load(save_checkpoint(hf, tmp_path), device=DEVICE)
    hf = on_device(hf)
    ids, mask, types = batch(hf.config.vocab_size)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    out = bertfn.encoder(model.params, ids, mask, types, output_hidden_states=True, impl=impl)
    for mine, theirs in zip(out.hidden_states, ref.hidden_states):
        torch.testing.assert_close(mine, theirs, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.pooler_output, ref.pooler_output, atol=ATOL, rtol=0)
    assert "cls.predictions.decoder.weight" not in model.state  # a bare BertModel has no MLM head


def test_masked_lm_parity_and_no_pooler(mlm_checkpoint):
    folder, hf = mlm_checkpoint
    model, hf = bertfn.load(folder, device=DEVICE), on_device(hf)
    ids, mask, types = batch(hf.config.vocab_size)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    out = bertfn.encoder(model.params, ids, mask, types)
    assert out.pooler_output is None  # BertForMaskedLM is built without a pooler
    torch.testing.assert_close(bertfn.mlm_head(model.params, out.last_hidden_state), ref, atol=ATOL, rtol=0)


def test_default_token_types_and_mask_match_transformers(mlm_checkpoint):
    folder, hf = mlm_checkpoint
    model, hf = bertfn.load(folder, device=DEVICE), on_device(hf)
    ids = torch.tensor([[5, 20, 21, 22, 7, 6]], device=DEVICE)
    with torch.no_grad():
        ref = hf(input_ids=ids).logits
    torch.testing.assert_close(bertfn.mlm_head(model.params, bertfn.encoder(model.params, ids).last_hidden_state),
                               ref, atol=ATOL, rtol=0)


def test_each_layer_step_by_step(pretraining_checkpoint):
    """Compose the public functions by hand, one layer at a time, and land on the HF hidden states."""
    folder, hf = pretraining_checkpoint
    model, hf = bertfn.load(folder, device=DEVICE), on_device(hf)
    p = model.params.scope("bert")
    ids, mask, types = batch(hf.config.vocab_size)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    x = bertfn.embeddings(p.scope("embeddings"), ids, types)
    torch.testing.assert_close(x, ref.hidden_states[0], atol=ATOL, rtol=0)
    additive = bertfn.extended_mask(mask, x.dtype)
    for i in range(hf.config.num_hidden_layers):
        x = bertfn.layer(p.scope(f"encoder.layer.{i}"), x, additive).hidden
        torch.testing.assert_close(x, ref.hidden_states[i + 1], atol=ATOL, rtol=0)


def test_padding_without_a_mask_warns_where_transformers_does(mlm_checkpoint, recwarn):
    """transformers warns when ids start or end with [PAD] and no attention_mask is given; so does bertfn."""
    folder, hf = mlm_checkpoint
    model, hf = bertfn.load(folder, device=DEVICE), on_device(hf)
    padded = torch.tensor([[5, 20, 21, 6, 0, 0]], device=DEVICE)
    with pytest.warns(UserWarning, match="no attention_mask"):
        out = bertfn.encoder(model.params, padded)
    with torch.no_grad():
        ref = hf(input_ids=padded, output_hidden_states=True).hidden_states[-1]  # transformers attends to the padding too
    torch.testing.assert_close(out.last_hidden_state, ref, atol=ATOL, rtol=0)
    bertfn.encoder(model.params, padded, torch.tensor([[1, 1, 1, 1, 0, 0]], device=DEVICE))  # a mask: no warning
    bertfn.encoder(model.params, padded[:, :4])  # no padding: no warning
    assert not [w for w in recwarn if "attention_mask" in str(w.message)]
