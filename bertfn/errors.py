"""bertfn's own exceptions.

Every error bertfn raises on purpose is a :class:`BertfnError`. Its message says three things:
what was expected, what came instead, and what to do about it. The CLI turns each subclass into
a one-line message and its own exit code (``exit_code``), never a traceback.

    BertfnError
    ├── InputError        bad text, ids, masks or arguments passed to a function   (exit 2)
    ├── ConfigError       config.json missing, unreadable or impossible            (exit 3)
    ├── CheckpointError   weights missing, extra, mis-shaped, corrupt or unsafe     (exit 4)
    └── ModelLoadError    a model could not be found (hub id, folder, no network)   (exit 5)
"""

from __future__ import annotations


class BertfnError(Exception):
    """Base class of every error bertfn raises on purpose."""

    exit_code = 1


class InputError(BertfnError, ValueError):
    """The caller passed something bertfn cannot work with (text, ids, masks, options)."""

    exit_code = 2


class ConfigError(BertfnError, ValueError):
    """A model config is missing, unreadable, or describes an impossible model."""

    exit_code = 3


class CheckpointError(BertfnError):
    """Checkpoint weights are missing, unexpected, mis-shaped, corrupt, or unsafe to load."""

    exit_code = 4


class ModelLoadError(BertfnError):
    """A model could not be located: unknown hub id, missing folder, or offline without a cache."""

    exit_code = 5
