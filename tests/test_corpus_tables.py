"""Tables in (bertfn/corpus/inputs.py): a .csv or .tsv input's header names its columns, each row is one output
line carrying its other columns, an empty cell is that line's error, a file that is no table is refused before the
model loads (naming its line), and resume continues a table run as it continues one of lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import bertfn
from bertfn.cli import main

TEXTS = {"1": "the cat sat on the [MASK] .", "3": 'a [MASK], "quoted"\nover two lines', "4": "[MASK] ."}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def classifier(tiny_folder, tmp_path_factory) -> Path:
    """A folder holding the tiny model with a random 2-label sequence classifier."""
    model = bertfn.with_head(bertfn.load(tiny_folder), "sequence-classification", labels=["no", "yes"],
                             generator=torch.Generator().manual_seed(0))
    return bertfn.save(model, tmp_path_factory.mktemp("classifier"))


# The tiny test vocabulary has no '"', 'quoted', 'said', ...: the library calls that compute the expected results say
# so about those rows (the CLI runs say it on stderr).
@pytest.mark.filterwarnings(r"ignore:text 0.*tokens are \[UNK\]:bertfn.UnknownTokensWarning")
def test_a_csv_is_a_table_of_rows_carrying_their_columns(tiny_folder, tmp_path, capsys):
    """Quoting as csv reads it (a comma, doubled quotes and a newline in one cell), a blank line is no row, the
    empty cell of row 2 is its error line, ``id`` comes back in every line, and a .tsv with --field reads alike."""
    src, out = tmp_path / "data.csv", tmp_path / "out.jsonl"
    src.write_text('\ufeffid,text\n1,the cat sat on the [MASK] .\n2,\n3,"a [MASK], ""quoted""\nover two lines"\n\n'
                   "4,[MASK] .\n", encoding="utf-8")
    argv = ["fill-mask", "--input", str(src), "--output", str(out), "--model", str(tiny_folder), "--top-k", "2"]
    assert main(argv) == 2  # the empty cell
    rows = read_jsonl(out)
    assert [(r["line"], r["id"], r["text"]) for r in rows] == [(1, "1", TEXTS["1"]), (2, "2", ""), (3, "3", TEXTS["3"]),
                                                               (4, "4", TEXTS["4"])]
    assert rows[1]["error"].startswith("line 2 (id '2') is empty") and "result" not in rows[1]
    model = bertfn.load(tiny_folder)
    for r in (rows[0], rows[2], rows[3]):
        expected = bertfn.fill_mask(r["text"], model, top_k=2)
        assert [a["token"] for a in r["result"]] == [a["token"] for a in expected]
        assert [a["score"] for a in r["result"]] == pytest.approx([a["score"] for a in expected], abs=1e-6)
    assert "bertfn: done: 4 texts, 1 with errors" in capsys.readouterr().err
    src.write_text(src.read_text(encoding="utf-8").replace("\n2,\n", "\n2,[MASK] is here\n"), encoding="utf-8")
    assert main([*argv, "--resume", "--retry-errors"]) == 0  # the fixed row run again in place
    again = read_jsonl(out)
    assert again[1]["text"] == "[MASK] is here" and "result" in again[1] and [again[i] for i in (0, 2, 3)] == [
        rows[i] for i in (0, 2, 3)]
    assert "1 text (resumed after line 4, 1 error line retried), 0 with errors" in capsys.readouterr().err

    tsv = tmp_path / "data.tsv"
    tsv.write_text("id\tsentence\tnote\n1\tthe cat sat on the [MASK] .\ta, b\n4\t[MASK] .\t\n", encoding="utf-8")
    assert main(["fill-mask", "--input", str(tsv), "--model", str(tiny_folder), "--top-k", "2", "--field", "sentence",
                 "--no-echo"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["line"], r["id"], r["note"]) for r in lines] == [(1, "1", "a, b"), (2, "4", "")]
    assert "sentence" not in lines[0] and lines[0]["result"] == rows[0]["result"]


@pytest.mark.parametrize("name, body, message", [
    ("more.csv", "id,text\n1,a [MASK] b\n2,a, [MASK] b\n",
     ("line 3 of {src} (row 2) has 3 cells, and its header names 2 columns ('id', 'text'); nothing was run: give every "
      'row one cell per column, and quote a cell that holds a comma ("a, b")')),
    ("fewer.tsv", "id\ttext\n1\n", "line 2 of {src} (row 1) has 1 cell, and its header names 2 columns"),
    ("headless.csv", "1,a [MASK] b\n",
     ("{src} has no column 'text' for the input 'text': its header (line 1) names '1', 'a [MASK] b'; nothing was run: "
      "name the column that holds the text with --field NAME, or, if the file has no header, write one as its first "
      "line")),
    ("empty.csv", "", "{src} is empty; a .csv input starts with a header line naming its columns ('id,text')"),
    ("open.csv", 'id,text\n1,a [MASK]\n2,"b [MASK]\n3,c\n',  # the row that starts at line 3 never closes its quote
     "line 3 of {src} is not .csv as Python's csv module reads it (unexpected end of data)"),
    ("twice.csv", "id,text,id\n1,a,b\n", "line 1 of {src} (its header) names the column 'id' twice"),
    ("own.csv", "line,text\n1,a\n", "line 1 of {src} (its header) names a column 'line', which the output uses"),
    ("bytes.csv", b"id,text\n1,a [MASK]\n2,\xff [MASK]\n",
     "line 3 of {src} is not valid UTF-8 (byte 2); nothing was run: convert the file to UTF-8"),
])
def test_a_file_that_is_no_table_is_refused_before_the_model_loads(tmp_path, capsys, name, body, message):
    src = tmp_path / name
    src.write_bytes(body if isinstance(body, bytes) else body.encode())
    out = tmp_path / "out.jsonl"
    assert main(["fill-mask", "--input", str(src), "--output", str(out), "--model", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertfn: error: " + message.format(src=src)) and err.count("\n") == 1, err
    assert not out.exists()


def test_the_field_names_the_column_and_a_missing_one_is_named(tmp_path, capsys):
    src = tmp_path / "data.csv"
    src.write_text("id,sentence\n1,a [MASK] b\n", encoding="utf-8")
    assert main(["fill-mask", "--input", str(src), "--model", str(tmp_path / "nowhere"), "--field", "sequence"]) == 2
    assert "has no column 'sequence' for the input 'text': its header (line 1) names 'id', 'sentence'" in \
        capsys.readouterr().err
    assert main(["classify", "--input", str(src), "--model", str(tmp_path / "nowhere"), "--field", "text=sentence",
                 "text_pair=second"]) == 2  # a renamed optional column must be there
    err = capsys.readouterr().err
    assert "has no column 'second' for the input 'text_pair'" in err and "--field INPUT=NAME" in err


# The tiny test vocabulary has no '"', 'quoted', 'said', ...: the library calls that compute the expected results say
# so about those rows (the CLI runs say it on stderr).
@pytest.mark.filterwarnings(r"ignore:text 0.*tokens are \[UNK\]:bertfn.UnknownTokensWarning")
def test_pairs_from_a_table_and_resume_after_a_kill(classifier, tmp_path, capsys):
    """classify reads text and text_pair from their columns (an empty text_pair cell: no pair); a run cut in the middle
    of a line resumes to what the uninterrupted run wrote, and a changed row is refused."""
    src, out = tmp_path / "pairs.csv", tmp_path / "out.jsonl"
    rows = [("p1", "The capital of France is Paris.", "Paris is a city."), ("p2", "Rome.", ""),
            ("p3", "a, b and c", 'he said "yes"'), ("p4", "last one", "its pair")]
    src.write_text("id,premise,text_pair\n" + "".join(f'{i},"{a}","{b.replace(chr(34), 2 * chr(34))}"\n'
                                                      for i, a, b in rows), encoding="utf-8")
    argv = ["classify", "--input", str(src), "--output", str(out), "--model", str(classifier), "--field",
            "text=premise", "--no-progress"]
    assert main(argv) == 0
    complete = out.read_bytes()
    got = read_jsonl(out)
    model = bertfn.load(classifier)
    assert [(g["line"], g["id"], g["premise"], g["text_pair"]) for g in got] == [(n, *r) for n, r in enumerate(rows, 1)]
    for g, (_, text, pair) in zip(got, rows):
        expected = bertfn.classify([{"text": text, "text_pair": pair} if pair else text], model)[0]
        assert g["result"] == {"label": expected["label"], "score": pytest.approx(expected["score"], abs=1e-6)}
    record = json.loads((tmp_path / "out.jsonl.run.json").read_text(encoding="utf-8"))
    assert record["field"] == {"text": "premise", "text_pair": "text_pair"} and record["input"]["lines"] == 4

    out.write_bytes(b"".join(complete.splitlines(keepends=True)[:2]) + b'{"line": 3, "id": "p3", "pre')  # killed
    assert main([*argv, "--resume"]) == 0
    assert out.read_bytes() == complete and "2 texts (resumed after line 2)" in capsys.readouterr().err
    src.write_text(src.read_text(encoding="utf-8").replace("Rome.", "Milan."), encoding="utf-8")
    assert main([*argv, "--resume"]) == 2
    assert f"line 2 of {src} is not the input that line 2 of {out} was written for" in capsys.readouterr().err


@pytest.mark.filterwarnings(r"ignore:.*tokens are \[UNK\]")
def test_the_progress_bar_counts_rows_not_lines(tiny_folder, tmp_path, capsys):
    """The bar's total is the table's rows: not its header, a blank line or the second line of a quoted cell (it
    stopped at 3/5 on this table, and at 95% on a table of 20 rows)."""
    src = tmp_path / "probes.csv"
    src.write_text("id,text\n" + "".join(f'{i},"{t.replace(chr(34), 2 * chr(34))}"\n' for i, t in TEXTS.items()) + "\n",
                   encoding="utf-8")
    summary = bertfn.corpus.run_file(src, tmp_path / "out.jsonl", tiny_folder, top_k=1, progress=True)
    err = capsys.readouterr().err
    assert summary.texts == 3 and "3/3 [" in err and "/5" not in err and "/6" not in err
