-- The admin's SQL, one named block per statement, read by name
-- (django_pgsched.sqlfiles). The admin's other reads use the ORM.


-- name: recent_runs
-- schedule_columns.py: the last runs of each schedule on the page, newest first: its
-- occurrences (a backward range of the unique (schedule_id, scheduled_for) index) and
-- its one-off runs, run now and retries, which carry only its name (a backward range
-- of pgsched_run_one_off_idx), each stopping after %(limit)s rows; then the newest
-- %(limit)s of the two.
SELECT s.id, statement_timestamp(), r.id, r.status, r.scheduled_for
  FROM unnest(%(ids)s::bigint[], %(names)s::text[]) AS s(id, name)
  LEFT JOIN LATERAL (
        SELECT id, status, scheduled_for
          FROM ((SELECT id, status, scheduled_for
                   FROM pgsched_job_run
                  WHERE schedule_id = s.id
                    AND scheduled_for <= statement_timestamp()
                  ORDER BY scheduled_for DESC
                  LIMIT %(limit)s)
                UNION ALL
                (SELECT id, status, scheduled_for
                   FROM pgsched_job_run
                  WHERE schedule_id IS NULL
                    AND schedule_name = s.name
                    AND scheduled_for <= statement_timestamp()
                  ORDER BY scheduled_for DESC, id DESC
                  LIMIT %(limit)s)) both_kinds
         ORDER BY scheduled_for DESC, id DESC
         LIMIT %(limit)s
       ) r ON true
 ORDER BY s.id, r.scheduled_for DESC, r.id DESC;
