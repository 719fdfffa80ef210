"""DeBERTa-v2/v3's ``spm.model`` (a SentencePiece ``ModelProto``) read as data, without the sentencepiece library.

The hub's DeBERTa-v3 folders ship ``spm.model``, often with no ``tokenizer.json``. transformers turns it into a fast
tokenizer with ``DebertaV2Converter`` (``convert_slow_tokenizer.py``, through the sentencepiece and protobuf packages);
:func:`deberta_from_spm` builds the same pipeline from the file's bytes: the protobuf wire format is read by
:func:`fields` (varints, length-delimited and 32-bit fields: all a ModelProto's pieces and normalizer use), nothing in
the file is run. What it reads of the proto (sentencepiece_model.proto):

    ModelProto      1: pieces (repeated SentencePiece), 2: trainer_spec, 3: normalizer_spec
    SentencePiece   1: piece (string), 2: score (float), 3: type (1 normal, 2 unknown, 3 control, 4 user defined,
                    6 byte: ``<0x41>``, a piece like any other here)
    TrainerSpec     3: model_type (1 unigram), 40: unk_id
    NormalizerSpec  2: precompiled_charsmap (bytes)

The pipeline (``DebertaV2Converter``): a Unigram of the pieces and scores; normalizer [Lowercase where
``do_lower_case``], Strip, the precompiled character map, runs of spaces to one; pre-tokenizer [Punctuation where
``split_by_punct``], Metaspace ("▁", prepended always); ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B:1 [SEP]:1``; control
and user-defined pieces (and the unknown one, special and matched in normalized text as transformers makes it) as
added tokens, and ``[MASK]`` (DebertaV2Tokenizer adds it after the pieces) at the end. No byte fallback, as the
converter: a character no piece covers is the unknown piece even where the file's trainer_spec asks for bytes
(the slow, sentencepiece tokenizer writes its bytes there; the fast one, which the pipelines use, is followed).
tests/test_sentencepiece_oracle.py holds this to both on models trained by sentencepiece itself.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

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

from ..errors import CheckpointError


def varint(data: bytes, i: int) -> tuple[int, int]:
    """The base-128 varint at ``data[i:]`` and the index after it.

    Args:
        data: the message's bytes.
        i: where the varint starts.
    """
    value, shift = 0, 0
    while True:
        if i >= len(data):
            raise CheckpointError("spm.model ends inside a number: the file is cut short or not a SentencePiece model")
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
            raise CheckpointError(f"spm.model holds a protobuf field of wire type {wire}, which a SentencePiece model "
                                  "does not have: the file is not a SentencePiece model; re-download it")
        if i > len(data):
            raise CheckpointError("spm.model ends inside a field: the file is cut short; re-download it")
        yield number, value


def read_model(path: Path) -> tuple[list[tuple[str, float, int]], int, int, bytes]:
    """The pieces ``(piece, score, type)``, model type, unk id and precompiled character map of a ``spm.model``.

    Args:
        path: the file.
    """
    pieces, model_type, unk_id, charsmap = [], 1, 0, b""
    for number, value in fields(path.read_bytes()):
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
        elif number == 3:  # NormalizerSpec
            for n, v in fields(value):
                if n == 2:
                    charsmap = v
    return pieces, model_type, unk_id, charsmap


def deberta_from_spm(path: Path, options: dict) -> _HFTokenizer:
    """DeBERTa-v2/v3's fast tokenizer from its ``spm.model``, as ``DebertaV2Converter`` builds it.

    Args:
        path: the ``spm.model``.
        options: ``tokenizer_config.json`` (``do_lower_case``, ``split_by_punct``, ``mask_token``).

    Raises:
        CheckpointError: a file that is not a unigram SentencePiece model.
    """
    pieces, model_type, unk_id, charsmap = read_model(path)
    if model_type != 1 or not pieces:
        raise CheckpointError(f"{path} is not a unigram SentencePiece model (model_type {model_type}, {len(pieces)} "
                              "pieces); DeBERTa's spm.model is one: re-download it")
    tok = _HFTokenizer(models.Unigram([(p, s) for p, s, _ in pieces], unk_id=unk_id, byte_fallback=False))
    steps = [normalizers.Lowercase()] if options.get("do_lower_case") else []
    steps.append(normalizers.Strip())
    if charsmap:
        steps.append(normalizers.Precompiled(charsmap))
    tok.normalizer = normalizers.Sequence([*steps, normalizers.Replace(Regex(" {2,}"), " ")])
    split = [pre_tokenizers.Punctuation(behavior="isolated")] if options.get("split_by_punct") else []
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.pre_tokenizer = pre_tokenizers.Sequence([*split, metaspace])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    # control and user-defined pieces are matched in the raw text; the unknown one in the normalized text, as
    # DebertaV2Tokenizer makes it (AddedToken(unk_token, normalized=True)): "[unk]" is it when lowercasing, and a
    # space before it stays a "▁" of its own ("A [UNK]": ▁A ▁ [UNK], not ▁A [UNK])
    tok.add_tokens([AddedToken(p, normalized=kind == 2, special=kind in (2, 3))
                    for p, _, kind in pieces if kind in (2, 3, 4)])  # unknown, control, user-defined
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
