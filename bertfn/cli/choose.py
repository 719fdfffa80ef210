"""``bertfn choose``: :func:`bertfn.choose`, a multiple-choice checkpoint's scores of each choice for a prompt."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from ..tasks.runner import packing
from .options import add_file_options, add_model_options, emit, model_from_args, no_texts, run_file_command, subcommand


def add(sub) -> None:
    ch = subcommand(sub, "choose", "score the choices that may follow a prompt with a multiple-choice checkpoint "
                    "(*ForMultipleChoice, SWAG-style)",
                    'bertfn choose "The man picked up the guitar." --choices "He played a song." "He ate it." '
                    "--model ./swag-model")
    ch.add_argument("text", nargs="*", metavar="PROMPT",
                    help="one or more prompts, each scored with every --choices (or --input FILE)")
    ch.add_argument("--choices", nargs="+", metavar="CHOICE", default=None,
                    help="the texts that may follow the prompt, each read as the second text of a pair")
    ch.add_argument("--json", action="store_true",
                    help="print the results as JSON: {prompt, choices, scores}, best first, or a list of them")
    ch.add_argument("--batch-size", type=int, default=32, metavar="N",
                    help="(prompt, choice) pairs per encoder pass, at most (default 32)")
    add_model_options(ch, needs="a multiple-choice checkpoint (*ForMultipleChoice)")
    add_file_options(ch)


def table(result: dict) -> str:
    """One prompt's result as a table: a row per choice, best first."""
    lines = [result["prompt"], f"  {'rank':>4}  {'score':>8}  choice"]
    lines += [f"  {r:>4}  {s:>8.4f}  {c}" for r, (c, s) in enumerate(zip(result["choices"], result["scores"]), 1)]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the scores of ``--choices`` after each prompt: a table, or JSON as bertfn.choose returns it."""
    from ..tasks.choose import TASK, choice_items, choose

    if args.input is not None:
        if args.choices is not None:
            raise InputError("with --input each JSON line holds its prompt and its choices; drop --choices")
        return run_file_command(args, "choose", batch_size=args.batch_size)
    if not args.text:
        raise no_texts(args, "pass a prompt and --choices, or --input FILE (JSON Lines with 'prompt' and 'choices'); "
                         "see 'bertfn choose --help'")
    if args.choices is None:
        raise InputError("pass the choices after the prompt: --choices A B C")
    items, _ = choice_items(list(args.text), args.choices)  # bad prompts or choices fail before the model loads
    results = choose([{"prompt": p, "choices": c} for p, c in items], model_from_args(args, packing(TASK)), batch_size=args.batch_size)
    if args.json:
        emit(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
    else:
        emit("\n\n".join(table(r) for r in results))
    return 0
