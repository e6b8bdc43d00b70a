"""noisy_sgd.py: the closed-form plateau (docs/noisy_sgd.md) against hand values and the simulation, the run format,
seeding, and the usage errors."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from cleanrl_scaling import noisy_sgd as ns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "cleanrl_scaling", "noisy_sgd.py")


def simulate(num_seeds: int, **flags):
    """Final x of every seed and the mean ||x_t||^2 over seeds at every logged step."""
    args = ns.Args(num_seeds=num_seeds, **flags)
    resolved = ns.validate(args)
    seeds = list(range(args.seed, args.seed + num_seeds))
    x = np.full((num_seeds, args.dim), float(args.x0))
    steps, sq, sizes = [0], [float(np.mean(np.sum(x**2, axis=1)))], []
    for step, x, grad, lr in ns.descend(x, seeds, resolved["noise_std"], args):
        steps.append(step)
        sq.append(float(np.mean(np.sum(x**2, axis=1))))
        sizes = lr * np.linalg.norm(grad, axis=1)
    return x, np.array(steps), np.array(sq), sizes, resolved


# ---------------------------------------------------------------------------------------------------------
# Closed form: hand values
# ---------------------------------------------------------------------------------------------------------
def test_stationary_variance_is_the_fixed_point():
    for lr, s in [(0.1, 0.3), (0.3, 3 / math.sqrt(50)), (0.9, 1.0)]:
        v = ns.stationary_variance(lr, s)
        assert v == pytest.approx((1 - 2 * lr) ** 2 * v + lr**2 * s**2, rel=1e-12)
    assert math.isinf(ns.stationary_variance(1.0, 1.0)) and math.isinf(ns.stationary_variance(1.5, 1.0))


def test_plateau_hand_values():
    # B26 App. A noise 3/sqrt(50): E||x||^2 = d a s^2 / (4 (1 - a)) = 9 a / (4 (1 - a)), whatever d
    assert ns.plateau(0.1, 3 / math.sqrt(50), 50)["sq_distance"] == pytest.approx(0.25, rel=1e-12)
    assert ns.plateau(0.3, 3 / math.sqrt(10), 10)["sq_distance"] == pytest.approx(2.7 / 2.8, rel=1e-12)
    # chi means: sqrt(2/pi) in 1 d, sqrt(pi/2) in 2 d
    assert ns.chi_mean(1) == pytest.approx(math.sqrt(2 / math.pi), rel=1e-12)
    assert ns.chi_mean(2) == pytest.approx(math.sqrt(math.pi / 2), rel=1e-12)
    # d = 1, a = 0.5: x_{t+1} = -0.5 s xi, so E|x| = 0.5 s sqrt(2/pi) and the update is x_t - x_{t+1}
    p = ns.plateau(0.5, 2.0, 1)
    assert p["distance"] == pytest.approx(math.sqrt(2 / math.pi), rel=1e-12)
    assert p["update_size"] == pytest.approx(0.5 * 2.0 / math.sqrt(0.5) * math.sqrt(2 / math.pi), rel=1e-12)


def test_expected_sq_distance_recursion_hand_values():
    # d = 2, x0 = 1, a = 0.25, s = 2: m = 1 -> 0.5 -> 0.25; v = 0 -> 0.25 -> 0.3125
    out = ns.expected_sq_distance(np.array([0.25, 0.25]), 2.0, 2, 1.0)
    assert out == pytest.approx([2.0, 2 * (0.25 + 0.25), 2 * (0.0625 + 0.3125)], rel=1e-12)


# ---------------------------------------------------------------------------------------------------------
# Closed form against the simulation
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lr,dim", [(0.1, 50), (0.3, 10)])
def test_simulated_plateau_matches_closed_form(lr, dim):
    """2000 independent seeds at step 200 (the transient (1-2a)^400 ||x0||^2 < 1e-38 is gone). Stationary
    x ~ N(0, v I_d), so ||x||^2 / v ~ chi^2_d (sd v sqrt(2d)) and ||x|| / sqrt(v) ~ chi_d (sd sqrt(v (d - c_d^2))):
    a tolerance of 4 standard errors of the seed mean fails a correct implementation with probability ~1e-4."""
    seeds = 2000
    x, _, _, sizes, resolved = simulate(seeds, learning_rate=lr, dim=dim, total_steps=200, log_every=200)
    target, s = resolved["plateau"], resolved["noise_std"]
    v, c = ns.stationary_variance(lr, s), ns.chi_mean(dim)
    sq, norm = np.sum(x**2, axis=1), np.linalg.norm(x, axis=1)
    assert sq.mean() == pytest.approx(target["sq_distance"], abs=4 * v * math.sqrt(2 * dim) / math.sqrt(seeds))
    assert norm.mean() == pytest.approx(target["distance"], abs=4 * math.sqrt(v * (dim - c * c) / seeds))
    u2 = lr**2 * s**2 / (1 - lr)  # per-coordinate variance of the stationary update
    assert sizes.mean() == pytest.approx(target["update_size"], abs=4 * math.sqrt(u2 * (dim - c * c) / seeds))


def test_simulated_transient_and_switch_match_the_exact_recursion():
    """E||x_t||^2 under a step-size switch (B26 Fig. 3b) at every step; x_t ~ N(m_t 1, v_t I) so
    Var ||x_t||^2 = 2 d v_t^2 + 4 v_t d m_t^2 bounds the error of the mean over seeds."""
    seeds, dim, s = 2000, 50, 3 / math.sqrt(50)
    flags = dict(learning_rate=0.02, switch_step=60, switch_learning_rate=0.3, total_steps=120, log_every=1)
    _, steps, sq, _, _ = simulate(seeds, dim=dim, **flags)
    schedule = np.array([0.02] * 60 + [0.3] * 60)
    expected = ns.expected_sq_distance(schedule, s, dim, 1.0)
    m, v = np.ones(1), np.zeros(1)
    sd = [0.0]
    for a in schedule:
        m, v = (1 - 2 * a) * m, (1 - 2 * a) ** 2 * v + a * a * s * s
        sd.append(math.sqrt(2 * dim * v[0] ** 2 + 4 * v[0] * dim * m[0] ** 2))
    assert np.array_equal(steps, np.arange(121))
    assert np.all(np.abs(sq - expected) <= 4.5 * np.array(sd) / math.sqrt(seeds) + 1e-12)
    assert sq[0] == pytest.approx(50.0) and sq[-1] == pytest.approx(ns.plateau(0.3, s, dim)["sq_distance"], rel=0.05)


def test_a_seed_is_the_same_in_any_batch():
    """Seed 2 alone and inside a batch of 3000 (other noise chunk sizes) follow the same trajectory."""
    alone, *_ = simulate(1, seed=2, total_steps=40, log_every=40)
    batch, *_ = simulate(3000, seed=1, total_steps=40, log_every=40)
    assert np.array_equal(alone[0], batch[1])


# ---------------------------------------------------------------------------------------------------------
# The script: run format, divergence, usage errors
# ---------------------------------------------------------------------------------------------------------
def run_script(tmp_path, *flags):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, SCRIPT, "--runs-dir", str(tmp_path / "runs"), *flags],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


def test_run_writes_one_spec_run_directory_per_seed(tmp_path):
    out = run_script(tmp_path, "--num-seeds", "3", "--total-steps", "20", "--log-every", "5", "--learning-rate",
                     "0.2", "--save-model")
    assert out.returncode == 0, out.stderr
    dirs = sorted(os.listdir(tmp_path / "runs"))
    assert [d.split("__")[:3] for d in dirs] == [["NoisyQuadratic-d50", "noisy_sgd", str(s)] for s in (1, 2, 3)]
    for seed, name in zip((1, 2, 3), dirs):
        run = tmp_path / "runs" / name
        config = json.loads((run / "config.json").read_text())
        assert config["args"]["seed"] == seed and config["args"]["learning_rate"] == 0.2
        assert config["env_id"] == "NoisyQuadratic-d50" and "--num-seeds" in config["argv"]
        assert config["resolved"]["noise_std"] == pytest.approx(3 / math.sqrt(50))
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["global_step"] for r in rows] == [0, 5, 10, 15, 20]
        assert rows[0]["charts/neg_distance"] == pytest.approx(-math.sqrt(50))
        for r in rows[1:]:
            assert r["iteration"] == r["global_step"] and r["charts/learning_rate"] == 0.2
            assert r["diagnostics/update_size"] == pytest.approx(0.2 * r["diagnostics/grad_norm"])
            assert all(math.isfinite(r[k]) for k in ("charts/neg_distance", "diagnostics/update_size", "wall_time"))
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["global_step"] == 20 and summary["iteration"] == 20
        assert summary["final_neg_distance"] == pytest.approx(rows[-1]["charts/neg_distance"])
        with open(run / "noisy_sgd.cleanrl_model", "rb") as f:
            assert np.linalg.norm(np.load(f)) == pytest.approx(-summary["final_neg_distance"])
        assert any(f.startswith("events.out.tfevents") for f in os.listdir(run))
    assert "closed form E||x - x*|| = " in out.stdout


def test_log_seeds_limits_run_directories(tmp_path):
    out = run_script(tmp_path, "--num-seeds", "50", "--log-seeds", "2", "--total-steps", "10")
    assert out.returncode == 0, out.stderr
    assert len(os.listdir(tmp_path / "runs")) == 2 and "(95% CI over 50 seeds)" in out.stdout


def test_divergence_stops_with_status_diverged(tmp_path):
    out = run_script(tmp_path, "--learning-rate", "1.5", "--total-steps", "3000", "--num-seeds", "1",
                     "--log-every", "100")
    assert out.returncode == 3 and "lower --learning-rate" in out.stderr
    (run,) = os.listdir(tmp_path / "runs")
    summary = json.loads((tmp_path / "runs" / run / "summary.json").read_text())
    assert summary["status"] == "diverged" and math.isfinite(summary["final_neg_distance"])


@pytest.mark.parametrize("flags,flag", [
    (["--learning-rate", "0"], "--learning-rate"),
    (["--dim", "0"], "--dim"),
    (["--noise-std", "-1"], "--noise-std"),
    (["--switch-step", "10"], "--switch-learning-rate"),
    (["--switch-step", "1000"], "--switch-step"),
    (["--switch-learning-rate", "0.1"], "--switch-learning-rate"),
    (["--num-seeds", "0"], "--num-seeds"),
    (["--resume", "x.ckpt"], "--resume"),
    (["--noise-std", "inf"], "--noise-std"),  # refused, not reported as a divergence to fix by the lr
    (["--learning-rate", "nan"], "--learning-rate"),
    (["--runs-dir", "/proc/cleanrl_scaling/runs"], "--runs-dir"),  # one line, not a traceback
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, flags, flag):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["noisy_sgd.py", "--runs-dir", str(tmp_path / "runs"), *flags])
    with pytest.raises(SystemExit) as exit_info:
        ns.main()
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and flag in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_one_seed_prints_no_nan_confidence_interval():
    """One seed prints no '+- nan (95% CI over 1 seeds)'."""
    one = ns.mean_with_ci(np.array([0.5]))
    assert one.startswith("0.5 (one seed") and "nan" not in one
    assert ns.mean_with_ci(np.array([1.0, 3.0])) == "2 +- 2 (95% CI over 2 seeds)"  # 1.96 * sqrt(2) / sqrt(2)


def test_progress_bar_shows_the_distance_not_a_return(tmp_path, capsys):
    """Noisy SGD has no episodes: its bar must not show 'ret=nan' for the whole run."""
    logger = ns.RunLogger(str(tmp_path / "run"), {}, ns.Args(progress="bar"), 10, headline="charts/neg_distance")
    logger.log(0, 0, {"charts/neg_distance": -7.07})
    logger.progress(5, 100.0)
    logger.close({"status": "finished"})
    shown = capsys.readouterr().err
    assert "neg_distance -7.07" in shown and "nan" not in shown


def test_divergence_after_the_switch_names_the_switch_step_size(tmp_path, monkeypatch, capsys):
    """A step size >= 1 set by --switch-learning-rate is blamed on --switch-learning-rate, not --learning-rate."""
    monkeypatch.setattr(sys, "argv", ["noisy_sgd.py", "--runs-dir", str(tmp_path / "runs"), "--learning-rate", "0.1",
                                      "--switch-step", "10", "--switch-learning-rate", "1.5", "--total-steps", "3000",
                                      "--num-seeds", "1", "--log-every", "100", "--progress", "none"])
    with pytest.raises(SystemExit) as exit_info:
        ns.main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 3 and "step size 1.5" in err and err.strip().endswith("lower --switch-learning-rate")
    args = ns.Args(switch_step=10, switch_learning_rate=1.5)
    assert ns.divergence_advice(10, 1.5, args) == "lower --learning-rate"  # update 10 still used --learning-rate
    assert ns.divergence_advice(11, 1.5, args) == "lower --switch-learning-rate"
    assert ns.divergence_advice(11, 0.5, args) == "lower --noise-std or --x0"
