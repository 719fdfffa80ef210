"""A trace and edits on texts laid end to end (``Segments``) show and change the padded pass's points, member by member.

bertfn/model/recorder.py and bertfn/model/segment_points.py: every point a padded pass records, a pass on segments
records too, under the same name, in the same order and shape (B texts, S the longest), equal at the real positions
within 1e-5 in fp32 (a padded position holds zeros there: no token is there); an edit written for the padded batch
(a head ablated, a neuron patched, a vector added at one position, the probabilities changed) and a head mask give
the same last hidden states on both layouts; and the tasks' groups with edits (bertfn/fast/batching.py), which run on
segments now, give what the padded batches gave them.

Tiny random models (tests/test_layouts.py's and tests/test_deberta_layouts.py's, no transformers), texts of several
lengths, some of one length, padded on the right.
"""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, fp32_atol, on_device
from test_deberta_layouts import model_of
from test_layouts import BERT_LAYER, PRE_LN, padded, random_member

import bertfn
from bertfn import interventions as iv
from bertfn.fast.batching import encoded_groups
from bertfn.model.layout import Segments
from bertfn.model.recorder import NO_TRACE

TOL = dict(atol=fp32_atol(1e-5), rtol=1e-5)
"""fp32 within 1e-5 and 1e-5 of the value: the two sides may multiply on other kernels, which sum in other orders (the fast
path chooses one per band of rows: on an AMD EPYC with AVX2 alone F.linear for a few rows, oneDNN for many), 1.05e-5
apart on a value of 1.1."""
LENGTHS = (9, 6, 6, 3, 1)
"""Two texts of one length (one dense call in the runs) and a text of one token."""
MEMBERS = [*BERT_LAYER, *PRE_LN, "deberta v3", "deberta v2", "deberta conv"]
BATCHES = {"deberta v2": (1, 4), "mpnet": (5,), "modernbert": (2, 3)}
"""Some members attend in padded batches where no trace asks for the padded view (``Segments.batches``)."""
PAIRS = ("scores", "scaled_scores", "masked_scores", "probs", "relative_scores", "position_bias", "c2p_scores",
         "p2c_scores")
"""The points (B, nh, S_q, S_k): compared where both the query and the key are real."""


def member(name: str) -> bertfn.Model:
    """The tiny random model ``name`` on the tests' device."""
    if name.startswith("deberta"):
        return model_of(name.split()[1]).to(DEVICE)
    return random_member({**BERT_LAYER, **PRE_LN}[name])


def texts(model: bertfn.Model) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    """The texts' ids (each (n,)), their padded batch (B, S) with its mask, and the texts end to end (1, T)."""
    g = torch.Generator().manual_seed(2)
    ids = [torch.randint(5, 24, (n,), generator=g) for n in LENGTHS]
    batch, mask = padded(ids, "right", model.config.pad_token_id or 0)
    return ids, batch, mask, on_device(torch.cat(ids)[None])


def real(name: str, t: torch.Tensor) -> list[torch.Tensor]:
    """Each text's part of a padded point (right-padded): its n positions (and keys)."""
    last = name.rpartition(".")[2]
    if t.dim() == 3:
        return [t[i, :n] for i, n in enumerate(LENGTHS)]  # (n, F)
    if last in PAIRS:
        return [t[i, :, :n, :n] for i, n in enumerate(LENGTHS)]  # (nh, n, n)
    return [t[i, :, :n] for i, n in enumerate(LENGTHS)]  # (nh, n, F)


@pytest.mark.parametrize("name", MEMBERS)
def test_points_on_segments_are_the_padded_pass_s(name):
    """Every point, optional head_outputs too, with the pass reading a few rows alone (a trace runs every row)."""
    model = member(name)
    _, batch, mask, ends = texts(model)
    rows = on_device(torch.tensor([0, 8, 9, 24]))
    with torch.inference_mode():
        padded_trace, laid_trace = (bertfn.Trace(optional=["*.head_outputs"]) for _ in range(2))
        expected = bertfn.encoder(model, batch, mask, trace=padded_trace).last_hidden_state[mask.bool()]  # (T, H)
        got = bertfn.encoder(model, ends, Segments(LENGTHS, read=rows, batches=BATCHES.get(name)),
                             trace=laid_trace).last_hidden_state  # (1, r, H)
    torch.testing.assert_close(got[0], expected[rows], **TOL)
    assert list(laid_trace.store) == list(padded_trace.store)
    assert any(n.endswith("attention.probs") for n in laid_trace.store)
    for point, want in padded_trace.store.items():
        have = laid_trace.store[point]
        assert have.shape == want.shape, point
        for a, b in zip(real(point, have), real(point, want)):
            torch.testing.assert_close(a, b, **TOL, msg=point)
    h = laid_trace.store["layer.0.output"]  # (B, S, H): zeros where a text has no token
    assert not h[1, 6:].any() and not h[4, 1:].any()


def ablate_head(x, point):
    x = x.clone()
    x[:, 1] = 0  # head 1's context, every text
    return x


def patch_neuron(x, point):
    x = x.clone()
    x[..., 3] = 2.0
    return x


def add_at(vector: torch.Tensor):
    def edit(x, point):
        x = x.clone()
        x[1, 2] += vector  # text 1, position 2 of the padded batch
        return x
    return edit


def halve_first_key(x, point):
    x = x.clone()
    x[..., 0] = x[..., 0] / 2  # every query's weight on its text's first token
    return x


@pytest.mark.parametrize("name", MEMBERS)
def test_edits_written_for_padded_rows_run_unchanged_on_segments(name):
    """Edit-only passes (the points outside attention on the texts' rows, those inside on the padded view) and a
    head mask; the pass that edits only outside attention attends call by call as an untraced one."""
    model = member(name)
    _, batch, mask, ends = texts(model)
    vector = on_device(torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(4)))
    cases = {
        "ablated head": {"layer.0.attention.context": ablate_head},
        "patched neuron": {"layer.*.ffn.intermediate": patch_neuron},
        "vector at a position": {"layer.0.output": add_at(vector)},
        "probabilities": {f"layer.{model.config.num_hidden_layers - 1}.attention.probs": halve_first_key},
        "zero_heads": iv.zero_heads({0: [0]}),
    }
    with torch.inference_mode():
        plain = bertfn.encoder(model, batch, mask).last_hidden_state[mask.bool()]
        for case, edits in cases.items():
            expected = bertfn.encoder(model, batch, mask, edits=edits).last_hidden_state[mask.bool()]  # (T, H)
            got = bertfn.encoder(model, ends, Segments(LENGTHS, batches=BATCHES.get(name)), edits=edits)
            assert (expected - plain).abs().max() > 1e-3, case  # the edit changes the pass
            torch.testing.assert_close(got.last_hidden_state[0], expected, **TOL, msg=case)
        heads = on_device(torch.tensor([1.0, 0.0]))
        expected = bertfn.encoder(model, batch, mask, head_mask=heads).last_hidden_state[mask.bool()]
        got = bertfn.encoder(model, ends, Segments(LENGTHS), head_mask=heads).last_hidden_state[0]
    torch.testing.assert_close(got, expected, **TOL)


@pytest.mark.parametrize("read", [False, True], ids=["every row", "rows read"])
def test_task_groups_with_edits_are_the_padded_batches(tiny_folder, read):
    """What fill_mask, score, classify and embed read (``encoded_groups`` with edits): each group's last hidden
    states, with edits that index the group's padded batch, as the group's padded batch gives them (the path those
    edits took before)."""
    m = bertfn.load(tiny_folder, device=DEVICE)
    enc = m.tokenizer(["the cat sat on the mat .", "a big dog", "when in rome do as the romans do", "hello world",
                       "the dog"])
    lengths = enc.attention_mask.sum(1).tolist()
    vector = on_device(torch.randn(m.config.hidden_size, generator=torch.Generator().manual_seed(4)))
    edits = {"layer.0.output": add_at(vector), "layer.1.attention.probs": halve_first_key}
    points = bertfn.Trace(keep=False, edits=edits)
    pick = (lambda rows, ids: torch.arange(0, ids.shape[1], 2, device=ids.device)) if read else None
    with torch.inference_mode():
        for rows, where, h in encoded_groups(m, enc, lengths, 3, pick, points):
            ns = [lengths[i] for i in rows]
            keep = (torch.arange(max(ns))[None, :] < torch.tensor(ns)[:, None]).long()  # (b, S)
            ids = enc.input_ids[rows, :max(ns)].masked_fill(keep == 0, 0)
            out = bertfn.encoder(m, on_device(ids), on_device(keep), on_device(enc.token_type_ids[rows, :max(ns)]),
                                 edits=edits).last_hidden_state
            expected = torch.cat([o[:n] for o, n in zip(out, ns)])  # (T, H)
            torch.testing.assert_close(h, expected if where is None else expected[where], **TOL)


def test_a_layer_traced_on_segments_reads_every_row_and_dropout_stays_refused():
    """Called on its own with ``read`` rows, a traced layer asks for Segments without them; dropout needs the padded
    layout. An untraced pass's trace is told no layout (NO_TRACE stays itself: nothing more per point)."""
    model = member("bert")
    _, _, _, ends = texts(model)
    x = bertfn.embeddings(model.params.scope("bert.embeddings"), ends)
    layer = model.params.layer(0)
    with torch.inference_mode():
        traced = bertfn.Trace()
        bertfn.layer(layer, x, Segments(LENGTHS), trace=traced)  # (B, S, H) points, as the encoder's
        assert traced.store["ffn.output"].shape == (len(LENGTHS), max(LENGTHS), model.config.hidden_size)
        with pytest.raises(bertfn.InputError, match="reads every row"):
            bertfn.layer(layer, x, Segments(LENGTHS, read=on_device(torch.tensor([0]))), trace=bertfn.Trace())
        with pytest.raises(bertfn.InputError, match="without dropout"):
            bertfn.encoder(model, ends, Segments(LENGTHS), generator=torch.Generator())
    assert NO_TRACE.on(Segments(LENGTHS)) is NO_TRACE


def test_a_chunked_feed_forward_traced_on_segments_records_the_padded_batch_s_chunks():
    """``chunk_size_feed_forward`` slices the padded batch's positions (``ffn.chunk.{n}.*``); on segments a traced
    pass slices the texts' padded batch the same way, so its chunk points and an edit of one are the padded pass's."""
    model = random_member({**BERT_LAYER["bert"], "chunk_size_feed_forward": 4})
    _, batch, mask, ends = texts(model)
    edits = {"layer.0.ffn.chunk.1.intermediate": patch_neuron}  # positions 4-7 of every text
    with torch.inference_mode():
        padded_trace, laid_trace = bertfn.Trace(edits=edits), bertfn.Trace(edits=edits)
        expected = bertfn.encoder(model, batch, mask, trace=padded_trace).last_hidden_state[mask.bool()]  # (T, H)
        got = bertfn.encoder(model, ends, Segments(LENGTHS), trace=laid_trace).last_hidden_state[0]
    torch.testing.assert_close(got, expected, **TOL)
    assert list(laid_trace.store) == list(padded_trace.store)
    assert "layer.0.ffn.chunk.2.output" in laid_trace.store  # S = 9: chunks of 4, 4 and 1 positions
    for n, text in zip(LENGTHS, range(len(LENGTHS))):  # chunk c holds positions 4c to 4c + 3 of every text
        for c in range(3):
            point = f"layer.1.ffn.chunk.{c}.output"
            real_rows = slice(0, max(0, min(4, n - 4 * c)))  # the chunk's positions the text has a token at
            torch.testing.assert_close(laid_trace.store[point][text, real_rows],
                                       padded_trace.store[point][text, real_rows], **TOL, msg=point)
