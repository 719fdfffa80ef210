"""A Model written to a folder that transformers and bertfn both read: ``save(model, folder)``.

The folder is what ``save_pretrained`` of the member's transformers class and of its tokenizer writes:

* ``config.json``: the config under the member's own field names (DistilBERT's ``dim``, ``n_layers``, ...;
  ModernBERT's ``hidden_activation``, ``norm_eps``, ...; ALBERT's ``classifier_dropout_prob``: :func:`config_json`),
  its ``model_type``, the class it is (``architectures``: ``RobertaForSequenceClassification``, as the config
  names it or, where it names none, as the weights' head says: :func:`architecture`) and its labels;
* ``model.safetensors``: the state as bertfn holds it, under the member's key names, less the second names that
  loading gives a tied weight (a decoder tied to the word embeddings is stored once, as ``save_pretrained`` stores
  it: :func:`stored_state`); contiguous tensors, never pickle;
* the tokenizer's files: copied from where it was read (``tokenizer.json`` or ``vocab.txt``, with the
  ``tokenizer_config.json`` and ``special_tokens_map.json`` beside it) when those files give the tokenizer the model
  holds, else written from it (:func:`tokenizer_files`).

``bertfn.load(folder)`` gives the same state and config back, and transformers' ``AutoModelFor...`` reads it with
no missing or unexpected keys (tests/test_save.py, every member and head).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer as _HFTokenizer

from ..errors import BertfnError, BertfnWarning, InputError
from ..model.config import BertConfig
from ..model.members.esm import ROTARY_BASE
from ..model.family import longest_input
from ..model.naming import names_of
from ..model.params import Params
from ..model.members.rotary import inverse_frequencies
from ..model.task_heads import SUFFIXES, head_of
from .loading import VOCABULARY_FILES
from .model import Model
from .slow_tokenizers import FILES as SLOW_FILES
from .tokenizer import Tokenizer

CLASS_PREFIXES = {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta", "distilbert": "DistilBert",
                  "electra": "Electra", "albert": "Albert", "modernbert": "ModernBert", "esm": "Esm",
                  "camembert": "Camembert", "mpnet": "MPNet", "deberta-v2": "DebertaV2"}
"""``model_type`` -> the prefix of the member's transformers classes (``Roberta`` + ``ForSequenceClassification``)."""

TASK_SUFFIXES = {task: suffix for suffix, task in reversed(SUFFIXES.items())}
"""What a checkpoint carries -> its transformers class's suffix (the first of :data:`SUFFIXES` that names it:
``LMHeadModel`` for a causal LM, as BERT's ``BertLMHeadModel``)."""

FILE_NAMES = {"albert": {"classifier_dropout": "classifier_dropout_prob"}}
"""BertConfig's field names -> a member's config.json names, where its config class renames them in a function
(``AlbertConfig.renamed``) rather than a ``NAMES`` table (DistilBERT's and ModernBERT's, inverted by
:func:`file_names`)."""

def esm_buffers(config: BertConfig) -> dict[str, torch.Tensor]:
    """ESM-2's rotary ``inv_freq`` of each layer (:func:`~bertfn.model.members.rotary.inverse_frequencies`): buffers that
    ``EsmModel`` stores in its file (transformers reports them missing otherwise) and bertfn computes instead; none
    with learned positions (ESM-1b: no rotary module).

    Args:
        config: the model's config.
    """
    if config.position_embedding_type != "rotary":
        return {}
    inv = inverse_frequencies(config.head_dim, ROTARY_BASE)  # (hd/2,)
    return {f"esm.encoder.layer.{i}.attention.self.rotary_embeddings.inv_freq": inv
            for i in range(config.num_hidden_layers)}


BUFFERS = {"esm": esm_buffers}
"""``model_type`` -> ``config -> {key: tensor}``: the buffers a member's transformers class stores with its weights,
which loading drops (bertfn computes them) and :func:`stored_state` writes back."""

TOKENIZER_FILES = (*VOCABULARY_FILES, "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
"""The tokenizer's files that :func:`save` copies from beside the one it was read from, and removes from the folder
where it writes none of that name (one left from another model would be read in place of the saved tokenizer)."""


def architecture(config: BertConfig, task: str) -> str:
    """The member's transformers class that carries ``task``: ``RobertaForSequenceClassification``, ``BertModel``.

    Args:
        config: the model's config (its ``model_type``).
        task: what the checkpoint carries (:attr:`~bertfn.model.task_heads.Head.task`).
    """
    prefix = CLASS_PREFIXES[config.model_type]
    if task == "causal-lm" and config.model_type != "bert":
        return prefix + "ForCausalLM"  # BERT's alone is BertLMHeadModel
    return prefix + TASK_SUFFIXES[task]


def file_names(config: BertConfig) -> dict[str, str]:
    """BertConfig's field names -> the member's config.json names, where they differ: the member's config class's
    ``NAMES`` inverted (DistilBERT's ``hidden_size`` -> ``dim``), and :data:`FILE_NAMES`.

    Args:
        config: the model's config.
    """
    names = {bert: own for own, bert in getattr(type(config), "NAMES", {}).items()}
    return {**names, **FILE_NAMES.get(config.model_type, {})}


def config_json(config: BertConfig, state: dict[str, torch.Tensor]) -> dict:
    """The ``config.json`` of a model of ``config`` with the weights ``state``, as transformers writes it.

    The member's field names (:func:`file_names`), its ``architectures`` (the config's, else :func:`architecture` of
    the head the weights carry), ``id2label`` with string keys and ``label2id`` where the config has them (else
    ``num_labels``, from which transformers names them ``LABEL_0``, ...), the weights' ``dtype``, and
    ``tie_word_embeddings: false`` where an MLM decoder is a tensor of its own.

    Args:
        config: the model's config.
        state: its weights, as loading leaves them.
    """
    d = config.to_dict()
    d.pop("num_labels")
    if config.id2label is None:
        del d["id2label"]
        d["num_labels"] = config.num_labels
    if config.label2id is None:
        del d["label2id"]
    if not config.architectures:
        d["architectures"] = [architecture(config, head_of(config, state).task)]
    root = Params(state, config)
    d["dtype"] = str(root["bert.embeddings.word_embeddings.weight"].dtype).removeprefix("torch.")
    decoder = root.get("cls.predictions.decoder.weight")
    if decoder is not None and decoder is not root["bert.embeddings.word_embeddings.weight"]:
        d["tie_word_embeddings"] = False
    names = file_names(config)
    return {names.get(k, k): v for k, v in d.items()}


def stored_state(model: Model) -> dict[str, torch.Tensor]:
    """The weights as ``save_pretrained`` stores them: the model's state less each second name of a tied weight that
    loading gives back (the member's ``normalize``, :mod:`bertfn.checkpoint.names`), with the buffers the member's class stores
    (:data:`BUFFERS`), bare base-model keys for a model with no head on
    its encoder (``BertModel``'s ``embeddings...``), every tensor detached, on the CPU and contiguous.

    Args:
        model: the model.
    """
    config, state = model.config, dict(model.state)
    naming = names_of(config)
    names: dict[int, int] = {}
    for t in state.values():
        names[id(t)] = names.get(id(t), 0) + 1
    for k in reversed(list(state)):  # loading appends the second names: try them first
        t = state[k]
        if names[id(t)] > 1 and naming.normalize({j: u for j, u in state.items() if j != k}, config).get(k) is t:
            del state[k]
            names[id(t)] -= 1
    buffers = BUFFERS[config.model_type](config) if config.model_type in BUFFERS else {}
    prefix = naming.prefix
    if head_of(config, state).task == "encoder":  # transformers' *Model stores its keys without the prefix
        bare = {k.removeprefix(prefix): t for k, t in state.items()}
        if naming.normalize(bare, config).keys() == state.keys():
            state, buffers = bare, {k.removeprefix(prefix): t for k, t in buffers.items()}
    state.update(buffers)
    out, storages = {}, set()
    for k, t in state.items():
        t = t.detach().cpu().contiguous()
        if t.untyped_storage().data_ptr() in storages:  # a view into another weight: safetensors stores its own copy
            t = t.clone()
        storages.add(t.untyped_storage().data_ptr())
        out[k] = t
    return out


def tokenizer_files(tokenizer: Tokenizer, config: BertConfig) -> dict[str, str | Path]:
    """The files that give ``tokenizer`` back, ``{name: a file to copy, or the text to write}``.

    Its own files (``tokenizer.source``, under the name a folder's tokenizer is read by, and the
    :data:`TOKENIZER_FILES` beside it that do not take its place) where reading them gives the same pipeline (no ``lowercase=`` set against them at load); else its pipeline as ``tokenizer.json``
    (``tokenizers``' own serialization, padding off), a ``tokenizer_config.json`` naming its special tokens (and, for
    BERT's normalizer, its lowercasing, accents and Chinese characters, which ``BertTokenizerFast`` checks), and for
    a vocabulary of whole tokens (WordPiece, ESM-2's) its ``vocab.txt`` in id order.

    Args:
        tokenizer: the model's tokenizer.
        config: the model's config (its longest input: ``model_max_length``).
    """
    source = Path(tokenizer.source)
    if source.is_file():
        try:
            same = Tokenizer.from_path(source, tokenizer.max_length).backend.to_str() == tokenizer.backend.to_str()
        except (BertfnError, OSError):  # files that no longer read as they did: write the tokenizer instead
            same = False
        if same:  # the source under the name it is read by (a slow tokenizer's: all its files), its settings, and
            # (beside a tokenizer.json) the slow tokenizer's vocabulary; a tokenizer.json beside a vocab.txt or
            # spm.model would be read in their place
            if source.name in SLOW_FILES:
                own = {n: source.parent / n for n, kinds in SLOW_FILES.items()
                       if kinds == SLOW_FILES[source.name] and (source.parent / n).is_file()}
            else:
                own = {"tokenizer.json" if source.suffix == ".json" else "spm.model" if source.name == "spm.model"
                       else "vocab.txt": source}
            beside = {name: source.parent / name for name in TOKENIZER_FILES if (source.parent / name).is_file()
                      and (name not in VOCABULARY_FILES or "tokenizer.json" in own)}
            return {**beside, **own}
    backend = _HFTokenizer.from_str(tokenizer.backend.to_str())
    backend.no_padding()
    backend.no_truncation()
    files: dict[str, str | Path] = {"tokenizer.json": backend.to_str(pretty=True)}
    options = {f"{role}_token": getattr(tokenizer, f"{role}_token") for role in ("cls", "sep", "mask", "pad", "unk")
               if getattr(tokenizer, f"{role}_token", None) is not None}
    if tokenizer.sep_token is not None:
        options["eos_token"] = tokenizer.sep_token  # ESM-2's names its separator so; others read sep_token first
    normalizer = json.loads(files["tokenizer.json"]).get("normalizer") or {}
    if normalizer.get("type") == "BertNormalizer":
        options.update(do_lower_case=normalizer["lowercase"], strip_accents=normalizer["strip_accents"],
                       tokenize_chinese_chars=normalizer["handle_chinese_chars"])
    options.update(clean_up_tokenization_spaces=tokenizer.clean_up_spaces, model_max_length=longest_input(config))
    files["tokenizer_config.json"] = json.dumps(options, indent=2, ensure_ascii=False)
    model = json.loads(files["tokenizer.json"])["model"]
    if model.get("type") in ("WordPiece", "WordLevel"):
        vocab = sorted(model["vocab"].items(), key=lambda tv: tv[1])
        files["vocab.txt"] = "".join(t + "\n" for t, _ in vocab)
    return files


def save(model: Model, folder: str | Path) -> Path:
    """Write ``model`` to ``folder`` as transformers' ``save_pretrained`` writes it (see the module docstring).

    Each file is written beside its final name and then moved onto it, so a model may be saved over the folder it
    was read (or memory-mapped) from. A tokenizer file of :data:`TOKENIZER_FILES` that the model's tokenizer does not
    write is removed (another model's ``tokenizer.json`` beside a ``vocab.txt`` would be read first); other files in
    the folder are left as they are.

    Args:
        model: a Model (from :func:`~bertfn.load`, :func:`~bertfn.with_head`, ...).
        folder: where to write; made if it does not exist.

    Returns:
        ``folder``, as a Path.

    Raises:
        InputError: ``model`` is not a Model, or ``folder`` is a file.

    Warns:
        BertfnWarning: weights that hold NaN or infinite values (a training that diverged), written as they are.
    """
    if not isinstance(model, Model):
        raise InputError(f"save() writes a Model (from bertfn.load, bertfn.with_head, ...), got {type(model).__name__}")
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder} is a file; pass a folder (it is made if it does not exist)")
    folder.mkdir(parents=True, exist_ok=True)

    def put(name: str, write) -> None:  # write(path) beside the name, then move it onto the name
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        try:
            write(tmp)
            os.replace(tmp, folder / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    state = stored_state(model)
    broken = [k for k, t in state.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if broken:
        warnings.warn(f"{len(broken)} of the weights saved to {folder} hold NaN or infinite values (e.g. {broken[0]}), so "
                      "the model's outputs will be NaN: a training that diverged (a learning rate too high, an fp16 "
                      "overflow)? The folder is written as asked", BertfnWarning, stacklevel=2)
    put("model.safetensors", lambda p: save_file(state, str(p), metadata={"format": "pt"}))
    config = json.dumps(config_json(model.config, model.state), indent=2, sort_keys=True)
    put("config.json", lambda p: p.write_text(config + "\n", encoding="utf-8"))
    if model.tokenizer:
        files = tokenizer_files(model.tokenizer, model.config)
        for name, content in files.items():
            if isinstance(content, Path):
                if content.resolve() != (folder / name).resolve():
                    put(name, lambda p, src=content: shutil.copyfile(src, p))
            else:
                put(name, lambda p, text=content: p.write_text(text, encoding="utf-8"))
        for name in set(TOKENIZER_FILES) - set(files):  # another tokenizer's, which would be read in place of this one
            (folder / name).unlink(missing_ok=True)
    return folder

