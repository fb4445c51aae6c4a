"""``manage.py pgsched_cron EXPR``: validate a cron expression and preview its next fire times.

With ``--tz`` the expression is read in that zone, and the preview goes on
across the zone's next transitions, marking the fire times a gap or a fold
moved, as the admin does.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_pgsched.timing import timetable, zoned, zones

TRANSITIONS = 2  # how many of the zone's next transitions the preview crosses
HORIZON = timedelta(days=3 * 366)  # ... looked for this far ahead


def aware(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date and time: {value!r}") from None
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{value!r} needs a UTC offset, e.g. {value}+00:00")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is out of range: must be from year 1 to 9999 in UTC"
        ) from None


def count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if not 1 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"must be from 1 to 1000, got {n}")
    return n


def line(note: zoned.Annotation) -> str:
    """A fire time in local time with its offset, then UTC; marked if a transition moved it."""
    local, at = note.local, note.at
    offset = local.strftime("%z")
    mark = "*" if note.affected else " "
    text = (
        f"{mark} {local:%Y-%m-%d %H:%M:%S} {local.tzname():<5} ({offset[:3]}:{offset[3:]})"
        f"  =  {at:%Y-%m-%d %H:%M:%S} UTC  {local:%a}"
    )
    return f"{text}  {note.note}" if note.note else text


class Command(BaseCommand):
    help = (
        "Check a cron expression (5 fields, or 6 with seconds first) and print its next fire "
        "times; with --tz, read it in that zone and preview across the zone's next transitions."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("expression", help='e.g. "0 30 9 * * MON-FRI" (quote it)')
        parser.add_argument(
            "-n",
            "--count",
            type=count,
            default=5,
            help="how many fire times to show (default: %(default)s)",
        )
        parser.add_argument(
            "--after",
            type=aware,
            default=None,
            help="start from this time (ISO 8601 with offset; default: now)",
        )
        parser.add_argument(
            "--tz",
            default=zones.DEFAULT_ZONE,
            help="IANA time zone to read the expression in (default: %(default)s)",
        )
        parser.add_argument(
            "--dst-gap",
            choices=zoned.DST_GAP_POLICIES,
            default=zoned.DST_GAP_DEFAULT,
            help="a skipped wall-clock time: shift or skip (default: %(default)s)",
        )
        parser.add_argument(
            "--dst-fold",
            choices=zoned.DST_FOLD_POLICIES,
            default=zoned.DST_FOLD_DEFAULT,
            help="a repeated wall-clock time: first, second or both (default: %(default)s)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self._preview(options)
        except (OverflowError, ValueError) as exc:  # arithmetic at the edge of year 9999
            after = options["after"].isoformat() if options["after"] else "now"
            raise CommandError(
                f"cannot preview after {after}: the times reach past the supported range "
                f"(year 1 to 9999 in UTC): {exc}"
            ) from None

    def _preview(self, options: dict[str, Any]) -> None:
        expression, tz = options["expression"], options["tz"]
        try:
            grid = zoned.cron(expression, tz, options["dst_gap"], options["dst_fold"])
        except timetable.TimetableError as exc:
            raise CommandError(str(exc)) from None
        after = options["after"] or datetime.now(UTC)
        try:
            times = grid.following(after, options["count"])
        except timetable.TimetableError as exc:
            raise CommandError(str(exc)) from None
        if not isinstance(grid, zoned.ZonedCronTimetable):
            self.stdout.write(f"{expression!r} is valid (UTC). Next fire times:")
            for t in times:
                self.stdout.write(f"  {t:%Y-%m-%d %H:%M:%S} UTC  ({t:%a})")
            return
        self.stdout.write(
            f"{expression!r} is valid, read in {tz} (dst_gap={options['dst_gap']}, "
            f"dst_fold={options['dst_fold']}). Next fire times:"
        )
        for t in times:
            self.stdout.write(f"  {line(grid.annotate(t))}")
        self._transitions(grid, after)

    def _transitions(self, grid: zoned.ZonedCronTimetable, after: datetime) -> None:
        lo = zones.from_datetime(after) + 1
        found = zones.transitions(grid.zone, lo, lo + HORIZON // timedelta(seconds=1))
        if not found:
            self.stdout.write(f"{grid.zone_name} has no transition in the next 3 years.")
            return
        self.stdout.write(f"Across the next transitions of {grid.zone_name}:")
        for tr in found[:TRANSITIONS]:
            at = zones.to_datetime(tr.at)
            span = timedelta(seconds=abs(tr.change))
            a = zones.to_datetime(tr.at + min(tr.before, tr.after))
            b = zones.to_datetime(tr.at + max(tr.before, tr.after) - 1)
            what = (
                f"clocks go forward {_length(span)}, {a:%H:%M:%S}–{b:%H:%M:%S} does not exist"
                if tr.change > 0
                else f"clocks go back {_length(span)}, {a:%H:%M:%S}–{b:%H:%M:%S} happens twice"
            )
            local = at.astimezone(grid.zone)
            self.stdout.write(f"  {local:%Y-%m-%d} at {at:%H:%M:%S} UTC: {what}")
            start = at - span if tr.change < 0 else at
            shown = grid.latest(start - timedelta(days=2), start, 2)
            try:
                shown += grid.following(start - timedelta(seconds=1), 4)
            except timetable.TimetableError:
                pass
            for t in shown:
                self.stdout.write(f"    {line(grid.annotate(t))}")
            for gap in grid.gap_skips(at, at + timedelta(seconds=1)):
                self.stdout.write(
                    f"    {gap.count} matching wall-clock time(s) skipped, "
                    f"{gap.first_local:%H:%M:%S}–{gap.last_local:%H:%M:%S} "
                    "(counted as skipped, reason dst_gap)"
                )


def _length(span: timedelta) -> str:
    minutes = int(span.total_seconds()) // 60
    hours, minutes = divmod(minutes, 60)
    return " ".join(
        w for w in (f"{hours} h" if hours else "", f"{minutes} min" if minutes else "") if w
    )
