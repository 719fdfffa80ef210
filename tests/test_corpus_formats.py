"""Compact outputs of file runs (bertfn/corpus/formats.py): .npy and .parquet written as the run goes,
left readable by a kill, and brought level with the JSON Lines by a resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bertfn.cli import main

TEXTS = ["the cat sat on the mat .", "paris is the capital of france .", "", "i like you"]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), HF_HUB_OFFLINE="1")


CHUNK = 32
# The CLI with chunks of CHUNK lines and a parquet part at every flush (the default waits a minute), so that
# the killed run leaves several parts after a short first chunk. SIGINT gets Python's own handler back: a shell
# starts background jobs with SIGINT ignored, and its children inherit that (the suite run as `cmd &`).
CHILD = ("import signal, sys, bertfn.corpus.formats as f, bertfn.corpus.files as r; f.PART_SECONDS = 0; "
         "signal.signal(signal.SIGINT, signal.default_int_handler); "
         f"r.run_file.__kwdefaults__['chunk_size'] = {CHUNK}; from bertfn.cli import main; sys.exit(main(sys.argv[1:]))")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
def test_kill_and_resume_with_npy_and_parquet(tiny_folder, tmp_path, capsys, sig):
    """Embed a file with --format npy parquet, stop the run part-way (SIGKILL: a crash; SIGINT: Ctrl-C; SIGTERM:
    a batch system's stop), check that what it left is readable (after SIGINT or SIGTERM, every line it wrote),
    resume: the .npy and .parquet equal an uninterrupted run's, row for row."""
    pd = pytest.importorskip("pandas", reason="parquet is read back with pandas (the test extra has it)")
    lines = [f"{TEXTS[i % len(TEXTS)]} {i}" if i % len(TEXTS) != 2 else "" for i in range(CHUNK + 50)]  # "": errors
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    options = ["--model", str(tiny_folder), "--format", "npy", "parquet", "--flush-every", "0.05"]
    # Fed CHUNK + 20 lines on stdin and then nothing, the run writes its first chunk and waits: stopped there.
    run = subprocess.Popen([sys.executable, "-c", CHILD, "embed", "--input", "-", "--output", str(out), *options],
                           stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    run.stdin.write(("\n".join(lines[:CHUNK + 20]) + "\n").encode())
    run.stdin.flush()
    deadline = time.monotonic() + 120
    while (not out.exists() or out.read_bytes().count(b"\n") < CHUNK) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    run.send_signal(sig)
    _, err = run.communicate(timeout=60)
    assert run.returncode == {signal.SIGKILL: -signal.SIGKILL, signal.SIGINT: 130, signal.SIGTERM: 143}[sig], err
    if sig != signal.SIGKILL:
        assert err.decode().endswith("bertfn: error: interrupted\n" if sig == signal.SIGINT else "bertfn: error: terminated\n")
    written = out.read_bytes().count(b"\n")
    assert written == CHUNK
    left = np.load(tmp_path / "out.npy")  # a killed run's array loads: the rows of its last flush
    parts = pd.read_parquet(tmp_path / "out.parquet.parts")  # and its parquet parts so far
    assert left.dtype == np.float32 and 0 < len(left) <= written and len(parts) <= written
    if sig != signal.SIGKILL:  # a stop flushes all it ran
        assert len(left) == len(parts) == written
    assert parts["line"].tolist() == list(range(1, len(parts) + 1))
    with open(tmp_path / "out.npy", "ab") as f:  # half a row the run was writing when it died
        f.write(b"\x00" * 100)

    capsys.readouterr()
    assert main(["embed", "--input", str(src), "--output", str(out), "--resume", *options]) == 2  # the empty lines
    assert f"{len(lines) - CHUNK} texts (resumed after line {CHUNK})" in capsys.readouterr().err
    assert not (tmp_path / "out.parquet.parts").exists()

    whole = tmp_path / "whole.jsonl"
    assert main(["embed", "--input", str(src), "--output", str(whole), *options]) == 2
    mine, theirs = np.load(tmp_path / "out.npy"), np.load(tmp_path / "whole.npy")
    assert mine.shape == theirs.shape == (len(lines), 48)
    assert np.array_equal(np.isnan(mine), np.isnan(theirs)) and np.isnan(mine[2]).all()
    np.testing.assert_allclose(mine, theirs, atol=1e-5, rtol=0)  # pieces of other sizes move the last bits
    a, b = pd.read_parquet(tmp_path / "out.parquet"), pd.read_parquet(tmp_path / "whole.parquet")
    assert a["line"].tolist() == b["line"].tolist() == list(range(1, len(lines) + 1))  # nothing lost or doubled
    assert a.columns.tolist() == b.columns.tolist() == ["line", "text", "result", "error", "warning"]
    assert a["text"].tolist() == lines and a["error"].isna().tolist() == b["error"].isna().tolist()
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    for i in (0, 1, CHUNK, len(lines) - 1):  # the parquet vectors are the JSON Lines' float32 values, exactly
        assert np.array_equal(np.asarray(a["result"][i], dtype=np.float32), np.float32(rows[i]["result"]))
        assert np.array_equal(mine[i], np.float32(rows[i]["result"]))


def test_compact_formats_of_other_tasks_and_retry(tiny_folder, tmp_path, capsys):
    """Parquet holds any task's results (as JSON text); --retry-errors rewrites the compact files with the
    retried lines; a format added on --resume is filled in from the JSON Lines."""
    pd = pytest.importorskip("pandas", reason="parquet is read back with pandas (the test extra has it)")
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [{"id": 7, "text": "the [MASK] sat ."}, {"id": "b", "txt": "oops"}, {"id": 9, "text": "i [MASK] you"}]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    argv = ["fill-mask", "--input", str(src), "--output", str(out), "--model", str(tiny_folder), "--field", "text",
            "--top-k", "2"]
    assert main([*argv, "--format", "parquet"]) == 2  # line 2 has no field "text"
    table = pd.read_parquet(tmp_path / "out.parquet")
    assert table["id"].tolist() == ["7", "b", "9"]  # the input's fields as text (a number as its JSON)
    assert [json.loads(r)[0]["token_str"] for r in table["result"][[0, 2]]] == \
        [row["result"][0]["token_str"] for row in map(json.loads, out.read_text().splitlines()[::2])]
    assert table["error"][1].startswith("line 2 (id 'b') has no field 'text'")

    gap = tmp_path / "gap.jsonl"  # an empty line in JSON Lines
    gap.write_text("\n".join(json.dumps(r) for r in rows[::2]).replace("\n", "\n\n") + "\n")
    capsys.readouterr()
    assert main(["fill-mask", "--input", str(gap), "--output", str(tmp_path / "g.jsonl"), "--model", str(tiny_folder),
                 "--field", "text", "--format", "parquet"]) == 2
    assert pd.read_parquet(tmp_path / "g.parquet")["error"][1] == "line 2 is empty; write one JSON object per line"
    src.write_text("\n".join(json.dumps(r) for r in [rows[0], {"id": "b", "text": "a [MASK] b"}, rows[2]]) + "\n")
    assert main([*argv, "--format", "parquet", "--resume", "--retry-errors"]) == 0
    table = pd.read_parquet(tmp_path / "out.parquet")
    assert table["error"].isna().all() and table["id"].tolist() == ["7", "b", "9"]
    assert json.loads(table["result"][1])[0]["sequence"].startswith("a ")

    vectors = tmp_path / "v.jsonl"
    embed = ["embed", "--input", str(src), "--output", str(vectors), "--model", str(tiny_folder), "--field", "text"]
    assert main(embed) == 0
    assert not (tmp_path / "v.npy").exists()
    assert main([*embed, "--resume", "--format", "npy"]) == 0  # nothing to run: the array comes from the JSON Lines
    assert "0 texts (resumed after line 3)" in capsys.readouterr().err
    expected = np.float32([json.loads(line)["result"] for line in vectors.read_text().splitlines()])
    assert np.array_equal(np.load(tmp_path / "v.npy"), expected)


def test_tokens_per_second_counts_the_tokens_the_model_reads(tiny_folder, tmp_path):
    """The summary's tokens are those the model reads after truncation, at the model's own length: embed's
    max_seq_length from sentence_bert_config.json (as sentence-transformers cuts), not the position table."""
    import shutil

    import bertfn
    from bertfn.corpus import run_file

    folder = tmp_path / "st"
    shutil.copytree(tiny_folder, folder)
    (folder / "sentence_bert_config.json").write_text('{"max_seq_length": 16, "do_lower_case": false}')
    model = bertfn.load(folder)
    texts = [" ".join(["cat"] * 40), "the cat sat", " ".join(["mat"] * 100)]  # 42 and 102 tokens: too long
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="longer than 16 tokens"):
        summary = run_file(src, tmp_path / "a.jsonl", model, task="embed", progress=False)
    assert summary.tokens == 16 + 5 + 16  # not 42 + 5 + 64 (positions)
    with pytest.warns(UserWarning, match="longer than 30 tokens"):
        assert run_file(src, tmp_path / "b.jsonl", model, task="embed", max_length=30, progress=False).tokens == 30 + 5 + 30
    texts = ["the [MASK] sat", " ".join(["cat"] * 100) + " [MASK]"]  # fill-mask reads a window of the positions (64)
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert run_file(src, tmp_path / "c.jsonl", model, truncation=True, progress=False).tokens == 5 + 64


def test_npy_when_the_first_lines_are_errors(tiny_folder, tmp_path):
    """Rows before the first vector (error lines: the width is not known yet) become NaN rows of its width;
    a file of error lines alone gives an (N, 0) array."""
    from bertfn.corpus import run_file

    src = tmp_path / "in.txt"
    src.write_text("\n\nthe cat sat\n\n", encoding="utf-8")
    summary = run_file(src, tmp_path / "a.jsonl", tiny_folder, task="embed", formats=("npy",), progress=False)
    array = np.load(tmp_path / "a.npy")
    assert summary.errors == 3 and array.shape == (4, 48)
    assert np.isnan(array[[0, 1, 3]]).all() and not np.isnan(array[2]).any()
    src.write_text("\n\n", encoding="utf-8")
    run_file(src, tmp_path / "b.jsonl", tiny_folder, task="embed", formats=("npy",), progress=False)
    assert np.load(tmp_path / "b.npy").shape == (2, 0)
