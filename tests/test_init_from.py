"""--init-from in the four torch scripts (docs/run_directory.md#a-new-run-from-old-weights): a new run, with flags a
--resume would refuse, starts from a checkpoint's weights (ppo_continuous_mujoco: and its normaliser's statistics) with
a fresh optimizer at step 0; a checkpoint it cannot start from exits 2 with one line before anything is written; a
--resume beside it continues the run it started (the launcher's --resume-unfinished), and a --resume whose flags differ
from its checkpoint's points to --init-from.

Each script's checkpoint is one tiny iteration of its base configuration, trained in-process once."""
import glob
import json
import os
import pickle
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np
import pytest
import torch
import torch.nn as nn

from cleanrl_scaling import ppo_atari_envpool, ppo_continuous_mujoco, ppo_procgen, pqn_atari
from inprocess import main_inprocess

MODULES = {m.SCRIPT: m for m in (ppo_atari_envpool, pqn_atari, ppo_procgen, ppo_continuous_mujoco)}
BASE = {  # script -> its tiny configuration
    "ppo_atari_envpool": ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "2"],
    "pqn_atari": ["--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--update-epochs", "2",
                  "--eval-envs", "0"],
    "ppo_procgen": ["--env-id", "bigfish", "--num-envs", "1", "--num-steps", "16", "--num-minibatches", "2",
                    "--update-epochs", "2", "--eval-every", "0"],
    "ppo_continuous_mujoco": ["--env-id", "HalfCheetah-v4", "--num-envs", "2", "--num-steps", "32",
                              "--minibatch-size", "16", "--update-epochs", "2"],
}
COMMON = ["--no-compile", "--diagnostics-every", "0", "--progress", "none"]
# Flags that change what the new run computes (a --resume with them exits 2): the epochs and lr everywhere; Procgen
# another game (its 15 actions are every game's); MuJoCo more envs (its shared statistics fit any number)
OTHER_FLAGS = {
    "ppo_atari_envpool": ["--update-epochs", "1", "--learning-rate", "1e-4"],
    "pqn_atari": ["--update-epochs", "1", "--learning-rate", "1e-4"],
    "ppo_procgen": ["--update-epochs", "1", "--env-id", "starpilot"],
    "ppo_continuous_mujoco": ["--update-epochs", "1", "--num-envs", "4"],
}
WEIGHTS = {"ppo_atari_envpool": "agent", "pqn_atari": "q_network", "ppo_procgen": "agent",
           "ppo_continuous_mujoco": "agent"}
NETWORK_CLASS = {"ppo_atari_envpool": "Agent", "pqn_atari": "QNetwork", "ppo_procgen": "Agent",
                 "ppo_continuous_mujoco": "Agent"}


def flag(argv: list, name: str) -> str:
    return argv[len(argv) - 1 - argv[::-1].index(name) + 1]  # the last occurrence wins, as on a command line


def batches(argv: list, n: int) -> list:
    """argv with --total-timesteps of n batches of its own configuration."""
    return argv + ["--total-timesteps", str(n * int(flag(argv, "--num-envs")) * int(flag(argv, "--num-steps")))]


def run(script: str, argv: list, root) -> tuple:
    """(exit code, stdout, stderr) of the script's main() on argv, runs under root/runs."""
    threads = torch.get_num_threads()  # ppo_continuous_mujoco sets --torch-threads for the process
    try:
        return main_inprocess(MODULES[script], argv + COMMON, root)
    finally:
        torch.set_num_threads(threads)


def run_dirs(root) -> list:
    return sorted(glob.glob(str(root / "runs" / "*")))


def metrics(run_dir: str) -> list:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """script -> the path of its checkpoint after one iteration of BASE, made on first use."""
    made = {}

    def get(script: str) -> str:
        if script not in made:
            root = tmp_path_factory.mktemp(script)
            code, _, err = run(script, batches(BASE[script], 1), root)
            assert code in (0, None), err[-3000:]
            (made[script],) = glob.glob(str(root / "runs" / "*" / "checkpoints" / "latest.ckpt"))
        return made[script]
    return get


def first_call(monkeypatch, owner, name: str, record) -> list:
    """Replace owner.name by a wrapper that stores record(*args) of its first call."""
    seen, original = [], getattr(owner, name)

    def wrapper(*args, **kwargs):
        if not seen:
            seen.append(record(*args))
        return original(*args, **kwargs)
    monkeypatch.setattr(owner, name, wrapper)
    return seen


def recorded(path: str) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


class Started(NamedTuple):
    path: str  # the checkpoint it started from
    saved: dict  # that checkpoint
    run_dir: str
    stdout: str
    weights: dict  # the network's state when its first rollout began
    optimizer_entries: int  # the optimizer's state entries when its first update began
    statistics: Optional[tuple]  # MuJoCo: the normaliser's statistics and discounted returns at its first use


@pytest.fixture(scope="module")
def started(checkpoint, tmp_path_factory):
    """script -> the new run --init-from its checkpoint with OTHER_FLAGS, one batch long, made on first use."""
    made = {}

    def get(script: str) -> Started:
        if script not in made:
            made[script] = start_new_run(script, checkpoint(script), tmp_path_factory.mktemp(script + "_init"))
        return made[script]
    return get


def start_new_run(script: str, path: str, root, argv: Optional[list] = None) -> Started:
    """A run of argv (BASE and OTHER_FLAGS) --init-from path, one batch long, watched as it starts."""
    m, saved = MODULES[script], recorded(path)
    source_rows = metrics(saved["run_dir"])
    with pytest.MonkeyPatch.context() as monkeypatch:
        weights = first_call(monkeypatch, m, "collect_rollout", lambda envs, net, *rest: {
            k: v.detach().clone().cpu() for k, v in net.state_dict().items()})
        optimizer = first_call(monkeypatch, m, "update", lambda net, opt, *rest: len(opt.state))
        statistics = first_call(monkeypatch, m.Normalizer, "obs", lambda self, *rest: (
            {f"{name}_{key}": getattr(rms, key).copy() for name, rms in (("obs", self.obs_rms), ("ret", self.ret_rms))
             for key in ("mean", "var", "count")}, self.ret.copy())) if script == "ppo_continuous_mujoco" else [None]
        argv = argv or BASE[script] + OTHER_FLAGS[script]
        code, out, err = run(script, batches(argv, 1) + ["--init-from", path], root)
    assert code in (0, None), err[-3000:]
    assert metrics(saved["run_dir"]) == source_rows  # the source run is left as it was
    (run_dir,) = run_dirs(root)  # a new run directory, not the checkpoint's
    return Started(path, saved, run_dir, out, weights[0], optimizer[0], statistics[0])


@pytest.mark.parametrize("script", list(MODULES))
def test_init_from_starts_a_new_run_from_the_checkpoints_weights(script, started):
    new = started(script)  # its run directory is a new one, under its own --runs-dir (start_new_run)
    assert (f"starting from {new.path} (weights of iteration 1, step {new.saved['global_step']}); new run with this "
            "run's flags") in new.stdout
    argv = BASE[script] + OTHER_FLAGS[script]
    first = metrics(new.run_dir)[0]
    batch = int(flag(argv, "--num-envs")) * int(flag(argv, "--num-steps"))
    assert (first["global_step"], first["iteration"]) == (batch, 1)  # step 0 + one batch, not the checkpoint's + 1
    saved = new.saved[WEIGHTS[script]]
    assert new.weights.keys() == saved.keys() and all(torch.equal(new.weights[k], saved[k]) for k in saved)
    assert new.optimizer_entries == 0  # no optimizer state carried over
    with open(os.path.join(new.run_dir, "config.json")) as f:
        config = json.load(f)
    assert config["init_from"] == new.path and config["start_iteration"] == 0
    assert config["args"]["update_epochs"] == 1


def test_init_from_carries_mujocos_normaliser_statistics(started):
    """The observation and return statistics continue (shared ones onto 4 envs from 2); the discounted returns that
    scale the rewards restart with the envs."""
    new = started("ppo_continuous_mujoco")
    statistics, returns = new.statistics
    saved = new.saved["ranks"][0]["normalizer"]
    assert statistics.keys() == saved.keys() - {"ret"}
    assert all(np.array_equal(statistics[key], saved[key]) for key in statistics)
    assert np.all(saved["obs_count"] > 1) and returns.shape == (4,) and not returns.any()


def test_shared_statistics_do_not_start_per_env_ones(checkpoint, tmp_path):
    argv = batches(BASE["ppo_continuous_mujoco"] + ["--cleanrl-compat"], 1)  # which keeps them per env
    code, _, err = run("ppo_continuous_mujoco", argv + ["--init-from", checkpoint("ppo_continuous_mujoco")], tmp_path)
    assert code == 2 and err.strip().splitlines() == [
        "error: --init-from: the checkpoint's normaliser statistics are shared, this run's per-env over 2 envs; pass "
        "--norm-stats shared without --cleanrl-compat (it keeps them per env)"]
    assert run_dirs(tmp_path) == []


def test_per_env_statistics_start_each_env_from_its_own(tmp_path):
    """--norm-stats per-env: each env of the new run starts from the statistics of the checkpoint's env in its place;
    a run with other envs, or with shared statistics, is refused before anything starts."""
    per_env = BASE["ppo_continuous_mujoco"] + ["--norm-stats", "per-env"]
    assert run("ppo_continuous_mujoco", batches(per_env, 1), tmp_path / "source")[0] in (0, None)
    (path,) = glob.glob(str(tmp_path / "source" / "runs" / "*" / "checkpoints" / "latest.ckpt"))
    new = start_new_run("ppo_continuous_mujoco", path, tmp_path / "new", per_env + ["--update-epochs", "1"])
    saved = new.saved["ranks"][0]["normalizer"]
    statistics, returns = new.statistics
    assert statistics["obs_mean"].shape == (2, 17) and not np.array_equal(*statistics["obs_mean"])  # two envs' own
    assert all(np.array_equal(statistics[key], saved[key]) for key in statistics) and not returns.any()
    for flags, line in ((["--num-envs", "4"], "per-env over 2 envs, this run's per-env over 4 envs; pass --norm-stats "
                         "per-env --num-envs 2"),
                        (["--norm-stats", "shared"], "per-env over 2 envs, this run's shared; pass --norm-stats per-env "
                         "--num-envs 2")):
        code, _, err = run("ppo_continuous_mujoco", batches(per_env + flags, 1) + ["--init-from", path], tmp_path)
        assert code == 2 and err.strip().splitlines() == [
            f"error: --init-from: the checkpoint's normaliser statistics are {line}"]
    assert run_dirs(tmp_path) == []


@pytest.mark.parametrize("script", list(MODULES))
def test_resume_beside_init_from_continues_the_run_it_started(script, started):
    """The launcher's --resume-unfinished appends --resume to the argv that holds --init-from: --resume wins."""
    new = started(script)
    root = os.path.dirname(os.path.dirname(new.run_dir))
    latest = os.path.join(new.run_dir, "checkpoints", "latest.ckpt")
    argv = batches(BASE[script] + OTHER_FLAGS[script], 2) + ["--init-from", new.path, "--resume", latest]
    code, out, err = run(script, argv, Path(root))
    assert code in (0, None), err[-3000:]
    assert run_dirs(Path(root)) == [new.run_dir] and "resuming from iteration 1" in out and "starting from" not in out
    assert [r["iteration"] for r in metrics(new.run_dir) if "losses/value_loss" in r or "losses/td_loss" in r] == [1, 2]


@pytest.mark.parametrize("script", list(MODULES))
def test_a_resume_with_other_flags_points_to_init_from(script, checkpoint, tmp_path):
    path = checkpoint(script)
    code, _, err = run(script, batches(BASE[script] + ["--learning-rate", "1e-4"], 4) + ["--resume", path], tmp_path)
    (line,) = err.strip().splitlines()
    assert code == 2 and "but this run has 0.0001" in line
    assert line.endswith(f"to resume it, or --init-from {path} instead of --resume for a new run from its weights")


@pytest.mark.parametrize("script", list(MODULES))
def test_init_from_another_networks_checkpoint_exits_2(script, checkpoint, tmp_path, monkeypatch):
    m, path = MODULES[script], checkpoint(script)
    original = getattr(m, NETWORK_CLASS[script])

    class Wider(original):  # the same network with one more layer: a class edited since the checkpoint
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.extra = nn.Linear(3, 3)
    monkeypatch.setattr(m, NETWORK_CLASS[script], Wider)
    code, _, err = run(script, batches(BASE[script], 1) + ["--init-from", path], tmp_path)
    assert code == 2 and err.strip().splitlines() == [
        "error: --init-from: the checkpoint holds another network's weights (2 of this network's tensors missing, 0 "
        "unknown); start from a checkpoint of this network"]
    assert run_dirs(tmp_path) == []


@pytest.mark.parametrize("script", list(MODULES))
def test_init_from_a_missing_or_foreign_file_exits_2(script, tmp_path):
    other = "ppo_procgen" if script != "ppo_procgen" else "pqn_atari"
    foreign, garbage, missing = tmp_path / "foreign.ckpt", tmp_path / "garbage.ckpt", tmp_path / "missing.ckpt"
    foreign.write_bytes(pickle.dumps({"script": other, "iteration": 1}))
    garbage.write_bytes(b"not a checkpoint")
    expected = {missing: f"error: --init-from: no checkpoint at {missing}; pass the path of a checkpoints/*.ckpt file",
                foreign: f"error: --init-from: {foreign} was written by {other}, not {script}; use it with that script",
                garbage: f"error: --init-from: {garbage} is not a readable checkpoint (UnpicklingError)"}
    for path, line in expected.items():
        code, _, err = run(script, batches(BASE[script], 1) + ["--init-from", str(path)], tmp_path)
        assert code == 2 and err.strip().splitlines() == [line]
    assert run_dirs(tmp_path) == []
