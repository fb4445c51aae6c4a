"""Time a history page (``GET /scheduler/runs/?since=<day>&until=<day+1>``), Django's test client.

Run with ``PGSCHED_BENCH_OVERRIDES={"TENANT_RESOLVER": "tests.testapp.tenancy.from_header"}``
(the tenant is the ``X-Tenant`` header). Arguments: requests, tenants, the day
(ISO date). Each request asks for another tenant's day (round robin over 50
tenants), after two warm-up passes over them. Prints one JSON line: each
request's seconds, the statuses, the results per page, and the page
statement's plan with ``EXPLAIN (ANALYZE, BUFFERS)`` for one tenant (buffers
touched: a measure the machine's load does not move).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import date, timedelta


def main(argv: list[str]) -> int:
    requests, tenants, day = int(argv[0]), int(argv[1]), date.fromisoformat(argv[2])
    import django

    django.setup()
    from django.db import connection
    from django.test import Client

    from django_pgsched.history.queries import check_query, select
    from django_pgsched.history.serialize import RUN_FIELDS

    client = Client()
    since, until = day.isoformat(), (day + timedelta(days=1)).isoformat()
    names = [f"tenant-{1 + (i * 7919) % (tenants - 1)}" for i in range(50)]

    def get(tenant: str) -> tuple[int, int]:
        response = client.get(
            "/scheduler/runs/", {"since": since, "until": until}, headers={"X-Tenant": tenant}
        )
        return response.status_code, len(response.json().get("results", []))

    for _ in range(2):
        for name in names:
            get(name)
    seconds, statuses, sizes = [], set(), []
    for i in range(requests):
        started = time.perf_counter()
        status, size = get(names[i % len(names)])
        seconds.append(time.perf_counter() - started)
        statuses.add(status)
        sizes.append(size)
    from datetime import UTC, datetime

    query = check_query(
        tenant=names[0],
        since=datetime.combine(day, datetime.min.time(), tzinfo=UTC),
        until=datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC),
        limit=100,
    )
    sql, params = select(query, None, only=RUN_FIELDS)[:101].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0][0]
    top = plan["Plan"]
    print(
        json.dumps(
            {
                "seconds": seconds,
                "statuses": sorted(statuses),
                "results_per_page": sum(sizes) / len(sizes),
                "buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
                "execution_ms": plan["Execution Time"],
                "planning_ms": plan["Planning Time"],
                "plan": _nodes(top),
            }
        ),
        flush=True,
    )
    return 0


def _nodes(node: dict, depth: int = 0) -> list[str]:
    """The plan's nodes, one line each (type, relation or index)."""
    label = node["Node Type"]
    for key in ("Index Name", "Relation Name"):
        if key in node:
            label += f" {node[key]}"
            break
    lines = ["  " * depth + label]
    for child in node.get("Plans", []):
        lines += _nodes(child, depth + 1)
    return lines


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
