"""bertfn against transformers (and ONNX Runtime) on the same checkpoint, in one run.

    python bench/bench.py                      # bert-base-shaped random checkpoint, built on first use
    python bench/bench.py --model PATH         # a real checkpoint folder (config, weights, tokenizer)
    python bench/bench.py --quick              # few repetitions: checks the script, not the machine

Every timed row runs bertfn and the other side alternately in the same process (one call of each,
then again), so background load hits both alike; the table gives the median and the min-max of
the repetitions and the ratio of the medians. Cold start and peak memory run fresh processes
(``python bench/bench.py --child ...``), again alternating. The file rows run ``bertfn fill-mask
--input`` and the pipeline over a 10,000-line file, each in a fresh process (bench/files.py). The
table goes to stdout and, with the machine it ran on, to ``--out`` (default bench/RESULTS.md).

What each side runs:
  * bertfn: ``bertfn.fill_mask`` / ``bertfn.encoder`` as a user calls them, in fp32; the "bf16
    mode" rows load the same checkpoint with ``dtype=torch.bfloat16``.
  * transformers: ``pipeline("fill-mask")`` and ``BertForMaskedLM.bert`` (its defaults: SDPA
    attention, no_grad). For the batch its input is sorted by length, its best case.
  * ONNX Runtime: the same ``BertForMaskedLM`` exported with ``torch.onnx.export``, forward only
    (tokenized input in, logits out), batches sorted by length.
All three use the same number of threads (``--threads``, default: torch's, one per core).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import files  # noqa: E402
from workload import ROME, batch_texts, random_checkpoint  # noqa: E402

BATCH_SIZES = (1, 8, 16, 64)


# --- measuring ------------------------------------------------------------------------------------


def alternate(calls: dict, reps: int, sync=lambda: None, warm_up: bool = True) -> dict[str, list[float]]:
    """Seconds per call of each of ``calls`` (name -> no-argument function), ``reps`` times each.

    One untimed warm-up call each (unless ``warm_up`` is False: --quick's batches), then round-robin:
    a, b, c, a, b, c, ... so that a burst of background load lands on every side rather than on one.
    """
    for f in calls.values() if warm_up else ():
        f()
    sync()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(reps):
        for name, f in calls.items():
            start = time.perf_counter()
            f()
            sync()
            times[name].append(time.perf_counter() - start)
    return times


@dataclass
class Row:
    """One line of the table: a bertfn measurement against another side's."""

    workload: str
    unit: str
    ours: list[float]
    other_name: str
    other: list[float]
    target: str | None = None  # the bound on the ratio ours / other, e.g. "<= 0.5"; None: no target

    @property
    def ratio(self) -> float:
        return statistics.median(self.ours) / statistics.median(self.other)

    @property
    def met(self) -> str:
        if self.target is None:
            return "-"
        op, bound = self.target.split()
        return "yes" if (self.ratio <= float(bound) if op == "<=" else self.ratio >= float(bound)) else "no"


def fmt(values: list[float], unit: str) -> str:
    scale = {"ms": 1e3, "s": 1.0, "MB": 1.0, "GFLOP/s": 1.0, "texts/s": 1.0}[unit]
    med, lo, hi = (scale * v for v in (statistics.median(values), min(values), max(values)))
    digits = 1 if med >= 10 else 2
    return f"{med:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


def table(rows: list[Row]) -> str:
    lines = ["| workload | unit | bertfn median [min-max] | compared with | its median [min-max] "
             "| ratio bertfn/other | target | met |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.workload} | {r.unit} | {fmt(r.ours, r.unit)} | {r.other_name} | {fmt(r.other, r.unit)} "
                     f"| {r.ratio:.3f} | {r.target or '-'} | {r.met} |")
    return "\n".join(lines)


# --- the sides -------------------------------------------------------------------------------------


def onnx_session(model_dir: Path, workdir: Path, threads: int, device: str):
    """An ONNX Runtime session on ``BertForMaskedLM`` exported from ``model_dir`` (cached in ``workdir``).

    On a CUDA device it uses ORT's CUDA provider when the installed onnxruntime has one.
    """
    import onnxruntime as ort
    import torch
    import transformers

    files = sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in model_dir.iterdir())
    key = hashlib.sha1(repr((str(model_dir.resolve()), files)).encode()).hexdigest()[:12]
    path = workdir / "onnx" / f"{model_dir.name}-{key}.onnx"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        hf = transformers.BertForMaskedLM.from_pretrained(model_dir).eval()
        ids = torch.tensor([[101, 2000, 103, 102]]) % hf.config.vocab_size
        names = ["input_ids", "attention_mask", "token_type_ids"]
        with warnings.catch_warnings():  # the TorchScript exporter's deprecation and tracer notices
            warnings.simplefilter("ignore")
            torch.onnx.export(hf, (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(path), dynamo=False,
                              input_names=names, output_names=["logits"], opset_version=17,
                              dynamic_axes={n: {0: "batch", 1: "seq"} for n in names + ["logits"]})
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # ORT's threads spin for a while after each run, waiting for the next; in an alternating benchmark
    # they would take the cores from the side that runs next.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    cuda = device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers()
    return ort.InferenceSession(str(path), options,
                                providers=(["CUDAExecutionProvider"] if cuda else []) + ["CPUExecutionProvider"])


def onnx_fill(session, tokenizer, texts: list[str], batch_size: int) -> None:
    """``texts`` (sorted by length) through the exported model in batches; the top token at each [MASK].

    tokenizer: a ``bertfn.Tokenizer`` (the same vocabulary, Rust WordPiece, padding to the batch's longest).
    """
    for start in range(0, len(texts), batch_size):
        enc = tokenizer(texts[start:start + batch_size])
        ids = enc.input_ids.numpy()
        logits = session.run(None, {"input_ids": ids, "attention_mask": enc.attention_mask.numpy(),
                                    "token_type_ids": enc.token_type_ids.numpy()})[0]
        logits[ids == tokenizer.mask_token_id].argmax(-1)


def products(model, groups: list[tuple[int, int]]) -> Callable[[], object]:
    """A call that runs only the matrix products of a fill-mask over ``groups`` of (tokens, masks).

    For each group: every linear layer of the encoder at ``tokens`` rows, then the MLM head's two
    products at ``masks`` rows, on the model's own weights through the fast path's ``linear`` (the
    kernel chosen on this machine, :mod:`bertfn.fast.choice`). One sentence is ``[(its tokens, 1)]``;
    a batch is the groups ``fill_mask`` forms (:func:`batch_groups`). Everything else (attention,
    GELU, LayerNorm, tokenizing, Python) comes on top.
    """
    import torch

    from bertfn.checkpoint.state import LINEAR_WEIGHT
    from bertfn.fast.choice import linear as fast_linear

    state = model.state
    layers = [(w, state[k[: -len("weight")] + "bias"]) for k, w in state.items()
              if k.startswith("bert.encoder.") and LINEAR_WEIGHT.search(k)]
    widths = {w.shape[1] for w, _ in layers}
    x = [({n: torch.randn(t, n, device=model.device) for n in widths},
          torch.randn(m, model.config.hidden_size, device=model.device)) for t, m in groups]

    def run() -> None:
        with torch.inference_mode():
            for rows, at_masks in x:
                for w, b in layers:
                    fast_linear(rows[w.shape[1]], w, b)
                h = fast_linear(at_masks, state["cls.predictions.transform.dense.weight"],
                             state["cls.predictions.transform.dense.bias"])
                fast_linear(h, state["cls.predictions.decoder.weight"], state["cls.predictions.bias"])

    return run


def batch_groups(lengths: list[int], batch_size: int) -> list[tuple[int, int]]:
    """(tokens, masks) of each group ``fill_mask`` runs for texts of these lengths, one [MASK] each."""
    from bertfn.fast.batching import GROUP_TOKENS, text_groups

    return [(sum(lengths[i] for i in g), len(g)) for g in text_groups(lengths, batch_size, GROUP_TOKENS)]


def useful_gflop(config, lengths: list[int], masks: int) -> float:
    """FLOPs of the real tokens only: the layers' matmuls, attention scores and mixing, the MLM head at the masks.

    Per layer and text of n tokens: Q, K, V, O (4 n H^2 multiply-adds), the FFN (2 n H I), and
    Q K^T and P V (2 n^2 H). The head: transform (H^2) and decoder (H V) per [MASK]. 2 FLOPs per
    multiply-add; LayerNorm, GELU, softmax and biases are left out (a few % at most).
    """
    H, I, V, L = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    macs = sum(L * (4 * n * H * H + 2 * n * H * I + 2 * n * n * H) for n in lengths) + masks * (H * H + H * V)
    return 2 * macs / 1e9


def sentence_gflop(config, n: int) -> float:
    """FLOPs one fill-mask of an ``n``-token sentence with one [MASK] cannot do without: every layer's products
    at its n rows but the last's, whose output is read at the [MASK] alone (its Q, K and V at n rows, the
    rest at 1), and the MLM head at 1 row. Attention's own products are left out: a lower bound."""
    H, I, V, L = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    macs = (L - 1) * n * (4 * H * H + 2 * H * I) + n * 3 * H * H + (H * H + 2 * H * I) + (H * H + H * V)
    return 2 * macs / 1e9


def peak_gflops(device: str, dtype, sync=lambda: None, quick: bool = False) -> float:
    """The best GFLOP/s of :func:`matmul`'s workloads in ``dtype`` over 5 alternating rounds after a warm-up: what the
    best kernel does when arithmetic, not memory, bounds it. ``quick`` (--quick): one round, not warmed up, the
    rows' form and not a number to trust."""
    mm, gflop = matmul(device, dtype)
    return max(gflop / min(times) for times in alternate(mm, 1 if quick else 5, sync, warm_up=not quick).values())


def matmul(device: str, dtype=None) -> tuple[dict[str, Callable[[], object]], float]:
    """fp32 (or ``dtype``) matmul workloads near this machine's peak, and their GFLOP: 8 x (2048, 768) @ (768, 3072).

    The shape of BERT's FFN with many rows (the FLOP rate levels off from about 1024 rows on), by
    ``torch.mm`` and by the fast path's kernel for many rows (on the weight laid out as bertfn.load
    lays it); the best kernel's peak is the faster of the two. They run alternately with the batch
    workload, so all see the same load. A bf16 product on a CPU without a bf16 kernel (AVX2 alone:
    bertfn.fast.kernels.ONEDNN_DTYPES) is the fast path's widened one alone: there ``torch.mm`` is
    emulated, about 150x fp32's time, a peak no kernel of any side has (and 15 minutes of --quick).
    """
    import torch

    from bertfn.checkpoint.state import in_out
    from bertfn.fast.choice import linear
    from bertfn.fast.kernels import ONEDNN_DTYPES

    a, b = torch.randn(2048, 768, device=device, dtype=dtype), torch.randn(768, 3072, device=device, dtype=dtype)
    w = in_out(b.t().contiguous())  # (3072, 768) as a linear weight

    def fast() -> None:
        with torch.inference_mode():
            for _ in range(8):
                linear(a, w)

    emulated = dtype == torch.bfloat16 and torch.device(device).type == "cpu" and dtype not in ONEDNN_DTYPES
    return ({} if emulated else {"torch.mm": lambda: [torch.mm(a, b) for _ in range(8)]}) | {"kernel": fast}, \
        8 * 2 * 2048 * 768 * 3072 / 1e9


# --- the machine's floor, and faster-clip -----------------------------------------------------------


def stream_gbs(device: str, quick: bool = False) -> float:
    """The machine's read bandwidth in GB/s: the best of 5 sums over 440 MB of fp32 after a warm-up (more than
    any cache holds, about what one bert-base forward pass reads), on torch's threads; ``quick`` (--quick): one
    sum, the rows' form and not a number to trust."""
    import torch

    x = torch.ones(110_000_000, device=device)
    best = float("inf")
    for _ in range(1 if quick else 6):
        start = time.perf_counter()
        x.sum().item()
        best = min(best, time.perf_counter() - start)
    return x.numel() * x.element_size() / best / 1e9


def read_bytes(model) -> int:
    """Bytes of weights a fill-mask of one sentence must read at least once: every tensor of the encoder
    and the MLM head (the decoder reads the whole word-embedding table), each tied tensor once; not the
    position and token-type tables (a few rows are read) nor the pooler or NSP head (unused)."""
    skip = ("bert.embeddings.position_embeddings.", "bert.embeddings.token_type_embeddings.", "bert.pooler.",
            "cls.seq_relationship.")
    unique = {id(t): t for k, t in model.state.items() if not k.startswith(skip)}
    return sum(t.numel() * t.element_size() for t in unique.values())


def cpu_flags() -> str:
    """The CPU's vector and matrix extensions that decide which kernel is fastest, from /proc/cpuinfo (Linux)."""
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
    try:
        flags = next(line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("flags"))
    except (OSError, StopIteration):
        return "flags: unknown (no /proc/cpuinfo)"
    have = [f for f in wanted if f in flags]
    return "flags: " + " ".join(have) + ("" if any(f.startswith("amx") for f in have) else " (no AMX)")


def faster_clip_fill(model_dir: Path, workdir: Path, threads: int, config):
    """faster-clip's ``FillMask`` (a Rust engine, per-channel int8 weights) on the bench's checkpoint, or
    the reason it cannot run here (not installed; a model of other shapes than bert-base-uncased's,
    which it assumes). Offline: ``FASTER_CLIP_CACHE=DIR`` holds ``DIR/bert-base-uncased/`` with the
    checkpoint's model.safetensors and tokenizer.json (linked). Its threads: ``RAYON_NUM_THREADS``."""
    shapes = (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.intermediate_size)
    if shapes != (768, 12, 12, 3072):
        return None, f"not run: it assumes bert-base's shapes (768, 12 layers, 12 heads, 3072), this model has {shapes}"
    try:
        import faster_clip
    except ImportError:
        return None, "not run: faster-clip is not installed (pip install faster-clip, or the bench extra)"
    cache = workdir / "faster-clip"
    folder = cache / "bert-base-uncased"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("model.safetensors", "tokenizer.json"):
        link = folder / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to((model_dir / name).resolve())
    os.environ["FASTER_CLIP_CACHE"] = str(cache)
    os.environ["RAYON_NUM_THREADS"] = str(threads)  # read when its thread pool starts, at its first call
    fm = faster_clip.FillMask()
    version = getattr(faster_clip, "__version__", "?")
    return (lambda text: fm.predict(text, lang="en", top_k=5)), f"faster-clip {version}, {threads} threads"


# --- fresh processes -------------------------------------------------------------------------------


def child(side: str, model: str, device: str) -> None:
    """What a cold-start process does: import, load, answer one fill-mask; print seconds and peak RSS."""
    start = time.perf_counter()
    if side == "bertfn":
        import bertfn

        bertfn.fill_mask(ROME, model, device=device)
    else:
        from transformers import pipeline

        pipeline("fill-mask", model=model, device=device)(ROME)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "rss_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB.

    Linux: ``VmHWM`` from /proc/self/status. Not ``getrusage``'s ``ru_maxrss``: a child started by
    fork + exec inherits its parent's maximum there, so every child would report the benchmark's own size.
    """
    try:
        status = Path("/proc/self/status").read_text()
        return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")) / 2**10
    except (OSError, StopIteration):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # bytes on macOS


def fresh(side: str, model: Path, device: str, threads: int) -> tuple[float, float]:
    """Wall seconds of a whole fresh ``--child`` process (interpreter start included) and its peak RSS in MB."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TRANSFORMERS_VERBOSITY="error",
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    start = time.perf_counter()
    out = subprocess.run([sys.executable, str(HERE / "bench.py"), "--child", side, "--model", str(model),
                          "--device", device], capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - start
    return wall, json.loads(out.stdout.strip().splitlines()[-1])["rss_mb"]


# --- the run ---------------------------------------------------------------------------------------


def machine(threads: int) -> str:
    import onnxruntime
    import torch
    import transformers

    import bertfn
    from bertfn.fast.choice import cpu_model

    return (f"{cpu_model()} ({cpu_flags()}), {os.cpu_count()} logical cores, {threads} threads; Python {platform.python_version()}, "
            f"torch {torch.__version__}, transformers {transformers.__version__}, onnxruntime "
            f"{onnxruntime.__version__}, bertfn {bertfn.__version__}")


def write_section(path: Path, heading: str, text: str) -> None:
    """Put ``text`` (which starts with ``heading``) in ``path`` in place of the section that starts with
    ``heading``; the file's other sections stay as they are (bench.py, scoring.py and files.py each own one).

    A section runs from a line starting with "# bertfn " to the next such line. A new section goes last.
    """
    sections: list[list[str]] = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# bertfn ") or not sections:
                sections.append([line])
            else:
                sections[-1].append(line)
    blocks = ["\n".join(s).strip() for s in sections]
    mine = [i for i, b in enumerate(blocks) if b.startswith(heading)]
    if mine:
        blocks[mine[0]] = text
    else:
        blocks.append(text)
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def run(model_dir: Path, quick: bool, device: str, threads: int, workdir: Path,
        file_lines: int) -> tuple[list[Row], list[str]]:
    """Every row of the table, and notes on the run (the machine's floor, the kernels chosen, real tokens,
    peaks, the bf16 mode's distance to fp32, faster-clip's answers)."""
    import torch
    import transformers

    import bertfn
    from bertfn.fast import choice

    torch.set_num_threads(threads)
    reps = dict(single=3, batch=1, fresh=1) if quick else dict(single=30, batch=3, fresh=5)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    fastest = lambda runs: min(runs, key=statistics.median)  # noqa: E731  (of several lists of times)

    model = bertfn.load(model_dir).to(device)
    bf16 = model.to(dtype=torch.bfloat16)  # the optional faster mode, from the same weights
    pipe = transformers.pipeline("fill-mask", model=str(model_dir), device=device)
    session = onnx_session(model_dir, workdir, threads, device)
    fc, fc_note = faster_clip_fill(model_dir, workdir, threads, model.config) if device == "cpu" else \
        (None, "not run: CPU only")
    texts = batch_texts(model.tokenizer, max_tokens=min(128, model.config.max_position_embeddings))
    lengths = model.tokenizer(texts).attention_mask.sum(dim=1).tolist()
    by_length = [t for _, t in sorted(zip(lengths, texts))]  # what the other sides get: their best order
    enc = model.tokenizer([ROME])  # the one-sentence workload
    n = enc.input_ids.shape[1]
    # its floor: its weights read once at stream bandwidth, or its FLOPs at the best kernel's peak,
    # whichever takes longer (on this AMD EPYC at 12 rows the two are close: 24 FLOPs per fp32 weight read)
    gbs_before = stream_gbs(device, quick)
    bytes32, bytes16 = read_bytes(model), read_bytes(bf16)
    flops = sentence_gflop(model.config, n)
    peak32, peak16 = (peak_gflops(device, dtype, sync, quick) for dtype in (torch.float32, torch.bfloat16))
    floor32 = max(bytes32 / gbs_before / 1e9, flops / peak32)  # seconds
    floor16 = max(bytes16 / gbs_before / 1e9, flops / peak16)
    rows: list[Row] = []

    # one sentence, end to end: text in, top-5 answers out (ONNX Runtime: tokenized ids in, logits out)
    feed = {"input_ids": enc.input_ids.numpy(), "attention_mask": enc.attention_mask.numpy(),
            "token_type_ids": enc.token_type_ids.numpy()}
    calls = {"bertfn": lambda: bertfn.fill_mask(ROME, model),
             "pipeline": lambda: pipe(ROME),
             "onnx": lambda: session.run(None, feed),
             "bf16": lambda: bertfn.fill_mask(ROME, bf16),
             "products": products(model, [(n, 1)])}
    if fc is not None:
        calls["faster-clip"] = lambda: fc(ROME)
    t = alternate(calls, reps["single"], sync)
    rows += [Row(f"fill-mask, 1 sentence ({n} tokens), text to answers", "ms", t["bertfn"],
                 "transformers pipeline", t["pipeline"], "<= 0.5"),
             Row("fill-mask, 1 sentence: bertfn end to end vs ONNX Runtime forward only", "ms", t["bertfn"],
                 "ONNX Runtime", t["onnx"], "<= 1.0"),
             Row("fill-mask, 1 sentence vs the machine's floor: its weights read once at stream bandwidth, or its "
                 "FLOPs at the best kernel's peak, whichever is longer", "ms", t["bertfn"], "floor, fp32", [floor32],
                 "<= 2.0")]
    if fc is not None:
        rows.append(Row("fill-mask, 1 sentence vs faster-clip (Rust, int8 weights), text to answers", "ms",
                        t["bertfn"], "faster-clip", t["faster-clip"], "<= 1.0"))
    rows += [Row("that sentence's matrix products alone, fp32 (the kernel chosen here)", "ms", t["products"],
                 "ONNX Runtime", t["onnx"]),
             Row("bf16 mode: fill-mask, 1 sentence", "ms", t["bf16"], "transformers pipeline", t["pipeline"], "<= 0.5"),
             Row("bf16 mode: fill-mask, 1 sentence vs ONNX Runtime forward only", "ms", t["bf16"],
                 "ONNX Runtime", t["onnx"], "<= 1.0"),
             Row("bf16 mode: fill-mask, 1 sentence vs the machine's floor (bf16 weights, bf16 peak)", "ms", t["bf16"],
                 "floor, bf16", [floor16], "<= 2.0")]

    # the encoder alone, on the same ids
    ids, mask, types = (x.to(device) for x in (enc.input_ids, enc.attention_mask, enc.token_type_ids))
    with torch.inference_mode():
        t = alternate({"bertfn": lambda: bertfn.encoder(model.params, ids, mask, types),
                       "hf": lambda: pipe.model.bert(input_ids=ids, attention_mask=mask, token_type_ids=types)},
                      reps["single"], sync)
    rows.append(Row(f"encoder forward, 1 sentence ({n} tokens)", "ms", t["bertfn"], "transformers BertModel", t["hf"]))

    # 64 sentences of mixed length, one [MASK] each, at every batch size (bf16 and faster-clip: at bertfn's best, 64)
    ours, theirs, onnx, floors, peaks = [], [], [], [], []
    mm, mm_gflop = matmul(device)
    batch_sizes = (8, 64) if quick else BATCH_SIZES  # --quick: checks the script in under 3 minutes
    for b in batch_sizes:
        calls = {"bertfn": lambda: bertfn.fill_mask(texts, model, batch_size=b),
                 "pipeline": lambda: pipe(by_length, batch_size=b),
                 "onnx": lambda: onnx_fill(session, model.tokenizer, by_length, b),
                 "products": products(model, batch_groups(lengths, b)),
                 **{f"matmul {k}": f for k, f in mm.items()}}
        if b == max(batch_sizes):
            calls["bf16"] = lambda: bertfn.fill_mask(texts, bf16, batch_size=b)
            if fc is not None:
                calls["faster-clip"] = lambda: [fc(text) for text in texts]  # it takes one text a call
        t = alternate(calls, reps["batch"], sync, warm_up=not quick)
        peaks += [mm_gflop / s for k in mm for s in t[f"matmul {k}"]]
        ours.append(t["bertfn"]), theirs.append(t["pipeline"]), onnx.append(t["onnx"]), floors.append(t["products"])
        rows.append(Row(f"fill-mask, {len(texts)} mixed sentences, batch size {b}", "s", t["bertfn"],
                        "transformers pipeline", t["pipeline"]))
    best = fastest(ours)
    rows += [Row(f"fill-mask, {len(texts)} mixed sentences, each side's best batch size", "s", best,
                 "transformers pipeline", fastest(theirs), "<= 0.625"),
             Row(f"fill-mask, {len(texts)} mixed sentences, best vs ONNX Runtime's best (forward only)", "s",
                 best, "ONNX Runtime", fastest(onnx), "<= 1.0")]
    if fc is not None:
        rows.append(Row(f"fill-mask, {len(texts)} mixed sentences, best vs faster-clip (a call per sentence)", "s",
                        best, "faster-clip", t["faster-clip"]))
    rows += [Row("the matrix products alone of bertfn's best batch size, fp32 (the kernel chosen here)", "s",
                 floors[ours.index(best)], "transformers pipeline", fastest(theirs)),
             Row(f"bf16 mode: fill-mask, {len(texts)} mixed sentences, vs the pipeline's best", "s", t["bf16"],
                 "transformers pipeline", fastest(theirs), "<= 0.625"),
             Row(f"bf16 mode: fill-mask, {len(texts)} mixed sentences, vs ONNX Runtime's best", "s", t["bf16"],
                 "ONNX Runtime", fastest(onnx), "<= 1.0")]

    # useful work per second on the batch, against what the best fp32 kernel reached in the same rounds
    gflop = useful_gflop(model.config, lengths, masks=len(texts))
    rows.append(Row(f"useful GFLOP/s on the {len(texts)} sentences (real tokens only)", "GFLOP/s",
                    [gflop / s for s in best], "best fp32 kernel's peak", [max(peaks)], ">= 0.85"))

    # fresh processes: import, load, answer once
    cold: dict[str, list[tuple[float, float]]] = {"bertfn": [], "transformers": []}
    for _ in range(reps["fresh"]):
        for side in cold:
            cold[side].append(fresh(side, model_dir, device, threads))
    rows += [Row("cold start: fresh process imports, loads, answers 1 fill-mask", "s",
                 [w for w, _ in cold["bertfn"]], "transformers pipeline", [w for w, _ in cold["transformers"]],
                 "<= 0.5"),
             Row("peak RSS of that process", "MB", [m for _, m in cold["bertfn"]], "transformers pipeline",
                 [m for _, m in cold["transformers"]], "<= 0.8")]

    # files: bertfn fill-mask --input against the pipeline over KeyDataset, fresh processes (bench/files.py)
    f = files.measure(model_dir, model.tokenizer, workdir, device, threads, file_lines,
                      **(dict(batch_sizes=(8,)) if quick else {}))  # --quick: no search
    rows += [Row(f"fill-mask --input, {f['lines']}-line file (8-{files.MAX_TOKENS} tokens), "
                 "whole process", "texts/s", [f["bertfn_texts_s"]],
                 f"pipeline over KeyDataset, batch size {f['batch_size']}", [f["pipeline_texts_s"]], ">= 1.5"),
             Row("peak RSS of that process", "MB", [f["bertfn_rss_mb"]], "pipeline over KeyDataset",
                 [f["pipeline_rss_mb"]], "<= 1.0")]

    gbs = max(gbs_before, stream_gbs(device, quick))  # again after the run: the better of the two
    kernels = "; ".join(f"{name}: {c['kernel']}" + (" (" + ", ".join(f"{k} {v:.1f}" for k, v in c["ms"].items())
                                                     + " ms)" if c["ms"] else " (forced)")
                        for name, c in choice.chosen().items())
    notes = [f"stream bandwidth (a sum over 440 MB, the better of a run before and after the table): {gbs:.1f} GB/s; "
             f"one sentence reads at least {bytes32 / 1e6:.0f} MB of weights in fp32 "
             f"({bytes16 / 1e6:.0f} MB in bf16), {bytes32 / gbs_before / 1e6:.1f} and "
             f"{bytes16 / gbs_before / 1e6:.1f} ms at the bandwidth measured before the table; it needs at "
             f"least {flops:.2f} GFLOP (sentence_gflop), {flops / peak32 * 1e3:.1f} ms at the fp32 peak of "
             f"{peak32:.0f} GFLOP/s and {flops / peak16 * 1e3:.1f} ms at the bf16 peak of {peak16:.0f} GFLOP/s "
             f"(peak_gflops, before the table); floors, the longer of the two: {floor32 * 1e3:.1f} ms fp32, "
             f"{floor16 * 1e3:.1f} ms bf16",
             f"kernels chosen here (bertfn.fast.choice, {choice.machine_key()}; per dtype and row band, the "
             f"measurement's times on bert-base layers): {kernels}",
             f"faster-clip: {fc_note}" + (f"; its top 5 for the sentence share {top5_overlap(fc, model)} of 5 tokens "
                                           "with bertfn's (int8 weights, near-uniform answers on random weights)"
                                           if fc is not None else ""),
             f"{sum(lengths)} real tokens in the {len(texts)} sentences ({min(lengths)} to {max(lengths)} each), "
             f"{gflop:.0f} GFLOP of useful work; best fp32 kernel's peak: the best of {len(peaks)} runs of "
             f"(2048, 768) @ (768, 3072), by torch.mm and by the kernel chosen for many rows, between the batch "
             f"runs (median {statistics.median(peaks):.0f}, best {max(peaks):.0f} GFLOP/s); the pipeline's best "
             f"reaches {gflop / statistics.median(fastest(theirs)):.0f} useful GFLOP/s",
             f"bf16 mode (bertfn.load(..., dtype=torch.bfloat16)): hidden states of the 64 sentences within "
             f"{bf16_distance(model, bf16, texts):.2%} (relative RMS) of fp32; the test bound is 3%",
             f"file rows: {f['lines']} lines in {f['bertfn_seconds']:.1f} s (bertfn) and {f['pipeline_seconds']:.1f} s "
             f"(pipeline), {f['bertfn_cpu_seconds']:.1f} and {f['pipeline_cpu_seconds']:.1f} CPU seconds (user + "
             f"system; ratio {f['pipeline_cpu_seconds'] / f['bertfn_cpu_seconds']:.2f}x); the pipeline's batch size is its fastest on the first {f['search_lines']} lines ("
             + (", ".join(f"{b}: {t:.1f} s" for b, t in f["search"].items()) or "not searched: --quick") + ")"]
    return rows, notes


def top5_overlap(fc, model) -> int:
    """How many of faster-clip's top 5 tokens for the sentence are among bertfn's."""
    import bertfn

    ours = {a["token_str"] for a in bertfn.fill_mask(ROME, model)}
    return len(ours & {a["token_str"] for a in fc(ROME)})


def bf16_distance(model, bf16, texts: list[str]) -> float:
    """Relative RMS distance of the bf16 model's last hidden states from fp32's, over the real tokens."""
    import torch

    import bertfn

    enc = model.tokenizer(texts)
    ids, mask = enc.input_ids.to(model.device), enc.attention_mask.to(model.device)
    with torch.inference_mode():
        h = bertfn.encoder(model.params, ids, mask).last_hidden_state[mask.bool()]
        h16 = bertfn.encoder(bf16.params, ids, mask).last_hidden_state[mask.bool()].float()
    return float((h16 - h).norm() / h.norm())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="checkpoint folder (default: build a bert-base-shaped random one)")
    parser.add_argument("--quick", action="store_true", help="few repetitions, to test the script")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--threads", type=int, default=None, help="threads for every side (default: torch's)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="where the table is written")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work", help="built checkpoint and ONNX export")
    parser.add_argument("--file-lines", type=int, default=None,
                        help=f"lines of the file rows' input (default {files.LINES}, --quick 32)")
    parser.add_argument("--child", choices=("bertfn", "transformers"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, str(args.model), args.device)

    import torch

    threads = args.threads or torch.get_num_threads()
    model_dir = args.model or random_checkpoint(args.workdir)
    started, load_before = datetime.datetime.now().astimezone(), load_average()
    file_lines = args.file_lines or (32 if args.quick else files.LINES)
    rows, notes = run(model_dir, args.quick, args.device, threads, args.workdir, file_lines)
    text = "\n".join([
        f"# bertfn benchmark{' (--quick: too few repetitions to trust)' if args.quick else ''}", "",
        f"- started {started:%Y-%m-%d %H:%M %Z}; load average (1, 5, 15 min) before {load_before}, "
        f"after {load_average()}",
        f"- machine: {machine(threads)}",
        f"- device: {args.device}; model: "
        f"{'bert-base-shaped random weights (bench/workload.py)' if args.model is None else args.model}",
        f"- command: python bench/bench.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        *(f"- {note}" for note in notes),
        "", table(rows), "",
        "Times are per call (ms, s) or per process (cold start); ratio = bertfn's median / the other side's "
        "median: lower is better, except for GFLOP/s. Targets are the issue's (bench/README.md); '-' has none. "
        "bf16 mode rows hold bertfn's optional bf16 mode to the same targets as fp32; every other row is fp32.",
    ])
    print(text)
    write_section(args.out, "# bertfn benchmark", text)


if __name__ == "__main__":
    main()
