"""Golden numerics: a tiny fixed-seed CPU run of each script must log exactly the numbers recorded in
tests/golden/<script>.json before the script was restructured, so moving code around cannot change what it computes.

Every float in metrics.jsonl (losses, charts, diagnostics), kl_profile.jsonl and summary.json is compared for
equality after a JSON round trip (Python writes floats with repr, so equal text means bit-identical float64).
Only wall-clock fields are dropped (wall_time, SPS; sfl_kinetix_jax's filter_seconds and filter_share), and the JAX
scripts' peak_device_bytes (a reading of the device, not a computed number). The default
runs use --no-compile (a compile adds tens of seconds to each run). Measured here: two compiled runs of ppo_atari_envpool in
separate processes are bit-identical to each other, but differ from the eager run in the last bits (e.g. policy loss
-0.000474613 vs -0.000474594), so the compiled path has its own golden file, checked by a slow test (pytest -m slow).
The two JAX scripts run with single-threaded Eigen (a dot split over a thread pool could sum in an order that depends
on the core count) at XLA's -O0, the level the JAX tests compile at (tests/conftest.py: a third of the default
level's compile time), set here and not taken from the environment: the numbers depend on the XLA flags (the default
level gives other numbers: another episode ends in ppo_ewma_jax2d's run), so each golden file records them.
ppo_ewma_jax2d's run repeats bit for bit in separate processes, with a cold and a warm compilation cache, and takes
about a minute with a cold one, so it is in the default run. sfl_kinetix_jax's
compiles Kinetix's level sampler (minutes, even with a warm compilation cache), so its test is slow;
its run too repeats bit for bit in two processes.
Each run is of a copy of the script in a temp dir outside the package, without PYTHONPATH (a copied
script still runs alone), so the same run also checks that.
Bit identity holds on one kind of CPU only: each golden file records the SIMD flags of the CPU it was recorded on
("machine"). On another CPU the same code rounds differently (seen on moving from the first machine to an AVX-512
one: KLs of ~1e-6 moved by up to 1.5% of themselves, a weight norm by 8e-5 relative, one unit of procgen's 608
crossed a dormancy threshold), so there every float must be within 1e-3 relative or 1e-7 absolute (a `_frac`,
a share of units or samples over a threshold: 0.01), and everything else must be equal. MuJoCo's physics itself
rounds differently across CPUs and HalfCheetah is chaotic (its value loss came out 0.069 against 0.132 after 192
steps), so on another CPU ppo_continuous_mujoco's run is checked for its shape only: the same rows, keys and
non-float values.
Regenerate after a change that is meant to move numbers, or to record on this CPU: GOLDEN_REGEN=1 pytest -n 0
tests/test_golden_numerics.py (then the file holds this CPU's numbers and flags).
"""
import glob
import json
import os
import subprocess
import sys

import math
import re
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
    # tests/test_ppo_ewma_jax2d.py's tiny(4), with diagnostics every iteration and an evaluation every 2
    "ppo_ewma_jax2d": ["--num-tasks", "8", "--num-envs", "8", "--num-steps", "16", "--num-minibatches", "2",
                       "--update-epochs", "2", "--hidden-size", "32", "--diagnostics-states", "64",
                       "--updates-per-chunk", "2", "--eval-every", "2", "--ewma-com", "2", "--diagnostics-every", "1",
                       "--eval-attempts", "1", "--total-timesteps", "512", "--seed", "3", "--progress", "none"],
}
# tests/test_sfl_kinetix_jax.py's tiny(4): two buffer refreshes, diagnostics every iteration, an evaluation every 2
SLOW_RUNS = {
    "sfl_kinetix_jax": ["--network", "mlp", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2",
                        "--update-epochs", "2", "--hidden-size", "16", "--num-hidden-layers", "2", "--episode-length",
                        "12", "--sfl-num-levels", "8", "--sfl-filter-batch", "4", "--sfl-buffer-size", "4",
                        "--sfl-rollout-length", "24", "--sfl-update-period", "2", "--level-batch", "4",
                        "--level-filter-steps", "4", "--eval-random-levels", "4", "--eval-attempts", "2",
                        "--diagnostics-states", "16", "--updates-per-chunk", "2", "--eval-every", "2",
                        "--diagnostics-every", "1", "--total-timesteps", "256", "--seed", "3", "--progress", "none"],
}
JAX_SCRIPTS = ("ppo_ewma_jax2d", "sfl_kinetix_jax")
# single-threaded Eigen, and the -O0 of the JAX tests (tests/conftest.py): a third of the default level's compile time
JAX_ENV = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false --xla_backend_optimization_level=0"}
COMPILED = {"ppo_atari_envpool": [a for a in RUNS["ppo_atari_envpool"] if a != "--no-compile"]}
# wall-clock readings (sfl_kinetix_jax times its level filtering, the envpool scripts their loop's parts) and the JAX scripts' device memory reading (null on
# CPU, the allocator's peak on a GPU); everything else must repeat exactly
VOLATILE = ("wall_time", "SPS", "filter_seconds", "filter_share", "peak_device_bytes", "time/")
SHAPE_ONLY_ELSEWHERE = ("ppo_continuous_mujoco",)  # MuJoCo's physics rounds differently across CPUs


def machine() -> str:
    """The CPU's SIMD flags: what decides how a kernel rounds (the same code on two such CPUs gives the same bits)."""
    try:
        flags = open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split()
    except (OSError, IndexError):
        return "unknown"
    return " ".join(sorted(f for f in set(flags) if re.match(r"(avx|fma|amx|sse|f16c)", f)))


def differences(got, want, path="", shape_only=False) -> list:
    """Where got and want differ beyond another CPU's rounding (docstring above); shape_only: floats not compared."""
    if isinstance(want, dict) and isinstance(got, dict):
        if got.keys() != want.keys():
            return [f"{path}: keys {sorted(set(got) ^ set(want))}"]
        return [d for k in want for d in differences(got[k], want[k], f"{path}/{k}", shape_only)]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} rows, golden {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in differences(g, w, f"{path}[{i}]", shape_only)]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if shape_only or math.isclose(got, want, rel_tol=1e-3, abs_tol=0.01 if "_frac" in path else 1e-7):
            return []
        return [f"{path}: {got!r}, golden {want!r}"]
    return [] if got == want else [f"{path}: {got!r}, golden {want!r}"]


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
    env.update(ONE_THREAD, **(JAX_ENV if copy.stem in JAX_SCRIPTS else {}))
    out = subprocess.run([sys.executable, str(copy), "--runs-dir", str(runs)] + flags, capture_output=True,
                         text=True, timeout=1800, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    dirs = sorted(glob.glob(str(runs / "*")), key=lambda d: int(os.path.basename(d).split("__")[2]))
    return {str(i): numbers(d) for i, d in enumerate(dirs)}


def xla_flags(script: str):
    """The XLA flags a JAX script's golden run is compiled with (its numbers depend on them); None for the others."""
    return JAX_ENV["XLA_FLAGS"] if script in JAX_SCRIPTS else None


def check_golden(script: str, flags: list, golden_name: str, tmp_path) -> None:
    got = run_numbers(os.path.join(ROOT, "cleanrl_scaling", f"{script}.py"), flags, tmp_path)
    path = os.path.join(GOLDEN, f"{golden_name}.json")
    if os.environ.get("GOLDEN_REGEN") == "1":
        with open(path, "w") as f:
            json.dump({"command": flags, "machine": machine(), "xla_flags": xla_flags(script), "runs": got}, f, indent=1)
    golden = json.load(open(path))
    assert golden["command"] == flags, "the golden file was recorded with another command"
    assert golden.get("xla_flags") == xla_flags(script), "the golden file was recorded with other XLA flags"
    got = json.loads(json.dumps(got))
    if golden.get("machine") == machine():
        # Through JSON on both sides, so a float compares by its repr: equal means bit-identical.
        assert got == golden["runs"]
    else:
        wrong = differences(got, golden["runs"], shape_only=script in SHAPE_ONLY_ELSEWHERE)
        assert not wrong, f"{len(wrong)} number(s) beyond another CPU's rounding: " + "; ".join(wrong[:5])


@pytest.mark.parametrize("script", list(RUNS))
def test_tiny_run_repeats_the_golden_numbers(script, tmp_path):
    check_golden(script, RUNS[script], script, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("script", list(SLOW_RUNS))
def test_slow_tiny_run_repeats_the_golden_numbers(script, tmp_path):
    check_golden(script, SLOW_RUNS[script], script, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("script", list(COMPILED))
def test_compiled_tiny_run_repeats_the_golden_numbers(script, tmp_path):
    check_golden(script, COMPILED[script], f"{script}_compiled", tmp_path)


def test_another_cpus_rounding_passes_and_a_real_change_does_not():
    """differences(): what a golden run on another CPU is allowed to differ by (the module docstring)."""
    want = {"metrics.jsonl": [{"iteration": 1, "losses/value_loss": 0.0687638372182846, "diagnostics/kl": 1.0957e-06,
                               "diagnostics/dormant_frac_tau0.1": 0.555921052631579}]}
    rounded = json.loads(json.dumps(want))
    row = rounded["metrics.jsonl"][0]
    row["losses/value_loss"] *= 1 + 8e-5  # the weight norm's move across CPUs
    row["diagnostics/kl"] = 1.0864e-06  # 0.85% of a tiny KL, 9e-9 absolute
    row["diagnostics/dormant_frac_tau0.1"] = 0.5575657894736842  # one unit of 608 over the threshold
    assert differences(rounded, want) == []
    changed = json.loads(json.dumps(want))
    changed["metrics.jsonl"][0]["losses/value_loss"] *= 1.01  # a 1% move: not rounding
    assert len(differences(changed, want)) == 1 and differences(changed, want, shape_only=True) == []
    assert differences({"metrics.jsonl": [dict(want["metrics.jsonl"][0], iteration=2)]}, want)  # non-floats: equal
    assert differences({"metrics.jsonl": want["metrics.jsonl"] * 2}, want, shape_only=True)  # the rows: equal
