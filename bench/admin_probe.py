"""Time the admin's run list (``/admin/pgsched/jobrun/``) through Django's test client.

Run with ``PGSCHED_BENCH_ADMIN=1`` (``bench.settings`` then installs the
admin): migrates the admin's own tables, makes a superuser, logs in, requests
the page twice to warm up, then ``N`` timed requests. Prints one JSON line:
each request's seconds, its status, and for the last request the number of
queries and the slowest one (text and seconds).
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    requests = int(argv[0]) if argv else 5
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    call_command("migrate", verbosity=0)
    user_model = get_user_model()
    user = user_model.objects.filter(username="bench").first()
    if user is None:
        user = user_model.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    url = "/admin/pgsched/jobrun/"
    for _ in range(2):
        response = client.get(url)
    seconds = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(url)
        seconds.append(time.perf_counter() - started)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    slowest = max(queries.captured_queries, key=lambda q: float(q["time"]), default=None)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "status": response.status_code,
                "bytes": len(response.content),
                "queries": len(queries.captured_queries),
                "slowest_query": slowest["sql"][:500] if slowest else None,
                "slowest_query_s": float(slowest["time"]) if slowest else None,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
