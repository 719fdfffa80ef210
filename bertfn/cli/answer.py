"""``bertfn answer``: :func:`bertfn.answer`, the span of a context that answers each question."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import InputError
from ..tasks.answer import DEFAULT_READER, TASK, answer
from ..tasks.runner import packing
from .options import add_file_options, add_model_options, emit, model_from_args, no_texts, run_file_command, subcommand


def add(sub) -> None:
    an = subcommand(sub, "answer", "the span of a context that answers a question (a question-answering checkpoint)",
                    'bertfn answer "Where do I live?" --context "My name is Wolfgang and I live in Berlin" '
                    "--model deepset/roberta-base-squad2")
    an.add_argument("text", nargs="*", metavar="QUESTION", help="one or more questions about the context (or --input FILE)")
    context = an.add_mutually_exclusive_group()
    context.add_argument("--context", help="the text the answers are taken from")
    context.add_argument("--context-file", metavar="FILE", help="read the context from FILE (UTF-8; - for stdin)")
    an.add_argument("--top-k", type=int, default=1, metavar="N",
                    help="answers per question (default 1)")
    an.add_argument("--max-answer-len", type=int, default=15, help="tokens per answer, at most (default 15)")
    an.add_argument("--max-seq-len", type=int, default=None,
                    help="tokens per window of question and context (default: 384, or what the model reads if less)")
    an.add_argument("--doc-stride", type=int, default=None,
                    help="context tokens that consecutive windows share (default: max-seq-len // 2, at most 128)")
    an.add_argument("--handle-impossible-answer", action="store_true",
                    help='let "no answer" (an empty answer at 0, scored by [CLS]) compete')
    an.add_argument("--no-align-to-words", dest="align_to_words", action="store_false",
                    help="keep answers to their tokens' characters, not widened to whole words")
    an.add_argument("--batch-size", type=int, default=16, metavar="N",
                    help="windows per encoder pass, at most (default 16)")
    an.add_argument("--json", action="store_true", help="print the pipeline-shaped results as JSON")
    add_model_options(an, default=DEFAULT_READER)  # a reader by default, not the models' bert-base-uncased
    add_file_options(an)


def read_context(path: str) -> str:
    """The text of ``--context-file``: the file's (UTF-8), or standard input's for ``-``.

    Raises:
        InputError: a file that is not there, not readable, or not UTF-8.
    """
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"--context-file {path} is not UTF-8 text (byte {e.start}); convert it to UTF-8") from None
    except OSError as e:
        raise InputError(f"cannot read --context-file {path}: {e.strerror or e}; pass a readable text file") from None


def table(question: str, result: dict | list) -> str:
    """One question's answers as a table: a row per answer, with its characters in the context."""
    answers = result if isinstance(result, list) else [result]
    lines = [question, f"  {'rank':>4}  {'score':>8}  {'start':>6}  {'end':>6}  answer"]
    for r, a in enumerate(answers, 1):
        lines.append(f"  {r:>4}  {a['score']:>8.4f}  {a['start']:>6}  {a['end']:>6}  {a['answer']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    options = dict(top_k=args.top_k, max_answer_len=args.max_answer_len, max_seq_len=args.max_seq_len,
                   doc_stride=args.doc_stride, handle_impossible_answer=args.handle_impossible_answer,
                   align_to_words=args.align_to_words, batch_size=args.batch_size)
    if args.input is not None:
        if args.context is not None or args.context_file is not None:
            raise InputError("--input reads each line's question and context from its JSON fields; drop --context")
        return run_file_command(args, "answer", **options)
    if not args.text:
        raise no_texts(args, "pass at least one question and --context TEXT (or --context-file FILE), or --input FILE; "
                             "see 'bertfn answer --help'")
    context = args.context if args.context is not None else read_context(args.context_file) \
        if args.context_file is not None else None
    if context is None:
        raise InputError("pass the context the answers are taken from: --context TEXT or --context-file FILE")
    questions = list(args.text)
    results = answer(questions, context, model_from_args(args, packing(TASK)), **options)
    if args.json:
        emit(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
    else:
        emit("\n\n".join(table(q, r) for q, r in zip(questions, results)))
    return 0
