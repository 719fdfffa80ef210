"""The fast path of a member whose own layer it has no kernels for (DeBERTa's disentangled attention): each text of
a group through the reference encoder alone.

:func:`~bertfn.fast.unpadded.unpadded_encoder` lays a group's texts end to end, (1, T), and runs kernels of its own
on BERT's layer and the pre-LN members'. A member with another layer (``Family.layer`` with no rotary base and no
attention bias: DeBERTa's) runs here: each text (1, n) through :func:`~bertfn.model.encoder.encoder` (its positions
from 0, no padding, so the numbers are the reference's for that text alone), the results laid end to end again. Where
:func:`~bertfn.fast.choice.pack_state` packed the weights for oneDNN, the reference reads them unpacked.
"""

from __future__ import annotations

import torch

from ..model.encoder import encoder
from ..model.params import Params

Tensor = torch.Tensor


def plain(params: Params) -> Params:
    """``params`` with any oneDNN-packed weight as a plain tensor (``to_dense``), which the reference functions read.

    Args:
        params: the root view of a loaded model.
    """
    if not any(t.is_mkldnn for t in params.state.values()):
        return params
    return Params({k: t.to_dense() if t.is_mkldnn else t for k, t in params.state.items()}, params.config)


def texts_alone(params: Params, input_ids: Tensor, token_type_ids: Tensor, lengths: list[int],
                rows: Tensor | None = None) -> Tensor:
    """The last hidden states of texts laid end to end, each text through the reference encoder alone.

    Args:
        params: the root view of a loaded model.
        input_ids: (1, T), the texts one after another.
        token_type_ids: (1, T).
        lengths: the texts' lengths, summing to T.
        rows: (r,) the positions the caller reads (default: all T).

    Returns:
        (1, T, H), or (1, r, H) with ``rows``.
    """
    params = plain(params)
    x = torch.cat([encoder(params, ids, token_type_ids=types).last_hidden_state
                   for ids, types in zip(input_ids.split(lengths, dim=1), token_type_ids.split(lengths, dim=1))],
                  dim=1)  # (1, T, H)
    return x if rows is None else x[:, rows]
