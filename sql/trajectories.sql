-- Queries of the trajectories stage, loaded as `trajectories.<name>`.

-- name: rebuild
-- Attempts grouped into episodes, ordered by turn, with the primary grade's status and reward per turn.
DELETE FROM trajectories;
INSERT INTO trajectories
SELECT
    r.trajectory_id,
    min(r.task_id) AS task_id,
    min(r.agent) AS agent,
    min(r.model) AS model,
    count(*) AS n_turns,
    list({'turn': r.turn, 'attempt_id': r.attempt_id, 'status': g.status, 'reward': g.reward}
         ORDER BY r.turn, r.attempt_id) AS turns,
    list(g.reward ORDER BY r.turn, r.attempt_id) AS rewards,
    max(g.reward) AS best_reward,
    min(r.turn) FILTER (WHERE g.status = 'correct') AS first_correct_turn,
    min(g.grader_version) AS grader_version,
    $run_id AS run_id
FROM raw_attempts r
LEFT JOIN current_grades g ON g.attempt_id = r.attempt_id AND g.grading_pass = 'primary'
GROUP BY r.trajectory_id;

-- name: preview
SELECT trajectory_id, task_id, agent, n_turns, best_reward, first_correct_turn,
       list_transform(turns, lambda t: t.status) AS statuses
FROM trajectories ORDER BY trajectory_id LIMIT 8;

-- name: summary
SELECT count(*) AS trajectories, avg(n_turns) AS mean_turns,
       count(*) FILTER (WHERE first_correct_turn IS NOT NULL) AS with_correct_turn
FROM trajectories;

-- name: membership
-- Attempts that are in no trajectory, or in more than one turn slot, or turns that name no attempt.
WITH flat AS (SELECT t.trajectory_id, u.t.attempt_id AS attempt_id FROM trajectories t, unnest(t.turns) AS u(t))
SELECT coalesce(r.attempt_id, f.attempt_id) AS attempt_id, count(f.attempt_id) AS slots,
       bool_or(r.attempt_id IS NULL) AS unknown_attempt
FROM raw_attempts r
FULL OUTER JOIN flat f ON f.attempt_id = r.attempt_id AND f.trajectory_id = r.trajectory_id
GROUP BY 1
HAVING count(f.attempt_id) <> 1 OR bool_or(r.attempt_id IS NULL);

-- name: summaries
SELECT trajectory_id, n_turns, turns, rewards, best_reward, first_correct_turn FROM trajectories;

-- name: mixed_tasks
SELECT trajectory_id, count(DISTINCT task_id) AS tasks, string_agg(DISTINCT task_id, ', ') AS task_ids
FROM raw_attempts GROUP BY trajectory_id HAVING count(DISTINCT task_id) > 1;

-- name: repeated_turns
SELECT trajectory_id, turn, count(*) AS attempts
FROM raw_attempts GROUP BY trajectory_id, turn HAVING count(*) > 1;
