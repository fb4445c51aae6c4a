"""HTTP delivery: the built-in job ``pgsched.http``, safe against its own URLs.

The room's public face (import from the submodules, which stay small):

- :mod:`.request` — the kwargs and their checks (:func:`.request.parse_request`);
- :mod:`.urls`, :mod:`.addresses`, :mod:`.vetting` — SSRF: what may be called;
- :mod:`.client` — the one module that uses urllib3 (pinned connections);
- :mod:`.signing` — Standard Webhooks signatures;
- :mod:`.verdicts` — from an answer to succeed, defer or fail, and the evidence;
- :mod:`.breaker` — the circuit breaker per destination (and :func:`.breaker.circuit`
  for Python jobs); :mod:`.models` — its table;
- :mod:`.settings` — ``PGSCHED["HTTP"]``.

This module imports nothing, so that :mod:`django_pgsched.conf` can use
:mod:`.settings` without loading the rest.
"""
