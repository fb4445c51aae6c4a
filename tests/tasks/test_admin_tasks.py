"""The admin shows a task's runs as it shows a job's: arguments, return value, attempts."""

from __future__ import annotations

from django.urls import reverse

from django_pgsched.engine.executor import Executor
from tests.testapp import tasks


def test_a_task_runs_page_shows_its_call_return_value_and_errors(admin_client) -> None:
    ok = tasks.echo.enqueue(7, flag="yes")
    bad = tasks.fail.enqueue("shown in the admin")
    Executor(concurrency=2, inline=True).run_once()
    page = admin_client.get(reverse("admin:pgsched_jobrun_change", args=[ok.id]))
    text = page.content.decode()
    assert page.status_code == 200
    assert "task:tests.testapp.tasks.echo" in text
    assert "&quot;args&quot;: [\n    7\n  ]" in text  # the positional arguments
    assert "Return value" in text and "&quot;flag&quot;: &quot;yes&quot;" in text
    page = admin_client.get(reverse("admin:pgsched_jobrun_change", args=[bad.id]))
    assert "ValueError: shown in the admin" in page.content.decode()
    listing = admin_client.get(reverse("admin:pgsched_jobrun_changelist"))
    assert "task:tests.testapp.tasks.fail" in listing.content.decode()
