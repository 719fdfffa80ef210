"""CamemBERT is RoBERTa under its own model_type: its checkpoints (``roberta.*``, ``lm_head.*``) read through RoBERTa's
functions, and its tokenizer keeps camembert-base's layout (fairseq's ``<s>NOTUSED`` 0, ``<pad>`` 1, ``</s>NOTUSED`` 2,
``<unk>`` 3, ``<unk>NOTUSED`` 4, ``<s>`` 5, ``</s>`` 6, ..., ``<mask>`` last).

Parity with transformers (every layer, the logits, both paddings), fill-mask against the pipeline and the task heads run
in the tests over every member (tests/test_family*.py, test_classify.py, ...: ``camembert`` in tests/family_checkpoints.py).
"""

from __future__ import annotations

import pytest
import torch
from family_checkpoints import member_tokenizer, save_member

import bertfn
from bertfn.checkpoint.names.roberta import ROBERTA as ROBERTA_NAMES
from bertfn.model.members.roberta import ROBERTA, CamembertConfig
from bertfn.model.naming import names_of

pytestmark = pytest.mark.needs_transformers


def test_camembert_reads_as_roberta_with_camembert_bases_ids(tmp_path):
    hf = save_member("camembert", tmp_path)
    model = bertfn.load(tmp_path)
    assert isinstance(model.config, CamembertConfig) and model.family.name == "CamemBERT"
    assert names_of(model.config) is ROBERTA_NAMES and model.family.position_ids is ROBERTA.position_ids
    assert all(k.startswith(("roberta.", "lm_head.")) for k in model.state)
    tok, theirs = model.tokenizer, member_tokenizer("camembert")
    assert [tok.id_to_token(i) for i in range(7)] == ["<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED",
                                                      "<s>", "</s>"]
    assert (tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.unk_token_id) == (5, 6, 1, 3)
    assert tok.mask_token == "<mask>" and tok.mask_token_id == tok.vocab_size - 1 == theirs.mask_token_id
    assert (model.config.bos_token_id, model.config.eos_token_id) == (5, 6)
    text = "The cat sat on the <mask>."
    enc = tok([text])
    assert enc.input_ids[0].tolist() == theirs(text)["input_ids"]
    with torch.no_grad():
        ours = bertfn.mlm_head(model, bertfn.encoder(model, enc.input_ids, enc.attention_mask).last_hidden_state)
        torch.testing.assert_close(ours, hf(input_ids=enc.input_ids, attention_mask=enc.attention_mask).logits,
                                   atol=1e-5, rtol=0)
