"""Sentence embeddings: one vector per text, made as the model's sentence-transformers folder says.

    e = after_pooling(pool(h_1 .. h_S over the text's pooled tokens))[:truncate_dim]

:func:`embed` is ``SentenceTransformer(folder).encode(texts)``: it reads the folder's modules
(``model.sentence_folder``: the Pooling module's modes, Dense layers, Normalize, the
prompts, ``truncate_dim``), puts the prompt before each text, tokenizes, runs the encoder and pools
(:mod:`bertfn.tasks.pooling`). all-MiniLM-L6-v2's folder (mean, Normalize) gives unit vectors, BGE's (CLS, Normalize)
the [CLS] vector normalized, a folder with a Dense module vectors of its width. A folder without ``modules.json``
is pooled by the mean, with nothing after it, as sentence-transformers reads a plain transformers folder.
``pooling=`` and ``normalize=`` override the folder (with a warning, once: the vectors are then not those the model
was trained to give). The encoder runs on the fast path, as fill_mask's does: texts sorted by length and laid end to
end without padding (:func:`~bertfn.tasks.runner.per_text`), with the numbers of
:func:`~bertfn.model.encoder.encoder` (tests/test_fast_path.py).

Prompts, as ``encode(prompt_name=, prompt=)`` takes them: ``prompt_name="query"`` puts the folder's query prompt
(``"query: "`` for E5, ``"Represent this sentence for searching relevant passages: "`` for BGE) before each text;
``prompt=`` any text; neither, the folder's ``default_prompt_name`` (if it has one). A Pooling module with
``include_prompt`` false leaves the prompt's tokens out of the pooling. ``truncate_dim=`` (or the folder's) cuts
each vector to its first values after every module (Matryoshka models): a normalized folder's cut vectors are not
normalized again, unless ``normalize=True`` is asked, as ``encode(normalize_embeddings=True)`` does.
:func:`similarity` compares vectors with the folder's ``similarity_fn_name`` (cosine by default).

Long texts: a text longer than the model reads is cut, as sentence-transformers cuts it, to its
first ``max_length`` tokens ([CLS], the start of the text, [SEP]), with a warning. ``max_length``
defaults to the folder's ``max_seq_length`` (sentence_bert_config.json, else the tokenizer's ``model_max_length``;
256 for all-MiniLM-L6-v2), else the tokens the model reads (:func:`~bertfn.model.family.longest_input`: its
positions, 2 fewer in RoBERTa's kind).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers.normalizers import Lowercase

from ..checkpoint.checks import count
from ..checkpoint.model import Model
from ..checkpoint.resolve import get_model
from ..checkpoint.sentence_folder import NORMALIZE, POOLINGS, SIMILARITIES, Dense, SentenceFolder
from ..checkpoint.tokenizer import Tokenizer
from ..errors import BertfnWarning, ConfigError, InputError, clipped, syntax
from ..model.family import longest_input
from ..model.recorder import Edit
from .pooling import after_pooling, exclude_prompt, pool
from .runner import finished, loaded, per_text, texts_in
from .task import Task

Tensor = torch.Tensor

_SAID: set[tuple] = set()
"""The overrides of a folder's settings already warned about: (folder, setting, value)."""


def max_tokens(m: Model, max_length: int | None = None, folder: SentenceFolder | None = None) -> int:
    """The tokens per text :func:`embed` reads at most, [CLS] and [SEP] included.

    all-MiniLM-L6-v2: 256 (its sentence-transformers setting), though its position table holds 512.

    Args:
        m: the model (its positions P).
        max_length: when given, the answer (an integer from 2 to P); else the folder's ``max_seq_length``
            (at most P), else P.
        folder: the model's sentence-transformers folder, when read already.

    Raises:
        InputError: a ``max_length`` that is not an integer from 2 to P.
    """
    P = longest_input(m.config)
    if max_length is None:
        folder = m.sentence_folder if folder is None else folder
        return min(folder.max_seq_length or P, P)
    if isinstance(max_length, bool) or not isinstance(max_length, int) or not 2 <= max_length <= P:
        raise InputError(f"max_length must be an integer from 2 to {P} (the tokens the model reads), got {max_length!r}")
    return max_length


def _say_once(folder: SentenceFolder, setting: str, message: str) -> None:
    """Warn that the caller's ``setting`` overrides the folder's, once per folder, setting and message."""
    key = (folder.path, setting, message)
    if key not in _SAID:
        _SAID.add(key)
        warnings.warn(message, BertfnWarning, stacklevel=4)


def sentence_modules(folder: SentenceFolder, pooling: str | tuple[str, ...] | list[str] | None,
                     normalize: bool | None) -> SentenceFolder:
    """The folder's modules with the caller's ``pooling`` and ``normalize`` in place of its own.

    Args:
        folder: what the folder says.
        pooling: None (the folder's modes), a mode of :data:`POOLINGS`, or several (concatenated).
        normalize: None (the folder's Normalize), True (unit vectors at the very end, after any cut), False (no
            Normalize).

    Raises:
        InputError: an unknown pooling mode, a normalize that is not None, True or False.
        ConfigError: no ``pooling`` for a folder whose ``modules.json`` lists no Pooling module.

    Warns:
        BertfnWarning: once per folder, where the caller's choice differs from what its ``modules.json`` lists.
    """
    modes = (pooling,) if isinstance(pooling, str) else tuple(pooling) if isinstance(pooling, (tuple, list)) else pooling
    if modes is not None and (not modes or any(mode not in POOLINGS for mode in modes)):
        raise InputError(f"pooling must be one of {', '.join(map(repr, POOLINGS))} (or a list of them, concatenated), "
                         f"got {pooling!r}")
    if normalize is not None and not isinstance(normalize, bool):
        raise InputError(f"normalize must be True or False (or None: as the model's folder says), got {normalize!r}")
    if modes is None and not folder.pooling:
        raise ConfigError(f"{folder.path / 'modules.json'} lists a Transformer module and no Pooling module, so "
                          "sentence-transformers makes no vector per text from it (only token vectors); pass "
                          f"{syntax(python='pooling=', cli='--pooling ')}MODE (mean, cls, ...) to choose how to make one")
    if modes is not None and modes != folder.pooling:
        if folder.listed and folder.pooling:
            _say_once(folder, "pooling", f"{syntax(python='pooling=', cli='--pooling ')}{'+'.join(modes)} overrides "
                      f"the pooling {'+'.join(folder.pooling)} of {folder.path}'s Pooling module: these are not the "
                      "vectors the model was trained to give")
        folder = replace(folder, pooling=modes)
    if normalize is False and folder.normalize:
        _say_once(folder, "normalize", f"{syntax(python='normalize=False', cli='--no-normalize')} leaves out the "
                  f"Normalize module of {folder.path}: these are not the vectors the model was trained to give")
        folder = replace(folder, after=tuple(m for m in folder.after if m != NORMALIZE))
    return folder


def chosen_prompt(folder: SentenceFolder, prompt: str | None, prompt_name: str | None) -> str:
    """The text put before each text (``SentenceTransformer._resolve_prompt``): ``prompt``, else the folder's prompt
    named ``prompt_name``, else its ``default_prompt_name``'s, else none ("").

    Raises:
        InputError: both given, a ``prompt_name`` the folder does not have, or one that is not a string.
    """
    if prompt is not None and prompt_name is not None:
        raise InputError(f"pass {syntax(python='prompt=', cli='--prompt')} or "
                         f"{syntax(python='prompt_name=', cli='--prompt-name')}, not both")
    for name, value in (("prompt", prompt), ("prompt_name", prompt_name)):
        if value is not None and not isinstance(value, str):
            raise InputError(f"{name} must be a string, got {type(value).__name__}: {clipped(value, 80)}")
    if prompt is not None:
        return prompt
    if prompt_name is not None:
        if prompt_name not in folder.prompts:
            has = f"its prompts are {', '.join(map(repr, folder.prompts))}" if folder.prompts else "it has no prompts"
            where = f"the model's folder ({folder.path})" if folder.path is not None else "the model"
            raise InputError(f"{syntax(python='prompt_name', cli='--prompt-name')} {prompt_name!r} is not a prompt of "
                             f"{where}: {has}; pass "
                             f"{syntax(python='prompt=', cli='--prompt ')}TEXT to put your own before each text")
        return folder.prompts[prompt_name]
    return folder.prompts.get(folder.default_prompt_name, "") if folder.default_prompt_name else ""


def prompt_tokens(tok: Tokenizer, prompt: str) -> int:
    """The tokens a prompt takes at the start of a text, [CLS] included (``Transformer._get_prompt_length``): the
    prompt tokenized alone, less its closing special token."""
    ids = tok([prompt]).input_ids[0].tolist()
    specials = {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.mask_token_id, tok.unk_token_id}
    return len(ids) - (ids[-1] in specials)


def embed(
    texts: str | list[str],
    model: Model | str | Path | None = None,
    *,
    pooling: str | tuple[str, ...] | None = None,
    normalize: bool | None = None,
    prompt_name: str | None = None,
    prompt: str | None = None,
    truncate_dim: int | None = None,
    batch_size: int = 32,
    max_length: int | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    edits: Mapping[str, Edit] | None = None,
) -> Tensor:
    """Sentence embeddings of ``texts``, as ``SentenceTransformer(folder).encode(texts)`` makes them.

    Texts run at most ``batch_size`` at a time, sorted by length and laid end to end without padding.

    Args:
        texts: one string, or a list of N texts.
        model: a loaded :class:`Model`, a local folder or a hub id (default: bert-base-uncased; a model
            trained for embeddings such as all-MiniLM-L6-v2 gives far better ones).
        pooling: None: the folder's Pooling module (mean without one); else "cls", "max", "mean",
            "mean_sqrt_len_tokens", "weightedmean" or "lasttoken" (:data:`POOLINGS`, :func:`~bertfn.tasks.pooling.pool`),
            or several of them, concatenated.
        normalize: None: as the folder says (its Normalize module); True: each vector scaled to length 1 at the end
            (``encode(normalize_embeddings=True)``), so that a dot product is the cosine similarity; False: without
            the folder's Normalize.
        prompt_name: the folder's prompt of that name goes before each text (``"query"``, ``"passage"``, ...).
        prompt: this text goes before each text (instead of a ``prompt_name``).
        truncate_dim: each vector cut to its first ``truncate_dim`` values (default: the folder's, else none).
        batch_size: texts per encoder pass, at most.
        max_length: tokens per text at most, [CLS] and [SEP] included, the prompt's too (see the module docstring
            for the default); longer texts are cut to their start, with a warning.
        device: where the model runs (:func:`~bertfn.checkpoint.resolve.get_model`).
        dtype: the precision it runs in.
        edits: ``{point name: edit(tensor, point) -> tensor}``, as :func:`~bertfn.model.encoder.encoder`
            takes them (:mod:`bertfn.interventions` makes the usual ones); the edits see each point in the
            shape of its group's padded batch (:func:`~bertfn.tasks.runner.per_text`).

    Returns:
        (N, D) float32 for a list of N texts, (D,) for one string (D: the hidden size, the pooling modes times it,
            a Dense module's width, or ``truncate_dim``); in the order of ``texts``, on the model's device.

    Raises:
        InputError: an unknown pooling, or one whose width the folder's Dense module does not take; a bad normalize,
            prompt, prompt_name, truncate_dim, batch_size or max_length.
        MissingPartError: a model without a tokenizer.
        ConfigError: a folder whose modules bertfn does not run (named in the message), whose modules.json lists
            no Pooling module when no ``pooling`` is given, or whose Dense module does not take its pooled vectors.

    Warns:
        UserWarning: texts longer than ``max_length`` tokens, cut.
        BertfnWarning: ``pooling`` or ``normalize`` overriding the folder's (once per folder).
    """
    batch, single, model = texts_in(texts, model, TASK, blank=True)  # "" and "   ", as SentenceTransformer embeds them
    count("batch_size", batch_size)
    count("truncate_dim", truncate_dim, none="the folder's")

    m, tok, points = loaded(TASK, model, device, dtype, edits)
    P = longest_input(m.config)
    folder = sentence_modules(m.sentence_folder, pooling, normalize)
    before = chosen_prompt(folder, prompt, prompt_name)
    max_length = max_tokens(m, max_length, folder)
    pooled = m.config.hidden_size * len(folder.pooling)  # the pooled modes' values, side by side
    first = next((d for d in folder.after if isinstance(d, Dense)), None)
    if first is not None and first.weight.shape[1] != pooled:  # said before the encoder runs, not as torch's matmul
        fix = (f"its Dense module ({first.path}) takes {first.weight.shape[1]} values, and the pooling "
               f"{'+'.join(folder.pooling)} makes {pooled} ({len(folder.pooling)} x the hidden size {m.config.hidden_size})")
        if pooling is None:
            raise ConfigError(f"{folder.path}: {fix}; the folder's modules do not fit together: re-download it")
        raise InputError(f"{syntax(python='pooling=', cli='--pooling ')}{'+'.join(folder.pooling)} does not fit the "
                         f"model's folder: {fix}; pass {first.weight.shape[1] // m.config.hidden_size} mode(s), or "
                         "none for the folder's own")
    width = next((d.weight.shape[0] for d in reversed(folder.after) if isinstance(d, Dense)), pooled)  # D
    if truncate_dim is not None and truncate_dim > width:  # said before the encoder runs over every text
        raise InputError(f"{syntax(python='truncate_dim', cli='--truncate-dim')} must be at most the vectors' {width} "
                         f"values, got {truncate_dim}; pass a smaller one, or none for the whole vectors")
    batch = [before + t for t in batch]
    if folder.do_lower_case:  # sentence-transformers adds a Lowercase step to its tokenizer, when asked to: each
        lower = Lowercase().normalize_str  # character alone (Python's str.lower writes a word's last sigma as ς)
        batch, before = [lower(t) for t in batch], lower(before)
    # the prompt's tokens left out of the pooling, counted as sentence-transformers counts them: the prompt
    # tokenized alone and cut to max_length too, so a longer prompt leaves out all but the cut text's [SEP]
    skip = min(prompt_tokens(tok, before), max_length - 1) if before and not folder.include_prompt else 0

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
    def step(rows: list[int], _, h: Tensor) -> Tensor:  # h: (T, H), the group's texts end to end -> (b, D)
        pieces = h.float().split([lengths[i] for i in rows])  # each text's (n, H)
        padded = torch.nn.utils.rnn.pad_sequence(list(pieces), batch_first=True)  # (b, S, H)
        mask = (torch.arange(padded.shape[1], device=h.device)[None, :]
                < torch.tensor([len(p) for p in pieces], device=h.device)[:, None]).long()  # (b, S)
        return after_pooling(pool(padded, exclude_prompt(mask, skip) if skip else mask, folder.pooling), folder.after)

    vectors = per_text(m, enc, lengths, step, batch_size=batch_size, points=points)  # (N, D)
    cut_to = truncate_dim if truncate_dim is not None else folder.truncate_dim
    if cut_to is not None:
        vectors = vectors[:, :cut_to]  # (N, truncate_dim), as sentence-transformers cuts them: after every module
    if normalize is True:
        vectors = F.normalize(vectors, p=2.0, dim=1)  # (N, D), each of length 1
    return finished(vectors, None, single)


TASK = Task("embed", embed, probe="a", max_tokens=lambda m, options: max_tokens(m, options.get("max_length")),
            vectors=True)
"""The task (:mod:`bertfn.tasks.task`) :func:`embed` is: ``bertfn embed``, the corpus's ``Embed``."""


def similarity(a: Tensor | str | list[str], b: Tensor | str | list[str], model: Model | str | Path | None = None, *,
               similarity_fn_name: str | None = None, device: str | torch.device | None = None,
               dtype: torch.dtype | str | None = None, **options: object) -> Tensor:
    """How alike each of ``a`` is to each of ``b`` (``SentenceTransformer.similarity``), by the model's
    ``similarity_fn_name``:

        cosine     a_i . b_j / (||a_i|| ||b_j||)     (the default)
        dot        a_i . b_j
        euclidean  -||a_i - b_j||_2
        manhattan  -||a_i - b_j||_1

    Args:
        a: (N, D) or (D,) vectors, or texts (embedded by :func:`embed` with ``options``).
        b: (M, D) or (D,) vectors, or texts.
        model: the model whose folder names the function (and which embeds texts); None with vectors: cosine.
        similarity_fn_name: one of :data:`~bertfn.checkpoint.sentence_folder.SIMILARITIES`, instead of the folder's.
        device: where the model runs, for texts.
        dtype: its precision, for texts.
        **options: :func:`embed`'s keywords for texts (``prompt_name=``, ``truncate_dim=``, ...).

    Returns:
        (N, M) float32: row i for ``a``'s i-th vector (a single vector or text counts as one row).

    Raises:
        InputError: an unknown function name, texts without a model, vectors of different widths.
    """
    if similarity_fn_name is not None and similarity_fn_name not in SIMILARITIES:
        raise InputError(f"similarity_fn_name must be one of {', '.join(map(repr, SIMILARITIES))}, got {similarity_fn_name!r}")
    texts = [x for x in (a, b) if not isinstance(x, Tensor)]
    m = get_model(model, device, dtype) if texts or (model is not None and similarity_fn_name is None) else None
    name = similarity_fn_name or (m.sentence_folder.similarity_fn_name if m is not None else None) or "cosine"

    def rows(x) -> Tensor:
        v = x if isinstance(x, Tensor) else embed(x, m, **options)
        return (v[None] if v.dim() == 1 else v).float()  # (n, D)

    x, y = rows(a), rows(b)
    if x.dim() != 2 or y.dim() != 2 or x.shape[1] != y.shape[1]:
        raise InputError(f"similarity compares vectors of one width: (N, D) and (M, D), got {tuple(x.shape)} and "
                         f"{tuple(y.shape)}")
    if name == "cosine":
        return F.normalize(x, dim=1) @ F.normalize(y, dim=1).T  # (N, M)
    if name == "dot":
        return x @ y.T  # (N, M)
    return -torch.cdist(x, y, p=2.0 if name == "euclidean" else 1.0)  # (N, M)
