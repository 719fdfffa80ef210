"""A pretrained model with a new task head, ready to fine-tune: ``with_head(model, task, labels=...)``.

What ``AutoModelForSequenceClassification.from_pretrained(a_pretrained_folder, num_labels=...)`` does in transformers,
on a :class:`~bertfn.checkpoint.model.Model`: the encoder's weights are kept, the weights the new head reads
(:func:`~bertfn.model.task_heads.task_head`'s ``shapes``, under the member's key names) are kept where the model
already holds them at their shape (BERT's and ALBERT's pooler, ModernBERT's prediction head ``head.*`` that its
masked LM shares) and drawn where it does not, and what the new class does not hold is left out (the MLM head, the
next-sentence head, an earlier task head, extra heads). The config names the new class (``architectures``:
``BertForSequenceClassification``) and its labels, so :func:`bertfn.classify` (``tag``, ``answer``, ``choose``) runs
the result and :func:`bertfn.save` writes a folder transformers reads.

The new weights are drawn as the member's ``_init_weights`` draws them: linear weights ~ N(0, ``initializer_range``),
biases 0, LayerNorm weights 1 (BERT, RoBERTa, DistilBERT, ELECTRA, ALBERT, ESM-2); ModernBERT's truncated at
``initializer_cutoff_factor`` (2) standard deviations, its prediction head's dense with ``initializer_range /
sqrt(2 L)`` and its classifier with ``hidden_size ** -0.5`` (:func:`init_std`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

import torch

from ..errors import InputError
from ..model.config import BertConfig, PROBLEM_TYPES
from ..model.naming import names_of
from ..model.params import Params
from ..model.task_heads import TASKS, task_head
from .model import Model
from .saving import architecture
from .state import matmul_layout

LABELLED = ("sequence-classification", "token-classification")
"""The tasks whose head has one output per label (question answering has two, multiple choice one)."""

CUTOFF = 2.0
"""ModernBERT's ``initializer_cutoff_factor`` (its config's default): its weights are drawn within this many
standard deviations."""


def init_std(config: BertConfig, name: str) -> tuple[float, float | None]:
    """The standard deviation a new weight is drawn with, and where it is cut off (None: a plain normal).

    BERT's ``_init_weights`` (and every member's but ModernBERT's): ``initializer_range``. ModernBERT's: a normal
    truncated at :data:`CUTOFF` standard deviations, with ``initializer_range / sqrt(2 L)`` for the prediction head's
    dense (``"out"``) and ``hidden_size ** -0.5`` for the classifier (``"final_out"``).

    Args:
        config: the model's config.
        name: the weight's BERT name (``classifier.weight``, ``head.dense.weight``, ...).
    """
    if config.model_type != "modernbert":
        return config.initializer_range, None
    if name.startswith("classifier."):
        return config.hidden_size ** -0.5, CUTOFF
    return config.initializer_range / math.sqrt(2.0 * config.num_hidden_layers), CUTOFF


def drawn(config: BertConfig, name: str, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """A new weight of the head, as ``_init_weights`` draws it: biases 0, LayerNorm weights 1, the rest normal
    (:func:`init_std`).

    Args:
        config: the model's config.
        name: its BERT name.
        shape: its shape.
        generator: what it is drawn from.
    """
    if name.endswith(".bias"):
        return torch.zeros(shape)
    if name.endswith(("LayerNorm.weight", "norm.weight")):
        return torch.ones(shape)
    std, cutoff = init_std(config, name)
    w = torch.empty(shape)
    if cutoff is None:
        return w.normal_(0.0, std, generator=generator)
    return torch.nn.init.trunc_normal_(w, 0.0, std, -cutoff * std, cutoff * std, generator=generator)


def with_head(model: Model, task: str, labels: Sequence[str] | None = None, *, problem_type: str | None = None,
              generator: torch.Generator | None = None) -> Model:
    """``model``'s encoder with a new ``task`` head (see the module docstring), to fine-tune.

    Args:
        model: a pretrained Model (a masked LM, an encoder, or a model with another head).
        task: one of :data:`~bertfn.model.task_heads.TASKS` the member has a head for.
        labels: the names of the classes, by index (sequence and token classification): ``["negative",
            "positive"]``.
        problem_type: a sequence classifier's ``"single_label_classification"``, ``"multi_label_classification"`` or
            ``"regression"`` (None: decided by the number of labels, as transformers does).
        generator: what the new weights are drawn from (default: seeded with 0), so one seed gives one head.

    Returns:
        A new Model sharing the kept weights' tensors with ``model``, the new ones on its device in its dtype, laid
        out as loading lays them out (:func:`~bertfn.checkpoint.state.matmul_layout`).

    Raises:
        InputError: an unknown task or one the member has no head for, labels missing for a classifier (or given to
            another head), labels that repeat, or a problem_type for a head other than a sequence classifier.
    """
    if not isinstance(model, Model):
        raise InputError(f"with_head() takes a Model from bertfn.load(...), got {type(model).__name__}")
    task_head(model.config, task)  # an unknown task, or one the member lacks, is refused here
    names = None if labels is None else list(labels) if isinstance(labels, Iterable) and not isinstance(labels, str) \
        else [labels]  # one name, or something that is none (refused below, as it came)
    if task in LABELLED:
        if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
            raise InputError(f"a {task} head needs labels=: the names of its classes, one each, e.g. labels=['negative', "
                             f"'positive']; got {labels!r}")
    elif names is not None:
        outputs = "two outputs, the answer's start and end" if task == "question-answering" else "one score per choice"
        raise InputError(f"a {task} head has no labels ({outputs}); leave labels= out")
    if problem_type not in PROBLEM_TYPES or (problem_type is not None and task != "sequence-classification"):
        raise InputError(f"problem_type= applies to a sequence classifier and is one of "
                         f"{', '.join(map(repr, PROBLEM_TYPES[1:]))} or None; got {problem_type!r} for {task!r}")
    if names is None:
        config = replace(model.config, num_labels=2, id2label=None, label2id=None, problem_type=None)
    else:
        config = replace(model.config, num_labels=len(names), id2label=dict(enumerate(names)),
                         label2id={n: i for i, n in enumerate(names)}, problem_type=problem_type)
    config = replace(config, architectures=(architecture(config, task),))
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    old = Params(model.state, model.config)  # read by BERT's names
    replaced = set()  # an earlier task head's own weights (not the pooler: the base model's), drawn anew
    if model.head.task in TASKS:
        replaced = {n for n in task_head(model.config, model.head.task).shapes(model.config) if not n.startswith("bert.")}
    names = names_of(config)
    base = {n for n in names.named_shapes(config, old) if n.startswith("bert.") and not n.startswith("bert.pooler.")}
    rename = names.renamer(config) or (lambda n: n)
    state = {rename(n): old[n] for n in base}  # the encoder (ESM-2's contact head with it), without the pooler
    new = {}
    for n, shape in task_head(config, task).shapes(config).items():
        kept = old.get(n) if n not in replaced else None
        if kept is not None and tuple(kept.shape) == shape:
            state[rename(n)] = kept
        else:
            new[rename(n)] = drawn(config, n, shape, g).to(model.device, model.dtype)
    matmul_layout(new)  # as loading lays out a linear weight
    return Model(config, {**state, **new}, model.tokenizer or None, model.name)
