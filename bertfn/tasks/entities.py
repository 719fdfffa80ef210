"""From each token's label scores to entities: the aggregation strategies of transformers' token-classification
pipeline (``TokenClassificationPipeline.aggregate`` and the methods it calls), one function per step.

    tokens' scores --best label--> token entities ............................ "none" (the result)
                   --best label--> token entities --group_entities--> groups .... "simple"
                   --word_entities (first | average | max)--> words --group_entities--> groups

A *token* here is :class:`PreEntity` (``gather_pre_entities``' dict): its token string, its label scores (L,), its
character span and whether it continues the word before it. ``first``, ``average`` and ``max`` first make the tokens
of a word agree on one label (the first token's, the best of the averaged scores, the most confident token's);
:func:`group_entities` then joins neighbours of the same entity type, where a ``B-`` label starts a new group.
:func:`merge_windows` keeps one entity per place where the overlapping windows of a long text found several.

``decode`` is the tokenizer's ``convert_tokens_to_string`` (:func:`bertfn.tasks.tag.tokens_to_string`): a group's or a
word's ``"word"`` is its tokens (or their words) joined by it, as the pipeline writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

Tensor = torch.Tensor

STRATEGIES = ("none", "simple", "first", "average", "max")
"""transformers' ``AggregationStrategy`` values: how tokens become entities."""


class PreEntity(NamedTuple):
    """One token of a text as the strategies read it (the pipeline's ``pre_entity`` dict).

    Attributes:
        word: the token as the vocabulary spells it (``"##ing"``, ``"Ġworld"``, ``"▁Paris"``), or, for the unknown
            token, the text it stands for.
        scores: (L,) float32, the softmax of its logits over the L labels.
        start: its first character in the text.
        end: the character after its last.
        index: its position in the encoder's input ([CLS] or <s> is 0).
        is_subword: it continues the word of the token before it (:func:`bertfn.tasks.tag.is_subword`).
    """

    word: str
    scores: Tensor
    start: int
    end: int
    index: int
    is_subword: bool


def token_entities(tokens: list[PreEntity], labels: tuple[str, ...]) -> list[dict]:
    """Each token's best label: ``aggregate``'s loop for the "none" and "simple" strategies.

    Args:
        tokens: a window's tokens.
        labels: the label of each of the L scores (``id2label``).

    Returns:
        One ``{"entity", "score", "index", "word", "start", "end"}`` per token.
    """
    out = []
    for t in tokens:
        best = int(t.scores.argmax())  # the first of equal maxima, as numpy's argmax
        out.append({"entity": labels[best], "score": float(t.scores[best]), "index": t.index, "word": t.word,
                    "start": t.start, "end": t.end})
    return out


def word_entity(tokens: list[PreEntity], strategy: str, labels: tuple[str, ...],
                decode: Callable[[list[str]], str]) -> dict:
    """One word's label from its tokens (``aggregate_word``).

    first: the first token's best label and its score. max: the best label of the token whose best score is the
    highest (the first such token). average: the best of the L scores averaged over the tokens (NaN ignored).

    Args:
        tokens: the word's tokens, in order (the first is not a subword).
        strategy: "first", "average" or "max".
        labels: the label of each score.
        decode: the tokenizer's ``convert_tokens_to_string``.

    Returns:
        ``{"entity", "score", "word", "start", "end"}``, its span from the first token's start to the last one's end.
    """
    if strategy == "first":
        scores = tokens[0].scores
    elif strategy == "max":
        scores = max(tokens, key=lambda t: float(t.scores.max())).scores
    else:
        scores = torch.stack([t.scores for t in tokens]).nanmean(dim=0)  # (L,)
    best = int(scores.argmax())
    return {"entity": labels[best], "score": float(scores[best]), "word": decode([t.word for t in tokens]),
            "start": tokens[0].start, "end": tokens[-1].end}


def word_entities(tokens: list[PreEntity], strategy: str, labels: tuple[str, ...],
                  decode: Callable[[list[str]], str]) -> list[dict]:
    """The words of a window, each with one label (``aggregate_words``): a word is a token that is no subword and
    the subwords after it; a window's first token starts a word whatever it is.

    Args:
        tokens: a window's tokens.
        strategy: "first", "average" or "max" (:func:`word_entity`).
        labels: the label of each score.
        decode: the tokenizer's ``convert_tokens_to_string``.

    Returns:
        One :func:`word_entity` per word.
    """
    words: list[list[PreEntity]] = []
    for t in tokens:
        if words and t.is_subword:
            words[-1].append(t)
        else:
            words.append([t])
    return [word_entity(w, strategy, labels, decode) for w in words]


def split_tag(label: str) -> tuple[str, str]:
    """``"B-PER"`` -> ``("B", "PER")``, ``"I-PER"`` -> ``("I", "PER")``; a label without either prefix continues
    (``"PER"`` -> ``("I", "PER")``, ``"O"`` -> ``("I", "O")``). Mirrors ``get_tag``.

    Args:
        label: an entity label.
    """
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label


def entity_group(entities: list[dict], decode: Callable[[list[str]], str]) -> dict:
    """Neighbouring entities of one type as one (``group_sub_entities``).

    Args:
        entities: the members, in order, each with ``"entity"``, ``"score"``, ``"word"``, ``"start"``, ``"end"``.
        decode: the tokenizer's ``convert_tokens_to_string``, which joins the members' words.

    Returns:
        ``{"entity_group", "score", "word", "start", "end"}``: the first member's label after its first ``-``
            (``"B-PER"`` -> ``"PER"``), the members' mean score (NaN ignored), their span.
    """
    return {"entity_group": entities[0]["entity"].split("-", 1)[-1],
            "score": float(torch.tensor([e["score"] for e in entities]).nanmean()),
            "word": decode([e["word"] for e in entities]),
            "start": entities[0]["start"], "end": entities[-1]["end"]}


def group_entities(entities: list[dict], decode: Callable[[list[str]], str]) -> list[dict]:
    """Join each run of neighbours that have one entity type and where no member but the first is ``B-``
    (``group_entities``): ``B-PER I-PER I-PER`` is one group, ``B-PER B-PER`` two.

    Args:
        entities: token or word entities, in order.
        decode: the tokenizer's ``convert_tokens_to_string``.

    Returns:
        One :func:`entity_group` per run.
    """
    runs: list[list[dict]] = []
    for e in entities:
        bi, tag = split_tag(e["entity"])
        if runs and bi != "B" and tag == split_tag(runs[-1][-1]["entity"])[1]:
            runs[-1].append(e)
        else:
            runs.append([e])
    return [entity_group(r, decode) for r in runs]


def aggregate(tokens: list[PreEntity], strategy: str, labels: tuple[str, ...],
              decode: Callable[[list[str]], str]) -> list[dict]:
    """A window's entities by ``strategy`` (``aggregate``), before ``ignore_labels`` leaves some out.

    Args:
        tokens: the window's tokens.
        strategy: one of :data:`STRATEGIES`.
        labels: the label of each score.
        decode: the tokenizer's ``convert_tokens_to_string``.

    Returns:
        "none": :func:`token_entities`; the others: :func:`group_entities` of the tokens' or the words' entities.
    """
    if strategy in ("none", "simple"):
        entities = token_entities(tokens, labels)
    else:
        entities = word_entities(tokens, strategy, labels, decode)
    return entities if strategy == "none" else group_entities(entities, decode)


def merge_windows(entities: list[dict]) -> list[dict]:
    """One entity per place, from the entities of a text's overlapping windows (``aggregate_overlapping_entities``).

    Sorted by start (stably: the earlier window first); an entity that starts inside the one kept before it
    replaces it when it is longer, or as long and more confident, and is dropped otherwise.

    Args:
        entities: every window's entities, windows in order.

    Returns:
        The entities kept, by start.
    """
    kept: list[dict] = []
    for e in sorted(entities, key=lambda e: e["start"]):
        last = kept[-1] if kept else None
        if last is not None and last["start"] <= e["start"] < last["end"]:
            length, last_length = e["end"] - e["start"], last["end"] - last["start"]
            if length > last_length or length == last_length and e["score"] > last["score"]:
                kept[-1] = e
        else:
            kept.append(e)
    return kept
