"""text-classification: labels for each text (or text pair), shaped like transformers' ``pipeline("text-classification")``.

The whole pipeline is: tokenize (a text, or a text and its pair: ``[CLS] A [SEP] B [SEP]``) -> the encoder -> the
checkpoint's sequence classifier (:func:`~bertfn.model.task_heads.run_head`) -> a function of the logits
(:func:`class_scores`: softmax, sigmoid or none, as the config's ``problem_type`` says: :func:`default_function`)
-> labels ranked by score (:func:`ranked`). It runs on the fast path (:func:`~bertfn.tasks.runner.head_logits`:
the texts end to end, the last layer at their first tokens alone), with ``edits`` too (the last layer at every token).

Beyond the pipeline, ``head="cls.species"`` runs a linear head that a checkpoint stores beside its own parts
under any key prefix, on the pooler's output (:func:`pooled_linear_outputs`; AntiBERTy's species and chain heads:
:attr:`Model.extra_heads <bertfn.checkpoint.model.Model.extra_heads>` lists them), with ``labels=`` naming its
outputs.

A text (or pair) longer than the model reads is refused: the pipeline's model fails on it where a learned table of
positions runs out (BERT, RoBERTa), and runs on, past the lengths it was trained on, where positions are relative or
rotary (DeBERTa-v2/v3, ModernBERT, ESM-2); with
``truncation=True`` it is cut as the pipeline's ``truncation=True`` cuts it: to the tokenizer's ``model_max_length``
(the model's positions where the folder says none; :func:`~bertfn.tasks.pairs.longest_pair`), a pair by taking tokens
off the longer of its two texts ("longest_first", :func:`~bertfn.tasks.pairs.cut_pairs`).

The result's shape is the pipeline's:

| call                      | one text                  | one ``{"text", "text_pair"}`` | a list of N              |
|---------------------------|---------------------------|-------------------------------|--------------------------|
| ``top_k=1`` (the default) | ``[{"label", "score"}]``  | ``{"label", "score"}``        | N dicts, each one's best |
| ``top_k=k``, k > 1        | k dicts, best first       | k dicts, best first           | N lists of k dicts       |
| ``top_k=None``            | every label, best first   | every label, best first       | N lists of every label   |

(``top_k=1`` gives what the pipeline gives when ``top_k`` is not passed; the pipeline given ``top_k=1`` wraps each
text's dict in a list of one.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ..checkpoint.checks import count, flag, one_of, refuse_long, truncate
from ..checkpoint.model import Model
from ..checkpoint.resolve import head_labels, text_list, texts_and_model
from ..checkpoint.tokenizer import Encoding, check_text
from ..errors import InputError, syntax
from ..model.functional import linear
from ..model.family import longest_input
from ..model.heads import pooler
from ..model.recorder import NO_TRACE, Edit, Trace
from .pairs import cut_pairs, longest_pair
from .runner import finished, head_logits, loaded, per_text
from .task import Task

Tensor = torch.Tensor

DEFAULT_CLASSIFIER = "distilbert/distilbert-base-uncased-finetuned-sst-2-english"
"""The model :func:`classify` loads when given none: transformers' default for ``pipeline("text-classification")``."""

FUNCTIONS = ("softmax", "sigmoid", "none")
"""What turns a head's logits into scores: softmax over the labels, a sigmoid for each alone, or nothing."""



def default_function(problem_type: str | None, num_labels: int) -> str:
    """The function the pipeline applies when none is asked for (``TextClassificationPipeline.postprocess``).

    "none" for a regression, "sigmoid" for a multi-label classifier or a head of one output, else "softmax".

    Args:
        problem_type: ``config.problem_type`` as the file gives it (None: unsaid).
        num_labels: the head's outputs.
    """
    if problem_type == "regression":
        return "none"
    if problem_type == "multi_label_classification" or num_labels == 1:
        return "sigmoid"
    return "softmax"


def class_scores(logits: Tensor, function: str) -> Tensor:
    """Scores from a head's logits, in float32 whatever the model's dtype (the pipeline's ``sigmoid``/``softmax``).

    Args:
        logits: (N, L).
        function: one of :data:`FUNCTIONS`.

    Returns:
        (N, L) float32.
    """
    x = logits.float()  # (N, L)
    if function == "softmax":
        return x.softmax(dim=-1)
    return x.sigmoid() if function == "sigmoid" else x


def ranked(scores: list[float], labels: Sequence[str], top_k: int | None) -> dict | list[dict]:
    """One text's result from its scores (``TextClassificationPipeline.postprocess``).

    Args:
        scores: (L,) one per label.
        labels: (L,) their names.
        top_k: 1: the best label's dict; k: the k best, best first (ties keep the labels' order); None: every label,
            best first.
    """
    if top_k == 1:
        best = max(range(len(scores)), key=scores.__getitem__)
        return {"label": labels[best], "score": scores[best]}
    out = sorted(({"label": name, "score": s} for name, s in zip(labels, scores)), key=lambda d: d["score"], reverse=True)
    return out if top_k is None else out[:top_k]


def inputs_of(inputs, text_pair: str | Sequence[str] | None) -> tuple[list[str], list[str | None], str]:
    """The texts, their pairs and the input's kind, from what :func:`classify` was given.

    Args:
        inputs: a string, a dict ``{"text": ..., "text_pair": ...}`` (as the pipeline takes a pair), or a sequence of
            either.
        text_pair: one second segment for every text, a sequence of them (one per text), or None.

    Returns:
        ``(texts, pairs, kind)``: N texts, N pairs (None: the text alone, as for an empty pair ``""``, which
            transformers' tokenizer reads as none), and "text", "dict" or "list".

    Raises:
        InputError: a text or pair that is no string, a dict with other keys or no text, pairs that do not fit the
            texts.
    """
    kind = "text" if isinstance(inputs, str) else "dict" if isinstance(inputs, Mapping) else "list"
    if kind != "list":
        items = [inputs]
    elif isinstance(inputs, (list, tuple)) and any(isinstance(i, Mapping) for i in inputs):
        items = list(inputs)
    else:
        items, _ = text_list(inputs, "classify", blank=True)  # a sequence of strings (numpy's str_ become str), checked
    texts: list[str] = []
    pairs: list[str | None] = []
    for i, item in enumerate(items):
        if isinstance(item, Mapping):
            unknown = set(item) - {"text", "text_pair"}
            if "text" not in item or unknown:
                raise InputError(f"item {i} is a dict with the keys {sorted(item)}; a pair is written "
                                 '{"text": ..., "text_pair": ...} (text_pair may be left out)')
            texts.append(item["text"])
            pairs.append(item.get("text_pair"))
        else:
            texts.append(item)
            pairs.append(None)
    if text_pair is not None:
        if any(p is not None for p in pairs):
            raise InputError("pass text_pair= or dicts holding text_pair, not both")
        given = [text_pair] * len(texts) if isinstance(text_pair, str) else list(text_pair)
        if len(given) != len(texts):
            raise InputError(f"got {len(texts)} texts but {len(given)} pairs ({syntax(python='text_pair=', cli='--pair')}); "
                             "pass one (every text's pair) or one per text")
        pairs = given
    for i, (t, p) in enumerate(zip(texts, pairs)):
        for what, s in (("text", t), ("text_pair", p)):
            if s is None and what == "text_pair":
                continue
            check_text(s, f"{what} {i}")  # "" and "   " are classified, as the pipeline does: [CLS] [SEP]
    # an empty pair is none: transformers' fast tokenizer reads a falsy text_pair as no pair ([text] alone)
    return texts, [p or None for p in pairs], kind


def pooled_linear_outputs(m: Model, enc: Encoding, lengths: list[int], head: str, batch_size: int,
                          points: Trace = NO_TRACE) -> Tensor:
    """A linear head stored under ``head`` on the pooler's output, per text, on the fast path.

    Mirrors AntiBERTy's ``AntiBERTyHeads`` (``self.species(pooled_output)``): ``W tanh(W_p h_[CLS] + b_p) + b``.
    The encoder's last layer runs at each text's first token alone (:func:`~bertfn.tasks.runner.per_text`).

    Args:
        m: the model (reads ``bert.pooler.dense.*``, ``{head}.weight`` (n, H) and ``{head}.bias`` (n,)).
        enc: the texts as a padded batch.
        lengths: each text's tokens.
        head: the head's key prefix, one of ``m.extra_heads``.
        batch_size: texts per group at most.
        points: a Trace with edits (of the encoder's points and ``pooler``).

    Returns:
        (N, n) logits, row i text i's.
    """
    w, b = m.state[f"{head}.weight"], m.state[f"{head}.bias"]  # (n, H), (n,)

    def firsts(rows: list[int], ids: Tensor) -> Tensor:  # (b,): where each text of the group starts, end to end
        return torch.tensor([0, *[lengths[i] for i in rows[:-1]]], device=ids.device).cumsum(0)

    def step(rows: list[int], _, h: Tensor) -> Tensor:  # h: (b, H) at each [CLS] -> (b, n)
        return linear(pooler(m.params, h[:, None], points.of_rows(rows)), w, b)

    return per_text(m, enc, lengths, step, batch_size=batch_size, points=points, read=firsts)


def classify(
    inputs: str | Mapping[str, str] | Sequence[str | Mapping[str, str]],
    model: Model | str | Path | None = None,
    *,
    text_pair: str | Sequence[str] | None = None,
    top_k: int | None = 1,
    function_to_apply: str | None = None,
    truncation: bool = False,
    batch_size: int = 32,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    edits: Mapping[str, Edit] | None = None,
    head: str | None = None,
    labels: Sequence[str] | None = None,
) -> dict | list:
    """Label each text (or text pair) with the model's sequence classifier.

    Mirrors ``transformers.pipeline("text-classification")`` (its results' shapes: the module docstring's table).
    A text whose tokens are mostly [UNK] is warned about, and its dicts hold ``"warning"`` too.

    Args:
        inputs: a text, a pair ``{"text": ..., "text_pair": ...}``, or a list of either.
        model: a loaded :class:`Model`, a local folder or a hub id, with a sequence classifier (a
            ``*ForSequenceClassification`` checkpoint), or with the extra head ``head`` names (default:
            :data:`DEFAULT_CLASSIFIER`, SST-2's sentiment).
        text_pair: the second segment of every text (one string), or of each (a list, one per text).
        top_k: 1: the best label's dict per text; k: the k best labels per text, best first; None: every label,
            best first.
        function_to_apply: "softmax", "sigmoid" or "none" (:data:`FUNCTIONS`); None: as the pipeline picks it
            (:func:`default_function`: none for a regression, sigmoid for multi-label or one output, else softmax).
        truncation: cut a text (or pair) longer than the model reads, as the pipeline's ``truncation=True`` does (the
            module docstring); False: refuse it.
        batch_size: texts per encoder pass, at most.
        device: where the model runs (:func:`~bertfn.checkpoint.resolve.get_model`).
        dtype: the precision it runs in (the scores are float32 whatever it is).
        edits: ``{point name: edit(tensor, point) -> tensor}`` (:mod:`bertfn.interventions`); the edits see each
            point in the shape of its group's padded batch, and edits of the head's points (``pooler``,
            ``classifier.logits``) apply too.
        head: None: the checkpoint's classifier; a key prefix of :attr:`Model.extra_heads`
            (``"cls.species"``): that linear head on the pooler's output, whose logits are no named point.
        labels: the names of the head's outputs, in order (default: the config's ``id2label``; for an extra
            head ``LABEL_0``, ``LABEL_1``, ...).

    Returns:
        As the pipeline: for one text, ``[{"label": str, "score": float}]`` (for one dict, the dict alone); for a
            list, one dict per text; with another ``top_k`` a list of dicts per text (see the module docstring).

    Raises:
        InputError: a text that is no string, a bad option, a text longer than the model reads (without
            ``truncation``); an empty or blank text is classified, as the pipeline classifies ``[CLS] [SEP]``.
        MissingPartError: a model without a tokenizer, without a sequence classifier, or without ``head``.
    """
    inputs, model = texts_and_model(inputs, model, "classify")
    texts, pairs, kind = inputs_of(inputs, text_pair)
    count("top_k", top_k, none="every label")
    function_to_apply = function_to_apply.lower() if isinstance(function_to_apply, str) else function_to_apply
    if function_to_apply is not None:
        one_of("function_to_apply", function_to_apply, FUNCTIONS)
    flag("truncation", truncation)
    count("batch_size", batch_size)

    m, tok, points = loaded(TASK, model, device, dtype, edits)
    names = head_labels(m, head, labels, "classify")
    function = default_function(m.config.problem_type, m.config.num_labels) if head is None \
        else default_function(None, m.extra_heads[head])
    function = function_to_apply or function

    results: list = [None] * len(texts)
    unknown: dict[int, str] = {}
    limit = longest_pair(m) if truncation else longest_input(m.config)  # truncation: model_max_length, as transformers
    for paired in (False, True):  # texts alone, then pairs: one padded batch each
        rows = [i for i, p in enumerate(pairs) if (p is not None) == paired]
        if not rows:
            continue
        firsts, seconds = [texts[i] for i in rows], [pairs[i] for i in rows] if paired else None
        enc = tok(firsts, seconds)
        unknown.update({rows[j]: said for j, said in (enc.unknown or {}).items()})
        lengths = enc.attention_mask.sum(dim=1).tolist()
        if not truncation:
            refuse_long(lengths, limit, truncate("to cut it as transformers' pipeline does"),
                        named=lambda j: f"text {rows[j]}", paired=paired)
        elif max(lengths) > limit:
            enc = cut_pairs(tok, firsts, seconds, limit, "longest_first")
            lengths = enc.attention_mask.sum(dim=1).tolist()
        if head is None:
            logits = torch.stack(head_logits(m, enc, lengths, "sequence-classification", batch_size=batch_size,
                                             points=points))  # (b, L)
        else:
            logits = pooled_linear_outputs(m, enc, lengths, head, batch_size, points)  # (b, L)
        scores = class_scores(logits, function).tolist()  # (b, L)
        for i, row in zip(rows, scores):
            results[i] = ranked(row, names, top_k)
    out = finished(results, unknown, kind != "list")
    return [out] if kind == "text" and top_k == 1 else out  # the pipeline's list of one for one text's best label


TASK = Task("classify", classify, probe="a", inputs=("text", "text_pair"), optional=("text_pair",), fast=True,
            model=DEFAULT_CLASSIFIER)
"""The task (:mod:`bertfn.tasks.task`) :func:`classify` is: ``bertfn classify``, the corpus's ``Classify``."""
