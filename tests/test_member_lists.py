"""Every page that lists BERT's family names every member bertfn reads (issue 49: the home page and the
notebooks page still named five after ESM-2 and ModernBERT came).

The members are those of ``bertfn.model.family.FAMILIES``, so a member added later fails here until the pages
name it. A list is a block of a page (a paragraph, a list item or a table: lines with no blank line between
them, code blocks left out) that names all the members but BERT, or all but two of them at least: such a
block must name them all. Each page of ``PAGES`` must hold a complete one; every other Markdown page and
notebook is held to the first rule only, so that a list written anywhere later is kept whole too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bertfn.model.family import FAMILIES

ROOT = Path(__file__).parent.parent
PAGES = ["README.md", "docs/index.md", "docs/family.md", "docs/notebooks.md", "docs/reading-the-code.md",
         "notebooks/13_the_bert_family.ipynb"]
"""The pages that list the members: the front page, the site's home page, the family page, the notebooks'
list (its entry for notebook 13), the walk through the code, and notebook 13's introduction."""
MEMBERS = sorted(f.name for f in FAMILIES.values() if f.model_type != "bert")
FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)


def named(block: str) -> set[str]:
    """The members a block names, each as a word of its own ("RoBERTa" is not named by "XLM-RoBERTa")."""
    return {m for m in MEMBERS if re.search(rf"(?<![\w-]){re.escape(m)}(?![\w-])", block)}


def blocks(path: Path) -> list[str]:
    """A Markdown page's blocks, or those of a notebook's Markdown cells, with the code blocks left out."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        texts = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    else:
        texts = [path.read_text(encoding="utf-8")]
    return [b for text in texts for b in re.split(r"\n\s*\n", FENCE.sub("", text)) if b.strip()]


def every_page() -> list[str]:
    """README.md, the Markdown pages of docs/ (docs/notebooks is a link to notebooks/) and the notebooks."""
    docs = [p for p in (ROOT / "docs").rglob("*.md") if "notebooks" not in p.relative_to(ROOT / "docs").parts]
    pages = [ROOT / "README.md", *sorted(docs), *sorted((ROOT / "notebooks").glob("*.ipynb"))]
    return [p.relative_to(ROOT).as_posix() for p in pages]


def test_the_members_are_read_from_the_family_records():
    assert len(MEMBERS) >= 7 and {"RoBERTa", "XLM-RoBERTa", "ESM-2", "ModernBERT"} <= set(MEMBERS), MEMBERS


@pytest.mark.parametrize("page", PAGES)
def test_the_page_lists_every_member(page):
    complete = [b for b in blocks(ROOT / page) if named(b) == set(MEMBERS)]
    assert complete, f"{page} has no paragraph, list item or table that names every member of {MEMBERS}"


@pytest.mark.parametrize("page", every_page())
def test_no_list_of_the_members_leaves_one_out(page):
    for block in blocks(ROOT / page):
        found = named(block)
        if len(found) >= len(MEMBERS) - 2:
            assert found == set(MEMBERS), (f"{page}: a list of BERT's family without {sorted(set(MEMBERS) - found)}: "
                                           f"{' '.join(block.split())[:300]!r}")
