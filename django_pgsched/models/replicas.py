"""Live replicas, as PostgreSQL sees them (a view over ``pg_stat_activity``)."""

from __future__ import annotations

from django.db import models

from .. import fields


class Replica(models.Model):
    """A live scheduler replica, as PostgreSQL sees it (a view over ``pg_stat_activity``).

    Every loop of ``runscheduler`` connects with ``application_name`` =
    ``pgsched <loop> <worker id>``, so the database itself knows which replicas
    are connected: nothing is written to keep this list (no heartbeat rows).
    A replica that lost its connections drops out at once; the runs it still
    holds are in :class:`JobRun` with ``worker`` set, until the reaper frees them.
    """

    worker = models.CharField(max_length=200, primary_key=True)
    loops = models.TextField(help_text="The loops with a session open: planner, executor, ...")
    sessions = models.IntegerField()
    connected_since = fields.TimeField()
    address = models.TextField(null=True, blank=True)

    class Meta:
        managed = False
        db_table = "pgsched_replica"
        ordering = ("worker",)

    def __str__(self) -> str:
        return self.worker
