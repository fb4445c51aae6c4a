"""Small statistics: medians, spreads and percentiles, and a cell of repeated measurements."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median and spread (min, max, and max−min relative to the median) of repetitions."""
    clean = [v for v in values if v is not None and not math.isnan(v)]
    if not clean:
        return {"values": list(values), "median": None, "min": None, "max": None, "spread": None}
    median = statistics.median(clean)
    lo, hi = min(clean), max(clean)
    return {
        "values": [round(v, 6) for v in values],
        "median": median,
        "min": lo,
        "max": hi,
        "spread": (hi - lo) / median if median else None,
    }


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, Any]:
    """Per-repetition ratios (rep i over rep i, measured minutes apart), summarised."""
    pairs = zip(numerators, denominators, strict=False)
    return summary([a / b if a is not None and b else math.nan for a, b in pairs])
