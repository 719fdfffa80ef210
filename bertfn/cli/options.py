"""What the subcommands share: printing, the model options and the file options.

Every subcommand that runs a model takes the model options (:func:`add_model_options`); those that run a
task of :mod:`bertfn.corpus` take the file options (:func:`add_file_options`), with the extra ones that
apply to their task alone (``--no-detail`` for score, ``--format`` for embed's and score's outputs).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from ..checkpoint.dtypes import DTYPES
from ..checkpoint.model import Model
from ..checkpoint.resolve import DEFAULT_MODEL
from ..corpus.files import FLUSH_SECONDS
from ..corpus.formats import FORMATS
from ..errors import InputError


def emit(text: str) -> None:
    """Print ``text`` on stdout; characters the terminal's encoding cannot show are written as escapes
    (``\\xe9``) instead of failing, as ``PYTHONIOENCODING=ascii`` or a C locale would make them."""
    encoding = sys.stdout.encoding or "utf-8"
    print(text.encode(encoding, errors="backslashreplace").decode(encoding))


LINE_BREAKS = re.compile(r"\s*[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]\s*")  # what str.splitlines() splits on


def one_line(kind: str, message: object) -> None:
    """``bertfn: KIND: message`` on stderr, the message's line breaks (and the spaces around them) folded into one
    space; other spaces stay, so that a text the message quotes reads as it came (``'0  '`` keeps its two spaces)."""
    print(f"bertfn: {kind}: {LINE_BREAKS.sub(' ', str(message)).strip()}", file=sys.stderr)


def out_file(out: str):
    """Where ``--out`` writes attention's or contacts' picture: the file named, or for ``-`` standard output (a PNG),
    as ``--output -`` is (``bertfn attention TEXT --out - > attn.png``).

    Args:
        out: ``--out``'s value.
    """
    return sys.stdout.buffer if out == "-" else out


def picture_name(out: str) -> str:
    """``--out``'s picture as matplotlib names the file it writes: a name without an ending gets ``.png`` (its
    ``savefig.format``), so that "wrote" names the file that is there.

    Args:
        out: ``--out``'s value (``-``: standard output, kept).
    """
    return out if out == "-" or Path(out).suffix else out + ".png"


def wrote(out: str, details: str = "") -> None:
    """``wrote FILE`` and ``details``: on stdout, or on stderr where the file itself went to stdout (``--out -``), so
    that nothing follows it there.

    Args:
        out: ``--out``'s value.
        details: what follows the file's name (`` (63 tokens, 1.0 MB); open it in a browser``).
    """
    if out == "-":
        one_line("done", f"wrote stdout{details}")
    else:
        emit(f"wrote {out}{details}")


LIST_OPTIONS = ("pair", "labels", "targets", "choices")
"""Options that take every word after them (``nargs="+"``): a text typed after one is read as one of its values."""


def no_texts(args: argparse.Namespace, message: str) -> InputError:
    """The error for a command given no text: ``message``, and where a list option (:data:`LIST_OPTIONS`) holds
    values, how it may have taken the texts (``--labels A B "text"`` reads the text as a third label); where standard
    input is no terminal (texts piped in, perhaps), that ``--input -`` reads it."""
    message, see, help_ = message.partition("; see ")
    taken = [f"--{name}" for name in LIST_OPTIONS if getattr(args, name, None)]
    if taken:
        message += (f" ({' and '.join(taken)} take{'s' if len(taken) == 1 else ''} every word after "
                    f"{'it' if len(taken) == 1 else 'them'}, texts typed after included: put the texts first, or end "
                    f"the list with --, as in {taken[0]} A B -- TEXT)")
    if sys.stdin is not None and not sys.stdin.isatty():  # texts piped in, perhaps: --input - alone reads them
        message += f" (standard input is read only with --input -: {STDIN})"
    return InputError(message + see + help_)


STDIN = "one text a line, or JSON Lines with --field, the results printed as JSON Lines"
"""What ``--input -`` reads and prints, for the messages that point a piped input at it."""


def refuse_dash(args: argparse.Namespace) -> None:
    """Refuse ``-`` typed as a text where ``--input -`` reads standard input: a shell user's way to say "read stdin",
    which would otherwise run the one-character text ``-``.

    Args:
        args: the parsed command line (a subcommand without ``--input`` passes).

    Raises:
        InputError: a text (or rerank's query or passage) that is ``-``, with texts on the command line.
    """
    if "input" not in args or args.input is not None:
        return
    typed = [*(args.text if "text" in args else []), *([args.query] if "query" in args else []),
             *(args.passages if "passages" in args else [])]
    if "-" in typed:
        raise InputError(f"a text '-' is no standard input here; to read the texts from standard input pass --input - "
                         f"({STDIN})")


def subcommand(sub, name: str, summary: str, example: str, description: str | None = None) -> argparse.ArgumentParser:
    """A subcommand's parser: ``summary`` in ``bertfn --help``'s list, and in its own ``--help`` a description
    (``summary`` or ``description``) and an example (``example``, shown after the options).

    Args:
        sub: the subparsers of ``bertfn``.
        name: the subcommand, e.g. ``"fill-mask"``.
        summary: one line.
        example: a command line that runs it.
        description: a longer description, when one line is not enough.
    """
    return sub.add_parser(name, help=summary, description=description or summary[0].upper() + summary[1:] + ".",
                          epilog=f"example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter)


def add_model_options(parser: argparse.ArgumentParser, *, default: str | None = None, needs: str | None = None) -> None:
    """``--model --tokenizer --cased/--lowercase --device --dtype --quiet`` (read back by :func:`model_from_args`).

    Args:
        parser: the subcommand's parser.
        default: the model when ``--model`` is not given (None: :data:`~bertfn.checkpoint.resolve.DEFAULT_MODEL`),
            kept as ``args.default_model``: ``args.model`` stays None where ``--model`` was not typed, so that a file
            run takes its task's default (:func:`~bertfn.tasks.runner.chosen_model`) and a model's folder typed as a
            text is told apart (:func:`model_from_args`).
        needs: what the model must be, for a subcommand no default model can run (a fine-tuned head's): then
            ``--model`` is required, and its help says this.
    """
    group = parser.add_argument_group("model")
    if needs:
        group.add_argument("--model", required=True, help=f"hub id, local folder or weights file of {needs} (required)")
    else:
        group.add_argument("--model", default=None,
                           help=f"hub id, local folder or weights file (default: {default or DEFAULT_MODEL})")
        parser.set_defaults(default_model=default or DEFAULT_MODEL)
    group.add_argument("--tokenizer", default=None,
                       help="vocab.txt, tokenizer.json or a folder with one, when it is not beside the weights")
    case = group.add_mutually_exclusive_group()
    case.add_argument("--cased", dest="lowercase", action="store_false", default=None,
                      help="keep the text's case (a cased vocabulary without tokenizer_config.json)")
    case.add_argument("--lowercase", dest="lowercase", action="store_true", help="lowercase the text")
    group.add_argument("--device", default=None, help="e.g. cpu or cuda")
    group.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                       help="precision to run in (default: as stored); bfloat16 halves the memory, and is faster on a GPU or a CPU with AVX-512")
    group.add_argument("--quiet", action="store_true", help="print no warnings (a checkpoint's unused keys, [UNK]-heavy texts, ...)")


def add_head_options(parser: argparse.ArgumentParser, doing: str) -> None:
    """``--head PREFIX`` and ``--labels ...``: a linear head stored beside the checkpoint's own parts, as
    :func:`bertfn.classify`'s ``head=`` and ``labels=`` take it.

    Args:
        parser: the subcommand's parser.
        doing: what the command does with the head ("run", "explain"), for the help.
    """
    parser.add_argument("--head", default=None, metavar="PREFIX",
                        help=f"{doing} the linear head stored under this key prefix on the pooler's output (e.g. "
                             "cls.species)")
    parser.add_argument("--labels", nargs="+", default=None, metavar="LABEL",
                        help="the names of the head's outputs, in order")


def is_model_folder(text: str) -> bool:
    """Whether ``text`` names a folder holding a ``config.json`` (False for a text no path can be: too long, a NUL).

    Args:
        text: a text given on the command line.
    """
    try:
        return (Path(text) / "config.json").is_file()
    except (OSError, ValueError):
        return False


def model_from_args(args: argparse.Namespace, prepare: Callable[[dict], bool] | None = None):
    """The :class:`~bertfn.checkpoint.loading.Model` the model options name, loaded anew with ``load``'s ``prepare``
    (a task's subcommand passes :func:`~bertfn.tasks.runner.packing` of its task: the weights packed where it runs on
    the fast path).

    Raises:
        InputError: file options without ``--input`` (:func:`refuse_file_options`), or a model's folder among the
            texts and no ``--model``, before the model loads.
    """
    from ..corpus.runner import open_model

    refuse_file_options(args)
    folders = [t for t in getattr(args, "text", None) or [] if is_model_folder(t)]
    if args.model is None and folders:  # bertfn classify ./my-model "text": the folder read as the first text
        raise InputError(f"{folders[0]!r} is a model's folder, given as a text; name the model with --model "
                         f"{folders[0]} (without --model the command reads {args.default_model})")
    model = args.model if args.model is not None else args.default_model
    return open_model(model, tokenizer=args.tokenizer, lowercase=args.lowercase, device=args.device,
                      dtype=args.dtype, prepare=prepare, fresh=True)


def add_file_options(parser: argparse.ArgumentParser, *, detail: bool = False, vectors: bool = False) -> None:
    """``--input --output --field --resume --retry-errors --flush-every --no-echo --format --progress/--no-progress``
    (read back by :func:`run_file_command`), and ``--no-detail`` where the task has detail to leave out.

    The options besides ``--input`` are listed in ``args.file_options`` (``{dest: (flag, default)}``), for
    :func:`refuse_file_options`.

    Args:
        parser: the subcommand's parser.
        detail: add ``--no-detail`` (the task's results have per-token detail to leave out: score).
        vectors: the task's results are vectors, which ``--format npy`` and ``--output FILE.npy`` write as an
            array (embed).
    """
    group = parser.add_argument_group("files (instead of texts on the command line)")
    group.add_argument("--input", metavar="FILE",
                       help="read the texts from FILE: one a line, JSON Lines with --field, or a table (FILE.csv, "
                            "FILE.tsv: the column --field names, default text); - for stdin (lines)")
    npy = "FILE.npy (the vectors, float32) or " if vectors else ""
    actions = [
        group.add_argument("--output", metavar="FILE", default="-",
                           help=f"write one JSON line per input line to FILE (default -: stdout); "
                                f"{npy}FILE.parquet writes that format instead, and the JSON Lines (the run's log) "
                                "beside it as FILE.jsonl"),
        group.add_argument("--field", metavar="NAME", nargs="+", help="--input is JSON Lines (or a table's column) "
                           "whose field NAME holds the text (a task of several inputs reads the fields named as its "
                           "inputs: INPUT=NAME renames one)"),
        group.add_argument("--resume", action="store_true",
                           help="continue an interrupted run after the last complete line of --output (of its log "
                                "FILE.jsonl, for FILE.npy or FILE.parquet), once the run record beside that "
                                "(+ .run.json) and every written line agree with this run"),
        group.add_argument("--retry-errors", action="store_true",
                           help="with --resume: first run again, in place, the lines of --output that hold errors"),
        group.add_argument("--flush-every", type=float, default=FLUSH_SECONDS, metavar="SECONDS", help="write results "
                           f"out at least this often (default {FLUSH_SECONDS:g}): a kill loses at most that much work"),
        group.add_argument("--no-echo", dest="echo", action="store_false",
                           help="leave the text out of each output line (the input's other fields, e.g. an id, stay)"),
    ]
    if detail:
        actions.append(group.add_argument("--no-detail", dest="detail", action="store_false",
                                          help="leave the per-token detail out"))
    choices = FORMATS if vectors else tuple(f for f in FORMATS if f != "npy")
    actions += [
        group.add_argument("--format", nargs="+", choices=choices, default=["jsonl"],
                           help=f"also write the output as it goes as {npy}FILE.parquet, beside the JSON Lines"),
        group.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                           help="progress bar on stderr (default: when stderr is a terminal)"),
    ]
    parser.set_defaults(file_options={a.dest: ("/".join(a.option_strings), a.default) for a in actions})


def refuse_file_options(args: argparse.Namespace) -> None:
    """Refuse the file options (:func:`add_file_options`) given with texts on the command line instead of ``--input``.

    They would be ignored: ``--output FILE`` would leave no file, the results going to stdout.

    Args:
        args: the parsed command line (a subcommand without file options passes).

    Raises:
        InputError: ``--input`` is not given and some file option is.
    """
    if getattr(args, "input", None) is not None:
        return
    options = getattr(args, "file_options", {})
    given = [flag for dest, (flag, default) in options.items() if getattr(args, dest) != default]
    if given:
        raise InputError(f"{', '.join(given)} {'go' if len(given) > 1 else 'goes'} with --input FILE, and texts came "
                         "on the command line instead, whose results are printed on stdout: drop "
                         f"{'them' if len(given) > 1 else 'it'} (redirect stdout to keep the results: > FILE), or "
                         "put the texts in a file, one a line, and pass --input FILE")


def run_file_command(args: argparse.Namespace, task: str, model: Model | None = None, **options) -> int:
    """``bertfn TASK --input ...``: :func:`bertfn.corpus.files.run_file`, then its one-line summary on stderr.

    Exit code 0 when every line of the output has a result, 2 (bad input) when any line holds an error
    instead, this run's or one kept from the run it resumed. ``model``: one the subcommand has loaded already from
    ``args`` (``bertfn score --reference ... --matrix``'s, whose matrix the run then reads again, not recomputes).
    """
    from ..corpus.files import run_file
    from ..corpus.inputs import field_mapping

    if args.text:
        raise InputError("pass texts on the command line or --input FILE, not both")
    summary = run_file(args.input, args.output, args.model if model is None else model, task=task, field=field_mapping(args.field), resume=args.resume,
                       retry_errors=args.retry_errors, flush_every=args.flush_every, echo=args.echo,
                       detail=getattr(args, "detail", True), formats=tuple(args.format),
                       progress=args.progress, tokenizer=args.tokenizer, lowercase=args.lowercase,
                       device=args.device, dtype=args.dtype, **options)
    one_line("done", summary)
    return 0 if summary.errors + summary.kept_errors == 0 else InputError.exit_code
