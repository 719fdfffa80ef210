"""A griffe extension for the API reference (mkdocs.yml): bertfn's docstrings cross-reference in Sphinx's
roles (``:func:`~bertfn.tasks.scoring.score```), which Markdown would show as they are. Each role becomes
inline code of the name it names (the last part only after ``~``, as Sphinx shows it)."""

import re

import griffe

ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):`(~?)([^`]+)`")


def _code(match: re.Match) -> str:
    short, name = match.groups()
    return f"`{name.rsplit('.', 1)[-1] if short else name}`"


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_code, obj.docstring.value)
