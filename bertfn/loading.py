"""From a hub id, a folder or a file to a :class:`Model`: config + flat HF-keyed weights + tokenizer.

``load(name_or_path)`` accepts
  * a local folder with ``config.json``, ``model.safetensors`` (or ``pytorch_model.bin``) and
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
import re
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .config import BertConfig
from .errors import CheckpointError, InputError, ModelLoadError
from .params import Params
from .tokenizer import Tokenizer

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")  # non-weights some files carry


@dataclass(frozen=True)
class Model:
    """A loaded BERT: the flat HF-keyed ``state`` is the model; ``params`` is its root view."""

    config: BertConfig
    state: dict[str, torch.Tensor]
    tokenizer: Tokenizer | None
    name: str

    @property
    def params(self) -> Params:
        return Params(self.state, self.config)

    @property
    def device(self) -> torch.device:
        return self.state["bert.embeddings.word_embeddings.weight"].device

    @property
    def dtype(self) -> torch.dtype:
        return self.state["bert.embeddings.word_embeddings.weight"].dtype

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> Model:
        """A copy of the model with its weights on ``device`` / in ``dtype`` (tied weights stay tied,
        and each weight keeps its memory layout, see :func:`matmul_layout`).

        Raises :class:`InputError` for a device this torch cannot use or a dtype that is not floating point.
        """
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise InputError(f"dtype must be a floating-point torch.dtype such as torch.float16, got {dtype!r}")
        if device is not None:
            try:
                torch.empty(0, device=device)
            except (RuntimeError, AssertionError, TypeError) as e:  # unknown name, or a backend torch lacks
                raise InputError(f"device {str(device)!r} cannot be used here ({str(e).splitlines()[0]}); "
                                 f"pass 'cpu'{' or cuda' if torch.cuda.is_available() else ''}") from None
        moved: dict[int, torch.Tensor] = {}
        state = {}
        for k, t in self.state.items():
            if id(t) not in moved:
                moved[id(t)] = t.to(device=device, dtype=dtype if t.is_floating_point() else None)
            state[k] = moved[id(t)]
        return replace(self, state=state)


# --- reading files --------------------------------------------------------------------------------


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of one weights file. ``.safetensors`` via safetensors; ``.bin`` via ``weights_only`` torch.load."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            # read into memory, not mapped: matmul_layout replaces most weights by copies, and the
            # mapped pages would stay resident beside them
            return load_file(str(path), backend="pread")
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(
                f"{path} is not a readable safetensors file ({e}); it may be truncated or corrupt, download it again"
            ) from e
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError from the restricted unpickler, RuntimeError / EOFError for broken zips
        reason = _torch_load_reason(e)
        if "global" in reason.lower():  # the pickle names a function or class to call: code, refused unrun
            raise CheckpointError(
                f"{path} holds more than plain tensors ({reason}); bertfn reads .bin files with "
                "torch.load(weights_only=True) and never runs code a pickle carries. If you trust the file, "
                "convert it to model.safetensors; if you do not, delete it"
            ) from e
        raise CheckpointError(
            f"{path} is not a PyTorch checkpoint bertfn can read ({reason}); it may be truncated or corrupt "
            "(download it again) or not written by torch.save"
        ) from e
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a flat state_dict of tensors")
    return state


def _torch_load_reason(e: Exception) -> str:
    """The informative line of a torch.load error (its message wraps the reason in paragraphs of advice)."""
    boilerplate = ("Weights only load failed", "Please file an issue", "Check the documentation")
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    reason = next((line for line in lines if not line.startswith(boilerplate)), lines[0] if lines else "")
    return f"{type(e).__name__}: {reason}"


def normalize_keys(state: dict[str, torch.Tensor], config: BertConfig) -> dict[str, torch.Tensor]:
    """Rename to ``BertForPreTraining`` names and tie the decoder; returns a new dict (same tensors).

    * bare ``BertModel`` keys (``embeddings.…``, ``encoder.…``, ``pooler.…``) get the ``bert.`` prefix;
    * TF-era ``LayerNorm.gamma`` / ``LayerNorm.beta`` become ``LayerNorm.weight`` / ``LayerNorm.bias``;
    * buffers (``position_ids``, ``token_type_ids``) are dropped: bertfn computes them;
    * a missing ``cls.predictions.decoder.weight`` is the word embeddings (tied), and
      ``cls.predictions.decoder.bias`` and ``cls.predictions.bias`` are one tensor.
    """
    out = {}
    for k, t in state.items():
        if k.startswith(("embeddings.", "encoder.", "pooler.")):
            k = "bert." + k
        if k.endswith(".gamma"):
            k = k[: -len("gamma")] + "weight"
        elif k.endswith(".beta"):
            k = k[: -len("beta")] + "bias"
        if k not in BUFFERS:
            out[k] = t
    if "cls.predictions.transform.dense.weight" in out:
        if "cls.predictions.decoder.weight" not in out and "bert.embeddings.word_embeddings.weight" in out:
            out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
        if "cls.predictions.bias" not in out and "cls.predictions.decoder.bias" in out:
            out["cls.predictions.bias"] = out["cls.predictions.decoder.bias"]
        if "cls.predictions.decoder.bias" not in out and "cls.predictions.bias" in out:
            out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return out


LINEAR_WEIGHT = re.compile(r"\.(query|key|value|dense|classifier|qa_outputs|seq_relationship)\.weight$|^(classifier|qa_outputs)\.weight$")
"""Keys of the weights that :func:`~bertfn.functional.linear` multiplies by (attention, feed-forward, pooler, heads)."""


def matmul_layout(state: dict[str, torch.Tensor]) -> None:
    """Store every linear layer's weight (in, out) in memory, in place; names, shapes and values stay HF's.

    A checkpoint holds a linear weight as (out, in) rows, and ``F.linear(x, w)`` multiplies ``x``
    by ``w.t()``: a transposed matrix for the BLAS library. Laid out the other way round
    (:func:`in_out`), the same call hands MKL a plain (in, out) matrix, which it multiplies 25-35%
    faster for a sentence's 8-16 rows, a few % faster up to 128 rows and as fast for more
    (``python bench/kernels.py``).

    Weights are replaced one at a time, so memory holds one weight twice at most. The embedding
    tables (and the decoder tied to the word embeddings) stay row by row: lookups read rows. Such a
    dict is not contiguous: to save it with safetensors, pass ``{k: v.contiguous() for k, v in state.items()}``.
    """
    for k, t in state.items():
        if LINEAR_WEIGHT.search(k) and t.dim() == 2:
            state[k] = in_out(t)


def in_out(w: torch.Tensor) -> torch.Tensor:
    """``w`` (out, in) as a view of an (in, out) contiguous copy: the same weight, laid out for ``F.linear``."""
    return w.t().contiguous().t()


def is_in_out(w: torch.Tensor) -> bool:
    """Whether ``w`` is laid out as :func:`in_out` makes it (a 2-D weight transposed in memory)."""
    return w.dim() == 2 and not w.is_contiguous() and w.t().is_contiguous()


def expected_shapes(config: BertConfig, state: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """Every key the model needs, with its shape. Optional parts (pooler, heads) count when ``state`` has them."""
    H, V, I, P, hd = (config.hidden_size, config.vocab_size, config.intermediate_size,
                      config.max_position_embeddings, config.head_dim)
    shapes: dict[str, tuple[int, ...]] = {
        "bert.embeddings.word_embeddings.weight": (V, H),
        "bert.embeddings.position_embeddings.weight": (P, H),
        "bert.embeddings.token_type_embeddings.weight": (config.type_vocab_size, H),
        "bert.embeddings.LayerNorm.weight": (H,),
        "bert.embeddings.LayerNorm.bias": (H,),
    }

    def attention_block(prefix: str, heads: int, relative: bool) -> None:
        A = heads * hd
        for m in ("query", "key", "value"):
            shapes[f"{prefix}.self.{m}.weight"] = (A, H)
            shapes[f"{prefix}.self.{m}.bias"] = (A,)
        if relative:
            shapes[f"{prefix}.self.distance_embedding.weight"] = (2 * P - 1, hd)
        shapes[f"{prefix}.output.dense.weight"] = (H, A)
        shapes[f"{prefix}.output.dense.bias"] = (H,)
        shapes[f"{prefix}.output.LayerNorm.weight"] = (H,)
        shapes[f"{prefix}.output.LayerNorm.bias"] = (H,)

    for i in range(config.num_hidden_layers):
        layer = f"bert.encoder.layer.{i}"
        attention_block(f"{layer}.attention", config.heads_in_layer(i), config.position_embedding_type != "absolute")
        if config.add_cross_attention:
            attention_block(f"{layer}.crossattention", config.num_attention_heads, False)
        shapes[f"{layer}.intermediate.dense.weight"] = (I, H)
        shapes[f"{layer}.intermediate.dense.bias"] = (I,)
        shapes[f"{layer}.output.dense.weight"] = (H, I)
        shapes[f"{layer}.output.dense.bias"] = (H,)
        shapes[f"{layer}.output.LayerNorm.weight"] = (H,)
        shapes[f"{layer}.output.LayerNorm.bias"] = (H,)

    optional = {
        "bert.pooler.dense.weight": {"bert.pooler.dense.weight": (H, H), "bert.pooler.dense.bias": (H,)},
        "cls.predictions.transform.dense.weight": {
            "cls.predictions.transform.dense.weight": (H, H), "cls.predictions.transform.dense.bias": (H,),
            "cls.predictions.transform.LayerNorm.weight": (H,), "cls.predictions.transform.LayerNorm.bias": (H,),
            "cls.predictions.decoder.weight": (V, H), "cls.predictions.decoder.bias": (V,),
            "cls.predictions.bias": (V,),
        },
        "cls.seq_relationship.weight": {"cls.seq_relationship.weight": (2, H), "cls.seq_relationship.bias": (2,)},
    }
    for group in optional.values():
        if any(k in state for k in group):
            shapes.update(group)
    for head in ("classifier", "qa_outputs"):  # task heads: any number of labels, each of width H
        if f"{head}.weight" in state or f"{head}.bias" in state:
            w = state.get(f"{head}.weight")
            n = w.shape[0] if w is not None and w.dim() == 2 else config.num_labels
            shapes[f"{head}.weight"] = (n, H)
            shapes[f"{head}.bias"] = (n,)
    return shapes


def config_contradictions(config: BertConfig, state: dict[str, torch.Tensor]) -> list[str]:
    """Config values that the weights' own shapes contradict, e.g. ``"num_hidden_layers=3 but the weights have 2"``.

    Read from the embeddings, the first layer and the layers' query weights. (Head count and eps leave no trace
    in the shapes: a wrong ``num_attention_heads`` that divides ``hidden_size`` cannot be detected.)
    """
    def size(key: str, axis: int) -> int | None:
        t = state.get(key)
        return t.shape[axis] if t is not None and t.dim() > axis else None

    layers = [k for k in state if re.fullmatch(r"bert\.encoder\.layer\.\d+\.attention\.self\.query\.weight", k)]
    found = {
        "vocab_size": size("bert.embeddings.word_embeddings.weight", 0),
        "hidden_size": size("bert.embeddings.word_embeddings.weight", 1),
        "max_position_embeddings": size("bert.embeddings.position_embeddings.weight", 0),
        "type_vocab_size": size("bert.embeddings.token_type_embeddings.weight", 0),
        "intermediate_size": size("bert.encoder.layer.0.intermediate.dense.weight", 0),
        "num_hidden_layers": len(layers) or None,
    }
    out = [f"{name}={getattr(config, name)} but the weights have {n}"
           for name, n in found.items() if n is not None and n != getattr(config, name)]
    relative = any(k.endswith("self.distance_embedding.weight") for k in state)
    if relative != (config.position_embedding_type != "absolute"):
        out.append(f"position_embedding_type={config.position_embedding_type!r} but the weights "
                   f"{'have' if relative else 'lack'} relative-position distance_embedding tables")
    return out


def check_state(state: dict[str, torch.Tensor], config: BertConfig, strict: bool = True,
                weights_file: str | None = None, config_file: str | None = None) -> None:
    """Raise :class:`CheckpointError` naming every missing, unexpected and mis-shaped key.

    When config values contradict the weights (:func:`config_contradictions`) the message leads with
    them. ``weights_file`` / ``config_file`` name the files in the message.
    """
    present = set(state)
    shapes = expected_shapes(config, state)
    missing = sorted(set(shapes) - present)
    unexpected = sorted(present - set(shapes)) if strict else []
    wrong = [f"{k}: expected {shapes[k]}, found {tuple(state[k].shape)}"
             for k in sorted(present & set(shapes)) if tuple(state[k].shape) != shapes[k]]
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} key(s): {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} key(s): {', '.join(unexpected[:8])}"
                         f"{' ...' if len(unexpected) > 8 else ''}")
        if wrong:
            parts.append(f"wrong shape: {'; '.join(wrong[:8])}{' ...' if len(wrong) > 8 else ''}")
        weights = f"the weights in {weights_file}" if weights_file else "the weights"
        config_name = config_file or "the config"
        contradictions = config_contradictions(config, state)
        if contradictions:
            raise CheckpointError(
                f"{config_name} contradicts {weights}: {'; '.join(contradictions)} ({' | '.join(parts)}); "
                f"use the config.json that came with these weights, or correct those values in it"
            )
        raise CheckpointError(
            f"{weights} do not fit {config_name} ({' | '.join(parts)}); check that {config_name} belongs to "
            "these weights" + ("" if not unexpected else ", or load with strict=False to ignore extra keys")
        )


# --- finding files --------------------------------------------------------------------------------


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "on", "yes", "true"}


def download(repo_id: str, revision: str | None = None) -> Path:
    """Fetch config, weights and tokenizer files of a hub repo into the HF cache; returns the snapshot folder.

    Honours ``HF_HUB_OFFLINE`` (cache only) and the usual cache variables. Prefers safetensors.
    """
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    local_only = _offline()

    def fetch(filename: str) -> Path | None:
        try:
            return Path(hf_hub_download(repo_id, filename, revision=revision, local_files_only=local_only))
        except LocalEntryNotFoundError:
            return None  # offline or unreachable, and not in the cache
        except EntryNotFoundError:
            return None  # the repo has no such file

    how = (f"pass a local folder instead, e.g. bertfn.load('/path/to/{repo_id.split('/')[-1]}') with "
           "config.json, model.safetensors and vocab.txt (or tokenizer.json) in it")
    try:
        config = fetch("config.json")
        if config is None:
            state = "HF_HUB_OFFLINE is set" if local_only else "the hub cannot be reached (HF_HUB_OFFLINE=1 skips trying)"
            fix = "unset HF_HUB_OFFLINE to download it, or " if local_only else ""
            raise ModelLoadError(f"cannot get {repo_id!r}: {state} and the Hugging Face cache "
                                 f"({constants.HF_HUB_CACHE}) has no copy of it; {fix}{how}")
        weights = next((w for w in map(fetch, WEIGHT_FILES) if w is not None), None)
        if weights is None:
            raise ModelLoadError(f"{repo_id!r} has no {' or '.join(WEIGHT_FILES)} available here; {how}")
        for name in TOKENIZER_FILES:
            fetch(name)
    except (RepositoryNotFoundError, RevisionNotFoundError, HFValidationError) as e:
        raise ModelLoadError(f"{repo_id!r} is neither a local folder nor a model on the hub "
                             f"({type(e).__name__}); check the spelling, or {how}") from e
    except (HfHubHTTPError, OSError) as e:  # the hub answered with an error, or the cache cannot be written
        first_line = str(e).splitlines()[0] if str(e) else ""
        raise ModelLoadError(f"cannot get {repo_id!r} ({type(e).__name__}: {first_line}); try again later, or {how}") from e
    return config.parent


def _looks_like_path(name: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else that does not exist is a wrong path."""
    return name.startswith((".", "/", "~", "\\")) or name.count("/") > 1 or name.endswith((".safetensors", ".bin", ".json"))


def load(
    name_or_path: str | Path,
    *,
    config: BertConfig | dict | str | Path | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    revision: str | None = None,
    strict: bool = True,
) -> Model:
    """Load a BERT checkpoint from a hub id, a folder or a weights file (see the module docstring).

    config: overrides ``config.json`` (a :class:`BertConfig`, a dict, or a path). strict: refuse keys
    the model does not use. device / dtype: where the weights go (default: as stored, on the CPU).
    Raises :class:`ModelLoadError`, :class:`ConfigError` or :class:`CheckpointError` with what to do.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        folder = path
        weights = next((folder / w for w in WEIGHT_FILES if (folder / w).is_file()), None)
        if weights is None:
            raise CheckpointError(f"{folder} has no {' or '.join(WEIGHT_FILES)}; put the model's weights there")
    elif path.is_file():
        folder, weights = path.parent, path
    elif _looks_like_path(str(name_or_path)):
        raise ModelLoadError(f"{str(name_or_path)!r} does not exist; pass an existing folder, file or a hub id")
    else:
        folder = download(str(name_or_path), revision)
        weights = next(folder / w for w in WEIGHT_FILES if (folder / w).is_file())

    config_file = folder / "config.json" if config is None else config if isinstance(config, (str, Path)) else None
    if config_file is not None:
        config = BertConfig.from_file(config_file)
    elif isinstance(config, dict):
        config = BertConfig.from_dict(config)
    elif not isinstance(config, BertConfig):
        raise InputError(f"config= takes a BertConfig, a dict or the path of a config.json, got {type(config).__name__}")

    state = normalize_keys(read_weights(weights), config)
    check_state(state, config, strict, str(weights), str(config_file) if config_file is not None else None)
    if not strict:
        known = set(expected_shapes(config, state))
        state = {k: v for k, v in state.items() if k in known}
    matmul_layout(state)
    tokenizer = Tokenizer.from_folder(folder, config.max_position_embeddings)
    if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
        raise CheckpointError(
            f"the tokenizer in {folder} has {tokenizer.vocab_size} tokens but the model's vocab_size is "
            f"{config.vocab_size}, so some ids would have no embedding; use the tokenizer files that came with "
            "these weights"
        )
    model = Model(config, state, tokenizer, str(name_or_path))
    return model.to(device, dtype) if device is not None or dtype is not None else model

