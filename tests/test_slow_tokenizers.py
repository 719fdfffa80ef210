"""The slow tokenizers' files (bertfn/checkpoint/slow_tokenizers.py) held to transformers 4.57's fast tokenizers
converted from them, on REAL models trained here from real text.

The text is Debian's fortunes (.ci/run installs the package): the first lines of every file train the models, lines
further on (never seen in training) are tokenized, with :data:`HARD` lines of accents, CJK, emoji, several spaces,
leading spaces, masks inside words and specials written in text. The models (:func:`trained`, about 3 seconds):

- ``roberta``: a byte-level BPE trained with the ``tokenizers`` library, saved as ``vocab.json`` + ``merges.txt``;
- ``xlm-roberta``: a unigram SentencePiece model (the library's defaults: ``<unk> <s> </s>`` at 0-2, nmt_nfkc) with a
  user-defined piece ``<br>``, as ``sentencepiece.bpe.model``;
- ``camembert``: a BPE SentencePiece model, as ``sentencepiece.bpe.model``;
- ``albert``: a unigram SentencePiece model numbered as ALBERT's (``<pad> <unk> [CLS] [SEP]``, the control piece
  ``[MASK]``), as ``spiece.model``.

Each is put in a folder three ways (:data:`STYLES`): as the slow class saves it today (``save_pretrained``: the
tokenizer_config.json with ``added_tokens_decoder``), as transformers before 4.34 did (no ``added_tokens_decoder``;
special_tokens_map.json with the mask token as a dict; an ``added_tokens.json`` of two new tokens) and bare (the model
file and config.json only). bertfn's :class:`bertfn.Tokenizer` of the folder and ``AutoTokenizer.from_pretrained`` of
it (the fast tokenizer, converted: ``RobertaTokenizerFast``, ``XLMRobertaTokenizerFast``, ``CamembertTokenizerFast``,
``AlbertTokenizerFast``) hold the same pipeline (tokenizer.json's every part but padding) and give the same ids,
token types, attention masks, tokens, offsets, word ids and decoding, for single texts, padded batches and pairs.
"""

from __future__ import annotations

import io
import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from conftest import assert_same_batch

import bertfn
from bertfn.checkpoint.sentencepiece import read_model
from family_checkpoints import MODEL_CLASSES, PREFIXES, member_config

pytestmark = [pytest.mark.needs_transformers, pytest.mark.filterwarnings("ignore::bertfn.UnknownTokensWarning")]
spm = pytest.importorskip("sentencepiece")

FORTUNES = Path("/usr/share/games/fortunes")

HARD = [
    "", " ", "   ", "  leading spaces", "trailing spaces   ", "several   spaces\there\nnew\r\nline\t",
    "Café naïve ÅNGSTRÖM São Paulo, déjà vu, Œuvre, Straße", "A\u0302\u0300 e\u0301", "ｆｕｌｌｗｉｄｔｈ ﬁ ① ½ Ⅻ",
    "東京は日本の首都です。北京", "🙂 😀 🚀 👍🏽 ❤️", "unknown ☃ ⚙ ꙮ 𝔘", "zero\u200bwidth\u00a0nbsp\u3000ideographic",
    "a <mask> b", "a<mask>b", "<mask>", " <mask>", "  <mask>  x", "[MASK] a[MASK]b", "x [MASK]", "<s> </s> <pad> <unk>",
    "[CLS] [SEP] <br> x<br>y", "``quoted'' and ''this''", "3,5 and 12, 1,000, 7,", "it's 3.14 -- don't!",
    "<ent> x<ent2>y", "The capital of France is <mask>.",
]
"""Texts that exercise each step: spaces (leading, runs, tabs, newlines), NFKC and accents, characters no piece
covers, each member's mask token and specials written in text and inside words, ALBERT's quotes and number-commas,
the added tokens of the old style."""

STYLES = ("saved", "old", "bare")
FILES = {"roberta": ("vocab.json", "merges.txt"), "xlm-roberta": ("sentencepiece.bpe.model",),
         "camembert": ("sentencepiece.bpe.model",), "albert": ("spiece.model",)}
CLASSES = {"roberta": "RobertaTokenizer", "xlm-roberta": "XLMRobertaTokenizer", "camembert": "CamembertTokenizer",
           "albert": "AlbertTokenizer"}


def fortunes() -> list[str]:
    """Every non-empty line of the fortunes files, in file order."""
    lines = []
    for path in sorted(FORTUNES.iterdir()):
        if path.is_file() and path.suffix not in (".dat", ".u8"):
            lines += [line for line in path.read_text("utf-8", errors="replace").splitlines() if line.strip()]
    return lines


@pytest.fixture(scope="module")
def lines() -> tuple[list[str], list[str]]:
    """(the training lines, 300 other lines to tokenize)."""
    every = fortunes()
    assert len(every) > 10_000, f"{FORTUNES} should hold Debian's fortunes (apt-get install fortunes)"
    mixed = ["Café naïve résumé déjà vu Ångström façade Über Straße Ærø Œuvre São Paulo",
             "東京は日本の首都です 🙂 🚀 ｆｕｌｌ ﬁ ½ 3,5 12,"] * 3
    return every[:2500] + mixed, every[6000:12000:20]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, lines) -> dict[str, Path]:
    """Each kind's trained model files, in a folder of their own (see the module's docstring)."""
    from tokenizers import ByteLevelBPETokenizer

    train, where = lines[0], tmp_path_factory.mktemp("trained")
    settings = {"xlm-roberta": dict(model_type="unigram", user_defined_symbols=["<br>"]),
                "camembert": dict(model_type="bpe"),
                "albert": dict(model_type="unigram", pad_id=0, unk_id=1, bos_id=2, eos_id=3, pad_piece="<pad>",
                               unk_piece="<unk>", bos_piece="[CLS]", eos_piece="[SEP]", control_symbols=["[MASK]"])}
    folders = {}
    for kind, extra in settings.items():
        out = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(train), model_writer=out, vocab_size=800, minloglevel=2,
                                       num_threads=1, **extra)
        folders[kind] = where / kind
        folders[kind].mkdir()
        (folders[kind] / FILES[kind][0]).write_bytes(out.getvalue())
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(train, vocab_size=800, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    folders["roberta"] = where / "roberta"
    folders["roberta"].mkdir()
    bpe.save_model(str(folders["roberta"]))
    return folders


def slow_tokenizer(kind: str, source: Path):
    """transformers' slow tokenizer of ``kind`` over the files in ``source``."""
    import transformers

    files = dict(zip(("vocab_file", "merges_file"), (str(source / name) for name in FILES[kind])))
    return getattr(transformers, CLASSES[kind])(**files)


def folder_of(kind: str, style: str, source: Path, folder: Path) -> Path:
    """A folder of ``kind``'s tokenizer written in ``style`` (:data:`STYLES`; the module's docstring), with a
    config.json naming the model type.

    Args:
        kind: the member.
        style: ``"saved"``, ``"old"`` or ``"bare"``.
        source: the trained files (:func:`trained`).
        folder: where to write it (made here).
    """
    folder.mkdir(parents=True)
    if style == "bare":
        for name in FILES[kind]:
            shutil.copy(source / name, folder / name)
    else:
        slow_tokenizer(kind, source).save_pretrained(str(folder))
    if style == "old":  # as transformers < 4.34 wrote it
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config.pop("added_tokens_decoder")
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        names = json.loads((folder / "special_tokens_map.json").read_text())
        mask = names["mask_token"]
        names["mask_token"] = {"content": mask if isinstance(mask, str) else mask["content"], "lstrip": True,
                               "rstrip": False, "normalized": True, "single_word": False}
        (folder / "special_tokens_map.json").write_text(json.dumps(names))
        size = len(slow_tokenizer(kind, source))
        (folder / "added_tokens.json").write_text(json.dumps({"<ent>": size, "<ent2>": size + 1}))
    (folder / "config.json").write_text(json.dumps({"model_type": kind}))
    return folder


def fast_of(folder: Path):
    """transformers' fast tokenizer of ``folder``, converted from its slow tokenizer's files."""
    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(str(folder))


def pipeline_of(backend) -> dict:
    """A ``tokenizers`` tokenizer's parts as tokenizer.json holds them, but padding and truncation."""
    spec = json.loads(backend.to_str())
    return {k: v for k, v in spec.items() if k not in ("padding", "truncation")}


@pytest.mark.parametrize("style", [STYLES[0], *(pytest.param(s, marks=pytest.mark.slow) for s in STYLES[1:])])
@pytest.mark.parametrize("kind", list(FILES))
def test_bertfn_equals_the_converted_fast_tokenizer(trained, lines, tmp_path, kind, style):
    folder = folder_of(kind, style, trained[kind], tmp_path / "hub")
    ours, fast = bertfn.Tokenizer.from_path(folder), fast_of(folder)
    assert type(fast).__name__ == CLASSES[kind] + "Fast"
    assert pipeline_of(ours.backend) == pipeline_of(fast.backend_tokenizer)
    assert ours.mask_token == fast.mask_token and ours.mask_token_id == fast.mask_token_id
    assert (ours.cls_token_id, ours.sep_token_id, ours.pad_token_id) == (fast.cls_token_id, fast.sep_token_id,
                                                                        fast.pad_token_id)
    texts = lines[1] + HARD
    assert_same_batch(ours, fast, texts)
    assert_same_batch(ours, fast, texts, texts[::-1])
    for text in HARD:
        assert_same_batch(ours, fast, [text])  # alone: no padding
    for ids in fast(texts[::7] + HARD)["input_ids"]:
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == fast.decode(ids, skip_special_tokens=skip), ids


@pytest.mark.parametrize(("kind", "options"), [
    ("roberta", {"add_prefix_space": True}), ("roberta", {"trim_offsets": False}),
    ("roberta", {"add_prefix_space": True, "trim_offsets": False}),
    ("albert", {"do_lower_case": False}), ("albert", {"keep_accents": True}),
    ("albert", {"do_lower_case": False, "keep_accents": True, "remove_space": False}),
    ("xlm-roberta", {"add_prefix_space": False}),  # the slow class has no such setting: the converter prepends always
    ("xlm-roberta", {"added_tokens_decoder": {}}),  # listed, though empty: special_tokens_map.json is not read
    ("camembert", {"mask_token": {"__type": "AddedToken", "content": "<mask>", "lstrip": False, "normalized": True,
                                  "rstrip": False, "single_word": False}}),  # as transformers 4.2x wrote it
])
def test_the_settings_the_converters_read(trained, lines, tmp_path, kind, options):
    folder = folder_of(kind, "old" if "added_tokens_decoder" in options else "saved", trained[kind], tmp_path / "hub")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, **options}))
    ours, fast = bertfn.Tokenizer.from_path(folder), fast_of(folder)
    assert pipeline_of(ours.backend) == pipeline_of(fast.backend_tokenizer)
    assert_same_batch(ours, fast, lines[1][:50] + HARD, HARD + lines[1][:50])


def test_which_sentencepiece_bpe_model_is_whose(trained, tmp_path):
    """A sentencepiece.bpe.model is XLM-R's or CamemBERT's: tokenizer_config.json's tokenizer_class says which (even
    against the model's kind), else config.json's model_type, else the model (CamemBERT's is BPE, XLM-R's unigram)."""
    cases = [("camembert", "XLMRobertaTokenizerFast", "xlm-roberta"), ("xlm-roberta", "CamembertTokenizer", "camembert"),
             ("camembert", None, None), ("xlm-roberta", None, None)]
    for i, (model, named, model_type) in enumerate(cases):
        folder = tmp_path / str(i)
        folder.mkdir()
        shutil.copy(trained[model] / "sentencepiece.bpe.model", folder)
        if named:
            (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": named}))
            (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
        ours = bertfn.Tokenizer.from_path(folder)
        want = fast_of(folder) if named else fast_of(folder_of(model, "bare", trained[model], tmp_path / f"{i}-hub"))
        assert pipeline_of(ours.backend) == pipeline_of(want.backend_tokenizer), (model, named)
    (tmp_path / "0" / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "T5Tokenizer"}))
    with pytest.raises(bertfn.CheckpointError, match="names the tokenizer class T5Tokenizer, which bertfn does not read "
                                                     "sentencepiece.bpe.model as .*XLMRobertaTokenizer or Camembert"):
        bertfn.Tokenizer.from_path(tmp_path / "0")


def test_lowercase_sets_albert_do_lower_case_and_no_other(trained, tmp_path):
    albert = folder_of("albert", "saved", trained["albert"], tmp_path / "albert")
    cased = bertfn.Tokenizer.from_path(albert, lowercase=False)
    config = json.loads((albert / "tokenizer_config.json").read_text())
    (albert / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": False}))
    assert pipeline_of(cased.backend) == pipeline_of(fast_of(albert).backend_tokenizer)
    for kind in ("roberta", "xlm-roberta"):
        folder = folder_of(kind, "bare", trained[kind], tmp_path / kind)
        with pytest.raises(bertfn.InputError, match="keeps case as transformers reads it, so lowercase= cannot change"):
            bertfn.Tokenizer.from_path(folder, lowercase=False)


def test_cased_on_the_command_line_is_named_so(trained, tiny_folder, tmp_path, capsys):
    """The command line's --cased, given for a tokenizer it cannot change, is named as typed (not lowercase=)."""
    from bertfn.cli import main

    folder = folder_of("roberta", "bare", trained["roberta"], tmp_path / "roberta")
    assert main(["fill-mask", "a <mask>", "--model", str(tiny_folder), "--tokenizer", str(folder), "--cased"]) \
        == bertfn.InputError.exit_code
    err = capsys.readouterr().err
    assert "so --cased cannot change it; leave it out" in err and "lowercase=" not in err


def test_read_model_reads_what_sentencepiece_reads(trained):
    for kind in ("xlm-roberta", "camembert", "albert"):
        path = trained[kind] / FILES[kind][0]
        sp = spm.SentencePieceProcessor(model_file=str(path))
        model = read_model(path)
        assert [p for p, _, _ in model.pieces] == [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        assert [s for _, s, _ in model.pieces] == [sp.get_score(i) for i in range(sp.get_piece_size())]
        assert model.unk_id == sp.unk_id() and model.unk_piece == sp.id_to_piece(sp.unk_id()) == "<unk>"
        assert model.model_type == (2 if kind == "camembert" else 1) and len(model.charsmap) > 1000


def test_broken_files_say_what_is_wrong(trained, tmp_path):
    folder = tmp_path / "xlmr"
    folder.mkdir()
    data = (trained["xlm-roberta"] / "sentencepiece.bpe.model").read_bytes()
    (folder / "sentencepiece.bpe.model").write_bytes(data[:len(data) // 2])  # cut short
    with pytest.raises(bertfn.CheckpointError, match="cannot be read as a SentencePiece model: .*cut short"):
        bertfn.Tokenizer.from_path(folder)
    shutil.copy(trained["roberta"] / "vocab.json", folder / "sentencepiece.bpe.model")  # another file under its name
    with pytest.raises(bertfn.CheckpointError, match="SentencePiece model.*re-download it"):
        bertfn.Tokenizer.from_path(folder)
    (folder / "sentencepiece.bpe.model").write_bytes(b"")
    with pytest.raises(bertfn.CheckpointError, match="is not a SentencePiece model \\(0 pieces"):
        bertfn.Tokenizer.from_path(folder)
    roberta = tmp_path / "roberta"
    shutil.copytree(trained["roberta"], roberta)
    merges = (roberta / "merges.txt").read_text()
    (roberta / "merges.txt").write_text(merges + "Ġzzzq Ġqqqz\n")  # tokens the vocabulary lacks
    with pytest.raises(bertfn.CheckpointError, match="merges.txt does not go with .*vocab.json"):
        bertfn.Tokenizer.from_path(roberta)
    (roberta / "merges.txt").write_text(merges + "a b c\n")
    with pytest.raises(bertfn.CheckpointError, match="'a b c' is not a merge"):
        bertfn.Tokenizer.from_path(roberta)
    (roberta / "merges.txt").unlink()
    with pytest.raises(bertfn.CheckpointError, match="has vocab.json but no merges.txt"):
        bertfn.Tokenizer.from_path(roberta / "vocab.json")


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(FILES))
def test_a_model_folder_with_a_slow_tokenizer_fills_masks_and_classifies_as_the_pipelines(trained, tmp_path, kind):
    """A small model of each member saved by transformers with its slow tokenizer's files (no tokenizer.json) loads
    with bertfn.load(folder) and gives the pipelines' answers; bertfn.save keeps the files, which both read back."""
    import transformers

    tok = slow_tokenizer(kind, trained[kind])
    size = len(tok)
    torch.manual_seed(0)
    texts = ["The capital of France is <mask>.", "Man is the only <mask> that blushes, or needs to."]
    texts = [t.replace("<mask>", tok.mask_token) for t in texts]
    folders = {}
    for task, suffix in (("fill-mask", MODEL_CLASSES[kind]), ("text-classification", PREFIXES[kind] +
                                                               "ForSequenceClassification")):
        config = member_config(kind, size, num_labels=3, id2label={0: "sad", 1: "calm", 2: "glad"},
                               label2id={"sad": 0, "calm": 1, "glad": 2})
        folders[task] = tmp_path / task
        getattr(transformers, suffix)(config).eval().save_pretrained(folders[task])
        tok.save_pretrained(str(folders[task]))
        assert not (folders[task] / "tokenizer.json").exists()
    model = bertfn.load(folders["fill-mask"])
    pipe = transformers.pipeline("fill-mask", model=str(folders["fill-mask"]), device="cpu")
    for ours, theirs in zip(bertfn.fill_mask(texts, model, top_k=5), pipe(texts, top_k=5), strict=True):
        assert [a["token"] for a in ours] == [a["token"] for a in theirs]
        assert [a["token_str"] for a in ours] == [a["token_str"] for a in theirs]
        assert [a["sequence"] for a in ours] == [a["sequence"] for a in theirs]
        torch.testing.assert_close([a["score"] for a in ours], [a["score"] for a in theirs], atol=1e-5, rtol=1e-4)
    classifier = bertfn.load(folders["text-classification"])
    pipe = transformers.pipeline("text-classification", model=str(folders["text-classification"]), device="cpu")
    plain = [t.replace(tok.mask_token, "Paris") for t in texts]
    for ours, theirs in zip(bertfn.classify(plain, classifier), pipe(plain), strict=True):
        best = ours[0] if isinstance(ours, list) else ours
        assert best["label"] == theirs["label"]
        torch.testing.assert_close(best["score"], theirs["score"], atol=1e-5, rtol=1e-4)
    saved = bertfn.save(model, tmp_path / "saved")
    assert sorted(p.name for p in saved.iterdir() if p.name in sum(FILES.values(), ())) == sorted(FILES[kind])
    again = bertfn.load(saved)
    assert again.tokenizer.backend.to_str() == model.tokenizer.backend.to_str()
    assert torch.equal(again.tokenizer(plain).input_ids, fast_of(saved)(plain, padding=True, return_tensors="pt")["input_ids"])


@pytest.mark.parametrize("kind", ["roberta", "albert"])
def test_a_hub_model_with_a_slow_tokenizer_brings_its_files(trained, tmp_path, monkeypatch, kind):
    """For a hub id whose repo has no tokenizer.json nor vocab.txt, load fetches its other vocabulary (RoBERTa's
    vocab.json with merges.txt, ALBERT's spiece.model) and added_tokens.json, and reads them."""
    import transformers
    from conftest import cached_on_hub

    folder = folder_of(kind, "old", trained[kind], tmp_path / "repo")  # with added_tokens.json's <ent> and <ent2>
    config = member_config(kind, len(slow_tokenizer(kind, trained[kind])) + 2)
    getattr(transformers, MODEL_CLASSES[kind])(config).save_pretrained(folder)
    asked = cached_on_hub(folder, f"some-org/{kind}-slow", tmp_path, monkeypatch)
    model = bertfn.load(f"some-org/{kind}-slow")
    assert {*FILES[kind], "added_tokens.json"} <= set(asked) and "spm.model" in asked
    assert pipeline_of(model.tokenizer.backend) == pipeline_of(fast_of(folder).backend_tokenizer)
    assert model.tokenizer.token_to_id("<ent2>") == config.vocab_size - 1


OTHER_TRAININGS = {
    "albert-without-mask": ("albert", dict(model_type="unigram", pad_id=0, unk_id=1, bos_id=2, eos_id=3,
                                           pad_piece="<pad>", unk_piece="<unk>", bos_piece="[CLS]", eos_piece="[SEP]")),
    "albert-bpe-casefolded": ("albert", dict(model_type="bpe", pad_id=0, unk_id=1, bos_id=2, eos_id=3, pad_piece="<pad>",
                                             unk_piece="<unk>", bos_piece="[CLS]", eos_piece="[SEP]",
                                             control_symbols=["[MASK]"], normalization_rule_name="nmt_nfkc_cf")),
    "camembert-byte-fallback": ("camembert", dict(model_type="bpe", byte_fallback=True, user_defined_symbols=["<br>"])),
    "xlm-roberta-identity": ("xlm-roberta", dict(model_type="unigram", normalization_rule_name="identity",
                                                 control_symbols=["<ctl>"])),
}
"""SentencePiece models trained otherwise than :func:`trained`'s: ALBERT's without a ``[MASK]`` piece (the tokenizer
adds it last), a BPE one case-folding; byte fallback (which the converters leave off) with a user-defined piece; no
character map at all."""


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OTHER_TRAININGS))
def test_other_sentencepiece_trainings(lines, tmp_path, name):
    kind, settings = OTHER_TRAININGS[name]
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines[0][:1500]), model_writer=out, vocab_size=600,
                                   minloglevel=2, num_threads=1, **settings)
    (tmp_path / "trained").mkdir()
    (tmp_path / "trained" / FILES[kind][0]).write_bytes(out.getvalue())
    folder = folder_of(kind, "saved", tmp_path / "trained", tmp_path / "hub")
    ours, fast = bertfn.Tokenizer.from_path(folder), fast_of(folder)
    assert pipeline_of(ours.backend) == pipeline_of(fast.backend_tokenizer)
    assert_same_batch(ours, fast, lines[1][:100] + HARD, HARD + lines[1][:100])
