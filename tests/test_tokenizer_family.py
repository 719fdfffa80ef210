"""bertfn's Tokenizer on every kind of BERT's family against transformers' AutoTokenizer of the same folder.

The folders come from :mod:`family_checkpoints`: byte-level BPE (RoBERTa; ModernBERT's, with [MASK]),
SentencePiece-style unigram (XLM-R, ALBERT) and WordPiece (DistilBERT, ELECTRA); ESM-2's vocab.txt is
tests/test_tokenizer_esm.py's. Also: a word-level tokenizer, the special tokens' names read from
tokenizer_config.json / special_tokens_map.json, the error for a tokenizer with no mask token, and
fill-mask's truncation windows and answer strings on each kind.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest
import torch
from family_checkpoints import MEMBERS, member_fixture, member_tokenizer, save_member

import bertfn
from bertfn import CheckpointError, UnknownTokensWarning
from bertfn.checkpoint.tokenizer import Tokenizer
from bertfn.tasks.fill_mask import _propositions, mask_windows

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here

BYTE_LEVEL = ("roberta", "modernbert")  # byte-level BPE: RoBERTa's and ModernBERT's (GPT-NeoX's) kind

member = member_fixture(MEMBERS + ("modernbert",))  # ESM-2's tokenizer: tests/test_tokenizer_esm.py

TEXTS = [
    "When in Rome, do as the {mask} do.",
    "The capital of France is {mask}.",
    "{mask} sat on the mat, unbelievably",
    "The king and the queen's {mask} {mask} lived  in a castle!",
    "Internationalization: Café naïve, don't STOP",
    "  leading and trailing spaces  ",
    "",
]
PAIRS = (["The cat sat on the mat.", "a man", "When in Rome"], ["A dog {mask} there.", "", "do as the Romans do."])


@pytest.fixture(scope="module")
def tokenizers(member):
    """(kind, bertfn's Tokenizer, transformers' AutoTokenizer) of the member's folder."""
    kind, folder, _ = member
    return kind, Tokenizer.from_folder(folder), transformers.AutoTokenizer.from_pretrained(str(folder))


def with_mask(texts: list[str], tok: Tokenizer) -> list[str]:
    return [t.format(mask=tok.mask_token) for t in texts]


def encode(tok: Tokenizer, texts: list[str], pairs: list[str] | None = None):
    """bertfn's encoding, its warnings about texts that are mostly the unknown token left out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownTokensWarning)
        return tok(texts, pairs)


def assert_same(mine, ref) -> None:
    """input_ids, attention_mask, token types, word_ids, tokens and offsets of a padded batch are transformers'."""
    assert torch.equal(mine.input_ids, ref["input_ids"])
    assert torch.equal(mine.attention_mask, ref["attention_mask"])
    assert torch.equal(mine.token_type_ids, ref["token_type_ids"])
    assert mine.word_ids == [ref.word_ids(b) for b in range(len(mine.word_ids))]
    assert mine.tokens == [ref.tokens(b) for b in range(len(mine.tokens))]
    assert mine.offsets == [list(map(tuple, row)) for row in ref["offset_mapping"].tolist()]


def reference(theirs, texts, pairs=None):
    return theirs(texts, pairs, padding=True, return_tensors="pt", return_offsets_mapping=True,
                  return_token_type_ids=True)


def test_single_texts_match_transformers(tokenizers):
    _, tok, theirs = tokenizers
    for text in with_mask(TEXTS, tok):
        assert_same(encode(tok, text), reference(theirs, [text]))


def test_padded_batches_and_pairs_match_transformers(tokenizers):
    kind, tok, theirs = tokenizers
    texts = with_mask(TEXTS, tok)
    assert_same(encode(tok, texts), reference(theirs, texts))
    first, second = PAIRS[0], with_mask(PAIRS[1], tok)
    pairs = encode(tok, first, second)
    assert_same(pairs, reference(theirs, first, second))
    if kind in ("roberta", "xlm-roberta", "camembert"):  # one token type (type_vocab_size 1): zeros, as the model takes them
        assert not pairs.token_type_ids.any()
        assert pairs.tokens[0][pairs.word_ids[0].index(None, 1):][:2] == ["</s>", "</s>"]  # A </s></s> B
    else:
        assert pairs.token_type_ids.any()


def test_decode_matches_transformers(tokenizers):
    kind, tok, theirs = tokenizers
    rows = encode(tok, with_mask(TEXTS, tok)).input_ids.tolist()
    for ids in rows + [[i] for i in range(tok.vocab_size)]:
        for skip in (False, True):
            assert tok.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip)
    word = {"roberta": "Ġcat", "modernbert": "Ġcat", "xlm-roberta": "▁dog", "albert": "▁dog", "camembert": "▁dog",
            "deberta-v2": "▁dog"}.get(kind, "cat")
    space = " " if kind in BYTE_LEVEL else ""  # byte-level BPE keeps the word's leading space (fill-mask's token_str)
    assert tok.decode([tok.token_to_id(word)]) == space + word[-3:]


def test_special_tokens_are_the_tokenizers_own(tokenizers):
    kind, tok, theirs = tokenizers
    assert tok.mask_token == theirs.mask_token == ("<mask>" if kind in ("roberta", "xlm-roberta", "camembert", "mpnet") else "[MASK]")
    assert tok.mask_token_id == theirs.mask_token_id
    assert (tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.unk_token_id) == \
        (theirs.cls_token_id, theirs.sep_token_id, theirs.pad_token_id, theirs.unk_token_id)
    assert tok.vocab_size == len(theirs)
    assert tok.lowercase == {"xlm-roberta": None, "roberta": None, "modernbert": None, "camembert": None,
                             "deberta-v2": None}.get(kind, True)


def test_unknown_tokens_are_named_as_the_tokenizer_names_them(tokenizers):
    kind, tok, _ = tokenizers
    if kind in BYTE_LEVEL:
        pytest.skip("byte-level BPE spells every text with its 256 bytes: nothing is unknown")
    said = rf"text 0: 3 of its 3 tokens are {re.escape(tok.unk_token)} \(e\.g\. '中', '文', '字'\), .*; its " \
           "vocabulary has no pieces for them: a script or language the model was not trained on"
    with pytest.warns(UnknownTokensWarning, match=said):  # SentencePiece's lone "▁" pieces count as spaces, not text
        tok(["中 文 字"])


def test_truncation_windows_start_and_end_on_words(tokenizers):
    """A long text of one several-piece word: the window around the mask holds whole words only."""
    _, tok, _ = tokenizers
    text = " ".join(["unbelievably"] * 30 + [tok.mask_token] + ["unbelievably"] * 30)
    enc = encode(tok, [text])
    assert enc.input_ids.shape[1] > 64 and len(set(enc.word_ids[0][1:4])) < 3  # words of several pieces
    window = mask_windows(tok, enc, enc.attention_mask.sum(1).tolist(), 64)
    ids = window.input_ids[0].tolist()
    assert len(ids) <= 64 and ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert tok.mask_token_id in ids and window.word_ids[0][0] is None
    assert set(tok.decode(ids, skip_special_tokens=True).split()) == {"unbelievably"}


def test_fill_mask_answers_are_spelled_as_the_pipeline_spells_them(member, tokenizers):
    """_propositions builds token_str and sequence as transformers' fill-mask pipeline, for one mask and two."""
    kind, tok, theirs = tokenizers
    if kind == "electra-discriminator":
        pytest.skip("the discriminator has no masked-LM head")
    pipe = transformers.pipeline("fill-mask", model=member[2], tokenizer=theirs)
    for text in with_mask(["When in Rome, do as the {mask} do.", "The {mask} sat on the {mask}."], tok):
        ids = encode(tok, text).input_ids[0].tolist()
        answers = pipe(text, top_k=3)
        per_mask = [answers] if isinstance(answers[0], dict) else answers
        positions = [j for j, t in enumerate(ids) if t == tok.mask_token_id]
        mine = _propositions(tok, ids, [(pos, [(a["score"], (a["token"],)) for a in got])
                                        for pos, got in zip(positions, per_mask)])
        assert mine == answers


def word_level(folder, vocab: list[str], mask: str) -> None:
    """A word-level tokenizer.json in ``folder``: whitespace words, ``[CLS] A [SEP]``, ``mask`` its mask token."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers, processors

    backend = Backend(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens([t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", mask) if t in vocab])
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    folder.mkdir(exist_ok=True)
    backend.save(str(folder / "tokenizer.json"))


def test_word_level_tokenizer_matches_transformers(tmp_path):
    word_level(tmp_path, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat"], "[MASK]")
    tok = Tokenizer.from_folder(tmp_path)
    theirs = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"), pad_token="[PAD]")
    texts, pairs = ["the [MASK] sat on the mat", "the dog"], ["on the mat", "the cat"]
    assert_same(encode(tok, texts, pairs), reference(theirs, texts, pairs))
    assert (tok.mask_token, tok.mask_token_id, tok.unk_token) == ("[MASK]", 4, "[UNK]")
    assert tok.decode(tok(texts[0]).input_ids[0].tolist()) == theirs.decode(theirs(texts[0])["input_ids"])


def test_special_tokens_named_in_tokenizer_config_or_special_tokens_map(tmp_path):
    """A mask token of another name: found where tokenizer_config.json or special_tokens_map.json names it
    (a string or a dict with "content"), and refused, naming the tokens looked for, where nothing names it."""
    word_level(tmp_path, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "<M>", "the", "cat"], "<M>")
    with pytest.raises(CheckpointError, match=r"tokenizer.json: the tokenizer has no mask token \(looked for "
                                              r"\[MASK\], <mask>\); .*Use the tokenizer that came with the model"):
        Tokenizer.from_folder(tmp_path)
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"mask_token": {"content": "<M>", "lstrip": True}}))
    assert (Tokenizer.from_folder(tmp_path).mask_token, Tokenizer.from_folder(tmp_path).mask_token_id) == ("<M>", 4)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<mask2>"}))  # it wins, and is absent
    with pytest.raises(CheckpointError, match=r"no mask token \(looked for <mask2>, \[MASK\], <mask>\)"):
        Tokenizer.from_folder(tmp_path)


def test_a_tokenizer_without_start_separator_or_mask_is_refused(tmp_path):
    word_level(tmp_path / "none", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the"], "[MASK]")
    with pytest.raises(CheckpointError, match=r"no mask token \(looked for \[MASK\], <mask>\)"):
        Tokenizer.from_folder(tmp_path / "none")
    backend = member_tokenizer("roberta").backend_tokenizer  # RoBERTa's, with <mask> taken out of it
    spec = json.loads(backend.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] != "<mask>"]
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"no mask token \(looked for \[MASK\], <mask>\)"):
        Tokenizer.from_folder(tmp_path)


def test_a_slow_tokenizers_files_are_read_as_the_fast_tokenizer_reads_them(tmp_path):
    """A folder saved by a slow tokenizer (vocab.json and merges.txt, no tokenizer.json) loads with its tokenizer, the
    one transformers converts the files to; merges.txt alone, or vocab.json alone, says which file is missing."""
    save_member("roberta", tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    member_tokenizer("roberta").save_pretrained(str(tmp_path), legacy_format=True)  # a slow tokenizer's files only
    assert (tmp_path / "merges.txt").is_file() and not (tmp_path / "tokenizer.json").exists()
    text = "Ça va, Zürich? 東京 👍🏽 <mask>"
    fast = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert bertfn.load(tmp_path).tokenizer([text]).input_ids[0].tolist() == fast(text)["input_ids"] \
        == member_tokenizer("roberta")(text)["input_ids"]
    for name in ("vocab.json", "merges.txt"):
        assert Tokenizer.from_path(tmp_path / name).backend.to_str() == Tokenizer.from_path(tmp_path).backend.to_str()
    (tmp_path / "vocab.json").rename(tmp_path / "elsewhere.json")
    with pytest.raises(CheckpointError, match="has merges.txt but no vocab.json: RoBERTa's byte-level BPE is both"):
        Tokenizer.from_path(tmp_path)
