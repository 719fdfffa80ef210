"""The named points of a forward pass, where what each step computes can be read and changed.

Every model function takes ``trace=`` and passes each tensor it computes through it under a short
name, ``scores = trace("scores", q @ k.T)``: the call returns the tensor the pass goes on with. By
default that is :data:`NO_TRACE`, which hands every tensor back as it came and keeps nothing. A
:class:`Trace` puts the names in one dotted namespace (``layer.0.attention.probs``) and

* keeps what passed each point (``trace.store``), so a notebook shows exactly what the model computed
  (:func:`bertfn.trace` records a whole pass this way; its module, bertfn/inspect/trace.py, lists every name);
* replaces it where an *edit* is given for that name (``Trace(edits={"layer.3.attention.probs": f})``):
  ``f(tensor, point)`` returns the tensor to use instead, so one head, one neuron or one position can
  be changed inside the pass. What is kept is what the pass used, the edited tensor.

The points are the same for reading and writing; :func:`point_names` lists them for a config.
Edit names may use ``*`` for any run of characters (``layer.*.attention.context``).
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

import torch

from ..errors import InputError
from .config import BertConfig
from .family import family_of


class Point(NamedTuple):
    """Where an edit runs: the point's full name and its layer (None outside the layers).

    Attributes:
        name: the full name, e.g. "layer.3.attention.probs".
        layer: its layer, 3 there; None outside the layers.
    """

    name: str  # e.g. "layer.3.attention.probs"
    layer: int | None  # 3


Edit = Callable[[torch.Tensor, Point], torch.Tensor]
"""``edit(tensor, point) -> tensor``: the tensor to use instead of the one computed at ``point``, same shape."""


class Trace:
    """Named points of a pass, read and edited by name.

    ``trace("name", x)`` keeps ``x`` (if ``keep``), applies the edit for that name (if any) and returns
    the tensor to go on with; ``trace.scope("layer.0")`` names below ``layer.0.``. ``trace.store`` maps
    full names to tensors, in order.

    Args:
        store: the dict the tensors are kept in (a new one by default; scopes share their parent's).
        prefix: the names' common start, e.g. ``layer.0.`` (what :meth:`scope` sets).
        edits: ``{name or pattern: edit}`` (see :data:`Edit`).
        keep: whether to store the tensors (False for a pass that only edits).

    Raises:
        InputError: an edit that is not a function, or a name that is not a string.
    """

    def __init__(self, store: dict[str, torch.Tensor] | None = None, prefix: str = "", *,
                 edits: Mapping[str, Edit] | None = None, keep: bool = True):
        self.store = {} if store is None else store
        self.prefix = prefix
        self.edits = dict(edits or {})
        self.keep = keep
        for pattern, edit in self.edits.items():
            if not isinstance(pattern, str) or not callable(edit):
                raise InputError(f"edits map point names to functions edit(tensor, point) -> tensor, got "
                                 f"{pattern!r}: {type(edit).__name__}")

    def scope(self, name: str) -> Trace:
        return Trace(self.store, f"{self.prefix}{name}.", edits=self.edits, keep=self.keep)

    def __call__(self, name: str, x: torch.Tensor) -> torch.Tensor:
        full = self.prefix + name
        for pattern, edit in self.edits.items():
            if fnmatch.fnmatchcase(full, pattern):
                x = edited(edit, x, Point(full, layer_of(full)))
        if self.keep:
            self.store[full] = x
        return x

    def edits_any(self, names: Iterable[str]) -> bool:
        """Whether an edit applies to one of ``names`` (relative to this scope).

        The attention path asks, since only the eager path forms the scores and probabilities
        (:data:`WEIGHT_POINTS`).

        Args:
            names: point names relative to this scope.
        """
        return any(fnmatch.fnmatchcase(self.prefix + n, pattern) for n in names for pattern in self.edits)

    def __bool__(self) -> bool:
        return True


class _NoTrace(Trace):
    """The default: every tensor passes unchanged and nothing is kept; costs one method call per point."""

    def __init__(self) -> None:
        super().__init__(keep=False)

    def scope(self, name: str) -> Trace:
        return self

    def __call__(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return x

    def edits_any(self, names: Iterable[str]) -> bool:
        return False

    def __bool__(self) -> bool:
        return False


NO_TRACE: Trace = _NoTrace()


def layer_of(name: str) -> int | None:
    """The layer a point belongs to: 3 for ``layer.3.attention.probs``, None for ``embeddings.sum``.

    Args:
        name: a point's full name.
    """
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "layer" and len(parts) > 1 and parts[1].isdigit() else None


def edited(edit: Edit, x: torch.Tensor, point: Point) -> torch.Tensor:
    """``edit(x, point)``, checked: it must return a tensor of ``x``'s shape.

    Args:
        edit: the edit.
        x: the tensor computed at ``point``.
        point: where the pass is.

    Returns:
        The edited tensor, in ``x``'s dtype.

    Raises:
        InputError: the edit returned something else than a tensor of ``x``'s shape.
    """
    y = edit(x, point)
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise InputError(f"the edit at {point.name} must return a tensor of the shape it was given, "
                         f"{tuple(x.shape)}, got {got}")
    return y.to(x.dtype)


ATTENTION_POINTS = ("query", "key", "value", "q", "k", "v", "relative_scores", "scores", "scaled_scores",
                    "masked_scores", "probs", "context", "merged", "dense", "output")
"""The points of one attention block, in the order it computes them (bertfn/model/attention.py)."""

WEIGHT_POINTS = ("scores", "scaled_scores", "masked_scores", "probs")
"""The attention points only the eager path forms (the fused SDPA kernel never does)."""

FFN_POINTS = ("intermediate", "dense", "output")


def point_names(config: BertConfig) -> list[str]:
    """Every point a full pass of a model with ``config`` can pass through, in order (the MLM head's last).

    ``relative_scores`` only with relative positions, ``embeddings.position`` only with absolute
    ones, ``crossattention.*`` only for decoders with cross-attention, ``pooler`` and ``mlm.*`` only
    when the model has those parts (listed here whatever the weights hold).

    Args:
        config: the model's config.
    """
    own = family_of(config).embedding_points  # a family member's own embeddings step names its own points
    if own is not None:
        names = [f"embeddings.{n}" for n in own(config)]
    else:
        names = ["embeddings.word", "embeddings.token_type"]
        if config.position_embedding_type == "absolute":
            names.append("embeddings.position")
        names += ["embeddings.sum", "embeddings.output"]
    blocks = ["attention"] + (["crossattention"] if config.add_cross_attention else [])
    for i in range(config.num_hidden_layers):
        for block in blocks:
            for n in ATTENTION_POINTS:
                if n != "relative_scores" or (block == "attention" and config.position_embedding_type != "absolute"):
                    names.append(f"layer.{i}.{block}.{n}")
        names += [f"layer.{i}.ffn.{n}" for n in FFN_POINTS] + [f"layer.{i}.output"]
    return names + ["pooler", "mlm.transform", "mlm.logits"]


def layer_input(config: BertConfig) -> str:
    """The point whose tensor is layer 0's input (B, S, H): the embeddings' last.

    ``embeddings.output`` in BERT, ``embeddings.projected`` in a member whose embeddings are narrower
    than H (ELECTRA, ALBERT).

    Args:
        config: the model's config.
    """
    return [n for n in point_names(config) if n.startswith("embeddings.")][-1]


def check_edits(edits: Mapping[str, Edit] | None, config: BertConfig) -> dict[str, Edit]:
    """``edits`` as a dict, each name (or pattern) checked against :func:`point_names`.

    Args:
        edits: ``{name or pattern: edit}``, or None.
        config: the model's config.

    Raises:
        InputError: a name that matches no point, naming the close valid names.
    """
    if edits is None:
        return {}
    if not isinstance(edits, Mapping):
        raise InputError(f"edits must be a dict {{point name: edit(tensor, point) -> tensor}}, got {type(edits).__name__}")
    valid = point_names(config)
    for pattern in edits:
        if not isinstance(pattern, str) or not any(fnmatch.fnmatchcase(n, pattern) for n in valid):
            close = difflib.get_close_matches(str(pattern), valid, n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}?" if close else \
                "the points are embeddings.*, layer.{i}.attention.{query,...,probs,context,...}, layer.{i}.ffn.*, " \
                "layer.{i}.output, pooler, mlm.transform, mlm.logits (bertfn.model.recorder.point_names)"
            raise InputError(f"no point of this model is named {pattern!r} (layers 0-{config.num_hidden_layers - 1}); {hint}")
    return dict(edits)


def with_edits(trace: Trace, edits: Mapping[str, Edit] | None, config: BertConfig) -> Trace:
    """``trace`` with ``edits`` added (checked by :func:`check_edits`).

    What ``encoder(..., edits=)`` and the calls above it pass down.

    Args:
        trace: the trace the caller has (:data:`NO_TRACE` when none).
        edits: ``{name or pattern: edit}``, or None.
        config: the model's config.

    Returns:
        Without edits, ``trace`` itself; with edits and no trace, a :class:`Trace` that edits and keeps nothing.
    """
    edits = check_edits(edits, config)
    if not edits:
        return trace
    return Trace(trace.store, trace.prefix, edits={**trace.edits, **edits}, keep=trace.keep)
