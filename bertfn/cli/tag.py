"""``bertfn tag``: :func:`bertfn.tag`, the entities a token-classification checkpoint finds in each text."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from ..tasks.entities import STRATEGIES
from ..tasks.runner import packing
from ..tasks.tag import DEFAULT_TAGGER
from .options import (
    add_file_options,
    add_model_options,
    emit,
    model_from_args,
    no_texts,
    run_file_command,
    subcommand,
)


def add(sub) -> None:
    tg = subcommand(sub, "tag", "label each token of a text and group them into entities (NER) with a "
                    "token-classification checkpoint", 'bertfn tag "My name is Wolfgang and I live in Berlin." '
                    "--aggregation simple --model dslim/bert-base-NER")
    tg.add_argument("text", nargs="*", help="one or more texts (or --input FILE)")
    tg.add_argument("--aggregation", choices=STRATEGIES, default="none",
                    help="none: one entity per token (default); simple: neighbouring tokens of one type joined; "
                         "first, average, max: each word gets one label first (its first token's, its tokens' "
                         "averaged scores', its most confident token's)")
    tg.add_argument("--stride", type=int, default=None, metavar="N",
                    help="tag a text longer than the model reads in windows overlapping by N tokens (not with "
                         "--aggregation none); without it such a text is tagged on its first window")
    tg.add_argument("--split-into-words", action="store_true",
                    help="each text is its words: a text on the command line is cut at --delimiter, a file's --field "
                         "holds a JSON list of them (a dataset's tokens); start and end index the words joined with "
                         "the delimiter")
    tg.add_argument("--delimiter", default=" ", metavar="STR",
                    help="what cuts a text on the command line into words and joins the words into the text the "
                         "spans index (default: a space)")
    tg.add_argument("--ignore-labels", default="O", metavar="LABELS",
                    help="leave out the entities of these labels, comma-separated (default: O; '': keep every label)")
    tg.add_argument("--batch-size", type=int, default=32, metavar="N",
                    help="windows per encoder pass, at most (default 32)")
    tg.add_argument("--json", action="store_true", help="print the pipeline-shaped results as JSON")
    add_model_options(tg, default=DEFAULT_TAGGER)  # transformers' token-classification default, CoNLL-03
    add_file_options(tg)


def table(text: str, entities: list[dict]) -> str:
    """The entities of one text as a table: a row per entity, with its label, score, word and character span."""
    if not entities:
        return f"{text}\n  (no entities)"
    label = [e.get("entity_group", e.get("entity")) for e in entities]
    lw, ww = max(6, *map(len, label)), max(4, *(len(e["word"]) for e in entities))
    lines = [text, f"  {'entity':<{lw}}  {'score':>6}  {'word':<{ww}}  start-end"]
    for name, e in zip(label, entities):
        lines.append(f"  {name:<{lw}}  {e['score']:>6.4f}  {e['word']:<{ww}}  {e['start']}-{e['end']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..tasks.tag import TASK, tag

    options = {"aggregation_strategy": args.aggregation, "stride": args.stride, "batch_size": args.batch_size,
               "ignore_labels": tuple(x for x in args.ignore_labels.split(",") if x),
               "is_split_into_words": args.split_into_words, "delimiter": args.delimiter}
    if args.input is not None:
        return run_file_command(args, "tag", **options)
    if not args.text:
        raise no_texts(args, "pass at least one text, or --input FILE; see 'bertfn tag --help'")
    if args.split_into_words and not args.delimiter:
        raise InputError("--delimiter cuts each text into its words with --split-into-words, so it cannot be empty; "
                         "pass --delimiter ' ' (the default) or another string")
    texts = [t.split(args.delimiter) for t in args.text] if args.split_into_words else list(args.text)
    results = tag(texts, model_from_args(args, packing(TASK)), **options)
    if args.json:
        emit(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
    else:
        emit("\n\n".join(table(t, r) for t, r in zip(args.text, results)))
    return 0
