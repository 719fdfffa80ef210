"""The engine under :func:`~bertfn.interventions.sweep`: many copies of one corrupted run, each patched at one slice.

A sweep over one clean/corrupted pair patches, for every layer i and every slice c of the point at
layer i (a position, a head, a neuron, a head at a position: :data:`OVER`), a copy of the corrupted
run with the clean run's slice, and measures a metric of what that copy computes. Each copy equals
running the corrupted text with :func:`~bertfn.interventions.patch` at that one slice; what does not
change is not run again:

* the layers below a patch: a copy patched at layer i starts from the corrupted run's input of layer i;
* the copies of one layer run as one batch (at most :data:`MAX_ROWS` rows: more slices than that at a
  layer are cut into chunks);
* from layer i on, the copies patched at layer i join those patched below it, and the batch goes
  through each layer above as one, until it holds :data:`MAX_ROWS` rows; then it runs to the top and a
  new batch starts;
* the heads run on top of the copies where the metric reads them: the MLM head at the masks, the pooler,
  and a fine-tuned checkpoint's task head (:func:`~bertfn.inspect.batch.checkpoint_head`, the one
  :func:`bertfn.trace` runs: a classifier's, a tagger's, a reader's);
* where the metric reads only what is computed at a few positions, the MLM head's outputs (``mlm.logits``,
  ``mlm.transform``) at the masks, or the pooler's and a classifier's that reads the first token alone
  (``pooler``, ``classifier.*``: :func:`read_alone`), the last layer runs its keys and values at every
  position and the rest at those positions alone (BERT's layer: a member's own, ESM-2's or ModernBERT's, runs
  whole), and the heads there alone. Where it reads other points, the copies' passes keep exactly those (at
  layers below a copy's patch it reads the corrupted run's, which are the same).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import torch

from ..inspect.batch import checkpoint_head
from ..inspect.trace import Recording
from ..model.layout import Segments, causal_keep_mask, extended_mask
from ..model.dry_run import task_points
from ..model.encoder import layer
from ..model.family import family_of
from ..model.heads import mlm_head, pooler
from ..model.point_names import layer_input, layer_of
from ..model.recorder import WEIGHT_POINTS, Point, Trace
from ..model.task_heads import TASKS, task_head
from .points import axes, per_head

Tensor = torch.Tensor

OVER = {"positions": "layer.{i}.output", "heads": "layer.{i}.attention.context",
        "neurons": "layer.{i}.ffn.intermediate", "heads x positions": "layer.{i}.attention.context"}
"""What a sweep patches one slice at a time, and the point it patches by default (``{i}``: the layer)."""

MLM_POINTS = frozenset({"mlm.logits", "mlm.transform"})

TASK_HEAD_POINTS = ("classifier.", "qa.")
"""The starts of the task heads' point names (:mod:`bertfn.model.task_heads`)."""

MAX_ROWS = 2048
"""How many rows (copies x tokens) a batch of copies grows to before it runs to the top.

A product on a few hundred rows runs well below the speed it reaches on a thousand or more, so the
copies patched at layer i join those patched below it. Past this many rows the batch is run through
the layers above and a new one starts (memory: a layer's intermediate holds ``4 x MAX_ROWS x H`` floats)."""


def slice_shape(over: str, name: str, x: Tensor) -> tuple[int, ...]:
    """The shape of one layer's row of the map: how many slices the tensor ``x`` at ``name`` has.

    Args:
        over: a key of :data:`OVER`.
        name: the point's full name.
        x: the tensor recorded there, (1, ...).

    Returns:
        (S,) for positions, (nh,) for heads, (X,) for neurons, (nh, S) for heads x positions; () where
        the point has no such axis.
    """
    where = axes(name)
    if over == "positions":
        return () if where["positions"] is None else (x.shape[where["positions"]],)
    if over == "neurons":
        return () if where["neurons"] is None or per_head(name) else (x.shape[-1],)
    if not per_head(name):
        return ()
    return (x.shape[1],) if over == "heads" else (x.shape[1], x.shape[2])


def write_slices(out: Tensor, rows: Tensor, c: Tensor, source: Tensor, over: str, name: str) -> None:
    """In place: row ``rows[j]`` of ``out`` takes the clean ``source``'s slice ``c[j]``.

    Args:
        out: (A, ...) the copies' tensor at ``name``.
        rows: (n,) the rows to patch.
        c: (n,) the flat slice index each takes (for heads x positions: head * S + position).
        source: (1, ...) the clean run's tensor at ``name``.
        over: a key of :data:`OVER`.
        name: the point's full name.
    """
    src = source[0].to(out.dtype)  # the clean run, without its batch axis
    if over == "heads":
        out[rows, c] = src[c]  # (n, S, ...): head c
    elif over == "heads x positions":
        S = src.shape[1]
        out[rows, c // S, c % S] = src[c // S, c % S]  # (n, ...): head c // S at position c % S
    elif over == "positions" and per_head(name):
        out[rows, :, c] = src[:, c].transpose(0, 1)  # (nh, n, ...) -> (n, nh, ...): position c of every head
    elif over == "positions":
        out[rows, c] = src[c]  # (n, X): position c
    else:
        out[rows, :, c] = src[:, c].transpose(0, 1)  # (S, n) -> (n, S): neuron c at every position


def read_alone(reads: frozenset[str], corrupted: Recording) -> list[int] | None:
    """The positions whose last hidden states are all that the points ``reads`` depend on, or None (every position).

    The corrupted text's masks for the MLM head's outputs; the first position for the pooler's and those of a task
    head that reads it alone (a classifier on ``[CLS]`` or ``<s>``: its ``first_only``); None for anything else.

    Args:
        reads: the points the metric reads.
        corrupted: the corrupted run (its masks, its model's head).
    """
    if reads <= MLM_POINTS:
        return corrupted.mask_positions
    first = {"pooler"}
    m, cfg = corrupted.model, corrupted.config
    if m is not None and m.head.task in TASKS:
        head = task_head(cfg, m.head.task)
        if head.reads_first(cfg):
            first.update(task_points(cfg, m.head.task))
    return [0] if reads <= first else None


class Kept(dict):
    """A store that keeps only the points ``names`` (a :class:`Trace` writes every point into it).

    Args:
        names: the full names to keep.
    """

    def __init__(self, names: Collection[str]):
        super().__init__()
        self.names = names

    def __setitem__(self, name: str, x: Tensor) -> None:
        if name in self.names:
            super().__setitem__(name, x)


def patched_metrics(params, clean: Recording, corrupted: Recording, names: list[str], over: str,
                    metric: Callable[[Recording], Tensor], reads: Collection[str], layers: list[int],
                    progress: bool = False) -> list[Tensor]:
    """The metric of every copy of the corrupted run patched at one slice of ``names[i]``, per layer.

    Args:
        params (Params): the model's root params.
        clean: the clean run, recorded whole (:func:`bertfn.trace`'s names).
        corrupted: the corrupted run, of as many tokens.
        names: the point patched at each layer (``names[i]`` at layer i), all layers.
        over: a key of :data:`OVER`.
        metric: ``metric(run) -> scalar``; run is a :class:`Recording` holding the points in ``reads``.
        reads: the points the metric reads.
        layers: the layers to patch, in increasing order.
        progress: show a progress bar over them.

    Returns:
        Per layer patched, its values: a tensor of :func:`slice_shape` (float64, on the CPU).
    """
    cfg = params.config
    L = cfg.num_hidden_layers
    family = family_of(cfg)  # ESM-2's and ModernBERT's own layer and final LayerNorm, where the member has them
    reads = frozenset(reads)
    alone = read_alone(reads, corrupted)  # the last layer and the heads at these positions alone (None: all)
    where = torch.tensor(alone if alone is not None else corrupted.mask_positions, dtype=torch.long,
                         device=corrupted.input_ids.device)  # (N,)
    at_few = alone is not None
    keep = torch.ones_like(corrupted.input_ids)  # (1, S): one text, no padding
    if cfg.is_decoder:
        keep = causal_keep_mask(keep, keep.shape[1])  # (1, S, S)
    first = layer_input(cfg)
    mask = extended_mask(keep, corrupted[first].dtype)
    S = corrupted.input_ids.shape[1]
    impl = "eager" if any(r.rpartition(".")[2] in WEIGHT_POINTS for r in reads) else "sdpa"
    shapes = {i: slice_shape(over, names[i], clean[names[i]]) for i in layers}
    values = {i: torch.empty(shapes[i], dtype=torch.float64).flatten() for i in layers}
    group: dict = {"active": None, "next": 0, "members": [], "store": Kept(reads)}

    def run_layer(i: int, h: Tensor, edits: dict | None = None) -> Tensor:
        if at_few and i == L - 1 and not edits and family.layer is None:  # the fast path's last layer, there alone
            return _last_layer_at(params, h, where)
        points = Trace(group["store"], prefix=f"layer.{i}.", edits=edits, keep=not at_few, optional=tuple(reads))
        if family.layer is not None:  # a member's own layer (pre-LN, rotary), which the fast path lacks
            out = family.layer(params.layer(i), h, mask, index=i, impl=impl, trace=points).hidden
        else:
            out = layer(params.layer(i), h, mask, impl=impl, trace=points).hidden
        return out[:, where] if at_few and i == L - 1 else out  # copies patched in the last layer: there alone

    def flush() -> None:  # the group's batch to the top, then each copy's metric
        h = group["active"]
        for j in range(group["next"], L):
            h = run_layer(j, h)
        store = group["store"]
        if family.final_norm is not None:  # pre-LN members: the LayerNorm after the last layer
            h = family.final_norm(params.scope("bert"), h, Trace(store))
        if reads & MLM_POINTS:
            mlm_head(params, h if at_few else h[:, where], trace=Trace(store))  # (copies, N, V)
        if any(r.startswith(TASK_HEAD_POINTS) or r == "pooler" for r in reads):  # (copies, ...): one text each
            checkpoint_head(corrupted.model, h, torch.ones(h.shape[:2], dtype=torch.long, device=h.device), Trace(store))
        if "pooler" in reads and "pooler" not in store:  # a masked LM's pooler (AntiBERTy's extra heads read it)
            pooler(params, h, Trace(store))
        for k, c, offset in group["members"]:
            for j, flat in enumerate(c.tolist()):
                row = offset + j
                run = {r: _value(r, k, row, store, corrupted) for r in reads}
                values[k][flat] = float(metric(_as_run(run, corrupted)))
        group.update(active=None, members=[], store=Kept(reads))

    if progress:
        from tqdm import tqdm

        layers = tqdm(layers, desc=f"patching {over}", unit="layer", leave=False)
    for i in layers:
        base = corrupted[f"layer.{i - 1}.output"] if i else corrupted[first]  # (1, S, H): below the patch, once
        n = 1
        for s in shapes[i]:
            n *= s
        step = max(1, MAX_ROWS // S)
        for start in range(0, n, step):
            c = torch.arange(start, min(n, start + step), device=base.device)  # the slices of this chunk
            if group["active"] is not None and (group["next"] != i or (at_few and i == L - 1) or
                                                (group["active"].shape[0] + len(c)) * S > MAX_ROWS):
                flush()  # the copies patched below to the top (at those positions alone in the last layer)
            new = base.expand(len(c), *base.shape[1:])
            batch = new.contiguous() if group["active"] is None else torch.cat([group["active"], new])
            rows = torch.arange(batch.shape[0] - len(c), batch.shape[0], device=base.device)
            group["members"].append((i, c, batch.shape[0] - len(c)))

            def edit(t: Tensor, point: Point, rows=rows, c=c, name=names[i]) -> Tensor:
                out = t.clone()
                write_slices(out, rows, c, clean[name], over, name)
                return out

            group["active"] = run_layer(i, batch, {names[i]: edit})
            group["next"] = i + 1
        if group["active"] is not None and (group["next"] == L or group["active"].shape[0] * S >= MAX_ROWS):
            flush()
    if group["active"] is not None:
        flush()
    return [values[i].view(shapes[i]) for i in layers]


def _value(name: str, patched_at: int, row: int, store: dict, corrupted: Recording) -> Tensor:
    """What copy ``row`` of a group (patched at layer ``patched_at``) computed at point ``name``.

    Below its patch, the corrupted run's (the same); from there on, its row of the batch.
    """
    at = layer_of(name)
    if name in store and (at is None or at >= patched_at):
        x = store[name]
        return x[row] if name.startswith("mlm.") else x[row:row + 1]  # mlm.* (N, V) as trace records them
    return corrupted[name]


def _as_run(tensors: dict[str, Tensor], corrupted: Recording) -> Recording:
    """One copy's points as a :class:`Recording` of the corrupted text, what a metric reads."""
    return Recording(corrupted.tokens, corrupted.input_ids, corrupted.mask_positions, tensors, corrupted.config,
                     corrupted.model)


def _last_layer_at(params, h: Tensor, where: Tensor) -> Tensor:
    """The last layer on the copies ``h``, at the positions ``where`` alone (the masks, or the first token).

    BERT's layer on the segments layout (:class:`~bertfn.model.layout.Segments`): the copies laid end to end,
    queries, keys and values at every position, the output projection and feed-forward at ``where``.

    Args:
        params (Params): the model's root params.
        h: (c, S, H) the copies.
        where: (N,) the positions.

    Returns:
        (c, N, H).
    """
    p = params.layer(params.config.num_hidden_layers - 1)
    c, S, H = h.shape
    rows = (torch.arange(c, device=h.device)[:, None] * S + where[None, :]).flatten()  # (c * N,): end to end
    return layer(p, h.reshape(1, c * S, H), Segments((S,) * c, read=rows)).hidden.view(c, len(where), H)
