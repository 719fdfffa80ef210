"""README.md's examples run as pasted, as the docs' examples do (tests/test_docs.py, whose runner this reuses).

Every fenced ``python`` and ``bash`` block of the README is a test, in order; a block followed by a
``text`` block must print that text (``...`` matches anything). A Python block shares nothing with the
blocks before it (each is self-contained, as the README promises), and a shell block runs in a new shell.
Blocks titled "needs ..." (the hub, a fresh venv: the install commands, which .ci/run runs verbatim in
fresh environments) are skipped with that title as the reason. Like the docs' examples, these run where
the docs extra is installed, on AntiBERTy's real weights (.ci/run's docs step).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_docs import PageState, blocks, docs_environment, run_bash, run_python  # noqa: F401 (a fixture)

README = Path(__file__).parent.parent / "README.md"
BLOCKS = blocks(README, README.parent)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"README.md:{b.line}" for b in BLOCKS])
def test_readme_example_runs(block, docs_environment, tmp_path, monkeypatch):  # noqa: F811 (the fixture)
    if block.title.startswith("needs"):
        pytest.skip(f"README.md:{block.line} {block.title}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (run_python if block.lang == "python" else run_bash)(block, PageState(tmp_path))


def test_the_readme_examples_are_found_and_the_commands_are_titled():
    """Every command that installs says it needs a venv (so it is skipped here and run by .ci/run instead)."""
    runnable = [b for b in BLOCKS if not b.title.startswith("needs")]
    assert {b.lang for b in runnable} == {"python", "bash"} and sum(b.expected is not None for b in runnable) >= 3
    for b in runnable:
        assert "pip install" not in b.code, f"README.md:{b.line} installs something: title it 'needs a venv ...'"
