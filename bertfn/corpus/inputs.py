"""What a file run reads: its lines, and in each line the task's input (a text, or the fields of a JSON object).

Most tasks read one text a line: the line itself, or with ``field`` the field of that name of a JSON object
(JSON Lines). A task that takes several inputs (a reader's question and context, a reranker's query and
passages) reads them from the fields of a JSON object, each named as the input is unless ``field`` maps the
input to another field (``{"context": "passage"}``, ``--field context=passage``), and hands the task one dict
per line, ``{"question": ..., "context": ...}``, as transformers' pipelines take them.

A file named ``.csv`` or ``.tsv`` is a table (:data:`TABLES`): its header names the columns, and each row reaches the
run as the JSON object of its cells (``{"id": "2", "text": "..."}``), read then as a JSON Lines line is (the inputs
from the columns named as they are unless ``field`` says otherwise; the other columns carried), so that resume and its
fingerprints see one line per row. A table bertfn cannot read as one (a row of another number of cells than the
header, bytes that are not UTF-8, a quote never closed, no column for an input) is refused as a whole, naming the
file's line, before anything runs.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, syntax
from .record import OWN_KEYS

TABLES = {".csv": ",", ".tsv": "\t"}
"""The inputs read as tables (:mod:`csv`'s default dialect, ``strict``), by the ending of the file's name: its
delimiter."""

COMPRESSED = {b"\x1f\x8b": ("gzip", "zcat"), b"BZh": ("bzip2", "bzcat"), b"\xfd7zXZ\x00": ("xz", "xzcat"),
              b"\x28\xb5\x2f\xfd": ("zstd", "zstdcat")}
"""The compressed files an input may be, by the bytes they start with: the compression's name, the tool that
decompresses it to stdout."""


def is_stream(path: str | Path) -> bool:
    """Whether ``path`` is read or written once, as it goes, not a file a run can look at again (resume, a record
    beside it): ``-`` (standard input or output), a pipe or a device (``<(zcat chains.gz)`` and ``>(gzip > out.gz)``,
    which the shell names ``/dev/fd/63``; ``/dev/stdout``, ``/dev/null``).

    Args:
        path: an input or an output, as named.
    """
    if str(path) == "-":
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # not there (an output to create), or no path at all
        return False
    return not stat.S_ISDIR(mode) and (not stat.S_ISREG(mode) or Path(path).absolute().parts[1:2] in (("dev",),
                                                                                                       ("proc",)))


def read_lines(source: str | Path) -> Iterator[bytes]:
    """The lines of a file (``-``: standard input) as bytes, without their line ending, lazily."""
    f = sys.stdin.buffer if str(source) == "-" else open(source, "rb")
    try:
        for raw in f:
            yield raw.rstrip(b"\n").removesuffix(b"\r")
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def _decoded(lines: Iterable[bytes], source: str | Path) -> Iterator[str]:
    """The lines of a table file as text, from UTF-8 (a byte-order mark at its start dropped), their ends kept as
    :mod:`csv` reads them.

    Args:
        lines: the file's lines, as bytes.
        source: the file, for the message.

    Raises:
        InputError: a line that is not UTF-8, naming it.
    """
    for n, raw in enumerate(lines, 1):
        try:
            yield raw.decode("utf-8-sig" if n == 1 else "utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"line {n} of {source} is not valid UTF-8 (byte {e.start}); nothing was run: convert the "
                             "file to UTF-8") from None


def looks_like_json_lines(first: bytes | None, source: str | Path) -> bool:
    """Whether an input read as lines of text is JSON Lines instead: a file named so (``.jsonl``, ``.ndjson``), or
    standard input or a pipe, which have no name to go by, whose first line is a JSON object (``cat x.jsonl |
    bertfn embed --input -`` would otherwise run each line's JSON source as its text).

    Args:
        first: the input's first line (None: it is empty).
        source: the input, as named (``-``: standard input).
    """
    if not is_stream(source):
        return str(source).lower().endswith((".jsonl", ".ndjson"))
    try:
        return first is not None and first.lstrip().startswith(b"{") and isinstance(json.loads(first), dict)
    except ValueError:  # not JSON (a text that starts with a brace), or not UTF-8
        return False


def label(n: int, carried: dict) -> str:
    """How messages name input line ``n``: ``line 7``, or ``line 7 (id 'P01')`` when the line has an id."""
    return f"line {n}" + (f" (id {carried['id']!r})" if "id" in carried else "")


def field_mapping(values: list[str] | None) -> str | dict[str, str] | None:
    """The ``field`` of a command line's ``--field`` values: one ``NAME`` (the text's field), or ``INPUT=NAME`` pairs
    (a task of several inputs: ``--field context=passage``).

    Args:
        values: the values given, or None.

    Raises:
        InputError: a mix of the two forms, or several bare names.
    """
    if not values:
        return None
    pairs = [v.partition("=") for v in values]
    if all(sep for _, sep, _ in pairs):
        return {k: v for k, _, v in pairs}
    if len(values) == 1:
        return values[0]
    raise InputError(f"--field takes one NAME (the field that holds the text) or INPUT=NAME pairs, got {' '.join(values)}")


@dataclass(frozen=True)
class Inputs:
    """How a run reads a task's input from each line.

    Attributes:
        names: the task's inputs: ``("text",)``, or several (``("question", "context")``).
        optional: those of ``names`` a line may leave out (a classifier's ``text_pair``).
        fields: input -> the JSON field (a table's column) that holds it; None: plain text lines, one text each.
        table: the delimiter of a table (:data:`TABLES`), whose rows are read as JSON objects; None: lines.
    """

    names: tuple[str, ...]
    optional: tuple[str, ...] = ()
    fields: dict[str, str] | None = None
    table: str | None = None

    @classmethod
    def of(cls, names: tuple[str, ...], optional: tuple[str, ...], field: str | Mapping[str, str] | None,
           source: str | Path) -> Inputs:
        """The reader of a task whose inputs are ``names`` given ``field``, from ``source`` (see the module docstring).

        Args:
            names: the task's inputs.
            optional: those a line may leave out.
            field: None (plain text lines when every input but the first is optional, as a classifier's
                ``text_pair``; else, and always for a table, the fields named as the inputs), the text's field, or
                ``{input: field}``.
            source: the input: a name ending as one of :data:`TABLES` is a table; ``"-"`` (standard input) never is.

        Raises:
            InputError: a field that names no input of the task.
        """
        table = None if str(source) == "-" else TABLES.get(Path(source).suffix.lower())
        if field is None and table is None:
            return cls(names, optional, None if set(names[1:]) <= set(optional) else {n: n for n in names})
        if isinstance(field, str):
            return cls(names, optional, {names[0]: field, **{n: n for n in names[1:]}}, table)
        field = field or {}
        unknown = [k for k in field if k not in names]
        if unknown:
            raise InputError(f"{syntax(python='field=', cli='--field ')}names {', '.join(map(repr, unknown))}, which is no "
                             f"input of this task; its inputs are {', '.join(map(repr, names))}")
        return cls(names, optional, {n: field.get(n, n) for n in names}, table)

    @property
    def record(self) -> str | dict[str, str] | None:
        """What the run record keeps of how the input is read (``field``)."""
        if self.fields is None or self.names == ("text",) and len(self.fields) == 1:
            return None if self.fields is None else self.fields["text"]
        return self.fields

    @property
    def echoed(self) -> tuple[str, ...]:
        """The keys of an output line that echo the input, which ``echo=False`` leaves out."""
        return ("text",) if self.fields is None else tuple(self.fields.values())

    def read(self, source: str | Path) -> Iterator[bytes]:
        """The input's lines as :meth:`parse` takes them, lazily: a file's (:func:`read_lines`), or a table's rows, each
        as the JSON object of its cells (:meth:`rows`).

        Args:
            source: the input file (``-``: standard input).

        Raises:
            InputError: (a table) what :meth:`rows` refuses, when the reading comes to it.
        """
        return read_lines(source) if self.table is None else self.rows(source)

    def rows(self, source: str | Path) -> Iterator[bytes]:
        """The rows of the table ``source`` after its header, each as the UTF-8 bytes of the JSON object
        ``{column: cell}``, lazily; a blank line is no row (as :class:`csv.DictReader` reads it).

        Args:
            source: a table file (:data:`TABLES`).

        Raises:
            InputError: naming the file and its line, when the reading comes to it: no header, a header without a
                column for an input (one left out only if optional and not renamed by ``field``), a column named
                twice or as one of the output's own keys, a row of another number of cells than the header, bytes
                that are not UTF-8, quoting :mod:`csv` refuses.
        """
        kind = Path(source).suffix.lower()
        with open(source, "rb") as f:
            reader = csv.reader(_decoded(f, source), delimiter=self.table, strict=True)
            start = 1  # the line where the row read now starts
            try:
                header = next(reader, None)
                self._check_header(header, source, kind)
                row, start = 0, reader.line_num + 1
                for cells in reader:
                    if cells:
                        row += 1
                        if len(cells) != len(header):
                            held = 'a comma ("a, b")' if self.table == "," else 'a tab ("a<tab>b")'
                            raise InputError(
                                f"line {start} of {source} (row {row}) has {len(cells)} cell"
                                f"{'s' if len(cells) > 1 else ''}, and its header names "
                                f"{len(header)} columns ({', '.join(map(repr, header))}); nothing was run: give every "
                                f"row one cell per column, and quote a cell that holds {held}")
                        yield json.dumps(dict(zip(header, cells)), ensure_ascii=False).encode()
                    start = reader.line_num + 1
            except csv.Error as e:
                raise InputError(f"line {start} of {source} is not {kind} as Python's csv module reads it "
                                 f"({e}); nothing was run: fix the quoting there (a quoted cell ends with a quote)"
                                 ) from None

    def _check_header(self, header: list[str] | None, source: str | Path, kind: str) -> None:
        """Check a table's header: it names each column once, none as one of the output's own keys, and a column
        for each input (an optional input's may be missing unless ``field`` renamed it).

        Args:
            header: the cells of the table's first line, or None for an empty file.
            source: the table file, for the messages.
            kind: its ending (``".csv"``), for the messages.

        Raises:
            InputError: the first thing wrong.
        """
        first = f"line 1 of {source} (its header)"
        if header is None:
            raise InputError(f"{source} is empty; a {kind} input starts with a header line naming its columns "
                             f"({self.table.join(['id', *self.fields.values()])!r}), then one row a line")
        twice = next((c for i, c in enumerate(header) if c in header[:i]), None)
        if twice is not None:
            raise InputError(f"{first} names the column {twice!r} twice; name each column once")
        clash = [k for k in OWN_KEYS if k in header]
        if clash:
            raise InputError(f"{first} names a column {clash[0]!r}, which the output uses for its own; rename that "
                             "column in the input")
        missing = [(n, k) for n, k in self.fields.items() if k not in header and (n not in self.optional or k != n)]
        if missing:
            name, key = missing[0]
            how = "name the column " + (
                f"that holds the text with {syntax(python='field=NAME', cli='--field NAME')}" if name == self.names[0]
                else f"of each input with {syntax(python='field={INPUT: NAME}', cli='--field INPUT=NAME')}")
            raise InputError(f"{source} has no column {key!r} for the input {name!r}: its header (line 1) names "
                             f"{', '.join(map(repr, header))}; nothing was run: {how}, or, if the file has no header, "
                             "write one as its first line")

    def parse(self, n: int, raw: bytes) -> tuple[object, dict, str | None]:
        """Input line ``n`` -> (the task's input, the fields the output carries, or the error that makes it a bad line).

        Args:
            n: the line's number, from 1.
            raw: the line's bytes.

        Returns:
            ``(input, carried fields, error message or None)``: the input is the text for a task of one input, a dict
            ``{input: value}`` for one of several.
        """
        try:
            line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
        except UnicodeDecodeError as e:
            return None, {}, f"line {n} is not valid UTF-8 (byte {e.start}); convert the file to UTF-8"
        if self.fields is None:
            return line, {"text": line}, None
        first = next(iter(self.fields.values()))
        if not line.strip():
            return None, {}, f"line {n} is empty; write one JSON object per line"
        try:
            record = json.loads(line)
        except ValueError as e:
            return None, {}, f"line {n} is not valid JSON ({e}); write one JSON object per line"
        if not isinstance(record, dict):
            return None, {}, f"line {n} is a JSON {type(record).__name__}, not an object; write {{{json.dumps(first)}: \"...\"}}"
        clash = [k for k in OWN_KEYS if k in record]
        if clash:
            return None, {}, (f"line {n} has a field named {clash[0]!r}, which the output uses for its own; "
                              "rename that field in the input")
        item = {}
        for name, key in self.fields.items():
            if key not in record or self.table is not None and name in self.optional and record[key] == "":
                if name in self.optional:  # left out, or a table's empty cell: none (a text without its pair)
                    continue
                return None, record, f"line {n} has no field {key!r} (it has {', '.join(map(repr, record)) or 'none'})"
            value = record[key]
            if not (isinstance(value, str) or isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
                return None, record, (f"line {n}: field {key!r} is a JSON {type(value).__name__}, not a string"
                                      f"{' (or a list of strings)' if len(self.names) > 1 else ''}")
            item[name] = value
        if self.names == ("text",):
            return item["text"], record, None
        return item, record, None

    def probe(self, first: bytes | None, source: str | Path) -> int | None:
        """Check the input before any model loads: with fields, its first line must be a JSON object holding them (a
        typo in ``--field`` stops the run here, not after a file of error lines); a table is read whole once (a bad
        row stops the run here, not half way).

        Args:
            first: the first line's bytes, or None for an empty input.
            source: the input, for the message; a table is read again from it.

        Returns:
            A table's number of rows (its lines less the header, and less those a quoted cell runs on), the progress
            bar's total; None for lines.

        Raises:
            InputError: the input is compressed (gzip, bzip2, xz, zstd), its first line holds a NUL byte (no text
                does) or lacks a field, it is JSON Lines read without a field (:func:`looks_like_json_lines`); what
                :meth:`rows` refuses in a table.
        """
        if self.table is not None:
            return sum(1 for _ in self.rows(source))
        packed = next((how for magic, how in COMPRESSED.items() if first and first.startswith(magic)), None)
        if packed:
            how = f"... | {packed[1]} | bertfn ... --input -" if str(source) == "-" else \
                f"--input <({packed[1]} {shlex.quote(str(source))}) or {packed[1]} {shlex.quote(str(source))} | bertfn ... " \
                "--input -"
            raise InputError(f"{'standard input' if str(source) == '-' else source} is {packed[0]}-compressed; nothing "
                             f"was run: decompress it as it is read, with {how}")
        nul = -1 if first is None else first.find(0)  # no text holds a NUL byte: a binary file, or UTF-16 / UTF-32
        if nul >= 0:
            raise InputError(f"{'standard input' if str(source) == '-' else source} is not text: its first line holds "
                             f"a NUL byte (at byte {nul}), as a binary file or a UTF-16 one does; nothing "
                             "was run: pass a text, JSON Lines, .csv or .tsv file in UTF-8")
        if self.fields is None and looks_like_json_lines(first, source):
            also = ""
            if self.optional:  # classify's text_pair: the form that names every field
                python = "field={" + ", ".join(f"{n!r}: NAME" for n in self.names) + "}"
                cli = "--field " + " ".join(f"{n}=NAME" for n in self.names)
                also = f", or with {', '.join(self.optional)} too, {syntax(python=python, cli=cli)}"
            named = "standard input" if str(source) == "-" else source
            how = " (its first line is a JSON object); nothing was run:" if is_stream(source) else ";"
            raise InputError(f"{named} looks like JSON Lines{how} name the field that holds the text with "
                             f"{syntax(python='field=NAME', cli='--field NAME')}{also}")
        if self.fields is None or first is None:
            return None
        _, record, bad = self.parse(1, first)
        if bad is None or record and all(k in record for n, k in self.fields.items() if n not in self.optional):
            return None
        if self.names == ("text",):
            raise InputError(f"{syntax(python='field=', cli='--field ')}{self.fields['text']} reads JSON Lines, but {bad}; "
                             f"nothing was run: check {source} and the field's name")
        named = ", ".join(f"{n}={k}" if n != k else k for n, k in self.fields.items())
        raise InputError(f"this task reads JSON Lines with the fields {named}, but {bad}; nothing was run: check "
                         f"{source} and the fields' names ({syntax(python='field={INPUT: NAME}', cli='--field INPUT=NAME')} "
                         "renames one)")
