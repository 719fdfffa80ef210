// MathJax 3's configuration (docs/development.md, "These pages"). mkdocs.yml loads this file, then MathJax
// itself from assets/mathjax/ (copied there from the docs extra's django-static-mathjax by docs/hooks.py),
// so every page renders its math with no request leaving the site.
//
// What is math: the TeX that pymdownx.arithmatex leaves in Markdown pages (class "arithmatex"), the $...$
// and $$...$$ of notebooks' Markdown cells and LaTeX outputs, as Jupyter reads them (nbconvert keeps them
// as written), and the same in the tables of contents (a heading's math). Nothing else is searched, so a
// dollar in prose or code stays a dollar.
//
// A formula MathJax cannot read (a TeX error, an unknown command) is logged as a console error, which
// tests/test_docs_browser.py fails on; when a page is typeset, <body data-mathjax="N"> says how many
// formulas it holds.
window.MathJax = {
  tex: {
    inlineMath: [["$", "$"], ["\\(", "\\)"]],
    displayMath: [["$$", "$$"], ["\\[", "\\]"]],
    processEscapes: true,  // \$ is a dollar sign
    processEnvironments: true,  // \begin{align} ... without $$
    tags: "ams",  // numbered environments, as in Jupyter
  },
  startup: {
    elements: [".arithmatex", ".jp-RenderedMarkdown", ".jp-RenderedLatex", ".md-nav__link"],  // where to look
    pageReady() {
      return MathJax.startup.defaultPageReady().then(() => {
        const items = Array.from(MathJax.startup.document.math);
        for (const item of items) {
          item.root.walkTree((node) => {
            if (node.isKind("merror")) {
              console.error(`MathJax could not read ${item.math}: ${node.attributes.get("data-mjx-error") || "an error"}`);
            } else if (node.isKind("mtext") && node.attributes.get("mathcolor") === "red") {
              console.error(`MathJax could not read ${item.math}: unknown command ${node.childNodes[0].getText()}`);
            }
          });
        }
        document.body.dataset.mathjax = String(items.length);
      });
    },
  },
};
