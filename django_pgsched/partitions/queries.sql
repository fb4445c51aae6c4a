-- The partitions' SQL (the months of pgsched_job_run and pgsched_attempt), one named
-- block per statement, read by name (django_pgsched.sqlfiles).


-- name: month_layout
-- layout.py: the months' tables in the catalog, each attached or not, and whether it
-- is being detached (DETACH ... CONCURRENTLY, not finished).
SELECT c.relname, i.inhrelid IS NOT NULL AS attached, coalesce(i.inhdetachpending, false)
  FROM pg_class c
  LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
 WHERE c.relnamespace = current_schema()::regnamespace
   AND c.relkind = 'r'
   AND c.relname ~ '^pgsched_(job_run|attempt)_p[0-9]{6}$';


-- name: month_state
-- retention.py, a template: a month's runs ({table}, one month's table of
-- pgsched_job_run) not finished yet ({unfinished}: statuses.UNFINISHED_STATUSES),
-- when the last of them finished, and how many there are.
SELECT count(*) FILTER (WHERE status IN ({unfinished})),
       max(finished_at), count(*)
  FROM {table};
