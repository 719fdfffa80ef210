"""What a file run writes as it goes: its JSON Lines (:class:`Output`) and, beside them, ``.npy`` and ``.parquet``.

:func:`~bertfn.corpus.files.run_file` always writes ``out.jsonl``, the run's log (it is what ``--resume``
checks and continues). With ``formats=("npy",)`` / ``--format npy`` it also writes, line by line
(an output named ``out.npy`` or ``out.parquet`` asks for that format, the log going to ``out.jsonl``:
:func:`output_files`):

* ``out.npy`` (:class:`NpyOutput`): an (N, H) float32 array, row n-1 for input line n, NaN where a
  line holds an error. Its rows are appended as the run goes and its header (the shape) is rewritten at
  every flush, so a killed run leaves a file ``np.load`` reads, holding the rows of the last flush.
* ``out.parquet`` (:class:`ParquetOutput`): a row per line; columns ``line`` (int64), the input's fields
  (text; a non-string value as its JSON), ``result`` (embed: a float32 list; other tasks: the result as
  JSON text, as :class:`~bertfn.corpus.runner.Mapper` gives it), ``error``, ``warning``. While the run goes
  it writes ``out.parquet.parts/``, a part file at least every :data:`PART_SECONDS` (``pd.read_parquet``
  reads the folder: a killed run's rows so far, in columns the first part has); when it ends, the parts
  become the one file ``out.parquet``.

A resume (:func:`open_compact`) cuts each of them back to the lines the JSON Lines hold, and fills in
from the JSON Lines the lines they lack (they are flushed before it, but a part is written only every
minute): the result equals an uninterrupted run's, nothing lost or doubled.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
from collections.abc import Iterable
from pathlib import Path

import numpy

from ..errors import DependencyError, InputError, require_folder, syntax
from .record import OWN_KEYS, InputPrint, write_record

FORMATS = ("jsonl", "npy", "parquet")
NOT_WRITTEN = {"csv": "CSV", "tsv": "a tab-separated table", "json": "one JSON document", "xlsx": "an Excel workbook",
               "npz": "a NumPy archive", "pt": "a torch file", "pkl": "a pickle", "feather": "Feather",
               "arrow": "Arrow IPC"}
"""Output suffixes that name a format bertfn does not write (a run writes :data:`FORMATS`): refused, where JSON Lines
under that name would pass for it."""
PART_SECONDS = 60.0
"""A Parquet part is written at the first flush this many seconds after the last one (and at the end)."""
PART_ROWS = 16384
"""... or as soon as this many rows wait for it (they are held in memory until then)."""


def compact_path(target: Path, fmt: str) -> Path:
    """Where format ``fmt`` of the run writing ``target`` lies: ``out.jsonl`` -> ``out.npy`` / ``out.parquet``.

    Args:
        target: the run's JSON Lines output.
        fmt: ``"npy"`` or ``"parquet"``.
    """
    return target.with_suffix("." + fmt)


def output_files(target: Path, formats: Iterable[str], vectors: bool) -> tuple[Path, tuple[str, ...]]:
    """Where the run asked to write ``target`` writes its JSON Lines log, and in which formats beside it.

    ``out.npy`` or ``out.parquet`` names that format: it is written there, and the log beside it as ``out.jsonl``
    (with its record ``out.jsonl.run.json``), so that resume and retry_errors go as for ``out.jsonl``. Any other
    name is the log itself.

    Args:
        target: the output asked for.
        formats: the formats asked for besides.
        vectors: the task's results are vectors (embed); ``out.npy`` needs them.

    Returns:
        The log's path, and the formats: ``target``'s own first, then ``formats``, each once.

    Raises:
        InputError: ``out.npy`` for a task whose results are not vectors; a name whose suffix says a format bertfn
            does not write (``out.csv``: :data:`NOT_WRITTEN`), or one it writes in capitals (``out.NPY``); a folder,
            or a file in a folder that does not exist.
    """
    output = syntax(python="target", cli="--output")
    fmt = target.suffix[1:]
    if fmt.lower() in NOT_WRITTEN:
        npy = f"{target.with_suffix('.npy')} (an array of the vectors), " if vectors else ""
        raise InputError(f"{output} {target} names {NOT_WRITTEN[fmt.lower()]}, which bertfn does not write; name "
                         f"{npy}{target.with_suffix('.parquet')} (a table pandas reads, a row per line) or "
                         f"{target.with_suffix('.jsonl')} (JSON Lines, a line per line)")
    if fmt != fmt.lower() and fmt.lower() in FORMATS and fmt.lower() != "jsonl":  # else JSON Lines in out.NPY
        raise InputError(f"{output} {target}: name it {target.with_suffix('.' + fmt.lower())}, the ending in lowercase, "
                         f"for the {fmt.lower()} format")
    if target.is_dir():
        raise InputError(f"{output} {target} is a folder; name a file in it ({target / 'results.jsonl'})")
    require_folder(target, output)
    if fmt not in FORMATS or fmt == "jsonl":
        return target, tuple(formats)
    if fmt == "npy" and not vectors:
        parquet = syntax(python="formats=('parquet',)", cli="--format parquet")
        raise InputError(f"{output} {target} asks for an .npy array of one vector per line, which only embed gives; "
                         f"for these results name a Parquet output ({output} {target.with_suffix('.parquet')}) or "
                         f"JSON Lines ({output} {target.with_suffix('.jsonl')}, with {parquet} for Parquet beside it)")
    return target.with_suffix(".jsonl"), tuple(dict.fromkeys((fmt, *formats)))


class NpyOutput:
    """``out.npy`` written row by row.

    A version 1.0 header of fixed length (:data:`HEADER` bytes) whose shape is rewritten at each flush,
    then float32 rows. ``rows``: the rows it holds (written or buffered).

    Args:
        target: the run's JSON Lines output.
        done: the lines the JSON Lines hold: keep at most that many of its rows.
    """

    HEADER = 128

    def __init__(self, target: Path, done: int) -> None:
        """Open it for a run whose JSON Lines hold ``done`` lines: keep at most that many of its rows.

        Args:
            target: the run's JSON Lines output.
            done: the lines they hold.
        """
        self.path, self.rows, self.dim, self.file = compact_path(target, "npy"), 0, None, None
        if done and self.path.is_file() and self.path.stat().st_size >= self.HEADER:
            with open(self.path, "rb") as f:
                numpy.lib.format.read_magic(f)
                shape, _, _ = numpy.lib.format.read_array_header_1_0(f)
            if len(shape) == 2 and shape[1] > 0:
                self.dim = shape[1]
                on_disk = (self.path.stat().st_size - self.HEADER) // (4 * self.dim)
                self.rows = min(shape[0], on_disk, done)
                self.file = open(self.path, "r+b")
                self.file.truncate(self.HEADER + 4 * self.dim * self.rows)
                self.file.seek(0, os.SEEK_END)
            elif len(shape) == 2:  # (n, 0): only error lines so far
                self.rows = min(shape[0], done)
        if self.file is None and self.path.exists():
            self.path.unlink()  # another run's, or one of nothing yet
        self.pending = 0 if self.file is not None else self.rows  # rows before the vectors' length is known

    def _header(self) -> bytes:
        text = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({self.rows}, {self.dim or 0}), }}"
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", self.HEADER - 10) + text.ljust(self.HEADER - 11).encode() + b"\n"

    def add(self, records: Iterable[dict]) -> None:
        for r in records:
            v = r.get("result")
            if v is not None and self.file is None:  # the first vector: its length is the array's width
                self.dim, self.file = len(v), open(self.path, "w+b")
                self.file.write(self._header())
                self.file.write(numpy.full((self.pending, self.dim), numpy.nan, numpy.float32).tobytes())
            if v is not None and len(v) != self.dim:
                raise InputError(f"line {r['line']} holds a vector of {len(v)} numbers, the lines before {self.dim}; "
                                 "--format npy needs vectors of one length")
            if self.file is None:
                self.pending += 1
            else:
                self.file.write((numpy.full(self.dim, numpy.nan, numpy.float32) if v is None
                                 else numpy.asarray(v, dtype=numpy.float32)).tobytes())
            self.rows += 1

    def flush(self, final: bool = False) -> None:
        if self.file is None:
            if final:  # no vector at all: an (N, 0) array
                self.path.write_bytes(self._header())
            return
        self.file.flush()  # the rows first, then the header that counts them
        self.file.seek(0)
        self.file.write(self._header())
        self.file.seek(0, os.SEEK_END)
        self.file.flush()

    def close(self) -> None:
        self.flush(final=True)
        if self.file is not None:
            self.file.close()


class ParquetOutput:
    """``out.parquet``: parts in ``out.parquet.parts/`` (``part-{first line:09d}.parquet``) while the run goes.

    Joined into one file when it ends.

    Args:
        target: the run's JSON Lines output.
        done: the lines the JSON Lines hold: keep at most that many rows.
        vectors: results are float32 vectors (embed), else JSON text.

    Raises:
        DependencyError: pyarrow is missing.
    """

    def __init__(self, target: Path, done: int, vectors: bool) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise DependencyError("--format parquet needs pyarrow: pip install pyarrow (or bertfn[test]); "
                                  "JSON Lines is written either way") from None
        self.pa, self.pq, self.vectors = pa, pq, vectors
        self.path = compact_path(target, "parquet")
        self.parts = self.path.with_name(self.path.name + ".parts")
        if self.path.exists() and (self.parts.exists() or not done):
            self.path.unlink()  # a join that did not finish (its parts are whole), or another run's
        if not done and self.parts.exists():
            shutil.rmtree(self.parts)
        self.parts.mkdir(exist_ok=True)
        if self.path.exists():  # a finished run's file, continued: it is the first part
            os.replace(self.path, self.parts / "part-000000001.parquet")
        self.rows = 0
        for part in sorted(self.parts.iterdir()):
            first = int(part.stem.split("-")[1]) if part.name.startswith("part-") and part.suffix == ".parquet" else 0
            if first < 1 or first > done or first != self.rows + 1:
                part.unlink()  # a part past the JSON Lines' end, or a temporary file
                continue
            rows = pq.ParquetFile(part).metadata.num_rows
            if first + rows - 1 > done:
                self._write(pq.read_table(part).slice(0, done - first + 1), part)
                rows = done - first + 1
            self.rows += rows
        self.buffer: list[dict] = []
        self.written_at = time.monotonic()

    def _write(self, table, path: Path) -> None:
        tmp = path.with_name("." + path.name + ".tmp")  # pyarrow skips names starting with "."
        self.pq.write_table(table, tmp)
        os.replace(tmp, path)

    def _row(self, r: dict) -> dict:
        row = {"line": r["line"]}
        row.update({k: v if isinstance(v, str) or v is None else json.dumps(v, ensure_ascii=False)
                    for k, v in r.items() if k not in OWN_KEYS})
        v = r.get("result")
        row["result"] = v if self.vectors or v is None else json.dumps(v, ensure_ascii=False)
        row["error"], row["warning"] = r.get("error"), r.get("warning")
        return row

    def _type(self, name: str):
        pa = self.pa
        return pa.int64() if name == "line" else pa.list_(pa.float32()) if name == "result" and self.vectors \
            else pa.string()

    def add(self, records: Iterable[dict]) -> None:
        for r in records:
            self.buffer.append(self._row(r))
            self.rows += 1
            if len(self.buffer) >= PART_ROWS:
                self.flush()

    def flush(self, final: bool = False) -> None:
        due = final or len(self.buffer) >= PART_ROWS or time.monotonic() - self.written_at >= PART_SECONDS
        if self.buffer and due:
            names = list(dict.fromkeys(k for row in self.buffer for k in row))
            schema = self.pa.schema([(k, self._type(k)) for k in names])
            table = self.pa.Table.from_pylist(self.buffer, schema=schema)
            self._write(table, self.parts / f"part-{self.buffer[0]['line']:09d}.parquet")
            self.buffer, self.written_at = [], time.monotonic()

    def close(self) -> None:
        """Write the last part, then join the parts into ``out.parquet`` (their columns' union, in order)."""
        self.flush(final=True)
        parts = sorted(self.parts.glob("part-*.parquet"))
        names = list(dict.fromkeys(["line"] + [k for p in parts for k in self.pq.read_schema(p).names]))
        names = [k for k in names if k not in OWN_KEYS[1:]] + [k for k in OWN_KEYS[1:] if k in names]
        schema = self.pa.schema([(k, self._type(k)) for k in names])
        tmp = self.path.with_name("." + self.path.name + ".tmp")
        with self.pq.ParquetWriter(tmp, schema) as out:
            for p in parts:
                t = self.pq.read_table(p)
                out.write_table(self.pa.table({k: t.column(k) if k in t.column_names else
                                               self.pa.nulls(len(t), self._type(k)) for k in names}, schema=schema))
        os.replace(tmp, self.path)
        shutil.rmtree(self.parts)


class Output:
    """The output file as a run writes it.

    Lines appended, flushed at least every ``flush_every`` seconds (and when asked), then the run's record
    beside it.

    Args:
        out (BinaryIO): the open output (a binary file).
        target: its path (None for standard output).
        record: the run's record; None writes none.
        lines: lines already in it.
        printed: the fingerprint of the inputs of the result lines.
        flush_every: seconds between flushes at most.
        compact: the run's :mod:`~bertfn.corpus.formats` outputs, given the same lines, flushed just before
            the file.
    """

    def __init__(self, out, target: Path | None, record: dict | None, lines: int, printed: InputPrint,
                 flush_every: float, compact: list = ()) -> None:
        self.out, self.target, self.record, self.compact = out, target, record, compact
        self.lines, self.printed, self.flush_every = lines, printed, flush_every
        self.flushed_at = time.monotonic()

    def write(self, lines: list[str], force: bool = False) -> None:
        if lines:
            self.out.write(("\n".join(lines) + "\n").encode("utf-8"))
            self.lines += len(lines)
            records = [json.loads(line) for line in lines] if self.compact else []
            for o in self.compact:
                o.add(records)
        if force or time.monotonic() - self.flushed_at >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        for o in self.compact:
            o.flush()
        self.out.flush()
        if self.record is not None:
            write_record(self.target, self.record, self.lines, self.printed)
        self.flushed_at = time.monotonic()


def check_formats(formats: Iterable[str], vectors: bool, streamed: bool) -> None:
    """Check that every one of ``formats`` is known and can be written.

    Args:
        formats: format names.
        vectors: the task gives vectors, as embed does (``"npy"`` needs them).
        streamed: the output is standard output, a pipe or a device (only ``"jsonl"`` then: the others go beside an
            output file).

    Raises:
        InputError: an unknown format, or one that cannot be written here.
    """
    formats = tuple(formats)
    if any(f not in FORMATS for f in formats) or (streamed and any(f != "jsonl" for f in formats)):
        raise InputError(f"formats are {', '.join(map(repr, FORMATS))}, written beside an --output file; got "
                         f"{', '.join(map(repr, formats))}{' with standard output or a pipe' if streamed else ''}")
    if "npy" in formats and not vectors:
        raise InputError("--format npy holds one vector per line (bertfn embed); use --format parquet for "
                         "other results")


def open_compact(target: Path, formats: Iterable[str], vectors: bool, done: int,
                 written: Iterable[bytes], rebuild: bool = False) -> list:
    """The compact outputs of a run whose JSON Lines ``target`` hold ``done`` lines.

    Each is cut back to at most those lines and filled in with the ones it lacks from ``written``.

    Args:
        target: the run's JSON Lines output.
        formats: format names.
        vectors: the task's results are vectors (embed); ``"npy"`` needs them.
        done: the lines the JSON Lines hold; 0 starts them anew.
        written: the JSON Lines' lines, read lazily.
        rebuild: write them anew from ``written`` (after ``--retry-errors`` changed lines in place).
    """
    check_formats(formats, vectors, False)
    formats = [f for f in dict.fromkeys(formats) if f != "jsonl"]
    keep = 0 if rebuild else done
    outputs = [NpyOutput(target, keep) if f == "npy" else ParquetOutput(target, keep, vectors) for f in formats]
    start = min((o.rows for o in outputs), default=done)
    if start < done:
        for n, raw in enumerate(written, 1):
            if n > done:
                break
            if n > start:
                record = json.loads(raw)
                for o in outputs:
                    if o.rows < n:
                        o.add([record])
        for o in outputs:
            o.flush()
    return outputs
