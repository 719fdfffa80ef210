"""Which kernel should multiply activations by BERT's weights? The fuller table behind bertfn.fast.choice.

    python bench/kernels.py [--rows 1,12,32,64,128,256,512] [--reps 9] [--threads N] [--dtype bfloat16]

All 72 encoder weight matrices of a bert-base-shaped model (340 MB in fp32, more than the caches
hold, as in a real forward pass) times an activation of R rows, for each R, through:
  * ``F.linear``: what torch.nn.Linear and transformers run (MKL's sgemm on x86), on (out, in)
    weights as checkpoints store them;
  * ``F.linear (in,out)``: the same call on the same values laid out (in, out) in memory, as
    ``bertfn.load`` lays them out (``bertfn.checkpoint.state.matmul_layout``);
  * ``onednn``: ``torch.ops.mkldnn._linear_pointwise`` on the (out, in) weights (no copy);
  * ``onednn (in,out)``: the same on the (in, out) layout bertfn.load gives (no copy): the fast
    path's ``"onednn"`` kernel;
  * ``onednn packed``: the same kernel on weights reordered once into oneDNN's blocked layout,
    a second copy of every weight (+340 MB in fp32): the fast path's ``"onednn-packed"``.
It prints the median and best time of the 72 products, the weight bandwidth and the GFLOP/s, then
the kernels the fast path chooses on this machine (bertfn.fast.choice: a shorter measurement, cached).
Variants alternate within each repetition so that background load hits them alike.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from bertfn.checkpoint.state import in_out
from bertfn.fast import choice


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,12,32,64,128,256,512")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)

    H, I, L = 768, 3072, 12
    shapes = [(H, H)] * 4 + [(I, H), (H, I)]  # query, key, value, attention output; FFN in, FFN out
    weights = [(torch.randn(shape) * 0.02).to(dtype) for _ in range(L) for shape in shapes]
    biases = [(torch.randn(w.shape[0]) * 0.02).to(dtype) for w in weights]
    laid_out = [in_out(w) for w in weights]  # (out, in) views of (in, out) tensors, as bertfn.load keeps them
    packed = [torch.ops.mkldnn._reorder_linear_weight(w) for w in weights]
    megabytes = sum(w.numel() * w.element_size() for w in weights) / 1e6

    print(f"{args.threads} threads; {len(weights)} weights, {megabytes:.0f} MB")
    with torch.inference_mode():
        for R in (int(r) for r in args.rows.split(",")):
            x = {H: torch.randn(R, H, dtype=dtype), I: torch.randn(R, I, dtype=dtype)}  # what each weight multiplies
            variants = {
                "F.linear": lambda: [F.linear(x[w.shape[1]], w, b) for w, b in zip(weights, biases)],
                "F.linear (in,out)": lambda: [F.linear(x[w.shape[1]], w, b) for w, b in zip(laid_out, biases)],
                "onednn": lambda: [torch.ops.mkldnn._linear_pointwise(x[w.shape[1]], w, b, "none", [], "")
                                   for w, b in zip(weights, biases)],
                "onednn (in,out)": lambda: [torch.ops.mkldnn._linear_pointwise(x[w.shape[1]], w, b, "none", [], "")
                                            for w, b in zip(laid_out, biases)],
                "onednn packed": lambda: [torch.ops.mkldnn._linear_pointwise(x[w.shape[1]], p, b, "none", [], "")
                                          for w, p, b in zip(weights, packed, biases)],
            }
            times: dict[str, list[float]] = {name: [] for name in variants}
            for f in variants.values():
                f()  # warm-up
            for _ in range(args.reps):
                for name, f in variants.items():
                    start = time.perf_counter()
                    f()
                    times[name].append(time.perf_counter() - start)
            flop = 2 * R * sum(w.numel() for w in weights)
            for name, t in times.items():
                print(f"rows {R:4d}  {name:17s} median {statistics.median(t) * 1e3:7.1f} ms"
                      f"  best {min(t) * 1e3:7.1f} ms"
                      f"  {megabytes / 1e3 / min(t):5.1f} GB/s  {flop / min(t) / 1e9:6.1f} GFLOP/s")

    for rows in sorted({r for _, _, r in choice.BANDS}):
        choice.kernel(dtype, rows)
    print(f"bertfn.fast.choice on {choice.machine_key()}:")
    for band, c in choice.chosen().items():
        print(f"  {band}: {c['kernel']}  " + ", ".join(f"{k} {v:.1f} ms" for k, v in c["ms"].items()))


if __name__ == "__main__":
    main()
