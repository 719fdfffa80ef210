"""The encoder's masks, checked and made ready before the first layer (``BertModel.forward``'s preparation).

Three masks say what the layers may read:

* the **attention mask** (B, S_k) 0/1 of the real tokens, or a full (B, S, S_k) / (B, 1|nh, S, S_k) one, made the
  additive (B, 1|nh, S, S_k) mask attention adds to its scores (:func:`~bertfn.model.layout.extended_mask`:
  0 where a key is read, the dtype's minimum where not); a decoder's 2D mask gets the causal mask too
  (``get_extended_attention_mask``), and a decoder without one reads every earlier key;
* the **encoder attention mask**, the same for the encoder states a decoder's cross-attention reads
  (``invert_attention_mask``);
* the **head mask** (nh,) or (L, nh), 1 keeping a head and 0 silencing it, widened to (L, nh) (``get_head_mask``).

On the segments layout (texts laid end to end, :class:`~bertfn.model.layout.Segments`) the layout is the mask:
:func:`check_segments` checks the input against it, :func:`segment_positions` counts each text's positions from its
start, and :func:`laid_out` adds the rows the kernels pad their products to.

Each is checked here, with a message that says which shape was expected (:class:`~bertfn.errors.InputError`);
:func:`warn_if_padding_without_mask` warns where padding would be attended to for want of a mask.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import torch

from ..errors import InputError
from .functional import BUILT, built, checkable, product_rows
from .layout import Segments, causal_keep_mask, extended_mask
from .config import BertConfig
from .family import family_of
from .recorder import NO_TRACE, Trace

Tensor = torch.Tensor


def check_mask(name: str, mask: object, B: int, S: int, S_k: int, nh: int) -> None:
    """Raise :class:`InputError` unless ``mask`` is a tensor of one of the shapes attention accepts:
    (B, S_k), (B, S, S_k) or (B, 1 or nh, S, S_k), where S_k counts the keys (cached + new, or encoder). Its values,
    0/1, are checked as it is made additive (:func:`~bertfn.model.layout.extended_mask`).

    Args:
        name: the argument's name, for the message.
        mask: what was passed.
        B: texts in the batch.
        S: query positions.
        S_k: key positions.
        nh: attention heads.
    """
    allowed = [(B, S_k), (B, S, S_k), (B, 1, S, S_k), (B, nh, S, S_k)]
    if not isinstance(mask, Tensor) or tuple(mask.shape) not in allowed:
        got = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
        raise InputError(f"{name} must be a tensor of shape {' or '.join(map(str, allowed))} "
                         f"(1 = attend, 0 = ignore), got {got}; tokenizer(...).attention_mask has the 2D form")


def check_attention(q: Tensor, k: Tensor, v: Tensor, mask: object, head_mask: object = None) -> None:
    """Raise :class:`InputError` unless q, k, v are split into heads, (B, nh, S, hd) each, and ``mask`` is an additive
    mask attention can add to their scores: a floating tensor of 4 dimensions broadcastable to them, 0 where a key is
    read and negative (``finfo.min``) where not. A 0/1 keep-mask (the tokenizer's, or bools) would shift the scores by
    1 instead of hiding keys, silently. The masks bertfn makes (:func:`~bertfn.model.layout.extended_mask`) are read
    as they are, another once (on an accelerator its values are read back once, not at every layer).

    Args:
        q: (B, nh, S_q, hd).
        k: (B, nh, S_k, hd).
        v: (B, nh, S_k, hd).
        mask: what attention was given.
        head_mask: (nh,) or broadcastable to the probabilities (B, nh, S_q, S_k), or None.
    """
    if any(not isinstance(t, Tensor) or t.dim() != 4 for t in (q, k, v)):
        got = ", ".join(str(tuple(t.shape)) if isinstance(t, Tensor) else type(t).__name__ for t in (q, k, v))
        raise InputError(f"attention takes q, k and v split into heads, (B, nh, S, hd) each, got {got}; "
                         f"split_heads(x, nh) splits a (B, S, nh*hd) projection")
    scores = (*q.shape[:3], k.shape[2])
    if head_mask is not None and not (isinstance(head_mask, Tensor) and (head_mask.shape == q.shape[1:2] or (
            head_mask.dim() == 4 and broadcasts(head_mask.shape, scores)))):
        got = tuple(head_mask.shape) if isinstance(head_mask, Tensor) else type(head_mask).__name__
        raise InputError(f"head_mask must be a tensor of shape ({q.shape[1]},) (1 keeps a head, 0 silences it), "
                         f"or broadcastable to the probabilities {scores}; got {got}")
    if mask is None or (not torch.compiler.is_compiling() and mask in BUILT):  # compile: no weak lookup
        return
    make = "bertfn.extended_mask(attention_mask, x.dtype) makes it from the tokenizer's 0/1 mask"
    if not isinstance(mask, Tensor) or not mask.is_floating_point():
        got = f"a {mask.dtype} tensor, a 0/1 keep-mask" if isinstance(mask, Tensor) else type(mask).__name__
        raise InputError(f"attention adds its mask to the scores: it takes an additive float mask (0 = attend, "
                         f"finfo.min = ignore), got {got}; {make}")
    if mask.dim() != 4 or not broadcasts(mask.shape, scores):
        raise InputError(f"attention's additive mask must broadcast to the scores (B, nh, S_q, S_k) = {tuple(scores)}, "
                         f"e.g. (B, 1, 1, S_k), got {tuple(mask.shape)}; {make}")
    values = checkable(mask)
    if values is not None and bool((values > 0).any()):
        raise InputError(f"attention's mask is additive (0 = attend, finfo.min = ignore), but holds values up to "
                         f"{values.max().item():g}: a 0/1 keep-mask would shift the scores instead of hiding keys; "
                         f"{make}")
    built(mask)  # checked: read as it is from now on


def broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    """Whether a tensor of ``shape`` broadcasts to ``to`` without growing it.

    Args:
        shape: the tensor's.
        to: the shape it is applied to.
    """
    return len(shape) <= len(to) and all(a in (1, b) for a, b in zip(reversed(shape), reversed(to)))


def warn_if_padding_without_mask(input_ids: Tensor | None, attention_mask: Tensor | None, pad: int | None) -> None:
    """Warn when ``input_ids`` (B, S) start or end with the pad id but no attention_mask hides the padding:
    it is then attended to and changes every output (``PreTrainedModel.warn_if_padding_and_no_attention_mask``).

    Args:
        input_ids: (B, S), or None.
        attention_mask: what was passed, or None.
        pad: the pad id, or None.
    """
    if attention_mask is None and input_ids is not None and pad is not None and checkable(input_ids) is input_ids \
            and bool((input_ids[:, [0, -1]] == pad).any()):  # read where the ids are as given: not under vmap
        warnings.warn(f"input_ids hold padding (id {pad}) but no attention_mask was given, so the padding is "
                      "attended to and changes the results; pass the tokenizer's attention_mask", stacklevel=3)


def attention_masks(config: BertConfig, x: Tensor, past: int, attention_mask: Tensor | None,
                    encoder_hidden_states: Tensor | None,
                    encoder_attention_mask: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
    """The additive self- and cross-attention masks of one pass (``get_extended_attention_mask``,
    ``invert_attention_mask``).

    Args:
        config: the model's config (``is_decoder`` adds the causal mask to a 2D mask).
        x: (B, S, H), the embeddings (their batch, length, dtype and device).
        past: the cached positions before these (S_k = past + S keys).
        attention_mask: 0/1 (B, S_k), (B, S, S_k) or (B, 1|nh, S, S_k), or None.
        encoder_hidden_states: (B, S_e, H), or None.
        encoder_attention_mask: 0/1 mask of the encoder states, as ``attention_mask``, or None.

    Returns:
        ``(mask, encoder_mask)``: additive, broadcastable to (B, nh, S, S_k) and (B, nh, S, S_e); None where
        nothing is hidden.

    Raises:
        InputError: a mask of a shape attention cannot read (or not 0/1), encoder states of another batch.
    """
    B, S, _ = x.shape
    S_k = past + S  # keys: the cached positions and the new ones
    if attention_mask is None and config.is_decoder:
        attention_mask = torch.ones(B, S_k, device=x.device)
    mask = None  # nothing to hide: the same as an all-zero additive mask
    if attention_mask is not None:
        check_mask("attention_mask", attention_mask, B, S, S_k, config.num_attention_heads)
        if config.is_decoder and attention_mask.dim() == 2:
            attention_mask = causal_keep_mask(attention_mask, S)  # (B, S, past + S)
        mask = extended_mask(attention_mask, x.dtype, name="attention_mask")
    encoder_mask = None
    if encoder_hidden_states is not None and not (isinstance(encoder_hidden_states, Tensor) and
                                                  encoder_hidden_states.dim() == 3 and
                                                  encoder_hidden_states.shape[0] == B):
        got = tuple(encoder_hidden_states.shape) if isinstance(encoder_hidden_states, Tensor) else \
            type(encoder_hidden_states).__name__
        raise InputError(f"encoder_hidden_states are an encoder's last hidden states, one text per text here: "
                         f"({B}, S_e, H), got {got}")
    if encoder_hidden_states is not None and encoder_attention_mask is not None:
        check_mask("encoder_attention_mask", encoder_attention_mask, B, S, encoder_hidden_states.shape[1],
                   config.num_attention_heads)
        encoder_mask = extended_mask(encoder_attention_mask, x.dtype, name="encoder_attention_mask")
    return mask, encoder_mask


def head_masks(config: BertConfig, head_mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """The head mask, checked and widened to every layer (``get_head_mask``).

    Args:
        config: the model's config.
        head_mask: (nh,) for every layer or (L, nh), 1 keeps a head; or None.
        dtype: the hidden states' dtype.

    Returns:
        (L, nh), or None.

    Raises:
        InputError: another shape, or a model whose heads were pruned.
    """
    if head_mask is None:
        return None
    L, nh = config.num_hidden_layers, config.num_attention_heads
    if not isinstance(head_mask, Tensor) or head_mask.shape not in ((nh,), (L, nh)):
        got = tuple(head_mask.shape) if isinstance(head_mask, Tensor) else type(head_mask).__name__
        raise InputError(f"head_mask must be a tensor of shape ({nh},) or ({L}, {nh}) (1 keeps a head, "
                         f"0 silences it), got {got}")
    if config.pruned_heads:
        raise InputError("head_mask needs every layer to have all its heads, but this model was pruned "
                         f"({config.pruned_heads}); mask heads of the unpruned model, or prune more instead")
    return head_mask.to(dtype).expand(L, nh)  # (L, nh)


def check_segments(shape: tuple[int, ...], segments: Segments, *, cache: object, use_cache: bool,
                   encoder_hidden_states: Tensor | None) -> None:
    """Raise :class:`InputError` unless the input is texts laid end to end as ``segments`` says, in a pass that layout
    runs: one row (1, T) of the texts' T tokens, no decoding cache or cross-attention (a trace and edits run there,
    in the padded layout's shapes: :mod:`bertfn.model.recorder`).

    Args:
        shape: the input ids' (1, T) (or the input embeddings' (1, T, H)).
        segments: the layout the caller gave.
        cache: the decoding cache passed, which this layout does not take.
        use_cache: whether the keys and values are asked for, which it does not keep.
        encoder_hidden_states: the cross-attention states passed, which it does not take.
    """
    if len(shape) < 2 or shape[0] != 1 or shape[1] != segments.tokens:
        raise InputError(f"texts laid end to end come as one row (1, T) with T the sum of their lengths "
                         f"({segments.tokens}), got input of shape {tuple(shape[:2])}; lay them out with torch.cat")
    if cache is not None or use_cache or encoder_hidden_states is not None:
        raise InputError("texts laid end to end (Segments) run the encoder without cache or cross-attention (a "
                         "decoder's steps); pass a padded batch (B, S) with its attention_mask for those")


def laid_out(x: Tensor, segments: Segments, weight: Tensor | None, trace: Trace = NO_TRACE) -> tuple[Tensor, Segments]:
    """The embeddings of texts laid end to end with the kernels' padding rows added.

    A kernel that pads a product's rows to one of a few counts (oneDNN: :func:`~bertfn.model.functional.product_rows`)
    would copy every product's input to do so; zero rows added once here spare those copies. They attend to nothing and
    nothing attends to them.

    Args:
        x: (1, T, H), the embeddings (:func:`check_segments` checked).
        segments: the layout the caller gave (its lengths and the rows it reads).
        weight: a weight of the first layer's products, or None (then no rows are added).
        trace: the pass's; where there is one, the last layer runs at every row, not those ``read`` names (its points
            are the padded pass's), and the encoder reads the rows after it.

    Returns:
        ``(x, segments)``: (1, T + pad, H) and the layout with its ``pad`` (without ``read`` where traced).
    """
    pad = product_rows(x, weight) - x.shape[1] if weight is not None else 0
    if pad:
        x = torch.cat([x, x.new_zeros(1, pad, x.shape[2])], dim=1)  # (1, T + pad, H)
    return x, replace(segments, pad=pad, read=None if trace else segments.read)


def segment_positions(input_ids: Tensor, segments: Segments, config: BertConfig) -> Tensor:
    """The position ids of texts laid end to end: each text's count from its start, as a padded batch gives it
    (0, 1, ... in BERT; as the member counts them where it does, e.g. RoBERTa's from ``padding_idx + 1``).

    Args:
        input_ids: (1, T), the texts one after another.
        segments: their lengths.
        config: the model's config.

    Returns:
        (1, T).
    """
    count = family_of(config).position_ids
    texts = input_ids[0].split(list(segments.lengths))  # each (n,)
    if count is None:
        return torch.cat([torch.arange(len(t), device=input_ids.device) for t in texts])[None]  # (1, T)
    return torch.cat([count(t[None], config.pad_token_id, 0)[0] for t in texts])[None]  # (1, T)
