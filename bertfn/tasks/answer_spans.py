"""The answer spans of a reader: from the start and end logits of each window to the best answers in the context.

transformers' ``QuestionAnsweringPipeline.postprocess``, one named step a function, in numpy and float32 as there
(so that the spans it picks among near-equal scores, and which of the zero-scored ones fill a short list, are
the pipeline's):

    softmax over the context      p_start, p_end (S,) each: the positions outside the context set to -10000 first
                                  (:func:`select_starts_ends`); p_start[0] * p_end[0] is the [CLS] ("no answer")
                                  score, then both are zeroed at [CLS]
    span scores                   P(s, e) = p_start[s] * p_end[e] for s <= e < s + max_answer_len (:func:`decode_spans`)
    characters                    a span's first and last tokens -> characters of the context, widened to whole
                                  words (:func:`span_chars`)
    over the windows              every window's best spans, the same answer text (case aside) counted once with
                                  its scores summed, the no-answer score added, best first (:func:`best_answers`)
"""

from __future__ import annotations

import numpy as np
from tokenizers import Encoding as WindowEncoding

NO_ANSWER_START = 1000000.0
"""The no-answer score before any window is read: larger than any probability, so the first window's replaces it."""


def select_starts_ends(start: np.ndarray, end: np.ndarray, allowed: np.ndarray, min_null_score: float, top_k: int,
                       handle_impossible_answer: bool, max_answer_len: int) -> tuple[np.ndarray, np.ndarray,
                                                                                     np.ndarray, float]:
    """The ``top_k`` best spans of one window, from its logits (transformers' ``select_starts_ends``).

    The logits outside ``allowed`` are set to -10000, each vector is softmaxed, the [CLS] score
    ``p_start[0] * p_end[0]`` lowers ``min_null_score`` (with ``handle_impossible_answer``), and [CLS] is taken out
    of the spans (its probabilities zeroed) before :func:`decode_spans`.

    Args:
        start: (S,) float32 start logits of the window's tokens.
        end: (S,) float32 end logits.
        allowed: (S,) bool: the tokens an answer may hold (the context's) and [CLS] (transformers' ``1 - p_mask``).
        min_null_score: the lowest no-answer score of the windows before this one.
        top_k: spans to keep, at most.
        handle_impossible_answer: read the no-answer score.
        max_answer_len: tokens per span, at most.

    Returns:
        starts (k,), ends (k,): token indices; scores (k,) float32, best first; and the no-answer score so far.
    """
    start = np.where(allowed, start, np.float32(-10000.0))  # (S,)
    end = np.where(allowed, end, np.float32(-10000.0))
    start = np.exp(start - start.max())
    start = start / start.sum()  # (S,) p_start
    end = np.exp(end - end.max())
    end = end / end.sum()  # (S,) p_end
    if handle_impossible_answer:
        min_null_score = min(min_null_score, (start[0] * end[0]).item())
    start[0] = end[0] = 0.0  # [CLS] is no span
    starts, ends, scores = decode_spans(start, end, top_k, max_answer_len, allowed)
    return starts, ends, scores, min_null_score


def decode_spans(start: np.ndarray, end: np.ndarray, top_k: int, max_answer_len: int,
                 allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best spans by ``P(s, e) = p_start[s] * p_end[e]`` (transformers' ``decode_spans``, after DrQA).

    The (S, S) outer product keeps its band ``s <= e < s + max_answer_len`` (the rest is 0); the ``top_k`` largest
    entries are taken, best first, and those whose start or end token is not ``allowed`` (or position 0, which the
    pipeline always lets through) are dropped. When the band holds fewer than ``top_k`` non-zero spans, zero-scored
    entries fill the list, as in the pipeline (they score 0 and rank last).

    Args:
        start: (S,) float32 start probabilities.
        end: (S,) float32 end probabilities.
        top_k: spans to take, at most.
        max_answer_len: tokens per span, at most.
        allowed: (S,) bool, the tokens a span may start or end at.

    Returns:
        starts (k,), ends (k,), scores (k,) float32, k <= top_k, best first.
    """
    candidates = np.tril(np.triu(np.outer(start, end)), max_answer_len - 1)  # (S, S): P(s, e) in the band
    flat = candidates.ravel()  # (S * S,)
    if top_k == 1:
        order = np.array([np.argmax(flat)])
    elif len(flat) <= top_k:  # the pipeline's argpartition needs more entries than top_k
        order = np.argsort(-flat)
    else:
        best = np.argpartition(-flat, top_k)[:top_k]
        order = best[np.argsort(-flat[best])]
    starts, ends = np.unravel_index(order, candidates.shape)
    ok = allowed.copy()
    ok[0] = True  # the pipeline's test reads position 0 as allowed whatever it is ([CLS] in every member)
    keep = ok[starts] & ok[ends]
    starts, ends = starts[keep], ends[keep]
    return starts, ends, candidates[starts, ends]


def span_chars(window: WindowEncoding, s: int, e: int, align_to_words: bool) -> tuple[int, int]:
    """The characters ``[start, end)`` of the context that tokens ``s`` to ``e`` of a window cover
    (transformers' ``get_indices``).

    With ``align_to_words`` the span is widened to the whole words that its first and last tokens belong to (a span
    that starts inside a word starts at the word), as far as the window holds them; a token of no word ([CLS])
    falls back to the tokens' own offsets, as the pipeline does.

    Args:
        window: the window's ``tokenizers`` encoding (the question, then the context: sequence 1).
        s: the span's first token.
        e: its last token.
        align_to_words: widen to whole words.
    """
    if align_to_words:
        words = window.token_to_word(s), window.token_to_word(e)
        if None not in words:
            first, last = (window.word_to_chars(w, sequence_index=1) for w in words)
            if first is not None and last is not None:
                return first[0], last[1]
    return window.offsets[s][0], window.offsets[e][1]


def best_answers(context: str, windows: list[WindowEncoding], logits: list[tuple[np.ndarray, np.ndarray]],
                 allowed: list[np.ndarray], *, top_k: int, handle_impossible_answer: bool, max_answer_len: int,
                 align_to_words: bool) -> dict | list[dict]:
    """One question's answers over the windows of its context (transformers' ``postprocess``).

    Each window gives its best ``2 top_k + 10`` spans (``top_k`` without ``align_to_words``: widening to words may
    make several spans one answer). An answer whose text equals one found before (case aside) adds its score to
    that one, which keeps its characters; with ``handle_impossible_answer`` the no-answer
    ``{"score": lowest [CLS] score of the windows, "start": 0, "end": 0, "answer": ""}`` competes too.

    Args:
        context: the context, whose characters the answers are.
        windows: the windows' ``tokenizers`` encodings.
        logits: per window, its start and end logits, (S,) float32 each.
        allowed: per window, (S,) bool: the tokens an answer may hold, and [CLS].
        top_k: answers to return, at most.
        handle_impossible_answer: let "no answer" compete.
        max_answer_len: tokens per answer, at most.
        align_to_words: widen answers to whole words.

    Returns:
        The best answer ``{"score", "start", "end", "answer"}`` when there is one answer, else a list of up to
            ``top_k``, best first; ``start`` and ``end`` index the characters of ``context``.
    """
    answers: dict[str, dict] = {}  # by their text lowercased, in the order found
    null = NO_ANSWER_START
    wanted = 2 * top_k + 10 if align_to_words else top_k  # some spans become one answer when widened to words
    for window, (start, end), ok in zip(windows, logits, allowed):
        starts, ends, scores, null = select_starts_ends(start, end, ok, null, wanted, handle_impossible_answer,
                                                        max_answer_len)
        for s, e, score in zip(starts.tolist(), ends.tolist(), scores.tolist()):
            a, b = span_chars(window, s, e, align_to_words)
            same = answers.get(context[a:b].lower())
            if same is not None:
                same["score"] += score
            else:
                answers[context[a:b].lower()] = {"score": score, "start": a, "end": b, "answer": context[a:b]}
    found = list(answers.values())
    if handle_impossible_answer:
        found.append({"score": null, "start": 0, "end": 0, "answer": ""})
    best = sorted(found, key=lambda x: x["score"], reverse=True)[:top_k]
    return best[0] if len(best) == 1 else best
