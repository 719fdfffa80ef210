"""``python -m bertfn`` and the ``bertfn`` command: :func:`bertfn.cli.main` in a process of its own."""

import gc
import sys

from .cli import main


def run() -> None:
    """Run the command line (``sys.argv``) and exit with its code.

    The objects that exist before the command runs (importing torch makes over a million) and after it
    are set aside from the garbage collector (``gc.freeze``): its collections, the interpreter's last ones
    at exit included, then skip them (reference counting still frees them): a command's exit and its full
    collections during the run no longer walk torch's objects.
    """
    gc.freeze()
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
