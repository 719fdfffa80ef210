"""Ready-made edits: ablation of heads and neurons, and adding a vector (steering).

Each function returns an ``edits`` dict for any call that takes one (``bertfn.encoder``, ``fill_mask``,
``score``, ``embed``, ``trace``); dicts combine with ``{**a, **b}`` when their names differ.

    edits = bertfn.interventions.zero_heads({3: [0, 5], 7: [2]})      # heads 0 and 5 of layer 3, head 2 of layer 7
    bertfn.fill_mask("The capital of France is [MASK].", model, edits=edits)

A head is ablated at its context, ``layer.{i}.attention.context`` (B, nh, S, hd), before the output
projection: zeroing it is exactly what a head mask of 0 and :func:`bertfn.prune_heads` do
(tests/test_interventions.py). A neuron is one of the I units of ``layer.{i}.ffn.intermediate``.
Mean ablation puts the mean activation over some texts (:func:`head_means`, :func:`neuron_means`) in
place of the head's or neuron's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch

from ..checkpoint.model import Model
from ..checkpoint.resolve import get_model, text_list
from ..errors import InputError, clipped
from ..model.encoder import encoder
from ..model.point_names import close_names, point_names
from ..model.recorder import Edit, Point, Trace
from ..tasks.runner import loaded
from .points import select

Tensor = torch.Tensor


def _layers(spec: Mapping[int, Iterable[int]], what: str) -> dict[int, list[int]]:
    if not isinstance(spec, Mapping):
        raise InputError(f"{what} must be a dict {{layer: [indices]}}, e.g. {{3: [0, 5]}}, got {type(spec).__name__}")
    out = {}
    for layer, items in spec.items():
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
            raise InputError(f"{what}: layers are integers from 0, got {layer!r}")
        items = [items] if isinstance(items, int) else list(items)
        if not items or not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
            raise InputError(f"{what}: layer {layer} must map to a list of integers, got {items!r}")
        out[layer] = items
    return out


def replace_with(value: Tensor | float, *, positions=None, heads=None, neurons=None) -> Edit:
    """An edit that puts ``value`` at the selected ``positions`` / ``heads`` / ``neurons`` of whatever point it runs at.

    The rest stays.

    Args:
        value: a number, or a tensor broadcasting to the selection's axes.
        positions (int | Sequence[int] | None): the positions (None: all).
        heads (int | Sequence[int] | None): the heads (None: all), at a point split into heads.
        neurons (int | Sequence[int] | None): the neurons (None: all), along the last axis.

    Returns:
        ``edit(tensor, point) -> tensor``.
    """
    def edit(x: Tensor, point: Point) -> Tensor:
        keep = select(x, point.name, positions, heads, neurons, lengths=point.lengths)
        if not isinstance(value, Tensor):
            return torch.where(keep, torch.full_like(x, value), x)
        check_broadcast(value, x, point.name, "the value put")
        return torch.where(keep, value.to(x.device, x.dtype), x)

    return edit


def check_broadcast(value: Tensor, x: Tensor, name: str, what: str) -> None:
    """Raise unless ``value`` broadcasts to ``x``'s shape without growing it (numpy's rules, as ``torch.where`` reads it).

    Args:
        value: the tensor an edit puts or adds.
        x: the tensor at the point, (B, ...).
        name: the point's name, for the message.
        what: what ``value`` is, for the message.

    Raises:
        InputError: shapes that do not broadcast to ``x``'s.
    """
    try:
        fitted = torch.broadcast_shapes(value.shape, x.shape) == x.shape
    except RuntimeError:
        fitted = False
    if not fitted:
        raise InputError(f"{what} has shape {tuple(value.shape)}, which does not broadcast to {name}'s "
                         f"{tuple(x.shape)}: each of its axes, counted from the last, must be 1 or the point's")


def zero_heads(heads: Mapping[int, Iterable[int]], *, positions: int | Sequence[int] | None = None) -> dict[str, Edit]:
    """Zero ablation: the context of each head set to 0.

    Args:
        heads: ``{layer: [heads]}``.
        positions: only at these positions, if given.

    Returns:
        ``{"layer.{i}.attention.context": edit}``.

    Raises:
        InputError: ``heads`` that is not such a dict.
    """
    return {f"layer.{i}.attention.context": replace_with(0.0, heads=hs, positions=positions)
            for i, hs in _layers(heads, "zero_heads").items()}


def zero_neurons(neurons: Mapping[int, Iterable[int]], *, positions: int | Sequence[int] | None = None) -> dict[str, Edit]:
    """Zero ablation of feed-forward neurons (their activation ``act(W_1 a + b_1)``).

    Args:
        neurons: ``{layer: [neurons]}``.
        positions: only at these positions, if given.

    Returns:
        ``{"layer.{i}.ffn.intermediate": edit}``.

    Raises:
        InputError: ``neurons`` that is not such a dict.
    """
    return {f"layer.{i}.ffn.intermediate": replace_with(0.0, neurons=ns, positions=positions)
            for i, ns in _layers(neurons, "zero_neurons").items()}


def mean_heads(heads: Mapping[int, Iterable[int]], means: Tensor) -> dict[str, Edit]:
    """Mean ablation: each head's context replaced by its mean ``means[layer, head]`` (hd,), everywhere.

    Args:
        heads: ``{layer: [heads]}``.
        means: (L, nh, hd), e.g. :func:`head_means` over texts like the ones studied.

    Returns:
        ``{"layer.{i}.attention.context": edit}``; the edit raises :class:`InputError` where the means' heads or width
            are not the point's.

    Raises:
        InputError: ``heads`` that is not such a dict, ``means`` that is not (L, nh, hd), or a layer it lacks.
    """
    out = {}
    for i, hs in _layers(heads, "mean_heads").items():
        _check_means(means, i, 3, "mean_heads", "(L, nh, hd), e.g. iv.head_means(texts, model)")
        value = means[i][None, :, None, :]  # (1, nh, 1, hd): broadcasts over texts and positions
        out[f"layer.{i}.attention.context"] = replace_with(value, heads=hs)
    return out


def mean_neurons(neurons: Mapping[int, Iterable[int]], means: Tensor) -> dict[str, Edit]:
    """Mean ablation of feed-forward neurons: each replaced by ``means[layer, neuron]``.

    Args:
        neurons: ``{layer: [neurons]}``.
        means: (L, I), e.g. :func:`neuron_means`.

    Returns:
        ``{"layer.{i}.ffn.intermediate": edit}``; the edit raises :class:`InputError` where the means' width is not the
            point's.

    Raises:
        InputError: ``neurons`` that is not such a dict, ``means`` that is not (L, I), or a layer it lacks.
    """
    out = {}
    for i, ns in _layers(neurons, "mean_neurons").items():
        _check_means(means, i, 2, "mean_neurons", "(L, I), e.g. iv.neuron_means(texts, model)")
        out[f"layer.{i}.ffn.intermediate"] = replace_with(means[i], neurons=ns)
    return out


def _check_means(means: Tensor, layer: int, dims: int, what: str, shape: str) -> None:
    """Raise unless ``means`` is a ``dims``-axis tensor with a row for ``layer``."""
    if not isinstance(means, Tensor) or means.dim() != dims:
        got = f"shape {tuple(means.shape)}" if isinstance(means, Tensor) else type(means).__name__
        raise InputError(f"{what} takes means of shape {shape}, got {got}")
    if layer >= means.shape[0]:
        raise InputError(f"{what}: layer {layer} has no means; the means hold layers 0 to {means.shape[0] - 1}")


def steer(name: str, vector: Tensor, *, scale: float = 1.0, positions: int | Sequence[int] | None = None) -> dict[str, Edit]:
    """Activation addition: ``x + scale * vector`` at point ``name``.

    Args:
        name: a (B, S, H)-shaped point such as ``layer.6.output``.
        vector: (H,) or broadcastable to x.
        scale: the factor of ``vector``.
        positions: only at these positions (None: every position).

    Returns:
        ``{name: edit}``.

    Raises:
        InputError: ``vector`` is not a tensor.
    """
    if not isinstance(vector, Tensor):
        raise InputError(f"steer adds a tensor, got {type(vector).__name__}; e.g. torch.tensor(...) of the point's width")

    def edit(x: Tensor, point: Point) -> Tensor:
        width = vector.shape[-1] if vector.dim() else 1
        if width not in (1, x.shape[-1]):
            raise InputError(f"steer's vector has {width} values but {point.name} is {x.shape[-1]} wide "
                             f"(shape {tuple(x.shape)}); give a vector of {x.shape[-1]}, or steer another point")
        check_broadcast(vector, x, point.name, "steer's vector")
        keep = select(x, point.name, positions=positions, lengths=point.lengths)
        return torch.where(keep, x + scale * vector.to(x.device, x.dtype), x)

    return {name: edit}


def activation_means(texts: str | Sequence[str], model: Model | str | Path, names: list[str]) -> dict[str, Tensor]:
    """The mean of the tensors at ``names`` over every real token of ``texts`` (padding left out).

    The reference for mean ablation.

    Args:
        texts: one text or several.
        model: a loaded :class:`Model`, a folder or a hub id.
        names: the points, by full name.

    Returns:
        Per name, the mean: the tensor's shape without its batch and position axes.

    Raises:
        InputError: a name that is no point of the encoder's layers or embeddings (a pattern, ``pooler``, ``mlm.*``).
    """
    texts, _ = text_list(texts, "activation_means")
    m, tok, _ = loaded("activation_means", model)
    _check_names(names, m)
    enc = tok(list(texts))
    kept: dict[str, Tensor] = {}

    def keep(x: Tensor, point: Point) -> Tensor:  # only the points asked for (a whole trace would run eager)
        kept[point.name] = x
        return x

    with torch.no_grad():
        encoder(m.params, enc.input_ids.to(m.device), enc.attention_mask.to(m.device), enc.token_type_ids.to(m.device),
                trace=Trace(keep=False, edits=dict.fromkeys(names, keep)))
    real = enc.attention_mask.to(m.device).bool()  # (B, S)
    out = {}
    for name in names:
        x = kept[name].float()
        x = x.transpose(1, 2) if x.dim() == 4 else x  # (B, nh, S, hd) -> (B, S, nh, hd)
        out[name] = x[real].mean(dim=0)  # the real tokens' mean
    return out


def _check_names(names: list[str], m: Model) -> None:
    """Raise unless every name is a point of ``m``'s embeddings or layers, one vector per token."""
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise InputError(f"names must be a list of point names, e.g. ['layer.3.output'], got {clipped(names, 60)}")
    valid = [n for n in point_names(m.config, optional=True) if n.split(".")[0] in ("embeddings", "layer", "final_norm")]
    for name in names:
        if name not in valid:
            close = close_names(str(name), valid, m.config, cutoff=0.5)
            raise InputError(f"activation_means averages points of the embeddings and the layers, one vector per token, "
                             f"by full name (no patterns, no pooler or mlm.*); {name!r} is none of them"
                             + (f"; did you mean {', '.join(close)}?" if close else ""))


def head_means(texts: str | Sequence[str], model: Model | str | Path) -> Tensor:
    """Each head's mean context over the real tokens of ``texts``, for :func:`mean_heads`.

    Args:
        texts: one text or several.
        model: a loaded :class:`Model`, a folder or a hub id.

    Returns:
        (L, nh, hd).
    """
    m = get_model(model)
    names = [f"layer.{i}.attention.context" for i in range(m.config.num_hidden_layers)]
    return torch.stack([v for v in activation_means(texts, m, names).values()])


def neuron_means(texts: str | Sequence[str], model: Model | str | Path) -> Tensor:
    """Each feed-forward neuron's mean activation over the real tokens of ``texts``, for :func:`mean_neurons`.

    Args:
        texts: one text or several.
        model: a loaded :class:`Model`, a folder or a hub id.

    Returns:
        (L, I).
    """
    m = get_model(model)
    names = [f"layer.{i}.ffn.intermediate" for i in range(m.config.num_hidden_layers)]
    return torch.stack([v for v in activation_means(texts, m, names).values()])
