"""The tokenizers bench/family.py and bench/family_modern.py build offline for BERT's family, each of the member's
own kind, set up as the real model's (transformers' converters and the hub's tokenizer.json files):

    bpe                byte-level BPE, <s> 0 <pad> 1 </s> 2 <unk> 3, <mask> last (roberta-base)
    unigram-xlmr       SentencePiece-style unigram, NFKC, case kept, <s> 0 <pad> 1 </s> 2 <unk> 3, <mask> last
                       (xlm-roberta-base)
    unigram-camembert  the same with camembert-base's ids: <s>NOTUSED 0 <pad> 1 </s>NOTUSED 2 <unk> 3 <unk>NOTUSED 4
                       <s> 5 </s> 6, <mask> last (32004)
    unigram-albert     unigram after AlbertConverter's normalizer (lowercased), <pad> 0 <unk> 1 [CLS] 2 [SEP] 3 [MASK] 4
                       (albert-base-v2)
    unigram-deberta    unigram after DebertaV2Converter's normalizer (case kept), Metaspace alone, [PAD] 0 [CLS] 1
                       [SEP] 2 [UNK] 3, [MASK] 128000 after 128000 pieces, of the model's 128100 rows
                       (microsoft/deberta-v3-base)
    wordpiece          workload.py's bert-base vocabulary, lowercased (distilbert-base-uncased, electra-base-*)
    wordpiece-mpnet    <s> 0 <pad> 1 </s> 2 <unk> 3, then that vocabulary, <mask> last (30526), <s> A </s>
                       (microsoft/mpnet-base)
    ModernBERT's       byte-level BPE after NFC, [UNK] [CLS] [SEP] [PAD] [MASK] 88 ids before the end
    ESM's              the 33-token vocab.txt of facebook/esm2_* (ESM-1b's is the same), EsmTokenizer

Every vocabulary holds each word of the benchmark's sentences as one token (as in the real vocabularies), its special
tokens at the real model's ids, and unused entries up to the model's vocabulary size, so that the sentences have
bert-base's lengths. Speed depends on shapes, not values.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workload import ADJECTIVES, EXTRA, LINKS, NOUNS, PLACES, ROME, VERBS, vocabulary

MODERNBERT_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
"""ModernBERT-base's special tokens, at ids 50280-50284 after GPT-NeoX's 50280 BPE entries: 88 ids before the end
of its 50368-entry vocabulary."""
ESM_VOCAB = ["<cls>", "<pad>", "<eos>", "<unk>", *"LAGVSERTIDPKQNFYMHWCXBUZO.-", "<null_1>", "<mask>"]
"""ESM-2's vocab.txt (facebook/esm2_*; ESM-1b's is the same): <cls> 0, <pad> 1, <eos> 2, <unk> 3, residues, gaps,
<null_1> 31, <mask> 32."""
MPNET_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
"""microsoft/mpnet-base's ids 0-3, before bert-base-uncased's vocabulary (its unknown token is that one's [UNK])."""


# --- the words -------------------------------------------------------------------------------------------


def words() -> list[str]:
    """Every word the benchmark's sentences use (workload.py's and the one sentence's), lower case."""
    return list(dict.fromkeys(EXTRA + NOUNS + VERBS + ADJECTIVES + LINKS + PLACES + [w + "s" for w in NOUNS]
                              + "when in rome do as the romans".split()))


def cased_words() -> list[str]:
    """:func:`words` and each capitalised ("Rome", "When"): what a cased vocabulary needs."""
    return list(dict.fromkeys(words() + [w.capitalize() for w in words()]))


def fillers(vocab: dict[str, int], size: int, name: Callable[[int], str]) -> None:
    """Pad ``vocab`` (token -> id) with unused entries ``name(i)`` to ``size`` entries."""
    i = 0
    while len(vocab) < size:
        token = name(i)
        if token not in vocab:
            vocab[token] = len(vocab)
        i += 1


# --- byte-level BPE ----------------------------------------------------------------------------------------


def bpe_pieces(vocab_size: int, specials: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Byte-level BPE (no prefix space) trained here until every word of the sentences, with and without its
    leading space ("Ġking", "king"), cased and not, is one token, as in roberta-base's and ModernBERT's
    vocabularies: the vocabulary (``specials`` first, then the 256 bytes and the merges' tokens) and the merges."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    corpus = [" ".join(cased_words()), *cased_words(), ROME.replace("[MASK]", "Romans")]
    trained.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    model = json.loads(trained.to_str())["model"]
    return dict(model["vocab"]), [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]


def bpe_tokenizer(vocab_size: int):
    """roberta-base's kind: :func:`bpe_pieces`, ``<s>`` 0 ``<pad>`` 1 ``</s>`` 2 ``<unk>`` 3, ``<mask>`` last (lstrip),
    ``<s> A </s>`` (RobertaProcessing)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    vocab, merges = bpe_pieces(vocab_size, specials)
    fillers(vocab, vocab_size - 1, lambda i: f"madeupword{i:05d}")  # roberta-base's own name for unused entries
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False, lstrip=t == "<mask>")
                            for t in specials + ["<mask>"]])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                      add_prefix_space=False)
    return tok


def modernbert_tokenizer(vocab_size: int):
    """ModernBERT-base's kind: GPT-NeoX's byte-level BPE after NFC (:func:`bpe_pieces`, padded with unused entries
    to 50280), [UNK] [CLS] [SEP] [PAD] [MASK] at 50280-50284 ([MASK] lstrip), more unused entries to ``vocab_size``
    (50368; --quick's smaller vocabulary keeps the specials 88 before its end), ``[CLS] A [SEP]``; no token type ids
    (ModernBERT takes none)."""
    import transformers
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    first = vocab_size - 88  # ModernBERT-base's 50280
    vocab, merges = bpe_pieces(first, [])
    fillers(vocab, first, lambda i: f"madeupword{i:05d}")
    vocab.update({t: first + i for i, t in enumerate(MODERNBERT_SPECIALS)})
    fillers(vocab, vocab_size, lambda i: f"[unused{i}]")
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.normalizer, tok.decoder = normalizers.NFC(), decoders.ByteLevel()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False, lstrip=t == "[MASK]")
                            for t in MODERNBERT_SPECIALS])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", first + 1), ("[SEP]", first + 2)])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
        mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"])


# --- SentencePiece-style unigram ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Unigram:
    """The layout of a SentencePiece-style unigram tokenizer as a real model has it."""

    specials: tuple[str, ...]  # at ids 0, 1, ...
    unk: str
    mask: str  # the last id unless ``specials`` holds it or ``mask_id`` says where
    cls: str
    sep: str
    normalizer: str  # "nfkc" (SentencePiece's nmt_nfkc, case kept), "albert", "deberta"
    pair: str  # the template of a pair
    cased: bool = True
    whitespace_split: bool = True  # WhitespaceSplit before Metaspace (SpmConverter's); DeBERTa's has Metaspace alone
    mask_id: int | None = None  # the mask after this many pieces, short of the model's vocabulary (DeBERTa-v3)
    mask_lstrip: bool = True  # the mask eats the space before it (DeBERTa-v3's does not: its Strip does)


XLMR_PAIR = "<s> $A </s> </s> $B </s>"
UNIGRAMS = {
    "unigram-xlmr": Unigram(("<s>", "<pad>", "</s>", "<unk>"), "<unk>", "<mask>", "<s>", "</s>", "nfkc", XLMR_PAIR),
    "unigram-camembert": Unigram(  # CamembertConverter: fairseq's four, <unk>NOTUSED, SentencePiece's <s> and </s>
        ("<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED", "<s>", "</s>"), "<unk>", "<mask>", "<s>",
        "</s>", "nfkc", XLMR_PAIR),
    "unigram-albert": Unigram(("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"), "<unk>", "[MASK]", "[CLS]", "[SEP]",
                              "albert", "[CLS] $A [SEP] $B:1 [SEP]:1", cased=False),
    "unigram-deberta": Unigram(("[PAD]", "[CLS]", "[SEP]", "[UNK]"), "[UNK]", "[MASK]", "[CLS]", "[SEP]", "deberta",
                               "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1", whitespace_split=False, mask_id=128000,
                               mask_lstrip=False),
}
"""The unigram kinds by the name a member's ``tokenizer`` gives: xlm-roberta-base's, camembert-base's, albert-base-v2's
and microsoft/deberta-v3-base's (its spm.model's 128000 pieces, [MASK] added after them at 128000; the model's
embedding has 128100 rows, the last 99 no token's)."""


def unigram_size(kind: str, vocab_size: int) -> int:
    """The entries of a ``kind`` tokenizer for a model of ``vocab_size`` rows: as many, but DeBERTa-v3's 128001."""
    mask_id = UNIGRAMS[kind].mask_id
    return vocab_size if mask_id is None else min(vocab_size, mask_id + 1)


def _normalizer(name: str):
    """The normalizer of a :class:`Unigram` layout, NFKC standing in for SentencePiece's precompiled map."""
    from tokenizers import Regex, normalizers

    if name == "nfkc":
        return normalizers.NFKC()
    if name == "deberta":  # DebertaV2Converter: Strip, its map, runs of spaces to one
        return normalizers.Sequence([normalizers.Strip(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    return normalizers.Sequence([  # AlbertConverter's
        normalizers.Replace("``", '"'), normalizers.Replace("''", '"'), normalizers.NFKD(), normalizers.StripAccents(),
        normalizers.Lowercase(), normalizers.Replace(Regex(" {2,}"), " ")])


def unigram_tokenizer(kind: str, vocab_size: int):
    """A SentencePiece-style unigram of the layout :data:`UNIGRAMS` names, ``<cls> A <sep>``.
    Pieces: "▁word" for every word of the sentences (so each is one token), the bare words and single characters
    (for punctuation after a word: "Rome," is "▁Rome" ","), then unused pieces to :func:`unigram_size`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    layout = UNIGRAMS[kind]
    forms = cased_words() if layout.cased else words()
    chars = sorted({c for w in forms for c in w})
    scored = {s: 0.0 for s in layout.specials}
    scored.update({"▁": -4.0})
    scored.update({"▁" + w: -5.0 for w in forms})  # a word is one piece: cheaper than any split of it
    scored.update({w: -6.0 for w in forms if w not in scored})
    scored.update({c: -8.0 for c in chars if c not in scored})
    pieces = list(scored.items())
    last = [(layout.mask, 0.0)] if layout.mask not in scored and layout.mask_id is None else []  # XLM-R's, CamemBERT's
    taken = set(scored)
    size = unigram_size(kind, vocab_size) - (1 if layout.mask not in scored else 0)
    i = 0
    while len(pieces) < size:
        piece = f"▁unused{i}"
        if piece not in taken:
            pieces.append((piece, -20.0))
        i += 1
    tok = Tokenizer(models.Unigram(pieces + last, unk_id=layout.specials.index(layout.unk), byte_fallback=False))
    tok.normalizer = _normalizer(layout.normalizer)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()]) \
        if layout.whitespace_split else pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    added = list(layout.specials) + ([layout.mask] if layout.mask not in scored else [])  # DeBERTa's [MASK]: new here
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False,
                                       lstrip=layout.mask_lstrip and t == layout.mask) for t in added])
    cls, sep = layout.cls, layout.sep
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=layout.pair,
        special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])
    return tok


# --- saving ---------------------------------------------------------------------------------------------------


def mpnet_vocabulary() -> list[str]:
    """microsoft/mpnet-base's vocab.txt layout: :data:`MPNET_SPECIALS`, workload.py's bert-base vocabulary (30522:
    [PAD] 4, [UNK] 104, ...), ``<mask>`` 30526."""
    return MPNET_SPECIALS + vocabulary() + ["<mask>"]


def save_tokenizer(member, folder: Path, vocab_size: int) -> None:
    """bench/family.py's member's fast tokenizer (``member.tokenizer`` the kind, ``member.tokenizer_class`` the
    transformers class), saved as transformers saves it (tokenizer.json, tokenizer_config.json, ...)."""
    import transformers

    cls, kind = getattr(transformers, member.tokenizer_class), member.tokenizer
    size = vocab_size
    if kind == "wordpiece":  # bench.py's bert-base vocabulary, as distilbert- and electra-base's are
        (folder / "vocab.txt").write_text("\n".join(vocabulary()) + "\n", encoding="utf-8")
        tok = cls(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    elif kind == "wordpiece-mpnet":  # MPNetConverter: BertNormalizer lowercasing, <s> A </s>, <s> A </s></s> B </s>
        (folder / "vocab.txt").write_text("\n".join(mpnet_vocabulary()) + "\n", encoding="utf-8")
        tok = cls(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    elif kind == "bpe":
        tok = cls(tokenizer_object=bpe_tokenizer(vocab_size))
    elif kind == "unigram-albert":
        tok = cls(tokenizer_object=unigram_tokenizer(kind, vocab_size), pad_token="<pad>", unk_token="<unk>")
    else:  # XLM-R's, CamemBERT's, DeBERTa-v3's unigram
        size = unigram_size(kind, vocab_size)
        tok = cls(tokenizer_object=unigram_tokenizer(kind, vocab_size))
    if len(tok) != size:
        raise RuntimeError(f"{member.model}: the tokenizer has {len(tok)} entries, {size} expected (the model "
                           f"{vocab_size})")
    tok.save_pretrained(folder)


def save_modern_tokenizer(member, folder: Path, vocab_size: int) -> None:
    """bench/family_modern.py's member's tokenizer, saved as transformers saves it: ModernBERT's
    (:func:`modernbert_tokenizer`), or ESM's ``EsmTokenizer`` of :data:`ESM_VOCAB` (ESM-2's and ESM-1b's)."""
    import transformers

    if member.model_class == "ModernBertForMaskedLM":
        tok = modernbert_tokenizer(vocab_size)
    else:
        (folder / "vocab.txt").write_text("\n".join(ESM_VOCAB) + "\n", encoding="utf-8")
        tok = transformers.EsmTokenizer(str(folder / "vocab.txt"))
    tok.save_pretrained(folder)
