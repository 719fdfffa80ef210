"""bertfn's task pipelines against transformers' pipelines (and sentence-transformers' CrossEncoder) on fine-tuned heads.

    python bench/heads.py            # every workload; builds each checkpoint in bench/.work/heads once
    python bench/heads.py --quick    # tiny shapes, few repetitions: checks the script (tests/test_bench.py)

In one process, bertfn and what a user would otherwise pick, one call of each in turn (bench.py's ``alternate``):

  * text classification: ``bertfn.classify`` against ``pipeline("text-classification")``: one sentence (target
    ratio <= 0.5, fill-mask's), and workload.py's 64 sentences (8-128 tokens, whole) at batch sizes 1, 8, 16 and 64
    on each side (the pipeline's input sorted by length, its best case) and each side's best (target <= 0.625);
    beside them what bounds those targets: the pipeline's model forward alone (the same products without the
    pipeline), the machine's floor (weights at stream bandwidth or FLOPs at the fp32 peak), and bertfn's bf16 mode
    held to the same targets;
  * NER: ``bertfn.tag(..., aggregation_strategy="simple")`` against ``pipeline("token-classification",
    aggregation_strategy="simple")`` on the 64 sentences (their places and first words capitalised);
  * extractive QA: ``bertfn.answer`` against ``pipeline("question-answering")``, one question over a context of about
    2000 tokens, read in windows of 384 tokens that share 128 (``max_seq_len=384, doc_stride=128``);
  * zero-shot: ``bertfn.zero_shot`` against ``pipeline("zero-shot-classification")``, 8 texts x 5 labels;
  * reranking: ``bertfn.rerank`` against ``sentence_transformers.CrossEncoder.rank``, one query x 100 passages of 8
    to 256 tokens;
  * contact maps: ``bertfn.contacts`` against ``EsmForMaskedLM.predict_contacts`` (eager attention, which returns the
    maps), 32 antibody-like heavy chains of 100-130 residues (family_modern.py's), on padded batches sorted by length.

bertfn runs at its defaults (the NER, QA, zero-shot, rerank and contacts rows); the pipelines at their default batch
size (1) and at a larger one with their input sorted by length; CrossEncoder at its default (32, sorting by length
itself); ``predict_contacts`` a chain at a time and in batches of 8. These five have no target. The contacts
checkpoint is family_modern.py's ESM-2 (esm2_t12_35M_UR50D's configuration) with its weights drawn wider
(``initializer_range`` 0.2, folder ``esm2_t12_35M_UR50D-wide``), so that the maps vary (at 0.02 every probability is
the head's bias, within 1e-3) and their agreement means something.

The checkpoints (``--workdir``/heads/<model>, built on first use) are transformers' ``{Prefix}For{Task}`` with the
real fine-tuned model's configuration and random weights from transformers' initialiser, saved by
``save_pretrained``, and a fast tokenizer of the model's kind built offline (bench/family.py's way): WordPiece with
bert-base's special ids, uncased (30522 entries) or cased (28996), holding the sentences' words as one token each;
byte-level BPE for RoBERTa (family.py's). The zero-shot model has roberta-base's shape (125M parameters) with MNLI's
three labels, as base-sized NLI models have (e.g. cross-encoder/nli-roberta-base), not roberta-large-mnli's 355M:
too slow to run many times on 2 cores. Speed depends on shapes, not values.

Before timing, both sides' answers must agree: labels, entities, spans and rankings exactly (a ranking up to scores
closer than 1e-5), scores within 1e-4; contact maps, which the wide weights make sensitive to float32 rounding,
within 1.5 x transformers' own float32 error of ``predict_contacts`` in float64; or the script stops.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import json
import statistics
import sys
import time
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import Row, alternate, load_average, machine, peak_gflops, stream_gbs, table, write_section  # noqa: E402
from family import bpe_tokenizer, cased_words, words  # noqa: E402
from family_modern import ESM2_35M, ESM_QUICK, Modern, antibodies, build  # noqa: E402
from workload import PLACES, ROME, SPECIALS, batch_texts  # noqa: E402

HEADING = "# bertfn heads of fine-tuned checkpoints (bench/heads.py)"
BUILD = 1
"""The version of the checkpoints this script builds: a folder built by another version is built again."""
TOLERANCE = 1e-4
"""Scores of the two sides must agree within this before anything is timed."""
TIE = 1e-5
"""A ranking may differ from the other side's only between scores closer than this."""

SENTENCE = ROME.replace("[MASK]", "romans")
"""The one-sentence workload: "When in Rome, do as the romans do." (12 tokens)."""
QUESTION = "Who crossed the river in Rome?"
QUERY = "Where did the Romans build the bridge?"
LABELS = ["city", "river", "king", "song", "school"]
MORE_WORDS = "who what where which did does how build".split()
"""Words of the question and the query, in every vocabulary built here (each one token)."""


# --- the checkpoints ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Head:
    """A fine-tuned checkpoint as the benchmark builds it: the real model's configuration, random weights."""

    name: str  # as people write it
    model: str  # the hub model whose shapes it has: the folder's name
    model_class: str
    config_class: str
    config: dict
    tokenizer: str  # "uncased", "cased" (WordPiece) or "bpe"
    tokenizer_class: str
    extra: dict = field(default_factory=dict)  # more config.json fields, set after the config is made


DISTILBERT = dict(dim=768, n_layers=6, n_heads=12, hidden_dim=3072, max_position_embeddings=512, activation="gelu",
                  sinusoidal_pos_embds=False, tie_weights_=True, pad_token_id=0)
BERT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 max_position_embeddings=512, type_vocab_size=2, pad_token_id=0)
CONTACTS = Modern("ESM-2", "esm2_t12_35M_UR50D-wide", "EsmForMaskedLM", "EsmConfig",
                  dict(ESM2_35M, position_embedding_type="rotary", emb_layer_norm_before=False, initializer_range=0.2),
                  ESM_QUICK, 32, (1, 8))
"""The contacts workload's checkpoint: ESM-2 35M's configuration, wider weights (the maps vary), 32 chains."""
NER_LABELS = ["O", "B-MISC", "I-MISC", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
NLI_LABELS = ["contradiction", "neutral", "entailment"]


def labelled(names: list[str]) -> dict:
    return dict(id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})


HEADS = {
    "classify": Head("DistilBERT SST-2", "distilbert-base-uncased-finetuned-sst-2-english",
                     "DistilBertForSequenceClassification", "DistilBertConfig",
                     dict(DISTILBERT, vocab_size=30522, seq_classif_dropout=0.2, finetuning_task="sst-2",
                          **labelled(["NEGATIVE", "POSITIVE"])), "uncased", "DistilBertTokenizerFast"),
    "tag": Head("BERT NER", "bert-base-NER", "BertForTokenClassification", "BertConfig",
                dict(BERT_BASE, vocab_size=28996, **labelled(NER_LABELS)), "cased", "BertTokenizerFast"),
    "answer": Head("DistilBERT SQuAD", "distilbert-base-cased-distilled-squad", "DistilBertForQuestionAnswering",
                   "DistilBertConfig", dict(DISTILBERT, vocab_size=28996), "cased", "DistilBertTokenizerFast"),
    "zero_shot": Head("RoBERTa-base MNLI", "roberta-base-mnli", "RobertaForSequenceClassification", "RobertaConfig",
                      dict(BERT_BASE, vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                           layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                           **labelled(NLI_LABELS)), "bpe", "RobertaTokenizerFast"),
    "rerank": Head("MiniLM-L6 cross-encoder", "ms-marco-MiniLM-L-6-v2", "BertForSequenceClassification", "BertConfig",
                   dict(BERT_BASE, vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, num_labels=1), "uncased", "BertTokenizerFast",
                   # the real model's config.json: CrossEncoder gives its logit as the score
                   dict(sbert_ce_default_activation_function="torch.nn.modules.linear.Identity")),
}
"""The checkpoints by workload, each with its real model's configuration (the hub's config.json): text classification
distilbert-base-uncased-finetuned-sst-2-english's, NER dslim/bert-base-NER's (bert-base-cased's shape, 9 labels), QA
distilbert-base-cased-distilled-squad's, zero-shot roberta-base's with MNLI's 3 labels, rerank
cross-encoder/ms-marco-MiniLM-L-6-v2's."""

TINY = {"DistilBertConfig": dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64),
        "BertConfig": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
        "RobertaConfig": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)}
"""--quick's shapes: 2 layers of width 32 (vocabularies and positions as the real models')."""


def vocabulary(size: int, cased: bool) -> list[str]:
    """``size`` WordPiece entries laid out as bert-base's (uncased or cased: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102,
    [MASK] 103), then every word of the benchmark's texts (capitalised too when cased) and of :data:`MORE_WORDS`, a
    few suffixes, and unused fillers."""
    extra = MORE_WORDS + ([w.capitalize() for w in MORE_WORDS] if cased else [])
    found = list(dict.fromkeys((cased_words() if cased else words()) + extra))
    vocab = [SPECIALS.get(i, f"[unused{i}]") for i in range(104)] + found + ["##s", "##ing", "##ed", "##er", "##ly"]
    vocab += [f"[unused{i}]" for i in range(len(vocab), size)]
    assert len(vocab) == size, (len(vocab), size)
    return vocab


def save_tokenizer(head: Head, folder: Path, vocab_size: int) -> None:
    """The head's fast tokenizer, saved as transformers saves it; it reads 512 tokens, as the real ones do."""
    import transformers

    cls = getattr(transformers, head.tokenizer_class)
    if head.tokenizer == "bpe":  # roberta-base's kind, family.py's
        tok = cls(tokenizer_object=bpe_tokenizer(vocab_size), model_max_length=512)
    else:
        (folder / "vocab.txt").write_text("\n".join(vocabulary(vocab_size, head.tokenizer == "cased")) + "\n",
                                          encoding="utf-8")
        tok = cls(vocab_file=str(folder / "vocab.txt"), do_lower_case=head.tokenizer == "uncased", model_max_length=512)
    if len(tok) != vocab_size:
        raise RuntimeError(f"{head.model}: the tokenizer has {len(tok)} entries, the model {vocab_size}")
    tok.save_pretrained(folder)


def checkpoint(head: Head, workdir: Path, tiny: bool = False, seed: int = 0) -> Path:
    """``workdir``/heads/<model> (``-tiny`` with ``tiny``: --quick's shapes): the head's model with its real
    configuration and random weights, and its tokenizer; built on first use (or when built by another version)."""
    fields = dict(head.config, **(TINY[head.config_class] if tiny else {}))
    folder = workdir / "heads" / (head.model + ("-tiny" if tiny else ""))
    stamp = json.dumps({"build": BUILD, "config": fields, "extra": head.extra, "seed": seed}, indent=1) + "\n"
    done = folder / "bench-heads.json"
    if done.is_file() and done.read_text() == stamp and (folder / "model.safetensors").is_file():
        return folder
    import torch
    import transformers

    print(f"building a {head.model}-shaped random checkpoint in {folder} ...", file=sys.stderr)
    folder.mkdir(parents=True, exist_ok=True)
    done.unlink(missing_ok=True)
    torch.manual_seed(seed)
    config = getattr(transformers, head.config_class)(**fields)
    for key, value in head.extra.items():
        setattr(config, key, value)
    model = getattr(transformers, head.model_class)(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    del model
    save_tokenizer(head, folder, config.vocab_size)
    done.write_text(stamp)
    return folder


# --- the workloads ------------------------------------------------------------------------------------


def sentences(vocab: list[str], n: int = 64, max_tokens: int = 128, seed: int = 0) -> list[str]:
    """workload.py's batch sentences (8-``max_tokens`` tokens, evenly spread, shuffled), whole: no [MASK]."""
    index = {w: i for i, w in enumerate(vocab)}
    return batch_texts(types.SimpleNamespace(token_to_id=index.get), max_tokens=max_tokens, n=n, seed=seed, mask=False)


def capitalised(text: str) -> str:
    """``text`` with its first word and its places capitalised (names for NER, a cased reader's context)."""
    places = set(PLACES)
    out = [w.capitalize() if w in places else w for w in text.split(" ")]
    return " ".join([out[0].capitalize(), *out[1:]])


def long_context(tok, vocab: list[str], tokens: int = 2000) -> str:
    """Sentences of 8-128 tokens joined until the context is at least ``tokens`` long (its own tokens)."""
    parts: list[str] = []
    for text in sentences(vocab, n=64, seed=1):
        parts.append(capitalised(text))
        if len(tok(" ".join(parts), add_special_tokens=False).input_ids) >= tokens:
            break
    return " ".join(parts)


def by_length(texts: list[str], lengths: list[int]) -> tuple[list[str], Callable[[list], list]]:
    """The texts sorted by length (the pipelines' best order), and a function that puts results back in the texts'."""
    order = sorted(range(len(texts)), key=lambda i: lengths[i])

    def back(results: list) -> list:
        out: list = [None] * len(texts)
        for k, i in enumerate(order):
            out[i] = results[k]
        return out

    return [texts[i] for i in order], back


# --- the answers agree --------------------------------------------------------------------------------


class Gap:
    """The largest score difference seen between the two sides, and the check that they agree."""

    def __init__(self, what: str):
        self.what, self.most = what, 0.0

    def fail(self, detail: str):
        raise SystemExit(f"{self.what}: bertfn and the other side disagree, so their times are not of the same work: "
                         f"{detail}")

    def score(self, a, b, where: str = "") -> None:
        gap = abs(float(a) - float(b))
        self.most = max(self.most, gap)
        if gap > TOLERANCE:
            self.fail(f"{where} scores {float(a):.6f} and {float(b):.6f} (tolerance {TOLERANCE})")

    def equal(self, a, b, where: str = "") -> None:
        if a != b:
            self.fail(f"{where} bertfn {a!r}, other {b!r}")


def same_labels(gap: Gap, ours: list[dict], theirs: list[dict]) -> None:
    """text-classification: per text the same label, scores within the tolerance."""
    gap.equal(len(ours), len(theirs), "results:")
    for i, (a, b) in enumerate(zip(ours, theirs)):
        gap.equal(a["label"], b["label"], f"text {i}:")
        gap.score(a["score"], b["score"], f"text {i}:")


def same_entities(gap: Gap, ours: list[list[dict]], theirs: list[list[dict]]) -> None:
    """token-classification: per text the same entities (group, word, characters), scores within the tolerance."""
    keys = ("entity_group", "word", "start", "end")
    gap.equal(len(ours), len(theirs), "results:")
    for i, (a, b) in enumerate(zip(ours, theirs)):
        gap.equal([tuple(e[k] for k in keys) for e in a], [tuple(e[k] for k in keys) for e in b], f"text {i}:")
        for x, y in zip(a, b):
            gap.score(x["score"], y["score"], f"text {i}, {x['word']!r}:")


def same_answer(gap: Gap, ours: dict, theirs: dict) -> None:
    """question-answering: the same answer and characters, scores within the tolerance."""
    keys = ("answer", "start", "end")
    gap.equal({k: ours[k] for k in keys}, {k: theirs[k] for k in keys}, "answer:")
    gap.score(ours["score"], theirs["score"], "answer:")


def same_ranking(gap: Gap, ours: list, theirs: list, key: str, where: str) -> None:
    """The same items in the same order but for scores closer than :data:`TIE`; each item's scores within the
    tolerance. ``ours`` and ``theirs``: lists of (item, score), best first."""
    gap.equal(sorted(i for i, _ in ours), sorted(i for i, _ in theirs), f"{where} {key}s:")
    mine = dict(ours)
    for k, ((a, s), (b, t)) in enumerate(zip(ours, theirs)):
        gap.score(mine[b], t, f"{where} {key} {b!r}:")
        if a != b and abs(s - t) > TIE:
            gap.fail(f"{where} place {k}: bertfn ranks {a!r} ({s:.6f}), the other {b!r} ({t:.6f})")


def same_zero_shot(gap: Gap, ours: list[dict], theirs: list[dict]) -> None:
    gap.equal(len(ours), len(theirs), "results:")
    for i, (a, b) in enumerate(zip(ours, theirs)):
        gap.equal(a["sequence"], b["sequence"], f"text {i}:")
        same_ranking(gap, list(zip(a["labels"], a["scores"])), list(zip(b["labels"], b["scores"])), "label",
                     f"text {i}:")


# --- the run --------------------------------------------------------------------------------------------


def parameters(pipe_model) -> str:
    return f"{sum(p.numel() for p in pipe_model.parameters()) / 1e6:.1f}M parameters"


def shapes(config) -> str:
    hidden = getattr(config, "hidden_size", None) or config.dim
    layers = getattr(config, "num_hidden_layers", None) or config.n_layers
    return f"hidden {hidden}, {layers} layers, vocabulary {config.vocab_size}"


def classifier_gflop(config, lengths: list[int]) -> float:
    """FLOPs of a classification of texts of ``lengths`` tokens: every layer's products at each token (Q, K, V, O:
    4 H^2; the FFN: 2 H I) and attention's Q K^T and P V (2 n^2 H per layer); the head (a few H^2 per text) and
    LayerNorm, GELU, softmax left out. 2 FLOPs per multiply-add (bench.py's ``useful_gflop`` without the MLM head)."""
    H, I, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    return 2 * sum(L * (4 * n * H * H + 2 * n * H * I + 2 * n * n * H) for n in lengths) / 1e9


def encoder_bytes(model) -> int:
    """Bytes of weights one text must read at least once: every tensor but the word, position and token-type tables
    (a few rows of each are read); each tied tensor once."""
    skip = ("word_embeddings.", "position_embeddings.", "token_type_embeddings.")
    unique = {id(t): t for k, t in model.state.items() if not any(s in k for s in skip)}
    return sum(t.numel() * t.element_size() for t in unique.values())


def sentence_bounds(name: str, n: int, folder: Path, model, pipe, ours: list[float], reps: int,
                    notes: list[str], quick: bool) -> list[Row]:
    """What bounds the one-sentence row: the pipeline's model alone (the tokenized sentence through
    ``pipe.model``, no pipeline around it: the same F.linear products); bertfn's call without its encoder's matrix
    products (:func:`without_products`: what it costs besides them, so the rest of its time is theirs); the machine's
    floor (the weights read once at stream bandwidth, or the FLOPs at the best kernel's peak, the longer); bertfn's
    bf16 mode against the pipeline (the target held in that mode, as bench.py holds fill-mask's)."""
    import torch

    import bertfn

    enc = pipe.tokenizer(SENTENCE, return_tensors="pt")
    forward = lambda: pipe.model(**enc)  # noqa: E731
    bf16 = bertfn.load(folder, dtype=torch.bfloat16)
    with torch.inference_mode():  # fp32 and bf16 calls apart: interleaved, each slowed the other's (caches, AMX state)
        t = alternate({"bertfn": lambda: bertfn.classify(SENTENCE, model), "forward": forward}, reps)
        with without_products():
            t |= alternate({"own": lambda: bertfn.classify(SENTENCE, model)}, reps)
        t |= alternate({"bf16": lambda: bertfn.classify(SENTENCE, bf16), "pipeline": lambda: pipe(SENTENCE)}, reps)
    gbs, peak = stream_gbs("cpu", quick), peak_gflops("cpu", torch.float32, quick=quick)
    weights, flop = encoder_bytes(model), classifier_gflop(model.config, [n])
    floor = max(weights / gbs / 1e9, flop / peak)
    notes.append(f"{name}, 1 sentence: the floor reads {weights / 1e6:.0f} MB of weights at {gbs:.1f} GB/s "
                 f"({weights / gbs / 1e6:.1f} ms) and does {flop:.2f} GFLOP at the fp32 peak of {peak:.0f} GFLOP/s "
                 f"({flop / peak * 1e3:.1f} ms), whichever is longer; the pipeline's model alone runs the same products "
                 f"(F.linear) without the pipeline around them, a bound no fp32 text-to-label call goes under without "
                 f"faster products")
    return [Row(f"{name}: 1 sentence, bertfn text to label vs the pipeline's model forward alone (tokens in)", "ms",
                t["bertfn"], "transformers model forward", t["forward"]),
            Row(f"{name}: 1 sentence, bertfn text to label without its encoder's matrix products (each a zero result "
                f"of its shape) vs the whole call", "ms", t["own"], "bertfn text to label", t["bertfn"]),
            Row(f"{name}: 1 sentence vs the machine's floor (weights at stream bandwidth, or FLOPs at peak)", "ms",
                ours, "floor, fp32", [floor]),
            Row(f"bf16 mode: {name}: 1 sentence, text to label", "ms", t["bf16"], "transformers pipeline",
                t["pipeline"], "<= 0.5")]


@contextlib.contextmanager
def without_products():
    """Inside the block, every product of bertfn's fast path (its encoder's) gives a result of zeros of its shape at
    once: the time left is bertfn's call without them (tokenizing, embeddings, attention, LayerNorms, the head)."""
    from bertfn.fast import choice

    saved = choice.run, choice.onednn_linear
    empty = lambda x, w, *args, **kwargs: x.new_zeros(*x.shape[:-1], w.shape[0])  # noqa: E731
    choice.run = lambda kernel, x, w, *args, **kwargs: empty(x, w)
    choice.onednn_linear = empty
    try:
        yield
    finally:
        choice.run, choice.onednn_linear = saved


def batch_bounds(name: str, texts: list[str], lengths: list[int], folder: Path, model, best: list[float],
                 their_best: list[float], batch_sizes: tuple[int, ...], reps: int, quick: bool) -> list[Row]:
    """What bounds the batch row: bertfn's best against the FLOPs of the real tokens at the best kernel's peak (no
    fp32 run of these texts goes under it), and bertfn's bf16 mode at its best batch size against the pipeline's
    best (the target held in that mode)."""
    import torch

    import bertfn

    bf16 = bertfn.load(folder, dtype=torch.bfloat16)
    b = max(batch_sizes)  # bertfn's best in every run so far
    t = alternate({"bf16": lambda: bertfn.classify(texts, bf16, batch_size=b)}, reps, warm_up=not quick)
    floor = classifier_gflop(model.config, lengths) / peak_gflops("cpu", torch.float32, quick=quick)
    return [Row(f"{name}: {len(texts)} mixed sentences, bertfn's best vs the FLOPs of their real tokens at the fp32 "
                "peak", "s", best, "floor, fp32", [floor]),
            Row(f"bf16 mode: {name}: {len(texts)} mixed sentences, batch size {b}, vs the pipeline's best", "s",
                t["bf16"], "transformers pipeline", their_best, "<= 0.625")]


def run(folders: dict[str, Path], quick: bool) -> tuple[list[Row], list[str]]:
    """Every row of the table and the notes (what each checkpoint is, the workloads' sizes, how close the answers)."""
    import transformers
    from sentence_transformers import CrossEncoder

    import bertfn

    transformers.logging.set_verbosity_error()
    reps = dict(single=5, batch=1, other=1) if quick else dict(single=30, batch=3, other=5)
    batch_sizes = (8, 64) if quick else (1, 8, 16, 64)
    fastest = lambda runs: min(runs, key=statistics.median)  # noqa: E731
    rows: list[Row] = []
    notes: list[str] = []
    last: dict = {}

    def keep(name: str, f: Callable[[], object]) -> Callable[[], None]:  # a call whose result stays in ``last``
        return lambda: last.__setitem__(name, f())

    contacts = contact_rows(folders["contacts"], reps["other"], quick)  # first: its checks are the slowest to fail
    gc.collect()

    # text classification: one sentence, then 64 at each batch size
    folder, head = folders["classify"], HEADS["classify"]
    model = bertfn.load(folder)
    pipe = transformers.pipeline("text-classification", model=str(folder), device="cpu")
    gap = Gap(f"{head.model}, the sentence")
    same_labels(gap, bertfn.classify(SENTENCE, model), pipe(SENTENCE))
    n = model.tokenizer([SENTENCE]).attention_mask.sum().item()
    name = f"text classification ({head.model})"
    t = alternate({"bertfn": lambda: bertfn.classify(SENTENCE, model), "pipeline": lambda: pipe(SENTENCE)},
                  reps["single"])
    rows.append(Row(f"{name}: 1 sentence ({n} tokens), text to label", "ms", t["bertfn"], "transformers pipeline",
                    t["pipeline"], "<= 0.5"))
    rows += sentence_bounds(name, n, folder, model, pipe, t["bertfn"], reps["single"], notes, quick)
    texts = sentences(vocabulary(30522, cased=False))
    lengths = model.tokenizer(texts).attention_mask.sum(dim=1).tolist()
    sorted_texts, back = by_length(texts, lengths)
    batch_gap = Gap(f"{head.model}, the 64 sentences")
    same_labels(batch_gap, bertfn.classify(texts, model), back(pipe(sorted_texts, batch_size=8)))
    ours, theirs = [], []
    for b in batch_sizes:
        t = alternate({"bertfn": keep("bertfn", lambda: bertfn.classify(texts, model, batch_size=b)),
                       "pipeline": keep("pipeline", lambda: pipe(sorted_texts, batch_size=b))},
                      reps["batch"], warm_up=not quick)
        same_labels(batch_gap, last["bertfn"], back(last["pipeline"]))  # every timed batch size's answers too
        ours.append(t["bertfn"]), theirs.append(t["pipeline"])
        rows.append(Row(f"{name}: {len(texts)} mixed sentences, batch size {b}", "s", t["bertfn"],
                        "transformers pipeline", t["pipeline"]))
    best, their_best = fastest(ours), fastest(theirs)
    rows.append(Row(f"{name}: {len(texts)} mixed sentences, each side's best batch size "
                    f"({batch_sizes[ours.index(best)]} vs {batch_sizes[theirs.index(their_best)]})", "s", best,
                    "transformers pipeline", their_best, "<= 0.625"))
    rows += batch_bounds(name, texts, lengths, folder, model, best, their_best, batch_sizes, reps["batch"], quick)
    notes.append(f"{head.name} ({head.model}: {head.model_class}, {shapes(model.config)}, {parameters(pipe.model)}, "
                 f"labels {', '.join(model.config.labels)}): the sentence's label and score agree with the pipeline's "
                 f"(at most {gap.most:.1e} apart); the 64 sentences are {sum(lengths)} tokens ({min(lengths)} to "
                 f"{max(lengths)} each), labels equal at every batch size, scores at most {batch_gap.most:.1e} apart")
    del model, pipe
    gc.collect()

    # the other heads: bertfn at its defaults against the other side at its default batch size and a larger one
    def other_rows(key: str, task: str, what: str, ours_call, their_calls: dict[str, Callable[[], object]], check) -> Gap:
        gap = Gap(f"{HEADS[key].model}, {what}")
        check(gap, ours_call(), {k: f() for k, f in their_calls.items()})
        t = alternate({"bertfn": keep("bertfn", ours_call),
                       **{k: keep(k, f) for k, f in their_calls.items()}}, reps["other"], warm_up=not quick)
        check(gap, last["bertfn"], {k: last[k] for k in their_calls})
        for k in their_calls:
            rows.append(Row(f"{task} ({HEADS[key].model}): {what}", "s", t["bertfn"], k, t[k]))
        return gap

    # NER: the 64 sentences, places and first words capitalised
    folder, head = folders["tag"], HEADS["tag"]
    model = bertfn.load(folder)
    pipe = transformers.pipeline("token-classification", model=str(folder), aggregation_strategy="simple",
                                 device="cpu")
    ner_texts = [capitalised(t) for t in texts]
    lengths = model.tokenizer(ner_texts).attention_mask.sum(dim=1).tolist()
    sorted_texts, back = by_length(ner_texts, lengths)
    large = 16

    def check_tags(gap: Gap, ours, theirs: dict) -> None:
        for k, v in theirs.items():
            same_entities(gap, ours, v if k.endswith("1 (its default)") else back(v))

    gap = other_rows("tag", "NER", f"{len(texts)} mixed sentences, aggregation simple",
                     lambda: bertfn.tag(ner_texts, model, aggregation_strategy="simple"),
                     {"transformers pipeline, batch size 1 (its default)": lambda: pipe(ner_texts),
                      f"transformers pipeline, batch size {large}, sorted by length":
                          lambda: pipe(sorted_texts, batch_size=large)}, check_tags)
    entities = sum(map(len, last["bertfn"]))
    notes.append(f"{head.name} ({head.model}: {head.model_class}, {shapes(model.config)}, {parameters(pipe.model)}, "
                 f"{model.config.num_labels} labels): {sum(lengths)} tokens, {entities} entities (random weights), "
                 f"equal on both sides, scores at most {gap.most:.1e} apart")
    del model, pipe
    gc.collect()

    # QA: one question over a long context, in windows of 384 tokens sharing 128
    folder, head = folders["answer"], HEADS["answer"]
    model = bertfn.load(folder)
    pipe = transformers.pipeline("question-answering", model=str(folder), device="cpu")
    window = dict(max_seq_len=384, doc_stride=128)
    context = long_context(pipe.tokenizer, vocabulary(28996, cased=True))
    context_tokens = len(pipe.tokenizer(context, add_special_tokens=False).input_ids)
    windows = len(pipe.tokenizer(QUESTION, context, truncation="only_second", max_length=384, stride=128,
                                 return_overflowing_tokens=True).input_ids)
    large = 8
    gap = other_rows("answer", "QA", f"1 question, a {context_tokens}-token context ({windows} windows of 384)",
                     lambda: bertfn.answer(QUESTION, context, model, **window),
                     {"transformers pipeline, batch size 1 (its default)":
                          lambda: pipe(question=QUESTION, context=context, **window),
                      f"transformers pipeline, batch size {large}":
                          lambda: pipe(question=QUESTION, context=context, batch_size=large, **window)},
                     lambda gap, ours, theirs: [same_answer(gap, ours, v) for v in theirs.values()])
    notes.append(f"{head.name} ({head.model}: {head.model_class}, {shapes(model.config)}, {parameters(pipe.model)}): "
                 f"the question {QUESTION!r} over {context_tokens} tokens of context; the answer "
                 f"{last['bertfn']['answer'][:40]!r} (characters {last['bertfn']['start']}-{last['bertfn']['end']}, random "
                 f"weights) is the pipeline's, scores at most {gap.most:.1e} apart")
    del model, pipe
    gc.collect()

    # zero-shot: 8 texts x 5 labels
    folder, head = folders["zero_shot"], HEADS["zero_shot"]
    model = bertfn.load(folder)
    pipe = transformers.pipeline("zero-shot-classification", model=str(folder), device="cpu")
    few = texts[:8]
    lengths = model.tokenizer(few).attention_mask.sum(dim=1).tolist()
    sorted_few, back = by_length(few, lengths)
    large = 8

    def check_zero_shot(gap: Gap, ours, theirs: dict) -> None:
        for k, v in theirs.items():
            same_zero_shot(gap, ours, v if k.endswith("1 (its default)") else back(v))

    gap = other_rows("zero_shot", "zero-shot", f"{len(few)} texts x {len(LABELS)} labels",
                     lambda: bertfn.zero_shot(few, model, candidate_labels=LABELS),
                     {"transformers pipeline, batch size 1 (its default)": lambda: pipe(few, candidate_labels=LABELS),
                      f"transformers pipeline, batch size {large}, sorted by length":
                          lambda: pipe(sorted_few, candidate_labels=LABELS, batch_size=large)}, check_zero_shot)
    notes.append(f"{head.name} ({head.model}: roberta-base's shape with MNLI's labels {', '.join(NLI_LABELS)}, not "
                 f"roberta-large-mnli's 355M parameters, too slow to repeat on 2 cores; {head.model_class}, "
                 f"{shapes(model.config)}, {parameters(pipe.model)}): {len(few)} texts of {sum(lengths)} tokens "
                 f"({min(lengths)} to {max(lengths)} each), labels {', '.join(LABELS)} in the default template; the "
                 f"labels' order equal, scores at most {gap.most:.1e} apart")
    del model, pipe
    gc.collect()

    # rerank: one query x 100 passages
    folder, head = folders["rerank"], HEADS["rerank"]
    model = bertfn.load(folder)
    ce = CrossEncoder(str(folder), device="cpu")
    passages = sentences(vocabulary(30522, cased=False), n=100, max_tokens=256, seed=2)
    lengths = model.tokenizer([QUERY] * len(passages), passages).attention_mask.sum(dim=1).tolist()

    def check_rerank(gap: Gap, ours, theirs: dict) -> None:
        for v in theirs.values():
            same_ranking(gap, [(r["corpus_id"], r["score"]) for r in ours],
                         [(r["corpus_id"], float(r["score"])) for r in v], "passage", "")

    import sentence_transformers

    gap = other_rows("rerank", "rerank", f"1 query x {len(passages)} passages",
                     lambda: bertfn.rerank(QUERY, passages, model),
                     {f"sentence-transformers {sentence_transformers.__version__} CrossEncoder.rank, batch size 32 "
                      "(its default)": lambda: ce.rank(QUERY, passages, show_progress_bar=False)}, check_rerank)
    notes.append(f"{head.name} ({head.model}: {head.model_class}, {shapes(model.config)}, {parameters(ce.model)}, "
                 f"CrossEncoder's activation {type(ce.activation_fn).__name__}): the query {QUERY!r} with "
                 f"{len(passages)} passages, pairs of {min(lengths)} to {max(lengths)} tokens ({sum(lengths)} in "
                 f"all); the ranking equal, scores at most {gap.most:.1e} apart")
    return rows + contacts[0], notes + [contacts[1]]


def contact_rows(folder: Path, reps: int, quick: bool) -> tuple[list[Row], str]:
    """``bertfn.contacts`` on the chains against ``predict_contacts`` a chain at a time and in sorted padded batches."""
    import torch
    import transformers

    import bertfn

    model = bertfn.load(folder)
    hf = transformers.EsmForMaskedLM.from_pretrained(folder, attn_implementation="eager").eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    chains = [c.replace("<mask>", "A") for c in antibodies(8 if quick else CONTACTS.texts)]
    lengths = [len(c) for c in chains]
    sorted_chains, back = by_length(chains, lengths)

    def theirs(batch_size: int) -> list:
        out = []
        with torch.no_grad():
            for start in range(0, len(sorted_chains), batch_size):
                enc = tok(sorted_chains[start:start + batch_size], padding=True, return_tensors="pt")
                probs = hf.predict_contacts(enc["input_ids"], enc["attention_mask"])  # (b, S - 2, S - 2)
                out += [p[:n, :n] for p, n in zip(probs, (len(c) for c in sorted_chains[start:start + batch_size]))]
        return back(out)

    calls = {f"transformers EsmForMaskedLM.predict_contacts, batch size {b}{', sorted by length' if b > 1 else ''}":
             (lambda b=b: theirs(b)) for b in CONTACTS.batch_sizes}
    # The wide weights make the maps sensitive to float32 rounding (both sides come within a few 1e-4 of the exact
    # maps), so each side is held to predict_contacts in float64, chain by chain: bertfn within 1.5 x transformers' own
    # float32 error (or 1e-4).
    exact_model = copy.deepcopy(hf).double()
    with torch.no_grad():
        exact = [exact_model.predict_contacts(*(tok([c], return_tensors="pt")[k] for k in ("input_ids", "attention_mask")))
                 [0].float() for c in chains]
    del exact_model
    ours = bertfn.contacts(chains, model)
    error = lambda maps: max((a - b).abs().max().item() for a, b in zip(maps, exact))  # noqa: E731
    ours_error, their_error = error(ours), max(error(f()) for f in calls.values())
    if ours_error > max(1.5 * their_error, TOLERANCE):
        raise SystemExit(f"{CONTACTS.model}: bertfn's contact maps are {ours_error:.1e} from the exact ones (float64), "
                         f"predict_contacts' {their_error:.1e}")
    if max(m.std().item() for m in ours) < 1e-3:
        raise SystemExit(f"{CONTACTS.model}: the maps are flat, their agreement says nothing")
    t = alternate({"bertfn": lambda: bertfn.contacts(chains, model), **calls}, reps, warm_up=not quick)
    what = f"contacts ({CONTACTS.model}): {len(chains)} heavy chains of {min(lengths)}-{max(lengths)} residues"
    rows = [Row(what, "s", t["bertfn"], k, t[k]) for k in calls]
    c = model.config
    note = (f"ESM-2 35M, wide ({CONTACTS.model}: EsmForMaskedLM with its contact head, hidden {c.hidden_size}, "
            f"{c.num_hidden_layers} layers, {c.num_attention_heads} heads, weights drawn at std 0.2 so that the maps "
            f"vary): {len(chains)} antibody-like heavy chains of {min(lengths)} to {max(lengths)} residues; every map "
            f"within {ours_error:.1e} of predict_contacts in float64 (transformers' own float32 maps: within "
            f"{their_error:.1e}); bertfn on its fast path (the chains end to end, each "
            f"layer's attention probabilities formed per chain, the products on the kernels chosen here)")
    return rows, note


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes, few repetitions: to test the script")
    parser.add_argument("--threads", type=int, default=None, help="threads for every side (default: torch's)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="file whose heads section is replaced")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work", help="where the built checkpoints go")
    args = parser.parse_args(argv)

    import os

    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every side reads the local folders alone
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    folders = {k: checkpoint(h, args.workdir, tiny=args.quick) for k, h in HEADS.items()}
    folders["contacts"] = build(CONTACTS, args.workdir, args.quick)  # bench/.work/family/<model>, as family_modern.py's
    started, load_before = datetime.datetime.now().astimezone(), load_average()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pipelines' notices (sequential use, deprecations)
        rows, notes = run(folders, args.quick)
    print(f"heads: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    text = "\n".join([
        f"{HEADING}{' (--quick: tiny shapes, too few repetitions to trust)' if args.quick else ''}", "",
        f"- started {started:%Y-%m-%d %H:%M %Z}; load average (1, 5, 15 min) before {load_before}, "
        f"after {load_average()}",
        f"- machine: {machine(threads)}",
        "- models: random weights, each fine-tuned model's real configuration"
        + (" but 2 layers of width 32 (--quick)" if args.quick else "") + ", tokenizers of its kind (bench/heads.py)",
        f"- command: python bench/heads.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        *(f"- {note}" for note in notes),
        "", table(rows), "",
        "Times are per call; ratio = bertfn's median / the other side's median: lower is better. Targets are "
        "fill-mask's (bench/README.md): one text <= 0.5, a batch at each side's best batch size <= 0.625; the other "
        "rows have none. Both sides fp32, the same threads, alternating call by call in one process; bertfn at its "
        "defaults but where a batch size is named.",
    ])
    print(text)
    write_section(args.out, HEADING, text)


if __name__ == "__main__":
    main()
