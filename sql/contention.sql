-- Queries of the contention replay and the revalidation report, loaded as `contention.<name>`.

-- name: create
-- The replay's own tables (not in schema.sql yet): one row per declared setting, one row per grade.
CREATE TABLE IF NOT EXISTS contention_settings (
    run_id VARCHAR NOT NULL,
    setting VARCHAR NOT NULL,
    graders INTEGER,
    repeats INTEGER,
    device VARCHAR,
    device_kind VARCHAR,
    pairs INTEGER,
    grades_requested INTEGER,
    grades_recorded INTEGER,
    missing INTEGER,
    wall_s DOUBLE,
    sample_rule VARCHAR,
    price_usd_per_hour DOUBLE,
    started_at TIMESTAMP,
    error VARCHAR,
    cotenants JSON,
    cotenants_gone BOOLEAN,
    nvml_pre JSON,
    nvml_post JSON,
    flags JSON,
    verdict VARCHAR,
    processes_listed INTEGER,
    alone_requests INTEGER,
    alone_errors INTEGER,
    alone_p50_ms DOUBLE,
    alone_p99_ms DOUBLE,
    service_requests INTEGER,
    service_errors INTEGER,
    service_p50_ms DOUBLE,
    service_p99_ms DOUBLE
);
CREATE TABLE IF NOT EXISTS contention_replay (
    run_id VARCHAR NOT NULL,
    setting VARCHAR NOT NULL,
    grader_index INTEGER,
    repeat INTEGER,
    attempt_id VARCHAR NOT NULL,
    task_id VARCHAR NOT NULL,
    task_revision VARCHAR,
    grader_version VARCHAR,
    fingerprint_id VARCHAR,
    device VARCHAR,
    sharing VARCHAR,
    status VARCHAR NOT NULL,
    reason_code VARCHAR,
    reason VARCHAR,
    reward DOUBLE,
    speedup_geomean DOUBLE,
    sizes JSON,
    total_s DOUBLE,
    timing_s DOUBLE,
    tries INTEGER,
    retry_s DOUBLE,
    seed BIGINT,
    label VARCHAR,
    log2_lo DOUBLE,
    log2_hi DOUBLE,
    primary_status VARCHAR,
    primary_reward DOUBLE,
    primary_label VARCHAR,
    primary_log2_lo DOUBLE,
    primary_log2_hi DOUBLE,
    graded_at TIMESTAMP
);

-- name: table_exists
SELECT count(*) AS n FROM information_schema.tables WHERE table_name = $name;

-- name: clear
-- A replay replaces the previous one whole (inside the caller's transaction).
DELETE FROM contention_settings;
DELETE FROM contention_replay;

-- name: candidates
-- Correct current primary grades with what a regrade needs; the sample is drawn from these in Python.
SELECT g.attempt_id, g.task_id, g.status AS primary_status, g.reward AS primary_reward,
       CAST(g.sizes AS VARCHAR) AS primary_sizes, g.total_s AS primary_total_s,
       r.source, r.language, r.entry_point, r.source_sha256
FROM current_grades g JOIN raw_attempts r USING (attempt_id)
WHERE g.grading_pass = 'primary' AND g.status = 'correct'
ORDER BY g.attempt_id;

-- name: settings
SELECT * EXCLUDE (nvml_pre, nvml_post), CAST(flags AS VARCHAR) AS flags, CAST(cotenants AS VARCHAR) AS cotenants
FROM contention_settings ORDER BY started_at, setting;

-- name: nvml
SELECT setting, CAST(nvml_pre AS VARCHAR) AS nvml_pre, CAST(nvml_post AS VARCHAR) AS nvml_post
FROM contention_settings ORDER BY started_at, setting;

-- name: replay
SELECT setting, grader_index, repeat, attempt_id, task_id, status, reward, label, log2_lo, log2_hi,
       primary_status, primary_reward, primary_label, primary_log2_lo, primary_log2_hi, total_s, device,
       CAST(sizes AS VARCHAR) AS sizes
FROM contention_replay ORDER BY setting, attempt_id, repeat, grader_index;

-- name: preview
SELECT setting, attempt_id, repeat, grader_index, status, reward, label, primary_label, device
FROM contention_replay ORDER BY setting, attempt_id, repeat LIMIT 8;

-- name: recheck
-- The recheck pass (revalidated_records) as unit rows for pipelines.grading.agreement.
SELECT r.attempt_id, r.task_id, r.primary_status, r.revalidation_status, r.primary_reward, r.revalidation_reward,
       CAST(p.sizes AS VARCHAR) AS primary_sizes, CAST(v.sizes AS VARCHAR) AS revalidation_sizes,
       p.device AS primary_device, v.device AS revalidation_device
FROM revalidated_records r
JOIN current_grades p ON p.attempt_id = r.attempt_id AND p.grading_pass = 'primary'
JOIN current_grades v ON v.attempt_id = r.attempt_id AND v.grading_pass = 'revalidation'
ORDER BY r.attempt_id;

-- name: recheck_throughput
-- Records revalidated by the recheck runs that graded them, over those runs' wall time and devices.
-- A resumed run that graded nothing adds neither records nor time.
SELECT count(*) FILTER (WHERE r.revalidated) AS revalidated,
       count(*) AS graded,
       (SELECT sum(wall_s) FROM revalidation_runs WHERE graded_now > 0) AS wall_s,
       (SELECT sum(wall_s * devices) FROM revalidation_runs WHERE graded_now > 0) AS device_s,
       (SELECT list(DISTINCT device) FROM current_grades WHERE grading_pass = 'revalidation') AS devices
FROM revalidated_records r
JOIN current_grades v ON v.attempt_id = r.attempt_id AND v.grading_pass = 'revalidation'
WHERE v.run_id IN (SELECT run_id FROM revalidation_runs WHERE graded_now > 0);
