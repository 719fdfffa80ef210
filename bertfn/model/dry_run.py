"""The trace points of a config, found by running its pass on the meta device: the names come from the code.

:func:`~bertfn.model.point_names.point_names` lists every point a pass of a model can pass through, in order. No
list is written by hand: :func:`dry_run` runs the steps :func:`bertfn.trace` runs (the encoder, the MLM head, the
task head the config's ``architectures`` names, a member's own head: ESM-2's contacts, ELECTRA's discriminator), in
their order, into a :class:`~bertfn.model.recorder.Trace`, and the names it recorded are the list. The weights are
the config's shapes (the member's :meth:`~bertfn.model.naming.CheckpointNames.named_shapes` with every optional part, the task head's
:attr:`~bertfn.model.family.TaskHead.shapes`) as tensors on PyTorch's ``meta`` device, which have a shape and a dtype
but no memory and no values: the pass computes nothing, it only follows the code. Every member runs there as it
is (the input checks skip the values a meta tensor has not; DeBERTa's farthest bucket is counted on the host).

A run costs a few milliseconds per layer (the first of a process about a second more: PyTorch loads its meta
kernels); its names are kept per config (its ``config.json``), so each config runs once per process. A pass runs it
only where it checks edits by name; a pass without edits, traced or not, never does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

import torch

from .config import BertConfig
from .encoder import encoder
from .family import family_of
from .heads import mlm_head
from .naming import names_of
from .params import Params
from .point_names import DRY_RUN
from .recorder import OPTIONAL_POINTS, Trace
from .task_heads import TASKS, named_task, run_head, task_head

Tensor = torch.Tensor

TOKENS = 3
"""The dry run's tokens per text: ``[CLS]``, one token, ``[SEP]`` (ESM-2's contact head reads the residues between
its ``<cls>`` and ``<eos>``)."""


class EveryPart(Mapping):
    """The weights a dry run asks about: every optional part counts as there (pooler, MLM head, a member's own
    heads), so that the table (:meth:`~bertfn.model.naming.CheckpointNames.named_shapes`) holds each part the config allows.

    A mapping whose ``in`` is always true and that holds no tensor (``get`` gives the default): a task head's number
    of labels is then the config's.
    """

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> Tensor:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def meta_params(config: BertConfig, task: str | None) -> Params:
    """Every weight a model of ``config`` may read, as meta tensors under the member's checkpoint keys.

    Args:
        config: the model's config.
        task: the task head to add (one of :data:`~bertfn.model.task_heads.TASKS`), or None.

    Returns:
        The root :class:`~bertfn.model.params.Params` over ``{key: empty tensor of its shape on "meta"}``.
    """
    names = names_of(config)
    table = names.named_shapes(config, EveryPart())
    if task is not None:
        table.update(task_head(config, task).shapes(config))
    rename = names.renamer(config)
    return Params({(rename(k) if rename else k): torch.empty(shape, device="meta") for k, shape in table.items()},
                  config)


def tokens(config: BertConfig) -> int:
    """The dry run's sequence length: :data:`TOKENS`, or fewer where a chunked feed-forward's slice is shorter (a
    pass whose slice holds every token records ``ffn.*``, not ``ffn.chunk.{n}.*``).

    Args:
        config: the model's config (``chunk_size_feed_forward``).
    """
    chunk = config.chunk_size_feed_forward
    return min(TOKENS, chunk) if chunk > 0 else TOKENS


def dry_run(config: BertConfig) -> tuple[str, ...]:
    """The points a full pass of a model of ``config`` records, the optional ones asked for
    (:data:`~bertfn.model.recorder.OPTIONAL_POINTS`: ``layer.{i}.attention.head_outputs``), in order, found by running
    it on the meta device.

    What :func:`bertfn.inspect.batch.record_pass` runs, in its order: the encoder (its pooler where the member has
    one; a decoder's cross-attention on encoder states), the MLM head, the task head ``config.architectures`` names
    (where the member has that task), the member's own head (ESM-2's contacts, not where heads are pruned, as its
    weights read every head's map; ELECTRA's discriminator). The weights hold every part the config allows (:class:`EveryPart`),
    so ``pooler`` and ``mlm.*`` are listed whatever a checkpoint holds.

    Args:
        config: the model's config.

    Returns:
        The full names, in the order the pass records them (a point recorded twice, as a classifier's ``pooler``,
        where it first was).
    """
    family = family_of(config)
    task = named_task(config)
    task = task if task in TASKS and task in (names_of(config).tasks or TASKS) else None
    params = meta_params(config, task)
    record = Trace(optional=[f"*.{n}" for n in OPTIONAL_POINTS])
    S = tokens(config)
    ids = torch.zeros((1, S), dtype=torch.long, device="meta")  # (1, S)
    mask = torch.ones((1, S), dtype=torch.long, device="meta")  # (1, S)
    states = torch.empty((1, S, config.hidden_size), device="meta") if config.add_cross_attention else None
    own = family.own_head
    with torch.no_grad():
        out = encoder(params, ids, mask, impl="eager", encoder_hidden_states=states, trace=record,
                      output_attentions=own is not None)
        h = out.last_hidden_state  # (1, S, H)
        if "cls.predictions.decoder.weight" in params:
            mlm_head(params, h[0], trace=record)  # (S, V)
        if task is not None:
            run_head(params, task, h, mask, trace=record)
        if own is not None:
            own(params, ids, out, mask, record)
    return tuple(record.store)


def task_points(config: BertConfig, task: str) -> tuple[str, ...]:
    """The points ``task``'s head records in the member of ``config``, in order, found by running it alone on the meta
    device (``classifier.input``, ..., ``classifier.logits``; BERT's classifier: ``pooler``, ``classifier.logits``).

    Args:
        config: the model's config.
        task: one of :data:`~bertfn.model.task_heads.TASKS` the member has a head for.
    """
    key = (config_key(config), task)
    if key not in _task_points:
        record = Trace()
        h = torch.empty((1, tokens(config), config.hidden_size), device="meta")  # (1, S, H)
        with torch.no_grad():
            run_head(meta_params(config, task), task, h, torch.ones(h.shape[:2], dtype=torch.long, device="meta"),
                     trace=record)
        _task_points[key] = tuple(record.store)
    return _task_points[key]


def config_key(config: BertConfig) -> str:
    """``config`` as the key of its dry run: its ``config.json``, keys sorted (configs hold dicts, so no hash).

    Args:
        config: the model's config.
    """
    return json.dumps(config.to_dict(), sort_keys=True, default=str)


_points: dict[str, tuple[str, ...]] = {}
_task_points: dict[tuple[str, str], tuple[str, ...]] = {}


def recorded_points(config: BertConfig, optional: bool) -> tuple[str, ...]:
    """:func:`dry_run`'s names for ``config``, run once per config (the optional points asked for) and kept
    (:data:`~bertfn.model.point_names.DRY_RUN`, read by :func:`~bertfn.model.point_names.point_names`).

    Args:
        config: the model's config.
        optional: list the optional points too; else they are left out (a pass that does not ask for them passes
            the others alike).
    """
    key = config_key(config)
    if key not in _points:  # two threads may both run it: the same names
        _points[key] = dry_run(config)
    names = _points[key]
    return names if optional else tuple(n for n in names if n.rpartition(".")[2] not in OPTIONAL_POINTS)


DRY_RUN.append(recorded_points)
