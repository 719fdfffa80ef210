"""token-classification (NER, part-of-speech tags, ...): a label for each token, grouped into entities, shaped like
transformers' ``pipeline("token-classification")`` (``TokenClassificationPipeline``, 4.57).

    text --tokenize--> tokens and their character spans --text_windows--> the encoder's inputs
         --encoder + the tagger head, on the fast path--> logits (n, L) --softmax, float32--> scores (n, L)
         --pre_entities--> tokens with a span and is_subword --aggregate (entities.py)--> entities
         --ignore_labels--> (several windows: merge_windows) --> the text's entities

The encoder and the checkpoint's head (``classifier`` on every token; ModernBERT's prediction head first) run as
:func:`~bertfn.tasks.runner.head_logits` runs them: the texts end to end without padding, with ``edits`` too. The strategies that turn tokens into entities are :mod:`bertfn.tasks.entities`.

A text longer than the model reads (:func:`~bertfn.tasks.pairs.longest_pair`: the model's positions, or the tokenizer's
``model_max_length`` where smaller, as the pipeline's tokenizer cuts: 512 tokens for bert-base and roberta-base, 1024 for
ESM-2's 1026 positions) is tagged, as the pipeline tags it, on its first window only, with a warning; with ``stride``
it is read in overlapping windows (:func:`window_spans`, the ``tokenizers`` library's overflowing tokens) whose
entities :func:`merge_windows` joins.

A text may come as its words (``is_split_into_words``, :mod:`bertfn.tasks.words`): each word is cut by the tokenizer
alone and its tokens' spans moved into the words joined with ``delimiter``; the rest is the same.

Where bertfn differs from the pipeline: ESM-2's tokenizer is slow in transformers, with no character offsets, so
there the pipeline gives ``start``/``end`` None and refuses ``stride`` and the word strategies; bertfn gives every
residue's span, counts each residue a word, and takes them all. And where the pipeline's window merging repeats a
text's first entity when that entity spans no characters (a lone ``Ġ`` space token of byte-level BPE), bertfn
keeps it once.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import NamedTuple

import tokenizers
import torch

from ..checkpoint.checks import count, flag, one_of
from ..checkpoint.model import Model
from ..checkpoint.tokenizer import Encoding, Tokenizer
from ..errors import InputError, syntax
from ..model.recorder import NO_TRACE, Edit, Trace
from .entities import STRATEGIES, PreEntity, aggregate, merge_windows
from .pairs import longest_pair
from .runner import finished, head_logits, loaded, texts_in
from .task import Task
from .words import split_texts, splits_words, word_offsets

Tensor = torch.Tensor

DEFAULT_TAGGER = "dbmdz/bert-large-cased-finetuned-conll03-english"
"""The model :func:`tag` loads when given none: transformers' default for ``pipeline("token-classification")``."""


def window_spans(n: int, width: int, stride: int | None) -> list[tuple[int, int]]:
    """The ``[start, stop)`` spans of a text's n tokens that the windows hold (the ``tokenizers`` library's
    ``Encoding.truncate``): without a stride, the first ``width`` tokens; with one, windows of ``width`` tokens
    starting every ``width - stride`` tokens, the last one ending at n, so that neighbours share ``stride`` tokens.

    Args:
        n: the text's tokens, without the template's ([CLS], [SEP]).
        width: the text's tokens a window holds.
        stride: the tokens neighbouring windows share (0 to ``width - 1``), or None.

    Returns:
        The spans, in order.
    """
    if stride is None or n <= width:
        return [(0, min(n, width))]
    spans = []
    for start in range(0, n, width - stride):
        spans.append((start, min(start + width, n)))
        if spans[-1][1] == n:
            break
    return spans


class Window(NamedTuple):
    """One input of the encoder: a text's tokens, or a window of them, between the template's ([CLS] ... [SEP]).

    Attributes:
        ids: the token ids, n of them.
        types: their token type ids.
        tokens: the tokens as the vocabulary spells them.
        offsets: each token's ``(start, end)`` characters in the text ((0, 0) for [CLS] and [SEP]).
        special: 1 for the template's tokens (the ``special_tokens_mask``), which get no label.
    """

    ids: list[int]
    types: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]
    special: list[int]


def text_windows(e: tokenizers.Encoding, limit: int, stride: int | None,
                 offsets: list[tuple[int, int]] | None = None) -> list[Window]:
    """The windows that read one text: the whole text when it fits in ``limit`` tokens, else the text's tokens cut
    by :func:`window_spans`, each between the template's first and last tokens, as the ``tokenizers`` library cuts
    overflowing tokens (offsets stay those of the whole text).

    Args:
        e: the text's encoding by the model's tokenizer, template included (padding after it is left out).
        limit: the tokens of a window, at most (:func:`~bertfn.tasks.pairs.longest_pair`).
        stride: as in :func:`window_spans`.
        offsets: each token's span in the text where it is not ``e.offsets`` (words given split:
            :func:`~bertfn.tasks.words.word_offsets`).
    """
    n = sum(e.attention_mask)
    rows = (e.ids[:n], e.type_ids[:n], e.tokens[:n], (e.offsets if offsets is None else offsets)[:n],
            e.special_tokens_mask[:n])
    text = [j for j, s in enumerate(e.sequence_ids[:n]) if s is not None]  # the text's tokens, not the template's
    if n <= limit or not text:
        return [Window(*rows)]
    first, last = text[0], text[-1] + 1
    spans = window_spans(last - first, limit - (n - (last - first)), stride)
    keep = [[*range(first), *range(first + a, first + b), *range(last, n)] for a, b in spans]
    return [Window(*([row[j] for j in k] for row in rows)) for k in keep]


def window_scores(m: Model, windows: list[Window], batch_size: int, points: Trace = NO_TRACE) -> list[Tensor]:
    """The label scores of every token of each window: the tagger head's logits on the fast path
    (:func:`~bertfn.tasks.runner.head_logits`), softmax in float32.

    Args:
        m: the model, with a token-classification head.
        windows: the encoder's inputs.
        batch_size: windows per encoder pass, at most.
        points: a trace with edits (each seeing its group of windows as a padded batch's shapes).

    Returns:
        Per window, (n, L) float32 on the CPU.
    """
    lengths = [len(w.ids) for w in windows]
    S = max(lengths)
    pad = m.tokenizer.pad_token_id
    ids = torch.tensor([w.ids + [pad] * (S - len(w.ids)) for w in windows])  # (R, S)
    types = torch.tensor([w.types + [0] * (S - len(w.types)) for w in windows])  # (R, S)
    mask = (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]).long()  # (R, S)
    enc = Encoding(ids, types, mask, [w.tokens for w in windows], [w.offsets for w in windows])
    logits = head_logits(m, enc, lengths, "token-classification", batch_size=batch_size, points=points)  # per window (n, L)
    return [t.float().softmax(dim=-1).cpu() for t in logits]


def subword_rule(tok: Tokenizer) -> str:
    """How :func:`is_subword` tells a token that continues a word, by the tokenizer's model (``gather_pre_entities``):

    * ``"prefix"``: the model marks continuations (``continuing_subword_prefix``: WordPiece's ``##``);
    * ``"word-level"``: a word-level model (ESM-2's, one token per residue), which cuts no word into pieces;
    * ``"space"``: the others (byte-level BPE's ``Ġ``, SentencePiece's ``▁``): the pipeline's fallback heuristic.

    Args:
        tok: the model's tokenizer.
    """
    if getattr(tok.backend.model, "continuing_subword_prefix", None):
        return "prefix"
    return "word-level" if isinstance(tok.backend.model, tokenizers.models.WordLevel) else "space"


def is_subword(rule: str, text: str, token: str, start: int, end: int) -> bool:
    """Whether a token continues the word of the token before it, as ``gather_pre_entities`` decides.

    "prefix": the token is not as long as its text (``"##ing"`` for ``"ing"``). "space": it does not start the
    text, and neither its first character nor the one before is a space (a word of several spaces, or of
    punctuation and letters, may be cut where the tokens are; transformers warns that this is a heuristic).
    "word-level": never (transformers' ESM tokenizer has no offsets, so the pipeline counts no token a subword).

    Args:
        rule: :func:`subword_rule`'s.
        text: the text.
        token: the token as the vocabulary spells it.
        start: its first character in ``text``.
        end: the character after its last.
    """
    if rule == "prefix":
        return len(token) != end - start
    return rule == "space" and start > 0 and " " not in text[start - 1:start + 1]


def pre_entities(text: str, w: Window, scores: Tensor, rule: str, unk_id: int | None) -> list[PreEntity]:
    """The tokens of a window that get a label, with their scores and spans (``gather_pre_entities``).

    The template's tokens are left out; the unknown token's word is the text it stands for, and it starts a word.

    Args:
        text: the text.
        w: one of its windows.
        scores: (n, L), the window's label scores.
        rule: :func:`subword_rule`'s.
        unk_id: the unknown token's id (None: the tokenizer has none).
    """
    out = []
    for j, (i, token, (start, end), special) in enumerate(zip(w.ids, w.tokens, w.offsets, w.special)):
        if special:
            continue
        if i == unk_id:
            out.append(PreEntity(text[start:end], scores[j], start, end, j, False))
        else:
            out.append(PreEntity(token, scores[j], start, end, j, is_subword(rule, text, token, start, end)))
    return out


def tokens_to_string(tok: Tokenizer, tokens: list[str]) -> str:
    """Tokens as one string, by the tokenizer's decoder (``convert_tokens_to_string`` of transformers' fast
    tokenizers): ``["c", "##af", "##e"]`` -> ``"cafe"``, ``["Ġnew", "Ġyork"]`` -> ``" new york"``; joined by spaces
    where the tokenizer has no decoder (ESM-2's: ``"M K T"``).

    Args:
        tok: the model's tokenizer.
        tokens: tokens as the vocabulary spells them (or words made of them).
    """
    decoder = tok.backend.decoder
    return decoder.decode(tokens) if decoder is not None else " ".join(tokens)


def tokens_read(m: Model, stride: int | None) -> int:
    """The tokens of a text that :func:`tag` reads at most: one window (:func:`~bertfn.tasks.pairs.longest_pair`) without a
    stride, all of them with one.

    Args:
        m: the model.
        stride: ``tag``'s.
    """
    return longest_pair(m) if stride is None else sys.maxsize


def check_options(strategy: object, ignore_labels: object, stride: object, batch_size: object) -> tuple[str, frozenset]:
    """``(strategy, labels to leave out)``, or :class:`InputError` for options :func:`tag` cannot take.

    Args:
        strategy: ``aggregation_strategy`` (any case).
        ignore_labels: a label or a sequence of them.
        stride: None or a non-negative integer; not with strategy "none", whose tokens windows cannot merge.
        batch_size: a positive integer.
    """
    strategy = strategy.lower() if isinstance(strategy, str) else strategy
    one_of("aggregation_strategy", strategy, STRATEGIES)
    labels = (ignore_labels,) if isinstance(ignore_labels, str) else ignore_labels
    if not isinstance(labels, (list, tuple, set, frozenset)) or not all(isinstance(x, str) for x in labels):
        raise InputError(f"ignore_labels must be a label or a list of labels (default ('O',); () keeps every label), "
                         f"got {ignore_labels!r}")
    count("stride", stride, least=0, none="one window")
    if stride is not None and strategy == "none":
        raise InputError(f"{syntax(python='stride', cli='--stride')} reads a long text in overlapping windows, and "
                         "merging their entities needs an "
                         f"aggregation strategy; pass {syntax(python='aggregation_strategy=', cli='--aggregation ')}"
                         "simple (or first, average, max) with it, as transformers' pipeline asks")
    count("batch_size", batch_size)
    return strategy, frozenset(labels)


def tag(
    texts: str | list[str],
    model: Model | str | Path | None = None,
    *,
    aggregation_strategy: str = "none",
    ignore_labels: str | Sequence[str] = ("O",),
    stride: int | None = None,
    is_split_into_words: bool = False,
    delimiter: str = " ",
    batch_size: int = 32,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    edits: Mapping[str, Edit] | None = None,
) -> list:
    """The entities of a text (or of each of a list of texts) by a token-classification checkpoint.

    Mirrors ``transformers.pipeline("token-classification", aggregation_strategy=..., stride=...)``: the same
    entities, words and character spans, scores within float32 rounding.

    Args:
        texts: one text, or a list of N texts; with ``is_split_into_words``, a list of N texts, each the list of its
            words (one text: ``[words]``).
        model: a token-classification checkpoint (``*ForTokenClassification``): a loaded :class:`Model`, a local
            folder or a hub id (e.g. dslim/bert-base-NER; default: :data:`DEFAULT_TAGGER`, CoNLL-03's entities).
        aggregation_strategy: "none": one entity per token; "simple": neighbouring tokens of one entity type
            joined (a ``B-`` label starts a new one); "first", "average", "max": each word first takes one label
            (its first token's; the best of its tokens' averaged scores; its most confident token's), then words
            are joined as by "simple" (:mod:`bertfn.tasks.entities`).
        ignore_labels: the labels whose entities are left out (default ``("O",)``, outside any entity; ``()``
            keeps them all).
        stride: read a text longer than the model does in windows that overlap by ``stride`` tokens, and merge
            their entities (not with "none"). Without it such a text is tagged on its first window, with a warning.
        is_split_into_words: each text comes as its words (a dataset's ``tokens``, CoNLL's): the tokenizer cuts each
            word alone, and ``start`` and ``end`` index the words joined with ``delimiter``, as the pipeline's do.
            Not on a byte-level BPE that adds no space before a word (RoBERTa's as saved), as transformers refuses.
        delimiter: what joins the words into the text the spans index (default a space).
        batch_size: windows per encoder pass, at most.
        device: where the model runs (:func:`~bertfn.checkpoint.resolve.get_model`).
        dtype: the precision it runs in (``"bfloat16"``: the faster bf16 mode); scores are softmax in float32.
        edits: ``{point name: edit(tensor, point) -> tensor}``, as :func:`~bertfn.model.encoder.encoder` takes
            them, the head's ``classifier.logits`` too, each seeing its group's padded batch's shapes.

    Returns:
        For one text, a list of its entities in order: with "none",
            ``{"entity": "B-PER", "score", "index": token position, "word": "##ing", "start", "end"}``; else
            ``{"entity_group": "PER", "score", "word": "Jean Dupont", "start", "end"}`` (``text[start:end]`` is the
            entity, ``word`` its tokens decoded); for a list of texts, one such list per text. With
            ``is_split_into_words``, ``text`` is the text's words joined with ``delimiter``.

    Raises:
        InputError: an empty text or list, unknown options, a stride the window cannot hold; with
            ``is_split_into_words``, a text that is no list of words, or a tokenizer that cannot read them.
        MissingPartError: a model without a tokenizer, or whose head is not a token classifier.

    Warns:
        UserWarning: texts longer than the model reads, without a stride.
        UnknownTokensWarning: texts whose tokens are mostly [UNK] (their entities hold ``"warning"``).
    """
    flag("is_split_into_words", is_split_into_words)
    if is_split_into_words:
        (words, model), single = split_texts(texts, model, delimiter), False
        batch = [delimiter.join(w) for w in words]  # the texts the spans index
    else:
        batch, single, model = texts_in(texts, model, TASK, blank=True)  # "" and "   ": no entities, as the pipeline
    strategy, ignored = check_options(aggregation_strategy, ignore_labels, stride, batch_size)

    m, tok, points = loaded(TASK, model, device, dtype, edits, head="token-classification")
    limit = longest_pair(m)  # the tokenizer's model_max_length where smaller, as the pipeline cuts
    width = limit - tok.backend.num_special_tokens_to_add(False)  # the text's tokens in a window
    if stride is not None and stride >= width:
        raise InputError(f"stride must be less than the {width} tokens of the text a window holds (the model reads "
                         f"{limit} at once, {tok.cls_token} and {tok.sep_token} included), got {stride}")

    if is_split_into_words:
        splits_words(tok)
        encodings = tok.backend.encode_batch(words, is_pretokenized=True)
        offsets = [word_offsets(e, w, delimiter) for e, w in zip(encodings, words)]
    else:
        encodings, offsets = tok.backend.encode_batch(batch), None
    unknown = tok.warn_unknown(batch, None, encodings, offsets)
    windows = [text_windows(e, limit, stride, None if offsets is None else offsets[i]) for i, e in enumerate(encodings)]
    cut = [i for i, e in enumerate(encodings) if stride is None and sum(e.attention_mask) > limit]
    if cut:
        warnings.warn(f"{len(cut)} text(s) longer than the {limit} tokens the model reads (text {cut[0]}: "
                      f"{sum(encodings[cut[0]].attention_mask)}) were tagged on their first {limit} only, as "
                      f"transformers' pipeline tags them; pass {syntax(python='stride=', cli='--stride ')}N to tag "
                      "all of each in windows that overlap by N tokens", stacklevel=2)
    scores = iter(window_scores(m, [w for ws in windows for w in ws], batch_size, points))

    rule, decode, labels = subword_rule(tok), partial(tokens_to_string, tok), m.config.labels
    results = []
    for text, ws in zip(batch, windows):
        found = []
        for w in ws:
            entities = aggregate(pre_entities(text, w, next(scores), rule, tok.unk_token_id), strategy, labels, decode)
            found += [e for e in entities if e.get("entity", e.get("entity_group")) not in ignored]
        results.append(merge_windows(found) if len(ws) > 1 else found)
    return finished(results, unknown, single)


TASK = Task("tag", tag, probe=lambda m, options: ["a"] if options.get("is_split_into_words") else "a",
            max_tokens=lambda m, options: tokens_read(m, options.get("stride")), fast=True, model=DEFAULT_TAGGER)
"""The task (:mod:`bertfn.tasks.task`) :func:`tag` is: ``bertfn tag``, the corpus's ``Tag``."""
