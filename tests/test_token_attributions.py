"""bertfn.interventions.token_attributions against captum on transformers' models, and on AntiBERTy's real weights.

The oracle: ``captum.attr.LayerIntegratedGradients(forward, <the model's word-embedding layer>)`` with the same
baseline ids (the pad id at every position but [CLS], [SEP] and the [MASK]s), the same steps and rule
("gausslegendre"), attributions summed over the width; ``LayerGradientXActivation`` on that layer for gradient x
input. bertfn's attributions must be within 1e-3 of the largest attribution, on every member's sequence classifier,
BERT's tagger, reader and masked LM, and AntiBERTy's masked LM; the attributions of integrated gradients sum to
f(x) - f(baseline) within 1% at 50 steps (completeness), AntiBERTy's species head read by a metric too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import antiberty_paths, on_device
from family_checkpoints import CORPUS, ESM_KINDS, HEAD_TASKS, PROTEINS, kind_params, save_head, save_member

import bertfn
from bertfn import interventions as iv
from bertfn.interventions.token_attributions import baseline_ids

captum_attr = pytest.importorskip("captum.attr", reason="captum is the oracle (pip install -e '.[test]')")
needs_transformers = pytest.mark.needs_transformers
KINDS = tuple(k for k, tasks in HEAD_TASKS.items() if "sequence-classification" in tasks)
SCALE = dict(initializer_range=0.1)
"""Weights five times the usual init's spread, so that the outputs move with the tokens (at 0.02 every attribution is
about 1e-5) and the path bends, where 50 steps still integrate it within 1% (at 0.2 DistilBERT's and ESM-2's are
about 4% off: the tokens' parts there are ten times their sum)."""
NORMED_WORDS = ("deberta-v2", "modernbert")
"""Members whose embeddings are LayerNorm(word vector) alone (v3 has no absolute positions; ModernBERT turns by RoPE),
which scaling the word vector leaves as it is but for LayerNorm's eps: their gradient . x cancels over the width to
about eps / variance of its terms, and what is left differs from captum's by the order fp32 sums in (1e-7 of the terms;
1e-3 of the largest attribution held on an AVX-512 CPU, 2.2e-3 on an AVX2 EPYC)."""


def captum_ig(forward, layer, ids, base, args, steps: int = 50) -> torch.Tensor:
    """captum's integrated gradients of ``forward(ids, *args) -> (B,)`` at ``layer``'s output, summed over the width:
    (S,)."""
    lig = captum_attr.LayerIntegratedGradients(forward, layer)
    return lig.attribute(ids, base, additional_forward_args=args, n_steps=steps, method="gausslegendre").sum(-1)[0].cpu()


def assert_close(ours: iv.TokenAttributions, theirs: torch.Tensor) -> None:
    """Within 1e-3 of the largest attribution."""
    gap = (ours.attributions.cpu() - theirs).abs().max().item()
    assert gap <= 1e-3 * theirs.abs().max().item(), (gap, theirs.abs().max().item())


def assert_complete(a: iv.TokenAttributions) -> None:
    """The attributions sum to f(x) - f(baseline) within 1%, and delta says how far."""
    change = a.value - a.baseline_value
    assert abs(a.attributions.sum().item() - change - a.delta) < 1e-6 * max(1.0, abs(change))
    assert abs(a.delta) <= 0.01 * abs(change), (a.delta, change)


def inputs(m: bertfn.Model, texts: list[str], pairs: list[str] | None = None, baseline=None):
    """The texts' ids, mask and token types on the test device, and the baseline's ids."""
    enc = m.tokenizer(texts, pairs)
    base = baseline_ids(enc.input_ids, enc.attention_mask, m.tokenizer, baseline)
    return on_device((enc.input_ids, enc.attention_mask, enc.token_type_ids, base))


@needs_transformers
@pytest.mark.parametrize("kind", kind_params(KINDS))
def test_sequence_classifiers_equal_captum(kind, tmp_path, device):
    """Every member's classifier: the label's logit's integrated gradients and gradient x input equal captum's on the
    transformers model, f(x) its logit, complete within 1%."""
    hf = on_device(save_head(kind, "sequence-classification", tmp_path, **SCALE))
    m = bertfn.load(tmp_path, device=device)
    text = PROTEINS[3] if kind in ESM_KINDS else CORPUS[2]
    ids, mask, _, base = inputs(m, [text])
    forward = lambda i, am: hf(input_ids=i, attention_mask=am).logits[:, 1]  # noqa: E731
    layer = hf.get_input_embeddings()

    steps = 200 if kind == "deberta-v2" else 50  # DeBERTa's path bends more: 50 steps leave ~20% (200: 1e-4)
    a = iv.token_attributions(text, m, "LABEL_1", steps=steps)
    assert a.tokens == m.tokenizer([text]).tokens[0] and a.attributions.shape == (len(a.tokens),)
    assert_close(a, captum_ig(forward, layer, ids, base, (mask,), steps))
    assert_complete(a)
    with torch.no_grad():
        assert abs(a.value - forward(ids, mask).item()) < 1e-5
    assert torch.equal(iv.token_attributions(text, m, 1, steps=steps).attributions, a.attributions)  # by name or id

    g = iv.token_attributions(text, m, 1, method="gradient_x_input")
    theirs = captum_attr.LayerGradientXActivation(forward, layer).attribute(ids, additional_forward_args=(mask,))
    if kind in NORMED_WORDS:  # each token's gradient . x cancels over the width to what LayerNorm's eps leaves
        terms = theirs.abs().sum(-1)[0].cpu()  # (S,): the size of what each token's sum adds up
        assert (theirs.sum(-1)[0].cpu().abs() / terms).max() < 1e-3  # eps / variance: 6e-4 ModernBERT, 8e-6 v3
        assert (g.attributions - theirs.sum(-1)[0].cpu()).abs().max() <= 1e-6 * terms.max()  # fp32's order of sums
    else:
        assert_close(g, theirs.sum(-1)[0].cpu())
    assert g.baseline_value is None and g.delta is None and abs(g.value - a.value) < 1e-6


@needs_transformers
def test_bert_tagger_and_reader_equal_captum(tmp_path, device):
    """A token's entity logit (tagger) and the answer's start and end logits (reader, a question and its context as
    a pair, each text's own target in one call) equal captum's, complete within 1%."""
    hf = on_device(save_head("bert", "token-classification", tmp_path / "tagger", **SCALE))
    m = bertfn.load(tmp_path / "tagger", device=device)
    text = CORPUS[4]
    ids, mask, _, base = inputs(m, [text])
    a = iv.token_attributions(text, m, (3, "LABEL_1"))
    assert_close(a, captum_ig(lambda i, am: hf(input_ids=i, attention_mask=am).logits[:, 3, 1],
                              hf.get_input_embeddings(), ids, base, (mask,)))
    assert_complete(a)

    hf = on_device(save_head("bert", "question-answering", tmp_path / "reader", **SCALE))
    m = bertfn.load(tmp_path / "reader", device=device)
    question, context = "Where did the cat sit?", CORPUS[3]
    ids, mask, types, base = inputs(m, [question], [context])
    start, end = iv.token_attributions([question] * 2, m, [("start", 10), ("end", 12)], pair=[context] * 2)
    for ours, which in ((start, "start_logits"), (end, "end_logits")):
        position = 10 if which == "start_logits" else 12
        forward = lambda i, am, tt, w=which, p=position: getattr(hf(input_ids=i, attention_mask=am, token_type_ids=tt),
                                                                 w)[:, p]  # noqa: E731
        assert_close(ours, captum_ig(forward, hf.get_input_embeddings(), ids, base, (mask, types)))
        assert_complete(ours)
    assert start.tokens == m.tokenizer([question], [context]).tokens[0] and types[0, 10] == types[0, 12] == 1  # context


@needs_transformers
def test_bert_masked_lm_equals_captum(tmp_path, device):
    """A token's logit at the [MASK] (the fill-mask target, by token or (position, token)), with the pad baseline and
    with a [MASK] baseline, equals captum's; f(baseline) is the transformers model's on the baseline's ids."""
    hf = on_device(save_member("bert", tmp_path, **SCALE))
    m = bertfn.load(tmp_path, device=device)
    text = "The cat sat on the [MASK]."
    mat = m.tokenizer.token_to_id("mat")
    forward = lambda i, am: hf(input_ids=i, attention_mask=am).logits[:, 6, mat]  # noqa: E731
    for baseline in (None, "[MASK]"):
        ids, mask, _, base = inputs(m, [text], baseline=baseline)
        a = iv.token_attributions(text, m, "mat", baseline=baseline)
        assert_close(a, captum_ig(forward, hf.get_input_embeddings(), ids, base, (mask,)))
        assert_complete(a)
        with torch.no_grad():
            assert abs(a.baseline_value - forward(base, mask).item()) < 1e-5  # BERT's positions do not read the ids
        assert a.attributions[6] == 0 and a.attributions[0] == 0  # the [MASK] and [CLS] are the baseline's too
    assert torch.equal(iv.token_attributions(text, m, (6, mat)).attributions,
                       iv.token_attributions(text, m, "mat").attributions)


@needs_transformers
def test_roberta_delta_is_the_paths_where_captums_reruns_the_baseline_ids(tmp_path, device):
    """RoBERTa counts positions from the ids (pad tokens take padding_idx), so captum's return_convergence_delta, which
    runs f on the baseline's ids, starts elsewhere than the path does: its delta is off by f(baseline ids) - f(b).
    bertfn's f(b) is the path's start (the baseline's embeddings at the input's positions, as captum's path runs them),
    so its delta is the rule's error alone; the attributions are captum's (docs/guides/interventions.md)."""
    hf = on_device(save_member("roberta", tmp_path, **SCALE))
    m = bertfn.load(tmp_path, device=device)
    text = f"The cat sat on the {m.tokenizer.mask_token}."
    ids, mask, _, base = inputs(m, [text])
    at = int((ids[0] == m.tokenizer.mask_token_id).nonzero()[0])
    forward = lambda i, am: hf(input_ids=i, attention_mask=am).logits[:, at, 7]  # noqa: E731
    lig = captum_attr.LayerIntegratedGradients(forward, hf.get_input_embeddings())
    theirs, captum_delta = lig.attribute(ids, base, additional_forward_args=(mask,), method="gausslegendre",
                                         return_convergence_delta=True)
    a = iv.token_attributions(text, m, 7)
    assert_close(a, theirs.sum(-1)[0].cpu())
    assert abs(a.delta) < 1e-5
    from transformers.models.roberta.modeling_roberta import create_position_ids_from_input_ids

    positions = create_position_ids_from_input_ids(ids, hf.config.pad_token_id)  # the input's, as the path has them
    with torch.no_grad():
        rerun = forward(base, mask).item()
        start = hf(inputs_embeds=hf.get_input_embeddings()(base), attention_mask=mask, position_ids=positions)
    assert abs(a.baseline_value - start.logits[0, at, 7].item()) < 1e-5
    assert abs(rerun - a.baseline_value) > 0.1  # the pad ids' positions move f
    assert abs(captum_delta.item() - (a.delta + rerun - a.baseline_value)) < 1e-5


@needs_transformers
def test_a_batch_of_texts_equals_each_text_alone(tmp_path, device):
    """Texts of different lengths in one call, their paths' points cut into padded batches of 7 rows, give what each
    text gives alone (1e-5 of its largest), for a label and for a metric of the run."""
    save_head("roberta", "sequence-classification", tmp_path, **SCALE)
    m = bertfn.load(tmp_path, device=device)
    texts = [CORPUS[2], CORPUS[3], "Rome."]
    pooled = lambda run: run["classifier.dense"][0].sum()  # noqa: E731  (a metric reading another point)
    for target in (0, pooled):
        together = iv.token_attributions(texts, m, target, steps=16, batch_size=7)
        for text, a in zip(texts, together):
            alone = iv.token_attributions(text, m, target, steps=16)
            assert a.tokens == alone.tokens
            assert (a.attributions - alone.attributions).abs().max() <= 1e-5 * alone.attributions.abs().max()
            assert abs(a.delta - alone.delta) < 1e-5 and abs(a.value - alone.value) < 1e-5


def test_the_errors_say_what_a_target_is(tmp_path):
    save_member("bert", tmp_path / "mlm")
    mlm = bertfn.load(tmp_path / "mlm")
    with pytest.raises(bertfn.InputError, match=r"method must be one of 'integrated_gradients', 'gradient_x_input'"):
        iv.token_attributions("The [MASK] sat.", mlm, "cat", method="ig")
    with pytest.raises(bertfn.InputError, match=r"steps must be a positive integer, got 0"):
        iv.token_attributions("The [MASK] sat.", mlm, "cat", steps=0)
    with pytest.raises(bertfn.InputError, match=r"has none; put \[MASK\] where the token is read"):
        iv.token_attributions("The cat sat.", mlm, "cat")
    with pytest.raises(bertfn.InputError, match=r"at positions \[2, 3\]; name one: \(position, token\)"):
        iv.token_attributions("The [MASK] [MASK] sat.", mlm, "cat")
    with pytest.raises(bertfn.InputError, match=r"a token of the vocabulary .* got 'zebra-crossing'"):
        iv.token_attributions("The [MASK] sat.", mlm, "zebra-crossing")
    with pytest.raises(bertfn.InputError, match=r"baseline must be a token of the vocabulary .* got '\[NOPE\]'"):
        iv.token_attributions("The [MASK] sat.", mlm, "cat", baseline="[NOPE]")
    with pytest.raises(bertfn.InputError, match=r"got 3 targets for 2 texts"):
        iv.token_attributions(["The [MASK] sat.", "A [MASK]."], mlm, ["cat", "dog", "mat"])
    save_head("bert", "token-classification", tmp_path / "tagger")
    tagger = bertfn.load(tmp_path / "tagger")
    with pytest.raises(bertfn.InputError, match=r"a tagger's target is \(position, label\)"):
        iv.token_attributions("The cat sat.", tagger, "LABEL_1")
    with pytest.raises(bertfn.InputError, match=r"position must be an integer from 0 to 5 .* got 9"):
        iv.token_attributions("The cat sat.", tagger, (9, "LABEL_1"))
    with pytest.raises(bertfn.InputError, match=r"the head has no label 'PER'; its labels are 'LABEL_0', 'LABEL_1'"):
        iv.token_attributions("The cat sat.", tagger, (1, "PER"))
    save_head("bert", "multiple-choice", tmp_path / "choice")
    with pytest.raises(bertfn.MissingPartError, match=r"is a BertForMultipleChoice: use bertfn.choose; give the target "
                                                      r"as a metric of the run instead"):
        iv.token_attributions("The cat sat.", bertfn.load(tmp_path / "choice"), 0)


def test_options_a_call_would_ignore_are_refused(tmp_path):
    """head= and labels= beside a metric target, and a baseline for gradient x input, would change nothing: refused,
    saying what to drop, where they used to be ignored in silence (an extra head's metric read without its head)."""
    save_member("bert", tmp_path)
    mlm = bertfn.load(tmp_path)
    pooled = lambda run: run["embeddings.output"][0].sum()  # noqa: E731
    with pytest.raises(bertfn.InputError, match=r"head= and labels= say which head a label target is read from, .* "
                                                r"drop head= and labels="):
        iv.token_attributions("The cat sat.", mlm, pooled, head="cls.species")
    with pytest.raises(bertfn.InputError, match=r"drop head= and labels="):
        iv.token_attributions(["The cat sat.", "A dog."], mlm, ["cat", pooled], labels=["a", "b"])
    with pytest.raises(bertfn.InputError, match=r"baseline='\[MASK\]' is integrated gradients' start, and gradient x "
                                                r"input has none"):
        iv.token_attributions("The [MASK] sat.", mlm, "cat", method="gradient_x_input", baseline="[MASK]")
    assert iv.token_attributions("The cat sat.", mlm, pooled, steps=4).delta is not None  # the metric alone runs


# --- AntiBERTy's real weights ---------------------------------------------------------------------------

FRAGMENT = "E V Q L V E S G G G L V Q P G R S L R L S C A A S G F [MASK] F D D Y A M H W V R Q A"
"""Adalimumab's heavy chain, its first 40 residues, residue 28 masked (the guides' example)."""
SPECIES = ["Camel", "Human", "Mouse", "Rabbit", "Rat", "Rhesus"]  # AntiBERTyRunner's order


@needs_transformers
def test_antiberty_masked_residue_equals_captum(antiberty, antiberty_hf):
    """The logit of T at the masked residue: captum's attributions on transformers' BertForMaskedLM over the same
    weights, complete within 1% at 50 steps."""
    hf, _ = antiberty_hf
    a = iv.token_attributions(FRAGMENT, antiberty, "T")
    ids, mask, _, base = inputs(antiberty, [FRAGMENT])
    t = antiberty.tokenizer.token_to_id("T")
    theirs = captum_ig(lambda i, am: hf(input_ids=i.cpu(), attention_mask=am.cpu()).logits[:, 28, t],
                       hf.bert.embeddings.word_embeddings, ids.cpu(), base.cpu(), (mask.cpu(),))
    assert_close(a, theirs)
    assert_complete(a)
    assert a.value > a.baseline_value + 5  # the chain around the mask is what makes T likely


@needs_transformers
@pytest.mark.slow
def test_antiberty_species_head_through_a_metric_equals_captum(antiberty):
    """Rituximab's VH called Mouse: the Mouse logit of the cls.species head on the pooler, given as a metric of the
    run, equals captum's on transformers' BertModel (its pooler) and the head's weights; complete within 1%."""
    import transformers

    rows = [line.split("\t") for line in (Path(__file__).parent / "data" / "antibodies.tsv").read_text().splitlines()]
    vh = " ".join(next(row[2] for row in rows if row[:2] == ["rituximab", "heavy"]))
    w, b = antiberty.state["cls.species.weight"], antiberty.state["cls.species.bias"]  # (6, H), (6,)
    mouse = SPECIES.index("Mouse")
    a = iv.token_attributions(vh, antiberty, lambda run: (run["pooler"][0] @ w.T + b)[mouse])
    assert_complete(a)
    hf = transformers.BertModel.from_pretrained(antiberty_paths()[0], attn_implementation="eager").eval()
    ids, mask, _, base = inputs(antiberty, [vh])
    forward = lambda i, am: (hf(input_ids=i, attention_mask=am).pooler_output @ w.T + b)[:, mouse]  # noqa: E731
    assert_close(a, captum_ig(forward, hf.embeddings.word_embeddings, ids.cpu(), base.cpu(), (mask.cpu(),)))
    with torch.no_grad():
        assert abs(a.value - forward(ids.cpu(), mask.cpu()).item()) < 1e-4
