"""Start the demo: database, migrations, an admin login, two scheduler replicas and the admin.

    scripts/demo              # until Ctrl-C
    scripts/demo --seconds 30 # stop by itself (prints a summary)
    scripts/demo --replicas 0 # the admin only: no scheduler runs (the tutorial's step 6)

Replica N serves /metrics, /healthz and /readyz on port 9100 + N (or the next free one).

Uses $DATABASE_URL when set; otherwise starts an embedded PostgreSQL (data in
.embedded-pg/demo, kept between runs).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MANAGE = [sys.executable, str(HERE / "manage.py")]


def free_port(preferred: int, taken: set[int] | None = None) -> int:
    """The first port from ``preferred`` on that nothing listens on (and not in ``taken``)."""
    for port in range(preferred, preferred + 50):
        if taken and port in taken:
            continue
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"no free port near {preferred}")


def manage(*args: str) -> int:
    return subprocess.run([*MANAGE, *args], check=True).returncode


def summary() -> str:
    out = subprocess.run(
        [
            *MANAGE,
            "shell",
            "--no-imports",
            "-c",
            "from django.db.models import Count\n"
            "from django_pgsched.models import JobRun, Schedule\n"
            "print('runs by status:',\n"
            "      dict(JobRun.objects.values_list('status').annotate(Count('id'))))\n"
            "print('runs by replica:', dict(JobRun.objects.exclude(worker=None)"
            ".values_list('worker').annotate(Count('id'))))\n"
            "print('skipped occurrences:',\n"
            "      dict(Schedule.objects.values_list('name', 'skipped_occurrences')))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout + out.stderr


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=None, help="stop after this many seconds")
    parser.add_argument(
        "--replicas", type=int, default=2, help="scheduler replicas (default 2; 0: the admin only)"
    )
    parser.add_argument(
        "--port", type=int, default=8000, help="admin port (default 8000, or the next free)"
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=9101,
        help="metrics port of replica 1 (default 9101); the others take the next free ports",
    )
    options = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example.settings")
    if not os.environ.get("DATABASE_URL"):
        sys.path.insert(0, str(ROOT))
        from django_pgsched import embedded

        os.environ["DATABASE_URL"] = embedded.start(ROOT / ".embedded-pg" / "demo")
        print(f"embedded PostgreSQL: {os.environ['DATABASE_URL']}")

    manage("migrate", "--verbosity", "0")
    manage(
        "shell",
        "--no-imports",
        "-c",
        "from django.contrib.auth import get_user_model\n"
        "U = get_user_model()\n"
        "U.objects.filter(username='admin').exists() or "
        "U.objects.create_superuser('admin', 'admin@example.com', 'admin')",
    )

    children: list[subprocess.Popen[bytes]] = []
    port = free_port(options.port)
    taken = {port}
    replicas = []
    for i in range(1, options.replicas + 1):
        metrics_port = free_port(options.metrics_port + i - 1, taken)
        taken.add(metrics_port)
        replicas.append(
            f"    replica-{i}: http://127.0.0.1:{metrics_port}/metrics  (and /healthz, /readyz)"
        )
        children.append(
            subprocess.Popen(
                [
                    *MANAGE,
                    "runscheduler",
                    "--worker-id",
                    f"replica-{i}",
                    "--metrics-port",
                    str(metrics_port),
                ],
                start_new_session=True,
            )
        )
    children.append(
        subprocess.Popen(
            [*MANAGE, "runserver", f"127.0.0.1:{port}", "--noreload"], start_new_session=True
        )
    )
    metrics = "\n".join(replicas) or "    (no replica running: schedules wait, nothing fires)"
    drain = " (replicas drain their running jobs first)" if options.replicas else ""
    print(
        f"""
django-pgsched demo is running: {options.replicas} scheduler replica(s) and the admin.

  admin:     http://127.0.0.1:{port}/admin/pgsched/   (login admin / admin)
  schedules: declared in example_project/example/settings.py (PGSCHED["SCHEDULES"])
             and any you add in the admin (jobs: demo.heartbeat, demo.slow_report,
             demo.flaky_sync, demo.greet)
  runs:      http://127.0.0.1:{port}/admin/pgsched/jobrun/
  metrics:
{metrics}

Ctrl-C stops everything{drain}.
""",
        flush=True,
    )

    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    deadline = time.monotonic() + options.seconds if options.seconds else None
    code = 0
    while not stop["now"] and (deadline is None or time.monotonic() < deadline):
        if any(child.poll() is not None for child in children):
            print("a demo process exited unexpectedly; stopping", file=sys.stderr)
            code = 1
            break
        time.sleep(0.5)
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
    print(summary())
    return code


if __name__ == "__main__":
    raise SystemExit(main())
