"""Drivers of the peers, each run with its own venv's Python (``python -m bench.peers.X``).

They import only their peer and the standard library: the project is not
installed in those venvs. The job queues have ``fill DSN N`` (queue N no-op
jobs) and ``work DSN ...`` (run one worker until SIGTERM); the harness counts
the completions from the peer's own tables, by the database's timestamps.
``celerybeat_peer`` is a scheduler: ``fill`` makes periodic tasks, ``beat``
runs celery beat, and ``consume`` counts what it sent, at the broker.
"""
