"""Corpora: texts that do not fit in a list, run through fill-mask (or any call of texts in, results out).

A *task* is a pipeline call that takes a list of texts and a model and returns one result per
text, in order: :func:`~bertfn.pipelines.fill_mask` and :func:`~bertfn.pooling.embed` are two, each
plugged in by one :func:`register` line (the end of this file). This room runs a task over texts of any number:

    stream(texts, model, top_k=3)              an iterator: texts in, results out, lazily, in order
    run_file("in.txt", "out.jsonl", model)     files in, JSON Lines out, progress, --resume
    FillMask(model)                            a callable class for ray.data.Dataset.map_batches and
                                               datasets.Dataset.map(batched=True): rows in, rows + result out

Texts are read a chunk (:data:`CHUNK` texts) at a time and handed to the task in one call, so the
task's own batching does the work (fill_mask sorts a chunk by length and lays it end to end in
groups); memory holds one chunk, however long the input. A text the task refuses (no [MASK], too
long, not a string) must not cost the others their results: when a chunk raises
:class:`~bertfn.errors.InputError`, it is split in halves and each half run again, down to the
single texts at fault (:meth:`Runner.__call__`). Errors about the model (:class:`MissingPartError`)
or anything unexpected stop the run.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import InputError, MissingPartError, syntax
from .loading import Model, load
from .pipelines import fill_mask
from .pooling import embed
from .scoring import score
from .resolve import DEFAULT_MODEL, get_model, texts_and_model

CHUNK = 256
"""Texts per call of the task: enough for fill_mask's length-sorted groups to fill up (2048 tokens
each), few enough that a chunk's results are a few MB and a killed run loses little."""

OWN_KEYS = ("line", "result", "error")
"""Keys every output line may hold besides the input's own fields (see :func:`run_file`)."""


# --- tasks ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """A pipeline call this room can run: ``function(texts, model, **options)`` -> one result per text.

    probe: a text the function accepts with any model that can run it at all (fill-mask: ``"[MASK]"``).
    Runs that turn refused texts into error lines call the function on it once before the first
    text, so that a bad option or a model without the part it needs stops the run at once instead
    of marking every line as failed.
    """

    name: str
    function: Callable[..., object]
    probe: str


TASKS: dict[str, Task] = {}
"""Task name (the CLI subcommand, e.g. ``"fill-mask"``) -> :class:`Task`; filled by :func:`register`."""


def register(name: str, function: Callable[..., object], probe: str) -> type[Mapper]:
    """Make ``function`` a task named ``name``; returns its callable class for ``map_batches``.

    ``FillMask = register("fill-mask", fill_mask, probe="[MASK]")`` (the end of this file) is all it takes: :func:`stream`,
    :func:`run_file` (``bertfn NAME --input``) and the returned :class:`Mapper` subclass then run it.
    """
    TASKS[name] = Task(name, function, probe)
    class_name = "".join(part.capitalize() for part in name.split("-"))  # "fill-mask" -> "FillMask"
    return type(class_name, (Mapper,), {
        "task": name, "__module__": __name__, "__qualname__": class_name,
        "__doc__": f"The {name!r} task as a callable class for ray.data.Dataset.map_batches: see :class:`Mapper`."})


def task_named(name: str) -> Task:
    if name not in TASKS:
        raise InputError(f"task must be one of {', '.join(map(repr, TASKS))}, got {name!r}")
    return TASKS[name]


def open_model(model: Model | str | Path | None, *, tokenizer: str | Path | None = None, lowercase: bool | None = None,
               device: str | torch.device | None = None, dtype: torch.dtype | str | None = None) -> Model:
    """The model a run uses: :func:`~bertfn.resolve.get_model`, or :func:`~bertfn.loading.load` when a
    tokenizer or a case rule is given (as ``--tokenizer`` / ``--cased`` do in the CLI)."""
    if tokenizer is None and lowercase is None or isinstance(model, Model):
        return get_model(model, device, dtype)
    return load(model or DEFAULT_MODEL, tokenizer=tokenizer, lowercase=lowercase, device=device, dtype=dtype)


def jsonable(result: object) -> object:
    """One result as JSON can hold it: tensors and arrays (embed's vectors) become lists."""
    return result.tolist() if hasattr(result, "tolist") else result


def relabel(error: InputError, label: str) -> InputError:
    """The error of a text run alone ("text 0 has no [MASK] ...") naming the text as ``label`` ("line 7")."""
    return InputError(re.sub(r"\btext 0\b", label, str(error), count=1))


class Runner:
    """A task bound to a loaded model and its options: a list of texts in, one result or one
    :class:`InputError` per text out, in order.

    model: a :class:`Model`, a folder or a hub id (loaded once, here); tokenizer / lowercase / device /
    dtype: as in :func:`open_model`; options: the task's own (fill-mask: ``top_k``, ``targets``,
    ``truncation``, ``batch_size``, ...). probe: check the model and the options once now, on the
    task's :attr:`Task.probe` (raises their error) so that an error later is always a text's.
    """

    def __init__(self, task: str, model: Model | str | Path | None = None, *, tokenizer: str | Path | None = None,
                 lowercase: bool | None = None, device: str | torch.device | None = None,
                 dtype: torch.dtype | str | None = None, probe: bool = True, **options) -> None:
        self.task = task_named(task)
        self.model = open_model(model, tokenizer=tokenizer, lowercase=lowercase, device=device, dtype=dtype)
        self.options = options
        if probe:
            with warnings.catch_warnings():  # the probe's own text may be all [UNK] (e.g. "a" for capitals)
                warnings.simplefilter("ignore")
                self.task.function([self.task.probe], self.model, **options)

    def __call__(self, texts: list) -> list:
        """One result (or the :class:`InputError` that refused it) per text of ``texts``.

        The texts run in one call; when it raises InputError, the halves run again, recursively, so
        that only the texts at fault fail and the rest keep large batches. A refused text's error
        speaks of it as "text 0" (it ran alone): :func:`relabel` names it for the caller. Afterwards
        the memory the call freed goes back to the system (:func:`release_memory`).
        """
        results = self._run(texts)
        release_memory()
        return results

    def _run(self, texts: list) -> list:
        if not texts:
            return []
        try:
            return list(self.task.function(list(texts), self.model, **self.options))
        except MissingPartError:
            raise
        except InputError as e:
            if len(texts) == 1:
                return [e]
        half = len(texts) // 2
        return self._run(texts[:half]) + self._run(texts[half:])

    def tokens(self, texts: list) -> int:
        """How many tokens ``texts`` hold, [CLS] and [SEP] included (for the progress bar's tokens/s)."""
        strings = [t for t in texts if isinstance(t, str)]
        tok = self.model.tokenizer
        if tok is None or not strings:
            return 0
        return sum(sum(e.attention_mask) for e in tok.backend.encode_batch(strings))


_malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None) if sys.platform.startswith("linux") else None


def release_memory() -> None:
    """Hand the C heap's free pages back to the system: glibc's ``malloc_trim(0)``; elsewhere nothing.

    Each chunk's tensors come in sizes of their own (its texts' lengths), and glibc keeps the holes
    they leave in its heap when freed, so without this the resident memory of a long run creeps up
    chunk after chunk: +300 MB in 20 chunks in tests/test_corpus.py's check, +500 MB over the 10,000
    lines of bench/files.py. Trimmed after each chunk, it stays flat, at the same speed within noise.
    """
    if _malloc_trim is not None:
        _malloc_trim(0)


def chunks(items: Iterable, size: int = CHUNK) -> Iterator[list]:
    """``items`` in lists of ``size`` (the last one shorter), read lazily."""
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


# --- Python: an iterator ----------------------------------------------------------------------------


def stream(
    texts: Iterable[str],
    model: Model | str | Path | None = None,
    *,
    task: str = "fill-mask",
    errors: str = "raise",
    chunk_size: int = CHUNK,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    **options,
) -> Iterator:
    """Results of ``task`` for each of ``texts``, lazily and in order: what ``fill_mask(list(texts), model,
    **options)`` returns, one item at a time, without holding the texts or the results in memory.

    texts: any iterable of strings (a list, an open file's lines, a generator, a dataset column);
    it is read :data:`CHUNK` texts ahead. model, device, dtype and ``**options`` are the task's
    (fill-mask: ``top_k``, ``targets``, ``truncation``, ``batch_size``).
    errors: ``"raise"`` raises the :class:`InputError` of the first text the task refuses, naming it
    by its index ("text 1234 has no [MASK] ..."), after yielding every result before it;
    ``"return"`` yields that InputError in the text's place and goes on (the model and options are
    checked once first, so such an error is always the text's own).
    """
    texts, model = texts_and_model(texts, model, "stream")
    if isinstance(texts, str):
        raise InputError("stream takes an iterable of texts, got one string; pass [text], or call fill_mask for one text")
    if errors not in ("raise", "return"):
        raise InputError(f"errors must be 'raise' or 'return', got {errors!r}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InputError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    runner = Runner(task, model, device=device, dtype=dtype, probe=errors == "return", **options)
    return _stream(runner, texts, errors, chunk_size)


def _stream(runner: Runner, texts: Iterable[str], errors: str, chunk_size: int) -> Iterator:
    """The generator behind :func:`stream` (its checks run at the call, not at the first ``next``)."""
    start = 0
    for chunk in chunks(texts, chunk_size):
        for i, r in enumerate(runner(chunk), start):
            if isinstance(r, InputError):
                r = relabel(r, f"text {i}")
                if errors == "raise":
                    raise r
            yield r
        start += len(chunk)


# --- Ray Data and datasets: rows in, the same rows with result columns out ---------------------------


class Mapper:
    """A task as a callable class: a batch of rows in, the same rows with ``result`` and ``error`` out.

    For ``ray.data.Dataset.map_batches`` (each worker builds one instance, so the model loads once
    per worker) and ``datasets.Dataset.map(batched=True)``::

        ds.map_batches(bertfn.corpus.FillMask, fn_constructor_kwargs={"model": "/models/bert", "top_k": 3},
                       batch_size=256, concurrency=4)

    model, tokenizer, lowercase, device, dtype: as in :func:`open_model`; column: the column that
    holds the texts; options: the task's (fill-mask: ``top_k``, ``targets``, ``truncation``, ...).
    A batch is a dict of columns (numpy arrays or lists) or a pandas DataFrame; what comes back is
    of the same kind with two more columns: ``result``, the task's result for the row as JSON text
    (what ``run_file`` writes under "result"; None where the text was refused), and ``error``, the
    refusal's message or None. JSON text because results need not share one Arrow type (fill-mask
    gives a list of answers for a text with one [MASK] and a list of such lists for several), and
    Ray Data and datasets store columns in Arrow: a string column writes to Parquet or JSON as is.
    """

    task: str = ""  # set by register()

    def __init__(self, model: Model | str | Path | None = None, *, column: str = "text", **options) -> None:
        self.runner = Runner(self.task, model, **options)
        self.column = column

    def __call__(self, batch):
        try:
            texts = list(batch[self.column])
        except KeyError:
            raise InputError(f"the batch has no column {self.column!r} (it has {', '.join(map(repr, list(batch)))}); "
                             "pass column= naming the one that holds the texts") from None
        texts = [str(t) if isinstance(t, str) else t for t in texts]  # numpy's str_ -> str
        results = [relabel(r, "the text") if isinstance(r, InputError) else r for r in self.runner(texts)]
        out = batch.copy() if hasattr(batch, "iloc") else dict(batch)  # a pandas DataFrame, or a dict of columns
        out["result"] = [None if isinstance(r, InputError) else json.dumps(jsonable(r), ensure_ascii=False)
                         for r in results]
        out["error"] = [str(r) if isinstance(r, InputError) else None for r in results]
        return out


# --- files: text or JSON Lines in, JSON Lines out -----------------------------------------------------


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


FillMask = register("fill-mask", fill_mask, probe="[MASK]")
Embed = register("embed", embed, probe="a")
Score = register("score", score, probe="a")
