"""docs/reproducing/runs/ (the finished runs behind the reproduction pages, committed as they end): every run there
is whole and finished, so the launcher's --skip-finished counts it and a page's rule reads all of it; a run a later
extension may continue also keeps its final checkpoint, and nothing else."""
import json
import os

import pytest

from cleanrl_scaling.utils.rundirs import config_value, parse_flags, run_dirs, run_status

ROOT = os.path.join(os.path.dirname(__file__), "..", "docs", "reproducing", "runs")
RUNS = sorted(run_dirs(ROOT)) if os.path.isdir(ROOT) else []


def test_the_folder_has_runs_and_says_what_they_are():
    assert os.path.isfile(os.path.join(ROOT, "README.md"))
    assert RUNS, "docs/reproducing/runs/ holds no run"


@pytest.mark.parametrize("run", RUNS, ids=[os.path.relpath(r, ROOT) for r in RUNS])
def test_each_run_is_finished_whole_and_matchable(run):
    kept = sorted(os.listdir(run))  # what the pages read, and the final state a later extension continues from
    assert kept in (["config.json", "metrics.jsonl", "summary.json"],
                    ["checkpoints", "config.json", "metrics.jsonl", "summary.json"]), kept
    if "checkpoints" in kept:
        assert os.listdir(os.path.join(run, "checkpoints")) == ["latest.ckpt"], "only the final checkpoint"
    assert run_status(run) == "finished"
    config = json.load(open(os.path.join(run, "config.json")))
    flags = parse_flags(config["argv"])  # --skip-finished matches a grid point by these
    assert "seed" in flags and "total_timesteps" in flags
    summary = json.load(open(os.path.join(run, "summary.json")))
    last = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            last = json.loads(line)  # every line parses: not cut off mid-write
    assert last["iteration"] == summary["iteration"] and last["global_step"] <= summary["global_step"]
    per_update = int(config_value(config, "num_envs")) * int(config_value(config, "num_steps"))
    assert summary["global_step"] > int(flags["total_timesteps"]) - per_update  # ran its whole budget
