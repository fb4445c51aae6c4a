"""Draw a results file: throughput and lateness against the baselines (matplotlib PNGs).

``python -m bench.plot [--only results|beat] RUN.json [RUN.json ...] OUTDIR`` with the
bench's tools venv (``scripts/bench`` does it after a run). Bars are medians over the
repetitions, whiskers the min–max spread; the title names the run. ``beat.png``
is the side-by-side with celery beat (``b_beat``), when the results have it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

OURS, RAW, PEER = "#2f6f9f", "#9a9a9a", "#d08a3c"


def _colour(key: str) -> str:
    return OURS if key.startswith("ours") else RAW if key.startswith("raw") else PEER


def _bars(ax: Any, cells: dict[str, Any], keys: list[str], unit: str, title: str) -> None:
    keys = [k for k in keys if k in cells and cells[k].get("median") is not None]
    medians = [cells[k]["median"] for k in keys]
    lower = [cells[k]["median"] - cells[k]["min"] for k in keys]
    upper = [cells[k]["max"] - cells[k]["median"] for k in keys]
    ax.barh(
        range(len(keys)),
        medians,
        xerr=[lower, upper],
        color=[_colour(k) for k in keys],
        capsize=3,
    )
    ax.set_yticks(range(len(keys)), [cells[k]["label"] for k in keys], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10)
    for i, value in enumerate(medians):
        ax.text(value, i, f" {value:,.0f}", va="center", fontsize=7)


def _lateness(ax: Any, lateness: dict[str, Any]) -> None:
    names = {
        "sparse": "sparse, staggered",
        "sparse_1s": "200 due each second",
        "due_now": "created due now",
        "burst": "100k burst, 2 replicas",
    }
    keys = [k for k in names if "p50" in lateness.get(k, {})]
    for offset, (quantile, colour) in enumerate((("p50", OURS), ("p99", "#7fb2d9"))):
        values = [lateness[k][quantile]["median"] for k in keys]
        ax.barh(
            [i + offset * 0.4 for i in range(len(keys))],
            values,
            height=0.4,
            color=colour,
            label=quantile,
        )
    ax.set_xscale("log")
    ax.set_yticks([i + 0.2 for i in range(len(keys))], [names[k] for k in keys], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(50, color="#c0392b", linestyle="--", linewidth=0.8)
    ax.axvline(200, color="#c0392b", linestyle=":", linewidth=0.8)
    ax.axvline(10_000, color="#c0392b", linestyle="-.", linewidth=0.8)
    ax.set_xlabel("start lateness, ms (log); red lines: the 50 ms, 200 ms and 10 s goals")
    ax.set_title("Start lateness (database clock)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")


def draw(results: dict[str, Any], out: Path) -> Path:
    b = results["benchmarks"]
    meta = results["meta"]
    fig, axes = plt.subplots(3, 1, figsize=(9, 11), height_ratios=[1.0, 2.4, 1.2])
    if "cells" in b.get("planner", {}):
        cells = b["planner"]["cells"]
        _bars(axes[0], cells, list(cells), "runs materialised per second",
              "Planner: 100k schedules due at once")  # fmt: skip
    if "cells" in b.get("executor", {}):
        cells = b["executor"]["cells"]
        order = [
            "raw_b1", "ours_c1", "dtdb",
            "raw_b8", "ours_c8", "pgqueuer_b10", "procrastinate_c8",
            "raw_b32", "ours_c32", "raw_b100", "ours_c100", "pgqueuer_b100",
        ]  # fmt: skip
        _bars(axes[1], cells, order, "no-op runs per second (counted in the database)",
              "Executor: one worker process")  # fmt: skip
    if "sparse" in b.get("lateness", {}):
        _lateness(axes[2], b["lateness"])
    runs = ", ".join(f"{r['profile']} {r['started'][:16]}" for r in meta.get("runs", []))
    fig.suptitle(
        f"django-pgsched bench, runs {runs or meta['started'][:16]} UTC "
        f"({meta['profile']['reps']} reps; grey: raw-SQL limit, orange: peers)",
        fontsize=10,
    )
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


BEAT_STYLE = {
    "beat": ("celery beat + django-celery-beat", PEER, "o"),
    "ours_1": ("django-pgsched, 1 replica", OURS, "s"),
    "ours_2": ("django-pgsched, 2 replicas", "#7fb2d9", "^"),
}


def draw_beat(results: dict[str, Any], out: Path) -> Path:
    """``beat.png``: what each scheduler produced per minute, and how late, by size."""
    bench = results["benchmarks"]["beat"]
    sizes = sorted(int(n) for n in bench["sizes"])
    fig, (produced, late) = plt.subplots(1, 2, figsize=(11, 4.6))
    produced.plot(sizes, sizes, color=RAW, linestyle="--", linewidth=0.8, label="all of them")
    for key, (label, colour, marker) in BEAT_STYLE.items():
        cells = [(n, bench["sizes"][str(n)].get(key, {})) for n in sizes]
        cells = [(n, c) for n, c in cells if "produced_per_min" in c]
        if not cells:
            continue
        xs = [n for n, _ in cells]
        produced.plot(xs, [c["produced_per_min"] for _, c in cells], marker=marker,
                      color=colour, label=label)  # fmt: skip
        late.plot(xs, [c["lateness_s"]["max"] for _, c in cells], marker=marker, color=colour,
                  label=f"{label}: latest")  # fmt: skip
        late.plot(xs, [c["lateness_s"]["p50"] for _, c in cells], marker=marker, color=colour,
                  linestyle=":", label=f"{label}: median")  # fmt: skip
    for ax in (produced, late):
        ax.set_xscale("log")
        ax.set_xlabel("every-minute schedules")
    produced.set_yscale("log")
    produced.set_ylabel("occurrences produced per minute")
    produced.set_title("Produced: beat's sends at the broker, our runs", fontsize=10)
    produced.legend(fontsize=8)
    late.set_yscale("symlog", linthresh=1.0)
    late.axhline(0, color="#c0392b", linewidth=0.8)
    late.set_ylabel("seconds after the minute (negative: before; symlog)")
    late.set_title("Lateness against the boundary", fontsize=10)
    late.legend(fontsize=7)
    v = bench.get("versions", {})
    fig.suptitle(
        f"Every-minute schedules, {bench['minutes']} minutes each: celery "
        f"{v.get('celery', '?')} + django-celery-beat {v.get('django-celery-beat', '?')} "
        f"(Redis) and django-pgsched, run {results['meta']['started'][:16]} UTC",
        fontsize=10,
    )
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "beat.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    """Draw ``results.png`` (planner, executor, lateness) and ``beat.png``, from what is there."""
    from bench.report import merge

    only = None
    if argv[:1] == ["--only"]:
        only, argv = argv[1], argv[2:]
    *runs, out = argv
    results = merge([Path(r) for r in runs])
    b = results["benchmarks"]
    if only in (None, "results") and any(k in b for k in ("planner", "executor", "lateness")):
        print(draw(results, Path(out)))
    if only in (None, "beat") and "sizes" in b.get("beat", {}):
        print(draw_beat(results, Path(out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
