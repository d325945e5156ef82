-- Queries of the revalidated_records stage, loaded as `revalidation.<name>`.

-- name: rebuild
-- Pair each attempt's primary grade with its independent recheck and label both with the interval rule of
-- grader/labels.py: from the per-size medians and their ~95% CIs, log2(speedup) has an interval
-- centre +- sqrt(sum of per-size variances) / n; `faster` when the whole interval lies above +tie_band, `slower`
-- below -tie_band, `tie` inside the band, `ambiguous` when it straddles an edge (never forced). Labels are NULL
-- for grades that are not correct (the status says why). The Python check recomputes all of it with
-- pipelines/grading/agreement.py, so the two implementations guard each other.
DELETE FROM revalidated_records;
INSERT INTO revalidated_records BY NAME
WITH size_rows AS (
    SELECT g.attempt_id, g.grading_pass,
           unnest(from_json(g.sizes, '[{"cand_ms": "DOUBLE", "expert_ms": "DOUBLE", "cand_ms_ci": "DOUBLE[]",
                                       "expert_ms_ci": "DOUBLE[]", "speedup": "DOUBLE"}]')) AS s
    FROM current_grades g WHERE g.status = 'correct'
), timed AS (
    -- A size counts when it was timed (non-zero speedup and medians); a missing CI is a point.
    SELECT attempt_id, grading_pass, log2(s.speedup) AS l2,
           (power((coalesce(s.cand_ms_ci[2], s.cand_ms) - coalesce(s.cand_ms_ci[1], s.cand_ms)) / (2 * s.cand_ms), 2)
            + power((coalesce(s.expert_ms_ci[2], s.expert_ms) - coalesce(s.expert_ms_ci[1], s.expert_ms))
                    / (2 * s.expert_ms), 2)) / power(ln(2), 2) AS var
    FROM size_rows WHERE s.speedup <> 0 AND s.cand_ms <> 0 AND s.expert_ms <> 0
), intervals AS (
    SELECT attempt_id, grading_pass, avg(l2) - sqrt(sum(var)) / count(*) AS lo,
           avg(l2) + sqrt(sum(var)) / count(*) AS hi
    FROM timed GROUP BY attempt_id, grading_pass
), labelled AS (
    SELECT g.*, i.lo, i.hi,
           CASE WHEN g.status IN ('infra_error', 'unsupported_on_backend') THEN 'failed'
                WHEN g.status <> 'correct' THEN 'floored'
                WHEN i.lo IS NULL THEN 'ambiguous'
                WHEN i.lo > $tie_band THEN 'faster'
                WHEN i.hi < -$tie_band THEN 'slower'
                WHEN i.lo >= -$tie_band AND i.hi <= $tie_band THEN 'tie'
                ELSE 'ambiguous' END AS label
    FROM current_grades g LEFT JOIN intervals i USING (attempt_id, grading_pass)
), pairs AS (
    SELECT p.attempt_id, p.task_id, p.task_revision, p.grader_version,
           p.fingerprint_id, v.fingerprint_id AS revalidation_fingerprint_id,
           p.status AS primary_status, v.status AS revalidation_status,
           p.reward AS primary_reward, v.reward AS revalidation_reward,
           p.speedup_geomean AS primary_speedup, v.speedup_geomean AS revalidation_speedup,
           p.label AS p_label, v.label AS v_label, p.lo AS primary_log2_lo, p.hi AS primary_log2_hi,
           v.lo AS revalidation_log2_lo, v.hi AS revalidation_log2_hi,
           CASE WHEN 'failed' IN (p.label, v.label) THEN 'missing'
                WHEN p.status <> v.status THEN 'disagree'
                WHEN 'ambiguous' IN (p.label, v.label) THEN 'ambiguous'
                WHEN p.label = v.label THEN 'agree'
                ELSE 'disagree' END AS agreement,
           p.seed AS primary_seed, v.seed AS revalidation_seed
    FROM labelled p
    JOIN labelled v ON v.attempt_id = p.attempt_id AND v.grading_pass = 'revalidation'
    WHERE p.grading_pass = 'primary'
)
SELECT
    attempt_id, task_id, task_revision, grader_version, fingerprint_id, revalidation_fingerprint_id,
    primary_status, revalidation_status, primary_reward, revalidation_reward, primary_speedup,
    revalidation_speedup,
    CASE WHEN p_label IN ('floored', 'failed') THEN NULL ELSE p_label END AS primary_label,
    CASE WHEN v_label IN ('floored', 'failed') THEN NULL ELSE v_label END AS revalidation_label,
    agreement = 'agree' AS agree,
    agreement = 'agree' AS revalidated,
    agreement = 'ambiguous' AS ambiguous_near_tie,
    (p_label = 'faster' AND v_label IN ('slower', 'tie', 'floored')) AS false_speedup_label,
    (p_label = 'faster' AND v_label = 'ambiguous') AS fast_unconfirmed,
    primary_seed, revalidation_seed, $run_id AS run_id,
    primary_log2_lo, primary_log2_hi, revalidation_log2_lo, revalidation_log2_hi, agreement,
    $tie_band AS tie_band_log2
FROM pairs;
-- Wall time of every recheck run, so records per wall-clock hour and per device-hour can be reported.
CREATE TABLE IF NOT EXISTS revalidation_runs (
    run_id VARCHAR NOT NULL,
    started_at TIMESTAMP,
    wall_s DOUBLE,
    graded_now INTEGER,
    resumed INTEGER,
    devices INTEGER
);

-- name: record_run
DELETE FROM revalidation_runs WHERE run_id = $run_id;
INSERT INTO revalidation_runs VALUES ($run_id, $started_at, $wall_s, $graded_now, $resumed, $devices);

-- name: summary
SELECT count(*) AS records,
       count(*) FILTER (WHERE revalidated) AS revalidated,
       count(*) FILTER (WHERE NOT agree) AS disagreements,
       count(*) FILTER (WHERE ambiguous_near_tie) AS ambiguous_near_ties,
       count(*) FILTER (WHERE false_speedup_label) AS false_speedup_labels,
       count(*) FILTER (WHERE fast_unconfirmed) AS fast_unconfirmed
FROM revalidated_records;

-- name: confusion
SELECT coalesce(primary_label, primary_status) AS primary_grade,
       coalesce(revalidation_label, revalidation_status) AS revalidation_grade, count(*) AS n
FROM revalidated_records GROUP BY ALL ORDER BY ALL;

-- name: preview
SELECT attempt_id, primary_status, revalidation_status, primary_reward, revalidation_reward,
       primary_label, revalidation_label, agreement, revalidated
FROM revalidated_records ORDER BY attempt_id LIMIT 8;

-- name: records
-- Both grades of every record with their per-size timings, for the Python recomputation.
SELECT r.attempt_id, r.task_id, r.primary_status, r.revalidation_status, r.primary_reward, r.revalidation_reward,
       r.primary_label, r.revalidation_label, r.agree, r.revalidated, r.ambiguous_near_tie, r.false_speedup_label,
       r.fast_unconfirmed, r.agreement, r.primary_log2_lo, r.primary_log2_hi, r.revalidation_log2_lo,
       r.revalidation_log2_hi, r.primary_seed, r.revalidation_seed,
       CAST(p.sizes AS VARCHAR) AS primary_sizes, CAST(v.sizes AS VARCHAR) AS revalidation_sizes
FROM revalidated_records r
JOIN current_grades p ON p.attempt_id = r.attempt_id AND p.grading_pass = 'primary'
JOIN current_grades v ON v.attempt_id = r.attempt_id AND v.grading_pass = 'revalidation'
ORDER BY r.attempt_id;

-- name: unpaired
-- Records whose two current grades are not both present (the recomputation could not see them).
SELECT r.attempt_id FROM revalidated_records r
WHERE (SELECT count(*) FROM current_grades g WHERE g.attempt_id = r.attempt_id
       AND g.grading_pass IN ('primary', 'revalidation')) <> 2;
