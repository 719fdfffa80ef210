"""Text <-> ids: the tokenizer of a BERT-family checkpoint, through the ``tokenizers`` library.

Reads ``tokenizer.json`` when the checkpoint has one: the exact pipeline its authors saved, of any kind
(BERT's WordPiece, RoBERTa's byte-level BPE, XLM-R's and ALBERT's SentencePiece unigram, a word-level
vocabulary), with its own template (``[CLS] A [SEP]``, ``<s> A </s></s> B </s>``, ...). Else it builds the
standard BERT pipeline from ``vocab.txt`` with the lowercasing that ``tokenizer_config.json`` asks for
(``BertTokenizerFast``'s conversion): clean text, split Chinese characters, lowercase and strip accents,
split on whitespace and punctuation, WordPiece with ``##`` continuations, then ``[CLS] A [SEP]`` or
``[CLS] A [SEP] B [SEP]`` with token type ids 0 / 1. An ESM-2 ``vocab.txt`` (``tokenizer_class`` ``EsmTokenizer``
in tokenizer_config.json, or a vocabulary of ``<cls>``, ``<eos>`` and residue letters) gets ``EsmTokenizer``'s pipeline
instead: one token per residue of a sequence written without spaces (``"MKT<mask>A"``), ``<cls> A <eos>`` or
``<cls> A <eos> B <eos>``, all of token type 0, decoded with a space between tokens. DeBERTa's ``spm.model`` and the
slow tokenizers' files of XLM-R, CamemBERT, ALBERT and RoBERTa (``sentencepiece.bpe.model``, ``spiece.model``,
``vocab.json`` + ``merges.txt``) are read into the fast tokenizer transformers converts them to
(bertfn/checkpoint/sentencepiece.py, bertfn/checkpoint/slow_tokenizers.py).

The special tokens (start, separator, mask, padding, unknown) are those ``tokenizer_config.json`` or
``special_tokens_map.json`` names (``cls_token``, ``mask_token``, ...), else the usual ones (:data:`ROLES`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import NamedTuple

import torch
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import normalizers

from ..errors import (CheckpointError, InputError, UnknownTokensWarning, clipped, outside_stacklevel, require_readable,
                      syntax, unreadable)
from .sentencepiece import deberta_from_spm
from .slow_tokenizers import FILES as SLOW_FILES
from .slow_tokenizers import from_slow_files
from .tokenizer_files import (ESM_NAMES, ROLES, VOCABULARY_FILES, VOCABULARY_NAMES, esm_from_vocab, find_special,
                              is_esm_vocab, lowercases, read_json, word_marks, wordpiece_from_vocab)

NO_FIX = ("its vocabulary has no pieces for them: a script or language the model was not trained on, or another "
          "model's tokenizer (use the one that came with the model)")
"""What :meth:`Tokenizer.unknown` says of unknown tokens no other fix explains: the text's own tokenizer lacks them
(Thai given to a model trained on European languages) as often as another model's tokenizer does."""


class Encoding(NamedTuple):
    """A padded batch. Tensors are (B, S) int64; ``offsets[b][s]`` is a (start, end) character span;
    ``word_ids[b][s]`` numbers the words of a text (and again of its second segment) from 0 (the
    pre-tokenizer's words: whitespace, and for most kinds punctuation, split them), None for the tokens the
    template adds ([CLS], [SEP], <s>, </s>) and padding. ``unknown``: ``{text index: what to say of it}``
    for the texts whose tokens are mostly the unknown token (:meth:`Tokenizer.unknown`)."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor  # 1 for real tokens, 0 for padding
    tokens: list[list[str]]
    offsets: list[list[tuple[int, int]]]
    word_ids: list[list[int | None]] | None = None
    unknown: dict[int, str] | None = None  # the texts that are mostly [UNK] (or <unk>): Tokenizer.unknown


def clean_up_tokenization(text: str) -> str:
    """Glue punctuation and English contractions back on ("rome , do" -> "rome, do"), as transformers'
    ``PreTrainedTokenizerBase.clean_up_tokenization`` does after decoding."""
    for spaced, tight in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                          (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(spaced, tight)
    return text


def check_text(text: str, which: str) -> None:
    """Raise :class:`InputError` unless ``text`` is a str the tokenizer can take (valid Unicode).

    ``which`` names it in the message, e.g. ``"text 3"``.
    """
    if not isinstance(text, str):
        raise InputError(f"{which} must be a string, got {type(text).__name__}: {clipped(text, 60)}")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate, e.g. from bytes decoded with errors="surrogateescape"
            raise InputError(f"{which} holds {text[e.start]!r} at character {e.start}, which is not valid Unicode; "
                             "decode the bytes with their real encoding (or errors='replace')") from None


def warn_texts(messages: dict[int, str], category: type[Warning]) -> None:
    """One warning for the texts ``messages`` names, by index: ``text 3 (and texts 7, 9, +12 more like it): <what it
    says of text 3>``; nothing when it names none.

    Args:
        messages: ``{text index: what to say of it}``.
        category: the warning's class.
    """
    if not messages:
        return
    first, *others = sorted(messages)
    more = f", +{len(others) - 9} more" if len(others) > 9 else ""
    also = f" (and text{'s' * (len(others) > 1)} {', '.join(map(str, others[:9]))}{more} like it)" if others else ""
    warnings.warn(f"text {first}{also}: {messages[first]}", category, stacklevel=outside_stacklevel())  # the user's call


class Tokenizer:
    """A BERT-family tokenizer: ``tok(["a text", ...])`` -> padded :class:`Encoding`; ``tok.decode(ids)``.

    ``cls_token_id``, ``sep_token_id``, ``mask_token_id``, ``pad_token_id``, ``unk_token_id`` and their names
    ``cls_token``, ... (``mask_token``: ``"[MASK]"``, ``"<mask>"``, ...) are found by their role (:data:`ROLES`): the
    name ``names`` gives, else the usual ones. No padding token: id 0 pads (attention masks hide it); no unknown
    token: None. ``lowercase``: whether the tokenizer lowercases (None: it has no step about case); ``word_marks``:
    the marks that begin a word in its vocabulary (``("▁",)`` for SentencePiece, ``("Ġ",)`` for byte-level BPE).

    Args:
        backend: the ``tokenizers`` tokenizer.
        max_length: the model's max positions, if known.
        clean_up_spaces: mirrors transformers' ``clean_up_tokenization_spaces``: read from tokenizer_config.json, else
            True for BERT's WordPiece built from vocab.txt (the slow BertTokenizer's default) and False for one read
            from tokenizer.json (the fast tokenizers' default) or ESM's vocab.txt (EsmTokenizer's).
        source: the file it was read from, for messages.
        names: the special tokens' names (tokenizer_config.json's ``cls_token``, ``bos_token``, ...).
    """

    def __init__(self, backend: _HFTokenizer, max_length: int | None = None, clean_up_spaces: bool = False,
                 source: str = "given", names: dict | None = None):
        self.backend = backend
        self.max_length = max_length  # the model's max positions, if known
        self.clean_up_spaces = clean_up_spaces
        self.source = source  # the file it was read from, for messages
        self.lowercase = lowercases(backend.normalizer)
        self.word_marks = word_marks(backend.pre_tokenizer)  # "▁" (SentencePiece), "Ġ" (byte-level BPE), or none
        found = {role: find_special(backend, names or {}, role) for role in ROLES}
        missing = [f"no {role} token (looked for {', '.join(found[role][2])})"
                   for role in ("cls", "sep", "mask") if found[role][1] is None]
        if missing:
            raise CheckpointError(
                f"{source}: the tokenizer has {'; '.join(missing)}; a BERT-family tokenizer needs a start, a "
                "separator and a mask token. Use the tokenizer that came with the model, or name its tokens in "
                "tokenizer_config.json (cls_token, sep_token, mask_token)")
        self.cls_token, self.cls_token_id, _ = found["cls"]
        self.sep_token, self.sep_token_id, _ = found["sep"]
        self.mask_token, self.mask_token_id, _ = found["mask"]
        self.unk_token, self.unk_token_id, _ = found["unk"]
        self.pad_token_id = found["pad"][1] if found["pad"][1] is not None else 0
        self.pad_token = backend.id_to_token(self.pad_token_id)
        # counted once: tokenizers rebuilds its whole vocabulary map on every get_vocab_size
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        backend.no_truncation()
        backend.enable_padding(pad_id=self.pad_token_id, pad_token=self.pad_token)

    @classmethod
    def from_folder(cls, folder: str | Path, max_length: int | None = None,
                    lowercase: bool | None = None) -> Tokenizer | None:
        """The first of :data:`~bertfn.checkpoint.tokenizer_files.VOCABULARY_FILES` in ``folder`` (``tokenizer.json``,
        else ``vocab.txt``, ..., with ``tokenizer_config.json``), read by :meth:`from_path`; None if there is none.

        Args:
            folder: the folder to look in.
            max_length: the model's max positions, if known.
            lowercase: as in :meth:`from_path`.
        """
        folder = Path(folder)
        for name in VOCABULARY_FILES:
            if (folder / name).is_file():
                return cls.from_path(folder / name, max_length, lowercase)
        return None

    @classmethod
    def from_path(cls, path: str | Path, max_length: int | None = None, lowercase: bool | None = None) -> Tokenizer:
        """Read a tokenizer from a ``tokenizer.json``, a WordPiece or ESM ``vocab.txt``, DeBERTa's ``spm.model``, a slow
        tokenizer's ``sentencepiece.bpe.model`` (XLM-R, CamemBERT), ``spiece.model`` (ALBERT) or ``vocab.json`` (or
        ``merges.txt``: RoBERTa), or a folder holding one (:data:`~bertfn.checkpoint.tokenizer_files.VOCABULARY_FILES`). A
        ``tokenizer_config.json`` beside the file sets lowercasing (``do_lower_case``, for a WordPiece vocab.txt),
        the kind of a vocab.txt (``tokenizer_class``: ``EsmTokenizer`` for ESM's, :func:`is_esm_vocab`),
        ``clean_up_tokenization_spaces`` and the special tokens' names (``mask_token``, ...; else those of
        ``special_tokens_map.json``, else the usual ones: ESM's ``<cls>``, ``<eos>``, ... for its vocab.txt).

        Args:
            path: the file, or a folder holding one.
            max_length: the model's max positions, if known.
            lowercase: True / False overrides the files (False keeps case, as ``BertTokenizer(vocab,
                do_lower_case=False)``); None keeps what the files say (a bare WordPiece vocab.txt lowercases, as
                transformers' default; ALBERT's spiece.model sets ``do_lower_case``). ESM's vocab.txt keeps case and
                takes no True; RoBERTa's, XLM-R's and CamemBERT's files (and a tokenizer.json without BERT's
                normalizer) take neither.
        """
        path = Path(path).expanduser()
        try:
            if path.is_dir():
                tok = cls.from_folder(path, max_length, lowercase)
                if tok is None:
                    raise CheckpointError(f"{path} has no {VOCABULARY_NAMES}; pass the tokenizer file itself")
                return tok
            exists = path.is_file()
        except PermissionError:  # the folder, or one above it, that this user may not search or list
            raise unreadable(path) from None
        if not exists:
            raise InputError(f"there is no tokenizer file {str(path)!r}; pass a vocab.txt, a tokenizer.json or a "
                             "folder holding one")
        require_readable(path)  # the tokenizers library reports a denied file as a bare Exception
        options = read_json(path.parent / "tokenizer_config.json")
        names = {**read_json(path.parent / "special_tokens_map.json"), **options}
        if lowercase is not None:
            options["do_lower_case"] = lowercase
        if path.name in SLOW_FILES:  # a slow tokenizer's files, read as transformers converts them
            if lowercase is not None and path.name != "spiece.model":  # ALBERT's do_lower_case is what it sets
                raise InputError(f"{path} is a tokenizer that keeps case as transformers reads it, so "
                                 f"{syntax(python='lowercase=', cli='--cased')} cannot change it; leave it out for "
                                 "this tokenizer")
            (backend, names), wordpiece = from_slow_files(path, options), False
        elif path.suffix == ".json":
            try:
                backend = _HFTokenizer.from_file(str(path))
            except Exception as e:  # the Rust side raises plain Exceptions
                raise CheckpointError(f"{path} cannot be read as a tokenizer.json ({e}); re-download it") from e
            if lowercase is not None:
                if not isinstance(backend.normalizer, normalizers.BertNormalizer):
                    raise InputError(f"{path} does not use BERT's normalizer, so "
                                     f"{syntax(python='lowercase=', cli='--cased')} cannot change it; leave it out "
                                     "for this tokenizer")
                backend.normalizer.lowercase = lowercase
            wordpiece = False
        elif path.name == "spm.model":  # DeBERTa-v2/v3's, read as data (bertfn/checkpoint/sentencepiece.py)
            backend, wordpiece = deberta_from_spm(path, options), False
        elif is_esm_vocab(path, options):
            if lowercase:
                raise InputError(f"{path} is ESM's vocabulary, whose residues are capitals and which never lowercases, "
                                 "so lowercase=True cannot apply; leave lowercase unset for this tokenizer")
            names = {**ESM_NAMES, **names}
            backend, wordpiece = esm_from_vocab(path, names), False
        else:
            backend, wordpiece = wordpiece_from_vocab(path, options), True
        return cls(backend, max_length, bool(options.get("clean_up_tokenization_spaces", wordpiece)), str(path), names)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        return self.backend.id_to_token(i)

    def __call__(self, texts: str | list[str], pairs: str | list[str] | None = None) -> Encoding:
        """Tokenize one text or a batch (optionally with second segments) into a padded batch.

        Args:
            texts: str or list of B str.
            pairs: the same number of second segments (A and B joined as the template says).

        Returns:
            (B, S) tensors padded with the padding token to the longest row (``word_ids`` numbers the words of each
                segment; token types as the template gives them: 0 / 1 for BERT's, all 0 for RoBERTa's).
        """
        texts = [texts] if isinstance(texts, str) else list(texts)
        if pairs is not None:
            pairs = [pairs] if isinstance(pairs, str) else list(pairs)
            if len(pairs) != len(texts):
                raise InputError(f"got {len(texts)} texts but {len(pairs)} second segments; pass one per text")
        for i, t in enumerate(texts + (pairs or [])):
            check_text(t, f"text {i}" if i < len(texts) else f"second segment {i - len(texts)}")
        batch = self.backend.encode_batch(list(zip(texts, pairs)) if pairs is not None else texts)
        unknown = self.warn_unknown(texts, pairs, batch)
        return Encoding(
            input_ids=torch.tensor([e.ids for e in batch], dtype=torch.long),
            token_type_ids=torch.tensor([e.type_ids for e in batch], dtype=torch.long),
            attention_mask=torch.tensor([e.attention_mask for e in batch], dtype=torch.long),
            tokens=[e.tokens for e in batch],
            offsets=[e.offsets for e in batch],
            word_ids=[e.word_ids for e in batch],
            unknown=unknown,
        )

    def unknown(self, texts: list[str], pairs: list[str] | None, batch: list,
                offsets: list[list[tuple[int, int]]] | None = None) -> dict[int, str]:
        """The texts whose tokens are mostly the unknown token (the model would answer, confidently, about nothing):
        ``{index: what to say of it}``, e.g. ``"2 of its 2 tokens are [UNK] (e.g. 'é'), so the results say little
        about it; <the likely fix>"`` (``<unk>`` for RoBERTa's kind: the tokenizer's own name). The fix named: keeping
        case (a cased vocabulary read with BERT's lowercasing, e.g. amino acids as capitals), writing capitals (small
        letters given to a vocabulary of capitals), or spacing (a vocabulary of single characters written without
        spaces, unless the tokenizer splits them itself, as ESM's does); else :data:`NO_FIX`. The vocabulary's words are read without
        their marks (``##`` pieces left out, ``▁`` and ``Ġ`` taken off) and without its ``[...]`` / ``<...>``
        specials; a lone ``▁`` piece is a space, not a token of the text.

        Args:
            texts: the texts.
            pairs: their second segments, or None.
            batch: the ``tokenizers`` encodings of ``texts`` (and their second segments ``pairs``).
            offsets: each encoding's tokens' spans in its text, where they are not the encoding's own (a text given as
                its words, whose encoding spans each token within its word).
        """
        specials = {self.cls_token_id, self.sep_token_id, self.mask_token_id, self.pad_token_id,
                    *(self.backend.token_to_id(m) for m in self.word_marks)}  # and a lone "▁": a space, not text
        flagged = {}
        for i, e in enumerate(batch):
            segments = (texts[i], pairs[i] if pairs is not None else "")
            spans = e.offsets if offsets is None else offsets[i]
            pieces = [(t, s, o) for t, s, o in zip(e.ids, e.sequence_ids, spans) if t not in specials]
            unknown = [segments[s][a:b] for t, s, (a, b) in pieces if t == self.unk_token_id]
            if unknown and 2 * len(unknown) > len(pieces):
                flagged[i] = (len(unknown), len(pieces), unknown)
        if not flagged:
            return {}
        vocab = self._vocabulary_words()
        single_chars = sum(len(w) == 1 for w in vocab) > 0.8 * len(vocab)
        cased_switch = isinstance(self.backend.normalizer, normalizers.BertNormalizer)  # what lowercase=False turns off
        said = {}
        for i, (n_unk, n, unknown) in flagged.items():
            shown = written = unknown[0][:4]  # the start of the first unknown word, and how to write it
            fixes = []
            longest = getattr(self.backend.model, "max_input_chars_per_word", None)  # WordPiece's: longer is [UNK]
            if longest is not None and sum(len(w) > longest for w in unknown) * 2 >= len(unknown):
                fixes.append(f"a word of more than {longest} characters is one {self.unk_token} to this WordPiece "
                             "vocabulary: split it with spaces")
            elif self.lowercase and cased_switch and sum(w != w.lower() and (w in vocab or all(c in vocab for c in w))
                                                         for w in unknown) * 2 >= len(unknown):
                fixes.append(f"this vocabulary is cased: load it with {syntax(python='lowercase=False', cli='--cased')}")
            elif sum(w != w.upper() and all(c.upper() in vocab for c in w) for w in unknown) * 2 >= len(unknown):
                fixes.append("this vocabulary holds capitals")
                written = written.upper()
            if single_chars and any(len(w) > 1 and all(c in vocab or c.upper() in vocab for c in w) for w in unknown) \
                    and self.unk_token_id in self.backend.encode(written, add_special_tokens=False).ids:  # not ESM's
                fixes.append("this vocabulary holds single characters, to be separated by spaces")
                written = " ".join(written)
            advice = "; ".join(fixes) + (f": write {written!r}, not {shown!r}" if written != shown else "")
            examples = ", ".join(repr(w[:20]) for w in unknown[:3])
            said[i] = (f"{n_unk} of its {n} tokens are {self.unk_token} (e.g. {examples}), "
                       f"so the results say little about it; {advice or NO_FIX}")
        return said

    def _vocabulary_words(self) -> set[str]:
        """The vocabulary's entries as the text spells them: without the specials (``[CLS]``, ``<mask>``, any
        ``[...]`` or ``<...>``), without WordPiece's ``##`` continuations, and with the word-start mark of
        SentencePiece (``▁``) or byte-level BPE (``Ġ``) taken off: ``"▁Rome"`` -> ``"Rome"``."""
        prefix = getattr(self.backend.model, "continuing_subword_prefix", None)
        words = set()
        for w in self.backend.get_vocab():
            if (len(w) > 2 and w[0] + w[-1] in ("[]", "<>")) or (prefix and w.startswith(prefix)):
                continue
            mark = next((m for m in self.word_marks if w.startswith(m) and len(w) > len(m)), "")
            words.add(w[len(mark):])
        return words

    def warn_unknown(self, texts: list[str], pairs: list[str] | None, batch: list,
                     offsets: list[list[tuple[int, int]]] | None = None) -> dict[int, str]:
        """Warn, once for the batch, about the texts that are mostly ``[UNK]`` (:meth:`unknown`), naming them by
        index. ``text 3 (and texts 7, 9, +12 more like it): 2 of its 2 tokens are [UNK] ...``; returns
        :meth:`unknown`.

        Args:
            texts: the texts.
            pairs: their second segments, or None.
            batch: the ``tokenizers`` encodings.
            offsets: as in :meth:`unknown`.
        """
        said = self.unknown(texts, pairs, batch, offsets)
        warn_texts(said, UnknownTokensWarning)
        return said

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """ids -> text, as ``tokenizer.decode`` in transformers (same defaults). The tokenizer's own decoder joins the
        pieces (``##`` continuations, ``▁`` and ``Ġ`` as spaces: the id of ``"Ġromans"`` alone is ``" romans"``), then
        punctuation is glued back if ``clean_up_spaces``.

        Args:
            ids: token ids.
            skip_special_tokens: leave out the special tokens.
        """
        text = self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return clean_up_tokenization(text) if self.clean_up_spaces else text
