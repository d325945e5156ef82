-- kerneltraj warehouse DDL. Idempotent: run on every read-write connect.
-- No primary keys on purpose: uniqueness is an asset check that can fail and be seen in the UI,
-- not an insert error that hides which rows collided.

CREATE TABLE IF NOT EXISTS warehouse_meta (
    key VARCHAR NOT NULL,
    value VARCHAR
);

CREATE TABLE IF NOT EXISTS input_files (
    path VARCHAR NOT NULL,
    sha256 VARCHAR NOT NULL,
    size_bytes BIGINT,
    accepted INTEGER,
    quarantined INTEGER,
    nonblank_lines INTEGER,
    run_id VARCHAR,
    ingested_at TIMESTAMP
);

-- Public task identities (never hidden sizes or expert source): the catalogue at ingest time.
CREATE TABLE IF NOT EXISTS tasks (
    task_id VARCHAR NOT NULL,
    task_revision VARCHAR NOT NULL,
    family VARCHAR,
    lineage VARCHAR,
    public_card JSON,
    run_id VARCHAR
);

CREATE TABLE IF NOT EXISTS raw_attempts (
    attempt_id VARCHAR NOT NULL,
    task_id VARCHAR NOT NULL,
    agent VARCHAR,
    model VARCHAR,
    trajectory_id VARCHAR NOT NULL,
    turn INTEGER NOT NULL,
    language VARCHAR,
    entry_point VARCHAR,
    source VARCHAR,
    source_sha256 VARCHAR NOT NULL,
    source_format VARCHAR,
    generation_tokens BIGINT,
    generation_budget_tokens BIGINT,
    started_at VARCHAR,
    finished_at VARCHAR,
    claimed_speedup DOUBLE,
    origin VARCHAR NOT NULL,
    input_sha256 VARCHAR,
    extra JSON,
    run_id VARCHAR,
    ingested_at TIMESTAMP
);

CREATE TABLE IF NOT EXISTS quarantine (
    origin VARCHAR NOT NULL,
    attempt_id VARCHAR,
    reason_code VARCHAR,
    reason VARCHAR,
    raw_excerpt VARCHAR,
    import_origin VARCHAR,
    input_sha256 VARCHAR,
    run_id VARCHAR,
    ingested_at TIMESTAMP,
    duplicate_of VARCHAR        -- the admitted attempt a repeat repeats (duplicate_id, duplicate_attempt)
);
-- Warehouses made before repeats named the attempt they repeat gain the column here (a no-op on new ones).
ALTER TABLE quarantine ADD COLUMN IF NOT EXISTS duplicate_of VARCHAR;

-- One row per attempt per grading pass (`primary`, `revalidation`) per grader version and task revision.
-- Hidden sizes never reach this table: their size keys are redacted before insert.
CREATE TABLE IF NOT EXISTS graded_attempts (
    attempt_id VARCHAR NOT NULL,
    grading_pass VARCHAR NOT NULL,
    task_id VARCHAR NOT NULL,
    task_revision VARCHAR NOT NULL,
    grader_version VARCHAR NOT NULL,
    source_sha256 VARCHAR NOT NULL,
    fingerprint_id VARCHAR,
    status VARCHAR NOT NULL,
    reason_code VARCHAR NOT NULL,
    reason VARCHAR,
    reward DOUBLE NOT NULL,
    speedup_geomean DOUBLE,
    measured_speedup_geomean DOUBLE,
    sizes JSON,
    tolerances JSON,
    phase_seconds JSON,
    startup_s DOUBLE,
    compile_s DOUBLE,
    correctness_s DOUBLE,
    timing_s DOUBLE,
    expert_s DOUBLE,
    total_s DOUBLE,
    retry_s DOUBLE,
    tries INTEGER,
    seed BIGINT,
    profile VARCHAR,
    device VARCHAR,
    sharing VARCHAR,
    sandbox JSON,
    kernels_launched JSON,
    run_id VARCHAR,
    graded_at TIMESTAMP
);

CREATE TABLE IF NOT EXISTS fingerprints (
    fingerprint_id VARCHAR NOT NULL,
    fingerprint JSON,
    first_run_id VARCHAR
);

CREATE TABLE IF NOT EXISTS trajectories (
    trajectory_id VARCHAR NOT NULL,
    task_id VARCHAR,
    agent VARCHAR,
    model VARCHAR,
    n_turns INTEGER,
    turns STRUCT(turn INTEGER, attempt_id VARCHAR, status VARCHAR, reward DOUBLE)[],
    rewards DOUBLE[],
    best_reward DOUBLE,
    first_correct_turn INTEGER,
    grader_version VARCHAR,
    run_id VARCHAR
);

CREATE TABLE IF NOT EXISTS revalidated_records (
    attempt_id VARCHAR NOT NULL,
    task_id VARCHAR NOT NULL,
    task_revision VARCHAR NOT NULL,
    grader_version VARCHAR NOT NULL,
    fingerprint_id VARCHAR,
    revalidation_fingerprint_id VARCHAR,
    primary_status VARCHAR,
    revalidation_status VARCHAR,
    primary_reward DOUBLE,
    revalidation_reward DOUBLE,
    primary_speedup DOUBLE,
    revalidation_speedup DOUBLE,
    primary_label VARCHAR,
    revalidation_label VARCHAR,
    agree BOOLEAN,
    revalidated BOOLEAN,
    ambiguous_near_tie BOOLEAN,
    false_speedup_label BOOLEAN,
    primary_seed BIGINT,
    revalidation_seed BIGINT,
    run_id VARCHAR,
    primary_log2_lo DOUBLE,
    primary_log2_hi DOUBLE,
    revalidation_log2_lo DOUBLE,
    revalidation_log2_hi DOUBLE,
    agreement VARCHAR,          -- agree / disagree / ambiguous (an interval straddles a tie-band edge)
    fast_unconfirmed BOOLEAN,   -- faster in the primary grade, ambiguous in the recheck
    tie_band_log2 DOUBLE
);
-- Warehouses made before the interval labels gain their columns here (a no-op on new ones).
ALTER TABLE revalidated_records ADD COLUMN IF NOT EXISTS primary_log2_lo DOUBLE;
ALTER TABLE revalidated_records ADD COLUMN IF NOT EXISTS primary_log2_hi DOUBLE;
ALTER TABLE revalidated_records ADD COLUMN IF NOT EXISTS revalidation_log2_lo DOUBLE;
ALTER TABLE revalidated_records ADD COLUMN IF NOT EXISTS revalidation_log2_hi DOUBLE;
ALTER TABLE revalidated_records ADD COLUMN IF NOT EXISTS agreement VARCHAR;
ALTER TABLE revalidated_records ADD COLUMN IF NOT EXISTS fast_unconfirmed BOOLEAN;
ALTER TABLE revalidated_records ADD COLUMN IF NOT EXISTS tie_band_log2 DOUBLE;

-- The frozen split manifest (from <repo>/splits/split_manifest-<version>.json) as loaded by the last run.
CREATE TABLE IF NOT EXISTS split_manifest (
    task_id VARCHAR NOT NULL,
    family VARCHAR,
    lineage VARCHAR,
    workload_key VARCHAR,
    split VARCHAR NOT NULL,
    split_version VARCHAR,
    manifest_sha256 VARCHAR,
    run_id VARCHAR
);

CREATE TABLE IF NOT EXISTS leakage_findings (
    kind VARCHAR NOT NULL,
    key VARCHAR,
    detail VARCHAR,
    split_version VARCHAR,
    run_id VARCHAR
);

-- Long format so later sections (dollars, contention) add rows, not columns.
CREATE TABLE IF NOT EXISTS accounting (
    category VARCHAR NOT NULL,
    name VARCHAR NOT NULL,
    value DOUBLE,
    unit VARCHAR,
    run_id VARCHAR
);

CREATE TABLE IF NOT EXISTS releases (
    version VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    run_id VARCHAR,
    created_at TIMESTAMP,
    configs JSON
);
