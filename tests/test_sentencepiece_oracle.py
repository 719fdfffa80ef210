"""DeBERTa-v2/v3's ``spm.model`` read as data (bertfn/checkpoint/sentencepiece.py) held to transformers 4.57's own
tokenizers on REAL SentencePiece models.

The models are trained here with ``sentencepiece.SentencePieceTrainer`` (:func:`spm_files`, about half a second)
on real text (600 lines of this repository's docs/*.md) plus lines of accents, CJK, emoji, fullwidth letters and
ligatures, so that NFKC, unknown characters and rare pieces all occur:

- ``v3``: a unigram model as DeBERTa-v3's ``spm.model`` is trained: ``[PAD]`` ``[CLS]`` ``[SEP]`` ``[UNK]`` at ids
  0-3 (pad, bos, eos, unk), the default ``nmt_nfkc`` normalizer (a precompiled character map), dummy prefix and
  extra-whitespace removal on, no byte fallback (the hub's DeBERTa-v3 vocabularies hold no ``<0x..>`` pieces);
- ``variant``: the same with byte fallback (``<0x00>``...``<0xFF>`` pieces), a user-defined piece ``<br>`` and a
  control piece ``<ctl>``, which DebertaV2Converter also handles;
- ``bpe``: a BPE model, which bertfn refuses (DeBERTa's are unigram).

Each is put in a hub-like folder (``spm.model``, the ``tokenizer_config.json`` and ``special_tokens_map.json`` the
hub ships, ``config.json``; no ``tokenizer.json``) and read three ways: bertfn's :class:`bertfn.Tokenizer`,
``AutoTokenizer`` (DebertaV2TokenizerFast, built by transformers' slow->fast converter: what the pipelines use, so
the oracle) and ``AutoTokenizer(use_fast=False)`` (DebertaV2Tokenizer, the sentencepiece library itself). bertfn
equals the fast one in ids, token types, attention masks, tokens, offsets and word ids, for single texts, pairs
and padded batches, with ``do_lower_case`` and ``split_by_punct`` each on and off; decoding too. Where the slow
tokenizer differs from the fast one (byte fallback, control pieces written in text, spaces before punctuation
with ``split_by_punct``, a space before ``[UNK]``) bertfn follows the fast one:
:func:`test_where_the_slow_tokenizer_differs_bertfn_follows_the_fast_one` names each case.
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import pytest
import torch

from conftest import assert_same_batch

import bertfn
from bertfn.checkpoint.sentencepiece import read_model

# the hard texts are mostly [UNK] on purpose: bertfn says so (UnknownTokensWarning), which is not under test here
pytestmark = [pytest.mark.needs_transformers, pytest.mark.filterwarnings("ignore::bertfn.UnknownTokensWarning")]
spm = pytest.importorskip("sentencepiece")

MIXED = [
    "Café, naïve résumé: déjà vu at the Ångström façade. Über Straße, Ærø, Œuvre, São Paulo.",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다。",
    "Numbers: 3.14159, 2,718, 1e-5, 42%, $100, #1, version 4.57.6 (2026-11-28).",
    "Emoji: 🙂 🚀 👍🏽 ❤️ — “quotes” ‘single’ «guillemets» … ½ ﬁ ① Ⅻ ｆｕｌｌｗｉｄｔｈ",
    "Tabs\tand  double  spaces, <br> a user-defined piece, [MASK] and [CLS] written in text.",
]
"""Lines beside the docs, three times each, so that their characters are in the vocabulary (some, rarer, not)."""

HARD = [
    "Hello world!", "", " ", "   ", "  leading and trailing  ", "multiple   spaces\there\nnew\r\nline\t",
    "Café naïve ÅNGSTRÖM São", "A\u0302\u0300 e\u0301", "ｆｕｌｌｗｉｄｔｈ ﬁ ① ½ Ⅻ ㎏", "東京は日本の首都です。北京",
    "🙂 😀 🚀 👍🏽 ❤️", "unknown ☃ ⚙ ꙮ 𝔘 \u0378", "zero\u200bwidth\u00a0nbsp\u3000ideographic",
    "a [MASK] b", "a[MASK]b", "[MASK]", "[mask] lower", "[CLS] x [SEP] [PAD] [UNK]", "A [UNK]", "x[UNK]y", "[unk]",
    "ＵＮＫ [UNK]", "it's 3.14 -- don't!", "a -b, (c) [d] {e}.", "line<br>break <br> <ctl> x<ctl>y",
    "Special cases aren't special enough to break the rules.",
]
"""Texts that exercise each step: Strip, NFKC (the character map), runs of spaces, tabs and newlines, accents as
combining marks, CJK, emoji, characters no piece covers, specials written in text, punctuation."""

OPTIONS = [{}, {"do_lower_case": True}, {"split_by_punct": True}, {"do_lower_case": True, "split_by_punct": True}]
SPECIALS = dict(bos_token="[CLS]", eos_token="[SEP]", unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
                cls_token="[CLS]", mask_token="[MASK]")
"""special_tokens_map.json as microsoft/deberta-v3-base ships it."""


def corpus() -> list[str]:
    """The training lines: the first 600 of this repository's docs pages (real prose, code and tables; more only
    slows the training), then :data:`MIXED`; never "☃", which the tests need unknown."""
    docs = Path(__file__).resolve().parents[1] / "docs"
    lines = [line for page in sorted(docs.glob("*.md")) for line in page.read_text("utf-8").splitlines()]
    return [line.replace("☃", "") for line in [*lines[:600], *MIXED * 3] if line.strip()]


@pytest.fixture(scope="module")
def spm_files(tmp_path_factory) -> dict[str, Path]:
    """The trained ``spm.model`` files by name: ``v3``, ``variant`` and ``bpe`` (see the module's docstring)."""
    lines, where, files = corpus(), tmp_path_factory.mktemp("spm"), {}
    deberta = dict(pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]", bos_piece="[CLS]", eos_piece="[SEP]",
                   unk_piece="[UNK]", vocab_size=500, minloglevel=2, num_threads=1)
    kinds = {"v3": dict(model_type="unigram"),
             "variant": dict(model_type="unigram", byte_fallback=True, user_defined_symbols=["<br>"],
                             control_symbols=["<ctl>"]),
             "bpe": dict(model_type="bpe")}
    for name, settings in kinds.items():
        out = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, **deberta, **settings)
        files[name] = where / f"{name}.model"
        files[name].write_bytes(out.getvalue())
    return files


def hub_folder(folder: Path, model: Path, options: dict) -> Path:
    """A DeBERTa-v3 hub folder without weights: ``spm.model``, ``tokenizer_config.json`` (``do_lower_case`` false
    and ``vocab_type`` "spm", as the hub's, with ``options`` over them), ``special_tokens_map.json``, ``config.json``.

    Args:
        folder: where to write it (made here).
        model: the ``spm.model`` to copy in.
        options: tokenizer_config.json's fields to set (``do_lower_case``, ``split_by_punct``).
    """
    folder.mkdir()
    (folder / "spm.model").write_bytes(model.read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "vocab_type": "spm", **options}))
    (folder / "special_tokens_map.json").write_text(json.dumps(SPECIALS))
    (folder / "config.json").write_text(json.dumps({"model_type": "deberta-v2", "vocab_size": 128100}))
    return folder


def three(folder: Path):
    """bertfn's tokenizer, transformers' fast one (converted from the slow one) and the slow one, of ``folder``.

    Args:
        folder: a :func:`hub_folder`.
    """
    from transformers import AutoTokenizer, DebertaV2Tokenizer, DebertaV2TokenizerFast

    with warnings.catch_warnings():  # the converter's warning that byte fallback is not carried over
        warnings.simplefilter("ignore")
        fast = AutoTokenizer.from_pretrained(folder)
    slow = AutoTokenizer.from_pretrained(folder, use_fast=False)
    assert type(fast) is DebertaV2TokenizerFast and type(slow) is DebertaV2Tokenizer
    return bertfn.Tokenizer.from_path(folder), fast, slow


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "+".join(o) or "hub")
@pytest.mark.parametrize("name", ["v3", "variant"])
def test_bertfn_equals_the_converted_fast_tokenizer(spm_files, tmp_path, name, options):
    ours, fast, _ = three(hub_folder(tmp_path / "hub", spm_files[name], options))
    pieces = read_model(spm_files[name]).pieces
    assert ours.vocab_size == len(fast) and ours.mask_token_id == fast.mask_token_id == len(pieces)  # [MASK] after
    for text in HARD:  # one at a time: no padding
        assert_same_batch(ours, fast, [text])
    assert_same_batch(ours, fast, HARD)  # a padded batch
    assert_same_batch(ours, fast, HARD, HARD[::-1])  # pairs: [CLS] A [SEP] B [SEP], token types 0 then 1
    for text in HARD:
        ids = fast(text)["input_ids"]
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == fast.decode(ids, skip_special_tokens=skip), text


@pytest.mark.parametrize("options", OPTIONS[:2], ids=["hub", "do_lower_case"])
def test_bertfn_equals_sentencepiece_itself_on_deberta_v3s_kind(spm_files, tmp_path, options):
    """Without split_by_punct and byte fallback, the slow tokenizer (the sentencepiece library) agrees too, but for
    [UNK] after a space or "[unk]" lowercased (see the next test)."""
    ours, _, slow = three(hub_folder(tmp_path / "hub", spm_files["v3"], options))
    for text in HARD:
        if " [UNK]" not in text and text != "[unk]":
            assert ours([text]).input_ids[0].tolist() == slow(text)["input_ids"], text


@pytest.mark.parametrize(("name", "options", "text", "why"), [
    ("variant", {}, "snow ☃", "byte fallback: the slow one writes ☃ as <0xE2> <0x98> <0x83>; the converter keeps "
                              "no byte fallback (DebertaV2Converter.handle_byte_fallback is False): [UNK]"),
    ("variant", {}, "x<ctl>y", "a control piece in text: the slow one never matches it (pieces of '<ctl>'), the fast "
                               "one holds it as a special added token"),
    ("v3", {"split_by_punct": True}, "a -b", "split_by_punct: the slow one encodes each word apart (spaces "
                                             "stripped), the fast one keeps the space before '-' as a lone ▁"),
    ("v3", {}, "A [UNK]", "the fast one matches [UNK] (normalized=True) in the normalized text, so the space before "
                          "it is a ▁ of its own; the slow one splits [UNK] off first and strips the space"),
    ("v3", {"do_lower_case": True}, "[unk]", "lowercasing: the fast one's [UNK] is matched as '[unk]' after its "
                                             "Lowercase step; the slow one writes '[unk]' in pieces"),
])
def test_where_the_slow_tokenizer_differs_bertfn_follows_the_fast_one(spm_files, tmp_path, name, options, text, why):
    ours, fast, slow = three(hub_folder(tmp_path / "hub", spm_files[name], options))
    assert slow(text)["input_ids"] != fast(text)["input_ids"], why
    assert_same_batch(ours, fast, [text])


def test_lowercase_given_to_from_path_equals_do_lower_case(spm_files, tmp_path):
    ours = bertfn.Tokenizer.from_path(hub_folder(tmp_path / "cased", spm_files["v3"], {}), lowercase=True)
    _, fast, _ = three(hub_folder(tmp_path / "lower", spm_files["v3"], {"do_lower_case": True}))
    assert_same_batch(ours, fast, HARD)


def test_read_model_reads_what_sentencepiece_reads(spm_files):
    """read_model's pieces, scores, kinds and unk id are those the sentencepiece library reads from the file."""
    for name in ("v3", "variant"):
        sp = spm.SentencePieceProcessor(model_file=str(spm_files[name]))
        pieces, model_type, unk_id, unk_piece, charsmap = read_model(spm_files[name])
        assert [p for p, _, _ in pieces] == [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        assert [s for _, s, _ in pieces] == [sp.get_score(i) for i in range(sp.get_piece_size())]  # both float32
        kinds = {i: k for i, (_, _, k) in enumerate(pieces)}
        assert [i for i, k in kinds.items() if k == 2] == [sp.unk_id()] == [unk_id] == [3]
        assert [i for i, k in kinds.items() if k == 3] == [i for i in range(sp.get_piece_size()) if sp.is_control(i)]
        assert [i for i, k in kinds.items() if k == 6] == [i for i in range(sp.get_piece_size()) if sp.is_byte(i)]
        assert model_type == 1 and len(charsmap) > 1000  # nmt_nfkc's precompiled map
        assert unk_piece == sp.id_to_piece(sp.unk_id()) == "[UNK]"


def test_a_bpe_spm_model_is_refused(spm_files, tmp_path):
    folder = hub_folder(tmp_path / "hub", spm_files["bpe"], {})
    with pytest.raises(bertfn.CheckpointError, match="not a unigram SentencePiece model"):
        bertfn.Tokenizer.from_path(folder)


def test_a_model_whose_tokenizer_is_an_spm_model_is_saved_with_it(spm_files, tmp_path):
    """bertfn.save copies the spm.model a DeBERTa model's tokenizer was read from (with its settings), so bertfn and
    transformers read the saved folder's tokenizer as the model's."""
    from transformers import AutoTokenizer, DebertaV2Config, DebertaV2ForMaskedLM

    hub = hub_folder(tmp_path / "hub", spm_files["v3"], {})
    tok = bertfn.Tokenizer.from_path(hub / "spm.model")
    config = DebertaV2Config(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=32)
    torch.manual_seed(0)
    DebertaV2ForMaskedLM(config).save_pretrained(tmp_path / "weights")
    model = bertfn.load(tmp_path / "weights", tokenizer=hub / "spm.model")
    dst = bertfn.save(model, tmp_path / "dst")
    assert (dst / "spm.model").read_bytes() == (hub / "spm.model").read_bytes()
    want = tok(MIXED).input_ids
    assert torch.equal(bertfn.load(dst).tokenizer(MIXED).input_ids, want)
    with warnings.catch_warnings():  # the converter's warning that byte fallback is not carried over
        warnings.simplefilter("ignore")
        theirs = AutoTokenizer.from_pretrained(dst)(MIXED, padding=True, return_tensors="pt")
    assert torch.equal(theirs["input_ids"], want)
