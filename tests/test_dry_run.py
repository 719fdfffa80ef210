"""point_names is what a pass records: the names read from the pass on the meta device (bertfn/model/dry_run.py) held
to what bertfn.trace records on a tiny random checkpoint of each member, and of each member's task heads.

The dry run's weights hold every part a config allows, so its list has ``pooler``, ``mlm.*`` (and ELECTRA's
``discriminator.*``) wherever the member has them; a checkpoint that lacks a part records its points nowhere, and every other point is recorded, in the list's
order. The quick run takes BERT and RoBERTa (tests/family_checkpoints.py's QUICK_KINDS), the slow run every member.
"""

from __future__ import annotations

import re
import warnings

import pytest

import bertfn
from bertfn.model.config import BertConfig
from bertfn.model.dry_run import task_points
from bertfn.model.members.deberta_attention import farthest, relative_positions
from bertfn.model import point_names as point_names_module
from bertfn.model.point_names import point_names
from family_checkpoints import (CORPUS, ESM_KINDS, HEAD_TASKS, MEMBERS, MODERN, PROTEINS, QUICK_KINDS, kind_params,
                                member_config, save_head, save_member)

KINDS = ("bert", *MEMBERS, "electra-discriminator", *MODERN)
"""Every kind of checkpoint tests/family_checkpoints.py writes (``save_member``), BERT's first."""

PARTS = {"pooler": ("bert.pooler.dense.weight", ("pooler",)),
         "MLM head": ("cls.predictions.decoder.weight", ("mlm.transform", "mlm.logits")),
         "contact head": ("bert.contact_head.regression.weight", ("contacts.maps", "contacts.apc", "contacts.logits")),
         "discriminator": ("discriminator_predictions.dense.weight", ("discriminator.transform", "discriminator.logits"))}
"""A part a checkpoint may lack: a weight that stands for it (by BERT's name) and the points only it records."""


def masked_text(kind: str, model: bertfn.Model) -> str:
    """A text of the member's alphabet with one mask token, so that the MLM head runs."""
    mask = model.tokenizer.mask_token
    return f"{PROTEINS[2][:20]}{mask}{PROTEINS[2][21:40]}" if kind in ESM_KINDS else f"The cat sat on the {mask}."


def lacking(model: bertfn.Model) -> set[str]:
    """The points of the parts (:data:`PARTS`) the model's weights lack."""
    return {n for key, names in PARTS.values() if key not in model.params for n in names}


def held_to_the_trace(names: list[str], recorded: list[str], model: bertfn.Model) -> None:
    """``recorded`` is ``names`` without the points of the parts the model lacks, in the same order."""
    assert recorded == [n for n in names if n not in lacking(model)]


@pytest.mark.needs_transformers  # the members' configs are transformers' own
@pytest.mark.parametrize("kind", KINDS)
def test_the_documented_table_names_every_point_of_every_member(kind):
    """Every point a member's pass records is named in bertfn.model.point_names' table or its notes (MPNet's
    position_bias and DeBERTa's c2p_scores and p2c_scores were in neither)."""
    listed = set()
    for entry in re.findall(r"``([\w.{}|]+)``", point_names_module.__doc__):  # a|b|c: alternatives of the last part
        head, _, last = entry.rpartition(".")
        listed |= {f"{head}.{alt}" if head else alt for alt in last.split("|")}
    config = BertConfig.from_dict(member_config(kind, 1000).to_dict())
    names = {re.sub(r"^layer\.\d+\.", "layer.{i}.", n) for n in point_names(config, optional=True)}
    assert names - listed == set()


@pytest.fixture(scope="module", params=kind_params(KINDS))
def member(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    save_member(request.param, folder)
    return request.param, bertfn.load(folder)


@pytest.mark.needs_transformers  # the checkpoints are transformers' own, saved (family_checkpoints.py)
def test_point_names_are_the_points_a_trace_records(member):
    """Every point of the dry run's list, and no other, in its order, with and without the optional points."""
    kind, model = member
    text = masked_text(kind, model)
    rec = bertfn.trace(text, model, head_outputs=True)
    held_to_the_trace(point_names(model.config, optional=True), rec.keys(), model)
    held_to_the_trace(point_names(model.config), bertfn.trace(text, model).keys(), model)
    assert any(n.endswith(".head_outputs") for n in rec.keys()) and "mlm.logits" in point_names(model.config)


CASES = [(kind, task) for kind, tasks in HEAD_TASKS.items() for task in tasks]
LABELS = {"sequence-classification": 3, "token-classification": 5, "question-answering": 2, "multiple-choice": 2}


@pytest.fixture(scope="module", params=[pytest.param(c, marks=() if c[0] in QUICK_KINDS else pytest.mark.slow)
                                        for c in CASES], ids=[f"{k}-{t}" for k, t in CASES])
def fine_tuned(request, tmp_path_factory):
    kind, task = request.param
    folder = tmp_path_factory.mktemp(f"{kind}-{task}")
    save_head(kind, task, folder, seed=1, id2label={i: f"L{i}" for i in range(LABELS[task])})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every key is read
        return kind, task, bertfn.load(folder)


@pytest.mark.needs_transformers
def test_a_task_heads_points_are_the_points_its_trace_records(fine_tuned):
    """The task head's points (``task_points``) are in point_names and in the trace, in the order the head passes them."""
    kind, task, model = fine_tuned
    text = (PROTEINS[0][:30] if kind in ESM_KINDS else CORPUS[3]) if task != "multiple-choice" else CORPUS[3]
    rec = bertfn.trace(text, model, pair=None if task == "token-classification" else CORPUS[1][:20])
    held_to_the_trace(point_names(model.config), rec.keys(), model)
    head = task_points(model.config, task)
    assert head and [n for n in rec.keys() if n in head] == list(head)


def test_point_names_are_kept_per_config_and_each_call_gets_its_own_list():
    config = BertConfig(vocab_size=50, hidden_size=24, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    names = point_names(config)
    names.append("mine")
    assert point_names(BertConfig.from_dict(config.to_dict())) == names[:-1]  # an equal config: the same run
    assert names[:5] == ["embeddings.word", "embeddings.token_type", "embeddings.position", "embeddings.sum",
                         "embeddings.output"] and names[-4:] == ["pooler", "mlm.transform", "mlm.logits", "mine"]


@pytest.mark.parametrize("buckets,longest", [(0, 64), (16, 64), (256, 512), (32, 8)])
def test_debertas_farthest_bucket_counted_on_the_host_is_the_tables_largest(buckets, longest):
    """positional_terms reads the rows the distances reach from S alone (a meta pass has no values to read)."""
    config = BertConfig.from_dict({"model_type": "deberta-v2", "position_buckets": buckets,
                                   "max_relative_positions": longest, "max_position_embeddings": 512})
    for S in (1, 2, 7, 8, 9, 40, 300):
        assert farthest(S, config) == int(relative_positions(S, config).abs().max())
