"""The ``bertfn`` command (also ``python -m bertfn``).

    bertfn fill-mask "When in Rome, do as the [MASK] do." [--model ID_OR_PATH] [--top-k N] [--json] [--truncation]
                     [--device cpu|cuda] [--dtype float32|bfloat16|float16]
    bertfn attention "The cat sat on the mat." --layer 3 [--head H] [--model ID_OR_PATH] --out attn.png

Errors print one line on stderr and exit with the error's code (see :mod:`bertfn.errors`): bad
arguments 2 (as argparse), bad input 2, bad config 3, bad checkpoint 4, model not found 5, an
unexpected failure 1 (``BERTFN_DEBUG=1`` shows its traceback), Ctrl-C 130. Warnings are one line too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

import torch

from .errors import BertfnError, InputError


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""``--dtype`` choices."""


def _table(text: str, result: list) -> str:
    per_mask = result if result and isinstance(result[0], list) else [result]
    lines = [text]
    for m, answers in enumerate(per_mask):
        if len(per_mask) > 1:
            lines.append(f"[MASK] #{m + 1}")
        lines.append(f"  {'rank':>4}  {'score':>8}  {'token':<16} sequence")
        for r, a in enumerate(answers, 1):
            lines.append(f"  {r:>4}  {a['score']:>8.4f}  {a['token_str']:<16} {a['sequence']}")
    return "\n".join(lines)


def _attention(args: argparse.Namespace) -> str:
    """Trace ``args.text`` and write the attention heatmap of one layer (all heads, or ``--head``)."""
    from .inspect import trace
    from .plots import attention_figure

    fig = attention_figure(trace(args.model, args.text), args.layer, args.head)
    try:
        fig.savefig(args.out, dpi=150)
    except (OSError, ValueError) as e:  # ValueError: a file ending matplotlib cannot write
        raise InputError(f"cannot write {args.out} ({e}); pass --out with a writable .png, .svg or .pdf path") from e
    return f"wrote {args.out}"


class _Parser(argparse.ArgumentParser):
    """argparse, except that a bad command line raises :class:`InputError` (one line, exit 2) instead of
    printing the usage and exiting. Subcommand parsers are of this class too."""

    def error(self, message: str) -> None:
        raise InputError(f"{message}; see '{self.prog} --help'")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bertfn", description="BERT as pure functions over a Hugging Face checkpoint.")
    sub = parser.add_subparsers(dest="command", required=True)
    fm = sub.add_parser("fill-mask", help="predict the words behind [MASK]")
    fm.add_argument("text", nargs="+", help="one or more texts, each with at least one [MASK]")
    fm.add_argument("--model", default=None, help="hub id or local folder (default: google-bert/bert-base-uncased)")
    fm.add_argument("--top-k", type=int, default=5, help="answers per mask (default 5)")
    fm.add_argument("--targets", nargs="+", default=None, help="only score these words")
    fm.add_argument("--device", default=None, help="e.g. cpu or cuda")
    fm.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                    help="precision to run in (default: as the checkpoint stores it); bfloat16 is the faster bf16 mode")
    fm.add_argument("--json", action="store_true", help="print the pipeline-shaped results as JSON")
    fm.add_argument("--truncation", action="store_true",
                    help="cut a text longer than the model's max positions to a window around its masks")
    at = sub.add_parser("attention", help="draw one layer's attention probabilities as a heatmap (needs matplotlib)")
    at.add_argument("text", help="the text to run through the model")
    at.add_argument("--layer", type=int, default=0, help="layer index from 0, negative from the end (default 0)")
    at.add_argument("--head", type=int, default=None, help="one head's heatmap (default: a grid of every head)")
    at.add_argument("--model", default=None, help="hub id or local folder (default: google-bert/bert-base-uncased)")
    at.add_argument("--out", default="attention.png", help="image file to write (default attention.png)")
    return parser


def _one_line(kind: str, message: object) -> None:
    print(f"bertfn: {kind}: {' '.join(str(message).split())}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return its exit code.

    Every failure ends here as one line on stderr and an exit code (see the module docstring),
    never a traceback.
    """
    try:
        with warnings.catch_warnings():
            warnings.showwarning = lambda message, *_, **__: _one_line("warning", message)
            return _run(build_parser().parse_args(argv))
    except BertfnError as e:
        _one_line("error", e)
        return e.exit_code
    except KeyboardInterrupt:
        _one_line("error", "interrupted")
        return 130
    except Exception as e:
        if os.environ.get("BERTFN_DEBUG"):
            raise
        _one_line("error", f"unexpected {type(e).__name__}: {e} (a bug in bertfn: please report it; "
                           "BERTFN_DEBUG=1 shows the traceback)")
        return 1


def _run(args: argparse.Namespace) -> int:
    """Do what the parsed command line asks and print the result; returns 0 (failures raise)."""
    if args.command == "attention":
        print(_attention(args))
        return 0
    from .pipelines import fill_mask

    dtype = DTYPES[args.dtype] if args.dtype else None
    results = fill_mask(list(args.text), args.model, top_k=args.top_k, targets=args.targets, device=args.device,
                        dtype=dtype, truncation=args.truncation)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
    else:
        print("\n\n".join(_table(t, r) for t, r in zip(args.text, results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
