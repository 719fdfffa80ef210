"""Which encoder runs a model's texts laid end to end: the one for its layer.

    BERT's layer (and MPNet's, BERT's with a shared attention bias)   :func:`~bertfn.fast.unpadded.unpadded_bert_encoder`
    a pre-LN layer (ESM-2, ESM-1b, ModernBERT)                        :func:`~bertfn.fast.prenorm.unpadded_pre_ln_encoder`
    DeBERTa's disentangled attention                                  :func:`~bertfn.fast.disentangled.unpadded_deberta_encoder`

The member's :class:`~bertfn.model.family.Family` record says which: a layer of its own with a rotary base is a
pre-LN one (ESM-1b's learned positions answer None for the base, as ModernBERT's never do), one without is DeBERTa's.
"""

from __future__ import annotations

import torch

from ..model.family import family_of
from ..model.params import Params
from ..model.encoder import encoder
from ..model.layout import Segments
from .disentangled import unpadded_deberta_encoder
from .prenorm import unpadded_pre_ln_encoder

Tensor = torch.Tensor


def unpadded_encoder(params: Params, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor,
                     lengths: list[int], rows: Tensor | None = None) -> Tensor:
    """The last hidden states of :func:`~bertfn.model.encoder.encoder` for texts laid end to end, by the fast
    encoder of the model's layer.

    Args:
        params: the root view of a loaded model.
        input_ids: (1, T), the texts one after another.
        token_type_ids: (1, T).
        position_ids: (1, T), restarting at 0 for each text.
        lengths: the texts' lengths, summing to T.
        rows: (r,) the positions the caller reads (fill_mask: the masks; scoring: one per copy); the last layer's
            attention output and feed-forward run at those alone.

    Returns:
        (1, T, H), or (1, r, H) with ``rows``.
    """
    family = family_of(params.config)
    if family.layer is None or family.attention_bias is not None:  # BERT's layer (MPNet's)
        segments = Segments(tuple(lengths), read=rows)
        return encoder(params, input_ids, segments, token_type_ids, position_ids).last_hidden_state
    if family.rotary_base is not None:  # a pre-LN member
        return unpadded_pre_ln_encoder(params, input_ids, position_ids, lengths, rows)
    return unpadded_deberta_encoder(params, input_ids, token_type_ids, position_ids, lengths, rows)
