"""Draw the jitter cell: claims per second after a 100k burst, with and without jitter.

``python -m bench.plot_jitter RESULT.json OUT.png`` with the bench's tools venv.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(source: str, out: str) -> None:
    data = json.loads(Path(source).read_text())
    cell = data["benchmarks"]["jitter"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for name, colour, label in (
        ("none", "#d08a3c", "no jitter"),
        ("jitter_60s", "#2f6f9f", "jitter = 60 s"),
    ):
        r = cell[name]
        series = sorted((int(k), v) for k, v in r["claims_per_second"].items())
        xs = [k for k, _ in series]
        ys = [v for _, v in series]
        ax.step(xs, ys, where="post", color=colour,
                label=f"{label}: peak {r['peak_claims_per_second']:,}/s")  # fmt: skip
    ax.set_xlabel("seconds after the 100,000 schedules fell due (database clock)")
    ax.set_ylabel("runs claimed per second")
    ax.set_title(f"100k burst, 2 replicas: claims per second ({data['meta']['started'][:10]})",
                 fontsize=10)  # fmt: skip
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:3])
