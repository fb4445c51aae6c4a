"""Monthly partitions of the run history (``pgsched_job_run`` and ``pgsched_attempt``).

- :mod:`.months`: month arithmetic, names, and making sure a run's month exists
  before a run is inserted into it (on demand, in the inserting transaction);
- :mod:`.upkeep`: the maintenance loop's creation of months ahead (every
  replica, leaderless) and its repair of what a killed upkeep left behind;
- :mod:`.retention`: whole months detached and dropped (or kept) once all
  their runs are finished and older than ``PGSCHED['RETENTION']``;
- the system check on how far ahead the months reach is ``pgsched.W006``
  (:mod:`django_pgsched.ops.checks`).
"""
