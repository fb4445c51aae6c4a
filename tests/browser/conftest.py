"""A real Chromium (Debian's, at /usr/bin/chromium) driving the admin on a live server.

Playwright's sync API keeps an asyncio loop set on this thread while it is
open, and Django refuses database calls from a thread with a running loop
(``SynchronousOnlyOperation``). So the test never touches the database while
the browser is open except through :func:`off_thread`, which runs a callable in
a fresh thread with its own connection.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.db import connection

from django_pgsched.models import JobRun, Schedule, db_now
from tests.acceptance.conftest import Replica, replicas  # noqa: F401  (the fixture)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
DOCS_SCREENSHOTS = ROOT / "docs" / "_static" / "screenshots"
PASSWORD = "admin-password"

T = TypeVar("T")


def off_thread(func: Callable[[], T]) -> T:
    """Run ``func`` (database work) in its own thread and connection, and wait for it."""

    def call() -> T:
        try:
            return func()
        finally:
            connection.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result(timeout=60)


@pytest.fixture
def operator(transactional_db: None, django_user_model: Any) -> Any:
    """A superuser, created before the browser opens."""
    return django_user_model.objects.create_superuser("admin", "admin@example.com", PASSWORD)


@pytest.fixture
def browser_page(operator: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A Chromium page (1600 px wide); request ``live_server`` before this fixture."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 900})
            context.set_default_timeout(30_000)
            yield context.new_page()
            context.close()
        finally:
            browser.close()


def seed_showcase() -> None:
    """A few schedules with a history, so the screenshots show what an operator would see.

    Their crons fire rarely (none during a test, whatever the hour); their runs
    are in the past, on each schedule's grid.
    """
    now = db_now().replace(minute=0, second=0, microsecond=0)
    pattern = ["succeeded"] * 3 + ["failed"] + ["succeeded"] * 5 + ["failed"]
    showcase = [
        ("invoices-sync", {"cron": "0 0 */6 * * *"}, timedelta(hours=6), pattern),
        ("cleanup-sessions", {"interval": timedelta(minutes=15)}, timedelta(minutes=15), None),
        (
            "weekly-digest",
            {"cron": "0 0 8 * * MON", "misfire_policy": "skip"},
            timedelta(days=7),
            None,
        ),
    ]
    for name, timing, step, statuses in showcase:
        schedule = Schedule(name=name, job="tests.noop", **timing)
        schedule.full_clean()
        schedule.save()
        history = statuses or ["succeeded"] * 10
        runs = []
        for i, status in enumerate(history):
            at = now - step * (len(history) - i)
            runs.append(
                JobRun(
                    schedule=schedule,
                    schedule_name=name,
                    scheduled_for=at,
                    fire_after=at,
                    idempotency_key=f"showcase:{uuid.uuid4()}",
                    job="tests.noop",
                    queue="default",
                    status=status,
                    attempts=1 if status == "succeeded" else 3,
                    max_attempts=3,
                    timeout=timedelta(minutes=5),
                    started_at=at,
                    worker="replica-2",
                    finished_at=at + timedelta(seconds=1 + i % 4),
                )
            )
        JobRun.objects.bulk_create(runs)
    Schedule.objects.filter(name="cleanup-sessions").update(status="paused")
    Schedule.objects.filter(name="weekly-digest").update(source="settings", skipped_occurrences=3)
