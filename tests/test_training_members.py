"""Training every member: the gradient of every weight, through the encoder and each of the member's heads, equals
transformers' backward, on padded batches.

tests/test_training.py holds BERT's pretraining heads and its options (relative positions, cross-attention, dropout,
checkpointing); here each member of the family (:mod:`family_checkpoints`) with each head transformers has a class
for, the losses those classes take: cross-entropy over the vocabulary, the labels, the answer's start and end (over
every position, padding included, as ``...ForQuestionAnswering`` takes it), the choices. Gradients are taken with
respect to leaf copies of the loaded state (a tied weight one leaf) and compared with ``param.grad``; fp32, eval
mode (the checkpoints' dropout is 0).

ModernBERT's oracle runs SDPA, as bertfn's default does: where a padded query's local window holds padding only
(row 2's last positions), its scores are all ``finfo.min``, and transformers' eager softmax and torch's fused kernel
give that row the same output but different gradients (4.0 against 0.6 in ``Wqkv``), which a loss over the answer's
start over every position reads; ``impl="eager"`` matches transformers' eager.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from family_checkpoints import HEAD_TASKS, MEMBERS, MODERN, kind_params, save_head, save_member

import bertfn
from bertfn.model.members.electra import discriminator_head
from bertfn.model.task_heads import run_head

pytestmark = pytest.mark.needs_transformers

TOL = dict(atol=1e-5, rtol=1e-5)

CASES = [pytest.param(kind, task, marks=p.marks, id=f"{kind}-{task}")
         for p in kind_params(("bert", *MEMBERS, *MODERN)) for kind in p.values
         for task in (("replaced-tokens",) if kind == "electra-discriminator" else ("masked-lm", *HEAD_TASKS[kind]))]
"""(kind, task) for every member and head; ``masked-lm`` and ``replaced-tokens`` (ELECTRA's discriminator) are the
checkpoints' own pretraining heads."""


def leaves(state: dict) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """The state as leaves that require gradients, each distinct tensor copied once (tied weights stay one), and
    those distinct leaves."""
    copies = {}
    state = {k: copies.setdefault(id(t), t.detach().clone().requires_grad_(True)) for k, t in state.items()}
    return state, list(copies.values())


def padded_batch(vocab: int, pad: int, B: int = 3, S: int = 9):
    """Ids of real tokens (above the specials), two rows padded at the end, and their 0/1 mask."""
    ids = torch.randint(5, vocab, (B, S), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    return ids.masked_fill(mask == 0, pad), mask


def losses(task: str, ids: torch.Tensor, mask: torch.Tensor, vocab: int):
    """The task's loss of bertfn's logits and of the transformers model's output, by the same formula."""
    g = torch.Generator().manual_seed(1)
    if task == "replaced-tokens":  # one logit per token, a binary loss over the real ones
        labels, real = torch.randint(0, 2, ids.shape, generator=g).float(), mask.bool()
        return (lambda p, h: F.binary_cross_entropy_with_logits(discriminator_head(p, h)[real], labels[real]),
                lambda out: F.binary_cross_entropy_with_logits(out.logits[real], labels[real]))
    if task == "masked-lm":
        labels = torch.randint(0, vocab, ids.shape, generator=g).masked_fill(mask == 0, -100)
        return (lambda p, h: F.cross_entropy(bertfn.mlm_head(p, h).flatten(0, 1), labels.flatten()),
                lambda out: F.cross_entropy(out.logits.flatten(0, 1), labels.flatten()))
    if task == "sequence-classification":
        labels = torch.tensor([2, 0, 1])
        return (lambda p, h: F.cross_entropy(run_head(p, task, h, mask), labels),
                lambda out: F.cross_entropy(out.logits, labels))
    if task == "token-classification":
        labels = torch.randint(0, 3, ids.shape, generator=g).masked_fill(mask == 0, -100)
        return (lambda p, h: F.cross_entropy(run_head(p, task, h, mask).flatten(0, 1), labels.flatten()),
                lambda out: F.cross_entropy(out.logits.flatten(0, 1), labels.flatten()))
    if task == "question-answering":
        start, end = torch.tensor([1, 2, 3]), torch.tensor([2, 4, 3])

        def span(s, e):
            return (F.cross_entropy(s, start) + F.cross_entropy(e, end)) / 2
        return (lambda p, h: span(*run_head(p, task, h, mask)), lambda out: span(out.start_logits, out.end_logits))
    label = torch.tensor([1])  # multiple choice: one question, the batch's three rows its choices
    return (lambda p, h: F.cross_entropy(run_head(p, task, h, mask).view(1, -1), label),
            lambda out: F.cross_entropy(out.logits, label))


@pytest.mark.parametrize("kind, task", CASES)
def test_every_weights_gradient_equals_transformers(tmp_path, kind, task):
    kw = {"num_labels": 3} if task in ("sequence-classification", "token-classification") else {}
    hf = save_member(kind, tmp_path) if task in ("masked-lm", "replaced-tokens") else \
        save_head(kind, task, tmp_path, **kw)
    model = bertfn.load(tmp_path)
    if kind == "modernbert":  # bertfn's default attention is SDPA: so is transformers' here (see below)
        hf.config._attn_implementation = "sdpa"
    ids, mask = padded_batch(hf.config.vocab_size, hf.config.pad_token_id)
    ours, theirs = losses(task, ids, mask, hf.config.vocab_size)
    state, distinct = leaves(model.state)
    params = bertfn.Params(state, model.config)
    loss = ours(params, bertfn.encoder(params, ids, mask).last_hidden_state)
    got = dict(zip(map(id, distinct), torch.autograd.grad(loss, distinct, allow_unused=True, materialize_grads=True)))
    inputs = dict(input_ids=ids[None], attention_mask=mask[None]) if task == "multiple-choice" else \
        dict(input_ids=ids, attention_mask=mask)
    ref = theirs(hf(**inputs))
    ref.backward()
    torch.testing.assert_close(loss, ref, **TOL)
    for name, p in hf.named_parameters():
        want = p.grad if p.grad is not None else torch.zeros_like(p)
        torch.testing.assert_close(got[id(state[name])], want, **TOL, msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize("kind", ["roberta", "mpnet", "esm1b"])
def test_the_padding_position_row_gets_no_gradient(tmp_path, kind):
    """RoBERTa's, MPNet's and ESM-1b's position tables hold a padding row (``nn.Embedding(..., padding_idx)``), which
    padding reads: transformers gives it no gradient, whatever reads the padding's hidden states (here every position,
    and attended to, as a loss over the answer's start reads them)."""
    hf = save_member(kind, tmp_path)
    model = bertfn.load(tmp_path)
    ids, _ = padded_batch(hf.config.vocab_size, hf.config.pad_token_id)
    every = torch.ones_like(ids)  # the padding attended to: its hidden states read every weight
    weights = torch.randn(*ids.shape, hf.config.hidden_size, generator=torch.Generator().manual_seed(2))
    state, _ = leaves(model.state)
    (bertfn.encoder(bertfn.Params(state, model.config), ids, every).last_hidden_state * weights).sum().backward()
    base = hf.base_model
    (base(input_ids=ids, attention_mask=every).last_hidden_state * weights).sum().backward()
    name = next(k for k in state if k.endswith("embeddings.position_embeddings.weight"))
    ours, theirs = state[name].grad, base.embeddings.position_embeddings.weight.grad
    assert not ours[hf.config.pad_token_id].any()
    torch.testing.assert_close(ours, theirs, **TOL)


DROPOUTS = {"distilbert": ("dropout", "attention_dropout", ("qa_dropout", "seq_classif_dropout")),
            "modernbert": ("mlp_dropout", "attention_dropout", ("embedding_dropout", "classifier_dropout")),
            "albert": ("hidden_dropout_prob", "attention_probs_dropout_prob", ("classifier_dropout_prob",)),
            "deberta-v2": ("hidden_dropout_prob", "attention_probs_dropout_prob", ("pooler_dropout", "cls_dropout")),
            "electra": ("hidden_dropout_prob", "attention_probs_dropout_prob",
                        ("classifier_dropout", "summary_first_dropout", "summary_last_dropout"))}
"""Each member's config fields of its hidden states', its attention probabilities' and its heads' dropouts
(BERT's names where it has no others)."""

QUICK_DROPOUTS = {("distilbert", "masked-lm"), ("albert", "masked-lm"), ("roberta", "multiple-choice")}
"""The cases of the quick run: DistilBERT's attention output and ALBERT's feed-forward output, which transformers
does not drop out, and RoBERTa's multiple-choice head, which drops out at ``hidden_dropout_prob``."""

DROPOUT_CASES = [pytest.param(*case.values, which, marks=() if tuple(case.values) in QUICK_DROPOUTS else pytest.mark.slow,
                              id=f"{case.id}-{which}")
                 for case in CASES for which in ("hidden", "attention", "head")
                 if which != "head" or case.values[1] not in ("masked-lm", "replaced-tokens")]
"""(kind, task, which dropout is 1): the head's own dropouts where the head has any."""


@pytest.mark.parametrize("kind, task, which", DROPOUT_CASES)
def test_a_dropout_of_one_drops_where_transformers_drops(tmp_path, kind, task, which):
    """Training mode with one kind of dropout at 1 and every other at 0: transformers' ``model.train()`` draws nothing
    at random (a dropout of 1 zeroes what it drops), so bertfn's training pass (a generator) must give its logits
    exactly, which it does only if it drops out the same tensors, at the same rates, read from the same fields."""
    hidden, attention, heads = DROPOUTS.get(kind, ("hidden_dropout_prob", "attention_probs_dropout_prob",
                                                   ("classifier_dropout",)))
    fields = dict.fromkeys((hidden, attention, *heads), 0.0) | {
        "hidden": {hidden: 1.0}, "attention": {attention: 1.0}, "head": dict.fromkeys(heads, 1.0)}[which]
    hf = save_member(kind, tmp_path, **fields) if task in ("masked-lm", "replaced-tokens") else \
        save_head(kind, task, tmp_path, **fields)
    model = bertfn.load(tmp_path)
    ids = torch.randint(5, hf.config.vocab_size, (3, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        out = hf.train()(**(dict(input_ids=ids[None], attention_mask=mask[None]) if task == "multiple-choice" else
                            dict(input_ids=ids, attention_mask=mask)))
        h = bertfn.encoder(model.params, ids, mask, generator=g).last_hidden_state
        if task in ("masked-lm", "replaced-tokens"):
            ours = (discriminator_head if task == "replaced-tokens" else bertfn.mlm_head)(model.params, h)
        else:
            ours = run_head(model.params, task, h, mask, generator=g)
    theirs = (out.start_logits, out.end_logits) if task == "question-answering" else out.logits
    if task == "multiple-choice":
        ours = ours.view(1, -1)
    torch.testing.assert_close(ours, theirs, **TOL)
