"""The tokenizer against transformers' BertTokenizerFast: the test vocabulary, and Chinese, mixed and accented text."""

from __future__ import annotations

import json

import pytest
import torch

import bertfn
from bertfn.checkpoint.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here

TEXTS = ["When in Rome, do as the [MASK] do.", "HELLO World!!", "the dogs walked", "unknownword café", ""]


def test_matches_transformers(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    tok = bertfn.load(folder).tokenizer
    theirs = transformers.AutoTokenizer.from_pretrained(str(folder))
    # "unknownword café" and the pair's words are not in the test vocabulary: bertfn says so
    with pytest.warns(bertfn.UnknownTokensWarning, match=r"text 3: 2 of its 2 tokens are \[UNK\] .*; its vocabulary "
                                                         "has no pieces for them: a script or language the model was "
                                                         "not trained on, or another model's tokenizer"):
        mine = tok(TEXTS)
    ref = theirs(TEXTS, padding=True, return_tensors="pt", return_offsets_mapping=True)
    assert torch.equal(mine.input_ids, ref["input_ids"])
    assert torch.equal(mine.attention_mask, ref["attention_mask"])
    assert [list(map(tuple, o)) for o in ref["offset_mapping"].tolist()] == [list(map(tuple, o)) for o in mine.offsets]
    with pytest.warns(bertfn.UnknownTokensWarning, match=r"text 0: 4 of its 7 tokens are \[UNK\]"):
        pairs = tok(["first part", "a"], ["second part here", "b"])
    ref = theirs(["first part", "a"], ["second part here", "b"], padding=True, return_tensors="pt")
    assert torch.equal(pairs.input_ids, ref["input_ids"]) and torch.equal(pairs.token_type_ids, ref["token_type_ids"])


def test_special_tokens_and_decode(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    tok = bertfn.load(folder).tokenizer
    enc = tok("the [MASK] sat")
    assert enc.tokens[0] == ["[CLS]", "the", "[MASK]", "sat", "[SEP]"]
    assert enc.input_ids[0, 2].item() == tok.mask_token_id
    assert tok.decode(enc.input_ids[0].tolist(), skip_special_tokens=True) == "the sat"
    assert tok.decode(enc.input_ids[0].tolist()) == "[CLS] the [MASK] sat [SEP]"


# --- Chinese, mixed and accented text ------------------------------------------------------------

CJK_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("今天气真好人工智能正在改变世界我爱和学习中文的年月日。，！？、") + \
    ["transformer", "paris", "cafe", "naive", "resume", "uber", "sao", "paulo", "bert", "is", "a", "model",
     "Paris", "Café", "café", "Über", "São", "Paulo", "BERT", "Transformer", "na", "##ive", "##ïve", "res", "##ume",
     "##umé", "ré", "2024", "3", "!", ",", ".", "##s", "##er"]
CJK_TEXTS = [
    "今天天气真好",  # one token per character
    "人工智能正在改变世界。",
    "我爱Paris和café！",  # Chinese and Latin with no space between
    "Transformer架构非常重要",  # characters missing from the vocabulary become [UNK]
    "2024年3月，BERT is a model.",
    "Café naïve résumé Über São Paulo",  # accents: stripped when lowercasing, kept when cased
    "ひらがなとカタカナ 한국어",  # kana and Hangul are not split per character (no CJK ideographs)
    "  学习  中文  ",
]


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def cjk_tokenizers(request, tmp_path_factory):
    """bertfn's tokenizer built from vocab.txt (+ tokenizer_config.json), from tokenizer.json, and the reference."""
    lower = request.param
    folder = tmp_path_factory.mktemp("cjk")
    (folder / "vocab.txt").write_text("\n".join(CJK_VOCAB) + "\n", encoding="utf-8")
    theirs = transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=lower)
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lower}), encoding="utf-8")
    from_vocab = Tokenizer.from_folder(folder)
    theirs.save_pretrained(folder / "saved")
    (folder / "saved" / "tokenizer_config.json").unlink()  # keep only tokenizer.json and vocab.txt
    from_json = Tokenizer.from_folder(folder / "saved")
    return theirs, from_vocab, from_json


def test_chinese_mixed_and_accented_text_match_transformers(cjk_tokenizers):
    theirs, *ours = cjk_tokenizers
    ref = theirs(CJK_TEXTS, padding=True, return_tensors="pt", return_offsets_mapping=True)
    for tok in ours:
        with pytest.warns(UserWarning, match=r"are \[UNK\]"):  # the texts whose characters the vocabulary lacks
            mine = tok(CJK_TEXTS)
        assert mine.tokens == [theirs.convert_ids_to_tokens(row) for row in ref["input_ids"].tolist()]
        assert torch.equal(mine.input_ids, ref["input_ids"]) and torch.equal(mine.attention_mask, ref["attention_mask"])
        assert [list(map(tuple, o)) for o in ref["offset_mapping"].tolist()] == [list(map(tuple, o)) for o in mine.offsets]
        pair = tok(["我爱学习"], ["Café 中文"])
        ref_pair = theirs(["我爱学习"], ["Café 中文"], return_tensors="pt")
        assert torch.equal(pair.input_ids, ref_pair["input_ids"]) and torch.equal(pair.token_type_ids, ref_pair["token_type_ids"])
        for row in mine.input_ids.tolist():
            assert tok.decode(row, skip_special_tokens=True) == theirs.decode(row, skip_special_tokens=True)


def test_chinese_characters_are_single_tokens_and_accents_follow_the_case(cjk_tokenizers):
    theirs, tok, _ = cjk_tokenizers
    assert tok("今天天气真好").tokens[0] == ["[CLS]", "今", "天", "天", "气", "真", "好", "[SEP]"]
    assert tok("我爱Paris和café！").tokens[0][1:4] == ["我", "爱", "paris" if theirs.do_lower_case else "Paris"]
    accented = tok("Café naïve").tokens[0][1:-1]
    assert accented == (["cafe", "naive"] if theirs.do_lower_case else ["Café", "na", "##ïve"])
