"""The results as Markdown tables: absolute figures, ratios, goals, load averages.

``python -m bench.report [RUN.json ...]`` prints the tables of saved runs
(``bench/results/latest.json`` by default). With several files, a benchmark in
a later file replaces the same benchmark of an earlier one (a partial rerun
over a complete run), and the heading names every run used.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

Results = dict[str, Any]


def _n(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _spread(cell: dict[str, Any], digits: int = 0) -> str:
    if cell.get("min") is None:
        return "–"
    return f"{_n(cell['min'], digits)}–{_n(cell['max'], digits)}"


def _ratio_of(ratios: dict[str, Any], key: str) -> str:
    """The cell's ratio to its baseline, preferring the baseline of the same size."""
    found = [r for r in ratios.values() if r.get("of") == key and r.get("median") is not None]
    size = "".join(ch for ch in key if ch.isdigit())
    found.sort(key=lambda r: "".join(ch for ch in r["to"] if ch.isdigit()) != size)
    if not found:
        return ""
    r = found[0]
    return f"{r['median']:.2f}× {r['to']} ({r['min']:.2f}–{r['max']:.2f})"


def _throughput(title: str, bench: dict[str, Any]) -> list[str]:
    lines = [
        f"### {title}",
        "",
        "| cell | median | spread (min–max) | unit | ratio to baseline (per-rep min–max) |",
        "| --- | ---: | ---: | --- | --- |",
    ]
    ratios = bench.get("ratios", {})
    for key, cell in bench.get("cells", {}).items():
        lines.append(
            f"| {cell['label']} | {_n(cell['median'])} | {_spread(cell)} | {cell['unit']} "
            f"| {_ratio_of(ratios, key)} |"
        )
    extra = [r for r in ratios.values() if r["of"] in bench["cells"]]
    shown = {r["of"] for r in extra}
    if len(extra) > len(shown):
        lines += ["", "All ratios (median, per-rep min–max):", ""]
        lines += [
            f"- {name}: {r['median']:.2f} ({r['min']:.2f}–{r['max']:.2f})"
            for name, r in ratios.items()
            if r.get("median") is not None
        ]
    return [*lines, ""]


def _planner_extra(bench: dict[str, Any]) -> list[str]:
    maths = bench.get("cron_maths", {})
    share = bench.get("decide_share", {})
    lines = [
        f"Correct (no duplicates, one run and one advance per schedule): {bench.get('correct')}."
    ]
    times = [
        f"{cell['label']} {_n(cell['seconds']['median'], 1)} s"
        for cell in bench.get("cells", {}).values()
        if "seconds" in cell
    ]
    if times:
        lines.append("Time to materialise them all (median): " + "; ".join(times) + ".")
    if maths:
        lines.append(
            "Cron maths alone for the same schedules (median s of CPU): "
            f"memoised as the planner does {_n(maths['memoised']['median'], 2)}, "
            f"one decision per schedule {_n(maths['per_schedule']['median'], 1)}, "
            f"parse + decision per schedule {_n(maths['cold']['median'], 0)}."
        )
    for key, s in share.items():
        lines.append(f"Share of {key}'s wall time in the cron maths: {_n(s['median'] * 100, 1)} %.")
    return [*lines, ""]


def _lateness(bench: dict[str, Any]) -> list[str]:
    lines = [
        "### Start lateness (database clock)",
        "",
        "| scenario | p50 ms | p99 ms | max ms | note |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    names = {
        "sparse": "sparse: 200 schedules, 20 s interval, staggered (10 due each second)",
        "sparse_1s": "200 schedules every 1 s (200 due at once, each second)",
        "due_now": "schedule created due now (from its creation)",
        "burst": "burst: 100k due at one second, 2 replicas",
    }
    for key, title in names.items():
        s = bench.get(key)
        if not s or "p50" not in s:
            continue
        note = f"{s['reps'][0].get('samples', '?')} samples/rep, {len(s['reps'])} rep(s)"
        if key == "burst":
            after = s.get("all_started_after_s", {})
            note = f"all started {_n(after.get('median'), 1)} s after T; " + note
        lines.append(
            f"| {title} | {_n(s['p50']['median'], 1)} | {_n(s['p99']['median'], 1)} "
            f"| {_n(s['max']['median'], 1)} | {note} |"
        )
    return [*lines, ""]


def _idle(bench: dict[str, Any]) -> list[str]:
    lines = [
        "### Idle cost per replica (100k schedules, none due)",
        "",
        "| replicas | xacts/s | WAL B/s, its database | WAL B/s, cluster | xids/s | statements/s"
        " | CPU (cores) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in (1, 2):
        m = bench.get(f"replicas_{n}")
        if m:
            lines.append(
                f"| {n} | {_n(m['xacts_per_s_per_replica'], 2)} "
                f"| {_n(m['wal_bytes_bench_db_per_s_per_replica'], 1)} "
                f"| {_n(m['wal_bytes_per_s_per_replica'], 1)} "
                f"| {_n(m['xids_per_s_per_replica'], 2)} "
                f"| {_n(m['statements_per_s_per_replica'], 2)} | {_n(m['cpu_per_replica'], 4)} |"
            )
    base = bench.get("baseline", {})
    if base:
        lines.append(
            "\nPer replica, net of an equal window with no replica "
            f"({_n(base['xacts_per_s'], 2)} xacts/s, {_n(base['wal_bytes_per_s'], 1)} WAL B/s). "
            "Cluster WAL includes autovacuum in other databases (records by relation in the JSON)."
        )
    return [*lines, ""]


def _misc(results: Results) -> list[str]:
    b = results.get("benchmarks", {})
    lines = ["### Memory, admin, open transaction", ""]
    mem = b.get("memory", {})
    if "rss_max" in mem:
        lines.append(
            f"- Memory soak ({_n(mem['seconds'])} s, {mem['runs_succeeded']} runs): RSS start "
            f"{_n(mem['rss_start'], 1)} MB, after warm-up {_n(mem['rss_warm'], 1)} MB, end "
            f"{_n(mem['rss_end'], 1)} MB, max {_n(mem['rss_max'], 1)} MB, growth "
            f"{_n(mem['growth_pct'], 1)} %."
        )
    adm = b.get("admin", {})
    if "ratio" in adm:
        small, large = adm["small"], adm["large"]
        lines.append(
            f"- Admin run list: {small['rows']:,} runs "
            f"{_n(small['timing']['median'] * 1000, 1)} ms, "
            f"{large['rows']:,} runs {_n(large['timing']['median'] * 1000, 1)} ms "
            f"(ratio {adm['ratio']:.2f}; {adm['large']['queries']} queries, slowest "
            f"{_n((adm['large']['slowest_query_s'] or 0) * 1000, 1)} ms)."
        )
    otx = b.get("opentx", {})
    if "rates" in otx:
        r = otx["rates"]
        lines.append(
            f"- Open transaction ({_n(otx['phase_seconds'])} s phases, concurrency "
            f"{otx['concurrency']}): baseline {_n(r['baseline'])}/s, held {_n(r['held'])}/s "
            f"({otx['held_ratio']:.2f}×), after {_n(r['after'])}/s ({otx['after_ratio']:.2f}×); "
            f"dead tuples {otx['dead_tuples']}."
        )
    for name, bench in b.items():
        if "error" in bench:
            lines.append(f"- **{name} failed**: {bench['error']}")
    return [*lines, ""]


def _variants(bench: dict[str, Any]) -> list[str]:
    lines = _throughput("What-if: candidate engine changes (executor, concurrency 8)", bench)
    for batch in (32, 100):
        drain = bench.get(f"burst_raw_b{batch}")
        if drain and drain.get("median") is not None:
            lines.append(
                f"- Two raw loops at batch {batch} drain the burst's 100k due runs in "
                f"{_n(drain['median'], 1)} s ({_n(drain['min'], 1)}–{_n(drain['max'], 1)})."
            )
    return [*lines, ""]


BEAT_LABELS = {
    "beat": "celery beat + django-celery-beat",
    "ours_1": "django-pgsched, 1 replica",
    "ours_2": "django-pgsched, 2 replicas",
}


def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f}"


def beat_table(bench: dict[str, Any]) -> list[str]:
    """The side-by-side table: one row per size and scheduler."""
    v = bench.get("versions", {})
    lines = [
        f"### Side by side with celery beat: every-minute schedules ({bench['minutes']} minutes)",
        "",
        f"celery {v.get('celery', '?')}, django-celery-beat {v.get('django-celery-beat', '?')} "
        f"(Django {v.get('Django', '?')}, Redis broker); lateness is seconds after the "
        "boundary (negative: before).",
        "",
        "| schedules | scheduler | produced per minute | lateness p50 / p99 / max, s "
        "| scheduler CPU | PostgreSQL CPU | RSS, MB | commits/s |",
        "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for size, cells in bench.get("sizes", {}).items():
        for key, label in BEAT_LABELS.items():
            c = cells.get(key)
            if not c:
                continue
            if "error" in c:
                lines.append(f"| {int(size):,} | {label} | failed: {c['error']} | | | | | |")
                continue
            late = c["lateness_s"]
            rss = c["rss_mb_max"] if key == "beat" else c["rss_mb_max_per_process"]
            lines.append(
                f"| {int(size):,} | {label} | {_n(c['produced_per_min'])} "
                f"| {_s(late['p50'])} / {_s(late['p99'])} / {_s(late['max'])} "
                f"| {c['cpu_cores'] * 100:.1f} % | {c['server_cpu_cores'] * 100:.1f} % "
                f"| {_n(rss)} | {_n(c['commits_per_s'], 1)} |"
            )
    lines += [
        "",
        "CPU in % of one core over the observed minutes (both replicas together for two); "
        "RSS per process.",
    ]
    return [*lines, ""]


def _goals(results: Results) -> list[str]:
    lines = ["### Goals", "", "| goal | met | evidence |", "| --- | --- | --- |"]
    for g in results.get("goals", []):
        met = {True: "met", False: "**not met**", None: "not measured"}[g["met"]]
        lines.append(f"| {g['goal']} | {met} | {g['evidence']} |")
    return [*lines, ""]


def _loads(results: Results) -> list[str]:
    meta = results["meta"]
    lines = ["### Load averages (1, 5, 15 min) at the start and end of each benchmark", ""]
    lines.append(f"- run: {meta.get('load_start')} → {meta.get('load_end')}")
    for name, bench in results.get("benchmarks", {}).items():
        load = bench.get("load", {})
        engine = bench.get("engine", {})
        changed = (
            " **(the engine's code changed during it)**" if len(set(engine.values())) > 1 else ""
        )
        lines.append(
            f"- {name} ({bench.get('seconds')} s): {load.get('start')} → {load.get('end')}{changed}"
        )
    return [*lines, ""]


def _tasks_extra(bench: dict[str, Any]) -> list[str]:
    lines = [
        "| cell | drain (execute only) | enqueue rate | enqueue p50 | enqueue p99 "
        "| worker CPU/task |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for cell in bench.get("cells", {}).values():
        lines.append(
            f"| {cell['label']} | {_n(cell['drain']['median'])}/s | {_n(cell['enqueue_rate'])}/s "
            f"| {_n(cell['enqueue_p50_ms'], 2)} ms | {_n(cell['enqueue_p99_ms'], 2)} ms "
            f"| {_n(cell['worker_cpu_per_task_ms'], 2)} ms |"
        )
    lines += _tasks_producer(bench)
    cost = bench.get("claim_cost")
    if cost:
        lines += [
            "",
            f"Claim cost of priority (concurrency {cost['concurrency']}): "
            f"{_n(cost['plain']['median'])} runs/s over due priority-0 runs; "
            f"{_n(cost['deferred_ahead']['median'])} runs/s with {cost['deferred']:,} deferred "
            f"priority-10 runs ahead of them in the index "
            f"({cost['ratio']['median']:.2f}× of it).",
        ]
    return [*lines, ""]


def _tasks_producer(bench: dict[str, Any]) -> list[str]:
    """The producer alone (no worker running), and the pipeline ratio's ceiling it sets."""
    made = [c for c in bench.get("cells", {}).values() if "producer_only" in c]
    if not made:
        return []
    threads = made[0]["producer_only"]["threads"]
    lines = [
        "",
        f"Producer only (`task.enqueue()` from {threads} threads, no worker running):",
        "",
        "| cell | enqueue rate | p50 | p99 | producer CPU/enqueue |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for cell in made:
        p = cell["producer_only"]
        lines.append(
            f"| {cell['label']} | {_n(p['median'])}/s | {_n(p['p50_ms'], 2)} ms "
            f"| {_n(p['p99_ms'], 2)} ms | {_n(p['cpu_ms'], 3)} ms |"
        )
    lines.append("")
    for key, ratio in bench.get("ratios", {}).items():
        if key.endswith((" producer only", " ceiling")):
            what = f" ({ratio['what']})" if "what" in ratio else ""
            lines.append(f"- {key}: {_n(ratio['median'], 2)}×{what}")
    return lines


def table(results: Results) -> str:
    b = results.get("benchmarks", {})
    meta = results["meta"]
    lines = [
        f"## Results: {meta['profile']['name']} profile, {meta['started']}",
        "",
        f"Machine: {meta['machine']['cpus']} × {meta['machine']['cpu_model']}, "
        f"{meta['machine']['memory_gib']} GiB; "
        f"PostgreSQL {meta.get('postgres', {}).get('server_version')}; "
        f"{meta['profile']['reps']} repetitions of each throughput cell.",
        "",
    ]
    if len(meta.get("runs", [])) > 1:
        lines += [
            f"- run {r['file']} ({r['profile']}, {r['started'][:19]} UTC): "
            + ", ".join(r["benchmarks"])
            for r in meta["runs"]
        ]
        lines.append("")
    if "cells" in b.get("planner", {}):
        lines += _throughput("Planner: 100k schedules due at once", b["planner"])
        lines += _planner_extra(b["planner"])
    if "cells" in b.get("executor", {}):
        lines += _throughput("Executor: no-op runs", b["executor"])
    if "cells" in b.get("tasks", {}):
        lines += _throughput("django.tasks: enqueue + execute no-op tasks", b["tasks"])
        lines += _tasks_extra(b["tasks"])
    if "sparse" in b.get("lateness", {}):
        lines += _lateness(b["lateness"])
    if "replicas_1" in b.get("idle", {}):
        lines += _idle(b["idle"])
    lines += _misc(results)
    if "sizes" in b.get("beat", {}):
        lines += beat_table(b["beat"])
    if "cells" in b.get("variants", {}):
        lines += _variants(b["variants"])
    lines += _goals(results)
    lines += _loads(results)
    return "\n".join(lines)


def merge(paths: list[Path]) -> Results:
    """Several runs as one: later benchmarks replace earlier ones; ``meta.runs`` names them."""
    from . import goals

    merged: Results = {}
    runs = []
    for path in paths:
        results = json.loads(path.read_text())
        runs.append(
            {
                "file": path.name,
                "started": results["meta"]["started"],
                "profile": results["meta"]["profile"]["name"],
                "benchmarks": list(results["benchmarks"]),
            }
        )
        if not merged:
            merged = results
        else:
            merged["benchmarks"].update(results["benchmarks"])
    merged["meta"]["runs"] = runs
    merged["goals"] = goals.evaluate(merged)
    return merged


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [Path(__file__).parent / "results" / "latest.json"]
    print(table(merge(paths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
