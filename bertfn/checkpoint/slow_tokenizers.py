"""The files of a tokenizer saved by transformers' slow (Python) classes, which write no ``tokenizer.json``: RoBERTa's
``vocab.json`` + ``merges.txt`` (byte-level BPE), XLM-R's and CamemBERT's ``sentencepiece.bpe.model``, ALBERT's
``spiece.model`` (SentencePiece models, read as data: bertfn/checkpoint/sentencepiece.py).

Each is read into the fast tokenizer transformers converts it to (``AutoTokenizer.from_pretrained`` on the folder:
``RobertaConverter``, ``XLMRobertaConverter``, ``CamembertConverter``, ``AlbertConverter`` of
``convert_slow_tokenizer.py``, then the fast class's own settings), token for token:

- RoBERTa: a byte-level BPE of ``vocab.json`` and of ``merges.txt``'s lines after the first (``#version``); the
  pre-tokenizer's and template's ``add_prefix_space`` and the template's ``trim_offsets`` from tokenizer_config.json
  (False and True by default); ``<s> A </s>`` / ``<s> A </s></s> B </s>``.
- XLM-R and CamemBERT: the pieces renumbered as fairseq numbered them (XLM-R: ``<s> <pad> </s> <unk>``, then the
  pieces after the file's first three; CamemBERT: ``<s>NOTUSED <pad> </s>NOTUSED <unk> <unk>NOTUSED``, then the
  pieces after the first), ``<mask>`` last; the file's character map, trailing spaces stripped, runs of spaces one
  ``▁``; Metaspace (``▁`` prepended always: the slow classes have no ``add_prefix_space``); ``<s> A </s>`` /
  ``<s> A </s> </s> B </s>``. ``tokenizer_class`` in tokenizer_config.json says which (else config.json's
  ``model_type``, else the model: CamemBERT's is BPE, XLM-R's unigram).
- ALBERT: the pieces as they are (a piece ending in a digit and a comma scored 100 lower); ``````/``''`` to ``"``,
  accents stripped unless ``keep_accents``, lowercased if ``do_lower_case`` (True by default), the character map,
  runs of spaces to one (``remove_space`` changes nothing in the fast tokenizer); ``[CLS] A [SEP]`` /
  ``[CLS] A [SEP] B:1 [SEP]:1``.

The added tokens are the fast tokenizer's (:func:`added_tokens`): those tokenizer_config.json lists
(``added_tokens_decoder``, with their ``lstrip``, ``normalized``, ...), or, in a folder saved before transformers 4.34,
``added_tokens.json``'s, and the special tokens (tokenizer_config.json's, then special_tokens_map.json's, else the
class's: the mask token taking the space before it, ``lstrip``).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as _HFTokenizer

from ..errors import CheckpointError, unreadable
from .sentencepiece import read_model, spm_backend
from .tokenizer_files import read_json, token_name

SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
                "additional_special_tokens")
"""The special tokens' keys in tokenizer_config.json, in the order transformers adds the missing ones."""

ROBERTA_NAMES = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>",
                 "pad_token": "<pad>", "mask_token": "<mask>"}

DEFAULTS = {
    "roberta": ROBERTA_NAMES,
    "xlm-roberta": ROBERTA_NAMES,
    "camembert": {**ROBERTA_NAMES, "additional_special_tokens": ["<s>NOTUSED", "</s>NOTUSED", "<unk>NOTUSED"]},
    "albert": {"bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "<unk>", "sep_token": "[SEP]",
               "pad_token": "<pad>", "cls_token": "[CLS]", "mask_token": "[MASK]"},
}
"""Each kind's special tokens where no file names them: its transformers class's defaults."""

CLASSES = {"RobertaTokenizer": "roberta", "XLMRobertaTokenizer": "xlm-roberta", "CamembertTokenizer": "camembert",
           "AlbertTokenizer": "albert"}
"""tokenizer_config.json's ``tokenizer_class`` (without ``Fast``) -> the kind read here."""

FILES = {"vocab.json": ("roberta",), "merges.txt": ("roberta",), "spiece.model": ("albert",),
         "sentencepiece.bpe.model": ("xlm-roberta", "camembert")}
"""Each slow tokenizer's file -> the kinds that save it."""


def kind_of(path: Path, options: dict) -> str:
    """Which kind of slow tokenizer ``path`` is (a key of :data:`DEFAULTS`): named by tokenizer_config.json's
    ``tokenizer_class``, else by config.json's ``model_type``, else, for a ``sentencepiece.bpe.model``, by the model
    (CamemBERT's is BPE, XLM-R's unigram).

    Args:
        path: one of :data:`FILES`.
        options: tokenizer_config.json's entries.

    Raises:
        CheckpointError: tokenizer_config.json names a class that does not save this file.
    """
    kinds = FILES[path.name]
    named = options.get("tokenizer_class")
    if isinstance(named, str) and named:
        kind = CLASSES.get(named.removesuffix("Fast"))
        if kind not in kinds:
            raise CheckpointError(
                f"{path.parent / 'tokenizer_config.json'} names the tokenizer class {named}, which bertfn does not "
                f"read {path.name} as (it reads it as {' or '.join(c for c, k in CLASSES.items() if k in kinds)}); "
                "pass the model's tokenizer.json instead")
        return kind
    model_type = read_json(path.parent / "config.json").get("model_type")
    if model_type in kinds:
        return model_type
    return kinds[0] if len(kinds) == 1 or read_model(path).model_type == 1 else "camembert"


def added_token(value: object, key: str, kind: str) -> AddedToken:
    """The added token a special token's entry makes, as the fast class makes it: a dict (an ``AddedToken`` as
    special_tokens_map.json writes it) with its own settings; a name as the class wraps it (the mask token takes the
    space before it, ``lstrip``; RoBERTa's others are matched in normalized text; the rest plain special tokens).

    Args:
        value: the entry: a name, or a dict with its ``content``.
        key: its key (:data:`SPECIAL_KEYS`).
        kind: the tokenizer's kind.
    """
    if isinstance(value, dict):
        settings = {k: value[k] for k in ("single_word", "lstrip", "rstrip", "normalized")
                    if isinstance(value.get(k), bool)}
        return AddedToken(value["content"], special=True, **settings)
    if key == "mask_token":
        return AddedToken(value, lstrip=True, rstrip=False, normalized=False, special=True)
    return AddedToken(value, normalized=kind == "roberta", special=True)


def added_tokens(folder: Path, options: dict, kind: str, present: set[str]) -> tuple[list[AddedToken], dict]:
    """The tokens the fast tokenizer adds to the converted one, in order, and the special tokens' names by key.

    The listed tokens first: tokenizer_config.json's ``added_tokens_decoder`` (by id), or, where it has none (saved
    before transformers 4.34), ``added_tokens.json``'s (special if a special token's name, else matched in normalized
    text); then the special tokens in :data:`SPECIAL_KEYS`' order: tokenizer_config.json's (a name listed in
    ``added_tokens_decoder`` with its settings there), over which special_tokens_map.json's come where no
    ``added_tokens_decoder`` is listed, over the class's (:data:`DEFAULTS`). As transformers does, a special token
    that is an ``AddedToken`` (a dict in the files, a listed one, the mask token, RoBERTa's) is added again with its
    settings (the mask token's ``lstrip`` over a control piece's), a plain name only where no added token has it.

    Args:
        folder: the tokenizer's folder.
        options: tokenizer_config.json's entries.
        kind: the tokenizer's kind.
        present: the converted tokenizer's added tokens (its control and user-defined pieces).
    """
    specials = {**DEFAULTS[kind], **{k: v for k, v in options.items() if k in SPECIAL_KEYS and v is not None}}
    listed = options.get("added_tokens_decoder")
    if isinstance(listed, dict):  # even empty: then neither special_tokens_map.json nor added_tokens.json is read
        try:
            tokens = [AddedToken(**{k: v for k, v in t.items() if k != "__type"})
                      for _, t in sorted(listed.items(), key=lambda it: int(it[0]))]
        except (TypeError, ValueError, AttributeError) as e:
            raise CheckpointError(f"{folder / 'tokenizer_config.json'}: added_tokens_decoder is not what transformers "
                                  f"writes, {{id: {{\"content\": ..., \"special\": ...}}}} ({e}); re-download it") from e
    else:
        specials.update({k: v for k, v in read_json(folder / "special_tokens_map.json").items()
                         if k in SPECIAL_KEYS and v is not None})
        names = {token_name(v) for k, v in specials.items() if k != "additional_special_tokens"}
        names |= {token_name(v) for v in specials.get("additional_special_tokens") or []}
        extra = read_json(folder / "added_tokens.json")
        tokens = [AddedToken(t, lstrip=False, rstrip=False, normalized=t not in names, special=t in names)
                  for t, _ in sorted(extra.items(), key=lambda it: it[1] if isinstance(it[1], int) else 0)]
    by_name = {t.content: t for t in tokens} if isinstance(listed, dict) else {}  # the names go to the listed tokens
    have = present | {t.content for t in tokens}
    for key in SPECIAL_KEYS:
        values = specials.get(key) if key == "additional_special_tokens" else [specials.get(key)]
        for value in values if isinstance(values, list) else []:
            name = token_name(value)
            if name is None:
                continue
            wrapped = isinstance(value, dict) or name in by_name or key == "mask_token" or kind == "roberta"
            if wrapped or name not in have:
                tokens.append(by_name.get(name) or added_token(value, key, kind))
                have.add(name)
    return tokens, {k: token_name(v) for k, v in specials.items() if k != "additional_special_tokens"}


def roberta_model(folder: Path) -> _HFTokenizer:
    """RoBERTa's byte-level BPE from ``vocab.json`` and ``merges.txt``, read as ``RobertaTokenizer`` reads them (the
    merges file's first line, ``#version: 0.2``, and its last, empty, are not merges; a merge listed twice counts
    once, at its first place).

    Args:
        folder: the folder holding both.
    """
    files = [folder / "vocab.json", folder / "merges.txt"]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise CheckpointError(f"{folder} has {' and '.join(f.name for f in files if f.is_file())} but no "
                              f"{missing[0]}: RoBERTa's byte-level BPE is both files (the slow tokenizer saves them "
                              "together); copy the missing one beside it, or pass the model's tokenizer.json")
    vocab = read_json(files[0])
    if not vocab or not all(isinstance(i, int) for i in vocab.values()):
        raise CheckpointError(f"{files[0]} is not a BPE vocabulary ({{token: id, ...}}); re-download it")
    try:
        lines = files[1].read_text(encoding="utf-8").split("\n")[1:-1]
    except PermissionError:
        raise unreadable(files[1]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{files[1]} is not a readable UTF-8 merges file ({e}); re-download it") from e
    merges = list(dict.fromkeys(tuple(line.split()) for line in lines))
    bad = next((i for i, m in enumerate(merges) if len(m) != 2), None)
    if bad is not None:
        raise CheckpointError(f"{files[1]}: {' '.join(merges[bad])!r} is not a merge (two tokens with a space between); "
                              "each line after the first is one; re-download the file")
    try:
        return _HFTokenizer(models.BPE(vocab, merges, continuing_subword_prefix="", end_of_word_suffix="",
                                       fuse_unk=False))
    except Exception as e:  # the Rust side raises plain Exceptions: a merge of tokens the vocabulary lacks
        raise CheckpointError(f"{files[1]} does not go with {files[0]} ({e}); re-download both") from e


def spm_model(path: Path, kind: str, options: dict) -> _HFTokenizer:
    """The converted tokenizer of an XLM-R, CamemBERT or ALBERT SentencePiece model: its pieces (renumbered as the
    member's converter does), normalizer, Metaspace and template.

    Args:
        path: the ``sentencepiece.bpe.model`` or ``spiece.model``.
        kind: ``"xlm-roberta"``, ``"camembert"`` or ``"albert"``.
        options: tokenizer_config.json's entries (ALBERT's ``do_lower_case`` and ``keep_accents``).
    """
    model = read_model(path)
    rest = [(p, s) for p, s, _ in model.pieces]
    if kind == "albert":
        scored, unk_id = [(p, s - 100 if len(p) > 1 and p[-1] == "," and p[-2].isdigit() else s)
                          for p, s in rest], model.unk_id
        steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
        if not options.get("keep_accents", False):
            steps += [normalizers.NFKD(), normalizers.StripAccents()]
        if options.get("do_lower_case", True):
            steps.append(normalizers.Lowercase())
        tail, start, end = [normalizers.Replace(Regex(" {2,}"), " ")], "[CLS]", "[SEP]"
        single, pair = "[CLS]:0 $A:0 [SEP]:0", "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1"
    else:
        first = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] if kind == "xlm-roberta" else \
            [("<s>NOTUSED", 0.0), ("<pad>", 0.0), ("</s>NOTUSED", 0.0), ("<unk>", 0.0), ("<unk>NOTUSED", -100.0)]
        scored, unk_id = [*first, *rest[3 if kind == "xlm-roberta" else 1:], ("<mask>", 0.0)], 3
        steps, start, end = [], "<s>", "</s>"
        tail = [normalizers.Strip(left=False, right=True), normalizers.Replace(Regex(" {2,}"), "▁")]
        single, pair = "<s> $A </s>", "<s> $A </s> </s> $B </s>"
    tok = spm_backend(path, model, scored, unk_id)
    tok.normalizer = normalizers.Sequence(
        [*steps, *([normalizers.Precompiled(model.charsmap)] if model.charsmap else []), *tail])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    ids = {t: tok.token_to_id(t) for t in (start, end)}
    if None in ids.values():
        raise CheckpointError(f"{path} has no {start} or {end} piece, so it is not {kind}'s SentencePiece model; "
                              "pass the model's tokenizer.json instead")
    tok.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=list(ids.items()))
    return tok


def from_slow_files(path: Path, options: dict) -> tuple[_HFTokenizer, dict]:
    """The fast tokenizer transformers converts a slow tokenizer's files to, and its special tokens' names by key.

    Args:
        path: one of :data:`FILES` (``merges.txt`` reads the ``vocab.json`` beside it).
        options: tokenizer_config.json's entries.
    """
    kind = kind_of(path, options)
    if kind == "roberta":
        tok = roberta_model(path.parent)
    else:
        tok = spm_model(path, kind, options)
    present = {t.content for t in tok.get_added_tokens_decoder().values()}
    tokens, names = added_tokens(path.parent, options, kind, present)
    tok.add_tokens(tokens)
    if kind == "roberta":
        prefix = bool(options.get("add_prefix_space", False))
        sep, cls = (names.get(k) for k in ("sep_token", "cls_token"))
        if tok.token_to_id(sep) is None or tok.token_to_id(cls) is None:
            raise CheckpointError(f"{path.parent / 'vocab.json'} has no {cls} or {sep} token, which RoBERTa's template "
                                  "puts around each text; name the model's in tokenizer_config.json (cls_token, "
                                  "sep_token) or pass its tokenizer.json")
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.RobertaProcessing(
            sep=(sep, tok.token_to_id(sep)), cls=(cls, tok.token_to_id(cls)), add_prefix_space=prefix,
            trim_offsets=bool(options.get("trim_offsets", True)))
    return tok, names
