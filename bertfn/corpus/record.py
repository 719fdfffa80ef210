"""What a file run is, written beside its output, and the checks ``--resume`` makes before it continues one.

The first time :func:`~bertfn.corpus.files.run_file` writes ``out.jsonl`` it also writes
``out.jsonl.run.json`` (:func:`record_path`), a small JSON object::

    {"bertfn_run": 1, "task": "fill-mask", "options": {"top_k": 3, ...}, "field": null,
     "model": {"name": "/models/bert", "dtype": "torch.float32", "weights": "blake2b:...", "vocabulary": "blake2b:..."},
     "input": {"lines": 512, "results": "blake2b:..."}}

``input`` is rewritten at every flush: how many lines the output held then, and a fingerprint of
the input lines among them that hold a result (:class:`InputPrint`; lines that hold an error are left
out, so that ``--retry-errors`` may re-read them after they were fixed). The input lines are those
:meth:`~bertfn.corpus.inputs.Inputs.read` gives: a table's (``.csv``, ``.tsv``) are its rows, each the JSON
object of its cells, so a cell over several lines of the file is one line here, and any cell changed is seen. :func:`check_record` refuses
a resume whose task, options, field or model differ from the record, naming the difference;
:func:`scan_output` checks every line already written against its input line.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
from collections.abc import Iterator
from pathlib import Path

import torch

from ..checkpoint.model import Model
from ..errors import InputError, syntax
from .runner import task_named

VERSION = 1
OWN_KEYS = ("line", "result", "error", "warning")
"""Keys every output line may hold besides the input's own fields (see :func:`~bertfn.corpus.files.run_file`)."""

FLAGS = {("zero-shot", "candidate_labels"): "--labels", ("zero-shot", "hypothesis_template"): "--template",
         ("classify", "function_to_apply"): "--function", ("tag", "aggregation_strategy"): "--aggregation",
         ("answer", "align_to_words"): "--no-align-to-words (align_to_words)",
         ("score-mutations", "method"): "--pll-change / --wt-marginal (method)"}
"""(task, option) -> how the command line spells it, where that is not the option's name with dashes (``top_k``:
``--top-k``), for the messages of a resume that changed it."""

NEGATED = {"echo": "--no-echo", "detail": "--no-detail", "align_to_words": "--no-align-to-words"}
"""The options the command line turns off with a flag (``echo=False`` is ``--no-echo``), for the messages of a resume
that changed one."""


def record_path(target: Path) -> Path:
    """Where the record of the run writing ``target`` lies: ``target`` + ``.run.json``.

    Args:
        target: the run's output file.
    """
    return target.with_name(target.name + ".run.json")


def _digest() -> hashlib.blake2b:
    return hashlib.blake2b(digest_size=16)


def weights_print(model: Model) -> str:
    """A fingerprint of the model's weights: every tensor's name, shape, dtype and bytes (tied ones once each).

    A weight the fast path holds packed (:func:`~bertfn.fast.choice.pack_state`) counts by its values, as plain.

    Args:
        model: the model.
    """
    h = _digest()
    for key in sorted(model.state):
        t = model.state[key].detach()
        t = t.to_dense() if t.is_mkldnn else t
        h.update(f"{key}{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return "blake2b:" + h.hexdigest()


def vocabulary_print(model: Model) -> str | None:
    """A fingerprint of the tokenizer's vocabulary and case rule (None: the model has no tokenizer).

    Args:
        model: the model.
    """
    tok = model.tokenizer
    if not tok:
        return None
    h = _digest()
    h.update(json.dumps(sorted(tok.backend.get_vocab().items()), ensure_ascii=False).encode())
    h.update(f"lowercase={tok.lowercase}".encode())
    return "blake2b:" + h.hexdigest()


class InputPrint:
    """A running fingerprint of the input lines that hold a result: ``add(n, raw)`` for each, in order."""

    def __init__(self) -> None:
        self.hash = _digest()

    def add(self, n: int, raw: bytes) -> None:
        self.hash.update(f"{n}:{len(raw)}:".encode())
        self.hash.update(raw)

    def value(self) -> str:
        return "blake2b:" + self.hash.hexdigest()


def make_record(task: str, options: dict, field: str | dict | None, model: Model) -> dict:
    """The record of a run (without its ``input`` part, which :func:`write_record` adds).

    Args:
        task: the task's name.
        options: the options that change results.
        field: the JSON field of the input's texts (``{input: field}`` for a task of several inputs), or None.
        model: the model (its name, dtype and fingerprints).
    """
    return {"bertfn_run": VERSION, "task": task, "options": json.loads(json.dumps(options, default=str)),
            "field": field,
            "model": {"name": model.name, "dtype": str(model.dtype), "weights": weights_print(model),
                      "vocabulary": vocabulary_print(model)}}


def write_record(target: Path, record: dict, lines: int, results: InputPrint) -> None:
    """Write ``record`` beside ``target`` with its input part, atomically.

    A kill leaves the old record or the new one, never half of one.

    Args:
        target: the run's output file.
        record: :func:`make_record`'s.
        lines: output lines written.
        results: the fingerprint of the inputs of those holding a result.
    """
    path = record_path(target)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**record, "input": {"lines": lines, "results": results.value()}}, indent=1) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)


def read_record(target: Path) -> dict:
    """The record beside ``target``.

    Args:
        target: the run's output file.

    Raises:
        InputError: the record is missing or not one.
    """
    path = record_path(target)
    again = "pass another --output to start a new run"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{target} has no run record beside it ({path.name}), so nothing says which task, options, "
                         f"model and input wrote it; {syntax(python='resume=True', cli='--resume')} continues only "
                         f"a run that wrote one: {again}") from None
    except (OSError, ValueError) as e:
        raise InputError(f"the run record {path} is unreadable ({e}); {again}") from None
    if not isinstance(record, dict) or record.get("bertfn_run") != VERSION:
        raise InputError(f"{path} is not a run record of this bertfn (bertfn_run {VERSION}); {again}")
    return record


def check_record(old: dict, new: dict, target: Path) -> None:
    """Check the record of the run that wrote ``target`` against the run asked for now.

    Args:
        old: the record read beside ``target``.
        new: the record of this run.
        target: the output file, for the message.

    Raises:
        InputError: naming the first difference (task, options, field, model name, dtype, weights,
            vocabulary).
    """
    def refuse(what: str, before: str, now: str) -> None:
        raise InputError(f"{target} was written with {f'{what} ' if what else ''}{before}, and this run has {now}; "
                         f"{syntax(python='resume=True', cli='--resume')} continues the same run only (its results "
                         "would mix with others): run it as before, or pass another --output")

    def said(value: object, default: object = None) -> str:
        """``value`` as the message says it: None is "its default" where the function's default is None too."""
        return "its default" if value is None is default else repr(value)

    if old.get("task") != new["task"]:
        refuse("task", said(old.get("task")), said(new["task"]))
    before, now = old.get("options", {}), new["options"]
    defaults = {n: p.default for n, p in inspect.signature(task_named(new["task"]).function).parameters.items()
                if p.default is not p.empty}
    for key in sorted(set(before) | set(now)):
        b, n = (given.get(key, defaults.get(key)) for given in (before, now))  # an option not given: its default
        if b == n:
            continue
        if key == "lowercase":  # two flags, no value: --cased, --lowercase
            cased = {True: "--lowercase", False: "--cased", None: "neither --cased nor --lowercase"}
            refuse("", *(syntax(python=f"lowercase={v!r}", cli=cased[v]) for v in (b, n)))
        flag = FLAGS.get((new["task"], key), "--" + key.replace("_", "-"))  # named as the caller writes it
        if isinstance(b, bool) and isinstance(n, bool):  # a flag without a value: given or not (not "--echo True")
            flag, given = (NEGATED[key], False) if key in NEGATED else (flag, True)
            refuse("", *(syntax(python=f"{key}={v!r}", cli=flag if v is given else f"{flag} left out") for v in (b, n)))
        refuse(f"option {syntax(python=key, cli=flag)}", said(b, defaults.get(key)), said(n, defaults.get(key)))
    if old.get("field") != new["field"]:
        refuse("field", said(old.get("field")), said(new["field"]))
    m_old, m_new = old.get("model", {}), new["model"]
    if m_old.get("dtype") != m_new["dtype"]:
        refuse("dtype", said(m_old.get("dtype")), said(m_new["dtype"]))
    for key in ("weights", "vocabulary"):  # a fingerprint says little: name the models they belong to
        if m_old.get(key) != m_new[key]:
            refuse(f"the {key} of model", said(m_old.get("name")), f"other {key}, of model {m_new['name']!r}")


class OutputLock:
    """A run's hold on its output file, from before it looks at what the file holds to its end: a second run given the
    same output (a job started twice) is refused at once instead of writing every line a second time beside the first
    run's, or cutting off the line it is writing (an exclusive :func:`fcntl.flock` on the file).

    A file created here for the run and still empty when the run fails (a bad option, a model that does not load) is
    removed again.

    Args:
        target: the run's output file (JSON Lines), or None (standard output: nothing to hold).

    Raises:
        InputError: another process holds the file, or it cannot be opened for writing.
    """

    def __init__(self, target: Path | None) -> None:
        self.target, self.file = target, None
        self.created = target is not None and not target.exists()
        if target is not None:
            self.file = self._take()

    def _take(self):
        try:
            f = open(self.target, "ab")
        except OSError as e:  # not this user's to write, a read-only file system, /proc
            raise InputError(f"cannot write {syntax(python='target', cli='--output')} {self.target} "
                             f"({e.strerror or e}); name a file this user may write") from None
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise InputError(f"another run is writing {self.target} now (it holds a lock on the file); wait for it "
                             "to end, then pass --resume to continue it if it was stopped, or pass another "
                             "--output") from None
        return f

    def renew(self) -> None:
        """Hold the file at the output's name again, after :func:`os.replace` put a new one there (retry_errors)."""
        old, self.file = self.file, self._take()
        old.close()

    def __enter__(self) -> OutputLock:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if self.file is None:
            return
        if kind is not None and self.created and self.target.stat().st_size == 0:
            self.target.unlink()
        self.file.close()


def complete_lines(target: Path) -> Iterator[bytes]:
    """The complete lines of ``target`` (without their newline), after cutting it after its last newline.

    A line a killed run was writing is dropped, to be written again.

    Args:
        target: the run's output file (cut in place).
    """
    with open(target, "rb+") as f:
        f.seek(0, os.SEEK_END)
        size = end = f.tell()
        while end > 0:  # find the last newline, reading backwards
            start = max(0, end - (1 << 16))
            f.seek(start)
            block = f.read(end - start)
            if b"\n" in block:
                end = start + block.rindex(b"\n") + 1
                break
            end = start
        if end < size:
            f.truncate(end)
    with open(target, "rb") as f:
        for raw in f:
            yield raw.rstrip(b"\n")


def scan_output(target: Path, source: str | Path, inputs: Iterator[tuple[int, bytes]], parse,
                recorded: dict) -> tuple[int, list[int], InputPrint]:
    """Check every complete line of ``target`` against its input line, and the input's fingerprint against the record's.

    Output line n must be a JSON object with ``"line": n`` whose carried fields equal what input line n gives.

    Args:
        target: the run's output file.
        source: the input, for messages.
        inputs: the input's ``(n, raw)`` pairs, consumed up to the last line written.
        parse (Callable[[int, bytes], tuple]): ``n, raw -> (text, carried fields, error)``
            (:meth:`~bertfn.corpus.inputs.Inputs.parse`).
        recorded: the record's ``input`` part.

    Returns:
        ``(lines written, the lines holding an error, the fingerprint of the inputs of the lines holding a result)``.

    Raises:
        InputError: naming the line that does not match.
    """
    count, errors, results = 0, [], InputPrint()
    for count, raw_out in enumerate(complete_lines(target), 1):
        try:
            out = json.loads(raw_out)
            n = out["line"]
        except (ValueError, KeyError, TypeError):
            raise InputError(f"line {count} of {target} is not an output line of bertfn (a JSON object with \"line\"); "
                             "--resume continues only a file this command wrote: pass another --output") from None
        if n != count:
            raise InputError(f"line {count} of {target} is for input line {n}; it is not one output line per input "
                             "line, so it cannot be resumed: pass another --output")
        got = next(inputs, None)
        if got is None:
            raise InputError(f"{source} has {count - 1} lines but {target} already holds more; "
                             "--resume continues a run on the same input")
        carried = {k: v for k, v in out.items() if k not in OWN_KEYS}
        if "error" in out:
            errors.append(n)
        else:
            _, expected, _ = parse(*got)
            if any(expected.get(k) != v for k, v in carried.items()):
                raise InputError(f"line {n} of {source} is not the input that line {n} of {target} was written for; "
                                 "--resume continues a run on the same input")
            results.add(*got)
        if n == recorded.get("lines") and results.value() != recorded.get("results"):
            raise InputError(f"the first {n} lines of {source} are not the input that {target} was written for "
                             "(their fingerprint differs from its run record's); --resume continues a run on the same input")
    return count, errors, results
