"""Keep the reference pages true to the code: a Sphinx extension that warns on drift.

Run with ``sphinx-build -W``, every warning here fails the build:

* ``reference/settings.md`` has one ``### `KEY` `` heading per field of
  :class:`django_pgsched.conf.Settings`, none more, each with a ``**Default:**``
  literal equal to the field's default;
* ``reference/checks.md`` names exactly the check ids that ``checks.py`` (and the
  django.tasks backend) emit;
* ``reference/metrics.md`` has one table row per metric, with its type and labels;
* ``reference/commands.md`` mentions every option of each management command;
* ``reference/models.md`` mentions every field of each model in its section;
* ``reference/signals.md`` and ``reference/cron.md`` name every signal and nickname;
* ``explanation/architecture.md`` has one table row per statement of ``queries.sql``;
* every page of the tutorials, how-to guides and explanations names only settings
  that exist (``PGSCHED["KEY"]``) and ``pgsched_...`` identifiers (metrics, tables,
  functions, indexes, channels) that the package's source still holds.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging

logger = logging.getLogger(__name__)

# options every Django management command has; the reference does not repeat them
DJANGO_OPTIONS = {
    "-h",
    "--help",
    "--version",
    "-v",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
}
COMMANDS = (
    "runscheduler",
    "pgsched_claims",
    "pgsched_sync",
    "pgsched_cron",
    "pgsched_run",
    "pgsched_import_beat",
    "pgsched_backfill",
)


def _sections(text: str, level: str) -> dict[str, str]:
    """``{heading text: body}`` for the headings of one level (``"##"`` or ``"###"``)."""
    parts = re.split(rf"^{level} (.+)$", text, flags=re.MULTILINE)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def _code(title: str) -> str:
    """The text of a heading written as inline code: ``### `KEY` `` gives ``KEY``."""
    return title.strip().strip("`")


def check_settings(text: str, warn: Callable[[str], None]) -> None:
    from django_pgsched.conf import Settings

    fields = {f.name: f for f in dataclasses.fields(Settings)}
    sections = {_code(t): body for t, body in _sections(text, "###").items()}
    for missing in sorted(set(fields) - set(sections)):
        warn(f"setting {missing} has no heading")
    for extra in sorted(set(sections) - set(fields)):
        warn(f"heading {extra!r} is not a setting")
    for name, body in sections.items():
        if name not in fields:
            continue
        match = re.search(r"\*\*Default:\*\* `([^`]+)`", body)
        if match is None:
            warn(f"setting {name} states no **Default:** `...`")
            continue
        f = fields[name]
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        names = {"__builtins__": {}, "timedelta": timedelta, "None": None}
        try:
            stated = eval(match[1], names)  # noqa: S307 - our own page, restricted names
        except Exception as exc:
            warn(f"setting {name}: cannot read the default {match[1]!r} ({exc})")
            continue
        if stated != default or type(stated) is not type(default):
            warn(f"setting {name}: the page says {match[1]}, the code says {default!r}")
    sections = {_code(t): body for t, body in _sections(text, "###").items()}
    check_http_settings(sections.get("HTTP", ""), warn)
    check_claims_settings(sections.get("CLAIMS", ""), warn)


def check_http_settings(text: str, warn: Callable[[str], None]) -> None:
    """``PGSCHED["HTTP"]``: one ``#### `KEY` `` per key, its default as a user would write it."""
    from django_pgsched.delivery.settings import HttpSettings, build_http_settings

    _check_nested("HTTP", HttpSettings, build_http_settings, text, warn)


def check_claims_settings(text: str, warn: Callable[[str], None]) -> None:
    """``PGSCHED["CLAIMS"]``: one ``#### `KEY` `` per key, its default as a user would write it."""
    from django_pgsched.broker.settings import ClaimsSettings, build_claims_settings

    _check_nested("CLAIMS", ClaimsSettings, build_claims_settings, text, warn)


def _check_nested(
    key: str, cls: type, build: Callable[[Any], Any], text: str, warn: Callable[[str], None]
) -> None:
    # a field read from another key (metadata "derived": not a key of its own) has no heading
    fields = {f.name for f in dataclasses.fields(cls) if not f.metadata.get("derived")}
    sections = {_code(t): body for t, body in _sections(text, "####").items()}
    for missing in sorted(fields - set(sections)):
        warn(f"setting {key}[{missing!r}] has no heading")
    for extra in sorted(set(sections) - fields):
        warn(f"heading {extra!r} is not a key of {key}")
    defaults = cls()
    for name, body in sections.items():
        match = re.search(r"\*\*Default:\*\* `([^`]+)`", body)
        if name not in fields or match is None:
            if name in fields:
                warn(f"setting {key}[{name!r}] states no **Default:** `...`")
            continue
        names = {"__builtins__": {}, "timedelta": timedelta, "None": None}
        try:
            stated = eval(match[1], names)  # noqa: S307 - our own page, restricted names
            typed = getattr(build({name: stated}), name)
        except Exception as exc:
            warn(f"setting {key}[{name!r}]: cannot read the default {match[1]!r} ({exc})")
            continue
        if typed != getattr(defaults, name):
            warn(f"setting {key}[{name!r}]: the page says {match[1]}, the code differs")


def check_checks(text: str, warn: Callable[[str], None]) -> None:
    import inspect

    from django_pgsched.ops import checks

    sources = inspect.getsource(checks)
    try:  # the django.tasks backend's own checks (Django's framework runs them)
        from django_pgsched.tasks import backend

        sources += inspect.getsource(backend)
    except ImportError:  # no task framework installed
        pass
    emitted = set(re.findall(r'id="(pgsched\.[EW]\d{3})"', sources))
    documented = set(re.findall(r"^## `(pgsched\.[EW]\d{3})`", text, flags=re.MULTILINE))
    for missing in sorted(emitted - documented):
        warn(f"check {missing} has no heading")
    for extra in sorted(documented - emitted):
        warn(f"check {extra} is documented but never emitted")


def _metric_rows(text: str) -> dict[str, tuple[str, set[str]]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`pgsched_\w+`", cells[0]):
            labels = set(re.findall(r"`(\w+)`", cells[2]))
            rows[cells[0].strip("`")] = (cells[1], labels)
    return rows


def check_metrics(text: str, warn: Callable[[str], None]) -> None:
    import inspect

    from prometheus_client import CollectorRegistry

    from django_pgsched.ops import metrics

    expected: dict[str, tuple[str, set[str]]] = {}
    for value in vars(metrics.Metrics(CollectorRegistry())).values():
        kind = getattr(value, "_type", None)
        if kind in ("counter", "histogram"):
            name = value._name + ("_total" if kind == "counter" else "")
            expected[name] = (kind, set(value._labelnames))
    from django_pgsched.broker import metrics as broker_metrics

    for source in (inspect.getsource(metrics), inspect.getsource(broker_metrics)):
        families = re.findall(
            r'(Gauge|Counter)MetricFamily\(\s*"(\w+)",\s*"[^"]*",\s*(?:labels=\[([^\]]*)\])?',
            source,
        )
        for family, name, labels in families:
            kind = "gauge" if family == "Gauge" else "counter"
            expected[name + ("_total" if kind == "counter" else "")] = (
                kind,
                {label.strip().strip('"') for label in labels.split(",") if label},
            )
    rows = _metric_rows(text)
    for name in sorted(set(expected) - set(rows)):
        warn(f"metric {name} has no table row")
    for name in sorted(set(rows) - set(expected)):
        warn(f"metric {name} is documented but not exported")
    for name, (kind, labels) in expected.items():
        if name in rows and rows[name] != (kind, labels):
            warn(f"metric {name}: the page says {rows[name]}, the code says {(kind, labels)}")


def check_commands(text: str, warn: Callable[[str], None]) -> None:
    from django.core.management import load_command_class

    sections = {_code(t): body for t, body in _sections(text, "##").items()}
    for command in COMMANDS:
        body = sections.get(command)
        if body is None:
            warn(f"command {command} has no section")
            continue
        parser = load_command_class("django_pgsched", command).create_parser("manage.py", command)
        for action in parser._actions:
            for option in action.option_strings:
                if option not in DJANGO_OPTIONS and f"`{option}" not in body:
                    warn(f"{command}: option {option} is not documented")
            if not action.option_strings and f"`{action.dest.upper()}`" not in body:
                warn(f"{command}: argument {action.dest.upper()} is not documented")


def check_models(text: str, warn: Callable[[str], None]) -> None:
    from django_pgsched.models import Attempt, Breaker, JobRun, Schedule

    sections = {_code(t): body for t, body in _sections(text, "##").items()}
    for model in (Schedule, JobRun, Attempt, Breaker):
        body = sections.get(model.__name__)
        if body is None:
            warn(f"model {model.__name__} has no section")
            continue
        for field in model._meta.concrete_fields:
            if field.name != "id" and f"`{field.name}`" not in body:
                warn(f"{model.__name__}.{field.name} is not documented")


def check_names(names: list[str], what: str) -> Callable[[str, Callable[[str], None]], None]:
    def check(text: str, warn: Callable[[str], None]) -> None:
        for name in names:
            if f"`{name}`" not in text:
                warn(f"{what} {name} is not documented")

    return check


def _signals() -> list[str]:
    from django.dispatch import Signal

    from django_pgsched import events

    return [name for name, value in vars(events).items() if isinstance(value, Signal)]


def _nicknames() -> list[str]:
    from django_pgsched.timing import cron

    return list(cron._NICKNAMES)


def check_statements(text: str, warn: Callable[[str], None]) -> None:
    from django_pgsched.engine import queries

    named = set(queries.names())
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.MULTILINE))
    for missing in sorted(named - rows):
        warn(f"SQL statement {missing} has no table row")
    for extra in sorted(rows - named):
        warn(f"SQL statement {extra} is documented but not in queries.sql")


_SOURCE: str | None = None
# tables a design page proposes (explanation/live-run-storage.md), not built
PROPOSED = {"pgsched_live_run", "pgsched_run_key"}


def _source() -> str:
    """The package's Python, SQL and templates, as one text (for names still in use)."""
    global _SOURCE
    if _SOURCE is None:
        import django_pgsched

        root = Path(django_pgsched.__file__).parent
        _SOURCE = "\n".join(
            path.read_text(encoding="utf-8")
            for pattern in ("*.py", "*.sql", "*.html")
            for path in sorted(root.rglob(pattern))
        )
    return _SOURCE


def check_named_things(text: str, warn: Callable[[str], None]) -> None:
    """The settings keys and ``pgsched_...`` names a guide mentions still exist."""
    from django_pgsched.conf import Settings

    keys = {f.name for f in dataclasses.fields(Settings)}
    for key in sorted(set(re.findall(r'PGSCHED\["(\w+)"\]', text))):
        if key not in keys:
            warn(f'setting PGSCHED["{key}"] does not exist')
    source = _source()
    for name in sorted(set(re.findall(r"`(pgsched_[a-z0-9_]+)", text))):
        # a month's table or index is its parent's name and _pYYYYMM
        base = re.sub(r"_p(\d{6}|yyyymm|YYYYMM)$", "", name)
        # a counter's or histogram's samples: prometheus_client adds the suffix
        base = re.sub(r"_(total|bucket|count|sum|created)$", "", base)
        if base not in source and name not in PROPOSED:
            warn(f"{name} is named here but not in the package's source")


def _guides() -> list[str]:
    docs = Path(__file__).parent.parent
    return sorted(
        str(path.relative_to(docs))
        for folder in ("tutorial", "how-to", "explanation")
        for path in (docs / folder).glob("*.md")
    )


def _pages() -> dict[str, Callable[[str, Callable[[str], None]], None]]:
    pages: dict[str, Callable[[str, Callable[[str], None]], None]] = {
        "reference/settings.md": check_settings,
        "reference/checks.md": check_checks,
        "reference/metrics.md": check_metrics,
        "reference/commands.md": check_commands,
        "reference/models.md": check_models,
        "reference/signals.md": check_names(_signals(), "signal"),
        "reference/cron.md": check_names(_nicknames(), "nickname"),
    }
    for guide in _guides():
        pages[guide] = (
            _both(check_statements, check_named_things)
            if guide == "explanation/architecture.md"
            else check_named_things
        )
    return pages


def _both(
    *checks: Callable[[str, Callable[[str], None]], None],
) -> Callable[[str, Callable[[str], None]], None]:
    def check(text: str, warn: Callable[[str], None]) -> None:
        for one in checks:
            one(text, warn)

    return check


def always_outdated(
    app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    """Re-read the checked pages on every build, so the check runs even when only code changed."""
    return [page.removesuffix(".md") for page in _pages()]


def check_consistency(app: Sphinx, env: BuildEnvironment) -> None:
    for page, check in _pages().items():
        path = Path(app.srcdir) / page

        def warn(message: str, docname: str = page.removesuffix(".md")) -> None:
            logger.warning("%s (docs drifted from the code)", message, location=docname)

        if not path.exists():
            warn("page is missing")
            continue
        check(path.read_text(encoding="utf-8"), warn)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("env-get-outdated", always_outdated)
    app.connect("env-check-consistency", check_consistency)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
