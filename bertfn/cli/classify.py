"""``bertfn classify``: :func:`bertfn.classify`, labels for each text (or text pair)."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from ..tasks.classify import DEFAULT_CLASSIFIER
from ..tasks.runner import packing
from .options import (add_file_options, add_head_options, add_model_options, emit, model_from_args, no_texts,
                      run_file_command, subcommand)


def add(sub) -> None:
    cl = subcommand(sub, "classify", "label texts (or text pairs) with a sequence classifier: the best label and its score",
                    'bertfn classify "A great film." "A dull one." --model ./sst2-distilbert --top-k 2',
                    "Label texts (or text pairs) with a sequence classifier (a *ForSequenceClassification checkpoint), "
                    "or with a linear head\nthe checkpoint stores beside its own parts (--head cls.species, with "
                    "--labels naming its outputs).")
    cl.add_argument("text", nargs="*", help="one or more texts (or --input FILE)")
    cl.add_argument("--pair", nargs="+", default=None, metavar="TEXT",
                    help="the second segment: one for every text, or one per text")
    ranks = cl.add_mutually_exclusive_group()
    ranks.add_argument("--top-k", type=int, default=None, metavar="N",
                       help="the N best labels per text, best first (default 1: the best label alone)")
    ranks.add_argument("--all-labels", action="store_true", help="every label per text, best first")
    cl.add_argument("--function", choices=("softmax", "sigmoid", "none"), default=None,
                    help="what turns the logits into scores (default: as the config's problem_type says)")
    cl.add_argument("--truncation", action="store_true",
                    help="cut a text (or pair) longer than the model reads to fit, as transformers' pipeline does "
                         "with truncation=True (a pair: the longer of its two texts first)")
    add_head_options(cl, "run")
    cl.add_argument("--json", action="store_true", help="print the pipeline-shaped results as JSON")
    cl.add_argument("--batch-size", type=int, default=32, metavar="N",
                    help="texts per encoder pass, at most (default 32)")
    add_model_options(cl, default=DEFAULT_CLASSIFIER)  # transformers' text-classification default, SST-2
    add_file_options(cl)


def shown(text: str, pair: str | None) -> str:
    """A text as the tables show it: with its pair after a bar."""
    return text if pair is None else f"{text} | {pair}"


def best_table(texts: list[str], results: list[dict]) -> str:
    """The best label of each text: one row per text."""
    width = max(8, *(len(r["label"]) for r in results))
    lines = [f"{'label':<{width}}  {'score':>8}  text"]
    lines += [f"{r['label']:<{width}}  {r['score']:>8.4f}  {t}" for t, r in zip(texts, results)]
    return "\n".join(lines)


def ranked_table(text: str, result: list[dict]) -> str:
    """The labels of one text, best first: a row per label."""
    return "\n".join([text, f"  {'rank':>4}  {'score':>8}  label",
                      *(f"  {r:>4}  {d['score']:>8.4f}  {d['label']}" for r, d in enumerate(result, 1))])


def run(args: argparse.Namespace) -> int:
    from ..tasks.classify import TASK, classify

    top_k = None if args.all_labels else 1 if args.top_k is None else args.top_k
    options = dict(top_k=top_k, function_to_apply=args.function, truncation=args.truncation,
                   batch_size=args.batch_size, head=args.head, labels=args.labels)
    if args.input is not None:
        if args.pair is not None:
            raise InputError("--pair goes with texts on the command line; with --input, give each line's pair in a "
                             "JSON field (--field text=NAME text_pair=NAME)")
        return run_file_command(args, "classify", **options)
    if not args.text:
        raise no_texts(args, "pass at least one text, or --input FILE; see 'bertfn classify --help'")
    texts = list(args.text)
    pairs = args.pair if args.pair is None or len(args.pair) > 1 else args.pair * len(texts)
    results = classify(texts, model_from_args(args, packing(TASK)), text_pair=pairs, **options)
    if args.json:
        emit(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
        return 0
    labelled = [shown(t, p) for t, p in zip(texts, pairs or [None] * len(texts))]
    if top_k == 1:
        emit(best_table(labelled, results))
    else:
        emit("\n\n".join(ranked_table(t, r) for t, r in zip(labelled, results)))
    return 0
