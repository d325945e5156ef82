-- Views recreated on every read-write connect.

-- Grades that still describe the attempt: same source, the catalogue's current task revision and
-- the grader version recorded by the last grading step. Older grades stay in graded_attempts as history.
CREATE OR REPLACE VIEW current_grades AS
SELECT g.*
FROM graded_attempts g
JOIN raw_attempts r ON r.attempt_id = g.attempt_id AND r.source_sha256 = g.source_sha256 AND r.task_id = g.task_id
JOIN tasks t ON t.task_id = g.task_id AND t.task_revision = g.task_revision
WHERE g.grader_version = (SELECT max(value) FROM warehouse_meta WHERE key = 'grader_version');
