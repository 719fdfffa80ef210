"""Path patching: a sender head's clean output into chosen receivers only (Wang et al. 2022, IOI).

Activation patching (:func:`~bertfn.interventions.patching.patch`) puts a head's clean output into the
corrupted run and lets it act through every path above it. Path patching measures one set of paths, from
a *sender* (one or more heads of one layer) into *receivers* (points of the layers above, e.g. the queries
of one head), in three runs of the corrupted text:

1. the clean and the corrupted texts are recorded with each head's write ``layer.{i}.attention.head_outputs``;
2. the corrupted text runs with the sender's heads' writes taken from the clean run and every head's
   write in the layers above the sender frozen at the corrupted run's (the feed-forward blocks are
   recomputed, as in the IOI paper, so the paths through them count as the sender's); what the
   receivers get is recorded;
3. the corrupted text runs with the receivers' points (only the heads given, where heads are given)
   taken from run 2: the sender reaches the receivers, and nothing else.

The result is ``metric`` of run 3's :class:`~bertfn.inspect.trace.Recording`, e.g.
``lambda rec: rec["mlm.logits"][0, right] - rec["mlm.logits"][0, wrong]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ..checkpoint.model import Model
from ..errors import InputError, clipped
from ..inspect.trace import trace
from ..model.config import BertConfig
from ..model.point_names import close_names, layer_of, point_names
from ..model.recorder import merge_edits
from ..tasks.runner import loaded
from .patching import Metric, patch
from .points import as_list, per_head

Tensor = torch.Tensor
HEADS = "layer.{i}.attention.head_outputs"


def check_heads(heads: int | Sequence[int] | None, n: int, where: str) -> list[int] | None:
    """``heads`` as a list, each in 0 .. n-1.

    Args:
        heads: an integer, a list of them, or None (all).
        n: the heads the point has.
        where: the point, for the message.

    Raises:
        InputError: not integers, or one out of range.
    """
    heads = as_list(heads, f"the heads at {where}")
    bad = [h for h in heads or () if not 0 <= h < n]
    if bad:
        raise InputError(f"heads {bad} out of range at {where}, which has {n} heads (0 to {n - 1})")
    return heads


def check_receivers(receivers: Mapping[str, int | Sequence[int] | None], sender_layer: int,
                    config: BertConfig) -> dict[str, list[int] | None]:
    """``receivers`` checked: points of this model in layers above the sender, heads only where split and in range.

    Args:
        receivers: ``{point name: heads or None}``.
        sender_layer: the sender's layer.
        config: the model's config.

    Returns:
        ``{point name: list of heads or None}``.

    Raises:
        InputError: no receivers, a name that is no point (naming close ones), a point not above the sender,
            or heads at a point not split into heads or out of its range.
    """
    if not isinstance(receivers, Mapping) or not receivers:
        raise InputError(f"receivers must be a non-empty dict {{point name: heads or None}}, e.g. "
                         f"{{'layer.{sender_layer + 1}.attention.q': [0]}}; got {clipped(receivers, 80)}")
    valid = point_names(config, optional=True)
    out = {}
    for name, heads in receivers.items():
        if name not in valid:
            close = close_names(str(name), valid, config, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}?" if close else "bertfn.model.point_names.point_names lists them"
            raise InputError(f"no point of this model is named {name!r}; {hint}")
        layer = layer_of(name)
        if layer is None or layer <= sender_layer:
            raise InputError(f"the receiver {name} is not in a layer above the sender's ({sender_layer}); receivers "
                             f"are points of layers {sender_layer + 1} to {config.num_hidden_layers - 1}, which the "
                             "sender's write reaches")
        if heads is not None and not per_head(name):
            raise InputError(f"{name} is not split into heads, so it takes no heads (give None); pick heads at "
                             f"layer.{layer}.attention.q|k|v|context")
        out[name] = check_heads(heads, config.heads_in_layer(layer), name)
    return out


def path_patch(clean_text: str, corrupted_text: str, model: Model | str | Path, metric: Metric, *,
               sender: tuple[int, int | Sequence[int]],
               receivers: Mapping[str, int | Sequence[int] | None]) -> float:
    """The metric of the corrupted run when the sender's clean output reaches only the receivers.

    The three runs of the module docstring (Wang et al. 2022, "path patching"), each a
    :func:`bertfn.trace` with edits. Plain activation patching of the sender's heads would let their
    clean writes act through every path above them; here they reach the receivers alone.

    Args:
        clean_text: the clean text.
        corrupted_text: the corrupted text, of as many tokens.
        model: a loaded :class:`Model`, a folder or a hub id.
        metric: ``metric(rec) -> scalar tensor`` of run 3's recording, e.g.
            ``lambda rec: rec["mlm.logits"][0, right] - rec["mlm.logits"][0, wrong]``.
        sender: ``(layer, head)`` or ``(layer, [heads])``: the heads whose clean writes are sent.
        receivers: ``{point name: heads or None}``: points of the layers above the sender
            (``layer.{j}.attention.q|k|v`` for a head's query, key or value input, with the heads to
            patch; any other point of those layers with None), patched in run 3 from run 2.

    Returns:
        The metric of run 3.

    Raises:
        InputError: a bad sender or receivers (:func:`check_receivers`), texts of different token counts,
            or a metric that gives no scalar.
        MissingPartError: a model without a tokenizer.
    """
    m = loaded("path_patch", model).model
    cfg = m.config
    L = cfg.num_hidden_layers
    if not (isinstance(sender, (tuple, list)) and len(sender) == 2 and isinstance(sender[0], int)
            and not isinstance(sender[0], bool) and 0 <= sender[0] < L):
        raise InputError(f"sender must be (layer, head) or (layer, [heads]) with a layer from 0 to {L - 1}, got {sender!r}")
    layer, heads = sender[0], check_heads(sender[1], cfg.heads_in_layer(sender[0]), f"the sender's layer {sender[0]}")
    if not heads:
        raise InputError(f"the sender needs one head or a list of them, got {sender[1]!r}")
    wanted = check_receivers(receivers, layer, cfg)
    clean, corrupted = trace(clean_text, m, head_outputs=True), trace(corrupted_text, m, head_outputs=True)  # run 1
    if clean.input_ids.shape != corrupted.input_ids.shape:
        raise InputError(f"the clean text has {clean.input_ids.shape[1]} tokens and the corrupted one "
                         f"{corrupted.input_ids.shape[1]}; path patching swaps activations position by position, "
                         "so make them the same length in tokens")
    frozen = [patch(corrupted.tensors, HEADS.format(i=i)) for i in range(layer + 1, L)]
    run2 = trace(corrupted_text, m, edits=merge_edits(patch(clean, HEADS.format(i=layer), heads=heads), *frozen),
                 head_outputs=True)
    run3 = trace(corrupted_text, m, edits=merge_edits(*(patch(run2, n, heads=h) for n, h in wanted.items())),
                 head_outputs=True)
    with torch.no_grad():
        value = metric(run3)
    if not isinstance(value, Tensor) or value.numel() != 1:
        raise InputError(f"metric must return a scalar tensor (e.g. rec['mlm.logits'][0, right] - "
                         f"rec['mlm.logits'][0, wrong]), got {type(value).__name__}"
                         f"{tuple(value.shape) if isinstance(value, Tensor) else ''}")
    return value.item()
