"""How texts laid end to end attend: a kernel call per run of one length, or padded batches of several lengths,
chosen on the device at hand by measurement: :func:`batches`.

On the segments layout (:class:`~bertfn.model.layout.Segments`) every product runs on the texts' real rows; attention
alone needs each text apart. Two ways give it that, with the same numbers (tests/test_layouts.py):

    runs     one call per run of texts of one length (a dense batch, a view of the sequence): no padding, but as
             many calls per layer as there are lengths
    padded   neighbouring texts gathered into padded batches, their keys' padding masked (:func:`padded_batches`):
             a few calls per layer, paying for the padding's scores and a gather and a scatter

A CPU pays little for a call and the full price of every padded score: on an AMD EPYC (2 cores) the runs took
0.2-0.66x the padded batches' time for 16-32 texts of 8-256 tokens, fp32 and bf16 (12 heads of 32 and 64). A GPU
pays a launch per call and little for a score. So the first layout of several lengths attended on a device in a
dtype times both ways on a group of texts of mixed lengths (:func:`measure`, 0.1-0.3 s on a CPU) and keeps the
faster, for the process and in the kernels' cache file (:mod:`bertfn.fast.choice`: ``BERTFN_KERNEL_CACHE``), under
the machine (the CPU's key, which holds torch's thread count: a CPU chooses anew after ``torch.set_num_threads``) or
the GPU's name. A layout of one length (a sentence, a text's masked copies) has one
way only, and chooses nothing.

Environment: ``BERTFN_ATTENTION=runs`` or ``=padded`` takes that way on every device; nothing is measured.
"""

from __future__ import annotations

import os
import threading
import time

import torch
import torch.nn.functional as F

from ..errors import InputError
from ..model.layout import Segments, with_keys
from .choice import cache_path, machine_key, read_cache, write_cache

Tensor = torch.Tensor

WAYS = ("runs", "padded")
"""The ways texts end to end can attend (the module docstring)."""

SLACK = 1.0
"""A padded batch spends at most (1 + SLACK) times its texts' own scores (the sum of their n^2): neighbouring texts
join one while the longest of them, squared and counted once per text, stays within that."""

PROBE = tuple(range(16, 257, 16))
"""The lengths :func:`measure` times: 16 texts of 16-256 tokens (2176 tokens), a group as
:func:`~bertfn.fast.batching.text_groups` forms them, at bert-base's 12 heads of 64."""

_chosen: dict[tuple[str, torch.dtype, int], str] = {}  # (device, dtype, torch's threads) -> way, for this process
_times: dict[tuple[str, torch.dtype, int], dict[str, float]] = {}  # what the measurement found, in ms
_lock = threading.Lock()


def batches(lengths: tuple[int, ...], device: torch.device | str, dtype: torch.dtype) -> tuple[int, ...] | None:
    """How many texts each attention call takes, as :attr:`Segments.batches <bertfn.model.layout.Segments.batches>`
    says it, on this device and dtype.

    Args:
        lengths: the texts' tokens, in the order they are laid.
        device: where the model runs.
        dtype: its hidden states' dtype.

    Returns:
        None where the texts are of one length (a run: one call either way) or runs were chosen (one call per run of
            one length); else :func:`padded_batches`.

    Raises:
        InputError: ``BERTFN_ATTENTION`` names no way.
    """
    forced()  # a BERTFN_ATTENTION that names no way is refused wherever it is read, one length or several
    if len(set(lengths)) == 1:
        return None
    return None if way(device, dtype) == "runs" else padded_batches(lengths)


def padded_batches(lengths: tuple[int, ...], slack: float = SLACK) -> tuple[int, ...]:
    """Neighbouring texts cut into padded batches, each spending at most ``1 + slack`` times its texts' own scores.

    Greedy in the order the texts are laid (sorted by length where :func:`~bertfn.fast.batching.text_groups` formed
    them, so that neighbours are of like lengths): a text joins the batch before it while the batch, padded to its
    longest, stays within the bound; a run of one length always stays one batch.

    Args:
        lengths: the texts' tokens, in order.
        slack: the padding's scores allowed, as a share of the texts' own.

    Returns:
        The texts per batch, in order (their sum ``len(lengths)``).
    """
    out: list[int] = []
    count = longest = own = 0  # the batch so far: its texts, its longest, the sum of their n^2
    for n in lengths:
        m = max(longest, n)
        if count and (count + 1) * m * m <= (1 + slack) * (own + n * n):
            count, longest, own = count + 1, m, own + n * n
        else:
            if count:
                out.append(count)
            count, longest, own = 1, n, n * n
    out.append(count)
    return tuple(out)


def way(device: torch.device | str, dtype: torch.dtype) -> str:
    """The way texts end to end attend on ``device`` in ``dtype``: forced, chosen earlier in this process, or measured
    now (once).

    Args:
        device: where the model runs.
        dtype: its hidden states' dtype.

    Raises:
        InputError: ``BERTFN_ATTENTION`` names no way.
    """
    named = forced()
    if named is not None:
        return named
    key = (str(torch.device(device)), dtype, torch.get_num_threads())
    found = _chosen.get(key)
    if found is not None:
        return found
    with _lock:
        if key not in _chosen:
            _times[key], _chosen[key] = _choose(torch.device(device), dtype)
        return _chosen[key]


def _choose(device: torch.device, dtype: torch.dtype) -> tuple[dict[str, float], str]:
    """``(ms per way, the faster)`` for ``device`` and ``dtype``: read from the cache file, or measured and written
    there."""
    path = cache_path()
    where, entry = device_key(device), f"attention {str(dtype).removeprefix('torch.')}"
    cached = read_cache(path).get(where, {}).get(entry) if path is not None else None
    if isinstance(cached, dict) and cached.get("way") in WAYS and isinstance(cached.get("ms"), dict):
        return cached["ms"], cached["way"]
    ms = {w: 1e3 * s for w, s in measure(device, dtype).items()}
    best = min(ms, key=ms.get)
    if path is not None:
        cache = read_cache(path)
        cache.setdefault(where, {})[entry] = {"way": best, "ms": {w: round(v, 3) for w, v in ms.items()}}
        write_cache(path, cache)
    return ms, best


def device_key(device: torch.device) -> str:
    """What a choice holds for, as the cache file names it: the CPU's key (:func:`~bertfn.fast.choice.machine_key`),
    or the GPU's name and torch's version."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} | torch {torch.__version__}"
    return machine_key() if device.type == "cpu" else f"{device.type} | torch {torch.__version__}"


def forced() -> str | None:
    """The way ``BERTFN_ATTENTION`` names, or None.

    Raises:
        InputError: a name that is no way.
    """
    name = os.environ.get("BERTFN_ATTENTION", "").strip()
    if not name:
        return None
    if name not in WAYS:
        raise InputError(f"BERTFN_ATTENTION={name!r} names no way for texts laid end to end to attend; use one of "
                         f"{', '.join(WAYS)}, or unset it to let bertfn measure which is faster here")
    return name


def measure(device: torch.device, dtype: torch.dtype, reps: int = 5) -> dict[str, float]:
    """Seconds each way takes to attend :data:`PROBE`'s texts (12 heads of 64) on ``device`` in ``dtype``.

    Plain attention (``F.scaled_dot_product_attention``), as BERT's layer runs it; the ways take turns within each
    repetition, the first round a warm-up, the best of the rest kept.

    Args:
        device: where to time.
        dtype: the queries', keys' and values' dtype.
        reps: timed repetitions.
    """
    nh, hd = 12, 64
    layouts = {"runs": Segments(PROBE), "padded": Segments(PROBE, batches=padded_batches(PROBE))}
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, nh, sum(PROBE), hd, generator=g).to(device, dtype) for _ in range(3))

    def one(qi: Tensor, ki: Tensor, vi: Tensor, keys: Tensor | None) -> Tensor:  # (c, nh, m, hd) each
        return F.scaled_dot_product_attention(qi, ki, vi, attn_mask=with_keys(None, keys))

    times: dict[str, list[float]] = {w: [] for w in layouts}
    with torch.inference_mode():
        for rep in range(reps + 1):
            for w, layout in layouts.items():
                synchronize(device)
                start = time.perf_counter()
                layout.attend(q, k, v, one)
                synchronize(device)
                if rep:
                    times[w].append(time.perf_counter() - start)
    return {w: min(t) for w, t in times.items()}


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a GPU runs it after the call returns), so that a clock reads its time."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def chosen() -> dict[str, dict]:
    """What this process has chosen so far at torch's thread count now: ``{"cpu float32": {"way": ..., "ms": {way:
    ms}}, ...}``."""
    threads = torch.get_num_threads()
    return {f"{d} {str(t).removeprefix('torch.')}": {"way": w, "ms": _times.get((d, t, n), {})}
            for (d, t, n), w in _chosen.items() if n == threads}
