"""Sentence embeddings: one vector per text, pooled from the encoder's last hidden states.

    e = pool(h_1 .. h_S over the text's real tokens)        then, with normalize, e / ||e||_2

:func:`embed` tokenizes, runs the encoder and pools (:func:`pool`) as
sentence-transformers' ``Pooling`` module does (mean over the real tokens, the [CLS] vector, or the
largest value per dimension, padding ignored); ``normalize`` is its ``Normalize`` module. With the
pooling a model was trained with, the vectors are that model's sentence embeddings: for
all-MiniLM-L6-v2 (mean, normalised) they equal ``SentenceTransformer(folder).encode(texts,
normalize_embeddings=True)``. The encoder runs on the fast path, as fill_mask's does: texts sorted by
length and laid end to end without padding (:func:`~bertfn.fast.batching.encoded_groups`), with the
numbers of :func:`~bertfn.model.encoder.encoder` (tests/test_fast_path.py).

Long texts: a text longer than the model reads is cut, as sentence-transformers cuts it, to its
first ``max_length`` tokens ([CLS], the start of the text, [SEP]), with a warning. ``max_length``
defaults to the ``max_seq_length`` of the folder's ``sentence_bert_config.json`` (256 for
all-MiniLM-L6-v2), else the tokens the model reads (:func:`~bertfn.model.family.longest_input`: its positions, 2
fewer in RoBERTa's kind).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path

import torch

from ..checkpoint.model import Model
from ..checkpoint.resolve import get_model, require_tokenizer, text_list, texts_and_model
from ..errors import InputError, syntax
from ..fast.batching import encoded_groups
from ..model.recorder import NO_TRACE, Edit, with_edits
from ..model.family import longest_input

Tensor = torch.Tensor

POOLINGS = ("mean", "cls", "max")
"""How the token vectors become one: their mean, the [CLS] token's, or the largest value per dimension."""


def pool(h: Tensor, mask: Tensor, pooling: str) -> Tensor:
    """One vector per row from the hidden states of its real tokens (sentence-transformers' ``Pooling``).

    Args:
        h: (B, S, H) last hidden states.
        mask: (B, S) 1 for real tokens, 0 for padding.
        pooling: "mean": sum of the real tokens' vectors / their number; "cls": the first token's vector;
            "max": the largest value of each dimension over the real tokens.

    Returns:
        (B, H).
    """
    if pooling == "cls":
        return h[:, 0]  # (B, H)
    keep = mask[:, :, None].to(h.dtype)  # (B, S, 1)
    if pooling == "mean":
        return (h * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1e-9)  # (B, H)
    return h.masked_fill(keep == 0, torch.finfo(h.dtype).min).amax(dim=1)  # (B, H)


def sentence_settings(m: Model) -> dict:
    """``sentence_bert_config.json`` of the folder the model came from ({} when there is none).

    Looked for beside the weights (``m.name`` as a folder or file) and beside its tokenizer's file,
    which for a hub id is the snapshot folder in the Hugging Face cache.

    Args:
        m: the model.

    Warns:
        UserWarning: the file is not a readable JSON object (it is ignored).
    """
    places = [Path(m.name)] + ([Path(m.tokenizer.source)] if m.tokenizer else [])
    for place in places:  # a hub id names no path here: only its tokenizer's file does
        folder = place if place.is_dir() else place.parent if place.is_file() else None
        path = folder / "sentence_bert_config.json" if folder is not None else None
        if path is not None and path.is_file():
            try:
                settings = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(settings, dict):
                    return settings
            except (OSError, ValueError):
                pass
            warnings.warn(f"{path} is not a readable JSON object; embed ignores it", stacklevel=3)
            return {}
    return {}


def max_tokens(m: Model, max_length: int | None = None, settings: dict | None = None) -> int:
    """The tokens per text :func:`embed` reads at most, [CLS] and [SEP] included.

    all-MiniLM-L6-v2: 256 (its sentence-transformers setting), though its position table holds 512.

    Args:
        m: the model (its positions P).
        max_length: when given, the answer (an integer from 2 to P); else the ``max_seq_length``
            of the model's ``sentence_bert_config.json``, else P.
        settings: that file, when read already.

    Raises:
        InputError: a ``max_length`` that is not an integer from 2 to P.
    """
    P = longest_input(m.config)
    if max_length is None:
        settings = sentence_settings(m) if settings is None else settings
        return min(settings.get("max_seq_length") or P, P)
    if isinstance(max_length, bool) or not isinstance(max_length, int) or not 2 <= max_length <= P:
        raise InputError(f"max_length must be an integer from 2 to {P} (the tokens the model reads), got {max_length!r}")
    return max_length


def embed(
    texts: str | list[str],
    model: Model | str | Path | None = None,
    *,
    pooling: str = "mean",
    normalize: bool = False,
    batch_size: int = 32,
    max_length: int | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    edits: Mapping[str, Edit] | None = None,
) -> Tensor:
    """Sentence embeddings of ``texts``.

    Texts run at most ``batch_size`` at a time, sorted by length and laid end to end without padding.

    Args:
        texts: one string, or a list of N texts.
        model: a loaded :class:`Model`, a local folder or a hub id (default: bert-base-uncased; a model
            trained for embeddings such as all-MiniLM-L6-v2 gives far better ones).
        pooling: "mean", "cls" or "max" (:data:`POOLINGS`, :func:`pool`).
        normalize: scale each vector to length 1, so that a dot product is the cosine similarity.
        batch_size: texts per encoder pass, at most.
        max_length: tokens per text at most, [CLS] and [SEP] included (see the module docstring for the
            default); longer texts are cut to their start, with a warning.
        device: where the model runs (:func:`~bertfn.checkpoint.resolve.get_model`).
        dtype: the precision it runs in.
        edits: ``{point name: edit(tensor, point) -> tensor}``, as :func:`~bertfn.model.encoder.encoder`
            takes them (:mod:`bertfn.interventions` makes the usual ones); with edits the texts run through
            the reference functions, each group of texts as a padded batch, instead of the fast path.

    Returns:
        (N, H) float32 for a list of N texts, (H,) for one string; in the order of ``texts``, on the
            model's device.

    Raises:
        InputError: an unknown pooling, a bad normalize, batch_size or max_length.
        MissingPartError: a model without a tokenizer.

    Warns:
        UserWarning: texts longer than ``max_length`` tokens, cut.
    """
    texts, model = texts_and_model(texts, model, "embed")
    batch, single = text_list(texts, "embed")
    if pooling not in POOLINGS:
        raise InputError(f"pooling must be one of {', '.join(map(repr, POOLINGS))}, got {pooling!r}")
    if not isinstance(normalize, bool):
        raise InputError(f"normalize must be True or False, got {normalize!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")

    m = get_model(model, device, dtype)
    tok = require_tokenizer(m, "embed")
    points = with_edits(NO_TRACE, edits, m.config)
    P = longest_input(m.config)
    settings = sentence_settings(m)
    max_length = max_tokens(m, max_length, settings)
    if settings.get("do_lower_case"):  # sentence-transformers lowercases before its tokenizer, when asked to
        batch = [t.lower() for t in batch]

    enc = tok(list(batch))
    lengths = enc.attention_mask.sum(dim=1).tolist()
    cut = [i for i, n in enumerate(lengths) if n > max_length]
    if cut:
        warnings.warn(f"{len(cut)} text(s) longer than {max_length} tokens (text {cut[0]}: {lengths[cut[0]]}) were cut to "
                      f"their first {max_length}, as sentence-transformers does; pass "
                      f"{syntax(python='max_length=', cli='--max-length ')}N (at most {P}) to change that", stacklevel=2)
    lengths = [min(n, max_length) for n in lengths]  # a cut text keeps its first max_length tokens ...
    ids = enc.input_ids.clone()  # (N, S)
    for i in cut:
        ids[i, max_length - 1] = tok.sep_token_id  # ... and ends in [SEP], as sentence-transformers cuts it
    enc = enc._replace(input_ids=ids)
    out = torch.empty(len(batch), m.config.hidden_size, device=m.device)  # (N, H) float32
    with torch.inference_mode():
        for rows, _, h in encoded_groups(m, enc, lengths, batch_size, points=points):  # h: (T, H), the group's texts end to end
            for i, h_i in zip(rows, h.split([lengths[i] for i in rows])):  # text i's (n, H)
                out[i] = pool(h_i[None].float(), torch.ones(1, len(h_i), device=m.device), pooling)[0]
    if normalize:
        out = torch.nn.functional.normalize(out, p=2.0, dim=1)  # (N, H), each of length 1
    return out[0] if single else out
