"""A task: a pipeline declared once, in its own module (``TASK = Task("classify", classify, ...)``).

:data:`bertfn.tasks.TASKS` lists every module's :class:`Task`, and the rooms above read that list: the corpus makes
each a callable class and a task of its runs (:mod:`bertfn.corpus.registry`), the command line a subcommand
(:data:`bertfn.cli.COMMANDS`, from ``bertfn/cli/<name>.py``), and ``bertfn`` exports each function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..checkpoint.model import Model
from ..checkpoint.resolve import DEFAULT_MODEL


@dataclass(frozen=True)
class Task:
    """A pipeline call a corpus, the command line and ``bertfn`` run: ``function(texts, model, **options)`` -> one
    result per text.

    Runs that turn refused texts into error lines call the function on its ``probe`` once before the
    first text, so that a bad option or a model without the part it needs stops the run at once instead
    of marking every line as failed.

    Attributes:
        name: the task's name (the CLI subcommand, e.g. ``"fill-mask"``; the corpus's class ``FillMask``).
        function: the pipeline call.
        probe: a text the function accepts with any model that can run it at all (score: ``"a"``), or a
            function of the model and the task's options that gives one (fill-mask: the model's mask token,
            ``[MASK]`` or ``<mask>``; score-mutations: the reference itself).
        max_tokens: the tokens per text the task reads at most with these options (what its truncation keeps);
            None: the model's positions (a longer text is refused, or, in fill-mask with truncation, read through
            a window of that size).
        inputs: what one item of the task is: ``("text",)``, a text; several names (``("question", "context")``),
            a dict of them, as a JSON Lines file's fields give it (:mod:`bertfn.corpus.inputs`).
        optional: those of ``inputs`` an item may leave out.
        fast: without edits the task runs on the fast path alone, so a model loaded for it holds its layers'
            weights packed once, as that path reads them (:func:`~bertfn.fast.choice.pack_state`); said here alone:
            :func:`~bertfn.tasks.runner.packing` reads it for the pipeline, the corpus and the command line.
        vectors: the task gives one vector per text (embed): a file run may write them as ``.npy``, and the corpus's
            class gives them as an array column.
        command: the task has its own subcommand, ``bertfn/cli/<name, - as _>.py`` (its ``add`` and ``run``);
            False: another subcommand runs it (score-mutations: ``bertfn score --reference``).
        model: the model a call given none runs (the hub id transformers' pipeline takes for the task where it has
            one in BERT's family: classify's SST-2 DistilBERT, tag's CoNLL-03 BERT, answer's SQuAD DistilBERT); None:
            the call needs one (no model without a fine-tuned head could run it), and says so before any download.
    """

    name: str
    function: Callable[..., object]
    probe: str | dict | Callable[[Model, dict], str | dict]
    max_tokens: Callable[[Model, dict], int] | None = None
    inputs: tuple[str, ...] = ("text",)
    optional: tuple[str, ...] = ()
    fast: bool = False
    vectors: bool = False
    command: bool = True
    model: str | None = DEFAULT_MODEL

    @property
    def class_name(self) -> str:
        """The name of the corpus's callable class for the task: ``"fill-mask"`` -> ``"FillMask"``."""
        return "".join(part.capitalize() for part in self.name.split("-"))
