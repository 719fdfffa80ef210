"""The last hidden state as a sum of parts: one per head, per layer's biases and feed-forward write, the embeddings.

What direct attribution (:mod:`bertfn.interventions.logit_attribution`, :mod:`bertfn.interventions.class_attribution`)
starts from. BERT is post-LN: every sublayer's write passes through a LayerNorm before the next one reads it. Each
LayerNorm is affine once its 1/sigma (this run's, of this token) is fixed
(:func:`~bertfn.interventions.linearized.frozen_norm`), so the residual stream, a sum of writes, goes through it part by part.
Everything after the attention's mixing of positions is position-wise, so a position's parts need only that
position's recorded tensors. Layer i, with x_i its input at the position (``x_0`` = the embeddings' last point,
``embeddings.output`` or ELECTRA's and ALBERT's ``embeddings.projected``)::

    a_i     = LN1_i(x_i + sum_h head_{i,h} + b_O,i)     head_{i,h} = layer.{i}.attention.head_outputs[:, h]
    x_{i+1} = LN2_i(a_i + f_i)                           f_i = layer.{i}.ffn.dense (its bias included)

Unrolled through the frozen LayerNorms, the last hidden state at the position is a sum of the embeddings, every head
of every layer, every ``b_O``, every FFN write and the biases (the LayerNorms' betas): :func:`stream_parts`.

ESM-2 and ModernBERT are pre-LN (:mod:`bertfn.model.members.prenorm`): each block reads a normalized copy of the
residual stream and writes into the stream itself, and one LayerNorm follows the last layer::

    x_{i+1} = x_i + sum_h head_{i,h} + b_O,i + f_i,     h_final = LN_f(x_L)

so the parts pass through one frozen LayerNorm, LN_f's (a bias the checkpoint lacks counts as 0).

The sums are taken in float64 from the recorded fp32 pass, so they equal the model's states to the pass's own
rounding. The parts are *direct* effects: a head's part is what its write adds through the residual stream alone,
not what it changes in the layers above (for that, patch it: :mod:`bertfn.interventions.paths`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InputError
from ..inspect.trace import Recording, one_recording
from ..model.family import family_of
from ..model.params import Params
from ..model.point_names import layer_input
from .linearized import frozen_norm

Tensor = torch.Tensor


@dataclass(frozen=True)
class Contributions:
    """One vector (of D numbers) split into the parts of :func:`stream_parts` that sum to it.

    D is H for the last hidden state, T (the tokens or labels asked for) for logits. A pruned head's part is 0.

    Attributes:
        heads: (L, nh, D), head h of layer i's write, through the frozen LayerNorms above it.
        attention_bias: (L, D), each layer's attention output bias ``b_O``.
        ffn: (L, D), each layer's feed-forward write ``ffn.dense`` (its bias included).
        embeddings: (D,), layer 0's input.
        bias: (D,), the LayerNorms' betas (and a head's biases and its activations' remainders).
    """

    heads: Tensor
    attention_bias: Tensor
    ffn: Tensor
    embeddings: Tensor
    bias: Tensor

    @property
    def layers(self) -> Tensor:
        """(L, D): each layer's parts summed, ``heads.sum(1) + attention_bias + ffn``."""
        return self.heads.sum(dim=1) + self.attention_bias + self.ffn

    @property
    def total(self) -> Tensor:
        """(D,): the sum of every part, the vector decomposed."""
        return self.layers.sum(dim=0) + self.embeddings + self.bias


def weight(p: Params, name: str) -> Tensor:
    """The weight ``name`` of scope ``p`` as a float64 tensor on the CPU, where the sums are taken."""
    return p[name].detach().to("cpu", torch.float64)


def bias_or_zeros(p: Params, name: str, n: int) -> Tensor:
    """The bias ``name`` of scope ``p`` as :func:`weight` gives it, or (n,) zeros where the checkpoint has none
    (ModernBERT's, when its config turns them off)."""
    return weight(p, name) if name in p else torch.zeros(n, dtype=torch.float64)


def pre_ln(config) -> bool:
    """Whether the model's layers are pre-LN, with one LayerNorm after the last (ESM-2, ModernBERT).

    Args:
        config: the model's config.
    """
    return family_of(config).final_norm is not None


def final_point(config) -> str:
    """The point whose tensor the heads read: ``final_norm`` in a pre-LN model, else the last layer's output.

    Args:
        config: the model's config.
    """
    return "final_norm" if pre_ln(config) else f"layer.{config.num_hidden_layers - 1}.output"


def _ffn_dense(rec: Recording, i: int, positions: list[int]) -> Tensor:
    """Layer i's ``ffn.dense`` at ``positions`` (P, H), from its slices where the FFN ran in chunks."""
    c = rec.config.chunk_size_feed_forward
    if 0 < c < rec.input_ids.shape[1]:
        return torch.stack([rec[f"layer.{i}.ffn.chunk.{p // c}.dense"][0, p % c] for p in positions])
    return rec[f"layer.{i}.ffn.dense"][0, positions]


def stream_parts(rec: Recording, params: Params, positions: list[int]) -> Tensor:
    """The last hidden state at ``positions`` as parts (K, P, H), float64 on the CPU; the rows as :func:`split` reads
    them (embeddings, heads, ``b_O``, FFN writes, and last the bias part).

    Post-LN (BERT): each layer's two LayerNorms frozen in turn, at each position; pre-LN: the one after the last layer.

    Args:
        rec: a recording with the heads' writes (``bertfn.trace(text, model, head_outputs=True)``).
        params: the model's root params.
        positions: the P positions.
    """
    cfg = rec.config
    L, nh = cfg.num_hidden_layers, cfg.num_attention_heads
    eps = cfg.layer_norm_eps

    def at(name: str) -> Tensor:  # (P, H): the recorded point at the positions
        return rec[name][0, positions].detach().to("cpu", torch.float64)

    x = at(layer_input(cfg))
    H, post_ln = x.shape[-1], not pre_ln(cfg)
    parts = torch.zeros(2 + L * (nh + 2), len(positions), H, dtype=torch.float64)  # embeddings, heads, b_O, ffn, bias
    parts[0] = x
    for i in range(L):
        p = params.layer(i)
        kept = [h for h in range(nh) if h not in cfg.pruned_heads.get(i, ())]  # the heads the weights hold
        heads = rec[f"layer.{i}.attention.head_outputs"][0][:, positions].detach().to("cpu", torch.float64)
        parts[1 + i * nh + torch.tensor(kept, dtype=torch.long)] = heads  # (nh_i, P, H)
        parts[1 + L * nh + i] = bias_or_zeros(p, "attention.output.dense.bias", H)
        if post_ln:  # a = LN1(x + attention)
            parts = frozen_norm(parts, at(f"layer.{i}.attention.dense") + x,
                                weight(p, "attention.output.LayerNorm.weight"), eps)
            parts[-1] += weight(p, "attention.output.LayerNorm.bias")
        f = _ffn_dense(rec, i, positions).detach().to("cpu", torch.float64)  # (P, H)
        parts[1 + L * nh + L + i] = f
        if post_ln:  # x_{i+1} = LN2(a + f)
            parts = frozen_norm(parts, at(f"layer.{i}.attention.output") + f, weight(p, "output.LayerNorm.weight"), eps)
            parts[-1] += weight(p, "output.LayerNorm.bias")
        x = at(f"layer.{i}.output")
    if not post_ln:  # h = LN_f(x_L): every write reached the residual stream unscaled
        p = params.scope("bert.encoder.final_norm")
        parts = frozen_norm(parts, x, weight(p, "weight"), eps)
        parts[-1] += bias_or_zeros(p, "bias", H)
    return parts


def split(parts: Tensor, L: int, nh: int) -> dict[str, Tensor]:
    """The rows of :func:`stream_parts` (K, D), or of what a head made of them, as :class:`Contributions`' fields."""
    return dict(heads=parts[1:1 + L * nh].view(L, nh, -1), attention_bias=parts[1 + L * nh:1 + L * nh + L],
                ffn=parts[1 + L * nh + L:1 + L * nh + 2 * L], embeddings=parts[0], bias=parts[-1])


def check_position(rec: Recording, position: int) -> None:
    """Raise unless ``rec`` holds the heads' writes and ``position`` is one of its tokens.

    Args:
        rec: a recording.
        position: a token's position.

    Raises:
        InputError: something else than one text's recording (a batch's, a text), no ``head_outputs`` in it, or a
            position out of range.
    """
    one_recording(rec, "the parts are read from one text's recording, bertfn.trace(text, model, head_outputs=True)")
    if rec.model is None or "layer.0.attention.head_outputs" not in rec:
        raise InputError("the recording holds no layer.{i}.attention.head_outputs (each head's write); record it "
                         "with bertfn.trace(text, model, head_outputs=True)")
    S = rec.input_ids.shape[1]
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < S:
        raise InputError(f"position must be an integer from 0 to {S - 1} (the text has {S} tokens), got {position!r}")


def hidden_contributions(rec: Recording, position: int) -> Contributions:
    """The last hidden state at ``position`` as the sum of its parts (module docstring), float64 on the CPU.

    ``total`` equals ``rec[f"layer.{L-1}.output"][0, position]`` (in a pre-LN model ``rec["final_norm"][0,
    position]``: what the heads read) to the pass's rounding.

    Args:
        rec: a recording with the heads' writes (``bertfn.trace(text, model, head_outputs=True)``) of the model ``rec.model``.
        position: the token's position.

    Returns:
        :class:`Contributions` of D = H.

    Raises:
        InputError: no heads' writes in the recording, or a position out of range.
    """
    check_position(rec, position)
    cfg = rec.config
    parts = stream_parts(rec, rec.model.params, [position])[:, 0]  # (K, H)
    return Contributions(**split(parts, cfg.num_hidden_layers, cfg.num_attention_heads))
