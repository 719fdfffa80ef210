"""Text <-> ids: BERT's WordPiece tokenizer through the ``tokenizers`` library.

Reads ``tokenizer.json`` when the checkpoint has one (the exact pipeline its authors saved), else
builds the standard BERT pipeline from ``vocab.txt`` with the lowercasing that
``tokenizer_config.json`` asks for (``BertTokenizerFast``'s conversion): clean text, split Chinese
characters, lowercase and strip accents, split on whitespace and punctuation, WordPiece with ``##``
continuations, then ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` with token type ids 0 / 1.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import NamedTuple

import torch
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from ..errors import CheckpointError, InputError, UnknownTokensWarning, require_readable, syntax, unreadable

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class Encoding(NamedTuple):
    """A padded batch. Tensors are (B, S) int64; ``offsets[b][s]`` is a (start, end) character span;
    ``word_ids[b][s]`` numbers the words of a text from 0 (the pre-tokenizer's words: whitespace and
    punctuation split them), None for [CLS], [SEP] and padding. ``unknown``: ``{text index: what to say
    of it}`` for the texts whose tokens are mostly [UNK] (:meth:`Tokenizer.unknown`)."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor  # 1 for real tokens, 0 for padding
    tokens: list[list[str]]
    offsets: list[list[tuple[int, int]]]
    word_ids: list[list[int | None]] | None = None
    unknown: dict[int, str] | None = None  # the texts that are mostly [UNK]: Tokenizer.unknown


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except PermissionError:
        raise unreadable(path) from None
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path} is not readable JSON ({e}); re-download or remove it") from e


def _wordpiece_from_vocab(vocab: Path, options: dict) -> _HFTokenizer:
    """The BERT tokenizer pipeline built from ``vocab.txt`` (what ``BertTokenizerFast`` converts to)."""
    try:
        wordpiece = models.WordPiece.from_file(str(vocab), unk_token="[UNK]", max_input_chars_per_word=100)
    except Exception as e:  # the Rust side raises plain Exceptions
        raise CheckpointError(f"{vocab} is not a WordPiece vocabulary ({e}); re-download it") from e
    tok = _HFTokenizer(wordpiece)
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=options.get("tokenize_chinese_chars", True),
        strip_accents=options.get("strip_accents"),
        lowercase=options.get("do_lower_case", True),
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens([t for t in SPECIAL_TOKENS if tok.token_to_id(t) is not None])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    if cls is None or sep is None:
        raise CheckpointError(f"{vocab} has no [CLS] or [SEP] token; it is not a BERT vocabulary")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return tok


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
        raise InputError(f"{which} must be a string, got {type(text).__name__}: {text!r:.60}")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate, e.g. from bytes decoded with errors="surrogateescape"
            raise InputError(f"{which} holds {text[e.start]!r} at character {e.start}, which is not valid Unicode; "
                             "decode the bytes with their real encoding (or errors='replace')") from None


class Tokenizer:
    """A BERT tokenizer: ``tok(["a text", ...])`` -> padded :class:`Encoding`; ``tok.decode(ids)``.

    ``clean_up_spaces`` mirrors transformers' ``clean_up_tokenization_spaces``: read from
    tokenizer_config.json, else True for a tokenizer built from vocab.txt (the slow BertTokenizer's
    default) and False for one read from tokenizer.json (the fast tokenizers' default).
    """

    def __init__(self, backend: _HFTokenizer, max_length: int | None = None, clean_up_spaces: bool = False,
                 source: str = "given"):
        self.backend = backend
        self.max_length = max_length  # the model's max positions, if known
        self.clean_up_spaces = clean_up_spaces
        self.source = source  # the file it was read from, for messages
        normalizer = backend.normalizer
        self.lowercase = bool(normalizer.lowercase) if isinstance(normalizer, normalizers.BertNormalizer) else None
        ids = {t: backend.token_to_id(t) for t in SPECIAL_TOKENS}
        missing = [t for t in ("[CLS]", "[SEP]", "[MASK]") if ids[t] is None]
        if missing:
            raise CheckpointError(f"the tokenizer has no {', '.join(missing)} token; it is not a BERT tokenizer")
        self.cls_token_id, self.sep_token_id, self.mask_token_id = ids["[CLS]"], ids["[SEP]"], ids["[MASK]"]
        self.pad_token_id = ids["[PAD]"] if ids["[PAD]"] is not None else 0
        self.unk_token_id = ids["[UNK]"]
        self.mask_token = "[MASK]"
        # counted once: tokenizers rebuilds its whole vocabulary map on every get_vocab_size (~14 ms for 30k)
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        backend.no_truncation()
        backend.enable_padding(pad_id=self.pad_token_id, pad_token=backend.id_to_token(self.pad_token_id))

    @classmethod
    def from_folder(cls, folder: str | Path, max_length: int | None = None,
                    lowercase: bool | None = None) -> Tokenizer | None:
        """``tokenizer.json`` if present, else ``vocab.txt`` (+ ``tokenizer_config.json``); None if neither."""
        folder = Path(folder)
        for name in ("tokenizer.json", "vocab.txt"):
            if (folder / name).is_file():
                return cls.from_path(folder / name, max_length, lowercase)
        return None

    @classmethod
    def from_path(cls, path: str | Path, max_length: int | None = None, lowercase: bool | None = None) -> Tokenizer:
        """Read a tokenizer from a ``tokenizer.json``, a WordPiece ``vocab.txt`` or a folder holding one.

        A ``tokenizer_config.json`` beside the file sets lowercasing (``do_lower_case``) and
        ``clean_up_tokenization_spaces``. lowercase: True / False overrides it (False keeps case, as
        ``BertTokenizer(vocab, do_lower_case=False)``); None keeps what the files say (a bare vocab.txt
        lowercases, as transformers' default).
        """
        path = Path(path).expanduser()
        try:
            if path.is_dir():
                tok = cls.from_folder(path, max_length, lowercase)
                if tok is None:
                    raise CheckpointError(f"{path} has no tokenizer.json or vocab.txt; pass the tokenizer's file itself")
                return tok
            exists = path.is_file()
        except PermissionError:  # the folder, or one above it, that this user may not search or list
            raise unreadable(path) from None
        if not exists:
            raise InputError(f"there is no tokenizer file {str(path)!r}; pass a vocab.txt, a tokenizer.json or a "
                             "folder holding one")
        require_readable(path)  # the tokenizers library reports a denied file as a bare Exception
        options = _read_json(path.parent / "tokenizer_config.json")
        if lowercase is not None:
            options["do_lower_case"] = lowercase
        if path.suffix == ".json":
            try:
                backend = _HFTokenizer.from_file(str(path))
            except Exception as e:  # the Rust side raises plain Exceptions
                raise CheckpointError(f"{path} cannot be read as a tokenizer.json ({e}); re-download it") from e
            if lowercase is not None:
                if not isinstance(backend.normalizer, normalizers.BertNormalizer):
                    raise InputError(f"{path} does not use BERT's normalizer, so lowercase= cannot change it; "
                                     "leave lowercase unset for this tokenizer")
                backend.normalizer.lowercase = lowercase
        else:
            backend = _wordpiece_from_vocab(path, options)
        from_vocab = path.suffix != ".json"
        return cls(backend, max_length, bool(options.get("clean_up_tokenization_spaces", from_vocab)), str(path))

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        return self.backend.id_to_token(i)

    def __call__(self, texts: str | list[str], pairs: str | list[str] | None = None) -> Encoding:
        """Tokenize one text or a batch (optionally with second segments) into a padded batch.

        texts: str or list of B str; pairs: the same number of second segments (token type 1).
        Returns (B, S) tensors padded with [PAD] to the longest row.
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

    def unknown(self, texts: list[str], pairs: list[str] | None, batch: list) -> dict[int, str]:
        """The texts whose tokens are mostly ``[UNK]`` (the model would answer, confidently, about nothing):
        ``{index: what to say of it}``, e.g. ``"2 of its 2 tokens are [UNK] (e.g. 'é'), so the results say
        little about it; <the likely fix>"``.

        The fix named: keeping case (a cased vocabulary read with lowercasing, e.g. amino acids as
        capitals), writing capitals (small letters given to a vocabulary of capitals), or spacing (a
        vocabulary of single characters written without spaces).
        batch: the ``tokenizers`` encodings of ``texts`` (and their second segments ``pairs``).
        """
        specials = {self.cls_token_id, self.sep_token_id, self.mask_token_id, self.pad_token_id}
        flagged = {}
        for i, e in enumerate(batch):
            segments = (texts[i], pairs[i] if pairs is not None else "")
            pieces = [(t, s, o) for t, s, o in zip(e.ids, e.sequence_ids, e.offsets) if t not in specials]
            unknown = [segments[s][a:b] for t, s, (a, b) in pieces if t == self.unk_token_id]
            if unknown and 2 * len(unknown) > len(pieces):
                flagged[i] = (len(unknown), len(pieces), unknown)
        if not flagged:
            return {}
        vocab = self.backend.get_vocab()
        letters = [w for w in vocab if not w.startswith(("[", "##"))]
        single_chars = sum(len(w) == 1 for w in letters) > 0.8 * len(letters)
        said = {}
        for i, (n_unk, n, unknown) in flagged.items():
            shown = written = unknown[0][:4]  # the start of the first unknown word, and how to write it
            fixes = []
            if self.lowercase and sum(w in vocab or all(c in vocab for c in w) for w in unknown) * 2 >= len(unknown):
                fixes.append(f"this vocabulary is cased: load it with {syntax(python='lowercase=False', cli='--cased')}")
            elif sum(w != w.upper() and all(c.upper() in vocab for c in w) for w in unknown) * 2 >= len(unknown):
                fixes.append("this vocabulary holds capitals")
                written = written.upper()
            if single_chars and any(len(w) > 1 and all(c in vocab or c.upper() in vocab for c in w) for w in unknown):
                fixes.append("this vocabulary holds single characters, to be separated by spaces")
                written = " ".join(written)
            advice = "; ".join(fixes) + (f": write {written!r}, not {shown!r}" if written != shown else "")
            said[i] = (f"{n_unk} of its {n} tokens are [UNK] (e.g. {', '.join(repr(w[:20]) for w in unknown[:3])}), "
                       f"so the results say little about it; {advice or 'use the tokenizer that came with the model'}")
        return said

    def warn_unknown(self, texts: list[str], pairs: list[str] | None, batch: list) -> dict[int, str]:
        """Warn, once for the batch, about the texts that are mostly ``[UNK]`` (:meth:`unknown`), naming them by
        index: ``text 3 (and texts 7, 9, +12 more like it): 2 of its 2 tokens are [UNK] ...``; returns :meth:`unknown`."""
        said = self.unknown(texts, pairs, batch)
        if said:
            first, *others = said
            more = f", +{len(others) - 9} more" if len(others) > 9 else ""
            also = f" (and text{'s' * (len(others) > 1)} {', '.join(map(str, others[:9]))}{more} like it)" if others else ""
            warnings.warn(f"text {first}{also}: {said[first]}", UnknownTokensWarning, stacklevel=3)
        return said
    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """ids -> text, joining ``##`` pieces; same defaults as ``tokenizer.decode`` in transformers."""
        text = self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return clean_up_tokenization(text) if self.clean_up_spaces else text
