"""fill-mask: predict the words behind ``[MASK]``, shaped like transformers' ``pipeline("fill-mask")``.

The whole pipeline is: tokenize -> :func:`~bertfn.model.encoder.encoder` -> take the hidden states at
the ``[MASK]`` positions -> :func:`~bertfn.model.heads.mlm_head` -> softmax -> top k. It runs on the
fast path: the texts of a batch sorted by length and laid end to end without padding
(:func:`~bertfn.tasks.runner.per_text`), the same numbers as a padded batch gives.
Beyond transformers' pipeline, and each in its own module: targets of several word pieces scored as
whole words (:func:`bertfn.tasks.scoring.word_log_probs`), and all the masks of a text filled
together (``joint=True``, :mod:`bertfn.tasks.joint`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path

import torch

from ..checkpoint.checks import count, flag, refuse_long, truncate
from ..checkpoint.model import Model
from ..checkpoint.resolve import require_mlm_head
from ..checkpoint.tokenizer import Encoding, Tokenizer, check_text
from ..checkpoint.tokenizer_files import other_spelling
from ..errors import InputError, clipped, syntax
from ..model.family import longest_input
from ..model.heads import mlm_head
from ..model.recorder import Edit
from .joint import joint_fill
from .runner import finished, loaded, per_text, texts_in
from .scoring import word_log_probs
from .task import Task


def target_pieces(model: Model, targets: str | list[str]) -> list[tuple[int, ...]]:
    """The word pieces of each of ``targets``: one id for a vocabulary entry, several for a longer word.

    A target that is a vocabulary entry is used as is. Otherwise it is tokenized: one piece stands
    for it with a warning (e.g. "Red" -> "red" in a lowercasing vocabulary), as in transformers;
    several pieces (e.g. "tiramisu" -> "ti ##ram ##is ##u" in bert-base-uncased) make a whole-word target that
    :func:`fill_mask` scores as a whole (transformers would use its first piece alone), with a warning where
    a piece is the unknown token (``"é"`` -> ``▁ <unk>`` in a SentencePiece vocabulary without é). A target
    that tokenizes to nothing is skipped with a warning. Duplicates count once.

    Args:
        model: the loaded model whose tokenizer reads the targets.
        targets: one word or word piece, or a list of them.

    Returns:
        Each target's word-piece ids, in order, duplicates and skipped targets left out.

    Raises:
        InputError: no targets, or none left after skipping.
    """
    if not isinstance(targets, (str, list, tuple)):
        raise InputError(f"targets must be a string or a list of strings, got {type(targets).__name__}")
    targets = [targets] if isinstance(targets, str) else list(targets)
    if not targets:
        raise InputError("targets is empty; pass at least one word, or targets=None to rank the whole vocabulary")
    tok = model.tokenizer
    pieces: list[tuple[int, ...]] = []
    for n, t in enumerate(targets):
        check_text(t, f"target {n}")
        i = tok.token_to_id(t)
        word = (i,) if i is not None else tuple(tok.backend.encode(t, add_special_tokens=False).ids)
        if not word:
            warnings.warn(f"target {t!r} is not in the vocabulary and tokenizes to nothing; skipped", stacklevel=3)
            continue
        if i is None and len(word) == 1:
            warnings.warn(f"target {t!r} is not in the vocabulary; using its word piece "
                          f"{tok.id_to_token(word[0])!r} instead", stacklevel=3)
        elif i is None and tok.unk_token_id in word:  # a whole word scored with [UNK] for what the vocabulary lacks
            shown = ", ".join(repr(tok.id_to_token(p)) for p in word)
            warnings.warn(f"target {t!r} is not in the vocabulary and its word pieces {shown} hold "
                          f"{tok.unk_token}, so it is scored as those pieces, not as the word; pass words the "
                          "vocabulary spells", stacklevel=3)
        if word not in pieces:
            pieces.append(word)
    if not pieces:
        raise InputError(f"none of the targets {targets!r} maps to a vocabulary entry; pass whole words "
                         "or word pieces of the model's vocabulary")
    return pieces


def missing_mask(tok: Tokenizer, i: int, text: str) -> InputError:
    """The error for text ``i``, which holds no mask token of ``tok``: what to put in, and, when the text holds
    the other spelling, whose spelling that is (:func:`~bertfn.checkpoint.tokenizer_files.other_spelling`)."""
    mask = tok.mask_token
    return InputError(f"text {i} has no {mask} token: {clipped(text, 80)}; {other_spelling(mask, text)}put {mask} "
                      "where the word to predict goes")


def require_masks(tok: Tokenizer, texts: list[str]) -> None:
    """Raise :class:`InputError` for the first of ``texts`` that holds no mask token of ``tok`` (:func:`missing_mask`).

    The tokenizer decides, as in :func:`fill_mask`: a lowercasing one still reads ``[MASK]`` as the mask token.

    Args:
        tok: the model's tokenizer.
        texts: the texts to fill.
    """
    for i, encoded in enumerate(tok.backend.encode_batch(list(texts))):  # the ids alone: fill_mask warns about the texts
        if tok.mask_token_id not in encoded.ids:
            raise missing_mask(tok, i, texts[i])


def fill_mask(
    inputs: str | list[str],
    model: Model | str | Path | None = None,
    *,
    top_k: int = 5,
    targets: str | list[str] | None = None,
    batch_size: int = 16,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    truncation: bool = False,
    joint: bool = False,
    beam_width: int = 5,
    edits: Mapping[str, Edit] | None = None,
) -> list:
    """Fill every ``[MASK]`` in a text (or a list of texts) with the model's most likely tokens.

    Mirrors ``transformers.pipeline("fill-mask")``. A text whose tokens are mostly [UNK] is warned about
    (once per call, naming every such text by its index) and each of its answers holds
    ``"warning": "N of its M tokens are [UNK] ..."``.

    Args:
        inputs: a text holding at least one ``[MASK]``, or a list of such texts.
        model: a hub id, a local folder or a loaded :class:`Model` (default: google-bert/bert-base-uncased,
            loaded once per process; a folder again when its files change).
        top_k: answers per mask, at least 1. More than there are candidates (the model's vocabulary: its
            ``vocab_size`` rows, which may outnumber its tokenizer's tokens, as DeBERTa-v3's 128100 do its 128001;
            or the targets) is clamped to that number: every candidate is returned, best first.
        targets: restrict the answers to these words. A word of several word pieces is scored as a whole
            word: the mask widened to its k pieces, P(piece 1 | all k masked) x P(piece 2 | piece 1 shown,
            the rest masked) x ... (the within-word rule of :mod:`bertfn.tasks.scoring`), ranked with the single
            pieces' probabilities; its answer has ``"token"`` a list of ids and ``"pieces": k``. Single-piece
            answers are transformers' (which scores a longer word by its first piece; see :func:`target_pieces`).
        batch_size: texts per encoder pass, at most (sorted by length and laid end to end without padding;
            :func:`~bertfn.tasks.runner.per_text`); the masked copies that score whole-word targets
            and joint fills run this many at a time too.
        device: where the model runs (:func:`~bertfn.checkpoint.resolve.get_model`).
        dtype: the precision it runs in; ``dtype="bfloat16"`` (or ``torch.bfloat16``) is the bf16 mode: half the
            memory, and faster on a GPU or a CPU with AVX-512, slower on one with AVX2 alone (docs/speed.md).
        truncation: a text longer than the model reads (P tokens: its ``max_position_embeddings``, 2 fewer in
            RoBERTa's kind, whose positions start at ``padding_idx + 1``: :func:`~bertfn.model.family.longest_input`) raises
            :class:`InputError` unless this is True. Then the text is cut to a window of P tokens ([CLS],
            P - 2 tokens of the text, [SEP]) that holds every [MASK], centred on the masks and starting and
            ending at word boundaries where it can; ``"sequence"`` in the results is that window. Masks
            further apart than P - 2 tokens fit no window: :class:`InputError` (split the text instead).
        joint: fill all the masks of a text together (:mod:`bertfn.tasks.joint`): a text's answer is the
            ``top_k`` best combinations, each ``{"score", "tokens", "token_strs", "sequence"}``, where score
            is the PLL of the filled text at the masked positions (sum over the masks of log P(token | the
            filled text with that position alone masked)); found by a left-to-right beam search of width
            ``max(beam_width, top_k)`` and rescored; ``beam_width=1, top_k=1`` is greedy left to right.
            Takes no ``targets``.
        beam_width: the width of joint filling's beam search (with ``top_k``, see ``joint``), at least 1.
        edits: ``{point name: edit(tensor, point) -> tensor}``, as :func:`~bertfn.model.encoder.encoder`
            takes them (:mod:`bertfn.interventions` makes the usual ones); the edits see each point in the
            shape of its group's padded batch (:func:`~bertfn.tasks.runner.per_text`).

    Returns:
        What ``transformers.pipeline("fill-mask")`` returns: for a text with one mask, a list of
            ``top_k`` dicts ``{"score", "token", "token_str", "sequence"}`` best first; with several masks,
            one such list per mask; for a list of texts, a list of those.

    Raises:
        InputError: every problem with the inputs, saying which text and what to do.
        MissingPartError: a model without a tokenizer or without the masked-LM head.

    Warns:
        UnknownTokensWarning: texts whose tokens are mostly [UNK].
    """
    texts, single, model = texts_in(inputs, model, TASK)
    flag("truncation", truncation)
    count("top_k", top_k)
    count("batch_size", batch_size)
    flag("joint", joint)
    count("beam_width", beam_width)
    if joint and targets is not None:
        raise InputError("joint filling searches the whole vocabulary at every mask, so it takes no targets; "
                         "drop targets, or fill without joint")

    m, tok, points = loaded(TASK, model, device, dtype, edits)
    require_mlm_head(m, syntax("fill_mask", "fill-mask"))
    pieces = target_pieces(m, targets) if targets is not None else None
    wanted = [p[0] for p in pieces if len(p) == 1] if pieces is not None else None  # single-piece targets
    words = [p for p in pieces if len(p) > 1] if pieces is not None else []  # whole-word targets
    k = min(top_k, len(pieces) if pieces is not None else m.config.vocab_size)  # the model's rows, as the pipeline

    enc = tok(list(texts))
    unknown, lengths = enc.unknown, enc.attention_mask.sum(dim=1).tolist()
    P = longest_input(m.config)
    for i, n in enumerate(lengths):  # every text's masks first, as the command checks them before loading
        if not (enc.input_ids[i, :n] == tok.mask_token_id).any():
            raise missing_mask(tok, i, texts[i])
    if not truncation:
        refuse_long(lengths, P, truncate(f"to keep a {P}-token window around its masks"))
    elif max(lengths) > P:
        enc = mask_windows(tok, enc, lengths, P)
        lengths = enc.attention_mask.sum(dim=1).tolist()

    if joint:
        return finished(joint_fill(m, enc, lengths, top_k, beam_width, batch_size, points), unknown, single)

    def masks(rows: list[int], ids: torch.Tensor) -> torch.Tensor:  # (N,): the position of every [MASK]
        return (ids[0] == tok.mask_token_id).nonzero()[:, 0]

    def step(rows: list[int], where: torch.Tensor, h: torch.Tensor) -> list:  # per text, its masks' candidates
        at = points
        if points.edits:  # an edit may hold a row per text (a patch of a recording): say each mask's text
            ends = torch.tensor([lengths[i] for i in rows]).cumsum(0)  # where each text of the group ends, end to end
            at = points.of_rows([rows[j] for j in torch.searchsorted(ends, where.cpu(), right=True).tolist()])  # (N,)
        logits = mlm_head(m.params, h, at)  # (N, V): at the masks only
        probs = logits.float().softmax(dim=-1)
        if wanted is not None:
            probs = probs[:, wanted]  # (N, len(single-piece targets))
        scores, picks = probs.topk(min(k, probs.shape[-1]), dim=-1)  # (N, k) each
        scores, picks, where = scores.tolist(), picks.tolist(), where.tolist()
        found, start = [], 0
        for i in rows:
            n = lengths[i]
            found.append([(pos - start, [(s, (wanted[p] if wanted is not None else p,)) for s, p in zip(sc, pk)])
                          for pos, sc, pk in zip(where, scores, picks) if start <= pos < start + n])
            start += n
        return found

    # per text: [(mask position, [(score, pieces), ...] best first), ...]
    answers = per_text(m, enc, lengths, step, batch_size=batch_size, points=points, read=masks)
    if words:
        where = [(i, pos) for i, per_mask in enumerate(answers) for pos, _ in per_mask]
        probs = word_log_probs(m, enc, lengths, where, words, batch_size, points).exp().tolist()  # (masks, words)
        for (_, candidates), row in zip((a for per_mask in answers for a in per_mask), probs):
            candidates += zip(row, words)
            candidates.sort(key=lambda c: -c[0])
            del candidates[k:]
    return finished([_propositions(tok, enc.input_ids[i, :n].tolist(), answers[i]) for i, n in enumerate(lengths)],
                    unknown, single)


TASK = Task("fill-mask", fill_mask, probe=lambda m, options: m.tokenizer.mask_token, fast=True)
"""The task (:mod:`bertfn.tasks.task`) :func:`fill_mask` is: ``bertfn fill-mask``, the corpus's ``FillMask``."""


def window_around_masks(ids: list[int], words: list[int | None], mask_id: int, width: int) -> tuple[int, int]:
    """The span ``[start, end)`` of at most ``width`` tokens of ``ids`` that holds every ``mask_id``.

    Centred on the masks (as much context on each side as the text allows), then moved off the inside of
    words so that it neither starts nor ends in the middle of one, as long as every mask stays in.
    The caller checks that the masks fit.

    Args:
        ids: one text's tokens without the template's first and last token ([CLS] / [SEP], <s> / </s>).
        words: the word of each of ``ids`` (:attr:`Encoding.word_ids`: a token continues a word when its
            word is the one before's; so for every kind, ``##`` pieces, BPE and unigram pieces alike).
        mask_id: the id of the mask token.
        width: the window's size in tokens, at most.

    Returns:
        ``(start, end)``, indices into ``ids``.
    """
    masks = [j for j, t in enumerate(ids) if t == mask_id]
    first, last = masks[0], masks[-1]
    spare = width - (last - first + 1)  # context tokens the window holds besides the masks' span
    start = min(max(first - spare // 2, 0), len(ids) - width)
    end = start + width

    def inside(j: int) -> bool:  # token j continues the word of token j - 1
        return j > 0 and words[j] is not None and words[j] == words[j - 1]

    while start < first and inside(start):  # do not begin in the middle of a word
        start += 1
    while end > last + 1 and end < len(ids) and inside(end):  # nor end in one
        end -= 1
    return start, end


def mask_windows(tok: Tokenizer, enc: Encoding, lengths: list[int], limit: int) -> Encoding:
    """``enc`` with every row longer than ``limit`` tokens cut to a window that keeps all its masks.

    A cut row is its first token ([CLS], <s>) + :func:`window_around_masks` of its text tokens (cut at the
    words of ``enc.word_ids``) + its last ([SEP], </s>); shorter rows stay.

    Args:
        tok: the tokenizer that made ``enc`` (its special tokens).
        enc: a padded single-text batch (B, S).
        lengths: (B,) real tokens per row.
        limit: tokens per row at most, the model's positions.

    Returns:
        A padded batch (B, S') with S' <= ``limit`` (word_ids kept).

    Raises:
        InputError: a row's masks are further apart than ``limit - 2`` tokens.
    """
    width = limit - 2  # room for [CLS] and [SEP]
    rows = []  # (ids, token types, tokens, offsets, word ids) of each row, unpadded
    for i, n in enumerate(lengths):
        ids, types = enc.input_ids[i, :n].tolist(), enc.token_type_ids[i, :n].tolist()
        tokens, offsets, words = enc.tokens[i][:n], enc.offsets[i][:n], enc.word_ids[i][:n]
        if n > limit:
            masks = [j for j, t in enumerate(ids) if t == tok.mask_token_id]
            if masks[-1] - masks[0] + 1 > width:
                raise InputError(
                    f"text {i} has masks {masks[-1] - masks[0] + 1} tokens apart (first to last) but the model "
                    f"reads {limit} tokens at a time ({width} besides {tok.cls_token} and {tok.sep_token}), so no "
                    "window holds them all; split the text into pieces whose masks are closer together"
                )
            start, end = window_around_masks(ids[1:-1], words[1:-1], tok.mask_token_id, width)
            keep = [0, *range(start + 1, end + 1), n - 1]  # [CLS], the window, [SEP]
            ids, types, tokens, offsets, words = ([row[j] for j in keep] for row in (ids, types, tokens, offsets, words))
        rows.append((ids, types, tokens, offsets, words))
    S = max(len(r[0]) for r in rows)
    input_ids = torch.full((len(rows), S), tok.pad_token_id, dtype=torch.long)  # (B, S)
    token_type_ids = torch.zeros(len(rows), S, dtype=torch.long)
    attention_mask = torch.zeros(len(rows), S, dtype=torch.long)
    for i, (ids, types, *_) in enumerate(rows):
        input_ids[i, :len(ids)] = torch.tensor(ids)
        token_type_ids[i, :len(ids)] = torch.tensor(types)
        attention_mask[i, :len(ids)] = 1
    tokens = [r[2] + [tok.pad_token] * (S - len(r[2])) for r in rows]
    offsets = [r[3] + [(0, 0)] * (S - len(r[3])) for r in rows]
    word_ids = [r[4] + [None] * (S - len(r[4])) for r in rows]
    return Encoding(input_ids, token_type_ids, attention_mask, tokens, offsets, word_ids)


def _propositions(tok, row_ids: list[int], masks: list) -> list:
    """One text's answers in the pipeline's shape: a list of dicts, or a list of them per mask.

    Args:
        tok (Tokenizer): the model's tokenizer (decodes the answers).
        row_ids: the text's token ids.
        masks: per [MASK], ``(position, [(score, pieces), ...])``; a whole-word answer (several pieces)
            has ``"token"`` the list of its ids and ``"pieces"`` their number.
    """
    one_mask = len(masks) == 1
    out = []
    for pos, candidates in masks:
        answers = []
        for score, pieces in candidates:
            filled = [t for t in row_ids[:pos] + list(pieces) + row_ids[pos + 1:] if t != tok.pad_token_id]
            answer = {
                "score": score,
                "token": pieces[0] if len(pieces) == 1 else list(pieces),
                "token_str": tok.decode(list(pieces)),
                "sequence": tok.decode(filled, skip_special_tokens=one_mask),
            }
            if len(pieces) > 1:
                answer["pieces"] = len(pieces)
            answers.append(answer)
        out.append(answers)
    return out[0] if one_mask else out
