"""The issue's goals, each a ratio or a figure from the same run: met or not, with the evidence."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Results = dict[str, Any]


def _get(results: Results, *path: str) -> Any:
    node: Any = results.get("benchmarks", {})
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _goal(
    gid: str, text: str, value: float | None, ok: Callable[[float], bool], evidence: str
) -> dict[str, Any]:
    met = None if value is None else bool(ok(value))
    return {"id": gid, "goal": text, "value": value, "met": met, "evidence": evidence}


def _ratio_goal(results: Results, bench: str, name: str, text: str, least: float) -> dict[str, Any]:
    r = _get(results, bench, "ratios", name)
    if not r or r.get("median") is None:
        return _goal(name, text, None, lambda v: False, "not measured")
    evidence = f"{name} = {r['median']:.2f} (per-rep {r['min']:.2f}–{r['max']:.2f})"
    return _goal(name, text, r["median"], lambda v: v >= least, evidence)


def _figure_goal(
    gid: str, text: str, value: float | None, ok: Callable[[float], bool], fmt: str
) -> dict[str, Any]:
    return _goal(gid, text, value, ok, fmt.format(value) if value is not None else "not measured")


def evaluate(results: Results) -> list[dict[str, Any]]:
    out = [
        _ratio_goal(results, "planner", "ours_2/raw_2",
                    "planner ≥ 0.5× the raw-SQL limit (2 replicas vs 2 connections)", 0.5),
        _ratio_goal(results, "executor", "ours_c8/pgqueuer_b10",
                    "executor ahead of pgqueuer: concurrency 8 vs its default batch 10", 1.0),
        _ratio_goal(results, "executor", "ours_c32/pgqueuer_b100",
                    "executor ahead of pgqueuer: concurrency 32 vs batch 100", 1.0),
        _ratio_goal(results, "executor", "ours_c8/procrastinate_c8",
                    "executor ≥ 10× procrastinate (concurrency 8 each)", 10.0),
    ]  # fmt: skip
    for c in (1, 8, 32):
        out.append(
            _ratio_goal(results, "executor", f"ours_c{c}/raw_b{c}",
                        f"executor ≥ 0.3× the raw-SQL limit at batch {c}", 0.3)
        )  # fmt: skip
    lat = "lateness"
    out += [
        _figure_goal("lateness-sparse", "start lateness p99 ≤ 50 ms at sparse load",
                     _get(results, lat, "sparse", "p99", "median"), lambda v: v <= 50,
                     "p99 {:.1f} ms"),
        _figure_goal("due-now", "a schedule created due now starts within 200 ms (p99)",
                     _get(results, lat, "due_now", "p99", "median"), lambda v: v <= 200,
                     "p99 {:.1f} ms"),
        _figure_goal("burst", "the 100k burst fully started within 10 s with two replicas",
                     _get(results, lat, "burst", "all_started_after_s", "median"),
                     lambda v: v <= 10, "all started {:.1f} s after the due second"),
        _figure_goal("idle-xacts", "idle ≤ 1 transaction/s per replica",
                     _get(results, "idle", "replicas_1", "xacts_per_s_per_replica"),
                     lambda v: v <= 1, "{:.2f} transactions/s"),
        _figure_goal("idle-wal", "no WAL written per idle replica (its database)",
                     _get(results, "idle", "replicas_1", "wal_bytes_bench_db_per_s_per_replica"),
                     lambda v: v == 0, "{:.1f} B/s"),
        _figure_goal("rss", "RSS ≤ 100 MB per replica", _get(results, "memory", "rss_max"),
                     lambda v: v <= 100, "max {:.1f} MB"),
        _figure_goal("rss-growth", "RSS growth ≤ 5 % over the soak",
                     _get(results, "memory", "growth_pct"), lambda v: v <= 5, "{:.1f} %"),
        _figure_goal("admin", "admin run list with the large history within 2× its time at 1k",
                     _get(results, "admin", "ratio"), lambda v: v <= 2, "ratio {:.2f}"),
        _figure_goal("history", "history page (one tenant, one day) with 24 months ≤ 1.5× with "
                     "one month (median request)", _get(results, "history", "ratio"),
                     lambda v: v <= 1.5, "ratio {:.2f} (--only history)"),
        _figure_goal("history-buffers", "history page: buffers its statement touches with 24 "
                     "months ≤ 1.5× with one month", _get(results, "history", "buffers_ratio"),
                     lambda v: v <= 1.5, "ratio {:.2f} (--only history)"),
        _figure_goal("opentx-held", "≥ 50 % of baseline throughput during an open transaction",
                     _get(results, "opentx", "held_ratio"), lambda v: v >= 0.5,
                     "{:.2f}× baseline"),
        _figure_goal("opentx-after", "≥ 90 % of baseline in the phase after it ends",
                     _get(results, "opentx", "after_ratio"), lambda v: v >= 0.9,
                     "{:.2f}× baseline"),
    ]  # fmt: skip
    for c in (1, 4):
        out.append(
            _ratio_goal(results, "tasks", f"ours_c{c}/dtdb_w{c}",
                        f"django.tasks enqueue + execute ≥ 5× django-tasks-db "
                        f"(concurrency {c} vs {c} db_worker)", 5.0)
        )  # fmt: skip
    ratio = _get(results, "delivery", "throughput", "ratios", "ours_c32/loop_c32")
    out += [
        _goal("delivery", "HTTP deliveries at concurrency 32 ≥ 0.5× a plain urllib3 loop "
              "(a connection per request each)",
              ratio.get("median") if ratio else None, lambda v: v >= 0.5,
              f"ours_c32/loop_c32 = {ratio['median']:.2f} (per-rep {ratio['min']:.2f}–"
              f"{ratio['max']:.2f})" if ratio and ratio.get("median") else "not measured"),
        _figure_goal("delivery-rss", "RSS flat over the delivery soak (growth ≤ 5 %)",
                     _get(results, "delivery", "soak", "growth_pct"), lambda v: v <= 5,
                     "{:.1f} %"),
        _figure_goal("breaker-writes", "a dead destination: ≤ 1 write per run per cool-down",
                     _get(results, "delivery", "breaker_on", "writes_per_run_per_cooldown"),
                     lambda v: v <= 1, "{:.3f} writes per run per cool-down"),
    ]  # fmt: skip
    return out
