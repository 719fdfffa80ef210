"""The named points of a forward pass, where what each step computes can be read and changed.

Every model function takes ``trace=`` and passes each tensor it computes through it under a short
name, ``scores = trace("scores", q @ k.T)``: the call returns the tensor the pass goes on with. By
default that is :data:`NO_TRACE`, which hands every tensor back as it came and keeps nothing. A
:class:`Trace` puts the names in one dotted namespace (``layer.0.attention.probs``) and

* keeps what passed each point (``trace.store``), so a notebook shows exactly what the model computed
  (:func:`bertfn.trace` records a whole pass this way; bertfn/model/point_names.py lists every name);
* replaces it where an *edit* is given for that name (``Trace(edits={"layer.3.attention.probs": f})``):
  ``f(tensor, point)`` returns the tensor to use instead, so one head, one neuron or one position can
  be changed inside the pass. What is kept is what the pass used, the edited tensor.

The points are the same for reading and writing; :func:`~bertfn.model.point_names.point_names` lists them for a
config, as a pass on the meta device records them (:mod:`bertfn.model.dry_run`): the names come from the code that
passes them.
Edit names may use ``*`` for any run of characters (``layer.*.attention.context``). A name may map to
one edit or to a list of them, applied in the list's order; where several names or patterns match one
point, their edits run in the dict's order (:func:`merge_edits` joins dicts that way, never dropping one).

On texts laid end to end (the segments layout, :class:`~bertfn.model.layout.Segments`) a trace shows and edits every
point in the padded layout's shapes all the same: a Trace told the pass's layout (:meth:`Trace.on`, which the encoder
and each layer call) scatters the sequence's tensor (1, T, ...) into the texts' padded batch (b, S, ...), zeros at
the padding (no token is there), before it is kept or edited, and gathers the edited tensor back
(:meth:`~bertfn.model.layout.Segments.padded`, :meth:`~bertfn.model.layout.Segments.laid`); a point no trace keeps or
edits costs nothing more. So an edit written for a padded batch runs unchanged on segments (what it writes at a
padding position is dropped there). The points inside attention are formed in the padded shapes themselves
(:mod:`bertfn.model.segment_points`).

Some points cost memory a pass does not otherwise spend (:data:`OPTIONAL_POINTS`, e.g. each head's
write into the residual stream); they are computed only where a trace asks for them
(``Trace(optional=...)``) or an edit names them.
"""

from __future__ import annotations

import fnmatch
import copy
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

import torch

from ..errors import InputError
from .config import BertConfig
from .layout import Segments
from .point_names import close_names, layer_of, point_names


class Point(NamedTuple):
    """Where an edit runs: the point's full name, its layer (None outside the layers) and, in a padded batch of
    texts, where each text ends and which texts its rows are.

    Attributes:
        name: the full name, e.g. "layer.3.attention.probs".
        layer: its layer, 3 there; None outside the layers.
        lengths: (B,) each text's tokens where the point's tensor is a padded batch of B texts (a text's position
            -1 is its last token, ``lengths[b] - 1``, not the batch's); None where the pass does not say.
        rows: (B,) which of the pass's inputs each row of the tensor is, where a pipeline runs them in groups sorted
            by length (``fill_mask``, ``score``, ``embed``, the heads' pipelines: indices into its texts, or into
            the rows it makes of them, such as ``score``'s masked copies); None where the rows are the batch as
            given, in its order (``bertfn.trace``, ``bertfn.encoder``).
    """

    name: str  # e.g. "layer.3.attention.probs"
    layer: int | None  # 3
    lengths: tuple[int, ...] | None = None
    rows: tuple[int, ...] | None = None


Edit = Callable[[torch.Tensor, Point], torch.Tensor]
"""``edit(tensor, point) -> tensor``: the tensor to use instead of the one computed at ``point``, same shape."""

Edits = Mapping[str, "Edit | Sequence[Edit]"]
"""``{name or pattern: edit or [edits]}``: what ``edits=`` takes everywhere."""


class Trace:
    """Named points of a pass, read and edited by name.

    ``trace("name", x)`` keeps ``x`` (if ``keep``), applies the edit for that name (if any) and returns
    the tensor to go on with; ``trace.scope("layer.0")`` names below ``layer.0.``. ``trace.store`` maps
    full names to tensors, in order.

    Args:
        store: the dict the tensors are kept in (a new one by default; scopes share their parent's).
        prefix: the names' common start, e.g. ``layer.0.`` (what :meth:`scope` sets).
        edits: ``{name or pattern: edit or [edits]}`` (see :data:`Edit`); a list runs in its order.
        keep: whether to store the tensors (False for a pass that only edits).
        optional: names or patterns of :data:`OPTIONAL_POINTS` to compute (e.g.
            ``"layer.*.attention.head_outputs"``); an edit naming one computes it too.
        layout: the pass's layout where it is texts laid end to end (:meth:`on`), else None.
        lengths: each text's tokens in the pass's batch (:meth:`counted`, :meth:`on`), which edits read from their
            :class:`Point`; None where the pass does not say (one text, or nothing edits).
        rows: which of a pipeline's inputs the batch's rows are (:meth:`of_rows`, :attr:`Point.rows`); None where
            the batch is the one given, in its order.

    Raises:
        InputError: an edit that is not a function of ``(tensor, point)``, or a name that is not a string.
    """

    def __init__(self, store: dict[str, torch.Tensor] | None = None, prefix: str = "", *,
                 edits: Edits | None = None, keep: bool = True, optional: Iterable[str] = (),
                 layout: Segments | None = None, lengths: tuple[int, ...] | None = None,
                 rows: tuple[int, ...] | None = None):
        self.store = {} if store is None else store
        self.prefix = prefix
        self.edits = {pattern: edit_list(pattern, edit) for pattern, edit in dict(edits or {}).items()}
        self.keep = keep
        self.optional = tuple(optional)
        self.layout = layout
        self.lengths = lengths
        self.rows = rows

    def scope(self, name: str) -> Trace:
        return Trace(self.store, f"{self.prefix}{name}.", edits=self.edits, keep=self.keep, optional=self.optional,
                     layout=self.layout, lengths=self.lengths, rows=self.rows)

    def of_rows(self, rows: Sequence[int]) -> Trace:
        """This trace for a group of a pipeline's inputs run as one batch: its points tell their edits which input each
        row is (:attr:`Point.rows`), so that an edit holding one row per input (a patch of a recording of those
        texts) gives each its own.

        Args:
            rows: (b,) the group's inputs, by index in the pipeline's batch, in the order the group runs them.

        Returns:
            A copy that says the rows (sharing the store and the edits).
        """
        out = copy.copy(self)
        out.rows = tuple(rows)
        return out

    def counted(self, attention_mask: torch.Tensor) -> Trace:
        """This trace for a padded batch whose 0/1 ``attention_mask`` (B, S) says where each text's tokens are: its
        points tell their edits where each text ends (:attr:`Point.lengths`), the last real token + 1.

        Args:
            attention_mask: (B, S), nonzero at a text's tokens.

        Returns:
            A copy that says the texts' lengths (sharing the store and the edits).
        """
        real = attention_mask != 0  # (B, S)
        ends = real.shape[1] - real.flip(1).int().argmax(1)  # (B,): past each text's last real token
        out = copy.copy(self)
        out.lengths = tuple(ends.tolist())
        return out

    def on(self, layout: object) -> Trace:
        """This trace for a pass on ``layout``: told a :class:`~bertfn.model.layout.Segments`, it keeps and edits each
        point in the padded layout's shape (module docstring); told anything else (the padded layout's mask, None),
        each point as it comes.

        Args:
            layout: the ``mask`` a step of the pass takes.

        Returns:
            This trace where it has that layout already, else a copy with it (sharing the store and the edits).
        """
        laid = layout if isinstance(layout, Segments) else None
        if laid is self.layout:
            return self
        out = copy.copy(self)
        out.layout = laid
        if laid is not None:  # the texts' lengths, which the points' padded batch has (kept by a later on(None))
            out.lengths = laid.lengths
        return out

    def __call__(self, name: str, x: torch.Tensor) -> torch.Tensor:
        full = self.prefix + name
        edits = [edit for pattern, many in self.edits.items() if fnmatch.fnmatchcase(full, pattern) for edit in many]
        if self.layout is None or not (edits or self.keep):
            return self.at(full, x, edits)
        y = self.at(full, self.layout.padded(x), edits)  # (b, S, ...): the texts as the padded pass has them
        return self.layout.laid(y, like=x) if edits else x  # (1, T + pad, ...) again

    def at(self, full: str, x: torch.Tensor, edits: list[Edit]) -> torch.Tensor:
        """``x`` at the point ``full`` after ``edits``, kept where the trace keeps.

        Args:
            full: the point's full name.
            x: the tensor that reached it, in the padded layout's shape.
            edits: the edits whose patterns match it, in order.
        """
        for edit in edits:
            x = edited(edit, x, Point(full, layer_of(full), self.lengths, self.rows))
        if self.keep:
            self.store[full] = x
        return x

    def wants(self, name: str) -> bool:
        """Whether to compute the optional point ``name`` (relative to this scope).

        True where a pattern of ``optional`` matches it, or an edit's pattern matches it and spells its
        name (``layer.*.attention.head_outputs``: an edit of ``*`` does not make a pass compute it).

        Args:
            name: an optional point's name relative to this scope, e.g. ``"head_outputs"``.
        """
        full = self.prefix + name
        return any(fnmatch.fnmatchcase(full, p) for p in self.optional) or \
            any(fnmatch.fnmatchcase(full, p) and name in p for p in self.edits)

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

    def on(self, layout: object) -> Trace:
        return self

    def counted(self, attention_mask: torch.Tensor) -> Trace:
        return self

    def of_rows(self, rows: Sequence[int]) -> Trace:
        return self

    def __call__(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return x

    def edits_any(self, names: Iterable[str]) -> bool:
        return False

    def wants(self, name: str) -> bool:
        return False

    def __bool__(self) -> bool:
        return False


NO_TRACE: Trace = _NoTrace()


def edit_list(name: object, edits: object) -> list[Edit]:
    """The edits given for one name as a list, each checked to be a function of ``(tensor, point)``.

    Args:
        name: the point name or pattern they are given for.
        edits: one edit, or a list or tuple of them.

    Raises:
        InputError: a name that is not a string, something that is not a function, or a function that
            cannot be called as ``edit(tensor, point)`` (e.g. ``lambda x: ...``).
    """
    if not isinstance(name, str):
        raise InputError(f"edits map point names (strings) to edits, got the key {name!r}")
    many = list(edits) if isinstance(edits, (list, tuple)) else [edits]
    if not many:
        raise InputError(f"the edits for {name!r} are an empty list; give an edit(tensor, point) -> tensor, or leave the name out")
    for edit in many:
        if not callable(edit):
            raise InputError(f"edits map point names to functions edit(tensor, point) -> tensor, got "
                             f"{name!r}: {type(edit).__name__}")
        try:
            inspect.signature(edit).bind(None, None)
        except TypeError:
            raise InputError(f"the edit for {name!r} cannot be called as edit(tensor, point): its signature is "
                             f"{getattr(edit, '__name__', type(edit).__name__)}{inspect.signature(edit)}; an edit takes "
                             "the tensor and the point (its .name and .layer), e.g. lambda x, point: x * 0") from None
        except ValueError:  # a builtin without a signature: it is called as it is
            pass
    return many


def merge_edits(*dicts: Edits) -> dict[str, list[Edit]]:
    """Several ``edits`` dicts as one that keeps every edit: where two give the same name, both run.

    ``{**a, **b}`` keeps only ``b``'s edit for a name both have; ``merge_edits(a, b)`` keeps a list,
    ``a``'s edits first, then ``b``'s, applied in that order.

    Args:
        *dicts: ``{name or pattern: edit or [edits]}`` dicts, in the order their edits should run.

    Returns:
        ``{name or pattern: [edits]}``.

    Raises:
        InputError: something that is not such a dict.
    """
    out: dict[str, list[Edit]] = {}
    for d in dicts:
        if not isinstance(d, Mapping):
            raise InputError(f"merge_edits joins dicts {{point name: edit}}, got {type(d).__name__}")
        for name, edits in d.items():
            out.setdefault(name, []).extend(edit_list(name, edits))
    return out


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


OPTIONAL_POINTS = ("head_outputs",)
"""Points computed only when a trace asks for them or an edit names them (:meth:`Trace.wants`):
``layer.{i}.attention.head_outputs`` (B, nh, S, H), each head's write into the residual stream."""

WEIGHT_POINTS = ("scores", "scaled_scores", "masked_scores", "probs")
"""The attention points only the eager path forms (the fused SDPA kernel never does)."""

def check_edits(edits: Edits | None, config: BertConfig) -> dict[str, list[Edit]]:
    """``edits`` as a dict of lists, each name (or pattern) checked against :func:`~bertfn.model.point_names.point_names`.

    Args:
        edits: ``{name or pattern: edit or [edits]}``, or None.
        config: the model's config.

    Returns:
        ``{name or pattern: [edits]}``.

    Raises:
        InputError: a name that matches no point (naming the close valid names), or an edit that is no
            function of ``(tensor, point)``.
    """
    if edits is None:
        return {}
    if not isinstance(edits, Mapping):
        raise InputError(f"edits must be a dict {{point name: edit(tensor, point) -> tensor}}, got {type(edits).__name__}")
    valid = point_names(config, optional=True)
    for pattern in edits:
        if not isinstance(pattern, str) or not any(fnmatch.fnmatchcase(n, pattern) for n in valid):
            close = close_names(str(pattern), valid, config, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}?" if close else \
                "the points are embeddings.*, layer.{i}.attention.{query,...,probs,context,...}, layer.{i}.ffn.*, " \
                "layer.{i}.output, pooler, mlm.transform, mlm.logits (bertfn.model.point_names.point_names)"
            raise InputError(f"no point of this model is named {pattern!r} (layers 0-{config.num_hidden_layers - 1}); {hint}")
    return {pattern: edit_list(pattern, edit) for pattern, edit in edits.items()}


def with_edits(trace: Trace, edits: Edits | None, config: BertConfig) -> Trace:
    """``trace`` with ``edits`` added (checked by :func:`check_edits`) after its own.

    What ``encoder(..., edits=)`` and the calls above it pass down. Where both have edits for one
    name, the trace's run first, then these (:func:`merge_edits`).

    Args:
        trace: the trace the caller has (:data:`NO_TRACE` when none).
        edits: ``{name or pattern: edit or [edits]}``, or None.
        config: the model's config.

    Returns:
        Without edits, ``trace`` itself; with edits and no trace, a :class:`Trace` that edits and keeps nothing.
    """
    edits = check_edits(edits, config)
    if not edits:
        return trace
    return Trace(trace.store, trace.prefix, edits=merge_edits(trace.edits, edits), keep=trace.keep,
                 optional=trace.optional, layout=trace.layout, lengths=trace.lengths, rows=trace.rows)
