"""Direct logit attribution: the MLM logits at a [MASK] as a sum of one term per head, per layer and per bias.

BERT is post-LN: every sublayer's write passes through a LayerNorm before the next one reads it, and the
MLM head is dense -> activation -> LayerNorm -> decoder. The logits are a sum of parts only once those
nonlinearities are *frozen* at this run's values, at the mask's position (everything after the
attention's mixing of positions is position-wise, so only that position matters):

* a LayerNorm is affine once its 1/sigma (this run's, of this token) is fixed:
  ``LN(v) = gamma * (v - mean(v)) / sigma + beta``, so a residual ``v = sum_c v_c`` gives
  ``LN(v) = sum_c gamma * (v_c - mean(v_c)) / sigma + beta``, each part separately; beta goes to the bias part;
* the head's activation is written ``act(z) = g * z + r`` with the gate ``g = (act(z) - act(0)) / z`` of this
  run's pre-activation z (``act'(0)`` where ``|z| < 1e-6``: 0.5 for erf-GELU) and ``r = act(z) - g * z``
  (``act(0)``, 0 for GELU, plus the rounding of tiny z), which goes to the bias part.

Layer i, with x_i its input at the mask (``x_0`` = the embeddings' last point, ``embeddings.output`` or
ELECTRA's and ALBERT's ``embeddings.projected``)::

    a_i     = LN1_i(x_i + sum_h head_{i,h} + b_O,i)     head_{i,h} = layer.{i}.attention.head_outputs[:, h]
    x_{i+1} = LN2_i(a_i + f_i)                           f_i = layer.{i}.ffn.dense (its bias included)
    logits  = W_dec LN_T(act(W_T x_L + b_T)) + b_dec     (mlm_head, at width E for ELECTRA and ALBERT)

Unrolled through the frozen LayerNorms, the final hidden state at the mask is a sum of the embeddings,
every head of every layer, every ``b_O``, every FFN write and the biases (:func:`hidden_contributions`);
pushed through the frozen head, so are the logits (:func:`logit_attribution`).

ESM-2 and ModernBERT are pre-LN (:mod:`bertfn.model.prenorm`): each block reads a normalized copy of the
residual stream and writes into the stream itself, and one LayerNorm follows the last layer::

    x_{i+1} = x_i + sum_h head_{i,h} + b_O,i + f_i,     h_final = LN_f(x_L)

so the parts pass through one frozen LayerNorm, LN_f's (a bias the checkpoint lacks counts as 0).

The sums are taken in float64 from the recorded fp32 pass, so the total equals the model's logits to the
pass's own rounding.
The parts are *direct* effects: a head's part is what its write adds through the residual stream alone,
not what it changes in the layers above (for that, patch it: :mod:`bertfn.interventions.paths`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint.model import Model
from ..checkpoint.resolve import get_model, require_mlm_head, require_tokenizer
from ..errors import InputError
from ..inspect.trace import Recording, trace
from ..model.family import family_of
from ..model.functional import ACTIVATIONS
from ..model.heads import head_act
from ..model.params import Params
from ..model.recorder import layer_input

Tensor = torch.Tensor

SMALL = 1e-6
"""Below this |z| the activation's gate is its slope at 0 (the quotient loses its digits there)."""


@dataclass(frozen=True)
class Contributions:
    """One vector (of D numbers) split into the parts of :func:`hidden_contributions` that sum to it.

    D is H for the final hidden state, T (the tokens asked for) for logits. A pruned head's part is 0.

    Attributes:
        heads: (L, nh, D), head h of layer i's write, through the frozen LayerNorms above it.
        attention_bias: (L, D), each layer's attention output bias ``b_O``.
        ffn: (L, D), each layer's feed-forward write ``ffn.dense`` (its bias included).
        embeddings: (D,), layer 0's input.
        bias: (D,), the LayerNorms' betas (and the MLM head's biases and the activation's remainder).
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


@dataclass(frozen=True)
class LogitAttribution(Contributions):
    """What :func:`logit_attribution` returns: the logits of some tokens at a mask, split into parts.

    The parts are those of :class:`Contributions`, each a (..., T) row of logits; ``total`` equals ``logits``.

    Attributes:
        logits: (T,), the model's MLM logits of those tokens at that mask (``mlm.logits``).
        tokens: the T token ids.
        position: the mask's position in the text's tokens.
    """

    logits: Tensor
    tokens: list[int]
    position: int

    def __repr__(self) -> str:
        """The tokens, their logits and the parts' shapes, not the tensors."""
        L, nh, _ = self.heads.shape
        logits = ", ".join(f"{v:.3f}" for v in self.logits.tolist())
        return (f"LogitAttribution(token ids {self.tokens} at position {self.position}: logits [{logits}] = embeddings "
                f"+ {L}x{nh} heads + {L} attention biases + {L} FFN writes + bias)")


def frozen_norm(parts: Tensor, whole: Tensor, gamma: Tensor, eps: float) -> Tensor:
    """Each part through a LayerNorm whose 1/sigma is that of ``whole``: ``gamma * (v_c - mean(v_c)) / sigma``.

    Summed over the parts, plus beta, it is ``torch.nn.LayerNorm(whole)`` when the parts sum to ``whole``.

    Args:
        parts: (K, D), the parts of the LayerNorm's input.
        whole: (D,), the input as the run computed it (its sigma is frozen).
        gamma: (D,), ``LayerNorm.weight``.
        eps: the LayerNorm's eps.

    Returns:
        (K, D), without beta.
    """
    sigma = (whole.var(unbiased=False) + eps).sqrt()
    return gamma * (parts - parts.mean(dim=-1, keepdim=True)) / sigma


def gate(name: str, z: Tensor) -> tuple[Tensor, Tensor]:
    """The activation ``name`` at ``z`` written ``act(z) = g * z + r``, g frozen at this run.

    ``g = (act(z) - act(0)) / z``, and ``act'(0)`` (from autograd) where ``|z| <`` :data:`SMALL`;
    ``r = act(z) - g * z``.

    Args:
        name: a key of :data:`~bertfn.model.functional.ACTIVATIONS`.
        z: (D,) the pre-activation, float64.

    Returns:
        g: (D,) the gate.
        r: (D,) the remainder.
    """
    act = ACTIVATIONS[name]
    zero = torch.zeros((), dtype=z.dtype, requires_grad=True)
    with torch.enable_grad():
        at_zero = act(zero)
        (slope,) = torch.autograd.grad(at_zero, zero)
    y = act(z)
    small = z.abs() < SMALL
    g = torch.where(small, slope, (y - at_zero.detach()) / torch.where(small, torch.ones_like(z), z))
    return g, y - g * z


def _w(p: Params, name: str) -> Tensor:
    """The weight ``name`` of scope ``p`` as a float64 tensor on the CPU, where the sums are taken."""
    return p[name].detach().to("cpu", torch.float64)


def _bias(p: Params, name: str, n: int) -> Tensor:
    """The bias ``name`` of scope ``p`` as :func:`_w` gives it, or (n,) zeros where the checkpoint has none
    (ModernBERT's, when its config turns them off)."""
    return _w(p, name) if name in p else torch.zeros(n, dtype=torch.float64)


def pre_ln(config) -> bool:
    """Whether the model's layers are pre-LN, with one LayerNorm after the last (ESM-2, ModernBERT).

    Args:
        config: the model's config.
    """
    return family_of(config).final_norm is not None


def final_point(config) -> str:
    """The point whose tensor the MLM head reads: ``final_norm`` in a pre-LN model, else the last layer's output.

    Args:
        config: the model's config.
    """
    return "final_norm" if pre_ln(config) else f"layer.{config.num_hidden_layers - 1}.output"


def _ffn_dense(rec: Recording, i: int, position: int) -> Tensor:
    """Layer i's ``ffn.dense`` at ``position`` (H,), from its slice where the FFN ran in chunks."""
    c = rec.config.chunk_size_feed_forward
    if 0 < c < rec.input_ids.shape[1]:
        return rec[f"layer.{i}.ffn.chunk.{position // c}.dense"][0, position % c]
    return rec[f"layer.{i}.ffn.dense"][0, position]


def _parts(rec: Recording, params: Params, position: int) -> Tensor:
    """The final hidden state at ``position`` as parts (K, H), float64: rows as :func:`_split` reads them.

    Post-LN (BERT): each layer's two LayerNorms frozen in turn; pre-LN: the one after the last layer.
    """
    cfg = rec.config
    L, nh = cfg.num_hidden_layers, cfg.num_attention_heads
    eps = cfg.layer_norm_eps

    def at(name: str) -> Tensor:  # (H,): the recorded point at the position
        return rec[name][0, position].detach().to("cpu", torch.float64)

    x = at(layer_input(cfg))
    H, post_ln = x.shape[0], not pre_ln(cfg)
    parts = torch.zeros(2 + L * (nh + 2), H, dtype=torch.float64)  # embeddings, heads, b_O, ffn, bias
    parts[0] = x
    for i in range(L):
        p = params.layer(i)
        kept = [h for h in range(nh) if h not in cfg.pruned_heads.get(i, ())]  # the heads the weights hold
        heads = rec[f"layer.{i}.attention.head_outputs"][0, :, position].detach().to("cpu", torch.float64)
        parts[1 + i * nh + torch.tensor(kept, dtype=torch.long)] = heads  # (nh_i, H)
        parts[1 + L * nh + i] = _bias(p, "attention.output.dense.bias", H)
        if post_ln:  # a = LN1(x + attention)
            parts = frozen_norm(parts, at(f"layer.{i}.attention.dense") + x, _w(p, "attention.output.LayerNorm.weight"), eps)
            parts[-1] += _w(p, "attention.output.LayerNorm.bias")
        f = _ffn_dense(rec, i, position).detach().to("cpu", torch.float64)
        parts[1 + L * nh + L + i] = f
        if post_ln:  # x_{i+1} = LN2(a + f)
            parts = frozen_norm(parts, at(f"layer.{i}.attention.output") + f, _w(p, "output.LayerNorm.weight"), eps)
            parts[-1] += _w(p, "output.LayerNorm.bias")
        x = at(f"layer.{i}.output")
    if not post_ln:  # h = LN_f(x_L): every write reached the residual stream unscaled
        p = params.scope("bert.encoder.final_norm")
        parts = frozen_norm(parts, x, _w(p, "weight"), eps)
        parts[-1] += _bias(p, "bias", H)
    return parts


def _split(parts: Tensor, L: int, nh: int) -> dict[str, Tensor]:
    """The rows of :func:`_parts` (K, D) as :class:`Contributions`' fields."""
    return dict(heads=parts[1:1 + L * nh].view(L, nh, -1), attention_bias=parts[1 + L * nh:1 + L * nh + L],
                ffn=parts[1 + L * nh + L:1 + L * nh + 2 * L], embeddings=parts[0], bias=parts[-1])


def check_position(rec: Recording, position: int) -> None:
    """Raise unless ``rec`` holds the heads' writes and ``position`` is one of its tokens.

    Args:
        rec: a recording.
        position: a token's position.

    Raises:
        InputError: no ``head_outputs`` in the recording, or a position out of range.
    """
    if rec.model is None or "layer.0.attention.head_outputs" not in rec:
        raise InputError("the recording holds no layer.{i}.attention.head_outputs (each head's write); record it "
                         "with bertfn.trace(text, model, head_outputs=True)")
    S = rec.input_ids.shape[1]
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < S:
        raise InputError(f"position must be an integer from 0 to {S - 1} (the text has {S} tokens), got {position!r}")


def hidden_contributions(rec: Recording, position: int) -> Contributions:
    """The final hidden state at ``position`` as the sum of its parts (module docstring), float64 on the CPU.

    ``total`` equals ``rec[f"layer.{L-1}.output"][0, position]`` (in a pre-LN model ``rec["final_norm"][0,
    position]``: what the MLM head reads) to the pass's rounding.

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
    return Contributions(**_split(_parts(rec, rec.model.params, position), cfg.num_hidden_layers, cfg.num_attention_heads))


def token_ids(m: Model, tokens: int | str | Sequence[int | str]) -> list[int]:
    """``tokens`` (ids or vocabulary strings, one or a list) as a list of ids.

    Args:
        m: the model (its tokenizer and vocabulary size).
        tokens: an id, a token string (``"T"``, ``"paris"``), or a list of them.

    Raises:
        InputError: an id out of the vocabulary, a string the vocabulary lacks, or something else.
    """
    many = [tokens] if isinstance(tokens, (int, str)) else tokens
    if not isinstance(many, Sequence) or not many:
        raise InputError(f"tokens must be a token id, a token string or a non-empty list of them, got {tokens!r:.60}")
    V = m.config.vocab_size
    ids = []
    for t in many:
        i = m.tokenizer.token_to_id(t) if isinstance(t, str) else t
        if isinstance(t, str) and i is None:
            raise InputError(f"the vocabulary has no token {t!r}; pass one of its word pieces (model.tokenizer."
                             "token_to_id(...) finds them) or a token id")
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < V:
            raise InputError(f"token ids must be integers from 0 to {V - 1}, got {t!r}")
        ids.append(i)
    return ids


def logit_attribution(text: str, model: Model | str | Path, tokens: int | str | Sequence[int | str], *,
                      mask: int = 0) -> LogitAttribution:
    """The MLM logits of ``tokens`` at one [MASK] of ``text``, split into per-head, per-layer and bias parts.

    Direct logit attribution (Elhage et al. 2021) for a post-LN or pre-LN model: the parts of the final hidden state
    (:func:`hidden_contributions`) through the MLM head (``BertLMPredictionHead``, :func:`~bertfn.model.heads.mlm_head`)
    with its dense layer applied to each part, its activation gated and its LayerNorm frozen at this run
    (module docstring); its biases go to ``bias``. ``total`` equals ``logits`` to the pass's rounding.

    Args:
        text: one text with at least one [MASK] (the model's mask token).
        model: a loaded :class:`Model` with its MLM head, a folder or a hub id.
        tokens: the tokens whose logits to split: ids or vocabulary strings, one or a list of T.
        mask: which of the text's masks, from 0.

    Returns:
        :class:`LogitAttribution`, every part (..., T) float64 on the CPU.

    Raises:
        InputError: a text without a mask, a ``mask`` out of range, or tokens the vocabulary lacks.
        MissingPartError: a model without a tokenizer or without the masked-LM head.
    """
    m = get_model(model)
    require_tokenizer(m, "logit_attribution"), require_mlm_head(m, "logit_attribution")
    ids = token_ids(m, tokens)
    rec = trace(text, m, head_outputs=True)
    n = len(rec.mask_positions)
    if not n:
        raise InputError(f"the text has no {m.tokenizer.mask_token}; logit_attribution splits the logits at a mask, "
                         f"so write one where the token to predict goes")
    if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask < n:
        raise InputError(f"mask must be an integer from 0 to {n - 1} (the text has {n} masks), got {mask!r}")
    position = rec.mask_positions[mask]
    cfg = m.config
    parts = _parts(rec, m.params, position)  # (K, H)
    h = rec[final_point(cfg)][0, position].detach().to("cpu", torch.float64)  # (H,)
    p = m.params.scope("cls.predictions")
    w_t = _w(p, "transform.dense.weight")
    b_t = _bias(p, "transform.dense.bias", w_t.shape[0])
    z = parts @ w_t.T  # (K, E): the dense layer, each part alone
    z[-1] += b_t
    pre = h @ w_t.T + b_t  # (E,): the activation's input in this run
    g, r = gate(head_act(cfg), pre)
    z = z * g
    z[-1] += r
    z = frozen_norm(z, g * pre + r, _w(p, "transform.LayerNorm.weight"), cfg.layer_norm_eps)
    z[-1] += _bias(p, "transform.LayerNorm.bias", w_t.shape[0])
    rows = torch.tensor(ids)
    logits = z @ _w(p, "decoder.weight")[rows].T  # (K, T)
    logits[-1] += _bias(p, "bias", cfg.vocab_size)[rows]
    actual = rec["mlm.logits"][mask, rows.to(rec["mlm.logits"].device)].detach().to("cpu", torch.float64)
    return LogitAttribution(**_split(logits, cfg.num_hidden_layers, cfg.num_attention_heads), logits=actual,
                            tokens=ids, position=position)
