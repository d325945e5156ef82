-- Queries behind the splits and reliability sections of `kerneltraj status --json` (`status_sections.<name>`).

-- name: split_sizes
SELECT split, count(*) AS tasks FROM split_manifest GROUP BY split ORDER BY split;

-- name: leakage_counts
SELECT kind, count(*) AS n FROM leakage_findings GROUP BY kind ORDER BY kind;

-- name: manifest_identity
SELECT any_value(split_version) AS version, any_value(manifest_sha256) AS sha256 FROM split_manifest;

-- name: reliability_grades
-- Retries and infra failures per grading pass (the current grade of each attempt).
SELECT grading_pass, count(*) AS graded, sum(greatest(coalesce(tries, 1) - 1, 0)) AS retries,
       sum(coalesce(retry_s, 0)) AS retry_s, count(*) FILTER (WHERE status = 'infra_error') AS infra_errors,
       count(*) FILTER (WHERE status IN ('crashed', 'timeout')) AS worker_faults
FROM current_grades GROUP BY grading_pass ORDER BY grading_pass;

-- name: quarantine_reasons
SELECT coalesce(reason_code, 'unknown') AS reason_code, count(*) AS n FROM quarantine GROUP BY 1 ORDER BY 1;
