"""The scheduler's fixed bounds, each in one place.

The database's CHECK constraints (see the migrations) enforce the same numbers;
``tests/unit/test_statuses.py`` checks that they agree with this module.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

#: Attempts of one run: ``max_attempts`` is 1..MAX_ATTEMPTS, attempt numbers too.
MAX_ATTEMPTS = 8
#: A schedule's ``catch_up_limit`` (and ``DEFAULT_CATCH_UP_LIMIT``) is 1..MAX_CATCH_UP_LIMIT.
MAX_CATCH_UP_LIMIT = 1000
#: A job's timeout is between these (inclusive).
MIN_TIMEOUT = timedelta(seconds=1)
MAX_TIMEOUT = timedelta(days=7)
#: A schedule's ``start_deadline`` is between these (inclusive).
MIN_START_DEADLINE = timedelta(seconds=1)
MAX_START_DEADLINE = timedelta(days=366)
#: A schedule's ``misfire_grace`` is between 0 and this.
MAX_MISFIRE_GRACE = timedelta(days=366)
#: ``pgsched_schedule.next_fire_at`` is before this (a CHECK): a schedule whose next
#: occurrence is not is broken.
LAST_FIRE_TIME = datetime(9999, 1, 1, tzinfo=UTC)
#: Runs one planner pass materialises for one schedule; the rest wait for the next pass.
MAX_RUNS_PER_SCHEDULE = 2000
#: An attempt's error text (a traceback) is cut to this many characters.
MAX_ERROR_CHARS = 8000
#: A run's note, a schedule's ``last_error`` written by the engine, and a pause reason
#: are at most this many characters (``queries.sql`` cuts its notes to the same).
MAX_NOTE_CHARS = 2000
#: Runs one backfill may create for one schedule (``limit``, ``BACKFILL_LIMIT``).
MAX_BACKFILL = 100_000
#: Occurrences one backfill examines for one schedule (those with a run and those
#: without): a wider range is refused before any timestamp is built.
MAX_BACKFILL_SCAN = 1_000_000
#: A backfill's runs are inserted this many per statement, in its one transaction.
BACKFILL_CHUNK = 5_000
