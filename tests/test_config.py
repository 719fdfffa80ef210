"""config.json -> BertConfig: transformers' defaults, clear errors for impossible models."""

from __future__ import annotations

import json

import pytest
from conftest import require_transformers

import bertfn


@pytest.mark.needs_transformers
def test_defaults_match_transformers():
    transformers = require_transformers()
    ours, theirs = bertfn.BertConfig(), transformers.BertConfig()
    for name, value in ours.to_dict().items():
        if name == "pruned_heads":
            assert theirs.pruned_heads == {}
        elif name in ("id2label", "label2id"):  # kept as config.json says them (none); named as transformers names them
            assert value is None and ours.labels == tuple(theirs.id2label.values()) == ("LABEL_0", "LABEL_1")
        elif name == "architectures":
            assert value == [] and theirs.architectures is None
        else:
            assert getattr(theirs, name) == value, name


@pytest.mark.needs_transformers
def test_from_file_reads_fields_and_ignores_unknown(tmp_path):
    transformers = require_transformers()
    cfg = transformers.BertConfig(hidden_size=48, num_attention_heads=3, layer_norm_eps=1e-7,
                                  id2label={0: "a", 1: "b", 2: "c"})
    cfg.save_pretrained(tmp_path)
    ours = bertfn.BertConfig.from_file(tmp_path / "config.json")
    assert (ours.hidden_size, ours.num_attention_heads, ours.head_dim, ours.layer_norm_eps, ours.num_labels) == \
        (48, 3, 16, 1e-7, 3)


@pytest.mark.parametrize("fields, message", [
    (dict(hidden_size=50, num_attention_heads=3), "divisible by num_attention_heads"),
    (dict(hidden_act="gelu_42"), "hidden_act 'gelu_42'"),
    (dict(position_embedding_type="rotary"), "position_embedding_type 'rotary'"),
    (dict(num_hidden_layers=0), "num_hidden_layers must be a positive integer"),
    (dict(add_cross_attention=True), "needs is_decoder"),
    (dict(vocab_size=10, pad_token_id=10), "pad_token_id must be a row"),
    (dict(hidden_dropout_prob=1.5), r"hidden_dropout_prob is a dropout probability, which lies in \[0, 1\]"),
    (dict(classifier_dropout=-0.1), "classifier_dropout is a dropout probability"),
    (dict(model_type="deberta-v2", pooler_dropout="0.1"), "pooler_dropout is a dropout probability"),
])
def test_impossible_configs(fields, message):
    with pytest.raises(bertfn.ConfigError, match=message):
        bertfn.BertConfig.from_dict(fields)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(bertfn.ConfigError, match="no config.json"):
        bertfn.BertConfig.from_file(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(bertfn.ConfigError, match="not valid JSON"):
        bertfn.BertConfig.from_file(tmp_path / "config.json")
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": "big"}))
    with pytest.raises(bertfn.ConfigError, match="hidden_size"):
        bertfn.BertConfig.from_file(tmp_path / "config.json")
