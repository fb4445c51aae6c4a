"""The bench command: start a private cluster, run the benchmarks, write and print the results.

``python -m bench --quick`` (or ``--full``); ``scripts/bench`` sets up the
peers' venvs first and draws the plot afterwards. ``--only planner,executor``
runs some benchmarks; ``--reps N`` overrides the profile's repetitions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import (
    b_admin,
    b_beat,
    b_delivery,
    b_executor,
    b_history,
    b_idle,
    b_jitter,
    b_lateness,
    b_memory,
    b_opentx,
    b_planner,
    b_tasks,
    b_triggers,
    b_variants,
    goals,
    machine,
    report,
)
from .cluster import private_cluster
from .context import Context
from .procs import stop_all
from .profiles import PROFILES

RESULTS = Path(__file__).resolve().parent / "results"
BENCHMARKS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "planner": b_planner.run,
    "executor": b_executor.run,
    "lateness": b_lateness.run,
    "idle": b_idle.run,
    "memory": b_memory.run,
    "admin": b_admin.run,
    "opentx": b_opentx.run,
    "tasks": b_tasks.run,
    "beat": b_beat.run,
    "delivery": b_delivery.run,
}
# run only when named with --only (what-if measurements of proposed engine changes)
EXTRA: dict[str, Callable[[Context], dict[str, Any]]] = {
    "variants": b_variants.run,
    "jitter": b_jitter.run,  # the 100k burst with and without 60 s of jitter
    "history": b_history.run,  # one tenant's day: one month of runs against 24
    "triggers": b_triggers.run,  # bulk statements on 100k schedules, with and without triggers
}


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("PGSCHED_BENCH_CACHE") or Path(base) / "pgsched-bench")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_const", dest="profile", const="quick")
    group.add_argument("--full", action="store_const", dest="profile", const="full")
    names = ", ".join([*BENCHMARKS, *EXTRA])
    parser.add_argument("--only", default="", help=f"comma-separated: {names}")
    parser.add_argument("--reps", type=int, default=None, help="override the repetitions")
    parser.add_argument("--cache", type=Path, default=default_cache(), help="venvs and logs")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    parser.set_defaults(profile="quick")
    args = parser.parse_args(argv)
    unknown = {name for name in args.only.split(",") if name} - set(BENCHMARKS) - set(EXTRA)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    profile = PROFILES[args.profile]
    if args.reps:
        profile = replace(profile, reps=args.reps)
    everything = {**BENCHMARKS, **EXTRA}
    chosen = args.only.split(",") if args.only else list(BENCHMARKS)
    selected = [name for name in everything if name in chosen]
    started = datetime.now(UTC)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    logs = args.cache / "logs" / stamp
    logs.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "meta": {
            "started": started.isoformat(),
            "profile": profile.as_dict(),
            "machine": machine.describe(),
            "load_start": machine.load(),
            "logs": str(logs),
        },
        "benchmarks": {},
    }
    with private_cluster() as cluster:
        ctx = Context(cluster=cluster, profile=profile, logs=logs, venvs=args.cache / "venvs")
        results["meta"]["postgres"] = cluster.settings()
        if profile.fsync_test:
            ctx.say("pg_test_fsync ...")
            results["meta"]["pg_test_fsync"] = cluster.fsync_rate()
        ctx.migrate_template()
        for name in selected:
            ctx.say(f"== {name}")
            t0, load0 = time.monotonic(), machine.load()
            engine0 = machine.engine_fingerprint()
            try:
                outcome = everything[name](ctx)
            except Exception as exc:
                traceback.print_exc()
                outcome = {"error": f"{type(exc).__name__}: {exc}"}
            leaked = stop_all()
            if leaked:
                ctx.say(f"stopped {leaked} process(es) that {name} left running")
            outcome["seconds"] = round(time.monotonic() - t0, 1)
            outcome["load"] = {"start": load0, "end": machine.load()}
            outcome["engine"] = {"start": engine0, "end": machine.engine_fingerprint()}
            if engine0 != outcome["engine"]["end"]:
                ctx.say(f"!! the engine's code changed during {name}: its figures mix two engines")
            results["benchmarks"][name] = outcome
    results["meta"]["finished"] = datetime.now(UTC).isoformat()
    results["meta"]["load_end"] = machine.load()
    results["goals"] = goals.evaluate(results)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{stamp}-{profile.name}.json"
    path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    if not args.only:  # a partial run never replaces the latest complete one
        shutil.copyfile(path, args.out / "latest.json")
    print(report.table(results))
    print(f"\nresults: {path}; logs: {logs}")
    return 0
