"""Activation patching: a clean and a corrupted input, and the clean activation put into the corrupted run.

    clean = bertfn.trace("When in Rome, do as the [MASK] do.", model)
    edits = bertfn.interventions.patch(clean, "layer.5.output", positions=4)
    bertfn.fill_mask("When in Paris, do as the [MASK] do.", model, edits=edits)

:func:`patch` makes the edit; metrics measure what it changed (:func:`logit_difference`,
:func:`at_masks`); :mod:`bertfn.interventions.study` patches one slice at a time over pairs of texts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from ..errors import InputError, clipped
from ..inspect.trace import Recording
from ..model.recorder import Edit, Point
from .points import axes, per_head, select

Tensor = torch.Tensor


def patch(clean: Recording | Mapping[str, Tensor], name: str, *, positions: int | Sequence[int] | None = None,
          heads: int | Sequence[int] | None = None, neurons: int | Sequence[int] | None = None) -> dict[str, Edit]:
    """An edit putting the clean run's tensor at point ``name`` into the run it is passed to.

    The corrupted input must have the clean one's number of tokens (and batch). A recording of several texts
    (``bertfn.trace(texts, model)``) patches a pipeline's texts (``fill_mask``, ``embed``, ...) each with its own,
    though the pipeline runs them in groups sorted by length (:attr:`~bertfn.model.recorder.Point.rows`).

    Args:
        clean: a :class:`~bertfn.inspect.trace.Recording` (``bertfn.trace(clean_text, model)``) or a dict of
            tensors by name.
        name: the point; it may hold ``*`` (every matching point).
        positions: the positions to patch (None: all).
        heads: the heads to patch (None: all), at a point split into heads.
        neurons: the neurons to patch (None: all).

    Returns:
        ``{name: edit}``; the edit raises :class:`InputError` where the clean run lacks the point or has
            another shape.

    Raises:
        InputError: ``clean`` is neither a Recording nor a dict.
    """
    tensors = getattr(clean, "tensors", clean)  # a Recording, a batch's Recordings, or a dict
    if not isinstance(tensors, Mapping):
        raise InputError(f"patch takes the clean run as a Recording (bertfn.trace(text, model)) or a dict of tensors, "
                         f"got {type(clean).__name__}")

    def edit(x: Tensor, point: Point) -> Tensor:
        if point.name not in tensors:
            how = "bertfn.trace(..., head_outputs=True): a pass computes each head's output only when asked" \
                if point.name.endswith(".head_outputs") else \
                "(and eager attention for scores and probabilities, as bertfn.trace does)"
            raise InputError(f"the clean run holds no {point.name!r}; trace it with the same model {how}")
        source = tensors[point.name]
        if point.rows is not None and list(point.rows) != list(range(len(source))):
            source = group_rows(source, clean, point, x)
        if source.shape != x.shape:
            raise InputError(_mismatch(point.name, source.shape, x.shape))
        keep = select(x, point.name, positions, heads, neurons, lengths=point.lengths)
        return torch.where(keep, source.to(x.device, x.dtype), x)

    return {name: edit}


def group_rows(source: Tensor, clean: object, point: Point, x: Tensor) -> Tensor:
    """The clean run's rows of the texts a pipeline's group runs (:attr:`~bertfn.model.recorder.Point.rows`), in the
    group's order, cut to its padded length: ``fill_mask``, ``score`` and the other pipelines run their texts in groups
    sorted by length, where ``bertfn.trace`` of the same texts records them as given.

    Args:
        source: the clean run's tensor at the point, (B, ...), the batch padded to its longest text.
        clean: what :func:`patch` was given (a :class:`~bertfn.inspect.trace.Recordings` says each text's length).
        point: where the edit runs, with the group's rows and their lengths.
        x: the group's tensor there, (b, ...).

    Returns:
        (b, ...): the group's texts' rows (at ``mlm.*``, the rows of their [MASK]s), in its order.

    Raises:
        InputError: a clean run that does not say its texts' lengths (a dict), or that holds other texts than the
            group's (fewer, of other lengths, with other [MASK]s).
    """
    tokens = getattr(clean, "tokens", None)  # a Recording's S tokens, a Recordings' B lists of them
    lengths = None if tokens is None else [len(t) for t in tokens] if tokens and isinstance(tokens[0], list) else \
        [len(tokens)]
    rows = list(point.rows)
    known = lengths is not None and max(rows) < len(lengths)
    if point.name.startswith("mlm."):  # a row per [MASK]: rows says each one's text
        masks = getattr(clean, "mask_rows", [(0, p) for p in getattr(clean, "mask_positions", [])])
        picked = [n for r in dict.fromkeys(rows) for n, (t, _) in enumerate(masks) if t == r]
        fits = known and len(picked) == len(rows)
    else:
        picked = rows
        fits = known and (point.lengths is None or [lengths[r] for r in rows] == list(point.lengths))
    if not fits:
        inputs = list(dict.fromkeys(rows))  # a text with two [MASK]s owns two rows of mlm.*
        shown = ", ".join(map(str, inputs[:8])) + (f", ... ({len(inputs) - 8} more)" if len(inputs) > 8 else "")
        raise InputError(f"at {point.name} this pipeline runs its inputs {shown} as one batch (its texts sorted by "
                         "length, or the rows it makes of them, as score's masked copies), which the clean run does not "
                         "hold" + (f": it holds {len(lengths)} text(s) of {clipped(lengths, 60)} tokens"
                                   if lengths is not None else " (a dict of tensors says no texts)")
                         + "; patch a recording of the same texts (bertfn.trace(clean_texts, model)) into the pipeline's "
                         "texts, or patch by hand with bertfn.trace(corrupted_texts, model, edits=...)")
    source = source[picked]
    where = axes(point.name)["positions"]
    keys = per_head(point.name) and point.name.rpartition(".")[2] not in ("q", "k", "v", "q_rotated", "k_rotated",
                                                                        "context", "head_outputs")
    for d in (where, source.dim() - 1) if keys else (where,) if where is not None else ():  # past the group's longest
        source = source.narrow(d, 0, min(source.shape[d], x.shape[d]))
    return source


def _mismatch(name: str, clean: torch.Size, this: torch.Size) -> str:
    """What differs between the clean run's tensor at ``name`` and this run's, and what to do."""
    where = axes(name)["positions"]
    if not name.startswith("mlm.") and clean[0] != this[0]:
        return (f"at {name} the clean run holds {clean[0]} text(s) but this run {this[0]}; patch a recording of as many "
                f"texts (bertfn.trace(texts, model) of the clean texts) into the batch, or run the texts one at a time")
    if where is not None and len(clean) == len(this) and clean[where] != this[where]:
        return (f"at {name} the clean run has {clean[where]} {'masks' if name.startswith('mlm.') else 'tokens'} "
                f"but this run {this[where]}; patching puts position p of the clean run at position p, so the "
                "texts must have the same number of tokens (and masks)")
    return f"at {name} the clean run has shape {tuple(clean)} but this run {tuple(this)}; trace both with the same model"


Metric = Callable[[Recording], Tensor]
"""``metric(run) -> scalar tensor``: a function of a run's :class:`~bertfn.inspect.trace.Recording`."""


def logit_difference(right: int, wrong: int, mask: int = 0) -> Metric:
    """A metric: logit of token id ``right`` minus that of ``wrong`` at the run's mask number ``mask``.

    Args:
        right: the token id whose logit counts positively.
        wrong: the token id whose logit is subtracted.
        mask: which of the text's masks, from 0 (the rows of ``run["mlm.logits"]``).

    Returns:
        ``metric(run) -> scalar tensor``; it raises :class:`InputError` where the run has no mask ``mask`` or the
            vocabulary no id ``right`` or ``wrong``.

    Raises:
        InputError: ``right``, ``wrong`` or ``mask`` that is not an integer from 0 (a token string:
            ``model.tokenizer.token_to_id("paris")`` is its id).
    """
    for what, value in (("right", right), ("wrong", wrong), ("mask", mask)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            hint = " (a token's id: model.tokenizer.token_to_id(token))" if what != "mask" else ""
            raise InputError(f"logit_difference's {what} must be an integer from 0{hint}, got {value!r}")

    def difference(logits: Tensor) -> Tensor:  # (N, V) at the run's N masks
        N, V = logits.shape
        if mask >= N:
            raise InputError(f"logit_difference reads mask {mask} (from 0) but the run has {N} [MASK](s); "
                             f"pass mask= from 0 to {N - 1}, or put more masks in the text")
        if max(right, wrong) >= V:
            raise InputError(f"logit_difference reads token ids {right} and {wrong} but the vocabulary has {V} "
                             f"(ids 0 to {V - 1}); model.tokenizer.token_to_id(token) gives a token's id")
        return logits[mask, right] - logits[mask, wrong]

    return at_masks(difference)


def at_masks(of_logits: Callable[[Tensor], Tensor]) -> Metric:
    """A metric of the MLM logits at the run's masks, as a metric of the run.

    Args:
        of_logits: ``f(logits) -> scalar tensor``, logits (N, V) at the text's N [MASK]s.

    Returns:
        ``metric(run) = of_logits(run["mlm.logits"])``, computed in float32 or wider.
    """
    def metric(run: Recording) -> Tensor:
        logits = run["mlm.logits"]
        return of_logits(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits)

    return metric
