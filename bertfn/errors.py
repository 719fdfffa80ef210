"""bertfn's own exceptions and warnings.

Every error bertfn raises on purpose is a :class:`BertfnError`. Its message says three things:
what was expected, what came instead, and what to do about it. The CLI turns each subclass into
a one-line message and its own exit code (``exit_code``), never a traceback.

    BertfnError
    ├── InputError        bad text, ids, masks or arguments passed to a function   (exit 2)
    │   └── MissingPartError  the model lacks what a call needs (tokenizer, MLM head) (exit 2)
    ├── ConfigError       config.json missing, unreadable or impossible            (exit 3)
    ├── CheckpointError   weights or tokenizer files missing, extra, mis-shaped,
    │                     corrupt, unsafe, or not readable for this user           (exit 4)
    ├── ModelLoadError    a model could not be found (hub id, folder, no network)
    │                     or its folder cannot be searched (permissions)           (exit 5)
    └── DependencyError   an optional library is not installed                     (exit 6)

and bertfn's own warnings, each of a class of its own so that a warnings filter can quiet one kind alone
(``"ignore"`` with ``category=bertfn.UnusedWeightsWarning``; the CLI's ``--quiet`` quiets all):

    UserWarning
    └── BertfnWarning
        ├── UnusedWeightsWarning  a checkpoint holds weights no BERT part reads (kept, unused)
        ├── UnknownTokensWarning  a text's tokens are mostly [UNK] (its results say little)
        └── IgnoredConfigWarning  config.json sets a field the model's transformers class ignores (so does bertfn)

Messages that tell the user what to pass spell it the way the caller writes it: :func:`syntax` gives
the Python spelling (``lowercase=False``) or, inside the ``bertfn`` command, the CLI one (``--cased``).
:func:`unreadable` is the one message for a file or folder this user may not read; :func:`read_settings` reads a
checkpoint's settings file (config.json, tokenizer_config.json, modules.json, ...) or refuses it in bertfn's words.
"""

from __future__ import annotations

import json
import stat
import sys
from contextvars import ContextVar
from pathlib import Path

SURFACE: ContextVar[str] = ContextVar("bertfn_surface", default="python")
"""Where the current call came from: ``"python"`` or ``"cli"`` (set by :func:`bertfn.cli.main`)."""


def syntax(python: str, cli: str) -> str:
    """The spelling of an option for the current caller: ``python`` from Python, ``cli`` from the command line.

    Args:
        python: the Python spelling, e.g. ``lowercase=False``.
        cli: the command line's, e.g. ``--cased``.
    """
    return cli if SURFACE.get() == "cli" else python


class BertfnError(Exception):
    """Base class of every error bertfn raises on purpose.

    Attributes:
        exit_code: the ``bertfn`` command's exit status for this error (1; each subclass has its own).
    """

    exit_code = 1


class InputError(BertfnError, ValueError):
    """The caller passed something bertfn cannot work with (text, ids, masks, options).

    Attributes:
        exit_code: 2.
    """

    exit_code = 2


class ConfigError(BertfnError, ValueError):
    """A model config is missing, unreadable, or describes an impossible model.

    Attributes:
        exit_code: 3.
    """

    exit_code = 3


class CheckpointError(BertfnError):
    """Checkpoint weights are missing, unexpected, mis-shaped, corrupt, or unsafe to load.

    Attributes:
        exit_code: 4.
    """

    exit_code = 4


class ModelLoadError(BertfnError):
    """A model could not be located: unknown hub id, missing folder, or offline without a cache.

    Attributes:
        exit_code: 5.
    """

    exit_code = 5


class MissingPartError(InputError):
    """The model lacks a part that the call needs: a tokenizer to read text, or the masked-LM head."""


class DependencyError(BertfnError, ImportError):
    """An optional library that this feature needs is not installed; the message names the extra to install.

    Attributes:
        exit_code: 6.
    """

    exit_code = 6


class BertfnWarning(UserWarning):
    """Base class of bertfn's own warnings (a UserWarning, so that every filter of those applies)."""


class UnusedWeightsWarning(BertfnWarning):
    """The checkpoint holds weights that no BERT part reads: kept in ``model.state``, unused.

    Another model's heads, e.g. AntiBERTy's ``cls.species.*``. ``load(..., strict=True)`` refuses them instead.
    """


class UnknownTokensWarning(BertfnWarning):
    """Most tokens of a text are ``[UNK]``: the results say little about it (the message names the likely fix)."""


class IgnoredConfigWarning(BertfnWarning):
    """config.json sets a field that the model's transformers class does not read, and bertfn computes as that class
    does: e.g. an ESM ``hidden_act`` other than ``gelu`` (``EsmIntermediate`` always applies the exact-erf GELU)."""


def clipped(value: object, width: int = 80) -> str:
    """``value``'s repr for a message, cut to ``width`` characters with an ellipsis where it is longer (so that a
    cut text does not read as the whole text: ``'a long te…``).

    Args:
        value: what came (a text, a list, ...).
        width: the characters kept at most, the ellipsis included.
    """
    shown = repr(value)
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def outside_stacklevel() -> int:
    """The ``stacklevel`` that a ``warnings.warn`` in the caller of this function takes to name the first line outside
    bertfn: the user's call (a notebook cell's), however deep inside bertfn the warning is raised.

    A fixed stacklevel named a line of bertfn's for some calls (``enc = tok(list(batch))``), and Python's filter says
    a warning once per place: a re-run cell, or any later cell meeting the same texts, was then told nothing.
    """
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "bertfn":
        frame, level = frame.f_back, level + 1
    return level


def unreadable(path: str | Path, error: type[BertfnError] | None = None) -> BertfnError:
    """The error for a file or folder that this user may not read (permissions), naming it and the fix.

    Args:
        path: the file or folder.
        error: the class to return (default :class:`CheckpointError`, a file of the checkpoint; :class:`InputError`:
            an input file, whose fix is said without the model).

    Returns:
        The error, to raise.
    """
    fix = "give this user read access to it (chmod a+r), or copy it to a folder you own" if error is InputError else \
        ("give this user read access to it and the folders above it (e.g. chmod -R a+rX on the model's folder), or "
         "copy the model to a folder you own")
    return (error or CheckpointError)(f"cannot read {path}: permission denied for this user; {fix}")


def require_folder(path: Path, what: str) -> None:
    """Refuse a file to write whose folder does not exist, before any work is done for it (a model loaded, a page
    made) and in bertfn's words, where the write itself would fail at the end with the system's.

    Args:
        path: the file to write.
        what: how the caller names it (``--out``, ``target``), said first.

    Raises:
        InputError: ``path``'s folder does not exist.
    """
    if not Path(path).parent.is_dir():
        parent = Path(path).parent
        raise InputError(f"{what} {path}: its folder {parent} does not exist; create it (mkdir -p {parent}) or name a "
                         "file in a folder that does")


def require_readable(path: Path, error: type[BertfnError] | None = None) -> None:
    """Raise :func:`unreadable` unless this user may open the file ``path``.

    For readers that misreport a denied file (safetensors says "No such file", tokenizers a bare Exception).

    Args:
        path: the file.
        error: the class to raise (default :class:`CheckpointError`).

    Raises:
        CheckpointError: (or ``error``) the file cannot be opened for reading.
    """
    try:
        path.open("rb").close()
    except PermissionError:
        raise unreadable(path, error) from None


SETTINGS_LIMIT = 64 * 2**20
"""The most bytes of a checkpoint's settings file that bertfn reads (:func:`read_settings`). The largest such files on
the hub are a few MB (a slow tokenizer's vocab.json of 250,000 tokens, a tokenizer_config.json listing its added
tokens): one over 64 MiB is no settings file, and reading it whole would only fill the memory of whoever loads it."""


def read_settings(path: Path, error: type[BertfnError] | None = None, fix: str = "re-download or fix the file") -> object:
    """The JSON of a checkpoint's settings file, read only where it is a regular file of at most
    :data:`SETTINGS_LIMIT` bytes: a FIFO put in its place blocked the load forever, ``/dev/zero`` (or a file of
    gigabytes) filled the memory, a JSON nested a hundred thousand deep raised Python's RecursionError.

    Args:
        path: the file. A missing one (FileNotFoundError) or one this user may not read (PermissionError) is the
            caller's to say.
        error: the class to raise (default :class:`CheckpointError`).
        fix: what to do about a file that is not JSON, said last.

    Raises:
        CheckpointError: (or ``error``) not a regular file, larger than the limit, not UTF-8, not JSON, or too deep.
    """
    error = error or CheckpointError
    mode, size = (st := path.stat()).st_mode, st.st_size
    if not stat.S_ISREG(mode):
        raise error(f"{path} is not a regular file (it is a {'folder' if stat.S_ISDIR(mode) else 'device, FIFO or socket'}), "
                    "so bertfn does not read it as JSON; put the file itself there (re-download the folder)")
    with path.open("rb") as f:
        data = f.read(SETTINGS_LIMIT + 1)  # a size the file system reports as 0 (/proc) is read up to the limit too
    if max(size, len(data)) > SETTINGS_LIMIT:
        raise error(f"{path} holds {max(size, len(data)):,} bytes or more, and no settings file of a checkpoint "
                    f"holds over {SETTINGS_LIMIT >> 20} MiB; bertfn does not read it: re-download the folder")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{path} is not valid JSON ({e}); {fix}") from e
    except RecursionError:
        raise error(f"{path} nests its JSON deeper than Python reads, as no settings file of a checkpoint does; "
                    f"{fix}") from None
