-- The ledger view, recreated on every read-write connect (after views.sql).

-- Every raw attempt and every quarantined row, each with exactly one terminal state
-- (NULL = not yet accounted for: graded nowhere, or graded but never revalidated).
CREATE OR REPLACE VIEW ledger AS
SELECT
    'raw' AS ledger_source,
    r.attempt_id AS record_key,
    r.attempt_id,
    r.origin,
    p.status AS primary_status,
    CASE
        WHEN p.attempt_id IS NULL THEN NULL
        WHEN p.status IN ('infra_error', 'unsupported_on_backend') THEN p.status
        WHEN v.attempt_id IS NULL THEN NULL
        WHEN v.revalidated THEN 'revalidated'
        WHEN v.revalidation_status IN ('infra_error', 'unsupported_on_backend') THEN 'recheck_' || v.revalidation_status
        WHEN v.agreement = 'ambiguous' THEN 'ambiguous'  -- a near-tie neither grade can settle: never forced
        ELSE 'disagreed'
    END AS terminal_state
FROM raw_attempts r
LEFT JOIN (SELECT * FROM current_grades WHERE grading_pass = 'primary') p ON p.attempt_id = r.attempt_id
LEFT JOIN revalidated_records v ON v.attempt_id = r.attempt_id
UNION ALL
SELECT
    'quarantine' AS ledger_source,
    q.origin AS record_key,
    q.attempt_id,
    q.origin,
    NULL AS primary_status,
    'quarantined' AS terminal_state
FROM quarantine q;
