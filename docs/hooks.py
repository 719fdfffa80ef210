"""mkdocs hook (mkdocs.yml): the live explorer page, math from installed files, notebook pages' tables of
contents and the 404 page (docs/development.md, "These pages").

- **The explorer.** After the site is built, AntiBERTy (a real pretrained BERT masked LM whose weights ship in
  the ``antiberty`` package, which the docs extra installs) traces one antibody chain with a masked residue,
  and the explorer's self-contained page is written to ``site/explorer/antiberty.html``; docs/explorer.md
  shows it in an iframe. Without the weights the build fails: the page would be empty.
- **Math.** MathJax 3 renders the math of every page in the browser, from the files of the
  ``django-static-mathjax`` package (MathJax 3.2's own build, no Django needed; the docs extra installs it),
  which are added to the site under ``assets/mathjax/``: nothing is fetched from elsewhere. Its
  configuration is docs/javascripts/mathjax.js. The notebook pages carry nbconvert's MathJax 2 loader with an
  empty address (``<script src="">``) and its Mermaid loader, which imports from a CDN: both are taken out.
- **Notebooks' tables of contents.** mkdocs-jupyter makes a notebook page's table of contents from a
  Markdown export with the inline code taken out, so a heading such as "Everything at once: `bertfn.trace`"
  got the anchor ``#everything-at-once`` while the page's heading has the id
  ``everything-at-once-bertfntrace``. The table of contents is made again here from the headings of the
  page as it was written, so every entry links to an id that is on the page (and strict mode checks links
  into notebooks against those ids).
- **Notebooks' links to the pages.** A notebook links a page as GitHub and Jupyter find it from notebooks/
  (``../docs/guides/interventions.md``); mkdocs-jupyter writes the link as it is, which on the site points
  nowhere. It is made the page's address here, and a link to a page that does not exist fails the build.
- **Wide tables.** Each table inside ``<div class="wide-table" markdown>`` (docs/stylesheets/extra.css lays it
  out row by row) gets its column's name on each cell, as ``data-label``, which the styles show above the cell.
- **The 404 page.** Its links are absolute, made from ``site_url``'s path (``/bertfn/``), which works where
  the site is served under that path but not from a server's root (``python -m http.server`` in site/).
  The page is rewritten with relative links under a ``<base>`` at the site's root: ``site_url``'s path,
  which a first script changes to ``/`` where the address does not start with it.
"""

from __future__ import annotations

import html
import json
import re
import time
import warnings
from html.parser import HTMLParser
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import urlsplit

from markdown.extensions.toc import nest_toc_tokens
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File
from mkdocs.structure.toc import get_toc

# A heavy-chain fragment with one residue masked: the text of the explorer's figure (docs/explorer.png)
CHAIN = ("E V Q L V E S G G G L V Q P G G S L R L S C A A S G F T F S S Y A M S W V R Q A P G K G L E W V S "
         "[MASK] I S G S G G S T Y Y A D S V K G")
PAGE = Path("explorer") / "antiberty.html"
MATHJAX = "assets/mathjax"  # where the site holds MathJax's files (mkdocs.yml's extra_javascript names it)
INSTALL = 'pip install -e ".[docs]"'

# nbconvert's templates (base/mathjax.html.j2, base/mermaid_js.html.j2), as mkdocs-jupyter's pages hold them
NBCONVERT_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
NBCONVERT_MERMAID = re.compile(r'<script type="module">(?:(?!</script>).)*?jp-Mermaid.*?<!-- End of mermaid configuration -->',
                               re.S)
HEADING = re.compile(r"h[1-6]")
PAGE_LINK = re.compile(r'href="(?![a-z][\w+.-]*:|#|/)([^"#]*\.md)(#[^"]*)?"')  # a relative link to a Markdown file
WIDE_DIV = re.compile(r'(<div class="wide-table">)(.*?)(</div>)', re.S)  # no div inside: Markdown writes none
TABLE = re.compile(r"(<table>)(.*?)(</table>)", re.S)


def antiberty_folder() -> Path:
    """AntiBERTy's ``trained_models`` folder (``AntiBERTy_md_smooth/`` and ``vocab.txt``)."""
    spec = find_spec("antiberty")
    if spec is None:
        raise PluginError(f"the explorer page needs AntiBERTy's weights (the antiberty package): {INSTALL}")
    return Path(spec.origin).parent / "trained_models"


def mathjax_folder() -> Path:
    """MathJax 3's ``es5`` folder, as the ``django-static-mathjax`` package installs it."""
    spec = find_spec("mathjax")
    folder = Path(spec.origin).parent / "static" / "mathjax" / "es5" if spec and spec.origin else None
    if folder is None or not (folder / "tex-chtml.js").is_file():
        raise PluginError(f"the pages' math needs MathJax 3's files (the django-static-mathjax package): {INSTALL}")
    return folder


def on_files(files, config):
    """MathJax into the site: ``tex-chtml.js`` (TeX in, HTML and its web fonts out) and the folders of the
    parts it loads when a page asks for them (TeX extensions, fonts, the menu, the accessibility tools and
    the speech rules they use, the SVG output the menu can switch to); not the other combined builds."""
    es5 = mathjax_folder()
    for path in sorted(es5.rglob("*")):
        rel = path.relative_to(es5).as_posix()
        if path.is_file() and ("/" in rel or rel == "tex-chtml.js"):
            files.append(File.generated(config, f"{MATHJAX}/{rel}", abs_src_path=str(path)))
    return files


class Headings(HTMLParser):
    """The h1-h6 elements with an id, in page order, as table-of-contents tokens (their text, less the ¶ link)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tokens: list[dict] = []
        self.ids: set[str] = set()
        self.open: dict | None = None  # the heading being read
        self.skip = 0  # depth inside its anchor link

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if HEADING.fullmatch(tag) and attrs.get("id") and self.open is None:
            self.open = {"level": int(tag[1]), "id": attrs["id"], "text": [], "tag": tag}
        elif self.open is not None and tag == "a" and (self.skip or "anchor-link" in (attrs.get("class") or "").split()):
            self.skip += 1

    def handle_endtag(self, tag):
        if self.open is None:
            return
        if self.skip:
            if tag == "a":
                self.skip -= 1
            return
        if tag == self.open["tag"]:
            name = " ".join("".join(self.open["text"]).split())
            self.tokens.append({"level": self.open["level"], "id": self.open["id"], "name": html.escape(name, quote=False)})
            self.open = None

    def handle_data(self, data):
        if self.open is not None and not self.skip:
            self.open["text"].append(data)


def label_wide_tables(content: str, page) -> str:
    """Each body cell of each table in ``<div class="wide-table" markdown>`` with its column's name as ``data-label``
    (one table, or several with what comes between them: speed.md's copy of bench/RESULTS.md)."""
    def label(m: re.Match) -> str:
        head, _, body = m.group(2).partition("</thead>")
        names = [html.unescape(re.sub(r"<[^>]+>", "", th)).strip() for th in re.findall(r"<th[^>]*>(.*?)</th>", head, re.S)]

        def row(r: re.Match) -> str:
            cells = iter(names)

            def cell(_: re.Match) -> str:
                name = next(cells, "")
                return f'<td data-label="{html.escape(name)}"' if name else "<td"
            return re.sub(r"<td(?=[\s>])", cell, r.group(0))
        return m.group(1) + head + "</thead>" + re.sub(r"<tr>.*?</tr>", row, body, flags=re.S) + m.group(3)

    def labelled(m: re.Match) -> str:
        inside, tables = TABLE.subn(label, m.group(2))
        if not tables:
            raise PluginError(f'{page.file.src_uri}: a <div class="wide-table" markdown> holds no table (a blank line '
                              "must come before a table and after it)")
        return m.group(1) + inside + m.group(3)

    return WIDE_DIV.sub(labelled, content)


def notebook_links(content: str, page, files) -> str:
    """A notebook's relative links to Markdown files, written from notebooks/ (``../docs/guides/tracing.md``), as
    the site's addresses of those pages, relative to the notebook's page."""
    notebook = Path(page.file.abs_src_path).resolve().parent  # notebooks/, which docs/notebooks links to

    def link(m: re.Match) -> str:
        target = (notebook / m.group(1)).resolve()
        found = next((f for f in files.documentation_pages() if Path(f.abs_src_path).resolve() == target), None)
        if found is None:
            raise PluginError(f"{page.file.src_uri} links to {m.group(1)}, which is no page of the site")
        return f'href="{found.url_relative_to(page.file)}{m.group(2) or ""}"'

    return PAGE_LINK.sub(link, content)


def on_page_content(content, page, config, files):
    """A Markdown page: its wide tables labelled. A notebook page: without nbconvert's loaders, its links to the
    pages made the site's, its table of contents made from its own headings."""
    if not page.file.src_uri.endswith(".ipynb"):
        return label_wide_tables(content, page)
    content = notebook_links(NBCONVERT_MERMAID.sub("", NBCONVERT_MATHJAX.sub("", content)), page, files)
    parser = Headings()
    parser.feed(content)
    page.toc = get_toc(nest_toc_tokens(parser.tokens))
    page.present_anchor_ids = parser.ids
    return content


def on_post_page(output, page, config):
    """No page loads a script from an empty address or from nbconvert's CDN: the site works offline."""
    if '<script src="">' in output or "cdnjs.cloudflare.com" in output:
        raise PluginError(f"{page.file.src_uri}: the page loads a script from an empty or outside address (docs/hooks.py)")
    return output


def on_post_template(output, template_name, config):
    """404.html: its links relative to a ``<base>`` at the site's root, however deep the missing address was:
    site_url's path, or ``/`` where the address is not under it (a server's root)."""
    if template_name != "404.html":
        return output
    prefix = urlsplit(config["site_url"] or "/").path.rstrip("/") + "/"  # "/bertfn/"
    quoted = json.dumps(prefix)
    # in the page's markup, so that the browser's first look-ahead for its files already uses it
    base = (f'<base href="{prefix}"><script>if (location.pathname.indexOf({quoted}) !== 0) '
            'document.querySelector("base").href = "/";</script>')
    # Material's settings: where the site starts (its search results' links) and its search worker's file
    settings = ('<script>(function () { var c = document.getElementById("__config"), s = JSON.parse(c.textContent);'
                f" s.base = document.baseURI; s.search = s.search.slice({len(prefix)}); c.textContent = JSON.stringify(s);"
                " })();</script>")
    scope = f"__md_scope=new URL({quoted},location)"  # where Material keeps the reader's choices (localStorage)
    end_of_settings = output.find("</script>", output.find('<script id="__config"')) + len("</script>")
    if "<head>" not in output or scope not in output or end_of_settings < len("</script>"):
        raise PluginError("404.html is not laid out as docs/hooks.py expects: it cannot make its links relative")
    output = output[:end_of_settings] + settings + output[end_of_settings:]
    output = re.sub(r'((?:href|src)=")' + re.escape(prefix), lambda m: m.group(1), output)  # every link, relative
    return output.replace(scope, "__md_scope=new URL(document.baseURI)").replace("<head>", "<head>\n" + base, 1)


def on_post_build(config, **kwargs) -> None:
    import bertfn

    start = time.perf_counter()
    folder = antiberty_folder()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no BERT part reads")  # its three extra heads
        model = bertfn.load(folder / "AntiBERTy_md_smooth", tokenizer=folder / "vocab.txt", lowercase=False)
    out = Path(config["site_dir"]) / PAGE
    out.parent.mkdir(parents=True, exist_ok=True)
    bertfn.trace(CHAIN, model).save_html(out, title="bertfn explorer: AntiBERTy on an antibody heavy chain")
    print(f"INFO    -  explorer page: {out} ({out.stat().st_size // 1024} KB, {time.perf_counter() - start:.1f} s)")
