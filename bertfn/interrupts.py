"""Ctrl-C in the ``bertfn`` command, at any moment: one line on stderr, and the process ends by SIGINT.

``import bertfn`` takes seconds (torch and numpy load), and until :func:`bertfn.cli.main` runs, Ctrl-C raised
KeyboardInterrupt inside whatever module was loading: the traceback of that import, or worse, an import that caught
it (the run went on as if Ctrl-C had not been pressed) or turned it into another error (numpy's ``ImportError: cannot
load module more than once per process``). While the command starts, SIGINT therefore raises nothing:
:func:`stop_at_once` says ``bertfn: error: interrupted`` and ends the process by SIGINT there and then (nothing has
been written yet). :func:`bertfn.__main__.run` gives SIGINT back to Python's KeyboardInterrupt (:func:`started`) just
before :func:`bertfn.cli.main`, which says the same line after a file run has written what it ran, and returns 130
(what its callers in Python test); ``run`` then ends the process by SIGINT too (:func:`end_interrupted`,
:func:`end_by_sigint`).

Ending by SIGINT, not exiting with code 130, is what Python does after any KeyboardInterrupt nobody caught: the
shell's ``$?`` is 130 either way, but bash, which waits for a foreground command after Ctrl-C, stops a script (a loop
over files) only if that command died of SIGINT, and goes on to the next command if it exited with 130.

This module imports nothing of bertfn's and nothing slow, so ``bertfn/__init__.py`` installs it before anything else
loads, when the process is the command (:func:`started_as_command`): a program that imports bertfn keeps its own
handling of Ctrl-C. A command started with SIGINT ignored (``bertfn ... &`` in a shell script) keeps ignoring it.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

SAID = "bertfn: error: interrupted"
"""What the command says on stderr when Ctrl-C stops it (:func:`bertfn.cli.main` says it too)."""


def end_interrupted() -> None:
    """After :func:`bertfn.cli.main` caught Ctrl-C and said so: raise KeyboardInterrupt again at the top of the command,
    so that Python ends the process by SIGINT once it has shut down (for a KeyboardInterrupt itself: a subclass of it
    would end it with code 1). Its message is :data:`SAID`, which :func:`end_by_sigint` does not say twice."""
    raise KeyboardInterrupt(SAID)


def started_as_command() -> bool:
    """Whether this process is the ``bertfn`` command: the console script (``sys.argv[0]`` is the script, named
    ``bertfn``) or ``python -m bertfn``, whose ``sys.argv[0]`` is ``-m`` while the package imports
    (``sys.orig_argv`` holds the command line as typed)."""
    if Path(sys.argv[0]).name == "bertfn":
        return True
    argv = sys.orig_argv
    return any(a == "-mbertfn" or a == "-m" and argv[i + 1:i + 2] == ["bertfn"] for i, a in enumerate(argv))


def stop_at_once(signum: int, frame) -> None:
    """SIGINT's handler while the command starts: say :data:`SAID` and end the process by SIGINT, now.

    Args:
        signum: the signal (SIGINT).
        frame: where it came (unused).
    """
    os.write(2, (SAID + "\n").encode())
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def end_by_sigint(kind: type[BaseException], value: BaseException, traceback) -> None:
    """The command's ``sys.excepthook``: a KeyboardInterrupt that reached the top is said in one line (unless
    :func:`bertfn.cli.main` said it: :func:`end_interrupted`), and nothing more, so that Python ends the process by
    SIGINT; any other exception goes to Python's own hook.

    Args:
        kind: the exception's class.
        value: the exception.
        traceback: its traceback.
    """
    if not issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, traceback)
    elif value.args != (SAID,):
        print(SAID, file=sys.stderr)


def install() -> None:
    """In the ``bertfn`` command (:func:`started_as_command`), from now until :func:`started`: Ctrl-C stops it at
    once (:func:`stop_at_once`), unless SIGINT is ignored; and :func:`end_by_sigint` is ``sys.excepthook``."""
    if not started_as_command():
        return
    sys.excepthook = end_by_sigint
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, stop_at_once)


def started() -> None:
    """The command is about to run: Ctrl-C raises KeyboardInterrupt again, which :func:`bertfn.cli.main` catches (a
    file run writes what it ran first). ``sys.excepthook`` becomes :func:`end_by_sigint` however the command
    was started."""
    sys.excepthook = end_by_sigint
    if signal.getsignal(signal.SIGINT) is stop_at_once:
        signal.signal(signal.SIGINT, signal.default_int_handler)
