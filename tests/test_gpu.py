"""Every script a few iterations on a CUDA GPU (pytest -m gpu tests/test_gpu.py): diagnostics on, losses finite, the
run directory complete, and a checkpoint resumed. Tests marked gpu are skipped where their framework has no CUDA GPU
(torch's where torch sees none, JAX's where nvidia-smi lists none: tests/conftest.py); their last results are on docs/gpu.md. They reuse the tiny configurations of each script's own
test file and run in this process (tests/inprocess.py), the torch scripts first, then the JAX scripts.

What "resumed" asserts on a GPU:
- ppo_continuous_mujoco.py (gymnasium envs): 2 + 2 resumed iterations equal 4 in one go to the last bit, as on CPU.
  Its kernels are deterministic: cuBLAS gives the same bits for the same shapes on one GPU, a small MLP meets no
  atomics, and the actions come from the CUDA generator that the checkpoint holds.
- ppo_atari_envpool.py, pqn_atari.py, ppo_procgen.py: envpool cannot save its envs, so a resumed run restarts them
  (docs/run_directory.md) and only continues: the same iterations and steps, Adam's state carried on.
- the JAX scripts: the resumed run continues. Not compared bit for bit: XLA's GPU scatter-adds use atomics, whose
  order varies between runs (https://github.com/google/jax/discussions/10674); bit-exact resume is a CPU guarantee.
"""
import importlib
import json
import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from inprocess import main_inprocess  # noqa: E402

# torch and JAX share the GPU in this process: JAX takes memory as it needs it instead of 75% of it up front
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

TORCH_SCRIPTS = ["ppo_atari_envpool", "pqn_atari", "ppo_procgen", "ppo_continuous_mujoco"]
JAX_SCRIPTS = ["ppo_ewma_jax2d", "sfl_kinetix_jax"]
# the update on the GPU as a user runs it: compiled (the Procgen test file turns compile off for its CPU runs); a
# constant lr, since an annealed one depends on the total, which differs between a whole run and its first half
ON_GPU = ["--cuda", "--compile", "--diagnostics-every", "1", "--seed", "1", "--no-anneal-lr"]
PPO_DIAGNOSTICS = {"diagnostics/kl_behavior", "diagnostics/ddr", "diagnostics/seq_kl_mean", "diagnostics/ess_pct"}
SHARED_DIAGNOSTICS = {"diagnostics/feature_rank", "diagnostics/dormant_frac", "diagnostics/weight_norm",
                      "diagnostics/grad_norm", "diagnostics/update_size", "diagnostics/grad_kurtosis"}


def require_envs(script: str, m) -> None:
    """Skip where this machine lacks the script's environments (a CUDA image may carry envpool's Atari part only)."""
    envpool = pytest.importorskip("envpool")
    if script == "ppo_procgen" and m.envpool_id("bigfish", "easy") not in envpool.list_all_envs():
        pytest.skip("envpool without its Procgen games")
    if script == "ppo_continuous_mujoco":
        pytest.importorskip("mujoco")


def tiny_flags(script: str) -> list:
    """The script's tiny configuration from its own test file."""
    return list(importlib.import_module(f"test_{script}").TINY)


def batch_of(flags: list) -> int:
    value = {flags[i]: flags[i + 1] for i in range(len(flags) - 1) if flags[i].startswith("--")}
    return int(value["--num-envs"]) * int(value["--num-steps"])


def run(m, args: list, root) -> str:
    """main() in this process (which puts back torch's thread count where torch is loaded); the run directory it
    wrote. A JAX script's run needs no torch."""
    code, stdout, stderr = main_inprocess(m, args, root)
    assert code in (0, None), stderr[-3000:]
    (run_dir,) = (root / "runs").iterdir()
    return str(run_dir)


def read_rows(run_dir: str) -> list:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def loss_rows(run_dir: str, loss_tag: str) -> list:
    """(iteration, global_step, every losses/ value) of each training iteration, in order."""
    return [(r["iteration"], r["global_step"], sorted((k, v) for k, v in r.items() if k.startswith("losses/")))
            for r in read_rows(run_dir) if loss_tag in r]


def load_checkpoint(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "checkpoints", "latest.ckpt"), "rb") as f:
        return pickle.load(f)


def assert_complete_and_finite(run_dir: str, iterations: int, diagnostics: set) -> dict:
    """The run directory of a finished run: config, metrics, TensorBoard events, checkpoint, summary; every logged
    value finite (explained variance may be nan on a constant target); the diagnostics logged. Returns config.json."""
    names = set(os.listdir(run_dir))
    assert {"config.json", "metrics.jsonl", "summary.json", "checkpoints"} <= names, names
    assert any(n.startswith("events.out.tfevents.") for n in names), names
    rows = read_rows(run_dir)
    for row in rows:
        for tag, value in row.items():
            if isinstance(value, float) and tag != "losses/explained_variance":
                assert math.isfinite(value), (tag, value)
    assert diagnostics <= set().union(*rows), diagnostics - set().union(*rows)
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["status"] == "finished" and summary["iteration"] == iterations
    assert load_checkpoint(run_dir)["iteration"] == iterations
    return json.load(open(os.path.join(run_dir, "config.json")))


# ------------------------------------------------------------------------------------------------ the marker
def test_gpu_tests_are_skipped_where_their_framework_sees_no_gpu(monkeypatch):
    """The conftest hook: a torch gpu item is skipped unless torch sees CUDA, a JAX one (gpu("jax")) unless the driver
    lists a GPU; unmarked items never. So a GPU node with the CPU torch of the JAX environment runs the JAX tests and
    skips the torch ones, rather than failing them."""
    import conftest

    class Item:
        def __init__(self, mark):
            self.markers = [mark] if mark else []

        def get_closest_marker(self, name):
            return next((mk for mk in self.markers if mk.name == name), None)

        def add_marker(self, marker):
            self.markers.append(marker.mark)

    for torch_gpu, driver_gpu, skipped in [(False, False, [True, True, False]), (True, True, [False, False, False]),
                                           (False, True, [True, False, False]), (True, False, [False, True, False])]:
        monkeypatch.setattr(conftest, "torch_sees_cuda", lambda: torch_gpu)
        monkeypatch.setattr(conftest, "driver_lists_a_gpu", lambda: driver_gpu)
        items = [Item(pytest.mark.gpu.mark), Item(pytest.mark.gpu("jax").mark), Item(None)]
        conftest.pytest_collection_modifyitems(None, items)
        assert [item.get_closest_marker("skip") is not None for item in items] == skipped


def test_the_driver_lists_a_gpu_unless_none_or_hidden(monkeypatch):
    """nvidia-smi -L naming a GPU, unless CUDA_VISIBLE_DEVICES hides them all; no listing, no driver: none."""
    import conftest

    outputs = {"a GPU": (0, "GPU 0: NVIDIA H200 (UUID: GPU-0)\n"), "none": (9, ""), "no driver": None}
    for case, hidden, expected in [("a GPU", None, True), ("a GPU", "", False), ("a GPU", "-1", False),
                                   ("none", None, False), ("no driver", None, False)]:
        def nvidia_smi(cmd, **kwargs):
            if outputs[case] is None:
                raise FileNotFoundError(cmd[0])
            return subprocess.CompletedProcess(cmd, outputs[case][0], outputs[case][1], "")
        monkeypatch.setattr(conftest.subprocess, "run", nvidia_smi)
        if hidden is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert conftest.driver_lists_a_gpu() is expected, (case, hidden)


def test_the_suite_loads_without_pytest_xdist():
    """A CUDA image may have pytest without pytest-xdist: conftest's xdist hook must not stop the run there."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-o", "addopts=",
                          "-q", os.path.join(ROOT, "tests", "test_gpu.py"), "-k", "skipped_where_their_framework"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


# ------------------------------------------------------------------------------------------------ torch scripts
@pytest.mark.gpu
@pytest.mark.parametrize("script", TORCH_SCRIPTS)
def test_torch_script_trains_checkpoints_and_resumes_on_gpu(script, tmp_path):
    import torch

    m = importlib.import_module(f"cleanrl_scaling.{script}")
    require_envs(script, m)
    flags = tiny_flags(script) + ON_GPU
    batch = batch_of(flags)
    loss_tag = "losses/td_loss" if script == "pqn_atari" else "losses/policy_loss"
    diagnostics = SHARED_DIAGNOSTICS | (set() if script == "pqn_atari" else PPO_DIAGNOSTICS)

    # MuJoCo also saves its model and evaluates it, reading the normaliser's statistics back from the GPU run's file
    saved_model = ["--save-model", "--eval-episodes", "2"] if script == "ppo_continuous_mujoco" else []
    whole = run(m, flags + ["--total-timesteps", str(4 * batch)] + saved_model, tmp_path / "whole")
    config = assert_complete_and_finite(whole, 4, diagnostics)
    if saved_model:
        assert math.isfinite(json.load(open(os.path.join(whole, "summary.json")))["eval_mean_return"])
    assert config["device"].startswith("cuda") and config["args"]["tf32"] is True
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32  # --tf32, the default
    if script != "pqn_atari":
        assert os.path.exists(os.path.join(whole, "kl_profile.jsonl"))

    half = run(m, flags + ["--total-timesteps", str(2 * batch)], tmp_path / "half")
    before = load_checkpoint(half)
    assert any(v.is_cuda for s in before["optimizer"]["state"].values() for v in s.values() if torch.is_tensor(v))
    on_cpu = m.load_checkpoint(os.path.join(half, "checkpoints", "latest.ckpt"), script, {})  # as a CPU machine reads it
    assert not any(v.is_cuda for s in on_cpu["optimizer"]["state"].values() for v in s.values() if torch.is_tensor(v))
    resumed = run(m, flags + ["--total-timesteps", str(4 * batch), "--resume",
                              os.path.join(half, "checkpoints", "latest.ckpt")], tmp_path / "half")
    assert resumed == half  # a resumed run continues in its own run directory
    assert_complete_and_finite(resumed, 4, diagnostics)
    rows = loss_rows(resumed, loss_tag)
    assert [(it, step) for it, step, _ in rows] == [(i, i * batch) for i in range(1, 5)]
    after = load_checkpoint(resumed)
    step = lambda ckpt: max(s["step"] for s in ckpt["optimizer"]["state"].values())  # noqa: E731
    assert step(after) > step(before)
    if script == "ppo_continuous_mujoco":  # bit-exact: the module docstring says why
        assert rows == loss_rows(whole, loss_tag)
        weights = load_checkpoint(whole)["agent"]
        assert all(torch.equal(weights[k], after["agent"][k]) for k in weights)


@pytest.mark.gpu
def test_tf32_flag_switches_cuda_matmuls_and_changes_the_numbers(tmp_path):
    """Three 1-iteration Atari runs: --tf32 twice (the same bits: the run is reproducible on one GPU) and --no-tf32
    (other bits: TF32 was in effect). The switches are read back after each run."""
    import torch

    m = importlib.import_module("cleanrl_scaling.ppo_atari_envpool")
    require_envs("ppo_atari_envpool", m)
    flags = tiny_flags("ppo_atari_envpool") + ON_GPU + ["--total-timesteps", str(batch_of(tiny_flags("ppo_atari_envpool")))]
    losses = {}
    for name, tf32 in [("on", "--tf32"), ("again", "--tf32"), ("off", "--no-tf32")]:
        run_dir = run(m, flags + [tf32], tmp_path / name)
        assert torch.backends.cuda.matmul.allow_tf32 is (tf32 == "--tf32")
        assert torch.backends.cudnn.allow_tf32 is (tf32 == "--tf32")
        assert json.load(open(os.path.join(run_dir, "config.json")))["args"]["tf32"] is (tf32 == "--tf32")
        losses[name] = loss_rows(run_dir, "losses/policy_loss")
    assert losses["on"] == losses["again"], "two runs with the same flags differ on this GPU"
    assert losses["on"] != losses["off"], "--no-tf32 gave TF32's bits: TF32 was not in effect"


ASYNC_ENVS_SCRIPTS = {"ppo_atari_envpool": PPO_DIAGNOSTICS | SHARED_DIAGNOSTICS, "pqn_atari": SHARED_DIAGNOSTICS}


@pytest.mark.gpu
@pytest.mark.parametrize("script", ASYNC_ENVS_SCRIPTS)
def test_async_envs_on_the_gpu(script, tmp_path):
    """--async-envs with the network and the rollout buffer on CUDA: the CPU test's check that both modes store the
    same bits (a policy, or Q-values, that is a function of the frames), then a 2-iteration run, complete and finite,
    that records the flag."""
    m = importlib.import_module(f"cleanrl_scaling.{script}")
    require_envs(script, m)
    importlib.import_module(f"test_{script}").test_async_envs_collect_the_transitions_of_one_group("cuda")
    flags = tiny_flags(script) + ON_GPU + ["--async-envs"]
    run_dir = run(m, flags + ["--total-timesteps", str(2 * batch_of(flags))], tmp_path)
    config = assert_complete_and_finite(run_dir, 2, ASYNC_ENVS_SCRIPTS[script])
    assert config["device"].startswith("cuda") and config["args"]["async_envs"] is True


@pytest.mark.gpu
def test_envpool_async_on_the_gpu(tmp_path):
    """--envpool-async with the network and the rollout buffer on CUDA: the CPU test's check that each env's column
    holds the synchronous mode's transitions, the bookkeeping by hand (index tensors on the GPU), then a 2-iteration
    run, complete and finite, that records the flag."""
    m = importlib.import_module("cleanrl_scaling.ppo_atari_envpool")
    require_envs("ppo_atari_envpool", m)
    t = importlib.import_module("test_ppo_atari_envpool")
    t.test_envpool_async_collects_each_envs_transitions_of_the_synchronous_mode("cuda")
    t.test_envpool_async_rows_by_hand_over_rollouts_with_updates_between("cuda")
    flags = tiny_flags("ppo_atari_envpool") + ON_GPU + ["--envpool-async"]
    run_dir = run(m, flags + ["--total-timesteps", str(2 * batch_of(flags))], tmp_path)
    config = assert_complete_and_finite(run_dir, 2, PPO_DIAGNOSTICS | SHARED_DIAGNOSTICS)
    assert config["device"].startswith("cuda") and config["args"]["envpool_async"] is True


# ------------------------------------------------------------------------------------------------ JAX scripts
@pytest.mark.gpu("jax")
@pytest.mark.parametrize("script", JAX_SCRIPTS)
def test_jax_script_runs_on_the_gpu_backend(script, tmp_path, monkeypatch):
    """A tiny run with diagnostics and evaluation on JAX's default backend, which must be the GPU; then 2 iterations
    and a resume to 4, which continues."""
    pytest.importorskip("kinetix")
    m = importlib.import_module(f"cleanrl_scaling.{script}")
    t = importlib.import_module(f"test_{script}")
    monkeypatch.setattr(m, "make_train", t.shared_make_train)  # the three runs share one traced program
    flags = ["--diagnostics-every", "2", "--eval-every", "2"]
    diagnostics = {"diagnostics/kl_behavior", "diagnostics/ddr", "diagnostics/feature_rank"}

    whole = run(m, t.tiny(4) + flags, tmp_path / "whole")
    config = assert_complete_and_finite(whole, 4, diagnostics)
    assert config["platform"] == "gpu", f"JAX ran on {config['platform']}: install JAX's CUDA plugin (docs/installation.md)"
    assert json.load(open(os.path.join(whole, "summary.json")))["peak_device_bytes"] > 0  # the GPU allocator's peak
    half = run(m, t.tiny(2) + flags, tmp_path / "half")
    before = load_checkpoint(half)
    resumed = run(m, t.tiny(4) + flags + ["--resume", os.path.join(half, "checkpoints", "latest.ckpt")],
                  tmp_path / "half")
    assert_complete_and_finite(resumed, 4, diagnostics)
    iterations = [r["iteration"] for r in read_rows(resumed) if "losses/policy_loss" in r]
    assert iterations == sorted(set(iterations)) and iterations[-1] == 4
    assert [it for it in iterations if it > 2] == [it for it, _, _ in loss_rows(whole, "losses/policy_loss") if it > 2]
    # what the checkpoint carried: Adam's step count (a scalar integer) and the RNG key (uint32), which no float
    # rounding touches: the resumed run ends with the whole run's, and its count is twice the half's
    (resumed_counts, resumed_keys), (whole_counts, whole_keys) = (counters(load_checkpoint(resumed)),
                                                                  counters(load_checkpoint(whole)))
    assert resumed_counts and [int(a) for a in resumed_counts] == [2 * int(b) for b in counters(before)[0]]
    assert len(resumed_keys) == len(whole_keys) and len(resumed_counts) == len(whole_counts)
    assert all(np.array_equal(a, b) for a, b in zip(resumed_counts + resumed_keys, whole_counts + whole_keys))


def counters(ckpt: dict) -> tuple:
    """A JAX checkpoint's runner leaves that count or key: ([scalar integers], [uint32 PRNG keys])."""
    leaves = [np.asarray(x) for x in ckpt["runner"]]
    return ([x for x in leaves if x.shape == () and np.issubdtype(x.dtype, np.integer)],
            [x for x in leaves if x.dtype == np.uint32])
