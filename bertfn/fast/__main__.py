"""``python -m bertfn.fast``: which kernel the fast path runs on this machine, per dtype and row band, and the times
that chose it (:mod:`bertfn.fast.choice`: measured now, or read from the cache file where an earlier process wrote
them); and how texts laid end to end attend on the CPU, per dtype (:mod:`bertfn.fast.attention_batches`: measured now).
"""

from __future__ import annotations

import argparse

import torch

from . import attention_batches
from .choice import BANDS, cache_path, chosen, forced, kernel, machine_key
from .kernels import DTYPES, KERNELS, ONEDNN_DTYPES


def main(argv: list[str] | None = None) -> None:
    """Print the machine's key, the cache file and, per dtype and band, the kernel chosen and each kernel's time; then
    per dtype the way texts end to end attend and each way's time."""
    parser = argparse.ArgumentParser(prog="python -m bertfn.fast", description=__doc__.splitlines()[0].strip("`: "))
    parser.add_argument("--threads", type=int, default=None, help="torch's threads (default: torch's own)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    for dtype in DTYPES:
        for _, _, rows in BANDS:
            kernel(dtype, rows)  # measured now, or read from the cache
    path = cache_path()
    print(f"machine: {machine_key()}")
    print(f"cache: {path if path is not None else 'off (BERTFN_KERNEL_CACHE=off): measured now'}")
    name = forced()
    if name:
        print(f"forced by BERTFN_KERNEL: every product runs {name}")
    for entry, found in chosen().items():
        times = ", ".join(f"{k} {found['ms'][k]:.1f} ms" for k in KERNELS if k in found["ms"])
        print(f"{entry:<15} {found['kernel']:<14} {f'({times})' if times else ''}".rstrip())
    for dtype in DTYPES:
        if dtype not in ONEDNN_DTYPES:
            print(f"{str(dtype).removeprefix('torch.')}: oneDNN has no kernel for it on this CPU, so F.linear runs it")
    for dtype in DTYPES:
        attention_batches.way("cpu", dtype)  # measured now, unless BERTFN_ATTENTION forces a way
    if attention_batches.forced():
        print(f"attention forced by BERTFN_ATTENTION: texts end to end attend as {attention_batches.forced()}")
    for entry, found in attention_batches.chosen().items():
        times = ", ".join(f"{w} {ms:.1f} ms" for w, ms in found["ms"].items())
        print(f"attention {entry:<15} {found['way']:<8} ({times})")


if __name__ == "__main__":
    main()
