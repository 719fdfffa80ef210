"""What people call BERT for, built on bertfn/model/ and bertfn/fast/.

With a masked LM (a pretrained checkpoint):

    fill_mask.py    fill_mask(): the words behind [MASK], shaped like transformers' pipeline
    joint.py        all the masks of a text filled together (a beam search rescored by PLL)
    scoring.py      score(): pseudo-log-likelihoods of texts; whole-word targets
    mutations.py    score_mutations(), substitution_matrix(): the effects of substitutions in a sequence
    embed.py        embed(), similarity(): sentence embeddings, made as a sentence-transformers folder says
    pooling.py      its Pooling, Dense and Normalize modules as functions
    replaced.py     replaced_tokens(): ELECTRA's discriminator, token by token

With the head of a fine-tuned checkpoint (bertfn/model/task_heads.py), each shaped like transformers' pipeline:

    classify.py     classify(): labels of texts and text pairs (text-classification); a checkpoint's extra heads
    pairs.py        text pairs through a sequence classifier, cut to fit: what zero_shot and rerank share
    zero_shot.py    zero_shot(): labels chosen at call time, scored by an NLI classifier
    rerank.py       rerank(): passages ranked for a query by a cross-encoder (sentence-transformers' CrossEncoder)
    tag.py          tag(): entities, token by token or grouped (token-classification); long texts in windows
    entities.py     the tagger's grouping of tokens into words and entities (aggregation strategies)
    words.py        texts given as their words (is_split_into_words): each word cut alone, the spans moved
    answer.py       answer(): the answer's span in a context (question-answering)
    answer_windows.py  a long context cut into overlapping windows with the question
    answer_spans.py    the best spans from the start and end logits of every window
    choose.py       choose(): a prompt's choices ranked by a multiple-choice head
    contacts.py     contacts(): which residues touch, by ESM-2's contact head on the attention maps

What every pipeline shares:

    task.py         Task: a pipeline declared once, as its module's TASK; TASKS below lists them all
    runner.py       every step of a pipeline but its own: the model (packed as its TASK says), its tokenizer and
                    edits; its texts through the model in groups, the layout chosen here; the [UNK] warnings and
                    one result or a list; the option checks are :mod:`bertfn.checkpoint.checks`, shared with the
                    traces and the corpus

A task is its module: one that declares ``TASK = Task(...)`` is found here (:func:`declared`, :data:`TASKS`), and the
corpus (:mod:`bertfn.corpus.registry`) and the command line (:func:`bertfn.cli.commands`, from
``bertfn/cli/<name>.py``) follow. Written out still, for readers that do not import (the docs' griffe, editors), and
held to this list by tests/test_task_list.py: ``bertfn``'s import of the task's function, the corpus's name for its
class (``FillMask = MAPPERS["fill-mask"]`` in registry.py, imported in bertfn/corpus/__init__.py), and the
reference pages' entries (docs/reference/tasks.md, corpus.md).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from .task import Task



def declared(path: Iterable[str], package: str) -> tuple[Task, ...]:
    """The tasks the modules of a package declare: the ``TASK`` of each module that has one, in the order of the
    modules' names (each module imported).

    Args:
        path: the package's folders (its ``__path__``).
        package: its name (``"bertfn.tasks"``).
    """
    modules = (importlib.import_module(f"{package}.{found.name}") for found in pkgutil.iter_modules(path))
    return tuple(module.TASK for module in modules if isinstance(getattr(module, "TASK", None), Task))


TASKS: tuple[Task, ...] = declared(__path__, __name__)
"""Every task, in the order of its module's name: the ``TASK`` of each module of this package that declares one."""

