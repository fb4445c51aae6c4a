"""What the numbers depend on: the machine, its load, the versions, the git state."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages (``uptime``)."""
    return [round(x, 2) for x in os.getloadavg()]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def memory_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024 / 1024, 1)
    return 0.0


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return result.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def engine_fingerprint() -> str:
    """A hash of the engine's code (``django_pgsched``'s Python and SQL) as it is on disk now.

    Replicas import the engine when they start, so a change during a run would
    mix two engines in one table; the run records this before and after each
    benchmark and flags a difference.
    """
    digest = hashlib.sha256()
    for path in sorted((ROOT / "django_pgsched").rglob("*")):
        if path.suffix in (".py", ".sql"):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def versions() -> dict[str, str]:
    found = {}
    for dist in ("django", "psycopg", "django-pgsched"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "not installed"
    found["python"] = platform.python_version()
    return found


def describe() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_gib": memory_gib(),
        "kernel": platform.release(),
        "versions": versions(),
        "git": git_state(),
    }


def write_results(path: str | None, args: Any, results: Any, **extra: Any) -> None:
    """A diagnostic's results as JSON at ``path`` (nothing when None): its arguments, this
    machine, ``extra`` and the results."""
    if path is None:
        return
    document = {"args": vars(args), "machine": describe(), **extra, "results": results}
    Path(path).write_text(json.dumps(document, indent=2, default=str))
