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

-- name: record_costs
-- One row per ledger record (every raw attempt and every quarantined row) with the grader seconds charged to it.
-- The phase columns are the current primary grade's and they nest, so they never add up to a total: reference
-- and transfer are inside correctness, expert inside timing, and primary_s (the grade's `total`) is the whole
-- attempt: start-up, compile, correctness, timing, teardown and the untimed static checks. A record costs
--   grader_s = primary_s + retry_s + revalidation_s + revalidation_retry_s + replay_s + superseded_s
-- retry_s: tries thrown away before the grade that counts (infra errors, lost results, interrupted batches the
-- service never answered); failed_s: the part of primary_s whose grade ended other than correct (not added
-- again); replay_s: the attempt's contention replays; superseded_s: its older grades (earlier grader version,
-- task revision or source, kept in graded_attempts as history: the cost of regrading after a change).
-- Quarantined rows were never graded: zero seconds, but a row. Grades are summed per attempt before the join so
-- one ledger row stays one row, and only raw rows are charged (a quarantined duplicate line can carry the id of
-- an admitted attempt).
-- Times: no submission or acceptance timestamp is recorded. Submission is the attempt's raw_attempts.ingested_at
-- (when the ingest admitted it; the ingest replaces the table on every run, so it is the latest admission);
-- acceptance is the later graded_at of the two grades that made the record `revalidated` (its acceptance is
-- decided from them in the same run). A record whose grades predate its latest admission was graded in an
-- earlier run (resumed): its first submission is not stored, so its time to acceptance is NULL, never negative.
CREATE OR REPLACE TABLE record_costs AS
WITH cur AS (
    SELECT attempt_id,
           count(*) FILTER (WHERE grading_pass = 'primary') AS primary_grades,
           count(*) FILTER (WHERE grading_pass = 'revalidation') AS revalidation_grades,
           bool_and(startup_s IS NOT NULL AND compile_s IS NOT NULL AND correctness_s IS NOT NULL
                    AND timing_s IS NOT NULL AND expert_s IS NOT NULL AND total_s IS NOT NULL
                    AND retry_s IS NOT NULL) FILTER (WHERE grading_pass = 'primary') AS primary_complete,
           bool_and(total_s IS NOT NULL AND retry_s IS NOT NULL)
               FILTER (WHERE grading_pass = 'revalidation') AS revalidation_complete,
           sum(startup_s) FILTER (WHERE grading_pass = 'primary') AS startup_s,
           sum(compile_s) FILTER (WHERE grading_pass = 'primary') AS compile_s,
           sum(correctness_s) FILTER (WHERE grading_pass = 'primary') AS correctness_s,
           sum(timing_s) FILTER (WHERE grading_pass = 'primary') AS timing_s,
           sum(expert_s) FILTER (WHERE grading_pass = 'primary') AS expert_s,
           -- Only in the phase_seconds JSON (NULL in grades from graders that did not time them).
           sum(TRY_CAST(phase_seconds->>'$.reference' AS DOUBLE))
               FILTER (WHERE grading_pass = 'primary') AS reference_s,
           sum(TRY_CAST(phase_seconds->>'$.transfer' AS DOUBLE)) FILTER (WHERE grading_pass = 'primary') AS transfer_s,
           sum(TRY_CAST(phase_seconds->>'$.teardown' AS DOUBLE)) FILTER (WHERE grading_pass = 'primary') AS teardown_s,
           sum(total_s) FILTER (WHERE grading_pass = 'primary') AS primary_s,
           sum(retry_s) FILTER (WHERE grading_pass = 'primary') AS retry_s,
           sum(tries - 1) FILTER (WHERE grading_pass = 'primary') AS retries,
           sum(total_s) FILTER (WHERE grading_pass = 'primary' AND status <> 'correct') AS failed_s,
           sum(total_s) FILTER (WHERE grading_pass = 'revalidation') AS revalidation_s,
           sum(retry_s) FILTER (WHERE grading_pass = 'revalidation') AS revalidation_retry_s,
           sum(tries - 1) FILTER (WHERE grading_pass = 'revalidation') AS revalidation_retries,
           max(graded_at) FILTER (WHERE grading_pass IN ('primary', 'revalidation')) AS last_graded_at
    FROM current_grades GROUP BY attempt_id
), superseded AS (
    -- Stored grades that are not current: matched on every column the current_grades view keys on.
    SELECT g.attempt_id, count(*) AS superseded_grades,
           sum(coalesce(g.total_s, 0) + coalesce(g.retry_s, 0)) AS superseded_s
    FROM graded_attempts g
    WHERE NOT EXISTS (
        SELECT 1 FROM current_grades c
        WHERE c.attempt_id = g.attempt_id AND c.grading_pass = g.grading_pass AND c.task_id = g.task_id
          AND c.task_revision = g.task_revision AND c.grader_version = g.grader_version
          AND c.source_sha256 = g.source_sha256 AND c.run_id IS NOT DISTINCT FROM g.run_id
          AND c.graded_at IS NOT DISTINCT FROM g.graded_at)
    GROUP BY g.attempt_id
), replay AS (
    SELECT attempt_id, count(*) AS replay_grades, sum(coalesce(total_s, 0) + coalesce(retry_s, 0)) AS replay_s
    FROM contention_replay GROUP BY attempt_id
), admitted AS (
    SELECT attempt_id, max(ingested_at) AS ingested_at FROM raw_attempts GROUP BY attempt_id
), charged AS (
    SELECT l.ledger_source, l.record_key, l.attempt_id, l.terminal_state, l.primary_status,
           coalesce(c.startup_s, 0) AS startup_s, coalesce(c.compile_s, 0) AS compile_s,
           coalesce(c.correctness_s, 0) AS correctness_s, coalesce(c.timing_s, 0) AS timing_s,
           coalesce(c.expert_s, 0) AS expert_s, coalesce(c.reference_s, 0) AS reference_s,
           coalesce(c.transfer_s, 0) AS transfer_s, coalesce(c.teardown_s, 0) AS teardown_s,
           coalesce(c.primary_s, 0) AS primary_s, coalesce(c.retry_s, 0) AS retry_s,
           coalesce(c.retries, 0) AS retries, coalesce(c.failed_s, 0) AS failed_s,
           coalesce(c.revalidation_s, 0) AS revalidation_s, coalesce(c.revalidation_retry_s, 0) AS revalidation_retry_s,
           coalesce(c.revalidation_retries, 0) AS revalidation_retries,
           coalesce(p.replay_s, 0) AS replay_s, coalesce(p.replay_grades, 0) AS replay_grades,
           coalesce(s.superseded_s, 0) AS superseded_s, coalesce(s.superseded_grades, 0) AS superseded_grades,
           a.ingested_at AS submitted_at,
           CASE WHEN l.terminal_state = 'revalidated' THEN c.last_graded_at END AS accepted_at,
           coalesce(l.ledger_source = 'quarantine'
                    OR (l.terminal_state IS NOT NULL AND c.primary_grades = 1 AND c.primary_complete
                        AND (l.terminal_state IN ('infra_error', 'unsupported_on_backend')
                             OR (c.revalidation_grades = 1 AND c.revalidation_complete))), false) AS full_cost
    FROM ledger l
    LEFT JOIN cur c ON l.ledger_source = 'raw' AND c.attempt_id = l.attempt_id
    LEFT JOIN superseded s ON l.ledger_source = 'raw' AND s.attempt_id = l.attempt_id
    LEFT JOIN replay p ON l.ledger_source = 'raw' AND p.attempt_id = l.attempt_id
    LEFT JOIN admitted a ON l.ledger_source = 'raw' AND a.attempt_id = l.attempt_id
)
SELECT *,
       primary_s + retry_s + revalidation_s + revalidation_retry_s + replay_s + superseded_s AS grader_s,
       CASE WHEN accepted_at >= submitted_at
            THEN date_diff('microsecond', submitted_at, accepted_at) / 1e6 END AS submit_to_accept_s
FROM charged;

-- name: recheck_overhead
-- Wall seconds of each recheck run (revalidation_runs) not spent inside a grade that run stored: the grader
-- service's start, zygote boot, dispatch and commits. The run's workers grade concurrently, so with several
-- workers its grades' seconds can exceed its wall time and hide the overhead: such a run counts 0 (a lower bound).
-- Grades a later run replaced under the same key are gone, so their seconds count here too.
SELECT count(*) AS runs,
       coalesce(sum(greatest(w.wall_s - coalesce(g.graded_s, 0), 0)), 0) AS overhead_s
FROM revalidation_runs w
LEFT JOIN (SELECT run_id, sum(coalesce(total_s, 0) + coalesce(retry_s, 0)) AS graded_s
           FROM graded_attempts WHERE grading_pass = 'revalidation' GROUP BY run_id) g USING (run_id);

-- name: replay_overhead
-- The same for each contention setting: its wall time x its grader services (each a grader's seconds) less the
-- seconds of the replay grades it stored (co-tenant start and stop, the latency service's baseline, boots).
SELECT count(*) AS settings,
       coalesce(sum(greatest(s.wall_s * coalesce(s.graders, 1) - coalesce(g.graded_s, 0), 0)), 0) AS overhead_s
FROM contention_settings s
LEFT JOIN (SELECT run_id, setting, sum(coalesce(total_s, 0) + coalesce(retry_s, 0)) AS graded_s
           FROM contention_replay GROUP BY run_id, setting) g USING (run_id, setting);

-- name: cost_rows
-- The per-record costs summed into the long table (category 'cost'), with what no record can carry.
-- Unattributed: grades of attempts no longer in raw_attempts (orphans) and the run overheads passed in.
-- No table records the primary pass's wall time, so its service start-up is not in any figure here.
INSERT INTO accounting
WITH sums AS (
    SELECT count(*) AS records, count(*) FILTER (WHERE full_cost) AS full_rows,
           count(*) FILTER (WHERE terminal_state = 'revalidated') AS accepted,
           count(submit_to_accept_s) AS accepted_timed,
           quantile_cont(submit_to_accept_s, 0.5) AS median_submit_to_accept_s,
           coalesce(sum(startup_s), 0) AS startup, coalesce(sum(compile_s), 0) AS compile,
           coalesce(sum(correctness_s), 0) AS correctness, coalesce(sum(timing_s), 0) AS timing,
           coalesce(sum(expert_s), 0) AS expert, coalesce(sum(reference_s), 0) AS reference,
           coalesce(sum(transfer_s), 0) AS transfer, coalesce(sum(teardown_s), 0) AS teardown,
           coalesce(sum(primary_s), 0) AS primary_total, coalesce(sum(retry_s), 0) AS primary_retries,
           coalesce(sum(failed_s), 0) AS failures, coalesce(sum(revalidation_s), 0) AS revalidation,
           coalesce(sum(revalidation_retry_s), 0) AS revalidation_retries, coalesce(sum(replay_s), 0) AS replay,
           coalesce(sum(superseded_s), 0) AS superseded, coalesce(sum(grader_s), 0) AS attributed_s
    FROM record_costs
), orphans AS (
    SELECT (SELECT coalesce(sum(coalesce(total_s, 0) + coalesce(retry_s, 0)), 0) FROM graded_attempts
            WHERE attempt_id NOT IN (SELECT attempt_id FROM raw_attempts))
         + (SELECT coalesce(sum(coalesce(total_s, 0) + coalesce(retry_s, 0)), 0) FROM contention_replay
            WHERE attempt_id NOT IN (SELECT attempt_id FROM raw_attempts)) AS orphan_s
), parts AS (
    SELECT s.*, o.orphan_s, CAST($recheck_overhead_s AS DOUBLE) AS recheck_overhead_s,
           CAST($replay_overhead_s AS DOUBLE) AS replay_overhead_s
    FROM sums s, orphans o
), totals AS (
    SELECT *, orphan_s + recheck_overhead_s + replay_overhead_s AS unattributed_s FROM parts
)
SELECT 'cost', name, value, unit, $run_id
FROM totals, LATERAL (VALUES
    ('startup', startup, 's'), ('compile', compile, 's'), ('correctness', correctness, 's'),
    ('timing', timing, 's'), ('expert', expert, 's'), ('reference', reference, 's'), ('transfer', transfer, 's'),
    ('teardown', teardown, 's'), ('primary_total', primary_total, 's'), ('primary_retries', primary_retries, 's'),
    ('failures', failures, 's'), ('revalidation', revalidation, 's'),
    ('revalidation_retries', revalidation_retries, 's'), ('replay', replay, 's'), ('superseded', superseded, 's'),
    ('attributed_s', attributed_s, 's'), ('unattributed_orphan_s', orphan_s, 's'),
    ('unattributed_recheck_overhead_s', recheck_overhead_s, 's'),
    ('unattributed_replay_overhead_s', replay_overhead_s, 's'),
    -- NULL: no revalidation_runs table, so no recheck overhead could be measured (not zero overhead).
    ('recheck_runs_recorded', CAST($recheck_runs AS DOUBLE), 'rows'),
    ('replay_settings_recorded', CAST($replay_settings AS DOUBLE), 'rows'),
    ('unattributed_s', unattributed_s, 's'), ('recorded_s', attributed_s + unattributed_s, 's'),
    ('coverage_seconds', CASE WHEN attributed_s + unattributed_s > 0
                              THEN attributed_s / (attributed_s + unattributed_s) END, 'ratio'),
    ('records', records, 'rows'), ('records_full_cost', full_rows, 'rows'),
    ('coverage_records', CASE WHEN records > 0 THEN full_rows / records END, 'ratio'),
    ('accepted', accepted, 'rows'), ('accepted_timed', accepted_timed, 'rows'),
    ('median_submit_to_accept_s', median_submit_to_accept_s, 's')
) AS v(name, value, unit);

-- name: cost_record_sums
-- The per-record table summed for the conservation check (column names = the published 'cost' names).
SELECT count(*) AS records, count(DISTINCT (ledger_source, record_key)) AS record_keys,
       (SELECT count(*) FROM ledger) AS ledger_rows,
       count(*) FILTER (WHERE full_cost) AS records_full_cost,
       coalesce(sum(startup_s), 0) AS startup, coalesce(sum(compile_s), 0) AS compile,
       coalesce(sum(correctness_s), 0) AS correctness, coalesce(sum(timing_s), 0) AS timing,
       coalesce(sum(expert_s), 0) AS expert, coalesce(sum(primary_s), 0) AS primary_total,
       coalesce(sum(retry_s + revalidation_retry_s), 0) AS retries, coalesce(sum(failed_s), 0) AS failures,
       coalesce(sum(revalidation_s), 0) AS revalidation, coalesce(sum(grader_s), 0) AS attributed_s,
       count(*) FILTER (WHERE ledger_source = 'quarantine' AND grader_s <> 0) AS charged_quarantine
FROM record_costs;

-- name: cost_stored_seconds
-- Every grader second stored in a grade row, counted from the grade tables alone (not from record_costs).
SELECT (SELECT coalesce(sum(coalesce(total_s, 0) + coalesce(retry_s, 0)), 0) FROM graded_attempts)
     + (SELECT coalesce(sum(coalesce(total_s, 0) + coalesce(retry_s, 0)), 0) FROM contention_replay) AS stored_s;

-- name: cost_published
SELECT name, value, unit FROM accounting WHERE category = 'cost' ORDER BY name;

-- name: cost_distribution
-- Per raw record (quarantined rows are zero by construction and would only pull the median down).
SELECT quantile_cont(grader_s, 0.5) AS median_s, quantile_cont(grader_s, 0.9) AS p90_s,
       quantile_cont(submit_to_accept_s, 0.5) AS median_submit_to_accept_s
FROM record_costs WHERE ledger_source = 'raw';

-- name: cost_preview
SELECT record_key, terminal_state, round(primary_s, 3) AS primary_s, round(retry_s, 3) AS retry_s,
       round(revalidation_s, 3) AS revalidation_s, round(replay_s, 3) AS replay_s, round(grader_s, 3) AS grader_s,
       round(submit_to_accept_s, 1) AS submit_to_accept_s, full_cost
FROM record_costs ORDER BY grader_s DESC, record_key LIMIT 8;

-- name: cost_incomplete
-- Ledger records without a full cost row (no terminal state, or a grade the state needs is missing or lacks seconds).
SELECT ledger_source, record_key, terminal_state, primary_status FROM record_costs WHERE NOT full_cost LIMIT 20;
