"""The built documentation site in a real browser (docs/development.md, "In a browser").

The site that ``mkdocs build --strict`` wrote to site/ is served by Python's http.server on this machine
and opened in Debian's Chromium through Playwright, as tests/test_explorer.py opens the explorer (its
browser fixtures are reused, so BERTFN_REQUIRE_BROWSER=1 makes a missing browser a failure). Every
page opened must log no console error and request nothing from outside this machine: the site works
offline. Without a built site the tests skip, unless BERTFN_REQUIRE_DOCS=1 (.ci/run builds it first).
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from pathlib import Path

import pytest
from test_explorer import browser, chromium  # noqa: F401  (the fixtures: Playwright on Debian's Chromium)

SITE = Path(os.environ.get("BERTFN_DOCS_SITE", Path(__file__).parent.parent / "site"))
NOTEBOOK = "notebooks/06_scoring_antibodies/"  # stored with its outputs: figures of real AntiBERTy runs
READY = "() => document.body.dataset.ready === '1'"  # the explorer's page, drawn (tests/test_explorer.py)


@pytest.fixture(scope="module")
def site_url():
    if not (SITE / "index.html").exists():
        message = f"no built site in {SITE}: run mkdocs build --strict first (pip install -e '.[docs]')"
        if os.environ.get("BERTFN_REQUIRE_DOCS"):
            pytest.fail(message)
        pytest.skip(message)
    handler = functools.partial(QuietHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 (the base class's name)
        pass


class Tab:
    """One browser tab on a page of the site, recording console errors and requests that leave the machine."""

    def __init__(self, browser, url: str):  # noqa: F811 (the fixture's value)
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.errors, self.outside = [], []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: None if r.url.startswith(("http://127.0.0.1:", "data:", "blob:"))
                     else self.outside.append(r.url))
        self.page.goto(url, wait_until="load")

    def images(self) -> list[dict]:
        """Every image of the page's content: its source (shortened) and whether it was decoded and drawn."""
        return self.page.evaluate("""() => Array.from(document.querySelectorAll('article img')).map(i => (
            {src: i.src.slice(0, 60), shown: i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().width > 0}))""")

    def close(self) -> None:
        assert self.errors == [], f"the page logged errors: {self.errors}"
        assert self.outside == [], f"the page reached out of the machine: {self.outside}"
        self.context.close()


@pytest.fixture
def open_tab(browser, site_url):  # noqa: F811
    tabs = []

    def open_(path: str) -> Tab:
        tabs.append(Tab(browser, site_url + path))
        return tabs[-1]

    yield open_
    for tab in tabs:
        tab.close()


def test_the_home_page_loads_and_its_figure_shows(open_tab):
    tab = open_tab("")
    assert tab.page.title().startswith("bertfn")
    images = tab.images()
    assert images and all(i["shown"] for i in images), images
    assert tab.page.locator("nav.md-nav--primary").get_by_text("Getting started").count() >= 1


def test_a_notebook_page_shows_its_stored_figures(open_tab):
    tab = open_tab(NOTEBOOK)
    assert "Scoring antibodies" in tab.page.locator("article").inner_text()
    images = tab.images()
    assert len(images) >= 3 and all(i["shown"] for i in images), images
    assert all(i["src"].startswith("data:image/png") for i in images)  # the outputs as stored in the notebook


def test_the_search_finds_pseudo_log_likelihood(open_tab):
    tab = open_tab("")
    page = tab.page
    page.locator("label.md-search__icon, .md-search__input").first.click()
    meta = page.locator(".md-search-result__meta")
    # the index loads in a web worker ("Initializing search" until then); the query is read on key-up, as typed
    page.wait_for_function("() => !document.querySelector('.md-search-result__meta').textContent.includes('Initializing')",
                           timeout=30_000)
    page.locator("input.md-search__input").press_sequentially("pseudo-log-likelihood")
    page.wait_for_function("() => document.querySelectorAll('.md-search-result__item a').length > 0", timeout=20_000)
    links = page.evaluate("() => Array.from(document.querySelectorAll('.md-search-result__item a')).map(a => a.href)")
    assert any("/guides/scoring/" in link for link in links), links
    assert "matching document" in meta.inner_text()


def test_the_embedded_explorer_answers_a_click(open_tab):
    tab = open_tab("explorer/")
    page = tab.page
    frame = page.frame(url=re.compile(r"explorer/antiberty\.html$"))
    assert frame is not None, [f.url for f in page.frames]
    frame.wait_for_function(READY, timeout=20_000)
    assert frame.locator("#prediction-list .word").first.inner_text() == "A"  # the fragment's masked residue
    before = frame.evaluate("bertfnExplorer.lastDraw")
    assert before["view"] == "head" and before["pinned"] is None
    page.locator("iframe#explorer").scroll_into_view_if_needed()
    box = page.locator("iframe#explorer").bounding_box()
    point = frame.evaluate("bertfnExplorer.tokenPoint('k', 5)")
    page.mouse.click(box["x"] + point["x"], box["y"] + point["y"])  # a click on key 5 pins its lines
    frame.wait_for_function("() => { const d = bertfnExplorer.lastDraw; return d.pinned && d.pinned.i === 5; }",
                            timeout=10_000)
    assert frame.evaluate("document.getElementById('token').value") == "5"
