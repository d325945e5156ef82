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

-- name: quarantine_rows
-- Every quarantined row with its reason and where it came from (file:line); $reason narrows to one code.
SELECT origin, attempt_id, reason_code, reason, import_origin
FROM quarantine
WHERE $reason IS NULL OR reason_code = $reason
ORDER BY origin;

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

-- name: admissible
-- The bulk fast path (pipelines.core.rawattempt.admissible_rows): the lines of the registered Arrow table
-- ingest_block(line_no, line, line_commas) that parse_record would admit unchanged, with their typed fields. Every
-- condition is a sufficient one; a line failing any of them is not rejected here but parsed by
-- parse_line, which then gives the verdict and the quarantine reason.
-- Strictness beyond DuckDB's JSON reader, which also takes trailing commas and NaN/Infinity spellings:
--   * commas: in a strict object of k members, commas = k - 1 + the commas inside its values. The values'
--     commas are counted in their decoded (strings) or re-serialised (extra) form, which keeps every comma
--     of the line except a trailing one; an unknown or repeated key adds at least one. So equality holds
--     only for strict JSON with known, distinct keys. `\u002c` (an escaped comma) would break the count:
--     such lines take the slow path. The line's and the source's commas are counted in Python (numpy), which
--     keeps only rows whose source holds exactly `source_commas`.
--   * numbers: typed fields are integers or finite doubles; `extra` is re-read by json.loads in Python.
-- Types come from json_type (UBIGINT for a non-negative integer literal, DOUBLE for any fraction or
-- exponent, VARCHAR for a string), values from one from_json; both read the line once.
WITH parsed AS MATERIALIZED (
    SELECT line_no, line, line_commas,
           TRY(json_type(line, ['$', '$.attempt_id', '$.task_id', '$.agent', '$.model', '$.trajectory_id', '$.turn',
                                '$.language', '$.source', '$.entry_point', '$.generation_tokens',
                                '$.generation_budget_tokens', '$.started_at', '$.finished_at', '$.source_format',
                                '$.claimed_speedup', '$.extra'])) AS t,
           TRY(from_json(line, '{"attempt_id": "VARCHAR", "task_id": "VARCHAR", "agent": "VARCHAR",
                                 "model": "VARCHAR", "trajectory_id": "VARCHAR", "turn": "VARCHAR",
                                 "language": "VARCHAR", "source": "VARCHAR", "entry_point": "VARCHAR",
                                 "generation_tokens": "VARCHAR", "generation_budget_tokens": "VARCHAR",
                                 "started_at": "VARCHAR", "finished_at": "VARCHAR", "source_format": "VARCHAR",
                                 "claimed_speedup": "VARCHAR", "extra": "JSON"}')) AS v
    FROM ingest_block
    WHERE strlen(line) <= $max_line_bytes AND NOT contains(line, '\u002c') AND NOT contains(line, '\u002C')
), counted AS MATERIALIZED (
    -- The commas the source must hold for the count to close; Python counts the source's own (cheaper there).
    SELECT line_no, t, v,
           line_commas - (len(list_filter(t[2:], lambda x: x IS NOT NULL)) - 1
             + coalesce(strlen(v.attempt_id) - strlen(replace(v.attempt_id, ',', '')), 0)
             + coalesce(strlen(v.task_id) - strlen(replace(v.task_id, ',', '')), 0)
             + coalesce(strlen(v.agent) - strlen(replace(v.agent, ',', '')), 0)
             + coalesce(strlen(v.model) - strlen(replace(v.model, ',', '')), 0)
             + coalesce(strlen(v.trajectory_id) - strlen(replace(v.trajectory_id, ',', '')), 0)
             + coalesce(strlen(v.language) - strlen(replace(v.language, ',', '')), 0)
             + coalesce(strlen(v.entry_point) - strlen(replace(v.entry_point, ',', '')), 0)
             + coalesce(strlen(v.started_at) - strlen(replace(v.started_at, ',', '')), 0)
             + coalesce(strlen(v.finished_at) - strlen(replace(v.finished_at, ',', '')), 0)
             + coalesce(strlen(v.source_format) - strlen(replace(v.source_format, ',', '')), 0)
             + coalesce(strlen(CAST(v.extra AS VARCHAR)) - strlen(replace(CAST(v.extra AS VARCHAR), ',', '')), 0))
             AS source_commas
    FROM parsed WHERE t[1] = 'OBJECT'
)
SELECT line_no, v.attempt_id, v.task_id, v.agent, v.model, v.trajectory_id, CAST(v.turn AS INTEGER) AS turn,
       v.language, coalesce(v.entry_point, 'run') AS entry_point, v.source,
       CASE WHEN t[15] IS NULL THEN 'kerneltraj' ELSE v.source_format END AS source_format,
       CAST(v.generation_tokens AS BIGINT) AS generation_tokens,
       CAST(v.generation_budget_tokens AS BIGINT) AS generation_budget_tokens,
       v.started_at, v.finished_at, CAST(v.claimed_speedup AS DOUBLE) AS claimed_speedup,
       CAST(v.extra AS VARCHAR) AS extra_json, source_commas
FROM counted
WHERE true
  -- ids: a string matching pipelines.core.rawattempt._ID (a literal: a bound pattern is compiled row by row; a
  -- test holds the two equal), without '..'; the task in the catalogue
  AND t[2] = 'VARCHAR' AND regexp_full_match(v.attempt_id, '[A-Za-z0-9][A-Za-z0-9_.:\-/]{0,199}')
  AND NOT contains(v.attempt_id, '..')
  AND t[3] = 'VARCHAR' AND regexp_full_match(v.task_id, '[A-Za-z0-9][A-Za-z0-9_.:\-/]{0,199}')
  AND NOT contains(v.task_id, '..')
  AND t[6] = 'VARCHAR' AND regexp_full_match(v.trajectory_id, '[A-Za-z0-9][A-Za-z0-9_.:\-/]{0,199}')
  AND NOT contains(v.trajectory_id, '..')
  AND list_contains($known_tasks, v.task_id)
  -- names: matching pipelines.core.rawattempt._NAME (a literal, as the ids; a test holds the two equal), not
  -- opening with a script URL scheme (_SCRIPT_SCHEME); entry_point absent or an ASCII identifier
  AND t[4] = 'VARCHAR' AND regexp_full_match(v.agent, '[A-Za-z0-9][A-Za-z0-9_.:@+\-/ (),]{0,199}')
  AND NOT regexp_matches(lower(v.agent), '^(javascript|vbscript|data):')
  AND t[5] = 'VARCHAR' AND regexp_full_match(v.model, '[A-Za-z0-9][A-Za-z0-9_.:@+\-/ (),]{0,199}')
  AND NOT regexp_matches(lower(v.model), '^(javascript|vbscript|data):')
  AND t[8] = 'VARCHAR' AND list_contains($languages, v.language)
  AND (t[10] IS NULL OR (t[10] = 'VARCHAR' AND strlen(v.entry_point) <= 200
                         AND regexp_full_match(v.entry_point, '[A-Za-z_][A-Za-z0-9_]*')))
  AND t[7] = 'UBIGINT' AND TRY_CAST(v.turn AS BIGINT) BETWEEN 1 AND 10000
  AND t[9] = 'VARCHAR' AND strlen(v.source) <= $max_source_bytes AND NOT contains(v.source, chr(0))
  AND (t[11] IS NULL OR t[11] = 'NULL' OR (t[11] IN ('UBIGINT', 'BIGINT')
       AND TRY_CAST(v.generation_tokens AS BIGINT) BETWEEN 0 AND 4611686018427387903))
  AND (t[12] IS NULL OR t[12] = 'NULL' OR (t[12] IN ('UBIGINT', 'BIGINT')
       AND TRY_CAST(v.generation_budget_tokens AS BIGINT) BETWEEN 0 AND 4611686018427387903))
  -- timestamps: a strict ISO-8601 subset datetime.fromisoformat reads (valid date, hour < 24, offset < 24h)
  AND (t[13] IS NULL OR t[13] = 'NULL' OR (t[13] = 'VARCHAR'
       AND regexp_full_match(v.started_at, '[0-9]{4}-[0-9]{2}-[0-9]{2}T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?')
       AND NOT starts_with(v.started_at, '0000') AND TRY_CAST(substr(v.started_at, 1, 10) AS DATE) IS NOT NULL))
  AND (t[14] IS NULL OR t[14] = 'NULL' OR (t[14] = 'VARCHAR'
       AND regexp_full_match(v.finished_at, '[0-9]{4}-[0-9]{2}-[0-9]{2}T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?')
       AND NOT starts_with(v.finished_at, '0000') AND TRY_CAST(substr(v.finished_at, 1, 10) AS DATE) IS NOT NULL))
  AND (t[15] IS NULL OR t[15] IN ('NULL', 'VARCHAR'))
  AND (t[16] IS NULL OR t[16] = 'NULL' OR (t[16] IN ('UBIGINT', 'BIGINT', 'DOUBLE')
       AND isfinite(TRY_CAST(v.claimed_speedup AS DOUBLE)) AND TRY_CAST(v.claimed_speedup AS DOUBLE) > 0
       AND TRY_CAST(v.claimed_speedup AS DOUBLE) < 1e300))
  AND (t[17] IS NULL OR t[17] IN ('NULL', 'OBJECT'));

-- name: insert_admitted
-- Rows the fast path admitted, streamed as Arrow batches (ingest_admitted), as attempt_row() would write them.
INSERT INTO raw_attempts (attempt_id, task_id, agent, model, trajectory_id, turn, language, entry_point, source,
                          source_sha256, source_format, generation_tokens, generation_budget_tokens, started_at,
                          finished_at, claimed_speedup, origin, input_sha256, extra, run_id, ingested_at)
SELECT attempt_id, task_id, agent, model, trajectory_id, turn, language, entry_point, source, source_sha256,
       source_format, generation_tokens, generation_budget_tokens, started_at, finished_at, claimed_speedup,
       origin, input_sha256, extra, $run_id, $ingested_at
FROM ingest_admitted;
