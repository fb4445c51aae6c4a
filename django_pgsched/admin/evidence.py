"""An attempt's ``detail`` on the run's page: for ``pgsched.http``, the delivery's evidence.

Everything a server sent back is untrusted: it is shown as escaped text in a
``<pre>``, never rendered.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString


def _ms(value: Any) -> str:
    return "—" if value is None else f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"


def render(detail: dict[str, Any] | None) -> SafeString:
    if not detail:
        return format_html("{}", "—")
    if detail.get("kind") != "http":
        return format_html("<pre>{}</pre>", json.dumps(detail, indent=1, sort_keys=True)[:4000])
    if detail.get("refused"):
        return format_html('<span class="pgsched-error">not sent: {}</span>', detail["refused"])
    timings = detail.get("timings_ms") or {}
    status = detail.get("status")
    summary = format_html(
        "{} {} · {} · connect {} · first byte {} · total {}{}",
        status if status is not None else (detail.get("error") or "no answer"),
        detail.get("reason") or "",
        detail.get("address") or "—",
        _ms(timings.get("connect")),
        _ms(timings.get("first_byte")),
        _ms(timings.get("total")),
        f" · {detail['error']}" if detail.get("error") and status is not None else "",
    )
    headers = format_html_join(
        "", "<div>{}: {}</div>", sorted((detail.get("headers") or {}).items())
    )
    body = detail.get("body_excerpt") or ""
    more = " (truncated)" if detail.get("body_truncated") else ""
    redirects = format_html_join(
        "",
        "<div>{} → {}</div>",
        ((r.get("status"), r.get("to")) for r in detail.get("redirects") or []),
    )
    return format_html(
        '<details class="pgsched-evidence"><summary>{}</summary>{}{}'
        "<div>body ({}){}:</div><pre>{}</pre>{}</details>",
        summary,
        redirects,
        headers,
        detail.get("body_encoding", "utf-8"),
        more,
        body,
        format_html("<div>{}</div>", detail["message"]) if detail.get("message") else "",
    )
