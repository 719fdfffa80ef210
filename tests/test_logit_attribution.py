"""Each head's write into the residual stream, and direct logit attribution (bertfn/interventions/logit_attribution.py).

* ``layer.{i}.attention.head_outputs`` (B, nh, S, H) is formed only when asked; then the heads' writes plus
  the bias are the recorded ``attention.dense`` exactly, each head's write is its context times its hd
  columns of W_O (1e-6), and the pass equals the ordinary one to float rounding (1e-5, relative: the sum
  over heads runs in another order than the fused product); on a random BERT, a pruned one, a decoder's
  cross-attention and every family member; an edit of one head's write changes the pass as zeroing
  its context does (1e-6);
* the parts of :func:`logit_attribution` sum to the model's own fp32 logits at the mask within 1e-4
  (the parts are taken in float64 from the fp32 pass; the model's logits carry its fp32 rounding, about
  1e-6 relative, on logits up to about 20), on a random BERT, a pruned one, AntiBERTy and each family member
  with an MLM head; the final hidden state's parts sum to ``layer.{L-1}.output`` within 1e-5; one head's
  part equals a computation by hand from the recorded tensors (1e-9, both float64); bad inputs get
  bertfn errors.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import TINY, random_model, write_folder
from family_checkpoints import save_member

import bertfn
from bertfn import interventions as iv
from bertfn.errors import InputError, MissingPartError
from bertfn.interventions.logit_attribution import logit_attribution
from bertfn.interventions.residual_parts import hidden_contributions

HEADS = "layer.*.attention.head_outputs"
CHAIN = ("E V Q L V E S G G G L V Q P G R S L R L S C A A S G F [MASK] F D D Y A M H W V R Q A P G K G L E W V S "
         "A I T W N S G H I D Y A D S V E G R F T I S R D N A K N S L Y L Q M N S L R A E D T A V Y Y C A K V "
         "S Y L S T A S S L D Y W G Q G T L V T V S S")


@pytest.fixture(scope="module")
def tiny(tiny_folder) -> bertfn.Model:
    return bertfn.load(tiny_folder)


@pytest.fixture(scope="module", params=["roberta", "xlm-roberta", "distilbert", "electra", "albert"])
def member(request, tmp_path_factory) -> bertfn.Model:
    folder = tmp_path_factory.mktemp(request.param)
    save_member(request.param, folder)
    return bertfn.load(folder)


def passes(m: bertfn.Model, text: str) -> tuple[dict, dict]:
    """The plain pass's tensors and those of a pass that records each head's write."""
    enc = m.tokenizer([text])
    plain, heads = bertfn.Trace(), bertfn.Trace(optional=[HEADS])
    for t in (plain, heads):
        bertfn.encoder(m, enc.input_ids, enc.attention_mask, enc.token_type_ids, impl="eager", trace=t)
    return plain.store, heads.store


def check_head_outputs(m: bertfn.Model, text: str, block: str = "attention") -> None:
    plain, heads = passes(m, text)
    assert not any(k.endswith("head_outputs") for k in plain)  # not formed unless asked
    cfg = m.config
    for i in range(cfg.num_hidden_layers):
        name = f"layer.{i}.{block}."
        w = m.params.layer(i)[f"{block}.output.dense.weight"]  # (H, nh*hd)
        nh, hd = cfg.heads_in_layer(i), cfg.head_dim
        out = heads[name + "head_outputs"]
        assert out.shape == (1, nh, out.shape[2], cfg.hidden_size)
        assert torch.equal(out.sum(dim=1) + m.params.layer(i)[f"{block}.output.dense.bias"], heads[name + "dense"])
        for h in range(nh):  # head h: its context times its hd columns of W_O
            by_hand = heads[name + "context"][0, h] @ w[:, h * hd:(h + 1) * hd].T
            torch.testing.assert_close(out[0, h], by_hand, atol=1e-6, rtol=1e-6)
    for k in plain:  # the ordinary pass, to float rounding: 1e-5 of each tensor's scale (summing the heads' writes
        # rounds in another order than one product, and layer 1's scores, of magnitude ~50, carry it; 1.2e-5 absolute
        # seen on an Intel Xeon)
        torch.testing.assert_close(heads[k], plain[k], atol=1e-5 * max(1.0, plain[k].abs().max().item()), rtol=1e-5)


def test_head_outputs_sum_to_the_output_projection(tiny):
    check_head_outputs(tiny, "the cat sat on the [MASK] .")


def test_head_outputs_of_a_pruned_model_hold_the_heads_left(tiny):
    pruned = bertfn.prune_heads(tiny, {1: [2], 0: [0, 1]})
    check_head_outputs(pruned, "the cat sat on the [MASK] .")
    _, full = passes(tiny, "the cat sat on the mat .")
    _, less = passes(bertfn.prune_heads(tiny, {1: [1]}), "the cat sat on the mat .")
    torch.testing.assert_close(less["layer.1.attention.head_outputs"], full["layer.1.attention.head_outputs"][:, [0, 2]],
                               atol=1e-6, rtol=1e-6)


def test_head_outputs_of_cross_attention():
    cfg = bertfn.BertConfig(**{**TINY, "is_decoder": True, "add_cross_attention": True})
    m = random_model(cfg, seed=3, pooler=False)
    ids, enc = torch.tensor([[5, 9, 10, 11, 6]]), torch.randn(1, 4, cfg.hidden_size)
    t = bertfn.Trace(optional=["layer.*.crossattention.head_outputs"])
    plain = bertfn.encoder(m, ids, encoder_hidden_states=enc, impl="eager").last_hidden_state
    out = bertfn.encoder(m, ids, encoder_hidden_states=enc, impl="eager", trace=t).last_hidden_state
    assert t.store["layer.0.crossattention.head_outputs"].shape == (1, 3, 5, 48)
    assert "layer.0.attention.head_outputs" not in t.store
    torch.testing.assert_close(out, plain, atol=1e-5, rtol=1e-5)


@pytest.mark.needs_transformers  # the members' checkpoints are built by transformers
def test_head_outputs_of_each_family_member(member):
    mask = member.tokenizer.mask_token
    check_head_outputs(member, f"The capital of France is {mask}, a big city.")


def test_an_edit_of_a_head_write_changes_the_pass_as_zeroing_its_context(tiny):
    ids = tiny.tokenizer(["the cat sat on the mat ."]).input_ids

    def zero(x, point):
        x = x.clone()
        x[:, 2] = 0
        return x

    edited = bertfn.encoder(tiny, ids, impl="eager", edits={"layer.1.attention.head_outputs": zero})
    ablated = bertfn.encoder(tiny, ids, impl="eager", edits=iv.zero_heads({1: [2]}))
    torch.testing.assert_close(edited.last_hidden_state, ablated.last_hidden_state, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(edited.last_hidden_state, bertfn.encoder(tiny, ids).last_hidden_state, atol=1e-3)


def check_attribution(m: bertfn.Model, text: str, tokens, tol: float = 1e-4):
    la = logit_attribution(text, m, tokens)
    cfg = m.config
    L, nh, T = cfg.num_hidden_layers, cfg.num_attention_heads, len(la.tokens)
    assert la.heads.shape == (L, nh, T) and la.attention_bias.shape == la.ffn.shape == la.layers.shape == (L, T)
    assert la.embeddings.shape == la.bias.shape == la.logits.shape == (T,)
    torch.testing.assert_close(la.total, la.logits, atol=tol, rtol=0)
    rec = bertfn.trace(text, m, head_outputs=True)
    torch.testing.assert_close(la.logits, rec["mlm.logits"][0, la.tokens].double(), atol=0, rtol=0)
    hidden = hidden_contributions(rec, la.position)
    torch.testing.assert_close(hidden.total, rec[f"layer.{L - 1}.output"][0, la.position].double(), atol=1e-5, rtol=0)
    return la, rec


def test_the_parts_sum_to_the_logits_on_a_random_bert(tiny):
    check_attribution(tiny, "the cat sat on the [MASK] .", ["mat", "dog", 9])


def test_one_head_part_equals_a_computation_by_hand(tiny):
    text, tokens = "when in rome do as the [MASK] do", ["romans", "people"]
    la, rec = check_attribution(tiny, text, tokens)
    m, cfg, p = la.position, tiny.config, tiny.params
    eps, i, h = cfg.layer_norm_eps, cfg.num_hidden_layers - 1, 1

    def at(name):
        return rec[name][0, m].double()

    def w(name):
        return p[name].double()

    def frozen(v, whole, gamma):  # LayerNorm with this run's sigma, without beta
        return gamma * (v - v.mean()) / torch.sqrt(whole.var(unbiased=False) + eps)

    lay = f"bert.encoder.layer.{i}."
    v = rec[f"layer.{i}.attention.head_outputs"][0, h, m].double()
    v = frozen(v, at(f"layer.{i}.attention.dense") + at(f"layer.{i - 1}.output"), w(lay + "attention.output.LayerNorm.weight"))
    v = frozen(v, at(f"layer.{i}.attention.output") + at(f"layer.{i}.ffn.dense"), w(lay + "output.LayerNorm.weight"))
    last = hidden_contributions(rec, m).total  # the last hidden state as its parts sum to it: the head is frozen there
    z = last @ w("cls.predictions.transform.dense.weight").T + w("cls.predictions.transform.dense.bias")
    gelu = 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))
    u = gelu / z * (v @ w("cls.predictions.transform.dense.weight").T)
    u = frozen(u, gelu, w("cls.predictions.transform.LayerNorm.weight"))
    ids = [tiny.tokenizer.token_to_id(t) for t in tokens]
    torch.testing.assert_close(la.heads[i, h], w("cls.predictions.decoder.weight")[ids] @ u, atol=1e-9, rtol=1e-9)


def test_a_pruned_head_has_no_part(tiny):
    pruned = bertfn.prune_heads(tiny, {0: [1]})
    la, _ = check_attribution(pruned, "the cat sat on the [MASK] .", ["mat", "dog"])
    assert torch.equal(la.heads[0, 1], torch.zeros(2, dtype=torch.float64))
    assert la.heads[0, 0].abs().sum() > 0


def test_the_parts_sum_to_the_logits_on_antiberty(antiberty):
    la, _ = check_attribution(antiberty, CHAIN, ["T", "S", "I"])
    assert la.logits.abs().max() > 5  # real logits, not a degenerate case


@pytest.mark.needs_transformers  # the members' checkpoints are built by transformers
def test_the_parts_sum_to_the_logits_on_each_family_member(member):
    mask = member.tokenizer.mask_token
    check_attribution(member, f"The capital of France is {mask}, a big city.", [5, 6, 7])


def test_bad_inputs_get_bertfn_errors(tiny, tmp_path):
    with pytest.raises(InputError, match="no \\[MASK\\]"):
        logit_attribution("the cat sat on the mat .", tiny, "mat")
    with pytest.raises(InputError, match="from 0 to 0"):
        logit_attribution("the cat sat on the [MASK] .", tiny, "mat", mask=1)
    with pytest.raises(InputError, match="no token 'zebra'"):
        logit_attribution("the cat sat on the [MASK] .", tiny, ["mat", "zebra"])
    with pytest.raises(InputError, match="token ids"):
        logit_attribution("the cat sat on the [MASK] .", tiny, 10**6)
    with pytest.raises(InputError, match="head_outputs"):
        hidden_contributions(bertfn.trace("the cat sat on the mat .", tiny), 1)
    with pytest.raises(InputError, match="position"):
        hidden_contributions(bertfn.trace("the cat sat .", tiny, head_outputs=True), 9)
    with pytest.raises(InputError, match="one text, got a list of 2 texts"):  # was an AttributeError
        logit_attribution(["the cat sat on the [MASK] .", "a [MASK] ."], tiny, "mat")
    batch = bertfn.trace(["the cat sat .", "a dog ."], tiny, head_outputs=True)
    with pytest.raises(InputError, match="batch of 2 texts"):  # was text 0's parts, said of none
        hidden_contributions(batch, 1)
    with pytest.raises(InputError, match="got str"):  # was an AttributeError
        hidden_contributions("the cat sat .", 1)
    encoder_only = bertfn.load(write_folder(random_model(bertfn.BertConfig(**TINY), mlm=False), tmp_path / "enc"))
    with pytest.raises(MissingPartError, match="masked-LM head"):
        logit_attribution("the cat sat on the [MASK] .", encoder_only, "mat")
