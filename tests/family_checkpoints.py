"""Small random checkpoints of BERT's family (RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA, ALBERT, and
ModernBERT, ESM-2 and ESM-1b), built offline.

:func:`save_member` writes a folder as the hub has one: ``config.json`` and ``model.safetensors`` from
``save_pretrained`` of a random-init transformers model, and a tokenizer of the member's own kind (a fast
tokenizer's ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``; ESM's ``vocab.txt``
in place of tokenizer.json), so that tests can hold bertfn to transformers on every member with no download.
The tokenizers are trained here, in a few milliseconds, on :data:`CORPUS` with the ``tokenizers`` library's
trainers, and set up as the real models' tokenizers are (the converters of ``transformers.convert_slow_tokenizer``
and the hub's tokenizer.json files):

    roberta                byte-level BPE ("Ġword"), <s> A </s></s> B </s> (RobertaProcessing), <mask> lstrip
    xlm-roberta            SentencePiece-style unigram ("▁word"), the same template, <mask> lstrip
    camembert              XLM-R's unigram with camembert-base's ids: <s>NOTUSED <pad> </s>NOTUSED <unk> <unk>NOTUSED
                           <s> </s> first, <mask> last
    distilbert             WordPiece ("##"), lowercased, [CLS] A [SEP] B [SEP]
    mpnet                  the same WordPiece after <s> <pad> </s> <unk>, <mask> last, <s> A </s></s> B </s>
    electra(-discriminator) the same WordPiece
    albert                 SentencePiece-style unigram, lowercased, [CLS] A [SEP] B [SEP], [MASK] lstrip
    deberta-v2             DeBERTa-v3's: SentencePiece-style unigram, case kept, [PAD] [CLS] [SEP] [UNK] first and
                           [MASK] last, [CLS] A [SEP] B:1 [SEP]:1 (DebertaV2Converter)
    modernbert             byte-level BPE after NFC (GPT-NeoX's, as answerdotai/ModernBERT-base), its specials
                           [UNK] [CLS] [SEP] [PAD] [MASK] after the merges, [CLS] A [SEP] B [SEP], [MASK] lstrip
    esm                    ESM-2's EsmTokenizer: the 33-token vocab.txt of facebook/esm2_* (:data:`ESM_VOCAB`),
                           one token per residue, <cls> A <eos> B <eos>; not trained
    esm1b                  the same (ESM-1b's vocabulary is ESM-2's)

:data:`MEMBERS` are the kinds of BERT's family proper; :data:`MODERN` those whose encoders differ more
(rotary positions, pre-LN; ModernBERT's GeGLU and local attention; ESM-1b: ESM-2's pre-LN with learned positions),
kept apart so that the tests over every member need not take them.

Training is deterministic: every process writes the same tokenizer.json (BpeTrainer with a fixed alphabet is;
UnigramTrainer's scores and WordPieceTrainer's vocabulary are not, so :func:`_unigram` and :func:`_wordpiece`
work around them), and each kind is trained once per process (:func:`member_tokenizer`).

The models are small and of odd sizes (so that a transposed or mis-split weight shows), with dropout 0,
ELECTRA's and ALBERT's embedding size unlike their hidden size (so the projection exists), and LayerNorms
and biases moved off their init (as conftest's ``build_hf``) so that every weight matters. ModernBERT's local
attention window (8) is shorter than the test texts, and its 4 layers hold both kinds (0 and 3 global, 1 and 2
local); ESM drops the mask tokens' embeddings (``token_dropout``), as ESM-2 does.
"""

from __future__ import annotations

import functools
import math
import tempfile
from collections import Counter
from pathlib import Path

import torch

MEMBERS = ("roberta", "xlm-roberta", "distilbert", "electra", "electra-discriminator", "albert", "camembert", "mpnet",
           "deberta-v2")
"""The kinds of BERT's family proper that :func:`save_member` builds."""

MODERN = ("modernbert", "esm", "esm1b")
"""The other kinds :func:`save_member` builds: ModernBERT, ESM-2 and ESM-1b (ESM with learned positions)."""

ESM_KINDS = ("esm", "esm1b")
"""ESM's kinds: ESM-2 (rotary positions) and ESM-1b (a learned position table from ``padding_idx + 1``, a LayerNorm
on the embeddings); both are transformers' ``EsmForMaskedLM`` of ``model_type`` "esm", with ESM-2's tokenizer."""

CORPUS = (
    "When in Rome, do as the Romans do.",
    "The capital of France is Paris.",
    "The capital of Italy is Rome, and the capital of Spain is Madrid.",
    "The cat sat on the mat.",
    "The dog sat on the mat, and the cat sat on the dog.",
    "A man and a woman walked their dogs through the city.",
    "The king and the queen lived in a big castle.",
    "The king is a man and the queen is a woman.",
    "Paris is a beautiful city with many museums.",
    "Romans built roads, bridges and aqueducts everywhere.",
    "She was reading an unbelievably interesting book.",
    "They were walking, talking and laughing together.",
    "The unhappiness of the people was understandable.",
    "He is the happiest person I have ever met.",
    "We are going to the market tomorrow morning.",
    "It's raining again; don't forget your umbrella!",
    "Do you know where the nearest station is?",
    "The children played happily in the garden.",
    "Red, blue and green are colours of the rainbow.",
    "One, two, three, four, five, six, seven.",
    "The quick brown fox jumps over the lazy dog.",
    "Translation between languages is a difficult problem.",
    "Tokenization splits words into smaller pieces.",
    "The internationalization of the internet continues.",
    "A small cat and a big dog are friends.",
    "The queen's crown was made of gold and silver.",
    "Everyone in the village knew the old fisherman.",
    "Scientists discovered a new species of butterfly.",
    "The weather in London is often cloudy and cold.",
    "My favourite food is pasta with tomatoes and cheese.",
    "Learning a language takes patience and practice.",
    "The Roman empire was huge and powerful.",
    "Music, painting and poetry are forms of art.",
    "The teacher explained the lesson very clearly.",
    "Mountains, rivers and forests cover the country.",
    "I'd rather walk than drive when it's sunny.",
    "The cat sat on the mat and the dog sat on the cat.",
    "A big cat, a small cat, a red cat and a blue cat.",
    "The king, the queen, the man and the woman are in Rome.",
    "The Romans and the people of Paris are not in France.",
    "Hello world! Is the king a man? Is the queen a woman?",
    "One red dog, two blue dogs, three green cats.",
    "He was the king and she was the queen of the city.",
    "When the Romans sat in Rome, the people of Rome sat too.",
    "We sat on a big mat; they sat on a small mat.",
    "It is a red, green and blue world, you know.",
)
"""The text the tokenizers are trained on: English sentences with the words tests use, often enough to be one
piece each (rome, romans, paris, cat, dog, sat, mat, king, queen, man, woman, red, blue, big, small), and long
words that take several pieces (unbelievably, internationalization)."""

PROTEINS = (
    "EVQLVESGGGLVQPGRSLRLSCAASGFTFDDYAMHWVRQAPGKGLEWVSAITWNSGHIDYADSVEG",  # adalimumab, heavy chain
    "DIQMTQSPSSLSASVGDRVTITCRASQGIRNYLAWYQQKPGKAPKLLIYAASTLQS",  # adalimumab, light chain
    "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG",  # ubiquitin
    "FVNQHLCGSHLVEALYLVCGERGFFYTPKT",  # insulin, B chain
    "MSKGEELFTGVVPILVELDGDVNGHKFSVSGEGEGDATYGKLTLKFICTT",  # green fluorescent protein, its start
    "GIVEQCCTSICSLYQLENYCN",  # insulin, A chain
)
"""Protein sequences for ESM, as its tokenizer takes them (capitals, no spaces): real fragments of 21-76
residues."""

ESM_VOCAB = ["<cls>", "<pad>", "<eos>", "<unk>", *"LAGVSERTIDPKQNFYMHWCXBUZO.-", "<null_1>", "<mask>"]
"""ESM-2's vocabulary (the vocab.txt of facebook/esm2_*, one token a line): <cls> 0, <pad> 1, <eos> 2, <unk> 3, the
residues and gap symbols, <null_1> 31, <mask> 32."""

BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0-4 in the WordPiece vocabulary
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0-3 as in roberta-base and xlm-roberta-base; <mask> last
ALBERT_SPECIALS = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]  # ids 0-4 as in albert-base-v2
CAMEMBERT_SPECIALS = ["<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED", "<s>", "</s>"]
"""ids 0-6 as in camembert-base (CamembertConverter: fairseq's four, <unk>NOTUSED, then SentencePiece's <s> and </s>);
<mask> last."""
DEBERTA_SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]"]  # ids 0-3 as in microsoft/deberta-v3-base; [MASK] last
MODERNBERT_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]  # after the merges, as 50280-50284 in ModernBERT


def _trained(model, trainer, normalizer, pre_tokenizer, decoder):
    """A ``tokenizers.Tokenizer`` of ``model`` with these parts, trained by ``trainer`` on :data:`CORPUS`."""
    from tokenizers import Tokenizer

    tok = Tokenizer(model)
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer, tok.decoder = pre_tokenizer, decoder
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def _specials(tok, names: list[str], lstrip: str | None = None) -> None:
    """Mark ``names`` as special tokens of ``tok`` (adding those the vocabulary lacks, at its end), with
    ``lstrip`` (the mask token of RoBERTa, XLM-R and ALBERT) eating the space before it, as on the hub."""
    from tokenizers import AddedToken

    tok.add_special_tokens([AddedToken(n, special=True, normalized=False, lstrip=n == lstrip) for n in names])


def _byte_level_bpe():
    """RoBERTa's kind: byte-level BPE over all 256 bytes, no normalizer, RobertaProcessing."""
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tok = _trained(models.BPE(), trainers.BpeTrainer(
        vocab_size=399, special_tokens=ROBERTA_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False), None, pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel())
    _specials(tok, ROBERTA_SPECIALS + ["<mask>"], lstrip="<mask>")
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=False)
    return tok


def _modernbert_bpe():
    """ModernBERT's kind: GPT-NeoX's byte-level BPE (NFC, no prefix space, no post-processing of offsets), then its
    BERT specials after the merges and a BERT template (``[CLS] A [SEP]``, ``[CLS] A [SEP] B:1 [SEP]:1``), as the
    tokenizer.json of answerdotai/ModernBERT-base."""
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    tok = _trained(models.BPE(), trainers.BpeTrainer(
        vocab_size=380, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False), normalizers.NFC(),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True), decoders.ByteLevel())
    _specials(tok, MODERNBERT_SPECIALS, lstrip="[MASK]")
    _template(tok, "[CLS]", "[SEP]", roberta_pair=False)
    return tok


def _esm(transformers):
    """ESM-2's EsmTokenizer of :data:`ESM_VOCAB` (it reads its vocabulary from a file, kept in memory)."""
    with tempfile.TemporaryDirectory() as folder:
        vocab = Path(folder) / "vocab.txt"
        vocab.write_text("\n".join(ESM_VOCAB), encoding="utf-8")
        return transformers.EsmTokenizer(str(vocab))


def _unigram(specials: list[str], unk: str, normalizer, vocab_size: int):
    """A SentencePiece-style unigram: whitespace split then Metaspace ("▁" starts a word), as xlm-roberta-base's
    and albert-base-v2's tokenizer.json; the template is set by the caller.

    The pieces are UnigramTrainer's; their scores are not. The trainer's scores change from one process to the
    next (the characters it keeps for coverage get the lowest score plus k * 1e-4, k in hash order), so each
    piece gets, as SentencePiece's seed pieces do, the log of its frequency as a substring of the corpus' words.
    """
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = _trained(models.Unigram(), trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=specials, unk_token=unk, show_progress=False), normalizer,
        pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()]), decoders.Metaspace())
    words = Counter(w for text in CORPUS for w, _ in tok.pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    counts = {p: 1 + sum(n * w.count(p) for w, n in words.items()) for p in tok.get_vocab() if p not in specials}
    total = sum(counts.values())
    scored = sorted(((p, math.log(c / total)) for p, c in counts.items()), key=lambda ps: (-ps[1], ps[0]))
    tok.model = models.Unigram([(s, 0.0) for s in specials] + scored, unk_id=specials.index(unk), byte_fallback=False)
    return tok


def _template(tok, cls: str, sep: str, roberta_pair: bool) -> None:
    """``cls A sep`` and, for pairs, ``cls A sep sep B sep`` (XLM-R, all type 0) or ``cls A sep B:1 sep:1`` (BERT)."""
    from tokenizers import processors

    pair = f"{cls} $A {sep} {sep} $B {sep}" if roberta_pair else f"{cls} $A {sep} $B:1 {sep}:1"
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=pair, special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])


def _xlmr_unigram():
    """XLM-R's kind: unigram, NFKC (standing in for SentencePiece's precompiled nmt_nfkc map), case kept."""
    from tokenizers import normalizers

    tok = _unigram(ROBERTA_SPECIALS, "<unk>", normalizers.NFKC(), 320)
    _specials(tok, ROBERTA_SPECIALS + ["<mask>"], lstrip="<mask>")
    _template(tok, "<s>", "</s>", roberta_pair=True)
    return tok


MPNET_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
"""ids 0-3 as in microsoft/mpnet-base, before BERT's WordPiece vocabulary (its unknown token is BERT's ``[UNK]``);
<mask> last."""


def _mpnet_wordpiece():
    """MPNet's kind: BERT's WordPiece (:func:`_wordpiece`) after :data:`MPNET_SPECIALS`, ``<mask>`` last, and
    MPNetConverter's template ``<s> A </s>``, ``<s> A </s> </s> B:1 </s>:1``, as microsoft/mpnet-base's tokenizer.json."""
    from tokenizers import Tokenizer, models, processors

    bert = _wordpiece()
    pieces = sorted(bert.get_vocab(with_added_tokens=False).items(), key=lambda piece: piece[1])
    vocab = MPNET_SPECIALS + [t for t, _ in pieces] + ["<mask>"]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = bert.normalizer, bert.pre_tokenizer, bert.decoder
    _specials(tok, MPNET_SPECIALS + BERT_SPECIALS + ["<mask>"], lstrip="<mask>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0 </s>:0", pair="<s>:0 $A:0 </s>:0 </s>:0 $B:1 </s>:1", special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok


def _camembert_unigram():
    """CamemBERT's kind: XLM-R's unigram with camembert-base's layout (:data:`CAMEMBERT_SPECIALS`, ``<mask>`` last)."""
    from tokenizers import normalizers

    tok = _unigram(CAMEMBERT_SPECIALS, "<unk>", normalizers.NFKC(), 320)
    _specials(tok, CAMEMBERT_SPECIALS + ["<mask>"], lstrip="<mask>")
    _template(tok, "<s>", "</s>", roberta_pair=True)
    return tok


def _deberta_unigram():
    """DeBERTa-v3's kind: unigram after DebertaV2Converter's normalizer (Strip, NFKC standing in for its precompiled
    map, runs of spaces to one), case kept, [MASK] last, BERT's template with token types."""
    from tokenizers import Regex, normalizers

    normalizer = normalizers.Sequence([normalizers.Strip(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok = _unigram(DEBERTA_SPECIALS, "[UNK]", normalizer, 310)
    _specials(tok, DEBERTA_SPECIALS + ["[MASK]"])
    _template(tok, "[CLS]", "[SEP]", roberta_pair=False)
    return tok


def _albert_unigram():
    """ALBERT's kind: unigram after AlbertConverter's normalizer (quotes, NFKD, accents stripped, lowercased)."""
    from tokenizers import Regex, normalizers

    normalizer = normalizers.Sequence([
        normalizers.Replace("``", '"'), normalizers.Replace("''", '"'), normalizers.NFKD(), normalizers.StripAccents(),
        normalizers.Lowercase(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok = _unigram(ALBERT_SPECIALS, "<unk>", normalizer, 300)
    _specials(tok, ALBERT_SPECIALS, lstrip="[MASK]")
    _template(tok, "[CLS]", "[SEP]", roberta_pair=False)
    return tok


def _wordpiece():
    """BERT's kind (DistilBERT, ELECTRA): BertNormalizer lowercasing, BertPreTokenizer, WordPiece with ``##``.

    The vocabulary is what BPE (BpeTrainer, no continuation prefix) cuts the corpus' words into, a word's first
    piece as is and the others after ``##``, plus every character in both forms. Not WordPieceTrainer's: it
    numbers the ``##`` pieces in hash order, which breaks ties between equally frequent merges differently
    from one process to the next.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    bpe = _trained(models.BPE(unk_token="[UNK]"), trainers.BpeTrainer(
        vocab_size=240, special_tokens=BERT_SPECIALS, show_progress=False),
        normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer(), None)
    chars = {c for text in CORPUS for c in bpe.normalizer.normalize_str(text) if not c.isspace()}
    pieces = chars | {"##" + c for c in chars}
    for text in CORPUS:
        for word, _ in bpe.pre_tokenizer.pre_tokenize_str(bpe.normalizer.normalize_str(text)):
            first, *rest = (t.value for t in bpe.model.tokenize(word))
            pieces.update([first, *("##" + p for p in rest)])
    vocab = BERT_SPECIALS + sorted(pieces)
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = bpe.normalizer, bpe.pre_tokenizer, decoders.WordPiece()
    _specials(tok, BERT_SPECIALS)
    _template(tok, "[CLS]", "[SEP]", roberta_pair=False)
    return tok


@functools.cache
def member_tokenizer(kind: str):
    """The transformers tokenizer of ``kind`` (one of :data:`MEMBERS` or :data:`MODERN`), trained once per process:
    a fast one, but ESM's EsmTokenizer (transformers has no fast ESM tokenizer)."""
    import transformers

    if kind == "roberta":
        return transformers.RobertaTokenizerFast(tokenizer_object=_byte_level_bpe())
    if kind == "xlm-roberta":
        return transformers.XLMRobertaTokenizerFast(tokenizer_object=_xlmr_unigram())
    if kind == "mpnet":
        return transformers.MPNetTokenizerFast(tokenizer_object=_mpnet_wordpiece())
    if kind == "camembert":
        return transformers.CamembertTokenizerFast(tokenizer_object=_camembert_unigram())
    if kind == "distilbert":
        return transformers.DistilBertTokenizerFast(tokenizer_object=_wordpiece())
    if kind == "bert":
        return transformers.BertTokenizerFast(tokenizer_object=_wordpiece())
    if kind in ("electra", "electra-discriminator"):
        return transformers.ElectraTokenizerFast(tokenizer_object=_wordpiece())
    if kind == "albert":
        return transformers.AlbertTokenizerFast(tokenizer_object=_albert_unigram(), pad_token="<pad>",
                                                unk_token="<unk>")
    if kind == "deberta-v2":
        return transformers.DebertaV2TokenizerFast(tokenizer_object=_deberta_unigram())
    if kind == "modernbert":
        return transformers.PreTrainedTokenizerFast(
            tokenizer_object=_modernbert_bpe(), unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
            pad_token="[PAD]", mask_token="[MASK]", clean_up_tokenization_spaces=True,
            model_input_names=["input_ids", "attention_mask"])
    if kind in ESM_KINDS:
        return _esm(transformers)
    raise ValueError(f"unknown kind {kind!r}; pass one of {', '.join(MEMBERS + MODERN)}")


def member_config(kind: str, vocab_size: int, **overrides):
    """The transformers config of ``kind``: small odd sizes, dropout 0, 64 positions (RoBERTa's 64 + 2 for
    its padding offset; 128 for ModernBERT and ESM-2, whose rotary positions have no table; ESM-1b's 130 hold
    ESM-2's 128 tokens from ``padding_idx + 1``), the vocabulary of its tokenizer and its special tokens' ids;
    ``overrides`` replace any field."""
    import transformers

    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if kind in ("roberta", "xlm-roberta"):
        cls = transformers.RobertaConfig if kind == "roberta" else transformers.XLMRobertaConfig
        sizes = dict(hidden_size=44, num_attention_heads=4) if kind == "roberta" else dict(hidden_size=45,
                                                                                          num_attention_heads=3)
        fields = dict(**sizes, num_hidden_layers=2, intermediate_size=72, max_position_embeddings=66,
                      type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, **no_dropout)
    elif kind == "mpnet":
        cls = transformers.MPNetConfig
        fields = dict(hidden_size=44, num_attention_heads=4, num_hidden_layers=2, intermediate_size=72,
                      max_position_embeddings=66, relative_attention_num_buckets=32, pad_token_id=1, bos_token_id=0,
                      eos_token_id=2, **no_dropout)
    elif kind == "camembert":
        cls = transformers.CamembertConfig
        fields = dict(hidden_size=39, num_attention_heads=3, num_hidden_layers=2, intermediate_size=72,
                      max_position_embeddings=66, type_vocab_size=1, pad_token_id=1, bos_token_id=5, eos_token_id=6,
                      **no_dropout)
    elif kind == "bert":
        cls = transformers.BertConfig
        fields = dict(hidden_size=42, num_attention_heads=3, num_hidden_layers=2, intermediate_size=72,
                      max_position_embeddings=64, pad_token_id=0, **no_dropout)
    elif kind == "distilbert":
        cls = transformers.DistilBertConfig
        fields = dict(dim=40, n_heads=4, n_layers=2, hidden_dim=72, max_position_embeddings=64, pad_token_id=0,
                      dropout=0.0, attention_dropout=0.0, qa_dropout=0.0, seq_classif_dropout=0.0)
    elif kind in ("electra", "electra-discriminator"):
        cls = transformers.ElectraConfig
        fields = dict(embedding_size=28, hidden_size=45, num_attention_heads=3, num_hidden_layers=2,
                      intermediate_size=72, max_position_embeddings=64, pad_token_id=0, **no_dropout)
    elif kind == "albert":
        cls = transformers.AlbertConfig
        fields = dict(embedding_size=24, hidden_size=40, num_attention_heads=4, num_hidden_layers=3,
                      num_hidden_groups=1, inner_group_num=1, intermediate_size=72, max_position_embeddings=64,
                      pad_token_id=0, bos_token_id=2, eos_token_id=3, classifier_dropout_prob=0.0, **no_dropout)
    elif kind == "deberta-v2":  # DeBERTa-v3's layout: log buckets (16, below the texts' lengths), shared keys, no types
        cls = transformers.DebertaV2Config
        fields = dict(hidden_size=44, num_attention_heads=4, num_hidden_layers=2, intermediate_size=72,
                      max_position_embeddings=64, relative_attention=True, position_buckets=16,
                      max_relative_positions=64, pos_att_type=["p2c", "c2p"], share_att_key=True,
                      norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0, pad_token_id=0,
                      pooler_dropout=0.0, **no_dropout)
    elif kind == "modernbert":
        cls, tok = transformers.ModernBertConfig, member_tokenizer(kind)
        fields = dict(hidden_size=48, num_attention_heads=4, num_hidden_layers=4, intermediate_size=40,
                      global_attn_every_n_layers=3, local_attention=8, global_rope_theta=160000.0,
                      local_rope_theta=10000.0, max_position_embeddings=128, norm_bias=False, attention_bias=False,
                      mlp_bias=False, decoder_bias=True, classifier_bias=False, attention_dropout=0.0,
                      embedding_dropout=0.0, mlp_dropout=0.0, classifier_dropout=0.0, reference_compile=False,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id, cls_token_id=tok.cls_token_id,
                      eos_token_id=tok.sep_token_id, sep_token_id=tok.sep_token_id)
    elif kind in ESM_KINDS:  # ESM-1b: 130 learned positions from padding_idx + 1, ESM-2's 128 tokens
        cls, tok = transformers.EsmConfig, member_tokenizer(kind)
        positions = dict(max_position_embeddings=128, position_embedding_type="rotary", emb_layer_norm_before=False) \
            if kind == "esm" else dict(max_position_embeddings=130, position_embedding_type="absolute",
                                       emb_layer_norm_before=True)
        fields = dict(hidden_size=40, num_attention_heads=4, num_hidden_layers=2, intermediate_size=72, **positions,
                      token_dropout=True, layer_norm_eps=1e-5, pad_token_id=tok.pad_token_id,
                      mask_token_id=tok.mask_token_id, **no_dropout)
    else:
        raise ValueError(f"unknown kind {kind!r}; pass one of {', '.join(MEMBERS + MODERN)}")
    return cls(vocab_size=vocab_size, **{**fields, **overrides})


MODEL_CLASSES = {"roberta": "RobertaForMaskedLM", "xlm-roberta": "XLMRobertaForMaskedLM",
                 "distilbert": "DistilBertForMaskedLM", "electra": "ElectraForMaskedLM",
                 "electra-discriminator": "ElectraForPreTraining", "albert": "AlbertForMaskedLM",
                 "modernbert": "ModernBertForMaskedLM", "esm": "EsmForMaskedLM", "deberta-v2": "DebertaV2ForMaskedLM", "bert": "BertForMaskedLM",
                 "camembert": "CamembertForMaskedLM", "mpnet": "MPNetForMaskedLM", "esm1b": "EsmForMaskedLM"}
"""The transformers class of each kind (ELECTRA's generator is a masked LM; its discriminator is not)."""


PREFIXES = {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta", "distilbert": "DistilBert",
            "electra": "Electra", "albert": "Albert", "modernbert": "ModernBert", "esm": "Esm",
            "deberta-v2": "DebertaV2",
            "camembert": "Camembert", "mpnet": "MPNet", "esm1b": "Esm"}
"""The transformers class prefix of each kind that has task heads."""

TASK_SUFFIXES = {"sequence-classification": "ForSequenceClassification", "token-classification": "ForTokenClassification",
                 "question-answering": "ForQuestionAnswering", "multiple-choice": "ForMultipleChoice"}
"""Each task's transformers class suffix."""

HEAD_TASKS = {kind: tuple(TASK_SUFFIXES) for kind in PREFIXES}
HEAD_TASKS["esm"] = HEAD_TASKS["esm1b"] = ("sequence-classification", "token-classification")
"""The tasks transformers 4.57 has a head class for, by kind."""


def save_member(kind: str, folder: Path, seed: int = 0, model_class: str | None = None, **config_overrides):
    """Write a random ``kind`` checkpoint (one of :data:`MEMBERS` or :data:`MODERN`) with its tokenizer to ``folder``.

    The folder holds config.json, model.safetensors, tokenizer.json (ESM: vocab.txt), tokenizer_config.json and
    special_tokens_map.json. The model is the transformers one (eval mode), returned as the oracle;
    ``seed`` sets its weights, ``model_class`` the transformers class (default :data:`MODEL_CLASSES`'s; a task head's,
    ``RobertaForSequenceClassification``: :func:`save_head`), ``config_overrides`` any config field
    (:func:`member_config`). Every norm's weight
    (LayerNorm, ESM's layer_norm and emb_layer_norm_after, ModernBERT's attn_norm, mlp_norm, final_norm, ...) and
    every bias (ESM's lm_head.bias too) is moved off its init.
    """
    import transformers

    tokenizer = member_tokenizer(kind)
    config = member_config(kind, len(tokenizer), **config_overrides)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_class or MODEL_CLASSES[kind])(config)
    with torch.no_grad():  # break the init's symmetry (LayerNorm 1/0, zero biases) so every weight matters
        for name, p in model.named_parameters():
            if "norm" in name.lower() or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    model.eval()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    # the tokenizer is shared by every test of the process (member_tokenizer): a call that padded on the left leaves
    # its backend's padding set so, which tokenizer.json would keep; every folder gets it as trained
    tokenizer.padding_side = "right"
    if getattr(tokenizer, "_tokenizer", None) is not None:
        tokenizer._tokenizer.no_padding()
        tokenizer._tokenizer.no_truncation()
    tokenizer.save_pretrained(folder)
    return model


def say_max_length(folder: Path, n: int) -> None:
    """Set ``model_max_length`` in ``folder``'s tokenizer_config.json to ``n`` (fewer than the model's positions), as a
    real checkpoint's says its 512 (ESM-2's 1024 of 1026 positions): what transformers' tokenizer and pipelines cut
    to. The folders :func:`save_member` writes say none (transformers reads 1e30)."""
    import json

    path = Path(folder) / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**config, "model_max_length": n}), encoding="utf-8")


def save_head(kind: str, task: str, folder: Path, seed: int = 0, **config_overrides):
    """Write a random ``kind`` checkpoint with ``task``'s head (``{Prefix}{TASK_SUFFIXES[task]}``), as
    :func:`save_member` writes one; returns the transformers model (eval mode)."""
    return save_member(kind, folder, seed, model_class=PREFIXES[kind] + TASK_SUFFIXES[task], **config_overrides)


QUICK_KINDS = ("bert", "roberta")
"""The kinds the README's quick test run takes where a test runs over every member (BERT's WordPiece and pooler,
RoBERTa's byte-level BPE and positions from ``padding_idx + 1``); the others run with the tests marked slow."""

SLOW_KINDS = ("esm1b",)
"""Kinds only the slow run takes, even in a test whose ``quick`` names them (ESM-1b is ESM-2's layer with learned
positions, which tests/test_esm_learned.py holds to transformers in the quick run)."""


def kind_params(kinds, quick: tuple[str, ...] = QUICK_KINDS) -> list:
    """``kinds`` as pytest params, those not in ``quick`` (or in :data:`SLOW_KINDS`) marked slow: a test over every
    member keeps two in the quick run and takes the rest in the slow one (CI runs both)."""
    import pytest

    return [pytest.param(k, marks=() if k in quick and k not in SLOW_KINDS else pytest.mark.slow) for k in kinds]


def member_fixture(kinds: tuple[str, ...] = MEMBERS, scope: str = "module"):
    """A pytest fixture over ``kinds`` (one test per kind) giving ``(kind, folder, transformers model)``,
    the folder written once per ``scope`` by :func:`save_member`. In a test module:
    ``member = member_fixture()``, then ``def test_x(member): kind, folder, model = member``. The quick run takes
    the kinds of :data:`QUICK_KINDS` (:func:`kind_params`), the slow one the rest."""
    import pytest

    @pytest.fixture(scope=scope, params=kind_params(kinds))
    def member(request, tmp_path_factory):
        folder = tmp_path_factory.mktemp(request.param)
        return request.param, folder, save_member(request.param, folder)

    return member
