"""The gradient of a metric with respect to any point of the pass, with the points' values, in one call.

    g = bertfn.interventions.gradients(text, model, metric, ["layer.*.output", "layer.3.attention.probs"])
    g.value                                     # the metric
    g.activations["layer.3.output"]             # (1, S, H): what the pass computed there
    g.grads["layer.3.output"]                   # (1, S, H): d metric / d that tensor

A *metric* is a function of the run, ``metric(run) -> scalar tensor``, where ``run`` is the pass's
:class:`~bertfn.inspect.trace.Recording` (``run["mlm.logits"]``: the MLM logits at the text's masks,
(N, V); ``run["layer.6.output"]``: (1, S, H); any name :func:`bertfn.trace` records). This is what
attribution methods beyond patching need: gradient x activation is ``g.grads[n] * g.activations[n]``;
integrated gradients averages ``grads`` over inputs scaled from a baseline, which ``edits=`` sets up
(docs/guides/interventions.md shows both). The pass is the reference one (eager attention), the graph
starting at the word embeddings, so that a gradient with respect to any point is its total derivative:
every path from that point to the metric, through the layers above.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from ..checkpoint.model import Model
from ..checkpoint.resolve import text_list
from ..errors import InputError
from ..inspect.batch import checkpoint_head, padded_batch, text_tensors
from ..inspect.trace import Recording
from ..model.encoder import encoder
from ..model.heads import mlm_head
from ..model.point_names import point_names
from ..model.recorder import OPTIONAL_POINTS, Edits, Point, Trace, check_edits, merge_edits
from ..tasks.runner import finished, loaded
from .copies import Kept
from .pairs import OptionalAsked, Reads, not_computed
from .patching import Metric

Tensor = torch.Tensor


class Gradients(NamedTuple):
    """What :func:`gradients` returns for one text.

    Attributes:
        value: the metric of the run.
        activations: each point's tensor, as :func:`bertfn.trace` records it ((1, S, ...); detached).
        grads: d metric / d each point's tensor, of the same shape.
        run: the whole run as a Recording (the points the metric read and those asked for).
    """

    value: float
    activations: dict[str, Tensor]
    grads: dict[str, Tensor]
    run: Recording


def resolve_names(names: str | Sequence[str], config) -> list[str]:
    """Point names and patterns (``*``) as the full names they match, in the pass's order.

    Args:
        names: a name or pattern, or several.
        config (BertConfig): the model's config.

    Raises:
        InputError: a name or pattern that matches no point.
    """
    names = [names] if isinstance(names, str) else list(names)
    check_edits(dict.fromkeys(names, lambda x, point: x), config)  # each must match a point, with a hint if not
    return [n for n in point_names(config, optional=True) if any(fnmatch.fnmatchcase(n, p) for p in names)]


MAX_TOKENS = 4096
"""How many tokens (texts x the longest's length) one padded batch of :func:`run_with_grad` holds: its
pass keeps every activation for the backward pass (on bert-base's shape about 0.3 MB a token)."""


def batches(lengths: list[int]) -> list[list[int]]:
    """The texts (by index, in order) cut into consecutive padded batches of at most :data:`MAX_TOKENS` tokens.

    Args:
        lengths: each text's number of tokens.
    """
    out: list[list[int]] = []
    for i, n in enumerate(lengths):
        group = out[-1] if out else None
        if group is None or (len(group) + 1) * max(n, *(lengths[j] for j in group)) > MAX_TOKENS:
            out.append([i])
        else:
            group.append(i)
    return out


def run_with_grad(m: Model, texts: list[str], metric: Metric, names: list[str], *, keep: set[str] | None = None,
                  edits: Edits | None = None) -> list[Gradients]:
    """Texts as padded batches with the graph kept, each text's metric backward, and the gradients at ``names``.

    The metrics of a batch's texts are summed before the backward pass; a text's metric depends on its own
    rows alone (padding is masked out of attention), so each text's gradients are those of its own metric.
    Each text's tensors are cut from the batch as :class:`~bertfn.inspect.trace.Recordings` cuts them.

    Args:
        m: the model.
        texts: the texts.
        metric: ``metric(run) -> scalar tensor``.
        names: full point names to hold (from :func:`resolve_names`).
        keep: the points to record for the metric (None: all of them).
        edits: edits of the pass (applied before the gradients are taken); they see the padded batch.

    Returns:
        One :class:`Gradients` per text, in order.

    Raises:
        InputError: a metric that returns no scalar, or does not depend on the pass.
    """
    lengths = [len(t) for t in m.tokenizer(list(texts)).tokens]
    return [g for group in batches(lengths) for g in _batch_with_grad(m, [texts[i] for i in group], metric, names,
                                                                       keep, edits)]


def _batch_with_grad(m: Model, texts: list[str], metric: Metric, names: list[str], keep: set[str] | None,
                     edits: Edits | None) -> list[Gradients]:
    """:func:`run_with_grad` on one padded batch."""
    ids, types, mask, tokens = padded_batch(m.tokenizer, texts, None)
    return pass_with_grad(m, ids, types, mask, tokens, [metric] * len(texts), names, keep, edits)


def pass_with_grad(m: Model, ids: Tensor, types: Tensor, mask: Tensor, tokens: list[list[str]], metrics: list[Metric],
                   names: list[str], keep: set[str] | None = None, edits: Edits | None = None) -> list[Gradients]:
    """One padded batch, already tokenized, with the graph kept; row b's ``metrics[b]`` backward; the gradients at
    ``names``, each row's its own (as :func:`run_with_grad`'s).

    Args:
        m: the model.
        ids: (B, S) token ids (:func:`~bertfn.inspect.batch.padded_batch`'s, e.g. texts with their second
            segments, or rows of one text repeated).
        types: (B, S) token types.
        mask: (B, S) 1 for real tokens.
        tokens: each row's word pieces, without the padding.
        metrics: B metrics, ``metrics[b](run)`` of row b's run.
        names: full point names to hold.
        keep: the points to record for the metrics (None: all of them).
        edits: edits of the pass; they see the padded batch.
    """
    ids, mask = ids.to(m.device), mask.to(m.device)  # (B, S)
    optional = [n for n in set(names) | (keep or set()) if n.rpartition(".")[2] in OPTIONAL_POINTS]
    try:
        return _pass(m, ids, types, mask, tokens, metrics, names, keep, edits, optional)
    except OptionalAsked as e:  # the metric read each head's write, which a pass computes only when asked: ask
        return _pass(m, ids, types, mask, tokens, metrics, names, keep, edits, optional + e.names)


def _pass(m: Model, ids: Tensor, types: Tensor, mask: Tensor, tokens: list[list[str]], metrics: list[Metric],
          names: list[str], keep: set[str] | None, edits: Edits | None, optional: list[str]) -> list[Gradients]:
    """:func:`pass_with_grad`'s pass, computing the optional points ``optional`` too.

    Raises:
        OptionalAsked: a metric read optional points not in ``optional``.
    """
    held: dict[str, Tensor] = {}

    def start(x: Tensor, point: Point) -> Tensor:  # the graph starts here: the weights need no gradient
        return x.detach().requires_grad_(True)

    def hold(x: Tensor, point: Point) -> Tensor:
        x.retain_grad()
        held[point.name] = x
        return x

    wanted = set(names) | (keep or set()) | set(optional)
    store = {} if keep is None else Kept(wanted)
    own = merge_edits(check_edits(edits, m.config), {"embeddings.word": start}, dict.fromkeys(names, hold))
    record = Trace(store, edits=own, optional=optional)
    lengths = mask.sum(dim=1).tolist()
    chunk = m.config.chunk_size_feed_forward
    with torch.enable_grad():
        out = encoder(m.params, ids, mask, types.to(m.device), impl="eager", trace=record)
        where = ((ids == m.tokenizer.mask_token_id) & mask.bool()).nonzero()  # (N, 2): (text, position)
        if len(where) and "cls.predictions.decoder.weight" in m.params:
            mlm_head(m.params, out.last_hidden_state[where[:, 0], where[:, 1]], trace=record)  # (N, V)
        checkpoint_head(m, out.last_hidden_state, mask, record)  # a classifier's, a tagger's, a reader's points
        rows = [(b, p) for b, p in where.tolist()]

        def run(b: int, tensors: dict[str, Tensor]) -> Recording:  # text b's part of the batch
            return Recording(tokens[b], ids[b:b + 1, :lengths[b]], [p for t, p in rows if t == b],
                             text_tensors(tensors, b, lengths[b], rows, chunk), m.config, m)

        values = [_value(metric, run(b, record.store)) for b, metric in enumerate(metrics)]
        for value in values:
            if not isinstance(value, Tensor) or value.numel() != 1:
                got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
                raise InputError(f"the metric must return one number as a tensor (e.g. run['mlm.logits'][0, 5]), "
                                 f"got {got}")
            if not value.requires_grad:
                raise InputError("the metric does not depend on the pass (its value has no gradient); read a point "
                                 "of the run, e.g. run['mlm.logits'][0, right] - run['mlm.logits'][0, wrong]")
        torch.stack([v.reshape(()) for v in values]).sum().backward()
    grads = {n: held[n].grad if held[n].grad is not None else torch.zeros_like(held[n]) for n in names}
    values_at = {n: held[n].detach() for n in names}
    detached = {k: v.detach() for k, v in record.store.items()}
    return [Gradients(values[b].item(), run(b, values_at).tensors, run(b, grads).tensors, run(b, detached))
            for b in range(len(metrics))]


def _value(metric: Metric, run: Recording):
    """``metric(run)``, saying which optional points it read that the pass did not compute.

    Raises:
        OptionalAsked: the metric read optional points (:data:`~bertfn.model.recorder.OPTIONAL_POINTS`) the run lacks.
    """
    seen = Reads(run.tensors)
    try:
        return metric(dataclasses.replace(run, tensors=seen))
    except InputError:
        missing = not_computed({n for n in seen.asked if n not in run.tensors}, run.config)
        if missing:
            raise OptionalAsked(missing) from None
        raise


def gradients(texts: str | Sequence[str], model: Model | str | Path, metric: Metric, names: str | Sequence[str], *,
              edits: Edits | None = None) -> Gradients | list[Gradients]:
    """The gradient of ``metric`` with respect to the points ``names`` (and their values), in one call.

    Args:
        texts: one text, or several (run as padded batches of up to :data:`MAX_TOKENS` tokens; each
            text's metric, values and gradients are its own).
        model: a loaded :class:`Model`, a folder or a hub id.
        metric: ``metric(run) -> scalar tensor``, ``run`` the pass's Recording (e.g.
            :func:`~bertfn.interventions.logit_difference`).
        names: point names or patterns (``"layer.*.output"``), as :func:`bertfn.trace` records them.
        edits: edits of the pass, e.g. inputs scaled from a baseline for integrated gradients.

    Returns:
        :class:`Gradients` for one text; a list of them for several.

    Raises:
        InputError: empty texts, names that match no point, a metric that returns no scalar or reads
            nothing of the pass.
        MissingPartError: a model without a tokenizer.
    """
    texts, single = text_list(texts, "gradients")
    m = loaded("gradients", model).model
    full = resolve_names(names, m.config)
    out = run_with_grad(m, texts, metric, full, edits=edits)
    return finished(out, None, single)
