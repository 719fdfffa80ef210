"""One clean/corrupted pair made ready for a study: its two runs, and the points the metric reads.

A study (:mod:`bertfn.interventions.study`) takes pairs as two texts or two lists of as many
(:func:`pairs_of`), records each pair's clean and corrupted runs as :func:`bertfn.trace` would, in one
batch of two (:func:`runs`), and runs the metric once on the corrupted run to learn which points it
reads (:func:`reads_of`): the patched copies then keep only those. A metric that asks for a point a pass
computes only on request (``layer.{i}.attention.head_outputs``) gets the runs recorded again with it; a study that
patches such a point (``name="layer.{i}.attention.head_outputs"``) has them recorded with it from the start. A
fine-tuned checkpoint's task head runs on both texts as :func:`bertfn.trace` runs it, so that a metric can read
its points (``classifier.logits``, ``qa.start_logits``: :mod:`bertfn.interventions.head_metrics`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from ..checkpoint.model import Model
from ..checkpoint.resolve import fits, require_mlm_head, text_list
from ..errors import InputError, MissingPartError, clipped
from ..inspect.batch import checkpoint_head
from ..inspect.trace import Recording
from ..model.encoder import encoder
from ..model.heads import mlm_head
from ..model.point_names import point_names
from ..model.recorder import OPTIONAL_POINTS, Trace
from .copies import MLM_POINTS, TASK_HEAD_POINTS
from .patching import Metric

Tensor = torch.Tensor


def pairs_of(clean: str | Sequence[str], corrupted: str | Sequence[str], what: str) -> list[tuple[str, str]]:
    """The clean/corrupted pairs of a call: two texts, or two lists of as many texts.

    Args:
        clean: a clean text or a list of them.
        corrupted: the corrupted text(s), one per clean text.
        what: the call, for the messages.

    Raises:
        InputError: a text and a list, lists of different lengths, or an empty text.
    """
    if isinstance(clean, str) != isinstance(corrupted, str):
        raise InputError(f"{what} takes a clean and a corrupted text, or a list of clean texts and a list of as many "
                         f"corrupted ones; got {type(clean).__name__} and {type(corrupted).__name__}")
    cleans, _ = text_list(clean, what)
    corrupteds, _ = text_list(corrupted, what)
    if len(cleans) != len(corrupteds):
        raise InputError(f"{what} pairs each clean text with a corrupted one: got {len(cleans)} clean and "
                         f"{len(corrupteds)} corrupted texts")
    return list(zip(cleans, corrupteds))


def runs(clean_text: str, corrupted_text: str, m: Model, optional: Sequence[str] = ()) -> tuple[Recording, Recording]:
    """The clean and the corrupted text recorded as :func:`~bertfn.inspect.trace.trace` records each.

    One batch of two (the weights are read once; the two have the same number of tokens, so nothing is
    padded); the MLM head at the corrupted text's [MASK]s for both, when it has masks and the model a head;
    the checkpoint's task head (:func:`~bertfn.inspect.batch.checkpoint_head`) on both.

    Args:
        clean_text: the clean text.
        corrupted_text: the corrupted text.
        m: the model.
        optional: optional points to compute too (e.g. ``layer.*.attention.head_outputs``).

    Raises:
        InputError: texts of different lengths in tokens.
    """
    enc = m.tokenizer([clean_text, corrupted_text])
    ids = enc.input_ids.to(m.device)  # (2, S)
    lengths = enc.attention_mask.sum(dim=1).tolist()
    if lengths[0] != lengths[1]:
        tokens = [[m.tokenizer.id_to_token(int(i)) for i in ids[b, :lengths[b]]] for b in range(2)]
        at = next((j for j, (a, b) in enumerate(zip(*tokens)) if a != b), min(lengths))  # the first token they differ at
        raise InputError(f"the clean text has {lengths[0]} tokens and the corrupted one {lengths[1]}; patching "
                         f"compares the same positions, so make them the same length in tokens (they part at position "
                         f"{at}: clean {' '.join(tokens[0][at:at + 4])!r}, corrupted {' '.join(tokens[1][at:at + 4])!r})")
    masks = [(ids[b] == m.tokenizer.mask_token_id).nonzero()[:, 0].tolist() for b in range(2)]
    record = Trace(optional=optional)
    with torch.no_grad():
        out = encoder(m.params, ids, enc.attention_mask.to(m.device), enc.token_type_ids.to(m.device),
                      impl="eager", trace=record)
        if masks[1] and "cls.predictions.decoder.weight" in m.params:
            mlm_head(m.params, out.last_hidden_state[:, masks[1]], trace=record)  # (2, N, V)
        checkpoint_head(m, out.last_hidden_state, enc.attention_mask.to(m.device), record)

    def one(b: int) -> Recording:  # text b's rows; mlm.* without the batch axis, as trace() records them
        tensors = {k: (v[b] if k.startswith("mlm.") else v[b:b + 1]) if v.shape[0] == 2 else v
                   for k, v in record.store.items()}
        return Recording(enc.tokens[b], ids[b:b + 1], masks[b], tensors, m.config, m)

    return one(0), one(1)


class OptionalAsked(InputError):
    """The metric asked for optional points the run did not compute (:data:`OPTIONAL_POINTS`)."""

    def __init__(self, names: list[str]):
        super().__init__(f"the run did not compute {names}")
        self.names = names


def not_computed(missing: set[str], config) -> list[str]:
    """Of the points a run lacks, those of the model's pass it computes only when asked (:data:`OPTIONAL_POINTS`).

    Args:
        missing: names a metric read that the run does not hold.
        config (BertConfig): the model's config (a name beyond its layers is no point of its pass).
    """
    return sorted(set(missing) & set(point_names(config, optional=True)) - set(point_names(config)))


class Reads(dict):
    """The tensors of a run, noting which names the metric asks for."""

    def __init__(self, tensors: dict):
        super().__init__(tensors)
        self.asked: list[str] = []

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            raise InputError(f"the metric indexed the run with {name!r}: a metric is metric(run), run the pass's "
                             "Recording read by point name, e.g. lambda run: run['mlm.logits'][0, right] - "
                             "run['mlm.logits'][0, wrong] (or iv.logit_difference(right, wrong))")
        self.asked.append(name)
        return super().__contains__(name)


def reads_of(metric: Metric, run: Recording) -> tuple[frozenset[str], float]:
    """Which points ``metric`` reads, found by running it on ``run``, and its value there.

    Args:
        metric: ``metric(run) -> scalar tensor``.
        run: a whole recording (the corrupted run).

    Raises:
        InputError: a metric that reads nothing of the run, fails on it, or returns no single number.
    """
    if not callable(metric):
        raise InputError(f"metric must be a function metric(run) -> number, got {type(metric).__name__}")
    seen = Reads(run.tensors)
    try:
        with torch.no_grad():
            value = metric(dataclasses.replace(run, tensors=seen))
    except InputError:
        missing = {n for n in seen.asked if n not in run.tensors}
        optional = not_computed(missing, run.config)
        if optional:
            raise OptionalAsked(optional) from None
        heads = sorted(n for n in missing if n.startswith(TASK_HEAD_POINTS))
        if heads:
            raise MissingPartError(f"the metric reads {heads}, a fine-tuned task head's outputs, and {fits(run.model)}; "
                                   "study a checkpoint with that head (e.g. a *ForSequenceClassification for "
                                   "classifier.logits), or read another point") from None
        if missing & MLM_POINTS:
            require_mlm_head(run.model, "a metric of mlm.*")
            raise InputError(f"the metric reads {sorted(missing & MLM_POINTS)}, the MLM head at the corrupted text's "
                             f"[MASK]s, but {clipped(' '.join(run.tokens), 80)} has none; put [MASK] where the metric reads "
                             "(or read another point)") from None
        raise
    except (AttributeError, TypeError) as e:  # run.sum(), run * 2, run[0]: a metric written for a tensor
        if "Recording" not in str(e):
            raise
        raise InputError(f"the metric treats the run as a tensor ({type(e).__name__}: {e}); a metric is metric(run), "
                         "run the pass's Recording read by point name, e.g. lambda run: run['mlm.logits'][0, right] - "
                         "run['mlm.logits'][0, wrong] (or iv.logit_difference(right, wrong)); a function of the MLM "
                         "logits becomes one with iv.at_masks(f)") from None
    if not isinstance(value, Tensor | float | int) or (isinstance(value, Tensor) and value.numel() != 1):
        got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise InputError(f"the metric must return one number (a tensor of one element), got {got}")
    reads = frozenset(n for n in seen.asked if n in run.tensors)
    if not reads:
        raise InputError("the metric reads no point of the run, so no patch can change it; read one by name, e.g. "
                         "run['mlm.logits'] or run['layer.6.output']")
    return reads, float(value)


def prepared(clean_text: str, corrupted_text: str, m: Model, metric: Metric, what: str, patched: Sequence[str] = ()):
    """The pair's runs and the points the metric reads (recording the optional points it asks for or are patched).

    Args:
        clean_text: the clean text.
        corrupted_text: the corrupted text.
        m: the model.
        metric: ``metric(run) -> scalar tensor``.
        what: the call, for the messages.
        patched: the points the study patches; those of :data:`OPTIONAL_POINTS` (each head's write,
            ``layer.{i}.attention.head_outputs``) are recorded too, for the clean run's values.

    Returns:
        ``(clean, corrupted, reads)``: the two runs as :func:`runs` records them, and :func:`reads_of`'s names.

    Raises:
        InputError: texts that cannot be compared, or a metric :func:`reads_of` refuses.
    """
    optional = [n for n in patched if n.rpartition(".")[2] in OPTIONAL_POINTS]
    clean, corrupted = runs(clean_text, corrupted_text, m, optional)
    try:
        reads, _ = reads_of(metric, corrupted)
    except OptionalAsked as e:  # an optional point asked for: record it and try again
        clean, corrupted = runs(clean_text, corrupted_text, m, optional + e.names)
        reads, _ = reads_of(metric, corrupted)
    if reads & MLM_POINTS and clean.mask_positions != corrupted.mask_positions:
        raise InputError(f"the clean text has [MASK] at {clean.mask_positions} and the corrupted one at "
                         f"{corrupted.mask_positions}; the metric compares the logits at the same masks")
    return clean, corrupted, reads
