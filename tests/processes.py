"""Helpers for the subprocesses the suite starts."""

from __future__ import annotations

import ctypes
import signal
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGKILL when the test process dies (Linux).

    Replicas run in their own process groups so tests can kill -9 them; without
    this, a test run that is itself killed (a timeout, Ctrl-C twice) would leave
    them running against the database.
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux: nothing to do
        pass


def tied_to_this_process() -> Callable[[], None] | None:
    """``preexec_fn`` for a replica: :func:`die_with_parent`, when called on the main thread.

    The kernel sends the signal when the *thread* that started the child ends,
    so a child started by a helper thread (a supervisor restarting replicas)
    must not use it.
    """
    return die_with_parent if threading.current_thread() is threading.main_thread() else None
