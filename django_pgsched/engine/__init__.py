"""The engine: the planner, executor and maintenance loops, their claims and
leases, the database sessions and the hot-path SQL (``queries.sql``), and the
runner, the only code that sleeps, wakes and stops.
"""
