-- The learning comparison (baseline vs treatment checkpoints on held-out families), loaded as `learning.<name>`.

-- name: create
CREATE TABLE IF NOT EXISTS checkpoint_grades (
    attempt_id VARCHAR PRIMARY KEY,
    checkpoint VARCHAR NOT NULL,
    task_id VARCHAR NOT NULL,
    family VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    reward DOUBLE NOT NULL,
    speedup DOUBLE,
    budget_tokens BIGINT,
    run_id VARCHAR
);
CREATE TABLE IF NOT EXISTS learning_comparison (
    manifest_version VARCHAR NOT NULL,
    verdict VARCHAR NOT NULL,
    result_json VARCHAR NOT NULL,
    run_id VARCHAR,
    created_at TIMESTAMP DEFAULT current_timestamp
);

-- name: clear
DELETE FROM checkpoint_grades;
DELETE FROM learning_comparison;

-- name: latest
SELECT manifest_version, verdict, result_json FROM learning_comparison ORDER BY created_at DESC LIMIT 1;
