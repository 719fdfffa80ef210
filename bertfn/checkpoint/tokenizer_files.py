"""What a checkpoint's tokenizer files say: the parts of ``tokenizer.json`` the tokenizer asks about, the
special tokens by role, and BERT's WordPiece pipeline built from ``vocab.txt``.

:class:`~bertfn.checkpoint.tokenizer.Tokenizer` reads a checkpoint's tokenizer through these: whether its
normalizer lowercases, which marks begin a word (``"▁"``, ``"Ġ"``), which tokens are its start, separator,
mask, padding and unknown tokens (named by ``tokenizer_config.json`` or ``special_tokens_map.json``, else
the usual ones), and, for a checkpoint with only a ``vocab.txt``, the pipeline ``BertTokenizerFast`` converts to.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from ..errors import CheckpointError, unreadable

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""BERT's special tokens, those a ``vocab.txt`` holds."""

ROLES = {
    "cls": (("cls_token", "bos_token"), ("[CLS]", "<s>")),
    "sep": (("sep_token", "eos_token"), ("[SEP]", "</s>")),
    "mask": (("mask_token",), ("[MASK]", "<mask>")),
    "pad": (("pad_token",), ("[PAD]", "<pad>")),
    "unk": (("unk_token",), ("[UNK]", "<unk>")),
}
"""Each special token's role: (the tokenizer_config.json keys that may name it, in order; the usual names,
BERT's and RoBERTa's, tried after them)."""


def read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except PermissionError:
        raise unreadable(path) from None
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path} is not readable JSON ({e}); re-download or remove it") from e


def token_name(value: object) -> str | None:
    """A special token's name as tokenizer_config.json or special_tokens_map.json holds it: a string, or a
    dict with ``"content"`` (an ``AddedToken``); None for anything else (absent, null)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def steps(component: object) -> list[dict]:
    """The steps of a normalizer or pre-tokenizer as tokenizer.json spells them, a Sequence's in order."""
    def flat(spec: dict) -> list[dict]:
        inner = spec.get("normalizers", spec.get("pretokenizers", [])) if spec["type"] == "Sequence" else None
        return [step for part in inner for step in flat(part)] if inner is not None else [spec]
    return flat(json.loads(component.__getstate__())) if component is not None else []


def lowercases(normalizer: object) -> bool | None:
    """Whether the normalizer lowercases: BERT's normalizer's flag, True for a Lowercase step, None when no
    step is about case (the text's case reaches the vocabulary)."""
    for step in steps(normalizer):
        if step["type"] == "BertNormalizer":
            return bool(step["lowercase"])
        if step["type"] == "Lowercase":
            return True
    return None


def word_marks(pre_tokenizer: object) -> tuple[str, ...]:
    """The marks that begin a word's first piece in the vocabulary: SentencePiece's ``"▁"`` (Metaspace) and
    byte-level BPE's ``"Ġ"`` (a space, as ByteLevel spells bytes); none for WordPiece, which marks the rest."""
    return tuple("Ġ" if step["type"] == "ByteLevel" else step["replacement"]
                 for step in steps(pre_tokenizer) if step["type"] in ("ByteLevel", "Metaspace"))


def find_special(backend: _HFTokenizer, names: dict, role: str) -> tuple[str | None, int | None, list[str]]:
    """The token of ``role`` (a key of :data:`ROLES`) in ``backend``'s vocabulary: (name, id, the names looked for).

    names: tokenizer_config.json's entries (``{"mask_token": "<mask>", ...}``); the names they give are tried
    first, then the usual ones. (None, None, looked) when the vocabulary has none of them.
    """
    keys, usual = ROLES[role]
    looked = list(dict.fromkeys([*filter(None, (token_name(names.get(k)) for k in keys)), *usual]))
    for name in looked:
        i = backend.token_to_id(name)
        if i is not None:
            return name, i, looked
    return None, None, looked


def wordpiece_from_vocab(vocab: Path, options: dict) -> _HFTokenizer:
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
