"""An idle planner sleeps until the next schedule comes within the lookahead.

With nothing due, ``planner_claim`` returns the earliest ``next_fire_at`` of an
active schedule and the runner sleeps until it enters the lookahead (at least
``PLANNER_INTERVAL``, at most ``PLANNER_IDLE_WAIT``), but only while its listener is
connected: a change to a schedule notifies the planner and wakes it at once.
"""

from __future__ import annotations

import threading
from datetime import timedelta

from django_pgsched.engine.notifications import Listener
from django_pgsched.engine.planner import Planner, PlanResult
from django_pgsched.engine.runner import PLANNER_IDLE_WAIT, Runner
from django_pgsched.models import Schedule, db_now


def test_a_pass_with_nothing_due_says_when_the_next_schedule_falls_due(make_schedule):
    now = db_now().replace(microsecond=0)
    make_schedule(name="later", next_fire_at=now + timedelta(minutes=10))
    make_schedule(name="latest", next_fire_at=now + timedelta(hours=1))
    make_schedule(name="paused", next_fire_at=now + timedelta(minutes=2), status="paused")
    result = Planner().run_once()
    assert result.schedules == 0
    assert result.next_due == now + timedelta(minutes=10)  # the active one, not the paused


def test_next_due_is_unknown_when_something_was_due_or_nothing_is_active(make_schedule):
    assert Planner().run_once().next_due is None  # no schedule at all
    make_schedule(name="now")  # every second, due at once
    result = Planner().run_once()
    assert result.schedules == 1 and result.next_due is None
    Schedule.objects.update(status="paused")
    assert Planner().run_once().next_due is None


def runner_listening(connected: bool) -> Runner:
    runner = Runner(loops=["planner"], listen=False)
    runner.listener = Listener({}, stop=threading.Event())
    if connected:
        runner.listener.connected.set()
    return runner


def test_the_planner_sleeps_until_the_next_schedule_enters_the_lookahead(db, settings):
    runner = runner_listening(connected=True)
    lookahead = runner.settings.PLANNER_LOOKAHEAD
    now = db_now()
    interval = runner.settings.PLANNER_INTERVAL.total_seconds()

    def wait(next_due, schedules=0):
        return runner._planner_wait(
            PlanResult(db_now=now, schedules=schedules, next_due=next_due), interval
        )

    assert wait(now + lookahead + timedelta(seconds=4)) == 4.0
    assert wait(now + lookahead + timedelta(hours=1)) == PLANNER_IDLE_WAIT
    assert wait(now + lookahead - timedelta(seconds=5)) == interval  # never below the interval
    assert wait(None) == interval  # unknown (a new schedule waits, or none is active)
    assert wait(now + timedelta(hours=1), schedules=3) == interval
    assert (
        runner_listening(connected=False)._planner_wait(
            PlanResult(db_now=now, next_due=now + timedelta(hours=1)), interval
        )
        == interval
    )  # without the listener, a change would go unnoticed: the interval
    quiet = Runner(loops=["planner"], listen=False)  # --no-listen: no listener at all
    assert (
        quiet._planner_wait(PlanResult(db_now=now, next_due=now + timedelta(hours=1)), interval)
        == interval
    )
