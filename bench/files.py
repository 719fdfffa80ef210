"""The file rows of bench.py: ``bertfn fill-mask --input`` against the transformers pipeline fed the same file.

    python bench/files.py --model DIR [--lines 10000]    # these rows alone, as a section of bench/RESULTS.md
                                                        # (bench.py runs them with the rest, in its table)

Both sides start as fresh processes, read the same text file (one sentence with one [MASK] a line,
:func:`write_corpus`) and write one JSON line of top-5 answers per input line; a row's number is
lines / the process's wall time (interpreter start, imports and model load included, as a user
waits for them) and its peak RSS (``VmHWM``, read by the process itself).

* bertfn: ``bertfn fill-mask --input FILE --output OUT --model DIR --no-progress``, its defaults
  (chunks of 256 lines, each sorted by length and run end to end in groups of at most 16 texts).
* transformers: the way its documentation feeds a pipeline a file: ``datasets.load_dataset("text",
  data_files=FILE)``, then ``pipe(KeyDataset(ds, "text"), batch_size=b)``, which streams the rows
  in file order through a DataLoader in batches of b, padded to each batch's longest. Its best b
  among :data:`BATCH_SIZES` is chosen on the first :data:`SEARCH_LINES` lines (one process, every
  size in turn), then a fresh process runs the whole file with it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from workload import batch_texts  # noqa: E402

LINES = 10_000
MAX_TOKENS = 64
"""The file's sentences are 8 to 64 tokens long ([CLS] and [SEP] included), evenly spread, shuffled."""
BATCH_SIZES = (8, 32, 64)
"""The pipeline's candidates (batch size 1 is far slower on every machine tried: a call per line)."""
SEARCH_LINES = 200


def write_corpus(path: Path, tokenizer, lines: int, max_tokens: int = MAX_TOKENS) -> None:
    """``lines`` sentences of 8..``max_tokens`` tokens, one [MASK] each (:func:`workload.batch_texts`), one a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(batch_texts(tokenizer, max_tokens, lines, seed=1)) + "\n", encoding="utf-8")


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (``VmHWM``; Linux)."""
    status = Path("/proc/self/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")) / 2**10


def run_bertfn(model: str, src: str, out: str, device: str) -> dict:
    """What ``bertfn fill-mask --input`` does, in this process (``python -m bertfn`` calls the same main)."""
    from bertfn.cli import main

    code = main(["fill-mask", "--input", src, "--output", out, "--model", model, "--device", device, "--no-progress"])
    if code != 0:
        raise SystemExit(f"bertfn fill-mask exited {code}")
    return {"rss_mb": peak_rss_mb()}


def run_pipeline(model: str, src: str, out: str, device: str, batch_sizes: list[int], limit: int | None) -> dict:
    """The pipeline over ``KeyDataset(load_dataset("text", data_files=src))``, writing JSON lines to ``out``.

    limit: only the first ``limit`` lines, once per batch size (the search); None: the whole file with
    the one batch size. Returns the seconds each batch size took (model loaded) and the peak RSS.
    """
    import datasets
    from transformers import pipeline
    from transformers.pipelines.pt_utils import KeyDataset

    datasets.disable_progress_bars()
    ds = datasets.load_dataset("text", data_files=src, split="train")
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    pipe = pipeline("fill-mask", model=model, device=device)
    seconds = {}
    for b in batch_sizes:
        start = time.perf_counter()
        with open(out, "w", encoding="utf-8") as f:
            for n, (text, answers) in enumerate(zip(ds["text"], pipe(KeyDataset(ds, "text"), batch_size=b)), 1):
                f.write(json.dumps({"line": n, "text": text, "result": answers}, ensure_ascii=False) + "\n")
        seconds[b] = time.perf_counter() - start
    return {"seconds": seconds, "rss_mb": peak_rss_mb()}


def child(argv: list[str], threads: int) -> tuple[float, dict]:
    """Wall seconds of a fresh ``python bench/files.py --child ...`` process and what it printed, plus
    the CPU seconds it used (user + system: less sensitive than wall time to other load on the machine)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", HF_DATASETS_OFFLINE="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(HERE / "files.py"), "--child", *argv], capture_output=True,
                          text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"bench/files.py --child {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["cpu_seconds"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, report


def measure(model_dir: Path, tokenizer, workdir: Path, device: str, threads: int, lines: int,
            search_lines: int = SEARCH_LINES, batch_sizes: tuple[int, ...] = BATCH_SIZES) -> dict:
    """Both sides on one ``lines``-line file: texts/s and peak RSS of each, the pipeline's batch size and search."""
    src = workdir / "files" / f"corpus-{lines}.txt"
    write_corpus(src, tokenizer, lines)
    common = ["--model", str(model_dir), "--input", str(src), "--device", device]
    for name in ("bertfn.jsonl", "pipeline.jsonl", "search.jsonl"):  # bertfn never overwrites an output
        (workdir / "files" / name).unlink(missing_ok=True)
    search_lines = min(search_lines, lines)
    search = {"seconds": {}}
    if len(batch_sizes) > 1:  # the pipeline's best batch size, on the first lines of the file
        _, search = child(["pipeline", *common, "--output", str(workdir / "files" / "search.jsonl"),
                           "--batch-sizes", *map(str, batch_sizes), "--limit", str(search_lines)], threads)
    best = int(min(search["seconds"], key=search["seconds"].get)) if search["seconds"] else batch_sizes[0]
    wall_ours, ours = child(["bertfn", *common, "--output", str(workdir / "files" / "bertfn.jsonl")], threads)
    wall_theirs, theirs = child(["pipeline", *common, "--output", str(workdir / "files" / "pipeline.jsonl"),
                                 "--batch-sizes", str(best)], threads)
    for name in ("bertfn.jsonl", "pipeline.jsonl"):  # both wrote every line
        with open(workdir / "files" / name, "rb") as f:
            assert sum(1 for _ in f) == lines, name
    return {"lines": lines, "bertfn_texts_s": lines / wall_ours, "pipeline_texts_s": lines / wall_theirs,
            "bertfn_rss_mb": ours["rss_mb"], "pipeline_rss_mb": theirs["rss_mb"], "batch_size": best,
            "search": {int(b): s for b, s in search["seconds"].items()}, "search_lines": search_lines,
            "bertfn_seconds": wall_ours, "pipeline_seconds": wall_theirs,
            "bertfn_cpu_seconds": ours["cpu_seconds"], "pipeline_cpu_seconds": theirs["cpu_seconds"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=("bertfn", "pipeline"), help=argparse.SUPPRESS)
    parser.add_argument("--model", required=True, help="checkpoint folder")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--input", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES), help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--lines", type=int, default=LINES, help="lines of the file (default 10000)")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="the file whose section it writes")
    parser.add_argument("--threads", type=int, default=None, help="threads for both sides (default: torch's)")
    args = parser.parse_args(argv)
    if args.child == "bertfn":
        print(json.dumps(run_bertfn(args.model, args.input, args.output, args.device)))
    elif args.child == "pipeline":
        print(json.dumps(run_pipeline(args.model, args.input, args.output, args.device, args.batch_sizes, args.limit)))
    else:
        import torch

        import bertfn

        tokenizer = bertfn.load(args.model).tokenizer
        started, load_before = time.strftime("%Y-%m-%d %H:%M %Z"), " ".join(f"{x:.2f}" for x in os.getloadavg())
        threads = args.threads or torch.get_num_threads()
        f = measure(Path(args.model), tokenizer, args.workdir, args.device, threads, args.lines)
        print(json.dumps(f, indent=2))
        write_section(args.out, f, started, load_before, threads, args.model, argv)


SECTION = "# bertfn file rows (bench/files.py)"


def write_section(out: Path, f: dict, started: str, load_before: str, threads: int, model: str,
                  argv: list[str] | None) -> None:
    """Put the file rows in ``out`` (bench/RESULTS.md) as a section of their own, replacing an earlier one."""
    import bench

    rows = [bench.Row(f"fill-mask --input, {f['lines']}-line file (8-{MAX_TOKENS} tokens), whole process", "texts/s",
                      [f["bertfn_texts_s"]], f"pipeline over KeyDataset, batch size {f['batch_size']}",
                      [f["pipeline_texts_s"]], ">= 1.5"),
            bench.Row("peak RSS of that process", "MB", [f["bertfn_rss_mb"]], "pipeline over KeyDataset",
                      [f["pipeline_rss_mb"]], "<= 1.0")]
    search = ", ".join(f"{b}: {t:.1f} s" for b, t in f["search"].items())
    text = "\n".join([
        SECTION, "",
        f"- started {started}; load average (1, 5, 15 min) before {load_before}, after "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()),
        f"- machine: {bench.machine(threads)}",
        f"- model: {model}; command: python bench/files.py {' '.join(sys.argv[1:] if argv is None else argv)}",
        f"- {f['lines']} lines in {f['bertfn_seconds']:.1f} s (bertfn) and {f['pipeline_seconds']:.1f} s (pipeline), "
        f"{f['bertfn_cpu_seconds']:.1f} and {f['pipeline_cpu_seconds']:.1f} CPU seconds (user + system; ratio "
        f"{f['pipeline_cpu_seconds'] / f['bertfn_cpu_seconds']:.2f}x); the pipeline's batch size is its fastest on "
        f"the first {f['search_lines']} lines ({search})",
        "", bench.table(rows), "",
        "One run of each side, one after the other: texts/s = lines / the process's wall time; ratio = bertfn / "
        "pipeline (higher is better for texts/s, lower for MB)."])
    bench.write_section(out, SECTION, text)


if __name__ == "__main__":
    main()
