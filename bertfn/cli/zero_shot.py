"""``bertfn zero-shot``: :func:`bertfn.zero_shot`, labels chosen on the command line scored by an NLI classifier."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from ..tasks.zero_shot import DEFAULT_TEMPLATE
from ..tasks.runner import packing
from .options import add_file_options, add_model_options, emit, model_from_args, no_texts, run_file_command, subcommand


def add(sub) -> None:
    zs = subcommand(sub, "zero-shot", "score labels chosen now for each text with an NLI classifier "
                    "(zero-shot classification)",
                    'bertfn zero-shot "Who won the match?" --labels politics sports '
                    "--model FacebookAI/roberta-large-mnli")
    zs.add_argument("text", nargs="*", help="one or more texts (or --input FILE)")
    zs.add_argument("--labels", nargs="+", default=None, metavar="LABEL",
                    help="the candidate labels (one value is split at its commas: \"politics, sports\")")
    zs.add_argument("--template", default=DEFAULT_TEMPLATE,
                    help=f"each label's hypothesis, the label where {{}} is (default {DEFAULT_TEMPLATE!r})")
    zs.add_argument("--multi-label", action="store_true",
                    help="score each label alone (entailment against contradiction): several may be true")
    zs.add_argument("--batch-size", type=int, default=32, metavar="N",
                    help="(text, label) pairs per encoder pass, at most (default 32)")
    zs.add_argument("--json", action="store_true", help="print the pipeline-shaped results as JSON")
    add_model_options(zs, needs="an NLI classifier (e.g. FacebookAI/roberta-large-mnli)")
    add_file_options(zs)


def table(result: dict) -> str:
    """One text's labels as a table, best first: rank, score, label."""
    lines = [result["sequence"], f"  {'rank':>4}  {'score':>8}  label"]
    for r, (label, score) in enumerate(zip(result["labels"], result["scores"]), 1):
        lines.append(f"  {r:>4}  {score:>8.4f}  {label}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print each text's labels, best first: a table, or the results as JSON."""
    from ..tasks.zero_shot import TASK, candidate_list, zero_shot

    if not args.labels:
        raise InputError("pass the candidate labels: --labels LABEL ...; see 'bertfn zero-shot --help'")
    labels = args.labels[0] if len(args.labels) == 1 else list(args.labels)  # one value: split at its commas
    options = dict(candidate_labels=candidate_list(labels), hypothesis_template=args.template,
                   multi_label=args.multi_label, batch_size=args.batch_size)
    if args.input is not None:
        return run_file_command(args, "zero-shot", **options)
    if not args.text:
        raise no_texts(args, "pass at least one text, or --input FILE; see 'bertfn zero-shot --help'")
    results = zero_shot(list(args.text), model_from_args(args, packing(TASK)), **options)
    if args.json:
        emit(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
    else:
        emit("\n\n".join(table(r) for r in results))
    return 0
