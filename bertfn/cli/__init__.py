"""The ``bertfn`` command (also ``python -m bertfn``): a thin layer over the Python API.

    bertfn fill-mask "When in Rome, do as the [MASK] do." [--top-k N] [--targets W ...] [--json] [--truncation]
    bertfn fill-mask "The [MASK] [MASK] barked." --joint [--beam-width N]
    bertfn score "When in Rome, do as the Romans do." [--method within_word_l2r] [--per-token] [--json]
    bertfn score --reference "E V Q L" "E V K L" ... [--pll-change|--wt-marginal] [--matrix subs.csv|.npy|.parquet]
    bertfn fill-mask --input cloze.txt --output answers.jsonl [--field NAME] [--resume [--retry-errors]]
                     [--flush-every SECONDS] [--no-echo] [--progress|--no-progress]
    bertfn attention "The cat sat on the mat." --layer 3 [--head H] [--scale per-head|shared|fixed] --out attn.png
    bertfn embed "A sentence." "Another one." [--pooling mean|cls|max] [--normalize] [--json]
    bertfn score|embed --input sentences.txt --output results.jsonl [...the same file options]
    bertfn view "When in Rome, do as the [MASK] do." --out view.html [--pair TEXT] [--top-k N]
    bertfn classify "A great film." [--pair TEXT ...] [--top-k N | --all-labels] [--truncation]
                    [--head cls.species --labels ...]
    bertfn zero-shot "The match ended 2-1." --labels sports politics [--multi-label] --model ./nli-model
    bertfn rerank "a query" "passage one" "passage two" ... [--top-k N] --model ./cross-encoder
    bertfn tag "Ada Lovelace lived in London." [--aggregation simple|first|average|max|none] [--stride N]
               [--split-into-words [--delimiter STR]]
    bertfn answer "Where did the cat sit?" --context "The cat sat on the mat." [--top-k N]
    bertfn choose "The cat sat on the" --choices mat moon --model ./swag-model
    bertfn contacts MKTAYIAKQRQISFVK... --model ./esm2 [--top L/5] [--out map.png|map.npy]
    bertfn classify|tag|answer|... --input file.jsonl --output results.jsonl [...the file options]
    bertfn --version

One module per subcommand (fill_mask.py, score.py, embed.py, view.py, classify.py, ...), each an ``add(subparsers)`` that
adds its parser and a ``run(args)`` that runs it, gathered in :data:`COMMANDS`: a task's module is named after the
task (:data:`bertfn.tasks.TASKS`), and found by that name; options.py holds what they share. Every subcommand that runs a model takes the same model options (:func:`~bertfn.cli.options.add_model_options`):
``--model ID_OR_PATH --tokenizer PATH --cased|--lowercase --device cpu|cuda --dtype float32|bfloat16|... --quiet``.

Errors print one line on stderr and exit with the error's code (see :mod:`bertfn.errors`): bad
arguments 2 (as argparse), bad input 2, bad config 3, bad checkpoint 4, model not found 5, missing
optional library 6, an unexpected failure 1 (``BERTFN_DEBUG=1`` shows its traceback; a full disk is said as such), Ctrl-C 130
(:func:`main` returns it; the command then ends by SIGINT, the shell's 130: :mod:`bertfn.interrupts`), SIGTERM 143,
a closed pipe 141 (``bertfn embed ... | head``: quietly, as other tools stop). Warnings are one line too.
The messages count the texts typed on the command line from 1, as a file's lines are counted ("text 1" is the first;
the Python API's "text 0", as lists count): :func:`counted_from_one`.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import os
import re
import shlex
import sys
import warnings
from collections.abc import Callable, Iterable

from ..errors import (SURFACE, BertfnError, CheckpointError, ConfigError, DependencyError, InputError,
                      ModelLoadError)
from ..tasks import TASKS
from ..tasks.task import Task
from . import view
from .options import is_model_folder, one_line, refuse_dash


def task_command(task: Task) -> tuple[Callable, Callable[[argparse.Namespace], int]]:
    """``(add, run)`` of a task's subcommand: the functions of the module of this package named after the task
    (``"fill-mask"``: fill_mask.py).

    Args:
        task: a task with a subcommand (:attr:`~bertfn.tasks.task.Task.command`).
    """
    module = importlib.import_module(f".{task.name.replace('-', '_')}", __name__)
    return module.add, module.run


LISTED = ("fill-mask", "score", "embed", "view", "attention", "classify", "zero-shot", "rerank", "tag", "answer",
          "choose", "contacts")
"""The order of ``bertfn --help``'s list, the docs' own: the guides' (fill-mask, scoring, embeddings, tracing), then
the heads page's. A subcommand not named here comes after them."""


def commands(tasks: Iterable[Task]) -> dict[str, tuple[Callable, Callable[[argparse.Namespace], int]]]:
    """Subcommand name -> (add its parser to the subparsers, run it on the parsed arguments): each of ``tasks`` that
    has a subcommand (:attr:`~bertfn.tasks.task.Task.command`), from the module named after it (:func:`task_command`),
    and the explorer's and the attention plot's, which are no task (view.py); in the order of :data:`LISTED`, the
    others after them as they came.

    Args:
        tasks: the tasks, in the order their subcommands are listed when :data:`LISTED` does not name them.
    """
    found = {
        **{task.name: task_command(task) for task in tasks if task.command},
        "view": (view.add_view, view.run_view),
        "attention": (view.add_attention, view.run_attention),
    }
    return dict(sorted(found.items(), key=lambda item: LISTED.index(item[0]) if item[0] in LISTED else len(LISTED)))


COMMANDS: dict[str, tuple[Callable, Callable[[argparse.Namespace], int]]] = commands(TASKS)
"""Every subcommand (:func:`commands`): one per task of :data:`bertfn.tasks.TASKS` that has one, and view's two."""


CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")
"""argparse's message for a value outside an option's (or the subcommands') choices: the value, the choices."""


def nearest(word: str, words: Iterable[str]) -> str:
    """`` (did you mean WORD?)`` for the one of ``words`` nearest ``word``, if one is near, else ``""``.

    Args:
        word: what was typed (``fill-mak``, ``--topk``).
        words: what it may have meant.
    """
    close = difflib.get_close_matches(word, list(words), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


class _Parser(argparse.ArgumentParser):
    """argparse, except that a bad command line raises :class:`InputError` (one line, exit 2) instead of
    printing the usage and exiting, naming the subcommand or choice meant where one is spelled nearly so.
    Subcommand parsers are of this class too."""

    def error(self, message: str) -> None:
        typo = CHOICE.search(message)
        hint = nearest(typo.group(1), (c.strip("'") for c in typo.group(2).split(", "))) if typo else ""
        raise InputError(f"{message}{hint}; see '{self.prog} --help'")

    def parse_args(self, args=None, namespace=None) -> argparse.Namespace:
        """As argparse's, except that words no option or positional takes are refused with the subcommand's help
        named, and the option meant (``--topk``: ``--top-k``) or, for a word that starts with -, how to pass it
        as a text (after ``--``); a required ``--model`` left out where a model's folder came as a text is pointed
        at that folder."""
        try:
            parsed, extra = self.parse_known_args(args, namespace)
        except InputError as error:
            folder = next((word for word in (sys.argv[1:] if args is None else args) if is_model_folder(word)), None)
            if folder is None or "required: --model" not in str(error):
                raise
            raise InputError(f"{folder!r} is a model's folder, given as a text; name the model with --model "
                             f"{shlex.quote(folder)}") from None
        if not extra:
            return parsed
        parser = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction)).choices[parsed.command]
        dashed = next((word for word in extra if word.startswith("-")), None)
        hint = nearest(dashed.split("=")[0], (o for a in parser._actions for o in a.option_strings if o[:2] == "--")) \
            if dashed and dashed.startswith("--") else ""
        if dashed and not hint:
            hint = (f" (a text that starts with - goes after --, which ends the options: {parser.prog} [OPTIONS] -- "
                    f"{shlex.quote(dashed)})")
        raise InputError(f"unrecognized arguments: {' '.join(extra)}{hint}; see '{parser.prog} --help'")


COUNTED = re.compile(r"(?<!\w)('(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")"  # a quoted text: left as it came
                     r"|\b(texts?|choice|label|passage) (\d+(?:, \d+)*)\b")
"""What :func:`counted_from_one` renumbers: "text 3", "texts 7, 9", "choice 2", "label 0", "passage 1"; and the
quoted texts it skips (``'...'`` or ``"..."`` as ``repr`` writes them, opening after no letter or digit)."""


def counted_from_one(message: object) -> str:
    """A message of the Python API, which counts texts (and a prompt's choices, zero-shot's labels, a query's passages)
    from 0 as lists do, counting them from 1 as the command line gives them: ``text 0 is empty`` -> ``text 1 is
    empty``, ``text 0's choice 1`` -> ``text 1's choice 2``, ``texts 7, 9`` -> ``texts 8, 10``; a text the message
    quotes (``'see text 3'``) stays as it came.

    Args:
        message: the error or warning (its ``str``).
    """
    def renumbered(m: re.Match) -> str:
        """A quoted text as it came; a count plus one."""
        if m.group(1):
            return m.group(1)
        return f"{m.group(2)} {', '.join(str(int(i) + 1) for i in m.group(3).split(', '))}"

    return COUNTED.sub(renumbered, str(message))


EPILOG = f"""\
Each command's options and an example: bertfn COMMAND --help. Texts come as arguments (one that starts
with - after --, which ends the options), or one a line from a file or standard input: --input FILE, --input -.

exit codes: 0 done; {InputError.exit_code} bad arguments or input (a file run: some line holds an error); \
{ConfigError.exit_code} bad config.json;
{CheckpointError.exit_code} bad checkpoint; {ModelLoadError.exit_code} model not found; \
{DependencyError.exit_code} optional library missing; 1 unexpected (a bug: BERTFN_DEBUG=1 shows it);
130 Ctrl-C (the process ends by SIGINT); 141 stdout closed (| head); 143 SIGTERM."""
"""``bertfn --help``'s end: where each command's help is, how texts come, and the exit codes (the module docstring)."""


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = _Parser(prog="bertfn", description="BERT as pure functions over a Hugging Face checkpoint.",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"bertfn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add, _ in COMMANDS.values():
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return its exit code.

    Every failure ends here as one line on stderr and an exit code (see the module docstring),
    never a traceback. Messages spell options the CLI way (``--cased``, not ``lowercase=False``), and where the texts
    came on the command line (no ``--input``) count them from 1 (:func:`counted_from_one`).
    """
    surface = SURFACE.set("cli")
    typed = False  # texts on the command line: set once it is read

    def said(message: object) -> object:
        """The message as the command line counts its texts."""
        return counted_from_one(message) if typed else message

    try:
        with warnings.catch_warnings():
            warnings.showwarning = lambda message, *_, **__: one_line("warning", said(message))
            args = build_parser().parse_args(argv)
            typed = getattr(args, "input", None) is None
            refuse_dash(args)
            if getattr(args, "quiet", False):
                warnings.simplefilter("ignore")
            return COMMANDS[args.command][1](args)
    except BertfnError as e:
        one_line("error", said(e))
        return e.exit_code
    except BrokenPipeError:  # the reader of stdout went away: stop quietly, with the shell's code for it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM during a file run (bertfn.corpus.files.Terminated)
        one_line("error", str(e) or "interrupted")
        return getattr(e, "exit_code", 130)
    except Exception as e:
        if os.environ.get("BERTFN_DEBUG"):
            raise
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):  # the disk, not bertfn
            one_line("error", f"{e.strerror}{f': {e.filename}' if e.filename else ''}; make room, then run it again "
                              "(a file run with --resume: it continues after the last complete line)")
            return 1
        one_line("error", f"unexpected {type(e).__name__}: {e} (a bug in bertfn: please report it; "
                           "BERTFN_DEBUG=1 shows the traceback)")
        return 1
    finally:
        SURFACE.reset(surface)


if __name__ == "__main__":
    sys.exit(main())
