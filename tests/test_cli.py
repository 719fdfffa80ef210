"""The bertfn command: a readable table, JSON shaped like the pipeline, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import bertfn
from bertfn.cli import main


def test_table(mlm_checkpoint, capsys):
    folder, _ = mlm_checkpoint
    assert main(["fill-mask", "the cat sat on the [MASK] .", "--model", str(folder), "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    expected = bertfn.fill_mask("the cat sat on the [MASK] .", str(folder), top_k=3)
    assert "rank" in out and "score" in out
    for a in expected:
        assert a["sequence"] in out and f"{a['score']:.4f}" in out


def test_json_matches_fill_mask(mlm_checkpoint, capsys):
    folder, _ = mlm_checkpoint
    text = "i [MASK] you [MASK] well"
    assert main(["fill-mask", text, "--model", str(folder), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = bertfn.fill_mask(text, str(folder))
    assert [[a["token"] for a in m] for m in printed] == [[a["token"] for a in m] for m in expected]


def test_bad_input_is_one_line_and_exit_code(mlm_checkpoint, capsys):
    folder, _ = mlm_checkpoint
    assert main(["fill-mask", "the cat sat", "--model", str(folder)]) == bertfn.InputError.exit_code
    err = capsys.readouterr().err
    assert err.startswith("bertfn: error:") and err.count("\n") == 1 and "[MASK]" in err


def test_missing_model_folder(capsys, tmp_path):
    code = main(["fill-mask", "a [MASK]", "--model", str(tmp_path / "nope")])
    assert code == bertfn.ModelLoadError.exit_code
    assert "does not exist" in capsys.readouterr().err


def test_python_dash_m_entry_point(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    done = subprocess.run([sys.executable, "-m", "bertfn", "fill-mask", "hello [MASK] !", "--model", str(folder),
                           "--top-k", "1", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 1


def test_dtype_runs_the_bf16_mode(mlm_checkpoint, capsys):
    import torch

    folder, _ = mlm_checkpoint
    text = "i [MASK] you [MASK] well"
    assert main(["fill-mask", text, "--model", str(folder), "--json", "--dtype", "bfloat16"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = bertfn.fill_mask(text, str(folder), dtype=torch.bfloat16)
    assert [[a["token"] for a in m] for m in printed] == [[a["token"] for a in m] for m in expected]
    assert main(["fill-mask", text, "--model", str(folder), "--dtype", "int8"]) == bertfn.InputError.exit_code
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.slow
def test_a_closed_pipe_stops_quietly(mlm_checkpoint):
    """``bertfn embed ... | head``: when the reader goes away, bertfn stops with the shell's code for a closed
    pipe (141) and prints nothing, not an 'unexpected BrokenPipeError'."""
    folder, _ = mlm_checkpoint
    texts = [f"sentence {i} of many" for i in range(400)]  # far more output than a pipe's buffer holds
    proc = subprocess.Popen([sys.executable, "-m", "bertfn", "embed", *texts, "--model", str(folder), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(10)  # the reader takes a little, then leaves
    proc.stdout.close()
    assert proc.wait(timeout=120) == 141
    assert proc.stderr.read() == b""
