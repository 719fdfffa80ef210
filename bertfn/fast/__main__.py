"""``python -m bertfn.fast``: which kernel the fast path runs on this machine, per dtype and row band, and the times
that chose it (:mod:`bertfn.fast.choice`: measured now, or read from the cache file where an earlier process wrote
them).
"""

from __future__ import annotations

import argparse

import torch

from .choice import BANDS, cache_path, chosen, forced, kernel, machine_key
from .kernels import DTYPES, KERNELS


def main(argv: list[str] | None = None) -> None:
    """Print the machine's key, the cache file and, per dtype and band, the kernel chosen and each kernel's time."""
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


if __name__ == "__main__":
    main()
