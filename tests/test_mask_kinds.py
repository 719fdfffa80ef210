"""A student's mistakes with the low-level functions' masks and inputs are refused, not computed into garbage.

``encoder`` takes the tokenizer's 0/1 mask and makes it additive; ``attention``, ``layer``, ``eager_attention`` and
``sdpa_attention`` take the additive one (``extended_mask``). Each kind given where the other is expected used to run:
a 0/1 mask added to the scores shifts them by 1 instead of hiding keys, an additive mask read as 0/1 hides nothing.
"""

from __future__ import annotations

import pytest
import torch

import bertfn
from conftest import TINY, random_model


@pytest.fixture(scope="module")
def model():
    return random_model(bertfn.BertConfig(**TINY), seed=3)


@pytest.fixture(scope="module")
def batch():
    ids = torch.tensor([[2, 7, 8, 9, 10, 3], [2, 11, 12, 3, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    return ids, mask


def test_encoder_refuses_an_additive_mask(model, batch):
    ids, mask = batch
    additive = bertfn.extended_mask(mask, torch.float32)[:, 0, 0]  # (B, S): 0 and finfo.min
    with pytest.raises(bertfn.InputError, match="0/1 mask"):
        bertfn.encoder(model, ids, additive)
    with pytest.raises(bertfn.InputError, match="from 0 to 2"):
        bertfn.encoder(model, ids, mask * 2)
    bertfn.encoder(model, ids, mask.bool())  # bools and floats of 0 and 1 are the 0/1 mask
    bertfn.encoder(model, ids, mask.float())


@pytest.mark.parametrize("keep", [lambda m: m, lambda m: m[:, None, None].float(), lambda m: m[:, None, None].bool()],
                         ids=["tokenizer's", "4D float 0/1", "4D bool"])
def test_attention_refuses_a_keep_mask(model, batch, keep):
    ids, mask = batch
    p = model.params
    x = bertfn.embeddings(p.scope("bert.embeddings"), ids)
    with pytest.raises(bertfn.InputError, match="additive"):
        bertfn.attention(p.layer(0).scope("attention"), x, keep(mask))
    with pytest.raises(bertfn.InputError, match="additive"):
        bertfn.layer(p.layer(0), x, keep(mask))
    q = k = v = torch.randn(2, 3, 6, 16)
    for attend in (bertfn.eager_attention, bertfn.sdpa_attention):
        with pytest.raises(bertfn.InputError, match="additive"):
            attend(q, k, v, keep(mask))


def test_attention_reads_additive_masks_made_by_hand_or_by_extended_mask(model, batch):
    ids, mask = batch
    p = model.params
    x = bertfn.embeddings(p.scope("bert.embeddings"), ids)
    made = bertfn.extended_mask(mask, x.dtype)
    by_hand = (1.0 - mask[:, None, None].float()) * -1e9  # another large negative number: hides the same keys
    a = p.layer(0).scope("attention")
    ref = bertfn.attention(a, x, made).hidden
    torch.testing.assert_close(bertfn.attention(a, x, by_hand).hidden, ref)
    torch.testing.assert_close(bertfn.layer(p.layer(0), x, made).hidden,
                               bertfn.encoder(model, ids, mask, output_hidden_states=True).hidden_states[1])


def test_extended_mask_refuses_a_mask_made_additive_already(model, batch):
    """extended_mask twice (a student's slip between notebook 01's cells) turned the kept keys into finfo.min and the
    hidden ones into -inf, which attention's clamp made equal: every query read every key alike, padding included."""
    ids, mask = batch
    made = bertfn.extended_mask(mask, torch.float32)
    with pytest.raises(bertfn.InputError, match=r"extended_mask\(\)'s mask is the 0/1 mask.*additive one to attention"):
        bertfn.extended_mask(made, torch.float32)
    with pytest.raises(bertfn.InputError, match="from 0 to 2"):
        bertfn.extended_mask(mask * 2, torch.float32)
    with pytest.raises(bertfn.InputError, match="must be a tensor of 0/1.*got list"):
        bertfn.extended_mask(mask.tolist(), torch.float32)
    for keep in (mask.bool(), mask.float()):  # bools and floats of 0 and 1 are the 0/1 mask
        torch.testing.assert_close(bertfn.extended_mask(keep, torch.float32), made)


def test_a_view_of_another_part_is_refused_naming_the_view_to_pass(model, batch):
    """A view of the wrong part used to be blamed on the checkpoint ("load a checkpoint that contains this part"),
    though the weights were there, one scope up (feed_forward given the attention block's view), or the view was read
    under its own prefix twice (mlm_head given the view of cls.predictions)."""
    ids, _ = batch
    p = model.params
    x = bertfn.embeddings(p.scope("bert.embeddings"), ids)
    with pytest.raises(bertfn.InputError, match=r"scoped to 'bert\.encoder\.layer\.0\.attention\.', and "
                                                r"'intermediate\.dense\.weight' sits under 'bert\.encoder\.layer\.0\.'"):
        bertfn.feed_forward(p.layer(0).scope("attention"), x)
    for head, view in ((bertfn.mlm_head, p.scope("cls.predictions")), (bertfn.pooler, p.scope("bert"))):
        with pytest.raises(bertfn.InputError, match=r"takes the whole model .* not the view of one part"):
            head(view, x)
    with pytest.raises(bertfn.CheckpointError, match="no 'cls.seq_relationship.weight'"):  # not in this checkpoint
        bertfn.nsp_head(model, x[:, 0])


def test_attention_refuses_unsplit_heads_and_masks_that_do_not_fit():
    x = torch.randn(2, 6, 48)
    with pytest.raises(bertfn.InputError, match="split into heads"):
        bertfn.eager_attention(x, x, x)  # used to broadcast into a (2, 2, 6, 6) batch of nonsense
    q = torch.randn(2, 3, 6, 16)
    with pytest.raises(bertfn.InputError, match="broadcast"):
        bertfn.sdpa_attention(q, q, q, torch.zeros(2, 1, 1, 5))
    with pytest.raises(bertfn.InputError, match="head_mask"):
        bertfn.eager_attention(q, q, q, head_mask=torch.ones(4))


def test_products_refuse_inputs_of_another_width_or_dtype(model, batch):
    ids, mask = batch
    p = model.params
    x = bertfn.embeddings(p.scope("bert.embeddings"), ids)
    a = p.layer(0).scope("attention")
    with pytest.raises(bertfn.InputError, match=r"\(\.\.\., 48\)"):
        bertfn.attention(a, x[..., :32])
    with pytest.raises(bertfn.InputError, match="bfloat16"):
        bertfn.attention(a, x.bfloat16())
    with pytest.raises(bertfn.InputError, match=r"\(B, S, H\)"):
        bertfn.attention(a, x[0])
    with pytest.raises(bertfn.InputError, match=r"\(\.\.\., 48\)"):
        bertfn.linear(x[..., :32], a["self.query.weight"])


def test_encoder_states_of_another_batch_are_refused():
    cfg = bertfn.BertConfig(**{**TINY, "is_decoder": True, "add_cross_attention": True})
    model = random_model(cfg, seed=4)
    ids = torch.tensor([[2, 7, 8], [2, 9, 10]])
    with pytest.raises(bertfn.InputError, match=r"\(2, S_e, H\)"):
        bertfn.encoder(model, ids, encoder_hidden_states=torch.randn(3, 5, 48))
