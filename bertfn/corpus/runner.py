"""Running a task over texts of any number: the tasks by name, the runner and :func:`stream`.

A *task* is a pipeline call that takes a list of texts and a model and returns one result per text, in order
(:class:`~bertfn.tasks.task.Task`, declared by its module; :mod:`bertfn.corpus.registry` registers every one of
:data:`bertfn.tasks.TASKS`: fill-mask, score, embed, ...). This module runs a task over texts of any number:

    stream(texts, model, top_k=3)              an iterator: texts in, results out, lazily, in order

and :func:`bertfn.corpus.files.run_file` runs it from a file to JSON Lines, with progress and ``--resume``; the
registry's callable classes (``FillMask(model)``) run it in Ray Data and datasets.

Texts are read a chunk (:data:`CHUNK` texts) at a time and handed to the task in one call, so the
task's own batching does the work (fill_mask sorts a chunk by length and lays it end to end in
groups); memory holds one chunk, however long the input. A text the task refuses (no [MASK], too
long, not a string) must not cost the others their results: when a chunk raises
:class:`~bertfn.errors.InputError`, it is split in halves and each half run again, down to the
single texts at fault (:meth:`Runner.__call__`). Errors about the model (:class:`MissingPartError`)
or anything unexpected stop the run.
"""

from __future__ import annotations

import inspect
import itertools
import math
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy
import torch

from ..checkpoint.checks import count
from ..checkpoint.loading import load
from ..checkpoint.model import Model
from ..checkpoint.resolve import DEFAULT_MODEL, get_model, texts_and_model
from ..checkpoint.state import release_memory
from ..errors import InputError, MissingPartError
from ..model.family import longest_input
from ..tasks.runner import chosen_model, packing
from ..tasks.task import Task

CHUNK = 256
"""Texts per call of the task: enough for fill_mask's length-sorted groups to fill up (2048 tokens
each), few enough that a chunk's results are a few MB and a killed run loses little."""

# --- tasks ------------------------------------------------------------------------------------------


TASKS: dict[str, Task] = {}
"""Task name (the CLI subcommand, e.g. ``"fill-mask"``) -> :class:`~bertfn.tasks.task.Task`: every task of
:data:`bertfn.tasks.TASKS`, and those a caller adds; filled by :func:`~bertfn.corpus.registry.register`."""


def task_named(name: str) -> Task:
    """The task of that name, or :class:`InputError` listing the names there are.

    Args:
        name: a task's name (``"fill-mask"``).
    """
    if name not in TASKS:
        raise InputError(f"task must be one of {', '.join(map(repr, TASKS))}, got {name!r}")
    return TASKS[name]


def check_options(task: Task, options: dict) -> None:
    """Refuse, before any model loads, an option ``task``'s function does not take (``top_n=`` for ``top_k=``), naming
    those it does: the call would raise Python's TypeError at the first text.

    Args:
        task: the task.
        options: the options given for it.

    Raises:
        InputError: an option the function has no parameter for (a function that takes ``**kwargs`` takes any).
    """
    params = list(inspect.signature(task.function).parameters.values())[1:]  # after the texts
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    known = [p.name for p in params if p.name not in ("model", "device", "dtype", *task.inputs)]  # the run's own
    unknown = [k for k in options if k not in known]
    if unknown:
        raise InputError(f"the {task.name} task has no option {', '.join(map(repr, unknown))}; its options are "
                         f"{', '.join(known)}")


def open_model(model: Model | str | Path | None, *, tokenizer: str | Path | None = None, lowercase: bool | None = None,
               device: str | torch.device | None = None, dtype: torch.dtype | str | None = None,
               prepare: Callable[[dict[str, torch.Tensor]], bool] | None = None, fresh: bool = False) -> Model:
    """The model a run uses: :func:`~bertfn.checkpoint.resolve.get_model`, or :func:`~bertfn.checkpoint.loading.load`.

    ``load`` when a tokenizer or a case rule is given (as ``--tokenizer`` / ``--cased`` do in the CLI).
    A given :class:`Model` is used as it is.

    Args:
        model: a :class:`Model`, a folder or a hub id.
        tokenizer: as in :func:`~bertfn.checkpoint.loading.load`.
        lowercase: as in :func:`~bertfn.checkpoint.loading.load`.
        device: where the model runs.
        dtype: its precision.
        prepare: ``load``'s, for a model loaded here; a run on the fast path alone passes
            :func:`~bertfn.fast.choice.pack_state` (:func:`~bertfn.tasks.runner.packing`), so the model holds each
            linear weight once, in the layout the fast path's kernel reads.
        fresh: load it anew instead of sharing get_model's (a command line's model).
    """
    if tokenizer is None and lowercase is None and not fresh or isinstance(model, Model):
        return get_model(model, device, dtype, prepare=prepare)
    return load(model or DEFAULT_MODEL, tokenizer=tokenizer, lowercase=lowercase, device=device, dtype=dtype,
                prepare=prepare)


def jsonable(result: object) -> object:
    """One result as JSON holds it: tensors and arrays (embed's vectors) become lists, and every float is
    written at float32 precision, the shortest decimal that reads back as the same float32 (the models
    compute in float32 at best: the digits past it are noise, and they doubled the size of embed's lines)."""
    if hasattr(result, "tolist"):
        result = result.float().cpu().numpy() if isinstance(result, torch.Tensor) else result
        if getattr(result, "dtype", None) is not None and result.dtype.kind == "f":
            return [float(x) for x in map(str, result.astype(numpy.float32).ravel())] if result.ndim == 1 else \
                [jsonable(row) for row in result]
        return result.tolist()
    if isinstance(result, float):
        return float(str(numpy.float32(result))) if math.isfinite(result) else result
    if isinstance(result, dict):
        return {k: jsonable(v) for k, v in result.items()}
    if isinstance(result, (list, tuple)):
        return [jsonable(v) for v in result]
    return result


def shift(message: str, offset: int) -> str:
    """A message about texts of a batch ("text 3", "texts 7, 9") about the same texts in a batch where that
    one starts at ``offset`` ("text 259", "texts 263, 265")."""
    if not offset:
        return message
    return re.sub(r"\b(texts? )(\d+(?:, \d+)*)\b", lambda m: m.group(1) + ", ".join(
        str(int(i) + offset) for i in m.group(2).split(", ")), message)


def relabel(error: InputError, label: str) -> InputError:
    """The error of a text run alone ("text 0 has no [MASK] ...") naming the text as ``label`` ("line 7")."""
    return InputError(re.sub(r"\btext 0\b", label, str(error), count=1))


class Runner:
    """A task bound to a loaded model and its options.

    A list of texts in, one result or one :class:`InputError` per text out, in order.

    Args:
        task: the task's name (:data:`TASKS`).
        model: a :class:`Model`, a folder or a hub id (loaded once, here); None: the task's default
            (:func:`~bertfn.tasks.runner.chosen_model`).
        tokenizer: as in :func:`open_model`.
        lowercase: as in :func:`open_model`.
        device: as in :func:`open_model`.
        dtype: as in :func:`open_model`.
        probe: check the model and the options once now, on the task's :attr:`~bertfn.tasks.task.Task.probe` (raises their
            error) so that an error later is always a text's.
        **options (Any): the task's own (fill-mask: ``top_k``, ``targets``, ``truncation``, ``batch_size``, ...).

    Raises:
        InputError: an unknown task, or (with ``probe``) options the task refuses.
    """

    def __init__(self, task: str, model: Model | str | Path | None = None, *, tokenizer: str | Path | None = None,
                 lowercase: bool | None = None, device: str | torch.device | None = None,
                 dtype: torch.dtype | str | None = None, probe: bool = True, **options) -> None:
        self.task = task_named(task)
        check_options(self.task, options)
        self.model = open_model(chosen_model(self.task, model), tokenizer=tokenizer, lowercase=lowercase, device=device, dtype=dtype,
                                prepare=packing(self.task, options.get("edits")))
        self.options = options
        self.limit = self.task.max_tokens(self.model, options) if self.task.max_tokens else None
        self.probed = None  # the probe's result (embed's: a vector of the run's width)
        if probe:
            with warnings.catch_warnings():  # the probe's own text may be all [UNK] (e.g. "a" for capitals)
                warnings.simplefilter("ignore")
                probe = self.task.probe(self.model, options) if callable(self.task.probe) else self.task.probe
                self.probed = self.task.function([probe], self.model, **options)[0]

    def __call__(self, texts: list) -> list:
        """One result (or the :class:`InputError` that refused it) per text of ``texts``.

        The texts run in one call; when it raises InputError, the halves run again, recursively, so
        that only the texts at fault fail and the rest keep large batches. A refused text's error
        speaks of it as "text 0" (it ran alone): :func:`relabel` names it for the caller. Afterwards
        the memory the call freed goes back to the system (:func:`release_memory`).

        Args:
            texts: the texts.

        Raises:
            MissingPartError: the model lacks a part the task needs.
        """
        results = self._run(texts)
        release_memory()
        return results

    def _run(self, texts: list, offset: int = 0) -> list:
        """The results of ``texts``, the ``offset``-th text on of the caller's: the task's warnings are said
        again naming the caller's indices (those of a call that failed are dropped: its halves say them)."""
        if not texts:
            return []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                results = list(self.task.function(list(texts), self.model, **self.options))
        except MissingPartError:
            raise
        except InputError as e:
            if len(texts) == 1:
                return [e]
        else:
            for w in caught:
                warnings.warn_explicit(shift(str(w.message), offset), w.category, w.filename, w.lineno)
            return results
        half = len(texts) // 2
        return self._run(texts[:half], offset) + self._run(texts[half:], offset + half)

    def read(self, texts: list[str]) -> list[tuple[int, str | None]]:
        """Per text: how many tokens the task reads, and the tokenizer's [UNK] warning for it.

        Args:
            texts: the texts.

        Returns:
            Per text, ``(tokens, warning)``: [CLS] and [SEP] included, at most what its truncation keeps
                (:attr:`~bertfn.tasks.task.Task.max_tokens`: embed's ``max_length`` or model setting); the warning speaks of it
                as "text 0", None when most of its tokens are known.
        """
        tok = self.model.tokenizer
        if not tok or not texts:
            return [(0, None)] * len(texts)
        limit = self.limit if self.limit is not None else longest_input(self.model.config)
        texts = [text_of(t) for t in texts]
        out = []
        for text, e in zip(texts, tok.backend.encode_batch(list(texts))):
            said = tok.unknown([text], None, [e]).get(0)
            out.append((min(sum(e.attention_mask), limit), f"text 0: {said}" if said else None))
        return out


def text_of(item: str | list[str] | dict) -> str:
    """The text of an item, for counting its tokens: the item, its strings joined (a JSON field's list: a text's words
    given split, ``tag``'s ``is_split_into_words``), or its inputs' texts joined (a reader's question and context, a
    reranker's query and passages).

    Args:
        item: a text, a list of strings, or a dict of a task's inputs (each a text or a list of texts).
    """
    if isinstance(item, str):
        return item
    parts = item.values() if isinstance(item, dict) else item
    return " ".join(v if isinstance(v, str) else " ".join(v) for v in parts)


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
    """Results of ``task`` for each of ``texts``, lazily and in order.

    What ``fill_mask(list(texts), model, **options)`` returns, one item at a time, without holding the
    texts or the results in memory.

    Args:
        texts: any iterable of strings (a list, an open file's lines, a generator, a dataset column);
            it is read ``chunk_size`` texts ahead.
        model: the task's (a :class:`Model`, a folder or a hub id).
        task: the task's name: ``"fill-mask"``, ``"score"``, ``"embed"`` or ``"score-mutations"``.
        errors: ``"raise"`` raises the :class:`InputError` of the first text the task refuses, naming it
            by its index ("text 1234 has no [MASK] ..."), after yielding every result before it;
            ``"return"`` yields that InputError in the text's place and goes on (the model and options are
            checked once first, so such an error is always the text's own).
        chunk_size: texts per call of the task (default :data:`CHUNK`).
        device: the task's.
        dtype: the task's.
        **options (Any): the task's (fill-mask: ``top_k``, ``targets``, ``truncation``, ``batch_size``).

    Yields:
        Each text's result, or with ``errors="return"`` the InputError that refused it.

    Raises:
        InputError: one string instead of an iterable, a bad ``errors`` or ``chunk_size``, or (with
            ``errors="raise"``) the first refused text.
    """
    texts, model = texts_and_model(texts, model, "stream")
    if isinstance(texts, str):
        raise InputError("stream takes an iterable of texts, got one string; pass [text], or call fill_mask for one text")
    if errors not in ("raise", "return"):
        raise InputError(f"errors must be 'raise' or 'return', got {errors!r}")
    count("chunk_size", chunk_size)
    runner = Runner(task, model, device=device, dtype=dtype, probe=errors == "return", **options)
    return _stream(runner, texts, errors, chunk_size)


def _stream(runner: Runner, texts: Iterable[str], errors: str, chunk_size: int) -> Iterator:
    """The generator behind :func:`stream` (its checks run at the call, not at the first ``next``)."""
    start = 0
    for chunk in chunks(texts, chunk_size):
        with warnings.catch_warnings(record=True) as caught:  # said again naming the texts of the stream
            warnings.simplefilter("always")
            results = runner(chunk)
        for w in caught:
            warnings.warn_explicit(shift(str(w.message), start), w.category, w.filename, w.lineno)
        for i, r in enumerate(results, start):
            if isinstance(r, InputError):
                r = relabel(r, f"text {i}")
                if errors == "raise":
                    raise r
            yield r
        start += len(chunk)
