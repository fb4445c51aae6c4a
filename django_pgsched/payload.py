"""Validation of job payloads (``kwargs``): plain JSON objects only.

A payload crosses process boundaries and is stored as ``jsonb``, so it must be
a JSON object that PostgreSQL can store and every replica can read back:
no NaN/Infinity, no NUL characters, no unpaired surrogates, bounded in size
and nesting, and keys that are valid Python identifiers (they become keyword
arguments).
"""

from __future__ import annotations

import json
import keyword
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError

MAX_KEYS = 1000


def _path(parts: list[str]) -> str:
    return "".join(parts) or "<root>"


def _scan(value: Any, depth: int, max_depth: int, parts: list[str], counter: list[int]) -> None:
    if depth > max_depth:
        raise ValidationError(
            f"payload: nesting deeper than {max_depth} levels at {_path(parts)}",
            code="payload_depth",
        )
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValidationError(
                f"payload: NaN/Infinity are not valid JSON (at {_path(parts)})", code="payload_nan"
            )
        if abs(value) >= 1e16:
            # json writes it with an exponent; jsonb keeps the decimal digits and it is read
            # back as a different integer
            raise ValidationError(
                f"payload: the float {value!r} at {_path(parts)} would not survive PostgreSQL "
                "jsonb unchanged (it is read back as an integer); send an int or a string",
                code="payload_float_range",
            )
        return
    if isinstance(value, str):
        _check_text(value, parts)
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _scan(item, depth + 1, max_depth, [*parts, f"[{index}]"], counter)
        return
    if isinstance(value, Mapping):
        counter[0] += len(value)
        if counter[0] > MAX_KEYS:
            raise ValidationError(
                f"payload: more than {MAX_KEYS} keys in total", code="payload_too_many_keys"
            )
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(
                    f"payload: object keys must be strings, got {key!r} at {_path(parts)}",
                    code="payload_key",
                )
            _check_text(key, [*parts, f".{key!r}"])
            _scan(item, depth + 1, max_depth, [*parts, f".{key}"], counter)
        return
    raise ValidationError(
        f"payload: must be JSON; {type(value).__name__} at {_path(parts)} is not a JSON type",
        code="payload_not_json",
    )


def _check_text(text: str, parts: list[str]) -> None:
    if "\x00" in text:
        raise ValidationError(
            f"payload: NUL characters are not allowed (PostgreSQL jsonb cannot store them), "
            f"at {_path(parts)}",
            code="payload_nul",
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(
            f"payload: invalid Unicode (unpaired surrogate) at {_path(parts)}",
            code="payload_unicode",
        ) from None


def check_json(value: Any, *, max_depth: int, root: str = "") -> None:
    """Raise ``ValidationError`` unless ``value`` is JSON that jsonb stores unchanged.

    ``root`` names the value in messages (``args``, ``kwargs``, ``return value``).
    """
    _scan(value, 1, max_depth, [root] if root else [], [0])


def validate_kwargs(value: Any, *, max_bytes: int, max_depth: int) -> dict[str, Any]:
    """Return ``value`` as a dict if it is an acceptable payload, else raise ``ValidationError``.

    ``value`` may be a mapping or a JSON text of an object.
    """
    if isinstance(value, (str, bytes, bytearray)):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValidationError(
                f"payload: must be JSON ({exc})", code="payload_not_json"
            ) from None
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(
            f"payload: must be a JSON object of keyword arguments, got {type(value).__name__}",
            code="payload_not_object",
        )
    _scan(value, 1, max_depth, [], [0])
    for key in value:
        if not key.isidentifier() or keyword.iskeyword(key) or not key.isascii():
            raise ValidationError(
                f"payload: key {key!r} is not a valid keyword-argument name",
                code="payload_key",
            )
    try:
        size = len(json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8"))
    except ValueError as exc:  # an integer too long to write as decimal digits
        raise ValidationError(
            f"payload: a number is too large ({exc})", code="payload_number"
        ) from None
    if size > max_bytes:
        raise ValidationError(
            f"payload: {size:,} bytes exceeds the limit of {max_bytes:,} bytes",
            code="payload_too_large",
        )
    return dict(value)
