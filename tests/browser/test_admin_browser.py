"""An operator's first session, in a real browser against a live server and a real replica.

Log in; create a schedule (a cron that never fires is refused with the core's
message, a good one is saved); pause and resume it; run it now; watch the run
and its attempt appear once the ``runscheduler`` replica has executed it.
Screenshots of the schedule list, a schedule, the run list and a run land in
``artifacts/screenshots/`` (and to ``docs/_static/screenshots/`` when
``PGSCHED_UPDATE_DOC_SCREENSHOTS=1``).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from datetime import timedelta
from typing import Any

import pytest

from django_pgsched.timing import timetable
from tests.browser.conftest import (
    DOCS_SCREENSHOTS,
    PASSWORD,
    SCREENSHOTS,
    off_thread,
    seed_showcase,
)
from tests.testapp.models import Witness

pytestmark = pytest.mark.browser

NEVER = "0 0 0 30 2 *"  # February 30th
WEEKDAYS = "0 30 9 * * MON-FRI"
SHOTS = ("admin-schedules.png", "admin-schedule.png", "admin-runs.png", "admin-run.png")


def refused(expression: str) -> str:
    with pytest.raises(timetable.TimetableError) as error:
        timetable.cron(expression)
    return str(error.value)


def test_an_operator_creates_pauses_resumes_and_runs_a_schedule(
    replicas: Any, browser_page: Any, live_server: Any
) -> None:
    # (replicas first: its teardown touches the database, so it must outlive the browser)
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)  # a shared, busy machine: patience, not timing
    page = browser_page
    # a year's retention: the showcase's history goes ten weeks back, and the replica's
    # retention (30 days by default) would detach those months while they are seeded
    replica = replicas("replica-1", "--concurrency", "2", overrides={"RETENTION": 365 * 86400})
    replica.wait_for_log("running loops", timeout=120)
    message = refused(NEVER)
    off_thread(seed_showcase)  # other schedules with a history, for the screenshots

    # log in
    page.goto(f"{live_server.url}/admin/login/?next=/admin/pgsched/schedule/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#content h1")).to_contain_text("Select schedule")

    # a cron that never fires is refused with the core's message; a good one is saved
    page.goto(f"{live_server.url}/admin/pgsched/schedule/add/")
    page.fill("#id_name", "nightly-report")
    page.select_option("#id_job", "tests.witness")
    page.fill("#id_kwargs", '{"label": "from-the-browser"}')
    page.fill("#id_cron", NEVER)
    page.click("input[name=_save]")
    expect(page.locator(".field-cron .errorlist")).to_have_text(message)
    page.fill("#id_cron", WEEKDAYS)
    page.click("input[name=_save]")
    expect(page.locator(".messagelist .success")).to_contain_text("nightly-report")
    row = page.locator("#result_list tbody tr", has_text="nightly-report")
    expect(row).to_contain_text("At 09:30:00 AM, Monday through Friday")
    expect(row.locator(".pgsched-badge")).to_have_text("active")

    # pause and resume from the schedule's page
    row.locator("th a").click()
    expect(page.locator(".field-preview li")).to_have_count(5)
    page.click("button[data-tool=pause]")
    expect(page.locator(".messagelist .success")).to_contain_text("Paused nightly-report")
    expect(page.locator(".field-state .pgsched-badge")).to_have_text("paused")
    page.click("button[data-tool=resume]")
    expect(page.locator(".messagelist .success")).to_contain_text("Resumed nightly-report")
    expect(page.locator(".field-state .pgsched-badge")).to_have_text("active")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / "admin-schedule.png", full_page=True)

    # run it now; follow the link to the run and wait for the replica to execute it
    page.click("button[data-tool=run-now]")
    notice = page.locator(".messagelist .success", has_text="is due now")
    expect(notice).to_be_visible()
    notice.locator("a").click()
    deadline = time.monotonic() + 120
    status = page.locator(".field-state .pgsched-badge")
    while status.inner_text() != "succeeded":
        assert time.monotonic() < deadline, f"the run did not succeed:\n{replica.log()}"
        time.sleep(0.5)
        page.reload()
    attempt = page.locator("#attempt_set-group tbody tr").first
    expect(attempt).to_contain_text("succeeded")
    expect(attempt).to_contain_text("replica-1")
    expect(page.locator(".field-lease")).to_contain_text("—")
    run_id = int(re.search(r"/jobrun/(\d+)/", page.url).group(1))
    page.screenshot(path=SCREENSHOTS / "admin-run.png", full_page=True)

    page.goto(f"{live_server.url}/admin/pgsched/schedule/")
    row = page.locator("#result_list tbody tr", has_text="nightly-report")
    expect(row.locator(".pgsched-cell")).to_have_count(1)  # the run-now run
    expect(row.locator(".pgsched-last-run")).to_contain_text("succeeded")
    expect(row.locator(".pgsched-cell.pgsched-succeeded")).to_have_count(1)
    page.screenshot(path=SCREENSHOTS / "admin-schedules.png", full_page=True)
    page.goto(f"{live_server.url}/admin/pgsched/jobrun/")
    expect(page.locator("#result_list")).to_contain_text("nightly-report")
    page.screenshot(path=SCREENSHOTS / "admin-runs.png", full_page=False)

    # the job ran once, on the replica, with the schedule's kwargs
    witnessed = off_thread(lambda: list(Witness.objects.values_list("run_id", "label", "worker")))
    assert witnessed == [(run_id, "from-the-browser", "replica-1")]
    if os.environ.get("PGSCHED_UPDATE_DOC_SCREENSHOTS"):  # refresh the docs' copies on request
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for name in SHOTS:
            shutil.copyfile(SCREENSHOTS / name, DOCS_SCREENSHOTS / name)


def test_an_operator_reads_a_zoned_schedule_across_its_transitions(
    browser_page: Any, live_server: Any
) -> None:
    """The preview in local time and UTC with offsets, and the marked transitions."""
    from playwright.sync_api import expect

    from django_pgsched.models import Schedule

    expect.set_options(timeout=20_000)
    off_thread(
        lambda: Schedule.objects.create(
            name="berlin-nightly",
            job="tests.noop",
            cron="30 2 * * *",
            timezone="Europe/Berlin",
            jitter=timedelta(seconds=60),
        )
    )
    page = browser_page
    page.goto(f"{live_server.url}/admin/login/?next=/admin/pgsched/schedule/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.locator("#result_list th a", has_text="berlin-nightly").click()
    preview = page.locator(".field-preview")
    expect(preview.locator("ol.pgsched-preview").first.locator("li")).to_have_count(5)
    expect(preview).to_contain_text("Around the next transitions of Europe/Berlin")
    expect(preview.locator(".pgsched-dst").first).to_be_visible()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    preview.screenshot(path=SCREENSHOTS / "admin-schedule-zoned.png")
    if os.environ.get("PGSCHED_UPDATE_DOC_SCREENSHOTS") == "1":
        shutil.copyfile(
            SCREENSHOTS / "admin-schedule-zoned.png", DOCS_SCREENSHOTS / "admin-schedule-zoned.png"
        )
