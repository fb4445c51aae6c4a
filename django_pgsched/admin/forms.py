"""The schedule form of the admin: a job chosen from the registry, the core's validation.

Validation is :meth:`Schedule.clean`'s (its messages name the field and the
value); the form only narrows the inputs: the job is a choice among the
registered jobs (nothing is imported from a typed path), and status is not a
field (pause and resume are their own permission-gated operations).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms

from ..models import DEFINITION_FIELDS, Schedule
from ..registry import all_jobs
from ..statuses import OverlapPolicy
from ..timing import zoned, zones
from . import http_form

EDITABLE_FIELDS = ("name", *DEFINITION_FIELDS)


def _task_label(func: object) -> str:
    """A django.tasks task's entry: the backend it runs on (the tasks room registers these)."""
    from ..tasks.index import get_task  # only reached when the task framework is installed

    task = get_task(f"{getattr(func, '__module__', '')}.{getattr(func, '__qualname__', '')}")
    return f"django.tasks task, backend {task.backend}" if task is not None else "django.tasks task"


def job_choices(current: str | None = None) -> list[tuple[str, str]]:
    """The registered jobs, plus ``current`` (marked) if it is no longer registered."""
    jobs = all_jobs()
    choices = [("", "---------")]
    if current and current not in jobs:
        choices.append((current, f"{current} (not registered)"))
    for name, spec in sorted(jobs.items()):
        defaults = [
            _task_label(spec.func) if spec.runner is not None else "",
            f"queue {spec.queue}" if spec.queue else "",
            f"{spec.max_attempts} attempts" if spec.max_attempts else "",
        ]
        label = ", ".join(d for d in defaults if d)
        choices.append((name, f"{name} ({label})" if label else name))
    return choices


class ZoneInput(forms.TextInput):
    """A text box that suggests the tz database's names as one types (an HTML datalist)."""

    template_name = "admin/pgsched/widgets/zone.html"

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, {**(attrs or {}), "list": f"{name}-zones"})
        context["zones"] = sorted(zones.known_zones())
        context["list_id"] = f"{name}-zones"
        return context


# what an empty box means: the model's defaults (a form posted without these fields,
# by a script or an older page, keeps today's behaviour)
EMPTY_MEANS = {
    "timezone": zones.DEFAULT_ZONE,
    "dst_gap": zoned.DST_GAP_DEFAULT,
    "dst_fold": zoned.DST_FOLD_DEFAULT,
    "jitter": timedelta(0),
    "overlap": OverlapPolicy.ALLOW,
}


class PayloadField(forms.JSONField):
    """A JSON box whose text Python cannot read back is a form error, not a 500.

    Django's JSON form field turns only ``JSONDecodeError`` into a form error; a
    5,000-digit integer raises a bare ``ValueError`` (Python's integer size limit),
    and a payload nested thousands deep a ``RecursionError``.
    """

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except (ValueError, RecursionError) as exc:
            if isinstance(exc, forms.ValidationError):
                raise
            raise forms.ValidationError(
                f"kwargs: cannot be read as JSON ({exc})", code="invalid"
            ) from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except (ValueError, RecursionError):
            return forms.fields.InvalidJSONInput(data)


class ScheduleForm(http_form.HttpRequestFields, forms.ModelForm):  # type: ignore[type-arg]
    job = forms.ChoiceField(
        help_text="A job registered with @job, or a django.tasks task (task:<module path>)."
    )

    class Meta:
        model = Schedule
        fields = EDITABLE_FIELDS
        field_classes = {"kwargs": PayloadField}
        widgets = {
            "cron": forms.TextInput(
                attrs={"placeholder": "0 30 9 * * MON-FRI", "size": 40, "spellcheck": "false"}
            ),
            "kwargs": forms.Textarea(attrs={"rows": 3, "cols": 60, "spellcheck": "false"}),
            "timezone": ZoneInput(attrs={"size": 30, "spellcheck": "false"}),
        }
        help_texts = {
            "cron": (
                "Read in the time zone below. 5 fields (minute hour day-of-month month "
                "day-of-week) or 6 with seconds first (0 30 9 * * MON-FRI is 09:30:00 on "
                "weekdays). Leave empty for an interval schedule."
            ),
            "timezone": "An IANA name (Europe/Berlin, America/New_York). Empty: UTC.",
            "jitter": (
                "Seconds or HH:MM:SS, up to a day. Each run may start up to this much after "
                "its occurrence (the same on every replica), never past the next one."
            ),
            "interval": "Instead of cron: seconds (900) or HH:MM:SS (00:15:00).",
            "misfire_grace": "Seconds or HH:MM:SS. Empty: PGSCHED['MISFIRE_GRACE'].",
            "timeout": "Seconds or HH:MM:SS. Empty: the job's default.",
            "start_deadline": (
                "Seconds or HH:MM:SS. A run not started this long after it was due ends "
                "'missed' without running. Empty: no deadline."
            ),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        current = self.instance.job if self.instance.pk else self.initial.get("job")
        self.fields["job"].choices = job_choices(current)  # type: ignore[attr-defined]
        http_form.add_fields(self)
        for name in EMPTY_MEANS:
            if name in self.fields:
                self.fields[name].required = False

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or self.cleaned_data
        for name, default in EMPTY_MEANS.items():
            if name in cleaned and cleaned[name] in (None, ""):
                cleaned[name] = default
        http_form.clean(self, cleaned)
        return cleaned

    @property
    def changed_data(self) -> list[str]:
        return http_form.changed(list(super().changed_data))
