"""bertfn/tasks/runner.py: the steps every pipeline shares, written once: the packing its declaration says, the
results of groups put back in the texts' order, each text's own states with edits or without."""

import torch

import bertfn
from bertfn.fast.choice import pack_state
from bertfn.tasks import TASKS
from bertfn.tasks.runner import loaded, packing, per_text, placed
from bertfn.tasks.task import Task


def test_the_weights_are_packed_where_the_task_is_declared_fast_and_runs_without_edits():
    fast, plain = (Task("t", lambda texts, model: texts, probe="a", fast=f) for f in (True, False))
    assert packing(fast) is pack_state and packing(fast, {"layer.0.output": lambda x, p: x}) is None
    assert packing(plain) is None
    assert {t.name for t in TASKS if packing(t) is pack_state} == {t.name for t in TASKS if t.fast}


def test_groups_results_come_back_in_the_texts_order():
    order, rows = [2, 0, 3, 1], [[2, 0], [3, 1]]
    tensors = [torch.tensor([[20.0], [0.0]]), torch.tensor([[30.0], [10.0]])]  # (b, 1) per group
    assert placed(order, tensors).tolist() == [[0.0], [10.0], [20.0], [30.0]]
    assert placed(order, [["c", "a"], ["d", "b"]]) == ["a", "b", "c", "d"]
    assert placed([], []) == [] and sum(rows, []) == order


def test_per_text_gives_each_text_its_step_on_either_layout(tiny_folder):
    """Without edits and with one that changes nothing (its points in the groups' padded shapes), each text gets its
    own states, as alone."""
    m, tok, _ = loaded("test", bertfn.load(tiny_folder))
    texts = ["the cat sat on the mat .", "a dog", "the man went to the store ."]
    enc = tok(texts)
    lengths = enc.attention_mask.sum(dim=1).tolist()

    def means(lengths):  # the step: each text's mean state, (b, H)
        return lambda rows, where, h: torch.stack([p.mean(dim=0) for p in h.float().split([lengths[i] for i in rows])])

    fast = per_text(m, enc, lengths, means(lengths), batch_size=2)
    _, _, points = loaded("test", m, edits={"layer.0.output": lambda x, point: x})
    edited = per_text(m, enc, lengths, means(lengths), batch_size=2, points=points)
    alone = [per_text(m, tok([t]), [n], means([n]), batch_size=1)[0] for t, n in zip(texts, lengths)]
    torch.testing.assert_close(fast, edited, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(fast, torch.stack(alone), atol=1e-5, rtol=1e-4)
