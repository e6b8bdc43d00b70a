"""benchmark/ppo_atari_learning.py's five-game study and benchmark/ppo_atari_learning_design.py: the minimum
detectable difference against a hand computation and against the rule's own intervals on simulated studies, the
rule's verdicts on synthetic finals, the pooled IQM against rliable, the runner's command lines (dry run), its
parallel limit and its stop, the summary from run directories, and the refusals."""
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tyro

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, "benchmark"), REPO]
import _learning_comparison as lc  # noqa: E402
import ppo_atari_learning as pal  # noqa: E402
import ppo_atari_learning_design as design  # noqa: E402

SCRIPT = os.path.join(REPO, "benchmark", "ppo_atari_learning.py")
DESIGN = os.path.join(REPO, "benchmark", "ppo_atari_learning_design.py")


# ---------------------------------------------------------------------------------------------------------
# The design: minimum detectable differences
# ---------------------------------------------------------------------------------------------------------
def test_mdd_by_hand_from_t_tables():
    # t quantiles from a printed t table: df 14: t_0.975 = 2.1448, t_0.80 = 0.8681; df 70: 1.9944, 0.8468
    assert design.per_game_mdd(0.2, 8) == pytest.approx((2.1448 + 0.8681) * 0.2 * math.sqrt(2 / 8), rel=1e-3)
    assert design.pooled_equal_mdd(0.2, 8, games=5) == pytest.approx((1.9944 + 0.8468) * 0.2 * math.sqrt(2 / 40),
                                                                      rel=1e-3)
    assert design.as_gap(-math.log(0.9)) == pytest.approx(0.1)  # ours at 0.9 of CleanRL's is a 10% gap
    # seeds_needed is the first n at or under the target: 1/sqrt(n) <= 0.1 first at n = 100
    assert design.seeds_needed(lambda n: -math.log(1 - 1 / math.sqrt(n)), target_gap=0.1) == 100


def test_pilot_relative_sd_by_hand():
    # Breakout, CleanRL: 16.24 22.10 19.06 less the random score 1.7 -> 14.54 20.40 17.36, mean 17.4333
    x = np.array([14.54, 20.40, 17.36])
    expected = math.sqrt(((x / x.mean() - 1) ** 2).sum() / 2)
    cv, dof = design.pooled_relative_sd({("Breakout-v5", "CleanRL"): (16.24, 22.10, 19.06)})
    assert dof == 2 and cv == pytest.approx(expected) and cv == pytest.approx(0.168, abs=1e-3)
    # two groups pool their squares over 2 + 2 degrees of freedom
    both, dof = design.pooled_relative_sd({("Breakout-v5", "a"): (16.24, 22.10, 19.06),
                                           ("Breakout-v5", "b"): (16.24, 22.10, 19.06)})
    assert dof == 4 and both == pytest.approx(expected)


def test_cost_by_hand():
    c = design.cost(seeds=2, games=1, total=1000)
    assert c["runs"] == 6 and c["steps"] == 6000
    assert c["cpu_hours"] == pytest.approx((4000 / 220 + 2000 / 200) / 3600)
    assert c["gpu_hours"] == pytest.approx((6000 / 10_000 / 3600, 6000 / 5_000 / 3600))


def lognormal(rng, level, cv, shape):
    sigma = math.sqrt(math.log1p(cv * cv))
    return level * rng.lognormal(-sigma * sigma / 2, sigma, shape)


def test_per_game_mdd_gives_the_rules_interval_80_percent_power():
    """A gap of exactly the MDD, simulated: the rule's ratio interval lies below 1 in about 80% of the studies."""
    cv, seeds, studies = 0.25, 10, 400
    gap = math.exp(-design.per_game_mdd(cv, seeds))
    rng = np.random.default_rng(1)
    behind = 0
    for k in range(studies):
        ours, theirs = lognormal(rng, 100 * gap, cv, seeds), lognormal(rng, 100.0, cv, seeds)
        _, lo, hi = pal.ratio_interval(ours, theirs, resamples=2000, seed=k)
        behind += pal.verdict(lo, hi) == "behind"
    # 80% +- 3 binomial SDs (2%); a percentile bootstrap of 10 seeds is a little narrower than t, so a little more
    assert 0.72 <= behind / studies <= 0.92


def test_pooled_iqm_mdd_gives_the_rules_pooled_interval_80_percent_power():
    """The same for the pooled human-normalised IQM at unequal game levels; and no gap: rarely behind."""
    levels, cv, seeds, studies = [0.6, 0.2, 0.45, 0.05, 0.1], 0.25, 8, 250
    mdd = design.pooled_iqm_mdd(levels, cv, seeds)
    assert mdd > design.pooled_equal_mdd(cv, seeds)  # the IQM drops the outer games' runs: it detects less
    rng = np.random.default_rng(2)
    for scale, low, high in ((math.exp(-mdd), 0.70, 0.92), (1.0, 0.0, 0.07)):
        behind = 0
        for k in range(studies):
            ours = {g: lognormal(rng, h * scale, cv, seeds) for g, h in enumerate(levels)}
            theirs = {g: lognormal(rng, h, cv, seeds) for g, h in enumerate(levels)}
            r = pal.pooled_iqm(ours, theirs, resamples=1000, seed=k)
            behind += pal.verdict(r["ratio_lo"], r["ratio_hi"]) == "behind"
        assert low <= behind / studies <= high, (scale, behind / studies)


# ---------------------------------------------------------------------------------------------------------
# The rule
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lo, hi, words", [(0.80, 0.95, "behind"), (0.95, 0.99, "behind"), (1.01, 1.3, "ahead"),
                                           (0.92, 1.08, "at parity"), (0.9, 1.1, "at parity"),
                                           (0.85, 1.05, "not separated"), (0.95, 1.12, "not separated")])
def test_verdict_words(lo, hi, words):
    assert pal.verdict(lo, hi) == words


def test_ratio_interval_by_hand():
    point, lo, hi = pal.ratio_interval([9.0, 9.0, 9.0], [10.0, 10.0, 10.0])
    assert (point, lo, hi) == pytest.approx((0.9, 0.9, 0.9))
    # every resampled ratio is a mean of 2 draws from {1, 3} over a mean of 2 draws from {2, 2}: in {0.5, 1, 1.5}
    point, lo, hi = pal.ratio_interval([1.0, 3.0], [2.0, 2.0])
    assert point == 1.0 and (lo, hi) == (0.5, 1.5)


LEVELS = {"Breakout-v5": 20.0, "SpaceInvaders-v5": 450.0, "KungFuMaster-v5": 10000.0}


@pytest.mark.parametrize("ratio, spread, words", [(0.7, 0.05, "behind"), (1.0, 0.01, "at parity"),
                                                  (1.0, 0.4, "not separated")])
def test_study_verdicts_on_synthetic_finals(ratio, spread, words):
    """Each game's seeds spread by +-spread around its level (5 seeds), ours at `ratio` of CleanRL's."""
    shape = np.linspace(1 - spread, 1 + spread, 5)
    finals = {g: {"CleanRL": dict(enumerate(level * shape)), "ours": dict(enumerate(level * ratio * shape[::-1]))}
              for g, level in LEVELS.items()}
    lines = pal.study_verdicts(finals, ["ours"])
    assert len(lines) == 4 and lines[-1].startswith("ours, pooled human-normalised IQM")
    assert all(f"-> {words} " in line for line in lines), lines
    if words == "not separated":  # the half-width is stated: what the design could tell
        assert all("half-width" in line and "smallest gap this design could tell" in line for line in lines)


def test_pooled_iqm_agrees_with_rliable():
    from rliable import library as rly
    rng = np.random.default_rng(4)
    ours = {g: rng.uniform(0.1, 1.0, 6) for g in range(3)}
    theirs = {g: rng.uniform(0.1, 1.2, 6) for g in range(3)}
    r = pal.pooled_iqm(ours, theirs, resamples=20_000)
    from scipy.stats import trim_mean
    matrix = np.stack([ours[g] for g in range(3)] + [theirs[g] for g in range(3)], axis=1)  # runs x (game, arm)

    def ratio(m):  # rliable resamples each column's runs on its own: stratified by game and arm
        return np.array([trim_mean(m[:, :3].ravel(), 0.25) / trim_mean(m[:, 3:].ravel(), 0.25)])

    points, cis = rly.get_interval_estimates({"x": matrix}, ratio, reps=5000,
                                             random_state=np.random.RandomState(0))
    assert r["ratio"] == pytest.approx(points["x"][0])
    width = cis["x"][1, 0] - cis["x"][0, 0]
    assert r["ratio_lo"] == pytest.approx(cis["x"][0, 0], abs=0.05 * width)
    assert r["ratio_hi"] == pytest.approx(cis["x"][1, 0], abs=0.05 * width)


# ---------------------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------------------
def fake_checkout(tmp_path):
    (tmp_path / "cleanrl" / "cleanrl").mkdir(parents=True, exist_ok=True)
    (tmp_path / "cleanrl" / "cleanrl" / "ppo_atari_envpool.py").write_text("")
    return str(tmp_path / "cleanrl")


def dry_run(tmp_path, *argv):
    out = subprocess.run([sys.executable, SCRIPT, "--cleanrl", fake_checkout(tmp_path), "--out",
                          str(tmp_path / "study"), "--dry-run", *argv], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_dry_run_lists_every_run_of_a_tiny_study_seed_by_seed(tmp_path):
    from cleanrl_scaling.ppo_atari_envpool import Args
    lines = dry_run(tmp_path, "--study", "--env-ids", "Breakout-v5", "Qbert-v5", "--seeds", "11", "12",
                    "--total", "10240")
    assert len(lines) == 2 * 2 * 3 and not (tmp_path / "study").exists()  # printed, nothing written
    seeds = [int(line.split("--seed ")[1].split()[0]) for line in lines]
    assert seeds == sorted(seeds)  # a stopped study has whole seeds
    for line in lines:
        game = line.split("--env-id ")[1].split()[0]
        assert f"study/{game}/" in line
        if "cleanrl_ppo_atari_envpool.py" in line:  # CleanRL's: started in the game's folder, on the CPU
            assert line.startswith(f"cd {tmp_path}/study/{game} && ") and line.endswith("--no-cuda > " + str(
                tmp_path / "study" / game / f"cleanrl_s{line.split('--seed ')[1].split()[0]}.log") + " 2>&1")
            continue
        argv = line.split(" >> ")[0].split()[3:]  # after OMP_NUM_THREADS=1, python, the script
        parsed = tyro.cli(Args, args=argv)
        assert parsed.save_model and not parsed.cuda and parsed.total_timesteps == 10240
        assert parsed.env_id == game and parsed.exp_name in ("ppo_atari_envpool", "ppo_atari_envpool_compat")
    # --cuda: both programs on the GPU
    cuda = dry_run(tmp_path, "--study", "--env-ids", "Breakout-v5", "--seeds", "11", "--cuda")
    assert len(cuda) == 3 and all("--cuda" in line and "--no-cuda" not in line for line in cuda)


def test_study_defaults_and_finished_runs_are_skipped(tmp_path):
    lines = dry_run(tmp_path, "--study")
    assert len(lines) == 5 * 10 * 3
    assert {line.split("--env-id ")[1].split()[0] for line in lines} == set(pal.STUDY_GAMES)
    assert {int(line.split("--seed ")[1].split()[0]) for line in lines} == set(range(11, 21))
    # a finished CleanRL run (all its iterations printed) and a finished run of ours are not run again
    game = tmp_path / "study" / "Breakout-v5"
    game.mkdir(parents=True)
    (game / "cleanrl_s11.log").write_text("SPS: 1\n" * (1_000_000 // 1024))
    run = game / "ours" / "Breakout-v5__ppo_atari_envpool__11__1"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "finished"}))
    left = dry_run(tmp_path, "--study")
    assert len(left) == len(lines) - 2
    assert not [line for line in left if "Breakout-v5 --seed 11 " in line and ("cleanrl_ppo" in line or
                                                                              "--exp-name ppo_atari_envpool " in line)]


def test_single_game_commands_keep_their_flags(tmp_path):
    lines = dry_run(tmp_path)
    assert len(lines) == 9 and all("--env-id Breakout-v5" in line for line in lines)
    assert not [line for line in lines if "--save-model" in line]  # as the pilot ran
    assert all(f"{tmp_path}/study/" in line for line in lines)


def job(tmp_path, name, seconds):
    code = f"import time; print('start', time.time(), flush=True); time.sleep({seconds}); print('end', time.time())"
    return lc.Job(0, [sys.executable, "-c", code], str(tmp_path / f"{name}.log"), "w")


def test_run_jobs_keeps_at_most_parallel_running(tmp_path):
    codes = lc.run_jobs([job(tmp_path, f"j{i}", 0.6) for i in range(4)], parallel=2)
    assert codes == [0, 0, 0, 0]
    spans = [tuple(float(line.split()[1]) for line in (tmp_path / f"j{i}.log").read_text().splitlines())
             for i in range(4)]
    for t in [s for s, _ in spans]:
        assert sum(s <= t < e for s, e in spans) <= 2  # at any start, at most two running (itself included)
    assert spans[2][0] >= min(e for _, e in spans[:2]) - 0.05  # the third waited for one of the first two


def test_a_stopped_runner_passes_one_sigterm_and_starts_no_more(tmp_path):
    child = ("import signal, sys, time\n"
             "def stop(*_):\n    print('SIGTERM', flush=True); sys.exit(0)\n"
             "signal.signal(signal.SIGTERM, stop); print('ready', flush=True); time.sleep(30)\n")
    runner = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {os.path.join(REPO, 'benchmark')!r})
        import _learning_comparison as lc
        jobs = [lc.Job(0, [sys.executable, "-c", {child!r}], {str(tmp_path / 'a.log')!r}, "w"),
                lc.Job(1, [sys.executable, "-c", "print('started')"], {str(tmp_path / 'b.log')!r}, "w")]
        lc.run_jobs(jobs, parallel=1)
    """)
    proc = subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while "ready" not in ((tmp_path / "a.log").read_text() if (tmp_path / "a.log").exists() else ""):
        assert time.time() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "1 not started" in out
    assert (tmp_path / "a.log").read_text().split() == ["ready", "SIGTERM"]  # one signal: ours checkpoint on it
    assert not (tmp_path / "b.log").exists()


# ---------------------------------------------------------------------------------------------------------
# The summary from run directories
# ---------------------------------------------------------------------------------------------------------
def write_ours(game_dir, game, stem, seed, final, total, evaluation=None, lengths=100):
    run = game_dir / "ours" / f"{game}__{stem}__{seed}__1"
    run.mkdir(parents=True)
    rows = [{"global_step": step, "charts/episodic_return": r, "charts/episodic_length": lengths}
            for step, r in ((total // 2, 0.0), (total - 100, final - 1), (total, final + 1))]  # two in the window
    if evaluation is not None:
        rows += [{"global_step": total, "eval/episodic_return": evaluation + d} for d in (-1, 1)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps({"status": "finished"}))


def write_cleanrl(game_dir, seed, final, total):
    game_dir.mkdir(parents=True, exist_ok=True)
    (game_dir / f"cleanrl_s{seed}.log").write_text(
        f"global_step={total // 2}, episodic_return=0.0\nglobal_step={total - 100}, episodic_return={final - 1}\n"
        f"global_step={total}, episodic_return={final + 1}\n" + "SPS: 1\n" * (total // 1024))


def summary(tmp_path, *argv):
    return subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path), "--summary-only", "--total", "10240",
                           "--env-ids", "Breakout-v5", "SpaceInvaders-v5", *argv], capture_output=True, text=True)


def test_summary_tables_evaluation_cut_games_and_the_rule(tmp_path):
    total = 10_240
    for game, level in (("Breakout-v5", 20.0), ("SpaceInvaders-v5", 450.0)):
        for seed in (1, 2, 3):
            final = level * (1 + 0.01 * seed)
            write_cleanrl(tmp_path / game, seed, final, total)
            write_ours(tmp_path / game, game, "ppo_atari_envpool", seed, final * 0.6, total, evaluation=final * 2,
                       lengths=27_000 if (game, seed) == ("Breakout-v5", 1) else 500)
    out = summary(tmp_path, "--arms", "default")
    assert out.returncode == 0, out.stderr
    breakout = out.stdout.split("SpaceInvaders-v5, 10240 steps")[0]
    row = next(line for line in breakout.splitlines() if line.startswith("ours s2"))
    assert row.split()[3] == "12.24" and row.split()[8] == "40.80"  # training final 20.4 x 0.6; evaluation 2 x 20.4
    assert "ours: 3 of 9 games cut at the 27000-step limit" in breakout  # seed 1's three games, at 27,000 steps
    verdicts = [line for line in out.stdout.splitlines() if line.startswith("ours, ")]
    assert len(verdicts) == 3 and all("-> behind" in line for line in verdicts)
    assert "ratio 0.600" in verdicts[0] and "pooled human-normalised IQM" in verdicts[2]
    # stage B's seed count from these runs' own seed variance: every arm's spread, not the gap between the arms
    finals = {(g, arm): [level * (1 + 0.01 * s) * scale for s in (1, 2, 3)]
              for g, level in (("Breakout-v5", 20.0), ("SpaceInvaders-v5", 450.0)) for arm, scale in
              (("CleanRL", 1.0), ("ours", 0.6))}
    cv, dof = design.pooled_relative_sd(finals)
    assert f"relative SD {cv:.3f} ({dof} degrees of freedom)" in out.stdout and dof == 8
    # one CleanRL seed missing: a table, no verdict
    os.remove(tmp_path / "SpaceInvaders-v5" / "cleanrl_s3.log")
    out = summary(tmp_path, "--arms", "default")
    assert "no verdict yet" in out.stdout and "-> " not in out.stdout


# ---------------------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, needle", [(["--parallel", "0"], "--parallel 0"),
                                          (["--env-ids", "Pong-v5"], "--env-ids Pong-v5: no human and random"),
                                          (["--env-ids", "Qbert-v5", "Qbert-v5"], "each once"),
                                          (["--study", "--arms", "sampler"], "--arms sampler: unknown"),
                                          (["--study", "--cleanrl", "/nonexistent"], "not a CleanRL checkout")])
def test_bad_options_exit_2_with_one_line(tmp_path, argv, needle):
    out = subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path / "o"), *argv], capture_output=True, text=True)
    assert out.returncode == 2 and needle in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, needle", [(["--cv", "-0.1"], "--cv -0.1"), (["--seeds", "1", "5"], "--seeds 1 5")])
def test_design_bad_options_exit_2_with_one_line(argv, needle):
    out = subprocess.run([sys.executable, DESIGN, *argv], capture_output=True, text=True)
    assert out.returncode == 2 and needle in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
