"""The docstrings are Google style, and every parameter is documented.

The API reference (docs/reference/*.md, ``::: bertfn.name`` entries) is rendered by mkdocstrings with
``docstring_style: google`` (mkdocs.yml): an ``Args:`` section becomes the parameter table. This file
follows the same entries (and the members of the classes and modules they name, as mkdocstrings shows
them: public, defined there, with a docstring) and checks that each function's ``Args:`` names every
parameter of its signature and nothing else, and that each class documents its constructor's
parameters (``Args:``) or its fields (``Attributes:`` of a dataclass or NamedTuple). The rest of the
package, written in the same style, is held to the same rule where a docstring has sections.

It needs neither griffe nor mkdocs (the test extra has neither): the objects are imported and the
sections read by :func:`sections`, which follows Google style as griffe's parser does (a section title
alone on a line, its items one indentation step in, ``name: description`` or ``name (type): description``,
continuation lines indented further). The strict docs build catches the same mistakes in the rendered
entries (griffe warns on a parameter that is not in the signature; strict mode fails on it).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import bertfn

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference"

TITLES = ("Args", "Arguments", "Parameters", "Attributes", "Returns", "Yields", "Raises", "Warns", "Examples",
          "Example", "Note", "Notes")
ITEM = re.compile(r"(\*{0,2}\w+)(?:\s*\((.+)\))?:(?:\s+(.*))?$")


def sections(doc: str | None) -> dict[str, list[tuple[str, str]]]:
    """The Google sections of a docstring: ``{title: [(name, description), ...]}`` for the sections of
    named items (Args, Attributes, Raises, Warns), ``{title: [("", text)]}`` for the others. A title is a
    line of its own at the docstring's indentation after a blank line; an item starts one step (4
    spaces) in, and its continuation lines are indented further."""
    lines = inspect.cleandoc(doc or "").splitlines()
    found: dict[str, list[tuple[str, str]]] = {}
    i = 0
    while i < len(lines):
        title = lines[i].rstrip()
        if title.endswith(":") and title[:-1] in TITLES and (i == 0 or not lines[i - 1].strip()):
            items: list[tuple[str, str]] = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                line = lines[i]
                if line.strip() and not line.startswith("     "):  # an item's first line: 4 spaces in
                    if title[:-1] in ("Args", "Arguments", "Parameters", "Attributes", "Raises", "Warns"):
                        m = ITEM.match(line[4:])
                        items.append((m.group(1), m.group(3) or "") if m else ("?", line.strip()))
                    else:
                        items.append(("", line.strip()))
                elif line.strip() and items:
                    items[-1] = (items[-1][0], (items[-1][1] + " " + line.strip()).strip())
                i += 1
            found[title[:-1]] = items
            continue
        i += 1
    return found


def parameters(function) -> list[str]:
    """The names a docstring documents for ``function``'s parameters: ``*args`` and ``**kwargs`` with their
    stars, ``self`` and ``cls`` left out."""
    names = []
    for p in inspect.signature(function).parameters.values():
        if p.name in ("self", "cls"):
            continue
        star = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        names.append(star + p.name)
    return names


def own_fields(cls) -> list[str]:
    """The fields a dataclass or NamedTuple declares itself (not those it inherits)."""
    own = cls.__dict__.get("__annotations__", {})
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls) if f.name in own]
    return [name for name in getattr(cls, "_fields", ()) if name in own]


def problems(obj, where: str) -> list[str]:
    """What is wrong with the docstring of a function or class ``obj`` (named ``where``), if anything."""
    doc = obj.__doc__ if inspect.isclass(obj) else inspect.getdoc(obj)
    if not doc:
        return [f"{where}: no docstring"]
    found = sections(doc)
    out = [f"{where}: {title} item {text!r} is not 'name: description'"
           for title, items in found.items() for name, text in items if name == "?"]
    out += [f"{where}: {title} item {name!r} has no description"
            for title, items in found.items() for name, text in items if name and name != "?" and not text]
    documented = {name for name, _ in found.get("Args", [])}
    if inspect.isclass(obj):
        attributes = {name for name, _ in found.get("Attributes", [])}
        if dataclasses.is_dataclass(obj) or hasattr(obj, "_fields"):
            wanted, have, section = own_fields(obj), documented | attributes, "Attributes"
        elif "__init__" in obj.__dict__:
            init = obj.__dict__["__init__"]
            wanted, section = parameters(init), "Args"
            have = documented | {name for name, _ in sections(init.__doc__).get("Args", [])}
        else:
            wanted, have, section = [], documented, "Args"
        out += [f"{where}: {section} lacks {name!r}" for name in wanted if name not in have]
        if "__init__" in obj.__dict__ and not dataclasses.is_dataclass(obj):
            out += [f"{where}: Args names {name!r}, which is not a parameter"
                    for name in documented if name not in parameters(obj.__dict__["__init__"])]
        return out
    wanted = parameters(obj)
    out += [f"{where}: Args lacks {name!r}" for name in wanted if name not in documented]
    out += [f"{where}: Args names {name!r}, which is not a parameter" for name in documented if name not in wanted]
    return out


def resolve(path: str):
    """The object a ``::: path`` entry names: the longest importable module, then attributes."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        for name in parts[n:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


def entries() -> list[tuple[str, bool]]:
    """Every ``::: path`` of the reference pages, with whether its members are shown (``members: false``)."""
    found = []
    for page in sorted(REFERENCE.glob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.startswith("::: "):
                options = []
                for following in lines[i + 1:]:
                    if following.strip() and not following.startswith(" "):
                        break
                    options.append(following.strip())
                found.append((line[4:].strip(), "members: false" not in options))
    return found


def members(obj) -> list[tuple[str, object]]:
    """The members of a module or class that mkdocstrings shows under it: public (dunders allowed, not
    ``__init__``, which is merged into the class), defined there (or in ``__all__``), with a docstring;
    functions and classes only (attributes, properties and modules have no parameters)."""
    if inspect.ismodule(obj):
        names = getattr(obj, "__all__", None)
        pairs = [(n, getattr(obj, n)) for n in names] if names is not None else [
            (n, v) for n, v in vars(obj).items() if getattr(v, "__module__", None) == obj.__name__]
    else:
        pairs = [(n, v.__func__ if isinstance(v, (classmethod, staticmethod)) else v) for n, v in vars(obj).items()]
        pairs = [(n, v) for n, v in pairs if getattr(v, "__module__", None) == obj.__module__]  # not a NamedTuple's own
    shown = []
    for name, value in pairs:
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")) or name == "__init__":
            continue
        if (inspect.isfunction(value) or inspect.isclass(value)) and value.__doc__:
            shown.append((name, value))
    return shown


def documented() -> dict[str, object]:
    """Every function and class the reference shows, by the path it is shown under."""
    out: dict[str, object] = {}

    def add(path: str, obj, with_members: bool) -> None:
        if inspect.isfunction(obj) or inspect.isclass(obj):
            out[path] = obj
        if with_members and (inspect.ismodule(obj) or inspect.isclass(obj)):
            for name, value in members(obj):
                add(f"{path}.{name}", value, inspect.isclass(value))

    for path, with_members in entries():
        add(path, resolve(path), with_members)
    return out


DOCUMENTED = documented()


def test_the_reference_documents_many_functions_and_classes():
    assert len(entries()) > 50
    assert len(DOCUMENTED) > 120  # the entries and their members: a broken walk would find few
    for path in ("bertfn.fill_mask", "bertfn.Tokenizer.from_path", "bertfn.interventions.sweep",
                 "bertfn.checkpoint.names.record.normalizer", "bertfn.plots.attention_heads", "bertfn.corpus.Mapper"):
        assert path in DOCUMENTED


@pytest.mark.parametrize("path", sorted(DOCUMENTED))
def test_a_documented_object_has_an_args_section_naming_each_parameter(path):
    assert not problems(DOCUMENTED[path], path)


def test_the_checks_catch_a_missing_a_misnamed_and_an_undescribed_parameter():
    def good(text: str, model=None, *args, top_k: int = 5, **options):
        """Summary.

        Args:
            text: one text.
            model (Model | None): the model, on
                two lines.
            *args: more texts.
            top_k: answers.
            **options: the rest.

        Returns:
            Something: with a colon.
        """

    def bad(text: str, top_k: int = 5):
        """Summary.

        Args:
            text:
            topk: answers.
        """

    assert problems(good, "good") == []
    assert sections(good.__doc__)["Args"][1] == ("model", "the model, on two lines.")
    assert sorted(problems(bad, "bad")) == ["bad: Args item 'text' has no description", "bad: Args lacks 'top_k'",
                                            "bad: Args names 'topk', which is not a parameter"]


def package_functions() -> dict[str, object]:
    """Every function and class defined in bertfn's modules (private ones too), by qualified name."""
    out = {}
    for info in pkgutil.walk_packages(bertfn.__path__, "bertfn."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module.__name__:
                out[f"{module.__name__}.{name}"] = value
                if inspect.isclass(value):
                    for attr, member in vars(value).items():
                        member = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                        if inspect.isfunction(member) and attr != "__init__" and member.__module__ == module.__name__:
                            out[f"{module.__name__}.{name}.{attr}"] = member
    return out


def test_every_args_section_in_the_package_names_each_parameter():
    """The house style beyond the reference: wherever a docstring has an Args section, it is complete.
    (A helper whose docstring says all it needs in one line may go without one.)"""
    found = [p for path, obj in package_functions().items() if "Args" in sections(obj.__doc__)
             for p in problems(obj, path)]
    assert not found
