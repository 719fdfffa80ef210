"""Ctrl-C in the ``bertfn`` command at any moment (bertfn/interrupts.py): one line on stderr, and the process ends by
SIGINT, so that a shell script's loop stops too.

Each child starts with SIGINT at its default (``preexec_fn``): a shell starts background jobs with SIGINT ignored, and
its children inherit that (the suite run as ``cmd &``), which the command honours.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bertfn.__main__
from bertfn import interrupts

REPO = Path(__file__).resolve().parents[1]


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_while_torch_imports_is_one_line_and_ends_by_sigint(tmp_path):
    """A Ctrl-C while ``import bertfn`` loads torch raised KeyboardInterrupt in torch's modules: a 30-line traceback,
    or, where a module caught it (an import that catches everything), no stop at all. A stand-in torch that presses
    Ctrl-C as it loads, and then catches everything, as such a module does: the command says one line and ends by
    SIGINT there (the shell's $? 130), for ``python -m bertfn`` as for the ``bertfn`` console script."""
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import os, signal, time\ntry:\n    os.kill(os.getpid(), signal.SIGINT)\n"
                                      "    time.sleep(10)\nexcept BaseException:\n    pass\n")
    env = dict(os.environ, PYTHONPATH=f"{fake.parent}{os.pathsep}{REPO}")
    script = "import sys; sys.argv[0] = 'bertfn'; from bertfn.__main__ import run; run()"  # as pip's script names it
    for argv in (["-m", "bertfn"], ["-c", script]):
        started = time.monotonic()
        done = subprocess.run([sys.executable, *argv, "embed", "a text"], capture_output=True, text=True, env=env,
                              preexec_fn=default_sigint, timeout=60)
        assert (done.returncode, done.stderr, done.stdout) == (-signal.SIGINT, "bertfn: error: interrupted\n", "")
        assert time.monotonic() - started < 8  # not after the stand-in's sleep


def test_only_the_command_stops_at_once_and_an_ignored_sigint_stays_ignored(monkeypatch):
    """install() (``import bertfn``'s first step) changes Ctrl-C only in the command, and there not where SIGINT is
    ignored (``bertfn ... &`` in a script); started() (the command about to run) gives KeyboardInterrupt back."""
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    before = signal.getsignal(signal.SIGINT)
    try:
        for argv, handler, after in [(["script.py"], signal.default_int_handler, signal.default_int_handler),
                                     (["/venv/bin/bertfn"], signal.default_int_handler, interrupts.stop_at_once),
                                     (["/venv/bin/bertfn"], signal.SIG_IGN, signal.SIG_IGN)]:
            monkeypatch.setattr(sys, "argv", argv)
            signal.signal(signal.SIGINT, handler)
            interrupts.install()
            assert signal.getsignal(signal.SIGINT) is after
            interrupts.started()
            assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_the_command_ends_by_sigint_after_main_said_ctrl_c(monkeypatch, capsys):
    """main() says Ctrl-C and returns 130 (for its callers in Python); the command then raises KeyboardInterrupt
    itself, which Python turns into an end by SIGINT, saying nothing more: bash stops a script (a loop over files)
    only when its command died of SIGINT, and went on to the next file after bertfn exited with 130."""
    monkeypatch.setattr(bertfn.__main__, "main", lambda: 130)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    with pytest.raises(KeyboardInterrupt) as caught:
        bertfn.__main__.run()
    assert type(caught.value) is KeyboardInterrupt  # a subclass would end the process with code 1
    assert sys.excepthook is interrupts.end_by_sigint
    sys.excepthook(KeyboardInterrupt, caught.value, None)
    assert capsys.readouterr().err == ""  # main said it
    sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)  # a Ctrl-C no one said: one line
    assert capsys.readouterr().err == "bertfn: error: interrupted\n"
    monkeypatch.setattr(bertfn.__main__, "main", lambda: 2)
    with pytest.raises(SystemExit) as stopped:
        bertfn.__main__.run()
    assert stopped.value.code == 2


@pytest.mark.parametrize("argv, orig, command", [
    (["/venv/bin/bertfn", "embed"], ["/venv/bin/python3", "/venv/bin/bertfn", "embed"], True),
    (["-m"], ["python", "-X", "dev", "-m", "bertfn", "embed"], True),
    (["-m"], ["python", "-mbertfn", "embed"], True),
    (["-m"], ["python", "-m", "pytest", "tests"], False),
    (["script.py"], ["python", "script.py", "bertfn"], False),
])
def test_started_as_command(monkeypatch, argv, orig, command):
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "orig_argv", orig)
    assert interrupts.started_as_command() is command


@pytest.mark.slow
def test_ctrl_c_stops_a_shell_loop_over_files(tiny_folder, tmp_path):
    """Ctrl-C (SIGINT to the foreground group) while a bash loop runs ``bertfn embed`` over files: the running file
    keeps what it ran (valid lines), and the loop stops there, where it went on to the next file."""
    src = tmp_path / "in.txt"
    src.write_text("".join(f"a text {i}\n" for i in range(20000)), encoding="utf-8")
    loop = (f"for i in 1 2; do {shlex.join([sys.executable, '-m', 'bertfn'])} embed --input {src} --output "
            f"{tmp_path}/out$i.jsonl --model {tiny_folder} --flush-every 0.2 --no-progress --quiet; echo \"after $i\"; done")
    run = subprocess.Popen(["bash", "-c", loop], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO)), preexec_fn=default_sigint, start_new_session=True)
    first = tmp_path / "out1.jsonl"
    deadline = time.monotonic() + 120
    while (not first.exists() or first.stat().st_size == 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(run.pid, signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert (run.returncode, out, err) == (-signal.SIGINT, "", "bertfn: error: interrupted\n")
    rows = [json.loads(line) for line in first.read_text(encoding="utf-8").splitlines()]
    assert 0 < len(rows) < 20000 and [r["line"] for r in rows] == list(range(1, len(rows) + 1))
    assert not (tmp_path / "out2.jsonl").exists()
