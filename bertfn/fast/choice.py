"""Which kernel the fast path multiplies with, chosen on the machine it runs on: :func:`linear`.

The fastest of :data:`~bertfn.fast.kernels.KERNELS` depends on the CPU (MKL's sgemm on (in, out)
weights won on a Xeon with AMX, oneDNN on packed weights on an AMD EPYC by 2x), on the dtype and on
the number of rows. So the fast path measures: the first product of a dtype (fp32, bf16) in a row
band (:data:`BANDS`: a sentence or a few, or a batch) times every kernel on bert-base-shaped
weights of that dtype (:func:`measure`, 0.1-0.5 s) and keeps the fastest for the process, per
thread count (``torch.set_num_threads`` later in the process chooses anew: one thread and many can
favour different kernels). The result is cached per CPU model, torch version and thread count in a
user file, so later processes skip the measurement.

Environment:
  ``BERTFN_KERNEL=NAME``        every fast-path product runs kernel NAME (``F.linear``, ``onednn``,
                                ``onednn-packed``); nothing is measured.
  ``BERTFN_KERNEL_CACHE=off``   no cache file: measure once per process. ``=PATH``: the cache file
                                (default ``$XDG_CACHE_HOME/bertfn/kernels.json``, ``~/.cache/...``).
A cache file that cannot be read or parsed is ignored (and rewritten); one that cannot be written is
left alone. ``python -m bertfn.fast`` prints this machine's choice and times.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import threading
import time
from pathlib import Path

import torch

from ..checkpoint.state import LINEAR_WEIGHT, in_out, release_memory
from ..errors import InputError
from ..model.functional import Products, use_products
from .kernels import KERNELS, ONEDNN, ONEDNN_DTYPES, joined, onednn_fits, onednn_linear, padded_rows, run

Tensor = torch.Tensor

BANDS = (("few", 128, 16), ("many", None, 512))
"""(name, rows below which a product falls in the band, rows it is measured at). "few": one text
or a few short ones (fill_mask of a sentence: 8-30 rows, the MLM head at the masks); "many": the
groups of up to 2048 tokens that batches form (:data:`bertfn.fast.batching.GROUP_TOKENS`)."""

MEASURED_BYTES = 64e6
"""The "few" band is measured on at least this many bytes of weights (bert-base layers), more than
a CPU's caches hold: at few rows a product's time is reading its weight from memory, as in a
forward pass over a real model."""

_chosen: dict[tuple[torch.dtype, str, int], str] = {}  # (dtype, band, threads) -> kernel, for this process
_times: dict[tuple[torch.dtype, str, int], dict[str, float]] = {}  # what the measurement found, in ms
_lock = threading.Lock()


def linear(x: Tensor, w: Tensor, b: Tensor | None = None, act: str | None = None) -> Tensor:
    """``x W^T + b`` as :func:`~bertfn.model.functional.linear` computes it, by the kernel chosen for it.

    The kernel chosen for its dtype and rows; ``F.linear`` where no other fits: a gradient to track, a transform,
    another device or dtype.

    Args:
        x: (..., in).
        w: (out, in), or its packed copy.
        b: (out,), or None.
        act: the activation then applied (a name of :data:`~bertfn.model.functional.ACTIVATIONS`), if any,
            which oneDNN applies as it writes the result (:data:`~bertfn.fast.kernels.FUSED`).

    Returns:
        (..., out).
    """
    if w.is_mkldnn:  # a state that holds packed copies only (:func:`pack_state`)
        return onednn_linear(x, w, b, act)
    if not onednn_fits(x, w, b):
        return run("F.linear", x, w, b, act)
    return run(kernel(w.dtype, x.numel() // x.shape[-1]), x, w, b, act)


def linears(x: Tensor, ws: tuple[Tensor, ...], bs: tuple[Tensor, ...]) -> list[Tensor]:
    """``[x W_i^T + b_i for each i]``: one input times several weights (attention's query, key and value).

    Where the kernel chosen is oneDNN on packed weights, the weights are stacked and packed as one
    (:func:`~bertfn.fast.kernels.joined`) and multiplied in one product, whose result is split; otherwise
    each is :func:`linear`.

    Args:
        x: (..., in).
        ws: each (out_i, in).
        bs: each (out_i,).

    Returns:
        Each (..., out_i).
    """
    plain = all(b is not None and onednn_fits(x, w, b) and not w.is_mkldnn and not w.is_inference()
                for w, b in zip(ws, bs))
    if not (plain and kernel(x.dtype, x.numel() // x.shape[-1]) == "onednn-packed"):
        return [linear(x, w, b) for w, b in zip(ws, bs)]
    y = onednn_linear(x, *joined(ws, bs))  # (..., sum out_i)
    return list(y.split([w.shape[0] for w in ws], dim=-1))


def run_rows(x: Tensor, w: Tensor, b: Tensor | None = None) -> int:
    """The rows a product of ``x`` by ``w`` runs at on the fast path.

    A caller that adds the padding rows once up front (:func:`~bertfn.model.masks.laid_out`)
    spares every product that copy.

    Args:
        x: (..., in).
        w: (out, in).
        b: (out,), or None.

    Returns:
        Where it runs on oneDNN, which pads the rows with a copy of ``x``
            (:func:`~bertfn.fast.kernels.padded_rows`), that padded count; else ``x``'s own.
    """
    m = x.numel() // x.shape[-1]
    if w.is_mkldnn or (onednn_fits(x, w, b) and kernel(w.dtype, m) != "F.linear"):
        return padded_rows(m)
    return m


LAYER_WEIGHT = re.compile(r"layers?\.\d+\.")
"""Keys inside the encoder's layers, in every member's names (``bert.encoder.layer.3.``, ``model.layers.3.``,
``distilbert.transformer.layer.3.``, ALBERT's ``albert_layers.0.``): the weights :func:`pack_state` packs."""


def pack_state(state: dict[str, Tensor]) -> bool:
    """Replace the linear weights of ``state`` by their oneDNN-packed copies, in place.

    Where oneDNN is the kernel chosen for their dtype at every row band, packed at one at least (at the
    others, oneDNN on the weight as stored: the same kernel, which reads a packed copy no slower).

    Then the state holds each weight once, in the layout the fast path reads (bert-base fp32: 340 MB
    instead of 340 plain + 340 packed), but only the fast path can use it: the reference functions
    (``F.linear``) cannot multiply by a packed tensor (``t.to_dense()`` gives a weight's values back). The
    weights packed are the layers' (:data:`LAYER_WEIGHT`), nearly all of them: the heads above the encoder (the MLM
    head's transform, the pooler, a classifier's, a reader's) stay as they are, read by their reference functions on
    the fast path too, at a few rows each.
    :func:`~bertfn.checkpoint.resolve.get_model` does this for the models it loads by name for calls
    that run on the fast path alone. Weights tied to another key (the MLM decoder, tied to the
    word embeddings, which lookups read) stay as they are. Weights are replaced one at a time, each
    plain one's memory handed back at once (:func:`~bertfn.checkpoint.state.release_memory`), so
    memory holds one weight twice at most.

    Args:
        state: a model's flat state, changed in place.

    Returns:
        Whether it packed them.
    """
    weights = [k for k, t in state.items()
               if LINEAR_WEIGHT.search(k) and LAYER_WEIGHT.search(k) and t.dim() == 2 and not t.is_mkldnn]
    dtypes = {state[k].dtype for k in weights}
    if not (weights and dtypes <= set(ONEDNN_DTYPES) and all(state[k].device.type == "cpu" for k in weights)):
        return False
    chosen = {kernel(d, rows) for d in dtypes for _, _, rows in BANDS}
    if "onednn-packed" not in chosen or not chosen <= {"onednn", "onednn-packed"}:
        return False
    tied = {id(t) for k, t in state.items() if k not in weights}
    for k in weights:
        if id(state[k]) not in tied:
            state[k] = torch.ops.mkldnn._reorder_linear_weight(state[k])
            release_memory()  # the plain weight's pages, before the next packed copy asks for more
    return True


def band(rows: int) -> str:
    """The name of the :data:`BANDS` entry a product of ``rows`` rows falls in.

    Args:
        rows: the product's rows.
    """
    for name, below, _ in BANDS[:-1]:
        if rows < below:
            return name
    return BANDS[-1][0]  # the last band has no upper bound


def kernel(dtype: torch.dtype, rows: int) -> str:
    """The kernel for a product of ``rows`` rows in ``dtype`` at torch's thread count now: forced, cached, or measured
    now (once per thread count).

    Args:
        dtype: the product's dtype.
        rows: its rows.
    """
    key = (dtype, band(rows), torch.get_num_threads())
    found = _chosen.get(key)
    if found is not None:
        return found
    with _lock:
        if key not in _chosen:
            _chosen[key] = _choose(*key[:2])
        return _chosen[key]


def forced() -> str | None:
    """The kernel ``BERTFN_KERNEL`` names, or None.

    Raises:
        InputError: a name no kernel has, or a oneDNN kernel without oneDNN.
    """
    name = os.environ.get("BERTFN_KERNEL", "").strip()
    if not name:
        return None
    if name not in KERNELS:
        raise InputError(f"BERTFN_KERNEL={name!r} names no kernel; use one of {', '.join(KERNELS)}, "
                         "or unset it to let bertfn measure which is fastest here")
    if name != "F.linear" and not ONEDNN:
        raise InputError(f"BERTFN_KERNEL={name!r} needs oneDNN, which this torch build lacks; use F.linear")
    return name


def _choose(dtype: torch.dtype, b: str) -> str:
    name = forced()
    if name is not None:
        return name
    path, key = cache_path(), machine_key()
    entry = f"{str(dtype).removeprefix('torch.')} {b}"
    cached = read_cache(path).get(key, {}).get(entry) if path is not None else None
    if isinstance(cached, dict) and cached.get("kernel") in KERNELS and (dtype in ONEDNN_DTYPES
                                                                         or cached["kernel"] == "F.linear"):
        ms = cached.get("ms")
        _times[(dtype, b, torch.get_num_threads())] = ms if isinstance(ms, dict) else {}
        return cached["kernel"]
    ms = {k: 1e3 * s for k, s in measure(dtype, b).items()}
    best = min(ms, key=ms.get)
    _times[(dtype, b, torch.get_num_threads())] = ms
    if path is not None:
        cache = read_cache(path)
        cache.setdefault(key, {})[entry] = {"kernel": best, "ms": {k: round(v, 3) for k, v in ms.items()}}
        write_cache(path, cache)
    return best


def measure(dtype: torch.dtype, b: str, reps: int = 5) -> dict[str, float]:
    """Seconds each kernel takes for bert-base's layer products at the band's rows.

    The weights are bert-base-shaped (768 x 768 four times, 3072 x 768, 768 x 3072 per layer), laid
    out (in, out) as :func:`bertfn.load` lays them: for "few", as many layers as make
    :data:`MEASURED_BYTES`; for "many", one layer (the products are bound by arithmetic, not memory).
    The kernels take turns within each repetition, so background load hits them alike.

    Args:
        dtype: the products' dtype.
        b: the band's name.
        reps: repetitions; the best is kept (background load only ever adds time, so the best is the
            closest to what each kernel can do).
    """
    rows = next(r for name, _, r in BANDS if name == b)
    H, I = 768, 3072
    shapes = [(H, H)] * 4 + [(I, H), (H, I)]
    layer_bytes = sum(o * i for o, i in shapes) * torch.finfo(dtype).bits // 8
    layers = math.ceil(MEASURED_BYTES / layer_bytes) if b == "few" else 1
    with torch.inference_mode(False):  # plain tensors, as a model's weights are, even if called in inference mode
        weights = [in_out(torch.full(s, 0.01, dtype=dtype)) for _ in range(layers) for s in shapes]
        biases = [torch.full((w.shape[0],), 0.01, dtype=dtype) for w in weights]
        x = {n: torch.full((rows, n), 0.5, dtype=dtype) for n in (H, I)}
    kernels = KERNELS if dtype in ONEDNN_DTYPES else ("F.linear",)
    times: dict[str, list[float]] = {k: [] for k in kernels}
    with torch.inference_mode():
        for rep in range(reps + 1):  # the first round warms up (and packs)
            for k in kernels:
                start = time.perf_counter()
                for w, bias in zip(weights, biases):
                    run(k, x[w.shape[1]], w, bias)
                if rep:
                    times[k].append(time.perf_counter() - start)
    return {k: min(t) for k, t in times.items()}


def chosen() -> dict[str, dict]:
    """What this process has chosen so far at torch's thread count now: ``{"float32 few": {"kernel": ..., "ms":
    {kernel: ms}}, ...}``.

    ms: what the measurement found, here or when the cache was written; empty when forced.
    """
    threads = torch.get_num_threads()
    return {f"{str(d).removeprefix('torch.')} {b}": {"kernel": k, "ms": _times.get((d, b, n), {})}
            for (d, b, n), k in sorted(_chosen.items(), key=str) if n == threads}


def forget() -> None:
    """Drop this process's choices, so that the next product chooses again (tests)."""
    with _lock:
        _chosen.clear()
        _times.clear()


# --- the cache file --------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), or what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key() -> str:
    """What a choice holds for: CPU model, the instruction set torch uses, torch's version, threads."""
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{cpu_model()} | {capability} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def cache_path() -> Path | None:
    """The cache file, or None when ``BERTFN_KERNEL_CACHE=off``."""
    setting = os.environ.get("BERTFN_KERNEL_CACHE", "").strip()
    if setting.lower() in {"off", "0", "no", "false"}:
        return None
    if setting:
        return Path(setting).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bertfn" / "kernels.json"


def read_cache(path: Path) -> dict:
    """The cache's entries ``{machine key: {"<dtype> <band>": {"kernel", "ms"}}}``; {} if missing or unreadable.

    Args:
        path: the cache file.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, dict)}


def write_cache(path: Path, cache: dict) -> None:
    """Write ``cache`` to ``path`` whole (a temporary file renamed over it); a failure leaves things as they were.

    Args:
        path: the cache file.
        cache: its entries.
    """
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


use_products(Products(linear=linear, linears=linears, rows=run_rows))  # bertfn/model/'s products run on these kernels
