-- One query per published config of a release, loaded as `release.<config>`; plus bookkeeping.
-- Sealed data never appears here: hidden size keys were redacted before grades were stored, task
-- cards are their public form, and no expert source is selected.

-- name: attempts
SELECT attempt_id, task_id, agent, model, trajectory_id, turn, language, entry_point, source, source_sha256,
       source_format, generation_tokens, generation_budget_tokens, started_at, finished_at, claimed_speedup,
       origin, input_sha256, CAST(extra AS VARCHAR) AS extra
FROM raw_attempts ORDER BY attempt_id;

-- name: grades
SELECT attempt_id, grading_pass, task_id, task_revision, grader_version, fingerprint_id, status, reason_code,
       reason, reward, speedup_geomean, measured_speedup_geomean, CAST(sizes AS VARCHAR) AS sizes,
       CAST(tolerances AS VARCHAR) AS tolerances, startup_s, compile_s, correctness_s, timing_s, expert_s,
       total_s, retry_s, tries, seed, profile, device, sharing, CAST(kernels_launched AS VARCHAR) AS kernels_launched,
       run_id, graded_at
FROM current_grades ORDER BY attempt_id, grading_pass;

-- name: trajectories
SELECT trajectory_id, task_id, agent, model, n_turns, turns, rewards, best_reward, first_correct_turn,
       grader_version
FROM trajectories ORDER BY trajectory_id;

-- name: revalidated
SELECT r.*, a.trajectory_id, a.turn
FROM revalidated_records r JOIN raw_attempts a USING (attempt_id) ORDER BY attempt_id;

-- name: trajectories_train
SELECT t.*, m.split, m.split_version FROM trajectories t JOIN split_manifest m USING (task_id)
WHERE m.split = 'train' ORDER BY t.trajectory_id;

-- name: trajectories_validation
SELECT t.*, m.split, m.split_version FROM trajectories t JOIN split_manifest m USING (task_id)
WHERE m.split = 'validation' ORDER BY t.trajectory_id;

-- name: trajectories_test_heldout
SELECT t.*, m.split, m.split_version FROM trajectories t JOIN split_manifest m USING (task_id)
WHERE m.split = 'test_heldout' ORDER BY t.trajectory_id;

-- name: splits
SELECT task_id, family, lineage, workload_key, split, split_version, manifest_sha256 FROM split_manifest ORDER BY task_id;

-- name: ledger
SELECT ledger_source, record_key, attempt_id, origin, primary_status, terminal_state
FROM ledger ORDER BY ledger_source, record_key;

-- name: quarantine
SELECT origin, attempt_id, reason_code, reason, raw_excerpt, input_sha256 FROM quarantine ORDER BY origin;

-- name: accounting
SELECT category, name, value, unit FROM accounting ORDER BY category, name;

-- name: tasks
SELECT task_id, task_revision, family, lineage, CAST(public_card AS VARCHAR) AS public_card
FROM tasks ORDER BY task_id;

-- name: fingerprints
SELECT fingerprint_id, CAST(fingerprint AS VARCHAR) AS fingerprint FROM fingerprints
WHERE fingerprint_id IN (SELECT fingerprint_id FROM current_grades) ORDER BY fingerprint_id;

-- name: record
INSERT INTO releases VALUES ($version, $path, $run_id, $created_at, $configs);

-- name: forget
DELETE FROM releases WHERE version = $version;

-- name: latest
SELECT version, path, run_id, created_at, CAST(configs AS VARCHAR) AS configs
FROM releases ORDER BY created_at DESC LIMIT 1;

-- name: identities
SELECT
    (SELECT list(DISTINCT grader_version) FROM current_grades) AS grader_versions,
    (SELECT list(DISTINCT fingerprint_id) FROM current_grades) AS fingerprint_ids,
    (SELECT list(DISTINCT device) FROM current_grades) AS devices,
    (SELECT list(DISTINCT profile) FROM current_grades) AS profiles;

-- name: missing_lineage
SELECT attempt_id FROM read_parquet($path)
WHERE coalesce(attempt_id, '') = '' OR coalesce(task_revision, '') = '' OR coalesce(grader_version, '') = ''
   OR coalesce(fingerprint_id, '') = '';
