"""Text pairs through a sequence classifier: one row of logits per (first text, second text).

Zero-shot classification reads (text, hypothesis) pairs through an NLI classifier (:mod:`bertfn.tasks.zero_shot`),
reranking reads (query, passage) pairs through a cross-encoder (:mod:`bertfn.tasks.rerank`). Both are a
``*ForSequenceClassification`` run on the pair as the member's template joins it (``[CLS] A [SEP] B [SEP]``,
RoBERTa's ``<s> A </s></s> B </s>``); only what they make of the logits differs. This module is the part they share:
:func:`pair_logits` tokenizes the pairs, cuts those longer than the model reads, and runs the head on the fast path
(:func:`~bertfn.tasks.runner.head_logits`: the pairs sorted by length and laid end to end, no padding).

A pair longer than the model reads (:func:`longest_pair` tokens) is cut as the ``tokenizers`` library cuts it for
transformers' fast tokenizers (:func:`cut_pairs`), by one of :data:`TRUNCATIONS`:

    only_first     tokens come off the end of the first text; the second stays whole
                   (transformers' zero-shot pipeline: the hypothesis is never cut)
    longest_first  tokens come off the longer of the two; when both are longer than half, each keeps half
                   (sentence-transformers' CrossEncoder; transformers' tokenizer with truncation=True, as
                   :func:`bertfn.classify` cuts with it; a text alone loses its end)
"""

from __future__ import annotations

import copy
import warnings
import weakref
from collections.abc import Callable

import torch
from tokenizers import Tokenizer as _HFTokenizer

from ..checkpoint.model import Model, source_folders
from ..checkpoint.tokenizer import Encoding, Tokenizer, warn_texts
from ..checkpoint.tokenizer_files import read_json
from ..errors import InputError, UnknownTokensWarning
from ..model.family import longest_input
from ..model.recorder import NO_TRACE, Trace
from .runner import head_logits

Tensor = torch.Tensor

TRUNCATIONS = {
    "only_first": "the end of the text was cut to fit (truncation 'only_first', as transformers' zero-shot pipeline "
                  "cuts it)",
    "longest_first": "the longer of the two was cut to fit (truncation 'longest_first', as sentence-transformers' "
                     "CrossEncoder cuts it)",
}
"""How a pair longer than the model reads is cut (the module docstring): ``tokenizers``' strategy of that name -> what
the warning says of it."""


def beside_model(m: Model, name: str) -> dict:
    """The JSON file ``name`` of the folder the model came from ({} when there is none): looked for beside the weights
    (``m.name`` as a folder or a file) and beside the tokenizer's file (for a hub id, the snapshot folder in the
    Hugging Face cache).

    Args:
        m: the model.
        name: the file's name, e.g. ``"tokenizer_config.json"``.
    """
    for folder in source_folders(m):
        if (folder / name).is_file():
            return read_json(folder / name)
    return {}


def longest_pair(m: Model) -> int:
    """The tokens one input to the model may hold, its special tokens included.

    The model's positions P, less the offset of a member whose positions count from ``padding_idx + 1`` (RoBERTa's
    514 rows hold 512 tokens); or the ``model_max_length`` of the tokenizer's ``tokenizer_config.json`` where smaller
    (what transformers' tokenizer cuts to: ESM-2's 1024 of its 1026 rotary positions).

    Args:
        m: the model.
    """
    P = longest_input(m.config)
    told = beside_model(m, "tokenizer_config.json").get("model_max_length")
    return min(P, told) if isinstance(told, int) and not isinstance(told, bool) and told > 0 else P


_cutting: weakref.WeakKeyDictionary[Tokenizer, dict[tuple[int, str], Tokenizer]] = weakref.WeakKeyDictionary()
"""Per model tokenizer, its copies that cut (:func:`cut_pairs`), one per (limit, truncation): made once, as a copy costs
as much as tokenizing (15 ms for a 30k vocabulary, ten times that for XLM-R's 250k), and gone with the tokenizer."""


def cut_pairs(tok: Tokenizer, firsts: list[str], seconds: list[str] | None, limit: int, truncation: str) -> Encoding:
    """``tok(firsts, seconds)`` with the pairs (or texts) longer than ``limit`` tokens cut by ``truncation``.

    The cut is ``tokenizers``' own (``enable_truncation(limit, strategy=truncation)``, what a transformers fast
    tokenizer does with ``truncation=...``), on a copy of the tokenizer's backend, made once per tokenizer, limit and
    truncation (:data:`_cutting`): the model's tokenizer, which other calls share, is left as it is, and a copy's
    settings never change once made (threads may share it).

    Args:
        tok: the model's tokenizer.
        firsts: (N,) first texts.
        seconds: (N,) second texts, or None: the first texts alone (cut at their end).
        limit: tokens per pair at most, special tokens included.
        truncation: one of :data:`TRUNCATIONS`.

    Returns:
        The padded batch (N, S), S <= ``limit``.
    """
    copies = _cutting.setdefault(tok, {})
    cutting = copies.get((limit, truncation))
    if cutting is None:  # two threads may both make it: the same copy, one kept
        backend = _HFTokenizer.from_str(tok.backend.to_str())  # a copy: from_str(to_str()) holds every setting
        backend.enable_truncation(limit, strategy=truncation)
        cutting = copy.copy(tok)
        cutting.backend = backend
        copies[(limit, truncation)] = cutting
    with warnings.catch_warnings():  # the caller has said what tok(...) says of the texts
        warnings.simplefilter("ignore", UnknownTokensWarning)
        return cutting(firsts, seconds)


def pair_logits(m: Model, firsts: list[str], seconds: list[str], owners: list[int], *, truncation: str,
                batch_size: int, points: Trace = NO_TRACE,
                named: Callable[[int], str] = lambda p: f"pair {p}") -> tuple[Tensor, dict[int, str]]:
    """The sequence classifier's logits of each (first, second) pair, as ``*ForSequenceClassification`` gives them.

    Warns once for the items whose pairs were cut, and once for those that are mostly [UNK], naming each item by its
    index (``text 3``) as a corpus run's messages do.

    Args:
        m: the model (a sequence classifier, with a tokenizer).
        firsts: (N,) first texts (zero-shot's texts, reranking's query).
        seconds: (N,) second texts (the hypotheses, the passages).
        owners: (N,) the item (text, query) each pair belongs to, by index, for the messages.
        truncation: how a pair longer than :func:`longest_pair` is cut, one of :data:`TRUNCATIONS`.
        batch_size: pairs per encoder pass, at most.
        points: a Trace with edits (each seeing its group of pairs as a padded batch's shapes).
        named: pair index -> how the messages name its second text (``"the hypothesis 'This example is sports.'"``,
            ``"passage 12"``).

    Returns:
        logits: (N, num_labels) float32, on the model's device.
        unknown: ``{item: message}`` for the items whose pairs are mostly [UNK] (the message of the first such pair).

    Raises:
        InputError: an ``only_first`` pair whose second text alone fills the model (no token of the first would be
            left).
    """
    tok = m.tokenizer
    limit = longest_pair(m)
    with warnings.catch_warnings():  # said below, naming the items rather than the pairs
        warnings.simplefilter("ignore", UnknownTokensWarning)
        enc = tok(firsts, seconds)
    unknown = {owners[p]: message for p, message in reversed(list((enc.unknown or {}).items()))}  # an item's first
    warn_texts(unknown, UnknownTokensWarning)
    lengths = enc.attention_mask.sum(dim=1).tolist()
    long = [p for p, n in enumerate(lengths) if n > limit]
    if long:
        if truncation == "only_first":
            added = tok.backend.num_special_tokens_to_add(True)  # [CLS] A [SEP] B [SEP]: 3; <s> A </s></s> B </s>: 4
            for p in long:
                n = len(tok.backend.encode(seconds[p], add_special_tokens=False).ids) + added
                if n >= limit:
                    raise InputError(f"text {owners[p]}: {named(p)} is {n} tokens with the special tokens, and the "
                                     f"model reads {limit} in all, so no token of the text would be left; shorten it")
        cut: dict[int, list[int]] = {}  # item -> its pairs that are too long
        for p in long:
            cut.setdefault(owners[p], []).append(p)
        more = {i: f" (and {len(ps) - 1} more of its pairs are too long)" if ps[1:] else "" for i, ps in cut.items()}
        warn_texts({i: f"with {named(ps[0])} it is {lengths[ps[0]]} tokens{more[i]}, but the model reads at most {limit}; "
                       f"{TRUNCATIONS[truncation]}" for i, ps in cut.items()}, UserWarning)
        enc = cut_pairs(tok, firsts, seconds, limit, truncation)
        lengths = enc.attention_mask.sum(dim=1).tolist()
    rows = head_logits(m, enc, lengths, "sequence-classification", batch_size=batch_size, points=points)  # N of (L,)
    return torch.stack(rows).float(), dict(sorted(unknown.items()))  # (N, num_labels)
