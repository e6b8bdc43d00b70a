"""docs/reproducing/runs/ (the finished runs behind the reproduction pages, committed as they end): every run there
is whole and finished, so the launcher's --skip-finished counts it and a page's rule reads all of it; a run a later
extension may continue also keeps its final checkpoint, and nothing else. The repository stays small enough to travel
to a GPU machine whole."""
import gzip
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
    # metrics gzipped: the checkout travels whole to a GPU machine, which takes at most 64 MiB (docs/gpu.md)
    assert kept in (["config.json", "metrics.jsonl.gz", "summary.json"],
                    ["checkpoints", "config.json", "metrics.jsonl.gz", "summary.json"]), kept
    if "checkpoints" in kept:
        assert os.listdir(os.path.join(run, "checkpoints")) == ["latest.ckpt"], "only the final checkpoint"
    assert run_status(run) == "finished"
    config = json.load(open(os.path.join(run, "config.json")))
    flags = parse_flags(config["argv"])  # --skip-finished matches a grid point by these
    assert "seed" in flags and "total_timesteps" in flags
    summary = json.load(open(os.path.join(run, "summary.json")))
    last = {}
    with gzip.open(os.path.join(run, "metrics.jsonl.gz"), "rt") as f:
        for line in f:
            last = json.loads(line)  # every line parses: not cut off mid-write
    assert last["iteration"] == summary["iteration"] and last["global_step"] <= summary["global_step"]
    per_update = int(config_value(config, "num_envs")) * int(config_value(config, "num_steps"))
    assert summary["global_step"] > int(flags["total_timesteps"]) - per_update  # ran its whole budget


def test_the_checkout_fits_what_a_gpu_machine_takes():
    """A call to the GPU machine sends the whole working tree and the packages it carries, 64 MiB in all
    (docs/gpu.md#without-a-package-index: the torch folder ~25 MiB or the JAX folder ~34 MiB): the tracked files must
    leave that room, so archived runs keep their metrics gzipped and only the final checkpoints an extension needs."""
    import subprocess
    repo = os.path.join(os.path.dirname(__file__), "..")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, text=True).stdout.split("\0")
    if not any(files):
        pytest.skip("not a git checkout")
    size = sum(os.path.getsize(os.path.join(repo, f)) for f in files if f and os.path.isfile(os.path.join(repo, f)))
    assert size < 28 * 2**20, f"tracked files: {size / 2**20:.1f} MiB; with the 34 MiB JAX folder that is over 64 MiB"


def test_gzipped_metrics_read_as_the_plain_file(tmp_path):
    from cleanrl_scaling.utils.aggregate import read_metrics
    rows = [{"global_step": 2, "iteration": 2, "x": 0.5}, {"global_step": 1, "iteration": 1, "x": 0.25}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "plain").mkdir(), (tmp_path / "zipped").mkdir()
    (tmp_path / "plain" / "metrics.jsonl").write_text(text)
    with gzip.open(tmp_path / "zipped" / "metrics.jsonl.gz", "wt") as f:
        f.write(text)
    plain = read_metrics(str(tmp_path / "plain" / "metrics.jsonl"))
    zipped = read_metrics(str(tmp_path / "zipped" / "metrics.jsonl"))
    assert plain.equals(zipped) and list(zipped["x"]) == [0.25, 0.5]
