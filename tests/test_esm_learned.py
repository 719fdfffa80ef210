"""ESM with learned positions (ESM-1b; the nucleotide transformers v1), held to transformers 4.57's ``EsmForMaskedLM``.

A small random ESM-1b (tests/family_checkpoints.py's ESM with ``position_embedding_type`` "absolute",
``emb_layer_norm_before`` true, token dropout on and off, 66 positions: 64 tokens from ``padding_idx + 1``) gives
every layer's hidden states, attention probabilities and the logits of transformers' eager model within 1e-5 in fp32,
on padded batches (right and left), as its contact maps, masked marginals and fill_mask do. As in
tests/test_family_modern.py, the oracle of a padded batch is transformers with its embeddings given the attention mask
(transformers 4.57's ``EsmModel.forward`` does not pass it, so its token dropout counts the masks over the padded
length: huggingface/transformers#44163); without token dropout the real tokens' numbers are the same either way.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from family_checkpoints import PROTEINS, member_tokenizer, save_member
from test_family_modern import esm_oracle

import bertfn
from bertfn.errors import IgnoredConfigWarning
from bertfn.model.config import BertConfig
from bertfn.model.family import longest_input
from bertfn.model.point_names import point_names

pytestmark = pytest.mark.needs_transformers

TOL = 1e-5
POSITIONS = 66  # 64 tokens: positions 2 .. 65
TEXTS = ["MKTAYIAKQRQISFVKSHFSRQ", "EVQLVESGG<mask>LVQPGRSLRLSCAASGFTFDDYAMH", "QVQL<mask>QSGAE<mask>KKPGA"]
ESM1B = {"position_embedding_type": "absolute", "emb_layer_norm_before": True, "max_position_embeddings": POSITIONS,
         "initializer_range": 0.2}


@pytest.fixture(scope="module", params=[True, False], ids=["token_dropout", "no_token_dropout"])
def esm1b(request, tmp_path_factory):
    """(transformers model, bertfn model, folder) of a random ESM-1b, token dropout on or off."""
    folder = tmp_path_factory.mktemp("esm1b")
    hf = save_member("esm", folder, token_dropout=request.param, **ESM1B)
    return hf, bertfn.load(folder), folder


def batch(texts: list[str], side: str = "right"):
    tok = member_tokenizer("esm")
    tok.padding_side = side
    try:
        enc = tok(texts, padding=True, return_tensors="pt")
    finally:
        tok.padding_side = "right"
    return enc["input_ids"], enc["attention_mask"]


def reference(hf, ids, mask):
    """transformers' hidden states (embeddings and each layer, before the final norm), last state, attentions,
    logits, with the embeddings given the mask (:func:`test_family_modern.esm_oracle`)."""
    restore = esm_oracle(hf, mask)
    try:
        with torch.no_grad():
            out = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
            last = hf.esm(input_ids=ids, attention_mask=mask).last_hidden_state
    finally:
        hf.esm.embeddings.forward = restore
    return out.hidden_states[:hf.config.num_hidden_layers], last, out.attentions, out.logits


def test_the_checkpoint_is_esm1b(esm1b):
    _, model, _ = esm1b
    assert "esm.embeddings.position_embeddings.weight" in model.state
    assert "esm.embeddings.layer_norm.weight" in model.state
    assert not any("rotary" in k for k in model.state)
    assert model.config.position_embedding_type == "absolute" and model.config.emb_layer_norm_before
    assert longest_input(model.config) == POSITIONS - 2


@pytest.mark.parametrize("side", ["right", "left"])
def test_every_layer_and_the_logits_equal_transformers_on_a_padded_batch(esm1b, side):
    hf, model, _ = esm1b
    ids, mask = batch(TEXTS, side)
    layers, last, attentions, logits = reference(hf, ids, mask)
    with torch.no_grad():
        out = bertfn.encoder(model, ids, mask, impl="eager", output_hidden_states=True, output_attentions=True)
        ours = bertfn.mlm_head(model, out.last_hidden_state)
    real = mask.bool()
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    for a, b in zip(out.hidden_states, layers, strict=False):
        torch.testing.assert_close(a[real], b[real], atol=TOL, rtol=0)
    torch.testing.assert_close(out.last_hidden_state[real], last[real], atol=TOL, rtol=0)
    for a, b in zip(out.attentions, attentions, strict=True):  # the real queries' rows
        torch.testing.assert_close(a.transpose(1, 2)[real], b.transpose(1, 2)[real], atol=TOL, rtol=0)
    torch.testing.assert_close(ours[real], logits[real], atol=TOL, rtol=0)


def test_without_token_dropout_transformers_unpatched_agrees(esm1b):
    """Token dropout off, transformers 4.57 as it is (no mask to its embeddings) gives the real tokens' numbers."""
    hf, model, _ = esm1b
    if hf.config.token_dropout:
        pytest.skip("token dropout counts the masks over the padded length in transformers 4.57")
    for side in ("right", "left"):
        ids, mask = batch(TEXTS, side)
        with torch.no_grad():
            theirs = hf(input_ids=ids, attention_mask=mask).logits
            ours = bertfn.mlm_head(model, bertfn.encoder(model, ids, mask).last_hidden_state)
        torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], atol=TOL, rtol=0)


def test_positions_count_from_padding_idx_plus_one(esm1b):
    """Left padding keeps each text's positions (padding_idx + 1 onward over its real tokens): its row equals
    the text alone, and the position table's rows are what transformers reads."""
    hf, model, _ = esm1b
    ids, mask = batch(TEXTS, "left")
    with torch.no_grad():
        padded = bertfn.encoder(model, ids, mask).last_hidden_state
        for i in range(len(ids)):
            row = ids[i][mask[i].bool()][None]
            alone = bertfn.encoder(model, row).last_hidden_state[0]
            torch.testing.assert_close(padded[i][mask[i].bool()], alone, atol=TOL, rtol=0)
            if not hf.config.token_dropout or not (row == model.config.mask_token_id).any():
                theirs = hf.esm(input_ids=row).last_hidden_state[0]
                torch.testing.assert_close(alone, theirs, atol=TOL, rtol=0)


def test_the_sdpa_and_fast_paths_equal_the_reference(esm1b):
    from bertfn.fast.batching import end_to_end
    from conftest import ends

    _, model, _ = esm1b
    ids, mask = batch(TEXTS)
    with torch.no_grad():
        eager = bertfn.encoder(model, ids, mask, impl="eager").last_hidden_state
        sdpa = bertfn.encoder(model, ids, mask, impl="sdpa")
        assert sdpa.attn_impl == "sdpa"
        torch.testing.assert_close(sdpa.last_hidden_state[mask.bool()], eager[mask.bool()], atol=TOL, rtol=0)
        enc = model.tokenizer(TEXTS)
        lengths = enc.attention_mask.sum(dim=1).tolist()
        inputs = end_to_end(enc, [0, 1, 2], lengths)
        fast = ends(model.params, *inputs, lengths)
    torch.testing.assert_close(fast[0], eager[mask.bool()], atol=TOL, rtol=0)


def test_the_trace_names_the_position_and_no_rotation(esm1b):
    _, model, _ = esm1b
    names = point_names(model.config)
    assert "embeddings.position" in names and not any("rotated" in n for n in names)
    assert ("embeddings.token_dropout" in names) == model.config.token_dropout
    rec = bertfn.trace(TEXTS[1], model)
    recorded = rec.keys()
    assert [n for n in recorded if n.startswith("embeddings.")] == [n for n in names if n.startswith("embeddings.")]


def test_fill_mask_equals_the_pipeline(esm1b):
    import transformers

    hf, model, _ = esm1b
    pipe = transformers.pipeline("fill-mask", model=hf, tokenizer=member_tokenizer("esm"))
    for text in TEXTS[1:]:
        theirs = pipe(text, top_k=5)
        ours = bertfn.fill_mask(text, model, top_k=5)
        theirs = theirs if isinstance(theirs[0], list) else [theirs]
        ours = ours if isinstance(ours[0], list) else [ours]
        for a, b in zip(ours, theirs, strict=True):
            assert [r["token"] for r in a] == [r["token"] for r in b]
            torch.testing.assert_close(torch.tensor([r["score"] for r in a]), torch.tensor([r["score"] for r in b]),
                                       atol=1e-5, rtol=0)


def test_masked_marginals_and_score_equal_transformers(esm1b):
    hf, model, _ = esm1b
    tok = member_tokenizer("esm")
    text = PROTEINS[0][: POSITIONS - 2 - 2]  # the longest text the positions hold (62 residues + <cls>, <eos>)
    ids = tok([text], return_tensors="pt")["input_ids"]
    n = ids.shape[1]
    assert n <= longest_input(model.config)
    copies = ids.repeat(n - 2, 1)
    for j in range(1, n - 1):
        copies[j - 1, j] = tok.mask_token_id
    with torch.no_grad():
        lp = torch.log_softmax(hf(input_ids=copies).logits, dim=-1)
    expected = sum(lp[j - 1, j, ids[0, j]].item() for j in range(1, n - 1))
    got = bertfn.score(text, model)
    assert abs(got["pll"] - expected) < 1e-4
    variant = text[:3] + ("A" if text[3] != "A" else "G") + text[4:]
    j = 4  # the changed residue's token (after <cls>)
    masked = ids.clone()
    masked[0, j] = tok.mask_token_id
    with torch.no_grad():
        lp = torch.log_softmax(hf(input_ids=masked).logits[0, j], dim=-1)
    marginal = (lp[tok.convert_tokens_to_ids(variant[3])] - lp[ids[0, j]]).item()
    got = bertfn.score_mutations([variant], model, reference=text)
    got = got[0] if isinstance(got, list) else got
    assert abs(got["score"] - marginal) < 1e-5


def test_inputs_longer_than_the_positions_are_refused_or_windowed(esm1b):
    """64 tokens fit (positions 2 .. 65); 65 do not: score and fill_mask refuse them in a sentence, and fill_mask's
    truncation cuts a window of 64 tokens."""
    _, model, _ = esm1b
    limit = longest_input(model.config)
    too_long = PROTEINS[0] * 4
    too_long = too_long[: limit - 1]  # limit - 1 residues + <cls> + <eos> = limit + 1 tokens
    with pytest.raises(bertfn.InputError):
        bertfn.score(too_long, model)
    masked = too_long[:30] + "<mask>" + too_long[31:]
    with pytest.raises(bertfn.InputError):
        bertfn.fill_mask(masked, model)
    top = bertfn.fill_mask(masked, model, top_k=1, truncation=True)
    window = model.tokenizer([top[0]["sequence"]]).input_ids
    assert window.shape[1] == limit  # the window fills the positions: <cls>, 62 residues, <eos>
    ids = model.tokenizer([too_long]).input_ids
    with pytest.raises(bertfn.InputError, match="positions"):
        bertfn.encoder(model, ids)


def test_contacts_equal_predict_contacts(esm1b):
    hf, model, _ = esm1b
    proteins = [p[:40] for p in PROTEINS[:4]]
    got = bertfn.contacts(proteins, model)
    enc = member_tokenizer("esm")(proteins, padding=True, return_tensors="pt")
    restore = esm_oracle(hf, enc["attention_mask"])
    try:
        with torch.no_grad():
            theirs = hf.predict_contacts(enc["input_ids"], enc["attention_mask"])
    finally:
        hf.esm.embeddings.forward = restore
    for i, protein in enumerate(proteins):
        r = len(protein)
        torch.testing.assert_close(got[i], theirs[i, :r, :r], atol=1e-5, rtol=1e-5)


def test_the_feed_forward_is_exact_gelu_whatever_hidden_act_says(tmp_path):
    """transformers' EsmIntermediate applies ESM's erf GELU and never reads hidden_act: bertfn warns and agrees."""
    with pytest.warns(IgnoredConfigWarning, match="hidden_act is 'relu'"):
        config = BertConfig.from_dict({"model_type": "esm", "hidden_act": "relu"})
    assert config.hidden_act == "gelu"
    with warnings.catch_warnings():
        warnings.simplefilter("error", IgnoredConfigWarning)
        BertConfig.from_dict({"model_type": "esm", "hidden_act": "gelu"})  # no warning
    hf = save_member("esm", tmp_path, hidden_act="relu", **ESM1B)
    with pytest.warns(IgnoredConfigWarning):
        model = bertfn.load(tmp_path)
    ids, mask = batch(TEXTS)
    with torch.no_grad():
        theirs = reference(hf, ids, mask)[3]
        ours = bertfn.mlm_head(model, bertfn.encoder(model, ids, mask).last_hidden_state)
    torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], atol=TOL, rtol=0)


def test_saved_and_reloaded_it_is_the_same_model(esm1b, tmp_path):
    import transformers

    hf, model, _ = esm1b
    bertfn.save(model, tmp_path)
    again = transformers.EsmForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    ids, _ = batch(TEXTS[:1])
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).logits, hf(input_ids=ids).logits, atol=0, rtol=0)
