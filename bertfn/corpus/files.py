"""Corpora in files: text, JSON Lines or a table (.csv, .tsv) in, JSON Lines out (``bertfn fill-mask --input``), with
progress and resume.

:func:`run_file` reads its input a chunk of lines at a time, hands the texts to the task's
:class:`~bertfn.corpus.runner.Runner` in pieces sized to take about ``flush_every`` seconds, and
writes one output line per input line, in order: the result, or the error that refused that line.
Beside the output lies the run's record (:mod:`bertfn.corpus.record`); a run that was stopped
continues with ``resume=True`` after the last line written, once every written line and the record
agree with the run asked for, and ``retry_errors=True`` re-runs the lines that hold errors, in place.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint.checks import count
from ..checkpoint.model import Model
from ..errors import InputError, UnknownTokensWarning, require_readable, syntax
from .formats import Output, check_formats, compact_path, open_compact, output_files
from .inputs import Inputs, is_stream, label, read_lines
from .record import (InputPrint, OutputLock, check_record, make_record, read_record, scan_output,
                     write_record)
from .runner import CHUNK, Runner, chunks, jsonable, relabel, task_named
from .tally import Tally, progress_bar, stop_on_sigterm

FLUSH_SECONDS = 5.0
"""Default of ``flush_every``: results reach the output file at least this often (a kill loses at most this much work)."""


@dataclass
class Summary:
    """What :func:`run_file` did: texts run this time, how many failed, tokens read, seconds.

    The output is complete and clean when ``errors + kept_errors == 0``.

    Attributes:
        texts: texts run this time.
        errors: of those, how many were refused.
        tokens: tokens read.
        seconds: the run's time.
        output: the files written (or "stdout"); the run log named as such when the output asked for was
            ``.npy`` or ``.parquet``.
        resumed_after: lines already in the output when the run started (resume).
        retried: of those, the error lines run again (retry_errors).
        kept_errors: error lines left from before, not run again.
        warned: lines this run flagged with a ``"warning"``.
    """

    texts: int
    errors: int
    tokens: int
    seconds: float
    output: str
    resumed_after: int = 0
    retried: int = 0
    kept_errors: int = 0
    warned: int = 0

    def __str__(self) -> str:
        s = max(self.seconds, 1e-9)
        resumed = f" (resumed after line {self.resumed_after}" + (
            f", {self.retried} error line{'' if self.retried == 1 else 's'} retried" if self.retried else "") + ")" \
            if self.resumed_after else ""
        kept = (f"; {self.kept_errors} error lines from before kept "
                f"({syntax(python='retry_errors=True', cli='--retry-errors')} runs them again)") if self.kept_errors else ""
        warned = f", {self.warned} with warnings" if self.warned else ""
        return (f"{self.texts} text{'' if self.texts == 1 else 's'}{resumed}, {self.errors} with errors{warned}{kept}, "
                f"{self.seconds:.1f} s "
                f"({self.texts / s:.1f} texts/s, {self.tokens / s:.0f} tokens/s) -> {self.output}")


def run_piece(runner: Runner, entries: list[tuple[int, bytes, bytes | None]], inputs: Inputs, echo: bool,
              drop: frozenset, tally: Tally, printed: InputPrint) -> list[str]:
    """The output lines of ``entries``, in order.

    The texts to run go to ``runner`` in one call; the task's warnings are caught and said again naming
    the line (:meth:`Tally.warn`), and a text that is mostly [UNK] gets a ``"warning"`` in its line.

    Args:
        runner: the task with its model.
        entries: ``(n, raw input line, the output line to keep or None to run)``.
        inputs: how a line gives the task's input (:class:`~bertfn.corpus.inputs.Inputs`).
        echo: False leaves the text out.
        drop: keys left out of a result's dicts (``"text"``, ``"tokens"``; their own ``"warning"`` always:
            the line holds one naming the line).
        tally: the run's counts.
        printed: the fingerprint of the result lines' inputs, added to.
    """
    parsed = [(n, raw, kept, *inputs.parse(n, raw)) for n, raw, kept in entries if kept is None]
    runnable = [(n, text, carried) for n, _, _, text, carried, bad in parsed if bad is None]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = iter(runner([text for _, text, _ in runnable]))
        read = runner.read([text for _, text, _ in runnable])
    for w in caught:
        if not issubclass(w.category, UnknownTokensWarning):  # said per line below
            tally.warn(_lines_named(str(w.message), runnable))
    by_line = {n: (next(results), tokens, unk) for (n, _, _), (tokens, unk) in zip(runnable, read)}
    lines, done = [], iter(parsed)
    for n, raw, kept in entries:
        if kept is not None:  # a result line kept from before (retry_errors): its input counts in the fingerprint
            printed.add(n, raw)
            lines.append(kept.decode("utf-8"))
            continue
        _, _, _, text, carried, bad = next(done)
        record = {"line": n, **carried}
        if not echo:
            for key in inputs.echoed:
                record.pop(key, None)
        bad = bad and InputError(bad.replace(f"line {n}", label(n, carried), 1))  # named by its id too, if it has one
        result, tokens, unk = by_line[n] if bad is None else (bad, 0, None)
        own = None if unk is not None else _own_warning(result)
        if isinstance(result, InputError):
            record["error"] = str(relabel(result, label(n, carried)))
            tally.errors += 1
        else:
            result = _without(result, drop)
            record["result"] = jsonable(result)
            printed.add(n, raw)
            tally.tokens += tokens
            if unk is not None or own is not None:
                record["warning"] = str(relabel(InputError(unk or own), label(n, carried)))
                tally.warned += 1
                tally.warn(record["warning"] + '; every line like it carries a "warning" in the output',
                           "[UNK]" if unk is not None else "result")
        lines.append(json.dumps(record, ensure_ascii=False))
    return lines


def _lines_named(message: str, runnable: list[tuple[int, object, dict]]) -> str:
    """A task's warning about the texts of a piece, by their index in it (``text 0 (and texts 2, 5 like it): ...``,
    :func:`~bertfn.checkpoint.tokenizer.warn_texts`), naming their lines instead (``line 7 (id 'a') (and lines 9, 12
    like it): ...``).

    Args:
        message: the warning.
        runnable: the piece's ``(line number, input, carried fields)``, in the order the task got them.
    """
    lines = {str(i): (n, carried) for i, (n, _, carried) in enumerate(runnable)}
    message = re.sub(r"\(and text(s?) (\d+(?:, \d+)*)", lambda m: f"(and line{m.group(1)} " + ", ".join(
        str(lines[i][0]) if i in lines else i for i in m.group(2).split(", ")), message)
    return re.sub(r"\btext (\d+)\b", lambda m: label(*lines[m.group(1)]) if m.group(1) in lines else m.group(0), message)


def _own_warning(result: object) -> str | None:
    """A result's own ``"warning"``, as "text 0: ...", or None (score's: :func:`~bertfn.tasks.scoring.scored_unknown`)."""
    first = result[0] if isinstance(result, list) and result else result
    return f"text 0: {first['warning']}" if isinstance(first, dict) and first.get("warning") else None


def _without(result: object, keys: frozenset) -> object:
    """``result`` without ``keys`` and ``"warning"`` in its dicts (a dict's, or those of a list: fill-mask's answers)."""
    if isinstance(result, dict):
        return {k: v for k, v in result.items() if k not in keys and k != "warning"}
    return [_without(r, keys) for r in result] if isinstance(result, list) else result


def run_entries(runner: Runner, entries: Iterator[tuple[int, bytes, bytes | None]], output: Output, tally: Tally,
                inputs: Inputs, echo: bool, drop: frozenset, chunk_size: int) -> None:
    """Run and write ``entries`` (see :func:`run_piece`) a chunk at a time, each chunk in pieces sized to take
    about ``output.flush_every`` seconds (from 1 text, growing as the texts' speed is measured), so that
    results are flushed that often even when a text takes seconds, and the bar moves per piece."""
    size = 1
    for chunk in chunks(entries, chunk_size):
        todo = list(chunk)
        while todo:
            piece, running = [], 0
            while todo and (running < size or todo[0][2] is not None):
                running += todo[0][2] is None
                piece.append(todo.pop(0))
            began = time.monotonic()
            output.write(run_piece(runner, piece, inputs, echo, drop, tally, output.printed), force=not todo)
            tally.update(running)
            per_text = (time.monotonic() - began) / max(running, 1)
            size = max(1, int(min(chunk_size, 2 * size, output.flush_every / max(per_text, 1e-6))))  # inf: a chunk


def run_file(
    source: str | Path,
    target: str | Path,
    model: Model | str | Path | None = None,
    *,
    task: str = "fill-mask",
    field: str | dict[str, str] | None = None,
    resume: bool = False,
    retry_errors: bool = False,
    progress: bool | None = None,
    chunk_size: int = CHUNK,
    flush_every: float = FLUSH_SECONDS,
    echo: bool = True,
    detail: bool = True,
    formats: tuple[str, ...] = (),
    tokenizer: str | Path | None = None,
    lowercase: bool | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    **options,
) -> Summary:
    """Run ``task`` on every line of ``source`` and write one JSON line per input line to ``target``.

    Output line n is ``{"line": n, <the input's fields>, "result": ...}`` (a text line's field is
    ``"text"``; ``result`` as the task returns it for that text, e.g. fill_mask's list of answers), or the
    same with ``"error": "..."`` in place of ``result`` when line n is not valid JSON, has no such field,
    or its text is refused (no [MASK], too long, ...). A line whose text is mostly [UNK] also holds
    ``"warning": "..."``. Lines are written in input order; memory holds one chunk of ``chunk_size``.
    Before any model loads, the first line is checked to hold ``field``, and a table is read whole to check it
    (:meth:`~bertfn.corpus.inputs.Inputs.probe`). Floats are
    written at float32 precision (:func:`~bertfn.corpus.runner.jsonable`).

    Args:
        source: a text file (one text a line) or, with ``field``, JSON Lines whose ``field`` holds the
            text; a file named ``.csv`` or ``.tsv``, a table whose header names its columns (``field`` names the
            text's column, default ``"text"``; a row is a line: output line n is its n-th row,
            :mod:`~bertfn.corpus.inputs`); ``"-"`` reads standard input (lines, never a table).
        target: a file, or ``"-"`` for standard output (a pipe or a device, ``/dev/null``, is written as it is: no
            record, no resume). A name ending in ``.npy`` (embed) or ``.parquet``
            writes that format there, and the JSON Lines beside it as the run's log (``out.npy`` ->
            ``out.jsonl``, which ``resume`` checks and continues; :func:`~bertfn.corpus.formats.output_files`).
        model: as in :func:`~bertfn.corpus.runner.open_model`.
        task: the task's name: ``"fill-mask"``, ``"score"``, ``"embed"`` or ``"score-mutations"``.
        field: the JSON field that holds each line's text (None: the input is plain text); for a task of several
            inputs (answer's question and context) ``{input: field}`` where a field is not named as its input
            (:mod:`~bertfn.corpus.inputs`).
        resume: ``target`` holds the output of an interrupted run: check it against the run record beside
            it (:mod:`bertfn.corpus.record`: the same task, options, field, model weights and vocabulary, and
            input) and every written line against its input line, then continue after the last complete
            line. Without resume a non-empty ``target`` is not overwritten.
        retry_errors: (with resume) first run again the lines that hold errors, in place.
        progress: a tqdm bar on stderr (texts/s, tokens/s, ETA); default: when stderr is a terminal.
        chunk_size: input lines read at a time.
        flush_every: seconds between flushes of the output at most (and at every chunk's end): texts run
            in pieces sized to take about that long, so a kill loses at most that much work.
        echo: False leaves the text out of each output line (the input's other fields, e.g. an id, stay);
            a result's own echo of the text (score's ``"text"``) is always left out: the line holds it once.
        detail: False leaves per-token detail out of results (score's ``"tokens"``).
        formats: also write the output as ``"npy"`` (embed) and/or ``"parquet"`` beside it, as the run goes
            (:mod:`~bertfn.corpus.formats`; a resume brings them level with the JSON Lines).
        tokenizer: as in :func:`~bertfn.corpus.runner.open_model`.
        lowercase: as in :func:`~bertfn.corpus.runner.open_model`.
        device: as in :func:`~bertfn.corpus.runner.open_model`.
        dtype: as in :func:`~bertfn.corpus.runner.open_model`.
        **options (Any): the task's options.

    Returns:
        What the run did; the caller decides what errors mean (the CLI exits 2 if any).

    Raises:
        InputError: a missing input, options that do not fit together (``out.npy`` for a task other than embed),
            a first line without ``field``, a table it cannot read (naming the line), a taken ``target`` without
            ``resume`` (or the input itself), or an output that does not match the run record.
    """
    started = time.perf_counter()
    streamed = is_stream(target)  # stdout, a pipe or a device: written as it goes, with no record beside it
    piped = is_stream(source)  # stdin or a pipe: read once, as it comes
    if not piped and not Path(source).is_file():
        what = "is a folder" if Path(source).is_dir() else "does not exist"
        raise InputError(f"input file {source} {what}; pass --input with a text, JSON Lines, .csv or .tsv "
                         "file, or - for stdin")
    if not piped:
        require_readable(Path(source), InputError)  # another user's file: said before the model loads
    named = task_named(task)
    inputs = Inputs.of(named.inputs, named.optional, field, source)
    if (resume or retry_errors) and streamed:
        raise InputError(f"{syntax(python='resume=True', cli='--resume')} needs an output file to continue, not "
                         f"{'standard output' if str(target) == '-' else f'the pipe or device {target}'}")
    if retry_errors and not resume:
        raise InputError(f"{syntax(python='retry_errors=True', cli='--retry-errors')} re-runs the error lines of an "
                         f"earlier run: pass {syntax(python='resume=True', cli='--resume')} with it")
    if retry_errors and piped:
        raise InputError("retrying error lines reads the input twice, so it cannot be standard input or a pipe; "
                         "pass the file")
    count("chunk_size", chunk_size)
    asked = None if str(target) == "-" else Path(target)
    target, formats = (None, tuple(formats)) if streamed else output_files(asked, formats, named.vectors)
    check_formats(formats, named.vectors, streamed)
    if isinstance(flush_every, bool) or not isinstance(flush_every, (int, float)) or not flush_every >= 0:
        raise InputError(f"{syntax(python='flush_every', cli='--flush-every')} must be a number of seconds >= 0, "
                         f"got {flush_every!r}")
    lines = enumerate(inputs.read(source), 1)
    first = next(lines, None)
    rows = inputs.probe(first and first[1], source)  # a table's rows, for the bar
    lines = itertools.chain([first] if first else [], lines)
    with OutputLock(target) as lock:  # before the output is looked at: a second run on it is refused
        resuming = not streamed and _continues(source, asked, target, resume)
        old = read_record(target) if resuming else None  # before the model loads: a missing record is known at once
        runner = Runner(task, model, tokenizer=tokenizer, lowercase=lowercase, device=device, dtype=dtype, **options)
        recorded = {k: v for k, v in options.items() if k != "batch_size"}  # batching never changes a result
        record = None if streamed else make_record(task, {**recorded, "tokenizer": tokenizer, "lowercase": lowercase,
                                                           "echo": echo, "detail": detail}, inputs.record, runner.model)
        drop = frozenset(("text",) if detail else ("text", "tokens"))  # the line holds the text already (unless not echo)
        done, kept, printed = 0, [], InputPrint()
        if old is not None:
            check_record(old, record, target)
            done, kept, printed = scan_output(target, source, lines, inputs.parse,
                                              old.get("input", {}))
        bar = progress_bar(source, done, sys.stderr.isatty() if progress is None else progress, rows)
        tally, retried = Tally(bar), 0
        with stop_on_sigterm():  # SIGTERM (a batch system stopping the job) stops the run as Ctrl-C does
            try:
                if retry_errors and kept:
                    retried, printed = _retry(runner, source, target, done, set(kept), tally, inputs, echo, drop,
                                              chunk_size, flush_every)
                    lock.renew()  # the retried file is the output now
                    kept = []
                    lines = itertools.islice(enumerate(inputs.read(source), 1), done, None)
                if record is not None:
                    write_record(target, record, done, printed)
                compact = [] if streamed else open_compact(target, formats, named.vectors, done, read_lines(target),
                                                            rebuild=retried > 0)
                out = sys.stdout.buffer if asked is None else open(target or asked, "ab")
                try:
                    output = Output(out, target, record, done, printed, flush_every, compact)
                    run_entries(runner, ((n, raw, None) for n, raw in lines), output, tally, inputs, echo, drop, chunk_size)
                finally:
                    for o in compact:  # what was given them reaches the disk, stopped or not (no later than the JSON Lines)
                        o.flush(final=True)
                    if asked is not None:
                        out.close()
                for o in compact:
                    o.close()
            finally:
                if bar is not None:
                    bar.close()
    if streamed:
        written = "stdout" if asked is None else str(asked)
    else:
        beside = [str(compact_path(target, f)) for f in dict.fromkeys(formats) if f != "jsonl"]
        written = ", ".join(beside) + f" (run log {target})" if asked != target else ", ".join([str(target), *beside])
    return Summary(tally.texts, tally.errors, tally.tokens, time.perf_counter() - started, written, done,
                   retried, len(kept), tally.warned)


def _continues(source: str | Path, asked: Path, log: Path, resume: bool) -> bool:
    """Whether the run asked to write ``asked``, its JSON Lines log in ``log``, continues one (checked before the
    model loads): an existing output is never overwritten, and only a run whose log holds lines is continued.

    Args:
        source: the input (``"-"``: standard input).
        asked: the output asked for (``out.npy`` or ``out.parquet``, or the log itself).
        log: its JSON Lines log (:func:`~bertfn.corpus.formats.output_files`).
        resume: continue the run that wrote ``log``.

    Returns:
        True when ``log`` holds lines (and ``resume`` was asked).

    Raises:
        InputError: ``log`` is the input; ``log`` holds lines and ``resume`` is False; ``asked`` is not the log and
            is there, but the log is not (no run to continue).
    """
    of = f" (the run log of {asked})" if asked != log else ""
    if str(source) != "-" and log.exists() and log.samefile(source):
        raise InputError(f"the output {log}{of} is the input file {source}; name another output")
    written = log.exists() and log.stat().st_size > 0
    if asked != log and asked.exists() and asked.stat().st_size > 0 and not written:
        raise InputError(f"{asked} already exists, and its run log {log} does not (or is empty): it is not the output "
                         f"of a run to continue; delete {asked} to start again, or name another output")
    if written and not resume:
        beside = dict.fromkeys(p for p in (asked, compact_path(log, "npy"), compact_path(log, "parquet"))
                               if p != log and p.exists())  # what the run that wrote the log wrote beside it
        also = "".join(f" and {p}" for p in beside)
        raise InputError(f"{log}{of} already exists; pass {syntax(python='resume=True', cli='--resume')} to "
                         f"continue the run that wrote it, or delete it{also} to start again, or name another output")
    return written


def _retry(runner: Runner, source, target: Path, done: int, errors: set[int], tally: Tally, inputs: Inputs,
           echo: bool, drop: frozenset, chunk_size: int, flush_every: float) -> tuple[int, InputPrint]:
    """Run input lines ``errors`` (of the first ``done``) again and write the output anew, the other lines
    kept as they are; the new file replaces ``target`` when it is complete (a kill meanwhile leaves the
    old one). Returns how many lines were retried and the fingerprint of the inputs of the result lines."""
    fresh = target.with_name(target.name + ".retry")
    printed = InputPrint()
    with open(target, "rb") as old:
        written = (line.rstrip(b"\n") for line in old)
        lines = itertools.islice(enumerate(inputs.read(source), 1), done)
        entries = ((n, raw, None if n in errors else kept) for (n, raw), kept in zip(lines, written))
        with open(fresh, "wb") as out:
            run_entries(runner, entries, Output(out, target, None, 0, printed, flush_every), tally, inputs, echo, drop,
                        chunk_size)
    os.replace(fresh, target)
    return len(errors), printed
