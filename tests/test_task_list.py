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
