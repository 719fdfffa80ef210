"""Corpora in files: text or JSON Lines in, JSON Lines out (``bertfn fill-mask --input``), with progress and resume.

:func:`run_file` reads its input a line at a time, hands the texts to the task's :class:`~bertfn.corpus.runner.Runner`
a chunk at a time, and writes one output line per input line, in order: the result, or the error
that refused that line. A run that was stopped continues with ``resume=True`` after the last line
written (:func:`resume_point`).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint.loading import Model
from ..errors import InputError, syntax
from .runner import CHUNK, Runner, chunks, jsonable, relabel

OWN_KEYS = ("line", "result", "error")
"""Keys every output line may hold besides the input's own fields (see :func:`run_file`)."""


@dataclass
class Summary:
    """What :func:`run_file` did: texts run this time, how many failed, tokens, seconds."""

    texts: int
    errors: int
    tokens: int
    seconds: float
    output: str
    resumed_after: int = 0  # input lines already in the output when the run started (--resume)

    def __str__(self) -> str:
        s = max(self.seconds, 1e-9)
        resumed = f" (resumed after line {self.resumed_after})" if self.resumed_after else ""
        return (f"{self.texts} texts{resumed}, {self.errors} with errors, {self.seconds:.1f} s "
                f"({self.texts / s:.1f} texts/s, {self.tokens / s:.0f} tokens/s) -> {self.output}")


def _read_lines(source: str | Path) -> Iterator[bytes]:
    """The lines of a file (``-``: standard input) as bytes, without their line ending, lazily."""
    f = sys.stdin.buffer if str(source) == "-" else open(source, "rb")
    try:
        for raw in f:
            yield raw.rstrip(b"\n").removesuffix(b"\r")
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def parse_line(n: int, raw: bytes, field: str | None) -> tuple[object, dict, str | None]:
    """Input line ``n`` -> (its text, the fields the output carries, or the error that makes it a bad line).

    field None: the line is the text (UTF-8), carried as ``{"text": ...}``. Otherwise the line is a
    JSON object whose ``field`` holds the text; every field is carried.
    """
    try:
        line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
    except UnicodeDecodeError as e:
        return None, {}, f"line {n} is not valid UTF-8 (byte {e.start}); convert the file to UTF-8"
    if field is None:
        return line, {"text": line}, None
    try:
        record = json.loads(line)
    except ValueError as e:
        return None, {}, f"line {n} is not valid JSON ({e}); write one JSON object per line"
    if not isinstance(record, dict):
        return None, {}, f"line {n} is a JSON {type(record).__name__}, not an object; write {{{json.dumps(field)}: \"...\"}}"
    clash = [k for k in OWN_KEYS if k in record]
    if clash:
        return None, {}, (f"line {n} has a field named {clash[0]!r}, which the output uses for its own; "
                          "rename that field in the input")
    if field not in record:
        return None, record, f"line {n} has no field {field!r} (it has {', '.join(map(repr, record)) or 'none'})"
    if not isinstance(record[field], str):
        return None, record, f"line {n}: field {field!r} is a JSON {type(record[field]).__name__}, not a string"
    return record[field], record, None


def _count_lines(path: Path) -> int:
    """Lines in a file, a last one without a newline included (for the progress bar's total)."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def resume_point(target: Path) -> tuple[int, dict | None]:
    """How many input lines an interrupted run already wrote to ``target``, and its last output line.

    The file is cut after its last newline (a line the run was writing when it stopped is dropped,
    to be written again). Every complete line must be one JSON object and the last must say which
    input line it is for (``"line": n``), with n equal to the number of complete lines: otherwise
    the file is not the output of a run like this one, and :class:`InputError` says so.
    """
    count, start, end = 0, 0, 0  # complete lines; where the last complete line starts, and where it ends
    with open(target, "rb") as f:
        pos = 0
        while block := f.read(1 << 20):
            newlines = block.count(b"\n")
            if newlines:
                cut = block.rindex(b"\n")
                start = pos + block.rindex(b"\n", 0, cut) + 1 if newlines > 1 else end
                count, end = count + newlines, pos + cut + 1
            pos += len(block)
        f.seek(start)
        last = f.read(end - 1 - start)
    if count == 0:  # nothing complete: start again
        os.truncate(target, 0)
        return 0, None
    try:
        record = json.loads(last)
        n = record["line"]
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{target} does not end with an output line of bertfn (a JSON object with \"line\"); "
                         "--resume continues only a file this command wrote: pass another --output") from None
    if n != count:
        raise InputError(f"{target} holds {count} lines but its last is for input line {n}; it is not one output "
                         "line per input line, so it cannot be resumed: pass another --output")
    os.truncate(target, end)
    return count, record


def run_file(
    source: str | Path,
    target: str | Path,
    model: Model | str | Path | None = None,
    *,
    task: str = "fill-mask",
    field: str | None = None,
    resume: bool = False,
    progress: bool | None = None,
    chunk_size: int = CHUNK,
    tokenizer: str | Path | None = None,
    lowercase: bool | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    **options,
) -> Summary:
    """Run ``task`` on every line of ``source`` and write one JSON line per input line to ``target``.

    source: a text file (one text a line) or, with ``field``, JSON Lines whose ``field`` holds the
    text; ``"-"`` reads standard input. target: a file, or ``"-"`` for standard output. Output line n
    is ``{"line": n, <the input's fields>, "result": ...}`` (a text line's field is ``"text"``;
    ``result`` as the task returns it for that text, e.g. fill_mask's list of answers), or the same
    with ``"error": "..."`` in place of ``result`` when line n is not valid JSON, has no such field,
    or its text is refused (no [MASK], too long, ...). Lines are written in input order, a chunk at
    a time (flushed), and memory holds one chunk.

    resume: ``target`` holds the output of an interrupted run on the same input: keep its complete
    lines and continue after the last (:func:`resume_point`); the input's line there must be the one
    the output holds. Without resume a non-empty ``target`` is not overwritten.
    progress: a tqdm bar on stderr (texts/s, tokens/s, ETA); default: when stderr is a terminal.
    model, tokenizer, lowercase, device, dtype: as in :func:`open_model`; options: the task's.
    Returns a :class:`Summary`; the caller decides what errors mean (the CLI exits 2 if any).
    """
    started = time.perf_counter()
    to_stdout = str(target) == "-"
    if str(source) != "-" and not Path(source).is_file():
        raise InputError(f"input file {source} does not exist; pass --input with a text or JSON Lines file, or - for stdin")
    if field is None and str(source).endswith((".jsonl", ".ndjson")):
        raise InputError(f"{source} looks like JSON Lines; name the field that holds the text with "
                         f"{syntax(python='field=NAME', cli='--field NAME')}")
    if resume and to_stdout:
        raise InputError(f"{syntax(python='resume=True', cli='--resume')} needs an output file to continue, "
                         "not standard output")
    done, last = 0, None
    if not to_stdout:
        target = Path(target)
        if target.exists() and target.stat().st_size > 0:
            if not resume:
                raise InputError(f"{target} already exists; pass {syntax(python='resume=True', cli='--resume')} to "
                                 "continue the run that wrote it, or delete it to start again")
            done, last = resume_point(target)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InputError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    runner = Runner(task, model, tokenizer=tokenizer, lowercase=lowercase, device=device, dtype=dtype, **options)

    lines = enumerate(_read_lines(source), 1)
    skipped = 0
    for n, raw in itertools.islice(lines, done):  # skip what the interrupted run wrote, checking the last
        skipped = n
        if n == done and (field or "text") in last and parse_line(n, raw, field)[0] != last[field or "text"]:
            raise InputError(f"line {n} of {source} is not the text that line {n} of {target} was written for; "
                             "--resume continues a run on the same input")
    if skipped < done:
        raise InputError(f"{source} has {skipped} lines but {target} already holds {done}; "
                         "--resume continues a run on the same input")
    out = sys.stdout.buffer if to_stdout else open(target, "ab")
    bar = _progress_bar(source, done, sys.stderr.isatty() if progress is None else progress)
    texts = errors = tokens = 0
    reading = time.perf_counter()  # the model is loaded: the bar's rates count from here
    try:
        for chunk in chunks(lines, chunk_size):
            parsed = [(n, *parse_line(n, raw, field)) for n, raw in chunk]
            runnable = [text for _, text, _, bad in parsed if bad is None]
            results = iter(runner(runnable)) if runnable else iter(())
            written = []
            for n, text, carried, bad in parsed:
                record = {"line": n, **carried}
                r = next(results) if bad is None else InputError(bad)
                if isinstance(r, InputError):
                    record["error"] = str(relabel(r, f"line {n}"))
                    errors += 1
                else:
                    record["result"] = jsonable(r)
                written.append(json.dumps(record, ensure_ascii=False))
            out.write(("\n".join(written) + "\n").encode("utf-8"))
            out.flush()
            count = runner.tokens(runnable)
            texts, tokens = texts + len(chunk), tokens + count
            if bar is not None:
                bar.update(len(chunk))
                rate = tokens / max(time.perf_counter() - reading, 1e-9)
                bar.set_postfix_str(f"{rate:,.0f} tokens/s, {errors} errors", refresh=False)
    finally:
        if bar is not None:
            bar.close()
        if not to_stdout:
            out.close()
    return Summary(texts, errors, tokens, time.perf_counter() - started, "stdout" if to_stdout else str(target), done)


def _progress_bar(source: str | Path, done: int, show: bool):
    """A tqdm bar on stderr counting texts (its total: the input's lines, counted here; none for stdin),
    or None when hidden (then the file is not read an extra time)."""
    if not show:
        return None
    from tqdm import tqdm

    total = None if str(source) == "-" else _count_lines(Path(source))

    return tqdm(total=total, initial=done, unit="text", file=sys.stderr, dynamic_ncols=True, smoothing=0.1,
                mininterval=0.5)


