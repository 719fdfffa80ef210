"""The pure functions under torch.func's transforms and torch.compile, on every kernel the fast path may pick.

bertfn's functions are pure functions of a state_dict, so ``torch.func`` should treat them as JAX treats a model:

* ``jvp`` (forward mode) carries its tangent through every product and both attention paths: within fp32 rounding of
  the fp64 pass's own tangent (fp64 runs ``F.linear``), also where oneDNN is the kernel chosen (its ops have no
  forward derivative: the tangent was dropped, silently) and on SDPA (whose fused CPU kernel has none either);
* ``vmap`` over texts (one row each) gives the padded batch's rows, over stacked copies of the weights (an ensemble)
  each copy's pass, and ``vmap(grad)`` each text's gradient; the checks of values (ids in the vocabulary, a 0/1 mask)
  are still made under it, on the values beneath;
* ``torch.compile`` traces ``encoder`` and ``mlm_head`` as one graph (``fullgraph=True``: no cache or check of values
  breaks it) that is not compiled again for another input of the same shape, and gives the plain call's numbers;
  So do the members whose checkpoints name their weights otherwise (their views' renaming is looked up once, for the
  root ``Params`` made outside), but DeBERTa, which counts its farthest relative position on the host;
* ``checkpoint=True`` under ``grad`` (torch's checkpoint cannot run there) is an InputError that says what works.
"""

from __future__ import annotations

import pytest
import torch
from conftest import TINY, random_model
from family_checkpoints import ESM_KINDS, MEMBERS, MODERN, PROTEINS, kind_params, save_member
from torch.func import grad, jvp, vmap

import bertfn
from bertfn.errors import InputError
from bertfn.fast import choice
from bertfn.fast.kernels import KERNELS, ONEDNN

KINDS = KERNELS if ONEDNN else ("F.linear",)


@pytest.fixture(params=KINDS)
def kernel(request, monkeypatch):
    """The fast path on one kernel alone (``BERTFN_KERNEL``), the choice forgotten on both sides."""
    monkeypatch.setenv("BERTFN_KERNEL", request.param)
    choice.forget()
    yield request.param
    choice.forget()


@pytest.fixture(scope="module")
def model():
    return random_model(bertfn.BertConfig(**TINY), seed=4)


IDS = torch.tensor([[2, 7, 8, 9, 10, 3], [2, 11, 12, 3, 0, 0]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])


def hidden(state, config, *args, **kwargs):
    return bertfn.encoder(bertfn.Params(state, config), *args, **kwargs).last_hidden_state


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_jvp_carries_the_tangent_on_every_kernel(model, kernel, impl):
    g = torch.Generator().manual_seed(0)
    x, t = torch.randn(2, 6, 48, generator=g), torch.randn(2, 6, 48, generator=g)
    wide = {k: v.double() for k, v in model.state.items()}
    _, expected = jvp(lambda e: hidden(wide, model.config, inputs_embeds=e, attention_mask=MASK, impl=impl),
                      (x.double(),), (t.double(),))
    _, got = jvp(lambda e: hidden(model.state, model.config, inputs_embeds=e, attention_mask=MASK, impl=impl),
                 (x,), (t,))
    torch.testing.assert_close(got, expected.float(), atol=1e-4, rtol=1e-4)
    with torch.autograd.forward_ad.dual_level():  # forward mode without torch.func: a tangent on a weight
        w = "bert.encoder.layer.0.attention.self.query.weight"
        dw = torch.randn(model.state[w].shape, generator=g)
        dual = dict(model.state, **{w: torch.autograd.forward_ad.make_dual(model.state[w], dw)})
        got = torch.autograd.forward_ad.unpack_dual(hidden(dual, model.config, IDS, MASK, impl=impl)).tangent
    _, expected = jvp(lambda v: hidden({**wide, w: v}, model.config, IDS, MASK, impl=impl), (wide[w],), (dw.double(),))
    torch.testing.assert_close(got, expected.float(), atol=1e-4, rtol=1e-4)


def test_vmap_over_texts_and_over_copies_of_the_weights(model, kernel):
    batch = hidden(model.state, model.config, IDS, MASK)
    rows = vmap(lambda i, m: hidden(model.state, model.config, i[None], m[None])[0])(IDS, MASK)
    real = MASK[..., None].bool()
    torch.testing.assert_close(rows * real, batch * real, atol=1e-5, rtol=1e-5)

    g = torch.Generator().manual_seed(1)
    copies = [{k: v + 0.05 * i * torch.randn(v.shape, generator=g) for k, v in model.state.items()} for i in range(3)]
    stacked = {k: torch.stack([c[k] for c in copies]) for k in model.state}
    each = vmap(lambda s: hidden(s, model.config, IDS, MASK))(stacked)
    for i, c in enumerate(copies):
        torch.testing.assert_close(each[i], hidden(c, model.config, IDS, MASK), atol=1e-5, rtol=1e-5)


def test_vmap_of_grad_gives_each_texts_gradient(model, kernel):
    def loss(state, ids, mask):
        return hidden(state, model.config, ids[None], mask[None]).square().mean()

    w = "bert.encoder.layer.1.output.dense.weight"
    per_text = vmap(grad(loss), in_dims=(None, 0, 0))(dict(model.state), IDS, MASK)
    for i in range(2):
        leaf = model.state[w].clone().requires_grad_(True)
        loss({**model.state, w: leaf}, IDS[i], MASK[i]).backward()
        torch.testing.assert_close(per_text[w][i], leaf.grad, atol=1e-6, rtol=1e-5)


def test_the_checks_of_values_are_made_under_vmap(model):
    one = lambda i, m: hidden(model.state, model.config, i[None], m[None])[0]  # noqa: E731
    with pytest.raises(InputError, match=r"input_ids must lie in \[0, \d+\), got values from 0 to 9999"):
        vmap(one)(IDS.index_put((torch.tensor(1), torch.tensor(2)), torch.tensor(9999)), MASK)
    with pytest.raises(InputError, match="attention_mask is the 0/1 mask"):
        vmap(one)(IDS, MASK * 2)


def test_compile_traces_encoder_and_mlm_head_as_one_graph_once(model, kernel):
    from torch._dynamo.utils import counters

    p = model.params

    def logits(ids, mask):
        return bertfn.mlm_head(p, bertfn.encoder(p, ids, mask).last_hidden_state)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(logits, backend="eager", fullgraph=True)  # dynamo alone: a graph break is an error
    with torch.no_grad():
        for ids in (IDS, IDS.flip(1), IDS + 1):  # same shapes, other values: traced once
            torch.testing.assert_close(compiled(ids, MASK), logits(ids, MASK), atol=1e-5, rtol=1e-5)
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()


def test_checkpointing_is_refused_where_torch_func_cannot_run_it(model):
    """torch.utils.checkpoint's saved-tensor hooks fail under torch.func's reverse mode: bertfn says so, and what
    works."""
    def loss(state, checkpoint):
        return hidden(state, model.config, IDS, MASK, checkpoint=checkpoint).square().mean()

    with pytest.raises(InputError, match=r"checkpoint=True .* torch.func's grad, vjp, jacrev and hessian cannot run"):
        grad(loss)(dict(model.state), True)
    w = "bert.encoder.layer.0.intermediate.dense.weight"
    leaf = model.state[w].clone().requires_grad_(True)
    loss({**model.state, w: leaf}, True).backward()  # what works instead: the same gradient as without checkpointing
    torch.testing.assert_close(leaf.grad, grad(loss)(dict(model.state), False)[w], atol=1e-6, rtol=1e-5)


@pytest.mark.needs_transformers
@pytest.mark.parametrize("kind", kind_params(MEMBERS + MODERN, quick=("roberta", "esm", "deberta-v2")))
def test_compile_traces_a_members_pass_as_one_graph(kind, tmp_path):
    save_member(kind, tmp_path)
    member = bertfn.load(tmp_path)
    texts = PROTEINS[:2] if kind in ESM_KINDS else ["The cat sat on the mat.", "Paris is a city"]
    p, enc = member.params, member.tokenizer(list(texts))
    head = bertfn.mlm_head if "cls.predictions.decoder.weight" in p else (lambda p, h: h)  # a discriminator: none

    def logits(ids, mask):
        return head(p, bertfn.encoder(p, ids, mask).last_hidden_state)

    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(logits, backend="eager", fullgraph=True)(enc.input_ids, enc.attention_mask)
        torch.testing.assert_close(compiled, logits(enc.input_ids, enc.attention_mask), atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()
