"""Golden numerics (issue 41): a tiny fixed-seed CPU run of each script must log exactly the numbers recorded in
tests/golden/<script>.json before the script was restructured, so moving code around cannot change what it computes.

Every float in metrics.jsonl (losses, charts, diagnostics), kl_profile.jsonl and summary.json is compared for
equality after a JSON round trip (Python writes floats with repr, so equal text means bit-identical float64).
Only wall-clock fields (wall_time, SPS) are dropped. The default runs use --no-compile (a compile costs ~30 s per
run). Measured here: two compiled runs of ppo_atari_envpool in separate processes are bit-identical to each other,
but differ from the eager run in the last bits (e.g. policy loss -0.000474613 vs -0.000474594), so the compiled
path has its own golden file, checked by a slow test (pytest -m slow).
Each run is of a copy of the script in a temp dir outside the package, without PYTHONPATH (issue 41: a copied
script still runs alone), so the same run also checks that.
Regenerate after a change that is meant to move numbers: GOLDEN_REGEN=1 pytest -n 0 tests/test_golden_numerics.py
"""
import glob
import json
import os
import subprocess
import sys

import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # same thread count every time, so reductions sum in the same order

# The smallest config each script's own tests use, with every diagnostic switched on.
RUNS = {
    "ppo_atari_envpool": ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "2",
                          "--total-timesteps", "192", "--diagnostics-every", "1", "--seed", "3", "--no-compile",
                          "--progress", "none"],
    "pqn_atari": ["--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--update-epochs", "2",
                  "--eval-envs", "2", "--total-timesteps", "48", "--diagnostics-every", "1", "--seed", "3",
                  "--no-compile", "--progress", "none"],
    "ppo_procgen": ["--env-id", "bigfish", "--num-envs", "1", "--num-steps", "64", "--num-minibatches", "2",
                    "--update-epochs", "2", "--total-timesteps", "192", "--diagnostics-every", "1", "--seed", "3",
                    "--no-compile", "--progress", "none"],
    "ppo_continuous_mujoco": ["--env-id", "HalfCheetah-v4", "--num-envs", "2", "--num-steps", "32",
                              "--minibatch-size", "16", "--update-epochs", "2", "--diagnostics-states", "64",
                              "--total-timesteps", "192", "--diagnostics-every", "1", "--seed", "3", "--no-compile",
                              "--progress", "none"],
    "noisy_sgd": ["--num-seeds", "2", "--total-steps", "20", "--log-every", "5", "--learning-rate", "0.2", "--seed", "3"],
}
COMPILED = {"ppo_atari_envpool": [a for a in RUNS["ppo_atari_envpool"] if a != "--no-compile"]}
VOLATILE = ("wall_time", "SPS")  # wall-clock readings; everything else must repeat exactly


def numbers(run_dir: str) -> dict:
    """Every logged row and the summary of one run directory, wall-clock fields dropped."""
    def keep(row):
        return {k: v for k, v in row.items() if not any(word in k for word in VOLATILE)}
    out = {}
    for name in ("metrics.jsonl", "kl_profile.jsonl"):
        path = os.path.join(run_dir, name)
        if os.path.exists(path):
            out[name] = [keep(json.loads(line)) for line in open(path).read().splitlines()]
    out["summary.json"] = keep(json.load(open(os.path.join(run_dir, "summary.json"))))
    return out


def run_numbers(script_path: str, flags: list, tmp_path) -> dict:
    """Run a copy of the script alone in tmp_path; the numbers of each run directory it wrote, in seed order."""
    runs, copy = tmp_path / "runs", tmp_path / "copied" / os.path.basename(script_path)
    copy.parent.mkdir()
    shutil.copy(script_path, copy)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, str(copy), "--runs-dir", str(runs)] + flags, capture_output=True,
                         text=True, timeout=600, cwd=tmp_path, env=dict(env, **ONE_THREAD))
    assert out.returncode == 0, out.stderr[-3000:]
    dirs = sorted(glob.glob(str(runs / "*")), key=lambda d: int(os.path.basename(d).split("__")[2]))
    return {str(i): numbers(d) for i, d in enumerate(dirs)}


def check_golden(script: str, flags: list, golden_name: str, tmp_path) -> None:
    got = run_numbers(os.path.join(ROOT, "cleanrl_scaling", f"{script}.py"), flags, tmp_path)
    path = os.path.join(GOLDEN, f"{golden_name}.json")
    if os.environ.get("GOLDEN_REGEN") == "1":
        with open(path, "w") as f:
            json.dump({"command": flags, "runs": got}, f, indent=1)
    golden = json.load(open(path))
    assert golden["command"] == flags, "the golden file was recorded with another command"
    # Through JSON on both sides, so a float compares by its repr: equal means bit-identical.
    assert json.loads(json.dumps(got)) == golden["runs"]


@pytest.mark.parametrize("script", list(RUNS))
def test_tiny_run_repeats_the_golden_numbers(script, tmp_path):
    check_golden(script, RUNS[script], script, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("script", list(COMPILED))
def test_compiled_tiny_run_repeats_the_golden_numbers(script, tmp_path):
    check_golden(script, COMPILED[script], f"{script}_compiled", tmp_path)
