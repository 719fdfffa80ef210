"""Texts given as their words (``tag(..., is_split_into_words=True)``), as transformers' token-classification pipeline
takes them: each word cut by the tokenizer alone (``is_pretokenized``), the spans moved into the words joined with a
delimiter, the text the results index.
"""

from __future__ import annotations

import tokenizers

from ..checkpoint.resolve import listed, texts_and_model
from ..checkpoint.tokenizer import Tokenizer
from ..checkpoint.tokenizer_files import steps
from ..errors import InputError, clipped, syntax


def split_texts(texts, model, delimiter: object) -> tuple[list[list[str]], object]:
    """``(each text's words, the model)`` of ``tag(..., is_split_into_words=True)``: a list of texts, each the list of
    its words (a numpy array or pandas Series of them too, as a dataset's column gives them).

    Always a list of texts, so that a list of strings is never read both ways: transformers' pipeline takes one as one
    text's words, bertfn asks for ``[words]``, which the pipeline answers alike (a list of one result).

    Args:
        texts (Sequence[Sequence[str]]): what the caller passed first.
        model (object): what it passed second.
        delimiter: the string the words are joined with into the text the spans index.

    Raises:
        InputError: a string or a list of strings (one text not in a list), an empty list, a text that is not a list
            of strings, a delimiter that is no string.
    """
    texts, model = texts_and_model(texts, model, "tag")
    if not isinstance(delimiter, str):
        raise InputError(f"delimiter must be a string (the words are joined with it into the text that start and end "
                         f"index; default ' '), got {type(delimiter).__name__}: {delimiter!r}")
    option = syntax(python="is_split_into_words=True", cli="--split-into-words")
    texts = listed(texts)
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not texts:
        raise InputError(f"{option} takes a non-empty list of texts, each the list of its words "
                         f"([['EU', 'rejects', 'German', 'call'], ...]), got {type(texts).__name__}: "
                         f"{clipped(texts, 80)}; pass a string without the option")
    if all(isinstance(w, str) for w in texts):
        raise InputError(f"{option} takes a list of texts, each the list of its words; got strings "
                         f"({clipped(texts, 60)}): for one text pass [words] (its result is the list of one); in a file, the field must hold "
                         'the JSON list of the words (["EU", "rejects", ...])')
    batch = [listed(words) for words in texts]
    for i, words in enumerate(batch):
        if not isinstance(words, (list, tuple)) or not all(isinstance(w, str) for w in words):
            raise InputError(f"text {i} is {type(words).__name__} {clipped(words, 80)}: with {option} each text is "
                             "the list of its words (strings)")
    return [[str(w) for w in words] for words in batch], model


def word_offsets(e: tokenizers.Encoding, words: list[str], delimiter: str) -> list[tuple[int, int]]:
    """Each token's span in ``delimiter.join(words)``, the text the pipeline's spans index: the ``tokenizers``
    library gives a split text's spans within each word, so each moves by its word's first character
    (``gather_pre_entities``' ``word_to_chars_map``); the template's tokens keep theirs.

    Args:
        e: the words' encoding (``is_pretokenized=True``).
        words: the text's words.
        delimiter: what joins them.
    """
    starts = [0]
    for word in words[:-1]:
        starts.append(starts[-1] + len(word) + len(delimiter))
    return [(a, b) if w is None else (a + starts[w], b + starts[w]) for (a, b), w in zip(e.offsets, e.word_ids)]


def splits_words(tok: Tokenizer) -> None:
    """Refuse words given split to a byte-level BPE that adds no space before a word (RoBERTa's, as saved): each word
    would be read as the continuation of the one before (``Ġ`` is the space it never sees), so transformers' fast
    tokenizer refuses them too, asking for ``add_prefix_space=True``.

    Raises:
        InputError: such a tokenizer.
    """
    if any(p["type"] == "ByteLevel" and not p.get("add_prefix_space") for p in steps(tok.backend.pre_tokenizer)):
        raise InputError("this model's tokenizer (byte-level BPE without add_prefix_space, as RoBERTa's is saved) "
                         "cannot read words given split: each would lose the space before it, as transformers' "
                         "tokenizer says too; tag the text as one string (the words joined with spaces), or set "
                         '"add_prefix_space": true in the ByteLevel pre_tokenizer of its tokenizer.json')
