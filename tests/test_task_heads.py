"""Task heads over HF keys: each transformers ``BertFor*`` checkpoint, saved with ``save_pretrained`` and
read back with ``bertfn.load``, gives the same logits in bertfn (fp32, tolerance 1e-5).

Padded positions are compared too: both libraries compute them the same way.
"""

from __future__ import annotations

import re

import pytest
import torch
from conftest import build_hf, save_checkpoint

import bertfn

pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here

TOL = dict(atol=1e-5, rtol=1e-5)


def batch(vocab: int, B: int = 3, S: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (B, S), generator=g)
    types = torch.randint(0, 2, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 2:] = 0
    return ids, mask, types


def causal_lm(params, ids, mask, types):
    return bertfn.mlm_head(params, bertfn.encoder(params, ids, mask, types).last_hidden_state)


def sequence_classification(params, ids, mask, types):
    return bertfn.sequence_classification(params, bertfn.encoder(params, ids, mask, types).pooler_output)


def token_classification(params, ids, mask, types):
    return bertfn.token_classification(params, bertfn.encoder(params, ids, mask, types).last_hidden_state)


def question_answering(params, ids, mask, types):
    start, end = bertfn.question_answering(params, bertfn.encoder(params, ids, mask, types).last_hidden_state)
    return torch.stack([start, end])


def next_sentence(params, ids, mask, types):
    return bertfn.nsp_head(params, bertfn.encoder(params, ids, mask, types).pooler_output)


HEADS = {
    # name: (transformers class, config overrides, bertfn logits, transformers logits)
    "causal-lm": ("BertLMHeadModel", dict(is_decoder=True), causal_lm, lambda r: r.logits),
    "causal-lm-relative": ("BertLMHeadModel", dict(is_decoder=True, position_embedding_type="relative_key_query"),
                           causal_lm, lambda r: r.logits),
    "sequence-classification": ("BertForSequenceClassification", dict(num_labels=3), sequence_classification,
                                lambda r: r.logits),
    "regression": ("BertForSequenceClassification", dict(num_labels=1), sequence_classification, lambda r: r.logits),
    "token-classification": ("BertForTokenClassification", dict(num_labels=5, position_embedding_type="relative_key"),
                             token_classification, lambda r: r.logits),
    "question-answering": ("BertForQuestionAnswering", {}, question_answering,
                           lambda r: torch.stack([r.start_logits, r.end_logits])),
    "next-sentence": ("BertForNextSentencePrediction", {}, next_sentence, lambda r: r.logits),
}


@pytest.mark.parametrize("name", HEADS)
def test_head_logits_equal_transformers(name, tmp_path):
    cls, overrides, ours, theirs = HEADS[name]
    hf = build_hf(cls, seed=len(name), **overrides)
    model = bertfn.load(save_checkpoint(hf, tmp_path / name))
    ids, mask, types = batch(hf.config.vocab_size)
    with torch.no_grad():
        expected = theirs(hf(ids, mask, types, **({"use_cache": False} if overrides.get("is_decoder") else {})))
        got = ours(model.params, ids, mask, types)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, **TOL)


def test_multiple_choice_logits_equal_transformers(tmp_path):
    hf = build_hf("BertForMultipleChoice", seed=4)
    model = bertfn.load(save_checkpoint(hf, tmp_path / "mc"))
    B, C, S = 2, 3, 6
    ids, mask, types = (t.view(B, C, S) for t in batch(hf.config.vocab_size, B * C, S))
    with torch.no_grad():
        expected = hf(ids, mask, types).logits  # (B, C)
        # every (text, choice) pair is one row of the encoder: (B, C, S) -> (B*C, S)
        pooled = bertfn.encoder(model.params, ids.view(B * C, S), mask.view(B * C, S),
                                types.view(B * C, S)).pooler_output  # (B*C, H)
        got = bertfn.multiple_choice(model.params, pooled, num_choices=C)
    assert got.shape == (B, C)
    torch.testing.assert_close(got, expected, **TOL)


def test_a_head_the_checkpoint_lacks_says_so(tmp_path):
    hf = build_hf("BertForQuestionAnswering", seed=1)
    model = bertfn.load(save_checkpoint(hf, tmp_path / "qa"))
    h = torch.randn(1, 4, hf.config.hidden_size)
    with pytest.raises(bertfn.CheckpointError, match="classifier.weight"):
        bertfn.token_classification(model.params, h)


def test_run_head_says_which_shapes_it_takes(tmp_path):
    """Pooled states (B, H) or a mask of another shape given to run_head: an InputError naming both shapes, not an
    error of the matrix product inside."""
    from bertfn.model.task_heads import run_head

    hf = build_hf("BertForSequenceClassification", seed=2)
    params = bertfn.load(save_checkpoint(hf, tmp_path / "sc")).params
    H = hf.config.hidden_size
    h, mask = torch.randn(2, 4, H), torch.ones(2, 4, dtype=torch.long)
    assert run_head(params, "sequence-classification", h, mask).shape == (2, hf.config.num_labels)
    for bad_h, bad_mask, got in [(h[:, 0], mask, f"got h (2, {H}) and mask (2, 4)"),
                                 (h, mask[:, :3], f"got h (2, 4, {H}) and mask (2, 3)"),
                                 (h[..., :-1], mask, f"got h (2, 4, {H - 1})"), (h, None, "mask NoneType")]:
        with pytest.raises(bertfn.InputError, match=rf"h \(batch, seq, {H}\) and their mask.*{re.escape(got)}"):
            run_head(params, "sequence-classification", bad_h, bad_mask)
