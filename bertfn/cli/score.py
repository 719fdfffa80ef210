"""``bertfn score``: :func:`bertfn.score` (pseudo-log-likelihoods) and, with ``--reference``,
:func:`bertfn.score_mutations` and :func:`bertfn.substitution_matrix`."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError, require_folder
from ..tasks.runner import packing
from ..tasks.scoring import BATCH_SIZE
from .options import (add_file_options, add_model_options, emit, model_from_args, no_texts, one_line,
                      run_file_command, subcommand)


def add(sub) -> None:
    sc = subcommand(sub, "score", "pseudo-log-likelihood of whole texts (each token masked in turn), or mutation effects",
                    'bertfn score "When in Rome, do as the Romans do." --per-token')
    sc.add_argument("text", nargs="*", help="one or more texts to score (or --input FILE)")
    sc.add_argument("--method", choices=("original", "within_word_l2r"), default="original",
                    help="original: each token masked alone; within_word_l2r: also the later pieces of its word")
    sc.add_argument("--per-token", action="store_true", help="list every token's log-probability")
    sc.add_argument("--json", action="store_true", help="print the results of bertfn.score as JSON")
    sc.add_argument("--batch-size", type=int, default=None, metavar="N",
                    help=f"masked copies per encoder pass, at most (default {BATCH_SIZE})")
    mut = sc.add_argument_group("mutations (the texts are variants of a reference)")
    mut.add_argument("--reference", metavar="TEXT",
                     help="score each text against TEXT by masked marginals: TEXT's positions masked once each, a "
                          "variant's score the sum of log P(its token) - log P(TEXT's token) where they differ")
    by = mut.add_mutually_exclusive_group()  # without either: masked marginals
    by.add_argument("--pll-change", action="store_true", help="with --reference: score by PLL minus TEXT's instead")
    by.add_argument("--wt-marginal", action="store_true", help="with --reference: by wild-type marginals (TEXT unmasked)")
    mut.add_argument("--matrix", metavar="FILE",
                     help="with --reference: write TEXT's substitution matrix (positions x vocabulary log-probabilities) "
                          "to FILE: .npy, .csv, .tsv or .parquet")
    add_model_options(sc)
    add_file_options(sc, detail=True)


def table(r: dict, per_token: bool) -> str:
    """One text's PLL on a line, then with ``per_token`` a row per token."""
    lines = [f"{r['pll']:.3f}  PLL ({r['num_tokens']} tokens, pseudo-perplexity {r['pseudo_perplexity']:.3f})  {r['text']}"]
    if per_token:
        lines.append(f"  {'token':<16} {'word':>4}  {'log-prob':>9}")
        lines += [f"  {t['token']:<16} {t['word']:>4}  {t['log_prob']:>9.4f}" for t in r["tokens"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..tasks.scoring import TASK, score

    if args.reference is None and (given := next((f for f in ("pll_change", "wt_marginal", "matrix") if getattr(args, f)), 0)):
        raise InputError(f"--{given.replace('_', '-')} goes with --reference TEXT, the text the others are variants of")
    if args.reference is not None:
        return run_mutations(args)
    options = dict(method=args.method, batch_size=BATCH_SIZE if args.batch_size is None else args.batch_size)
    if args.input is not None:
        return run_file_command(args, "score", **options)
    if not args.text:
        raise no_texts(args, "pass at least one text to score, or --input FILE; see 'bertfn score --help'")
    results = score(list(args.text), model_from_args(args, packing(TASK)), **options)
    if args.json:
        emit(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
    else:
        emit(("\n\n" if args.per_token else "\n").join(table(r, args.per_token) for r in results))
    return 0


def run_mutations(args: argparse.Namespace) -> int:
    """``bertfn score --reference TEXT [variants | --input FILE] [--matrix FILE]``: :func:`bertfn.score_mutations`
    (and :func:`bertfn.substitution_matrix`'s ``save``)."""
    from ..tasks.mutations import TASK as MUTATIONS
    from ..tasks.mutations import check_matrix_name, score_mutations, substitution_matrix

    if args.method != "original" or args.per_token or args.batch_size is not None or not (args.text or args.input or args.matrix):
        raise InputError("with --reference pass its variants (texts, or --input FILE) or --matrix FILE; --method, "
                         "--per-token and --batch-size are options of the PLL (for a variant's PLL change pass --pll-change)")
    if args.matrix:  # its name and folder, before the model loads and the matrix is made
        require_folder(check_matrix_name(args.matrix), "--matrix")
    model = model_from_args(args, packing(MUTATIONS)) if args.text or args.matrix else None  # a file run's too
    if args.matrix:
        wrote = f"wrote {substitution_matrix(args.reference, model).save(args.matrix)}"
        one_line("done", wrote) if args.input is not None else emit(wrote)  # stdout may be the JSON Lines
    method = "pll" if args.pll_change else "wt_marginal" if args.wt_marginal else "masked_marginal"
    if args.input is not None:
        return run_file_command(args, "score-mutations", model, reference=args.reference, method=method)
    if not args.text:  # the matrix alone
        return 0
    results = score_mutations(list(args.text), model, reference=args.reference, method=method)
    if args.json:
        emit(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
    else:
        emit("\n".join(f"{r['score']:9.3f}  {' '.join(x['code'] for x in r['mutations']) or '(the reference)'}  "
                       f"{r['text']}" for r in results))
    return 0
