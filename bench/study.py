"""A 16-pair patching study of bert-base's heads: bertfn's sweep over a data set of pairs against nnsight and TransformerLens.

    python bench/study.py                      # bert-base-shaped random checkpoint, built on first use
    python bench/study.py --model PATH         # a real checkpoint folder (config, weights, tokenizer)
    python bench/study.py --quick              # one round of 4 pairs: checks the script, not the machine
    python bench/study.py --transformer-lens bench/.work/tl-venv/bin/python   # TransformerLens too

The workload (issue 37): :func:`pairs` builds 16 clean/corrupted pairs from one template in
bert-base-uncased's vocabulary, "when in rome , the {a} and {b} do as the [MASK] do ." (clean) against
the same with another one-token city in place of "rome" (corrupted), {a} and {b} two one-token nouns
that change from pair to pair. Each pair has the same number of tokens in both texts and its one [MASK]
at the same place; **all 16 pairs have the same length too (16 tokens with [CLS] and [SEP])**, so that
nnsight and TransformerLens can run the 16 as one unpadded batch: their best case. The metric of one
example is the logit of :data:`RIGHT` minus that of :data:`WRONG` at its corrupted text's [MASK]. The
study patches each of the L x nh heads (the head's context: its hd columns of the input of
``attention.output.dense`` in transformers, ``hook_z`` in TransformerLens, ``layer.{i}.attention.context``
in bertfn) from the clean run into the corrupted run, for every pair; each side returns the
(pairs, L, nh) per-example map, whose mean over the pairs is the study's map.

What each side runs:
  * bertfn: ``bertfn.interventions.sweep(cleans, corrupteds, model, metric, over="heads")`` once, with
    the lists of the 16 texts; ``.per_example`` is the (16, L, nh) map (bertfn/interventions/patching.py).
  * nnsight, a trace per layer: transformers' ``BertForMaskedLM`` in ``nnsight.TransformersModel``, as
    nnsight's docs write a layer x position map (docs/patterns/activation-patching.md) with a batch per
    invoke (docs/patterns/multi-prompt-comparison.md): one trace of the 16 clean texts saves every
    layer's ``attention.output.dense`` input; then one trace per layer with one
    ``tracer.invoke(corrupteds)`` per head, each invoke the batch of 16 corrupted texts, writing its
    head's columns of that input from the clean run and keeping the 16 metrics (results keyed by head,
    as the docs advise). nnsight 0.8 serves BERT's ``attention.output`` submodule as
    ``attention.E_output``, so the path reads ``attention.E_output.dense.input``.
  * nnsight, one trace: the same with all L x nh invokes in a single trace (one forward of
    L x nh x 16 texts).
  * TransformerLens (with ``--transformer-lens PYTHON``, a Python of its own environment: it needs
    transformers >= 5.9): ``transformer_lens.patching.get_act_patch_attn_head_out_all_pos`` over
    ``TransformerBridge.boot_transformers`` of the same folder, on the batch of 16, one forward of the
    batch per head; the metric returns the (16,) per-example values and ``reduce="none"`` keeps them
    (TransformerLens 4.3's helpers take a scalar metric by default) (bench/study_tl.py). Its sweeps run
    in a child process after the others' rounds, not in turn with them.

After one untimed call each on the first pair alone (first-call costs), the sides take turns, one
whole study each, so that background load falls on all of them; the table gives median [min-max] of
the rounds and the ratio of the medians. The per-example maps must agree to 1e-5 (the notes give the
largest difference). The section replaces this script's own in ``--out``
(default bench/RESULTS.md) and leaves the others as they are.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import Row, load_average, machine, matmul, table, write_section  # noqa: E402
from workload import random_checkpoint  # noqa: E402

HEADING = "# bertfn study benchmark"
TEMPLATE = "when in {city} , the {a} and {b} do as the [MASK] do ."
"""The pairs' template: 16 tokens with [CLS] and [SEP] whatever one-token words fill it."""
CLEAN_CITY = "rome"
CITIES = "paris london athens venice florence naples vienna madrid lisbon".split()
"""The corrupted texts' cities, in turn (those that are one token in the model's vocabulary)."""
NOUNS = "king queen man woman cat dog".split()
"""{a} and {b}: ordered pairs of two different nouns, one per study pair (30 of them)."""
RIGHT, WRONG = "romans", "people"
"""The metric: logit of RIGHT minus logit of WRONG at the corrupted text's [MASK]."""
PAIRS = 16
TL_SIDE = "TransformerLens, one forward of the batch per head"


def pairs(tokenizer, n: int = PAIRS) -> tuple[list[str], list[str]]:
    """``n`` clean texts and ``n`` corrupted ones from :data:`TEMPLATE`, all of the same length in tokens.

    tokenizer: a ``bertfn.Tokenizer`` (``token_to_id`` keeps the words that are one token; the tokens of
    the texts are checked). Pair k: nouns ``(a, b)``, the k-th ordered pair of two different :data:`NOUNS`;
    clean city "rome", corrupted city the k-th of :data:`CITIES` (cycling).
    """
    one = lambda ws: [w for w in ws if tokenizer.token_to_id(w) is not None]  # noqa: E731
    nouns, cities = one(NOUNS), one(CITIES)
    couples = [(a, b) for a, b in itertools.permutations(nouns, 2)]
    if tokenizer.token_to_id(CLEAN_CITY) is None or not cities or len(couples) < n:
        raise SystemExit(f"the vocabulary lacks the words of the study's {n} pairs ({CLEAN_CITY!r}, a city of "
                         f"{CITIES}, two nouns of {NOUNS})")
    cleans = [TEMPLATE.format(city=CLEAN_CITY, a=a, b=b) for a, b in couples[:n]]
    corrupteds = [TEMPLATE.format(city=cities[k % len(cities)], a=a, b=b) for k, (a, b) in enumerate(couples[:n])]
    enc = tokenizer(cleans + corrupteds)
    ids = enc.input_ids.tolist()
    lengths = enc.attention_mask.sum(dim=1).tolist()
    masks = {tuple(i for i, t in enumerate(row) if t == tokenizer.mask_token_id) for row in ids}
    if len(set(lengths)) != 1 or len(masks) != 1 or any(tokenizer.unk_token_id in row for row in ids):
        raise SystemExit(f"the study's texts must all have one length and one [MASK] at one place, no [UNK]: "
                         f"lengths {sorted(set(lengths))}, masks {sorted(masks)}")
    return cleans, corrupteds


def bertfn_side(model, cleans: list[str], corrupteds: list[str], right: int, wrong: int):
    """bertfn's study: one ``sweep`` over the lists of pairs; returns the (pairs, L, nh) per-example map."""
    from bertfn import interventions as iv

    metric = iv.logit_difference(right, wrong)  # metric(run): run["mlm.logits"] (N, V) at the corrupted text's masks
    return lambda: iv.sweep(cleans, corrupteds, model, metric, over="heads", progress=False).per_example


def nnsight_side(nn_model, cleans: list[str], corrupteds: list[str], right: int, wrong: int, one_trace: bool):
    """The same study in nnsight (see the module docstring); returns the (pairs, L, nh) per-example map.

    one_trace False: one trace per layer, its heads as that trace's invokes, each invoke the batch of
    corrupted texts; True: every head of every layer as an invoke of one trace.
    """
    import nnsight
    import torch

    cfg = nn_model.config
    L, nh = cfg.num_hidden_layers, cfg.num_attention_heads
    hd = cfg.hidden_size // nh
    layers = nn_model.bert.encoder.layer
    mask = nn_model.tokenizer(corrupteds[0]).input_ids.index(nn_model.tokenizer.mask_token_id)  # the same in all

    def invokes(tracer, clean_ctx, i: int, values) -> None:
        for h in range(nh):
            cols = slice(h * hd, (h + 1) * hd)
            with tracer.invoke(corrupteds):  # the batch of corrupted texts, one head patched in all of them
                layers[i].attention.E_output.dense.input[:, :, cols] = clean_ctx[i][:, :, cols]
                logits = nn_model.output.logits[:, mask]  # (pairs, V)
                values[(i, h)] = (logits[:, right] - logits[:, wrong]).detach()

    def run():
        with torch.no_grad():
            with nn_model.trace(cleans):
                clean_ctx = nnsight.save([layer.attention.E_output.dense.input.detach() for layer in layers])
            values = {}
            if one_trace:
                with nn_model.trace() as tracer:
                    got = nnsight.save({})
                    for i in range(L):
                        invokes(tracer, clean_ctx, i, got)
                values.update(got)
            else:
                for i in range(L):
                    with nn_model.trace() as tracer:
                        got = nnsight.save({})
                        invokes(tracer, clean_ctx, i, got)
                    values.update(got)
            return torch.stack([torch.stack([values[(i, h)] for h in range(nh)], dim=-1) for i in range(L)], dim=1)

    return run


def run(model_dir: Path, quick: bool, threads: int, rounds: int, n_pairs: int,
        tl_python: Path | None, tl_rounds: int | None = None) -> tuple[list[Row], list[str]]:
    import nnsight
    import torch
    from nnsight.modeling.transformers import TransformersModel

    import bertfn
    from patching import multiply_adds

    torch.set_num_threads(threads)
    model = bertfn.load(model_dir)
    cleans, corrupteds = pairs(model.tokenizer, n_pairs)
    right, wrong = model.tokenizer.token_to_id(RIGHT), model.tokenizer.token_to_id(WRONG)
    if right is None or wrong is None:
        raise SystemExit(f"{model_dir}'s vocabulary lacks {RIGHT!r} or {WRONG!r}")
    with warnings.catch_warnings():  # nnsight renames BERT's `output` submodules and says so for each
        warnings.simplefilter("ignore")
        nn_model = TransformersModel(str(model_dir), task="fill-mask", dispatch=True)
    nn_model.tokenizer.padding_side = "right"  # the default for an encoder; equal lengths pad nothing anyway

    def make(cleans: list[str], corrupteds: list[str]) -> dict:
        return {"bertfn": bertfn_side(model, cleans, corrupteds, right, wrong),
                "nnsight, a trace per layer, a batch per invoke": nnsight_side(nn_model, cleans, corrupteds, right,
                                                                                wrong, one_trace=False),
                "nnsight, one trace, a batch per invoke": nnsight_side(nn_model, cleans, corrupteds, right, wrong,
                                                                        one_trace=True)}

    for f in make(cleans[:1], corrupteds[:1]).values():  # untimed: first-call costs, on the first pair alone
        f()
    sides = make(cleans, corrupteds)
    values = {}
    times: dict[str, list[float]] = {name: [] for name in sides}
    peak_calls, peak_gflop = matmul("cpu")  # the machine's fp32 product rate (torch.mm and the fast path's kernel)
    peaks: list[float] = []
    for r in range(1 if quick else rounds):
        for name, f in sides.items():
            start = time.perf_counter()
            values[name] = f()
            times[name].append(time.perf_counter() - start)
            print(f"round {r + 1}: {name} {times[name][-1]:.2f} s", file=sys.stderr, flush=True)
            for call in peak_calls.values():  # timed between the studies; the best of either is the peak
                start = time.perf_counter()
                call()
                peaks.append(peak_gflop / (time.perf_counter() - start))

    tl_version = None
    if tl_python is not None:
        tl = transformer_lens_side(tl_python, model_dir, cleans, corrupteds, threads,
                                   1 if quick else tl_rounds or min(rounds, 3))
        tl_version, times[TL_SIDE], values[TL_SIDE] = tl["version"], tl["times"], torch.tensor(tl["per_example"])
        print(f"{TL_SIDE}: {', '.join(f'{t:.1f}' for t in times[TL_SIDE])} s", file=sys.stderr, flush=True)

    cfg = model.config
    L, nh = cfg.num_hidden_layers, cfg.num_attention_heads
    S = model.tokenizer(cleans[:1]).input_ids.shape[1]
    shape = (n_pairs, L, nh)
    for name, v in values.items():
        if tuple(v.shape) != shape:
            raise SystemExit(f"{name}'s per-example map has shape {tuple(v.shape)}, not {shape}")
    work = f"study: patch each of {L} x {nh} heads in {n_pairs} pairs of {S} tokens"
    others = [name for name in times if name != "bertfn"]
    rows = [Row(work, "s", times["bertfn"], other, times[other], None) for other in others]
    macs = {k: n_pairs * v for k, v in multiply_adds(cfg, S, 1).items()}  # the one-pair sweep's, once per pair
    floor_s = 2 * macs["bertfn"] / 1e9 / max(peaks)  # bertfn's products at the best fp32 matmul rate seen
    rows.append(Row(work, "s", times["bertfn"], "its floor: bertfn's products at the fp32 matmul peak", [floor_s], None))
    ours = values["bertfn"]
    diffs = {other: (ours - values[other]).abs().max().item() for other in others}
    mean_diffs = {other: (ours.mean(0) - values[other].mean(0)).abs().max().item() for other in others}
    if max(diffs.values()) > 1e-5:
        raise SystemExit(f"the per-example maps differ by more than 1e-5: {diffs}")
    mean = ours.mean(0)
    top = divmod(int(mean.abs().argmax()), nh)
    best_other = min(statistics.median(times[other]) for other in others)
    notes = [f"{n_pairs} pairs: clean {TEMPLATE.format(city=CLEAN_CITY, a='{a}', b='{b}')!r}, corrupted the same with "
             f"another city; e.g. {cleans[0]!r} / {corrupteds[0]!r}, {cleans[-1]!r} / {corrupteds[-1]!r}; all "
             f"{2 * n_pairs} texts {S} tokens, the [MASK] at one place; metric per example: logit({RIGHT}) - "
             f"logit({WRONG}) at the [MASK]",
             f"bertfn's per-example map spans {ours.min():.4f} to {ours.max():.4f}; the mean over pairs "
             f"{mean.min():.4f} to {mean.max():.4f}, largest at layer {top[0]}, head {top[1]} ({mean[top]:.4f})",
             "largest difference between bertfn's per-example map and each other side's (the bound is 1e-5): "
             + "; ".join(f"{other} {d:.1e}" for other, d in diffs.items())
             + "; between the means over pairs: " + "; ".join(f"{other} {d:.1e}" for other, d in mean_diffs.items()),
             f"multiply-adds in matrix products ({n_pairs} x bench/patching.py's multiply_adds of one pair): bertfn "
             f"{macs['bertfn'] / 1e9:.1f} G, nnsight {macs['nnsight'] / 1e9:.1f} G (both ways): bertfn's / nnsight's "
             f"{macs['bertfn'] / macs['nnsight']:.3f}, the floor of the time ratio at equal product speed",
             f"fp32 matmul peak: the best of {len(peaks)} runs of torch.mm and the fast path's kernel, (2048, 768) @ "
             f"(768, 3072), between the studies (median {statistics.median(peaks):.0f}, best {max(peaks):.0f} "
             f"GFLOP/s); at that rate bertfn's {2 * macs['bertfn'] / 1e9:.0f} GFLOP take {floor_s:.2f} s, "
             f"{floor_s / best_other:.2f} of the fastest other side's median",
             f"nnsight {nnsight.__version__}: BertForMaskedLM with transformers' default attention "
             f"({nn_model._module.config._attn_implementation}); each invoke is the batch of {n_pairs} corrupted "
             "texts and writes head h's columns [h*hd, (h+1)*hd) of `bert.encoder.layer[i].attention.output.dense`'s "
             f"input from one trace of the {n_pairs} clean texts"]
    if tl_version is not None:
        notes.append(f"TransformerLens {tl_version} (its own environment: {tl_python}): "
                     "patching.get_act_patch_attn_head_out_all_pos(..., reduce=\"none\") over "
                     f"TransformerBridge.boot_transformers of the folder, on the batch of {n_pairs}, a metric returning "
                     f"the ({n_pairs},) per-example values; {len(times[TL_SIDE])} study(ies) in a child process after "
                     "the other sides' rounds (bench/study_tl.py)")
    else:
        notes.append("TransformerLens: not run (--transformer-lens PYTHON adds it; bench/patching_tl.py says how to "
                     "make its environment)")
    return rows, notes


def transformer_lens_side(python: Path, model_dir: Path, cleans: list[str], corrupteds: list[str], threads: int,
                          rounds: int) -> dict:
    """TransformerLens's studies in its own environment (bench/study_tl.py): its version, times and per-example map."""
    import json
    import subprocess

    job = {"folder": str(model_dir), "cleans": cleans, "corrupteds": corrupteds, "right": RIGHT, "wrong": WRONG,
           "threads": threads, "rounds": rounds}
    # -P: bench/ not on its path (transformers 5 imports a package named `kernels`, as bench/kernels.py is)
    done = subprocess.run([str(python), "-P", str(HERE / "study_tl.py")], input=json.dumps(job),
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"TransformerLens's side failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="checkpoint folder (default: build a bert-base-shaped random one)")
    parser.add_argument("--quick", action="store_true", help="one round of 4 pairs: to test the script")
    parser.add_argument("--pairs", type=int, default=None, help=f"pairs in the study (default {PAIRS}; --quick: 4)")
    parser.add_argument("--threads", type=int, default=None, help="threads for every side (default: torch's)")
    parser.add_argument("--rounds", type=int, default=3, help="timed studies of each side")
    parser.add_argument("--transformer-lens", type=Path, metavar="PYTHON",
                        help="the Python of an environment with TransformerLens (bench/study_tl.py): adds its side")
    parser.add_argument("--tl-rounds", type=int, default=None,
                        help="TransformerLens's timed studies (default: --rounds, at most 3; --quick: 1)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="file whose study section is replaced")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work", help="where the built checkpoint goes")
    args = parser.parse_args(argv)

    import torch

    threads = args.threads or torch.get_num_threads()
    n_pairs = args.pairs or (4 if args.quick else PAIRS)
    model_dir = args.model or random_checkpoint(args.workdir)
    started, load_before = datetime.datetime.now().astimezone(), load_average()
    rows, notes = run(model_dir, args.quick, threads, args.rounds, n_pairs, args.transformer_lens, args.tl_rounds)
    from importlib.metadata import version

    text = "\n".join([
        f"{HEADING}{' (--quick: too few repetitions to trust)' if args.quick else ''}", "",
        f"- started {started:%Y-%m-%d %H:%M %Z}; load average (1, 5, 15 min) before {load_before}, "
        f"after {load_average()}",
        f"- machine: {machine(threads)}, nnsight {version('nnsight')}",
        f"- model: {'bert-base-shaped random weights (bench/workload.py)' if args.model is None else args.model}",
        f"- command: python bench/study.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        *(f"- {note}" for note in notes),
        "", table(rows), "",
        "Times are per whole study (every head of every layer in every pair, the clean runs included); ratio = "
        "bertfn's median / the other side's: lower is better. Issue 37 sets no target (bench/README.md).",
    ])
    print(text)
    write_section(args.out, HEADING, text)


if __name__ == "__main__":
    main()
