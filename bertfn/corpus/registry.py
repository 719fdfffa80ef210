"""The tasks a corpus can run, and the callable class each gets for Ray Data and datasets.

A *task* is a pipeline call that takes a list of texts (or of items of several inputs: a reader's question and
context) and a model and returns one result per item, in order. Every task of :data:`bertfn.tasks.TASKS` (each
declared by its module, :class:`~bertfn.tasks.task.Task`) is registered here, and :func:`register` adds another: a
registered task is one that :func:`~bertfn.corpus.runner.stream`, :func:`~bertfn.corpus.files.run_file`
(``bertfn NAME --input``) and its :class:`Mapper` subclass run:

    FillMask(model), Score(model), ...   callable classes for ray.data.Dataset.map_batches and
                                         datasets.Dataset.map(batched=True): rows in, rows + result out
    worker_device(device)                where a class's model runs: the caller's device, else the GPU
                                         Ray assigned the worker (map_batches(..., num_gpus=1)), else the CPU
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy
import torch

from ..checkpoint.model import Model
from ..errors import DependencyError, InputError
from ..tasks import TASKS as DECLARED
from ..tasks.task import Task
from .runner import TASKS, Runner, jsonable, relabel


def register(name: str, function: Callable[..., object], probe: str | dict | Callable[[Model, dict], str | dict],
             max_tokens: Callable[[Model, dict], int] | None = None, inputs: tuple[str, ...] = ("text",),
             optional: tuple[str, ...] = ()) -> type[Mapper]:
    """Make ``function`` a task named ``name``; returns its callable class for ``map_batches``.

    ``Mine = register("mine", mine, probe="a")`` is all it takes: :func:`stream`, :func:`run_file`
    (``task="mine"``) and the returned :class:`Mapper` subclass then run it. bertfn's own tasks are declared in
    their modules instead (:class:`~bertfn.tasks.task.Task`) and registered by :func:`mapper`.

    Args:
        name: the task's name, e.g. ``"fill-mask"`` (the class is named ``FillMask``).
        function: ``function(texts, model, **options)`` -> one result per text, in order.
        probe: as :attr:`~bertfn.tasks.task.Task.probe`: a text the function accepts, or ``(model, options) -> text``.
        max_tokens: ``(model, options) -> the tokens per text the task reads at most``; None: the model's
            positions.
        inputs: as :attr:`~bertfn.tasks.task.Task.inputs`.
        optional: as :attr:`~bertfn.tasks.task.Task.optional`.

    Returns:
        The task's callable class, a :class:`Mapper` subclass.
    """
    return mapper(Task(name, function, probe, max_tokens, inputs, optional))


def mapper(task: Task) -> type[Mapper]:
    """Register ``task`` (:data:`~bertfn.corpus.runner.TASKS`) and make its callable class, named
    :attr:`~bertfn.tasks.task.Task.class_name`.

    Args:
        task: the task.

    Returns:
        A :class:`Mapper` subclass that runs it.
    """
    TASKS[task.name] = task
    return type(task.class_name, (Mapper,), {
        "task": task.name, "__module__": __name__, "__qualname__": task.class_name,
        "__doc__": f"The {task.name!r} task as a callable class for ray.data.Dataset.map_batches: see :class:`Mapper`."})


class Mapper:
    """A task as a callable class: a batch of rows in, the same rows with ``result`` and ``error`` out.

    For ``ray.data.Dataset.map_batches`` (each worker builds one instance, so the model loads once
    per worker) and ``datasets.Dataset.map(batched=True)``:

        ds.map_batches(bertfn.corpus.FillMask, fn_constructor_kwargs={"model": "/models/bert", "top_k": 3},
                       batch_size=256, concurrency=4)

    A batch is a dict of columns (numpy arrays or lists) or a pandas DataFrame; what comes back is
    of the same kind (for a batch of datasets' map, the Arrow table of its rows: :func:`arrow_rows`) with two more
    columns: ``result``, the task's result for the row as JSON text
    (what ``run_file`` writes under "result"; None where the text was refused), and ``error``, the
    refusal's message or None. JSON text because results need not share one Arrow type (fill-mask
    gives a list of answers for a text with one [MASK] and a list of such lists for several), and
    Ray Data and datasets store columns in Arrow: a string column writes to Parquet or JSON as is.
    A task of vectors (``Embed``: :attr:`~bertfn.tasks.task.Task.vectors`) gives each row's vector itself instead,
    float32 (a dict batch's ``result`` an (n, D) array: Ray's tensor column, datasets' list of floats), NaN where
    the text was refused, as ``out.npy`` holds them.

    A task of several inputs (a reader's question and context, a classifier's text and text_pair) reads each from
    the column of its name, or of the name ``column`` gives it (``column={"context": "passage"}``); an optional
    input (text_pair) may have no column, or None in some rows.

    On a Ray worker to which Ray assigned GPUs (``map_batches(..., num_gpus=1)``) and with no ``device`` given, the
    model runs on the GPU Ray assigned (:func:`worker_device`); elsewhere, on the CPU.

    Args:
        model: as in :func:`open_model`.
        column: the column that holds the texts (default: the column named as the task's first input, "text" but
            for answer, rerank and choose); ``{input: column}`` for the inputs whose column is not named as they
            are.
        **options (Any): the task's (fill-mask: ``top_k``, ``targets``, ``truncation``, ...), and tokenizer,
            lowercase, device, dtype as in :func:`open_model` (device: see :func:`worker_device`).

    Raises:
        DependencyError: Ray assigned this worker a GPU, no ``device`` was given, and this torch cannot use CUDA.
    """

    task: str = ""  # set by mapper()

    def __init__(self, model: Model | str | Path | None = None, *, column: str | dict[str, str] | None = None,
                 **options) -> None:
        inputs = TASKS[self.task].inputs
        named = {} if column is None else {inputs[0]: column} if isinstance(column, str) else dict(column)
        if set(named) - set(inputs):
            raise InputError(f"column= names {', '.join(map(repr, sorted(set(named) - set(inputs))))}, which the "
                             f"{self.task} task does not read; its inputs are {', '.join(map(repr, inputs))}")
        self.columns = {n: named.get(n, n) for n in inputs}  # input -> the column that holds it
        self.optional = TASKS[self.task].optional
        self.runner = Runner(self.task, model, **{**options, "device": worker_device(options.get("device"))})

    @property
    def device(self) -> torch.device:
        """Where the model runs: ``cuda:0`` on a Ray worker with one GPU assigned, ``cpu`` elsewhere."""
        return self.runner.model.device

    def __call__(self, batch, **given):
        if given:  # map_batches' fn_kwargs: options that belong to the class, where the model loads once
            raise InputError(f"{type(self).__name__} takes the task's options once, with the model "
                             f"(map_batches(..., fn_constructor_kwargs={{'model': ..., {', '.join(f'{k!r}: ...' for k in given)}}})"
                             f"); got {', '.join(map(repr, given))} with each batch (fn_kwargs)")
        values = {}
        for name, column in self.columns.items():
            try:
                values[name] = [plain(v) for v in batch[column]]  # numpy's str_ -> str
            except KeyError:
                if name in self.optional:
                    continue
                raise InputError(f"the batch has no column {column!r} (it has {', '.join(map(repr, list(batch)))}); "
                                 "pass column= naming the one that holds the texts") from None
        if len(self.columns) == 1:
            texts = values[next(iter(self.columns))]
        else:
            texts = [{n: v[i] for n, v in values.items()} for i in range(len(next(iter(values.values()))))]
        results = [relabel(r, "the text") if isinstance(r, InputError) else r for r in self.runner(texts)]
        out = batch.copy() if hasattr(batch, "iloc") else dict(batch)  # a pandas DataFrame, or a dict of columns
        if TASKS[self.task].vectors:
            rows = vector_rows(results, self.runner.probed)  # (n, D)
            out["result"] = list(rows) if hasattr(out, "iloc") else rows  # a DataFrame's column: a vector per row
        else:
            out["result"] = [None if isinstance(r, InputError) else json.dumps(jsonable(r), ensure_ascii=False)
                             for r in results]
        out["error"] = [str(r) if isinstance(r, InputError) else None for r in results]
        table = getattr(batch, "pa_table", None)  # a batch of datasets' map (a LazyBatch): its rows as an Arrow table
        return out if table is None else arrow_rows(table, out["result"], out["error"], TASKS[self.task].vectors)


def arrow_rows(table, result, error: list, vectors: bool):
    """A batch of datasets' map as the Arrow table it returns: its rows, with ``result`` and ``error`` as columns of
    their own types (a string, or a float32 vector), not inferred from the values. datasets fixes a column's type at
    the first batch it writes, and a batch of no errors (every ``error`` None) typed the column null: the first later
    batch with an error stopped the map, hours in, with ``Couldn't cast array of type string to null``.

    Args:
        table (pyarrow.Table): the batch's rows (``LazyBatch.pa_table``).
        result: the rows' results: JSON texts (None where refused), or an (n, D) array of vectors.
        error: the rows' errors (None where none).
        vectors: the results are vectors.

    Returns:
        pyarrow.Table: ``table``'s columns (less any ``result`` and ``error`` of its own), then ``result`` and ``error``.
    """
    import pyarrow as pa  # datasets' own dependency: here only for its batches

    kept = table.select([c for c in table.column_names if c not in ("result", "error")])
    result = pa.array(list(result), type=pa.list_(pa.float32())) if vectors else pa.array(result, type=pa.string())
    return kept.append_column("result", result).append_column("error", pa.array(error, type=pa.string()))


def vector_rows(results: list, like: torch.Tensor) -> numpy.ndarray:
    """A task's vectors as one float32 array, a row per text: NaN where the text was refused (its result an
    :class:`InputError`), as ``out.npy`` holds them.

    Args:
        results: a vector (D,) or an InputError per text.
        like: a vector of the run's width (the probe's), for a batch whose every text was refused.

    Returns:
        (n, D) float32.
    """
    rows = numpy.full((len(results), like.shape[-1]), numpy.nan, dtype=numpy.float32)
    for i, r in enumerate(results):
        if not isinstance(r, InputError):
            rows[i] = r.float().cpu().numpy()
    return rows


def worker_device(device: str | torch.device | None) -> str | torch.device | None:
    """Where a :class:`Mapper`'s model runs: ``device`` if given, else the GPU Ray assigned this worker, else None
    (the CPU, as :func:`~bertfn.corpus.runner.open_model` takes None).

    The GPU is the first of ``ray.get_runtime_context().get_accelerator_ids()["GPU"]`` (the ids Ray gave the
    worker for ``num_gpus``; none in a driver or a worker without GPUs). Before running an actor, Ray sets
    ``CUDA_VISIBLE_DEVICES`` to those ids (``ray._private.utils.set_visible_accelerator_ids``), so torch numbers
    the GPU by its place there: ``cuda:0`` for one GPU, whatever its id on the machine. With
    ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1`` Ray leaves the variable as it was: the GPU's place in it
    then, or with it unset, its id. Outside Ray (Ray not imported, or not initialized) nothing is assigned.

    Args:
        device: the caller's (a string such as ``"cuda:1"``, a ``torch.device``), or None.

    Returns:
        ``device`` when given; ``"cuda:N"`` for the GPU Ray assigned; None where none was assigned.

    Raises:
        DependencyError: Ray assigned a GPU but this torch cannot use CUDA (a CPU-only build, or no GPU it can see):
            the message names the GPU's id, torch's version and the fix.
    """
    ray = sys.modules.get("ray")  # a Ray worker has imported it; nowhere else is Ray's to import here
    if device is not None or ray is None or not ray.is_initialized():
        return device
    gpus = ray.get_runtime_context().get_accelerator_ids().get("GPU", [])
    if not gpus:
        return None
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        got = "built without CUDA" if torch.version.cuda is None else \
            f"built with CUDA {torch.version.cuda} but sees no GPU (CUDA_VISIBLE_DEVICES={visible!r})"
        raise DependencyError(
            f"Ray assigned this worker GPU {gpus[0]} (num_gpus), so its model was to run there, but this torch "
            f"({torch.__version__}) is {got}; install a CUDA build of torch on the workers "
            "(https://pytorch.org/get-started/locally/), or leave num_gpus out of map_batches to run on the CPU")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    return f"cuda:{visible.index(gpus[0]) if gpus[0] in visible else int(gpus[0])}"


def plain(value: object) -> object:
    """A value of a Ray Data or datasets column as a task takes it: numpy's ``str_`` as ``str``, an array of texts as
    a list of ``str``."""
    if isinstance(value, str):
        return str(value)
    if hasattr(value, "tolist") and not isinstance(value, torch.Tensor):
        return [str(v) for v in value.tolist()]
    return value


MAPPERS: dict[str, type[Mapper]] = {task.name: mapper(task) for task in DECLARED}
"""Task name -> its callable class, for every task of :data:`bertfn.tasks.TASKS`."""

# Each by name, for ``from bertfn.corpus import FillMask`` and the docs' static reading (tests/test_task_list.py
# checks that these are every task's):
Answer = MAPPERS["answer"]
Choose = MAPPERS["choose"]
Classify = MAPPERS["classify"]
Contacts = MAPPERS["contacts"]
Embed = MAPPERS["embed"]
FillMask = MAPPERS["fill-mask"]
Rerank = MAPPERS["rerank"]
Score = MAPPERS["score"]
ScoreMutations = MAPPERS["score-mutations"]
Tag = MAPPERS["tag"]
ZeroShot = MAPPERS["zero-shot"]
