"""Stage 3, trajectories: attempts grouped into multi-turn episodes with per-turn rewards."""

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import quality_gate, GROUP_CURATION, OWNER, check_result, table_metadata
from pipelines.defs.resources import Warehouse
from pipelines.core.warehouse import load_sql, query_dicts, run_script, transaction


@dg.asset(
    deps=["graded_attempts"],
    group_name=GROUP_CURATION,
    owners=[OWNER],
    kinds={"sql", "duckdb"},
    code_version="1",
    description="One row per trajectory: its attempts ordered by turn with each turn's status and reward "
                "(primary grade), the best reward and the first turn that was correct.",
)
def trajectories(context: AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    with warehouse.connect() as con:
        with transaction(con):
            run_script(con, "trajectories.rebuild", {"run_id": context.run.run_id})
        s = query_dicts(con, load_sql("trajectories.summary"))[0]
        md = table_metadata(con, "trajectories", load_sql("trajectories.preview"),
                            mean_turns=dg.MetadataValue.float(float(s["mean_turns"] or 0.0)),
                            with_correct_turn=dg.MetadataValue.int(int(s["with_correct_turn"])))
    return dg.MaterializeResult(metadata=md)


@dg.asset_check(asset=trajectories, blocking=True,
                description="Every admitted attempt sits in exactly one turn of its own trajectory.")
def every_attempt_in_one_trajectory(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        return check_result(query_dicts(con, load_sql("trajectories.membership")),
                            "attempts not in exactly one trajectory turn")


@dg.asset_check(asset=trajectories, blocking=True,
                description="Turns are in order and n_turns, rewards, best_reward and first_correct_turn agree "
                            "with the turns themselves (recomputed here in Python, not in SQL).")
def trajectory_summaries_consistent(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        rows = query_dicts(con, load_sql("trajectories.summaries"))
    bad = []
    for t in rows:
        turns = t["turns"]
        problems = []
        if [x["turn"] for x in turns] != sorted(x["turn"] for x in turns):
            problems.append("turns out of order")
        if len(turns) != t["n_turns"]:
            problems.append("n_turns")
        if [x["reward"] for x in turns] != list(t["rewards"]):
            problems.append("rewards")
        graded = [x["reward"] for x in turns if x["reward"] is not None]
        if (max(graded) if graded else None) != t["best_reward"]:
            problems.append("best_reward")
        correct = [x["turn"] for x in turns if x["status"] == "correct"]
        if (min(correct) if correct else None) != t["first_correct_turn"]:
            problems.append("first_correct_turn")
        if problems:
            bad.append({"trajectory_id": t["trajectory_id"], "problems": ", ".join(problems)})
    return check_result(bad, "trajectories whose summary disagrees with their turns",
                        trajectories_checked=len(rows))


@dg.asset_check(asset=trajectories, blocking=False,
                description="Warns when one trajectory mixes tasks or repeats a turn number (kept, but suspicious).")
def trajectories_well_formed(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        mixed = query_dicts(con, load_sql("trajectories.mixed_tasks"))
        repeated = query_dicts(con, load_sql("trajectories.repeated_turns"))
    problems = ([{"trajectory_id": m["trajectory_id"], "problem": f"mixes tasks {m['task_ids']}"} for m in mixed]
                + [{"trajectory_id": r["trajectory_id"], "problem": f"turn {r['turn']} x{r['attempts']}"}
                   for r in repeated])
    return check_result(problems, "malformed trajectories", warn_only=True)


CHECKS = [every_attempt_in_one_trajectory, trajectory_summaries_consistent, trajectories_well_formed,
          quality_gate(trajectories, "trajectories")]
