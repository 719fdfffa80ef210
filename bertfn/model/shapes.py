"""The keys and shapes a config implies: BERT's weights table, by ``BertForPreTraining``'s names.

:func:`expected_shapes` is what a checkpoint is checked against at load
(:func:`bertfn.checkpoint.state.check_state`), what a new model is drawn from
(:mod:`bertfn.checkpoint.scratch`), and, translated by a family member's names
(:mod:`bertfn.model.family`), what a RoBERTa, DistilBERT, ELECTRA or ALBERT checkpoint must hold.
"""

from __future__ import annotations

import torch

from .config import BertConfig


def expected_shapes(config: BertConfig, state: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """Every key the model needs, with its shape.

    Args:
        config: the model's config.
        state: the weights at hand: optional parts (pooler, heads) count when it has them.
    """
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
        attention_block(f"{layer}.attention", config.heads_in_layer(i), config.relative_positions)
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
