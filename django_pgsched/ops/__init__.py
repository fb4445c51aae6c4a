"""The operator's surface beside the admin: system checks, Prometheus metrics and
health, and the sync of schedules declared in settings.
"""
