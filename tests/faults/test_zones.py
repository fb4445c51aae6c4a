"""Full tier: the zoned timetable against the oracle at every transition, and a bigger profile.

``scripts/faults`` runs these (``PGSCHED_FULL_FAULTS=1``); the quick tier runs
the same property test with a few dozen examples (tests/unit/test_zoned.py).

- **Every transition**: each offset change of every zone in the tz database
  from 1970 to 2037 (zones with identical transitions are checked once), for
  all six policy combinations, with a pattern aimed at the transition's own
  gap or fold (every 30 s of the hour it starts in).
- **The property test** with 3,000 examples.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings

from django_pgsched.timing import zones
from tests.unit import test_zoned

pytestmark = [pytest.mark.full, pytest.mark.timeout(3600)]
EXAMPLES = int(os.environ.get("PGSCHED_TZ_FULL_EXAMPLES", "3000"))


def test_every_transition_1970_to_2037_matches_the_oracle() -> None:
    lo, hi = zones.year_start(1970), zones.year_start(2038)
    seen: set[tuple[zones.Transition, ...]] = set()
    checked, started = 0, time.monotonic()
    for name in sorted(zones.known_zones()):
        found = tuple(zones.transitions(zones.get_zone(name), lo, hi))
        if found in seen:
            continue  # a link or a zone that agrees with one already checked
        seen.add(found)
        for tr in found:
            at = zones.to_datetime(tr.at)
            span = timedelta(seconds=abs(tr.change))
            local = zones.to_datetime(tr.at + min(tr.before, tr.after)).replace(tzinfo=None)
            # every 30 s of the hour where the gap or fold starts, and 10 minutes either side
            test_zoned.check(
                f"*/30 * {local.hour} * * *", name, at - span - MARGIN, at + span + MARGIN
            )
            checked += 1
    print(
        f"\n{checked} transitions of {len(seen)} distinct zones, six policy combinations each, "
        f"in {time.monotonic() - started:.0f} s"
    )
    assert checked > 10_000


MARGIN = timedelta(minutes=10)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(test_zoned.cases())
def test_matches_the_oracle_at_transitions_many_examples(
    case: tuple[str, str, object, object],
) -> None:
    test_zoned.check(*case)  # type: ignore[arg-type]
