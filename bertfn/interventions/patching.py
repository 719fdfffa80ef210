"""Activation patching: a clean and a corrupted input, and the clean activation put into the corrupted run.

    clean = bertfn.trace("When in Rome, do as the [MASK] do.", model)
    edits = bertfn.interventions.patch(clean, "layer.5.output", positions=4)
    bertfn.fill_mask("When in Paris, do as the [MASK] do.", model, edits=edits)

:func:`patch` makes the edit; :func:`sweep` patches one slice at a time (each position of each layer's
output, or each head of each layer's context) and measures a metric of the MLM logits at the
corrupted text's masks, for a layer x position or layer x head map (causal tracing, Meng et al. 2022;
Vig et al. 2020). It reuses what does not change: the clean and the corrupted runs once, the layers
below a patch once, and all the slices of one layer as one batch through the layers above it.
:func:`attribution` estimates the same map from one forward and one backward pass of the corrupted
run (attribution patching, Nanda 2023): the change a patch makes is about
``(clean - corrupted) . d metric / d activation`` summed over the slice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from ..checkpoint.loading import Model
from ..checkpoint.resolve import get_model, require_mlm_head, require_tokenizer
from ..errors import InputError
from ..inspect.trace import Recording, trace
from ..model.attention import causal_keep_mask, extended_mask
from ..model.encoder import encoder, layer
from ..model.heads import mlm_head
from ..model.recorder import Edit, Point, Trace, check_edits
from .points import select

Tensor = torch.Tensor
Metric = Callable[[Tensor], Tensor]
"""``metric(logits) -> scalar tensor``: logits (N, V) at the corrupted text's N [MASK]s."""


def patch(clean: Recording | Mapping[str, Tensor], name: str, *, positions: int | Sequence[int] | None = None,
          heads: int | Sequence[int] | None = None, neurons: int | Sequence[int] | None = None) -> dict[str, Edit]:
    """An edit putting the clean run's tensor at point ``name`` into the run it is passed to, at
    ``positions`` / ``heads`` / ``neurons`` (None: all). ``name`` may hold ``*`` (every matching point).

    clean: a :class:`~bertfn.inspect.trace.Recording` (``bertfn.trace(clean_text, model)``) or a dict of
    tensors by name. The corrupted input must have the clean one's number of tokens (and batch).
    """
    tensors = clean.tensors if isinstance(clean, Recording) else clean
    if not isinstance(tensors, Mapping):
        raise InputError(f"patch takes the clean run as a Recording (bertfn.trace(text, model)) or a dict of tensors, "
                         f"got {type(clean).__name__}")

    def edit(x: Tensor, point: Point) -> Tensor:
        if point.name not in tensors:
            raise InputError(f"the clean run holds no {point.name!r}; trace it with the same model (and eager "
                             "attention for scores and probabilities, as bertfn.trace does)")
        source = tensors[point.name]
        if source.shape != x.shape:
            raise InputError(f"at {point.name} the clean run has shape {tuple(source.shape)} but this run "
                             f"{tuple(x.shape)}; patching needs inputs of the same number of tokens")
        return torch.where(select(x, point.name, positions, heads, neurons), source.to(x.device, x.dtype), x)

    return {name: edit}


def logit_difference(right: int, wrong: int, mask: int = 0) -> Metric:
    """A metric: logit of token id ``right`` minus that of ``wrong`` at the corrupted text's mask number ``mask``."""
    return lambda logits: logits[mask, right] - logits[mask, wrong]


class Sweep(NamedTuple):
    """What :func:`sweep` and :func:`attribution` return.

    values: (L, n) the metric with each slice patched (attribution: its estimate), n positions or heads;
    clean, corrupted: the metric of the two runs unpatched; names: the point each row patched.
    ``normalized`` puts the corrupted run at 0 and the clean one at 1.
    """

    values: Tensor
    clean: float
    corrupted: float
    names: list[str]
    over: str

    @property
    def normalized(self) -> Tensor:
        return (self.values - self.corrupted) / (self.clean - self.corrupted)


SWEEP_POINTS = {"positions": "layer.{i}.output", "heads": "layer.{i}.attention.context"}


def _runs(clean_text: str, corrupted_text: str, m: Model) -> tuple[Recording, Recording]:
    clean, corrupted = trace(clean_text, m), trace(corrupted_text, m)
    if clean.mask_positions != corrupted.mask_positions:
        raise InputError(f"the clean text has [MASK] at {clean.mask_positions} and the corrupted one at "
                         f"{corrupted.mask_positions}; the metric compares the logits at the same masks")
    if len(clean.tokens) != len(corrupted.tokens):
        raise InputError(f"the clean text has {len(clean.tokens)} tokens and the corrupted one {len(corrupted.tokens)}; "
                         "patching compares the same positions, so make them the same length in tokens")
    if not corrupted.mask_positions:
        raise InputError("the corrupted text has no [MASK]: the metric reads the MLM logits at its masks")
    return clean, corrupted


def sweep(clean_text: str, corrupted_text: str, model: Model | str | Path, metric: Metric, *,
          over: str = "positions", name: str | None = None, progress: bool = True) -> Sweep:
    """Patch the clean run into the corrupted one a slice at a time; the metric for every (layer, slice).

    over: ``"positions"`` (each position of ``layer.{i}.output``: L x S) or ``"heads"`` (each head of
    ``layer.{i}.attention.context``: L x nh); name: another point template with ``{i}`` for the layer
    (e.g. ``"layer.{i}.attention.output"``). metric: :data:`Metric` (e.g. :func:`logit_difference`).
    Each value equals running the corrupted text with :func:`patch` at that one slice (tests hold it to 1e-5).
    """
    m = get_model(model)
    require_tokenizer(m, "sweep"), require_mlm_head(m, "sweep")
    if over not in SWEEP_POINTS:
        raise InputError(f"over must be 'positions' or 'heads', got {over!r}")
    template = name or SWEEP_POINTS[over]
    if "{i}" not in template:
        raise InputError(f"name must be a point name with {{i}} where the layer goes, e.g. {SWEEP_POINTS[over]!r}; got {template!r}")
    L = m.config.num_hidden_layers
    names = [template.format(i=i) for i in range(L)]
    check_edits(dict.fromkeys(names, lambda x, p: x), m.config)
    clean, corrupted = _runs(clean_text, corrupted_text, m)
    with torch.no_grad():
        runs = [metric(r["mlm.logits"].float()).item() for r in (clean, corrupted)]
    params, where = m.params, torch.tensor(corrupted.mask_positions, device=m.device)
    keep = torch.ones_like(corrupted.input_ids)  # (1, S): one text, no padding
    if m.config.is_decoder:
        keep = causal_keep_mask(keep, keep.shape[1])  # (1, S, S)
    mask = extended_mask(keep, corrupted["embeddings.output"].dtype)
    rows = []
    layers = range(L)
    if progress:
        from tqdm import tqdm

        layers = tqdm(layers, desc=f"patching {over}", unit="layer", leave=False)
    with torch.no_grad():
        for i in layers:
            x = corrupted[f"layer.{i - 1}.output"] if i else corrupted["embeddings.output"]  # (1, S, H): below the patch, once
            source = clean[names[i]]
            if over == "heads" and source.dim() != 4:
                raise InputError(f"{names[i]} is not split into heads; sweep heads at layer.{{i}}.attention.q|k|v|context")
            n = source.shape[1] if over == "heads" else source.shape[2 if source.dim() == 4 else 1]  # heads or positions
            h = _patched_layers(params, x, mask, i, names[i], source, n, over)  # (n, S, H)
            logits = mlm_head(params, h[:, where])  # (n, N, V)
            rows.append(torch.stack([metric(lg.float()) for lg in logits]).cpu())
    return Sweep(torch.stack(rows), runs[0], runs[1], names, over)


def _patched_layers(params, x: Tensor, mask: Tensor, i: int, name: str, source: Tensor, n: int, over: str) -> Tensor:
    """Layers i .. L-1 on n copies of ``x`` (1, S, H), copy c with slice c of ``name`` patched from ``source``:
    the patched slices of one layer as one batch. Returns the last hidden states (n, S, H)."""
    c = torch.arange(n, device=x.device)

    def edit(t: Tensor, point: Point) -> Tensor:  # t: (n, ...) copies; copy c takes the clean slice c
        out = t.clone()
        if over == "heads":
            out[c, c] = source[0].to(t.dtype)[c]  # (n, nh, S, hd): head c of copy c
        elif t.dim() == 4:
            out[c, :, c] = source[0, :, c].to(t.dtype).transpose(0, 1)  # (n, nh, S, ...): position c of copy c
        else:
            out[c, c] = source[0, c].to(t.dtype)  # (n, S, X): position c of copy c
        return out

    h = x.expand(n, *x.shape[1:])
    L = params.config.num_hidden_layers
    for j in range(i, L):
        points = Trace(prefix=f"layer.{j}.", edits={name: edit}, keep=False) if j == i else Trace(keep=False)
        h = layer(params.layer(j), h, mask, impl="sdpa", trace=points).hidden  # eager where an edit needs the weights
    return h


def attribution(clean_text: str, corrupted_text: str, model: Model | str | Path, metric: Metric, *,
                over: str = "positions", name: str | None = None) -> Sweep:
    """:func:`sweep`'s map estimated to first order from one forward and one backward pass of the
    corrupted run: value = corrupted + sum over the slice of (clean - corrupted) * d metric / d activation.
    Compare with the exact sweep by ``torch.corrcoef`` of the two ``values`` (:func:`correlation`)."""
    m = get_model(model)
    require_tokenizer(m, "attribution"), require_mlm_head(m, "attribution")
    if over not in SWEEP_POINTS:
        raise InputError(f"over must be 'positions' or 'heads', got {over!r}")
    template = name or SWEEP_POINTS[over]
    names = [template.format(i=i) for i in range(m.config.num_hidden_layers)]
    clean, corrupted = _runs(clean_text, corrupted_text, m)
    kept: dict[str, Tensor] = {}

    def start(x: Tensor, point: Point) -> Tensor:  # the graph starts at the word embeddings
        return x.detach().requires_grad_(True)

    def hold(x: Tensor, point: Point) -> Tensor:
        x.retain_grad()
        kept[point.name] = x
        return x

    enc = m.tokenizer([corrupted_text])
    points = Trace(keep=False, edits=check_edits({"embeddings.word": start, **dict.fromkeys(names, hold)}, m.config))
    with torch.enable_grad():
        out = encoder(m.params, enc.input_ids.to(m.device), enc.attention_mask.to(m.device),
                      enc.token_type_ids.to(m.device), impl="eager", trace=points)
        logits = mlm_head(m.params, out.last_hidden_state[0, corrupted.mask_positions])  # (N, V)
        metric(logits.float()).backward()
    with torch.no_grad():
        rows = []
        for n in names:
            delta = (clean[n] - kept[n].detach()) * kept[n].grad  # same shape as the point
            if over == "heads":
                rows.append(delta[0].sum(dim=(1, 2)))  # (nh,)
            elif delta.dim() == 4:
                rows.append(delta[0].sum(dim=(0, 2)))  # (S,)
            else:
                rows.append(delta[0].sum(dim=-1))  # (S,)
        runs = [metric(r["mlm.logits"].float()).item() for r in (clean, corrupted)]
    return Sweep(torch.stack(rows).cpu() + runs[1], runs[0], runs[1], names, over)


def correlation(a: Sweep, b: Sweep) -> float:
    """Pearson's r between two maps (e.g. :func:`attribution` against the exact :func:`sweep`)."""
    return torch.corrcoef(torch.stack([a.values.flatten(), b.values.flatten()]))[0, 1].item()
