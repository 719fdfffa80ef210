"""A griffe extension for the API reference (mkdocs.yml): bertfn's docstrings cross-reference in Sphinx's
roles (``:func:`~bertfn.tasks.scoring.score```), which Markdown would show as they are. Each role becomes
inline code of the name it names (the last part only after ``~``, as Sphinx shows it), linked to that
object's entry when the reference has one: the name is resolved as Python would from the docstring's
module (``:class:`Model``` in bertfn/tasks/scoring.py is ``bertfn.checkpoint.loading.Model``, shown as
``bertfn.Model``), and the link is an optional cross-reference of mkdocs-autorefs, so a name the
reference does not show (a private helper, a module) stays plain code instead of failing the build."""

import html
import re

import griffe

ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):`(~?)([^`]+)`")


def _target(obj: griffe.Object, name: str) -> str:
    """The full path ``name`` stands for in ``obj``'s docstring (as it is when no scope knows it)."""
    if name.startswith("bertfn."):
        return name
    head, _, rest = name.partition(".")
    try:
        found = obj.resolve(head)
    except Exception:  # griffe.NameResolutionError, or an object that cannot resolve
        return name
    return f"{found}.{rest}" if rest else found


def _role(obj: griffe.Object):
    def code(match: re.Match) -> str:
        short, name = match.groups()
        shown = html.escape(name.rsplit(".", 1)[-1] if short else name)
        target = html.escape(_target(obj, name), quote=True)
        return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'

    return code


def _convert(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = ROLE.sub(_role(obj), obj.docstring.value)


class SphinxRoles(griffe.Extension):
    """Runs once the object tree is complete (``on_object``), so that every name a docstring uses resolves; a
    griffe without that event (before 1.x's) converts each object as it is made, when fewer names resolve."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        _convert(obj)

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if not hasattr(griffe.Extension, "on_object"):
            _convert(obj)
