"""Why an attempt of a task ended without the task raising: the classes its ``TaskError`` names.

A task's :attr:`TaskResult.errors <django.tasks.TaskResult.errors>` has one
entry per attempt that did not succeed. When the task raised, the entry names
the exception's class; when the scheduler ended the attempt, it names one of
these (importable, so ``TaskError.exception_class`` resolves).
"""

from __future__ import annotations


class AttemptLost(Exception):
    """The attempt's lease expired: its worker stopped renewing it (crashed, frozen or cut off)."""


class AttemptTimedOut(TimeoutError):
    """The task was still running when its timeout passed."""


class RunCancelled(Exception):
    """An operator cancelled the run (the admin's cancel, ``api.cancel_runs()``)."""


class RunNotStarted(Exception):
    """The run ended without an attempt (for example it was not started by its deadline)."""
