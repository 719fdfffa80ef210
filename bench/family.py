"""bertfn against the transformers pipeline on BERT's family: RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA, ALBERT,
CamemBERT, MPNet, DeBERTa-v3.

    python bench/family.py                          # every member; builds each checkpoint in bench/.work/family once
    python bench/family.py --members roberta,albert # some of them
    python bench/family.py --quick                  # two members, 16 sentences, few repetitions: checks the script

Per member, in one process, bertfn and ``transformers.pipeline("fill-mask")`` on the same checkpoint, one call
of each in turn (bench.py's ``alternate``), with the same targets as BERT's rows of bench.py:

  * one sentence ("When in Rome, do as the <mask> do.", the member's own mask token), text to top-5 answers:
    ``bertfn.fill_mask`` against the pipeline, target ratio <= 0.5;
  * the 64 sentences of workload.py (8-128 BERT tokens, one mask each, the member's mask token), each side at
    batch sizes 1, 8, 16 and 64 (the pipeline's input sorted by length, its best case), and each side's best:
    target ratio <= 0.625.

The checkpoints (``--workdir``/family/<model>, built on first use): the transformers masked LM of each member with
the real model's configuration (sizes, vocabulary size; ELECTRA's is electra-base-generator, a masked LM; CamemBERT's
camembert-base, MPNet's microsoft/mpnet-base, DeBERTa-v3's microsoft/deberta-v3-base as ``DebertaV2ForMaskedLM``:
log-bucketed relative positions, c2p and p2c, no absolute positions) and random weights from transformers' own
initialiser, saved by ``save_pretrained``, and a fast tokenizer of the member's own kind built offline with the
``tokenizers`` library (family_tokenizers.py): byte-level BPE with ``<mask>`` (RoBERTa), SentencePiece-style unigram
(XLM-R; CamemBERT with camembert-base's ids, <s>NOTUSED 0 <pad> 1 </s>NOTUSED 2 <unk> 3 <unk>NOTUSED 4 <s> 5 </s> 6
and <mask> last; ALBERT; DeBERTa-v3 with [PAD] 0 [CLS] 1 [SEP] 2 [UNK] 3 and [MASK] at 128000, as deberta-v3-base's
128001-entry tokenizer over its 128100-row embedding), WordPiece (DistilBERT, ELECTRA; MPNet with <s> 0 <pad> 1
</s> 2 <unk> 3 before bert-base's vocabulary and <mask> at 30526). Its vocabulary holds the benchmark sentences' words
(each one token, as in the real vocabularies) and is padded with unused entries to the model's vocabulary size, the
special tokens at the real model's ids, as workload.py lays out bert-base's. Speed depends on shapes, not values.
Before timing, bertfn's top-5 tokens for the sentence must equal the pipeline's and their scores agree within 1e-4,
or the script stops. The section in RESULTS.md is replaced whole: a run of some members leaves out the others' rows.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import statistics
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import BATCH_SIZES, Row, alternate, load_average, machine, table, write_section  # noqa: E402
from family_tokenizers import bpe_tokenizer, cased_words, save_tokenizer, words  # noqa: E402, F401 (heads.py's too)
from workload import batch_texts, vocabulary  # noqa: E402

HEADING = "# bertfn BERT's family (bench/family.py)"
SENTENCE = "When in Rome, do as the {mask} do."
"""The one-sentence workload, bench.py's ROME with the member's mask token."""
BUILD = 1
"""The version of the checkpoints this script builds: a folder built by another version is built again."""


# --- the members -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """One member of BERT's family as the benchmark builds it: the real model's configuration, random weights."""

    name: str  # as people write it
    model: str  # the hub model whose shapes it has: the folder's name
    model_class: str  # the transformers masked LM
    config_class: str
    config: dict = field(default_factory=dict)  # the real model's config.json fields that decide its shapes
    tokenizer: str = "wordpiece"  # its kind: family_tokenizers.py's "bpe", "unigram-xlmr", ..., "wordpiece-mpnet"
    tokenizer_class: str = "BertTokenizerFast"


MEMBERS = {
    "roberta": Member("RoBERTa", "roberta-base", "RobertaForMaskedLM", "RobertaConfig", dict(
        vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0,
        eos_token_id=2), "bpe", "RobertaTokenizerFast"),
    "xlm-roberta": Member("XLM-RoBERTa", "xlm-roberta-base", "XLMRobertaForMaskedLM", "XLMRobertaConfig", dict(
        vocab_size=250002, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0,
        eos_token_id=2), "unigram-xlmr", "XLMRobertaTokenizerFast"),
    "distilbert": Member("DistilBERT", "distilbert-base-uncased", "DistilBertForMaskedLM", "DistilBertConfig", dict(
        vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072, max_position_embeddings=512,
        activation="gelu", sinusoidal_pos_embds=False, tie_weights_=True, pad_token_id=0), "wordpiece",
        "DistilBertTokenizerFast"),
    "electra": Member("ELECTRA (generator)", "electra-base-generator", "ElectraForMaskedLM", "ElectraConfig", dict(
        vocab_size=30522, embedding_size=768, hidden_size=256, num_hidden_layers=12, num_attention_heads=4,
        intermediate_size=1024, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu", pad_token_id=0),
        "wordpiece", "ElectraTokenizerFast"),
    "albert": Member("ALBERT", "albert-base-v2", "AlbertForMaskedLM", "AlbertConfig", dict(
        vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, num_hidden_groups=1, inner_group_num=1, hidden_act="gelu_new",
        max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0, bos_token_id=2,
        eos_token_id=3), "unigram-albert", "AlbertTokenizerFast"),
    "camembert": Member("CamemBERT", "camembert-base", "CamembertForMaskedLM", "CamembertConfig", dict(
        vocab_size=32005, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=5,
        eos_token_id=6), "unigram-camembert", "CamembertTokenizerFast"),
    "mpnet": Member("MPNet", "mpnet-base", "MPNetForMaskedLM", "MPNetConfig", dict(
        vocab_size=30527, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=514, relative_attention_num_buckets=32, layer_norm_eps=1e-5, hidden_act="gelu",
        pad_token_id=1, bos_token_id=0, eos_token_id=2), "wordpiece-mpnet", "MPNetTokenizerFast"),
    "deberta-v3": Member("DeBERTa-v3", "deberta-v3-base", "DebertaV2ForMaskedLM", "DebertaV2Config", dict(
        vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=512, relative_attention=True, position_buckets=256, max_relative_positions=-1,
        pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False,
        type_vocab_size=0, layer_norm_eps=1e-7, hidden_act="gelu", pad_token_id=0), "unigram-deberta",
        "DebertaV2TokenizerFast"),
}
"""The members by the name ``--members`` takes, each with its real model's configuration (the hub's config.json)."""

QUICK_BATCH_SIZES = (4, 16)
"""``--quick``'s batch sizes, on every fourth of the 64 sentences (all: bench.py's 1, 8, 16 and 64 on the 64)."""

QUICK_MEMBERS = ("electra", "albert")
"""``--quick``'s members unless ``--members`` names others: the two quickest to build and run, one WordPiece and
one unigram tokenizer, both with an embedding size unlike the hidden size."""


# --- the checkpoints -------------------------------------------------------------------------------------


def checkpoint(member: Member, workdir: Path, vocab_size: int | None = None, seed: int = 0,
               save: Callable[[Member, Path, int], None] = save_tokenizer) -> Path:
    """``workdir``/family/<model>: the member's masked LM with its real configuration and random weights, and its
    tokenizer; built on first use (or when built by another version of this script or another vocabulary size).
    vocab_size: a smaller vocabulary than the real model's (``--xlmr-vocab``), else the real one. save: writes
    the tokenizer (family_modern.py passes its own)."""
    config_fields = dict(member.config, **({"vocab_size": vocab_size} if vocab_size else {}))
    folder = workdir / "family" / member.model
    stamp = {"build": BUILD, "config": config_fields, "seed": seed}
    done = folder / "bench-family.json"
    if done.is_file() and json.loads(done.read_text()) == stamp and (folder / "model.safetensors").is_file():
        return folder
    import torch
    import transformers

    print(f"building a {member.model}-shaped random checkpoint in {folder} ...", file=sys.stderr)
    folder.mkdir(parents=True, exist_ok=True)
    done.unlink(missing_ok=True)
    torch.manual_seed(seed)
    config = getattr(transformers, member.config_class)(**config_fields)
    model = getattr(transformers, member.model_class)(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    del model
    save(member, folder, config.vocab_size)
    done.write_text(json.dumps(stamp, indent=1) + "\n")
    return folder


def member_texts(mask_token: str) -> list[str]:
    """workload.py's 64 sentences (bench.py's batch), their [MASK] written as ``mask_token``.

    They are made with bert-base's vocabulary (workload.py), in which each of their words is one token; the
    members' vocabularies built here hold each as one token too, so the lengths stay about BERT's 8-128."""
    index = {w: i for i, w in enumerate(vocabulary())}
    texts = batch_texts(types.SimpleNamespace(token_to_id=index.get), max_tokens=128)
    return [t.replace("[MASK]", mask_token) for t in texts]


def bert_tokens(quick: bool) -> str:
    """The tokens of the sentences run (--quick's every fourth, or all 64) in bert-base's vocabulary, and their range."""
    lengths = [len(t.split()) + 2 for t in member_texts("[MASK]")]  # each word one token, and [CLS], [SEP]
    lengths = lengths[::4] if quick else lengths
    return f"{sum(lengths)}, {min(lengths)} to {max(lengths)}"


def gflop(config, lengths: list[int], head_rows: int) -> float:
    """FLOPs of a fill-mask's products over texts of ``lengths`` tokens: every layer's matmuls at each token,
    attention's Q K^T and P V per text, the embeddings' projection where the member has one (ELECTRA, ALBERT),
    and the MLM head at ``head_rows`` positions (bertfn: the masks; the pipeline: every token, padding included).
    2 FLOPs per multiply-add; LayerNorm, activations and softmax left out (bench.py's ``useful_gflop``, per member)."""
    H, I, V, L = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    E = getattr(config, "embedding_size", None) or H
    per_token = L * (4 * H * H + 2 * H * I) + (E * H if E != H else 0)
    head = H * E + E * V  # transform (H -> E: H for BERT, RoBERTa, DistilBERT) and decoder
    macs = sum(per_token * n + L * 2 * n * n * H for n in lengths) + head_rows * head
    return 2 * macs / 1e9


def padded(lengths: list[int], batch_size: int) -> list[int]:
    """The lengths the pipeline runs texts sorted by length in batches of ``batch_size`` at: each its batch's longest."""
    s = sorted(lengths)
    return [max(s[i:i + batch_size]) for i in range(0, len(s), batch_size) for _ in s[i:i + batch_size]]


# --- the run ---------------------------------------------------------------------------------------------


def check_same(ours: list[dict], theirs: list[dict], what: str, tolerance: float = 1e-4) -> float:
    """Raise unless bertfn's answers have the pipeline's tokens, in its order, and scores within ``tolerance``;
    the largest score difference."""
    a, b = [x["token"] for x in ours], [x["token"] for x in theirs]
    gap = max(abs(x["score"] - y["score"]) for x, y in zip(ours, theirs))
    if a != b or gap > tolerance:
        raise SystemExit(f"{what}: bertfn and the pipeline disagree, so their times are not of the same work: "
                         f"bertfn {[(x['token'], round(x['score'], 6)) for x in ours]}, pipeline "
                         f"{[(x['token'], round(x['score'], 6)) for x in theirs]} (tolerance {tolerance})")
    return gap


def run_member(member: Member, folder: Path, quick: bool) -> tuple[list[Row], list[str]]:
    """The rows of one member: the sentence and the 64-sentence batch, bertfn against the pipeline."""
    import transformers

    import bertfn

    reps = dict(single=5, batch=1) if quick else dict(single=30, batch=3)
    batch_sizes = QUICK_BATCH_SIZES if quick else BATCH_SIZES
    fastest = lambda runs: min(runs, key=statistics.median)  # noqa: E731

    model = bertfn.load(folder)
    pipe = transformers.pipeline("fill-mask", model=str(folder), device="cpu")
    mask = model.tokenizer.mask_token
    if pipe.tokenizer.mask_token != mask:
        raise SystemExit(f"{member.model}: bertfn reads the mask token {mask!r}, transformers {pipe.tokenizer.mask_token!r}")
    sentence = SENTENCE.format(mask=mask)
    texts = member_texts(mask)[::4] if quick else member_texts(mask)  # --quick: every fourth, still 8 to 128 tokens
    enc = model.tokenizer(texts)
    lengths = enc.attention_mask.sum(dim=1).tolist()
    if sum((enc.input_ids == model.tokenizer.mask_token_id).sum(dim=1).eq(1).tolist()) != len(texts):
        raise SystemExit(f"{member.model}: not every sentence has exactly one {mask}")
    by_length = [t for _, t in sorted(zip(lengths, texts))]
    n = model.tokenizer([sentence]).attention_mask.sum().item()

    # the same work on both sides: the one sentence's answers, before anything is timed
    gap = check_same(bertfn.fill_mask(sentence, model), pipe(sentence), f"{member.model}, {sentence!r}")

    name = f"{member.name} ({member.model})"
    t = alternate({"bertfn": lambda: bertfn.fill_mask(sentence, model), "pipeline": lambda: pipe(sentence)},
                  reps["single"])
    rows = [Row(f"{name}: fill-mask, 1 sentence ({n} tokens), text to answers", "ms", t["bertfn"],
                "transformers pipeline", t["pipeline"], "<= 0.5")]

    ours, theirs, last = [], [], {}
    for b in batch_sizes:
        calls = {"bertfn": lambda: last.__setitem__("bertfn", bertfn.fill_mask(texts, model, batch_size=b)),
                 "pipeline": lambda: last.__setitem__("pipeline", pipe(by_length, batch_size=b))}
        t = alternate(calls, reps["batch"], warm_up=not quick)
        ours.append(t["bertfn"]), theirs.append(t["pipeline"])
        rows.append(Row(f"{name}: fill-mask, {len(texts)} mixed sentences, batch size {b}", "s", t["bertfn"],
                        "transformers pipeline", t["pipeline"]))
    best, their_best = fastest(ours), fastest(theirs)
    b_ours, b_theirs = batch_sizes[ours.index(best)], batch_sizes[theirs.index(their_best)]
    rows.append(Row(f"{name}: fill-mask, {len(texts)} mixed sentences, each side's best batch size "
                    f"({b_ours} vs {b_theirs})", "s", best, "transformers pipeline", their_best, "<= 0.625"))
    useful, done = gflop(model.config, lengths, len(texts)), gflop(model.config, padded(lengths, b_theirs),
                                                                   sum(padded(lengths, b_theirs)))

    # the batch's answers, as a note: top-1 tokens per sentence on both sides (random weights: near-uniform answers)
    theirs_by_text = dict(zip(by_length, last["pipeline"]))
    top1 = sum(a[0]["token"] == theirs_by_text[text][0]["token"] for text, a in zip(texts, last["bertfn"]))
    apart = max(abs(a[0]["score"] - theirs_by_text[text][0]["score"]) for text, a in zip(texts, last["bertfn"]))
    c = model.config
    shapes = (f"hidden {c.hidden_size}, {c.num_hidden_layers} layers, {c.num_attention_heads} heads, intermediate "
              f"{c.intermediate_size}, vocabulary {c.vocab_size}"
              + (f", embeddings {c.embedding_size}" if getattr(c, "embedding_size", None) not in (None, c.hidden_size)
                 else ""))
    entries = f", {len(pipe.tokenizer)} entries" if len(pipe.tokenizer) != c.vocab_size else ""  # DeBERTa-v3's 128001
    left_out = " (the c2p and p2c position terms not counted)" if member.model_class.startswith("Deberta") else ""
    notes = [f"{name}: {shapes}; tokenizer {member.tokenizer} ({type(pipe.tokenizer).__name__}{entries}, mask {mask} "
             f"{model.tokenizer.mask_token_id}); the {len(texts)} sentences are {sum(lengths)} tokens ({min(lengths)} to "
             f"{max(lengths)} each; BERT's: {bert_tokens(quick)}); the sentence's top 5 equal the pipeline's, scores at most "
             f"{gap:.1e} apart; on the batch the top-1 token agrees for {top1} of {len(texts)} sentences, scores at "
             f"most {apart:.1e} apart; the batch's products{left_out} are {useful:.0f} GFLOP for bertfn "
             f"({useful / statistics.median(best):.0f} GFLOP/s at its best) and {done:.0f} for the pipeline at its "
             f"best batch size (padding, the head at every token; {done / statistics.median(their_best):.0f} GFLOP/s): "
             f"the same speed would give a ratio of {useful / done:.2f}"]
    return rows, notes  # the model and the pipeline go with this frame (main collects them before the next member)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default=None,
                        help=f"comma-separated, of {', '.join(MEMBERS)} (default: all; --quick: "
                             f"{', '.join(QUICK_MEMBERS)})")
    parser.add_argument("--quick", action="store_true", help="few repetitions, batch sizes 8 and 64: to test the script")
    parser.add_argument("--threads", type=int, default=None, help="threads for both sides (default: torch's)")
    parser.add_argument("--xlmr-vocab", type=int, default=None,
                        help="cap XLM-R's vocabulary (default: xlm-roberta-base's 250002)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="file whose family section is replaced")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work", help="where the built checkpoints go")
    args = parser.parse_args(argv)
    keys = args.members.split(",") if args.members else list(QUICK_MEMBERS if args.quick else MEMBERS)
    unknown = [k for k in keys if k not in MEMBERS]
    if unknown:
        parser.error(f"unknown member(s) {', '.join(unknown)}; pick from {', '.join(MEMBERS)}")

    import torch

    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    folders = {k: checkpoint(MEMBERS[k], args.workdir, args.xlmr_vocab if k == "xlm-roberta" else None)
               for k in keys}
    started, load_before = datetime.datetime.now().astimezone(), load_average()
    rows: list[Row] = []
    notes: list[str] = []
    for k in keys:
        start = time.perf_counter()
        r, n = run_member(MEMBERS[k], folders[k], args.quick)
        gc.collect()
        rows += r
        notes += n
        print(f"{MEMBERS[k].model}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    text = "\n".join([
        f"{HEADING}{' (--quick: too few repetitions to trust)' if args.quick else ''}", "",
        f"- started {started:%Y-%m-%d %H:%M %Z}; load average (1, 5, 15 min) before {load_before}, "
        f"after {load_average()}",
        f"- machine: {machine(threads)}",
        "- models: random weights, each member's real configuration and vocabulary size"
        + (f" (XLM-R's vocabulary capped at {args.xlmr_vocab})" if args.xlmr_vocab and "xlm-roberta" in keys else "")
        + ", tokenizers of its own kind (bench/family.py)",
        f"- command: python bench/family.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        *(f"- {note}" for note in notes),
        "", table(rows), "",
        "Times are per call; ratio = bertfn's median / the pipeline's median: lower is better. Targets are BERT's "
        "(bench/README.md). Both sides fp32, the same threads, alternating call by call in one process.",
    ])
    print(text)
    write_section(args.out, HEADING, text)


if __name__ == "__main__":
    main()
