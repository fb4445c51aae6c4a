"""The ledger of occurrences that did not run (table ``pgsched_skipped_range``).

For any schedule and any time range, every occurrence is a run or a point of
one :class:`~django_pgsched.ledger.models.SkippedRange`, with the reason it did
not run. :mod:`~django_pgsched.ledger.accounting` checks exactly that.
"""
