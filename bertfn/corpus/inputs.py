"""What a file run reads: its lines, and in each line the task's input (a text, or the fields of a JSON object).

Most tasks read one text a line: the line itself, or with ``field`` the field of that name of a JSON object
(JSON Lines). A task that takes several inputs (a reader's question and context, a reranker's query and
passages) reads them from the fields of a JSON object, each named as the input is unless ``field`` maps the
input to another field (``{"context": "passage"}``, ``--field context=passage``), and hands the task one dict
per line, ``{"question": ..., "context": ...}``, as transformers' pipelines take them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, syntax
from .record import OWN_KEYS


def read_lines(source: str | Path) -> Iterator[bytes]:
    """The lines of a file (``-``: standard input) as bytes, without their line ending, lazily."""
    f = sys.stdin.buffer if str(source) == "-" else open(source, "rb")
    try:
        for raw in f:
            yield raw.rstrip(b"\n").removesuffix(b"\r")
    finally:
        if f is not sys.stdin.buffer:
            f.close()


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
        fields: input -> the JSON field that holds it; None: plain text lines, one text each.
    """

    names: tuple[str, ...]
    optional: tuple[str, ...] = ()
    fields: dict[str, str] | None = None

    @classmethod
    def of(cls, names: tuple[str, ...], optional: tuple[str, ...], field: str | Mapping[str, str] | None) -> Inputs:
        """The reader of a task whose inputs are ``names`` given ``field`` (see the module docstring).

        Args:
            names: the task's inputs.
            optional: those a line may leave out.
            field: None (plain text lines when every input but the first is optional, as a classifier's
                ``text_pair``; else the fields named as the inputs), the text's field, or ``{input: field}``.

        Raises:
            InputError: a field that names no input of the task.
        """
        if field is None:
            return cls(names, optional, None if set(names[1:]) <= set(optional) else {n: n for n in names})
        if isinstance(field, str):
            return cls(names, optional, {names[0]: field, **{n: n for n in names[1:]}})
        unknown = [k for k in field if k not in names]
        if unknown:
            raise InputError(f"{syntax(python='field=', cli='--field ')}names {', '.join(map(repr, unknown))}, which is no "
                             f"input of this task; its inputs are {', '.join(map(repr, names))}")
        return cls(names, optional, {n: field.get(n, n) for n in names})

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
            if key not in record:
                if name in self.optional:
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

    def probe(self, first: bytes | None, source: str | Path) -> None:
        """Check the input's first line before any model loads: with fields, a JSON object holding them (a typo in
        ``--field`` stops the run here, not after a file of error lines).

        Args:
            first: the first line's bytes, or None for an empty input.
            source: the input, for the message.

        Raises:
            InputError: the first line lacks a field.
        """
        if self.fields is None or first is None:
            return
        _, record, bad = self.parse(1, first)
        if bad is None or record and all(k in record for n, k in self.fields.items() if n not in self.optional):
            return
        if self.names == ("text",):
            raise InputError(f"{syntax(python='field=', cli='--field ')}{self.fields['text']} reads JSON Lines, but {bad}; "
                             f"nothing was run: check {source} and the field's name")
        named = ", ".join(f"{n}={k}" if n != k else k for n, k in self.fields.items())
        raise InputError(f"this task reads JSON Lines with the fields {named}, but {bad}; nothing was run: check "
                         f"{source} and the fields' names ({syntax(python='field={INPUT: NAME}', cli='--field INPUT=NAME')} "
                         "renames one)")
