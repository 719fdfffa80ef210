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

BAD = "\udcff"
"""A line that is not UTF-8 (the byte 0xff, written with ``errors="surrogateescape"``): every task's error line (an empty
one is embedded, as sentence-transformers embeds it)."""
TEXTS = ["the cat sat on the mat .", "paris is the capital of france .", BAD, "i like you"]


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
    lines = [f"{TEXTS[i % len(TEXTS)]} {i}" if i % len(TEXTS) != 2 else BAD for i in range(CHUNK + 50)]  # BAD: errors
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")
    out = tmp_path / "out.jsonl"
    options = ["--model", str(tiny_folder), "--format", "npy", "parquet", "--flush-every", "0.05"]
    # Fed CHUNK + 20 lines on stdin and then nothing, the run writes its first chunk and waits: stopped there.
    run = subprocess.Popen([sys.executable, "-c", CHILD, "embed", "--input", "-", "--output", str(out), *options],
                           stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    run.stdin.write(("\n".join(lines[:CHUNK + 20]) + "\n").encode("utf-8", "surrogateescape"))
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
    assert main(["embed", "--input", str(src), "--output", str(out), "--resume", *options]) == 2  # the BAD lines
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
    assert a["text"].dropna().tolist() == [t for t in lines if t != BAD] and a["text"].isna().sum() == lines.count(BAD)  # a line that is not UTF-8 has no text
    assert a["error"].isna().tolist() == b["error"].isna().tolist()
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
    src.write_bytes(b"\xff\n\xff\nthe cat sat\n\xff\n")  # lines that are not UTF-8: error lines
    summary = run_file(src, tmp_path / "a.jsonl", tiny_folder, task="embed", formats=("npy",), progress=False)
    array = np.load(tmp_path / "a.npy")
    assert summary.errors == 3 and array.shape == (4, 48)
    assert np.isnan(array[[0, 1, 3]]).all() and not np.isnan(array[2]).any()
    src.write_bytes(b"\xff\n\xff\n")
    run_file(src, tmp_path / "b.jsonl", tiny_folder, task="embed", formats=("npy",), progress=False)
    assert np.load(tmp_path / "b.npy").shape == (2, 0)


def test_output_named_npy_or_parquet_writes_that_format(tiny_folder, tmp_path, capsys):
    """--output v.npy writes the (N, H) float32 array there and the JSON Lines, the run's log, beside it as v.jsonl
    (its record v.jsonl.run.json): the array equals --output w.jsonl --format npy's; --format npy on top writes it
    once, --format parquet adds v.parquet; the log is never overwritten and a resume continues it."""
    pd = pytest.importorskip("pandas", reason="parquet is read back with pandas (the test extra has it)")
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8", errors="surrogateescape")
    embed = ["embed", "--input", str(src), "--model", str(tiny_folder)]
    assert main([*embed, "--output", str(tmp_path / "w.jsonl"), "--format", "npy"]) == 2  # line 3 is not UTF-8
    expected = np.load(tmp_path / "w.npy")
    capsys.readouterr()
    for name, formats in (("v", []), ("n", ["--format", "npy"]), ("t", ["--format", "parquet"])):
        assert main([*embed, "--output", str(tmp_path / f"{name}.npy"), *formats]) == 2
        beside = f", {tmp_path / 't.parquet'}" if name == "t" else ""
        assert capsys.readouterr().err.endswith(f"-> {tmp_path / name}.npy{beside} (run log {tmp_path / name}.jsonl)\n")
        array = np.load(tmp_path / f"{name}.npy")
        assert array.dtype == np.float32 and array.shape == (4, 48) and np.isnan(array[2]).all()
        np.testing.assert_allclose(array, expected, atol=1e-6, rtol=0)  # NaN rows alike
        log = (tmp_path / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["line"] for line in log] == [1, 2, 3, 4]
        assert (tmp_path / f"{name}.jsonl.run.json").is_file()
    table = pd.read_parquet(tmp_path / "t.parquet")
    assert table["line"].tolist() == [1, 2, 3, 4] and np.array_equal(np.float32(table["result"][0]), array[0])
    assert sorted(p.name for p in tmp_path.glob("t.*")) == ["t.jsonl", "t.jsonl.run.json", "t.npy", "t.parquet"]

    before = (tmp_path / "v.npy").read_bytes()
    assert main([*embed, "--output", str(tmp_path / "v.npy")]) == 2  # the log is there: never overwritten
    assert (f"bertfn: error: {tmp_path / 'v.jsonl'} (the run log of {tmp_path / 'v.npy'}) already exists; pass "
            f"--resume to continue the run that wrote it, or delete it and {tmp_path / 'v.npy'} to start again, or name "
            "another output") in capsys.readouterr().err
    assert main([*embed, "--output", str(tmp_path / "v.parquet")]) == 2  # the same log: the files there are named
    assert (f"(the run log of {tmp_path / 'v.parquet'}) already exists; pass --resume to continue the run that wrote "
            f"it, or delete it and {tmp_path / 'v.npy'} to start again") in capsys.readouterr().err
    assert not (tmp_path / "v.parquet").exists()
    assert main([*embed, "--output", str(tmp_path / "v.npy"), "--resume"]) == 2  # the kept error line
    assert "0 texts (resumed after line 4)" in capsys.readouterr().err
    assert (tmp_path / "v.npy").read_bytes() == before

    foreign = tmp_path / "f.npy"  # an array no run wrote: neither overwritten nor "resumed"
    np.save(foreign, np.ones((2, 3), np.float32))
    for resume in ([], ["--resume"]):
        assert main([*embed, "--output", str(foreign), *resume]) == 2
        assert (f"{foreign} already exists, and its run log {tmp_path / 'f.jsonl'} does not (or is empty): it is not "
                f"the output of a run to continue; delete {foreign} to start again") in capsys.readouterr().err
    assert np.load(foreign).shape == (2, 3) and not (tmp_path / "f.jsonl").exists()


def test_output_named_npy_is_refused_where_results_are_not_vectors(tiny_folder, tmp_path, capsys):
    """fill-mask's --output a.npy is refused before the model loads (a missing model would say so otherwise),
    naming what to write instead; --output a.parquet writes Parquet, its log beside it. An output whose log would be
    the input is refused. From Python the same, spelled as Python spells it."""
    pd = pytest.importorskip("pandas", reason="parquet is read back with pandas (the test extra has it)")
    from bertfn import InputError
    from bertfn.corpus import run_file

    src = tmp_path / "in.txt"
    src.write_text("the [MASK] sat .\ni [MASK] you\n", encoding="utf-8")
    fill = ["fill-mask", "--input", str(src), "--top-k", "2"]
    assert main([*fill, "--output", str(tmp_path / "a.npy"), "--model", str(tmp_path / "no-such-model")]) == 2
    a = tmp_path / "a"
    assert capsys.readouterr().err == (
        f"bertfn: error: --output {a}.npy asks for an .npy array of one vector per line, which only embed gives; for "
        f"these results name a Parquet output (--output {a}.parquet) or JSON Lines (--output {a}.jsonl, with --format "
        "parquet for Parquet beside it)\n")
    assert list(tmp_path.iterdir()) == [src]
    assert main([*fill, "--output", str(tmp_path / "a.parquet"), "--model", str(tiny_folder)]) == 0
    table = pd.read_parquet(tmp_path / "a.parquet")
    log = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()]
    assert table["line"].tolist() == [1, 2] and [json.loads(r) for r in table["result"]] == [r["result"] for r in log]

    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"text": "the cat"}\n', encoding="utf-8")
    assert main(["embed", "--input", str(jsonl), "--field", "text", "--output", str(tmp_path / "in.npy"),
                 "--model", str(tiny_folder)]) == 2
    assert f"the output {jsonl} (the run log of {tmp_path / 'in.npy'}) is the input file" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"target .*b\.npy asks for an \.npy array .* with formats=\('parquet',\)"):
        run_file(src, tmp_path / "b.npy", tiny_folder, progress=False)
    summary = run_file(src, tmp_path / "e.parquet", tiny_folder, task="embed", formats=("npy",), progress=False)
    assert summary.output == f"{tmp_path / 'e.parquet'}, {tmp_path / 'e.npy'} (run log {tmp_path / 'e.jsonl'})"
    assert np.load(tmp_path / "e.npy").shape == (2, 48) and len(pd.read_parquet(tmp_path / "e.parquet")) == 2


def test_output_named_as_a_format_not_written_or_in_no_folder_is_refused_before_the_model_loads(tmp_path, capsys):
    """``--output out.csv`` wrote JSON Lines under a CSV's name, and an output in a missing folder failed after the
    model loaded with "unexpected FileNotFoundError ... a bug in bertfn": both are refused first (a missing model
    would say so otherwise), naming what to write instead; nothing is written. From Python, as Python spells it."""
    from bertfn import InputError
    from bertfn.corpus import run_file

    src = tmp_path / "in.txt"
    src.write_text("the cat sat\n", encoding="utf-8")
    nowhere = ["--model", str(tmp_path / "no-such-model")]
    assert main(["embed", "--input", str(src), "--output", str(tmp_path / "v.csv"), *nowhere]) == 2
    v = tmp_path / "v"
    assert capsys.readouterr().err == (
        f"bertfn: error: --output {v}.csv names CSV, which bertfn does not write; name {v}.npy (an array of the "
        f"vectors), {v}.parquet (a table pandas reads, a row per line) or {v}.jsonl (JSON Lines, a line per line)\n")
    assert main(["classify", "--input", str(src), "--output", str(tmp_path / "c.TSV"), *nowhere]) == 2
    assert "c.TSV names a tab-separated table, which bertfn does not write; name " \
           f"{tmp_path / 'c.parquet'} (a table" in capsys.readouterr().err  # no .npy: labels are no vectors
    assert main(["embed", "--input", str(src), "--output", str(tmp_path / "V.NPY"), *nowhere]) == 2  # not JSON Lines
    assert capsys.readouterr().err == (f"bertfn: error: --output {tmp_path / 'V.NPY'}: name it {tmp_path / 'V.npy'}, "
                                       "the ending in lowercase, for the npy format\n")
    missing = tmp_path / "no" / "such"
    assert main(["score", "--input", str(src), "--output", str(missing / "s.jsonl"), *nowhere]) == 2
    assert capsys.readouterr().err == (f"bertfn: error: --output {missing / 's.jsonl'}: its folder {missing} does not "
                                       f"exist; create it (mkdir -p {missing}) or name a file in a folder that does\n")
    assert list(tmp_path.iterdir()) == [src]
    with pytest.raises(InputError, match=r"^target .*v\.json names one JSON document, which bertfn does not write"):
        run_file(src, tmp_path / "v.json", tmp_path / "no-such-model", task="embed", progress=False)


def test_interrupted_run_of_an_npy_output_resumes(tiny_folder, tmp_path, capsys, monkeypatch):
    """A run of --output v.npy --format parquet stopped part-way (Ctrl-C in its sixth piece), its log then cut in
    mid-line and its array given half a row, as a kill in mid-write leaves them: --resume makes v.npy and v.parquet
    equal an uninterrupted run's."""
    pd = pytest.importorskip("pandas", reason="parquet is read back with pandas (the test extra has it)")
    import bertfn.corpus.files as files

    lines = [f"{TEXTS[i % len(TEXTS)]} {i}" if i % len(TEXTS) != 2 else BAD for i in range(12)]  # BAD: errors
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")
    argv = ["embed", "--input", str(src), "--model", str(tiny_folder), "--format", "parquet", "--flush-every", "0"]
    run_piece, calls = files.run_piece, []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return run_piece(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(files, "run_piece", stopping)  # --flush-every 0: a piece (and a flush) per text
        assert main([*argv, "--output", str(tmp_path / "v.npy")]) == 130
    assert len(np.load(tmp_path / "v.npy")) == (tmp_path / "v.jsonl").read_bytes().count(b"\n") == 5
    with open(tmp_path / "v.jsonl", "ab") as f:
        f.write(b'{"line": 6, "te')
    with open(tmp_path / "v.npy", "ab") as f:
        f.write(b"\x00" * 100)
    capsys.readouterr()
    assert main([*argv, "--output", str(tmp_path / "v.npy"), "--resume"]) == 2
    assert "7 texts (resumed after line 5), 2 with errors" in capsys.readouterr().err
    assert main([*argv, "--output", str(tmp_path / "whole.npy")]) == 2
    mine, theirs = np.load(tmp_path / "v.npy"), np.load(tmp_path / "whole.npy")
    assert mine.shape == theirs.shape == (12, 48) and np.array_equal(np.isnan(mine), np.isnan(theirs))
    np.testing.assert_allclose(mine, theirs, atol=1e-5, rtol=0)
    a, b = pd.read_parquet(tmp_path / "v.parquet"), pd.read_parquet(tmp_path / "whole.parquet")
    assert a["line"].tolist() == b["line"].tolist() == list(range(1, 13))
    assert a["text"].dropna().tolist() == [t for t in lines if t != BAD] and a["text"].isna().sum() == lines.count(BAD)
    assert (tmp_path / "v.jsonl").read_text(encoding="utf-8").count("\n") == 12


def test_file_options_with_texts_on_the_command_line_are_refused(tiny_folder, tmp_path, capsys):
    """--output (and the other file options) with texts on the command line would be ignored, the results printed:
    refused before the model loads, saying what to do; without them the texts print as before."""
    out = tmp_path / "v.npy"
    assert main(["embed", "the cat", "--output", str(out), "--model", str(tmp_path / "no-such-model")]) == 2
    assert capsys.readouterr().err == (
        "bertfn: error: --output goes with --input FILE, and texts came on the command line instead, whose results "
        "are printed on stdout: drop it (redirect stdout to keep the results: > FILE), or put the texts in a file, "
        "one a line, and pass --input FILE\n")
    assert not out.exists()
    assert main(["fill-mask", "the [MASK] sat", "--model", str(tiny_folder), "--format", "parquet", "--resume"]) == 2
    assert capsys.readouterr().err.startswith("bertfn: error: --resume, --format go with --input FILE")
    defaults = ["--output", "-", "--format", "jsonl"]  # as good as not given
    assert main(["embed", "the cat", "--model", str(tiny_folder), *defaults]) == 0
    assert len(capsys.readouterr().out.split()) == 48
