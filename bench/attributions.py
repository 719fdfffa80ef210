"""bertfn's integrated gradients against captum's, on a bert-base-shaped sequence classifier.

    python bench/attributions.py            # builds the checkpoint in bench/.work/family once
    python bench/attributions.py --quick    # 2 layers of width 32, one call each: checks the script (tests/test_bench.py)

In one process, one call of each in turn (bench.py's ``alternate``), on the same checkpoint and sentence, the
attributions of the label's logit to each token's word embedding by integrated gradients, 50 Gauss-Legendre
steps, the pad token's embedding as the baseline at every token but [CLS] and [SEP], with the completeness delta:

  * bertfn: ``bertfn.interventions.token_attributions(text, model, 1)`` at its defaults (the path's 50 points, x
    and the baseline as rows of padded batches of up to 4096 tokens, through the reference encoder);
  * captum: ``LayerIntegratedGradients(forward, model.bert.embeddings.word_embeddings).attribute(ids, baseline_ids,
    additional_forward_args=(attention_mask,), n_steps=50, method="gausslegendre", return_convergence_delta=True)``
    over transformers' ``BertForSequenceClassification`` at its defaults (SDPA attention; the 50 points in one batch,
    then x and the baseline for the delta), summed over the width, tokenization included.

Two sentences: workload.py's sentences of about 20 and 128 tokens (whole, no [MASK]). The checkpoint
(``--workdir``/family/bert-base-classifier, built on first use by family.py's ``checkpoint``) is transformers'
``BertForSequenceClassification`` with bert-base-uncased's configuration, 2 labels and random weights from
transformers' initialiser, and bench.py's WordPiece vocabulary. Before timing, the two sides' attributions must
agree within 1e-3 of the largest and their deltas within 1e-4, or the script stops.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
import types
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import Row, alternate, load_average, machine, table, write_section  # noqa: E402
from family import Member, checkpoint  # noqa: E402
from workload import batch_texts, vocabulary  # noqa: E402

HEADING = "# bertfn token attributions (bench/attributions.py)"
STEPS = 50
LABEL = 1
TOLERANCE = 1e-3
"""The two sides' attributions must agree within this fraction of the largest before anything is timed."""

BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 max_position_embeddings=512, type_vocab_size=2, pad_token_id=0, num_labels=2)
CLASSIFIER = Member("BERT classifier", "bert-base-classifier", "BertForSequenceClassification", "BertConfig", BERT_BASE)
TINY = Member("BERT classifier (tiny)", "bert-base-classifier-tiny", "BertForSequenceClassification", "BertConfig",
              dict(BERT_BASE, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64))
"""--quick's: 2 layers of width 32, bert-base's vocabulary."""


def sentence(tokens: int) -> str:
    """workload.py's sentence of ``tokens`` tokens ([CLS] and [SEP] included), whole."""
    index = {w: i for i, w in enumerate(vocabulary())}
    return batch_texts(types.SimpleNamespace(token_to_id=index.get), max_tokens=tokens, n=1, mask=False)[0]


def run(folder: Path, quick: bool) -> tuple[list[Row], list[str]]:
    """The rows (one per sentence) and the notes (the model, each sentence's agreement and deltas)."""
    import transformers
    from captum.attr import LayerIntegratedGradients

    import bertfn
    from bertfn import interventions as iv
    from bertfn.interventions.gradients import batches
    from bertfn.interventions.token_attributions import baseline_ids

    transformers.logging.set_verbosity_error()
    model = bertfn.load(folder)
    hf = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(folder)
    layer = hf.bert.embeddings.word_embeddings
    forward = lambda ids, mask: hf(input_ids=ids, attention_mask=mask).logits[:, LABEL]  # noqa: E731

    def ours(text: str):
        return iv.token_attributions(text, model, LABEL, steps=STEPS)

    def theirs(text: str):
        enc = tok([text], return_tensors="pt")
        base = baseline_ids(enc.input_ids, enc.attention_mask, model.tokenizer, None)
        attributions, delta = LayerIntegratedGradients(forward, layer).attribute(
            enc.input_ids, base, additional_forward_args=(enc.attention_mask,), n_steps=STEPS, method="gausslegendre",
            return_convergence_delta=True)
        return attributions.sum(-1)[0].detach(), delta.item()

    rows: list[Row] = []
    notes = [f"the model: BertForSequenceClassification, hidden {model.config.hidden_size}, "
             f"{model.config.num_hidden_layers} layers, {sum(p.numel() for p in hf.parameters()) / 1e6:.1f}M "
             f"parameters; captum {__import__('captum').__version__}, transformers' attention "
             f"{hf.config._attn_implementation}"]
    reps = [1, 1] if quick else [5, 3]
    for n, r in zip((20, 128), reps):
        text = sentence(n)
        a, (b, delta) = ours(text), theirs(text)
        if a.tokens != tok.convert_ids_to_tokens(tok(text).input_ids):
            raise SystemExit(f"{n} tokens: bertfn and transformers' tokenizers cut the sentence differently")
        gap = (a.attributions - b).abs().max().item() / b.abs().max().item()
        if gap > TOLERANCE or abs(a.delta - delta) > 1e-4:
            raise SystemExit(f"{n} tokens: bertfn and captum disagree, so their times are not of the same work: "
                             f"attributions {gap:.1e} of the largest apart (tolerance {TOLERANCE}), deltas {a.delta:.2e} "
                             f"and {delta:.2e}")
        t = alternate({"bertfn": lambda: ours(text), "captum": lambda: theirs(text)}, r, warm_up=not quick and n == 20)
        rows.append(Row(f"integrated gradients, {STEPS} steps, 1 sentence ({len(a.tokens)} tokens)", "s", t["bertfn"],
                        "captum LayerIntegratedGradients on transformers", t["captum"]))
        notes.append(f"{len(a.tokens)} tokens: the attributions agree within {gap:.1e} of the largest ({b.abs().max():.3g}); "
                     f"f(x) - f(baseline) {a.value - a.baseline_value:.4g}, delta bertfn {a.delta:.2e}, captum "
                     f"{delta:.2e}; bertfn's {STEPS + 2} rows in {len(batches([len(a.tokens)] * (STEPS + 2)))} "
                     f"padded batch(es), captum's {STEPS} points in one and 2 passes for the delta")
    return rows, notes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 layers of width 32, one call each: to test the script")
    parser.add_argument("--threads", type=int, default=None, help="threads for both sides (default: torch's)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="file whose attributions section is replaced")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work", help="where the built checkpoint goes")
    args = parser.parse_args(argv)

    import os

    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # both sides read the local folder alone
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    folder = checkpoint(TINY if args.quick else CLASSIFIER, args.workdir)
    started, load_before = datetime.datetime.now().astimezone(), load_average()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows, notes = run(folder, args.quick)
    print(f"attributions: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    text = "\n".join([
        f"{HEADING}{' (--quick: tiny shapes, too few repetitions to trust)' if args.quick else ''}", "",
        f"- started {started:%Y-%m-%d %H:%M %Z}; load average (1, 5, 15 min) before {load_before}, "
        f"after {load_average()}",
        f"- machine: {machine(threads)}",
        f"- command: python bench/attributions.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        *(f"- {note}" for note in notes),
        "", table(rows), "",
        "Times are per call, text to attributions and delta; ratio = bertfn's median / captum's: lower is better. "
        "No target. Both sides fp32, the same threads, alternating call by call in one process.",
    ])
    print(text)
    write_section(args.out, HEADING, text)


if __name__ == "__main__":
    main()
