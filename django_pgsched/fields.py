"""Model fields that pages can read even when a stored value is out of Python's reach.

A row written before the database's bounds (or with them dropped) may hold a time
``datetime`` cannot represent (year 1 BC, year 10000), an interval ``timedelta``
cannot (a hundred million years), or JSON Python cannot decode (5,000 digits,
3,000 levels deep). Reading such a row raises in psycopg or ``json`` and takes the
whole query with it: an admin list of 100 rows answers 500 for one of them.

Inside :func:`unreadable_as_none` (the admin's views), these fields read such a
value as ``None``: a time or interval out of range is replaced in the ``SELECT``
itself (``CASE WHEN ... THEN col END``), JSON that does not decode is caught.
:func:`unreadable_columns` says which columns of one row were replaced, so a page
can name them. Outside the context every read is Django's own: the engine, the
API and user code never see a stored value silently changed.

The fields deconstruct as Django's own, so they change no migration.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from django.db import connections, models

from .bounds import JSON_MAX_DEPTH

_TOLERANT: ContextVar[bool] = ContextVar("pgsched_unreadable_as_none", default=False)

# what Python reads back (a day inside datetime's years on either side, so a display
# in any zone stays inside them too; timedelta's days less one)
TIME_READABLE = "{col} >= '0001-01-02 00:00:00+00' AND {col} < '9999-12-31 00:00:00+00'"
INTERVAL_READABLE = "{col} >= interval '-999999998 days' AND {col} <= interval '999999998 days'"


@contextmanager
def unreadable_as_none() -> Iterator[None]:
    """Within: values Python cannot read are read as ``None`` (see the module)."""
    token = _TOLERANT.set(True)
    try:
        yield
    finally:
        _TOLERANT.reset(token)


def _guarded(predicate: str, sql: str, params: Sequence[Any]) -> tuple[str, Sequence[Any]]:
    if not _TOLERANT.get():
        return sql, params
    wrapped = predicate.format(col=sql)
    return f"CASE WHEN {wrapped} THEN {sql} END", (
        tuple(params) * (wrapped.count(sql) + 1) if params else params
    )


class _AsDjangos:
    """Deconstructs as the Django field it extends: the migrations never name ours."""

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()  # type: ignore[misc]
        django_field = next(c for c in type(self).__mro__ if c.__module__.startswith("django."))
        return name, f"django.db.models.{django_field.__name__}", args, kwargs


class _InRange(_AsDjangos):
    """Reads a value outside :attr:`readable` (a SQL predicate) as ``None``, when tolerant."""

    readable: str

    def select_format(self, compiler: Any, sql: str, params: Any) -> tuple[str, Any]:
        sql, params = super().select_format(compiler, sql, params)  # type: ignore[misc]
        return _guarded(self.readable, sql, params)


class _TimeField(_InRange, models.DateTimeField):  # type: ignore[type-arg]
    """A ``DateTimeField`` read as ``None`` out of ``datetime``'s range (see the module)."""

    readable = TIME_READABLE


class _IntervalField(_InRange, models.DurationField):  # type: ignore[type-arg]
    """A ``DurationField`` read as ``None`` out of ``timedelta``'s range (see the module)."""

    readable = INTERVAL_READABLE


class _PayloadField(_AsDjangos, models.JSONField):
    """A ``JSONField`` read as ``None`` when it does not decode (see the module)."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        try:
            return super().from_db_value(value, expression, connection)
        except (ValueError, RecursionError):
            if _TOLERANT.get():
                return None
            raise


# to type checkers, Django's own fields (django-stubs types their values); at run time these
if TYPE_CHECKING:
    TimeField = models.DateTimeField
    IntervalField = models.DurationField
    PayloadField = models.JSONField
else:
    TimeField, IntervalField, PayloadField = _TimeField, _IntervalField, _PayloadField


def unreadable_columns(model: type[models.Model], pk: Any, using: str = "default") -> list[str]:
    """The fields of one row that :func:`unreadable_as_none` may read as ``None``.

    A time or interval outside the range above; JSON nested deeper than
    ``bounds.JSON_MAX_DEPTH`` or holding a number of 10^4300 or more (what the
    database's bounds refuse, and what Python's ``json`` cannot read is among them).
    """
    quote = connections[using].ops.quote_name
    checks: list[tuple[str, str]] = []
    for field in model._meta.concrete_fields:
        column = quote(str(field.column))
        if isinstance(field, _TimeField):
            readable = TIME_READABLE.format(col=column)
        elif isinstance(field, _IntervalField):
            readable = INTERVAL_READABLE.format(col=column)
        elif isinstance(field, _PayloadField):
            readable = (
                f"NOT jsonb_path_exists({column}, 'strict $.**{{{JSON_MAX_DEPTH + 1} to last}}')"
                f' AND NOT jsonb_path_exists({column}, \'strict $.** ? (@.type() == "number"'
                " && (@ >= 1e4300 || @ <= -1e4300))')"
            )
        else:
            continue
        checks.append((field.name, f"{column} IS NULL OR ({readable})"))
    if not checks:
        return []
    select = ", ".join(check for _name, check in checks)
    table, key = quote(model._meta.db_table), quote(str(model._meta.pk.column))
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT {select} FROM {table} WHERE {key} = %s", [pk])
        row = cursor.fetchone()
    if row is None:
        return []
    return [name for (name, _check), ok in zip(checks, row, strict=True) if not ok]
