"""What a checkpoint's tokenizer files say: the parts of ``tokenizer.json`` the tokenizer asks about, the
special tokens by role, and the pipelines built from a ``vocab.txt``: BERT's WordPiece, or ESM's residues.

:class:`~bertfn.checkpoint.tokenizer.Tokenizer` reads a checkpoint's tokenizer through these: whether its
normalizer lowercases, which marks begin a word (``"▁"``, ``"Ġ"``), which tokens are its start, separator,
mask, padding and unknown tokens (named by ``tokenizer_config.json`` or ``special_tokens_map.json``, else
the usual ones), and, for a checkpoint with only a ``vocab.txt``, which kind it is (:func:`is_esm_vocab`) and
the pipeline that mirrors its transformers tokenizer: the one ``BertTokenizerFast`` converts to, or
``EsmTokenizer``'s one token per vocabulary entry (:func:`esm_from_vocab`).
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Regex
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from ..errors import CheckpointError, read_settings, unreadable

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

ESM_NAMES = {"cls_token": "<cls>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
             "mask_token": "<mask>"}
"""ESM's special tokens by tokenizer_config.json key: ``EsmTokenizer``'s defaults, which a ``vocab.txt`` without
tokenizer_config.json gets. ESM has no separator of its own: ``<eos>`` ends each segment (the ``sep`` role)."""

PYTHON_WHITESPACE = Regex(r"[\s\x1c-\x1f]+")
"""What Python's ``str.split()`` splits on: Unicode's White_Space (the regex ``\\s``) and the four information
separators U+001C-U+001F, which ``str.isspace`` also counts."""


VOCABULARY_FILES = ("tokenizer.json", "vocab.txt", "spm.model", "sentencepiece.bpe.model", "spiece.model", "vocab.json",
                    "merges.txt")
"""The files a tokenizer is read from, in the order :meth:`~bertfn.checkpoint.tokenizer.Tokenizer.from_folder` looks
for them: the fast tokenizer's ``tokenizer.json``; BERT's or ESM's ``vocab.txt``; DeBERTa's ``spm.model``
(bertfn/checkpoint/sentencepiece.py); the slow tokenizers' files of XLM-R and CamemBERT, ALBERT and RoBERTa
(``vocab.json`` with ``merges.txt``: bertfn/checkpoint/slow_tokenizers.py)."""

VOCABULARY_NAMES = "tokenizer.json, vocab.txt, spm.model, sentencepiece.bpe.model, spiece.model or vocab.json"
"""The files of :data:`VOCABULARY_FILES`, for messages."""


MASK_SPELLINGS = {"[MASK]": "BERT's", "<mask>": "RoBERTa's and ESM-2's"}
"""The two ways the members spell the mask token, and whose they are: what a text may hold by mistake."""


def other_spelling(mask: str, text: str) -> str:
    """Whose spelling of the mask ``text`` holds where the model's is ``mask`` (``<mask>`` for a model that spells
    it ``[MASK]``, or the reverse), as a clause ending in ``"; "``; ``""`` when it holds neither.

    Args:
        mask: the model's mask token.
        text: a text without it (as typed, or as the tokenizer decodes it: spaces inside the other spelling
            are not read).
    """
    squeezed = "".join(text.split())
    other = next((m for m in MASK_SPELLINGS if m != mask and m in squeezed), None)
    return f"{other} is {MASK_SPELLINGS[other]} spelling and this model's is {mask}; " if other else ""


def stays_inside(name: str) -> bool:
    """Whether ``name``, a path a checkpoint's own file gives (a shard in an index, a module in ``modules.json``), names
    something inside the folder that file lies in: relative, with no ``..`` in it. A file downloaded with the model
    says where its parts are; it may not send bertfn to read another folder's files (``"../../etc"``, ``"/home"``).

    Args:
        name: the path as the file gives it.
    """
    return not (Path(name).is_absolute() or ".." in Path(name).parts)


def read_json(path: Path, kind: type = dict) -> dict:
    """The JSON of a checkpoint's settings file (:func:`~bertfn.errors.read_settings`), ``{}`` where there is none.

    Args:
        path: the file.
        kind: what it must hold: a JSON object (``dict``), as every such file does; ``object`` for a caller that checks
            what it holds itself (modules.json's list, a shard index's ``weight_map``).

    Raises:
        CheckpointError: a file that is unreadable, not JSON, or holds another kind (a list where a config's object
            goes, which ``.get`` met as a raw AttributeError).
    """
    if not path.is_file():
        return {}
    try:
        content = read_settings(path, fix="re-download or remove it")
    except PermissionError:
        raise unreadable(path) from None
    except OSError as e:
        raise CheckpointError(f"{path} cannot be read ({e}); re-download or remove it") from e
    if not isinstance(content, kind):
        raise CheckpointError(f"{path} should hold a JSON object of settings, as transformers and sentence-transformers "
                              f"write it, got a {type(content).__name__}; re-download or remove it")
    return content


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
    """The BERT tokenizer pipeline built from ``vocab.txt`` (what ``BertTokenizerFast`` converts to).

    Raises:
        CheckpointError: a file that is no WordPiece vocabulary, or tokenizer_config.json's settings of it that are not
            true, false (or, for ``strip_accents``, null).
    """
    for key in ("do_lower_case", "tokenize_chinese_chars", "strip_accents"):
        if key in options and not isinstance(options[key], bool) and not (key == "strip_accents" and options[key] is None):
            raise CheckpointError(f"{vocab.parent / 'tokenizer_config.json'}: {key} must be true or false"
                                  f"{' or null' if key == 'strip_accents' else ''}, got {options[key]!r}; fix the file or "
                                  "remove it")
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


def is_esm_vocab(vocab: Path, options: dict) -> bool:
    """Whether ``vocab.txt`` is ESM's (one token per residue, read by ``EsmTokenizer``) rather than BERT's WordPiece:
    ``tokenizer_config.json``'s ``tokenizer_class`` says so (``"EsmTokenizer"``, as ``save_pretrained`` writes it),
    or, where no class is named, the vocabulary holds ESM's ``<cls>`` and ``<eos>`` and not BERT's ``[CLS]``.

    Args:
        vocab: the ``vocab.txt``.
        options: tokenizer_config.json's entries.
    """
    named = options.get("tokenizer_class")
    if named:
        return named == "EsmTokenizer"
    try:
        tokens = {t.strip() for t in vocab.read_text(encoding="utf-8", errors="replace").splitlines()}
    except PermissionError:
        raise unreadable(vocab) from None
    return {"<cls>", "<eos>"} <= tokens and "[CLS]" not in tokens


def esm_from_vocab(vocab: Path, names: dict) -> _HFTokenizer:
    """ESM's tokenizer pipeline built from ``vocab.txt``: what ``EsmTokenizer`` (a slow, Python-only tokenizer that
    transformers has no fast conversion of) does, token for token.

    ``EsmTokenizer`` reads one token per line (each line stripped) and puts *every* vocabulary entry in its trie
    of tokens not to split, so the text is first cut at each entry found in it (``<mask>``, and each residue
    letter: ``"MKT"`` is ``M``, ``K``, ``T``); what lies between is split on whitespace (``str.split``) and each
    piece looked up whole, so a run of characters the vocabulary lacks (``"xy"``, or ``"mktay"``: the letters are
    capitals) is one ``<unk>``. Here: every entry an added token (the five of :data:`ESM_NAMES`' roles special,
    the rest not), Python's whitespace split, a word-level model, and ``<cls> A <eos>`` / ``<cls> A <eos> B <eos>``
    (``build_inputs_with_special_tokens``), all of token type 0. No decoder: tokens are joined with spaces, as
    ``EsmTokenizer.decode`` joins them (``"<cls> M K T <eos>"``).

    Args:
        vocab: the ``vocab.txt``.
        names: the special tokens' names by tokenizer_config.json key (:data:`ESM_NAMES` and what the files say).

    Raises:
        CheckpointError: the file is not UTF-8, has an empty line or a token twice, or lacks the start, end or
            unknown token.
    """
    try:
        tokens = [t.strip() for t in vocab.read_text(encoding="utf-8").splitlines()]  # EsmTokenizer's load_vocab_file
    except PermissionError:
        raise unreadable(vocab) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{vocab} is not a readable UTF-8 vocabulary ({e}); re-download it") from e
    if not tokens:
        raise CheckpointError(f"{vocab} is empty; an ESM vocabulary has one token per line; re-download it")
    ids = {}
    for i, t in enumerate(tokens):
        if not t:
            raise CheckpointError(f"{vocab}: line {i + 1} is empty, but each line of an ESM vocabulary is a token "
                                  "(its line number - 1 is its id); remove the blank line or re-download the file")
        if t in ids:
            raise CheckpointError(f"{vocab}: {t!r} is on lines {ids[t] + 1} and {i + 1}, so the id of line "
                                  f"{ids[t] + 1} would never be given; an ESM vocabulary holds each token once; "
                                  "re-download it")
        ids[t] = i
    cls, eos, unk = (token_name(names.get(k)) for k in ("cls_token", "eos_token", "unk_token"))
    missing = [f"{role} token {t!r}" for role, t in (("start", cls), ("end", eos), ("unknown", unk)) if t not in ids]
    if missing:
        raise CheckpointError(f"{vocab} has no {' or '.join(missing)}; it is not an ESM vocabulary "
                              "(tokenizer_config.json names the tokens: cls_token, eos_token, unk_token)")
    tok = _HFTokenizer(models.WordLevel(ids, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Split(PYTHON_WHITESPACE, behavior="removed")
    specials = {token_name(names.get(k)) for k in ESM_NAMES}
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tokens if t in specials])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in tokens if t not in specials])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {eos}", pair=f"{cls} $A {eos} $B {eos}", special_tokens=[(cls, ids[cls]), (eos, ids[eos])])
    return tok
