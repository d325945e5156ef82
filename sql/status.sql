-- Queries of `kerneltraj status`, loaded as `status.<name>`.

-- name: latest_release
SELECT version, path, run_id, created_at, CAST(configs AS VARCHAR) AS configs
FROM releases ORDER BY created_at DESC LIMIT 1;

-- name: accounting
SELECT category, name, value FROM accounting ORDER BY category, name;

-- name: asset_rows
-- Rows per asset, as each asset counts them in its Dagster metadata.
SELECT 'raw_attempts' AS asset, count(*) AS rows FROM raw_attempts
UNION ALL SELECT 'quarantine', count(*) FROM quarantine
UNION ALL SELECT 'graded_attempts', count(*) FROM current_grades WHERE grading_pass = 'primary'
UNION ALL SELECT 'trajectories', count(*) FROM trajectories
UNION ALL SELECT 'revalidated_records', count(*) FROM revalidated_records
UNION ALL SELECT 'family_splits', count(*) FROM split_manifest
UNION ALL SELECT 'accounting', count(*) FROM accounting;
