"""README.md's examples run as pasted, as the docs' examples do (tests/test_docs.py, whose runner this reuses).

Every fenced ``python`` and ``bash`` block of the README is a test, in order; a block followed by a
``text`` block must print that text (``...`` matches anything). A Python block shares nothing with the
blocks before it (each is self-contained, as the README promises), and a shell block runs in a new shell.
Blocks titled "needs ..." (the hub, a fresh venv: the install commands, which .ci/run runs verbatim in
fresh environments) are skipped with that title as the reason. Like the docs' examples, these run where
the docs extra is installed, on AntiBERTy's real weights (.ci/run's docs step).

A user runs them in the checkout, not in a temporary folder: what the README's and the docs pages' commands
write there is ignored by git (.gitignore), so that ``git status`` stays clean after each (issue 57).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_docs import BLOCKS as DOCS_BLOCKS
from test_docs import PageState, blocks, docs_environment, run_bash, run_python  # noqa: F401 (a fixture)

README = Path(__file__).parent.parent / "README.md"
BLOCKS = blocks(README, README.parent)

WRITES = {
    "bash": (re.compile(r"(?:--output-dir|--local-dir|\s-d|mkdir(?:\s+-p)?)\s+([\w./-]+)"),
             re.compile(r"(?:--out|--output|--matrix)\s+([\w./-]+)|(?:^|\s)\d?>\s*([\w./-]+)", re.MULTILINE)),
    "python": (re.compile(r"""(?:save_pretrained\(|bertfn\.save\([^,()]+,)\s*["']([\w./-]+)["']"""),
               re.compile(r"""(?:save_html|savefig|\.save)\(\s*["']([\w./-]+)["']|Path\(\s*["']([\w./-]+)["']\)\."""
                          r"write_(?:text|bytes)")),
}
"""How a block names what it writes, per language: (folders, files). A shell block's --output-dir, --local-dir,
-d, mkdir; --out, --output, --matrix and redirections. A Python block's save_pretrained and bertfn.save (folders);
save_html, savefig, .save and Path(...).write_text (files)."""

ALSO_WRITTEN = {
    "docs/family.md": ["albert/", "distilbert/", "electra/", "esm/", "modernbert/", "roberta/", "xlm-roberta/",
                       "electra-discriminator/", "sapiens-vh/", "answers.jsonl.run.json"],
    "docs/guides/heads.md": ["sentiment/", "nli/", "reranker/", "ner/", "reader/", "swag/"],
    "docs/guides/embeddings.md": ["vectors.jsonl", "vectors.jsonl.run.json"],
    "docs/development.md": ["gpu-results/"],
}
"""What the docs' examples write under a name that WRITES cannot see: a folder named in a variable or a function's
argument, a converter's positional output, a log or run record beside an --output, a script's output folder."""


def written(code: str, lang: str) -> set[str]:
    """The paths, relative to the working folder, that a block's code writes as WRITES finds them (folders end in /).

    Args:
        code: the block's code.
        lang: ``"bash"`` or ``"python"``.
    """
    folders, files = WRITES[lang]
    found = {next(filter(None, m.groups())).rstrip("/") + "/" for m in folders.finditer(code)}
    found |= {next(filter(None, m.groups())) for m in files.finditer(code)}
    return {p for p in found if not p.startswith(("/", "$", "&"))}  # absolute, a variable's, a descriptor


def not_ignored(paths: list[str]) -> list[str]:
    """Those of ``paths`` (relative to the checkout's root) that git would list as untracked: not ignored.
    Skips the test outside a git checkout (an unpacked sdist) or without git.

    Args:
        paths: files, and folders ending in ``/``.
    """
    root = README.parent
    if not paths:
        return []
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("needs git and the checkout's .git")
    run = subprocess.run(["git", "-c", "core.excludesFile=/dev/null", "check-ignore", "--", *paths], cwd=root,
                         capture_output=True, text=True)
    assert run.returncode in (0, 1), run.stderr  # 1: none is ignored
    return sorted(set(paths) - set(run.stdout.splitlines()))


@pytest.mark.parametrize("block", BLOCKS, ids=[f"README.md:{b.line}" for b in BLOCKS])
def test_readme_example_runs(block, docs_environment, tmp_path, monkeypatch):  # noqa: F811 (the fixture)
    if block.title.startswith("needs"):
        pytest.skip(f"README.md:{block.line} {block.title}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (run_python if block.lang == "python" else run_bash)(block, PageState(tmp_path))
    left = not_ignored([p.name + "/" * p.is_dir() for p in tmp_path.iterdir()])
    assert not left, f"README.md:{block.line} writes {left}, which git does not ignore at the checkout's root"


def test_the_readme_examples_are_found_and_the_commands_are_titled():
    """Every command that installs says it needs a venv (so it is skipped here and run by .ci/run instead)."""
    runnable = [b for b in BLOCKS if not b.title.startswith("needs")]
    assert {b.lang for b in runnable} == {"python", "bash"} and sum(b.expected is not None for b in runnable) >= 3
    for b in runnable:
        assert "pip install" not in b.code, f"README.md:{b.line} installs something: title it 'needs a venv ...'"


def test_what_the_readme_and_the_docs_commands_write_is_ignored_by_git():
    """Issue 57: after the README's nbconvert line (out/) or its rec.save_html("view.html"), and any docs example,
    run from the checkout's root, ``git status`` shows nothing new; and no tracked file hides behind those rules."""
    readme = {p for b in BLOCKS for p in written(b.code, b.lang)}
    assert {"out/", "view.html"} <= readme, readme  # WRITES sees the README's two
    docs = {p for b in DOCS_BLOCKS for p in written(b.code, b.lang)} | {p for ps in ALSO_WRITTEN.values() for p in ps}
    assert not not_ignored(sorted(readme | docs)), "add them to .gitignore, each with the command that writes it"
    tracked = subprocess.run(["git", "ls-files", "--cached", "--ignored", "--exclude-standard"], cwd=README.parent,
                             capture_output=True, text=True, check=True).stdout.split()
    assert not tracked, f"tracked files that .gitignore's rules match: {tracked}"
