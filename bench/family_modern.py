"""bertfn against transformers' eager and SDPA attention on ModernBERT, ESM-2 and ESM-1b, BERT's pre-LN relatives
(issue 38).

    python bench/family_modern.py                        # all three; builds each checkpoint in bench/.work/family once
    python bench/family_modern.py --members esm,esm1b    # some of them
    python bench/family_modern.py --quick                # small models, few texts and repetitions: checks the script

Per member, in one process, on the same checkpoint: ``bertfn.fill_mask`` and ``transformers.pipeline("fill-mask")``
over the member's masked LM loaded twice, with ``attn_implementation="eager"`` and ``"sdpa"``, one call of each in
turn (bench.py's ``alternate``):

  * one text to its top-5 answers: ModernBERT "When in Rome, do as the [MASK] do."; ESM-2 and ESM-1b adalimumab's
    heavy chain variable domain (121 residues) with one ``<mask>``;
  * a batch of texts, one mask each, each side at two batch sizes (the pipeline's input sorted by length, its best
    case) and at its best: ModernBERT 32 of workload.py's sentences, 8 to ``--modernbert-tokens`` tokens (160: past its
    128-token local window; 32, not bench.py's 64, to keep the run near 10 minutes on 2 cores); ESM-2 and ESM-1b 64
    antibody-like heavy chains of 100-130 residues (:func:`antibodies`).

bertfn runs them on its fast path (their layer on bertfn.Segments: the texts end to end, each attending to itself, the
products on the kernels ``fast.choice`` picks, the last layer at the masks). :func:`fast_gain` measures what that
gives against the padded reference path on the same member: ``fill_mask`` as is against the reference encoder and
MLM head on padded batches (:func:`padded_fill_mask`; ``fill_mask`` with edits ran that way before its edits ran on
the texts end to end too).

The checkpoints (``--workdir``/family/<model>, built on first use) are transformers' masked LMs with the real models'
configurations and random weights: ModernBERT-base (``ModernBertConfig()``'s defaults: 22 layers, hidden 768, 12
heads, intermediate 1152, vocabulary 50368, window 128) and ESM-2 esm2_t12_35M_UR50D (12 layers, hidden 480, 20
heads, intermediate 1920; esm2_t33_650M would take too long on 2 cores), with a tokenizer of the member's kind
(family_tokenizers.py): ModernBERT's byte-level BPE with [UNK] [CLS] [SEP] [PAD] [MASK] at 50280-50284 (the
benchmark's words one token each, as family.py builds RoBERTa's), ESM's 33-token vocab.txt (``EsmTokenizer``).
ESM-1b is no real checkpoint's shape: the real esm1b_t33_650M_UR50S (33 layers, hidden 1280, 650M parameters) is too
slow for a 2-core run, so its row ("ESM-1b at ESM-2 35M's sizes", folder esm1b-t12-35M) takes ESM-1b's layer
(``position_embedding_type`` "absolute": 1026 learned positions from ``padding_idx + 1``; ``emb_layer_norm_before``;
token dropout) at esm2_t12_35M_UR50D's sizes, with ESM-2's vocabulary (ESM-1b's is the same) and workload.

Before timing, the script stops unless bertfn's top 5 for the one text are each transformers side's tokens with
scores within 1e-4, and bertfn's top 5 for every text of the batch (run as a batch) are the SDPA pipeline's for that
text alone: transformers 4.57's ESM scales a padded row's embeddings by its mask count over the padded length instead
of over its real tokens (it does not pass the attention mask to ``EsmEmbeddings``; fixed later upstream), so its
batched answers differ a little.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import random
import statistics
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import Row, alternate, fmt, load_average, machine, table, write_section  # noqa: E402
from family import SENTENCE, Member, check_same, checkpoint, padded  # noqa: E402
from family_tokenizers import save_modern_tokenizer  # noqa: E402
from workload import batch_texts, vocabulary  # noqa: E402

HEADING = "# bertfn ModernBERT, ESM-2 and ESM-1b (bench/family_modern.py)"
SIDES = ("eager", "sdpa")
"""transformers' attention implementations, each a pipeline over its own copy of the model."""
ADALIMUMAB_VH = ("EVQLVESGGGLVQPGRSLRLSCAASGFTFDDYAMHWVRQAPGKGLEWVSAITWNSGHIDYADSVEGRFTISRDNAKNSLYLQMNSLRAEDTAVYYCAK"
                 "VSYLSTASSLDYWGQGTLVTVSS")
"""Adalimumab's heavy chain variable domain: frameworks 1-3 (98 residues, to ...CAK), CDR-H3 VSYLSTASSLDY, then
WGQGTLVTVSS."""
RESIDUES = "ACDEFGHIKLMNPQRSTVWY"


def special_ids(vocab_size: int) -> dict[str, int]:
    """ModernBERT's config fields for its special tokens' ids, 88 before the end of a ``vocab_size`` vocabulary as in
    ModernBERT-base (50281 [CLS], 50282 [SEP], 50283 [PAD] of 50368); --quick's vocabulary is smaller."""
    first = vocab_size - 88
    return dict(vocab_size=vocab_size, pad_token_id=first + 3, bos_token_id=first + 1, eos_token_id=first + 2,
                cls_token_id=first + 1, sep_token_id=first + 2)


@dataclass(frozen=True)
class Modern:
    """A member as the benchmark builds it: transformers' classes, the real model's config fields, the quick ones."""

    name: str
    model: str  # the hub model whose shapes it has: the folder's name
    model_class: str
    config_class: str
    config: dict  # the real model's config.json fields (beyond the config class's defaults)
    quick: dict  # --quick's smaller sizes
    texts: int  # the batch's texts
    batch_sizes: tuple[int, ...]


ESM2_35M = dict(vocab_size=33, hidden_size=480, num_hidden_layers=12, num_attention_heads=20, intermediate_size=1920,
                max_position_embeddings=1026, token_dropout=True, layer_norm_eps=1e-5, mask_token_id=32, pad_token_id=1,
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
"""esm2_t12_35M_UR50D's config fields but its positions: ESM-2's and ESM-1b's rows take these sizes, each with its own
positions (ESM-1b: its layer, not esm1b_t33_650M_UR50S's 33 layers of width 1280, too slow for 2 cores)."""
ESM_QUICK = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128)
"""--quick's ESM sizes."""
ESM = ("esm", "esm1b")
"""ESM's members: ESM-2 (rotary positions) and ESM-1b (learned positions from ``padding_idx + 1``, a LayerNorm on the
embeddings), the same vocabulary, the same workload."""

MODERN = {
    "modernbert": Modern("ModernBERT", "ModernBERT-base", "ModernBertForMaskedLM", "ModernBertConfig", dict(
        reference_compile=False), dict(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, intermediate_size=96,
                                  local_attention=16, **special_ids(1536)), 32, (8, 32)),
    "esm": Modern("ESM-2", "esm2_t12_35M_UR50D", "EsmForMaskedLM", "EsmConfig", dict(
        ESM2_35M, position_embedding_type="rotary", emb_layer_norm_before=False), ESM_QUICK, 64, (8, 64)),
    "esm1b": Modern("ESM-1b at ESM-2 35M's sizes", "esm1b-t12-35M", "EsmForMaskedLM", "EsmConfig", dict(
        ESM2_35M, position_embedding_type="absolute", emb_layer_norm_before=True), ESM_QUICK, 64, (8, 64)),
}
"""The members by the name ``--members`` takes (ModernBERT's other fields are ``ModernBertConfig()``'s defaults;
ESM-1b's model name is no hub model's: its layer at esm2_t12_35M_UR50D's sizes)."""


def build(member: Modern, workdir: Path, quick: bool) -> Path:
    """``workdir``/family/<model> (``<model>-quick`` with --quick's sizes): the member's masked LM with random weights
    (transformers' initialiser) and its tokenizer, by family.py's :func:`checkpoint` (built once)."""
    fields = dict(member.config, **(member.quick if quick else {}))
    spec = Member(member.name, member.model + ("-quick" if quick else ""), member.model_class, member.config_class,
                  fields)
    return checkpoint(spec, workdir, save=save_modern_tokenizer)


def antibodies(n: int, seed: int = 0) -> list[str]:
    """``n`` antibody-like heavy chains of 100-130 residues (evenly spread, shuffled), one ``<mask>`` each:
    adalimumab's framework with 8% of its residues changed at random, a random CDR-H3 of 4-21 residues, and
    WGQGTLVTVSS; under 113 residues, the first few residues are left off (as in sequenced repertoires)."""
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        length = 100 + round(i * 30 / max(n - 1, 1))
        cdr3 = max(4, length - 109)
        frame = [rng.choice(RESIDUES) if rng.random() < 0.08 else r for r in ADALIMUMAB_VH[:98]]
        chain = frame[98 + cdr3 + 11 - length:] + [rng.choice(RESIDUES) for _ in range(cdr3)] + list("WGQGTLVTVSS")
        chain[rng.randrange(len(chain))] = "<mask>"
        texts.append("".join(chain))
    rng.shuffle(texts)
    return texts


def gflop(c, lengths: list[int], head_rows: int) -> float:
    """FLOPs of the matrix products of a fill-mask over texts of ``lengths`` tokens (padding included): each
    layer's products at every token (ModernBERT's GeGLU: Wi (2I, H) and Wo (H, I)), attention's Q K^T and P V over
    every text's whole length (local windows are masks, so both sides compute the full square), the MLM head at
    ``head_rows`` positions. 2 FLOPs per multiply-add; norms, activations and softmax left out."""
    H, I, V, L = c.hidden_size, c.intermediate_size, c.vocab_size, c.num_hidden_layers
    ffn = 3 * H * I if c.model_type == "modernbert" else 2 * H * I
    return 2 * (sum(L * ((4 * H * H + ffn) * n + 2 * n * n * H) for n in lengths) + head_rows * (H * H + H * V)) / 1e9


def member_inputs(key: str, model, n_texts: int, modernbert_tokens: int) -> tuple[str, list[str]]:
    """The one text and the batch's texts of a member, in the model's own mask token."""
    mask = model.tokenizer.mask_token
    if key in ESM:
        return ADALIMUMAB_VH[:100] + mask + ADALIMUMAB_VH[101:], antibodies(n_texts)
    index = {w: i for i, w in enumerate(vocabulary())}
    return SENTENCE.format(mask=mask), [t.replace("[MASK]", mask) for t in batch_texts(
        types.SimpleNamespace(token_to_id=index.get), max_tokens=modernbert_tokens, n=n_texts)]


def run_member(key: str, folder: Path, quick: bool, modernbert_tokens: int) -> tuple[list, list[str]]:
    """The rows of one member: the one text and the batch, bertfn against transformers' eager and SDPA pipelines."""
    import transformers

    import bertfn

    member = MODERN[key]
    reps = dict(single=2, batch=1) if quick else dict(single=20, batch=2)
    n_texts = 8 if quick else member.texts
    batch_sizes = (2, 8) if quick else member.batch_sizes
    model = bertfn.load(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    cls = getattr(transformers, member.model_class)
    pipes = {s: transformers.pipeline("fill-mask", model=cls.from_pretrained(folder, attn_implementation=s).eval(),
                                      tokenizer=tokenizer, device="cpu") for s in SIDES}
    if tokenizer.mask_token != model.tokenizer.mask_token:
        raise SystemExit(f"{member.model}: bertfn reads the mask token {model.tokenizer.mask_token!r}, transformers "
                         f"{tokenizer.mask_token!r}")
    text, texts = member_inputs(key, model, n_texts, modernbert_tokens)
    enc = model.tokenizer(texts)
    lengths = enc.attention_mask.sum(dim=1).tolist()
    if (enc.input_ids == model.tokenizer.mask_token_id).sum().item() != len(texts):
        raise SystemExit(f"{member.model}: not every text has exactly one {model.tokenizer.mask_token}")
    by_length = [t for _, t in sorted(zip(lengths, texts))]
    n = model.tokenizer([text]).attention_mask.sum().item()

    # the same work on every side, before anything is timed: the one text, then every text of the batch
    gaps = {s: check_same(bertfn.fill_mask(text, model), pipes[s](text), f"{member.model} ({s}), {text!r}")
            for s in SIDES}
    ours = bertfn.fill_mask(texts, model, batch_size=max(batch_sizes))
    batch_gap = max(check_same(a, pipes["sdpa"](t), f"{member.model} (sdpa, the text alone), {t!r}")
                    for a, t in zip(ours, texts))

    name = f"{member.name} ({member.model})"
    calls = {"bertfn": lambda: bertfn.fill_mask(text, model), **{s: (lambda p=p: p(text)) for s, p in pipes.items()}}
    rows = [(f"{name}: 1 text ({n} tokens), text to top-5 answers", "ms", alternate(calls, reps["single"]))]
    runs, last = [], {}
    for b in batch_sizes:
        calls = {"bertfn": lambda: bertfn.fill_mask(texts, model, batch_size=b),
                 **{s: (lambda s=s, p=p: last.__setitem__(s, p(by_length, batch_size=b))) for s, p in pipes.items()}}
        runs.append(alternate(calls, reps["batch"], warm_up=False))  # the checks above ran every side once
        rows.append((f"{name}: {len(texts)} texts, batch size {b}", "s", runs[-1]))
        times = ", ".join(f"{side} {statistics.median(t):.2f} s" for side, t in runs[-1].items())
        print(f"{member.model}, batch size {b}: {times}", file=sys.stderr)
    best = {side: min((r[side] for r in runs), key=statistics.median) for side in ("bertfn", *SIDES)}
    at = {side: batch_sizes[[r[side] for r in runs].index(best[side])] for side in best}
    rows.append((f"{name}: {len(texts)} texts, each side's best batch size ({', '.join(str(at[s]) for s in best)})",
                 "s", best))

    # notes: the stock pipeline's batched answers (from the last batch size timed) against bertfn's, and the work
    theirs = dict(zip(by_length, last["sdpa"]))
    top1 = sum(a[0]["token"] == theirs[t][0]["token"] for t, a in zip(texts, ours))
    apart = max(abs(a[0]["score"] - theirs[t][0]["score"]) for t, a in zip(texts, ours))
    c = model.config
    ours_gflop = gflop(c, lengths, len(texts))  # the fast path: each text at its own length
    their_gflop = gflop(c, padded(lengths, at["sdpa"]), sum(padded(lengths, at["sdpa"])))
    shapes = (f"hidden {c.hidden_size}, {c.num_hidden_layers} layers, {c.num_attention_heads} heads, intermediate "
              f"{c.intermediate_size}, vocabulary {c.vocab_size}"
              + (f", window {c.local_attention} in 2 layers of {c.global_attn_every_n_layers}" if key == "modernbert"
                 else ", token dropout"))
    if key == "esm1b":
        shapes += (f", {c.max_position_embeddings} learned positions from padding_idx + 1 and a LayerNorm on the "
                   f"embeddings: ESM-1b's layer at {'--quick' if quick else 'esm2_t12_35M_UR50D'}'s sizes, not "
                   f"esm1b_t33_650M_UR50S's (33 layers, hidden 1280: too slow on 2 cores)")
    notes = [f"{name}: {shapes}; the {len(texts)} texts are {sum(lengths)} tokens ({min(lengths)} to {max(lengths)} "
             f"each); bertfn's top 5 equal transformers' on the one text and on each text of the batch (bertfn "
             f"batched, the SDPA pipeline each text alone), the scores apart at most: eager {gaps['eager']:.1e}, sdpa "
             f"{gaps['sdpa']:.1e}, batch {batch_gap:.1e}; against the SDPA pipeline's own batches (batch size "
             f"{batch_sizes[-1]}) "
             f"the top-1 token agrees for {top1} of {len(texts)}, scores {apart:.1e} apart at most"
             + (" (transformers 4.57's token dropout on padded rows)" if key in ESM else "")
             + f"; the batch's products at each side's best batch size: bertfn {ours_gflop:.0f} GFLOP (the texts end "
             f"to end, the head at the masks: {ours_gflop / statistics.median(best['bertfn']):.0f} GFLOP/s), "
             f"transformers {their_gflop:.0f} GFLOP (padded batches, the head at every token; "
             f"{their_gflop / statistics.median(best['sdpa']):.0f} GFLOP/s with SDPA)"]
    return rows, notes


def padded_fill_mask(model, texts: list[str], batch_size: int) -> list[list[dict]]:
    """fill_mask's top 5 the padded way: each ``batch_size`` texts (in order) a padded batch through the reference
    encoder (SDPA), the MLM head at its masks, the softmax's 5 most likely tokens (one mask per text).

    Returns:
        Per text, 5 of ``{"token": id, "score": probability}`` (what :func:`family.check_same` reads).
    """
    import torch

    import bertfn

    out = []
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            enc = model.tokenizer(texts[i:i + batch_size])  # (b, S)
            h = bertfn.encoder(model, enc.input_ids, enc.attention_mask, enc.token_type_ids).last_hidden_state
            probs = bertfn.mlm_head(model, h[enc.input_ids == model.tokenizer.mask_token_id]).float().softmax(-1)  # (b, V)
            top = probs.topk(5)  # (b, 5) each
            out += [[{"token": int(t), "score": float(p)} for p, t in zip(ps, ts)] for ps, ts in zip(*top)]
    return out


def fast_gain(key: str, folder: Path, quick: bool, modernbert_tokens: int) -> list[Row]:
    """What the fast path gives a member: ``fill_mask`` as is (texts end to end, the kernels ``fast.choice`` picks,
    the last layer at the masks: their layer on bertfn.Segments) against the reference encoder and MLM head on padded
    batches (:func:`padded_fill_mask`, SDPA), on the one text and the batch at batch size 8."""
    import bertfn

    member = MODERN[key]
    model = bertfn.load(folder)
    text, texts = member_inputs(key, model, 8 if quick else member.texts, modernbert_tokens)
    for a, b in zip(bertfn.fill_mask(texts, model), padded_fill_mask(model, texts, 8)):
        check_same(a, b, f"{member.model}, the fast path against the padded one")
    name, other = f"{member.name} ({member.model})", "the padded path (encoder and MLM head)"
    calls = {"fast": lambda: bertfn.fill_mask(text, model), "padded": lambda: padded_fill_mask(model, [text], 1)}
    t = alternate(calls, 2 if quick else 20)
    rows = [Row(f"{name}: 1 text, the fast path", "ms", t["fast"], other, t["padded"])]
    calls = {"fast": lambda: bertfn.fill_mask(texts, model, batch_size=8),
             "padded": lambda: padded_fill_mask(model, texts, 8)}
    t = alternate(calls, 1 if quick else 3, warm_up=False)  # the check above ran both
    rows.append(Row(f"{name}: {len(texts)} texts, batch size 8, the fast path", "s", t["fast"], other, t["padded"]))
    return rows


def three_sides(rows: list) -> str:
    """The table of :func:`run_member`'s rows: each side's median [min-max] and bertfn's ratio to each pipeline."""
    lines = ["| workload | unit | bertfn | transformers eager | transformers sdpa | bertfn / eager | bertfn / sdpa |",
             "|---|---|---|---|---|---|---|"]
    for workload, unit, t in rows:
        ratios = [statistics.median(t["bertfn"]) / statistics.median(t[s]) for s in SIDES]
        lines.append(f"| {workload} | {unit} | {fmt(t['bertfn'], unit)} | {fmt(t['eager'], unit)} | "
                     f"{fmt(t['sdpa'], unit)} | {ratios[0]:.3f} | {ratios[1]:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default=",".join(MODERN), help=f"comma-separated, of {', '.join(MODERN)}")
    parser.add_argument("--quick", action="store_true",
                        help="small models, 8 texts, few repetitions: to test the script")
    parser.add_argument("--modernbert-tokens", type=int, default=160,
                        help="the longest of ModernBERT's 32 sentences, in tokens (default 160; its window is 128)")
    parser.add_argument("--no-fast-gain", action="store_true", help="leave out the fast path against the padded one")
    parser.add_argument("--threads", type=int, default=None, help="threads for every side (default: torch's)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="file whose section is replaced")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work", help="where the built checkpoints go")
    args = parser.parse_args(argv)
    keys = args.members.split(",")
    if any(k not in MODERN for k in keys):
        parser.error(f"unknown member(s) in {args.members!r}; pick from {', '.join(MODERN)}")

    import torch

    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    tokens = min(args.modernbert_tokens, 48) if args.quick else args.modernbert_tokens
    folders = {k: build(MODERN[k], args.workdir, args.quick) for k in keys}
    started, load_before = datetime.datetime.now().astimezone(), load_average()
    rows, notes, gains = [], [], []
    for k in keys:
        start = time.perf_counter()
        r, n = run_member(k, folders[k], args.quick, tokens)
        gc.collect()
        rows, notes = rows + r, notes + n
        if not args.no_fast_gain:
            gains += fast_gain(k, folders[k], args.quick, tokens)
            gc.collect()
        print(f"{MODERN[k].model}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    cost = [] if args.no_fast_gain else [
        "", "What the fast path gives them (ratio = the fast path's median / the padded reference path's):", "",
        table(gains)]
    text = "\n".join([
        f"{HEADING}{' (--quick: small models, too few repetitions to trust)' if args.quick else ''}", "",
        f"- started {started:%Y-%m-%d %H:%M %Z}; load average (1, 5, 15 min) before {load_before}, "
        f"after {load_average()}",
        f"- machine: {machine(threads)}",
        "- models: random weights, " + ("--quick's small sizes" if args.quick else "the real models' configurations"
                                        + (" (ESM-1b's layer at ESM-2 35M's sizes)" if "esm1b" in keys else ""))
        + ", tokenizers of their kind (bench/family_modern.py); bertfn on its fast path (the texts end to end: "
        "their layer on bertfn.Segments)",
        f"- command: python bench/family_modern.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        *(f"- {note}" for note in notes),
        "", three_sides(rows), *cost, "",
        "Times are per call, median [min-max]; ratios of the medians: lower is better for bertfn. Every side fp32, "
        "the same threads, alternating call by call in one process; the pipelines' batches sorted by length.",
    ])
    print(text)
    write_section(args.out, HEADING, text)


if __name__ == "__main__":
    main()
