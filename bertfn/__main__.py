"""``python -m bertfn`` and the ``bertfn`` command: :func:`bertfn.cli.main` in a process of its own."""

import gc
import sys

from .cli import main
from .interrupts import end_interrupted, started


def run() -> None:
    """Run the command line (``sys.argv``) and exit with its code; after Ctrl-C, end by SIGINT (:mod:`bertfn.interrupts`).

    The objects that exist before the command runs (importing torch makes over a million) and after it
    are set aside from the garbage collector (``gc.freeze``): its collections, the interpreter's last ones
    at exit included, then skip them (reference counting still frees them): a command's exit and its full
    collections during the run no longer walk torch's objects.
    """
    started()  # Ctrl-C raises KeyboardInterrupt again, which main catches
    gc.freeze()
    code = main()
    gc.freeze()
    if code == 130:  # Ctrl-C, said by main: Python ends the process by SIGINT, so that a shell script stops too
        end_interrupted()
    sys.exit(code)


if __name__ == "__main__":
    run()
