"""Whose runs a request may read: the project's resolver, or staff with the view permission.

With ``PGSCHED["TENANT_RESOLVER"]`` (a dotted path to ``resolver(request) ->
str``) every request is the resolver's to decide: it returns the request's
tenant or raises :class:`~django.core.exceptions.PermissionDenied`. A resolver
that returns ``""`` refuses too: the runs without a tenant are the
installation's own, never a customer's. Without a resolver, only an active
staff user with ``pgsched.view_jobrun`` may read, and sees every tenant.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import HttpRequest
from django.utils.module_loading import import_string

from ..conf import get_settings
from ..tenants import validate_tenant
from .queries import ALL_TENANTS, _AllTenants

Resolver = Callable[[HttpRequest], str]


@cache
def load_resolver(path: str) -> Resolver:
    try:
        resolver: Resolver = import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(f"PGSCHED['TENANT_RESOLVER']: cannot import {path!r}") from exc
    if not callable(resolver):
        raise ImproperlyConfigured(f"PGSCHED['TENANT_RESOLVER']: {path!r} is not callable")
    return resolver


def request_tenant(request: HttpRequest) -> str | _AllTenants:
    """The tenant whose runs ``request`` may read, :data:`ALL_TENANTS` for staff.

    Raises :class:`PermissionDenied` when the request may read nothing.
    """
    path = get_settings().TENANT_RESOLVER
    if path is None:
        user = getattr(request, "user", None)
        if (
            user is None
            or not user.is_authenticated
            or not user.is_active
            or not user.is_staff
            or not user.has_perm("pgsched.view_jobrun")
        ):
            raise PermissionDenied(
                "staff with the permission to view runs only (no TENANT_RESOLVER is configured)"
            )
        return ALL_TENANTS
    tenant = load_resolver(path)(request)
    if not isinstance(tenant, str):
        raise TypeError(
            f"PGSCHED['TENANT_RESOLVER'] {path!r} returned {type(tenant).__name__}, not str"
        )
    if tenant == "":
        raise PermissionDenied("no tenant for this request")
    validate_tenant(tenant)
    return tenant
