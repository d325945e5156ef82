-- Queries of the revalidated_records stage, loaded as `revalidation.<name>`.

-- name: rebuild
-- Pair each attempt's primary grade with its independent recheck. Labels are three-way on the
-- reward (log2 speedup): tie inside the band, faster above it, slower below; NULL when not correct.
DELETE FROM revalidated_records;
INSERT INTO revalidated_records
WITH pairs AS (
    SELECT
        p.attempt_id, p.task_id, p.task_revision, p.grader_version,
        p.fingerprint_id, v.fingerprint_id AS revalidation_fingerprint_id,
        p.status AS primary_status, v.status AS revalidation_status,
        p.reward AS primary_reward, v.reward AS revalidation_reward,
        p.speedup_geomean AS primary_speedup, v.speedup_geomean AS revalidation_speedup,
        CASE WHEN p.status <> 'correct' THEN NULL WHEN abs(p.reward) < $tie_band THEN 'tie'
             WHEN p.reward > 0 THEN 'faster' ELSE 'slower' END AS primary_label,
        CASE WHEN v.status <> 'correct' THEN NULL WHEN abs(v.reward) < $tie_band THEN 'tie'
             WHEN v.reward > 0 THEN 'faster' ELSE 'slower' END AS revalidation_label,
        p.seed AS primary_seed, v.seed AS revalidation_seed
    FROM current_grades p
    JOIN current_grades v ON v.attempt_id = p.attempt_id AND v.grading_pass = 'revalidation'
    WHERE p.grading_pass = 'primary'
)
SELECT
    attempt_id, task_id, task_revision, grader_version, fingerprint_id, revalidation_fingerprint_id,
    primary_status, revalidation_status, primary_reward, revalidation_reward, primary_speedup,
    revalidation_speedup, primary_label, revalidation_label,
    (primary_status = revalidation_status AND primary_label IS NOT DISTINCT FROM revalidation_label) AS agree,
    (primary_status = revalidation_status AND primary_label IS NOT DISTINCT FROM revalidation_label) AS revalidated,
    coalesce(primary_status = 'correct' AND revalidation_status = 'correct' AND primary_label <> revalidation_label
             AND 'tie' IN (primary_label, revalidation_label), false) AS ambiguous_near_tie,
    coalesce(primary_label = 'faster' AND revalidation_label IS DISTINCT FROM 'faster', false) AS false_speedup_label,
    primary_seed, revalidation_seed, $run_id AS run_id
FROM pairs;

-- name: summary
SELECT count(*) AS records,
       count(*) FILTER (WHERE revalidated) AS revalidated,
       count(*) FILTER (WHERE NOT agree) AS disagreements,
       count(*) FILTER (WHERE ambiguous_near_tie) AS ambiguous_near_ties,
       count(*) FILTER (WHERE false_speedup_label) AS false_speedup_labels
FROM revalidated_records;

-- name: confusion
SELECT coalesce(primary_label, primary_status) AS primary_grade,
       coalesce(revalidation_label, revalidation_status) AS revalidation_grade, count(*) AS n
FROM revalidated_records GROUP BY ALL ORDER BY ALL;

-- name: preview
SELECT attempt_id, primary_status, revalidation_status, primary_reward, revalidation_reward,
       primary_label, revalidation_label, revalidated, ambiguous_near_tie
FROM revalidated_records ORDER BY attempt_id LIMIT 8;

-- name: records
SELECT attempt_id, primary_status, revalidation_status, primary_reward, revalidation_reward,
       primary_label, revalidation_label, agree, revalidated, ambiguous_near_tie, false_speedup_label,
       primary_seed, revalidation_seed
FROM revalidated_records ORDER BY attempt_id;
