"""What the schedule and run pages share: badges, times, the bounded paginator, POST-only views."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cached_property, wraps
from typing import TYPE_CHECKING, Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from ..fields import unreadable_as_none, unreadable_columns
from ..models import Attempt, JobRun, Schedule
from ..timing import describe
from .filters import TenantFilter

ACTION_LIMIT = 1000  # rows one bulk action handles

TIME = "%Y-%m-%d %H:%M:%S"

if TYPE_CHECKING:  # generic only in django-stubs, not at run time
    ScheduleAdminBase = admin.ModelAdmin[Schedule]
    JobRunAdminBase = admin.ModelAdmin[JobRun]
    AttemptInlineBase = admin.TabularInline[Attempt, JobRun]
    PaginatorBase = Paginator[Any]
else:
    ScheduleAdminBase = JobRunAdminBase = admin.ModelAdmin
    AttemptInlineBase = admin.TabularInline
    PaginatorBase = Paginator


def badge(status: str, label: str | None = None, title: str = "") -> SafeString:
    return format_html(
        '<span class="pgsched-badge pgsched-{}" title="{}">{}</span>',
        status,
        title,
        label or status.replace("_", " "),
    )


def utc(value: datetime | None, now: datetime | None = None) -> SafeString:
    """A time in UTC, and how far it is from ``now`` when given."""
    if value is None:
        return format_html("{}", "—")
    text = value.astimezone(UTC).strftime(TIME)
    if now is None:
        return format_html("{}", text)
    return format_html(
        '{}<br><span class="pgsched-muted">{}</span>', text, describe.relative(value, now)
    )


def by_whom(request: HttpRequest) -> str:
    return f"by {request.user.get_username()} in the admin"


class BoundedCountPaginator(PaginatorBase):
    """Counts exactly up to :attr:`exact_limit` rows; beyond, the planner's estimate.

    The exact count is ``SELECT count(*) FROM (… ORDER BY … LIMIT n + 1)``, an
    ordered index scan that stops early; the estimate is ``EXPLAIN``'s row
    count. No page costs a scan of the whole table.
    """

    exact_limit = 1000
    estimated = False

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        if not isinstance(qs, QuerySet):
            return len(qs)
        exact = qs[: self.exact_limit + 1].count()
        if exact <= self.exact_limit:
            return exact
        self.estimated = True
        plan = json.loads(qs.explain(format="json"))
        return max(exact, int(plan[0]["Plan"]["Plan Rows"]))


def with_tenant_column(request: HttpRequest, columns: Sequence[Any], after: str) -> list[Any]:
    """``columns`` with a "tenant" column after ``after`` while tenants are in use.

    In use: some schedule has a tenant, or the list is filtered by one (a
    one-off run's tenant that no schedule has). One ``EXISTS`` on the
    schedules (it stops at the first one with a tenant).
    """
    shown = list(columns)
    if "tenant" in shown:
        return shown
    if request.GET.get(TenantFilter.parameter_name) or Schedule.objects.exclude(tenant="").exists():
        shown.insert(shown.index(after) + 1, "tenant")
    return shown


def post_only(admin_site: admin.AdminSite, view: Callable[..., HttpResponse]) -> Any:
    return admin_site.admin_view(require_POST(view))


class ObjectButtons:
    """An admin whose change page has buttons, each a POST to ``<id>/<slug>/``.

    ``buttons`` pairs each slug with the name of its view method; the URL is named
    ``admin:<app>_<model>_<slug>`` (a ``-`` in the slug becomes ``_``), behind the
    admin's login and ``require_POST``. The view checks its own permission
    (:func:`target`).
    """

    buttons: ClassVar[tuple[tuple[str, str], ...]] = ()

    def get_urls(self) -> list[URLPattern]:
        opts = self.model._meta  # type: ignore[attr-defined]
        site = self.admin_site  # type: ignore[attr-defined]
        own = [
            path(
                f"<path:object_id>/{slug}/",
                post_only(site, getattr(self, view)),
                name=f"{opts.app_label}_{opts.model_name}_{slug.replace('-', '_')}",
            )
            for slug, view in self.buttons
        ]
        return [*own, *super().get_urls()]  # type: ignore[misc]


def target(model_admin: Any, request: HttpRequest, object_id: str, allowed: bool) -> Any:
    """The object a button acts on: 403 without the permission, 404 if it is gone."""
    if not allowed:
        raise PermissionDenied
    obj = model_admin.get_object(request, object_id)
    if obj is None:
        raise Http404(f"no {model_admin.model._meta.verbose_name} with id {object_id!r}")
    return obj


def _rendered(response: HttpResponse) -> HttpResponse:
    """A template response rendered now, while the caller's context is still active."""
    render = getattr(response, "render", None)
    if callable(render) and not getattr(response, "is_rendered", True):
        render()
    return response


class UnreadableRows:
    """An admin whose lists and pages answer for rows Python cannot read.

    Its pages (list, change, delete, history) run inside
    :func:`~django_pgsched.fields.unreadable_as_none`: a stored time, interval or
    JSON value out of Python's reach shows as empty instead of failing the page (one
    such row made the whole list answer 500). A row that holds one opens read-only,
    with a warning naming the fields: saving it would write the empty value back.
    """

    def get_urls(self) -> list[URLPattern]:
        urls = super().get_urls()  # type: ignore[misc]
        for url in urls:
            if isinstance(url, URLPattern):
                url.callback = self._tolerant(url.callback)
        return urls  # type: ignore[no-any-return]

    def _tolerant(self, view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def tolerant(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            object_id = kwargs.get("object_id")
            if object_id is not None:
                self._warn_unreadable(request, object_id)
            with unreadable_as_none():
                return _rendered(view(request, *args, **kwargs))

        return tolerant

    def _warn_unreadable(self, request: HttpRequest, object_id: str) -> None:
        model = self.model  # type: ignore[attr-defined]
        try:
            key = model._meta.pk.to_python(unquote(object_id))
        except ValidationError:
            return
        names = unreadable_columns(model, key)
        if not names:
            return
        request.pgsched_unreadable = names  # type: ignore[attr-defined]
        if request.method == "GET":
            messages.warning(
                request,
                f"This {model._meta.verbose_name} holds values Python cannot read "
                f"({', '.join(names)}): they show as empty and the page is read-only. "
                "Correct them with SQL, or delete the row.",
            )

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        obj = super().get_object(request, object_id, from_field)  # type: ignore[misc]
        if obj is not None:
            obj.pgsched_unreadable = getattr(request, "pgsched_unreadable", [])
        return obj

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and getattr(request, "pgsched_unreadable", None):
            return False
        return super().has_change_permission(request, obj)  # type: ignore[misc, no-any-return]
