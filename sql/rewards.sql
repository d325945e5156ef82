-- What a published reward says about itself: where it was measured, what it means there, and whether the
-- independent recheck confirmed it. Macros, created on every read-write connect, used by every published
-- table that carries a reward (sql/release.sql: trajectories' turns, grades, revalidated) or an attempt's
-- outcome (attempts), so the tables cannot tell the same attempt differently.
-- 'infra_error' and 'unsupported_on_backend' are the grader's statuses that are no fault of the candidate
-- (grader.contract Status.is_candidate_fault); tests/pipelines/reporting/test_release_card.py holds these lists
-- to the grader's.

-- The backend a grade was measured on: its hardware fingerprint's kind, else read from the device name.
CREATE OR REPLACE MACRO measured_backend(kind, device) AS
    coalesce(kind, CASE WHEN device = 'cpu' THEN 'cpu' WHEN device IS NOT NULL THEN 'cuda' END);

-- A reward as published: NULL, never the -24 floor, when the grader could not judge the attempt here.
CREATE OR REPLACE MACRO published_reward(status, reward) AS
    CASE WHEN status IN ('infra_error', 'unsupported_on_backend') THEN NULL ELSE reward END;

-- What a reward is: a speedup only when correct and timed on a GPU; on CPU (Triton's interpreter) a correct
-- kernel's timing ratio is not a speedup; anything else wrong is the floor; not graded here has no reward.
CREATE OR REPLACE MACRO reward_kind(status, backend) AS
    CASE WHEN status IS NULL THEN 'not_graded'
         WHEN status IN ('infra_error', 'unsupported_on_backend') THEN 'not_graded_here'
         WHEN status <> 'correct' THEN 'floor'
         WHEN backend = 'cpu' THEN 'cpu_timing_not_a_speedup'
         ELSE 'log2_speedup_vs_expert' END;

-- Whether the reward survived the recheck: the ledger's terminal state (sql/ledger.sql, the one place that
-- decides it) in the words of the release; not_rechecked for attempts that had no recheck.
CREATE OR REPLACE MACRO revalidation_state(terminal_state) AS
    CASE terminal_state WHEN 'revalidated' THEN 'confirmed' WHEN 'ambiguous' THEN 'ambiguous'
                        WHEN 'disagreed' THEN 'disagreed' WHEN 'recheck_infra_error' THEN 'recheck_failed'
                        WHEN 'recheck_unsupported_on_backend' THEN 'recheck_failed'
                        ELSE 'not_rechecked' END;
