"""The tokenizer against transformers' BertTokenizerFast on the test vocabulary."""

from __future__ import annotations

import pytest
import torch

import bertfn

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here

TEXTS = ["When in Rome, do as the [MASK] do.", "HELLO World!!", "the dogs walked", "unknownword café", ""]


def test_matches_transformers(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    tok = bertfn.load(folder).tokenizer
    theirs = transformers.AutoTokenizer.from_pretrained(str(folder))
    mine, ref = tok(TEXTS), theirs(TEXTS, padding=True, return_tensors="pt", return_offsets_mapping=True)
    assert torch.equal(mine.input_ids, ref["input_ids"])
    assert torch.equal(mine.attention_mask, ref["attention_mask"])
    assert [list(map(tuple, o)) for o in ref["offset_mapping"].tolist()] == [list(map(tuple, o)) for o in mine.offsets]
    pairs = tok(["first part", "a"], ["second part here", "b"])
    ref = theirs(["first part", "a"], ["second part here", "b"], padding=True, return_tensors="pt")
    assert torch.equal(pairs.input_ids, ref["input_ids"]) and torch.equal(pairs.token_type_ids, ref["token_type_ids"])


def test_special_tokens_and_decode(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    tok = bertfn.load(folder).tokenizer
    enc = tok("the [MASK] sat")
    assert enc.tokens[0] == ["[CLS]", "the", "[MASK]", "sat", "[SEP]"]
    assert enc.input_ids[0, 2].item() == tok.mask_token_id
    assert tok.decode(enc.input_ids[0].tolist(), skip_special_tokens=True) == "the sat"
    assert tok.decode(enc.input_ids[0].tolist()) == "[CLS] the [MASK] sat [SEP]"
