-- Queries of the raw_attempts stage, loaded as `ingest.<name>`.

-- name: clear
-- The ingest batch is the whole input set: replace it in one transaction.
DELETE FROM raw_attempts;
DELETE FROM quarantine;
DELETE FROM input_files;
DELETE FROM tasks;

-- name: preview
SELECT attempt_id, task_id, agent, model, trajectory_id, turn, language, origin
FROM raw_attempts ORDER BY origin LIMIT 8;

-- name: quarantine_reasons
SELECT reason_code, count(*) AS n FROM quarantine GROUP BY reason_code ORDER BY n DESC;

-- name: duplicate_ids
SELECT attempt_id, count(*) AS n, string_agg(origin, ', ') AS origins
FROM raw_attempts GROUP BY attempt_id HAVING count(*) > 1 ORDER BY attempt_id;

-- name: quarantine_without_reason
SELECT origin, attempt_id, reason_code, reason
FROM quarantine
WHERE coalesce(trim(origin), '') = '' OR coalesce(trim(reason_code), '') = '' OR coalesce(trim(reason), '') = '';

-- name: unaccounted_lines
SELECT f.path, f.nonblank_lines, a.n AS accepted, q.n AS quarantined
FROM input_files f,
     LATERAL (SELECT count(*) AS n FROM raw_attempts r WHERE starts_with(r.origin, f.path || ':')) a,
     LATERAL (SELECT count(*) AS n FROM quarantine x WHERE starts_with(x.origin, f.path || ':')) q
WHERE f.nonblank_lines <> a.n + q.n;
