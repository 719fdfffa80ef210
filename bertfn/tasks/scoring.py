"""How likely a masked LM finds a whole text: the pseudo-log-likelihood, and whole-word targets.

A masked LM gives P(token | the rest of the text) at a [MASK], not the probability of a text. The
pseudo-log-likelihood (PLL; Salazar et al. 2020, "Masked Language Model Scoring") stands in for it:
hide each token in turn and add up the log-probabilities the model gives the true tokens,

    PLL(w) = sum_j log P(w_j | w with j masked)                                   method="original"

A word cut into pieces ("so ##uv ##lak ##i") scores too well by that rule, since each piece is easy
to guess from the others around it. The PLL-word-l2r of Kauf & Ivanova (2023, "A Better Way to Do
Masked Language Model Scoring") also hides the pieces of the same word to the right of j:

    PLL(w) = sum_j log P(w_j | w with j and the later pieces of j's word masked)  method="within_word_l2r"

The two agree on texts whose words are all single pieces. Logs are natural; [CLS] and [SEP] are
not scored. Each score comes from a *masked copy* of its text (:class:`Copies`, :func:`masked_copies`).
:func:`log_probs_reference` runs the copies as a padded batch through
:func:`~bertfn.model.encoder.encoder` and :func:`~bertfn.model.heads.mlm_head`, the definition read straight;
:func:`log_probs` gets the same numbers on fill_mask's fast path: the copies laid end to end
without padding (:func:`~bertfn.tasks.runner.per_text`), the last layer and the head only at the
one position each copy scores (tests/test_scoring.py checks that the two agree, and both against
transformers).

The same machinery scores fill_mask's whole-word targets (:func:`word_log_probs`) and its joint
filling (:mod:`bertfn.tasks.joint`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from ..checkpoint.checks import count, one_of, too_long
from ..checkpoint.model import Model
from ..checkpoint.resolve import require_mlm_head
from ..checkpoint.tokenizer import Encoding, Tokenizer, warn_texts
from ..errors import InputError, UnknownTokensWarning, clipped
from ..model.encoder import encoder
from ..model.heads import mlm_head
from ..model.recorder import NO_TRACE, Edit, Trace
from ..model.family import longest_input
from .runner import finished, loaded, per_text, texts_in
from .task import Task

METHODS = ("original", "within_word_l2r")
BATCH_SIZE = 256
"""Masked copies per encoder pass, at most (groups also stop at :data:`~bertfn.fast.batching.GROUP_TOKENS`)."""


class Copies(NamedTuple):
    """Masked copies of texts, each scoring one position: what :func:`log_probs` reads.

    Attributes:
        enc: the copies as a padded batch, input_ids / token_type_ids / attention_mask (N, S).
        lengths: (N,) real tokens in each copy.
        target: (N,) the position each copy scores.
        truth: (N,) the token id that belongs at that position.
    """

    enc: Encoding
    lengths: list[int]
    target: list[int]
    truth: list[int]


def copies_of(rows: list[list[int]], types: list[list[int]], target: list[int], truth: list[int],
              pad_id: int) -> Copies:
    """:class:`Copies` from the copies' token ids and token types.

    Args:
        rows: each copy's token ids (N lists).
        types: each copy's token types (N lists).
        target: (N,) the position each copy scores.
        truth: (N,) the token id that belongs there.
        pad_id: the id the rows are padded with.
    """
    lengths = [len(r) for r in rows]
    N, S = len(rows), max(lengths)
    input_ids = torch.full((N, S), pad_id, dtype=torch.long)  # (N, S)
    token_type_ids = torch.zeros(N, S, dtype=torch.long)
    attention_mask = torch.zeros(N, S, dtype=torch.long)
    for c, (ids, tt) in enumerate(zip(rows, types)):
        input_ids[c, :len(ids)], token_type_ids[c, :len(tt)], attention_mask[c, :len(ids)] = \
            torch.tensor(ids), torch.tensor(tt), 1
    return Copies(Encoding(input_ids, token_type_ids, attention_mask, [], []), lengths, target, truth)


def hidden_positions(word_ids: list[int | None], method: str) -> list[tuple[int, list[int]]]:
    """Which positions each copy of one text hides: ``(scored position j, the positions masked for it)``.

    "original" masks j alone; "within_word_l2r" masks j and the later pieces of the same word.

    Args:
        word_ids: the text's word index per token, None for [CLS] / [SEP] (never scored).
        method: "original" or "within_word_l2r".
    """
    scored = [j for j, w in enumerate(word_ids) if w is not None]
    if method == "original":
        return [(j, [j]) for j in scored]
    return [(j, [k for k in scored if k >= j and word_ids[k] == word_ids[j]]) for j in scored]


def masked_copies(enc: Encoding, lengths: list[int], mask_id: int, method: str, pad_id: int) -> tuple[Copies, list[int]]:
    """The masked copies that score every text of ``enc`` by ``method``, and the text each copy belongs to.

    Args:
        enc: a padded batch (B, S) with word_ids.
        lengths: (B,) real tokens per text.
        mask_id: the id of the mask token.
        method: "original" or "within_word_l2r" (:func:`hidden_positions`).
        pad_id: the id the copies are padded with.

    Returns:
        copies: the :class:`Copies`.
        owner: (N,) the index in ``enc`` of the text each copy scores.
    """
    rows, types, target, truth, owner = [], [], [], [], []
    for i, n in enumerate(lengths):
        ids, tt = enc.input_ids[i, :n].tolist(), enc.token_type_ids[i, :n].tolist()
        for j, hidden in hidden_positions(enc.word_ids[i][:n], method):
            copy = list(ids)
            for k in hidden:
                copy[k] = mask_id
            rows.append(copy), types.append(tt), target.append(j), truth.append(ids[j]), owner.append(i)
    return copies_of(rows, types, target, truth, pad_id), owner


def log_probs_reference(m: Model, copies: Copies, batch_size: int = BATCH_SIZE) -> torch.Tensor:
    """log P(truth at target) for every copy: padded batches through ``encoder`` and ``mlm_head``.

    The definition of the score, read straight (what the transformers reference does with
    ``BertForMaskedLM``: forward, log-softmax over the vocabulary, take the true token's entry).

    Args:
        m: the model (with its masked-LM head).
        copies: the masked copies to score.
        batch_size: copies per encoder pass.

    Returns:
        (N,) float32 on the CPU.
    """
    enc, out = copies.enc, []
    with torch.inference_mode():
        for start in range(0, len(copies.lengths), batch_size):
            rows = slice(start, start + batch_size)
            ids, mask, types = (t[rows].to(m.device) for t in (enc.input_ids, enc.attention_mask, enc.token_type_ids))
            h = encoder(m.params, ids, mask, types).last_hidden_state  # (b, S, H)
            target = torch.tensor(copies.target[rows], device=m.device)  # (b,)
            logits = mlm_head(m.params, h[torch.arange(len(target), device=m.device), target])  # (b, V)
            truth = torch.tensor(copies.truth[rows], device=m.device)[:, None]  # (b, 1)
            out.append(logits.float().log_softmax(dim=-1).gather(1, truth)[:, 0].cpu())  # (b,)
    return torch.cat(out)


def target_log_softmax(m: Model, copies: Copies, step: Callable[[list[int], torch.Tensor], torch.Tensor | Sequence],
                       batch_size: int = BATCH_SIZE, points: Trace = NO_TRACE) -> list | torch.Tensor:
    """Each copy's result of ``step`` on the log-softmax over the vocabulary at its target, on the fast path.

    Copies are laid end to end without padding (:func:`~bertfn.tasks.runner.per_text`); the last
    layer's attention output and feed-forward, and the MLM head, run at one position per copy.

    Args:
        m: the model (with its masked-LM head).
        copies: the masked copies to score.
        step: ``step(rows, log_softmax)`` -> one result per copy of ``rows`` (a tensor (n, ...) or a sequence of n):
            a group's copies (indices into ``copies``) and (n, V) float32 at their targets.
        batch_size: copies per encoder pass, at most.
        points: a Trace with edits (each seeing its group of copies as a padded batch's shapes).

    Returns:
        (N, ...) where ``step`` gives tensors, else a list of N results, in the order of ``copies``.
    """
    def targets(rows: list[int], ids: torch.Tensor) -> torch.Tensor:  # (n,): each copy's scored position, end to end
        starts = [0]
        for i in rows[:-1]:
            starts.append(starts[-1] + copies.lengths[i])
        return torch.tensor([s + copies.target[i] for s, i in zip(starts, rows)], device=ids.device)

    def scored(rows: list[int], where: torch.Tensor, h: torch.Tensor) -> torch.Tensor | Sequence:
        logits = mlm_head(m.params, h, points.of_rows(rows))  # (n, V): one target per copy
        return step(rows, logits.float().log_softmax(dim=-1))

    return per_text(m, copies.enc, copies.lengths, scored, batch_size=batch_size, points=points, read=targets)


def log_probs(m: Model, copies: Copies, batch_size: int = BATCH_SIZE, points: Trace = NO_TRACE) -> torch.Tensor:
    """:func:`log_probs_reference`'s numbers on the fast path (:func:`target_log_softmax`).

    Args:
        m: the model (with its masked-LM head).
        copies: the masked copies to score.
        batch_size: copies per encoder pass, at most.
        points: a Trace with edits (each seeing its group of copies as a padded batch's shapes).

    Returns:
        (N,) float32, CPU.
    """
    def truth(rows: list[int], lp: torch.Tensor) -> torch.Tensor:  # (n,): log P(truth) of each copy of the group
        return lp.gather(1, torch.tensor([copies.truth[i] for i in rows], device=lp.device)[:, None])[:, 0].cpu()

    return target_log_softmax(m, copies, truth, batch_size, points)


def score(
    texts: str | list[str],
    model: Model | str | Path | None = None,
    *,
    method: str = "original",
    batch_size: int = BATCH_SIZE,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    edits: Mapping[str, Edit] | None = None,
) -> dict | list[dict]:
    """The pseudo-log-likelihood of a text (or of each text of a list) under a masked LM.

    A text's dict:

        {"text": ..., "method": "original", "pll": -23.4, "num_tokens": 12, "pseudo_perplexity": 7.03,
         "tokens": [{"token": "when", "word": 0, "log_prob": -1.9}, ...]}

    ``pll`` is the sum of the tokens' ``log_prob`` (natural log), ``num_tokens`` how many were scored
    (every token but [CLS] and [SEP]), ``pseudo_perplexity`` = exp(-pll / num_tokens); ``word`` is the
    index of the word a token belongs to (word pieces of one word share it). Batching never changes a
    score. A text whose tokens are mostly [UNK], or that holds any [UNK] among the tokens scored
    (:func:`scored_unknown`), is warned about (once per call, naming each by its index), and its dict holds
    ``"warning": ...``. A text costs one encoder pass per token: n tokens read n copies of n tokens.

    Args:
        texts: one text, or a list of texts.
        model: as in :func:`~bertfn.tasks.fill_mask.fill_mask`.
        method: "original" (each token masked alone) or "within_word_l2r" (also mask the later pieces
            of the token's word); see the module docstring.
        batch_size: masked copies per encoder pass.
        device: as in :func:`~bertfn.tasks.fill_mask.fill_mask`.
        dtype: as in :func:`~bertfn.tasks.fill_mask.fill_mask` (``dtype="bfloat16"`` is the
            faster bf16 mode; its scores are within about 1% of fp32's, bench/README.md).
        edits: ``{point name: edit(tensor, point) -> tensor}``, as :func:`~bertfn.model.encoder.encoder`
            takes them (:mod:`bertfn.interventions` makes the usual ones); the edits see each point in the
            shape of its group's padded batch of copies (:func:`~bertfn.tasks.runner.per_text`).

    Returns:
        Per text, a dict as above; a list of texts gives a list of such dicts, in order.

    Raises:
        InputError: an unknown method, a batch_size that is not a positive integer, or a text that
            cannot be scored (:func:`check_scorable`).
        MissingPartError: a model without a tokenizer or without the masked-LM head.
    """
    texts, single, model = texts_in(texts, model, TASK)
    one_of("method", method, METHODS)
    count("batch_size", batch_size)
    m, tok, points = loaded(TASK, model, device, dtype, edits)
    require_mlm_head(m, "score")

    enc = tok(list(texts))
    lengths = enc.attention_mask.sum(dim=1).tolist()
    check_scorable(tok, enc, lengths, texts, longest_input(m.config))
    unknown = {**scored_unknown(tok, enc, lengths, texts), **enc.unknown}
    copies, owner = masked_copies(enc, lengths, tok.mask_token_id, method, tok.pad_token_id)
    lp = log_probs(m, copies, batch_size, points).tolist()

    results = [{"text": t, "method": method, "pll": 0.0, "num_tokens": 0, "pseudo_perplexity": 0.0, "tokens": []}
               for t in texts]
    for i, j, value in zip(owner, copies.target, lp):
        results[i]["tokens"].append({"token": enc.tokens[i][j], "word": enc.word_ids[i][j], "log_prob": value})
    for r in results:
        r["pll"] = math.fsum(t["log_prob"] for t in r["tokens"])
        r["num_tokens"] = len(r["tokens"])
        r["pseudo_perplexity"] = math.exp(-r["pll"] / r["num_tokens"])
    return finished(results, unknown, single)


TASK = Task("score", score, probe="a", fast=True)
"""The task (:mod:`bertfn.tasks.task`) :func:`score` is: ``bertfn score``, the corpus's ``Score``."""


def check_scorable(tok: Tokenizer, enc: Encoding, lengths: list[int], texts: list[str], limit: int) -> None:
    """:class:`InputError` for a text that cannot be scored.

    Args:
        tok: the tokenizer that made ``enc``.
        enc: the texts as a padded batch.
        lengths: real tokens per text.
        texts: the texts, for the message.
        limit: the model's positions (tokens per text at most).

    Raises:
        InputError: a text holding [MASK], too long for the model, or with no token to score (only
            characters the tokenizer drops).
    """
    for i, n in enumerate(lengths):
        if all(w is None for w in enc.word_ids[i][:n]):
            raise InputError(f"text {i} has no token to score: {clipped(texts[i], 80)} tokenizes to [CLS] [SEP] alone")
        if (enc.input_ids[i, :n] == tok.mask_token_id).any():
            raise InputError(f"text {i} holds {tok.mask_token}: {clipped(texts[i], 80)}; score reads complete texts "
                             f"(fill_mask predicts what goes behind {tok.mask_token})")
        if n > limit:
            raise too_long(f"text {i}", n, limit, "split it into shorter texts (a score of a cut text would not be "
                           "the text's score)")


def scored_unknown(tok: Tokenizer, enc: Encoding, lengths: list[int], texts: list[str]) -> dict[int, str]:
    """Warn about the texts that hold the unknown token where score scores one, though not mostly (the tokenizer
    warns about those, :attr:`~bertfn.checkpoint.tokenizer.Encoding.unknown`): ``{text index: what to say of it}``.

    A PLL adds log P([UNK]) there, and predicts every other token beside an [UNK]: a residue the vocabulary lacks
    ('J', '*', a gap for AntiBERTy) would move a chain's PLL by tens of nats, unsaid.

    Args:
        tok: the tokenizer that made ``enc``.
        enc: the texts as a padded batch.
        lengths: real tokens per text.
        texts: the texts, for the message.
    """
    said = {}
    for i, n in enumerate(lengths):
        ids, scored = enc.input_ids[i, :n].tolist(), [k for k, w in enumerate(enc.word_ids[i][:n]) if w is not None]
        where = [k for k in scored if ids[k] == tok.unk_token_id]
        if where and i not in enc.unknown:
            seen = ", ".join(repr(texts[i][slice(*enc.offsets[i][k])]) for k in where[:3])
            said[i] = (f"{len(where)} of its {len(scored)} scored tokens read as {tok.unk_token} (e.g. {seen}): its PLL "
                       f"adds the log-probability of {tok.unk_token} itself there and predicts the others beside it, so "
                       "it is not the score of the text as written; write those characters as tokens the vocabulary "
                       "holds, or leave them out")
    warn_texts(said, UnknownTokensWarning)
    return said


def word_log_probs(m: Model, enc: Encoding, lengths: list[int], where: list[tuple[int, int]],
                   words: list[tuple[int, ...]], batch_size: int = BATCH_SIZE, points: Trace = NO_TRACE) -> torch.Tensor:
    """log P(word) at each [MASK] ``where`` = (text, position) of ``enc``, for words of several pieces.

    The mask is widened to the word's k pieces and the word scored by the within-word rule, left to
    right: log P(p1 | p1..pk masked) + log P(p2 | p1, p2..pk masked) + ... + log P(pk | p1..pk-1).
    The text's other masks stay masked.

    Args:
        m: the model (with its masked-LM head and tokenizer).
        enc: the texts as a padded batch.
        lengths: real tokens per text.
        where: ``(text, position)`` of each [MASK] to score the words at.
        words: the word pieces of each word.
        batch_size: masked copies per encoder pass, at most.
        points: a Trace with edits (each seeing its group of copies as a padded batch's shapes).

    Returns:
        (len(where), len(words)) float32 on the CPU.

    Raises:
        InputError: a text with a word's pieces in place of its mask is longer than the model reads.
    """
    rows, types, target, truth = [], [], [], []
    limit = longest_input(m.config)
    for i, pos in where:
        ids, tt = enc.input_ids[i, :lengths[i]].tolist(), enc.token_type_ids[i, :lengths[i]].tolist()
        for w in words:
            if len(ids) + len(w) - 1 > limit:
                raise too_long(f"text {i} with the {len(w)} pieces of a target in place of its mask",
                               len(ids) + len(w) - 1, limit, "shorten it, or pass a target of fewer pieces")
            for c in range(len(w)):  # piece c scored; pieces before it shown, itself and the rest masked
                rows.append(ids[:pos] + list(w[:c]) + [m.tokenizer.mask_token_id] * (len(w) - c) + ids[pos + 1:])
                types.append(tt[:pos] + [tt[pos]] * len(w) + tt[pos + 1:])
                target.append(pos + c), truth.append(w[c])
    lp = log_probs(m, copies_of(rows, types, target, truth, m.tokenizer.pad_token_id), batch_size, points).tolist()
    per_word, s = [], 0  # the copies of each (mask, word) follow one another, one per piece
    for _ in where:
        for w in words:
            per_word.append(math.fsum(lp[s:s + len(w)]))
            s += len(w)
    return torch.tensor(per_word).reshape(len(where), len(words))
