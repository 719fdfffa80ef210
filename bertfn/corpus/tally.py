"""What a file run counts and shows while it goes, and how it stops: :class:`Tally` (texts, errors, tokens read,
warnings said once per run, the progress bar) and :func:`stop_on_sigterm` (SIGTERM stops a run as Ctrl-C does)."""

from __future__ import annotations

import re
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .inputs import is_stream


class Tally:
    """Counts, warnings and the progress bar of a run: texts, errors, tokens read, lines warned.

    Args:
        bar (tqdm | None): the tqdm bar, or None.
    """

    def __init__(self, bar) -> None:
        self.bar, self.texts, self.errors, self.tokens, self.warned = bar, 0, 0, 0, 0
        self.shown: set[str] = set()
        self.started = time.perf_counter()

    def warn(self, message: str, kind: str | None = None) -> None:
        """Warn once per run per ``kind`` of message.

        Args:
            message: what to say.
            kind: what counts as the same message (default: the message with its numbers and quoted words
                blanked and without its ``(and lines 9, 12 like it)``, so that the same words about other lines, ids
                or texts count as one).
        """
        kind = kind or re.sub(r"\d+|'[^']*'", "#", re.sub(r" \(and lines? [^()]* like it\)", "", message))
        if kind not in self.shown:
            self.shown.add(kind)
            warnings.warn(message + " (said once per run)", stacklevel=4)

    def update(self, texts: int) -> None:
        self.texts += texts
        if self.bar is not None:
            rate = self.tokens / max(time.perf_counter() - self.started, 1e-9)
            self.bar.set_postfix_str(f"{rate:,.0f} tokens/s, {self.errors} errors", refresh=False)
            self.bar.update(texts)  # after the postfix: the bar drawn now shows this step's rate


def count_lines(path: Path) -> int:
    """Lines in a file, a last one without a newline included (for the progress bar's total).

    Args:
        path: the file.
    """
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def progress_bar(source: str | Path, done: int, show: bool, total: int | None = None):
    """A tqdm bar on stderr counting texts, or None when hidden (then the file is not read an extra time).

    Args:
        source: the input; its lines are the bar's total (none for stdin), counted here unless ``total`` is given.
        done: texts done before (resume).
        show: whether to show it.
        total: the texts of the input when they are not its lines (a table's rows), or None.
    """
    if not show:
        return None
    from tqdm import tqdm

    if total is None:
        total = None if is_stream(source) else count_lines(Path(source))  # a pipe is read once: by the run

    return tqdm(total=total, initial=done, unit="text", file=sys.stderr, dynamic_ncols=True, smoothing=0.1,
                mininterval=0.5)


class Terminated(KeyboardInterrupt):
    """SIGTERM during :func:`~bertfn.corpus.files.run_file`: it stops as at Ctrl-C, what was run written.

    The CLI exits 143.
    """

    exit_code = 143


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Within: SIGTERM raises :class:`Terminated` (in the main thread only, where Python runs signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    def stop(signum, frame) -> None:
        raise Terminated("terminated")

    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
