"""Drivers of the peers, each run with its own venv's Python (``python -m bench.peers.X``).

They import only their peer and the standard library: the project is not
installed in those venvs. Each has ``fill DSN N`` (queue N no-op jobs) and
``work DSN ...`` (run one worker until SIGTERM); the harness counts the
completions from the peer's own tables, by the database's timestamps.
"""
