-- Queries of the grading passes (graded_attempts, revalidated_records), loaded as `grading.<name>`.

-- name: set_version
DELETE FROM warehouse_meta WHERE key = 'grader_version';
INSERT INTO warehouse_meta VALUES ('grader_version', $grader_version);

-- name: pending_primary
-- Attempts without a usable primary grade for this source, task revision and grader version.
-- An infra_error is the grader's failure, not a verdict: it is graded again on the next run.
SELECT r.attempt_id, r.task_id, r.source, r.language, r.entry_point, r.source_sha256, t.task_revision
FROM raw_attempts r
JOIN tasks t ON t.task_id = r.task_id
WHERE NOT EXISTS (
    SELECT 1 FROM graded_attempts g
    WHERE g.attempt_id = r.attempt_id AND g.grading_pass = 'primary' AND g.grader_version = $grader_version
      AND g.task_revision = t.task_revision AND g.source_sha256 = r.source_sha256 AND g.status <> 'infra_error')
ORDER BY r.attempt_id;

-- name: pending_revalidation
-- Attempts with a usable current primary grade but no usable revalidation grade yet.
SELECT r.attempt_id, r.task_id, r.source, r.language, r.entry_point, r.source_sha256, t.task_revision
FROM raw_attempts r
JOIN tasks t ON t.task_id = r.task_id
JOIN current_grades p ON p.attempt_id = r.attempt_id AND p.grading_pass = 'primary'
WHERE p.status NOT IN ('infra_error', 'unsupported_on_backend')
  AND NOT EXISTS (
    SELECT 1 FROM graded_attempts g
    WHERE g.attempt_id = r.attempt_id AND g.grading_pass = 'revalidation' AND g.grader_version = $grader_version
      AND g.task_revision = t.task_revision AND g.source_sha256 = r.source_sha256 AND g.status <> 'infra_error')
ORDER BY r.attempt_id;

-- name: delete_grade
DELETE FROM graded_attempts WHERE attempt_id = ? AND grading_pass = ? AND grader_version = ? AND task_revision = ?;

-- name: insert_fingerprint
INSERT INTO fingerprints
SELECT ?::VARCHAR, ?::JSON, ?::VARCHAR
WHERE NOT EXISTS (SELECT 1 FROM fingerprints WHERE fingerprint_id = ?);

-- name: current_count
SELECT count(*) AS n FROM current_grades WHERE grading_pass = $grading_pass AND status <> 'infra_error';

-- name: status_counts
SELECT status, count(*) AS n FROM current_grades WHERE grading_pass = $grading_pass GROUP BY status ORDER BY status;

-- name: preview
SELECT attempt_id, status, reason_code, reward, speedup_geomean, total_s, device, seed
FROM current_grades WHERE grading_pass = 'primary' ORDER BY attempt_id LIMIT 8;

-- name: reward_vs_speed
-- Every current grade of a pass with the speed the timer measured (also for floored attempts): the picture.
SELECT status, reward, measured_speedup_geomean FROM current_grades WHERE grading_pass = $grading_pass;

-- name: cheats
-- Planted cheats of the demo corpus, with their grade in this pass (NULL when ungraded: that fails too).
SELECT r.attempt_id, json_extract_string(r.extra, '$.intended') AS intended, g.status, g.reward
FROM raw_attempts r
LEFT JOIN current_grades g ON g.attempt_id = r.attempt_id AND g.grading_pass = $grading_pass
WHERE starts_with(coalesce(json_extract_string(r.extra, '$.intended'), ''), 'cheat:')
ORDER BY r.attempt_id;

-- name: rewards
SELECT attempt_id, status, reward, sizes FROM current_grades WHERE grading_pass = $grading_pass ORDER BY attempt_id;

-- name: missing_lineage
SELECT g.attempt_id, g.task_revision, g.grader_version, g.fingerprint_id
FROM current_grades g
LEFT JOIN fingerprints f ON f.fingerprint_id = g.fingerprint_id
WHERE g.grading_pass = $grading_pass
  AND (coalesce(g.attempt_id, '') = '' OR coalesce(g.task_revision, '') = ''
       OR coalesce(g.grader_version, '') = '' OR coalesce(g.fingerprint_id, '') = '' OR f.fingerprint_id IS NULL);

-- name: ungraded_primary
SELECT r.attempt_id, count(g.attempt_id) AS current_grades
FROM raw_attempts r
LEFT JOIN current_grades g ON g.attempt_id = r.attempt_id AND g.grading_pass = 'primary'
GROUP BY r.attempt_id
HAVING count(g.attempt_id) <> 1
ORDER BY r.attempt_id;

-- name: ungraded_revalidation
SELECT p.attempt_id, count(g.attempt_id) AS current_grades
FROM current_grades p
LEFT JOIN current_grades g ON g.attempt_id = p.attempt_id AND g.grading_pass = 'revalidation'
WHERE p.grading_pass = 'primary' AND p.status NOT IN ('infra_error', 'unsupported_on_backend')
GROUP BY p.attempt_id
HAVING count(g.attempt_id) <> 1
ORDER BY p.attempt_id;
