"""bertfn against transformers on one GPU: the quick rows of issue 47, in a minute or two of a GPU's time.

    python bench/gpu_bench.py --device cuda --out RESULTS/bench.md   # what bench/gpu_check.sh runs on a GPU
    python bench/gpu_bench.py --quick                                # on the CPU: checks the script, not the machine

On bench.py's bert-base-shaped random checkpoint (bench/workload.py: built in ``--workdir`` on first use, no hub),
every side on the same device, their calls alternating (bench.alternate; on a GPU each call is followed by
``torch.cuda.synchronize()``, so a time is the whole call's):

  * fill-mask of one sentence (workload.ROME, 12 tokens), text to top-5 answers, and of the 64 mixed sentences
    (workload.batch_texts: 8-128 tokens, one [MASK] each) at batch sizes 8 and 64 and each side's best:
    ``bertfn.fill_mask`` against ``pipeline("fill-mask")``, both in fp32, and both in bf16
    (``bertfn.load(..., dtype=torch.bfloat16)``; the pipeline's ``dtype=torch.bfloat16``);
  * the pseudo-log-likelihood of the 64 sentences whole (every token masked in turn): ``bertfn.score`` against the
    plain transformers way (bench/scoring.py's ``plain_transformers``: a sentence's masked copies as one batch
    through ``BertForMaskedLM``), fp32 and bf16;
  * bertfn against itself: the 64 sentences' fill-mask and PLL with texts end to end attending run by run and in
    padded batches (``BERTFN_ATTENTION``), beside the way ``bertfn.fast.attention_batches`` chose by measurement.

fp32 means fp32: TF32 stays off (torch's default for matrix products, set here for cuDNN too). Before timing, the
answers are compared: in fp32 bertfn's top 5 for the sentence must be the pipeline's (scores within 1e-4) and the
PLLs the plain way's (relative 1e-5), or the script stops; the top 1 of each batch sentence, and the bf16 runs
against fp32 (hidden states' relative RMS, PLLs), are reported above the table. ``--quick`` (the CPU trial of
bench/gpu_check.sh) takes 16 sentences of up to 32 tokens, 8 of up to 16 for the PLL, and few repetitions.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import Row, alternate, bf16_distance, table  # noqa: E402
from family import check_same  # noqa: E402
from scoring import plain_transformers  # noqa: E402
from workload import ROME, batch_texts, random_checkpoint  # noqa: E402

HEADING = "# bertfn on a GPU (bench/gpu_bench.py)"


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's model."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    from bertfn.fast.choice import cpu_model

    return cpu_model()


def versions(device: str) -> str:
    import torch
    import transformers

    import bertfn

    cuda = f", CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s) seen" if device.startswith("cuda") else ""
    return (f"Python {platform.python_version()}, torch {torch.__version__}{cuda}, transformers {transformers.__version__}, "
            f"bertfn {bertfn.__version__}")


def best(runs: list[list[float]]) -> list[float]:
    """The fastest (by median) of several lists of times."""
    return min(runs, key=statistics.median)


def run(model_dir: Path, device: str, quick: bool) -> tuple[list[Row], list[str]]:
    """The rows, and the notes on the answers and the workload."""
    import torch
    import transformers

    import bertfn
    from bertfn.fast import attention_batches

    cuda = device.startswith("cuda")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # torch's default; said here, as the tests say it
        torch.backends.cudnn.allow_tf32 = False
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    reps = dict(single=3, batch=1, pll=1) if quick else dict(single=30, batch=5, pll=3)
    batch_sizes = (8, 16) if quick else (8, 64)

    fp32 = bertfn.load(model_dir, device=device)
    bf16 = bertfn.load(model_dir, device=device, dtype=torch.bfloat16)
    pipe32 = transformers.pipeline("fill-mask", model=str(model_dir), device=device)
    pipe16 = transformers.pipeline("fill-mask", model=str(model_dir), device=device, dtype=torch.bfloat16)
    texts = batch_texts(fp32.tokenizer, max_tokens=32 if quick else 128, n=16 if quick else 64)
    lengths = fp32.tokenizer(texts).attention_mask.sum(dim=1).tolist()
    by_length = [t for _, t in sorted(zip(lengths, texts))]  # the pipeline's best order
    whole = batch_texts(fp32.tokenizer, max_tokens=16 if quick else 128, n=8 if quick else 64, mask=False)
    whole_lengths = fp32.tokenizer(whole).attention_mask.sum(dim=1).tolist()
    hf32 = pipe32.model  # BertForMaskedLM on the device, for the plain PLL
    hf16 = pipe16.model
    plain32, plain16 = plain_transformers(hf32, pipe32.tokenizer), plain_transformers(hf16, pipe16.tokenizer)
    notes = []

    # the answers, before any timing
    gap = check_same(bertfn.fill_mask(ROME, fp32), pipe32(ROME), "fp32, one sentence")
    ours, theirs = bertfn.fill_mask(texts, fp32, top_k=1, batch_size=max(batch_sizes)), pipe32(texts, top_k=1, batch_size=8)
    same = sum(a[0]["token"] == b[0]["token"] for a, b in zip(ours, theirs))
    spread = max(abs(a[0]["score"] - b[0]["score"]) for a, b in zip(ours, theirs))
    top16 = [a["token"] for a in bertfn.fill_mask(ROME, bf16)], [a["token"] for a in pipe16(ROME)]
    notes.append(f"answers, fp32: bertfn's top 5 for the sentence are the pipeline's, scores within {gap:.1e}; "
                 f"the top 1 of {same} of the {len(texts)} batch sentences is the pipeline's (scores within {spread:.1e}; "
                 "random weights give near-uniform answers, where a tie can go either way)")
    notes.append(f"answers, bf16: bertfn's hidden states of the {len(texts)} sentences within "
                 f"{bf16_distance(fp32, bf16, texts):.2%} of fp32's (relative RMS; the CPU tests' bound is 3%); for the "
                 f"sentence, bertfn's bf16 top 5 share {len(set(top16[0]) & set(top16[1]))} tokens with the bf16 pipeline's")
    pll32, pll_plain = [r["pll"] for r in bertfn.score(whole, fp32)], plain32(whole)
    rel = max(abs(a - b) / abs(b) for a, b in zip(pll32, pll_plain))
    if rel > 1e-5:
        raise SystemExit(f"fp32 PLLs: bertfn and the plain transformers way differ by {rel:.1e} (relative), more than "
                         f"1e-5, so their times are not of the same work: {pll32[:3]} ... against {pll_plain[:3]} ...")
    pll16, plain_pll16 = [r["pll"] for r in bertfn.score(whole, bf16)], plain16(whole)
    notes.append(f"answers, PLL: fp32 within {rel:.1e} of the plain transformers way (relative); bf16: bertfn within "
                 f"{max(abs(a - b) / abs(b) for a, b in zip(pll16, pll32)):.2%} of fp32, the plain way in bf16 within "
                 f"{max(abs(a - b) / abs(b) for a, b in zip(plain_pll16, pll32)):.2%}")
    notes.append(f"workload: the sentence {len(fp32.tokenizer([ROME]).tokens[0])} tokens; {len(texts)} fill-mask "
                 f"sentences of {min(lengths)}-{max(lengths)} tokens ({sum(lengths)} in all); {len(whole)} PLL sentences "
                 f"of {min(whole_lengths)}-{max(whole_lengths)} tokens ({sum(n * (n - 2) for n in whole_lengths)} tokens "
                 "in their masked copies)")

    rows: list[Row] = []
    print(f"{time.strftime('%H:%M:%S')} timing one sentence", file=sys.stderr, flush=True)
    t = alternate({"bertfn": lambda: bertfn.fill_mask(ROME, fp32), "pipeline": lambda: pipe32(ROME),
                   "bertfn bf16": lambda: bertfn.fill_mask(ROME, bf16), "pipeline bf16": lambda: pipe16(ROME)},
                  reps["single"], sync)
    rows += [Row("fill-mask, 1 sentence, fp32", "ms", t["bertfn"], "pipeline, fp32", t["pipeline"]),
             Row("fill-mask, 1 sentence, bf16", "ms", t["bertfn bf16"], "pipeline, bf16", t["pipeline bf16"]),
             Row("fill-mask, 1 sentence: bertfn bf16 vs the fp32 pipeline", "ms", t["bertfn bf16"], "pipeline, fp32",
                 t["pipeline"])]

    runs: dict[str, list[list[float]]] = {"bertfn": [], "pipeline": [], "bertfn bf16": [], "pipeline bf16": []}
    for b in batch_sizes:
        print(f"{time.strftime('%H:%M:%S')} timing {len(texts)} sentences, batch size {b}", file=sys.stderr, flush=True)
        t = alternate({"bertfn": lambda: bertfn.fill_mask(texts, fp32, batch_size=b),
                       "pipeline": lambda: pipe32(by_length, batch_size=b),
                       "bertfn bf16": lambda: bertfn.fill_mask(texts, bf16, batch_size=b),
                       "pipeline bf16": lambda: pipe16(by_length, batch_size=b)}, reps["batch"], sync)
        for side, times in t.items():
            runs[side].append(times)
        rows += [Row(f"fill-mask, {len(texts)} sentences, batch size {b}, fp32", "ms", t["bertfn"], "pipeline, fp32",
                     t["pipeline"]),
                 Row(f"fill-mask, {len(texts)} sentences, batch size {b}, bf16", "ms", t["bertfn bf16"], "pipeline, bf16",
                     t["pipeline bf16"])]
    rows += [Row(f"fill-mask, {len(texts)} sentences, each side's best batch size, fp32", "ms", best(runs["bertfn"]),
                 "pipeline, fp32", best(runs["pipeline"])),
             Row(f"fill-mask, {len(texts)} sentences, each side's best batch size, bf16", "ms", best(runs["bertfn bf16"]),
                 "pipeline, bf16", best(runs["pipeline bf16"]))]

    print(f"{time.strftime('%H:%M:%S')} timing the PLL of {len(whole)} sentences", file=sys.stderr, flush=True)
    t = alternate({"bertfn": lambda: bertfn.score(whole, fp32), "plain": lambda: plain32(whole),
                   "bertfn bf16": lambda: bertfn.score(whole, bf16), "plain bf16": lambda: plain16(whole)},
                  reps["pll"], sync, warm_up=not quick)
    rows += [Row(f"PLL of {len(whole)} sentences, fp32", "s", t["bertfn"], "plain transformers, fp32", t["plain"]),
             Row(f"PLL of {len(whole)} sentences, bf16", "s", t["bertfn bf16"], "plain transformers, bf16",
                 t["plain bf16"])]

    print(f"{time.strftime('%H:%M:%S')} timing the two ways texts end to end attend", file=sys.stderr, flush=True)
    notes.append("attention of texts end to end, chosen by measurement (bertfn.fast.attention_batches): " + "; ".join(
        f"{key} {found['way']} ({', '.join(f'{w} {ms:.2f} ms' for w, ms in found['ms'].items())})"
        for key, found in attention_batches.chosen().items()))
    t = alternate({f"{w} {dtype}": ways(w, lambda m=m: bertfn.fill_mask(texts, m, batch_size=max(batch_sizes)))
                   for w in attention_batches.WAYS for dtype, m in (("fp32", fp32), ("bf16", bf16))},
                  reps["batch"], sync)
    t |= alternate({f"{w} PLL {dtype}": ways(w, lambda m=m: bertfn.score(whole, m))
                    for w in attention_batches.WAYS for dtype, m in (("fp32", fp32), ("bf16", bf16))},
                   reps["pll"], sync)
    for dtype in ("fp32", "bf16"):
        rows += [Row(f"fill-mask, {len(texts)} sentences, batch size {max(batch_sizes)}, {dtype}: padded batches "
                     "vs runs", "ms", t[f"padded {dtype}"], "bertfn, runs", t[f"runs {dtype}"]),
                 Row(f"PLL of {len(whole)} sentences, {dtype}: padded batches vs runs", "s", t[f"padded PLL {dtype}"],
                     "bertfn, runs", t[f"runs PLL {dtype}"])]
    return rows, notes


def ways(way: str, call):
    """``call`` with texts end to end attending one way (``BERTFN_ATTENTION``), the choice restored after it."""
    def forced():
        before = os.environ.get("BERTFN_ATTENTION")
        os.environ["BERTFN_ATTENTION"] = way
        try:
            return call()
        finally:
            if before is None:
                del os.environ["BERTFN_ATTENTION"]
            else:
                os.environ["BERTFN_ATTENTION"] = before
    return forced


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: cuda where torch sees one, else cpu)")
    parser.add_argument("--quick", action="store_true", help="few short sentences and repetitions: to test the script")
    parser.add_argument("--model", type=Path, help="checkpoint folder (default: build a bert-base-shaped random one)")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work", help="where the built checkpoint goes")
    parser.add_argument("--out", type=Path, help="also write the section to this file (default: print it only)")
    args = parser.parse_args(argv)

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {device}, but this torch ({torch.__version__}) sees no GPU")
    model_dir = args.model or random_checkpoint(args.workdir)
    started = datetime.datetime.now().astimezone()
    rows, notes = run(model_dir, device, args.quick)
    text = "\n".join([
        f"{HEADING}{' (--quick: too few repetitions to trust)' if args.quick else ''}", "",
        f"- device: {device}, {device_name(device)}",
        f"- started {started:%Y-%m-%d %H:%M %Z}; {versions(device)}",
        f"- model: {'bert-base-shaped random weights (bench/workload.py)' if args.model is None else args.model}",
        f"- command: python bench/gpu_bench.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        *(f"- {note}" for note in notes),
        "", table(rows), "",
        "Times are per call (the whole call: text in, answers out; on a GPU synchronised after it), median [min-max]; "
        "ratio = bertfn's median / the other side's: lower is better. No targets: issue 47 asks for the measurement.",
    ])
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
