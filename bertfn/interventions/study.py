"""Patching studies: sweeps and attribution over one clean/corrupted pair or a dataset of them.

    study = bertfn.interventions.sweep(cleans, corrupteds, model, metric, over="heads")
    study.per_example          # (P, L, nh): each pair's map
    study.values               # (L, nh): their mean
    study.interval(0.95)       # (low, high): Student's t interval of the mean, per cell

:func:`sweep` patches the clean run into the corrupted one a slice at a time (causal tracing, Meng et al.
2022; Vig et al. 2020): every position of each layer's output, every head's context, every feed-forward
neuron, or every head at every position (:data:`~bertfn.interventions.copies.OVER`), and measures a
*metric of the run* for each (layer, slice). Each value equals running the corrupted text with
:func:`~bertfn.interventions.patch` at that one slice; bertfn/interventions/copies.py says what it
reuses, bertfn/interventions/pairs.py how a pair is made ready. The pairs run one after another, each
pair's patched copies in batches of up to ``copies.MAX_ROWS`` rows (one pair of 100 tokens already fills
them several times over). :func:`attribution` estimates the same map from one forward and one backward
pass of the corrupted texts, as padded batches (attribution patching, Nanda 2023): the change a patch
makes is about ``(clean - corrupted) . d metric / d activation`` summed over the slice.

A metric is ``metric(run) -> scalar tensor``, ``run`` the :class:`~bertfn.inspect.trace.Recording` of a
(patched) corrupted pass: ``run["mlm.logits"]`` (N, V) at the corrupted text's [MASK]s, a fine-tuned
head's outputs (``run["classifier.logits"]``, ``run["qa.start_logits"]``: the checkpoint's task head runs in
every run and every patched copy; :mod:`bertfn.interventions.head_metrics` reads a label, an entity, a span, and
with ``head=`` a label of a linear head stored beside the checkpoint's parts, on ``run["pooler"]``), or any other
point (``run["layer.6.output"][0, 5] @ probe``). bertfn finds which points it reads by running it on
the corrupted run, and keeps only those in the patched copies. Pairs may have any length each (the
two texts of one pair the same number of tokens); a map over positions then has NaN where a pair is
shorter than the longest, and the mean and interval at a cell use the pairs that have it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch

from ..checkpoint.model import Model
from ..errors import InputError
from ..inspect.trace import Recording
from ..model.recorder import check_edits
from ..tasks.runner import loaded
from .copies import OVER, patched_metrics, slice_shape
from .gradients import run_with_grad
from .pairs import pairs_of, prepared
from .patching import Metric
from .points import axes
from .stats import mean_interval

Tensor = torch.Tensor


@dataclasses.dataclass(frozen=True)
class Sweep:
    """What :func:`sweep` and :func:`attribution` return: each pair's map, and their mean.

    Attributes:
        per_example: (P, L, ...) the metric with each slice patched (attribution: its estimate), per pair;
            ``...`` is (S,) over positions, (nh,) heads, (I,) neurons, (nh, S) heads x positions; NaN where
            a pair has no such slice (a shorter pair).
        clean_runs: (P,) the metric of each clean run, unpatched.
        corrupted_runs: (P,) the metric of each corrupted run, unpatched.
        names: the point each row patched.
        over: "positions", "heads", "neurons" or "heads x positions".
    """

    per_example: Tensor
    clean_runs: Tensor
    corrupted_runs: Tensor
    names: list[str]
    over: str

    def __repr__(self) -> str:
        """What was patched, over how many pairs, and the unpatched runs' means; not the tensors."""
        P, shape = self.per_example.shape[0], " x ".join(map(str, self.per_example.shape[1:]))
        return (f"Sweep(over {self.over} of {self.names[0]} .. {self.names[-1]}, {P} pair{'s' * (P > 1)}: "
                f"{shape} map per pair in .per_example, their mean in .values; clean {self.clean:.4g}, "
                f"corrupted {self.corrupted:.4g})")

    @property
    def values(self) -> Tensor:
        """(L, ...) the mean map over the pairs (one pair: its map)."""
        return mean_interval(self.per_example)[0] if len(self.per_example) > 1 else self.per_example[0]

    @property
    def clean(self) -> float:
        """The clean runs' mean metric."""
        return self.clean_runs.mean().item()

    @property
    def corrupted(self) -> float:
        """The corrupted runs' mean metric."""
        return self.corrupted_runs.mean().item()

    @property
    def normalized(self) -> Tensor:
        """The mean map with the corrupted runs' mean at 0 and the clean runs' at 1; NaN where the two means are equal
        (no scale to put the map on: a pair of texts the metric does not tell apart)."""
        gap = self.clean - self.corrupted
        return (self.values - self.corrupted) / (gap if gap != 0 else float("nan"))

    @property
    def normalized_per_example(self) -> Tensor:
        """(P, L, ...) each pair's map with its own corrupted run at 0 and its clean run at 1 (NaN where they are equal)."""
        shape = (-1,) + (1,) * (self.per_example.dim() - 1)
        low, high = self.corrupted_runs.view(shape), self.clean_runs.view(shape)
        gap = high - low
        return (self.per_example - low) / torch.where(gap != 0, gap, float("nan"))

    @property
    def count(self) -> Tensor:
        """(L, ...) how many pairs have each cell."""
        return (~torch.isnan(self.per_example)).sum(dim=0)

    def interval(self, level: float = 0.95) -> tuple[Tensor, Tensor]:
        """Student's t confidence interval of the mean map, per cell (:mod:`bertfn.interventions.stats`).

        Args:
            level: the coverage, e.g. 0.95.

        Returns:
            ``(low, high)``, each (L, ...); NaN where fewer than two pairs have the cell.
        """
        _, low, high = mean_interval(self.per_example, level)
        return low, high


def _setup(clean, corrupted, model, metric, over, name, layers, what):
    """Checks common to :func:`sweep` and :func:`attribution`: the pairs, the model, the points, the layers."""
    pairs = pairs_of(clean, corrupted, what)
    m = loaded(what, model).model
    if over not in OVER:
        raise InputError(f"over must be one of {', '.join(map(repr, OVER))}, got {over!r}")
    template = name or OVER[over]
    if not isinstance(template, str) or "{i}" not in template:
        raise InputError(f"name must be a point name with {{i}} where the layer goes, e.g. {OVER[over]!r}; got {template!r}")
    L = m.config.num_hidden_layers
    layers = list(range(L)) if layers is None else [layers] if isinstance(layers, int) else list(layers)
    if not layers or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < L for i in layers):
        raise InputError(f"layers must be layer numbers from 0 to {L - 1} (this model has {L}), got {layers!r}")
    layers = sorted(set(layers))
    names = [template.format(i=i) for i in range(L)]
    check_edits({names[i]: lambda x, point: x for i in layers}, m.config)
    return pairs, m, names, layers


def _check_axis(clean: Recording, names: list[str], layers: list[int], over: str) -> None:
    for i in layers:
        if not slice_shape(over, names[i], clean[names[i]]):
            hint = {"heads": "heads are split at layer.{i}.attention.q|k|v|scores|probs|context",
                    "heads x positions": "heads are split at layer.{i}.attention.q|k|v|scores|probs|context",
                    "neurons": "neurons are the last axis of (B, S, X) points such as layer.{i}.ffn.intermediate",
                    "positions": "it has one vector per text"}[over]
            raise InputError(f"{names[i]} has no {over.split()[0]} to patch one at a time ({hint})")


def _stack(maps: list[list[Tensor]], clean: list[float], corrupted: list[float], names, over) -> Sweep:
    """Per-pair maps (each a list of per-layer rows) padded with NaN to the largest, as one :class:`Sweep`."""
    rows = [torch.stack(layers_) for layers_ in maps]  # each (L', ...)
    shape = [max(r.shape[d] for r in rows) for d in range(rows[0].dim())]
    out = torch.full((len(rows), *shape), float("nan"), dtype=torch.float64)
    for p, r in enumerate(rows):
        out[(p, *(slice(0, s) for s in r.shape))] = r
    return Sweep(out.float(), torch.tensor(clean), torch.tensor(corrupted), names, over)


def sweep(clean: str | Sequence[str], corrupted: str | Sequence[str], model: Model | str | Path, metric: Metric, *,
          over: str = "positions", name: str | None = None, layers: int | Sequence[int] | None = None,
          progress: bool = True) -> Sweep:
    """Patch each clean run into its corrupted one a slice at a time; the metric for every (pair, layer, slice).

    Each value equals running the corrupted text with :func:`~bertfn.interventions.patch` at that one
    slice (tests hold it to 1e-5).

    Args:
        clean: the clean text, or a list of them (a dataset of pairs).
        corrupted: the corrupted text(s): each as many tokens as its clean text (pairs may differ).
        model: a loaded :class:`Model`, a folder or a hub id.
        metric: ``metric(run) -> scalar tensor`` (:mod:`bertfn.interventions.gradients`), e.g.
            :func:`~bertfn.interventions.logit_difference`, :func:`~bertfn.interventions.label_difference` (a
            classifier's) or ``lambda run: run["layer.6.output"][0, 3] @ w``.
        over: ``"positions"`` (each position of ``layer.{i}.output``), ``"heads"`` (each head of
            ``layer.{i}.attention.context``), ``"neurons"`` (each of ``layer.{i}.ffn.intermediate``'s I
            neurons, at every position) or ``"heads x positions"`` (each head at each position).
        name: another point template with ``{i}`` for the layer (e.g. ``"layer.{i}.attention.output"``).
        layers: the layers to patch (None: all); the rows of the map follow them.
        progress: show a progress bar (over the pairs; for one pair, over its layers).

    Returns:
        The study: ``per_example`` (P, L, ...), ``values`` its mean, ``interval()``.

    Raises:
        InputError: bad pairs, ``over``, ``name``, ``layers`` or metric, or texts that cannot be compared.
        MissingPartError: a model without a tokenizer, or without the MLM head or the task head a metric reads.
    """
    pairs, m, names, layers = _setup(clean, corrupted, model, metric, over, name, layers, "sweep")
    maps, cleans, corrupteds = [], [], []
    each = pairs
    if progress and len(pairs) > 1:  # a bar over the pairs; for one pair, over its layers
        from tqdm import tqdm

        each = tqdm(pairs, desc=f"patching {over}", unit="pair", leave=False)
    for clean_text, corrupted_text in each:
        c, x, reads = prepared(clean_text, corrupted_text, m, metric, "sweep", [names[i] for i in layers])
        _check_axis(c, names, layers, over)
        with torch.no_grad():
            cleans.append(float(metric(c)))
            corrupteds.append(float(metric(x)))
            maps.append(patched_metrics(m.params, c, x, names, over, metric, reads, layers,
                                        progress and len(pairs) == 1))
    return _stack(maps, cleans, corrupteds, [names[i] for i in layers], over)


def attribution(clean: str | Sequence[str], corrupted: str | Sequence[str], model: Model | str | Path,
                metric: Metric, *, over: str = "positions", name: str | None = None,
                layers: int | Sequence[int] | None = None) -> Sweep:
    """:func:`sweep`'s maps estimated to first order from one forward and one backward pass of the corrupted texts.

    value = corrupted + sum over the slice of (clean - corrupted) * d metric / d activation. The corrupted
    texts run as padded batches (:func:`~bertfn.interventions.gradients.run_with_grad`). Compare with the
    exact sweep by :func:`~bertfn.interventions.correlation`.

    Args:
        clean: the clean text, or a list of them.
        corrupted: the corrupted text(s), as in :func:`sweep`.
        model: a loaded :class:`Model`, a folder or a hub id.
        metric: ``metric(run) -> scalar tensor``, as in :func:`sweep`.
        over: as in :func:`sweep`.
        name: as in :func:`sweep`.
        layers: as in :func:`sweep`.

    Returns:
        The estimated maps, per pair, and their mean.

    Raises:
        InputError: as :func:`sweep`.
        MissingPartError: as :func:`sweep`.
    """
    pairs, m, names, layers = _setup(clean, corrupted, model, metric, over, name, layers, "attribution")
    held = [names[i] for i in layers]
    ready = [prepared(clean_text, corrupted_text, m, metric, "attribution", held) for clean_text, corrupted_text in pairs]
    for c, _, _ in ready:
        _check_axis(c, names, layers, over)
    reads = set().union(*(r for _, _, r in ready))
    grads = run_with_grad(m, [x for _, x in pairs], metric, held, keep=reads)  # the corrupted texts, padded batches
    maps, cleans, corrupteds = [], [], []
    with torch.no_grad():
        for (c, _, _), g in zip(ready, grads):
            cleans.append(float(metric(c)))
            corrupteds.append(g.value)
            maps.append([_slice_sums((c[n] - g.activations[n]) * g.grads[n], n, over).double() + g.value for n in held])
    return _stack(maps, cleans, corrupteds, held, over)


def _slice_sums(delta: Tensor, name: str, over: str) -> Tensor:
    """``delta`` (1, ...) summed over everything but the slice axes of ``over``: (S,), (nh,), (I,) or (nh, S)."""
    where = axes(name)
    keep = {"positions": [where["positions"]], "heads": [1], "neurons": [delta.dim() - 1],
            "heads x positions": [1, 2]}[over]
    return delta[0].sum(dim=[d - 1 for d in range(1, delta.dim()) if d not in keep]) if delta.dim() > len(keep) + 1 \
        else delta[0]


def correlation(a: Sweep | Tensor, b: Sweep | Tensor) -> float:
    """Pearson's r between two mean maps (e.g. :func:`attribution` against the exact :func:`sweep`).

    Cells that either map lacks (NaN: positions only some pairs have) are left out.

    Args:
        a: one map: a :class:`Sweep` (its ``values``) or a tensor.
        b: the other, of the same shape.

    Returns:
        r, a float.

    Raises:
        InputError: maps of different shapes, or something that is neither a Sweep nor a tensor.
    """
    maps = []
    for v in (a, b):
        if not isinstance(v, (Sweep, Tensor)):
            raise InputError(f"correlation compares two maps, each a Sweep (iv.sweep, iv.attribution) or a tensor, "
                             f"got {type(v).__name__}")
        maps.append(v.values if isinstance(v, Sweep) else v)
    if maps[0].shape != maps[1].shape:
        raise InputError(f"correlation compares maps of one shape, got {tuple(maps[0].shape)} and {tuple(maps[1].shape)}")
    x, y = (v.detach().float().flatten().cpu() for v in maps)
    both = ~(torch.isnan(x) | torch.isnan(y))
    return torch.corrcoef(torch.stack([x[both], y[both]]))[0, 1].item()
