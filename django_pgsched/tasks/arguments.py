"""A task's arguments and return value: JSON that PostgreSQL's jsonb keeps unchanged.

The framework refuses what JSON cannot carry with ``TypeError`` (a type JSON
has no word for: ``datetime``, ``Decimal``, a model instance) and
``ValueError`` (a value it cannot carry: undecodable ``bytes``); this module
raises the same two, for the same reasons, and adds what jsonb cannot store
(NaN and Infinity, NUL characters, unpaired surrogates, non-string object
keys, floats that come back as integers) and the size and depth limits of
``PGSCHED["MAX_PAYLOAD_BYTES"]`` and ``PGSCHED["MAX_PAYLOAD_DEPTH"]``. Every
message names where the bad value is (``args[0]``, ``kwargs.when``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError

from ..conf import get_settings
from ..payload import check_json
from .compat import normalize_json

# payload codes that mean "a type JSON has no word for" (TypeError); the rest are values
TYPE_CODES = frozenset({"payload_not_json", "payload_key"})


def _raise(exc: ValidationError, where: str) -> None:
    message = exc.messages[0].replace("payload: ", "", 1)
    text = f"{where} of a task must be JSON: {message}"
    if exc.code in TYPE_CODES:
        raise TypeError(text) from None
    raise ValueError(text) from None


def _check(value: Any, root: str, where: str) -> None:
    settings = get_settings()
    try:
        check_json(value, max_depth=settings.MAX_PAYLOAD_DEPTH, root=root)
    except ValidationError as exc:
        _raise(exc, where)


def _size(value: Any, where: str) -> str:
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except ValueError as exc:  # an integer too long to write out
        raise ValueError(f"{where} of a task must be JSON: {exc}") from None
    limit = get_settings().MAX_PAYLOAD_BYTES
    size = len(text.encode("utf-8"))
    if size > limit:
        raise ValueError(
            f"{where} of a task must be JSON of at most {limit:,} bytes "
            f'(PGSCHED["MAX_PAYLOAD_BYTES"]); got {size:,}'
        )
    return text


def _locate(value: Any, path: str) -> str:
    """Where in ``value`` the framework's ``normalize_json`` gives up (a path like ``[0].when``)."""
    if isinstance(value, dict):
        items: list[tuple[str, Any]] = []
        for key, item in value.items():
            items += [(f"{path}.<key {key!r}>", key), (f"{path}.{key}", item)]
    elif isinstance(value, (list, tuple)):
        items = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
    else:
        return path
    for where, item in items:
        try:
            normalize_json(item)
        except (TypeError, ValueError):
            return _locate(item, where)
    return path


def _normalize(value: Any, root: str, where: str) -> Any:
    try:
        return normalize_json(value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(
            f"{where} of a task must be JSON: {exc} at {_locate(value, root)}"
        ) from None


def clean_call(args: Any, kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """``(args, kwargs)`` as JSON, or ``TypeError``/``ValueError`` saying what is wrong."""
    args = _normalize(list(args), "args", "the arguments")
    kwargs = _normalize(dict(kwargs), "kwargs", "the arguments")
    _check(args, "args", "the arguments")
    _check(kwargs, "kwargs", "the arguments")
    _size({"args": args, "kwargs": kwargs}, "the arguments")
    return args, kwargs


def dump_return_value(value: Any) -> str | None:
    """The JSON text to store for what a task returned (``None`` for ``None``)."""
    if value is None:
        return None
    value = _normalize(value, "<return value>", "the return value")
    _check(value, "", "the return value")
    return _size(value, "the return value")
