"""Time: cron parsing, the timetables of occurrences, and the words for them.

``cron`` parses (the only module that imports croniter), ``timetable`` does the
occurrence arithmetic, ``describe`` says it in words (the only module that
imports cron-descriptor); ``errors`` is below all three.
"""
