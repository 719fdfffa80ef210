"""Corpora (bertfn/corpus/): the iterator, files in and out with error lines, progress and resume."""

from __future__ import annotations

import bz2
import fcntl
import gzip
import io
import itertools
import json
import random
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

import bertfn
from bertfn.cli import main
from bertfn.corpus import run_file, stream
from bertfn.checkpoint.state import _malloc_trim
from bertfn.corpus.runner import CHUNK
from conftest import random_model, write_folder

GOOD = ["the cat sat on the [MASK] .", "i [MASK] you [MASK] well", "paris is the [MASK] of france .",
        "[MASK]", "when in rome , do as the [MASK] do ."]
BAD = {"no mask here": "has no [MASK]", "": "is empty"}


def corpus_lines(n: int, bad_every: int = 0) -> list[str]:
    """``n`` texts cycling through GOOD, with a bad one (no mask, or empty) every ``bad_every`` lines."""
    bad = itertools.cycle(BAD)
    return [next(bad) if bad_every and i % bad_every == bad_every - 1 else GOOD[i % len(GOOD)] for i in range(n)]


def same_answers(mine, theirs) -> None:
    """Equal tokens, strings and sequences, scores within 1e-5 (a text batched with others may run in
    a group of another size, which changes the last bits of the matrix products)."""
    assert type(mine) is type(theirs)
    if theirs is None:
        return
    if isinstance(theirs, dict):
        assert {k: v for k, v in mine.items() if k != "score"} == {k: v for k, v in theirs.items() if k != "score"}
        assert mine["score"] == pytest.approx(theirs["score"], abs=1e-5)
    else:
        assert len(mine) == len(theirs)
        for a, b in zip(mine, theirs):
            same_answers(a, b)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def model(tiny_folder):
    return bertfn.load(tiny_folder)


# --- the iterator -----------------------------------------------------------------------------------


def test_stream_equals_fill_mask(model):
    texts = corpus_lines(300)
    got = list(stream(texts, model, top_k=3, chunk_size=64))
    expected = bertfn.fill_mask(texts, model, top_k=3)
    assert len(got) == len(texts)
    for a, b in zip(got, expected):
        same_answers(a, b)


def test_stream_reads_lazily(model):
    """An endless input: the first results come after one chunk was read, not the whole input."""
    read = []

    def endless():
        for i in itertools.count():
            read.append(i)
            yield GOOD[i % len(GOOD)]

    results = stream(endless(), model, top_k=1)
    first = list(itertools.islice(results, 10))
    assert len(first) == 10 and len(read) == CHUNK
    list(itertools.islice(results, CHUNK))
    assert len(read) == 2 * CHUNK


def test_stream_errors_raise_after_the_results_before(model):
    texts = GOOD * 3 + ["no mask here"] + GOOD
    seen = []
    with pytest.raises(bertfn.InputError, match=r"^text 15 has no \[MASK\]"):
        for r in stream(texts, model, chunk_size=4):
            seen.append(r)
    assert len(seen) == 15


def test_stream_errors_return_in_place(model):
    texts = corpus_lines(200, bad_every=7)
    got = list(stream(texts, model, errors="return", top_k=2))
    expected = iter(bertfn.fill_mask([t for t in texts if t not in BAD], model, top_k=2))
    for i, (text, r) in enumerate(zip(texts, got)):
        if text in BAD:
            assert isinstance(r, bertfn.InputError) and str(r).startswith(f"text {i} {BAD[text]}")
        else:
            same_answers(r, next(expected))


def test_stream_checks_options_and_model_first(model):
    with pytest.raises(bertfn.InputError, match="top_k must be a positive integer"):
        stream(GOOD, model, errors="return", top_k=0)  # at the call, not as an error per text
    encoder_only = bertfn.Model(model.config, {k: v for k, v in model.state.items() if not k.startswith("cls.")},
                                model.tokenizer, "encoder-only")
    with pytest.raises(bertfn.MissingPartError):
        list(stream(GOOD, encoder_only))
    with pytest.raises(bertfn.InputError, match="one string"):
        stream("the [MASK] sat", model)
    with pytest.raises(bertfn.InputError, match="task must be one of"):
        stream(GOOD, model, task="translate")


def test_the_command_line_spellings_of_options_name_options_of_their_tasks():
    """What a resume's message calls an option on the command line (record.FLAGS) is said of an option the task has,
    and names flags its subcommand has (score-mutations': bertfn score's)."""
    import inspect
    import re

    from bertfn.cli import build_parser
    from bertfn.corpus.record import FLAGS
    from bertfn.corpus.runner import task_named

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for (task, option), spelled in FLAGS.items():
        assert option in inspect.signature(task_named(task).function).parameters, (task, option)
        flags = {f for a in commands[task if task_named(task).command else "score"]._actions for f in a.option_strings}
        assert set(re.findall(r"--[a-z][\w-]*", spelled)) <= flags, (task, spelled)


def test_an_option_the_task_does_not_take_is_refused_before_the_model_loads(tmp_path):
    """A misspelled option (top_n for top_k) was Python's TypeError from inside the task, after the model loaded."""
    said = r"the fill-mask task has no option 'top_n'; its options are top_k, targets, "
    with pytest.raises(bertfn.InputError, match=said):
        stream(GOOD, tmp_path / "no-such-model", top_n=3)  # no model is read: the folder does not exist
    (tmp_path / "in.txt").write_text("the [MASK] sat\n", encoding="utf-8")
    with pytest.raises(bertfn.InputError, match=said):
        run_file(tmp_path / "in.txt", tmp_path / "out.jsonl", tmp_path / "no-such-model", top_n=3, progress=False)
    with pytest.raises(bertfn.InputError, match="the answer task has no option 'context'"):  # an input, not an option
        stream([{"question": "a", "context": "b"}], tmp_path / "no-such-model", task="answer", context="b")


def test_stream_memory_stays_flat(model):
    """Python memory at its peak is the same for 5x the lines: results are not kept (tracemalloc sees
    Python objects; the tensors of a chunk are the same size whatever the file's length)."""
    def peak(n: int) -> int:
        texts = (GOOD[i % len(GOOD)] for i in range(n))
        tracemalloc.start()
        for _ in stream(texts, model, top_k=5, chunk_size=64):
            pass
        size = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return size

    peak(64)  # warm-up: caches that fill once
    small, large = peak(192), peak(960)
    held = 960 * 5 * 300  # what 960 texts' answers (5 dicts of 4 fields) would take if kept: ~1.4 MB
    assert large - small < held / 4, (small, large)


def resident_mb() -> int:
    return next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmRSS")) // 1024


@pytest.mark.slow
@pytest.mark.skipif(_malloc_trim is None, reason="resident memory is read from /proc and trimmed by glibc's malloc_trim")
def test_long_run_resident_memory_stays_flat(tmp_path):
    """The process's resident memory (not just Python's) stays flat over many chunks of texts of new
    lengths: each chunk's freed tensors are handed back to the system (corpus.release_memory).
    Without that, glibc keeps the holes they leave and this run grows by about 190 MB."""
    from conftest import random_model, write_folder

    config = bertfn.BertConfig(vocab_size=30522, hidden_size=256, intermediate_size=1024, num_hidden_layers=2,
                               num_attention_heads=4, max_position_embeddings=512)
    m = bertfn.load(write_folder(random_model(config), tmp_path / "model"))
    words = [w for w in (tmp_path / "model" / "vocab.txt").read_text().split() if w.isalpha()]
    rng = random.Random(0)

    def texts(n: int):
        for _ in range(n):
            line = [rng.choice(words) for _ in range(rng.randint(6, 120))]
            line[rng.randrange(len(line))] = "[MASK]"
            yield " ".join(line)

    after = [resident_mb() for i, _ in enumerate(stream(texts(20 * CHUNK), m)) if i % CHUNK == CHUNK - 1]
    assert after[-1] - after[3] < 60, after  # MB, from the 4th chunk to the 20th


# --- files ------------------------------------------------------------------------------------------


def test_text_file_in_jsonl_out(tiny_folder, tmp_path, capsys):
    folder = tiny_folder
    texts = corpus_lines(40, bad_every=9)
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    code = main(["fill-mask", "--input", str(src), "--output", str(out), "--model", str(folder), "--top-k", "2"])
    assert code == bertfn.InputError.exit_code  # some lines failed
    summary = capsys.readouterr().err.strip().splitlines()[-1]
    errors = sum(t in BAD for t in texts)
    assert summary.startswith(f"bertfn: done: 40 texts, {errors} with errors") and "texts/s" in summary
    rows = read_jsonl(out)
    assert [r["line"] for r in rows] == list(range(1, 41))
    for r, text in zip(rows, texts):
        assert r["text"] == text
        if text in BAD:
            assert r["error"].startswith(f"line {r['line']} {BAD[text]}") and "result" not in r
        else:
            assert "error" not in r
            same_answers(r["result"], bertfn.fill_mask(text, str(folder), top_k=2))


def test_result_is_what_json_prints(tiny_folder, tmp_path, capsys):
    folder = tiny_folder
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text(GOOD[1] + "\n", encoding="utf-8")
    assert main(["fill-mask", "--input", str(src), "--output", str(out), "--model", str(folder)]) == 0
    assert main(["fill-mask", GOOD[1], "--model", str(folder), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    same_answers(read_jsonl(out)[0]["result"], printed)


def test_jsonl_fields_carried_and_bad_lines(tiny_folder, tmp_path, capsys):
    folder = tiny_folder
    lines = [json.dumps({"id": "a", "sentence": GOOD[0], "meta": {"k": [1, 2]}}),
             "{not json",
             json.dumps(["a", "list"]),
             json.dumps({"id": "d"}),
             json.dumps({"id": "e", "sentence": 7}),
             json.dumps({"id": "f", "sentence": "no mask here"}),
             json.dumps({"id": "g", "sentence": GOOD[2], "error": "mine"}),
             json.dumps({"id": "h", "sentence": "é [MASK] ü"}, ensure_ascii=False)]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(("\n".join(lines) + "\n").encode() + b"\xff\xfe [MASK]\n")
    code = main(["fill-mask", "--input", str(src), "--output", str(out), "--model", str(folder), "--field", "sentence"])
    assert code == 2
    rows = read_jsonl(out)
    assert [r["line"] for r in rows] == list(range(1, 10))
    assert rows[0]["id"] == "a" and rows[0]["meta"] == {"k": [1, 2]} and "result" in rows[0]
    assert "not valid JSON" in rows[1]["error"]
    assert "not an object" in rows[2]["error"]
    assert rows[3]["id"] == "d" and rows[3]["error"].startswith("line 4 (id 'd') has no field 'sentence'")
    assert "is a JSON int, not a string" in rows[4]["error"]
    assert rows[5]["error"].startswith("line 6 (id 'f') has no [MASK]")  # a text's error names its line and id
    assert "'error', which the output uses" in rows[6]["error"]
    assert rows[7]["sentence"] == "é [MASK] ü" and "result" in rows[7]
    assert rows[7]["warning"].startswith("line 8 (id 'h'): 2 of its 2 tokens are [UNK]")  # flagged in its line
    assert all("warning" not in r for i, r in enumerate(rows) if i != 7)
    assert "not valid UTF-8" in rows[8]["error"]
    err = capsys.readouterr().err
    assert "bertfn: done: 9 texts, 7 with errors, 1 with warnings" in err
    assert "bertfn: warning: line 8 (id 'h'): 2 of its 2 tokens are [UNK]" in err


def test_every_line_good_exits_0_and_jsonl_needs_field(tiny_folder, tmp_path, capsys):
    folder = tiny_folder
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": GOOD[0]}) + "\n", encoding="utf-8")
    assert main(["fill-mask", "--input", str(src), "--model", str(folder)]) == 2
    assert "--field NAME" in capsys.readouterr().err
    shouted = src.rename(tmp_path / "IN.JSONL")  # not read as lines of text (each a JSON object's source)
    assert main(["fill-mask", "--input", str(shouted), "--model", str(folder)]) == 2
    assert "IN.JSONL looks like JSON Lines; name the field that holds the text with --field NAME" in capsys.readouterr().err
    src = shouted.rename(src)
    assert main(["fill-mask", "--input", str(src), "--model", str(folder), "--field", "text", "--top-k", "1"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["line"] == 1 and len(row["result"]) == 1


def test_json_lines_on_a_pipe_need_field(tiny_folder, tmp_path, capsys, monkeypatch):
    """JSON Lines piped in (``cat x.jsonl | bertfn embed --input -``, or ``--input <(...)``) have no name to say so: a
    first line that is a JSON object is refused without --field, before the model loads, as a .jsonl file is (each
    line's JSON source was embedded as its text); lines that only start with a brace, or JSON that is no object, run
    as text."""
    rows = "".join(json.dumps({"id": f"f{i}", "sentence": t}) + "\n" for i, t in enumerate(GOOD[:2]))
    argv = ["fill-mask", "--model", str(tiny_folder / "missing"), "--top-k", "1"]  # refused before any model loads
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(rows.encode())))
    assert main([*argv, "--input", "-"]) == 2
    assert capsys.readouterr().err == ("bertfn: error: standard input looks like JSON Lines (its first line is a JSON "
                                       "object); nothing was run: name the field that holds the text with --field NAME\n")
    fifo = tmp_path / "in.fifo"  # what the shell names <(cat x.jsonl): /dev/fd/63
    os.mkfifo(fifo)
    threading.Thread(target=fifo.write_text, args=(rows,), daemon=True).start()
    assert main([*argv, "--input", str(fifo)]) == 2
    assert f"{fifo} looks like JSON Lines (its first line is a JSON object)" in capsys.readouterr().err
    argv[2] = str(tiny_folder)
    for text in ['{the [MASK] sat', '["the [MASK] sat"]']:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode() + b"\n")))
        assert main([*argv, "--input", "-", "--no-progress"]) == 0
        assert json.loads(capsys.readouterr().out)["text"] == text
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(rows.encode())))
    assert main([*argv, "--input", "-", "--field", "sentence", "--no-progress"]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == ["f0", "f1"]


def test_command_line_mistakes(tiny_folder, tmp_path, capsys):
    folder = tiny_folder
    src = tmp_path / "in.txt"
    src.write_text(GOOD[0] + "\n", encoding="utf-8")
    utf16 = tmp_path / "utf16.txt"
    utf16.write_text(GOOD[0] + "\n", encoding="utf-16")
    packed = [tmp_path / "in.txt.gz", tmp_path / "in.txt.bz2"]
    packed[0].write_bytes(gzip.compress(src.read_bytes()))
    packed[1].write_bytes(bz2.compress(src.read_bytes()))
    for argv, message in [
        (["fill-mask"], "at least one text"),
        (["fill-mask", GOOD[0], "--input", str(src)], "not both"),
        (["fill-mask", "--input", str(tmp_path / "missing.txt")], "does not exist"),
        (["fill-mask", "--input", str(src), "--resume"], "needs an output file"),
        (["fill-mask", "--input", str(src), "--top-k", "0"], "--top-k must be a positive integer"),
        (["fill-mask", "--input", str(tmp_path)], f"input file {tmp_path} is a folder; pass --input with a text"),
        (["fill-mask", "--input", str(src), "--output", str(tmp_path)],
         f"--output {tmp_path} is a folder; name a file in it ({tmp_path / 'results.jsonl'})"),
        (["embed", "--input", str(folder / "model.safetensors")], "model.safetensors is not text: its first line "
         "holds a NUL byte (at byte "),  # not a run of thousands of "not valid UTF-8" lines
        (["embed", "--input", str(utf16)], "utf16.txt is not text: its first line holds a NUL byte (at byte 3), as a "
         "binary file or a UTF-16 one does; nothing was run: pass a text, JSON Lines, .csv or .tsv file in UTF-8"),
        (["embed", "--input", str(packed[0])], f"{packed[0]} is gzip-compressed; nothing was run: decompress it as it "
         f"is read, with --input <(zcat {packed[0]}) or zcat {packed[0]} | bertfn ... --input -"),
        (["embed", "--input", str(packed[1])], f"{packed[1]} is bzip2-compressed; nothing was run: decompress it as it "
         f"is read, with --input <(bzcat {packed[1]})"),
    ]:
        assert main([*argv, "--model", str(folder)]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (argv, err)
    assert sorted(tmp_path.iterdir()) == sorted([src, utf16, *packed])  # nothing written


def test_flush_every_infinite_flushes_per_chunk_and_a_negative_one_is_refused_by_its_flag(tiny_folder, tmp_path,
                                                                                        capsys):
    """--flush-every inf (never by time) runs the whole file, in pieces up to a chunk; a negative one is refused naming
    the option as typed (not flush_every)."""
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(GOOD) + "\n", encoding="utf-8")
    argv = ["fill-mask", "--input", str(src), "--model", str(tiny_folder), "--top-k", "1", "--no-progress"]
    assert main([*argv, "--output", str(out), "--flush-every", "inf"]) == 0, capsys.readouterr().err
    assert [r["text"] for r in read_jsonl(out)] == GOOD
    capsys.readouterr()
    assert main([*argv, "--flush-every", "-1"]) == 2
    assert capsys.readouterr().err.startswith("bertfn: error: --flush-every must be a number of seconds >= 0, got -1")


def test_an_output_that_cannot_be_opened_is_one_line(tiny_folder, tmp_path, capsys):
    """An --output the system refuses to open (another user's, a read-only file system; here a name in Linux's /proc) is a
    bertfn error naming it, not an unexpected OSError said to be a bug."""
    src = tmp_path / "in.txt"
    src.write_text(GOOD[0] + "\n", encoding="utf-8")
    assert main(["fill-mask", "--input", str(src), "--output", "/proc/no-such.jsonl", "--model", str(tiny_folder)]) == 2
    assert capsys.readouterr().err.startswith("bertfn: error: cannot write --output /proc/no-such.jsonl (")


def test_an_input_this_user_may_not_read_is_one_line(tiny_folder, tmp_path):
    """An --input file (lines or a table) without read permission for this user is a bertfn error naming it, before the
    model loads, not an unexpected PermissionError said to be a bug (root runs it without its override of
    permissions, as test_real_checkpoints does)."""
    from test_real_checkpoints import DRIVER, _without_permission_override

    inputs = [tmp_path / "in.txt", tmp_path / "in.csv"]
    for path in inputs:
        path.write_text("text\nthe [MASK] sat\n", encoding="utf-8")
        path.chmod(0)
    argvs = [["fill-mask", "--input", str(path), "--model", str(tiny_folder)] for path in inputs]
    done = subprocess.run([sys.executable, "-c", DRIVER, str(inputs[0]), json.dumps(argvs)], capture_output=True,
                          text=True, timeout=300, env=_env(),
                          preexec_fn=_without_permission_override if os.geteuid() == 0 else None)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert results != ["permissions do not apply to this user"], "no user here that file permissions bind"
    for path, (code, err) in zip(inputs, results, strict=True):
        assert code == 2 and err == (f"bertfn: error: cannot read {path}: permission denied for this user; give this "
                                     "user read access to it (chmod a+r), or copy it to a folder you own\n")


def test_a_full_disk_is_said_as_such_not_as_a_bug(tiny_folder, tmp_path, capsys):
    """A write the disk refuses (no space left: Linux's /dev/full) is one line saying so and what to do, not an
    'unexpected OSError ... a bug in bertfn'."""
    src = tmp_path / "in.txt"
    src.write_text(GOOD[0] + "\n", encoding="utf-8")
    assert main(["fill-mask", "--input", str(src), "--output", "/dev/full", "--model", str(tiny_folder)]) == 1
    assert capsys.readouterr().err == ("bertfn: error: No space left on device; make room, then run it again (a file "
                                       "run with --resume: it continues after the last complete line)\n")


def test_stdin_to_stdout(tiny_folder):
    folder = tiny_folder
    done = subprocess.run([sys.executable, "-m", "bertfn", "fill-mask", "--input", "-", "--model", str(folder),
                           "--top-k", "1"], input="\n".join(GOOD[:3]) + "\n", capture_output=True, text=True,
                          timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["text"] for r in rows] == GOOD[:3]
    assert done.stderr.startswith("bertfn: done: 3 texts, 0 with errors") and "\r" not in done.stderr  # no bar


def test_pipes_and_devices_are_read_and_written_as_they_go(tiny_folder, tmp_path, capsys):
    """--input <(cmd) and --output >(gzip > out.gz) name pipes (the shell's /dev/fd/63): read once (the bar counts no
    lines of a pipe) and written as they go, with no record beside them; --output /dev/null leaves no
    /dev/null.run.json; --resume on a pipe is refused in one line."""
    src, out = tmp_path / "in.fifo", tmp_path / "out.fifo"
    os.mkfifo(src)
    os.mkfifo(out)
    got = []
    threads = [threading.Thread(target=src.write_text, args=("\n".join(GOOD) + "\n",), daemon=True),
               threading.Thread(target=lambda: got.append(out.read_text()), daemon=True)]
    for t in threads:
        t.start()
    argv = ["fill-mask", "--model", str(tiny_folder), "--top-k", "1"]
    try:
        code = main([*argv, "--input", str(src), "--output", str(out), "--progress"])
    finally:  # a run that never opened the pipes leaves no thread waiting on them
        for fifo, flags in ((src, os.O_RDONLY), (out, os.O_WRONLY)):
            try:
                os.close(os.open(fifo, flags | os.O_NONBLOCK))
            except OSError:
                pass
        for t in threads:
            t.join(timeout=60)
    err = capsys.readouterr().err
    assert code == 0, err
    assert [json.loads(line)["text"] for line in got[0].splitlines()] == GOOD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.fifo", "out.fifo"]  # no record, no lock file
    lines = tmp_path / "in.txt"
    lines.write_text(GOOD[0] + "\n", encoding="utf-8")
    assert main([*argv, "--input", str(lines), "--output", os.devnull]) == 0
    assert not Path(os.devnull + ".run.json").exists()
    assert main([*argv, "--input", str(lines), "--output", os.devnull, "--resume"]) == 2
    assert capsys.readouterr().err.endswith(f"--resume needs an output file to continue, not the pipe or device "
                                            f"{os.devnull}\n")


def test_progress_bar(tiny_folder, tmp_path):
    folder = tiny_folder
    src = tmp_path / "in.txt"
    src.write_text("\n".join(corpus_lines(300)) + "\n", encoding="utf-8")
    argv = [sys.executable, "-m", "bertfn", "fill-mask", "--input", str(src), "--output", str(tmp_path / "o.jsonl"),
            "--model", str(folder), "--top-k", "1", "--progress"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    assert "300/300" in done.stderr and "text/s" in done.stderr and "tokens/s, 0 errors" in done.stderr
    assert done.stderr.rstrip().splitlines()[-1].startswith("bertfn: done: 300 texts")


# --- resume -----------------------------------------------------------------------------------------


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), HF_HUB_OFFLINE="1")


@pytest.mark.slow
def test_resume_after_a_killed_run(tiny_folder, tmp_path):
    """Kill a run part-way (SIGKILL, as a crash or an out-of-memory kill would), cut its last line in
    half as a kill in mid-write would, resume: the output equals an uninterrupted run's, line for line."""
    folder = tiny_folder
    texts = corpus_lines(700, bad_every=50)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    options = ["--model", str(folder), "--top-k", "2"]

    killed = tmp_path / "killed.jsonl"
    # The first run reads stdin, fed 600 lines and then nothing: it writes two chunks (512 lines) and
    # waits for the rest of its third chunk, where it is killed.
    run = subprocess.Popen([sys.executable, "-m", "bertfn", "fill-mask", "--input", "-", "--output", str(killed),
                            *options], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_env())
    run.stdin.write(("\n".join(texts[:600]) + "\n").encode())
    run.stdin.flush()
    deadline = time.monotonic() + 120
    while (not killed.exists() or killed.read_bytes().count(b"\n") < 2 * CHUNK) and time.monotonic() < deadline:
        time.sleep(0.2)
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert killed.read_bytes().count(b"\n") == 2 * CHUNK
    with open(killed, "ab") as f:  # a line the run was writing when it died
        f.write(b'{"line": 513, "text": "the ca')

    resumed = subprocess.run([sys.executable, "-m", "bertfn", "fill-mask", "--input", str(src), "--output",
                              str(killed), "--resume", *options], capture_output=True, text=True, timeout=120,
                             env=_env())
    assert resumed.returncode == 2, resumed.stderr  # the bad lines
    assert f"{700 - 2 * CHUNK} texts (resumed after line {2 * CHUNK})" in resumed.stderr

    whole = tmp_path / "whole.jsonl"
    assert main(["fill-mask", "--input", str(src), "--output", str(whole), *options]) == 2
    mine, theirs = read_jsonl(killed), read_jsonl(whole)
    assert [r["line"] for r in mine] == list(range(1, 701))
    for a, b in zip(mine, theirs):
        assert a.keys() == b.keys() and a["text"] == b["text"] and a.get("error") == b.get("error")
        same_answers(a.get("result"), b.get("result"))


def test_resume_refuses_what_it_cannot_continue(tiny_folder, tmp_path, capsys):
    folder = tiny_folder
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(GOOD) + "\n", encoding="utf-8")
    argv = ["fill-mask", "--input", str(src), "--output", str(out), "--model", str(folder), "--top-k", "1"]
    assert main(argv) == 0
    complete = out.read_bytes()
    record = json.loads((tmp_path / "out.jsonl.run.json").read_text(encoding="utf-8"))
    assert record["task"] == "fill-mask" and record["options"]["top_k"] == 1 and record["field"] is None
    assert record["model"]["weights"].startswith("blake2b:") and record["input"]["lines"] == 5
    assert main(argv) == 2 and "already exists; pass --resume" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0  # nothing left to do
    assert out.read_bytes() == complete and "0 texts (resumed after line 5)" in capsys.readouterr().err

    # the input changed: at its last line, and at a line in the middle (each written line is checked)
    other = tmp_path / "other.txt"
    for changed in (GOOD[:4] + ["a [MASK] b"], GOOD[:2] + ["a [MASK] b"] + GOOD[3:]):
        other.write_text("\n".join(changed) + "\n", encoding="utf-8")
        assert main(["fill-mask", "--input", str(other), *argv[3:], "--resume"]) == 2
        line = 1 + changed.index("a [MASK] b")
        assert f"line {line} of {other} is not the input that line {line}" in capsys.readouterr().err
    short = tmp_path / "short.txt"
    short.write_text(GOOD[0] + "\n", encoding="utf-8")
    assert main(["fill-mask", "--input", str(short), *argv[3:], "--resume"]) == 2
    assert "has 1 lines but" in capsys.readouterr().err

    # another option, task, model or field: refused, naming the difference, the output untouched
    assert main([*argv[:-1], "3", "--resume"]) == 2
    assert "was written with option --top-k 1, and this run has 3" in capsys.readouterr().err
    assert main([*argv, "--targets", "cat", "--resume"]) == 2  # an option left at its default then
    assert "was written with option --targets its default, and this run has ['cat']" in capsys.readouterr().err
    assert main(["score", *argv[1:-2], "--resume"]) == 2
    assert "was written with task 'fill-mask', and this run has 'score'" in capsys.readouterr().err
    assert main([*argv, "--cased", "--resume"]) == 2  # the casing: two flags, each without a value
    assert "was written with neither --cased nor --lowercase, and this run has --cased;" in capsys.readouterr().err
    with pytest.raises(bertfn.InputError, match=r"was written with lowercase=None, and this run has lowercase=True;"):
        run_file(src, out, folder, top_k=1, lowercase=True, resume=True, progress=False)
    assert main([*argv, "--truncation", "--resume"]) == 2  # a flag without a value: given or not, not "True"
    assert "was written with --truncation left out, and this run has --truncation;" in capsys.readouterr().err
    assert main([*argv, "--no-echo", "--resume"]) == 2
    assert "was written with --no-echo left out, and this run has --no-echo;" in capsys.readouterr().err
    with pytest.raises(bertfn.InputError, match=r"was written with echo=True, and this run has echo=False;"):
        run_file(src, out, folder, top_k=1, echo=False, resume=True, progress=False)
    # from Python, the options the command line gave at their defaults (beam_width=5, ...) left out: the same run
    assert run_file(src, out, folder, top_k=1, resume=True, progress=False).resumed_after == 5
    assert main([*argv, "--dtype", "bfloat16", "--resume"]) == 2
    assert "dtype 'torch.float32', and this run has 'torch.bfloat16'" in capsys.readouterr().err
    other_model = write_folder(random_model(bertfn.load(folder).config, seed=1), tmp_path / "other_model")
    assert main([*argv[:5], "--model", str(other_model), *argv[7:], "--resume"]) == 2
    assert "the weights of model" in capsys.readouterr().err
    assert out.read_bytes() == complete

    (tmp_path / "out.jsonl.run.json").unlink()
    assert main([*argv, "--resume"]) == 2 and "has no run record beside it" in capsys.readouterr().err
    (tmp_path / "out.jsonl.run.json").write_text(json.dumps(record), encoding="utf-8")
    out.write_text("some notes of mine\n", encoding="utf-8")
    assert main([*argv, "--resume"]) == 2 and "is not an output line of bertfn" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "some notes of mine\n"  # left as it was
    out.write_bytes(complete.splitlines(keepends=True)[0] + complete.splitlines(keepends=True)[2])
    assert main([*argv, "--resume"]) == 2 and "not one output line per input line" in capsys.readouterr().err


def test_resume_checks_the_input_fingerprint_when_the_text_is_not_echoed(tiny_folder, tmp_path, capsys):
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(GOOD) + "\n", encoding="utf-8")
    argv = ["fill-mask", "--input", str(src), "--output", str(out), "--model", str(tiny_folder), "--top-k", "1",
            "--no-echo"]
    assert main(argv) == 0
    rows = read_jsonl(out)
    assert [set(r) for r in rows] == [{"line", "result"}] * 5  # the text left out
    src.write_text("\n".join(["a [MASK] b"] + GOOD[1:]) + "\n", encoding="utf-8")
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "the first 5 lines of" in err and "fingerprint differs from its run record's" in err


def test_field_is_probed_before_the_first_line(tiny_folder, tmp_path, capsys):
    """A typo in --field stops the run before any model loads or any line is written."""
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(json.dumps({"id": i, "sentence": t}) for i, t in enumerate(GOOD)) + "\n", encoding="utf-8")
    argv = ["fill-mask", "--input", str(src), "--output", str(out), "--model", str(tmp_path / "nowhere")]
    assert main([*argv, "--field", "sequence"]) == 2
    err = capsys.readouterr().err
    assert "--field sequence reads JSON Lines, but line 1 has no field 'sequence' (it has 'id', 'sentence')" in err
    assert not out.exists()
    text = tmp_path / "in.txt"
    text.write_text("\n".join(GOOD) + "\n", encoding="utf-8")
    assert main(["fill-mask", "--input", str(text), *argv[3:], "--field", "sentence"]) == 2
    assert "line 1 is not valid JSON" in capsys.readouterr().err and not out.exists()


def test_retry_errors_in_place(tiny_folder, tmp_path, capsys):
    """Lines that failed (here: empty, or no [MASK]) are run again in place once the input is fixed; the
    summary counts error lines kept from before, and the exit code says the output is not clean."""
    texts = corpus_lines(40, bad_every=7)
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    argv = ["fill-mask", "--input", str(src), "--output", str(out), "--model", str(tiny_folder), "--top-k", "2"]
    assert main(argv) == 2
    first = read_jsonl(out)
    failed = [r["line"] for r in first if "error" in r]
    assert len(failed) == 5
    assert main([*argv, "--resume"]) == 2  # nothing new to run, and the errors are still there
    assert "5 error lines from before kept (--retry-errors runs them again)" in capsys.readouterr().err
    fixed = [GOOD[0] if i + 1 in failed else t for i, t in enumerate(texts)]
    src.write_text("\n".join(fixed + ["[MASK] ."]) + "\n", encoding="utf-8")
    assert main([*argv, "--resume", "--retry-errors"]) == 0
    assert "6 texts (resumed after line 40, 5 error lines retried), 0 with errors" in capsys.readouterr().err
    rows = read_jsonl(out)
    assert [r["line"] for r in rows] == list(range(1, 42)) and all("result" in r for r in rows)
    for r in rows[:40]:
        if r["line"] not in failed:
            assert r == first[r["line"] - 1]  # kept as they were
    whole = tmp_path / "whole.jsonl"
    assert main([*argv[:4], str(whole), *argv[5:]]) == 0
    for a, b in zip(rows, read_jsonl(whole)):
        assert a["text"] == b["text"]
        same_answers(a["result"], b["result"])
    assert main([*argv, "--resume"]) == 0 and "0 texts (resumed after line 41)" in capsys.readouterr().err


@pytest.mark.slow
def test_kill_during_a_slow_scoring_run_loses_nothing(tiny_folder, tmp_path):
    """Scoring long texts with --flush-every 0.3: results reach the file while the run goes, a SIGKILL
    in the middle loses at most the piece in flight, and the resumed output equals an uninterrupted run."""
    words = "the cat sat on the mat and paris is the capital of france".split()
    rng = random.Random(0)
    texts = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(24)]  # ~0.1 s a text here
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    argv = [sys.executable, "-m", "bertfn", "score", "--input", str(src), "--output", str(out),
            "--model", str(tiny_folder), "--flush-every", "0.3"]
    run = subprocess.Popen(argv, stderr=subprocess.DEVNULL, env=_env())
    deadline = time.monotonic() + 120
    while (not out.exists() or out.read_bytes().count(b"\n") < 3) and time.monotonic() < deadline:
        time.sleep(0.02)
    run.send_signal(signal.SIGKILL)
    run.wait()
    written = out.read_bytes().count(b"\n")
    assert 3 <= written < 24  # flushed mid-chunk, long before the chunk's end
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300, env=_env())
    assert resumed.returncode == 0, resumed.stderr
    rows = read_jsonl(out)
    assert [r["line"] for r in rows] == list(range(1, 25))  # nothing lost, nothing doubled
    assert f"{24 - written} texts (resumed after line {written})" in resumed.stderr
    expected = bertfn.score(texts, bertfn.load(tiny_folder))
    for row, want in zip(rows, expected):
        assert row["text"] == want["text"] and row["result"]["pll"] == pytest.approx(want["pll"], abs=1e-4)


def test_run_file_python(model, tmp_path):
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(GOOD) + "\n", encoding="utf-8")
    summary = run_file(src, out, model, top_k=1, progress=False)
    assert (summary.texts, summary.errors, summary.resumed_after) == (5, 0, 0) and summary.tokens > 5
    assert [r["text"] for r in read_jsonl(out)] == GOOD


def test_a_second_run_on_the_same_output_is_refused(model, tmp_path):
    """Two runs given one output (a job started twice): the second is refused while the first holds the file, instead
    of writing every line a second time beside the first's (or, with --resume, cutting off the line it writes)."""
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(GOOD) + "\n", encoding="utf-8")
    with open(out, "ab") as first:  # the first run, holding its output as it goes
        fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for resume in (False, True):
            with pytest.raises(bertfn.InputError, match=f"another run is writing {out} now"):
                run_file(src, out, model, top_k=1, progress=False, resume=resume)
    assert out.read_bytes() == b""  # nothing written beside the first run's lines
    with pytest.raises(bertfn.InputError, match="top_k"):  # a run that fails before a line leaves no empty file
        run_file(src, out, model, top_k=0, progress=False)
    assert out.exists()  # the first run's file is not removed
    out.unlink()
    with pytest.raises(bertfn.InputError, match="top_k"):
        run_file(src, out, model, top_k=0, progress=False)
    assert not out.exists()
    run_file(src, out, model, top_k=1, progress=False)  # free again once the first run ended
    assert [r["line"] for r in read_jsonl(out)] == [1, 2, 3, 4, 5]


# --- other tasks, real weights ----------------------------------------------------------------------


def test_embed_file_and_stream(tiny_folder, model, tmp_path, capsys):
    """embed runs on the same mechanism: one vector per line, a refused line an error line."""
    import torch

    texts = ["the cat sat on the mat .", "\udcff", "paris is the capital of france ."]  # line 2: the byte 0xff
    src, out = tmp_path / "in.txt", tmp_path / "vectors.jsonl"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8", errors="surrogateescape")
    argv = ["embed", "--input", str(src), "--output", str(out), "--model", str(tiny_folder), "--normalize"]
    assert main(argv) == 2
    assert "bertfn: done: 3 texts, 1 with errors" in capsys.readouterr().err
    rows = read_jsonl(out)
    expected = bertfn.embed([texts[0], texts[2]], model, normalize=True)
    assert rows[1]["error"].startswith("line 2 is not valid UTF-8")  # an empty line is embedded, as encode does
    got = torch.tensor([rows[0]["result"], rows[2]["result"]])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    streamed = torch.stack(list(stream([texts[0], texts[2]], model, task="embed", normalize=True)))
    torch.testing.assert_close(streamed, expected, atol=1e-5, rtol=0)
    assert main(["embed", "--model", str(tiny_folder)]) == 2 and "at least one text" in capsys.readouterr().err


def test_antiberty_file_with_tokenizer_options(antiberty, tmp_path):
    """The real AntiBERTy masked LM, its cased vocabulary passed as in the shell (--tokenizer, --cased)."""
    from conftest import antiberty_paths

    weights, vocab = antiberty_paths()
    heavy = "E V Q L V E S G G G L V Q P G G S L R L S C A A S G F T F S S Y A M S W V R Q A P G K G L E W V S"
    texts = [heavy.replace(" S Y A M ", " [MASK] Y A M "), heavy.replace("L V Q P", "L [MASK] Q P"), heavy]
    src, out = tmp_path / "chains.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "bertfn", "fill-mask", "--input", str(src), "--output", str(out),
                           "--model", str(weights), "--tokenizer", str(vocab), "--cased", "--top-k", "3"],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert done.returncode == 2, done.stderr  # the last chain has no [MASK]
    rows = read_jsonl(out)
    expected = bertfn.fill_mask(texts[:2], antiberty, top_k=3)
    same_answers([rows[0]["result"], rows[1]["result"]], expected)
    assert rows[0]["result"][0]["token_str"].isupper()  # residues, read cased
    assert rows[2]["error"].startswith("line 3 has no [MASK]")


def test_score_file_and_mapper(tiny_folder, model, tmp_path, capsys):
    """score runs on the same mechanism: a file gives one PLL dict per line; Score maps a pandas batch."""
    pandas = pytest.importorskip("pandas")  # in the test extra, not in a plain install

    from bertfn.corpus import Score

    texts = ["the cat sat on the mat .", "", "paris is the capital of france ."]
    src, out = tmp_path / "in.txt", tmp_path / "scores.jsonl"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    argv = ["score", "--input", str(src), "--output", str(out), "--model", str(tiny_folder), "--method", "within_word_l2r"]
    assert main(argv) == 2
    assert "bertfn: done: 3 texts, 1 with errors" in capsys.readouterr().err
    rows = read_jsonl(out)
    expected = bertfn.score([texts[0], texts[2]], model, method="within_word_l2r")
    assert rows[1]["error"].startswith("line 2 ")
    assert rows[0]["text"] == texts[0] and "text" not in rows[0]["result"]  # the text once a line, not twice
    for row, want in zip([rows[0], rows[2]], expected):
        assert row["result"]["pll"] == pytest.approx(want["pll"], abs=1e-4)
        assert [t["token"] for t in row["result"]["tokens"]] == [t["token"] for t in want["tokens"]]

    batch = pandas.DataFrame({"id": [7, 8, 9], "text": texts})
    mapped = Score(model, method="within_word_l2r")(batch)
    assert list(mapped.columns) == ["id", "text", "result", "error"] and mapped["error"][1].startswith("the text ")
    assert json.loads(mapped["result"][2])["pll"] == pytest.approx(expected[1]["pll"], abs=1e-4)
    with pytest.raises(bertfn.InputError, match=r"Score takes the task's options once, with the model "
                       r"\(map_batches\(\.\.\., fn_constructor_kwargs=\{'model': \.\.\., 'method': \.\.\.\}\)\); got "
                       r"'method' with each batch \(fn_kwargs\)"):
        Score(model)(batch, method="within_word_l2r")  # map_batches(Score, fn_kwargs={"method": ...}) calls it so


def test_embed_mapper_gives_each_row_its_vector(model):
    """Embed's class gives vectors, not JSON text: a dict batch's result is an (n, D) float32 array (Ray's tensor
    column), a DataFrame's a vector per row; NaN where a row was refused (as out.npy holds it), also in a batch whose
    every row was refused (the width then the probe's)."""
    import numpy as np

    from bertfn.corpus import Embed

    texts = ["the cat sat on the mat .", None, "paris is the capital of france ."]
    mapper = Embed(model)
    mapped = mapper({"id": np.arange(3), "text": texts})
    want = bertfn.embed([texts[0], texts[2]], model).numpy()  # (2, H)
    assert mapped["result"].dtype == np.float32 and mapped["result"].shape == (3, model.config.hidden_size)
    np.testing.assert_allclose(mapped["result"][[0, 2]], want, atol=1e-6, rtol=0)
    assert np.isnan(mapped["result"][1]).all() and mapped["error"][1].startswith("the text must be a string")
    assert [e is None for e in mapped["error"]] == [True, False, True]
    refused = mapper({"text": [None, 3]})
    assert refused["result"].shape == (2, model.config.hidden_size) and np.isnan(refused["result"]).all()
    pandas = pytest.importorskip("pandas")  # in the test extra, not in a plain install
    frame = mapper(pandas.DataFrame({"text": texts}))
    np.testing.assert_allclose(np.stack(frame["result"][[0, 2]].tolist()), want, atol=1e-6, rtol=0)


# --- compact outputs, warnings ----------------------------------------------------------------------


def test_compact_outputs(tiny_folder, model, tmp_path, capsys):
    """Floats at float32 precision (shortest round trip); --format npy / parquet beside the JSON Lines;
    --no-echo and --no-detail leave the text and score's per-token detail out."""
    import numpy as np
    import torch

    pd = pytest.importorskip("pandas", reason="parquet is read back with pandas (the test extra has it)")

    texts = ["the cat sat on the mat .", "\udcff", "paris is the capital of france ."]  # line 2: the byte 0xff
    src, out = tmp_path / "in.txt", tmp_path / "vectors.jsonl"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8", errors="surrogateescape")
    argv = ["embed", "--input", str(src), "--output", str(out), "--model", str(tiny_folder), "--format", "npy", "parquet"]
    assert main(argv) == 2  # line 2 is not UTF-8
    rows = read_jsonl(out)
    vector = rows[0]["result"]
    assert all(str(np.float32(x)) == repr(x) for x in vector)  # the shortest decimal of the float32 value
    expected = bertfn.embed([texts[0], texts[2]], model).numpy()
    array = np.load(tmp_path / "vectors.npy")
    assert array.dtype == np.float32 and array.shape == (3, expected.shape[1]) and np.isnan(array[1]).all()
    assert np.array_equal(array[0], np.array(vector, dtype=np.float32))  # the JSON's float32 values, exactly
    # 1e-5: the file run embeds the texts in pieces of other sizes than one call of both, which moves the last bits
    np.testing.assert_allclose(array[[0, 2]], expected, atol=1e-5, rtol=0)
    table = pd.read_parquet(tmp_path / "vectors.parquet")
    assert table["line"].tolist() == [1, 2, 3] and table["error"][1].startswith("line 2 is not valid UTF-8")
    np.testing.assert_array_equal(np.stack(table["result"][[0, 2]]), array[[0, 2]])
    assert "vectors.npy" in capsys.readouterr().err

    scores = tmp_path / "scores.jsonl"
    assert main(["score", "--input", str(src), "--output", str(scores), "--model", str(tiny_folder),
                 "--no-echo", "--no-detail"]) == 2
    first = read_jsonl(scores)[0]
    assert set(first) == {"line", "result"} and set(first["result"]) == {"method", "pll", "num_tokens", "pseudo_perplexity"}
    assert first["result"]["pll"] == pytest.approx(bertfn.score(texts[0], model)["pll"], abs=1e-4)
    assert main(["fill-mask", "--input", str(src), "--output", str(tmp_path / "f.jsonl"), "--model", str(tiny_folder),
                 "--format", "npy"]) == 2  # fill-mask's --help offers jsonl and parquet alone
    assert "invalid choice: 'npy' (choose from 'jsonl', 'parquet')" in capsys.readouterr().err
    with pytest.raises(bertfn.InputError, match="--format npy holds one vector per line"):  # the Python call says why
        run_file(str(src), str(tmp_path / "f.jsonl"), tiny_folder, task="fill-mask", formats=("npy",))

    # Python calls take any sequence of strings
    series = pd.Series([texts[0], texts[2]])
    torch.testing.assert_close(bertfn.embed(series, model), torch.from_numpy(expected), atol=0, rtol=0)  # same call
    assert bertfn.score(tuple(series), model)[1]["pll"] == bertfn.score(np.array(series), model)[1]["pll"]
    with pytest.raises(bertfn.InputError, match="got generator: .*; pass list"):
        bertfn.embed((t for t in texts), model)


def test_warnings_name_the_line_once_per_run_and_quiet(tiny_folder, tmp_path, capsys):
    lines = [json.dumps({"id": f"s{i}", "text": t}, ensure_ascii=False)
             for i, t in enumerate(["the [MASK] sat", "é [MASK] ü", "the cat [MASK]", "ü [MASK] é é"])]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["fill-mask", "--input", str(src), "--output", str(out), "--model", str(tiny_folder), "--field", "text",
            "--top-k", "1", "--flush-every", "0"]  # a piece per text at first: each flagged line in its own call
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("bertfn: warning:") == 1 and "bertfn: warning: line 2 (id 's1'): 2 of its 2 tokens are [UNK]" in err
    assert "2 with warnings" in err
    rows = read_jsonl(out)
    assert [("warning" in r) for r in rows] == [False, True, False, True]
    assert rows[3]["warning"].startswith("line 4 (id 's3'): 3 of its 3 tokens are [UNK]")
    out.unlink()
    assert main([*argv, "--quiet"]) == 0
    assert "bertfn: warning:" not in capsys.readouterr().err


def test_a_score_line_holding_an_unknown_token_it_scores_carries_the_warning(tiny_folder, tmp_path, capsys):
    """score's own warning of an [UNK] among a text's scored tokens (a non-residue letter in a chain) reaches its
    line, where the tokenizer's rule (mostly [UNK]) flags nothing, and is said once on stderr."""
    src, out = tmp_path / "in.csv", tmp_path / "out.jsonl"
    src.write_text("id,text\na,the cat sat\nb,the é sat\nc,é the cat ü\n", encoding="utf-8")
    assert main(["score", "--input", str(src), "--output", str(out), "--model", str(tiny_folder), "--no-detail"]) == 0
    rows, err = read_jsonl(out), capsys.readouterr().err
    assert "warning" not in rows[0] and "result" in rows[1]
    assert rows[1]["warning"].startswith("line 2 (id 'b'): 1 of its 3 scored tokens read as [UNK] (e.g. 'é')")
    assert rows[2]["warning"].startswith("line 3 (id 'c'): 2 of its 4 scored tokens read as [UNK]")
    assert err.count("bertfn: warning:") == 1 and "2 with warnings" in err


def test_the_progress_bars_rate_is_the_steps_own():
    """The bar drawn at a step shows the tokens/s counted up to that step, not the step before's (its first was
    0 tokens/s, so a short run ended showing a rate far below its own)."""
    import io

    from tqdm import tqdm

    from bertfn.corpus.tally import Tally

    out = io.StringIO()
    tally = Tally(tqdm(total=2, file=out, mininterval=0))
    tally.update(1)
    tally.tokens += 500
    tally.update(1)
    last = out.getvalue().rsplit("\r", 1)[-1]
    assert "2/2" in last and " 0 tokens/s" not in last and "tokens/s, 0 errors" in last, last
