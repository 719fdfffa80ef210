"""How much each input token gives to one output: integrated gradients (Sundararajan et al. 2017) or gradient x input.

    a = bertfn.interventions.token_attributions("a gripping, funny film", model, "POSITIVE")
    a.tokens            # the S word pieces, [CLS] ... [SEP]
    a.attributions      # (S,): each token's share of f(x) - f(baseline)
    a.value, a.baseline_value, a.delta

The quantity f is the target's, read from the run by :func:`bertfn.trace`'s names (:func:`target_metric`):

| the checkpoint        | target                                      | f                                           |
|-----------------------|---------------------------------------------|---------------------------------------------|
| a sequence classifier | a label's name or id                        | ``classifier.logits[0, label]``             |
| an extra head         | a label; ``head=`` names the head           | ``(W pooler + b)[0, label]``                |
| a tagger              | ``(position, label)``                       | ``classifier.logits[0, position, label]``   |
| a reader              | ``("start", position)``, ``("end", ...)``   | ``qa.start_logits[0, position]``, ``qa.end_logits[...]`` |
| a masked LM           | a token or its id; ``(mask position, token)`` | ``mlm.logits[n, token]`` at the (n-th) [MASK] |
| any                   | ``metric(run) -> scalar tensor``            | the metric, as :func:`~bertfn.interventions.sweep` takes it |

``head=`` and ``labels=`` are :func:`bertfn.classify`'s: ``head="cls.species"`` attributes a linear head the
checkpoint stores beside its own parts (:attr:`~bertfn.checkpoint.model.Model.extra_heads`: AntiBERTy's species
head, ``W tanh(W_p h_[CLS] + b_p) + b``) instead of the checkpoint's head, ``labels=`` names its outputs
(:func:`~bertfn.interventions.head_metrics.label_logit` with the same ``head`` and ``labels`` is f).

The attributions are to the word embeddings, the ``embeddings.word`` point x (S, E): positions, token types and the
attention mask stay the input's. The baseline b (:func:`baseline_ids`) is captum's BERT tutorial's: every token's row
replaced by the pad token's, the special tokens ([CLS], [SEP], ``<s>``, ``</s>``, the [MASK]s) kept. Integrated
gradients, as captum's ``LayerIntegratedGradients`` on the word-embedding layer with its default rule, summed over
the width:

    IG_s = sum_e (x - b)_{s,e} * sum_k w_k (df/dx)(b + a_k (x - b))_{s,e}

with a_k, w_k the ``steps`` Gauss-Legendre nodes and weights on [0, 1] (:func:`path_points`; captum's
``approximation_methods.gauss_legendre_builders``). The points of the path are rows of padded batches, an edit at
``embeddings.word`` putting each row on its point, run forward and backward by
:func:`~bertfn.interventions.gradients.pass_with_grad`. The attributions sum to f(x) - f(b) (completeness) up to the
rule's error, ``delta = sum_s IG_s - (f(x) - f(b))`` (captum's ``return_convergence_delta``; f(b) is the path's start,
run with the input's positions). Gradient x input: ``sum_e (df/dx)(x)_{s,e} x_{s,e}``, with no baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..checkpoint.checks import count, one_of, refuse_long
from ..checkpoint.model import Model
from ..checkpoint.resolve import fits, text_list
from ..checkpoint.tokenizer import Tokenizer
from ..errors import InputError, MissingPartError, clipped
from ..inspect.batch import padded_batch
from ..model.family import longest_input
from ..model.recorder import Point
from ..tasks.runner import finished, loaded
from .gradients import batches, pass_with_grad
from .head_metrics import entity_score, head_labels, label_index, label_logit
from .patching import Metric, at_masks

Tensor = torch.Tensor

METHODS = ("integrated_gradients", "gradient_x_input")
WORD = "embeddings.word"
"""The point attributed to: each token's row of the word-embedding table, (B, S, E)."""


@dataclass(frozen=True, repr=False)
class TokenAttributions:
    """What :func:`token_attributions` returns for one text.

    Attributes:
        tokens: the S word pieces, [CLS] ... [SEP].
        attributions: (S,) float32, each token's attribution (summed over the embedding's width).
        value: f(x), the target's value on the text.
        baseline_value: f(b) on the baseline (None for gradient x input, which has none).
        delta: ``attributions.sum() - (value - baseline_value)``: how far the sum is from complete (None for
            gradient x input).
        method: "integrated_gradients" or "gradient_x_input".
    """

    tokens: list[str]
    attributions: Tensor
    value: float
    baseline_value: float | None
    delta: float | None
    method: str

    def __repr__(self) -> str:
        """The method, f(x), f(b), delta and the five largest attributions (by size) with their positions."""
        top = self.attributions.abs().topk(min(5, len(self.tokens))).indices.tolist()
        shown = ", ".join(f"{self.tokens[s]}@{s} {self.attributions[s].item():+.3g}" for s in top)
        ends = f"f(x) {self.value:.4g}" if self.delta is None else \
            f"f(x) {self.value:.4g}, f(baseline) {self.baseline_value:.4g}, delta {self.delta:.2g}"
        return f"TokenAttributions({self.method.replace('_', ' ')} over {len(self.tokens)} tokens: {ends}; largest: {shown})"


def path_points(method: str, steps: int) -> tuple[list[float], list[float]]:
    """The points of the path each text runs at, as fractions a of the way from b to x, and their weights.

    Integrated gradients: the ``steps`` Gauss-Legendre nodes and weights, moved from [-1, 1] to [0, 1] (captum's
    ``gauss_legendre_builders``: ``a = (1 + t) / 2``, ``w = v / 2`` for numpy's ``leggauss`` nodes t and weights v),
    then x itself and b itself with weight 0 (for f(x) and f(b)). Gradient x input: x alone.

    Args:
        method: one of :data:`METHODS`.
        steps: the nodes of the rule.

    Returns:
        ``(alphas, weights)``, the last two of integrated gradients' 1.0 (x) and 0.0 (b).
    """
    if method == "gradient_x_input":
        return [1.0], [0.0]
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    return [*(0.5 * (1 + nodes)).tolist(), 1.0, 0.0], [*(0.5 * weights).tolist(), 0.0, 0.0]


def baseline_ids(ids: Tensor, mask: Tensor, tok: Tokenizer, baseline: str | int | None) -> Tensor:
    """The baseline's token ids: ``ids`` with every token but the special ones ([CLS], [SEP], [MASK]) replaced.

    Captum's BERT tutorial's ``ref_input_ids`` (``[CLS] + [PAD] * n + [SEP]``); the padding stays padding.

    Args:
        ids: (B, S) the texts' ids.
        mask: (B, S) 1 for real tokens.
        tok: the model's tokenizer.
        baseline: the token that replaces them (its text, e.g. "[MASK]", or its id); None: the pad token.

    Returns:
        (B, S).

    Raises:
        InputError: a token not in the vocabulary, or an id out of its range.
    """
    if baseline is None:
        token = tok.pad_token_id
    elif isinstance(baseline, str):
        token = tok.token_to_id(baseline)
        if token is None:
            raise InputError(f"baseline must be a token of the vocabulary (e.g. {tok.pad_token!r}, {tok.mask_token!r}) "
                             f"or its id, got {baseline!r}, which the vocabulary does not hold")
    elif isinstance(baseline, int) and not isinstance(baseline, bool) and 0 <= baseline < tok.vocab_size:
        token = baseline
    else:
        raise InputError(f"baseline must be a token (e.g. {tok.pad_token!r}), its id (0 to {tok.vocab_size - 1}) or "
                         f"None (the pad token), got {baseline!r}")
    kept = torch.tensor([i for i in (tok.cls_token_id, tok.sep_token_id, tok.mask_token_id) if i is not None])
    special = torch.isin(ids, kept) | ~mask.bool()
    return torch.where(special, ids, torch.full_like(ids, token))


def _position(value: object, S: int, tokens: list[str]) -> int:
    """A token position of the text (0 = its first token), checked."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < S:
        return value
    raise InputError(f"the target's position must be an integer from 0 to {S - 1} (the text's {S} tokens: "
                     f"{clipped(' '.join(tokens), 80)}), got {value!r}")


def target_metric(target, m: Model, tokens: list[str], ids: Tensor, head: str | None = None,
                  names: tuple[str, ...] | None = None) -> tuple[Metric, frozenset[str] | None]:
    """The target as a metric of one text's run (the module's table), and the points it reads (None: unknown).

    Args:
        target: a label, ``(position, label)``, ``("start" | "end", position)``, a token or ``(mask position,
            token)``, as the checkpoint's head says (a label, with ``head``); or ``metric(run) -> scalar tensor``.
        m: the model.
        tokens: the text's S word pieces.
        ids: (S,) its ids.
        head: an extra head's key prefix (``"cls.species"``), or None: the checkpoint's head.
        names: the sequence classifier's or the extra head's labels as ``labels=`` names them
            (:func:`~bertfn.interventions.head_metrics.head_labels`); None: the config's.

    Raises:
        InputError: a target of the wrong form for the head, a label or token it does not have, a position out of
            the text, or a masked LM's text without its [MASK].
        MissingPartError: a checkpoint with none of those heads (an encoder, a multiple-choice head), given no metric.
    """
    if callable(target):
        return target, None
    task, S = m.head.task, len(tokens)
    if head is not None:
        return label_logit(label_index(names, target), head=head, labels=names), frozenset({"pooler"})
    if task == "sequence-classification":
        return label_logit(label_index(names or m.head.labels, target), labels=names), frozenset({"classifier.logits"})
    if task == "token-classification":
        if not (isinstance(target, tuple) and len(target) == 2):
            raise InputError(f"a tagger's target is (position, label), e.g. (3, {m.head.labels[0]!r}), got {target!r}")
        position, label = _position(target[0], S, tokens), label_index(m.head.labels, target[1])
        return entity_score(label, position), frozenset({"classifier.logits"})
    if task == "question-answering":
        if not (isinstance(target, tuple) and len(target) == 2 and target[0] in ("start", "end")):
            raise InputError(f"a reader's target is ('start', position) or ('end', position), got {target!r}")
        name, position = f"qa.{target[0]}_logits", _position(target[1], S, tokens)
        return (lambda run: run[name][0, position]), frozenset({name})
    if "cls.predictions.decoder.weight" in m.params:
        masks = (ids == m.tokenizer.mask_token_id).nonzero()[:, 0].tolist()
        where, token = (target if isinstance(target, tuple) and len(target) == 2 else (None, target))
        if not masks:
            raise InputError(f"a masked LM's target is a token's logit at the text's {m.tokenizer.mask_token}, and "
                             f"{clipped(' '.join(tokens), 80)} has none; put {m.tokenizer.mask_token} where the token is read")
        if where is None and len(masks) > 1:
            raise InputError(f"the text has {m.tokenizer.mask_token} at positions {masks}; name one: (position, token)")
        if where is not None and where not in masks:
            raise InputError(f"the target's mask position must be one of {masks} (the text's "
                             f"{m.tokenizer.mask_token}s), got {where!r}")
        row = 0 if where is None else masks.index(where)  # the row of mlm.logits
        token_id = m.tokenizer.token_to_id(token) if isinstance(token, str) else token
        if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < m.config.vocab_size:
            raise InputError(f"a masked LM's target is a token of the vocabulary (e.g. {tokens[1]!r}) or its id (0 to "
                             f"{m.config.vocab_size - 1}), or (mask position, token); got {target!r}")
        return at_masks(lambda logits: logits[row, token_id]), frozenset({"mlm.logits"})
    raise MissingPartError(f"token_attributions takes a label, a position or a token as its target where the checkpoint "
                           f"has a classifier, a tagger, a reader or a masked-LM head, and {fits(m)}; give the target "
                           "as a metric of the run instead, e.g. lambda run: run['pooler'][0] @ direction")


def token_attributions(texts: str | Sequence[str], model: Model | str | Path, target, *,
                       pair: str | Sequence[str | None] | None = None, method: str = "integrated_gradients",
                       steps: int = 50, baseline: str | int | None = None, batch_size: int | None = None,
                       head: str | None = None,
                       labels: Sequence[str] | None = None) -> TokenAttributions | list[TokenAttributions]:
    """Each input token's attribution for ``target``, with respect to its word embedding (the module docstring).

    Mirrors captum's ``LayerIntegratedGradients(forward, model.embeddings.word_embeddings)`` (method
    "gausslegendre", ``return_convergence_delta=True``) and ``LayerGradientXActivation`` on that layer, each summed over
    the embedding's width; on the reference path (eager attention), the graph kept from the word embeddings up.

    Args:
        texts: one text, or several (each its own result).
        model: a loaded :class:`Model`, a folder or a hub id.
        target: what f is (the module's table): a label (a sequence classifier), ``(position, label)`` (a tagger),
            ``("start" | "end", position)`` (a reader), a token or ``(mask position, token)`` (a masked LM), or
            any ``metric(run) -> scalar tensor`` of the run's :class:`~bertfn.inspect.trace.Recording`; for several
            texts one target for all, or a list of one per text. Positions count the text's tokens from 0 ([CLS]).
        pair: a second segment (a reader's context after its question), or for several texts one per text.
        method: "integrated_gradients" or "gradient_x_input".
        steps: the points of integrated gradients' Gauss-Legendre rule (captum's ``n_steps``, default 50).
        baseline: the token whose embedding replaces each non-special token's in the baseline (its text or id);
            None: the pad token.
        batch_size: rows (points of a text's path) per pass; None: as many as
            :data:`~bertfn.interventions.gradients.MAX_TOKENS` tokens hold (each pass keeps every activation for its
            backward pass).
        head: None: the checkpoint's head; a key prefix of :attr:`~bertfn.checkpoint.model.Model.extra_heads`
            (``"cls.species"``): that linear head on the pooler's output, whose label ``target`` is; as
            :func:`bertfn.classify` takes it.
        labels: the names of the head's outputs, in order (default: the config's ``id2label``; for an extra head
            ``LABEL_0``, ``LABEL_1``, ...), as :func:`bertfn.classify` takes them.

    Returns:
        A :class:`TokenAttributions` for one text; a list of them for several.

    Raises:
        InputError: empty texts, a bad option, a text longer than the model reads, a target that does not fit
            (:func:`target_metric`), ``head`` and ``labels`` as :func:`bertfn.classify` refuses them or beside a
            metric target (which they would not change), or a ``baseline`` for gradient x input (which has none).
        MissingPartError: a model without a tokenizer, without a head the target names, or without ``head``.
    """
    texts, single = text_list(texts, "token_attributions")
    one_of("method", method, METHODS)
    count("steps", steps)
    count("batch_size", batch_size, none="as many as fit")
    targets = list(target) if isinstance(target, list) else [target] * len(texts)
    if len(targets) != len(texts) or (single and isinstance(target, list)):
        raise InputError(f"target is one for every text or a list of one per text: got {len(targets)} targets for "
                         f"{len(texts)} text{'s' * (len(texts) > 1)}")
    if baseline is not None and method == "gradient_x_input":
        raise InputError(f"baseline={baseline!r} is integrated gradients' start, and gradient x input has none; drop "
                         "baseline=, or use method='integrated_gradients'")
    if (head is not None or labels is not None) and any(callable(t) for t in targets):
        raise InputError("head= and labels= say which head a label target is read from, and a metric reads the run "
                         "itself (e.g. run['pooler']); drop head= and labels=, or give the label as the target")
    m, tok, _ = loaded("token_attributions", model)
    names = None if head is None and labels is None else head_labels(m, head, labels, "token_attributions")
    ids, types, mask, tokens = padded_batch(tok, texts, None if pair is None else [pair] if single else pair)
    lengths = [len(t) for t in tokens]
    limit = longest_input(m.config)
    refuse_long(lengths, limit)
    metrics, reads = zip(*(target_metric(t, m, tokens[i], ids[i, :lengths[i]], head, names)
                           for i, t in enumerate(targets)))
    keep = None if None in reads else set().union(*reads)
    base = baseline_ids(ids, mask, tok, baseline)
    alphas, weights = path_points(method, steps)
    table = m.params["bert.embeddings.word_embeddings.weight"]  # (V, E)

    rows = [(t, k) for t in range(len(texts)) for k in range(len(alphas))]  # (text, point of its path)
    row_lengths = [lengths[t] for t, _ in rows]
    groups = batches(row_lengths) if batch_size is None else \
        [list(range(i, min(i + batch_size, len(rows)))) for i in range(0, len(rows), batch_size)]
    summed: dict[int, Tensor] = {}  # text -> (S, E): sum_k w_k df/dx at its path's points
    ends: dict[tuple[int, float], tuple[float, Tensor, Tensor]] = {}  # (text, 1.0 | 0.0) -> f, the point, df/dx there
    for group in groups:
        which = torch.tensor([rows[r][0] for r in group])
        S = max(row_lengths[r] for r in group)
        a = torch.tensor([alphas[rows[r][1]] for r in group], device=m.device)  # (b,)
        start = table[base[which, :S].to(m.device)]  # (b, S, E): the baseline's rows of the table

        def along(x: Tensor, point: Point) -> Tensor:  # x: (b, S, E), the input's rows -> each row's point
            return torch.lerp(start.to(x.dtype), x, a[:, None, None].to(x.dtype))  # exact at a = 0 and a = 1

        out = pass_with_grad(m, ids[which, :S], types[which, :S], mask[which, :S], [tokens[t] for t in which.tolist()],
                             [metrics[t] for t in which.tolist()], [WORD], keep, {WORD: along})
        for r, g in zip(group, out):
            t, k = rows[r]
            grad = g.grads[WORD][0].float()  # (S_t, E)
            if weights[k]:
                summed[t] = summed.get(t, 0) + weights[k] * grad
            if k >= len(alphas) - (2 if method == "integrated_gradients" else 1):  # x or b themselves
                ends[t, alphas[k]] = (g.value, g.activations[WORD][0].float(), grad)
        del out

    results = []
    for t in range(len(texts)):
        value, x, grad = ends[t, 1.0]
        if method == "gradient_x_input":
            results.append(TokenAttributions(tokens[t], (grad * x).sum(-1), value, None, None, method))
            continue
        baseline_value, b, _ = ends[t, 0.0]
        attributions = ((x - b) * summed[t]).sum(-1)  # (S_t,)
        delta = attributions.sum().item() - (value - baseline_value)
        results.append(TokenAttributions(tokens[t], attributions, value, baseline_value, delta, method))
    return finished(results, None, single)
