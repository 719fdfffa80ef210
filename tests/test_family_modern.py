"""ESM-2 and ModernBERT, held to transformers: they load as transformers saves them and compute its numbers.

Each member (tests/family_checkpoints.py: random weights, small odd sizes, its own tokenizer; ModernBERT with 4
layers and a window of 8 tokens, so layers 1 and 2 attend locally to texts longer than their window) gives every
layer's hidden states, attention probabilities and the MLM head's logits of transformers' eager model within 1e-5 in
fp32 (1e-4 on a GPU: BERTFN_TEST_DEVICE, conftest.DEVICE, where both sides run), on padded batches (padding on the
right and on the left) and on each text alone; the SDPA path and the path fill_mask takes equal the reference.

ESM-2's token dropout scales each text's embeddings by the share of ``<mask>`` among its real tokens. transformers
4.57's ``EsmModel.forward`` does not hand the attention mask to its embeddings, so there a padded row is scaled by
its masks over the padded length instead, and a text's numbers depend on the batch it is in (fixed upstream
later, huggingface/transformers#44163). The oracle of a padded batch is therefore transformers with its
embeddings given the mask (:func:`esm_oracle`), and :func:`test_transformers_4_57_scales_esm_padding_by_the_padded_length`
shows the difference.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import DEVICE, ends, fp32_atol, on_device
from family_checkpoints import ESM_KINDS, MODERN, MODEL_CLASSES, kind_params, member_tokenizer, save_member
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bertfn
from bertfn.model.family import member_name
from bertfn.model.members.modernbert import is_local
from bertfn.model.point_names import head_point_names, point_names
from bertfn.model.members.rotary import rotary_tables, rotate

pytestmark = pytest.mark.needs_transformers

TOL = fp32_atol(1e-5)
TEXTS = {
    "modernbert": ["When in Rome, do as the [MASK] do.", "The cat sat.",
                   "The capital of France is Paris, a big city with many [MASK] and the king and the queen."],
    "esm": ["MKTAYIAKQRQISFVKSHFSRQ", "EVQLVESGG<mask>LVQPGRSLRLSCAASGFTFDDYAMH", "QVQL<mask>QSGAE<mask>KKPGA"],
}
TEXTS["esm1b"] = TEXTS["esm"]


_built: dict[str, tuple] = {}


def built(kind: str, tmp_path_factory) -> tuple:
    """(kind, transformers model, bertfn model, folder) of ``kind``, written once per module."""
    if kind not in _built:
        folder = tmp_path_factory.mktemp(kind)
        hf = save_member(kind, folder)
        _built[kind] = kind, on_device(hf), bertfn.load(folder, device=DEVICE), folder
    return _built[kind]


@pytest.fixture(scope="module", params=kind_params(MODERN, quick=MODERN))
def member(request, tmp_path_factory):
    """(kind, transformers model, bertfn model, folder) for each member (ESM-1b in the slow run)."""
    return built(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=kind_params(ESM_KINDS, quick=ESM_KINDS))
def esm(request, tmp_path_factory):
    """ESM-2 and ESM-1b (in the slow run): their token dropout is the same."""
    return built(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def modernbert(tmp_path_factory):
    return built("modernbert", tmp_path_factory)


def batch(kind: str, side: str = "right"):
    """The member's texts tokenized by its own tokenizer (transformers'), padded on ``side``, on DEVICE."""
    tok = member_tokenizer(kind)
    tok.padding_side = side
    try:
        enc = tok(TEXTS[kind], padding=True, return_tensors="pt")
    finally:
        tok.padding_side = "right"
    return on_device((enc["input_ids"], enc["attention_mask"]))


def esm_oracle(hf, mask: torch.Tensor):
    """transformers' ESM with its embeddings given ``mask``, as fair-esm (and transformers after #44163) compute it.

    Returns the ``forward`` to restore.
    """
    forward = hf.esm.embeddings.forward

    def with_mask(input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None):
        return forward(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, inputs_embeds=inputs_embeds)

    hf.esm.embeddings.forward = with_mask
    return forward


def reference(kind: str, hf, ids: torch.Tensor, mask: torch.Tensor):
    """transformers' outputs: (hidden states of the embeddings and each layer, before the final norm), the last
    hidden state, the attentions, the logits."""
    base = hf.esm if kind in ESM_KINDS else hf.model
    restore = esm_oracle(hf, mask) if kind in ESM_KINDS else None
    try:
        with torch.no_grad():
            out = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
            last = base(input_ids=ids, attention_mask=mask).last_hidden_state
    finally:
        if restore is not None:
            hf.esm.embeddings.forward = restore
    L = hf.config.num_hidden_layers
    # ESM's last hidden_states entry is the final-normed state; ModernBERT's, like bertfn's, the last layer's output
    layers = out.hidden_states[:L] if kind in ESM_KINDS else out.hidden_states
    return layers, last, out.attentions, out.logits


@pytest.mark.parametrize("side", ["right", "left"])
def test_every_layer_and_the_logits_equal_transformers_on_a_padded_batch(member, side):
    kind, hf, model, _ = member
    ids, mask = batch(kind, side)
    layers, last, attentions, logits = reference(kind, hf, ids, mask)
    with torch.no_grad():
        out = bertfn.encoder(model, ids, mask, impl="eager", output_hidden_states=True, output_attentions=True)
        ours = bertfn.mlm_head(model, out.last_hidden_state)
    real = mask.bool()
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    for a, b in zip(out.hidden_states, layers):
        torch.testing.assert_close(a[real], b[real], atol=TOL, rtol=0)
    torch.testing.assert_close(out.last_hidden_state[real], last[real], atol=TOL, rtol=0)
    for a, b in zip(out.attentions, attentions, strict=True):  # the real queries' rows
        torch.testing.assert_close(a.transpose(1, 2)[real], b.transpose(1, 2)[real], atol=TOL, rtol=0)
    torch.testing.assert_close(ours[real], logits[real], atol=TOL, rtol=0)


def test_each_text_alone_equals_its_row_and_transformers(member):
    """Rotary positions make a score depend on the distance alone: left padding shifts every position and changes
    nothing (ESM-1b's learned positions count the real tokens alone, from ``padding_idx + 1``). Alone, each text
    equals transformers 4.57 unpatched (ESM's token dropout is right there)."""
    kind, hf, model, _ = member
    for side in ("right", "left"):
        ids, mask = batch(kind, side)
        with torch.no_grad():
            padded = bertfn.encoder(model, ids, mask).last_hidden_state
            for i in range(len(ids)):
                row = ids[i][mask[i].bool()][None]
                alone = bertfn.encoder(model, row).last_hidden_state[0]
                torch.testing.assert_close(padded[i][mask[i].bool()], alone, atol=TOL, rtol=0)
                if side == "right":
                    theirs = hf(input_ids=row).logits[0]
                    torch.testing.assert_close(bertfn.mlm_head(model, alone), theirs, atol=TOL, rtol=0)


def test_transformers_4_57_scales_esm_padding_by_the_padded_length(esm):
    """Without the mask, transformers 4.57 scales a padded row's embeddings by masks / S, not masks / its length:
    its row differs from the same text alone. bertfn's row does not."""
    kind, hf, model, _ = esm
    ids, mask = batch(kind)
    i = 2  # the shortest text, two <mask>s, padded
    assert not mask[i].all() and (ids[i] == model.config.mask_token_id).sum() == 2
    row = ids[i][mask[i].bool()][None]
    with torch.no_grad():
        theirs_padded = hf(input_ids=ids, attention_mask=mask).logits[i][mask[i].bool()]
        theirs_alone = hf(input_ids=row).logits[0]
        ours_padded = bertfn.mlm_head(model, bertfn.encoder(model, ids, mask).last_hidden_state[i][mask[i].bool()])
    assert (theirs_padded - theirs_alone).abs().max() > 1e-3
    torch.testing.assert_close(ours_padded, theirs_alone, atol=TOL, rtol=0)


def test_the_sdpa_path_and_the_fill_mask_path_equal_the_reference(member):
    kind, _, model, _ = member
    ids, mask = batch(kind)
    text = TEXTS[kind][0 if kind == "modernbert" else 1]
    with torch.no_grad():
        eager = bertfn.encoder(model, ids, mask, impl="eager").last_hidden_state
        sdpa = bertfn.encoder(model, ids, mask, impl="sdpa")
        assert sdpa.attn_impl == "sdpa"
        torch.testing.assert_close(sdpa.last_hidden_state[mask.bool()], eager[mask.bool()], atol=TOL, rtol=0)
        ids = on_device(model.tokenizer([text]).input_ids)
        where = ids[0] == model.tokenizer.mask_token_id
        probs = torch.softmax(bertfn.mlm_head(model, bertfn.encoder(model, ids, impl="eager")
                                              .last_hidden_state[0, where]), dim=-1)[0]
    top = bertfn.fill_mask(text, model, top_k=5)
    assert [r["token"] for r in top] == probs.topk(5).indices.tolist()
    torch.testing.assert_close(torch.tensor([r["score"] for r in top]), probs.topk(5).values.cpu(), atol=1e-6, rtol=0)


def test_the_fast_path_equals_the_reference_text_by_text(member):
    """The encoder on Segments: the texts end to end, each with its own positions, window and token dropout; with
    ``rows`` the last layer's output at those positions alone; on weights packed for the fast path's kernels too."""
    from test_fast_path import forced

    from bertfn.fast.batching import end_to_end
    from bertfn.fast.choice import pack_state
    from bertfn.fast.kernels import KERNELS, ONEDNN

    kind, _, model, _ = member
    enc = model.tokenizer(TEXTS[kind])
    lengths = enc.attention_mask.sum(dim=1).tolist()
    inputs = on_device(end_to_end(enc, [0, 1, 2], lengths))
    rows = torch.tensor([0, lengths[0] + 2, sum(lengths) - 1], device=DEVICE)
    with torch.no_grad():
        ref = torch.cat([bertfn.encoder(model, on_device(enc.input_ids[i, :n][None]), impl="eager").last_hidden_state[0]
                         for i, n in enumerate(lengths)])  # (T, H): each text alone
        for kernel in KERNELS if ONEDNN else ("F.linear",):
            with forced(kernel):
                state = dict(model.state)
                pack_state(state)  # packs where the kernel is oneDNN on packed weights
                p = bertfn.Params(state, model.config)
                torch.testing.assert_close(ends(p, *inputs, lengths)[0], ref, atol=TOL, rtol=0)
                fast = ends(p, *inputs, lengths, rows)[0]
                torch.testing.assert_close(fast, ref[rows], atol=TOL, rtol=0)
                torch.testing.assert_close(bertfn.mlm_head(p, fast), bertfn.mlm_head(model, ref[rows]), atol=TOL, rtol=0)


def test_the_state_is_the_checkpoint_under_its_own_names(member):
    """model.state holds the file's keys (the tied decoder under its second name too); ESM's rotary inv_freq
    buffers are left out (bertfn computes the angles) and nothing else is renamed or copied."""
    kind, hf, model, folder = member
    from safetensors.torch import load_file

    stored = {k for k in load_file(str(folder / "model.safetensors")) if not k.endswith("inv_freq")}
    theirs = hf.state_dict()
    assert stored <= set(model.state) <= set(theirs)
    assert not any(k.startswith(("bert.", "cls.")) or k.endswith("inv_freq") for k in model.state)
    for k in model.state:
        torch.testing.assert_close(model.state[k], theirs[k], atol=0, rtol=0)


def test_the_model_says_what_it_is(member):
    kind, _, model, _ = member
    name = {"modernbert": "ModernBERT", "esm": "ESM-2", "esm1b": "ESM-1b"}[kind]  # ESM-1b: ESM's record, its variant
    assert member_name(model.config) == name and f": {name}, " in repr(model) and "MLM head" in repr(model)
    assert model.family.name == ("ModernBERT" if kind == "modernbert" else "ESM-2")


def test_a_trace_records_every_point_in_order(member):
    kind, _, model, _ = member
    names = point_names(model.config)
    assert ("layer.0.attention.norm" in names) == (kind in ESM_KINDS)  # ModernBERT's layer 0 reads the embeddings' norm
    assert ("layer.1.ffn.gate" in names) == (kind == "modernbert")
    assert ("embeddings.token_dropout" in names) == (kind in ESM_KINDS)
    assert ("embeddings.position" in names) == (kind == "esm1b")  # ESM-1b's learned positions
    assert ("layer.0.attention.q_rotated" in names) == (kind != "esm1b")
    rec = bertfn.Trace()
    ids, mask = batch(kind)
    with torch.no_grad():
        out = bertfn.encoder(model, ids, mask, trace=rec)
    assert list(rec.store) == [n for n in names if n in rec.store]
    assert set(names) - set(rec.store) == set(head_point_names(model.config))  # the encoder alone runs no head
    assert ("contacts.apc" in names) == (kind in ESM_KINDS)
    assert out.attn_impl == "eager"  # a trace that keeps forms the probabilities
    torch.testing.assert_close(rec.store["final_norm"], out.last_hidden_state, atol=0, rtol=0)


def test_the_rotated_queries_and_keys_give_the_scores(member):
    """q_rotated is q turned by its positions' angles; q_rotated . k_rotated is the scores point; layer 0's
    base is 10000 in ESM-2 and the global 160000 in ModernBERT. ESM-1b's learned positions turn nothing: q . k."""
    kind, _, model, _ = member
    ids, mask = batch(kind)
    rec = bertfn.Trace()
    with torch.no_grad():
        bertfn.encoder(model, ids, mask, trace=rec)
    cfg = model.config
    at = "layer.0.attention."
    if kind == "esm1b":
        assert not any(name.endswith("_rotated") for name in rec.store)
        scores = rec.store[at + "q"] @ rec.store[at + "k"].transpose(-1, -2)
        torch.testing.assert_close(rec.store[at + "scores"], scores, atol=1e-5, rtol=0)
        return
    base = 10000.0 if kind == "esm" else cfg.global_rope_theta
    cos, sin = rotary_tables(torch.arange(ids.shape[1], device=DEVICE), cfg.head_dim, base, torch.float32)
    torch.testing.assert_close(rec.store[at + "q_rotated"], rotate(rec.store[at + "q"], cos, sin), atol=1e-6, rtol=0)
    torch.testing.assert_close(rec.store[at + "scores"], rec.store[at + "q_rotated"] @ rec.store[at + "k_rotated"].transpose(-1, -2),
                               atol=1e-5, rtol=0)


def test_modernbert_local_layers_see_their_window_only(modernbert):
    kind, _, model, _ = modernbert
    cfg = model.config
    ids, mask = batch(kind)
    S = ids.shape[1]
    assert S > cfg.local_attention  # the window cuts these texts
    with torch.no_grad():
        out = bertfn.encoder(model, ids, mask, output_attentions=True)
    at = torch.arange(S, device=DEVICE)
    far = (at[:, None] - at[None, :]).abs() > cfg.local_attention // 2  # (S, S)
    assert [is_local(i, cfg) for i in range(cfg.num_hidden_layers)] == [False, True, True, False]
    for i, probs in enumerate(out.attentions):  # (B, nh, S, S); a padding query's row means nothing
        reach = (probs * far * mask[:, None, :, None]).abs().max()
        assert (reach == 0) if is_local(i, cfg) else (reach > 0)


def test_esm_token_dropout_scales_by_the_share_of_masks_in_each_text(esm):
    kind, _, model, _ = esm
    ids, mask = batch(kind)
    rec = bertfn.Trace()
    with torch.no_grad():
        bertfn.encoder(model, ids, mask, trace=rec)
    word, scaled = rec.store["embeddings.word"], rec.store["embeddings.token_dropout"]
    masks = ids == model.config.mask_token_id
    share = masks.sum(-1) / mask.sum(-1)  # (B,): 0, 1/len, 2/len of the real tokens
    expected = word.masked_fill(masks[..., None], 0.0) * (0.88 / (1 - share))[:, None, None]
    torch.testing.assert_close(scaled, expected, atol=1e-6, rtol=1e-6)
    assert share[0] == 0 and share[2] == 2 / mask[2].sum()


def test_esm_refuses_a_mask_its_embeddings_cannot_read(esm):
    # ESM's embeddings zero the padding by the (B, S) mask before attention checks it: an extended (B, 1, 1, S) mask,
    # as bertfn.extended_mask makes it, or a mask of another length, raised torch's broadcasting RuntimeError there
    kind, _, model, _ = esm
    ids, mask = batch(kind)
    for wrong in (bertfn.extended_mask(mask, torch.float32), mask[:, :3], mask.tolist()):
        with pytest.raises(bertfn.InputError, match=r"0/1 mask of the real tokens, of shape \(3, \d+\)"):
            bertfn.encoder(model, ids, wrong)


def test_a_bare_base_model_loads_and_equals_its_masked_lm(member, tmp_path):
    import transformers

    kind, hf, _, _ = member
    base = hf.esm if kind in ESM_KINDS else hf.model
    base.save_pretrained(tmp_path / "base")
    member_tokenizer(kind).save_pretrained(tmp_path / "base")
    model = bertfn.load(tmp_path / "base", device=DEVICE)
    ids, mask = batch(kind)
    ids = ids[:1, :int(mask[0].sum())]  # the first text without its padding (no mask: nothing to hide)
    with torch.no_grad():
        ours = bertfn.encoder(model, ids).last_hidden_state
        again = on_device(getattr(transformers, type(base).__name__).from_pretrained(tmp_path / "base"))
        theirs = again(input_ids=ids).last_hidden_state
    torch.testing.assert_close(ours, theirs, atol=TOL, rtol=0)
    assert "MLM head" not in repr(model)


def test_configs_bertfn_cannot_read_are_refused_in_one_line():
    from bertfn.model.config import BertConfig

    with pytest.raises(bertfn.ConfigError, match="position_embedding_type 'relative_key' is not one bertfn reads "
                                                 "for model_type 'esm'"):  # ESM-1b's "absolute" is read: test_esm_learned
        BertConfig.from_dict({"model_type": "esm", "position_embedding_type": "relative_key"})
    with pytest.raises(bertfn.ConfigError, match="rope_scaling"):
        BertConfig.from_dict({"model_type": "modernbert", "rope_scaling": {"rope_type": "linear", "factor": 2.0}})
    with pytest.raises(bertfn.ConfigError, match="token_dropout is true but mask_token_id is null"):
        BertConfig.from_dict({"model_type": "esm", "token_dropout": True, "mask_token_id": None})
    cfg = BertConfig.from_dict({"model_type": "modernbert", "hidden_activation": "gelu", "norm_eps": 1e-6,
                                "mlp_dropout": 0.1, "attention_dropout": 0.2})
    assert (cfg.hidden_act, cfg.layer_norm_eps, cfg.hidden_dropout_prob, cfg.attention_probs_dropout_prob) == \
        ("gelu", 1e-6, 0.1, 0.2)


def test_pruning_esm_heads_equals_transformers_and_modernbert_says_why_not(esm, modernbert, tmp_path):
    import copy

    kind, hf, model, _ = esm
    hf = copy.deepcopy(hf)
    hf.prune_heads({0: [1, 3], 1: [0]})
    pruned = bertfn.prune_heads(model, {0: [1, 3], 1: [0]})
    ids, mask = batch(kind)
    row = ids[:1, mask[0].bool()]  # unpadded: transformers 4.57 is right there
    with torch.no_grad():
        ours = bertfn.mlm_head(pruned, bertfn.encoder(pruned, row).last_hidden_state)
        torch.testing.assert_close(ours, hf(input_ids=row).logits, atol=TOL, rtol=0)
    with pytest.raises(bertfn.InputError, match="ModernBERT forms its queries, keys and values in one fused product"):
        bertfn.prune_heads(modernbert[2], {1: [0]})


@pytest.mark.parametrize("kind", kind_params(MODERN, quick=MODERN))
def test_a_new_model_from_the_config_counts_and_draws_as_transformers(kind):
    """init_model and parameter_count read the member's table: as many parameters as transformers' masked LM of
    the same config, under its key names, and the pass runs."""
    import transformers
    from family_checkpoints import member_config

    from bertfn.model.config import BertConfig

    V = len(member_tokenizer(kind))
    hf_config = member_config(kind, V)
    hf = getattr(transformers, MODEL_CLASSES[kind])(hf_config)
    config = BertConfig.from_dict(hf_config.to_dict())
    counts = bertfn.parameter_count(config, parts=("mlm",))
    assert counts["total"] == sum(p.numel() for k, p in hf.named_parameters() if "contact_head" not in k)
    model = bertfn.init_model(config, parts=("mlm",))
    assert set(model.state) <= set(hf.state_dict()) and member_name(model.config) in repr(model)
    ids = torch.randint(4, 30, (2, 12))
    with torch.no_grad():
        assert bertfn.mlm_head(model, bertfn.encoder(model, ids).last_hidden_state).shape == (2, 12, V)


@pytest.mark.parametrize("kinds", [pytest.param(("modernbert", "esm"), id="rotary"),
                                   pytest.param(("esm1b",), id="esm1b", marks=pytest.mark.slow)])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), heads=st.integers(1, 4), half_head=st.integers(1, 5), layers=st.integers(1, 4),
       intermediate=st.integers(5, 40), window=st.integers(1, 12), every=st.integers(1, 3), biases=st.booleans(),
       local_base=st.sampled_from([10000.0, None]), seed=st.integers(0, 2**16), act=st.sampled_from(["gelu", "silu"]))
def test_any_config_equals_transformers(tmp_path_factory, kinds, data, heads, half_head, layers, intermediate, window,
                                        every, biases, local_base, seed, act):
    """Hypothesis over sizes (even head widths, as rotary needs), ModernBERT's window, its global period, its rotary
    bases and its biases (all on or all off), ESM-2 and ESM-1b with and without token dropout: the logits equal
    transformers' on each text of a padded batch."""
    import transformers
    from family_checkpoints import member_config

    kind = data.draw(st.sampled_from(kinds), label="kind")

    H = heads * 2 * half_head
    sizes = dict(num_attention_heads=heads, hidden_size=H, num_hidden_layers=layers, intermediate_size=intermediate)
    if kind == "modernbert":
        sizes.update(local_attention=window, global_attn_every_n_layers=every, local_rope_theta=local_base,
                     attention_bias=biases, mlp_bias=biases, norm_bias=biases, classifier_bias=biases,
                     decoder_bias=biases, hidden_activation=act, classifier_activation=act)
    else:
        sizes.update(token_dropout=biases)
    config = member_config(kind, len(member_tokenizer(kind)), **sizes)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    hf = getattr(transformers, MODEL_CLASSES[kind])(config).eval()
    folder = tmp_path_factory.mktemp("drawn")
    hf.save_pretrained(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no tokenizer in the folder: ids only
        model = bertfn.load(folder, device=DEVICE)
    hf = on_device(hf)
    ids, mask = batch(kind)
    with torch.no_grad():
        ours = bertfn.mlm_head(model, bertfn.encoder(model, ids, mask).last_hidden_state)
        for i in range(len(ids)):  # each text alone: transformers 4.57's token dropout is right there
            row = ids[i][mask[i].bool()][None]
            torch.testing.assert_close(ours[i][mask[i].bool()], hf(input_ids=row).logits[0], atol=TOL, rtol=0)
