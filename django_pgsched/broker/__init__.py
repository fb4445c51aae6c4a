"""Claims through a broker: ``PGSCHED["CLAIMS"] = {"TRANSPORT": "nats", ...}``.

The runs stay in PostgreSQL, the source of truth; only the claim step
changes. ``schema.py`` (the outbox a trigger fills in the transaction that
makes a run claimable), ``publisher.py`` (its leaderless walk),
``messages.py`` (subjects ``<prefix>.<queue>.<tenant>``, ids, payloads),
``client.py`` (the one module that talks to NATS JetStream, through
``nats-py``), ``consumer.py`` (the executor's pull, claim by id, ack after
the terminal write, fallback to ``SKIP LOCKED``), ``runtime.py`` (a
replica's parts, built by the runner), ``settings.py``.
"""
