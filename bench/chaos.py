"""The chaos soak, 30 minutes: every capability at once, a fault every 30–90 s.

The workload, the faults and the checks are the fault tier's
(``tests/faults/chaos.py``; its short variant is ``tests/faults/test_chaos.py``). This
runs them for ``--minutes`` on a private libfaketime cluster of its own, then judges the
goals::

    python -m bench.chaos --minutes 30 --seed 1 --out bench/results/<date>-chaos.json

- **0 duplicate executions, 0 lost occurrences, accounting exact**: the safety set finds
  nothing (I1 duplicates, I2 lost, I12 accounting, and the rest), and the checks beyond it
  (tasks, deliveries, tenant limits) find nothing.
- **p99 start lateness of the healthy schedules ≤ 2 s outside the fault windows**: the
  every-second UTC schedules, from the due time to their first attempt's start; a window
  runs from a fault's start to 5 s after it healed (the switch between the phases and the
  start are windows too).
- **RSS and connections flat**: every replica incarnation that lived 4 minutes or more
  ends within 20 % (and 10 MB) of its RSS at 2 minutes; the connections in the last third
  peak no higher than in the first third, plus one per replica.

It needs root (the network cut), libfaketime and nats-server; it never touches your server.
Exit status 0 when every goal holds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any


def judge(report: dict[str, Any], replicas: int) -> dict[str, Any]:
    by = report["by_invariant"]
    lateness = report["lateness"]["outside_windows"]
    growing = {}
    for worker, rss in report["rss_mb"].items():
        if rss["samples"] >= 120 and rss.get("at_2_min") is not None:
            base = rss["at_2_min"]
            if rss["last"] > max(base * 1.2, base + 10):
                growing[worker] = rss
    thirds = report["connections"]["max_by_third"]
    return {
        "duplicates (I1)": {"value": by.get("I1", 0), "met": by.get("I1", 0) == 0},
        "lost (I2)": {"value": by.get("I2", 0), "met": by.get("I2", 0) == 0},
        "accounting (I12)": {"value": by.get("I12", 0), "met": by.get("I12", 0) == 0},
        "every invariant": {"value": sum(by.values()), "met": not by},
        "tasks, deliveries, tenant limits": {
            "value": report["problems"],
            "met": not report["problems"],
        },
        "lateness p99 outside the fault windows <= 2 s": {
            "value": lateness.get("p99"),
            "met": lateness.get("n", 0) > 0 and lateness["p99"] <= 2.0,
        },
        "RSS flat": {"value": growing, "met": not growing},
        "connections flat": {
            "value": thirds,
            "met": None not in thirds and thirds[2] <= thirds[0] + replicas,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gap", default="30,90", help="seconds between faults: MIN,MAX")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    from bench import machine
    from tests.faults import chaos
    from tests.faults.cluster import private_cluster
    from tests.faults.scenario import Scenario

    lo, hi = (float(x) for x in args.gap.split(","))
    config = chaos.Config(seconds=args.minutes * 60, fault_gap=(lo, hi), seed=args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="pgsched-chaos-"))
    try:
        with private_cluster(faketime=True) as cluster:
            scenario = Scenario(cluster, workdir)
            try:
                report = chaos.Chaos(scenario, config, workdir).run().as_dict()
            finally:
                chaos.restore_clock(scenario)
                scenario.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    goals = judge(report, config.replicas)
    machine.write_results(args.out, args, report, goals=goals, load=machine.load())
    print(json.dumps({"goals": goals, "faults": len(report["faults"]),
                      "accounted": report["accounted"], "lateness": report["lateness"]},
                     indent=1, default=str))  # fmt: skip
    return 0 if all(g["met"] for g in goals.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
