"""Activation patching: a clean and a corrupted input, and the clean activation put into the corrupted run.

    clean = bertfn.trace("When in Rome, do as the [MASK] do.", model)
    edits = bertfn.interventions.patch(clean, "layer.5.output", positions=4)
    bertfn.fill_mask("When in Paris, do as the [MASK] do.", model, edits=edits)

:func:`patch` makes the edit; :func:`sweep` patches one slice at a time (each position of each layer's
output, or each head of each layer's context) and measures a metric of the MLM logits at the
corrupted text's masks, for a layer x position or layer x head map (causal tracing, Meng et al. 2022;
Vig et al. 2020). It reuses what does not change: the clean and the corrupted runs once, the layers
below a patch once, and all the slices of one layer as one batch; from there on the copies patched at
every layer so far go through each layer above as one batch (up to :data:`MAX_ROWS` rows), and the
last layer runs its keys and values at every position but the rest at the masks alone.
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
from ..fast.unpadded import unpadded_attention, unpadded_feed_forward
from ..inspect.trace import Recording
from ..model.attention import causal_keep_mask, extended_mask
from ..model.encoder import encoder, layer
from ..model.heads import mlm_head
from ..model.recorder import Edit, Point, Trace, check_edits, layer_input
from .points import select

Tensor = torch.Tensor
Metric = Callable[[Tensor], Tensor]
"""``metric(logits) -> scalar tensor``: logits (N, V) at the corrupted text's N [MASK]s."""


def patch(clean: Recording | Mapping[str, Tensor], name: str, *, positions: int | Sequence[int] | None = None,
          heads: int | Sequence[int] | None = None, neurons: int | Sequence[int] | None = None) -> dict[str, Edit]:
    """An edit putting the clean run's tensor at point ``name`` into the run it is passed to.

    The corrupted input must have the clean one's number of tokens (and batch).

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
    """A metric: logit of token id ``right`` minus that of ``wrong`` at the corrupted text's mask number ``mask``.

    Args:
        right: the token id whose logit counts positively.
        wrong: the token id whose logit is subtracted.
        mask: which of the corrupted text's masks, from 0.

    Returns:
        ``metric(logits) -> scalar tensor``.
    """
    return lambda logits: logits[mask, right] - logits[mask, wrong]


class Sweep(NamedTuple):
    """What :func:`sweep` and :func:`attribution` return.

    ``normalized`` puts the corrupted run at 0 and the clean one at 1.

    Attributes:
        values: (L, n) the metric with each slice patched (attribution: its estimate), n positions or heads.
        clean: the metric of the clean run, unpatched.
        corrupted: the metric of the corrupted run, unpatched.
        names: the point each row patched.
        over: "positions" or "heads".
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
    """The clean and the corrupted text recorded as :func:`~bertfn.inspect.trace.trace` records each.

    Run as one batch of two (the weights are read once; the two have the same number of tokens, so
    nothing is padded).

    Args:
        clean_text: the clean text.
        corrupted_text: the corrupted text.
        m: the model.

    Raises:
        InputError: an empty text, texts of different lengths in tokens or with masks at different
            positions, or no [MASK].
    """
    for what, text in (("the clean text", clean_text), ("the corrupted text", corrupted_text)):
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{what} must be a sentence (a non-empty string), got {text!r:.60}")
    tok = m.tokenizer
    enc = tok([clean_text, corrupted_text])
    ids = enc.input_ids.to(m.device)  # (2, S)
    lengths = enc.attention_mask.sum(dim=1).tolist()
    masks = [(ids[b, :lengths[b]] == tok.mask_token_id).nonzero()[:, 0].tolist() for b in range(2)]
    if masks[0] != masks[1]:
        raise InputError(f"the clean text has [MASK] at {masks[0]} and the corrupted one at "
                         f"{masks[1]}; the metric compares the logits at the same masks")
    if lengths[0] != lengths[1]:
        raise InputError(f"the clean text has {lengths[0]} tokens and the corrupted one {lengths[1]}; "
                         "patching compares the same positions, so make them the same length in tokens")
    if not masks[1]:
        raise InputError("the corrupted text has no [MASK]: the metric reads the MLM logits at its masks")
    record = Trace()
    with torch.no_grad():
        out = encoder(m.params, ids, enc.attention_mask.to(m.device), enc.token_type_ids.to(m.device),
                      impl="eager", trace=record)
        where = torch.tensor(masks[1], device=m.device)
        mlm_head(m.params, out.last_hidden_state[:, where], trace=record)  # (2, N, V)

    def one(b: int) -> Recording:  # text b's rows; mlm.* without the batch axis, as trace() records them
        tensors = {k: (v[b] if k.startswith("mlm.") else v[b:b + 1]) if v.shape[0] == 2 else v
                   for k, v in record.store.items()}
        return Recording(enc.tokens[b], ids[b:b + 1], masks[b], tensors, m.config, m)

    return one(0), one(1)


def sweep(clean_text: str, corrupted_text: str, model: Model | str | Path, metric: Metric, *,
          over: str = "positions", name: str | None = None, progress: bool = True) -> Sweep:
    """Patch the clean run into the corrupted one a slice at a time; the metric for every (layer, slice).

    Each value equals running the corrupted text with :func:`patch` at that one slice (tests hold it to 1e-5).

    Args:
        clean_text: the clean text.
        corrupted_text: the corrupted text, of as many tokens, with its [MASK]s where the clean one has them.
        model: a loaded :class:`Model`, a folder or a hub id (with its MLM head).
        metric: :data:`Metric` (e.g. :func:`logit_difference`).
        over: ``"positions"`` (each position of ``layer.{i}.output``: L x S) or ``"heads"`` (each head of
            ``layer.{i}.attention.context``: L x nh).
        name: another point template with ``{i}`` for the layer (e.g. ``"layer.{i}.attention.output"``).
        progress: show a progress bar over the layers.

    Returns:
        The map, (L, S) or (L, nh).

    Raises:
        InputError: a bad ``over`` or ``name``, or texts that cannot be compared (:func:`_runs`).
        MissingPartError: a model without a tokenizer or without the masked-LM head.
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
    first = layer_input(m.config)  # the embeddings' last point: layer 0's input
    mask = extended_mask(keep, corrupted[first].dtype)
    if over == "heads" and any(clean[n].dim() != 4 for n in names):
        raise InputError(f"{template} is not split into heads; sweep heads at layer.{{i}}.attention.q|k|v|context")
    counts = [clean[n].shape[1] if over == "heads" else clean[n].shape[2 if clean[n].dim() == 4 else 1]
              for n in names]  # heads or positions per layer
    ends = {}  # layer -> (n, N, H): the last hidden states at the masks, copy c patched at slice c of that layer
    layers = range(L)
    if progress:
        from tqdm import tqdm

        layers = tqdm(layers, desc=f"patching {over}", unit="layer", leave=False)
    with torch.no_grad():
        active, members = None, []  # copies patched below the current layer: (A, S, H), and (layer, n) of each group
        for i in layers:
            x = corrupted[f"layer.{i - 1}.output"] if i else corrupted[first]  # (1, S, H): below the patch, once
            new = x.expand(counts[i], *x.shape[1:])  # (n, S, H): the copies to patch at layer i
            if i == L - 1 and active is not None:  # the last layer: the copies patched below at the masks alone
                new = _patched_layer(params, new.contiguous(), mask, i, names[i], clean[names[i]], counts[i], over)[:, where]
                active = torch.cat([_layer(params, i, active, mask, where), new])  # (A + n, N, H)
            else:  # the copies patched below i and those patched at i through layer i as one batch
                batch = new.contiguous() if active is None else torch.cat([active, new])
                active = _patched_layer(params, batch, mask, i, names[i], clean[names[i]], counts[i], over)  # (A + n, S, H)
                if i == L - 1:
                    active = active[:, where]  # (n, N, H)
            members.append((i, counts[i]))
            if i == L - 1 or active.shape[0] * active.shape[1] >= MAX_ROWS:  # on to the top, then a new batch
                for j in range(i + 1, L):
                    active = _layer(params, j, active, mask, where)
                for (k, n), h in zip(members, active.split([n for _, n in members])):
                    ends[k] = h
                active, members = None, []
        logits = mlm_head(params, torch.cat([ends[i] for i in range(L)]))  # (L x n, N, V): the decoder's weights read once
        values = torch.stack([metric(lg.float()) for lg in logits]).cpu()
        rows = list(values.split(counts))
    return Sweep(torch.stack(rows), runs[0], runs[1], names, over)


MAX_ROWS = 2048
"""How many rows (copies x tokens) :func:`sweep` lets a batch grow to before it runs it to the top.

The copies patched at layer i join those patched below it, so that from layer i on they all go
through each layer as one batch: the same products, on more rows at a time (a product on a few
hundred rows runs well below the speed it reaches on a thousand or more). Past this many rows the
batch is run through the layers above and a new one starts (memory: a layer's intermediate holds
``4 x MAX_ROWS x H`` floats)."""


def _patched_layer(params, h: Tensor, mask: Tensor, i: int, name: str, source: Tensor, n: int, over: str) -> Tensor:
    """Layer i on the copies ``h`` whose last n are to be patched.

    Copy A + c gets slice c of ``name`` from ``source``; the first A pass through unpatched.

    Args:
        params (Params): the model's root params.
        h: (A + n, S, H) the copies.
        mask: the additive attention mask.
        i: the layer.
        name: the point patched.
        source: the clean run's tensor at ``name``.
        n: heads or positions.
        over: "positions" or "heads".

    Returns:
        The layer's output (A + n, S, H).
    """
    c = torch.arange(n, device=h.device)
    at = h.shape[0] - n + c  # the rows of the copies to patch

    def edit(t: Tensor, point: Point) -> Tensor:  # t: (A + n, ...) copies; copy A + c takes the clean slice c
        out = t.clone()
        if over == "heads":
            out[at, c] = source[0].to(t.dtype)[c]  # (., nh, S, hd): head c
        elif t.dim() == 4:
            out[at, :, c] = source[0, :, c].to(t.dtype).transpose(0, 1)  # (., nh, S, ...): position c
        else:
            out[at, c] = source[0, c].to(t.dtype)  # (., S, X): position c
        return out

    points = Trace(prefix=f"layer.{i}.", edits={name: edit}, keep=False)
    return layer(params.layer(i), h, mask, impl="sdpa", trace=points).hidden  # eager where an edit needs the weights


def _layer(params, i: int, h: Tensor, mask: Tensor, where: Tensor) -> Tensor:
    """Layer i on the copies ``h``; the last layer only at the masks ``where``.

    The last layer is the fast path's (:func:`~bertfn.fast.unpadded.unpadded_attention`), the copies
    laid end to end, keys and values at every position, the rest at the masks alone.

    Args:
        params (Params): the model's root params.
        i: the layer.
        h: (c, S, H) the copies.
        mask: the additive attention mask.
        where: (N,) the masks' positions.

    Returns:
        (c, S, H); for the last layer (c, N, H).
    """
    p = params.layer(i)
    if i < params.config.num_hidden_layers - 1:
        return layer(p, h, mask, impl="sdpa").hidden
    c, S, H = h.shape
    rows = (torch.arange(c, device=h.device)[:, None] * S + where[None, :]).flatten()  # (c * N,): the masks, end to end
    x = unpadded_attention(p.scope("attention"), h.reshape(1, c * S, H), [S] * c, rows)  # (1, c * N, H)
    return unpadded_feed_forward(p, x).view(c, len(where), H)


def attribution(clean_text: str, corrupted_text: str, model: Model | str | Path, metric: Metric, *,
                over: str = "positions", name: str | None = None) -> Sweep:
    """:func:`sweep`'s map estimated to first order from one forward and one backward pass of the corrupted run.

    value = corrupted + sum over the slice of (clean - corrupted) * d metric / d activation. Compare with
    the exact sweep by ``torch.corrcoef`` of the two ``values`` (:func:`correlation`).

    Args:
        clean_text: the clean text.
        corrupted_text: the corrupted text, as in :func:`sweep`.
        model: a loaded :class:`Model`, a folder or a hub id (with its MLM head).
        metric: :data:`Metric` (e.g. :func:`logit_difference`).
        over: as in :func:`sweep`.
        name: as in :func:`sweep`.

    Returns:
        The estimated map.
    """
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
    """Pearson's r between two maps (e.g. :func:`attribution` against the exact :func:`sweep`).

    Args:
        a: one map.
        b: the other, of the same shape.
    """
    return torch.corrcoef(torch.stack([a.values.flatten(), b.values.flatten()]))[0, 1].item()
