"""``bertfn fill-mask``: :func:`bertfn.fill_mask` (and ``--joint``: the masks of a text filled together)."""

from __future__ import annotations

import argparse
import json
import warnings

from ..tasks.runner import packing
from .options import add_file_options, add_model_options, emit, model_from_args, no_texts, run_file_command, subcommand


def add(sub) -> None:
    fm = subcommand(sub, "fill-mask", "predict the words behind the mask token ([MASK], or <mask> in RoBERTa's kind)",
                    'bertfn fill-mask "When in Rome, do as the [MASK] do." --top-k 3\n'
                    '  bertfn fill-mask "The capital of France is <mask>." --model FacebookAI/roberta-base')
    fm.add_argument("text", nargs="*", help="one or more texts (or --input FILE), each with at least one [MASK], or "
                                            "the model's own mask token: <mask> for RoBERTa's kind")
    fm.add_argument("--top-k", type=int, default=5, metavar="N",
                    help="answers per mask (default 5)")
    fm.add_argument("--targets", nargs="+", default=None, help="only score these words")
    fm.add_argument("--json", action="store_true", help="print the pipeline-shaped results as JSON")
    fm.add_argument("--truncation", action="store_true",
                    help="cut a text longer than the model's max positions to a window around its masks")
    fm.add_argument("--joint", action="store_true",
                    help="fill all the masks of a text together: the best combinations, scored by their PLL")
    fm.add_argument("--beam-width", type=int, default=5, help="beam width of --joint's search (default 5; 1: greedy)")
    fm.add_argument("--batch-size", type=int, default=16, metavar="N",
                    help="texts per encoder pass, at most (default 16)")
    add_model_options(fm)
    add_file_options(fm)


def table(text: str, result: list) -> str:
    """The answers of one text as a table: a block per mask, a row per answer."""
    per_mask = result if result and isinstance(result[0], list) else [result]
    lines = [text]
    for m, answers in enumerate(per_mask):
        if len(per_mask) > 1:
            lines.append(f"mask #{m + 1}")
        lines.append(f"  {'rank':>4}  {'score':>8}  {'token':<16} sequence")
        for r, a in enumerate(answers, 1):
            word = a["token_str"] + (f" ({a['pieces']} pieces)" if "pieces" in a else "")
            lines.append(f"  {r:>4}  {a['score']:>8.4f}  {word:<16} {a['sequence']}")
    return "\n".join(lines)


def joint_table(text: str, fills: list) -> str:
    """The joint fills of one text as a table: a row per combination, with its PLL."""
    lines = [text, f"  {'rank':>4}  {'PLL':>8}  {'tokens':<24} sequence"]
    for r, f in enumerate(fills, 1):
        lines.append(f"  {r:>4}  {f['score']:>8.3f}  {' '.join(f['token_strs']):<24} {f['sequence']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..checkpoint.resolve import text_list
    from ..tasks.fill_mask import TASK, fill_mask, require_masks

    options = dict(top_k=args.top_k, targets=args.targets, truncation=args.truncation, batch_size=args.batch_size,
                   joint=args.joint, beam_width=args.beam_width)
    if args.input is not None:
        return run_file_command(args, "fill-mask", **options)
    if not args.text:
        raise no_texts(args, "pass at least one text with the model's mask token ([MASK] or <mask>), or --input FILE; see 'bertfn fill-mask --help'")
    texts, _ = text_list(list(args.text), "fill_mask")  # an empty text fails before the model loads
    # The mask token is the tokenizer's, which loads with the weights: the load's warnings (a checkpoint's
    # unused keys, ...) wait until the texts are checked, so that a text the model cannot fill gets its error alone.
    with warnings.catch_warnings(record=True) as loading:
        model = model_from_args(args, packing(TASK))
    if model.tokenizer:  # without one, fill_mask says so, after the load's warning that tells where one may be
        require_masks(model.tokenizer, texts)
    for w in loading:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    results = fill_mask(texts, model, **options)
    if args.json:
        emit(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
    else:
        emit("\n\n".join((joint_table if args.joint else table)(t, r) for t, r in zip(args.text, results)))
    return 0
