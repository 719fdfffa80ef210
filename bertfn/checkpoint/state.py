"""Checking and laying out a checkpoint's flat state: HF key names, expected shapes, the matmul layout.

What :func:`~bertfn.checkpoint.loading.load` does to the tensors once they are read:
:func:`~bertfn.model.params.normalize_keys` renames them to ``BertForPreTraining``'s names, :func:`check_state` compares them with the shapes
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

LINEAR_WEIGHT = re.compile(r"\.(query|key|value|dense|classifier|qa_outputs|seq_relationship)\.weight$|^(classifier|qa_outputs)\.weight$")
"""Keys of the weights that :func:`~bertfn.model.functional.linear` multiplies by (attention, feed-forward, pooler, heads)."""


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


def as_stored(state: dict[str, torch.Tensor]) -> bool:
    """A ``prepare`` for :func:`~bertfn.checkpoint.loading.load` that keeps every weight as the file stores it,
    (out, in): for a trace of a long text, where the (in, out) layout gains less than it costs. On an AMD EPYC,
    at 512 tokens on bert-base's shape, the layout makes the trace's products 0.04 s faster and costs
    0.27 s of copies (``bertfn view``, ``bertfn attention``). With it, ``load`` maps a safetensors file
    instead of reading it (nothing copies the weights). Returns True: the weights are as wanted."""
    return True


def in_out(w: torch.Tensor) -> torch.Tensor:
    """``w`` (out, in) as a view of an (in, out) contiguous copy: the same weight, laid out for ``F.linear``."""
    return w.t().contiguous().t()


def is_in_out(w: torch.Tensor) -> bool:
    """Whether ``w`` is laid out as :func:`in_out` makes it (a 2-D weight transposed in memory)."""
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


BERT_PARTS = ("bert.", "cls.predictions.", "cls.seq_relationship.", "classifier.", "qa_outputs.")
"""Key prefixes of the parts bertfn's functions read: the encoder and the heads of heads.py."""


def unused_keys(state: dict[str, torch.Tensor]) -> list[str]:
    """Keys outside every BERT part (:data:`BERT_PARTS`): other heads (AntiBERTy's ``cls.species.*``),
    training leftovers. A key inside a part that the config does not expect is not unused but
    unexpected (e.g. a layer too many): :func:`check_state` refuses it."""
    return sorted(k for k in state if not k.startswith(BERT_PARTS))


def group_keys(keys: list[str]) -> list[str]:
    """Keys grouped by their parent name, for messages: ``["cls.chain.*", "cls.species.*"]``."""
    return sorted({k.rsplit(".", 1)[0] + ".*" if "." in k else k for k in keys})


def check_state(state: dict[str, torch.Tensor], config: BertConfig, strict: bool = True,
                weights_file: str | None = None, config_file: str | None = None) -> None:
    """Raise :class:`CheckpointError` naming every missing, unexpected and mis-shaped key.

    Unexpected keys are those the config does not imply; with ``strict=False`` the :func:`unused_keys`
    (outside every BERT part) are let through. When config values contradict the weights
    (:func:`config_contradictions`) the message leads with them. ``weights_file`` / ``config_file``
    name the files in the message.
    """
    present = set(state)
    shapes = expected_shapes(config, state)
    missing = sorted(set(shapes) - present)
    unexpected = sorted(present - set(shapes) - (set() if strict else set(unused_keys(state))))
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
        if not missing and not wrong and set(unexpected) <= set(unused_keys(state)):  # strict=True refused other heads
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
