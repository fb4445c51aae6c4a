-- The functions: the triggers' bodies, the month partitions' upkeep, the horizon
-- of the live runs, the masks of the change log. SECURITY DEFINER functions run with
-- the search path pinned to the migration's schema, then pg_temp (the migration sets it).
-- Loaded by migration 0001_initial, in this order: domains, functions, tables,
-- indexes, triggers, grants.

-- pgsched_change_masked()
CREATE FUNCTION pgsched_change_masked() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.changes := pgsched_mask_change(NEW.changes);
    RETURN NEW;
END $$;

-- pgsched_claim_outbox_add()
CREATE FUNCTION pgsched_claim_outbox_add() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO pgsched_claim_outbox (run_id, due, queue, tenant, idempotency_key)
    VALUES (NEW.id, NEW.fire_after, NEW.queue, NEW.tenant, NEW.idempotency_key);
    RETURN NULL;
END
$$;

-- pgsched_create_month(timestamp with time zone)
CREATE FUNCTION pgsched_create_month(month timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1885825, pgsched_month_lock_key(month));
    IF EXISTS (SELECT 1 FROM pg_inherits
                WHERE inhrelid = pgsched_partition_oid('pgsched_job_run', month))
       AND EXISTS (SELECT 1 FROM pg_inherits
                    WHERE inhrelid = pgsched_partition_oid('pgsched_attempt', month)) THEN
        RETURN false;
    END IF;
    PERFORM pgsched_partition_create('pgsched_job_run', month);
    PERFORM pgsched_partition_attach('pgsched_job_run', month);
    PERFORM pgsched_partition_create('pgsched_attempt', month);
    PERFORM pgsched_partition_attach('pgsched_attempt', month);
    RETURN true;
END $$;

-- pgsched_ensure_months(timestamp with time zone[])
CREATE FUNCTION pgsched_ensure_months(times timestamp with time zone[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
DECLARE
    m timestamptz;
    created integer := 0;
BEGIN
    FOR m IN SELECT DISTINCT date_trunc('month', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
               FROM unnest(times) t WHERE t IS NOT NULL AND isfinite(t) LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_inherits
                        WHERE inhrelid = pgsched_partition_oid('pgsched_job_run', m))
           OR NOT EXISTS (SELECT 1 FROM pg_inherits
                           WHERE inhrelid = pgsched_partition_oid('pgsched_attempt', m)) THEN
            IF pgsched_create_month(m) THEN
                created := created + 1;
            END IF;
        END IF;
    END LOOP;
    RETURN created;
END $$;

-- pgsched_http_destination(text)
CREATE FUNCTION pgsched_http_destination(url text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $_$
    SELECT lower(m[1]) || '://' || rtrim(lower(m[2]), '.') || ':'
           || coalesce(nullif(ltrim(m[3], '0'), ''),
                       CASE lower(m[1]) WHEN 'https' THEN '443' ELSE '80' END)
      FROM regexp_match(url, '^([A-Za-z][A-Za-z0-9+.-]*)://(?:[^/?#@]*@)?(\[[^]/?#]*\]|[^:/?#]*)(?::([0-9]{1,5}))?(?:[/?#]|$)') AS m
$_$;

-- pgsched_interval_ok(interval, interval, interval)
CREATE FUNCTION pgsched_interval_ok(d interval, lo interval, hi interval) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT d IS NULL OR (d >= lo AND d <= hi) $$;

-- pgsched_job_run_orphaned()
CREATE FUNCTION pgsched_job_run_orphaned() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE pgsched_job_run
       SET status = 'cancelled', finished_at = clock_timestamp(), note = 'schedule deleted'
     WHERE id = NEW.id AND status = 'pending' AND attempts = 0;
    RETURN NULL;
END $$;

-- pgsched_json_ok(jsonb)
CREATE FUNCTION pgsched_json_ok(j jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$ SELECT j IS NULL
          OR (NOT jsonb_path_exists(j, 'strict $.**{100 to last}')
              AND NOT jsonb_path_exists(
                  j, 'strict $.** ? (@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))')) $_$;

-- pgsched_mask_change(jsonb)
CREATE FUNCTION pgsched_mask_change(changes jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE
        WHEN jsonb_typeof(changes -> 'kwargs') = 'array'
        THEN jsonb_set(changes, '{kwargs}', jsonb_build_array(
                 pgsched_mask_headers(changes -> 'kwargs' -> 0, changes -> 'kwargs' -> 1),
                 pgsched_mask_headers(changes -> 'kwargs' -> 1, changes -> 'kwargs' -> 0)))
        ELSE changes
    END
$$;

-- pgsched_mask_headers(jsonb, jsonb)
CREATE FUNCTION pgsched_mask_headers(side jsonb, other jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE
        WHEN jsonb_typeof(side) = 'object' AND jsonb_typeof(side -> 'headers') = 'object'
        THEN jsonb_set(side, '{headers}', coalesce((
            SELECT jsonb_object_agg(
                       h.key,
                       CASE WHEN other IS NULL OR jsonb_typeof(other) <> 'object'
                                 OR other -> 'headers' -> h.key IS NOT DISTINCT FROM h.value
                            THEN '"[masked]"'::jsonb
                            ELSE '"[masked: changed]"'::jsonb END)
              FROM jsonb_each(side -> 'headers') AS h), '{}'::jsonb))
        ELSE side
    END
$$;

-- pgsched_month_floor(timestamp with time zone, integer)
CREATE FUNCTION pgsched_month_floor(at timestamp with time zone, back integer) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT (date_trunc('month', at AT TIME ZONE 'UTC') - make_interval(months => back))
           AT TIME ZONE 'UTC'
$$;

-- pgsched_month_lock_key(timestamp with time zone)
CREATE FUNCTION pgsched_month_lock_key(month timestamp with time zone) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT to_char(month AT TIME ZONE 'UTC', 'YYYYMM')::integer
$$;

-- pgsched_partition_attach(text, timestamp with time zone)
CREATE FUNCTION pgsched_partition_attach(tbl text, month timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    IF tbl IS NULL OR tbl NOT IN ('pgsched_job_run', 'pgsched_attempt') THEN
        RAISE EXCEPTION 'pgsched_partition_attach: only the run history (pgsched_job_run, '
                        'pgsched_attempt) is partitioned by month, not %', tbl
              USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN pgsched_partition_attach_body(tbl, month);
END
$$;

-- pgsched_partition_attach_body(text, timestamp with time zone)
CREATE FUNCTION pgsched_partition_attach_body(tbl text, month timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    start timestamptz := date_trunc('month', month AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    part text := tbl || '_p' || to_char(start AT TIME ZONE 'UTC', 'YYYYMM');
    sch text := current_schema();
BEGIN
    IF EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = pgsched_partition_oid(tbl, start)) THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)',
                   sch, tbl, sch, part, start,
                   (date_trunc('month', month AT TIME ZONE 'UTC') + interval '1 month')
                       AT TIME ZONE 'UTC');
    RETURN true;
END $$;

-- pgsched_partition_create(text, timestamp with time zone)
CREATE FUNCTION pgsched_partition_create(tbl text, month timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    IF tbl IS NULL OR tbl NOT IN ('pgsched_job_run', 'pgsched_attempt') THEN
        RAISE EXCEPTION 'pgsched_partition_create: only the run history (pgsched_job_run, '
                        'pgsched_attempt) is partitioned by month, not %', tbl
              USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN pgsched_partition_create_body(tbl, month);
END
$$;

-- pgsched_partition_create_body(text, timestamp with time zone)
CREATE FUNCTION pgsched_partition_create_body(tbl text, month timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    start timestamptz := date_trunc('month', month AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    suffix text := '_p' || to_char(start AT TIME ZONE 'UTC', 'YYYYMM');
    part text := tbl || suffix;
    orphan oid := pgsched_partition_oid(tbl, start);
    sch text := current_schema();  -- never pg_temp (a test's table may shadow the name)
    empty boolean;
    idx record;
BEGIN
    IF orphan IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = orphan) THEN
            RETURN false;  -- attached already
        END IF;
        EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM %I.%I)', sch, part) INTO empty;
        IF NOT empty THEN
            RETURN true;  -- rows of its own (kept detached?): attach it as it is, or fail
        END IF;
        EXECUTE format('DROP TABLE %I.%I', sch, part);
    END IF;
    EXECUTE format(
        'CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)',
        sch, part, sch, tbl);
    IF tbl = 'pgsched_job_run' THEN
        -- runs churn: room on each page for HOT lease renewals, early vacuum
        EXECUTE format('ALTER TABLE %I.%I SET (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.02,'
                       ' autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)',
                       sch, part);
    END IF;
    -- The partitioned table's indexes, named after theirs (pgsched_run_recent_idx_p202612:
    -- a plan says which index it reads), built on the empty table; ATTACH adopts them.
    FOR idx IN
        SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS def,
               k.conname, pg_get_constraintdef(k.oid) AS condef
          FROM pg_index i
          JOIN pg_class c ON c.oid = i.indexrelid
          LEFT JOIN pg_constraint k ON k.conindid = i.indexrelid AND k.contype IN ('p', 'u')
                                   AND k.conrelid = i.indrelid
         WHERE i.indrelid = format('%I.%I', sch, tbl)::regclass
    LOOP
        IF idx.conname IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I %s',
                           sch, part, left(idx.conname, 55) || suffix, idx.condef);
        ELSE
            EXECUTE regexp_replace(idx.def, '^CREATE (UNIQUE )?INDEX \S+ ON ONLY \S+ ',
                                   'CREATE \1INDEX ' || quote_ident(left(idx.name, 55) || suffix)
                                   || ' ON ' || quote_ident(sch) || '.' || quote_ident(part)
                                   || ' ');
        END IF;
    END LOOP;
    RETURN true;
END $$;

-- pgsched_partition_oid(text, timestamp with time zone)
CREATE FUNCTION pgsched_partition_oid(tbl text, month timestamp with time zone) RETURNS oid
    LANGUAGE sql STABLE
    AS $$
    SELECT c.oid FROM pg_class c
     WHERE c.relnamespace = current_schema()::regnamespace
       AND c.relname = tbl || '_p' || to_char(month AT TIME ZONE 'UTC', 'YYYYMM')
$$;

-- pgsched_run_delete_attempts()
CREATE FUNCTION pgsched_run_delete_attempts() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM pgsched_attempt a
     USING gone g
     WHERE a.job_run_id = g.id AND a.run_scheduled_for = g.scheduled_for;
    RETURN NULL;
END $$;

-- pgsched_run_horizon_advance()
CREATE FUNCTION pgsched_run_horizon_advance() RETURNS timestamp with time zone
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
DECLARE
    -- the previous month's start, as it was a day ago: a transaction that began before
    -- a month's end and writes after it compared with the month before (its now())
    cap timestamptz := pgsched_month_floor(now() - interval '1 day', 1);
    current_since timestamptz;
    oldest timestamptz;
    part record;
    live boolean;
BEGIN
    SELECT live_since INTO current_since FROM pgsched_run_horizon FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- each month's own table, oldest first; its partial indexes of unfinished runs
    -- make each look a probe (a statement of its own: it sees what committed before)
    -- each month's own table, oldest first by its bound (never by its name: a month BC
    -- is named as the same month AD); its partial indexes of unfinished runs make each
    -- look a probe (a statement of its own: it sees what committed before)
    FOR part IN
        SELECT c.relname,
               (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                             'FROM \(''([^'']+)''\)'))[1]::timestamptz AS month
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'pgsched_job_run'::regclass
         ORDER BY 2
    LOOP
        EXIT WHEN part.month >= cap;
        EXECUTE format(
            'SELECT EXISTS (SELECT 1 FROM %I WHERE status IN (''pending'', ''retrying''))'
            ' OR EXISTS (SELECT 1 FROM %I WHERE status = ''running'')',
            part.relname, part.relname) INTO live;
        IF live THEN
            -- its oldest unfinished run's month (the partition's own bound may not be UTC's)
            EXECUTE format(
                'SELECT pgsched_month_floor(min(scheduled_for), 0) FROM %I'
                ' WHERE status IN (''pending'', ''retrying'', ''running'')',
                part.relname) INTO oldest;
            EXIT;
        END IF;
    END LOOP;
    oldest := least(coalesce(oldest, cap), cap);
    IF oldest < '0001-01-01 00:00:00+00' THEN
        oldest := NULL;  -- a month BC (a row written past its CHECKs): every month
    END IF;
    IF oldest IS DISTINCT FROM current_since THEN
        UPDATE pgsched_run_horizon SET live_since = oldest;
    END IF;
    RETURN oldest;
END
$$;

-- pgsched_run_horizon_lower()
CREATE FUNCTION pgsched_run_horizon_lower() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    -- wait for an advance under way, then compare with what it wrote
    PERFORM 1 FROM pgsched_run_horizon FOR KEY SHARE;
    UPDATE pgsched_run_horizon
       SET live_since = CASE WHEN NEW.scheduled_for >= '0001-01-01 00:00:00+00'
                             THEN pgsched_month_floor(NEW.scheduled_for, 0) END
     WHERE live_since > NEW.scheduled_for;
    RETURN NULL;
END
$$;

-- pgsched_run_horizon_since()
CREATE FUNCTION pgsched_run_horizon_since() RETURNS timestamp with time zone
    LANGUAGE sql STABLE SECURITY DEFINER
    AS $$
    SELECT CASE WHEN live_since >= '0001-01-01 00:00:00+00' THEN live_since END
      FROM pgsched_run_horizon
$$;

-- pgsched_run_key_unique()
CREATE FUNCTION pgsched_run_key_unique() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    AS $$
BEGIN
    IF NEW.idempotency_key = 'pgsched:' || NEW.schedule_id || ':'
           || to_char(NEW.scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') THEN
        RETURN NEW;
    END IF;
    IF NEW.idempotency_key ~ '^pgsched:[0-9]+:' THEN
        RAISE EXCEPTION 'idempotency key % is reserved for the occurrence it names',
                        NEW.idempotency_key
              USING ERRCODE = 'check_violation', CONSTRAINT = 'pgsched_run_key_unique';
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.idempotency_key = OLD.idempotency_key
       AND NEW.tenant = OLD.tenant THEN
        RETURN NEW;  -- the key stays with this run (a move to another month)
    END IF;
    -- one of 1024 locks (a bulk insert of many keys takes at most that many, not one each)
    PERFORM pg_advisory_xact_lock(
        1885824, hashtext(NEW.tenant || chr(31) || NEW.idempotency_key) & 1023);
    IF EXISTS (SELECT 1 FROM pgsched_job_run
                WHERE idempotency_key = NEW.idempotency_key
                  AND tenant = NEW.tenant
                  AND scheduled_for <> NEW.scheduled_for) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "%"',
                        'pgsched_run_idempotency_key'
              USING ERRCODE = 'unique_violation', CONSTRAINT = 'pgsched_run_idempotency_key',
                    DETAIL = format('Key (idempotency_key, tenant)=(%s, %s) already exists in '
                                    'another month.', NEW.idempotency_key, NEW.tenant);
    END IF;
    RETURN NEW;
END $$;

-- pgsched_run_move_attempts()
CREATE FUNCTION pgsched_run_move_attempts() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE pgsched_attempt
       SET run_scheduled_for = NEW.scheduled_for
     WHERE job_run_id = OLD.id AND run_scheduled_for = OLD.scheduled_for;
    RETURN NEW;
END $$;

-- pgsched_run_schedule_exists()
CREATE FUNCTION pgsched_run_schedule_exists() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM 1 FROM pgsched_schedule WHERE id = NEW.schedule_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insert or update on table "pgsched_job_run" violates foreign key '
                        'constraint "pgsched_job_run_schedule_fk"'
              USING ERRCODE = 'foreign_key_violation',
                    CONSTRAINT = 'pgsched_job_run_schedule_fk',
                    DETAIL = format('Key (schedule_id)=(%s) is not present in table '
                                    '"pgsched_schedule".', NEW.schedule_id);
    END IF;
    RETURN NEW;
END $$;

-- pgsched_schedule_after_delete()
CREATE FUNCTION pgsched_schedule_after_delete() RETURNS trigger
    LANGUAGE plpgsql
    SET jit TO 'off'
    AS $$
DECLARE
    ids text;
BEGIN
    INSERT INTO pgsched_schedule_change
           (schedule_id, schedule_name, action, actor, at, db_user, application, changes)
    SELECT o.id, o.name, 'deleted', 
           coalesce(nullif(current_setting('pgsched.actor', true), ''), 'sql'),
           statement_timestamp(), current_user,
           coalesce(current_setting('application_name', true), ''), jsonb_build_object('name', jsonb_build_array(to_jsonb(o.name), NULL::jsonb), 'job', jsonb_build_array(to_jsonb(o.job), NULL::jsonb), 'kwargs', jsonb_build_array(to_jsonb(o.kwargs), NULL::jsonb), 'cron', jsonb_build_array(to_jsonb(o.cron), NULL::jsonb), 'interval', jsonb_build_array(to_jsonb(o."interval"), NULL::jsonb), 'anchor', jsonb_build_array(to_jsonb(o.anchor), NULL::jsonb), 'status', jsonb_build_array(to_jsonb(o.status), NULL::jsonb), 'misfire_policy', jsonb_build_array(to_jsonb(o.misfire_policy), NULL::jsonb), 'catch_up_limit', jsonb_build_array(to_jsonb(o.catch_up_limit), NULL::jsonb), 'misfire_grace', jsonb_build_array(to_jsonb(o.misfire_grace), NULL::jsonb), 'max_attempts', jsonb_build_array(to_jsonb(o.max_attempts), NULL::jsonb), 'timeout', jsonb_build_array(to_jsonb(o.timeout), NULL::jsonb), 'queue', jsonb_build_array(to_jsonb(o.queue), NULL::jsonb), 'source', jsonb_build_array(to_jsonb(o.source), NULL::jsonb), 'last_error', jsonb_build_array(to_jsonb(o.last_error), NULL::jsonb), 'tenant', jsonb_build_array(to_jsonb(o.tenant), NULL::jsonb), 'dst_fold', jsonb_build_array(to_jsonb(o.dst_fold), NULL::jsonb), 'dst_gap', jsonb_build_array(to_jsonb(o.dst_gap), NULL::jsonb), 'jitter', jsonb_build_array(to_jsonb(o.jitter), NULL::jsonb), 'timezone', jsonb_build_array(to_jsonb(o.timezone), NULL::jsonb)) || jsonb_build_object('overlap', jsonb_build_array(to_jsonb(o.overlap), NULL::jsonb), 'start_deadline', jsonb_build_array(to_jsonb(o.start_deadline), NULL::jsonb), 'pause_reason', jsonb_build_array(to_jsonb(o.pause_reason), NULL::jsonb))
      FROM old_rows o;
    SELECT string_agg(id::text, ',') INTO ids FROM (SELECT id FROM old_rows LIMIT 500) t;
    IF ids IS NOT NULL THEN
        PERFORM pg_notify('pgsched_schedule', ids);
    END IF;
    RETURN NULL;
END $$;

-- pgsched_schedule_after_insert()
CREATE FUNCTION pgsched_schedule_after_insert() RETURNS trigger
    LANGUAGE plpgsql
    SET jit TO 'off'
    AS $$
DECLARE
    ids text;
BEGIN
    INSERT INTO pgsched_schedule_change
           (schedule_id, schedule_name, action, actor, at, db_user, application, changes)
    SELECT n.id, n.name, 'created', 
           coalesce(nullif(current_setting('pgsched.actor', true), ''), 'sql'),
           statement_timestamp(), current_user,
           coalesce(current_setting('application_name', true), ''), ((jsonb_build_object('name', jsonb_build_array(NULL::jsonb, to_jsonb(n.name)), 'job', jsonb_build_array(NULL::jsonb, to_jsonb(n.job)), 'kwargs', jsonb_build_array(NULL::jsonb, to_jsonb(n.kwargs)), 'cron', jsonb_build_array(NULL::jsonb, to_jsonb(n.cron)), 'interval', jsonb_build_array(NULL::jsonb, to_jsonb(n."interval")), 'anchor', jsonb_build_array(NULL::jsonb, to_jsonb(n.anchor)), 'status', jsonb_build_array(NULL::jsonb, to_jsonb(n.status)), 'misfire_policy', jsonb_build_array(NULL::jsonb, to_jsonb(n.misfire_policy)), 'catch_up_limit', jsonb_build_array(NULL::jsonb, to_jsonb(n.catch_up_limit)), 'misfire_grace', jsonb_build_array(NULL::jsonb, to_jsonb(n.misfire_grace)), 'max_attempts', jsonb_build_array(NULL::jsonb, to_jsonb(n.max_attempts)), 'timeout', jsonb_build_array(NULL::jsonb, to_jsonb(n.timeout)), 'queue', jsonb_build_array(NULL::jsonb, to_jsonb(n.queue)), 'source', jsonb_build_array(NULL::jsonb, to_jsonb(n.source)), 'last_error', jsonb_build_array(NULL::jsonb, to_jsonb(n.last_error)), 'tenant', jsonb_build_array(NULL::jsonb, to_jsonb(n.tenant)), 'dst_fold', jsonb_build_array(NULL::jsonb, to_jsonb(n.dst_fold)), 'dst_gap', jsonb_build_array(NULL::jsonb, to_jsonb(n.dst_gap)), 'jitter', jsonb_build_array(NULL::jsonb, to_jsonb(n.jitter)), 'timezone', jsonb_build_array(NULL::jsonb, to_jsonb(n.timezone))) || jsonb_build_object('overlap', jsonb_build_array(NULL::jsonb, to_jsonb(n.overlap)), 'start_deadline', jsonb_build_array(NULL::jsonb, to_jsonb(n.start_deadline)), 'pause_reason', jsonb_build_array(NULL::jsonb, to_jsonb(n.pause_reason)))) - array_remove(ARRAY[CASE WHEN n.name IS NULL THEN 'name' END, CASE WHEN n.job IS NULL THEN 'job' END, CASE WHEN n.kwargs IS NULL THEN 'kwargs' END, CASE WHEN n.cron IS NULL THEN 'cron' END, CASE WHEN n."interval" IS NULL THEN 'interval' END, CASE WHEN n.anchor IS NULL THEN 'anchor' END, CASE WHEN n.status IS NULL THEN 'status' END, CASE WHEN n.misfire_policy IS NULL THEN 'misfire_policy' END, CASE WHEN n.catch_up_limit IS NULL THEN 'catch_up_limit' END, CASE WHEN n.misfire_grace IS NULL THEN 'misfire_grace' END, CASE WHEN n.max_attempts IS NULL THEN 'max_attempts' END, CASE WHEN n.timeout IS NULL THEN 'timeout' END, CASE WHEN n.queue IS NULL THEN 'queue' END, CASE WHEN n.source IS NULL THEN 'source' END, CASE WHEN n.last_error IS NULL THEN 'last_error' END, CASE WHEN n.tenant IS NULL THEN 'tenant' END, CASE WHEN n.dst_fold IS NULL THEN 'dst_fold' END, CASE WHEN n.dst_gap IS NULL THEN 'dst_gap' END, CASE WHEN n.jitter IS NULL THEN 'jitter' END, CASE WHEN n.timezone IS NULL THEN 'timezone' END, CASE WHEN n.overlap IS NULL THEN 'overlap' END, CASE WHEN n.start_deadline IS NULL THEN 'start_deadline' END, CASE WHEN n.pause_reason IS NULL THEN 'pause_reason' END]::text[], NULL))
      FROM new_rows n;
    SELECT string_agg(id::text, ',') INTO ids FROM (SELECT id FROM new_rows LIMIT 500) t;
    IF ids IS NOT NULL THEN
        PERFORM pg_notify('pgsched_schedule', ids);
    END IF;
    RETURN NULL;
END $$;

-- pgsched_schedule_after_update()
CREATE FUNCTION pgsched_schedule_after_update() RETURNS trigger
    LANGUAGE plpgsql
    SET jit TO 'off'
    AS $$
DECLARE
    ids text;
    stop_ids bigint[];
    stop_reasons text[];
    stop_future boolean[];
BEGIN
    -- One join of the transition tables (no LIMIT inside it), kept to the rows that matter.
    WITH pair AS MATERIALIZED (
        SELECT n.id, n.name, n.status,
               o.status = 'active' AND n.status <> 'active' AS stopped,
               (n.cron, n."interval", n.anchor, n.timezone, n.dst_gap, n.dst_fold) IS DISTINCT FROM (o.cron, o."interval", o.anchor, o.timezone, o.dst_gap, o.dst_fold) AS retimed,
               ((n.status, n.cron, n."interval", n.anchor, n.job, n.kwargs, n.misfire_policy, n.catch_up_limit, n.misfire_grace, n.max_attempts, n.timeout, n.queue, n.timezone, n.dst_gap, n.dst_fold, n.jitter) IS DISTINCT FROM (o.status, o.cron, o."interval", o.anchor, o.job, o.kwargs, o.misfire_policy, o.catch_up_limit, o.misfire_grace, o.max_attempts, o.timeout, o.queue, o.timezone, o.dst_gap, o.dst_fold, o.jitter)
                OR n.next_fire_at IS NULL
                OR n.next_fire_at < o.next_fire_at) AS notify,
               CASE WHEN ROW(o.name, o.job, o.kwargs, o.cron, o."interval", o.anchor, o.status, o.misfire_policy, o.catch_up_limit, o.misfire_grace, o.max_attempts, o.timeout, o.queue, o.source, o.last_error, o.tenant, o.dst_fold, o.dst_gap, o.jitter, o.timezone, o.overlap, o.start_deadline, o.pause_reason) IS DISTINCT FROM ROW(n.name, n.job, n.kwargs, n.cron, n."interval", n.anchor, n.status, n.misfire_policy, n.catch_up_limit, n.misfire_grace, n.max_attempts, n.timeout, n.queue, n.source, n.last_error, n.tenant, n.dst_fold, n.dst_gap, n.jitter, n.timezone, n.overlap, n.start_deadline, n.pause_reason) THEN CASE WHEN o.name IS DISTINCT FROM n.name THEN jsonb_build_object('name', jsonb_build_array(to_jsonb(o.name), to_jsonb(n.name))) ELSE '{}'::jsonb END
 || CASE WHEN o.job IS DISTINCT FROM n.job THEN jsonb_build_object('job', jsonb_build_array(to_jsonb(o.job), to_jsonb(n.job))) ELSE '{}'::jsonb END
 || CASE WHEN o.kwargs IS DISTINCT FROM n.kwargs THEN jsonb_build_object('kwargs', jsonb_build_array(to_jsonb(o.kwargs), to_jsonb(n.kwargs))) ELSE '{}'::jsonb END
 || CASE WHEN o.cron IS DISTINCT FROM n.cron THEN jsonb_build_object('cron', jsonb_build_array(to_jsonb(o.cron), to_jsonb(n.cron))) ELSE '{}'::jsonb END
 || CASE WHEN o."interval" IS DISTINCT FROM n."interval" THEN jsonb_build_object('interval', jsonb_build_array(to_jsonb(o."interval"), to_jsonb(n."interval"))) ELSE '{}'::jsonb END
 || CASE WHEN o.anchor IS DISTINCT FROM n.anchor THEN jsonb_build_object('anchor', jsonb_build_array(to_jsonb(o.anchor), to_jsonb(n.anchor))) ELSE '{}'::jsonb END
 || CASE WHEN o.status IS DISTINCT FROM n.status THEN jsonb_build_object('status', jsonb_build_array(to_jsonb(o.status), to_jsonb(n.status))) ELSE '{}'::jsonb END
 || CASE WHEN o.misfire_policy IS DISTINCT FROM n.misfire_policy THEN jsonb_build_object('misfire_policy', jsonb_build_array(to_jsonb(o.misfire_policy), to_jsonb(n.misfire_policy))) ELSE '{}'::jsonb END
 || CASE WHEN o.catch_up_limit IS DISTINCT FROM n.catch_up_limit THEN jsonb_build_object('catch_up_limit', jsonb_build_array(to_jsonb(o.catch_up_limit), to_jsonb(n.catch_up_limit))) ELSE '{}'::jsonb END
 || CASE WHEN o.misfire_grace IS DISTINCT FROM n.misfire_grace THEN jsonb_build_object('misfire_grace', jsonb_build_array(to_jsonb(o.misfire_grace), to_jsonb(n.misfire_grace))) ELSE '{}'::jsonb END
 || CASE WHEN o.max_attempts IS DISTINCT FROM n.max_attempts THEN jsonb_build_object('max_attempts', jsonb_build_array(to_jsonb(o.max_attempts), to_jsonb(n.max_attempts))) ELSE '{}'::jsonb END
 || CASE WHEN o.timeout IS DISTINCT FROM n.timeout THEN jsonb_build_object('timeout', jsonb_build_array(to_jsonb(o.timeout), to_jsonb(n.timeout))) ELSE '{}'::jsonb END
 || CASE WHEN o.queue IS DISTINCT FROM n.queue THEN jsonb_build_object('queue', jsonb_build_array(to_jsonb(o.queue), to_jsonb(n.queue))) ELSE '{}'::jsonb END
 || CASE WHEN o.source IS DISTINCT FROM n.source THEN jsonb_build_object('source', jsonb_build_array(to_jsonb(o.source), to_jsonb(n.source))) ELSE '{}'::jsonb END
 || CASE WHEN o.last_error IS DISTINCT FROM n.last_error THEN jsonb_build_object('last_error', jsonb_build_array(to_jsonb(o.last_error), to_jsonb(n.last_error))) ELSE '{}'::jsonb END
 || CASE WHEN o.tenant IS DISTINCT FROM n.tenant THEN jsonb_build_object('tenant', jsonb_build_array(to_jsonb(o.tenant), to_jsonb(n.tenant))) ELSE '{}'::jsonb END
 || CASE WHEN o.dst_fold IS DISTINCT FROM n.dst_fold THEN jsonb_build_object('dst_fold', jsonb_build_array(to_jsonb(o.dst_fold), to_jsonb(n.dst_fold))) ELSE '{}'::jsonb END
 || CASE WHEN o.dst_gap IS DISTINCT FROM n.dst_gap THEN jsonb_build_object('dst_gap', jsonb_build_array(to_jsonb(o.dst_gap), to_jsonb(n.dst_gap))) ELSE '{}'::jsonb END
 || CASE WHEN o.jitter IS DISTINCT FROM n.jitter THEN jsonb_build_object('jitter', jsonb_build_array(to_jsonb(o.jitter), to_jsonb(n.jitter))) ELSE '{}'::jsonb END
 || CASE WHEN o.timezone IS DISTINCT FROM n.timezone THEN jsonb_build_object('timezone', jsonb_build_array(to_jsonb(o.timezone), to_jsonb(n.timezone))) ELSE '{}'::jsonb END
 || CASE WHEN o.overlap IS DISTINCT FROM n.overlap THEN jsonb_build_object('overlap', jsonb_build_array(to_jsonb(o.overlap), to_jsonb(n.overlap))) ELSE '{}'::jsonb END
 || CASE WHEN o.start_deadline IS DISTINCT FROM n.start_deadline THEN jsonb_build_object('start_deadline', jsonb_build_array(to_jsonb(o.start_deadline), to_jsonb(n.start_deadline))) ELSE '{}'::jsonb END
 || CASE WHEN o.pause_reason IS DISTINCT FROM n.pause_reason THEN jsonb_build_object('pause_reason', jsonb_build_array(to_jsonb(o.pause_reason), to_jsonb(n.pause_reason))) ELSE '{}'::jsonb END END AS diff
          FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE ROW(o.name, o.job, o.kwargs, o.cron, o."interval", o.anchor, o.status, o.misfire_policy, o.catch_up_limit, o.misfire_grace, o.max_attempts, o.timeout, o.queue, o.source, o.last_error, o.tenant, o.dst_fold, o.dst_gap, o.jitter, o.timezone, o.overlap, o.start_deadline, o.pause_reason) IS DISTINCT FROM ROW(n.name, n.job, n.kwargs, n.cron, n."interval", n.anchor, n.status, n.misfire_policy, n.catch_up_limit, n.misfire_grace, n.max_attempts, n.timeout, n.queue, n.source, n.last_error, n.tenant, n.dst_fold, n.dst_gap, n.jitter, n.timezone, n.overlap, n.start_deadline, n.pause_reason)
            OR (n.status, n.cron, n."interval", n.anchor, n.job, n.kwargs, n.misfire_policy, n.catch_up_limit, n.misfire_grace, n.max_attempts, n.timeout, n.queue, n.timezone, n.dst_gap, n.dst_fold, n.jitter) IS DISTINCT FROM (o.status, o.cron, o."interval", o.anchor, o.job, o.kwargs, o.misfire_policy, o.catch_up_limit, o.misfire_grace, o.max_attempts, o.timeout, o.queue, o.timezone, o.dst_gap, o.dst_fold, o.jitter)
            OR n.next_fire_at IS NULL
            OR n.next_fire_at < o.next_fire_at
    ),
    recorded AS (
        INSERT INTO pgsched_schedule_change
               (schedule_id, schedule_name, action, actor, at, db_user, application, changes)
        SELECT p.id, p.name, 'changed', 
           coalesce(nullif(current_setting('pgsched.actor', true), ''), 'sql'),
           statement_timestamp(), current_user,
           coalesce(current_setting('application_name', true), ''), p.diff
          FROM pair p
         WHERE p.diff <> '{}'::jsonb
    )
    SELECT (SELECT string_agg(id::text, ',') FROM (SELECT id FROM pair WHERE notify LIMIT 500) t),
           array_agg(id) FILTER (WHERE stopped OR retimed),
           array_agg(CASE WHEN stopped THEN 'schedule ' || status ELSE 'schedule re-timed' END)
               FILTER (WHERE stopped OR retimed),
           array_agg(NOT stopped) FILTER (WHERE stopped OR retimed)
      INTO ids, stop_ids, stop_reasons, stop_future
      FROM pair;
    -- Runs of a schedule that stopped (paused, broken) or changed its timetable
    -- and that no executor has started yet are cancelled (a re-time: future ones).
    IF stop_ids IS NOT NULL THEN
        UPDATE pgsched_job_run r
           SET status = 'cancelled', finished_at = clock_timestamp(), note = c.reason
          FROM unnest(stop_ids, stop_reasons, stop_future) AS c(id, reason, only_future)
         WHERE r.schedule_id = c.id
           AND r.status = 'pending'
           AND r.attempts = 0
           AND (NOT c.only_future OR r.fire_after > clock_timestamp());
    END IF;
    IF ids IS NOT NULL THEN
        PERFORM pg_notify('pgsched_schedule', ids);
    END IF;
    RETURN NULL;
END $$;

-- pgsched_schedule_audit_install()
CREATE FUNCTION pgsched_schedule_audit_install() RETURNS void
    LANGUAGE plpgsql
    AS $_$
DECLARE
    old_cols text;
    new_cols text;
    changed text;   -- column -> [before, after], of the columns that differ
    created text;   -- column -> [null, value], of the columns set
    deleted text;   -- column -> [value, null], of every column
BEGIN
    -- created, deleted: one jsonb_build_object per 20 columns (a function takes at most
    -- 100 arguments), then the keys of the columns left out removed: far cheaper than a
    -- || per column when most columns are there
    WITH col AS (
        SELECT attname, attnum, (row_number() OVER (ORDER BY attnum) - 1) / 20 AS chunk
          FROM pg_attribute
         WHERE attrelid = 'pgsched_schedule'::regclass
           AND attnum > 0
           AND NOT attisdropped
           AND attname <> ALL (pgsched_schedule_runtime_columns())
    ),
    part AS (
        SELECT chunk,
               string_agg(format('%L, jsonb_build_array(NULL::jsonb, to_jsonb(n.%I))',
                                 attname, attname), ', ' ORDER BY attnum) AS created_pairs,
               string_agg(format('%L, jsonb_build_array(to_jsonb(o.%I), NULL::jsonb)',
                                 attname, attname), ', ' ORDER BY attnum) AS deleted_pairs
          FROM col
         GROUP BY chunk
    )
    SELECT (SELECT string_agg('o.' || quote_ident(attname), ', ' ORDER BY attnum) FROM col),
           (SELECT string_agg('n.' || quote_ident(attname), ', ' ORDER BY attnum) FROM col),
           -- an UPDATE changes a column or two: a || of the changed ones is cheapest
           (SELECT string_agg(format('CASE WHEN o.%1$I IS DISTINCT FROM n.%1$I THEN '
                                     'jsonb_build_object(%1$L, jsonb_build_array('
                                     'to_jsonb(o.%1$I), to_jsonb(n.%1$I))) '
                                     'ELSE ''{}''::jsonb END', attname),
                              E'\n || ' ORDER BY attnum) FROM col),
           (SELECT '(('
                   || string_agg('jsonb_build_object(' || created_pairs || ')', ' || '
                                 ORDER BY chunk)
                   || ') - array_remove(ARRAY['
                   || (SELECT string_agg(format('CASE WHEN n.%I IS NULL THEN %L END',
                                                attname, attname),
                                         ', ' ORDER BY attnum) FROM col)
                   || ']::text[], NULL))' FROM part),
           (SELECT string_agg('jsonb_build_object(' || deleted_pairs || ')', ' || ' ORDER BY chunk)
              FROM part)
      INTO old_cols, new_cols, changed, created, deleted;

    EXECUTE format($body$
CREATE OR REPLACE FUNCTION pgsched_schedule_after_insert() RETURNS trigger LANGUAGE plpgsql
    SET jit = off  -- a tuplestore has no statistics: the estimates are wild, and JIT costs seconds
AS $fn$
DECLARE
    ids text;
BEGIN
    INSERT INTO pgsched_schedule_change
           (schedule_id, schedule_name, action, actor, at, db_user, application, changes)
    SELECT n.id, n.name, 'created', 
           coalesce(nullif(current_setting('pgsched.actor', true), ''), 'sql'),
           statement_timestamp(), current_user,
           coalesce(current_setting('application_name', true), ''), %1$s
      FROM new_rows n;
    SELECT string_agg(id::text, ',') INTO ids FROM (SELECT id FROM new_rows LIMIT 500) t;
    IF ids IS NOT NULL THEN
        PERFORM pg_notify('pgsched_schedule', ids);
    END IF;
    RETURN NULL;
END $fn$;
$body$, created);

    EXECUTE format($body$
CREATE OR REPLACE FUNCTION pgsched_schedule_after_delete() RETURNS trigger LANGUAGE plpgsql
    SET jit = off
AS $fn$
DECLARE
    ids text;
BEGIN
    INSERT INTO pgsched_schedule_change
           (schedule_id, schedule_name, action, actor, at, db_user, application, changes)
    SELECT o.id, o.name, 'deleted', 
           coalesce(nullif(current_setting('pgsched.actor', true), ''), 'sql'),
           statement_timestamp(), current_user,
           coalesce(current_setting('application_name', true), ''), %1$s
      FROM old_rows o;
    SELECT string_agg(id::text, ',') INTO ids FROM (SELECT id FROM old_rows LIMIT 500) t;
    IF ids IS NOT NULL THEN
        PERFORM pg_notify('pgsched_schedule', ids);
    END IF;
    RETURN NULL;
END $fn$;
$body$, deleted);

    EXECUTE format($body$
CREATE OR REPLACE FUNCTION pgsched_schedule_after_update() RETURNS trigger LANGUAGE plpgsql
    SET jit = off
AS $fn$
DECLARE
    ids text;
    stop_ids bigint[];
    stop_reasons text[];
    stop_future boolean[];
BEGIN
    -- One join of the transition tables (no LIMIT inside it), kept to the rows that matter.
    WITH pair AS MATERIALIZED (
        SELECT n.id, n.name, n.status,
               o.status = 'active' AND n.status <> 'active' AS stopped,
               (n.cron, n."interval", n.anchor, n.timezone, n.dst_gap, n.dst_fold) IS DISTINCT FROM (o.cron, o."interval", o.anchor, o.timezone, o.dst_gap, o.dst_fold) AS retimed,
               ((n.status, n.cron, n."interval", n.anchor, n.job, n.kwargs, n.misfire_policy, n.catch_up_limit, n.misfire_grace, n.max_attempts, n.timeout, n.queue, n.timezone, n.dst_gap, n.dst_fold, n.jitter) IS DISTINCT FROM (o.status, o.cron, o."interval", o.anchor, o.job, o.kwargs, o.misfire_policy, o.catch_up_limit, o.misfire_grace, o.max_attempts, o.timeout, o.queue, o.timezone, o.dst_gap, o.dst_fold, o.jitter)
                OR n.next_fire_at IS NULL
                OR n.next_fire_at < o.next_fire_at) AS notify,
               CASE WHEN ROW(%1$s) IS DISTINCT FROM ROW(%2$s) THEN %3$s END AS diff
          FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE ROW(%1$s) IS DISTINCT FROM ROW(%2$s)
            OR (n.status, n.cron, n."interval", n.anchor, n.job, n.kwargs, n.misfire_policy, n.catch_up_limit, n.misfire_grace, n.max_attempts, n.timeout, n.queue, n.timezone, n.dst_gap, n.dst_fold, n.jitter) IS DISTINCT FROM (o.status, o.cron, o."interval", o.anchor, o.job, o.kwargs, o.misfire_policy, o.catch_up_limit, o.misfire_grace, o.max_attempts, o.timeout, o.queue, o.timezone, o.dst_gap, o.dst_fold, o.jitter)
            OR n.next_fire_at IS NULL
            OR n.next_fire_at < o.next_fire_at
    ),
    recorded AS (
        INSERT INTO pgsched_schedule_change
               (schedule_id, schedule_name, action, actor, at, db_user, application, changes)
        SELECT p.id, p.name, 'changed', 
           coalesce(nullif(current_setting('pgsched.actor', true), ''), 'sql'),
           statement_timestamp(), current_user,
           coalesce(current_setting('application_name', true), ''), p.diff
          FROM pair p
         WHERE p.diff <> '{}'::jsonb
    )
    SELECT (SELECT string_agg(id::text, ',') FROM (SELECT id FROM pair WHERE notify LIMIT 500) t),
           array_agg(id) FILTER (WHERE stopped OR retimed),
           array_agg(CASE WHEN stopped THEN 'schedule ' || status ELSE 'schedule re-timed' END)
               FILTER (WHERE stopped OR retimed),
           array_agg(NOT stopped) FILTER (WHERE stopped OR retimed)
      INTO ids, stop_ids, stop_reasons, stop_future
      FROM pair;
    -- Runs of a schedule that stopped (paused, broken) or changed its timetable
    -- and that no executor has started yet are cancelled (a re-time: future ones).
    IF stop_ids IS NOT NULL THEN
        UPDATE pgsched_job_run r
           SET status = 'cancelled', finished_at = clock_timestamp(), note = c.reason
          FROM unnest(stop_ids, stop_reasons, stop_future) AS c(id, reason, only_future)
         WHERE r.schedule_id = c.id
           AND r.status = 'pending'
           AND r.attempts = 0
           AND (NOT c.only_future OR r.fire_after > clock_timestamp());
    END IF;
    IF ids IS NOT NULL THEN
        PERFORM pg_notify('pgsched_schedule', ids);
    END IF;
    RETURN NULL;
END $fn$;
$body$, old_cols, new_cols, changed);
END $_$;

-- pgsched_schedule_before_update()
CREATE FUNCTION pgsched_schedule_before_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.status <> 'active' AND NEW.status = 'active'
       AND OLD.unplanned_from IS NULL AND OLD.next_fire_at IS NOT NULL THEN
        -- a stopped schedule is active again: where it stopped, and why, for the
        -- planner's ledger (the first stop wins until the planner has recorded it)
        NEW.unplanned_from := OLD.next_fire_at;
        NEW.unplanned_reason := OLD.status;
    END IF;
    IF (NEW.cron, NEW."interval", NEW.anchor, NEW.timezone, NEW.dst_gap, NEW.dst_fold)
       IS DISTINCT FROM
       (OLD.cron, OLD."interval", OLD.anchor, OLD.timezone, OLD.dst_gap, OLD.dst_fold)
    THEN
        IF OLD.status = 'broken' AND NEW.status = 'broken' THEN
            NEW.status := 'active';
            NEW.last_error := '';
        END IF;
        IF NEW.next_fire_at IS NOT DISTINCT FROM OLD.next_fire_at THEN
            NEW.next_fire_at := NULL;
        END IF;
    ELSIF OLD.status <> 'active' AND NEW.status = 'active'
          AND NEW.next_fire_at IS NOT DISTINCT FROM OLD.next_fire_at THEN
        NEW.next_fire_at := NULL;
    END IF;
    RETURN NEW;
END $$;

-- pgsched_schedule_release_runs()
CREATE FUNCTION pgsched_schedule_release_runs() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE pgsched_job_run r SET schedule_id = NULL FROM gone g WHERE r.schedule_id = g.id;
    RETURN NULL;
END $$;

-- pgsched_schedule_runtime_columns()
CREATE FUNCTION pgsched_schedule_runtime_columns() RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT ARRAY['id', 'next_fire_at', 'last_fire_at', 'skipped_occurrences',
                       'updated_at', 'created_at', 'unplanned_from', 'unplanned_reason']::text[] $$;

-- pgsched_schedule_tenant_quota()
CREATE FUNCTION pgsched_schedule_tenant_quota() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    t pgsched_tenant%ROWTYPE;
    n bigint;
BEGIN
    SELECT * INTO t FROM pgsched_tenant WHERE key = NEW.tenant;
    IF NOT FOUND THEN
        RETURN NEW;  -- TENANT_DEFAULTS: Schedule.save() applies them
    END IF;
    IF t.allowed_jobs IS NOT NULL AND jsonb_typeof(t.allowed_jobs) = 'array'
       AND NOT t.allowed_jobs ? NEW.job THEN
        RAISE EXCEPTION 'allowed_jobs: tenant % may not schedule the job % (allowed_jobs)',
                        quote_literal(NEW.tenant), quote_literal(NEW.job)
              USING ERRCODE = 'check_violation', CONSTRAINT = 'pgsched_schedule_tenant_quota';
    END IF;
    IF t.max_schedules IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.tenant IS DISTINCT FROM NEW.tenant) THEN
        PERFORM pg_advisory_xact_lock(1885825, hashtext(NEW.tenant));
        SELECT count(*) INTO n FROM pgsched_schedule WHERE tenant = NEW.tenant AND id <> NEW.id;
        IF n >= t.max_schedules THEN
            RAISE EXCEPTION 'max_schedules: tenant % has % schedule(s); its quota is % (max_schedules)',
                            quote_literal(NEW.tenant), n, t.max_schedules
                  USING ERRCODE = 'check_violation', CONSTRAINT = 'pgsched_schedule_tenant_quota';
        END IF;
    END IF;
    RETURN NEW;
END $$;

-- pgsched_time_ok(timestamp with time zone)
CREATE FUNCTION pgsched_time_ok(t timestamp with time zone) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT t IS NULL
          OR (t >= '0001-01-01 00:00:00+00'::timestamptz
              AND t < '10000-01-01 00:00:00+00'::timestamptz) $$;


SET default_tablespace = '';

SET default_table_access_method = heap;
