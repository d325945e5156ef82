-- Queries of `kerneltraj lineage`, loaded as `lineage.<name>`; each takes $record_id (an attempt id;
-- `raw_attempt` and `quarantined` also take a row's file:line, ours or the imported corpus's own).

-- name: raw_attempt
SELECT r.attempt_id, r.task_id, r.agent, r.model, r.trajectory_id, r.turn, r.language, r.origin,
       r.source_sha256, r.source_format, f.path AS input_file, r.input_sha256,
       json_extract_string(r.extra, '$.import_origin') AS import_origin, r.run_id AS ingest_run_id, r.ingested_at
FROM raw_attempts r LEFT JOIN input_files f ON f.sha256 = r.input_sha256
WHERE r.attempt_id = $record_id OR r.origin = $record_id
   OR json_extract_string(r.extra, '$.import_origin') = $record_id;

-- name: quarantined
SELECT origin, attempt_id, reason_code, reason, import_origin, input_sha256, run_id AS ingest_run_id
FROM quarantine WHERE attempt_id = $record_id OR origin = $record_id OR import_origin = $record_id
ORDER BY origin;

-- name: grades
-- Every grade ever taken of the attempt (current or not), newest first.
SELECT g.grading_pass, g.status, g.reason_code, g.reward, g.speedup_geomean, g.grader_version, g.task_revision,
       g.seed, g.fingerprint_id, g.device, g.profile, g.tries, g.run_id, g.graded_at,
       EXISTS (SELECT 1 FROM current_grades c WHERE c.attempt_id = g.attempt_id AND c.grading_pass = g.grading_pass
               AND c.grader_version = g.grader_version AND c.task_revision = g.task_revision) AS current
FROM graded_attempts g WHERE g.attempt_id = $record_id ORDER BY g.graded_at DESC;

-- name: revalidation
SELECT primary_label, revalidation_label, agree, revalidated, ambiguous_near_tie, false_speedup_label, run_id
FROM revalidated_records WHERE attempt_id = $record_id;

-- name: trajectory
SELECT t.trajectory_id, t.n_turns, t.best_reward, t.first_correct_turn, t.run_id
FROM trajectories t JOIN raw_attempts r ON r.trajectory_id = t.trajectory_id WHERE r.attempt_id = $record_id;

-- name: split
SELECT m.split, m.family, m.lineage, m.split_version, m.manifest_sha256
FROM split_manifest m JOIN raw_attempts r ON r.task_id = m.task_id WHERE r.attempt_id = $record_id;

-- name: ledger
SELECT ledger_source, terminal_state FROM ledger WHERE attempt_id = $record_id OR record_key = $record_id;

-- name: fingerprints
SELECT f.fingerprint_id, CAST(f.fingerprint AS VARCHAR) AS fingerprint, f.first_run_id
FROM fingerprints f
WHERE f.fingerprint_id IN (SELECT fingerprint_id FROM graded_attempts WHERE attempt_id = $record_id);

-- name: published
-- Whether the attempt is in the latest release's grades shard.
SELECT count(*) AS rows FROM read_parquet($shard) WHERE attempt_id = $record_id;
