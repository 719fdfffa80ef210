"""The surface a user meets (issue 13): one way to pass a model, one argument order, dtype names, one
error for a missing part, short reprs, --version, a fast and clear answer without the hub, missing
optional libraries, empty texts, and the notebooks' first cell.

Everything here runs on a checkpoint written without transformers (conftest ``tiny_folder``), so it
also runs on the plain install's stack (.ci/run).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from conftest import TINY, random_model, write_folder
from safetensors.torch import load_file

import bertfn
from bertfn.cli import main
from bertfn.checkpoint.resolve import get_model

ROOT = Path(__file__).parent.parent
TEXT = "when in rome , do as the [MASK] do ."


@pytest.fixture(scope="module")
def tiny(tiny_folder) -> bertfn.Model:
    return bertfn.load(tiny_folder)


@pytest.fixture(scope="module")
def headless_folder(tmp_path_factory) -> Path:
    """An encoder-only checkpoint (no cls.*), like a sentence-embedding model."""
    model = random_model(bertfn.BertConfig(**TINY), seed=6, mlm=False)
    return write_folder(model, tmp_path_factory.mktemp("headless"))


# --- one way to pass a model to the pure functions -----------------------------------------------


def with_heads(state: dict, H: int) -> dict:
    """``state`` plus the task heads' weights (classifier with 2 labels, QA, NSP), random."""
    g = torch.Generator().manual_seed(3)
    extra = {"classifier.weight": (2, H), "classifier.bias": (2,), "qa_outputs.weight": (2, H), "qa_outputs.bias": (2,),
             "cls.seq_relationship.weight": (2, H), "cls.seq_relationship.bias": (2,)}
    return {**state, **{k: torch.randn(shape, generator=g) for k, shape in extra.items()}}


IDS = torch.tensor([[5, 20, 21, 22, 7, 6], [5, 30, 31, 6, 0, 0]])  # (2, 6): [CLS] ... [SEP] [PAD]
MASK = (IDS != 0).long()
H = TINY["hidden_size"]
h = torch.randn(2, 6, H, generator=torch.Generator().manual_seed(1))  # (B, S, H) hidden states
pooled = torch.randn(4, H, generator=torch.Generator().manual_seed(2))  # (B, H)

CALLS = {  # what each pure function is given besides the model, and its result as a flat tuple of tensors
    "encoder": lambda p, **kw: (bertfn.encoder(p, IDS, MASK, **kw).last_hidden_state,),
    "mlm_head": lambda p, **kw: (bertfn.mlm_head(p, h, **kw),),
    "pooler": lambda p, **kw: (bertfn.pooler(p, h, **kw),),
    "nsp_head": lambda p, **kw: (bertfn.nsp_head(p, pooled, **kw),),
    "sequence_classification": lambda p, **kw: (bertfn.sequence_classification(p, pooled, **kw),),
    "token_classification": lambda p, **kw: (bertfn.token_classification(p, h, **kw),),
    "question_answering": lambda p, **kw: bertfn.question_answering(p, h, **kw),
    "multiple_choice": lambda p, **kw: (bertfn.multiple_choice(p, pooled, num_choices=2, **kw),),
}


@pytest.mark.parametrize("name", CALLS)
def test_pure_function_takes_a_model_its_params_or_a_state_dict_with_config(name, tiny, tiny_folder):
    call = CALLS[name]
    model = dataclasses.replace(tiny, state=with_heads(tiny.state, H))
    # the flat state_dict as a file holds it: tied decoder absent, in the file's memory layout
    raw = with_heads(load_file(tiny_folder / "model.safetensors"), H)
    expected = call(model)
    for given, kw in ((model.params, {}), (raw, {"config": tiny.config}), (raw, {"config": tiny.config.to_dict()}),
                      (model.state, {"config": tiny.config})):
        for got, want in zip(call(given, **kw), expected, strict=True):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    with pytest.raises(bertfn.InputError, match=rf"{name} got a bare state_dict without its config; pass "
                                                r"config=BertConfig.from_file\('config.json'\)"):
        call(raw)
    with pytest.raises(bertfn.InputError, match=rf"{name} takes a Model from bertfn.load\(...\), its .params, or a "
                                                "state_dict with config=...; got str"):
        call("bert-base-uncased")


SCOPED = {  # function -> (the view it reads, as the error names it; a call on that view)
    "layer": ("model.params.layer(0)", lambda p, x: bertfn.layer(p, x).hidden),
    "feed_forward": ("model.params.layer(0)", lambda p, x: bertfn.feed_forward(p, x)),
    "attention": ("model.params.layer(0).scope('attention')", lambda p, x: bertfn.attention(p, x).hidden),
    "embeddings": ("model.params.scope('bert.embeddings')", lambda p, x: bertfn.embeddings(p, IDS[:1])),
}


@pytest.mark.parametrize("name", SCOPED)
def test_scoped_function_given_the_whole_model_names_the_view_to_pass(name, tiny):
    view, call = SCOPED[name]
    x = h[:1]
    for whole in (tiny, tiny.params, tiny.state):
        with pytest.raises(bertfn.InputError, match=re.escape(f"{name}() reads one part of the weights, so it takes "
                                                              f"the Params of that part, e.g. {view}; got the whole model")):
            call(whole, x)
    # the view it names is the one that works, and gives what the encoder computes
    p = eval(view, {"model": tiny})
    rec = bertfn.trace("the cat sat .", tiny)
    if name == "embeddings":
        torch.testing.assert_close(call(p, x), bertfn.encoder(tiny, IDS[:1], output_hidden_states=True).hidden_states[0])
    else:
        layer_input = rec["embeddings.output"]
        want = {"layer": "layer.0.output", "feed_forward": "layer.0.output", "attention": "layer.0.attention.output"}[name]
        x = rec["layer.0.attention.output"] if name == "feed_forward" else layer_input
        torch.testing.assert_close(call(p, x), rec[want], atol=1e-6, rtol=1e-6)


# --- one argument order --------------------------------------------------------------------------


def test_trace_old_order_works_with_a_deprecation_warning(tiny):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new order warns about nothing
        new = bertfn.trace(TEXT, tiny)
    with pytest.warns(DeprecationWarning, match=r"trace\(model, text\) is the old argument order .* write "
                                                r"trace\(text, model\)"):
        old = bertfn.trace(tiny, TEXT)
    assert old.tokens == new.tokens and old.keys() == new.keys()
    torch.testing.assert_close(old["mlm.logits"], new["mlm.logits"])


def test_trace_old_order_with_two_strings(tiny_folder):
    with pytest.warns(DeprecationWarning, match="old argument order"):
        rec = bertfn.trace(str(tiny_folder), TEXT)
    assert rec.tokens[rec.mask_positions[0]] == "[MASK]"


@pytest.mark.parametrize("call, name", [(bertfn.fill_mask, "fill_mask"), (bertfn.embed, "embed")])
def test_swapped_arguments_are_an_input_error(call, name, tiny, tiny_folder):
    with pytest.raises(bertfn.InputError, match=rf"{name} takes the texts first and the model second: "
                                                rf"{name}\(texts, model\); got the model \('{re.escape(tiny.name)}'\) first"):
        call(tiny, TEXT)
    with pytest.raises(bertfn.InputError, match=rf"{name} takes the texts first .*got the model \('{re.escape(str(tiny_folder)[:80])}'\)"):
        call(str(tiny_folder), TEXT)  # two strings: the second reads as text, the first is a folder here


# --- dtype names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name, dtype", [("bfloat16", torch.bfloat16), ("bf16", torch.bfloat16),
                                         ("torch.float16", torch.float16), ("fp32", torch.float32)])
def test_dtype_strings_equal_torch_dtypes(name, dtype, tiny, tiny_folder):
    assert bertfn.load(tiny_folder, dtype=name).dtype == dtype
    moved, expected = tiny.to(dtype=name), tiny.to(dtype=dtype)
    assert moved.dtype == dtype and all(torch.equal(moved.state[k], expected.state[k]) for k in tiny.state)
    assert get_model(str(tiny_folder), dtype=name) is get_model(str(tiny_folder), dtype=dtype)  # one cache entry
    assert bertfn.fill_mask(TEXT, tiny, dtype=name) == bertfn.fill_mask(TEXT, tiny, dtype=dtype)


@pytest.mark.parametrize("bad", ["int8", "bfloat", "float64x", 16, torch.int64])
def test_bad_dtype_is_an_input_error_everywhere(bad, tiny, tiny_folder):
    message = "dtype must be a floating-point torch.dtype or one of 'float32', "
    for call in (lambda: bertfn.load(tiny_folder, dtype=bad), lambda: tiny.to(dtype=bad),
                 lambda: bertfn.fill_mask(TEXT, tiny, dtype=bad), lambda: get_model(tiny, dtype=bad),
                 lambda: bertfn.embed("a text", tiny, dtype=bad)):
        with pytest.raises(bertfn.InputError, match=re.escape(message)):
            call()


# --- a missing part: one error type, one message shape -------------------------------------------

MISSING = r"^{what} needs {part}, and model '{name}' has none"


@pytest.mark.parametrize("what", ["fill_mask", "trace", "embed"])
def test_no_tokenizer_is_a_missing_part_error(what, tiny):
    blind = dataclasses.replace(tiny, tokenizer=None)
    with pytest.raises(bertfn.MissingPartError, match=MISSING.format(what=what, part="a tokenizer", name=re.escape(tiny.name))
                       + r"; load it with bertfn.load\(..., tokenizer=PATH\)"):
        getattr(bertfn, what)(TEXT, blind)


def test_no_mlm_head_is_a_missing_part_error(headless_folder, capsys):
    model = bertfn.load(headless_folder)
    with pytest.raises(bertfn.MissingPartError, match=MISSING.format(what="fill_mask", part=r"the masked-LM head \(cls.predictions.\*\)",
                                                                     name=re.escape(model.name))):
        bertfn.fill_mask(TEXT, model)
    rec = bertfn.trace(TEXT, model)  # a trace needs no head: it records the encoder, and no mlm.* names
    assert "mlm.logits" not in rec and "layer.1.output" in rec
    assert main(["fill-mask", TEXT, "--model", str(headless_folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertfn: error: fill-mask needs the masked-LM head") and err.count("\n") == 1


def test_no_tokenizer_on_the_cli_names_the_cli_option(tiny_folder, tmp_path, capsys):
    folder = tmp_path / "weights-only"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_folder / name, folder / name)
    assert main(["fill-mask", TEXT, "--model", str(folder)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("bertfn: error: fill_mask needs a tokenizer, and model") and "--tokenizer PATH" in err[-1]
    assert main(["fill-mask", TEXT, "--model", str(folder), "--tokenizer", str(tiny_folder / "vocab.txt"), "--json"]) == 0


# --- short reprs ---------------------------------------------------------------------------------


def test_model_repr_is_a_short_summary(tiny):
    text = repr(tiny)
    c = tiny.config
    n = sum(t.numel() for t in {id(t): t for t in tiny.state.values()}.values())
    assert len(text) < 500 and "\n" not in text
    for part in (f"{c.num_hidden_layers} layers", f"{c.num_attention_heads} heads", f"hidden {c.hidden_size}",
                 f"vocab {c.vocab_size}", f"{len(tiny.state)} tensors", f"{n:,} parameters", "torch.float32", "on cpu"):
        assert part in text, part
    assert str(tiny) == text


def test_recording_repr_shows_tokens_and_grouped_names(tiny):
    rec = bertfn.trace(TEXT, tiny)
    text = repr(rec)
    assert len(text) < 500 and text.startswith(f"Recording({len(rec.tokens)} tokens: [CLS] when in rome")
    assert f"[MASK] at {rec.mask_positions[0]}" in text and f"{len(rec.keys())} tensors" in text
    assert text.endswith("embeddings.*, layer.{0..1}.attention.*, layer.{0..1}.ffn.*, layer.{0..1}.output, pooler, mlm.*)")
    long = bertfn.trace(" ".join(["the cat sat on the mat ."] * 8), tiny)
    assert len(repr(long)) < 500 and f"({len(long.tokens) - 17} more) [SEP]" in repr(long)


# --- bertfn --version ----------------------------------------------------------------------------


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"bertfn {bertfn.__version__}\n"
    done = subprocess.run([sys.executable, "-m", "bertfn", "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == f"bertfn {bertfn.__version__}\n"
    assert done.stderr == ""  # no warning either: torch's "Failed to initialize NumPy" needs numpy installed


def test_numpy_is_a_dependency_not_a_filter():
    # read as text, not with tomllib, which Python 3.10 (requires-python's floor) does not have
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    dependencies = re.search(r"^dependencies = \[(.*?)^\]", text, re.M | re.S).group(1)
    assert re.search(r'^\s*"numpy\b', dependencies, re.M)
    assert not any("filterwarnings" in p.read_text(encoding="utf-8") for p in (ROOT / "bertfn").glob("*.py"))


def test_trace_is_the_function_and_trace_the_recorder_class(tiny):
    assert callable(bertfn.trace) and bertfn.trace.__module__ == "bertfn.inspect.trace"
    assert bertfn.Trace.__module__ == "bertfn.model.recorder" and isinstance(bertfn.trace("the cat", tiny), bertfn.Recording)
    for path in (ROOT / "bertfn").glob("*.py"):  # bertfn.trace is the function: no pointer may go through it
        assert "bertfn.trace.Trace" not in path.read_text(encoding="utf-8"), path


# --- without the hub: a clear answer at once -----------------------------------------------------


@pytest.fixture
def online(monkeypatch, tmp_path):
    """HF_HUB_OFFLINE unset and an empty Hugging Face cache: bertfn has to ask whether the hub answers."""
    import huggingface_hub.file_download
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    # huggingface_hub before 0.25 copied it into file_download at import (the plain install's floor is 0.23)
    monkeypatch.setattr(huggingface_hub.file_download, "HF_HUB_CACHE", str(cache), raising=False)
    return cache


@pytest.fixture
def closed_endpoint(online, monkeypatch) -> str:
    """The hub's address pointed at a local port nobody listens on: a real failed connection, no network."""
    from huggingface_hub import constants

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    return url


def no_downloads(monkeypatch) -> list:
    """Record every hf_hub_download call (there must be none)."""
    import huggingface_hub

    calls = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **kw: calls.append(a) or 1 / 0)
    return calls


def test_unknown_name_fails_fast_when_the_hub_is_unreachable(online, monkeypatch, capsys):
    monkeypatch.setattr(bertfn.checkpoint.loading, "hub_unreachable", lambda timeout=3.0: "huggingface.co: no route (test)")
    calls = no_downloads(monkeypatch)
    with pytest.raises(bertfn.ModelLoadError) as e:
        bertfn.load("bert-bsae-uncased")  # a typo of a local folder's name
    message = str(e.value)
    assert message.startswith("there is no folder named 'bert-bsae-uncased' here, and the Hugging Face hub cannot be "
                              "reached to download it (huggingface.co: no route (test))")
    assert "bertfn.load('./bert-bsae-uncased')" in message and "--model" not in message
    assert main(["fill-mask", TEXT, "--model", "bert-bsae-uncased"]) == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hub cannot be reached" in err and "--model ./bert-bsae-uncased" in err
    assert "bertfn.load" not in err
    assert calls == []


def test_unreachable_hub_is_one_short_attempt(closed_endpoint, monkeypatch):
    """The real check against a port that refuses: the answer comes at once, with no retry loop."""
    calls = no_downloads(monkeypatch)
    start = time.monotonic()
    with pytest.raises(bertfn.ModelLoadError, match=r"no folder named 'nosuchmodel' here, and the Hugging Face hub "
                                                    r"cannot be reached to download it \(127\.0\.0\.1: "):
        bertfn.load("nosuchmodel")
    assert time.monotonic() - start < 10  # one connection attempt (huggingface_hub's retries took 25 s)
    assert calls == []


def test_the_cache_is_used_when_the_hub_is_unreachable(closed_endpoint, online, tiny_folder, tiny):
    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = online / "models--some-org--tiny-bert"
    shutil.copytree(tiny_folder, repo / "snapshots" / sha)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    cached = bertfn.load("some-org/tiny-bert")
    assert cached.state.keys() == tiny.state.keys() and all(torch.equal(cached.state[k], tiny.state[k]) for k in tiny.state)


# --- optional libraries, empty texts -------------------------------------------------------------


def test_missing_matplotlib_is_a_dependency_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # importing it now fails
    rec_probs = torch.full((2, 3, 3), 1 / 3)
    with pytest.raises(bertfn.DependencyError, match=r"plotting needs matplotlib, .*: pip install matplotlib"):
        bertfn.plots.attention_heads(rec_probs, ["a", "b", "c"])
    out = tmp_path / "a.png"
    code = main(["attention", "the cat sat .", "--model", str(tmp_path / "not-even-loaded"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == bertfn.DependencyError.exit_code == 6 and err.count("\n") == 1
    assert err.startswith("bertfn: error: plotting needs matplotlib") and "pip install matplotlib" in err
    assert not out.exists()


@pytest.mark.parametrize("text, pair", [("", None), ("  \t", None), ("the cat", ""), ("the cat", " ")])
def test_trace_of_an_empty_text_is_an_input_error(text, pair, tiny):
    what = "the text" if not text.strip() else r"the second segment \(pair\)"
    with pytest.raises(bertfn.InputError, match=f"{what} is empty; write a sentence to run through the model"):
        bertfn.trace(text, tiny, pair=pair)


def test_trace_and_view_of_a_text_longer_than_the_model_reads_say_how_long_it_is(tiny, tiny_folder, tmp_path, capsys):
    """Not the embeddings' "position_ids must lie in [0, 64)", about an argument the user never passed."""
    long, limit = " ".join(["cat"] * 70), tiny.config.max_position_embeddings
    with pytest.raises(bertfn.InputError, match=rf"^the text is 72 tokens long but the model reads at most {limit}; shorten it$"):
        bertfn.trace(long, tiny)
    with pytest.raises(bertfn.InputError, match=rf"^the text is 73 tokens long with its pair but the model reads at most {limit}"):
        bertfn.trace(" ".join(["cat"] * 60), tiny, pair=" ".join(["dog"] * 10))
    with pytest.raises(bertfn.InputError, match=rf"^text 1 is 72 tokens long but the model reads at most {limit}"):
        bertfn.trace(["the cat", long], tiny)
    assert len(bertfn.trace(" ".join(["cat"] * (limit - 2)), tiny).tokens) == limit  # at the limit: traced
    out = tmp_path / "view.html"
    assert main(["view", long, "--model", str(tiny_folder), "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"bertfn: error: the text is 72 tokens long but the model reads at most {limit}; shorten it\n"
    assert not out.exists()


@pytest.mark.parametrize("text", ["", "   "])
def test_cli_attention_of_an_empty_text(text, tiny_folder, tmp_path, capsys):
    pytest.importorskip("matplotlib")  # without it the command stops earlier, at the missing library
    out = tmp_path / "a.png"
    assert main(["attention", text, "--model", str(tiny_folder), "--out", str(out)]) == 2
    assert capsys.readouterr().err == "bertfn: error: the text is empty; write a sentence to run through the model\n"
    assert not out.exists()
