"""mkdocs hook (mkdocs.yml): the live explorer page, built at docs time with bertfn's own Python API.

After the site is built, AntiBERTy (a real pretrained BERT masked LM whose weights ship in the
``antiberty`` package) traces one antibody chain with a masked residue, and the explorer's
self-contained page is written to ``site/explorer/antiberty.html``; docs/explorer.md shows it in an
iframe. The weights are found as tests/conftest.py finds them (the package located, not imported: .ci/run
installs it without its dependencies). Without them the build fails: the page would be empty.
"""

from __future__ import annotations

import time
import warnings
from importlib.util import find_spec
from pathlib import Path

from mkdocs.exceptions import PluginError

# A heavy-chain fragment with one residue masked: the text of the explorer's figure (docs/explorer.png)
CHAIN = ("E V Q L V E S G G G L V Q P G G S L R L S C A A S G F T F S S Y A M S W V R Q A P G K G L E W V S "
         "[MASK] I S G S G G S T Y Y A D S V K G")
PAGE = Path("explorer") / "antiberty.html"


def antiberty_folder() -> Path:
    """AntiBERTy's ``trained_models`` folder (``AntiBERTy_md_smooth/`` and ``vocab.txt``)."""
    spec = find_spec("antiberty")
    if spec is None:
        raise PluginError("the explorer page needs AntiBERTy's weights: pip install --no-deps antiberty==0.1.3")
    return Path(spec.origin).parent / "trained_models"


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
