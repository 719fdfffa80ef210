"""The windows a reader reads: the question, then a piece of the context, as transformers' question-answering
pipeline has the fast tokenizer cut them.

    [CLS] question [SEP] context[0:room] [SEP]
    [CLS] question [SEP] context[room - doc_stride:2 room - doc_stride] [SEP]      room = max_seq_len - question
    ...                                                                                   - special tokens

:func:`context_windows` cuts them (with the ``tokenizers`` library, on a copy of the model's tokenizer: the model's
own is shared and stays as it is), :func:`window_batch` lays them out for the reader, :func:`answerable` says which
of their tokens an answer may hold, and :func:`~bertfn.model.family.longest_input` how long a window the model reads.
"""

from __future__ import annotations

import copy
import threading
import weakref

import numpy as np
import torch
from tokenizers import Encoding as WindowEncoding
from tokenizers import Tokenizer as _HFTokenizer

from ..checkpoint.tokenizer import Encoding, Tokenizer
from ..errors import InputError, syntax

Pairs = list[tuple[str, str]]
"""(question, context) pairs."""


_window_tokenizers: weakref.WeakKeyDictionary[Tokenizer, _HFTokenizer] = weakref.WeakKeyDictionary()
_window_lock = threading.Lock()  # the copies' truncation is set per call


def option(name: str, value: int | None = None) -> str:
    """An option of :func:`~bertfn.tasks.answer.answer` as the caller spells it: ``max_seq_len=64`` in Python, ``--max-seq-len 64`` in the
    ``bertfn`` command (the name alone without ``value``).

    Args:
        name: the Python name.
        value: its value, when the message gives one.
    """
    cli = "--" + name.replace("_", "-")
    if value is None:
        return syntax(python=name, cli=cli)
    return syntax(python=f"{name}={value}", cli=f"{cli} {value}")


def window_tokenizer(tok: Tokenizer) -> _HFTokenizer:
    """A copy of ``tok.backend`` without padding, made once per tokenizer, whose truncation :func:`context_windows`
    sets: the model's own tokenizer is shared (other calls, other threads) and stays as it is. Hold
    ``_window_lock`` while using it.

    Args:
        tok: the model's tokenizer.
    """
    backend = _window_tokenizers.get(tok)
    if backend is None:
        backend = copy.deepcopy(tok.backend)
        backend.no_padding()
        _window_tokenizers[tok] = backend
    return backend


def context_windows(tok: Tokenizer, pairs: Pairs, labels: list[str], max_seq_len: int,
                    doc_stride: int) -> tuple[list[list[WindowEncoding]], dict[int, str]]:
    """Each pair as ``[CLS] question [SEP] context [SEP]`` windows of at most ``max_seq_len`` tokens.

    As transformers' pipeline calls the fast tokenizer (``truncation="only_second"``, ``stride=doc_stride``,
    ``return_overflowing_tokens=True``): a context that does not fit beside its question is cut into pieces of
    ``room = max_seq_len - question tokens - special tokens`` tokens, each starting ``room - doc_stride`` tokens
    after the one before (so consecutive windows share ``doc_stride`` context tokens), each after the whole
    question. Offsets are characters of the question (sequence 0) or of the context (sequence 1).

    Args:
        tok: the model's tokenizer.
        pairs: (question, context) pairs.
        labels: how messages name each pair.
        max_seq_len: tokens per window, at most.
        doc_stride: context tokens shared by consecutive windows.

    Returns:
        Per pair, its windows' ``tokenizers`` encodings (unpadded), first to last; and the pairs that are mostly
            [UNK] (:meth:`~bertfn.checkpoint.tokenizer.Tokenizer.unknown`, warned about).

    Raises:
        InputError: a question that leaves no room for its context, or a context that needs several windows with
            ``doc_stride`` not below their room. A context of no tokens (``"   "``) is one window of none, whose one
            answer is [CLS]'s empty span, as the pipeline answers it.
    """
    questions, contexts = [q for q, _ in pairs], [c for _, c in pairs]
    with _window_lock:
        backend = window_tokenizer(tok)
        backend.no_truncation()
        whole = backend.encode_batch(pairs)
        added = backend.num_special_tokens_to_add(is_pair=True)
        for label, e in zip(labels, whole):
            nq, nc = e.sequence_ids.count(0), e.sequence_ids.count(1)
            room = max_seq_len - added - nq
            if room <= 0:
                raise InputError(f"{label}'s question is {nq} tokens, which with the {added} special tokens leaves no "
                                 f"room for the context in {option('max_seq_len', max_seq_len)}; shorten the question "
                                 f"or raise {option('max_seq_len')}")
            if nq + nc + added > max_seq_len and doc_stride >= room:
                raise InputError(f"{label}'s context is read in windows of {room} context tokens "
                                 f"({option('max_seq_len', max_seq_len)} less the question's {nq} and {added} special "
                                 f"tokens), which must be more than {option('doc_stride', doc_stride)} (the tokens "
                                 f"windows share); lower {option('doc_stride')} or raise {option('max_seq_len')}")
        backend.enable_truncation(max_seq_len, stride=doc_stride, strategy="only_second", direction="right")
        try:
            cut = backend.encode_batch(pairs)
        finally:
            backend.no_truncation()
    unknown = tok.warn_unknown(questions, contexts, whole)
    return [[e, *e.overflowing] for e in cut], unknown


def window_batch(tok: Tokenizer, windows: list[WindowEncoding], segments: bool) -> tuple[Encoding, list[int]]:
    """The windows as one padded batch, for :func:`~bertfn.tasks.runner.head_logits`.

    Every token is type 0 unless the model reads token types and the template gives the context a type of its own
    (BERT's ``[CLS] A [SEP] B:1 [SEP]:1``): where the template types it 0 (RoBERTa's and XLM-R's ``<s> A </s></s> B
    </s>``) the windows after the first of a pair hold type 1 for the context, as ``tokenizers`` leaves them, and
    transformers gives such a model no token types (its tokenizer's ``model_input_names``), even where its
    checkpoint's table has two rows (``XLMRobertaConfig``'s default ``type_vocab_size``).

    Args:
        tok: the model's tokenizer (its padding id, its template).
        windows: W windows' encodings.
        segments: the model reads token types (``type_vocab_size`` > 1).

    Returns:
        The (W, S) batch, S the longest window, and each window's tokens.
    """
    segments = segments and 1 in tok.backend.encode("a", "b").type_ids  # the template's types of a pair
    lengths = [len(w.ids) for w in windows]
    S = max(lengths)
    input_ids = torch.full((len(windows), S), tok.pad_token_id, dtype=torch.long)  # (W, S)
    token_type_ids = torch.zeros(len(windows), S, dtype=torch.long)
    attention_mask = torch.zeros(len(windows), S, dtype=torch.long)
    for i, (w, n) in enumerate(zip(windows, lengths)):
        input_ids[i, :n] = torch.tensor(w.ids)
        if segments:
            token_type_ids[i, :n] = torch.tensor(w.type_ids)
        attention_mask[i, :n] = 1
    return Encoding(input_ids, token_type_ids, attention_mask, [w.tokens for w in windows],
                    [w.offsets for w in windows]), lengths


def answerable(tok: Tokenizer, window: WindowEncoding) -> np.ndarray:
    """(S,) bool: the tokens of ``window`` an answer may hold, the context's, and [CLS] (the "no answer" token):
    transformers' ``1 - p_mask``.

    Args:
        tok: the model's tokenizer (its [CLS] id).
        window: one window's encoding.
    """
    return np.array([s == 1 or t == tok.cls_token_id for s, t in zip(window.sequence_ids, window.ids)])
