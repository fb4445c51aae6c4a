"""Importers of other schedulers' schedules: :mod:`.celery_beat` (django-celery-beat)."""
