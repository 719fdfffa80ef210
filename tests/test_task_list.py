"""The list of tasks (bertfn.tasks.TASKS, each declared by its module) and what is made of it: the corpus's callable
classes and registered tasks, the command line's subcommands and bertfn's exports, which must not drift from it."""

import importlib
import pkgutil

import bertfn
import bertfn.corpus
import bertfn.tasks
from bertfn.cli import COMMANDS
from bertfn.corpus.registry import MAPPERS, Mapper
from bertfn.corpus.runner import TASKS as REGISTERED
from bertfn.tasks import TASKS
from bertfn.tasks.task import Task

NO_TASK = {"view", "attention"}  # the subcommands that run no task


def test_every_module_that_declares_a_task_is_listed_once_with_its_own_function():
    modules = [importlib.import_module(f"bertfn.tasks.{found.name}") for found in pkgutil.iter_modules(bertfn.tasks.__path__)]
    declaring = [m for m in modules if hasattr(m, "TASK")]
    assert [m.TASK for m in declaring] == list(TASKS) and all(isinstance(t, Task) for t in TASKS)
    assert len({t.name for t in TASKS}) == len(TASKS) == 11
    assert all(m.TASK.function.__module__ == m.__name__ for m in declaring)


def test_the_corpus_registers_every_task_and_names_its_class():
    assert [REGISTERED[t.name] for t in TASKS] == list(TASKS)
    assert list(MAPPERS) == [t.name for t in TASKS]
    for t in TASKS:
        cls = getattr(bertfn.corpus, t.class_name)
        assert cls is MAPPERS[t.name] and issubclass(cls, Mapper) and cls.task == t.name and cls.__name__ == t.class_name
        assert t.class_name in bertfn.corpus.__all__
    named = {n for n in bertfn.corpus.__all__ if isinstance(getattr(bertfn.corpus, n), type)
             and issubclass(getattr(bertfn.corpus, n), Mapper) and getattr(bertfn.corpus, n) is not Mapper}
    assert named == {t.class_name for t in TASKS}


def test_the_command_line_has_a_subcommand_per_task_and_the_two_that_are_none():
    assert set(COMMANDS) == {t.name for t in TASKS if t.command} | NO_TASK
    assert [t.name for t in TASKS if not t.command] == ["score-mutations"]  # bertfn score --reference runs it
    for t in TASKS:
        if t.command:
            module = importlib.import_module(f"bertfn.cli.{t.name.replace('-', '_')}")
            assert COMMANDS[t.name] == (module.add, module.run)


def test_bertfn_exports_every_tasks_function():
    for t in TASKS:
        name = t.function.__name__
        assert name in bertfn.__all__ and getattr(bertfn, name) is t.function, name


def test_the_fast_tasks_are_those_that_pack_their_weights():
    assert {t.name for t in TASKS if not t.fast} == {"embed", "score-mutations"}


TOY_TASK = '''
from bertfn.tasks.task import Task


def shout(texts, model=None, *, batch_size=8):
    """Each text in capitals."""
    return [t.upper() for t in texts]


TASK = Task("shout", shout, probe="a")
'''

TOY_COMMAND = '''
def add(sub):
    sub.add_parser("shout").add_argument("text", nargs="+")


def run(args):
    from toytasks.shout import shout

    print(" ".join(shout(args.text)))
    return 0
'''


def test_a_new_task_is_its_module_and_the_corpus_and_the_command_line_follow(tmp_path, monkeypatch, request, tiny_folder,
                                                                              capsys):
    """A package holding one module that declares a TASK, and the subcommand module named after it: the list of tasks
    finds it, the command line runs it and the corpus streams it, nothing else written for it."""
    import sys

    import bertfn.cli
    from bertfn.cli import commands, main
    from bertfn.corpus.registry import mapper
    from bertfn.corpus.runner import stream
    from bertfn.tasks import declared

    (tmp_path / "toytasks").mkdir()
    (tmp_path / "toytasks" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "toytasks" / "shout.py").write_text(TOY_TASK, encoding="utf-8")
    (tmp_path / "commands").mkdir()
    (tmp_path / "commands" / "shout.py").write_text(TOY_COMMAND, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(bertfn.cli, "__path__", [*bertfn.cli.__path__, str(tmp_path / "commands")])

    def forget() -> None:  # the toy modules, imported below, are no module of bertfn's after the test
        for name in ("toytasks", "toytasks.shout", "bertfn.cli.shout"):
            sys.modules.pop(name, None)
        vars(bertfn.cli).pop("shout", None)

    request.addfinalizer(forget)

    import toytasks

    (toy,) = declared(toytasks.__path__, "toytasks")
    assert toy.name == "shout" and toy.class_name == "Shout" and toy.function.__module__ == "toytasks.shout"

    monkeypatch.setattr(bertfn.cli, "COMMANDS", commands((*TASKS, toy)))
    assert list(bertfn.cli.COMMANDS)[-1] == "shout"  # after the listed ones (LISTED)
    assert main(["shout", "hello", "world"]) == 0
    assert capsys.readouterr().out == "HELLO WORLD\n"

    monkeypatch.setitem(REGISTERED, "shout", toy)  # taken out again after the test
    Shout = mapper(toy)
    assert Shout.__name__ == "Shout" and issubclass(Shout, Mapper) and REGISTERED["shout"] is toy
    assert list(stream(["a", "b c"], bertfn.load(tiny_folder), task="shout", batch_size=2)) == ["A", "B C"]
    assert Shout(bertfn.load(tiny_folder))({"text": ["x"]})["result"] == ['"X"']
