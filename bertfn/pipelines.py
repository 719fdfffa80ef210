"""fill-mask: predict the words behind ``[MASK]``, shaped like transformers' ``pipeline("fill-mask")``.

The whole pipeline is: tokenize -> :func:`~bertfn.encoder.encoder` -> take the hidden states at the
``[MASK]`` positions -> :func:`~bertfn.heads.mlm_head` -> softmax -> top k. Texts of a batch are
sorted by length and run in groups, each padded only to its own longest text.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import torch

from .encoder import encoder
from .errors import InputError
from .heads import mlm_head
from .loading import Model, load

DEFAULT_MODEL = "google-bert/bert-base-uncased"

_models: dict[str, Model] = {}
_models_lock = threading.Lock()


def get_model(model: Model | str | Path | None) -> Model:
    """A loaded model: given, or loaded once per process by name (default: bert-base-uncased)."""
    if isinstance(model, Model):
        return model
    name = str(model) if model is not None else DEFAULT_MODEL
    with _models_lock:
        if name not in _models:
            _models[name] = load(name)
        return _models[name]


def target_ids(model: Model, targets: str | list[str]) -> list[int]:
    """Vocabulary ids of ``targets``, as the transformers pipeline picks them.

    A target that is a vocabulary entry is used as is. Otherwise it is tokenized and its *first*
    word piece stands for it, with a warning (e.g. "romanesque" -> "roman"); a target that
    tokenizes to nothing is skipped with a warning. Duplicates count once.
    """
    targets = [targets] if isinstance(targets, str) else list(targets)
    tok = model.tokenizer
    ids: list[int] = []
    for t in targets:
        if not isinstance(t, str):
            raise InputError(f"targets must be strings, got {type(t).__name__}: {t!r:.60}")
        i = tok.token_to_id(t)
        if i is None:
            pieces = tok.backend.encode(t, add_special_tokens=False).ids
            if not pieces:
                warnings.warn(f"target {t!r} is not in the vocabulary and tokenizes to nothing; skipped", stacklevel=3)
                continue
            i = pieces[0]
            warnings.warn(f"target {t!r} is not in the vocabulary; using its first word piece "
                          f"{tok.id_to_token(i)!r} instead", stacklevel=3)
        if i not in ids:
            ids.append(i)
    if not ids:
        raise InputError(f"none of the targets {targets!r} maps to a vocabulary entry; pass whole words "
                         "or word pieces of the model's vocabulary")
    return ids


def fill_mask(
    inputs: str | list[str],
    model: Model | str | Path | None = None,
    *,
    top_k: int = 5,
    targets: str | list[str] | None = None,
    batch_size: int = 16,
    device: str | torch.device | None = None,
) -> list:
    """Fill every ``[MASK]`` in a text (or a list of texts) with the model's most likely tokens.

    Returns what ``transformers.pipeline("fill-mask")`` returns: for a text with one mask, a list of
    ``top_k`` dicts ``{"score", "token", "token_str", "sequence"}`` best first; with several masks,
    one such list per mask; for a list of texts, a list of those. ``targets`` restricts the answers
    to the given words. ``model``: a hub id, a local folder or a loaded :class:`Model`
    (default: google-bert/bert-base-uncased, loaded once per process).
    """
    single = isinstance(inputs, str)
    texts = [inputs] if single else inputs
    if not isinstance(texts, (list, tuple)) or not texts:
        raise InputError(f"fill_mask takes a string or a non-empty list of strings, got {inputs!r:.80}")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InputError(f"text {i} is a {type(t).__name__}, not a string: {t!r:.60}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise InputError(f"top_k must be a positive integer, got {top_k!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")

    m = get_model(model)
    if device is not None:
        m = m.to(device)
    tok = m.tokenizer
    if tok is None:
        raise InputError(f"model {m.name!r} has no tokenizer (tokenizer.json or vocab.txt); fill_mask needs one")
    if "cls.predictions.decoder.weight" not in m.state:
        raise InputError(f"model {m.name!r} has no masked-LM head (cls.predictions.*): it cannot fill masks; "
                         "load a *ForMaskedLM or *ForPreTraining checkpoint")
    wanted = target_ids(m, targets) if targets is not None else None
    k = min(top_k, len(wanted) if wanted is not None else tok.vocab_size, m.config.vocab_size)

    enc = tok(list(texts))
    lengths = enc.attention_mask.sum(dim=1).tolist()
    for i, n in enumerate(lengths):
        if not (enc.input_ids[i, :n] == tok.mask_token_id).any():
            raise InputError(f"text {i} has no {tok.mask_token} token: {texts[i]!r:.80}; "
                             f"put {tok.mask_token} where the word to predict goes")
        if n > m.config.max_position_embeddings:
            raise InputError(f"text {i} is {n} tokens long but the model reads at most "
                             f"{m.config.max_position_embeddings}; shorten it")

    results: list = [None] * len(texts)
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            S = max(lengths[i] for i in rows)  # pad this group only to its own longest text
            ids = enc.input_ids[rows, :S].to(m.device)
            mask = enc.attention_mask[rows, :S].to(m.device)
            h = encoder(m.params, ids, mask, enc.token_type_ids[rows, :S].to(m.device)).last_hidden_state
            where = (ids == tok.mask_token_id).nonzero()  # (N, 2): (row in group, position) of every [MASK]
            logits = mlm_head(m.params, h[where[:, 0], where[:, 1]])  # (N, V): the head at the masks only
            probs = logits.float().softmax(dim=-1)
            if wanted is not None:
                probs = probs[:, wanted]  # (N, len(targets))
            scores, picks = probs.topk(k, dim=-1)  # (N, k) each
            scores, picks, where = scores.tolist(), picks.tolist(), where.tolist()
            for r, i in enumerate(rows):
                n = lengths[i]
                row_ids = enc.input_ids[i, :n].tolist()
                masks = [(pos, s, p) for (g, pos), s, p in zip(where, scores, picks) if g == r]
                results[i] = _propositions(tok, row_ids, masks, wanted)
    return results[0] if single else results


def _propositions(tok, row_ids: list[int], masks: list, wanted: list[int] | None) -> list:
    """One text's answers in the pipeline's shape: a list of dicts, or a list of them per mask."""
    one_mask = len(masks) == 1
    out = []
    for pos, scores, picks in masks:
        answers = []
        for score, pick in zip(scores, picks):
            token = wanted[pick] if wanted is not None else pick
            filled = [t for t in row_ids[:pos] + [token] + row_ids[pos + 1:] if t != tok.pad_token_id]
            answers.append({
                "score": score,
                "token": token,
                "token_str": tok.decode([token]),
                "sequence": tok.decode(filled, skip_special_tokens=one_mask),
            })
        out.append(answers)
    return out[0] if one_mask else out
