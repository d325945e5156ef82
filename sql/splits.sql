-- Queries of the family_splits stage, loaded as `splits.<name>`.

-- name: clear
DELETE FROM split_manifest;
DELETE FROM leakage_findings;

-- name: attempt_sources
SELECT attempt_id, task_id, source FROM raw_attempts ORDER BY attempt_id;

-- name: split_counts
SELECT m.split, count(DISTINCT m.task_id) AS tasks, count(r.attempt_id) AS attempts
FROM split_manifest m LEFT JOIN raw_attempts r ON r.task_id = m.task_id
GROUP BY m.split ORDER BY m.split;

-- name: preview
SELECT task_id, family, lineage, split FROM split_manifest
WHERE task_id IN (SELECT task_id FROM raw_attempts) ORDER BY split, task_id LIMIT 8;

-- name: findings
SELECT kind, key, detail FROM leakage_findings ORDER BY kind, key;

-- name: unassigned_tasks
-- Attempted tasks that have no row, or several rows, in the frozen manifest.
SELECT r.task_id, count(DISTINCT m.split) AS splits
FROM (SELECT DISTINCT task_id FROM raw_attempts) r
LEFT JOIN split_manifest m ON m.task_id = r.task_id
GROUP BY r.task_id
HAVING count(DISTINCT m.split) <> 1 OR count(m.task_id) <> 1;
