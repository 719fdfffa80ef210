"""From a hub id, a folder or a file to a :class:`Model`: config + flat HF-keyed weights + tokenizer.

``load(name_or_path)`` accepts
  * a local folder with ``config.json``, ``model.safetensors`` (or ``pytorch_model.bin``, or a sharded checkpoint's
    ``model.safetensors.index.json`` and its shards) and
    ``tokenizer.json`` (or ``vocab.txt``),
  * a single ``.safetensors`` / ``.bin`` file, with ``config.json`` beside it or ``config=`` given,
  * a hub id such as ``google-bert/bert-base-uncased``, fetched through ``huggingface_hub`` (its cache,
    ``HF_HUB_OFFLINE=1`` and ``HF_HUB_CACHE`` work as everywhere in the ecosystem).

Weights are read with ``safetensors`` or ``torch.load(weights_only=True)``: loading never runs
pickled code. Keys are normalised to the names ``BertForPreTraining`` uses (``bert.`` prefix,
``LayerNorm.weight|bias``, tied decoder present) and checked against the shapes the config implies.
Linear weights are then laid out (in, out) in memory for faster products (:func:`matmul_layout`):
names, shapes and values stay the checkpoint's.
"""

from __future__ import annotations

import os
import shlex
import socket
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from ..errors import (CheckpointError, InputError, ModelLoadError, UnusedWeightsWarning,
                      clipped, syntax, unreadable)
from ..model.config import BertConfig
from ..model.naming import names_of
from .model import Model
from .state import as_stored, check_state, group_keys, matmul_layout, unused_keys
from .tokenizer import Tokenizer
from .sentence_folder import TRANSFORMER_CONFIGS, first_module, not_run, transformer_path
from .tokenizer_files import VOCABULARY_FILES, VOCABULARY_NAMES, read_json, stays_inside
from .weights import SHARD_INDEXES, read_weights, shard_map

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
CHECKPOINT_FILES = WEIGHT_FILES + SHARD_INDEXES
"""What a checkpoint's folder holds its weights in, in the order transformers looks: one file, else a sharded
checkpoint's index (the shards beside it)."""
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                   "sentence_bert_config.json",  # sentence-transformers' max_seq_length, read by bertfn.embed
                   "config_sentence_transformers.json")  # prompts, a cross-encoder's activation (embed, rerank)
MODULE_FILES = ("config.json", "sentence_bert_config.json")
"""The files of a sentence-transformers module's folder that bertfn.embed reads (a Pooling's or a Dense's config;
a Dense's weights too), fetched with a hub model that lists the module in its modules.json."""
TOKENIZER_SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
"""A tokenizer's other files: its settings."""


# --- finding files --------------------------------------------------------------------------------


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "on", "yes", "true"}


def _local_folder_hint(name: str) -> str:
    """How to pass a local folder instead, in the caller's syntax (Python or the CLI)."""
    short = name.rstrip("/").split("/")[-1]
    return syntax(python=f"bertfn.load('./{short}')", cli=f"--model ./{short}")


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the hub cannot be reached right now (one connection attempt of ``timeout`` seconds), or None."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
    except OSError as e:
        return f"{url.hostname}: {e.strerror or e}"
    return None


def download(repo_id: str, revision: str | None = None) -> Path:
    """Fetch config, weights and tokenizer files of a hub repo into the HF cache; returns the snapshot folder.

    Honours ``HF_HUB_OFFLINE`` (cache only) and the usual cache variables. Prefers safetensors. When
    the hub cannot be reached (one short connection attempt, :func:`hub_unreachable`), the cache is
    used if it has the model, and otherwise the error (:class:`ModelLoadError`) says so at once instead of retrying.

    Args:
        repo_id: the hub id, e.g. ``google-bert/bert-base-uncased``.
        revision: a branch, tag or commit (default: the main branch).
    """
    from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache
    from huggingface_hub.utils import (  # not .errors: it holds them from 0.25 on, .utils from before 0.23 to 2.x
        EntryNotFoundError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    how = (f"pass a local folder with config.json, model.safetensors and vocab.txt (or tokenizer.json) "
           f"instead, e.g. {_local_folder_hint(repo_id)}")
    try:
        cached = any(isinstance(try_to_load_from_cache(repo_id, name, revision=revision), str)
                     for name in ("config.json", "modules.json"))
    except (HFValidationError, ValueError) as e:
        raise ModelLoadError(f"{repo_id!r} is neither a local folder nor a model on the hub "
                             f"({type(e).__name__}); check the spelling, or {how}") from e
    local_only = _offline()
    unreachable = None if local_only else hub_unreachable()
    if unreachable and not cached:
        raise ModelLoadError(f"there is no folder named {repo_id!r} here, and the Hugging Face hub cannot be "
                             f"reached to download it ({unreachable}); check the folder's name, or connect to "
                             f"the network and try again, or {how}")
    local_only = local_only or unreachable is not None

    def fetch(filename: str) -> Path | None:
        try:
            return Path(hf_hub_download(repo_id, filename, revision=revision, local_files_only=local_only))
        except LocalEntryNotFoundError:
            return None  # offline or unreachable, and not in the cache
        except EntryNotFoundError:
            return None  # the repo has no such file

    try:
        modules = fetch("modules.json")  # a sentence-transformers folder: its modules' files, as bertfn.embed reads them
        entries = read_json(modules, object) if modules is not None else []
        config = fetch("config.json")
        path = transformer_path(entries) if config is None else None
        inner = f"{path}/" if path else ""
        if inner:  # an older sentence-transformers folder: the encoder in its Transformer module's 0_Transformer/
            config = fetch(inner + "config.json")
        if config is None and local_only:
            fix = syntax(python="unset HF_HUB_OFFLINE", cli="run without HF_HUB_OFFLINE=1") + " to download it, or "
            raise ModelLoadError(f"there is no folder named {repo_id!r} here, and HF_HUB_OFFLINE is set while the "
                                 f"Hugging Face cache ({constants.HF_HUB_CACHE}) has no copy of it; {fix}{how}")
        if config is None:
            raise ModelLoadError(f"{repo_id!r} on the hub has no config.json (nor its modules.json a Transformer module "
                                 f"with one): it is not a transformers checkpoint bertfn can read; {how}")
        weights = next((w for w in (fetch(inner + c) for c in CHECKPOINT_FILES) if w is not None), None)
        if weights is None:
            raise ModelLoadError(f"{repo_id!r} has no {' or '.join(CHECKPOINT_FILES)} available here; {how}")
        if weights.name in SHARD_INDEXES:  # a sharded checkpoint: every shard its index names
            for shard in dict.fromkeys(shard_map(weights).values()):
                if stays_inside(shard):  # else read_shards refuses the index, in bertfn's words
                    fetch(inner + shard)
        if [fetch(inner + name) for name in TOKENIZER_FILES][:2] == [None, None]:  # no tokenizer.json nor vocab.txt:
            # the first other vocabulary the repo has (spm.model, a slow tokenizer's files) and its added tokens
            first = next((n for n in VOCABULARY_FILES[2:] if fetch(inner + n) is not None), None)
            for name in ("added_tokens.json", "merges.txt")[:1 + (first == "vocab.json")]:  # RoBERTa's: both files
                fetch(inner + name)
        for entry in entries:
            path = entry.get("path") if isinstance(entry, dict) else None
            if not isinstance(path, str) or not stays_inside(path):
                continue
            if str(entry.get("type", "")).endswith("Transformer"):  # its config under the older names too
                for name in TRANSFORMER_CONFIGS[1:]:
                    fetch(f"{path}/{name}" if path else name)
            if path:
                for name in MODULE_FILES:
                    fetch(f"{path}/{name}")
                next((w for w in WEIGHT_FILES if fetch(f"{path}/{w}") is not None), None)  # a Dense module's weights
    except (RepositoryNotFoundError, RevisionNotFoundError, HFValidationError) as e:
        raise ModelLoadError(f"{repo_id!r} is neither a local folder nor a model on the hub "
                             f"({type(e).__name__}); check the spelling, or {how}") from e
    except (HfHubHTTPError, OSError) as e:  # the hub answered with an error, or the cache cannot be written
        first_line = str(e).splitlines()[0] if str(e) else ""
        raise ModelLoadError(f"cannot get {repo_id!r} ({type(e).__name__}: {first_line}); try again later, or {how}") from e
    return modules.parent if inner else config.parent


def _looks_like_path(name: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else that does not exist is a wrong path."""
    return name.startswith((".", "/", "~", "\\")) or name.count("/") > 1 or name.endswith((".safetensors", ".bin", ".json"))


def transformer_folder(folder: Path) -> Path:
    """Where a folder's encoder lies: the folder itself, or the sub-folder that its sentence-transformers
    ``modules.json`` gives the Transformer module (``0_Transformer``, as sentence-transformers before 2.x saved it)
    when the folder holds no weights of its own.

    Raises:
        CheckpointError: the sub-folder ``modules.json`` gives the Transformer module is not there.
        ConfigError: ``modules.json`` begins with another module than a Transformer (a Router, a StaticEmbedding)
            and the folder holds no config.json: there is no encoder to load.
    """
    if not (folder / "modules.json").is_file():
        return folder
    entries = read_json(folder / "modules.json", object)
    first = first_module(entries)
    if first and not str(first.get("type", "")).endswith("Transformer") and not (folder / "config.json").is_file():
        raise not_run(folder / "modules.json", 0, first)
    path = transformer_path(entries)
    if path is None or any((folder / w).is_file() for w in CHECKPOINT_FILES):
        return folder
    inner = folder / path
    if not inner.is_dir():
        raise CheckpointError(f"{folder / 'modules.json'} puts the Transformer module (the encoder's weights, config "
                              f"and tokenizer) in {path}/, which is not there, and {folder} holds no weights of its "
                              "own; re-download the folder, or copy the missing sub-folder into it")
    return inner


def not_weights(file: Path) -> ModelLoadError | None:
    """The error for a checkpoint folder's tokenizer or config file passed where the model goes (its folder or
    weights file do), saying where that file goes instead; None for any other file.

    Args:
        file: the file passed as the model.
    """
    if file.name in SHARD_INDEXES:
        return None
    if file.name in VOCABULARY_FILES or file.name in TOKENIZER_SIDE_FILES or file.suffix == ".txt":
        kind = "a tokenizer's file"
    elif file.suffix == ".json":
        kind = "a config file"
    else:
        return None
    folder = str(file.parent)
    vocabulary = str(file if file.name in VOCABULARY_FILES else file.parent)  # what tokenizer= reads: file or folder
    return ModelLoadError(
        f"{file} is {kind}, not a model's weights: {syntax(python='the model argument', cli='--model')} takes the "
        f"checkpoint's folder, e.g. {syntax(python=f'bertfn.load({folder!r})', cli=f'--model {shlex.quote(folder)}')}, "
        f"or a weights file ({' or '.join(WEIGHT_FILES)}); a vocabulary that is not beside the weights goes to "
        f"{syntax(python=f'tokenizer={vocabulary!r}', cli=f'--tokenizer {shlex.quote(vocabulary)}')}")


def locate(name_or_path: str | Path, revision: str | None = None) -> tuple[Path, Path]:
    """The checkpoint's folder and weights file: a local folder or file first, else a hub id (:func:`download`).
    Raises :class:`ModelLoadError` when nothing is found, a folder cannot be read (permissions), or the file is
    a checkpoint's tokenizer or config file (:func:`not_weights`).

    Args:
        name_or_path: a folder, a weights file or a hub id.
        revision: the hub revision, for a hub id.
    """
    path = Path(name_or_path).expanduser()
    try:
        if path.is_dir():
            path = transformer_folder(path)
            weights = next((path / w for w in CHECKPOINT_FILES if (path / w).is_file()), None)
            if weights is None:
                inside = sorted(str(p) for p in path.iterdir() if any((p / w).is_file() for w in CHECKPOINT_FILES))
                named = inside and syntax(python=repr(inside[0]), cli=f"--model {shlex.quote(inside[0])}")
                there = f"; {inside[0]} holds them: pass {named}" if inside else "; put the model's weights there"
                raise CheckpointError(f"{path} has no {' or '.join(WEIGHT_FILES)} (nor a sharded checkpoint's "
                                      f"{' or '.join(SHARD_INDEXES)}){there}")  # a folder of checkpoints: antiberty's
            return path, weights
        if path.is_file():
            wrong = not_weights(path)
            if wrong is not None:
                raise wrong
            return path.parent, path
    except PermissionError:  # the folder, or one above it, that this user may not search or list
        raise unreadable(path, ModelLoadError) from None
    except OSError as e:  # a name longer than the file system takes, a loop of links
        raise ModelLoadError(f"{clipped(str(name_or_path), 80)} cannot be looked up here ({e.strerror}); pass an existing "
                             "folder, file or a hub id") from None
    if _looks_like_path(str(name_or_path)):
        raise ModelLoadError(f"{str(name_or_path)!r} does not exist (no such folder or file here); pass an existing "
                             "folder, file or a hub id")
    folder = transformer_folder(download(str(name_or_path), revision))
    return folder, next(folder / w for w in CHECKPOINT_FILES if (folder / w).is_file())


def load(
    name_or_path: str | Path,
    *,
    tokenizer: Tokenizer | str | Path | None = None,
    lowercase: bool | None = None,
    config: BertConfig | dict | str | Path | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    revision: str | None = None,
    strict: bool = False,
    prepare: Callable[[dict[str, torch.Tensor]], bool] | None = None,
) -> Model:
    """Load a BERT checkpoint from a hub id, a folder or a weights file (see the module docstring).

    Keys that no BERT part reads (other heads such as AntiBERTy's ``cls.species.*``) are kept in
    ``model.state``, unused, with a one-line :class:`~bertfn.errors.UnusedWeightsWarning` (quieted with
    ``warnings.filterwarnings("ignore", category=bertfn.UnusedWeightsWarning)``). Missing or
    mis-shaped keys are always errors. The linear weights are then laid out (in, out) in memory
    (:func:`~bertfn.checkpoint.state.matmul_layout`), unless ``prepare`` says otherwise.

    Args:
        name_or_path: a hub id such as ``google-bert/bert-base-uncased``, a local folder, or a
            ``.safetensors`` / ``.bin`` file.
        tokenizer: where the vocabulary is when it is not beside the weights: a ``vocab.txt``, a
            ``tokenizer.json``, a folder holding one, or a :class:`Tokenizer` (default: the checkpoint's folder).
        lowercase: False keeps the text's case (a cased ``vocab.txt`` without tokenizer_config.json,
            e.g. AntiBERTy's), True lowercases; default: as the tokenizer's files say.
        config: overrides ``config.json`` (a :class:`BertConfig`, a dict, or a path).
        device: where the weights go (default: as stored, on the CPU).
        dtype: their precision (default: as stored; a file of several precisions in its word embeddings', the
            model's ``dtype``), also as a string such as ``"bfloat16"``.
        revision: the hub revision (branch, tag or commit) of a hub id.
        strict: refuse keys that no BERT part reads.
        prepare: a change made to the state in place, on the weights as stored ((out, in), on ``device``
            in ``dtype``), which returns whether they are now as wanted (if not, the layout follows).
            :func:`~bertfn.checkpoint.state.as_stored` keeps them as stored, and then a safetensors file is
            memory-mapped instead of read: nothing copies its weights. :func:`~bertfn.fast.choice.pack_state`
            packs them (oneDNN reorders a weight from (out, in) several times faster than from (in, out): it reads
            the stored rows in order).

    Returns:
        The model.

    Raises:
        ModelLoadError: no checkpoint found or fetched, with what to do.
        ConfigError: a config the model cannot be built from.
        CheckpointError: weights that do not fit the config, with what to do.
        InputError: a ``name_or_path`` or ``config`` of another kind.

    Warns:
        UnusedWeightsWarning: keys that no BERT part reads (without ``strict``).
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise InputError(f"load() takes a hub id, a folder or a weights file (a str or a Path), got "
                         f"{type(name_or_path).__name__}")
    folder, weights = locate(name_or_path, revision)
    config_file = folder / "config.json" if config is None else \
        Path(config).expanduser() if isinstance(config, (str, Path)) else None
    if config_file is not None:
        config = BertConfig.from_file(config_file)
    elif isinstance(config, dict):
        config = BertConfig.from_dict(config)
    elif not isinstance(config, BertConfig):
        raise InputError(f"config= takes a BertConfig, a dict or the path of a config.json, got {type(config).__name__}")

    kept = prepare is as_stored and device is None and dtype is None  # nothing will copy the weights: map the file
    state = names_of(config).normalize(read_weights(weights, mapped=kept), config)
    check_state(state, config, strict, str(weights), str(config_file) if config_file is not None else None)
    unused = unused_keys(state, config)
    if unused:
        warnings.warn(f"{weights} has {len(unused)} key(s) that no BERT part reads ({', '.join(group_keys(unused))}): "
                      "kept in model.state, skipped by the forward pass", UnusedWeightsWarning, stacklevel=2)
    model = Model(config, state, load_tokenizer(tokenizer, folder, lowercase, config), str(name_or_path))
    del state  # the model's own: after a move, ``prepare`` frees each weight it replaces only if nothing else holds it
    if dtype is None and len({t.dtype for t in model.state.values() if t.is_floating_point()}) > 1:
        dtype = model.dtype  # a file of several precisions (a norm kept in fp32 beside bf16 weights) runs in one
    if device is not None or dtype is not None:
        model = model.to(device, dtype)
    if prepare is None or not prepare(model.state):
        matmul_layout(model.state)
    return model


def load_tokenizer(tokenizer: Tokenizer | str | Path | None, folder: Path, lowercase: bool | None,
                   config: BertConfig) -> Tokenizer | None:
    """The model's tokenizer: given, read from ``tokenizer`` (a file or folder), or found in ``folder``; None, with a
    warning, when there is none (the model can still run on ids). Raises :class:`CheckpointError` when its vocabulary
    is larger than the model's embedding table.

    Args:
        tokenizer: a :class:`Tokenizer`, a file or folder, or None (look in ``folder``).
        folder: the checkpoint's folder.
        lowercase: as in :func:`load` (not with a :class:`Tokenizer` given).
        config: the model's config (its positions and vocabulary size).
    """
    if isinstance(tokenizer, Tokenizer):
        if lowercase is not None:
            raise InputError("lowercase= applies to a tokenizer read from files; a Tokenizer object keeps its own "
                             "settings (build it with Tokenizer.from_path(path, lowercase=...))")
        tok = tokenizer
    elif tokenizer is not None:
        tok = Tokenizer.from_path(tokenizer, config.max_position_embeddings, lowercase)
    else:
        tok = Tokenizer.from_folder(folder, config.max_position_embeddings, lowercase)
        if tok is None:
            near = next((p for p in (folder.parent / "vocab.txt", folder.parent / "tokenizer.json") if p.is_file()), None)
            example = ""
            if near is not None:
                cased = near.name == "vocab.txt" and _has_capitals(near)  # a bare vocab.txt would be lowercased
                example = f", e.g. {near}{syntax(python=' with lowercase=False', cli=' with --cased') if cased else ''}"
            option = syntax(python='tokenizer=', cli='--tokenizer ')
            warnings.warn(f"{folder} has no {VOCABULARY_NAMES}, so the model can read ids but not "
                          f"text; pass {option}PATH (a vocab.txt, tokenizer.json or "
                          f"folder){example}", stacklevel=3)
            return None
    if tok.vocab_size > config.vocab_size:
        raise CheckpointError(
            f"the tokenizer {tok.source} has {tok.vocab_size} tokens but the model's vocab_size is "
            f"{config.vocab_size}, so some ids would have no embedding; use the tokenizer files that came with "
            "these weights"
        )
    return tok


def _has_capitals(vocab: Path) -> bool:
    """Whether a vocab.txt holds capital letters outside its [SPECIAL] tokens: a cased vocabulary."""
    try:
        tokens = vocab.read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        return False  # only a hint depends on it
    return any(t != t.lower() for t in tokens if not t.startswith("["))
