"""What a sentence-transformers folder says about making a text's vector: its modules, prompts and settings.

``SentenceTransformer(folder).encode(texts)`` runs the modules that the folder's ``modules.json`` lists, in order,
each from its own sub-folder:

    Transformer  ""            the encoder (bertfn's model); sentence_bert_config.json (or an older name,
                               :data:`TRANSFORMER_CONFIGS`): max_seq_length, do_lower_case
    Pooling      1_Pooling/    token vectors -> one vector per text: config.json's pooling_mode (one mode or several,
                               concatenated; older folders: pooling_mode_*_token(s) flags) and include_prompt
    Dense        2_Dense/      y = activation(x W^T + b): config.json (in_features, out_features, bias,
                               activation_function) and model.safetensors (linear.weight, linear.bias)
    Normalize    2_Normalize/  y = x / ||x||_2 (it has no files, so its folder may be absent)

and ``config_sentence_transformers.json`` holds the prompts (``{"query": "query: ", ...}``), ``default_prompt_name``,
``similarity_fn_name`` and ``truncate_dim``. :func:`sentence_folder` reads all of it into a :class:`SentenceFolder`
(``model.sentence_folder`` for a loaded model); :func:`bertfn.embed` runs it (:mod:`bertfn.tasks.pooling`). A folder without
``modules.json`` is read as sentence-transformers reads a plain transformers folder (mean pooling, nothing after it).
One whose ``modules.json`` lists a Transformer alone has no pooling (``pooling=()``): sentence-transformers gives
token vectors only, so :func:`bertfn.embed` asks for ``pooling=``.
A module bertfn does not run (a LayerNorm, a CNN, a Router, ...) is refused by name (:class:`ConfigError`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import CheckpointError, ConfigError
from .tokenizer_files import read_json, stays_inside
from .weights import read_weights

POOLINGS = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
"""sentence-transformers' ``Pooling`` modes (:func:`bertfn.tasks.pooling.pool`), in the order its older flags list them."""

LEGACY_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean",
                "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
"""A Pooling config.json of sentence-transformers before 5.x: one flag per mode, the modes in this order."""

ACTIVATIONS = ("tanh", "identity", "relu", "gelu", "sigmoid", "silu")
"""The Dense module's activations bertfn applies: the last part of ``activation_function``, lowercased
(``torch.nn.modules.activation.Tanh`` -> "tanh")."""

MODULES = ("Transformer", "Pooling", "Dense", "Normalize")
"""The modules bertfn runs, by the last part of ``modules.json``'s type (``sentence_transformers.models.Pooling``,
``sentence_transformers.sentence_transformer.modules.pooling.Pooling``, ...)."""

TRANSFORMER_CONFIGS = ("sentence_bert_config.json", "sentence_roberta_config.json", "sentence_distilbert_config.json",
                       "sentence_camembert_config.json", "sentence_albert_config.json",
                       "sentence_xlm-roberta_config.json", "sentence_xlnet_config.json")
"""The Transformer module's config (``max_seq_length``, ``do_lower_case``), by the names sentence-transformers tries in
turn (``Transformer.load_config``): folders saved by its early versions name it after the model."""

SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")
"""sentence-transformers' ``similarity_fn_name`` values (:func:`bertfn.similarity`)."""

NORMALIZE = "normalize"
"""The Normalize module among :attr:`SentenceFolder.after`."""


@dataclass(frozen=True)
class Dense:
    """A Dense module: ``y = activation(x W^T + b)`` (sentence-transformers' ``Dense``: an ``nn.Linear`` and an activation).

    Attributes:
        weight: (out_features, in_features).
        bias: (out_features,), or None.
        activation: one of :data:`ACTIVATIONS`.
        path: its folder in the sentence-transformers folder (``2_Dense``), for messages.
    """

    weight: torch.Tensor
    bias: torch.Tensor | None
    activation: str
    path: str


@dataclass(frozen=True)
class SentenceFolder:
    """How a folder's model makes one vector per text, as ``SentenceTransformer(folder).encode`` makes it.

    Attributes:
        path: the folder (None: no folder was found, e.g. a model made in memory).
        listed: the folder has a ``modules.json`` (else it is read as a plain transformers folder).
        pooling: the Pooling module's modes, concatenated in this order (default ("mean",)); () where
            ``modules.json`` lists a Transformer alone (sentence-transformers gives only token vectors then).
        include_prompt: False: a prompt's tokens are left out of the pooling.
        after: the modules after the pooling, in order: :class:`Dense` and :data:`NORMALIZE`.
        max_seq_length: the tokens a text is cut to (sentence_bert_config.json's ``max_seq_length``, else the
            tokenizer's ``model_max_length``), or None.
        do_lower_case: the text is lowercased before the tokenizer.
        prompts: ``{name: text}`` from config_sentence_transformers.json.
        default_prompt_name: the prompt used when a call names none.
        similarity_fn_name: one of :data:`SIMILARITIES`, or None (cosine).
        truncate_dim: the vectors are cut to their first ``truncate_dim`` values, or None.
    """

    path: Path | None = None
    listed: bool = False
    pooling: tuple[str, ...] = ("mean",)
    include_prompt: bool = True
    after: tuple[Dense | str, ...] = ()
    max_seq_length: int | None = None
    do_lower_case: bool = False
    prompts: Mapping[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    similarity_fn_name: str | None = None
    truncate_dim: int | None = None

    @property
    def normalize(self) -> bool:
        """The folder lists a Normalize module."""
        return NORMALIZE in self.after

    def where(self, what: str) -> str:
        """Where in the folder ``what`` is said, for messages: ``"the Pooling module (FOLDER/1_Pooling/config.json)"``."""
        return f"{what} of {self.path}" if self.path is not None else what


def sentence_folder(folders: Iterable[Path]) -> SentenceFolder:
    """What the folder a model came from says about its sentence vectors (the module docstring).

    The folder is the first of ``folders`` (a model's: :func:`~bertfn.checkpoint.model.source_folders`) that holds
    ``modules.json``, a Transformer module's config (:data:`TRANSFORMER_CONFIGS`) or
    ``config_sentence_transformers.json``; where the weights came from a Transformer module's own sub-folder
    (``0_Transformer``), the folder above it. ``model.sentence_folder``
    holds what this gives for a model, read once.

    Args:
        folders: where the model's files came from.

    Raises:
        ConfigError: a module bertfn does not run, or a module's config it cannot read.
        CheckpointError: a Dense module's weights that are missing or do not fit its config.
    """
    names = ("modules.json", *TRANSFORMER_CONFIGS, "config_sentence_transformers.json")
    for folder in folders:
        parent = folder.parent / "modules.json"
        if parent.is_file() and any(isinstance(e, dict) and e.get("path") == folder.name for e in _listed(parent)):
            folder = folder.parent  # the weights of a Transformer module saved in its own sub-folder
        if any((folder / n).is_file() for n in names):
            return _read(folder.resolve())
    return SentenceFolder()


def _listed(path: Path) -> list:
    """``modules.json``'s entries, checked to be a list."""
    entries = read_json(path, object)
    if not isinstance(entries, list):
        raise ConfigError(f"{path} should hold a list of modules (as sentence-transformers writes it), got "
                          f"{type(entries).__name__}; re-download the folder or remove the file")
    return entries


def first_module(entries: object) -> dict:
    """A ``modules.json``'s first entry (``{"type": ..., "path": ...}``), or ``{}`` where it holds none.

    Args:
        entries: the file's content (a list of entries; anything else holds none).
    """
    return entries[0] if isinstance(entries, list) and entries and isinstance(entries[0], dict) else {}


def transformer_path(entries: object) -> str | None:
    """The sub-folder a ``modules.json``'s entries give its first module, where that is a Transformer module in a
    sub-folder of its own (``"0_Transformer"``, as sentence-transformers before 2.x saved it); else None.

    Args:
        entries: the file's content (a list of ``{"type": ..., "path": ...}``; anything else gives None).
    """
    first = first_module(entries)
    path = first.get("path")
    if not str(first.get("type", "")).endswith("Transformer") or not isinstance(path, str) or not path:
        return None
    return path if stays_inside(path) else None


def not_run(modules: Path, i: int, entry: object) -> ConfigError:
    """The error for the ``i``-th module of a ``modules.json``, one bertfn does not run.

    Args:
        modules: the ``modules.json`` file.
        i: the module's index in it.
        entry: its entry (``{"type": "sentence_transformers.models.CNN", ...}``).
    """
    named = entry.get("type") if isinstance(entry, dict) else repr(entry)
    return ConfigError(f"{modules} lists module {i}, {named}, which bertfn does not run (it runs sentence-transformers' "
                       f"{', '.join(MODULES)}); this folder's vectors need sentence-transformers itself")


def _read(folder: Path) -> SentenceFolder:
    """The :class:`SentenceFolder` of ``folder``."""
    settings = read_json(folder / "config_sentence_transformers.json")
    prompts = settings.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()):
        raise ConfigError(f"{folder / 'config_sentence_transformers.json'}: prompts should map names to texts, got "
                          f"{prompts!r}")
    default = settings.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise ConfigError(f"{folder / 'config_sentence_transformers.json'}: default_prompt_name {default!r} is none of "
                          f"its prompts ({', '.join(map(repr, prompts)) or 'none'})")
    similarity = settings.get("similarity_fn_name")
    if similarity is not None and similarity not in SIMILARITIES:
        raise ConfigError(f"{folder / 'config_sentence_transformers.json'}: similarity_fn_name {similarity!r} is not "
                          f"one of {', '.join(map(repr, SIMILARITIES))}")
    truncate_dim = settings.get("truncate_dim")
    if truncate_dim is not None and (isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or truncate_dim < 1):
        raise ConfigError(f"{folder / 'config_sentence_transformers.json'}: truncate_dim should be a positive integer, "
                          f"got {truncate_dim!r}")
    common = dict(path=folder, prompts=dict(prompts), default_prompt_name=default, similarity_fn_name=similarity,
                  truncate_dim=truncate_dim)
    if not (folder / "modules.json").is_file():
        return SentenceFolder(**common, **_transformer(folder))

    pooling, after, transformer = {}, [], None
    for i, entry in enumerate(_listed(folder / "modules.json")):
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1] if isinstance(entry, dict) else ""
        path = str(entry.get("path", "")) if isinstance(entry, dict) else ""
        if kind not in MODULES or not str(entry.get("type")).startswith("sentence_transformers."):
            raise not_run(folder / "modules.json", i, entry)
        if not stays_inside(path):
            raise ConfigError(f"{folder / 'modules.json'} puts module {i} ({kind}) in {path!r}, outside the folder; "
                              "bertfn reads a module's files from inside its folder only (sentence-transformers saves "
                              "each in a sub-folder such as 1_Pooling): re-download the folder, or correct the path")
        if (kind == "Transformer") != (i == 0) or (kind == "Pooling" and (pooling or i != 1)):
            order = " -> ".join(str(e.get("type", "?")).rsplit(".", 1)[-1] for e in _listed(folder / "modules.json"))
            raise ConfigError(f"{folder / 'modules.json'} lists its modules as {order}; bertfn runs a Transformer, then "
                              "a Pooling, then Dense and Normalize modules")
        if kind == "Transformer":
            transformer = _transformer(folder / path)
        elif kind == "Pooling":
            pooling = _pooling(folder / path / "config.json")
        elif kind == "Dense":
            after.append(_dense(folder / path, path))
        else:
            after.append(NORMALIZE)
    if transformer is None:
        raise ConfigError(f"{folder / 'modules.json'} lists no modules; sentence-transformers writes a Transformer, a "
                          "Pooling and the modules after it there: re-download the folder, or remove the file to read "
                          "the folder as a plain transformers checkpoint (the mean of its tokens' vectors)")
    if not pooling and after:
        raise ConfigError(f"{folder / 'modules.json'} lists no Pooling module, so its Dense and Normalize modules would "
                          "read token vectors; bertfn makes a text's vector with a Pooling module first")
    return SentenceFolder(**common, listed=True, after=tuple(after), **transformer, **(pooling or dict(pooling=())))


def _transformer(folder: Path) -> dict:
    """The Transformer module's settings: ``max_seq_length`` (its config's, the first of :data:`TRANSFORMER_CONFIGS`
    that holds any, else the tokenizer's ``model_max_length``, which sentence-transformers' 5.x ``save`` writes
    instead) and ``do_lower_case``."""
    settings = next((s for s in (read_json(folder / n) for n in TRANSFORMER_CONFIGS) if s), {})
    told = settings.get("max_seq_length")
    if told is None:
        told = read_json(folder / "tokenizer_config.json").get("model_max_length")
    told = told if isinstance(told, int) and not isinstance(told, bool) and 0 < told < 10 ** 9 else None
    return dict(max_seq_length=told, do_lower_case=settings.get("do_lower_case") is True)


def _pooling(config: Path) -> dict:
    """The Pooling module's modes and ``include_prompt`` from its config.json (5.x's ``pooling_mode``, or the older
    ``pooling_mode_*`` flags; no mode at all is mean, as sentence-transformers reads it)."""
    settings = read_json(config)
    if not settings:
        raise ConfigError(f"{config} is missing or empty: the Pooling module's config (its modes) is not there; "
                          "re-download the folder")
    modes = settings.get("pooling_mode")
    if modes is None:
        modes = [mode for flag, mode in LEGACY_FLAGS.items() if settings.get(flag)] or ["mean"]
    modes = [modes] if isinstance(modes, str) else modes
    if not isinstance(modes, list) or not modes or any(m not in POOLINGS for m in modes):
        raise ConfigError(f"{config}: pooling_mode {settings.get('pooling_mode')!r} is not one or more of "
                          f"{', '.join(map(repr, POOLINGS))}")
    return dict(pooling=tuple(modes), include_prompt=settings.get("include_prompt", True) is not False)


def _dense(folder: Path, path: str) -> Dense:
    """A Dense module from its config.json and weights (``linear.weight`` (out, in), ``linear.bias`` (out,))."""
    config = read_json(folder / "config.json")
    if not {"in_features", "out_features"} <= config.keys():
        raise ConfigError(f"{folder / 'config.json'} should give the Dense module's in_features and out_features, "
                          f"got {config or 'no file'}; re-download the folder")
    named = config.get("activation_function") or "torch.nn.modules.activation.Tanh"
    activation = named.rsplit(".", 1)[-1].lower()
    if not named.startswith("torch."):
        warnings.warn(f"{folder / 'config.json'} names the activation {named}, which sentence-transformers replaces by "
                      "Tanh unless trusted with trust_remote_code, and so does bertfn", stacklevel=4)
        activation = "tanh"
    elif activation not in ACTIVATIONS:
        raise ConfigError(f"{folder / 'config.json'} names the activation {named}, which bertfn does not apply (it "
                          f"applies {', '.join(ACTIVATIONS)}); this folder's vectors need sentence-transformers itself")
    files = [folder / n for n in ("model.safetensors", "pytorch_model.bin") if (folder / n).is_file()]
    if not files:
        raise CheckpointError(f"{folder} has no model.safetensors or pytorch_model.bin: the Dense module's weights are "
                              "missing; re-download the folder")
    state = read_weights(files[0])
    out_in = (config["out_features"], config["in_features"])
    weight, bias = state.get("linear.weight"), state.get("linear.bias")
    if weight is None or tuple(weight.shape) != out_in or (config.get("bias", True) and (bias is None or tuple(bias.shape) != out_in[:1])):
        raise CheckpointError(f"{files[0]} should hold linear.weight {out_in}{' and linear.bias' if config.get('bias', True) else ''} "
                              f"as its config.json says, got {({k: tuple(v.shape) for k, v in state.items()})}")
    return Dense(weight.float(), bias.float() if config.get("bias", True) else None, activation, path)
