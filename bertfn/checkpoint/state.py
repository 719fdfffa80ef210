"""Checking and laying out a checkpoint's flat state: HF key names, expected shapes, the matmul layout.

What :func:`~bertfn.checkpoint.loading.load` does to the tensors once they are read:
the member's ``normalize`` (:mod:`bertfn.checkpoint.names`; BERT's :func:`~bertfn.checkpoint.names.bert.normalize_keys`)
renames them to the names the model reads, :func:`check_state` compares them with the shapes
the config implies (:func:`expected_shapes`), :func:`unused_keys` finds the ones no BERT part reads,
and :func:`matmul_layout` lays the linear weights out for faster products.
"""

from __future__ import annotations

import ctypes
import re
import sys

import torch

from ..errors import CheckpointError
from ..model.config import BertConfig
from ..model.naming import names_of
from ..model.params import Params
from ..model.shapes import expected_shapes  # noqa: F401  (BERT's table, re-exported: tests read it here)
from ..model.task_heads import head_shapes

LINEAR_WEIGHT = re.compile(r"(^|\.)(query|key|value|dense|classifier|qa_outputs|seq_relationship|pooler"
                           r"|q_lin|k_lin|v_lin|out_lin|lin1|lin2|vocab_transform"  # DistilBERT's names
                           r"|ffn|ffn_output|dense_prediction)\.weight$")  # ALBERT's, ELECTRA's
"""Keys of the weights that :func:`~bertfn.model.functional.linear` multiplies by (attention, feed-forward, pooler, heads),
under BERT's names and the family members'. Not among them: a decoder tied to the word embeddings (lookups read it) and
ELECTRA's and ALBERT's embedding projection, which the embeddings step multiplies by on every path (reference functions
cannot read a packed weight)."""


COMPUTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
"""The types a weight the model reads may have: those torch's kernels compute a forward pass in. An integer, bool,
complex or float8 weight passed the load and met a raw torch error in the first pass ("expected scalar type Float")."""


def matmul_layout(state: dict[str, torch.Tensor]) -> None:
    """Store every linear layer's weight (in, out) in memory, in place; names, shapes and values stay HF's.

    A checkpoint holds a linear weight as (out, in) rows, and ``F.linear(x, w)`` multiplies ``x``
    by ``w.t()``: a transposed matrix for the BLAS library. Laid out the other way round
    (:func:`in_out`), the same call hands MKL a plain (in, out) matrix, which it multiplies faster at a
    sentence's few rows and as fast at many (``python bench/kernels.py`` measures it on the machine at hand).

    Weights are replaced one at a time, so memory holds one weight twice at most. The embedding
    tables (and the decoder tied to the word embeddings) stay row by row: lookups read rows. Such a
    dict is not contiguous: to save it with safetensors, pass ``{k: v.contiguous() for k, v in state.items()}``.

    Args:
        state: a model's flat state, changed in place.
    """
    for k, t in state.items():
        if LINEAR_WEIGHT.search(k) and t.dim() == 2:
            state[k] = in_out(t)


def as_stored(state: dict[str, torch.Tensor]) -> bool:
    """A ``prepare`` for :func:`~bertfn.checkpoint.loading.load` that keeps every weight as stored, (out, in).

    For a trace of a long text, where the (in, out) layout gains less than it costs: at hundreds of rows the
    products run as fast either way, and the layout is a copy of every weight (``bertfn view``,
    ``bertfn attention``). With it, ``load`` maps a safetensors file instead of reading it (nothing copies the
    weights).

    Args:
        state: the model's state (left as it is).

    Returns:
        Always True: the weights are as wanted.
    """
    return True


def in_out(w: torch.Tensor) -> torch.Tensor:
    """``w`` (out, in) as a view of an (in, out) contiguous copy: the same weight, laid out for ``F.linear``.

    Args:
        w: a 2-D weight.
    """
    return w.t().contiguous().t()


def is_in_out(w: torch.Tensor) -> bool:
    """Whether ``w`` is laid out as :func:`in_out` makes it (a 2-D weight transposed in memory).

    Args:
        w: a weight.
    """
    return w.dim() == 2 and not w.is_contiguous() and w.t().is_contiguous()


_malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None) if sys.platform.startswith("linux") else None


def release_memory() -> None:
    """Hand the C heap's free pages back to the system: glibc's ``malloc_trim(0)``; elsewhere nothing.

    glibc keeps the holes that freed tensors leave in its heap. A file run's chunks come in sizes of
    their own (their texts' lengths), so without this the resident memory of a long run creeps up
    chunk after chunk: +300 MB in 20 chunks in tests/test_corpus.py's check, +500 MB over the 10,000
    lines of bench/files.py; trimmed after each chunk (:class:`bertfn.corpus.runner.Runner`), it
    stays flat, at the same speed within noise. Replacing a model's weights one by one by packed
    copies (:func:`bertfn.fast.choice.pack_state`) would otherwise keep every replaced weight resident.
    """
    if _malloc_trim is not None:
        _malloc_trim(0)


def checkpoint_shapes(config: BertConfig, state: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """Every key a model of ``config`` reads, as its checkpoint names it, with its shape: :func:`part_shapes` and
    the keys of the :func:`extra_heads` beside them.

    Args:
        config: the model's config.
        state: the weights at hand (their optional parts count).
    """
    return {**part_shapes(config, state), **{k: tuple(state[k].shape) for k in extra_head_keys(config, state)}}


def extra_heads(config: BertConfig, state: dict[str, torch.Tensor]) -> dict[str, int]:
    """The linear heads on the pooled output that a checkpoint holds beside its own parts, ``{key prefix: outputs}``:
    AntiBERTy's ``{"cls.chain": 2, "cls.graft": 2, "cls.species": 6}``, which :func:`bertfn.classify` runs
    (``head="cls.species"``).

    A prefix P is one when the model has a pooler (``bert.pooler.dense.*``) and, among the keys outside the base
    model that no part reads (:func:`part_shapes`), P's are ``P.weight`` (n, H) and ``P.bias`` (n,) alone, and no
    other such key sits beside P under P's parent (a layer of a larger leftover block, such as an MLM transform
    with its LayerNorm, is no head).

    Args:
        config: the model's config.
        state: the weights.
    """
    if "bert.pooler.dense.weight" not in Params(state, config):
        return {}
    read, base = set(part_shapes(config, state)), names_of(config).prefix
    unread = [k for k in state if k not in read and not k.startswith(base)]

    def linear(name: str) -> bool:  # P.weight (n, H) and P.bias (n,), and nothing else under P
        w, b = state.get(f"{name}.weight"), state.get(f"{name}.bias")
        return (w is not None and b is not None and w.is_floating_point() and w.dim() == 2
                and w.shape[1] == config.hidden_size and tuple(b.shape) == (w.shape[0],)
                and {k for k in unread if k.startswith(name + ".")} == {f"{name}.weight", f"{name}.bias"})

    heads = {name for name in {k.rpartition(".")[0] for k in unread} if name and linear(name)}

    def alone(name: str) -> bool:  # under P's parent, no unread key but the heads'
        parent = name.rpartition(".")[0]
        return not parent or all(k.rpartition(".")[0] in heads for k in unread if k.startswith(parent + "."))

    return {name: state[f"{name}.weight"].shape[0] for name in sorted(heads) if alone(name)}


def extra_head_keys(config: BertConfig, state: dict[str, torch.Tensor]) -> list[str]:
    """The keys of the :func:`extra_heads`: ``["cls.chain.weight", "cls.chain.bias", ...]``."""
    return [f"{name}.{leaf}" for name in extra_heads(config, state) for leaf in ("weight", "bias")]


def part_shapes(config: BertConfig, state: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """Every key the encoder, its heads and the task head of a model of ``config`` read, as its checkpoint names it,
    with its shape.

    BERT's table as the member's checkpoint names change it (:meth:`~bertfn.checkpoint.names.record.Names.named_shapes`) and the keys of the
    task head the checkpoint carries (:func:`~bertfn.model.task_heads.head_shapes`), each name turned into the
    family's key (several of ALBERT's layers read one key).

    Args:
        config: the model's config.
        state: the weights at hand (their optional parts count).
    """
    root = Params(state, config)
    table = {**names_of(config).named_shapes(config, root), **head_shapes(config, state)}
    return {root.key(k): shape for k, shape in table.items()}


def labels_found(config: BertConfig, state: dict[str, torch.Tensor]) -> int | None:
    """The labels the weights of the checkpoint's classifier have (its rows), or None where it has no classifier
    with one output per label (a tagger, a reader, a multiple-choice head has 1).

    Args:
        config: the model's config.
        state: the weights.
    """
    table = head_shapes(config, state)
    for k in ("classifier.out_proj.weight", "classifier.weight"):
        if k in table and table[k][0] == config.num_labels and k in state and state[k].dim() == 2:
            return state[k].shape[0]
    return None


def config_contradictions(config: BertConfig, state: dict[str, torch.Tensor]) -> list[str]:
    """Config values that the weights' own shapes contradict, e.g. ``"num_hidden_layers=3 but the weights have 2"``.

    Read from the embeddings, the first layer and the layers' query weights. (Head count and eps leave no trace
    in the shapes: a wrong ``num_attention_heads`` that divides ``hidden_size`` cannot be detected.)

    Args:
        config: the model's config.
        state: the weights.
    """
    root = Params(state, config)  # read by BERT's names, whatever the family calls them

    def size(key: str, axis: int) -> int | None:
        t = state.get(root.key(key))
        return t.shape[axis] if t is not None and t.dim() > axis else None

    layers = [k for k in state if re.fullmatch(r"bert\.encoder\.layer\.\d+\.attention\.self\.query\.weight", k)]
    found = {
        "vocab_size": size("bert.embeddings.word_embeddings.weight", 0),
        "max_position_embeddings": size("bert.embeddings.position_embeddings.weight", 0),
        "type_vocab_size": size("bert.embeddings.token_type_embeddings.weight", 0),
        "hidden_size": size("bert.encoder.layer.0.attention.self.query.weight", 1),
        "intermediate_size": size("bert.encoder.layer.0.intermediate.dense.weight", 0),
        "num_hidden_layers": len(layers) or None,  # BERT's keys only (a member's layers may share keys)
        "num_labels": labels_found(config, state),
    }
    out = [f"{name}={getattr(config, name)} but the weights have {n}"
           for name, n in found.items() if n is not None and n != getattr(config, name)]
    relative = any(k.endswith("self.distance_embedding.weight") for k in state)
    if relative != config.relative_positions:
        out.append(f"position_embedding_type={config.position_embedding_type!r} but the weights "
                   f"{'have' if relative else 'lack'} relative-position distance_embedding tables")
    return out


def unused_keys(state: dict[str, torch.Tensor], config: BertConfig) -> list[str]:
    """Keys that no part of the model reads: heads other than the one the checkpoint carries, leftovers (not the
    :func:`extra_heads`, which :func:`bertfn.classify` reads).

    A key under the base model's prefix (``bert.``, ``roberta.``) that the config does not expect is not unused
    but unexpected (e.g. a layer too many): :func:`check_state` refuses it.

    Args:
        state: the weights.
        config: the model's config.
    """
    read = set(checkpoint_shapes(config, state))
    prefix = names_of(config).prefix
    return sorted(k for k in state if k not in read and not k.startswith(prefix))


def group_keys(keys: list[str]) -> list[str]:
    """Keys grouped by their parent name, for messages: ``["cls.chain.*", "cls.species.*"]``.

    Args:
        keys: the keys.
    """
    return sorted({k.rsplit(".", 1)[0] + ".*" if "." in k else k for k in keys})


def check_state(state: dict[str, torch.Tensor], config: BertConfig, strict: bool = True,
                weights_file: str | None = None, config_file: str | None = None) -> None:
    """Raise :class:`CheckpointError` naming every missing, unexpected and mis-shaped key.

    When config values contradict the weights (:func:`config_contradictions`) the message leads with them.

    Args:
        state: the weights, normalised.
        config: the model's config.
        strict: refuse the :func:`unused_keys` (outside every BERT part) too; with False they are let
            through. Unexpected keys are those the config does not imply.
        weights_file: names the weights file in the message.
        config_file: names the config file in the message.

    Raises:
        CheckpointError: missing, unexpected or mis-shaped keys.
    """
    weights = f"the weights in {weights_file}" if weights_file else "the weights"
    config_name = config_file or "the config"
    if config.stored_layers > len(state):  # each layer its own keys: before a table of them fills the memory (10**9)
        raise CheckpointError(f"{config_name} contradicts {weights}: it gives the model {config.stored_layers} layers of "
                              f"weights, and the file holds {len(state)} tensors in all, fewer than one a layer; use the "
                              "config.json that came with these weights, or correct num_hidden_layers in it")
    present = set(state)
    shapes = checkpoint_shapes(config, state)
    odd = [f"{k} ({str(state[k].dtype).removeprefix('torch.')})" for k in sorted(present & set(shapes))
           if state[k].dtype not in COMPUTED_DTYPES]
    if odd:
        raise CheckpointError(f"{weights} hold {len(odd)} weight(s) in a type bertfn does not compute in: "
                              f"{', '.join(odd[:4])}{' ...' if len(odd) > 4 else ''}; its functions compute in "
                              f"{', '.join(str(d).removeprefix('torch.') for d in COMPUTED_DTYPES)}, as transformers' "
                              "models do: re-download the file, or convert it (a quantized checkpoint: dequantize it)")
    unused = set(unused_keys(state, config))
    missing = sorted(set(shapes) - present)
    unexpected = sorted(present - set(shapes) - (set() if strict else unused))
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
        if not missing and not wrong and set(unexpected) <= unused:  # strict=True refused other heads
            raise CheckpointError(f"{weights} have {parts[0]}, which no BERT part reads ({', '.join(group_keys(unexpected))}) "
                                  "and strict=True refuses; load with strict=False (the default) to keep them in "
                                  "model.state, unused")
        contradictions = config_contradictions(config, state)
        if contradictions:
            raise CheckpointError(
                f"{config_name} contradicts {weights}: {'; '.join(contradictions)} ({' | '.join(parts)}); "
                f"use the config.json that came with these weights, or correct those values in it"
            )
        raise CheckpointError(
            f"{weights} do not fit {config_name} ({' | '.join(parts)}); check that {config_name} belongs to "
            "these weights"
        )
