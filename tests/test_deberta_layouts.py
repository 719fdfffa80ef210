"""DeBERTa's layer takes both layouts (bertfn/model/layout.py): texts laid end to end (``Segments``) give each text
the hidden states the padded batch gives it, within 1e-5 in fp32.

Tiny random models (``bertfn.init_model``, every weight moved off its init), no transformers: DeBERTa-v3's layout
(log buckets, shared keys, c2p and p2c) and DeBERTa-v2's (its own positional projections, no buckets, absolute
positions and token types, ``embedding_size`` < H), one positional term alone, the convolution after the first layer
(also where that layer is the last), no relative attention. Texts of 20, 7, 7, 3 and 1 tokens, the longest past the
8 buckets' reach, the two of 7 attending as one batch (``Segments.attend``'s runs): every text's last hidden states,
and those at a few rows alone (``Segments.read``: the last layer's output there only), against the right- and
left-padded batch.
"""

from __future__ import annotations

import pytest
import torch

import bertfn
from bertfn.model.layout import Segments

TOL = dict(atol=1e-5, rtol=0)
V3 = dict(model_type="deberta-v2", vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
          intermediate_size=24, max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
          initializer_range=0.3, relative_attention=True, position_buckets=8, max_relative_positions=64,
          pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False,
          type_vocab_size=0)
"""DeBERTa-v3's layout, tiny: 8 log buckets (the 20-token text reaches past them), shared keys."""

VARIANTS = {
    "v3": {},
    "v2": dict(share_att_key=False, position_buckets=-1, max_relative_positions=16, norm_rel_ebd="none",
               position_biased_input=True, type_vocab_size=2, embedding_size=12),
    "c2p-own-keys": dict(share_att_key=False, pos_att_type=["c2p"]),
    "p2c-only": dict(pos_att_type=["p2c"]),
    "conv": dict(conv_kernel_size=3, conv_act="gelu"),
    "conv-one-layer": dict(conv_kernel_size=3, num_hidden_layers=1),
    "no-relative-attention": dict(relative_attention=False, position_biased_input=True),
}
LENGTHS = (20, 7, 7, 3, 1)
READ = torch.tensor([0, 19, 20, 26, 27, 33, 36, 37])
"""Rows of the texts laid end to end: the ends of the first three, the fourth's last, the one-token text."""


def model_of(variant: str) -> bertfn.Model:
    """A random DeBERTa of :data:`V3` with the variant's changes, every bias and LayerNorm off its init."""
    model = bertfn.init_model(bertfn.BertConfig.from_dict({**V3, **VARIANTS[variant]}), parts=(),
                              generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    for name, t in model.state.items():
        if "LayerNorm" in name or name.endswith("bias"):
            t.add_(torch.randn(t.shape, generator=g) * 0.3)
    return model


def texts(types: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The texts' ids and token types, each (n,)."""
    g = torch.Generator().manual_seed(2)
    ids = [torch.randint(5, 50, (n,), generator=g) for n in LENGTHS]
    return ids, [torch.randint(0, max(types, 1), (n,), generator=g) for n in LENGTHS]


def padded(rows: list[torch.Tensor], side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` padded with 0 on ``side`` to the longest: (B, S) and the 0/1 mask."""
    S = max(len(r) for r in rows)
    out, mask = torch.zeros(len(rows), S, dtype=torch.long), torch.zeros(len(rows), S, dtype=torch.long)
    for i, r in enumerate(rows):
        at = slice(0, len(r)) if side == "right" else slice(S - len(r), S)
        out[i, at], mask[i, at] = r, 1
    return out, mask


@pytest.mark.parametrize("batches", [None, (1, 4), (5,)], ids=["runs", "some padded", "one padded"])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_texts_end_to_end_equal_the_padded_batch(variant, side, batches):
    """Run by run, or gathered into padded batches (``Segments.batches``): the 20 alone and the rest padded to their
    longest, or all five padded to 20."""
    model = model_of(variant)
    ids, types = texts(model.config.type_vocab_size)
    batch, mask = padded(ids, side)
    batch_types, _ = padded(types, side)
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)  # each text's positions from 0 (read where absolute positions)
    with torch.inference_mode():
        h = bertfn.encoder(model, batch, mask, batch_types, positions).last_hidden_state  # (B, S, H)
        expected = h[mask.bool()]  # (T, H): each text's rows, in order
        ends, segments = torch.cat(ids)[None], Segments(LENGTHS, batches=batches)
        every = bertfn.encoder(model, ends, segments, torch.cat(types)[None]).last_hidden_state  # (1, T, H)
        some = bertfn.encoder(model, ends, Segments(LENGTHS, read=READ, batches=batches),
                              torch.cat(types)[None]).last_hidden_state
    torch.testing.assert_close(every[0], expected, **TOL)
    torch.testing.assert_close(some[0], expected[READ], **TOL)


def test_segments_refuse_what_inference_alone_runs_without():
    model = model_of("v3")
    ids = torch.cat(texts(0)[0])[None]
    with pytest.raises(bertfn.InputError, match="Segments"):
        bertfn.encoder(model, ids, Segments(LENGTHS), output_attentions=True)
    with pytest.raises(bertfn.InputError, match="Segments"):
        bertfn.encoder(model, ids, Segments(LENGTHS), generator=torch.Generator())
