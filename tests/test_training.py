"""Training: gradients equal transformers', dropout only with a generator, activation checkpointing.

Gradients are taken with respect to leaf copies of transformers' own weights (tied weights kept
tied) and compared with ``param.grad`` after ``loss.backward()`` in transformers, dropout off
(the configs set both dropout probabilities to 0). Tolerance 1e-5 (fp32).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from conftest import build_hf, hf_params

import bertfn

pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here
from bertfn.model.functional import dropout

TOL = dict(atol=1e-5, rtol=1e-5)


def leaves(params: bertfn.Params) -> dict[str, torch.Tensor]:
    """The distinct tensors of the state, by the first key that names each (tied weights appear once)."""
    out = {}
    for key, t in params.state.items():
        if all(t is not seen for seen in out.values()):
            out[key] = t
    return out


def grads(loss: torch.Tensor, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    got = torch.autograd.grad(loss, list(tensors.values()), allow_unused=True, materialize_grads=True)
    return dict(zip(tensors, got))


def grad_of(p: torch.Tensor) -> torch.Tensor:
    """transformers' gradient, zeros where a weight took no part (position embeddings with relative positions)."""
    return p.grad if p.grad is not None else torch.zeros_like(p)


PAD = 0  # the test configs' pad_token_id (transformers' default)


def batch(vocab: int, B: int = 3, S: int = 7, seed: int = 0):
    """Padded rows hold [PAD] ids, and row 0 attends to a [PAD] token in its middle: the word-embedding
    row of [PAD] then sits on the gradient's path, where transformers' ``padding_idx`` gives it none."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 3:] = 0
    ids = ids.masked_fill(mask == 0, PAD)
    ids[0, 3] = PAD  # attended
    labels = torch.randint(0, vocab, (B, S), generator=g).masked_fill(mask == 0, -100)
    return ids, mask, labels


# --- gradients vs transformers -------------------------------------------------------------------


def pretraining_loss(params, ids, mask, labels, impl, **kw):
    """MLM + NSP cross-entropy (``BertForPreTraining`` with labels)."""
    out = bertfn.encoder(params, ids, mask, impl=impl, **kw)
    mlm = F.cross_entropy(bertfn.mlm_head(params, out.last_hidden_state).flatten(0, 1), labels.flatten())
    nsp = F.cross_entropy(bertfn.nsp_head(params, out.pooler_output), torch.arange(ids.shape[0]) % 2)
    return mlm + nsp


@pytest.mark.parametrize("kind", ["absolute", "relative_key_query"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_pretraining_gradients_equal_transformers(kind, impl):
    hf = build_hf("BertForPreTraining", seed=3, position_embedding_type=kind, chunk_size_feed_forward=7)
    params = hf_params(hf, requires_grad=True)
    ids, mask, labels = batch(hf.config.vocab_size)
    head_mask = torch.tensor([1.0, 0.5, 1.0])

    loss = pretraining_loss(params, ids, mask, labels, impl, head_mask=head_mask)
    ours = grads(loss, leaves(params))
    ref = hf(ids, mask, head_mask=head_mask, labels=labels, next_sentence_label=torch.arange(3) % 2)
    ref.loss.backward()

    torch.testing.assert_close(loss, ref.loss, **TOL)
    named = dict(hf.named_parameters())
    assert set(named) <= set(ours)
    for name, p in named.items():
        torch.testing.assert_close(ours[name], grad_of(p), **TOL, msg=lambda m: f"grad of {name}: {m}")


def test_causal_lm_with_cross_attention_gradients_equal_transformers():
    """Decoder: causal mask, relative positions, cross-attention; also the gradient of the encoder states."""
    hf = build_hf("BertLMHeadModel", seed=4, is_decoder=True, add_cross_attention=True,
                  position_embedding_type="relative_key")
    params = hf_params(hf, requires_grad=True)
    ids, mask, labels = batch(hf.config.vocab_size)
    enc = torch.randn(3, 5, hf.config.hidden_size, requires_grad=True)
    enc_mask = torch.ones(3, 5, dtype=torch.long)
    enc_mask[0, 4:] = 0

    out = bertfn.encoder(params, ids, mask, encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
    logits = bertfn.mlm_head(params, out.last_hidden_state)
    # BertLMHeadModel's loss: predict token t+1 from position t
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
    tensors = leaves(params) | {"encoder_hidden_states": enc}
    ours = grads(loss, tensors)

    ref = hf(ids, mask, encoder_hidden_states=enc, encoder_attention_mask=enc_mask, labels=labels, use_cache=False)
    ref.loss.backward()
    torch.testing.assert_close(loss, ref.loss, **TOL)
    for name, p in list(hf.named_parameters()) + [("encoder_hidden_states", enc)]:
        torch.testing.assert_close(ours[name], grad_of(p), **TOL, msg=lambda m: f"grad of {name}: {m}")


def test_sequence_classification_gradients_equal_transformers():
    hf = build_hf("BertForSequenceClassification", seed=6, num_labels=3)
    params = hf_params(hf, requires_grad=True)
    ids, mask, _ = batch(hf.config.vocab_size)
    labels = torch.tensor([2, 0, 1])
    pooled = bertfn.encoder(params, ids, mask).pooler_output
    loss = F.cross_entropy(bertfn.sequence_classification(params, pooled), labels)
    ours = grads(loss, leaves(params))
    hf(ids, mask, labels=labels).loss.backward()
    for name, p in hf.named_parameters():
        torch.testing.assert_close(ours[name], grad_of(p), **TOL, msg=lambda m: f"grad of {name}: {m}")
    word = ours["bert.embeddings.word_embeddings.weight"]  # not tied to a decoder here
    assert not word[PAD].any() and word[ids[0, 0]].any()  # an attended [PAD] still gives its row no gradient


# --- dropout -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dropout_model():
    """Dropout 0.2 on hidden states and 0.3 on attention probabilities, 2 layers."""
    hf = build_hf("BertForPreTraining", seed=8, hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3)
    return hf, hf_params(hf)


def test_dropout_only_with_a_generator(dropout_model):
    hf, params = dropout_model
    ids, mask, _ = batch(hf.config.vocab_size)
    rng = torch.get_rng_state()
    with torch.no_grad():
        plain = bertfn.encoder(params, ids, mask).last_hidden_state
        ref = hf(ids, mask, output_hidden_states=True).hidden_states[-1]  # eval mode: no dropout
        a = bertfn.encoder(params, ids, mask, generator=torch.Generator().manual_seed(1)).last_hidden_state
        b = bertfn.encoder(params, ids, mask, generator=torch.Generator().manual_seed(1)).last_hidden_state
        c = bertfn.encoder(params, ids, mask, generator=torch.Generator().manual_seed(2)).last_hidden_state
    torch.testing.assert_close(plain, ref, **TOL)  # no generator: the dropout probabilities are ignored
    assert torch.equal(a, b)  # the same seed gives the same masks
    assert not torch.allclose(a, plain) and not torch.allclose(a, c)
    assert torch.equal(torch.get_rng_state(), rng)  # torch's global random state is never drawn from


def test_dropout_masks_and_scale():
    g = torch.Generator().manual_seed(0)
    x = torch.full((200_000,), 3.0)
    y = dropout(x, 0.25, g)
    dropped = (y == 0).float().mean()
    assert abs(float(dropped) - 0.25) < 0.005
    assert torch.equal(y[y != 0], torch.full_like(y[y != 0], 3.0 / 0.75))  # inverted dropout: E[y] = x
    assert dropout(x, 0.25, None) is x and dropout(x, 0.0, g) is x


def test_a_dropout_of_one_gives_zeros_as_torchs_does():
    """p = 1 drops every element: zeros and zero gradients, as ``torch.nn.functional.dropout``, not 0 / 0 = NaN; and
    an encoder whose hidden dropout is 1 stays finite in training mode."""
    x = torch.randn(4, 5, requires_grad=True)
    y = dropout(x, 1.0, torch.Generator().manual_seed(0))
    torch.testing.assert_close(y, F.dropout(x, 1.0, training=True))
    y.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    hf = build_hf("BertModel", seed=2, hidden_dropout_prob=1.0)
    ids, mask, _ = batch(hf.config.vocab_size)
    out = bertfn.encoder(hf_params(hf), ids, mask, generator=torch.Generator().manual_seed(0)).last_hidden_state
    assert out.isfinite().all()


@pytest.mark.parametrize("generator", [0, 1234, "seed"])
def test_a_seed_given_as_the_generator_is_refused_clearly(dropout_model, generator):
    hf, params = dropout_model
    ids, mask, _ = batch(hf.config.vocab_size)
    with pytest.raises(bertfn.InputError, match="generator= .* takes a torch.Generator"):
        bertfn.encoder(params, ids, mask, generator=generator)


@pytest.mark.parametrize("attention_dropout, mlp_dropout", [(1.0, 0.0), (0.0, 1.0)])
def test_modernbert_drops_its_attention_output_at_attention_dropout(tmp_path, attention_dropout, mlp_dropout):
    """``ModernBertAttention``'s output drops out at ``attention_dropout``, not ``mlp_dropout``: with each of the two 1
    and the other 0, transformers' training mode draws nothing at random, and bertfn's training pass equals it
    (biases on, so that a dropped block's output is not zero anyway)."""
    import warnings

    import transformers

    config = transformers.ModernBertConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
        attention_bias=True, mlp_bias=True, attention_dropout=attention_dropout, mlp_dropout=mlp_dropout,
        embedding_dropout=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
        global_attn_every_n_layers=2, local_attention=4, attn_implementation="eager")
    torch.manual_seed(0)
    hf = transformers.ModernBertModel(config)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    hf.save_pretrained(tmp_path)
    with warnings.catch_warnings():  # no tokenizer in the folder: ids only here
        warnings.simplefilter("ignore")
        model = bertfn.load(tmp_path)
    ids = torch.randint(3, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = hf.train()(input_ids=ids).last_hidden_state
        ours = bertfn.encoder(model.params, ids, generator=torch.Generator().manual_seed(0)).last_hidden_state
    torch.testing.assert_close(ours, theirs, **TOL)


@pytest.mark.parametrize("kind", ["roberta", "mpnet", "esm"])
def test_a_classifier_dropout_counts_where_transformers_reads_it(tmp_path, kind):
    """classifier_dropout 1 (the rest 0) in config.json: RoBERTa's head reads it and drops everything; ESM-2's and
    MPNet's heads drop out at hidden_dropout_prob (0) and ignore it. Training mode then draws nothing at random, and
    bertfn's logits equal transformers'."""
    import warnings

    from family_checkpoints import save_head

    from bertfn.model.task_heads import run_head

    hf = save_head(kind, "sequence-classification", tmp_path, classifier_dropout=1.0)
    with warnings.catch_warnings():  # a config field the member's transformers class does not define, kept as given
        warnings.simplefilter("ignore")
        model = bertfn.load(tmp_path)
    ids = torch.randint(4, 24, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        theirs = hf.train()(input_ids=ids, attention_mask=mask).logits
        g = torch.Generator().manual_seed(0)
        h = bertfn.encoder(model.params, ids, mask, generator=g).last_hidden_state
        ours = run_head(model.params, "sequence-classification", h, mask, generator=g)
    torch.testing.assert_close(ours, theirs, **TOL)


def test_classifier_heads_drop_out_only_with_a_generator(dropout_model):
    hf, params = dropout_model
    state = dict(params.state)
    state["classifier.weight"] = torch.randn(4, hf.config.hidden_size)
    state["classifier.bias"] = torch.randn(4)
    heads = bertfn.Params(state, replace(params.config, classifier_dropout=0.5))
    pooled = torch.randn(6, hf.config.hidden_size)
    plain = bertfn.sequence_classification(heads, pooled)
    torch.testing.assert_close(plain, pooled @ state["classifier.weight"].T + state["classifier.bias"])
    dropped = bertfn.sequence_classification(heads, pooled, torch.Generator().manual_seed(0))
    again = bertfn.sequence_classification(heads, pooled, torch.Generator().manual_seed(0))
    assert torch.equal(dropped, again) and not torch.allclose(dropped, plain)


# --- activation checkpointing --------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("with_dropout", [False, True], ids=["no-dropout", "dropout"])
def test_checkpointing_gives_the_same_gradients(dropout_model, impl, with_dropout):
    """With dropout on, the recomputed forward must draw the very masks of the first one."""
    hf, base = dropout_model
    params = hf_params(hf, requires_grad=True)
    ids, mask, labels = batch(hf.config.vocab_size)
    runs = []
    for checkpoint in (False, True):
        g = torch.Generator().manual_seed(11) if with_dropout else None
        loss = pretraining_loss(params, ids, mask, labels, impl, generator=g, checkpoint=checkpoint)
        runs.append((loss, grads(loss, leaves(params)), g.get_state() if g is not None else None))
    (loss, plain, state), (loss_ck, ck, state_ck) = runs
    assert torch.equal(loss, loss_ck)
    for name in plain:
        torch.testing.assert_close(ck[name], plain[name], atol=1e-6, rtol=1e-6,
                                   msg=lambda m: f"grad of {name} with checkpointing: {m}")
    if with_dropout:  # and the recomputation leaves the generator where the plain run left it
        assert torch.equal(state, state_ck)


def saved_for_backward(params: bertfn.Params, **kw) -> int:
    """Bytes of the activations autograd keeps for backward during one forward (weights not counted).

    Every tensor saved for backward passes through the pack hook: the layers' intermediates without
    checkpointing; with it, only what lies outside the layers and the layer inputs the checkpoints
    keep (they save them before their own hooks take over).
    """
    weights = {t.untyped_storage().data_ptr() for t in params.state.values()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        bertfn.encoder(params, **kw)
    return sum(kept.values())


def test_checkpointing_keeps_less_for_backward():
    hf = build_hf("BertModel", seed=9, num_hidden_layers=4)
    params = hf_params(hf, requires_grad=True)
    ids = torch.randint(1, hf.config.vocab_size, (4, 32))
    plain = saved_for_backward(params, input_ids=ids)
    checkpointed = saved_for_backward(params, input_ids=ids, checkpoint=True)
    layer_inputs = 4 * ids.numel() * hf.config.hidden_size * 4  # L x (B, S, H) fp32
    assert checkpointed >= layer_inputs  # the checkpoints do keep their inputs, and the hook sees them
    assert checkpointed * 4 < plain, (checkpointed, plain)
