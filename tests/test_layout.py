"""The house: bertfn's modules import each other in one direction only.

The imports are read from the source (``ast``), so one inside a function counts as much as one at
the top. The imports under ``if TYPE_CHECKING:`` (annotations, never run) are left out of the rooms'
order, but not of the cycle check: a reader following the imports meets them too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "bertfn"

ROOMS = ["interrupts", "errors", "model", "checkpoint", "fast", "tasks", "inspect", "interventions", "corpus", "__init__", "cli", "__main__"]
"""The top-level rooms from the bottom up: a module may import its own room and the rooms before it.
tasks and inspect are neighbours: neither imports the other. ``__init__`` is the package's public
face (``bertfn.fill_mask``, ...), which the command line reads its version from. ``interrupts`` imports nothing of
bertfn's: ``__init__`` imports it before anything else, so that Ctrl-C while torch loads ends the command in one line."""


def module_name(path: Path) -> str:
    parts = ("bertfn",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(name: str, typing: bool = False) -> set[str]:
    """The bertfn modules that module ``name`` imports, wherever in the file the import stands (with ``typing``,
    those under ``if TYPE_CHECKING:`` too)."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = name if is_package(name) else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if not typing and type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "bertfn"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "bertfn":
                continue
            for alias in node.names:  # "from . import plots" imports a module; "from .x import f" the module x
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source)
    return {m for m in found if m != name}


GRAPH = {name: imports_of(name) for name in MODULES}


def test_every_import_names_a_module_of_bertfn():
    unknown = {(a, b) for a, targets in GRAPH.items() for b in targets if b not in MODULES}
    assert not unknown


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each a cycle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(GRAPH) == []
    assert cycles({name: imports_of(name, typing=True) for name in MODULES}) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def room(name: str) -> str:
    return name.split(".")[1] if name != "bertfn" else "__init__"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_module_imports_only_its_own_room_and_the_rooms_below(name):
    rank = ROOMS.index(room(name))
    upward = sorted(m for m in GRAPH[name] if ROOMS.index(room(m)) > rank)
    assert not upward, f"{name} imports {upward}, which sit above it"
    if room(name) in ("tasks", "inspect"):
        neighbour = "inspect" if room(name) == "tasks" else "tasks"
        assert not any(room(m) == neighbour for m in GRAPH[name])


def test_every_room_is_listed():
    assert {room(name) for name in MODULES} <= set(ROOMS)


def test_the_top_folder_holds_at_most_twelve_entries():
    entries = [p.name for p in ROOT.iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 12, sorted(entries)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_are_short_and_say_what_they_hold(name):
    source = MODULES[name].read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 400
    if name not in ("bertfn.__main__",):
        assert ast.get_docstring(ast.parse(source)), f"{name} has no docstring"


def test_the_reference_path_picks_no_kernel():
    """Kernel choice is the fast path's: the model's functions import nothing from bertfn/fast/."""
    for name in MODULES:
        if room(name) == "model":
            assert not any(room(m) == "fast" for m in GRAPH[name])
    assert "mkldnn" not in (ROOT / "model" / "functional.py").read_text(encoding="utf-8")
