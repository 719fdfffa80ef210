"""config.json -> BertConfig: transformers' defaults, clear errors for impossible models."""

from __future__ import annotations

import json

import pytest
import torch
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


@pytest.mark.needs_transformers
def test_params_and_encoder_take_a_config_dict_or_transformers_config():
    """bertfn.Params(state, config.to_dict()) raised AttributeError; a transformers BertConfig was refused as 'got
    BertConfig', the same name as the one asked for."""
    transformers = require_transformers()
    from conftest import TINY, random_model

    model = random_model(bertfn.BertConfig(**TINY), seed=6)
    ids = torch.tensor([[2, 7, 8, 3]])
    ref = bertfn.encoder(model, ids).last_hidden_state
    for config in (model.config.to_dict(), transformers.BertConfig(**model.config.to_dict())):
        params = bertfn.Params(dict(model.state), config)
        assert isinstance(params.config, bertfn.BertConfig)
        torch.testing.assert_close(bertfn.encoder(params, ids).last_hidden_state, ref)
        torch.testing.assert_close(bertfn.encoder(dict(model.state), ids, config=config).last_hidden_state, ref)
