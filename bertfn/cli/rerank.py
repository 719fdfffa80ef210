"""``bertfn rerank``: :func:`bertfn.rerank`, passages ordered by a cross-encoder's score for a query."""

from __future__ import annotations

import argparse
import json

from ..tasks.rerank import ACTIVATIONS
from ..tasks.runner import packing
from .options import add_file_options, add_model_options, emit, model_from_args, no_texts, run_file_command, subcommand


def add(sub) -> None:
    rr = subcommand(sub, "rerank", "order passages by their relevance to a query, scored by a cross-encoder",
                    'bertfn rerank "Who wrote Hamlet?" "Shakespeare wrote Hamlet." "Paris is in France." '
                    "--model cross-encoder/ms-marco-MiniLM-L6-v2",
                    description="Order passages by their relevance to a query, scored by a cross-encoder (a sequence "
                                "classifier with one output). --input reads JSON Lines, one "
                                '{"query": "...", "passages": ["...", ...]} a line.')
    rr.add_argument("query", nargs="?", default=None, help="the query (or --input FILE)")
    rr.add_argument("passages", nargs="*", help="the passages to rank")
    rr.add_argument("--top-k", type=int, default=None, metavar="N",
                    help="print the best N passages only (default: all)")
    rr.add_argument("--activation", choices=sorted(ACTIVATIONS), default=None,
                    help="applied to the model's logit (default: the model's own, as sentence-transformers loads it)")
    rr.add_argument("--prompt-name", metavar="NAME", help="put the folder's prompt NAME before each query (default: its "
                    "default_prompt_name, if any)")
    rr.add_argument("--prompt", metavar="TEXT", help="put TEXT before each query (instead of --prompt-name; '': none)")
    rr.add_argument("--batch-size", type=int, default=32, metavar="N",
                    help="(query, passage) pairs per encoder pass, at most (default 32)")
    rr.add_argument("--json", action="store_true",
                    help="print the ranking as JSON: CrossEncoder.rank's [{corpus_id, score, text}, ...]")
    add_model_options(rr, needs="a cross-encoder (e.g. cross-encoder/ms-marco-MiniLM-L6-v2)")
    add_file_options(rr)


def table(query: str, ranking: list[dict]) -> str:
    """A query's ranking as a table, best first: rank, score, the passage's index and its start."""
    lines = [query, f"  {'rank':>4}  {'score':>8}  {'id':>4}  passage"]
    for r, entry in enumerate(ranking, 1):
        text = " ".join(entry["text"].split())
        shown = text if len(text) <= 100 else text[:100] + "..."
        lines.append(f"  {r:>4}  {entry['score']:>8.4f}  {entry['corpus_id']:>4}  {shown}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the passages' ranking: a table, or JSON as bertfn.rerank(..., return_documents=True) gives it."""
    from ..tasks.rerank import TASK, rerank

    options = dict(top_k=args.top_k, activation=args.activation, prompt_name=args.prompt_name, prompt=args.prompt,
                   batch_size=args.batch_size)
    args.text = [args.query, *args.passages] if args.query is not None else []  # what run_file_command checks
    if args.input is not None:
        return run_file_command(args, "rerank", **options)
    if args.query is None or not args.passages:
        raise no_texts(args, "pass a query and at least one passage (bertfn rerank QUERY PASSAGE ...), or --input "
                             "FILE; see 'bertfn rerank --help'")
    ranking = rerank(args.query, list(args.passages), model_from_args(args, packing(TASK)), return_documents=True, **options)
    emit(json.dumps(ranking, indent=2, ensure_ascii=False) if args.json else table(args.query, ranking))
    return 0
