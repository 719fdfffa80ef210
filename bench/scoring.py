"""Sentence scores (PLL): bertfn.score against minicons and the plain transformers way, in one run.

    python bench/scoring.py                    # bench.py's bert-base-shaped random checkpoint, 64 sentences
    python bench/scoring.py --model PATH       # a real checkpoint folder
    python bench/scoring.py --quick            # 8 short sentences, one round: checks the script, not the machine
    python bench/scoring.py --mutations        # 30 point mutants of an AntiBERTy chain: masked marginals vs 30 PLLs

The workload is bench.py's batch: 64 sentences (``--sentences``) evenly spread over 8-128 tokens ([CLS] and [SEP]
included; bench/workload.py), here without their [MASK], each scored whole by the original PLL
(every token but [CLS] and [SEP] masked in turn: n - 2 copies of n tokens per sentence). What each
side runs:

  * bertfn: ``bertfn.score(texts, model)`` in fp32; "bf16 mode" loads the same weights with
    ``dtype=torch.bfloat16``.
  * minicons: ``MaskedLMScorer(folder).sequence_score(texts, reduction=sum)``, 1 and 8 sentences per
    call (``--minicons-batch``; 1 pads nothing, 8 is a DataLoader's usual batch): the masked copies of
    all the sentences of a call form one padded batch, and its head computes every position's 30522 logits.
  * transformers: the plain way, one sentence at a time: its masked copies as one batch through
    ``BertForMaskedLM``, the log-softmax at the masked positions only, the true tokens' entries summed.

``--mutations`` times another workload, on the real AntiBERTy weights (pip install antiberty): the 30
point mutants of one heavy chain of tests/data/antibodies.tsv (:func:`point_mutants`) scored by
masked marginals (``bertfn.score_mutations``: the reference's positions masked once, every mutant read
off them) against their PLL change (the reference's and the 30 mutants' full PLLs), with the bf16
mode's error on the *score differences* the study reads. It writes its own section of ``--out``.

The sides take turns, one whole workload each, so that background load falls on all of them. The
table gives median [min-max] of the rounds and the ratio of the medians; the notes give how far the
scores are apart and each side's multiply-adds (:func:`multiply_adds`: at equal matrix-product speed,
their ratio is the floor of the time ratio). The table replaces this script's section of ``--out`` (default bench/RESULTS.md),
leaving bench.py's section as it is.
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
from bench import Row, load_average, machine, table, write_section  # noqa: E402
from workload import batch_texts, random_checkpoint  # noqa: E402

HEADING = "# bertfn scoring benchmark"
MUTATIONS_HEADING = "# bertfn mutation scoring (bench/scoring.py --mutations)"
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
BF16_PLL_MUTANTS = 10
"""Mutants whose PLL change --mutations also takes in the bf16 mode, for its error (all 30 would add many minutes)."""


def multiply_adds(cfg, lengths: list[int], minicons_batch: int) -> dict[str, float]:
    """Each side's multiply-adds in matrix products for scoring sentences of ``lengths`` tokens by the original PLL.

    A layer over n tokens: Q/K/V/output projections 4H^2 and feed-forward 2HI per token, attention
    2nH per token (scores and weighted sum); the MLM head H^2 + HV per position it runs at. Every
    side runs n - 2 copies of a sentence: bertfn unpadded, its last layer past K/V and the head at the
    scored position only; minicons pads a call's copies to its longest sentence and runs the head
    everywhere; the plain transformers way pads nothing and runs the head everywhere.
    """
    H, I, V, L = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    layer = lambda n: n * (4 * H * H + 2 * H * I + 2 * n * H)  # noqa: E731
    head = H * H + H * V
    last = lambda n: n * (3 * H * H + 2 * n * H) + H * H + 2 * H * I + head  # noqa: E731  bertfn's last layer and head
    calls = [lengths[s:s + minicons_batch] for s in range(0, len(lengths), minicons_batch)]
    return {"bertfn": sum((n - 2) * ((L - 1) * layer(n) + last(n)) for n in lengths),
            "minicons": sum(sum(n - 2 for n in c) * (L * layer(max(c)) + max(c) * head) for c in calls),
            "transformers": sum((n - 2) * (L * layer(n) + n * head) for n in lengths)}


def plain_transformers(model, tokenizer):
    """The plain transformers PLL of each text: its masked copies as one batch through ``BertForMaskedLM``, on the
    model's device."""
    import torch

    def run(texts: list[str]) -> list[float]:
        out = []
        for text in texts:
            ids = tokenizer(text, return_tensors="pt").input_ids[0].to(model.device)  # (n,)
            j = torch.arange(1, len(ids) - 1, device=ids.device)  # every position but [CLS] and [SEP]
            copies = ids.repeat(len(j), 1)  # (n - 2, n)
            copies[torch.arange(len(j), device=ids.device), j] = tokenizer.mask_token_id
            with torch.inference_mode():
                logits = model(input_ids=copies).logits[torch.arange(len(j), device=ids.device), j]  # (n - 2, V)
            out.append(logits.log_softmax(dim=-1).gather(1, ids[j, None]).sum().item())
        return out

    return run


def minicons_scores(scorer, batch: int):
    """minicons' PLL of each text (sum of the token log-probabilities), ``batch`` texts per call."""

    def run(texts: list[str]) -> list[float]:
        out = []
        for start in range(0, len(texts), batch):
            out += scorer.sequence_score(texts[start:start + batch], reduction=lambda x: x.sum(0).item())
        return out

    return run


def run(model_dir: Path, quick: bool, threads: int, minicons_batches: list[int], sentences: int,
        rounds: int) -> tuple[list[Row], list[str]]:
    import torch
    import transformers
    from minicons import scorer

    import bertfn

    torch.set_num_threads(threads)
    model = bertfn.load(model_dir)
    bf16 = model.to(dtype=torch.bfloat16)
    texts = batch_texts(model.tokenizer, max_tokens=16 if quick else min(128, model.config.max_position_embeddings),
                        n=8 if quick else sentences, mask=False)
    lengths = model.tokenizer(texts).attention_mask.sum(dim=1).tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlm = scorer.MaskedLMScorer(str(model_dir), device="cpu")
        hf = transformers.BertForMaskedLM.from_pretrained(model_dir).eval()
    minicons = {f"minicons, {b} sentence{'s' * (b > 1)} per call": b for b in minicons_batches}
    sides = {
        "bertfn": lambda t: [r["pll"] for r in bertfn.score(t, model)],
        "bf16": lambda t: [r["pll"] for r in bertfn.score(t, bf16)],
        **{name: minicons_scores(mlm, b) for name, b in minicons.items()},
        "transformers, plain": plain_transformers(hf, transformers.AutoTokenizer.from_pretrained(model_dir)),
    }
    warm = sorted(texts, key=len)[:2]
    for f in sides.values():  # untimed: first-call costs (allocations, oneDNN's packing) on two short texts
        f(warm)
    times: dict[str, list[float]] = {name: [] for name in sides}
    scores: dict[str, list[float]] = {}
    for r in range(1 if quick else rounds):
        for name, f in sides.items():
            start = time.perf_counter()
            scores[name] = f(texts)
            times[name].append(time.perf_counter() - start)
            print(f"round {r + 1}: {name} {times[name][-1]:.1f} s", file=sys.stderr, flush=True)

    n = len(texts)
    others = [*minicons, "transformers, plain"]
    target = lambda other, bound: bound if other in minicons else None  # noqa: E731  the issue's targets are against minicons
    rows = [*(Row(f"PLL of {n} mixed sentences, fp32", "s", times["bertfn"], other, times[other], target(other, "<= 0.5"))
              for other in others),
            *(Row(f"bf16 mode: PLL of {n} mixed sentences", "s", times["bf16"], other, times[other],
                  target(other, "<= 0.25")) for other in others)]
    gap = lambda a, b: max(abs(x - y) for x, y in zip(scores[a], scores[b]))  # noqa: E731
    rel = max(abs(x - y) / abs(y) for x, y in zip(scores["bf16"], scores["bertfn"]))
    work = {"bertfn": multiply_adds(model.config, lengths, 1)["bertfn"],
            **{name: multiply_adds(model.config, lengths, b)["minicons"] for name, b in minicons.items()},
            "transformers, plain": multiply_adds(model.config, lengths, 1)["transformers"]}
    notes = [f"{n} sentences of {min(lengths)} to {max(lengths)} tokens, {sum(lengths)} in all; "
             f"{sum(k * (k - 2) for k in lengths)} tokens in their masked copies",
             "fp32 sentence scores (natural log; the target is 1e-4): " + "; ".join(
                 f"bertfn vs {other} at most {gap('bertfn', other):.1e} apart" for other in others),
             f"bf16 mode sentence scores: at most {rel:.2%} from fp32's (relative; the target is 1%), "
             f"{max(abs(x - y) for x, y in zip(scores['bf16'], scores['bertfn'])):.2f} nats",
             "multiply-adds in matrix products (bench/scoring.py: multiply_adds): bertfn "
             f"{work['bertfn'] / 1e12:.1f} T; " + "; ".join(
                 f"{other} {work[other] / 1e12:.1f} T (bertfn's / its: {work['bertfn'] / work[other]:.3f}, the floor of "
                 "the fp32 time ratio at equal product speed)" for other in others)]
    return rows, notes


def point_mutants(sequence: str, n: int = 30, seed: int = 0) -> list[str]:
    """``n`` distinct single-residue mutants of ``sequence`` (positions and residues drawn with ``seed``),
    spaced one residue per word as AntiBERTy reads them."""
    import random

    rng, seen, out = random.Random(seed), set(), []
    while len(out) < n:
        j = rng.randrange(len(sequence))
        aa = rng.choice([a for a in AMINO_ACIDS if a != sequence[j]])
        if (j, aa) not in seen:
            seen.add((j, aa))
            out.append(" ".join(sequence[:j] + aa + sequence[j + 1:]))
    return out


def run_mutations(threads: int, rounds: int) -> tuple[list[Row], list[str]]:
    """The ``--mutations`` workload (module docstring): rows and notes."""
    import torch

    import bertfn
    from bertfn.tasks import mutations

    sys.path.insert(0, str(HERE.parent / "tests"))
    from conftest import antiberty_paths
    from test_antiberty import CHAINS

    torch.set_num_threads(threads)
    paths = antiberty_paths()
    if paths is None:
        sys.exit("--mutations needs the AntiBERTy weights: pip install antiberty")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # AntiBERTy's extra heads
        fp32 = bertfn.load(paths[0], tokenizer=paths[1], lowercase=False)
    bf16 = fp32.to(dtype=torch.bfloat16)
    name, _, sequence = next(c for c in CHAINS if c[1] == "heavy")
    reference, mutants = " ".join(sequence), point_mutants(sequence)
    for model in (fp32, bf16):  # untimed warm-up on the chain's first 20 residues (first-call costs)
        bertfn.substitution_matrix(reference[:39], model)

    def marginals(model) -> list[float]:
        return [r["score"] for r in bertfn.score_mutations(mutants, model, reference=reference)]

    def pll_change(model, k: int = len(mutants)) -> list[float]:
        return [r["score"] for r in bertfn.score_mutations(mutants[:k], model, reference=reference, method="pll")]

    times: dict[str, list[float]] = {}
    scores: dict[str, list[float]] = {}
    sides = {"marginal": lambda: marginals(fp32), "marginal bf16": lambda: marginals(bf16),
             "pll": lambda: pll_change(fp32), "pll bf16": lambda: pll_change(bf16, BF16_PLL_MUTANTS)}
    for r in range(rounds):
        for side, f in sides.items():
            mutations._last = None  # each call computes the reference's matrix anew, as a first call does
            start = time.perf_counter()
            scores[side] = f()
            times.setdefault(side, []).append(time.perf_counter() - start)
            print(f"round {r + 1}: {side} {times[side][-1]:.1f} s", file=sys.stderr, flush=True)
    gap = lambda a, b: max(abs(x - y) for x, y in zip(scores[a], scores[b]))  # noqa: E731  (zip: the shorter)
    rank = lambda xs: [sorted(xs).index(x) for x in xs]  # noqa: E731
    rho = statistics.correlation(rank(scores["marginal"]), rank(scores["pll"]))
    n = len(mutants)
    rows = [Row(f"{n} point mutants of a {len(sequence)}-residue chain, masked marginals, fp32", "s",
                times["marginal"], f"their PLL change ({n + 1} full PLLs), fp32", times["pll"]),
            Row("the same, masked marginals in the bf16 mode", "s", times["marginal bf16"],
                f"their PLL change ({n + 1} full PLLs), fp32", times["pll"])]
    notes = [f"chain: {name} ({len(sequence)} residues) of tests/data/antibodies.tsv; {n} mutants drawn by "
             "bench/scoring.py: point_mutants (seed 0); AntiBERTy weights (pip install antiberty)",
             f"bf16 mode's error on the mutants' scores (score differences, nats, at most): masked marginals "
             f"{gap('marginal bf16', 'marginal'):.3f} (all {n}); PLL change {gap('pll bf16', 'pll'):.3f} (the first "
             f"{BF16_PLL_MUTANTS}, {times['pll bf16'][-1]:.0f} s in the bf16 mode); the fp32 masked marginals range "
             f"from {min(scores['marginal']):.2f} to {max(scores['marginal']):.2f}",
             f"masked marginals vs PLL change in fp32: Spearman rank correlation {rho:.3f} over the {n} mutants "
             "(two different scores, not two ways to one number)"]
    return rows, notes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="checkpoint folder (default: build a bert-base-shaped random one)")
    parser.add_argument("--quick", action="store_true", help="8 short sentences, one round: to test the script")
    parser.add_argument("--mutations", action="store_true",
                        help="the mutation workload instead (AntiBERTy): masked marginals vs PLL change")
    parser.add_argument("--threads", type=int, default=None, help="threads for every side (default: torch's)")
    parser.add_argument("--minicons-batch", type=int, nargs="+", default=[1, 8],
                        help="sentences per sequence_score call: one minicons side per value")
    parser.add_argument("--sentences", type=int, default=64, help="sentences in the workload, spread over 8-128 tokens")
    parser.add_argument("--rounds", type=int, default=1, help="times each side scores the whole workload")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="file whose scoring section is replaced")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work", help="where the built checkpoint goes")
    args = parser.parse_args(argv)

    import torch

    threads = args.threads or torch.get_num_threads()
    if args.mutations:
        return _main_mutations(args, threads, argv)
    model_dir = args.model or random_checkpoint(args.workdir)
    started, load_before = datetime.datetime.now().astimezone(), load_average()
    rows, notes = run(model_dir, args.quick, threads, args.minicons_batch, args.sentences, args.rounds)
    from importlib.metadata import version

    text = "\n".join([
        f"{HEADING}{' (--quick: too few repetitions to trust)' if args.quick else ''}", "",
        f"- started {started:%Y-%m-%d %H:%M %Z}; load average (1, 5, 15 min) before {load_before}, "
        f"after {load_average()}",
        f"- machine: {machine(threads)}, minicons {version('minicons')}",
        f"- model: {'bert-base-shaped random weights (bench/workload.py)' if args.model is None else args.model}",
        f"- command: python bench/scoring.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        *(f"- {note}" for note in notes),
        "", table(rows), "",
        "Times are per call of the whole workload; ratio = bertfn's median / the other side's: lower is better. "
        "Targets are the issue's (bench/README.md): fp32 at least 2x minicons' speed, the bf16 mode at least 4x.",
    ])
    print(text)
    write_section(args.out, HEADING, text)


def _main_mutations(args: argparse.Namespace, threads: int, argv: list[str] | None) -> None:
    started, load_before = datetime.datetime.now().astimezone(), load_average()
    rows, notes = run_mutations(threads, args.rounds)
    text = "\n".join([
        MUTATIONS_HEADING, "",
        f"- started {started:%Y-%m-%d %H:%M %Z}; load average (1, 5, 15 min) before {load_before}, "
        f"after {load_average()}",
        f"- machine: {machine(threads)}",
        f"- command: python bench/scoring.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        *(f"- {note}" for note in notes),
        "", table(rows), "",
        "Times are per call scoring all the mutants (the reference's matrix or PLL included); ratio = masked "
        "marginals' median / the PLL change's: lower is better. No target: the issue asks for the comparison.",
    ])
    print(text)
    write_section(args.out, MUTATIONS_HEADING, text)


if __name__ == "__main__":
    main()
