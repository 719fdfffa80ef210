"""RoBERTa's checkpoint names (and XLM-RoBERTa's and CamemBERT's, the same): ``roberta.*`` and the MLM head
``lm_head.dense``, ``lm_head.layer_norm``, ``lm_head.decoder`` (the word embeddings, stored once), ``lm_head.bias``;
inside the layers, BERT's own names.
"""

from __future__ import annotations

from ...model.naming import register
from .record import Names, normalizer

KEYS = (
    (r"bert\.", "roberta."),
    (r"cls\.predictions\.transform\.dense\.", "lm_head.dense."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "lm_head.layer_norm."),
    (r"cls\.predictions\.decoder\.", "lm_head.decoder."),
    (r"cls\.predictions\.bias", "lm_head.bias"),
)
"""BERT's names -> RoBERTa's, first match wins (:func:`~bertfn.checkpoint.names.record.renamed`); the layers' own
names are BERT's."""

ROBERTA = register(Names(
    prefix="roberta.", table=KEYS,
    normalize=normalizer("roberta.", ("embeddings.", "encoder.", "pooler."),
                         (("lm_head.decoder.weight", "roberta.embeddings.word_embeddings.weight"),
                          ("lm_head.decoder.bias", "lm_head.bias"))),
), "roberta", "xlm-roberta", "camembert")
"""RoBERTa's names, XLM-RoBERTa's and CamemBERT's (their checkpoints hold ``roberta.*`` and ``lm_head.*`` too)."""
