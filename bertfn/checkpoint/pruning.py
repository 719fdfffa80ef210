"""Removing attention heads from the weights (``PreTrainedModel.prune_heads`` / ``BertAttention.prune_heads``).

Head h of a self-attention block owns a slice of hd = H / nh consecutive rows of the query, key and
value weights and biases, and the same hd columns of the output dense weight:

    self.query|key|value.weight  (nh*hd, H)  ->  rows    h*hd .. (h+1)*hd - 1  belong to head h
    output.dense.weight          (H, nh*hd)  ->  columns h*hd .. (h+1)*hd - 1  belong to head h

Deleting those slices removes the head for good; the layer then computes exactly what the full
layer computes with that head's probabilities multiplied by 0 (a head mask). Only self-attention is
pruned (cross-attention keeps its heads), as in transformers. Head numbers always mean the
*original* heads 0 .. nh-1, and ``config.pruned_heads`` records which ones are gone, so pruning twice
or loading a pruned checkpoint (transformers' ``save_pretrained`` writes ``pruned_heads`` to
config.json) works the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

import torch

from ..errors import CheckpointError, InputError
from ..model.family import family_of
from ..model.params import Params
from .model import Model
from .state import in_out, is_in_out

Tensor = torch.Tensor


def kept_rows(present: list[int], drop: set[int], hd: int) -> Tensor:
    """Indices of the weight rows (or columns) that stay when the heads in ``drop`` go.

    Mirrors ``find_pruneable_heads_and_indices``.

    Args:
        present: the original numbers of the heads the weights still hold, in weight order.
        drop: the original numbers of the heads to remove.
        hd: the width of one head.

    Returns:
        (len(kept heads) * hd,) long.
    """
    keep = [slot for slot, head in enumerate(present) if head not in drop]  # positions in the weights
    return torch.cat([torch.arange(slot * hd, (slot + 1) * hd) for slot in keep])


def kept(t: Tensor, dim: int, rows: Tensor) -> Tensor:
    """``t.index_select(dim, rows)``, laid out in memory as ``t`` is.

    A weight that ``bertfn.load`` stored (in, out) (:func:`bertfn.checkpoint.state.matmul_layout`) stays
    so, and keeps its faster products.

    Args:
        t: a weight or bias.
        dim: the dimension to select along.
        rows: the indices to keep (:func:`kept_rows`).
    """
    out = t.index_select(dim, rows.to(t.device))  # the rows are made on the CPU; index_select wants them beside t
    return in_out(out) if is_in_out(t) else out


def prune_heads(params_or_model: Params | Model, heads_to_prune: Mapping[int, Iterable[int]]) -> Params | Model:
    """A copy of the model without the given self-attention heads (``BertModel.prune_heads``).

    For each pruned layer i the new ``bert.encoder.layer.{i}.attention.self.{query,key,value}.{weight,bias}``
    lose rows and ``...attention.output.dense.weight`` loses columns; attention reads the smaller head count
    from them.

    Args:
        params_or_model: a loaded :class:`Model` or its root :class:`Params` (``model.params``).
        heads_to_prune: ``{layer: [head, ...]}`` in original head numbers; heads already pruned are skipped.

    Returns:
        The same kind of object with a new state dict (tensors not touched are shared, so tied
            weights stay tied) and ``config.pruned_heads`` extended.

    Raises:
        InputError: something else than a model or its root params, layers or heads out of range, a
            layer left with no heads, a layer whose weights other layers share (ALBERT), or a member whose heads
            bertfn does not cut (ModernBERT's fused projection, MPNet's shared position bias, DeBERTa-v2).
        CheckpointError: weights with another number of heads than the config says.
    """
    if isinstance(params_or_model, Model):
        state, cfg = params_or_model.state, params_or_model.config
    elif isinstance(params_or_model, Params) and params_or_model.prefix == "":
        state, cfg = params_or_model.state, params_or_model.config
    else:
        raise InputError(f"prune_heads takes a bertfn Model or its root params (model.params), "
                         f"got {params_or_model!r}")

    nh, hd, L = cfg.num_attention_heads, cfg.head_dim, cfg.num_hidden_layers
    root = Params(state, cfg)  # asked by BERT's names; a family member's keys are its own
    new_state = dict(state)
    pruned = dict(cfg.pruned_heads)
    for layer, heads in heads_to_prune.items():
        heads = set(heads)
        if not (isinstance(layer, int) and 0 <= layer < L) or not all(isinstance(h, int) and 0 <= h < nh for h in heads):
            raise InputError(f"heads_to_prune maps a layer in 0..{L - 1} to heads in 0..{nh - 1}; "
                             f"got {layer!r}: {sorted(heads, key=repr)}")
        already = set(pruned.get(layer, ()))
        present = [h for h in range(nh) if h not in already]  # original numbers, in weight order
        drop = heads - already
        if not drop:
            continue
        if len(drop) == len(present):
            raise InputError(f"pruning heads {sorted(drop)} would leave layer {layer} with no attention heads; "
                             f"keep at least one")

        prefix = f"bert.encoder.layer.{layer}.attention."
        query = root.key(prefix + "self.query.weight")
        if any(root.key(f"bert.encoder.layer.{i}.attention.self.query.weight") == query for i in range(L) if i != layer):
            raise InputError(f"layer {layer} shares its weights with other layers ({family_of(cfg).name}), so pruning "
                             "its heads would prune them in every layer; silence them in one layer with "
                             "edits=bertfn.interventions.zero_heads(...) instead")
        if root.key(prefix + "relative_attention_bias.weight") in state:  # MPNet's: one table, a column per head
            raise InputError(f"{family_of(cfg).name}'s layers share one relative position bias with a column per head, "
                             "so pruning a layer's heads would leave it scores for heads it no longer has; silence "
                             "heads with edits=bertfn.interventions.zero_heads(...) instead")
        if cfg.model_type == "deberta-v2":  # its position projections, shared or not, are not cut by head
            raise InputError("transformers' DeBERTa-v2 has no prune_heads (its config's pruned_heads stops "
                             "from_pretrained), so a pruned DeBERTa could not be read back; silence heads with "
                             "edits=bertfn.interventions.zero_heads(...) instead")
        if query not in state:
            raise InputError(f"{family_of(cfg).name} forms its queries, keys and values in one fused product, which "
                             "bertfn does not cut by head; silence heads with edits=bertfn.interventions.zero_heads(...) "
                             "instead")
        if state[query].shape[0] != len(present) * hd:
            raise CheckpointError(
                f"{query} has {state[query].shape[0] // hd} heads but the config says {len(present)} "
                f"(pruned_heads={sorted(already)}); the config does not belong to these weights"
            )
        rows = kept_rows(present, drop, hd).to(state[query].device)
        for name in ("query", "key", "value"):
            for leaf in ("weight", "bias"):
                key = root.key(f"{prefix}self.{name}.{leaf}")
                new_state[key] = kept(state[key], 0, rows)  # (kept*hd, H) or (kept*hd,)
        key = root.key(f"{prefix}output.dense.weight")
        new_state[key] = kept(state[key], 1, rows)  # (H, kept*hd); the bias (H,) is unchanged
        pruned[layer] = tuple(sorted(already | drop))

    new_cfg = replace(cfg, pruned_heads=pruned)
    if isinstance(params_or_model, Model):
        return replace(params_or_model, config=new_cfg, state=new_state)
    return Params(new_state, new_cfg)
