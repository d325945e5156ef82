-- Queries of the accounting stage, loaded as `accounting.<name>`.

-- name: rebuild
-- Long format (category, name, value, unit): later sections (dollars, contention) add rows, not columns.
DELETE FROM accounting;
INSERT INTO accounting
SELECT 'ledger', 'attempts_in', count(*), 'rows', $run_id FROM ledger
UNION ALL
SELECT 'ledger', 'raw_attempts', count(*) FILTER (WHERE ledger_source = 'raw'), 'rows', $run_id FROM ledger
UNION ALL
SELECT 'ledger', 'quarantined', count(*) FILTER (WHERE ledger_source = 'quarantine'), 'rows', $run_id FROM ledger
UNION ALL
SELECT 'ledger', 'unaccounted', count(*) FILTER (WHERE terminal_state IS NULL), 'rows', $run_id FROM ledger
UNION ALL
SELECT 'terminal_state', terminal_state, count(*), 'rows', $run_id
FROM ledger WHERE terminal_state IS NOT NULL GROUP BY terminal_state
UNION ALL
SELECT 'primary_status', status, count(*), 'rows', $run_id
FROM current_grades WHERE grading_pass = 'primary' GROUP BY status
UNION ALL
SELECT 'grader_seconds', phase, coalesce(sum(seconds), 0), 's', $run_id
FROM (
    SELECT 'startup' AS phase, startup_s AS seconds FROM current_grades WHERE grading_pass = 'primary'
    UNION ALL SELECT 'compile', compile_s FROM current_grades WHERE grading_pass = 'primary'
    UNION ALL SELECT 'correctness', correctness_s FROM current_grades WHERE grading_pass = 'primary'
    UNION ALL SELECT 'timing', timing_s FROM current_grades WHERE grading_pass = 'primary'
    UNION ALL SELECT 'expert', expert_s FROM current_grades WHERE grading_pass = 'primary'
    UNION ALL SELECT 'primary_total', total_s FROM current_grades WHERE grading_pass = 'primary'
    UNION ALL SELECT 'revalidation', total_s FROM current_grades WHERE grading_pass = 'revalidation'
    UNION ALL SELECT 'retries', retry_s FROM current_grades
    UNION ALL SELECT 'failures', total_s FROM current_grades WHERE grading_pass = 'primary' AND status <> 'correct'
) GROUP BY phase
UNION ALL
SELECT 'records', 'revalidated', count(*) FILTER (WHERE revalidated), 'rows', $run_id FROM revalidated_records
UNION ALL
SELECT 'records', 'ambiguous_near_ties', count(*) FILTER (WHERE ambiguous_near_tie), 'rows', $run_id
FROM revalidated_records
UNION ALL
SELECT 'records', 'false_speedup_labels', count(*) FILTER (WHERE false_speedup_label), 'rows', $run_id
FROM revalidated_records;

-- name: preview
SELECT category, name, value, unit FROM accounting ORDER BY category, name;

-- name: conservation
-- Independent counts for the ledger conservation check.
SELECT
    (SELECT count(*) FROM raw_attempts) AS raw_attempts,
    (SELECT count(*) FROM quarantine) AS quarantined,
    (SELECT coalesce(sum(nonblank_lines), 0) FROM input_files) AS input_lines,
    (SELECT count(*) FROM ledger) AS ledger_rows,
    (SELECT count(DISTINCT (ledger_source, record_key)) FROM ledger) AS ledger_keys,
    (SELECT count(*) FROM ledger WHERE terminal_state IS NULL) AS unaccounted;

-- name: published
SELECT category, name, value FROM accounting;

-- name: unaccounted
SELECT ledger_source, record_key, origin, primary_status FROM ledger WHERE terminal_state IS NULL LIMIT 20;
