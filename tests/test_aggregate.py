"""cleanrl_scaling/utils/aggregate.py on synthetic runs with known answers, and its statistics against hand values
and rliable."""
import csv
import json
import math
import os

import numpy as np
import pytest
from scipy import stats

from cleanrl_scaling.utils import aggregate, atari_scores


def write_run(root, env_id, exp_name, seed, rows, stamp=1000, status="finished", **args):
    """A SPEC §4 run directory with metrics.jsonl rows [(global_step, {tag: value})]."""
    while (root / f"{env_id}__{exp_name}__{seed}__{stamp}").exists():  # other flags, same second
        stamp += 1
    run = root / f"{env_id}__{exp_name}__{seed}__{stamp}"
    run.mkdir(parents=True)
    config = {"args": {"exp_name": exp_name, "seed": seed, "env_id": env_id, **args}, "script": exp_name}
    (run / "config.json").write_text(json.dumps(config))
    lines = [json.dumps({"global_step": step, "iteration": i + 1, "wall_time": 100.0 + i, **tags})
             for i, (step, tags) in enumerate(rows)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if status:
        (run / "summary.json").write_text(json.dumps({"status": status, "global_step": rows[-1][0]}))
    return run


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------------------------------------------
# Statistics: hand values and rliable
# ---------------------------------------------------------------------------------------------------------
def test_iqm_hand_values():
    assert aggregate.iqm(np.arange(1, 9)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert aggregate.iqm([1, 2, 3, 4, 100]) == pytest.approx(3.0)  # floor(5/4) = 1 cut at each end
    assert aggregate.iqm([[8, 1], [7, 2], [6, 3], [5, 4]]) == pytest.approx(4.5)  # pooled over runs and tasks
    x = np.random.default_rng(1).normal(size=(7, 3))
    assert aggregate.iqm(x) == pytest.approx(stats.trim_mean(x, 0.25, axis=None))


def test_mean_ci_hand_values():
    mean, lo, hi = aggregate.mean_ci(np.array([[1.0], [2.0], [3.0], [4.0]]))
    half = 3.182446305284263 * math.sqrt(5 / 3) / 2  # t_{0.975, 3} * s / sqrt(4), s^2 = 5/3
    assert mean[0] == 2.5 and lo[0] == pytest.approx(2.5 - half) and hi[0] == pytest.approx(2.5 + half)
    mean, lo, hi = aggregate.mean_ci(np.array([[1.0], [3.0]]), band="std")
    assert (mean[0], lo[0], hi[0]) == pytest.approx((2.0, 2.0 - math.sqrt(2), 2.0 + math.sqrt(2)))
    mean, lo, hi = aggregate.mean_ci(np.array([[1.0, 5.0], [3.0, 4.0], [2.0, 9.0]]), band="minmax")
    assert mean.tolist() == [2.0, 6.0] and lo.tolist() == [1.0, 4.0] and hi.tolist() == [3.0, 9.0]
    mean, lo, hi = aggregate.mean_ci(np.array([[1.0]]))
    assert mean[0] == 1.0 and np.isnan(lo[0])


def test_compact_tick_labels():
    from cleanrl_scaling.utils import plots
    assert [plots.compact_number(v) for v in (0, 0.5, 999, 1000, 800000, 1.5e6, 25e6, 2e9, -40000)] == \
        ["0", "0.5", "999", "1k", "800k", "1.5M", "25M", "2G", "-40k"]


def test_run_stats():
    x, y = np.arange(11.0), np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10.0])
    assert aggregate.run_stat(x, y, "final", 0.2) == pytest.approx(9.0)  # x >= 8: 8, 9, 10
    assert (aggregate.run_stat(x, y, "max"), aggregate.run_stat(x, y, "last"), aggregate.run_stat(x, y, "mean")) == \
        (10.0, 10.0, 5.0)


def test_bootstrap_of_constant_tasks_is_degenerate():
    """Stratified: runs are resampled within their task only, so tasks without spread give a zero-width CI."""
    out = aggregate.stratified_bootstrap([np.full(3, 1.0), np.full(5, 2.0), np.full(4, 7.0)], ("iqm", "mean", "median"),
                                         reps=200)
    assert out["iqm"]["point"] == pytest.approx(17 / 6)  # pooled 1,1,1,2,2,2,2,2,7,7,7,7: cut 3 each end -> 2,2,2,2,2,7
    assert out["mean"]["point"] == pytest.approx(10 / 3) and out["median"]["point"] == pytest.approx(2.0)
    for name in out:
        assert out[name]["lo"] == pytest.approx(out[name]["point"]) == out[name]["hi"]


def test_iqm_and_cis_match_rliable():
    from rliable import library as rly
    from rliable import metrics

    rng = np.random.default_rng(0)
    scores = rng.gamma(2.0, 1.0, size=(10, 5)) * np.array([0.5, 1, 1.5, 2, 3])  # runs x tasks
    np.random.seed(0)  # rliable's StratifiedBootstrap draws from numpy's global generator
    points, cis = rly.get_interval_estimates(
        {"a": scores}, lambda s: np.array([metrics.aggregate_iqm(s), metrics.aggregate_median(s),
                                           metrics.aggregate_mean(s)]), reps=10000)
    ours = aggregate.stratified_bootstrap([scores[:, k] for k in range(5)], ("iqm", "median", "mean"), reps=10000)
    for i, name in enumerate(("iqm", "median", "mean")):
        assert ours[name]["point"] == pytest.approx(points["a"][i], rel=1e-12)  # the same estimator exactly
        width = cis["a"][1, i] - cis["a"][0, i]
        # two independent 10000-replicate Monte Carlo estimates of the same percentiles: their spread is ~1% of
        # the width here; 5% leaves room without hiding a wrong resampling scheme (which moves them by >20%)
        assert ours[name]["lo"] == pytest.approx(cis["a"][0, i], abs=0.05 * width)
        assert ours[name]["hi"] == pytest.approx(cis["a"][1, i], abs=0.05 * width)


def test_human_normalised_scores():
    assert atari_scores.human_normalized("Amidar-v5", 1719.5) == pytest.approx(1.0)
    assert atari_scores.human_normalized("ALE/DoubleDunk-v5", -18.6) == pytest.approx(0.0)
    assert atari_scores.human_normalized("KungFuMasterNoFrameskip-v4", (258.5 + 22736.3) / 2) == pytest.approx(0.5)
    assert set(atari_scores.REFERENCE_SCORES) == set(atari_scores.ATARI_10) and len(atari_scores.ATARI_10) == 10
    with pytest.raises(KeyError):
        atari_scores.game_name("Pong-v5")


# ---------------------------------------------------------------------------------------------------------
# Commands end to end on synthetic runs
# ---------------------------------------------------------------------------------------------------------
def test_curves_mean_and_ci_over_seeds(tmp_path):
    """y = lr * step + offset with offsets -1, 0, +1 over 3 seeds: mean lr * step, CI half-width t_{0.975,2}/sqrt(3)."""
    runs = tmp_path / "runs"
    for lr in (0.1, 0.2):
        for seed, offset in zip((1, 2, 3), (-1.0, 0.0, 1.0)):
            write_run(runs, "Toy-v0", "toy", seed, [(s, {"charts/r": lr * s + offset}) for s in (0, 10, 20)],
                      learning_rate=lr)
    out = tmp_path / "fig" / "curves"
    assert aggregate.main(["curves", str(runs), "--metric", "charts/r", "--group-by", "learning_rate",
                           "--out", str(out)]) == 0
    assert os.path.getsize(f"{out}.png") > 0 and os.path.getsize(f"{out}.pdf") > 0
    rows = read_csv(f"{out}.csv")
    assert len(rows) == 6 and {r["group"] for r in rows} == {"learning_rate=0.1", "learning_rate=0.2"}
    half = stats.t.ppf(0.975, 2) / math.sqrt(3)
    for r in rows:
        lr, x = float(r["group"].split("=")[1]), float(r["x"])
        assert float(r["mean"]) == pytest.approx(lr * x) and int(r["n"]) == 3
        assert float(r["hi"]) - float(r["mean"]) == pytest.approx(half)


def test_curves_interpolate_irregular_logging_and_pct(tmp_path):
    """Seeds logging at different steps are interpolated on the x range they all cover; pct = % of the run."""
    runs = tmp_path / "runs"
    write_run(runs, "Toy-v0", "toy", 1, [(s, {"charts/r": 2.0 * s}) for s in (0, 30, 100)])
    write_run(runs, "Toy-v0", "toy", 2, [(s, {"charts/r": 2.0 * s + 4}) for s in (10, 50, 90, 200)])
    out = tmp_path / "c"
    aggregate.main(["curves", str(runs), "--metric", "charts/r", "--points", "5", "--out", str(out)])
    rows = read_csv(f"{out}.csv")
    assert [float(r["x"]) for r in rows] == [10, 32.5, 55, 77.5, 100]
    assert all(float(r["mean"]) == pytest.approx(2 * float(r["x"]) + 2) for r in rows)
    aggregate.main(["curves", str(runs), "--metric", "charts/r", "--x", "pct", "--points", "3", "--out", str(out)])
    rows = read_csv(f"{out}.csv")  # seed 1 ends at step 100, seed 2 at 200: pct p is step p and step 2p
    assert [float(r["x"]) for r in rows] == pytest.approx([5, 52.5, 100])
    assert [float(r["mean"]) for r in rows] == pytest.approx([(2 * p + 4 * p + 4) / 2 for p in (5, 52.5, 100)])


def test_iqm_on_atari_runs_with_known_answer(tmp_path):
    """Final returns equal to the human score on every game -> human-normalised IQM exactly 1 with a zero-width CI;
    a second configuration at (random + human) / 2 -> 0.5."""
    runs = tmp_path / "runs"
    for game in ("Amidar", "Qbert", "Phoenix"):
        random_score, human = atari_scores.REFERENCE_SCORES[game]
        for seed in (1, 2, 3):
            for name, score in (("ppo", human), ("half", (random_score + human) / 2)):
                rows = [(s, {"charts/episodic_return": random_score if s < 50 else score}) for s in range(0, 101, 10)]
                write_run(runs, f"{game}-v5", name, seed, rows)
    out = tmp_path / "iqm"
    assert aggregate.main(["iqm", str(runs), "--metric", "charts/episodic_return", "--normalize", "atari-human",
                           "--reps", "300", "--out", str(out)]) == 0
    got = {(r["group"], r["aggregate"]): r for r in read_csv(f"{out}.csv")}
    for (group, name), r in got.items():
        expected = 1.0 if group == "ppo" else 0.5
        assert float(r["point"]) == pytest.approx(expected) and float(r["lo"]) == pytest.approx(expected)
        assert int(r["tasks"]) == 3 and int(r["runs"]) == 9
    assert aggregate.main(["iqm", str(runs), "--metric", "charts/episodic_return", "--normalize", "atari-human",
                           "--over-time", "--points", "11", "--reps", "100", "--filter", "exp_name=ppo",
                           "--out", str(out)]) == 0
    rows = read_csv(f"{out}.csv")
    assert [float(r["iqm"]) for r in rows] == pytest.approx([0.0] * 5 + [1.0] * 6)


def test_scatter_and_heatmap(tmp_path):
    runs = tmp_path / "runs"
    for com in (1, 4):
        for eps in (0.1, 0.2):
            for seed in (1, 2):
                value = com * 10 + eps * 100 + seed  # final solve rate
                rows = [(s, {"diagnostics/ddr": 1000.0 * com * (1 + s), "charts/solve_rate": value * s / 2})
                        for s in (0, 1, 2)]
                write_run(runs, "Loco-v0", "ewma", seed, rows, ewma_com=com, clip_coef=eps)
    out = tmp_path / "h"
    assert aggregate.main(["heatmap", str(runs), "--rows", "ewma_com", "--cols", "clip_coef", "--metric",
                           "charts/solve_rate", "--stat", "last", "--out", str(out)]) == 0
    cells = {(r["ewma_com"], r["clip_coef"]): float(r["mean"]) for r in read_csv(f"{out}.csv")}
    assert cells == {(c, e): pytest.approx(float(c) * 10 + float(e) * 100 + 1.5)
                     for c in ("1", "4") for e in ("0.1", "0.2")}
    assert aggregate.main(["scatter", str(runs), "--x-metric", "diagnostics/ddr", "--y-metric", "charts/solve_rate",
                           "--group-by", "ewma_com", "--logx", "--out", str(out)]) == 0
    rows = read_csv(f"{out}.csv")
    assert len(rows) == 8
    for com in (1, 4):
        mine = [r for r in rows if r["group"] == f"ewma_com={com}"]
        assert all(float(r["mean(diagnostics/ddr)"]) == pytest.approx(2000.0 * com) for r in mine)  # 1000 com (1..3)
        assert sorted(float(r["max(charts/solve_rate)"]) for r in mine) == pytest.approx(
            sorted(com * 10 + eps * 100 + seed for eps in (0.1, 0.2) for seed in (1, 2)))


def test_newest_duplicate_wins_and_unfinished_filter(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, "Toy-v0", "toy", 1, [(0, {"charts/r": 1.0})], stamp=1000)
    write_run(runs, "Toy-v0", "toy", 1, [(0, {"charts/r": 5.0})], stamp=2000)
    write_run(runs, "Toy-v0", "toy", 2, [(0, {"charts/r": 7.0})], stamp=2000, status="interrupted")
    out = tmp_path / "d"
    aggregate.main(["curves", str(runs), "--metric", "charts/r", "--out", str(out)])
    assert float(read_csv(f"{out}.csv")[0]["mean"]) == pytest.approx(6.0)  # newest seed 1 (5) and seed 2 (7)
    assert "not finished" in capsys.readouterr().err
    aggregate.main(["curves", str(runs), "--metric", "charts/r", "--only-finished", "--out", str(out)])
    assert float(read_csv(f"{out}.csv")[0]["mean"]) == pytest.approx(5.0)


def test_usage_errors(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, "Toy-v0", "toy", 1, [(0, {"charts/r": 1.0})])
    assert aggregate.main(["curves", str(runs), "--metric", "charts/nope", "--out", str(tmp_path / "x")]) == 2
    assert aggregate.main(["curves", str(tmp_path / "none"), "--metric", "charts/r"]) == 2
    assert aggregate.main(["iqm", str(runs), "--metric", "charts/r", "--normalize", "atari-human",
                           "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "charts/r" in err and "not found" in err and "Toy-v0" in err


# ---------------------------------------------------------------------------------------------------------
# Issue 17: per-step means, default bootstrap size, panels, sweeps with a tuned-away key, KL profiles
# ---------------------------------------------------------------------------------------------------------
def test_curves_average_the_episodes_that_end_in_the_same_step(tmp_path):
    """With N >= 8 envs several episodes end in one logged step: the curve goes through their mean, not through one
    of them (the values 0/10 at step 10 and 20/40 at step 20: means 5 and 30); --smooth 2 then averages two steps."""
    runs = tmp_path / "runs"
    rows = [(10, {"charts/r": 0.0}), (10, {"charts/r": 10.0}), (20, {"charts/r": 20.0}), (20, {"charts/r": 40.0})]
    write_run(runs, "Toy-v0", "toy", 1, rows)
    write_run(runs, "Toy-v0", "toy", 2, [(s, {"charts/r": r["charts/r"] + 2.0}) for s, r in rows])
    out = tmp_path / "c"
    assert aggregate.main(["curves", str(runs), "--metric", "charts/r", "--points", "3", "--out", str(out)]) == 0
    got = [(float(r["x"]), float(r["mean"])) for r in read_csv(f"{out}.csv")]
    assert got == [(10.0, pytest.approx(6.0)), (20.0, pytest.approx(31.0))]  # seeds' means (5, 7) and (30, 32)
    assert aggregate.main(["curves", str(runs), "--metric", "charts/r", "--smooth", "2", "--out", str(out)]) == 0
    assert [float(r["mean"]) for r in read_csv(f"{out}.csv")] == pytest.approx([6.0, (6.0 + 31.0) / 2])


def test_default_bootstrap_endpoints_are_stable_across_bootstrap_seeds():
    """At the default number of replicates (rliable's 50,000) the CI endpoints of six bootstrap seeds agree within
    1.5% of the CI width (2,000 replicates: about 3% on these scores)."""
    reps = aggregate.parse_args(["iqm", "runs", "--metric", "m"]).reps
    rng = np.random.default_rng(0)
    scores = rng.gamma(2.0, 1.0, size=(5, 3)) * np.array([0.5, 1, 2])
    out = [aggregate.stratified_bootstrap([scores[:, k] for k in range(3)], ("iqm",), reps=reps, seed=s)["iqm"]
           for s in range(6)]
    width = np.mean([o["hi"] - o["lo"] for o in out])
    for end in ("lo", "hi"):
        assert np.ptp([o[end] for o in out]) < 0.015 * width


def test_curves_one_panel_per_value_of_panel_by(tmp_path):
    runs = tmp_path / "runs"
    for n in (16, 64):
        for com in (2, 8):
            write_run(runs, "Loco-v0", "ewma", 1, [(s, {"charts/r": n + com + s}) for s in (0, 1)], num_envs=n,
                      ewma_com=com)
    out = tmp_path / "p"
    assert aggregate.main(["curves", str(runs), "--metric", "charts/r", "--panel-by", "num_envs", "--group-by",
                           "ewma_com", "--x", "iteration", "--out", str(out)]) == 0
    rows = read_csv(f"{out}.csv")
    assert {(r["num_envs"], r["group"]) for r in rows} == {(n, f"ewma_com={c}") for n in ("16", "64") for c in "28"}
    assert all(float(r["mean"]) == pytest.approx(int(r["num_envs"]) + int(r["group"][-1]) + float(r["x"]) - 1)
               for r in rows)


def test_a_run_without_env_id_is_named_by_its_run_name(tmp_path):
    """sfl_kinetix_jax.py has no --env-id: its task (Kinetix-s) is the first field of the run name."""
    runs = tmp_path / "runs"
    for seed in (1, 2):
        run = write_run(runs, "Kinetix-s", "sfl", seed, [(s, {"charts/solve_rate_random": 0.1 * s}) for s in (0, 1)])
        config = json.loads((run / "config.json").read_text())
        del config["args"]["env_id"]
        (run / "config.json").write_text(json.dumps(config))
    out = tmp_path / "k"
    assert aggregate.main(["curves", str(runs), "--metric", "charts/solve_rate_random", "--out", str(out)]) == 0
    assert {r["env_id"] for r in read_csv(f"{out}.csv")} == {"Kinetix-s"}


def test_sweep_shows_the_best_of_the_tuned_away_key(tmp_path):
    """B26 Fig. 4: final score against lr, one line per COM, the better of anneal on/off at each point."""
    runs = tmp_path / "runs"
    for com in (2, 8):
        for lr in (0.001, 0.01):
            for anneal in (True, False):
                for seed in (1, 2):
                    final = com + 100 * lr + (0.5 if anneal == (lr == 0.01) else 0.0) + seed
                    write_run(runs, "Loco-v0", "ewma", seed, [(0, {"charts/solve_rate": 0.0}),
                                                               (10, {"charts/solve_rate": final})],
                              ewma_com=com, learning_rate=lr, anneal_lr=anneal)
    out = tmp_path / "s"
    assert aggregate.main(["sweep", str(runs), "--metric", "charts/solve_rate", "--x-key", "learning_rate",
                           "--group-by", "ewma_com", "--best-over", "anneal_lr", "--logx", "--out", str(out)]) == 0
    rows = {(r["group"], float(r["learning_rate"])): r for r in read_csv(f"{out}.csv")}
    assert len(rows) == 4
    half = stats.t.ppf(0.975, 1) * math.sqrt(0.5) / math.sqrt(2)  # seeds 1 and 2: sd sqrt(1/2)
    for (group, lr), r in rows.items():
        com = int(group.split("=")[1])
        assert float(r["mean"]) == pytest.approx(com + 100 * lr + 0.5 + 1.5)
        assert r["anneal_lr"] == str(lr == 0.01) and int(r["n"]) == 2
        assert float(r["hi"]) - float(r["mean"]) == pytest.approx(half)
    assert aggregate.main(["sweep", str(runs), "--metric", "charts/solve_rate", "--x-key", "ewma_com",
                           "--group-by", "ewma_com", "--out", str(out)]) == 2



def test_sweep_draws_one_panel_per_task_and_never_pools_their_returns(tmp_path):
    """Issue 15: Ant returns in the thousands and Humanoid's in the hundreds are not averaged into one line; each
    task has its own panel and its own CSV rows (hand values: the last-10% score is the last logged value here)."""
    runs = tmp_path / "runs"
    for env_id, scale in (("Ant-v4", 1000.0), ("Humanoid-v4", 100.0)):
        for n in (64, 256):
            for seed in (1, 2):
                write_run(runs, env_id, "mj", seed, [(0, {"charts/episodic_return": 0.0}),
                                                      (10, {"charts/episodic_return": scale * n / 64 + seed})],
                          num_envs=n)
    out = tmp_path / "s"
    assert aggregate.main(["sweep", str(runs), "--metric", "charts/episodic_return", "--x-key", "num_envs",
                           "--out", str(out)]) == 0
    rows = {(r["env_id"], int(r["num_envs"])): float(r["mean"]) for r in read_csv(f"{out}.csv")}
    assert rows == {("Ant-v4", 64): pytest.approx(1001.5), ("Ant-v4", 256): pytest.approx(4001.5),
                    ("Humanoid-v4", 64): pytest.approx(101.5), ("Humanoid-v4", 256): pytest.approx(401.5)}

def write_profile(run, rows):
    (run / "kl_profile.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_kl_profile_of_the_best_run_per_setting(tmp_path):
    """H25 Fig. 2: seq KL at x = 100 j / J (j = 1..J), ref KL at 100 j / J (j = 0..J-1), for the best run of each
    minibatch size, at the profiled update nearest to each --at % of training."""
    runs = tmp_path / "runs"
    for mb, steps in ((50, 4), (500, 2)):
        for seed, final in ((1, 10.0), (2, 20.0)):
            run = write_run(runs, "Ant-v4", "ppo", seed, [(s, {"charts/episodic_return": final * s / 1000})
                                                          for s in (100, 500, 1000)], minibatch_size=mb)
            write_profile(run, [{"global_step": g, "iteration": i, "seq_kl": [seed * g * (j + 1) for j in range(steps)],
                                 "ref_kl": [seed * g / (j + 1) for j in range(steps)]}
                                for i, g in enumerate((100, 500, 1000))])
    out = tmp_path / "k"
    assert aggregate.main(["kl-profile", str(runs), "--group-by", "minibatch_size", "--at", "45", "100",
                           "--out", str(out)]) == 0
    rows = read_csv(f"{out}.csv")
    assert {r["run"].split("__")[2] for r in rows} == {"2"}  # seed 2 has the higher final return
    seq50 = [(float(r["pct_of_update"]), float(r["kl"])) for r in rows
             if r["group"] == "minibatch_size=50" and r["kind"] == "seq" and r["global_step"] == "500"]
    assert seq50 == [(25.0, 1000.0), (50.0, 2000.0), (75.0, 3000.0), (100.0, 4000.0)]
    ref500 = [(float(r["pct_of_update"]), float(r["kl"])) for r in rows
              if r["group"] == "minibatch_size=500" and r["kind"] == "ref" and r["global_step"] == "1000"]
    assert ref500 == [(0.0, 2000.0), (50.0, 1000.0)]
    assert {r["pct_of_training"] for r in rows} == {"50", "100"}
    assert aggregate.main(["kl-profile", str(tmp_path / "runs"), "--filter", "minibatch_size=7",
                           "--out", str(out)]) == 2
