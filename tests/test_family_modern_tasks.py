"""Everything bertfn does, on ModernBERT and ESM-2, through the same calls as on BERT (issue 38).

Each member (tests/family_checkpoints.py: random weights, ModernBERT's byte-level BPE with [MASK], ESM-2's
one-residue-a-token vocabulary with <mask>) against transformers or a direct computation: fill-mask (padded
batches, several masks, joint filling), the PLL, the mutation effects of ESM-2 (masked marginals, wild-type
marginals, PLL change), embed's poolings, trace (every point, the rotary and gated points by hand, a list of
texts), edits against transformers' head mask or a hook, the interventions (patch, sweep, ablation, logit
attribution, gradients, path patching), the CLI and corpus files.

transformers 4.57's ``EsmModel`` does not pass the attention mask to its embeddings, so in a padded batch its
token dropout divides a text's mask count by the padded length (fixed upstream, huggingface/transformers PR
44163); :func:`hf_forward` gives the embeddings the mask, as fair-esm and bertfn count.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
from family_checkpoints import ESM_KINDS, MODERN, PROTEINS, kind_params, member_tokenizer, save_member

import bertfn
from bertfn import interventions as iv
from bertfn.cli import main
from bertfn.model.point_names import point_names
from bertfn.model.members.rotary import rotary_tables, rotate

pytestmark = pytest.mark.needs_transformers

TEXTS = {
    "modernbert": ["The capital of France is [MASK].",  # local layers: a window of 8 is shorter than these texts
                   "When in Rome, do as the [MASK] do, and the cat sat on the [MASK] with the dog.",
                   "The [MASK] sat."],
    "esm": [PROTEINS[3][:9] + "<mask>" + PROTEINS[3][10:],
            PROTEINS[0][:12] + "<mask>" + PROTEINS[0][13:30] + "<mask>" + PROTEINS[0][31:48],
            PROTEINS[5][:4] + "<mask>" + PROTEINS[5][5:14]],
}
TEXTS["esm1b"] = TEXTS["esm"]
"""Per kind: three texts of different lengths (a padded batch), one mask each but two in the second."""


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """``kind -> (kind, transformers model, its tokenizer, bertfn model, folder)``, each built once, when first asked."""
    built = {}

    def get(kind: str) -> tuple:
        if kind not in built:
            folder = tmp_path_factory.mktemp(kind)
            hf = save_member(kind, folder)
            built[kind] = kind, hf, member_tokenizer(kind), bertfn.load(folder), folder
        return built[kind]

    return get


@pytest.fixture(params=kind_params(MODERN, quick=MODERN))  # ESM-1b in the slow run
def member(request, checkpoints):
    return checkpoints(request.param)


def hf_forward(kind: str, hf, enc: dict, **kwargs):
    """transformers' model (masked LM or base) on ``enc`` (a padded batch); ESM's embeddings given the attention
    mask, so that token dropout counts each text's real tokens (what transformers 4.57 leaves out, module docstring)."""
    if kind not in ESM_KINDS:
        return hf(**enc, **kwargs)
    embeddings = getattr(hf, "esm", hf).embeddings
    forward = embeddings.forward
    embeddings.forward = lambda input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None: forward(
        input_ids=input_ids, attention_mask=enc["attention_mask"], position_ids=position_ids, inputs_embeds=inputs_embeds)
    try:
        return hf(**enc, **kwargs)
    finally:
        del embeddings.forward  # the class's own again


def mask_positions(tok, ids: torch.Tensor) -> list[int]:
    return (ids == tok.mask_token_id).nonzero()[:, 0].tolist()


def modules(kind: str, hf, i: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Layer i's output projection of attention (its input: the heads' contexts side by side) and of the
    feed-forward (its input: the I neurons), in the transformers model."""
    if kind == "modernbert":
        return hf.model.layers[i].attn.Wo, hf.model.layers[i].mlp.Wo
    return hf.esm.encoder.layer[i].attention.output.dense, hf.esm.encoder.layer[i].output.dense


def replacing_input(module: torch.nn.Module, columns: slice, value):
    """A forward pre-hook on ``module`` that sets ``columns`` of its input to ``value``; returns its handle."""
    def hook(_, args):
        x = args[0].clone()
        x[..., columns] = value
        return (x,)

    return module.register_forward_pre_hook(hook)


def masked_log_probs(hf, tok, ids: torch.Tensor, hidden: list[list[int]]) -> torch.Tensor:
    """transformers' log-softmax for copies of ``ids`` (S,), copy c with the positions ``hidden[c]`` masked:
    (C, S, V). The copies are one unpadded batch (where transformers 4.57's ESM is right)."""
    copies = ids.repeat(len(hidden), 1)
    for c, js in enumerate(hidden):
        copies[c, js] = tok.mask_token_id
    with torch.no_grad():
        return hf(input_ids=copies).logits.log_softmax(-1)


# --- 1. fill-mask ----------------------------------------------------------------------------------------------


def test_fill_mask_equals_transformers_softmax_at_every_mask(member):
    """A padded batch of three texts (one with two masks): the top-5 tokens and scores at each mask equal the
    softmax of transformers' logits there; each text alone gives what it gets in the batch; single-mask answers
    read as the pipeline shows them (token_str, sequence)."""
    import transformers

    kind, hf, tok, model, _ = member
    texts = TEXTS[kind]
    ours = bertfn.fill_mask(texts, model, top_k=5)
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        probs = hf_forward(kind, hf, enc).logits.softmax(-1)  # (3, S, V)
    worst = 0.0
    for i, text in enumerate(texts):
        where = mask_positions(tok, enc["input_ids"][i])
        answers = ours[i] if len(where) > 1 else [ours[i]]
        assert len(answers) == len(where)
        for j, answer in zip(where, answers):
            scores, ids = probs[i, j].topk(5)
            assert [a["token"] for a in answer] == ids.tolist()
            worst = max(worst, max(abs(a["score"] - s) for a, s in zip(answer, scores.tolist())))
        alone = bertfn.fill_mask(text, model, top_k=5)
        for a, b in zip(alone if len(where) > 1 else [alone], answers):  # ESM: token dropout counts real tokens
            assert [x["token"] for x in a] == [x["token"] for x in b]
            assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-6)
    assert worst < 1e-6
    pipe = transformers.pipeline("fill-mask", model=hf, tokenizer=tok, top_k=5)
    theirs = pipe(texts[0])
    assert [(a["token_str"], a["sequence"]) for a in ours[0]] == [(a["token_str"], a["sequence"]) for a in theirs]


def test_joint_fills_are_scored_by_the_pll_of_their_masks(member):
    """Joint filling of the two-mask text: each fill's score is sum_i log P(t_i | the filled text with i alone
    masked), computed here with transformers, and the fills come best first."""
    kind, hf, tok, model, _ = member
    text = TEXTS[kind][1]
    fills = bertfn.fill_mask(text, model, joint=True, top_k=2)
    ids = tok(text, return_tensors="pt")["input_ids"][0]
    where = mask_positions(tok, ids)
    assert len(fills) == 2 and [len(f["tokens"]) for f in fills] == [2, 2]
    for fill in fills:
        full = ids.clone()
        full[where] = torch.tensor(fill["tokens"])
        logp = masked_log_probs(hf, tok, full, [[j] for j in where])  # one copy per mask, it alone masked
        assert fill["score"] == pytest.approx(math.fsum(float(logp[c, j, full[j]]) for c, j in enumerate(where)), abs=1e-5)
    assert fills[0]["score"] >= fills[1]["score"]


# --- 2. scoring -----------------------------------------------------------------------------------------------


def pll_transformers(hf, tok, text: str, within_word: bool = False) -> float:
    """Salazar et al.'s PLL (each scored token masked alone); ``within_word``: with the later pieces of its word."""
    enc = tok(text, return_special_tokens_mask=True)
    ids, special = torch.tensor(enc["input_ids"]), enc["special_tokens_mask"]
    words = enc.word_ids() if within_word else None
    where = [j for j in range(len(ids)) if not special[j]]
    hidden = [[k for k in where if k >= j and words[k] == words[j]] if within_word else [j] for j in where]
    logp = masked_log_probs(hf, tok, ids, hidden)
    return math.fsum(float(logp[c, j, ids[j]]) for c, j in enumerate(where))


def test_pll_equals_one_computed_with_transformers(member):
    kind, hf, tok, model, _ = member
    texts = ["When in Rome, do as the Romans do.", "The cat sat on the mat."] if kind == "modernbert" else \
        [PROTEINS[5], PROTEINS[3]]
    for text, ours in zip(texts, bertfn.score(texts, model)):
        assert ours["pll"] == pytest.approx(pll_transformers(hf, tok, text), abs=1e-4)
        assert ours["num_tokens"] == len(tok(text, add_special_tokens=False)["input_ids"])
    within = bertfn.score(texts, model, method="within_word_l2r")
    if kind == "modernbert":  # words of several BPE pieces
        for text, ours in zip(texts, within):
            assert ours["pll"] == pytest.approx(pll_transformers(hf, tok, text, within_word=True), abs=1e-4)
    else:  # a residue is a word: the two PLLs agree
        assert [r["pll"] for r in within] == pytest.approx([r["pll"] for r in bertfn.score(texts, model)], abs=1e-6)


@pytest.mark.parametrize("kind", kind_params(ESM_KINDS, quick=ESM_KINDS))
def test_mutation_effects_of_esm_equal_meier_et_al_by_transformers(checkpoints, kind):
    """score_mutations on ESM-2 and ESM-1b (Meier et al. 2021): the masked marginal (each changed position masked in the
    reference), the wild-type marginal (the reference unmasked, one pass) and the PLL change, each computed here
    with transformers; substitution_matrix's rows are transformers' masked log-softmax."""
    _, hf, tok, model, _ = checkpoints(kind)
    reference = PROTEINS[3]
    variants = [reference[:4] + "W" + reference[5:], reference[:2] + "K" + reference[3:20] + "A" + reference[21:]]
    ids = torch.tensor(tok(reference)["input_ids"])
    L = len(reference)
    masked = masked_log_probs(hf, tok, ids, [[j + 1] for j in range(L)])  # (L, S, V): residue j is token j + 1
    rows = masked[torch.arange(L), torch.arange(1, L + 1)]  # (L, V)
    subs = bertfn.substitution_matrix(reference, model)
    torch.testing.assert_close(subs.log_probs, rows, atol=1e-5, rtol=0)
    with torch.no_grad():
        wild = hf(input_ids=ids[None]).logits[0].log_softmax(-1)  # (S, V)
    for method in ("masked_marginal", "wt_marginal", "pll"):
        for variant, ours in zip(variants, bertfn.score_mutations(variants, model, reference=reference, method=method)):
            changed = [j for j in range(L) if variant[j] != reference[j]]
            new, old = ([tok.convert_tokens_to_ids(s[j]) for j in changed] for s in (variant, reference))
            assert [m["code"] for m in ours["mutations"]] == [f"{reference[j]}{j + 1}{variant[j]}" for j in changed]
            marginals = rows if method != "wt_marginal" else wild[1:L + 1]
            deltas = [float(marginals[j, a] - marginals[j, b]) for j, a, b in zip(changed, new, old)]
            assert [m["delta"] for m in ours["mutations"]] == pytest.approx(deltas, abs=1e-5)
            expected = pll_transformers(hf, tok, variant) - pll_transformers(hf, tok, reference) if method == "pll" \
                else math.fsum(deltas)
            assert ours["score"] == pytest.approx(expected, abs=1e-4)


# --- 3. embed -------------------------------------------------------------------------------------------------


def test_embed_pools_transformers_last_hidden_state(member):
    """mean, cls and max pooling of the padded batch equal the same pooling of transformers' last_hidden_state
    (after the final LayerNorm: ModernBERT's final_norm, ESM's emb_layer_norm_after)."""
    kind, hf, tok, model, _ = member
    texts = [t.replace(tok.mask_token, "A" if kind in ESM_KINDS else " cat") for t in TEXTS[kind]]
    enc = tok(texts, padding=True, return_tensors="pt")
    base = hf.model if kind == "modernbert" else hf.esm
    with torch.no_grad():
        h = hf_forward(kind, base, enc).last_hidden_state  # (3, S, H)
    keep = enc["attention_mask"][:, :, None].bool()
    expected = {"mean": (h * keep).sum(1) / keep.sum(1), "cls": h[:, 0],
                "max": h.masked_fill(~keep, float("-inf")).max(1).values}
    for pooling, vectors in expected.items():
        torch.testing.assert_close(bertfn.embed(texts, model, pooling=pooling), vectors, atol=1e-5, rtol=0)


# --- 4. trace, edits, interventions ---------------------------------------------------------------------------


def test_trace_records_every_point_as_transformers_computes_it(member):
    """Every point of point_names (but the pooler these models lack) in order; the layers' outputs, attention
    probabilities and final LayerNorm equal transformers'; mlm.logits its logits at the masks."""
    kind, hf, tok, model, _ = member
    cfg = model.config
    text = TEXTS[kind][1]
    rec = bertfn.trace(text, model, head_outputs=True)
    assert rec.keys() == [n for n in point_names(cfg, optional=True) if n != "pooler"]
    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        out = hf(**enc, output_hidden_states=True, output_attentions=True)
        last = (hf.model if kind == "modernbert" else hf.esm)(**enc).last_hidden_state  # after the final LayerNorm
    L = cfg.num_hidden_layers
    for i in range(L if kind == "modernbert" else L - 1):  # ESM's hidden_states[L] is final-normed: last
        torch.testing.assert_close(rec[f"layer.{i}.output"], out.hidden_states[i + 1], atol=1e-5, rtol=0)
    for i in range(L):
        torch.testing.assert_close(rec[f"layer.{i}.attention.probs"], out.attentions[i], atol=1e-6, rtol=0)
    torch.testing.assert_close(rec["final_norm"], last, atol=1e-5, rtol=0)
    torch.testing.assert_close(rec["mlm.logits"], out.logits[0, rec.mask_positions], atol=1e-5, rtol=0)


def test_the_new_points_by_hand(member):
    """q_rotated and k_rotated are q and k turned by bertfn.model.members.rotary at each layer's base; scores are
    q_rotated k_rotated^T; ModernBERT's gate and intermediate are the two halves of Wi's product, GELU(a) * g;
    ESM's token_dropout zeroes the masks' vectors and scales the rest by 0.88 / (1 - masks / tokens);
    ESM-1b turns nothing (its scores are q k^T) and adds its table's rows from padding_idx + 1, then its embeddings'
    LayerNorm; final_norm is the LayerNorm of the last layer's output."""
    kind, hf, tok, model, _ = member
    cfg, p = model.config, model.params
    text = TEXTS[kind][1]
    rec = bertfn.trace(text, model)
    S, nh, hd, H = len(rec.tokens), cfg.num_attention_heads, cfg.head_dim, cfg.hidden_size
    for i in range(cfg.num_hidden_layers):
        if kind == "esm1b":  # learned positions: nothing turned
            assert f"layer.{i}.attention.q_rotated" not in rec and f"layer.{i}.attention.k_rotated" not in rec
            scores = rec[f"layer.{i}.attention.q"] @ rec[f"layer.{i}.attention.k"].transpose(-1, -2)
            torch.testing.assert_close(rec[f"layer.{i}.attention.scores"], scores, atol=1e-6, rtol=0)
            continue
        if kind == "modernbert":
            base = cfg.global_rope_theta if i % cfg.global_attn_every_n_layers == 0 else cfg.local_rope_theta
        else:
            base = 10000.0
        cos, sin = rotary_tables(torch.arange(S), hd, base, torch.float32)
        for qk in ("q", "k"):
            turned = rec[f"layer.{i}.attention.{qk}_rotated"]
            assert turned.shape == (1, nh, S, hd)
            torch.testing.assert_close(turned, rotate(rec[f"layer.{i}.attention.{qk}"], cos, sin), atol=0, rtol=0)
        scores = rec[f"layer.{i}.attention.q_rotated"] @ rec[f"layer.{i}.attention.k_rotated"].transpose(-1, -2)
        torch.testing.assert_close(rec[f"layer.{i}.attention.scores"], scores, atol=1e-6, rtol=0)
    if kind == "modernbert":
        I = cfg.intermediate_size
        for i in range(cfg.num_hidden_layers):
            a, g = (rec[f"layer.{i}.ffn.norm"] @ p.layer(i)["intermediate.dense.weight"].T).chunk(2, dim=-1)
            assert rec[f"layer.{i}.ffn.gate"].shape == (1, S, I)
            torch.testing.assert_close(rec[f"layer.{i}.ffn.gate"], g, atol=1e-6, rtol=0)
            torch.testing.assert_close(rec[f"layer.{i}.ffn.intermediate"], torch.nn.functional.gelu(a) * g,
                                       atol=1e-6, rtol=0)
        assert "layer.0.attention.norm" not in rec and "layer.1.attention.norm" in rec  # layer 0 reads the embeddings
    else:
        word = rec["embeddings.word"]
        masks = torch.tensor([t == "<mask>" for t in rec.tokens])
        expected = word.masked_fill(masks[None, :, None], 0.0) * 0.88 / (1 - int(masks.sum()) / S)
        assert rec["embeddings.token_dropout"].shape == (1, S, H)
        torch.testing.assert_close(rec["embeddings.token_dropout"], expected, atol=1e-6, rtol=0)
        if kind == "esm1b":  # the table's rows padding_idx + 1 .. padding_idx + S, then the LayerNorm
            emb, first = p.scope("bert.embeddings"), cfg.pad_token_id + 1
            rows = emb["position_embeddings.weight"][first:first + S]  # (S, H)
            torch.testing.assert_close(rec["embeddings.position"][0], rows, atol=0, rtol=0)
            torch.testing.assert_close(rec["embeddings.output"], torch.nn.functional.layer_norm(
                expected + rec["embeddings.position"], (H,), emb["LayerNorm.weight"], emb["LayerNorm.bias"],
                cfg.layer_norm_eps), atol=1e-6, rtol=0)
    final = p.scope("bert.encoder.final_norm")
    last = rec[f"layer.{cfg.num_hidden_layers - 1}.output"]
    torch.testing.assert_close(rec["final_norm"], torch.nn.functional.layer_norm(
        last, (H,), final["weight"], final.get("bias"), cfg.layer_norm_eps), atol=1e-6, rtol=0)


def test_a_list_traced_as_one_padded_batch_equals_each_text_alone(member):
    kind, hf, tok, model, _ = member
    recs = bertfn.trace(TEXTS[kind], model)
    assert len(recs) == 3 and recs["layer.0.attention.probs"].shape[0] == 3
    for i, text in enumerate(TEXTS[kind]):
        alone = bertfn.trace(text, model)
        assert recs[i].keys() == alone.keys()
        for name in alone.keys():
            torch.testing.assert_close(recs[i][name], alone[name], atol=1e-5, rtol=0, msg=f"{kind} text {i} {name}")


def test_ablations_equal_transformers_with_a_head_mask_or_a_hook(member):
    """Zeroing head 0 of every layer (ESM: transformers' head_mask; ModernBERT, which has none: a hook zeroing that
    head's columns of attn.Wo's input), mean-ablating head 1 and zeroing neurons (hooks on the output projections'
    inputs) move the MLM logits at the mask as in transformers."""
    kind, hf, tok, model, _ = member
    cfg = model.config
    L, nh, hd = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.head_dim
    text = TEXTS[kind][0]
    enc = tok(text, return_tensors="pt")
    j = mask_positions(tok, enc["input_ids"][0])

    def theirs(hooks: list, **kwargs) -> torch.Tensor:
        try:
            with torch.no_grad():
                return hf(**enc, **kwargs).logits[0, j]
        finally:
            for handle in hooks:
                handle.remove()

    def ours(edits) -> torch.Tensor:
        return bertfn.trace(text, model, edits=edits)["mlm.logits"]

    zero = iv.zero_heads({i: [0] for i in range(L)})
    if kind in ESM_KINDS:
        head_mask = torch.ones(L, nh)
        head_mask[:, 0] = 0
        zeroed = theirs([], head_mask=head_mask)
    else:
        zeroed = theirs([replacing_input(modules(kind, hf, i)[0], slice(0, hd), 0.0) for i in range(L)])
    means = iv.head_means(TEXTS[kind], model)  # (L, nh, hd)
    assert means.shape == (L, nh, hd)
    cases = [(zero, zeroed),
             (iv.mean_heads({i: [1] for i in range(L)}, means),
              theirs([replacing_input(modules(kind, hf, i)[0], slice(hd, 2 * hd), means[i, 1]) for i in range(L)])),
             (iv.zero_neurons({i: range(5) for i in range(L)}),
              theirs([replacing_input(modules(kind, hf, i)[1], slice(0, 5), 0.0) for i in range(L)]))]
    unedited = ours(None)
    for edits, expected in cases:
        edited = ours(edits)
        torch.testing.assert_close(edited, expected, atol=1e-6, rtol=0)
        assert (edited - unedited).abs().max() > 1e-5  # the edit moves the logits (random weights: a little)
    filled = bertfn.fill_mask(text, model, top_k=3, edits=zero)  # fill-mask's padded path with the edits
    scores, ids = zeroed[0].softmax(-1).topk(3)
    assert [a["token"] for a in filled] == ids.tolist()
    assert [a["score"] for a in filled] == pytest.approx(scores.tolist(), abs=1e-6)


def pair(kind: str) -> tuple[str, str]:
    """A clean and a corrupted text of as many tokens, each with one mask."""
    if kind in ESM_KINDS:
        clean = TEXTS[kind][0]
        return clean, "W" + clean[1:]
    return "When in Rome, do as the [MASK] do.", "When in the, do as the [MASK] do."  # 14 tokens each


def test_sweeps_are_the_runs_patched_at_each_slice(member):
    """interventions.sweep over heads (of the contexts, metric: a logit difference at the mask), over positions (of
    the layers' outputs, metric: the final LayerNorm's output) and over heads of the rotated queries (ESM-1b's
    queries, which it does not turn; metric: the scores they make): each value is the metric of the corrupted run
    with that one slice patched from the clean run (interventions.patch through bertfn.trace), in the first layers
    (ModernBERT: a global and a local one) and the last (where a sweep with a metric of the MLM head runs the copies
    patched there at the masks alone)."""
    kind, hf, tok, model, _ = member
    clean, corrupted = pair(kind)
    clean_rec = bertfn.trace(clean, model)
    L, nh = model.config.num_hidden_layers, model.config.num_attention_heads
    j = int((clean_rec.input_ids != bertfn.trace(corrupted, model).input_ids).nonzero()[0, 1])  # where they differ
    logits = iv.logit_difference(5, 6)

    def final(run):
        return run["final_norm"][0, j, 0]

    def scores(run):
        return run[f"layer.{L - 1}.attention.scores"][0, 2, j].sum()

    heads = iv.sweep(clean, corrupted, model, logits, over="heads", progress=False)
    positions = iv.sweep(clean, corrupted, model, final, over="positions", progress=False)
    query = "q" if kind == "esm1b" else "q_rotated"  # the queries the scores are made of
    turned = iv.sweep(clean, corrupted, model, scores, over="heads", name="layer.{i}.attention." + query,
                      progress=False)
    assert heads.values.shape == turned.values.shape == (L, nh)
    assert positions.values.shape == (L, len(clean_rec.tokens))
    for i, h, k in ((0, nh - 1, j), (1, 0, j + 1), (L - 1, 1, j)):
        edited = bertfn.trace(corrupted, model, edits=iv.patch(clean_rec, f"layer.{i}.attention.context", heads=h))
        assert heads.values[i, h].item() == pytest.approx(logits(edited).item(), abs=1e-6)
        edited = bertfn.trace(corrupted, model, edits=iv.patch(clean_rec, f"layer.{i}.output", positions=k))
        assert positions.values[i, k].item() == pytest.approx(final(edited).item(), abs=1e-6)
    edited = bertfn.trace(corrupted, model, edits=iv.patch(clean_rec, f"layer.{L - 1}.attention.{query}", heads=2))
    assert turned.values[L - 1, 2].item() == pytest.approx(scores(edited).item(), abs=1e-5)
    assert abs(positions.values[L - 1, j].item() - positions.corrupted) > 1e-2  # the patches move the metrics
    assert abs(turned.values[L - 1, 2].item() - turned.corrupted) > 1e-3


def test_logit_attribution_parts_sum_to_the_logits(member):
    """Pre-LN: each head's, bias's and feed-forward's write goes straight into the residual stream; with the final
    norm's sigma and the head frozen, the parts sum to the logits, which equal transformers'."""
    kind, hf, tok, model, _ = member
    text = TEXTS[kind][0]
    tokens = [5, 6, 7]
    la = iv.logit_attribution(text, model, tokens)
    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        theirs = hf(**enc).logits[0, mask_positions(tok, enc["input_ids"][0])[0], tokens].double()
    torch.testing.assert_close(la.logits, theirs, atol=1e-5, rtol=0)
    torch.testing.assert_close(la.total, la.logits, atol=1e-5, rtol=0)
    L, nh = model.config.num_hidden_layers, model.config.num_attention_heads
    assert la.heads.shape == (L, nh, 3) and la.ffn.shape == (L, 3)
    rec = bertfn.trace(text, model, head_outputs=True)
    parts = iv.hidden_contributions(rec, la.position)
    torch.testing.assert_close(parts.total, rec["final_norm"][0, la.position].double(), atol=1e-5, rtol=0)


def test_gradients_equal_transformers_autograd_and_path_patching_is_its_three_runs(member):
    """d logit / d layer 0's output and / d the final LayerNorm's output equal transformers' autograd; path_patch
    equals its runs made by hand: the sender's clean writes with the heads above frozen (run 2), then the corrupted
    run with the receiver (the last layer's output; one head's rotated queries, ESM-1b's queries) patched from run 2."""
    kind, hf, tok, model, _ = member
    text = TEXTS[kind][0]
    enc = tok(text, return_tensors="pt")
    j = mask_positions(tok, enc["input_ids"][0])[0]

    def logit(run):
        return run["mlm.logits"][0, 5]

    g = iv.gradients(text, model, logit, ["layer.0.output", "final_norm"])
    base = hf.model if kind == "modernbert" else hf.esm
    out = base(**enc, output_hidden_states=True)
    last = out.last_hidden_state  # after the final LayerNorm, what the head reads
    theirs = (hf.decoder(hf.head(last)) if kind == "modernbert" else hf.lm_head(last))[0, j, 5]
    assert g.value == pytest.approx(theirs.item(), abs=1e-5)
    for name, h in (("layer.0.output", out.hidden_states[1]), ("final_norm", last)):
        (grad,) = torch.autograd.grad(theirs, h, retain_graph=True)
        torch.testing.assert_close(g.grads[name], grad, atol=1e-6, rtol=0)

    clean, corrupted = pair(kind)
    L, nh = model.config.num_hidden_layers, model.config.num_attention_heads
    clean_rec, corrupted_rec = (bertfn.trace(t, model, head_outputs=True) for t in (clean, corrupted))
    k = int((clean_rec.input_ids != corrupted_rec.input_ids).nonzero()[0, 1]) + 1  # next to where they differ
    query = f"layer.{L - 1}.attention." + ("q" if kind == "esm1b" else "q_rotated")  # one head's (turned) queries

    def metric(run):  # what both receivers move: the final LayerNorm's output, head 2's scores
        return run["final_norm"][0, k, 0] + run[f"layer.{L - 1}.attention.scores"][0, 2, k].sum()

    heads = "layer.{i}.attention.head_outputs"
    sender = (L - 2, list(range(nh)))
    run2 = bertfn.trace(corrupted, model, head_outputs=True, edits=iv.merge_edits(
        iv.patch(clean_rec, heads.format(i=L - 2)), iv.patch(corrupted_rec, heads.format(i=L - 1))))
    for receiver, receiver_heads in ((f"layer.{L - 1}.output", None), (query, [2])):
        value = iv.path_patch(clean, corrupted, model, metric, sender=sender, receivers={receiver: receiver_heads})
        run3 = bertfn.trace(corrupted, model, edits=iv.patch(run2, receiver, heads=receiver_heads))
        assert value == pytest.approx(metric(run3).item(), abs=1e-6)
        assert abs(value - metric(corrupted_rec).item()) > 5e-5  # the sender's writes reach the receivers


# --- 5. and 6. the CLI and corpus files -----------------------------------------------------------------------


def test_the_cli_and_a_corpus_file(member, tmp_path, capsys):
    """``bertfn fill-mask`` (ModernBERT) or ``bertfn score`` (ESM) as a subprocess, the other command in-process,
    and ``bertfn fill-mask --input FILE``: each equal to the Python call."""
    kind, hf, tok, model, folder = member
    text = TEXTS[kind][0]
    plain = text.replace(tok.mask_token, "A" if kind in ESM_KINDS else " Paris")
    command = ["fill-mask", text, "--top-k", "3"] if kind == "modernbert" else ["score", plain]
    run = subprocess.run([sys.executable, "-m", "bertfn", *command, "--model", str(folder), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    assert main([*(["score", plain] if kind == "modernbert" else ["fill-mask", text, "--top-k", "3"]),
                 "--model", str(folder), "--json"]) == 0
    in_process = json.loads(capsys.readouterr().out)
    answers, scored = (printed, in_process) if kind == "modernbert" else (in_process, printed)
    expected = bertfn.fill_mask(text, model, top_k=3)
    assert [a["token"] for a in answers] == [a["token"] for a in expected]
    assert [a["score"] for a in answers] == pytest.approx([a["score"] for a in expected], abs=1e-6)
    assert scored["pll"] == pytest.approx(bertfn.score(plain, model)["pll"], abs=1e-5)

    lines = [TEXTS[kind][0], plain, TEXTS[kind][1]]  # the second has no mask: an error row; the third two masks
    src, dst = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["fill-mask", "--input", str(src), "--output", str(dst), "--model", str(folder), "--top-k", "2",
                 "--no-progress"]) == 2  # a line without a mask: exit code 2, the other lines answered
    rows = [json.loads(line) for line in dst.read_text(encoding="utf-8").splitlines()]
    assert [("error" in r) for r in rows] == [False, True, False]
    for row, line in ((rows[0], lines[0]), (rows[2], lines[2])):
        expected = bertfn.fill_mask(line, model, top_k=2)
        got, expected = ([r] if isinstance(r[0], dict) else r for r in (row["result"], expected))  # per mask
        assert [[a["token"] for a in m] for m in got] == [[a["token"] for a in m] for m in expected]
        assert [[a["sequence"] for a in m] for m in got] == [[a["sequence"] for a in m] for m in expected]
        assert [a["score"] for m in got for a in m] == pytest.approx([a["score"] for m in expected for a in m], abs=1e-6)
