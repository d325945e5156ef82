-- One query per published config of a release, loaded as `release.<config>`; plus bookkeeping.
-- Sealed data never appears here: hidden size keys were redacted before grades were stored, task
-- cards are their public form, and no expert source is selected.

-- The three splits come from the frozen manifest (`split_manifest`); every config with rows per task carries
-- a `split` column and is written as one shard per split (assets/release.py SPLIT_CONFIGS).
-- Every published reward says where it was measured (backend, device), what it means there (reward_kind) and
-- whether the independent recheck confirmed it (revalidation_state), through the macros of sql/rewards.sql; a
-- reward the grader could not take here (published_reward) is NULL, never the floor.

-- name: attempts
-- No reward of ours here (claimed_speedup is the source's claim): an attempt's outcome is its revalidation_state;
-- its rewards are in grades (join on attempt_id).
SELECT a.attempt_id, a.task_id, agent, model, trajectory_id, turn, language, entry_point, source, source_sha256,
       source_format, generation_tokens, generation_budget_tokens, started_at, finished_at, claimed_speedup,
       a.origin, input_sha256, CAST(extra AS VARCHAR) AS extra,
       revalidation_state(l.terminal_state) AS revalidation_state, m.split
FROM raw_attempts a
LEFT JOIN ledger l ON l.ledger_source = 'raw' AND l.attempt_id = a.attempt_id
LEFT JOIN split_manifest m USING (task_id) ORDER BY attempt_id;

-- name: grades
-- Each grade (the primary and the recheck) with where it was measured and what its reward means; every row of an
-- attempt carries the attempt's revalidation_state (whether the primary reward survived the recheck).
SELECT g.attempt_id, grading_pass, g.task_id, task_revision, grader_version, g.fingerprint_id, status, reason_code,
       reason, published_reward(status, reward) AS reward,
       status NOT IN ('infra_error', 'unsupported_on_backend') AS graded_here,
       reward_kind(status, measured_backend(f.kind, device)) AS reward_kind,
       revalidation_state(l.terminal_state) AS revalidation_state,
       speedup_geomean, measured_speedup_geomean, CAST(sizes AS VARCHAR) AS sizes,
       CAST(tolerances AS VARCHAR) AS tolerances, startup_s, compile_s, correctness_s, timing_s, expert_s,
       total_s, retry_s, tries, seed, profile, device, measured_backend(f.kind, device) AS backend, sharing,
       CAST(kernels_launched AS VARCHAR) AS kernels_launched, g.run_id, graded_at, m.split
FROM current_grades g
LEFT JOIN (SELECT fingerprint_id, any_value(json_extract_string(fingerprint, '$.kind')) AS kind
           FROM fingerprints GROUP BY fingerprint_id) f USING (fingerprint_id)
LEFT JOIN ledger l ON l.ledger_source = 'raw' AND l.attempt_id = g.attempt_id
LEFT JOIN split_manifest m USING (task_id)
ORDER BY g.attempt_id, grading_pass;

-- name: trajectories
-- Each turn says where its reward was measured (backend, device), what the reward means there and whether the
-- independent recheck confirmed it.
WITH flat AS (
    SELECT t.trajectory_id, u.x.turn AS turn, u.x.attempt_id AS attempt_id, u.x.status AS status,
           u.x.reward AS reward
    FROM trajectories t, unnest(t.turns) AS u(x)
), facts AS (
    SELECT f.trajectory_id, f.turn, f.attempt_id, f.status,
           measured_backend(json_extract_string(fp.fingerprint, '$.kind'), g.device) AS backend, g.device,
           reward_kind(f.status, measured_backend(json_extract_string(fp.fingerprint, '$.kind'), g.device))
               AS reward_kind,
           published_reward(f.status, f.reward) AS reward,
           revalidation_state(l.terminal_state) AS revalidation_state,
           published_reward(v.revalidation_status, v.revalidation_reward) AS recheck_reward
    FROM flat f
    LEFT JOIN current_grades g ON g.attempt_id = f.attempt_id AND g.grading_pass = 'primary'
    LEFT JOIN (SELECT fingerprint_id, any_value(fingerprint) AS fingerprint FROM fingerprints
               GROUP BY fingerprint_id) fp ON fp.fingerprint_id = g.fingerprint_id
    LEFT JOIN ledger l ON l.ledger_source = 'raw' AND l.attempt_id = f.attempt_id
    LEFT JOIN revalidated_records v ON v.attempt_id = f.attempt_id
), turns AS (
    SELECT trajectory_id,
           list({'turn': turn, 'attempt_id': attempt_id, 'status': status, 'reward': reward,
                 'reward_kind': reward_kind, 'backend': backend, 'device': device,
                 'revalidation_state': revalidation_state, 'recheck_reward': recheck_reward}
                ORDER BY turn, attempt_id) AS turns
    FROM facts GROUP BY trajectory_id
)
SELECT t.trajectory_id, t.task_id, t.agent, t.model, t.n_turns, u.turns,
       list_transform(u.turns, lambda x: x.reward) AS rewards,
       list_max(list_transform(u.turns, lambda x: x.reward)) AS best_reward, t.first_correct_turn, t.grader_version,
       m.split, m.split_version
FROM trajectories t JOIN turns u USING (trajectory_id) LEFT JOIN split_manifest m USING (task_id)
ORDER BY t.trajectory_id;

-- name: revalidated
-- Both grades of each rechecked attempt, each with the backend and device it was measured on.
WITH fp AS (SELECT fingerprint_id, any_value(json_extract_string(fingerprint, '$.kind')) AS kind
            FROM fingerprints GROUP BY fingerprint_id)
SELECT r.* REPLACE (published_reward(r.primary_status, r.primary_reward) AS primary_reward,
                    published_reward(r.revalidation_status, r.revalidation_reward) AS revalidation_reward),
       a.trajectory_id, a.turn,
       measured_backend(pf.kind, pg.device) AS primary_backend, pg.device AS primary_device,
       measured_backend(rf.kind, rg.device) AS revalidation_backend, rg.device AS revalidation_device,
       reward_kind(r.primary_status, measured_backend(pf.kind, pg.device)) AS reward_kind,
       revalidation_state(l.terminal_state) AS revalidation_state, m.split
FROM revalidated_records r JOIN raw_attempts a USING (attempt_id)
LEFT JOIN current_grades pg ON pg.attempt_id = r.attempt_id AND pg.grading_pass = 'primary'
LEFT JOIN current_grades rg ON rg.attempt_id = r.attempt_id AND rg.grading_pass = 'revalidation'
LEFT JOIN fp pf ON pf.fingerprint_id = r.fingerprint_id
LEFT JOIN fp rf ON rf.fingerprint_id = r.revalidation_fingerprint_id
LEFT JOIN ledger l ON l.ledger_source = 'raw' AND l.attempt_id = r.attempt_id
LEFT JOIN split_manifest m ON m.task_id = r.task_id
ORDER BY attempt_id;

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
SELECT t.task_id, task_revision, t.family, t.lineage, CAST(public_card AS VARCHAR) AS public_card, m.split
FROM tasks t LEFT JOIN split_manifest m USING (task_id) ORDER BY task_id;

-- name: fingerprints
SELECT fingerprint_id, CAST(fingerprint AS VARCHAR) AS fingerprint FROM fingerprints
WHERE fingerprint_id IN (SELECT fingerprint_id FROM current_grades) ORDER BY fingerprint_id;

-- name: split_rows
-- Rows of one config's query (a query above, put in place of the placeholder) per split; NULL counts rows
-- whose task has no split.
SELECT split, count(*) AS n FROM ({query}) GROUP BY split;

-- name: split_shard
-- One split's rows of a config's query (placeholders filled in Python: COPY takes no bound parameters).
SELECT * FROM ({query}) WHERE split = '{split}';

-- name: manifest
SELECT DISTINCT split_version, manifest_sha256 FROM split_manifest ORDER BY split_version;

-- name: sources
-- Which corpora the release holds content from: the attempts' formats and the tasks' lineage prefixes.
SELECT DISTINCT source FROM (
    SELECT source_format AS source FROM raw_attempts
    UNION ALL SELECT split_part(lineage, '/', 1) FROM tasks WHERE task_id IN (SELECT task_id FROM raw_attempts)
) WHERE source IS NOT NULL ORDER BY source;

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
    (SELECT list(DISTINCT coalesce(json_extract_string(f.fingerprint, '$.kind'),
                                   CASE WHEN g.device = 'cpu' THEN 'cpu' ELSE 'cuda' END))
     FROM current_grades g LEFT JOIN fingerprints f USING (fingerprint_id)) AS backends,
    (SELECT list(DISTINCT profile) FROM current_grades) AS profiles;

-- name: missing_lineage
SELECT attempt_id FROM read_parquet($path)
WHERE coalesce(attempt_id, '') = '' OR coalesce(task_revision, '') = '' OR coalesce(grader_version, '') = ''
   OR coalesce(fingerprint_id, '') = '';
