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
    """A run directory (docs/run_directory.md) with metrics.jsonl rows [(global_step, {tag: value})]."""
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
    mean, lo, hi = aggregate.mean_ci(np.array([[1.0], [2.0], [3.0], [4.0], [5.0]]))
    half = 2.7764451051977987 * math.sqrt(2.5) / math.sqrt(5)  # t_{0.975, 4} * s / sqrt(5), s^2 = 10/4
    assert mean[0] == 3.0 and lo[0] == pytest.approx(3.0 - half) and hi[0] == pytest.approx(3.0 + half)
    for band in ("auto", "ci95"):  # 4 seeds: never a t-interval (docs/pipeline.md#bands), the seeds' range instead
        mean, lo, hi = aggregate.mean_ci(np.array([[1.0], [2.0], [3.0], [4.0]]), band=band)
        assert (mean[0], lo[0], hi[0]) == (2.5, 1.0, 4.0)
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
    assert set(atari_scores.REFERENCE_SCORES) == set(atari_scores.ATARI_10) | {"Breakout", "SpaceInvaders"}
    assert len(atari_scores.ATARI_10) == 10
    assert atari_scores.human_normalized("Breakout-v5", 30.5) == pytest.approx(1.0)  # DQN Zoo's (random, human)
    assert atari_scores.human_normalized("SpaceInvaders-v5", 148.0) == pytest.approx(0.0)
    with pytest.raises(KeyError):
        atari_scores.game_name("Pong-v5")


# ---------------------------------------------------------------------------------------------------------
# Commands end to end on synthetic runs
# ---------------------------------------------------------------------------------------------------------
def test_curves_mean_and_band_over_seeds(tmp_path):
    """y = lr * step + offset with offsets -1, 0, +1 over 3 seeds: mean lr * step and, below 5 seeds, the seeds'
    range (+-1) whatever --band asks for a t-interval; with offsets -2..2 over 5 seeds, the t-interval
    t_{0.975,4} * sqrt(2.5) / sqrt(5)."""
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
    for r in rows:
        lr, x = float(r["group"].split("=")[1]), float(r["x"])
        assert float(r["mean"]) == pytest.approx(lr * x) and int(r["n"]) == 3 and r["band"] == "range"
        assert (float(r["lo"]), float(r["hi"])) == (pytest.approx(lr * x - 1), pytest.approx(lr * x + 1))
    assert aggregate.main(["curves", str(runs), "--metric", "charts/r", "--group-by", "learning-rate", "--band",
                           "ci95", "--out", str(out)]) == 0  # the launcher's spelling of the key groups the same
    again = read_csv(f"{out}.csv")
    assert [(r["group"], r["lo"], r["hi"], r["band"]) for r in again] == [(r["group"], r["lo"], r["hi"], "range")
                                                                          for r in rows]
    for seed, offset in zip((4, 5), (-2.0, 2.0)):
        write_run(runs, "Toy-v0", "toy", seed, [(s, {"charts/r": 0.1 * s + offset}) for s in (0, 10, 20)],
                  learning_rate=0.1)
    assert aggregate.main(["curves", str(runs), "--metric", "charts/r", "--group-by", "learning_rate",
                           "--out", str(out)]) == 0
    five = [r for r in read_csv(f"{out}.csv") if r["group"] == "learning_rate=0.1"]
    half = stats.t.ppf(0.975, 4) * math.sqrt(2.5) / math.sqrt(5)
    assert all(r["band"] == "ci95" and int(r["n"]) == 5 for r in five)
    assert [float(r["hi"]) - float(r["mean"]) for r in five] == pytest.approx([half] * 3)


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


def test_scatter_cut_at_budgets(tmp_path, capsys):
    """--budget-iterations: one dot per run and budget, both statistics from the rows at or before that update; a run
    shorter than a budget is left out of it (with a warning). Without the option: one dot per run, no budget column."""
    runs = tmp_path / "runs"
    long_run = write_run(runs, "Loco-v0", "ewma", 1, [(100 * (i + 1), {"diagnostics/ddr": d, "charts/solve_rate": s})
                                                      for i, (d, s) in enumerate([(10, 0.1), (20, 0.4), (30, 0.2),
                                                                                  (60, 0.3)])], ewma_com=1)
    short_run = write_run(runs, "Loco-v0", "ewma", 1, [(100, {"diagnostics/ddr": 100.0, "charts/solve_rate": 0.5}),
                                                       (200, {"diagnostics/ddr": 300.0, "charts/solve_rate": 0.1})],
                          ewma_com=4)
    out = tmp_path / "s"
    argv = ["scatter", str(runs), "--x-metric", "diagnostics/ddr", "--y-metric", "charts/solve_rate",
            "--group-by", "ewma_com", "--out", str(out)]
    assert aggregate.main(argv + ["--budget-iterations", "4,2"]) == 0
    got = {(r["group"], r["budget"]): (float(r["mean(diagnostics/ddr)"]), float(r["max(charts/solve_rate)"]))
           for r in read_csv(f"{out}.csv")}
    assert sorted(got) == [("ewma_com=1", "2"), ("ewma_com=1", "4"), ("ewma_com=4", "2")]  # 2-update run: not in 4
    assert got[("ewma_com=1", "2")] == pytest.approx((15.0, 0.4))  # updates 1-2: ddr 10, 20; solve .1, .4
    assert got[("ewma_com=1", "4")] == pytest.approx((30.0, 0.4))  # (10 + 20 + 30 + 60) / 4
    assert got[("ewma_com=4", "2")] == pytest.approx((200.0, 0.5))
    err = capsys.readouterr().err
    assert f"{short_run} has 2 updates, fewer than the budget 4" in err and str(long_run) not in err
    # "final" is the last --final-frac of the cut run: budget 2 = steps 100-200 (>= 100: .1, .4), budget 4 = >= 200
    assert aggregate.main(argv + ["--budget-iterations", "2,4", "--y-stat", "final", "--final-frac", "0.5"]) == 0
    finals = {r["budget"]: float(r["final(charts/solve_rate)"]) for r in read_csv(f"{out}.csv")
              if r["group"] == "ewma_com=1"}
    assert finals == pytest.approx({"2": 0.25, "4": 0.3})  # (.1 + .4) / 2 and (.4 + .2 + .3) / 3
    assert aggregate.main(argv) == 0
    rows = read_csv(f"{out}.csv")
    assert len(rows) == 2 and "budget" not in rows[0]
    assert sorted(float(r["mean(diagnostics/ddr)"]) for r in rows) == pytest.approx([30.0, 200.0])
    for bad in ("0,2", "2,x", ","):
        assert aggregate.main(argv + ["--budget-iterations", bad]) == 2
        assert "--budget-iterations" in capsys.readouterr().err


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
# Per-step means, default bootstrap size, panels, sweeps with a tuned-away key, KL profiles
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
                    write_run(runs, "Loco-v0", "ewma", seed, [(0, {"charts/score": 0.0}),
                                                               (10, {"charts/score": final})],
                              ewma_com=com, learning_rate=lr, anneal_lr=anneal)
    out = tmp_path / "s"
    assert aggregate.main(["sweep", str(runs), "--metric", "charts/score", "--x-key", "learning_rate",
                           "--group-by", "ewma_com", "--best-over", "anneal_lr", "--logx", "--out", str(out)]) == 0
    rows = {(r["group"], float(r["learning_rate"])): r for r in read_csv(f"{out}.csv")}
    assert len(rows) == 4
    half = 0.5  # seeds 1 and 2: the error bar is their range (docs/pipeline.md#bands: no t-interval from 2 seeds)
    for (group, lr), r in rows.items():
        com = int(group.split("=")[1])
        assert float(r["mean"]) == pytest.approx(com + 100 * lr + 0.5 + 1.5)
        assert r["anneal_lr"] == str(lr == 0.01) and int(r["n"]) == 2
        assert float(r["hi"]) - float(r["mean"]) == pytest.approx(half) and r["band"] == "range"
    assert aggregate.main(["sweep", str(runs), "--metric", "charts/score", "--x-key", "ewma_com",
                           "--group-by", "ewma_com", "--out", str(out)]) == 2



def test_sweep_draws_one_panel_per_task_and_never_pools_their_returns(tmp_path):
    """Ant returns in the thousands and Humanoid's in the hundreds are not averaged into one line; each
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


# ---------------------------------------------------------------------------------------------------------
# Bands (docs/pipeline.md#bands), the final-window statistic the pages state, tables
# ---------------------------------------------------------------------------------------------------------
def test_bands_are_clipped_to_the_metric_range_and_bootstrap_by_hand(tmp_path):
    ess = np.array([[99.0], [100.0], [100.0], [99.5], [100.0]])  # the t-interval's top is 100.3: ESS % stops at 100
    mean, lo, hi = aggregate.mean_ci(ess, limits=aggregate.METRIC_RANGES["diagnostics/ess_pct"])
    assert mean[0] == pytest.approx(99.7) and hi[0] == 100.0 and lo[0] < 99.7
    # two seeds 0 and 10: resampled means are 0, 5, 10 with probabilities 1/4, 1/2, 1/4, so the 2.5% and 97.5%
    # percentiles are 0 and 10
    mean, lo, hi = aggregate.mean_ci(np.array([[0.0], [10.0]]), band="bootstrap", reps=4000)
    assert (mean[0], lo[0], hi[0]) == (5.0, 0.0, 10.0)
    runs = tmp_path / "runs"
    for seed, top in zip(range(1, 6), (0.9, 1.0, 1.0, 1.0, 1.0)):
        write_run(runs, "Loco-v0", "ewma", seed, [(s, {"charts/solve_rate": top}) for s in (0, 10)])
    out = tmp_path / "c"
    assert aggregate.main(["curves", str(runs), "--metric", "charts/solve_rate", "--out", str(out)]) == 0
    rows = read_csv(f"{out}.csv")
    assert all(r["band"] == "ci95" and float(r["hi"]) == 1.0 and float(r["lo"]) < 0.98 for r in rows)


def test_final_is_the_mean_of_the_episodes_in_the_last_tenth_of_the_run_steps(tmp_path):
    """A run of 1,000 steps (its last row, at step 1000, logs no return): the last 10% is steps 900..1000, holding
    the episodes 2, 4, 6 (all ending at step 900) and 0 (step 950): final = 12 / 4 = 3. A per-step mean would give
    (4 + 0) / 2 = 2, and a window measured from the last return (950 - 10% of 850) would take in the 100 at 880."""
    runs = tmp_path / "runs"
    rows = [(100, {"charts/episodic_return": 50.0}), (880, {"charts/episodic_return": 100.0}),
            (900, {"charts/episodic_return": 2.0}), (900, {"charts/episodic_return": 4.0}),
            (900, {"charts/episodic_return": 6.0}), (950, {"charts/episodic_return": 0.0}),
            (1000, {"losses/value_loss": 1.0})]
    write_run(runs, "Ant-v4", "ppo", 1, rows, learning_rate=3e-4)
    write_run(runs, "Ant-v4", "ppo", 2, [(s, {"charts/episodic_return": v + 1.0} if "charts/episodic_return" in t
                                          else t) for s, t in rows for v in [t.get("charts/episodic_return", 0)]],
              learning_rate=3e-4)
    loaded = aggregate.load_runs([str(runs)])
    assert sorted(aggregate.per_run_scores(loaded, "charts/episodic_return", "final", 0.1, None)) == \
        pytest.approx([3.0, 4.0])
    out = tmp_path / "t"
    assert aggregate.main(["table", str(runs), "--metric", "charts/episodic_return", "--group-by", "learning-rate",
                           "--out", str(out)]) == 0
    (row,) = read_csv(f"{out}.csv")
    assert row["group"] == "learning_rate=0.0003" and row["n"] == "2" and row["interval"] == "range"
    assert [float(row[k]) for k in ("mean", "iqm", "lo", "hi")] == pytest.approx([3.5, 3.5, 3.0, 4.0])
    assert row["seeds"] == "1:3 2:4" and row["stat"] == "final"
    markdown = open(f"{out}.md").read().splitlines()
    assert markdown[0].startswith("| task | group | seeds | mean | IQM | interval | per seed |")
    assert markdown[2] == "| Ant-v4 | learning_rate=0.0003 | 2 | 3.5 | 3.5 | [3, 4] (range) | 1: 3, 2: 4 |"


def test_table_bootstraps_from_five_seeds_and_reports_the_iqm(tmp_path):
    """Finals 1, 2, 3, 4, 100 over five seeds: mean 22, IQM (cut 1 at each end) 3, a 95% bootstrap interval of the
    mean inside [1, 100]; with --interval range the seeds' range."""
    runs = tmp_path / "runs"
    for seed, final in zip(range(1, 6), (1.0, 2.0, 3.0, 4.0, 100.0)):
        write_run(runs, "Toy-v0", "toy", seed, [(s, {"charts/r": final}) for s in (0, 50, 100)])
    out = tmp_path / "t"
    assert aggregate.main(["table", str(runs), "--metric", "charts/r", "--reps", "2000", "--out", str(out)]) == 0
    (row,) = read_csv(f"{out}.csv")
    assert row["interval"] == "bootstrap" and float(row["mean"]) == pytest.approx(22.0)
    assert float(row["iqm"]) == pytest.approx(3.0)
    assert 1.0 <= float(row["lo"]) < 22.0 < float(row["hi"]) <= 100.0
    assert aggregate.main(["table", str(runs), "--metric", "charts/r", "--interval", "range", "--out", str(out)]) == 0
    (row,) = read_csv(f"{out}.csv")
    assert (float(row["lo"]), float(row["hi"])) == (1.0, 100.0)


def test_one_point_draws_error_bars_and_the_reference_group_is_a_line(tmp_path):
    """B26 Figs. 13-14: the base (N = 64) is a dotted reference line in its colour, every other group a line from the
    base's point to its own points, with error bars (the seeds' range at 2 seeds)."""
    from matplotlib.container import ErrorbarContainer

    runs = tmp_path / "runs"
    for seed in (1, 2):
        write_run(runs, "Ant-v4", "ppo", seed, [(s, {"charts/SPS": 100.0 + seed}) for s in (0, 10)], num_envs=64,
                  scaling_recipe="none")
        for recipe, sps in (("more-minibatches", 50.0), ("larger-minibatches", 200.0)):
            write_run(runs, "Ant-v4", "ppo", seed, [(s, {"charts/SPS": sps + seed}) for s in (0, 10)], num_envs=1024,
                      scaling_recipe=recipe)
    args = aggregate.parse_args(["sweep", str(runs), "--metric", "charts/SPS", "--stat", "last", "--x-key",
                                 "num-envs", "--group-by", "scaling-recipe", "--label", "{scaling_recipe}",
                                 "--reference-group", "none"])
    aggregate.canonical_keys(args)
    loaded = aggregate.load_runs(args.runs)
    result = aggregate.cmd_sweep(args, loaded, aggregate.Grouping(loaded, args.group_by, args.label))
    ax = result["fig"].axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 2  # the two recipes; the base is the reference line
    lines = {c.get_label(): c.lines[0].get_xydata().tolist() for c in bars}
    assert lines == {"larger-minibatches": [[64, 101.5], [1024, 201.5]],
                     "more-minibatches": [[64, 101.5], [1024, 51.5]]}
    reference = [line for line in ax.lines if line.get_linestyle() == ":"]
    assert [line.get_ydata()[0] for line in reference] == [101.5]
    from cleanrl_scaling.utils import plots
    fig = plots.plot_curves([{"series": {"a": (np.array([5.0]), np.array([1.0]), np.array([0.5]), np.array([2.0]))}}],
                            ["a"])
    (bar,) = fig.axes[0].containers
    segments = bar.lines[2][0].get_segments()
    assert [list(map(list, seg)) for seg in segments] == [[[5.0, 0.5], [5.0, 2.0]]]


def test_series_put_both_grown_arms_on_one_axis_and_relabel_renames(tmp_path):
    """M25 Fig. 8: --series KEY=V:LABEL makes one line per filter, the shared base (N = 64, T = 32) starting both;
    --relabel renames a legend label (B26 Fig. 3a's 'COM (starting COM)')."""
    runs = tmp_path / "runs"
    for n, t, final in ((64, 32, 10.0), (1024, 32, 4.0), (64, 512, 6.0)):
        write_run(runs, "Ant-v4", "ppo", 1, [(s, {"charts/r": final}) for s in (0, 100)], num_envs=n, num_steps=t,
                  batch_size=n * t)
    out = tmp_path / "s"
    assert aggregate.main(["sweep", str(runs), "--metric", "charts/r", "--x-key", "batch-size", "--series",
                           "num_steps=32:through N", "--series", "num-envs=64:through T", "--out", str(out)]) == 0
    got = {(r["group"], int(r["batch_size"])): float(r["mean"]) for r in read_csv(f"{out}.csv")}
    assert got == {("through N", 2048): 10.0, ("through N", 32768): 4.0, ("through T", 2048): 10.0,
                   ("through T", 32768): 6.0}
    assert aggregate.main(["table", str(runs), "--metric", "charts/r", "--filter", "num_steps=32", "--group-by",
                           "num_envs", "--label", "{num_envs}", "--relabel", "1024->N 1024", "--out", str(out)]) == 0
    assert [r["group"] for r in read_csv(f"{out}.csv")] == ["64", "N 1024"]
    assert aggregate.main(["table", str(runs), "--metric", "charts/r", "--relabel", "no arrow", "--out", str(out)]) == 2


def test_kl_profile_draws_one_style_per_setting_and_one_colour_per_phase():
    """H25 Fig. 3: 1000x50 solid, 100x500 dashed; the k-th phase of every run shares the k-th colour."""
    rows = [{"env_id": "Walker2d-v4", "group": group, "run": f"Walker2d-v4__ppo__{seed}__1", "pct_of_training": phase,
             "kind": kind, "pct_of_update": x, "kl": 1e-3 * (1 + x)}
            for group, seed in (("100x500", 1), ("1000x50", 4)) for phase in (10.0, 50.0) for kind in ("seq", "ref")
            for x in (50.0, 100.0)]
    fig = aggregate.draw_kl_profile(rows, dashed=["100x500"])
    lines = {line.get_label(): line for line in fig.axes[0].lines}
    assert set(lines) == {"100x500 @ 10%", "100x500 @ 50%", "1000x50 @ 10%", "1000x50 @ 50%"}
    assert lines["100x500 @ 10%"].get_linestyle() == "--" and lines["1000x50 @ 10%"].get_linestyle() == "-"
    color = {name: line.get_color() for name, line in lines.items()}
    assert color["100x500 @ 50%"] == color["1000x50 @ 50%"] != color["1000x50 @ 10%"]


def drawn_figure(monkeypatch, argv):
    """Run `aggregate curves` and return the matplotlib figure it saved."""
    saved = {}
    plots = aggregate._plots()
    monkeypatch.setattr(plots, "save", lambda fig, prefix: saved.setdefault("fig", fig) and [])
    assert aggregate.main(argv) == 0
    return saved["fig"]


def test_curves_share_one_y_scale_and_keep_a_grids_colours(tmp_path, monkeypatch):
    """--sharey: panels of very different heights on one y scale (B26 Fig. 7a's two batches); --palette: a figure of
    some of a grid's labels colours each as the figure of all of them does (B26 Figs. 5a and 1a on one page)."""
    import matplotlib.colors
    runs = tmp_path / "runs"
    for n, top in ((16, 0.1), (64, 0.6)):
        for com in (16, 256, 1024):
            write_run(runs, "Loco-v0", "ewma", 1, [(s, {"charts/r": top * s}) for s in (0, 1)], num_envs=n,
                      ewma_com=com)
    base = ["curves", str(runs), "--metric", "charts/r", "--panel-by", "num_envs", "--group-by", "ewma_com",
            "--label", "COM {ewma_com}", "--x", "iteration", "--out", str(tmp_path / "f")]
    apart = [ax.get_ylim() for ax in drawn_figure(monkeypatch, base).axes[:2]]
    assert apart[0][1] < 0.2 < apart[1][1]  # without --sharey each panel has its own
    shared = [ax.get_ylim() for ax in drawn_figure(monkeypatch, base + ["--sharey"]).axes[:2]]
    assert shared[0] == shared[1] and shared[0][1] > 0.5
    grid = "COM 4,COM 16,COM 64,COM 256,COM 1024"
    fig = drawn_figure(monkeypatch, base + ["--filter", "ewma_com=16,1024", "--palette", grid])
    colours = {line.get_label(): matplotlib.colors.to_hex(line.get_color()) for line in fig.axes[0].get_lines()}
    tab10 = [matplotlib.colors.to_hex(c) for c in aggregate._plots().colors(5)]
    assert colours == {"COM 16": tab10[1], "COM 1024": tab10[4]}


def test_curves_join_a_reloaded_run_to_the_state_it_started_from(tmp_path):
    """--join-init-from: a run started from update 4 of another run (found by its directory name: the path it
    recorded is another machine's) is drawn from that state: 'switch' adds the source's point at update 4 (B26 Fig.
    3a's reloads start at the switch), 'history' the source's whole curve up to it."""
    runs = tmp_path / "runs"
    source = write_run(runs, "Loco-v0", "ewma", 1, [(10 * i, {"charts/r": float(i)}) for i in range(1, 9)], ewma_com=16)
    reload = write_run(runs / "reloaded", "Loco-v0", "com16_to_1024", 1, [(10 * i, {"charts/r": 100.0 + i})
                                                                           for i in range(5, 9)], ewma_com=1024,
                       init_from=f"/elsewhere/{source.name}/checkpoints/iteration_4.ckpt")
    lines = reload / "metrics.jsonl"  # iterations 5..8, as the reload logged them
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    lines.write_text("".join(json.dumps({**r, "iteration": r["iteration"] + 4}) + "\n" for r in rows))
    for mode, first in (("switch", [(40.0, 4.0), (50.0, 105.0)]), ("history", [(10.0, 1.0), (20.0, 2.0)])):
        out = tmp_path / mode
        assert aggregate.main(["curves", str(runs), "--metric", "charts/r", "--group-by", "exp_name", "--points", "8",
                               "--join-init-from", mode, "--out", str(out)]) == 0
        drawn = [(float(r["x"]), float(r["mean"])) for r in read_csv(f"{out}.csv") if r["group"] == "com16_to_1024"]
        assert drawn[:2] == pytest.approx(first) and drawn[-1] == pytest.approx((80.0, 108.0)), (mode, drawn)
    plain = tmp_path / "plain"
    assert aggregate.main(["curves", str(runs), "--metric", "charts/r", "--group-by", "exp_name",
                           "--out", str(plain)]) == 0
    assert min(float(r["x"]) for r in read_csv(f"{plain}.csv") if r["group"] == "com16_to_1024") == 50.0


def test_curves_do_not_join_a_new_run_whose_counters_restart(tmp_path):
    """A run from old weights that counts from step 0 (--init-from in the torch scripts and sfl: start_iteration 0) is
    drawn alone: its first point is not the source's iteration-0 row (sfl logs an evaluation before the first update)."""
    runs = tmp_path / "runs"
    source = write_run(runs, "Loco-v0", "src", 1, [(10 * i, {"charts/r": float(i)}) for i in range(4)])
    lines = source / "metrics.jsonl"  # iterations 0..3, the first before any update
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    lines.write_text("".join(json.dumps({**r, "iteration": r["iteration"] - 1}) + "\n" for r in rows))
    write_run(runs, "Loco-v0", "new", 1, [(10 * i, {"charts/r": 100.0 + i}) for i in range(1, 4)], start_iteration=0,
              init_from=f"/elsewhere/{source.name}/checkpoints/latest.ckpt")
    out = tmp_path / "switch"
    assert aggregate.main(["curves", str(runs), "--metric", "charts/r", "--group-by", "exp_name", "--points", "8",
                           "--join-init-from", "switch", "--out", str(out)]) == 0
    drawn = [(float(r["x"]), float(r["mean"])) for r in read_csv(f"{out}.csv") if r["group"] == "new"]
    assert drawn[0] == pytest.approx((10.0, 101.0)), drawn


def table_runs(root, pairs):
    """Runs of Pong-v5 at (num_envs, seed, final return); batch_size follows num_envs as the scripts derive it."""
    for num_envs, seed, final in pairs:
        write_run(root, "Pong-v5", "ppo", seed, [(s, {"charts/episodic_return": final}) for s in (0, 100)],
                  num_envs=num_envs, num_steps=128, batch_size=num_envs * 128, learning_rate=2.5e-4)


def test_table_without_group_by_splits_every_setup_and_counts_each_seed_once(tmp_path, capsys):
    """Runs at 16 and 256 envs are two setups: two rows named by the flag the user varied (num_envs, not the derived
    batch_size), each seed once; the metric defaults to the episodic return."""
    runs = tmp_path / "runs"
    table_runs(runs, [(16, 1, 1.0), (16, 2, 3.0), (256, 1, 10.0), (256, 2, 20.0)])
    for path in runs.iterdir():  # the scripts record the flags they were started with
        config = json.loads((path / "config.json").read_text())
        config["argv"] = ["--num-envs", str(config["args"]["num_envs"]), "--seed", str(config["args"]["seed"])]
        (path / "config.json").write_text(json.dumps(config))
    out = tmp_path / "t"
    assert aggregate.main(["table", str(runs), "--out", str(out)]) == 0
    rows = read_csv(f"{out}.csv")
    assert [(r["group"], r["seeds"], float(r["mean"])) for r in rows] == \
        [("num_envs=16", "1:1 2:3", 2.0), ("num_envs=256", "1:10 2:20", 15.0)]
    assert rows[0]["metric"] == "charts/episodic_return"
    assert "grouped by num_envs" in capsys.readouterr().err


def test_table_refuses_to_count_a_seed_twice(tmp_path, capsys):
    """--group-by learning_rate would pool 16 and 256 envs as one row holding seed 1 twice: exit 2, one line naming
    the flag that tells the runs apart; --keep-duplicates reruns likewise."""
    runs = tmp_path / "runs"
    table_runs(runs, [(16, 1, 0.0), (256, 1, 0.0)])
    capsys.readouterr()
    assert aggregate.main(["table", str(runs), "--group-by", "learning_rate", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "seed 1 twice" in err and "num_envs" in err and "--group-by" in err
    assert not (tmp_path / "t.csv").exists()
    rerun = tmp_path / "rerun"
    table_runs(rerun, [(16, 1, 0.0), (16, 1, 1.0)])
    assert aggregate.main(["table", str(rerun), "--keep-duplicates", "--out", str(tmp_path / "t")]) == 2
    assert "drop --keep-duplicates" in capsys.readouterr().err


def test_table_help_says_what_it_writes(capsys):
    with pytest.raises(SystemExit):
        aggregate.parse_args(["table", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "table writes PREFIX.md and PREFIX.csv" in text and "default charts/episodic_return" in text
