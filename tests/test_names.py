"""Members by concern (issue 56): the forward pass's record (``Family``) apart from the checkpoint's names
(bertfn/checkpoint/names/) and from the heads on parts (bertfn/interventions/head_parts.py).

``Family`` keeps what the forward pass reads, at most 12 fields; model/ imports neither the checkpoint room nor the
interventions, and reads the names through the registry the checkpoint room fills (bertfn/model/naming.py); one
renaming function reads every member's table, ALBERT's shared layers and DeBERTa's two MLM heads included.
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import weakref
from pathlib import Path

import pytest

import bertfn
from bertfn.checkpoint.names.record import Names, renamed
from bertfn.checkpoint.names import albert, deberta
from bertfn.errors import CheckpointError
from bertfn.interventions.head_parts import head_on_parts
from bertfn.model.config import BertConfig
from bertfn.model.family import FAMILIES, Family
from bertfn.model.naming import NAMES, names_of
from bertfn.model.task_heads import TASKS

MODEL = Path(bertfn.__file__).parent / "model"
SIZES = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64)


def test_family_keeps_at_most_twelve_fields():
    assert len(dataclasses.fields(Family)) <= 12, [f.name for f in dataclasses.fields(Family)]


def imported_rooms(path: Path) -> set[str]:
    """The bertfn rooms a module of model/ imports from, by its import statements (relative ones resolved)."""
    package = ["bertfn", *path.parent.relative_to(MODEL.parent).parts]
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            names = [".".join(base + ([node.module] if node.module else []) + ([a.name] if not node.module else []))
                     for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        rooms |= {n.split(".")[1] for n in names if n.startswith("bertfn.") and n.count(".") >= 1}
    return rooms


def test_model_imports_neither_the_checkpoint_room_nor_the_interventions():
    modules = sorted(MODEL.rglob("*.py"))
    assert len(modules) > 20
    found = {p.relative_to(MODEL).as_posix(): imported_rooms(p) & {"checkpoint", "interventions"} for p in modules}
    assert not {k: v for k, v in found.items() if v}
    assert imported_rooms(MODEL / "members" / "roberta.py") == {"model"}  # the scan sees relative imports


def test_every_member_has_checkpoint_names():
    assert set(FAMILIES) <= set(NAMES)
    assert all(isinstance(n, Names) for n in NAMES.values())
    assert NAMES["xlm-roberta"] is NAMES["camembert"] is NAMES["roberta"]


def test_a_model_type_without_names_is_a_checkpoint_error(monkeypatch):
    config = dataclasses.replace(BertConfig(**SIZES), model_type="bert-like")
    monkeypatch.setitem(FAMILIES, "bert-like", Family("BERT-like", "bert-like"))
    with pytest.raises(CheckpointError, match=r"no checkpoint names for model_type 'bert-like'.*register"):
        names_of(config)
    with pytest.raises(CheckpointError, match="bert-like"):
        bertfn.Params({}, config)


def test_albert_shares_each_group_by_one_table():
    config = BertConfig.from_dict({"model_type": "albert", "embedding_size": 16, "num_hidden_groups": 2, **SIZES})
    table = albert.table(config)
    group = "albert.encoder.albert_layer_groups.{}.albert_layers.0."
    for layer, g in ((0, 0), (1, 0), (2, 1), (3, 1)):
        bert = f"bert.encoder.layer.{layer}."
        assert renamed(bert + "attention.self.key.weight", table) == group.format(g) + "attention.key.weight"
        assert renamed(bert + "attention.output.LayerNorm.bias", table) == group.format(g) + "attention.LayerNorm.bias"
        assert renamed(bert + "intermediate.dense.weight", table) == group.format(g) + "ffn.weight"
        assert renamed(bert + "output.dense.weight", table) == group.format(g) + "ffn_output.weight"
        assert renamed(bert + "output.LayerNorm.weight", table) == group.format(g) + "full_layer_layer_norm.weight"
        assert renamed(bert + "other.weight", table) == group.format(g) + "other.weight"
    assert renamed("bert.encoder.layer.1.attention.self.query.weight", table) != \
        renamed("bert.encoder.layer.2.attention.self.query.weight", table)
    assert renamed("bert.embeddings.project.weight", table) == "albert.encoder.embedding_hidden_mapping_in.weight"
    assert renamed("bert.pooler.dense.bias", table) == "albert.pooler.bias"
    assert renamed("cls.predictions.transform.dense.weight", table) == "predictions.dense.weight"
    assert renamed("cls.seq_relationship.weight", table) == "sop_classifier.classifier.weight"
    one = BertConfig.from_dict({"model_type": "albert", "embedding_size": 16, **SIZES})
    keys = bertfn.Params({}, one)
    assert {keys.layer(i).key("attention.self.query.weight") for i in range(4)} == \
        {group.format(0) + "attention.query.weight"}


@pytest.mark.parametrize("legacy", [True, False])
def test_deberta_names_its_mlm_head_by_its_config(legacy):
    config = BertConfig.from_dict({"model_type": "deberta-v2", "legacy": legacy, **SIZES})
    table = deberta.table(config)
    assert renamed("bert.encoder.layer.3.attention.self.value.bias", table) == \
        "deberta.encoder.layer.3.attention.self.value_proj.bias"
    assert renamed("bert.encoder.rel_embeddings.weight", table) == "deberta.encoder.rel_embeddings.weight"
    head = {"cls.predictions.transform.dense.weight": "lm_predictions.lm_head.dense.weight",
            "cls.predictions.transform.LayerNorm.bias": "lm_predictions.lm_head.LayerNorm.bias",
            "cls.predictions.decoder.weight": "deberta.embeddings.word_embeddings.weight",
            "cls.predictions.bias": "lm_predictions.lm_head.bias"}
    for bert, modern in head.items():
        assert renamed(bert, table) == (bert if legacy else modern)
    assert names_of(config).renamer(config)("cls.predictions.bias") == renamed("cls.predictions.bias", table)


def test_every_head_but_multiple_choice_runs_on_parts():
    for family in FAMILIES.values():
        config = BertConfig.from_dict({"model_type": family.model_type})
        for task in names_of(config).tasks or TASKS:
            assert (head_on_parts(config, task) is None) == (task == "multiple-choice"), (family.name, task)


def test_a_renamer_goes_with_its_config():
    """A renaming function is kept per config while the config lives, and no longer: a long-lived process loading
    model after model (each load a config of its own) keeps none of theirs (it kept each config and its
    few hundred names, about 47 kB per 12-layer RoBERTa, for ever)."""
    config = BertConfig.from_dict({"model_type": "roberta", **SIZES})
    rename = names_of(config).renamer(config)
    assert names_of(config).renamer(config) is rename  # remembered while the config lives
    assert rename("bert.encoder.layer.1.attention.self.query.weight") == \
        "roberta.encoder.layer.1.attention.self.query.weight"
    gone = weakref.ref(config)
    del config, rename
    gc.collect()
    assert gone() is None
