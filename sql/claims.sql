-- Claim audit: what imported corpora claim about their attempts, against our primary grades (`claims.<name>`).

-- name: create
-- Both tables are replaced whole by each audit run (the claims files are re-read every time).
CREATE TABLE IF NOT EXISTS imported_claims (
    claim_id VARCHAR NOT NULL,
    source_format VARCHAR NOT NULL,
    origin VARCHAR,
    attempt_id VARCHAR,
    attempt_admitted BOOLEAN,
    task_id VARCHAR,
    level INTEGER,
    gpu VARCHAR,
    baseline VARCHAR,
    claimed_speedup DOUBLE,
    claimed_correct BOOLEAN,
    claim JSON,
    claims_file VARCHAR,
    run_id VARCHAR
);
CREATE TABLE IF NOT EXISTS claim_audit (
    claim_id VARCHAR NOT NULL,
    source_format VARCHAR NOT NULL,
    attempt_id VARCHAR,
    task_id VARCHAR,
    level INTEGER,
    gpu VARCHAR,
    baseline VARCHAR,
    comparable BOOLEAN NOT NULL,
    claimed_speedup DOUBLE,
    claim_bucket VARCHAR,
    status VARCHAR,
    reason_code VARCHAR,
    device VARCHAR,
    same_gpu BOOLEAN,
    measured_speedup DOUBLE,
    measured_log2_low DOUBLE,
    measured_log2_high DOUBLE,
    claimed_over_measured DOUBLE,
    audit_class VARCHAR NOT NULL,
    audit_reason VARCHAR NOT NULL,
    grader_version VARCHAR,
    run_id VARCHAR
);

-- name: clear
DELETE FROM imported_claims;
DELETE FROM claim_audit;

-- name: claims_with_grades
-- Every imported claim with the current primary grade of its attempt (NULL columns: no grade) and
-- whether the task's expert is its own PyTorch reference (KernelBench cards: lineage kernelbench/L*).
-- A claim whose attempt repeats another's task and source (quarantined as duplicate_attempt: the same
-- CUDA-L1 code in two GPUs' files) is held against the grade of the attempt it repeats, under that id.
WITH repeats AS (
    SELECT attempt_id, any_value(duplicate_of) AS duplicate_of
    FROM quarantine WHERE reason_code = 'duplicate_attempt' AND duplicate_of IS NOT NULL GROUP BY attempt_id
), claims AS (
    SELECT c.* REPLACE (coalesce(d.duplicate_of, c.attempt_id) AS attempt_id)
    FROM imported_claims c LEFT JOIN repeats d ON d.attempt_id = c.attempt_id
)
SELECT c.claim_id, c.source_format, c.attempt_id, c.attempt_admitted, c.task_id, c.level, c.gpu, c.baseline,
       c.claimed_speedup, c.claimed_correct,
       r.attempt_id IS NOT NULL AS in_warehouse,
       starts_with(coalesce(t.lineage, ''), 'kernelbench/') AS expert_is_reference,
       g.status, g.reason_code, g.device, g.sizes, g.grader_version
FROM claims c
LEFT JOIN raw_attempts r ON r.attempt_id = c.attempt_id
LEFT JOIN tasks t ON t.task_id = c.task_id
LEFT JOIN current_grades g ON g.attempt_id = c.attempt_id AND g.grading_pass = 'primary'
ORDER BY c.claim_id;

-- name: by_class
-- Comparable claims (our expert is the claim's baseline) by audit class and reason; the others apart.
SELECT comparable, audit_class, audit_reason, count(*) AS n
FROM claim_audit GROUP BY comparable, audit_class, audit_reason ORDER BY comparable DESC, audit_class, audit_reason;

-- name: by_level
SELECT source_format, level, audit_class, count(*) AS n,
       count(*) / sum(count(*)) OVER (PARTITION BY source_format, level) AS share
FROM claim_audit WHERE comparable
GROUP BY source_format, level, audit_class ORDER BY source_format, level, audit_class;

-- name: by_bucket
SELECT claim_bucket, audit_class, count(*) AS n,
       count(*) / sum(count(*)) OVER (PARTITION BY claim_bucket) AS share
FROM claim_audit WHERE comparable AND claim_bucket IS NOT NULL
GROUP BY claim_bucket, audit_class ORDER BY min(min(claimed_speedup)) OVER (PARTITION BY claim_bucket), audit_class;

-- name: worst_ratio
-- Largest claimed / measured ratios (above 1) among comparable claims we timed (any status: a wrong kernel's
-- timing is kept beside its status, never presented as a speedup).
SELECT claim_id, attempt_id, gpu, device, claimed_speedup, measured_speedup, claimed_over_measured, status,
       audit_class, audit_reason
FROM claim_audit WHERE comparable AND claimed_over_measured > 1
ORDER BY claimed_over_measured DESC, claim_id LIMIT $limit;

-- name: worst_floored
-- The largest comparable claims whose kernel we found wrong, cheating or broken (no speed to compare).
SELECT claim_id, attempt_id, gpu, device, claimed_speedup, status, reason_code, audit_class, audit_reason
FROM claim_audit WHERE comparable AND audit_reason = 'floored'
ORDER BY claimed_speedup DESC NULLS LAST, claim_id LIMIT $limit;

-- name: points
SELECT claim_id, claimed_speedup, measured_speedup, measured_log2_low, measured_log2_high, audit_class, status
FROM claim_audit WHERE comparable ORDER BY claim_id;

-- name: totals
SELECT count(*) AS claims, count(*) FILTER (WHERE comparable) AS comparable,
       count(DISTINCT attempt_id) AS attempts, list(DISTINCT source_format ORDER BY source_format) AS formats,
       list(DISTINCT device ORDER BY device) FILTER (WHERE device IS NOT NULL) AS devices
FROM claim_audit;
