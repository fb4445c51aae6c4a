"""Idempotency keys are unique within a tenant: one tenant's key never reaches another's run.

Before, ``enqueue(..., idempotency_key="order-42", tenant="A")`` returned tenant B's run
(with its kwargs) when B used the key first, and A could take B's predictable keys first
so that B's runs were never created.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from django_pgsched import enqueue
from django_pgsched.models import JobRun, db_now


def test_the_same_key_in_two_tenants_is_two_runs_each_returned_to_its_own(db):
    b = enqueue("tests.noop", kwargs={"secret": "b's"}, idempotency_key="order-42", tenant="B")
    a = enqueue("tests.noop", kwargs={"x": 1}, idempotency_key="order-42", tenant="A")
    assert a.pk != b.pk and a.tenant == "A" and a.kwargs == {"x": 1}
    # each tenant's repeat returns its own run, never the other's kwargs
    assert enqueue("tests.noop", idempotency_key="order-42", tenant="A").pk == a.pk
    assert enqueue("tests.noop", idempotency_key="order-42", tenant="B").pk == b.pk
    assert enqueue("tests.noop", idempotency_key="order-42").pk not in (a.pk, b.pk)
    assert JobRun.objects.filter(idempotency_key="order-42").count() == 3


def test_a_tenant_cannot_take_another_tenants_key_in_another_month(db):
    later = db_now() + timedelta(days=40)  # another month's partition
    b = enqueue("tests.noop", idempotency_key="invoice-7", tenant="B", run_at=later)
    a = enqueue("tests.noop", idempotency_key="invoice-7", tenant="A")
    assert a.pk != b.pk
    # within one tenant the key still names one run across months
    again = enqueue("tests.noop", idempotency_key="invoice-7", tenant="B")
    assert again.pk == b.pk
    assert JobRun.objects.filter(idempotency_key="invoice-7", tenant="B").count() == 1


def test_moving_a_run_to_a_tenant_that_has_its_key_is_refused(db):
    later = db_now() + timedelta(days=40)
    enqueue("tests.noop", idempotency_key="k-1", tenant="A")
    b = enqueue("tests.noop", idempotency_key="k-1", tenant="B", run_at=later)
    with pytest.raises(IntegrityError, match="pgsched_run_idempotency_key"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("UPDATE pgsched_job_run SET tenant = 'A' WHERE id = %s", [b.pk])
