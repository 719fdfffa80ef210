"""The explorer at 512 tokens on bert-base's shape: how long `bertfn view` takes and how much memory,
how big the file is, and how fast the page opens and answers in headless Chromium (issues 16, 25).

    python bench/explorer.py                     # the bert-base-shaped checkpoint of bench.py (built on first use)
    python bench/explorer.py --model ./bert-base-uncased

First `bertfn view` runs as a process of its own (``python -m bertfn view``, the whole command:
start, imports, load, trace, page, write): its wall time and peak RSS. Then two pages are measured:
the checkpoint's own, and the same page built from the least compressible data we know (each layer's
probabilities softmax rows of N(0, 1.6^2) scores, its queries and keys Gaussian noise), which bounds
the file size for any model of this shape. Browser times are wall-clock seconds from Python, each
action waited on until the page has drawn its result. Needs Chromium (apt-get install chromium) and
the playwright package; the numbers depend on the machine and its load. The results go to
bench/RESULTS.md as a section of their own (``--out`` elsewhere, ``--out ''`` nowhere).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bertfn  # noqa: E402
from bench import load_average, machine, write_section  # noqa: E402
from workload import NOUNS, random_checkpoint  # noqa: E402

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]


def long_text(tokenizer, n: int) -> str:
    """n - 2 one-token words with a [MASK] in the middle: n tokens with [CLS] and [SEP]."""
    words = [w for w in NOUNS if tokenizer.token_to_id(w) is not None]
    return " ".join("[MASK]" if i == (n - 2) // 2 else words[i % len(words)] for i in range(n - 2))


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def browse(browser, path: Path, layer: int, head: int, token: int) -> dict[str, float]:
    """Seconds for: open until drawn, switch to ``layer`` and ``head``, hover ``token``, open the model view, the neuron view."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    drawn = "(c) => { const d = window.bertfnExplorer && bertfnExplorer.lastDraw; return !!d && c(d); }"

    def until(condition: str) -> None:
        page.wait_for_function(f"() => ({drawn})({condition})", timeout=120_000)

    out = {"open": timed(lambda: (page.goto(path.as_uri()), until("d => true")))}
    out["layer + head"] = timed(lambda: (page.select_option("#layer", str(layer)), page.select_option("#head", str(head)),
                                         until(f"d => d.layer === {layer} && d.head === {head}")))

    def hover():
        point = page.evaluate(f"bertfnExplorer.tokenPoint('q', {token})")
        page.mouse.move(point["x"], point["y"])
        until(f"d => d.hover && d.hover.i === {token}")
    out["hover"] = timed(hover)
    out["model view"] = timed(lambda: (page.click("#tab-model"), until("d => d.view === 'model'")))
    out["neuron view"] = timed(lambda: (page.click("#tab-neuron"), until("d => d.view === 'neuron'")))
    page.close()
    return out


def view_process(folder: Path, text: str, out: Path) -> tuple[float, float, float]:
    """``python -m bertfn view TEXT --model FOLDER --out OUT`` as a fresh process: (wall seconds, CPU
    seconds (user + system, all threads), peak RSS in MB). The CPU seconds are the reading that other
    load on the machine disturbs less.

    Run before anything else starts a child process, so the children's usage is this process's."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bertfn", "view", text, "--model", str(folder), "--out", str(out)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    wall, usage = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


SECTION = "# bertfn explorer at 512 tokens (bench/explorer.py)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="a checkpoint folder (default: bench.py's random bert-base)")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--chromium", default=shutil.which("chromium"), help="the browser executable")
    parser.add_argument("--out", default=str(HERE / "RESULTS.md"), help="the file whose section it writes ('' for none)")
    args = parser.parse_args(argv)
    folder = args.model or random_checkpoint(HERE / ".work")
    started, load_before = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load_average()
    model = bertfn.load(folder)
    text = long_text(model.tokenizer, args.tokens)
    with tempfile.TemporaryDirectory() as tmp:
        view_s, view_cpu, view_mb = view_process(folder, text, Path(tmp) / "view.html")
    start = time.perf_counter()
    rec = bertfn.trace(text, model)
    trace_s = time.perf_counter() - start
    cfg = rec.config
    S, L, nh = len(rec.tokens), cfg.num_hidden_layers, cfg.num_attention_heads
    g = torch.Generator().manual_seed(0)
    noise = {f"layer.{i}.attention.probs": (torch.randn(1, nh, S, S, generator=g) * 1.6).softmax(-1) for i in range(L)}
    noise |= {f"layer.{i}.attention.{x}": torch.randn(1, nh, S, cfg.head_dim, generator=g) for i in range(L) for x in "qk"}
    pages = {"the model's": rec, "least compressible": dataclasses.replace(rec, tensors={**rec.tensors, **noise})}
    from playwright.sync_api import sync_playwright

    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=ARGS)
        for n, (name, r) in enumerate(pages.items()):
            path = Path(tmp) / f"page{n}.html"
            build_s = timed(lambda: r.save_html(path))
            rows.append((name, build_s, path.stat().st_size / 1e6, browse(browser, path, L - 1, nh - 1, S * 3 // 5)))
        browser.close()
    keys = list(rows[0][3])
    lines = [f"{folder.name}: {S} tokens, {L} layers x {nh} heads; trace {trace_s:.1f} s",
             f"bertfn view (the whole process): {view_s:.1f} s, {view_cpu:.1f} CPU s, peak RSS {view_mb:.0f} MB",
             "| page | to_html s | MB | " + " | ".join(f"{k} s" for k in keys) + " |",
             "|---|---|---|" + "---|" * len(keys)]
    lines += [f"| {name} | {build_s:.1f} | {mb:.1f} | " + " | ".join(f"{times[k]:.2f}" for k in keys) + " |"
              for name, build_s, mb, times in rows]
    print("\n".join(lines))
    if args.out:
        write_section(Path(args.out), SECTION, "\n".join([
            SECTION, "",
            f"- started {started}; load average (1, 5, 15 min) before {load_before}, after {load_average()}",
            f"- machine: {machine(torch.get_num_threads())}",
            f"- command: python bench/explorer.py {' '.join(sys.argv[1:] if argv is None else argv)}",
            "", *lines[:2], "", *lines[2:], "",
            "bertfn view: target <= 5 s and <= 1000 MB on 2 cores (issue 25). Pages: the model's own numbers, then the "
            "least compressible attention, queries and keys we know (the size bound for this shape); browser times "
            "in headless Chromium, each until the page has drawn the result."]))


if __name__ == "__main__":
    main()
