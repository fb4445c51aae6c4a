"""The bench's own Django app: a job that does nothing and keeps nothing."""
