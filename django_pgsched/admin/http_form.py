"""The request of a ``pgsched.http`` schedule as form fields, instead of a JSON box.

The fields map one to one onto the job's kwargs (``url``, ``method``,
``headers``, ``body``, ``timeout``, ``signing_secret``, ``retry_statuses``);
the form builds the kwargs from them and checks them with the job's own check
(:func:`django_pgsched.delivery.request.parse_request`), so a URL that can be
refused without the network (a private address, a port or scheme not
allowed, credentials, an internal name) is refused when the form is saved,
with the message next to its field.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from ..conf import get_settings
from ..delivery.job import JOB_NAME
from ..delivery.request import METHODS, RETRYABLE_4XX, parse_request

FIELDS = (
    "http_url",
    "http_method",
    "http_headers",
    "http_body",
    "http_body_is_json",
    "http_timeout",
    "http_signing_secret",
    "http_retry_statuses",
)
# a message's first word names the kwarg; it is shown next to its field
_FIELD_OF = {
    "url": "http_url",
    "method": "http_method",
    "headers": "http_headers",
    "body": "http_body",
    "timeout": "http_timeout",
    "signing_secret": "http_signing_secret",
    "retry_statuses": "http_retry_statuses",
}


def _secret_choices() -> list[tuple[str, str]]:
    names = sorted(get_settings().http.SIGNING_SECRETS)
    return [("", "— not signed —"), *((n, n) for n in names)]


class HttpRequestFields(forms.Form):
    """The fields, declared here and inherited by the schedule form."""

    http_url = forms.CharField(
        label="URL",
        required=False,
        max_length=2048,
        widget=forms.TextInput(attrs={"size": 80, "spellcheck": "false"}),
        help_text="https://… (or http://). Checked when saved and again at every attempt.",
    )
    http_method = forms.ChoiceField(
        label="Method", choices=[(m, m) for m in METHODS], initial="POST", required=False
    )
    http_headers = forms.CharField(
        label="Headers",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60, "spellcheck": "false"}),
        help_text="One 'Name: value' per line.",
    )
    http_body = forms.CharField(
        label="Body",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "spellcheck": "false"}),
    )
    http_body_is_json = forms.BooleanField(
        label="Body is JSON",
        required=False,
        initial=True,
        help_text="Sent as application/json (compact). Unticked: sent as text/plain.",
    )
    http_timeout = forms.FloatField(
        label="Request timeout (s)",
        required=False,
        min_value=0.1,
        help_text="Empty: PGSCHED['HTTP']['TIMEOUT']. At most the schedule's timeout.",
    )
    http_signing_secret = forms.ChoiceField(
        label="Signing secret",
        required=False,
        help_text="A name from PGSCHED['HTTP']['SIGNING_SECRETS'] (Standard Webhooks).",
    )
    http_retry_statuses = forms.TypedMultipleChoiceField(
        label="Retry these 4xx",
        required=False,
        coerce=int,
        choices=[(s, str(s)) for s in RETRYABLE_4XX],
        widget=forms.CheckboxSelectMultiple,
        help_text="Other 4xx answers fail the run without retrying.",
    )


def _headers_text(headers: Any) -> str:
    if not isinstance(headers, dict):
        return ""
    return "\n".join(f"{k}: {v}" for k, v in headers.items())


def initial_from(kwargs: Any) -> dict[str, Any]:
    """The form fields' initial values from a schedule's kwargs."""
    if not isinstance(kwargs, dict):
        return {}
    body = kwargs.get("body")
    return {
        "http_url": kwargs.get("url", ""),
        "http_method": kwargs.get("method", "POST"),
        "http_headers": _headers_text(kwargs.get("headers")),
        "http_body": body if isinstance(body, str) else "" if body is None else json.dumps(body),
        "http_body_is_json": not isinstance(body, str),
        "http_timeout": kwargs.get("timeout"),
        "http_signing_secret": kwargs.get("signing_secret") or "",
        "http_retry_statuses": kwargs.get("retry_statuses") or [],
    }


def kwargs_from(data: dict[str, Any]) -> dict[str, Any]:
    """The job's kwargs from the cleaned fields; ValidationError keyed by field."""
    errors: dict[str, list[str]] = {}
    kwargs: dict[str, Any] = {"url": (data.get("http_url") or "").strip()}
    method = data.get("http_method") or "POST"
    if method != "POST":
        kwargs["method"] = method
    headers: dict[str, str] = {}
    for number, line in enumerate((data.get("http_headers") or "").splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep:
            errors.setdefault("http_headers", []).append(
                f"headers: line {number} is not 'Name: value'"
            )
            continue
        headers[name.strip()] = value.strip()
    if headers:
        kwargs["headers"] = headers
    body = data.get("http_body") or ""
    if body:
        if data.get("http_body_is_json"):
            try:
                kwargs["body"] = json.loads(body)
            except ValueError as exc:
                errors.setdefault("http_body", []).append(f"body: not valid JSON ({exc})")
        else:
            kwargs["body"] = body
    if data.get("http_timeout") is not None:
        kwargs["timeout"] = data["http_timeout"]
    if data.get("http_signing_secret"):
        kwargs["signing_secret"] = data["http_signing_secret"]
    if data.get("http_retry_statuses"):
        kwargs["retry_statuses"] = sorted(data["http_retry_statuses"])
    if errors:
        raise ValidationError(errors)
    return kwargs


def add_fields(form: forms.ModelForm) -> None:  # type: ignore[type-arg]
    """Offer the secrets' names; fill the fields from a ``pgsched.http`` schedule's kwargs."""
    form.fields["http_signing_secret"].choices = _secret_choices()  # type: ignore[attr-defined]
    job = form.instance.job if form.instance.pk else form.initial.get("job")
    if job == JOB_NAME and not form.is_bound:
        form.initial.update(initial_from(form.instance.kwargs or {}))


def clean(form: forms.ModelForm, cleaned: dict[str, Any]) -> None:  # type: ignore[type-arg]
    """For a ``pgsched.http`` schedule with a URL, the kwargs come from the fields."""
    if cleaned.get("job") != JOB_NAME or not cleaned.get("http_url"):
        return
    try:
        kwargs = kwargs_from(cleaned)
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            for message in messages:
                form.add_error(field, message)
        return
    try:
        parse_request(kwargs, get_settings().http, run_timeout=cleaned.get("timeout"))
    except ValidationError as exc:
        for message in exc.messages:
            form.add_error(_FIELD_OF.get(message.split(":", 1)[0], "http_url"), message)
        return
    cleaned["kwargs"] = kwargs
    form.instance.kwargs = kwargs  # also when the kwargs box is not on the form


def changed(fields: list[str]) -> list[str]:
    """A changed request field changes the kwargs (what the admin saves)."""
    if any(name in fields for name in FIELDS) and "kwargs" not in fields:
        return [*fields, "kwargs"]
    return fields
