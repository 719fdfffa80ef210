"""The headline example on the real bert-base-uncased, when a local copy is given.

No pretrained MLM checkpoint can be downloaded in CI, so this runs only with
BERTFN_BERT_BASE=/path/to/bert-base-uncased (a folder with config.json, weights and vocab).
"""

from __future__ import annotations

import os

import pytest

import bertfn

FOLDER = os.environ.get("BERTFN_BERT_BASE")


@pytest.mark.skipif(not FOLDER, reason="set BERTFN_BERT_BASE to a local bert-base-uncased folder to run this check")
def test_when_in_rome():
    model = bertfn.load(FOLDER)
    answers = bertfn.fill_mask("When in Rome, do as the [MASK] do.", model)
    assert answers[0]["token_str"] == "romans"
    assert answers[0]["sequence"] == "when in rome, do as the romans do."
