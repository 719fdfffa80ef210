"""bertfn's Tokenizer on ESM-2's vocab.txt against transformers' EsmTokenizer of the same folder.

EsmTokenizer is a slow (Python) tokenizer with no fast twin, so bertfn builds its pipeline itself
(:func:`bertfn.checkpoint.tokenizer_files.esm_from_vocab`); here the two are held to the same ids, masks and
decoded text on protein sequences: padded batches, masks, pairs, unknown characters, small letters, spaces.
EsmTokenizer gives no offsets and no usable token types (it returns none unless asked), so offsets are checked
against the text itself and token types are all 0.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest
import torch
from family_checkpoints import ESM_VOCAB, PROTEINS

from bertfn import CheckpointError, InputError, UnknownTokensWarning
from bertfn.checkpoint.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here

ODD = [
    "MKT<mask>AYIAK<mask>QR<mask>",  # masks between residues: each one token
    "<mask>EVQLVESGG<mask>",
    "MKTXBZUO.-AY",  # the rare residues and the gap symbols of the vocabulary
    "MKJTAY",  # J is not in the vocabulary: <unk>
    "MKéTAY☃",  # nor are these
    "MKxyzTAY",  # a run of unknown characters between residues is one <unk>
    "mktayiak",  # small letters: one word, one <unk>
    "MK tay IAK",
    "M K T A Y",  # spaces between residues are dropped
    "  MKT\tAY\nIAK  ",
    "<cls>MKT<eos>",  # the special tokens written in the text are themselves
    "MK<mas",  # not a special token: one <unk>
    "",
]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """(bertfn's Tokenizer, transformers' AutoTokenizer) of a folder that EsmTokenizer.save_pretrained wrote."""
    folder = tmp_path_factory.mktemp("esm")
    (folder / "vocab.txt").write_text("\n".join(ESM_VOCAB), encoding="utf-8")
    transformers.EsmTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    assert not (folder / "tokenizer.json").exists()
    return Tokenizer.from_folder(folder), transformers.AutoTokenizer.from_pretrained(str(folder))


def encode(tok: Tokenizer, texts: list[str], pairs: list[str] | None = None):
    """bertfn's encoding, its warnings about texts that are mostly <unk> left out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownTokensWarning)
        return tok(texts, pairs)


def assert_same(mine, theirs, texts: list[str], pairs: list[str] | None = None) -> None:
    """input_ids, attention_mask and tokens are EsmTokenizer's; token types are 0; each token's offsets span
    its own characters in its segment (an <unk>'s: the characters it stands for, no space among them)."""
    ref = theirs(texts, pairs, padding=True, return_tensors="pt")
    assert torch.equal(mine.input_ids, ref["input_ids"])
    assert torch.equal(mine.attention_mask, ref["attention_mask"])
    assert not mine.token_type_ids.any()
    assert mine.tokens == [theirs.convert_ids_to_tokens(row) for row in ref["input_ids"].tolist()]
    for b, row in enumerate(mine.tokens):
        segment = texts[b]
        for t, (start, end), w in zip(row, mine.offsets[b], mine.word_ids[b]):
            if w is None and t == "<eos>":  # the template's: the second segment follows
                segment = pairs[b] if pairs is not None else ""
            elif w is not None:
                spelled = segment[start:end]  # the token itself, or for <unk> the characters it stands for
                assert spelled == t or (t == "<unk>" and spelled and not any(c.isspace() for c in spelled))


def test_padded_batch_of_proteins_matches_esm(tokenizers):
    tok, theirs = tokenizers
    texts = list(PROTEINS)
    enc = encode(tok, texts)
    assert_same(enc, theirs, texts)
    lengths = enc.attention_mask.sum(1).tolist()
    assert lengths == [len(t) + 2 for t in texts] and enc.input_ids.shape[1] == max(lengths)  # a token a residue
    assert enc.tokens[3][:4] == ["<cls>", "F", "V", "N"] and enc.tokens[3][lengths[3] - 1:][:2] == ["<eos>", "<pad>"]
    assert enc.word_ids[3][:4] == [None, 0, 1, 2]  # each residue a word of its own


def test_masks_unknown_characters_small_letters_and_spaces_match_esm(tokenizers):
    tok, theirs = tokenizers
    enc = encode(tok, ODD)
    assert_same(enc, theirs, ODD)
    assert enc.tokens[0][1:6] == ["M", "K", "T", "<mask>", "A"]
    assert (enc.input_ids[0] == tok.mask_token_id).sum() == 3
    assert enc.tokens[5][3:5] == ["<unk>", "T"] and enc.offsets[5][3] == (2, 5)  # "xyz": one <unk>
    assert enc.tokens[6][:3] == ["<cls>", "<unk>", "<eos>"]
    assert enc.tokens[8][1:7] == ["M", "K", "T", "A", "Y", "<eos>"]


def test_single_texts_match_esm(tokenizers):
    tok, theirs = tokenizers
    for text in ODD + list(PROTEINS[:2]):
        assert_same(encode(tok, text), theirs, [text])


def test_pairs_match_esm(tokenizers):
    """<cls> A <eos> B <eos>, all of token type 0."""
    tok, theirs = tokenizers
    first, second = list(PROTEINS[:3]), ["GIVEQ<mask>CTS", "", "mk TA"]
    pairs = encode(tok, first, second)
    assert_same(pairs, theirs, first, second)
    n = len(first[1]) + 2
    assert pairs.tokens[1][n - 1:n + 2] == ["<eos>", "<eos>", "<pad>"]  # an empty second segment
    assert pairs.word_ids[0][len(first[0]) + 2] == 0  # the second segment's words are numbered from 0


def test_decode_matches_esm(tokenizers):
    """Tokens joined with a space, the special ones left out on request; <null_1> is not special."""
    tok, theirs = tokenizers
    rows = encode(tok, ODD + list(PROTEINS)).input_ids.tolist()
    for ids in rows + [[i] for i in range(tok.vocab_size)]:
        for skip in (False, True):
            assert tok.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip)
    ids = encode(tok, "MKT<mask>A.").input_ids[0].tolist()
    assert tok.decode(ids) == "<cls> M K T <mask> A . <eos>"  # no clean-up: " ." stays
    assert tok.decode(ids, skip_special_tokens=True) == "M K T A ."


def test_special_tokens_are_esms(tokenizers):
    tok, theirs = tokenizers
    assert (tok.cls_token, tok.sep_token, tok.mask_token, tok.pad_token, tok.unk_token) == \
        ("<cls>", "<eos>", "<mask>", "<pad>", "<unk>")
    assert (tok.cls_token_id, tok.sep_token_id, tok.mask_token_id, tok.pad_token_id, tok.unk_token_id) == \
        (theirs.cls_token_id, theirs.eos_token_id, theirs.mask_token_id, theirs.pad_token_id, theirs.unk_token_id) == \
        (0, 2, 32, 1, 3)
    assert tok.vocab_size == len(theirs) == 33
    assert tok.lowercase is None and tok.word_marks == () and not tok.clean_up_spaces


def test_small_letters_are_said_to_be_capitals_not_spacing(tokenizers):
    tok, _ = tokenizers
    said = (r"text 0: 1 of its 1 tokens are <unk> \(e\.g\. 'mktayiak'\), so the results say little about it; this "
            r"vocabulary holds capitals: write 'MKTA', not 'mkta'$")
    with pytest.warns(UnknownTokensWarning, match=said):
        tok(["mktayiak"])


def test_a_bare_vocab_txt_is_read_as_esms(tmp_path, tokenizers):
    """Without tokenizer_config.json the vocabulary's <cls> and <eos> say it is ESM's, with EsmTokenizer's
    defaults for the special tokens."""
    _, theirs = tokenizers
    (tmp_path / "vocab.txt").write_text("\n".join(ESM_VOCAB) + "\n", encoding="utf-8")
    tok = Tokenizer.from_path(tmp_path / "vocab.txt", lowercase=False)
    assert_same(encode(tok, ODD), theirs, ODD)
    assert tok.decode(tok("M.K").input_ids[0].tolist()) == "<cls> M . K <eos>"


@pytest.mark.parametrize("lines, said", [
    ([], r"vocab\.txt is empty"),
    (ESM_VOCAB[:5] + [""] + ESM_VOCAB[5:], r"vocab\.txt: line 6 is empty"),
    (ESM_VOCAB + ["A"], r"vocab\.txt: 'A' is on lines 6 and 34"),
    ([t for t in ESM_VOCAB if t != "<eos>"], r"vocab\.txt has no end token '<eos>'; it is not an ESM vocabulary"),
    ([t for t in ESM_VOCAB if t != "<mask>"], r"no mask token \(looked for <mask>, \[MASK\]\)"),
])
def test_a_malformed_esm_vocab_is_refused(tmp_path, lines, said):
    (tmp_path / "vocab.txt").write_text("\n".join(lines), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "EsmTokenizer"}))
    with pytest.raises(CheckpointError, match=said):
        Tokenizer.from_folder(tmp_path)


def test_lowercasing_an_esm_vocab_is_refused(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(ESM_VOCAB), encoding="utf-8")
    with pytest.raises(InputError, match=re.escape("is ESM's vocabulary, whose residues are capitals")):
        Tokenizer.from_folder(tmp_path, lowercase=True)
