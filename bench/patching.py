"""Patching each head of bert-base: bertfn's sweep against the same sweep written with nnsight (and TransformerLens), in one run.

    python bench/patching.py                   # bert-base-shaped random checkpoint, built on first use
    python bench/patching.py --model PATH      # a real checkpoint folder (config, weights, tokenizer)
    python bench/patching.py --quick           # one round: checks the script, not the machine
    python bench/patching.py --transformer-lens bench/.work/tl-venv/bin/python   # TransformerLens too

The workload (issue 21, item 4): a clean and a corrupted text of 16 tokens each with one [MASK] at the
same place (:data:`CLEAN`, :data:`CORRUPTED`); the metric is the logit difference of two tokens at the
mask (:data:`RIGHT` minus :data:`WRONG`). For each of the L x nh heads, the corrupted text is run with
that head's context (the attention's per-head output before its output projection, i.e. that head's
hd columns of the input of ``attention.output.dense`` in transformers) taken from the clean run.

What each side runs:
  * bertfn: ``bertfn.interventions.sweep(clean, corrupted, model, metric, over="heads")``, which runs
    the clean and the corrupted text once, the layers below each patch once, and a layer's heads as one
    batch through the layers above it (bertfn/interventions/patching.py).
  * nnsight: transformers' ``BertForMaskedLM`` from the same folder, in ``nnsight.TransformersModel``,
    written as nnsight's own docs write a layer x position map (docs/patterns/activation-patching.md):
    one trace of the clean text saves every layer's ``attention.output.dense`` input; then one trace
    per layer with one ``tracer.invoke(corrupted)`` per head (nnsight batches a trace's invokes into
    one forward pass), each writing its head's columns of that input from the clean run and keeping the
    metric. nnsight 0.8 serves BERT's ``attention.output`` submodule as ``attention.E_output`` (every
    module has an ``.output`` of its own), so the path reads ``attention.E_output.dense.input``.
  * nnsight, one trace: the same, with all L x nh invokes in a single trace (one forward of L x nh
    copies): nnsight's batching pushed as far as it goes.
  * TransformerLens (with ``--transformer-lens PYTHON``, a Python of its own environment: it needs
    transformers >= 5.9): ``transformer_lens.patching.get_act_patch_attn_head_out_all_pos`` over a
    ``TransformerBridge`` of the same folder, one forward per head (bench/patching_tl.py). Its sweeps
    run in a child process after the others' rounds, not in turn with them.

The sides take turns, one whole sweep each, so that background load falls on all of them; the table
gives median [min-max] of the rounds and the ratio of the medians. The maps must agree to 1e-5 (the
notes give the largest difference). The section replaces this script's own in ``--out`` (default
bench/RESULTS.md) and leaves the others as they are.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import Row, load_average, machine, matmul, table, write_section  # noqa: E402
from workload import random_checkpoint  # noqa: E402

HEADING = "# bertfn patching benchmark"
CLEAN = "when in rome , the king and queen do as the [MASK] do ."
CORRUPTED = "when in paris , the king and queen do as the [MASK] do ."
"""16 tokens each with [CLS] and [SEP], in bert-base-uncased's vocabulary, the benchmark's and the tests'."""
RIGHT, WRONG = "romans", "people"
"""The metric: logit of RIGHT minus logit of WRONG at the corrupted text's [MASK]."""
TL_SIDE = "TransformerLens, one forward per head"


def multiply_adds(cfg, S: int, N: int) -> dict[str, float]:
    """Each side's multiply-adds in matrix products for the sweep over heads of an S-token pair with N masks.

    A layer over S tokens: Q/K/V/output projections 4H^2 and feed-forward 2HI per token, attention 2SH
    per token; the MLM head H^2 + HV per position it runs at. nnsight runs the clean text once and each
    of the L x nh copies through every layer, the head at every position (``BertForMaskedLM``'s
    forward). bertfn runs the clean and corrupted texts once (``bertfn.trace``: the head everywhere);
    then each copy patched at layer i runs layer i and the layers above it, the last one's keys and
    values at every position and its queries, output projection and feed-forward at the masks alone,
    and the head at the masks.
    """
    H, I, V, L, nh = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers, cfg.num_attention_heads
    layer = S * (4 * H * H + 2 * H * I + 2 * S * H)
    last = S * 2 * H * H + N * (2 * H * H + 2 * H * I + 2 * S * H)  # keys and values everywhere, the rest at the masks
    head = H * H + H * V
    run = L * layer + S * head
    copies = sum(nh * (layer + (L - 2 - i) * layer + last) if i < L - 1 else nh * layer for i in range(L))
    return {"bertfn": 2 * run + copies + L * nh * N * head, "nnsight": (1 + L * nh) * run}


def bertfn_side(model, right: int, wrong: int):
    """bertfn's sweep over heads; returns the (L, nh) map."""
    from bertfn import interventions as iv

    metric = iv.logit_difference(right, wrong)
    return lambda: iv.sweep(CLEAN, CORRUPTED, model, metric, over="heads", progress=False).values


def nnsight_side(nn_model, right: int, wrong: int, one_trace: bool):
    """The same sweep in nnsight (see the module docstring); returns the (L, nh) map.

    one_trace False: one trace per layer, its heads as that trace's invokes (nnsight's docs' map);
    True: every head of every layer as an invoke of one trace.
    """
    import nnsight
    import torch

    cfg = nn_model.config
    L, nh = cfg.num_hidden_layers, cfg.num_attention_heads
    hd = cfg.hidden_size // nh
    layers = nn_model.bert.encoder.layer
    mask = nn_model.tokenizer(CORRUPTED).input_ids.index(nn_model.tokenizer.mask_token_id)

    def invokes(tracer, clean_ctx, i: int, values) -> None:
        for h in range(nh):
            cols = slice(h * hd, (h + 1) * hd)
            with tracer.invoke(CORRUPTED):
                layers[i].attention.E_output.dense.input[:, :, cols] = clean_ctx[i][:, :, cols]
                logits = nn_model.output.logits[0, mask]
                values.append((logits[right] - logits[wrong]).detach())

    def run():
        with torch.no_grad():
            with nn_model.trace(CLEAN):
                clean_ctx = nnsight.save([layer.attention.E_output.dense.input.detach() for layer in layers])
            if one_trace:
                with nn_model.trace() as tracer:
                    values = nnsight.save([])
                    for i in range(L):
                        invokes(tracer, clean_ctx, i, values)
                return torch.stack(list(values)).view(L, nh)
            rows = []
            for i in range(L):
                with nn_model.trace() as tracer:
                    values = nnsight.save([])
                    invokes(tracer, clean_ctx, i, values)
                rows.append(torch.stack(list(values)))
            return torch.stack(rows)

    return run


def run(model_dir: Path, quick: bool, threads: int, rounds: int, tl_python: Path | None) -> tuple[list[Row], list[str]]:
    import nnsight
    import torch
    from nnsight.modeling.transformers import TransformersModel

    import bertfn

    torch.set_num_threads(threads)
    model = bertfn.load(model_dir)
    ids = model.tokenizer([CLEAN, CORRUPTED]).input_ids
    right, wrong = model.tokenizer.token_to_id(RIGHT), model.tokenizer.token_to_id(WRONG)
    if right is None or wrong is None or 100 in ids.tolist()[0] + ids.tolist()[1]:
        raise SystemExit(f"{model_dir}'s vocabulary lacks a word of the benchmark's texts or {RIGHT!r}, {WRONG!r}")
    with warnings.catch_warnings():  # nnsight renames BERT's `output` submodules and says so for each
        warnings.simplefilter("ignore")
        nn_model = TransformersModel(str(model_dir), task="fill-mask", dispatch=True)
    nn_model.tokenizer.padding_side = "right"  # the default for an encoder; equal lengths pad nothing anyway
    sides = {"bertfn": bertfn_side(model, right, wrong),
             "nnsight, a trace per layer": nnsight_side(nn_model, right, wrong, one_trace=False),
             "nnsight, one trace": nnsight_side(nn_model, right, wrong, one_trace=True)}
    values = {name: f() for name, f in sides.items()}  # untimed: first-call costs, and the maps to compare
    times: dict[str, list[float]] = {name: [] for name in sides}
    peak_calls, peak_gflop = matmul("cpu")  # the machine's fp32 product rate (torch.mm and the fast path's kernel)
    peaks: list[float] = []
    for r in range(1 if quick else rounds):
        for name, f in sides.items():
            start = time.perf_counter()
            values[name] = f()
            times[name].append(time.perf_counter() - start)
            print(f"round {r + 1}: {name} {times[name][-1]:.2f} s", file=sys.stderr, flush=True)
            for call in peak_calls.values():  # timed between the sweeps; the best of either is the peak
                start = time.perf_counter()
                call()
                peaks.append(peak_gflop / (time.perf_counter() - start))

    tl_version = None
    if tl_python is not None:
        tl = transformer_lens_side(tl_python, model_dir, threads, 1 if quick else min(rounds, 3))
        tl_version, times[TL_SIDE], values[TL_SIDE] = tl["version"], tl["times"], torch.tensor(tl["map"])
        print(f"{TL_SIDE}: {', '.join(f'{t:.1f}' for t in times[TL_SIDE])} s", file=sys.stderr, flush=True)
    cfg = model.config
    L, nh, S = cfg.num_hidden_layers, cfg.num_attention_heads, ids.shape[1]
    work = f"patch each of {L} x {nh} heads, {S}-token pair"
    others = [name for name in times if name != "bertfn"]
    rows = [Row(work, "s", times["bertfn"], other, times[other], "<= 0.2") for other in others]
    macs = multiply_adds(cfg, S, 1)
    floor_s = 2 * macs["bertfn"] / 1e9 / max(peaks)  # bertfn's products at the best fp32 matmul rate seen
    rows.append(Row(work, "s", times["bertfn"], "its floor: bertfn's products at the fp32 matmul peak", [floor_s], None))
    diffs = {other: (values["bertfn"] - values[other]).abs().max().item() for other in others}
    if max(diffs.values()) > 1e-5:
        raise SystemExit(f"the maps differ by more than 1e-5: {diffs}")
    spread = values["bertfn"]
    work = macs
    best_other = min(statistics.median(times[other]) for other in others)
    notes = [f"clean {CLEAN!r}, corrupted {CORRUPTED!r} ({S} tokens each); metric: logit({RIGHT}) - "
             f"logit({WRONG}) at the [MASK]; the map's values span {spread.min():.4f} to {spread.max():.4f}",
             "largest difference between bertfn's map and each other side's (the bound is 1e-5): "
             + "; ".join(f"{other} {d:.1e}" for other, d in diffs.items()),
             f"multiply-adds in matrix products (bench/patching.py: multiply_adds): bertfn {work['bertfn'] / 1e9:.1f} G, "
             f"nnsight {work['nnsight'] / 1e9:.1f} G (both ways): bertfn's / nnsight's {work['bertfn'] / work['nnsight']:.3f}, "
             "the floor of the time ratio at equal product speed",
             f"fp32 matmul peak: the best of {len(peaks)} runs of torch.mm and the fast path's kernel, (2048, 768) @ (768, 3072), between the "
             f"sweeps (median {statistics.median(peaks):.0f}, best {max(peaks):.0f} GFLOP/s); at that rate bertfn's "
             f"{2 * macs['bertfn'] / 1e9:.0f} GFLOP take {floor_s:.2f} s, so no exact fp32 sweep of this design beats "
             f"{floor_s / best_other:.2f} of the fastest nnsight side's median here (the 0.2 target needs "
             f"{0.2 * best_other:.2f} s)",
             f"nnsight {nnsight.__version__}: BertForMaskedLM with transformers' default attention "
             f"({nn_model._module.config._attn_implementation}); the patch writes head h's columns "
             "[h*hd, (h+1)*hd) of `bert.encoder.layer[i].attention.output.dense`'s input"]
    if tl_version is not None:
        notes.append(f"TransformerLens {tl_version} (its own environment: {tl_python}): "
                     "patching.get_act_patch_attn_head_out_all_pos over TransformerBridge.boot_transformers of the "
                     f"folder, {len(times[TL_SIDE])} sweep(s) in a child process after the other sides' rounds")
    else:
        notes.append("TransformerLens: not run (--transformer-lens PYTHON adds it; bench/patching_tl.py says how to "
                     "make its environment)")
    return rows, notes


def transformer_lens_side(python: Path, model_dir: Path, threads: int, rounds: int) -> dict:
    """TransformerLens's sweeps in its own environment (bench/patching_tl.py): its version, times and map."""
    import json
    import subprocess

    # -P: bench/ not on its path (transformers 5 imports a package named `kernels`, as bench/kernels.py is)
    argv = [str(python), "-P", str(HERE / "patching_tl.py"), str(model_dir), CLEAN, CORRUPTED, RIGHT, WRONG,
            str(threads), str(rounds)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"TransformerLens's side failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="checkpoint folder (default: build a bert-base-shaped random one)")
    parser.add_argument("--quick", action="store_true", help="one round: to test the script")
    parser.add_argument("--threads", type=int, default=None, help="threads for every side (default: torch's)")
    parser.add_argument("--rounds", type=int, default=5, help="timed sweeps of each side")
    parser.add_argument("--transformer-lens", type=Path, metavar="PYTHON",
                        help="the Python of an environment with TransformerLens (bench/patching_tl.py): adds its side")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="file whose patching section is replaced")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work", help="where the built checkpoint goes")
    args = parser.parse_args(argv)

    import torch

    threads = args.threads or torch.get_num_threads()
    model_dir = args.model or random_checkpoint(args.workdir)
    started, load_before = datetime.datetime.now().astimezone(), load_average()
    rows, notes = run(model_dir, args.quick, threads, args.rounds, args.transformer_lens)
    from importlib.metadata import version

    text = "\n".join([
        f"{HEADING}{' (--quick: too few repetitions to trust)' if args.quick else ''}", "",
        f"- started {started:%Y-%m-%d %H:%M %Z}; load average (1, 5, 15 min) before {load_before}, "
        f"after {load_average()}",
        f"- machine: {machine(threads)}, nnsight {version('nnsight')}",
        f"- model: {'bert-base-shaped random weights (bench/workload.py)' if args.model is None else args.model}",
        f"- command: python bench/patching.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        *(f"- {note}" for note in notes),
        "", table(rows), "",
        "Times are per whole sweep (every head of every layer, the clean run included); ratio = bertfn's "
        "median / the other side's: lower is better. The target is the issue's (bench/README.md).",
    ])
    print(text)
    write_section(args.out, HEADING, text)


if __name__ == "__main__":
    main()
