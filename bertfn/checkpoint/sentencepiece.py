"""A SentencePiece model (a ``ModelProto``: DeBERTa's ``spm.model``, XLM-R's and CamemBERT's
``sentencepiece.bpe.model``, ALBERT's ``spiece.model``) read as data, without the sentencepiece library.

The hub's DeBERTa-v3 folders ship ``spm.model``, often with no ``tokenizer.json``; folders saved by older transformers
or by the slow tokenizer classes ship the others. transformers turns each into a fast tokenizer with a converter of
``convert_slow_tokenizer.py`` (through the sentencepiece and protobuf packages); here the protobuf wire format is read
by :func:`fields` (varints, length-delimited and 32-bit fields: all a ModelProto's pieces and normalizer use), nothing
in the file is run. What :func:`read_model` reads of the proto (sentencepiece_model.proto):

    ModelProto      1: pieces (repeated SentencePiece), 2: trainer_spec, 3: normalizer_spec
    SentencePiece   1: piece (string), 2: score (float), 3: type (1 normal, 2 unknown, 3 control, 4 user defined,
                    6 byte: ``<0x41>``, a piece like any other here)
    TrainerSpec     3: model_type (1 unigram, 2 BPE), 40: unk_id, 45: unk_piece
    NormalizerSpec  2: precompiled_charsmap (bytes)

:func:`spm_backend` is what every converter shares (``SpmConverter.tokenizer``): a Unigram of the pieces and scores,
or a BPE whose merges are found from the pieces as ``SentencePieceExtractor`` finds them, with the control and
user-defined pieces as added tokens. :func:`deberta_from_spm` is ``DebertaV2Converter``: normalizer [Lowercase where
``do_lower_case``], Strip, the precompiled character map, runs of spaces to one; pre-tokenizer [Punctuation where
``split_by_punct``], Metaspace ("▁", prepended always); ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B:1 [SEP]:1``; the unknown
piece an added token too (special and matched in normalized text as DebertaV2Tokenizer makes it), and ``[MASK]``
(DebertaV2Tokenizer adds it after the pieces) at the end. The other members' converters are in
bertfn/checkpoint/slow_tokenizers.py. No byte fallback, as the converters: a character no piece covers is the
unknown piece even where the file's trainer_spec asks for bytes (the slow, sentencepiece tokenizer writes its bytes
there; the fast one, which the pipelines use, is followed). tests/test_sentencepiece_oracle.py and
tests/test_slow_tokenizers.py hold this to transformers on models trained by sentencepiece itself.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from tokenizers import (
    AddedToken,
    Regex,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)
from tokenizers import Tokenizer as _HFTokenizer

from ..errors import CheckpointError, unreadable

NOT_SPM = "the file is cut short or not a SentencePiece model; re-download it"
"""What :func:`read_model` says of bytes that are no ``ModelProto``."""


class SpmModel(NamedTuple):
    """What :func:`read_model` reads of a SentencePiece model."""

    pieces: list[tuple[str, float, int]]  # (piece, score, type) in id order
    model_type: int  # 1 unigram, 2 BPE
    unk_id: int
    unk_piece: str
    charsmap: bytes  # the normalizer's precompiled character map; b"" for none


def varint(data: bytes, i: int) -> tuple[int, int]:
    """The base-128 varint at ``data[i:]`` and the index after it.

    Args:
        data: the message's bytes.
        i: where the varint starts.
    """
    value, shift = 0, 0
    while True:
        if i >= len(data):
            raise CheckpointError(f"it ends inside a number: {NOT_SPM}")
        b = data[i]
        value |= (b & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not b & 0x80:
            return value, i


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """A protobuf message's fields in order: ``(number, value)``, value an int (varint, 32- and 64-bit as raw ints)
    or the bytes of a length-delimited field (a string, bytes or a sub-message).

    Args:
        data: the message's bytes.

    Raises:
        CheckpointError: bytes that are not a protobuf message.
    """
    i = 0
    while i < len(data):
        key, i = varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(data, i)
        elif wire == 2:
            n, i = varint(data, i)
            value, i = data[i:i + n], i + n
        elif wire == 5:
            value, i = int.from_bytes(data[i:i + 4], "little"), i + 4
        elif wire == 1:
            value, i = int.from_bytes(data[i:i + 8], "little"), i + 8
        else:
            raise CheckpointError(f"it holds a protobuf field of wire type {wire}, which a SentencePiece model does "
                                  f"not have: {NOT_SPM}")
        if i > len(data):
            raise CheckpointError(f"it ends inside a field: {NOT_SPM}")
        yield number, value


def read_model(path: Path) -> SpmModel:
    """The pieces, model type, unknown piece and precompiled character map of a SentencePiece model file.

    Args:
        path: the file.

    Raises:
        CheckpointError: a file that is not a SentencePiece model (another file under its name, cut short).
    """
    try:
        data = path.read_bytes()
    except PermissionError:
        raise unreadable(path) from None
    pieces, model_type, unk_id, unk_piece, charsmap = [], 1, 0, "<unk>", b""
    try:
        for number, value in fields(data):
            if number == 1:  # SentencePiece
                piece, score, kind = "", 0.0, 1
                for n, v in fields(value):
                    if n == 1:
                        piece = v.decode("utf-8")
                    elif n == 2:
                        score = struct.unpack("<f", v.to_bytes(4, "little"))[0]
                    elif n == 3:
                        kind = v
                pieces.append((piece, score, kind))
            elif number == 2:  # TrainerSpec
                for n, v in fields(value):
                    if n == 3:
                        model_type = v
                    elif n == 40:
                        unk_id = v
                    elif n == 45:
                        unk_piece = v.decode("utf-8")
            elif number == 3:  # NormalizerSpec
                charsmap = next((v for n, v in fields(value) if n == 2), charsmap)
    except CheckpointError as e:
        raise CheckpointError(f"{path} cannot be read as a SentencePiece model: {e}") from None
    except (TypeError, AttributeError, UnicodeDecodeError, OverflowError, struct.error) as e:  # a field of another kind
        raise CheckpointError(f"{path} cannot be read as a SentencePiece model ({type(e).__name__}: {e}): "
                              f"{NOT_SPM}") from None
    if not pieces or not isinstance(charsmap, bytes) or not 0 <= unk_id < len(pieces):
        raise CheckpointError(f"{path} is not a SentencePiece model ({len(pieces)} pieces, unknown piece at "
                              f"{unk_id}): {NOT_SPM}")
    return SpmModel(pieces, model_type, unk_id, unk_piece, charsmap)


def bpe_merges(pieces: dict[str, int], scored: list[tuple[str, float]]) -> list[tuple[str, str]]:
    """The merges of a BPE SentencePiece model, as transformers' ``generate_merges`` finds them from the pieces
    (``SentencePieceExtractor.extract(vocab_scores)``): every split of a piece into two pieces, ordered by the piece's
    score (highest first), then by the lengths of the two parts, ties by the parts' ids.

    Args:
        pieces: the model's pieces by id, ``{piece: id}``.
        scored: the converter's vocabulary: ``(piece, score)`` as the tokenizer numbers them.
    """
    merges = []
    for merge, score in dict(scored).items():
        local = [(merge[:i], merge[i:], score) for i in range(1, len(merge))
                 if merge[:i] in pieces and merge[i:] in pieces]
        merges.extend(sorted(local, key=lambda m: (pieces[m[0]], pieces[m[1]])))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(a, b) for a, b, _ in merges]


def spm_backend(path: Path, model: SpmModel, scored: list[tuple[str, float]], unk_id: int) -> _HFTokenizer:
    """The model of a converted SentencePiece tokenizer (``SpmConverter.tokenizer``): a Unigram of ``scored`` (unigram
    files) or a BPE over it with :func:`bpe_merges` (BPE files, CamemBERT's), with the control pieces as special added
    tokens and the user-defined ones as added tokens, all matched in the raw text.

    Args:
        path: the file, for messages.
        model: what :func:`read_model` read.
        scored: the converter's vocabulary, ``(piece, score)`` by id (the file's pieces, renumbered by some members).
        unk_id: the unknown piece's id in it.
    """
    if model.model_type == 1:
        tok = _HFTokenizer(models.Unigram(scored, unk_id=unk_id, byte_fallback=False))
    elif model.model_type == 2:
        merges = bpe_merges({p: i for i, (p, _, _) in enumerate(model.pieces)}, scored)
        vocab = {p: i for i, (p, _) in enumerate(scored)}
        tok = _HFTokenizer(models.BPE(vocab, merges, unk_token=model.unk_piece, fuse_unk=True, byte_fallback=False))
    else:
        raise CheckpointError(f"{path} is a SentencePiece model of type {model.model_type}, neither unigram (1) nor "
                              "BPE (2), which transformers does not convert either; re-download it")
    tok.add_tokens([AddedToken(p, normalized=False, special=kind == 3) for p, _, kind in model.pieces
                    if kind in (3, 4)])  # control, user-defined
    return tok


def deberta_from_spm(path: Path, options: dict) -> _HFTokenizer:
    """DeBERTa-v2/v3's fast tokenizer from its ``spm.model``, as ``DebertaV2Converter`` builds it.

    Args:
        path: the ``spm.model``.
        options: ``tokenizer_config.json`` (``do_lower_case``, ``split_by_punct``, ``mask_token``).

    Raises:
        CheckpointError: a file that is not a unigram SentencePiece model.
    """
    model = read_model(path)
    if model.model_type != 1:
        raise CheckpointError(f"{path} is not a unigram SentencePiece model (model_type {model.model_type}); "
                              "DeBERTa's spm.model is one: re-download it")
    tok = spm_backend(path, model, [(p, s) for p, s, _ in model.pieces], model.unk_id)
    steps = [normalizers.Lowercase()] if options.get("do_lower_case") else []
    steps.append(normalizers.Strip())
    if model.charsmap:
        steps.append(normalizers.Precompiled(model.charsmap))
    tok.normalizer = normalizers.Sequence([*steps, normalizers.Replace(Regex(" {2,}"), " ")])
    split = [pre_tokenizers.Punctuation(behavior="isolated")] if options.get("split_by_punct") else []
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.pre_tokenizer = pre_tokenizers.Sequence([*split, metaspace])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    # the unknown piece is matched in the normalized text, as DebertaV2Tokenizer makes it (AddedToken(unk_token,
    # normalized=True)): "[unk]" is it when lowercasing, and a space before it stays a "▁" of its own ("A [UNK]":
    # ▁A ▁ [UNK], not ▁A [UNK])
    tok.add_tokens([AddedToken(model.pieces[model.unk_id][0], normalized=True, special=True)])
    mask = options.get("mask_token", "[MASK]")
    mask = mask.get("content", "[MASK]") if isinstance(mask, dict) else mask
    tok.add_special_tokens([AddedToken(mask, normalized=False, special=True)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    if cls is None or sep is None:
        raise CheckpointError(f"{path} has no [CLS] or [SEP] piece, so it is not DeBERTa's spm.model; pass the "
                              "model's tokenizer.json instead")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok
