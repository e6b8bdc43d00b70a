"""benchmark/beukman2026_jax2d_rule.py: every figure's pre-set rule on made-up finished run directories
(config.json + metrics.jsonl rows as ppo_ewma_jax2d.py writes them), with the verdicts worked out by hand below."""
import csv
import importlib.util
import json
import math

import numpy as np
import pytest

from jax2d_figures import REPO

spec = importlib.util.spec_from_file_location("jax2d_rule", REPO / "benchmark" / "beukman2026_jax2d_rule.py")
rule = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rule)

U = 200  # updates per run; evaluations at 20, 40, ..., 200, diagnostics at 10, 20, ..., 200
STAMP = iter(range(1000, 100000))


def write_run(root, *, seed, evals, com=16.0, clip=0.2, envs=64, exp_name="ppo_ewma_jax2d", init_from=None,
              train=lambda it: 0.0, episodes=None, diag=None, first=1, last=U, status="finished"):
    """A run of updates first..last: evals = the ten evaluations (updates 20..200) or {update: rate}; train(it) the
    update's training solve rate, episodes(it) how many episodes ended in it; diag = {metric: f(it)} every 10
    updates."""
    if not isinstance(evals, dict):
        evals = {20 * (k + 1): v for k, v in enumerate(evals)}
    rows = []
    for it in range(first, last + 1):
        step = {"global_step": it * envs * 128, "iteration": it}
        rows += [{**step, "charts/episodic_return": 1.0} for _ in range(episodes(it) if episodes else 0)]
        row = {**step, "charts/train_solve_rate": train(it), "losses/policy_loss": 0.0}
        if diag and it % 10 == 0:
            row.update({metric: f(it) for metric, f in diag.items()})
        rows.append(row)
        if it in evals:
            rows.append({**step, "charts/solve_rate": evals[it]})
    run = root / f"Jax2D-Locomotion-l__{exp_name}__{seed}__{next(STAMP)}"
    run.mkdir(parents=True)
    args = {"env_id": "Jax2D-Locomotion-l", "exp_name": exp_name, "seed": seed, "ewma_com": com, "clip_coef": clip,
            "num_envs": envs, "init_from": init_from}
    (run / "config.json").write_text(json.dumps({"script": "ppo_ewma_jax2d", "args": args}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps({"status": status}))
    return run


def judge(capsys, *argv):
    """Run one subcommand; returns (exit code, stdout, the CSV rows or None)."""
    out = str(argv[argv.index("--out") + 1]) if "--out" in argv else None
    code = rule.main([str(a) for a in argv])
    text = capsys.readouterr().out
    rows = list(csv.DictReader(open(out + ".csv"))) if out and code == 0 and "no verdict" not in text else None
    return code, text, rows


def verdict_of(text: str) -> str:
    return text.split("**Verdict: ")[1].split("**")[0]


# Fig. 5a / 1a / 5b: ten evaluations per run. final = the last three, mid = updates 80, 100, 120.
RISING = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]  # final 0.9, mid 0.5
PLATEAU = [0.1, 0.2, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]  # final 0.3, mid 0.3: late gain 0
SLOW = [0.0, 0.0, 0.0, 0.1, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]  # final 0.5, mid 0.4/3: late gain 0.3667
LEARNED = lambda it: 0.0 if it <= 20 else 0.2  # noqa: E731  (first window 0, best 0.2: learned 0.2)


def grid_5a(root, low=PLATEAU, high=SLOW, low_train=LEARNED, seeds=(1, 2, 3), **kw):
    for seed in seeds:
        write_run(root, seed=seed, com=4.0, evals=low(seed) if callable(low) else low, train=low_train, **kw)
        write_run(root, seed=seed, com=16.0, evals=RISING, train=LEARNED, **kw)
        write_run(root, seed=seed, com=64.0, evals=high(seed) if callable(high) else high, train=LEARNED, **kw)


def test_numbers_of_one_run_final_mid_and_pooled_windows(tmp_path):
    """final = mean of the last three evaluations; mid = the three around U/2 (80, 100, 120 at U = 200; at U = 300,
    140 and 160 tie and the earlier wins: 120, 140, 160); the training rate is pooled over episodes."""
    from cleanrl_scaling.utils.aggregate import load_runs
    # updates 1-20: rate 0.5 with 1 episode each except update 20 (rate 0.0, 3 episodes): (19 x 0.5) / 22
    write_run(tmp_path / "a", seed=1, evals=RISING, train=lambda it: 0.0 if it == 20 else 0.5,
              episodes=lambda it: 3 if it == 20 else 1)
    run = load_runs([str(tmp_path / "a")])[0]
    n = rule.numbers(run)
    assert math.isclose(n["final"], 0.9) and math.isclose(n["mid"], 0.5) and math.isclose(n["late gain"], 0.4)
    assert math.isclose(rule.train_rate(run, 1, 20), 19 * 0.5 / 22)
    assert math.isclose(n["learned"], 0.5 - 19 * 0.5 / 22) and math.isclose(n["train last 20"], 0.5)
    write_run(tmp_path / "b", seed=1, evals=[0.01 * k for k in range(1, 16)], last=300)  # evaluations 20..300
    n = rule.numbers(load_runs([str(tmp_path / "b")])[0])
    assert math.isclose(n["mid"], 0.07) and math.isclose(n["final"], 0.14)  # (0.06+0.07+0.08)/3, (0.13+0.14+0.15)/3


def test_fig5a_yes_partly_no(tmp_path, capsys):
    args = ["--low", 4, "--star", 16, "--high", 64]
    grid_5a(tmp_path / "yes")  # (a): gain 0, 0.3 <= 0.85, learned 0.2; (b): 0.5 <= 0.85, gain 0.367 > 0.01
    code, text, rows = judge(capsys, "fig5a", tmp_path / "yes", *args, "--out", tmp_path / "t")
    assert code == 0 and verdict_of(text) == "yes" and {r["verdict"] for r in rows} == {"yes"}
    assert len(rows) == 3 * 3 + 3 and "seeds 3/3" in text
    mean_low = [r for r in rows if r["arm"] == "low" and r["seed"] == "mean"][0]
    assert math.isclose(float(mean_low["final"]), 0.3) and mean_low["COM"] == "4"
    assert (tmp_path / "t.md").read_text().count("**Verdict: yes**") == 1
    grid_5a(tmp_path / "partly", high=PLATEAU)  # the high COM plateaus too: (b) fails
    assert verdict_of(judge(capsys, "fig5a", tmp_path / "partly", *args)[1]) == "partly"
    # the low COM never learned (train flat): (a) fails; the high COM ends at C*'s level: (b) fails
    grid_5a(tmp_path / "no", low_train=lambda it: 0.1, high=RISING)
    assert verdict_of(judge(capsys, "fig5a", tmp_path / "no", *args)[1]) == "no"
    # Fig. 1a: the same rule on its three lines
    assert verdict_of(judge(capsys, "fig1a", tmp_path / "yes", *args)[1]) == "yes"


def test_fig5a_needs_two_of_three_seeds_besides_the_mean(tmp_path, capsys):
    """C_low's late gain per seed -0.04, +0.02, +0.02: mean 0 <= 0.01 but only seed 1 passes: (a) fails; a seed
    missing for one arm: no verdict yet, nothing written."""
    mids = {1: 0.34, 2: 0.28, 3: 0.28}  # evaluations 80, 100, 120 all at this level; final stays 0.3
    low = lambda seed: [0.1, 0.2, 0.3, mids[seed], mids[seed], mids[seed], 0.3, 0.3, 0.3, 0.3]  # noqa: E731
    grid_5a(tmp_path / "r", low=low)
    code, text, _ = judge(capsys, "fig5a", tmp_path / "r", "--low", 4, "--star", 16, "--high", 64)
    assert "(a) plateau" in text and "seed mean holds; seeds 1/3: **fails**" in text and verdict_of(text) == "partly"
    write_run(tmp_path / "few", seed=1, com=4.0, evals=PLATEAU)
    write_run(tmp_path / "few", seed=1, com=16.0, evals=RISING)
    code, text, rows = judge(capsys, "fig5a", tmp_path / "few", "--low", 4, "--star", 16, "--high", 64,
                             "--out", tmp_path / "none")
    assert code == 0 and "no verdict yet" in text and not (tmp_path / "none.csv").exists()


def test_fig5b_is_fig5a_on_plain_ppo_epsilons(tmp_path, capsys):
    """ε 0.8 plateaus, 0.1 is slow, 0.2 the reference; a PPO-EWMA run at ε 0.2 is not plain PPO and is ignored."""
    for seed in (1, 2, 3):
        write_run(tmp_path, seed=seed, com=0.0, clip=0.8, evals=PLATEAU, train=LEARNED)
        write_run(tmp_path, seed=seed, com=0.0, clip=0.2, evals=RISING)
        write_run(tmp_path, seed=seed, com=0.0, clip=0.1, evals=SLOW)
        write_run(tmp_path, seed=seed, com=16.0, clip=0.2, evals=PLATEAU)  # would make the reference plateau
    code, text, rows = judge(capsys, "fig5b", tmp_path, "--low", 0.8, "--star", 0.2, "--high", 0.1, "--out",
                             tmp_path / "b")
    assert code == 0 and verdict_of(text) == "yes" and {r["epsilon"] for r in rows} == {"0.8", "0.2", "0.1"}


def kl_runs(root, kl: dict, grad: dict):
    """kl/grad: {(com, seed): value}; the KL is 100 in the first half (outside the window of Fig. 2c)."""
    for (com, seed), value in kl.items():
        diag = {rule.KL: lambda it, v=value: 100.0 if it <= 100 else v * (0.9 if it % 20 else 1.1),  # median v
                rule.GRAD: lambda it, g=grad[(com, seed)]: g + (0.5 if it % 20 else -0.5)}  # median g
        write_run(root, seed=seed, com=com, evals=RISING, diag=diag)


def test_fig2c_and_fig2b(tmp_path, capsys):
    kl = {(c, s): v for s in (1, 2, 3) for c, v in ((4.0, 0.9), (16.0, 0.3), (64.0, 0.1))}  # 0.9 = 3 x 0.3
    grad = {(c, s): v for s in (1, 2, 3) for c, v in ((4.0, 3.0), (16.0, 2.0), (64.0, 1.0))}  # 3.0 = 1.5 x 2.0
    kl_runs(tmp_path / "yes", kl, grad)
    code, text, rows = judge(capsys, "fig2c", tmp_path / "yes", "--low", 4, "--star", 16, "--out", tmp_path / "c")
    assert verdict_of(text) == "yes" and math.isclose(float(rows[0]["seed 2"]), 0.9)  # the second half's median
    assert verdict_of(judge(capsys, "fig2b", tmp_path / "yes", "--low", 4, "--star", 16)[1]) == "yes"
    kl[(64.0, 2)] = 0.35  # seed 2: COM 64 above COM 16: not monotone
    grad[(16.0, 3)] = 2.1  # seed 3: 3.0 < 1.5 x 2.1
    kl_runs(tmp_path / "no", kl, grad)
    code, text, _ = judge(capsys, "fig2c", tmp_path / "no", "--low", 4, "--star", 16)
    assert verdict_of(text) == "no" and "seeds 2/3: **fails**" in text
    assert verdict_of(judge(capsys, "fig2b", tmp_path / "no", "--low", 4, "--star", 16)[1]) == "no"
    kl[(64.0, 2)], kl[(4.0, 1)] = 0.1, 0.8  # monotone again, but 0.8 < 3 x 0.3 in seed 1
    kl_runs(tmp_path / "ratio", kl, grad)
    assert verdict_of(judge(capsys, "fig2c", tmp_path / "ratio", "--low", 4, "--star", 16)[1]) == "no"


def finals(value: float) -> list:
    return [0.0] * 7 + [value] * 3


@pytest.mark.parametrize("small, verdict", [
    ({1: (0.2, 0.5), 2: (0.2, 0.5), 3: (0.2, 0.5)}, "yes"),  # gap(16) 0.3, gap(64) 0.1: d = 0.2
    ({1: (0.5, 0.2), 2: (0.5, 0.2), 3: (0.5, 0.2)}, "no (against B26)"),  # gap(16) -0.3: d = -0.4
    ({1: (0.2, 0.5), 2: (0.4, 0.5), 3: (0.4, 0.5)}, "not shown"),  # d = 0.2, 0, 0: mean 0.067 but 1 of 3 seeds
    ({1: (0.38, 0.5), 2: (0.38, 0.5), 3: (0.38, 0.5)}, "not shown"),  # d = 0.02
])
def test_fig7a_gap_rule(small, verdict, tmp_path, capsys):
    """N = 64 (Fig. 5a's runs, another directory): weak 0.4, strong 0.5 in every seed: gap(64) = 0.1."""
    for seed, (weak, strong) in small.items():
        write_run(tmp_path / "7", seed=seed, envs=16, com=4.0, evals=finals(weak))
        write_run(tmp_path / "7", seed=seed, envs=16, com=16.0, evals=finals(strong))
        write_run(tmp_path / "5a", seed=seed, envs=64, com=4.0, evals=finals(0.4))
        write_run(tmp_path / "5a", seed=seed, envs=64, com=16.0, evals=finals(0.5))
        write_run(tmp_path / "5a", seed=seed, envs=64, com=64.0, evals=finals(0.9))  # another COM: not an arm
    code, text, rows = judge(capsys, "fig7a", tmp_path / "7", tmp_path / "5a", "--weak", 4, "--strong", 16, "--out",
                             tmp_path / "t")
    assert code == 0 and verdict_of(text) == verdict, text
    assert math.isclose(float(rows[0]["gap(64)"]), 0.1)


def step(before: float, after: float, at: int):
    return lambda it: before if it <= at else after


def fig8_seed(root, seed, a_evals, a_ddr, b_evals, b_ddr):
    write_run(root, seed=seed, com=4.0, evals=a_evals, diag={rule.DDR: a_ddr})
    write_run(root, seed=seed, com=64.0, evals=b_evals, diag={rule.DDR: b_ddr})


EARLY, LATE = [0.5] * 10, [0.1] * 2 + [0.2] * 7 + [0.9]  # best within 50 updates; best only within 200


def test_fig8_budgets_are_prefixes(tmp_path, capsys):
    """Budgets 50, 100, 200. Run A (COM 4) is best within 50 updates, with DDR 100 there (1000 after: the whole-run
    mean would be 775, within 100 updates 550); run B (COM 64) is best within 200, DDR 300 to update 100 and 600 after:
    mean 450. So DDR*(50) = 100, DDR*(100) = 550 (A is still best: 0.5 against 0.2), DDR*(200) = 450 >= 150 in every
    seed: yes (the whole-run means, 775 against 450, would say no)."""
    for seed in (1, 2, 3):
        fig8_seed(tmp_path / "5a", seed, EARLY, step(100.0, 1000.0, 50), LATE, step(300.0, 600.0, 100))
    write_run(tmp_path / "5a", seed=1, com=16.0, evals=[1.0] * 5, last=100)  # shorter than U: left out
    code, text, rows = judge(capsys, "fig8", tmp_path / "5a", "--updates", U, "--figure", tmp_path / "fig",
                             "--out", tmp_path / "t")
    assert verdict_of(text) == "yes" and "seeds 3/3" in text
    assert [(float(r["DDR*(50)"]), float(r["DDR*(100)"]), float(r["DDR*(200)"])) for r in rows] == [(100, 550, 450)] * 3
    dots = list(csv.DictReader(open(tmp_path / "fig.csv")))
    assert len(dots) == 2 * 3 * 3 and (tmp_path / "fig.png").stat().st_size > 0
    a50 = [d for d in dots if d["budget"] == "50" and d["ewma_com"] == "4"]
    assert {float(d["mean(diagnostics/ddr)"]) for d in a50} == {100.0}


def test_fig8_no_not_shown_and_ties(tmp_path, capsys):
    for seed in (1, 2, 3):  # B best within 50 (DDR 300), A best within 200 (DDR 100): DDR*(U) <= DDR*(U/4)
        fig8_seed(tmp_path / "no", seed, LATE, lambda it: 100.0, EARLY, lambda it: 300.0)
    assert verdict_of(judge(capsys, "fig8", tmp_path / "no", "--updates", U)[1]) == "no"
    for seed in (1, 2, 3):  # DDR*(U) / DDR*(U/4) = 120 / 100
        fig8_seed(tmp_path / "ns", seed, EARLY, lambda it: 100.0, LATE, lambda it: 120.0)
    assert verdict_of(judge(capsys, "fig8", tmp_path / "ns", "--updates", U)[1]) == "not shown"
    # a tie within 50 updates (both 0.5): DDR*(50) = mean(100, 200) = 150; B best within 200 (DDR 200): 200 / 150 is
    # not shown (taking A alone would say yes, B alone no)
    for seed in (1, 2, 3):
        fig8_seed(tmp_path / "tie", seed, EARLY, lambda it: 100.0, [0.5] * 9 + [0.9], lambda it: 200.0)
    code, text, rows = judge(capsys, "fig8", tmp_path / "tie", "--updates", U, "--out", tmp_path / "t")
    assert float(rows[0]["DDR*(50)"]) == 150 and verdict_of(text) == "not shown"


def fig3a_runs(root, raise_, lower, ref_low=0.1, ref_star=0.5):
    for seed in (1, 2, 3):
        for exp, com, value in (("com4_to_16", 16.0, raise_), ("com16_to_4", 4.0, lower)):
            write_run(root / "3a" / "reloaded", seed=seed, com=com, exp_name=exp, init_from="phase1.ckpt",
                      evals={it: value for it in range(120, 201, 20)}, first=101)
        write_run(root / "5a", seed=seed, com=4.0, evals=finals(ref_low))
        write_run(root / "5a", seed=seed, com=16.0, evals=finals(ref_star))


def test_table_lists_every_finished_run_with_its_numbers(tmp_path, capsys):
    """The pages' per-seed tables: one row per finished run, sorted by N, exp_name, COM, seed; KL = median over the
    second half, DDR = mean over the second half (diagnostics every 10 updates: 110..200)."""
    diag = {"diagnostics/kl_behavior": lambda it: it / 1000, "diagnostics/ddr": lambda it: float(it)}
    write_run(tmp_path, seed=2, evals=RISING, com=64.0, diag=diag)
    write_run(tmp_path, seed=1, evals=RISING, com=64.0, diag=diag)
    write_run(tmp_path, seed=1, evals=RISING, com=4.0, envs=16)
    write_run(tmp_path, seed=1, evals={120: 0.3, 140: 0.3, 160: 0.3, 180: 0.6, 200: 0.6}, com=4.0, first=101,
              exp_name="com64_to_4", init_from="x/iteration_100.ckpt")
    write_run(tmp_path, seed=3, evals=RISING, status="running")  # unfinished: left out
    code, text, rows = judge(capsys, "table", tmp_path, "--out", tmp_path / "t")
    assert code == 0 and "Verdict" not in text and "verdict" not in rows[0]
    assert [(r["N"], r["run"], r["COM"], r["seed"]) for r in rows] == [
        ("16", "ppo_ewma_jax2d", "4", "1"), ("64", "com64_to_4", "4", "1"), ("64", "ppo_ewma_jax2d", "64", "1"),
        ("64", "ppo_ewma_jax2d", "64", "2")]
    full = rows[2]
    assert math.isclose(float(full["final"]), 0.9) and math.isclose(float(full["late gain"]), 0.4)
    assert math.isclose(float(full["KL 2nd half"]), 0.155)  # median of 0.110, 0.120, ..., 0.200
    assert full["DDR 2nd half"] == "155"  # mean of 110, 120, ..., 200
    reload = rows[1]  # evaluations 120..200: mid = 120, 140, 160 (the nearest to U/2 = 100 is 120, moved inwards)
    assert math.isclose(float(reload["final"]), 0.5) and math.isclose(float(reload["mid"]), 0.3)
    assert reload["KL 2nd half"] == "nan" and reload["updates"] == "200"
    assert rule.main(["table", str(tmp_path / "none")]) == 2


@pytest.mark.parametrize("raise_, lower, ref_star, verdict", [
    (0.45, 0.15, 0.5, "yes"),  # 0.05 from C*'s reference (0.35 from C_low's); 0.05 from C_low's
    (0.2, 0.15, 0.5, "partly"),  # raising ends 0.1 from C_low's reference and 0.3 from C*'s
    (0.2, 0.4, 0.5, "no"),
    (0.45, 0.15, 0.14, "not shown"),  # the references end 0.04 apart
])
def test_fig3a_reload_rule(raise_, lower, ref_star, verdict, tmp_path, capsys):
    fig3a_runs(tmp_path, raise_, lower, ref_star=ref_star)
    code, text, rows = judge(capsys, "fig3a", tmp_path / "5a", "--switched", tmp_path / "3a" / "reloaded",
                             "--low", 4, "--star", 16, "--out", tmp_path / "t")
    assert code == 0 and verdict_of(text) == verdict, text
    assert {r["run"]: float(r["mean"]) for r in rows}["raising"] == pytest.approx(raise_)


def test_grid_prints_the_placement_and_refuses_a_bad_one(tmp_path, capsys):
    placement = {"c_star": 64.0, "c_low": 4.0, "c_high": 1024.0, "coms": [4.0, 16.0, 64.0, 256.0, 1024.0],
                 "updates": 300, "fig3a": [4.0, 64.0], "fig5b": False, "bracketed": {"low": True, "high": True},
                 "arms": {}, "pilot_runs_dir": "runs/beukman2026_jax2d_pilot"}
    (tmp_path / "p.json").write_text(json.dumps(placement))
    assert rule.main(["grid", str(tmp_path / "p.json"), "COMS", "U", "C_STAR", "FIG5B"]) == 0
    assert capsys.readouterr().out.split() == ["COMS=4,16,64,256,1024", "U=300", "C_STAR=64", "FIG5B=0"]
    (tmp_path / "bad.json").write_text(json.dumps({"c_low": 4}))
    assert rule.main(["grid", str(tmp_path / "bad.json"), "U"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json" in err[0]
    assert rule.main(["fig8", str(tmp_path), "--updates", "2"]) == 2


@pytest.mark.slow  # 8 figure and 8 rule processes: ~30 CPU-seconds
def test_laptop_scripts_draw_and_judge_from_their_runs(tmp_path):
    """SCALE=laptop DRAW_ONLY=1 end to end on made-up runs: every figure script draws and writes its rule's table,
    with the other scripts reading the Fig. 5a runs (FIG5A_DIR). The placement's C_low 4, C* 16, C_high 64; the runs:
    COM 4 plateaus, 16 rises, 64 is slow (Fig. 5a: yes); epsilon 0.8 plateaus, 0.2 rises, 0.1 is slow (Fig. 5b: yes);
    N = 16 ends at 0.2 (COM 4) and 0.9 (COM 16): gap(16) 0.7 against gap(64) 0.6 (Fig. 7a: yes); the switched
    reloads end at 0.8 and 0.35 against references 0.9 and 0.3 (Fig. 3a: yes)."""
    import subprocess
    from jax2d_figures import script_env
    for seed in (1, 2, 3):
        for com, evals in ((4.0, PLATEAU), (16.0, RISING), (64.0, SLOW)):
            write_run(tmp_path / "5a", seed=seed, com=com, evals=evals, train=LEARNED,
                      diag={rule.KL: lambda it, c=com: 1 / c, rule.GRAD: lambda it, c=com: 10 / c,
                            rule.DDR: lambda it, c=com: 8192 * c})
        for eps, evals in ((0.8, PLATEAU), (0.2, RISING), (0.1, SLOW)):
            write_run(tmp_path / "5b", seed=seed, com=0.0, clip=eps, evals=evals, train=LEARNED,
                      diag={rule.DDR: lambda it, e=eps: 8192 / e})
        for com, value in ((4.0, 0.2), (16.0, 0.9)):
            write_run(tmp_path / "7", seed=seed, envs=16, com=com, evals=finals(value))
        for exp, com, value in (("com4_to_16", 16.0, 0.8), ("com16_to_4", 4.0, 0.35)):
            write_run(tmp_path / "3a" / "reloaded", seed=seed, com=com, exp_name=exp, init_from="x.ckpt",
                      evals={it: value for it in range(120, 201, 20)}, first=101)
    placement = tmp_path / "placement.json"
    placement.write_text(json.dumps({"c_star": 16.0, "c_low": 4.0, "c_high": 64.0, "coms": [4.0, 16.0, 64.0],
                                     "updates": U, "fig3a": [4.0, 16.0], "fig5b": True, "arms": {},
                                     "bracketed": {"low": True, "high": True}, "pilot_runs_dir": "x"}))
    out_dir = tmp_path / "fig"
    for fig, runs_dir in (("5a", "5a"), ("5b", "5b"), ("7", "7"), ("8", "8"), ("3a", "3a")):
        env = script_env(SCALE="laptop", DRAW_ONLY=1, PLACEMENT=placement, RUNS_DIR=tmp_path / runs_dir,
                         FIG5A_DIR=tmp_path / "5a", FIG5B_DIR=tmp_path / "5b", OUT_DIR=out_dir)
        out = subprocess.run(["bash", str(REPO / "benchmark" / f"beukman2026_fig{fig}.sh")], capture_output=True,
                             text=True, env=env, timeout=600)
        assert out.returncode == 0, (fig, out.stdout, out.stderr)
    verdicts = {name: list(csv.DictReader(open(out_dir / f"beukman2026_{name}_rule.csv")))[0]["verdict"]
                for name in ("fig5a", "fig1a", "fig2c", "fig2b", "fig5b", "fig7a", "fig8", "fig3a")}
    # Fig. 2c: KL 1/COM falls, 1/4 = 4 x 1/16; Fig. 2b: 10/4 >= 1.5 x 10/16. Fig. 8: within 50 updates COMs 4 and 16
    # and epsilons 0.8 and 0.2 tie at 0.2: DDR* = mean(32768, 131072, 10240, 40960) = 53760; within 200 COM 16 and
    # epsilon 0.2 tie at 1.0: mean(131072, 40960) = 86016 = 1.6 x 53760
    assert verdicts == {"fig5a": "yes", "fig1a": "yes", "fig2c": "yes", "fig2b": "yes", "fig5b": "yes",
                        "fig7a": "yes", "fig8": "yes", "fig3a": "yes"}
    for name in ("fig5a", "fig1a", "fig2b", "fig2c", "fig5b", "fig7a", "fig8", "fig3a", "fig3a_train"):
        assert (out_dir / f"beukman2026_{name}.png").stat().st_size > 0, name
    groups = {r["group"] for r in csv.DictReader(open(out_dir / "beukman2026_fig3a.csv"))}
    assert groups == {"4", "16", "16 (4)", "4 (16)"}  # B26's legend: COM (starting COM)
    panels = {(r["num_envs"], r["group"]) for r in csv.DictReader(open(out_dir / "beukman2026_fig7a.csv"))}
    assert panels == {(n, f"COM {c}") for n in ("16", "64") for c in (4, 16)}


# The plateau rule (B26 Figs. 1a/5a at a longer budget): the last 80 of U2 = 400 updates; evaluations every 20.
U2 = 400


def late_run(root, *, seed, com, gain, level=0.3, train_gain=None, last=U2, first=1, init_from=None):
    """A run whose evaluations and training solve rate rise linearly by `gain` per 80 updates, ending at `level`
    (train_gain: the training rate's own gain, else the same)."""
    per_update = lambda g: g / 80  # noqa: E731
    t = gain if train_gain is None else train_gain
    return write_run(root, seed=seed, com=com, first=first, last=last, init_from=init_from,
                     evals={it: level - per_update(gain) * (last - it) for it in range(first + 19, last + 1, 20)},
                     train=lambda it: level - per_update(t) * (last - it))


def test_plateau_numbers_a_flat_curve_a_rising_one_and_the_margin(tmp_path):
    """S = 80 x the fitted slope over the last 80 updates: 0 for a flat curve, the gain for a linear one, on the
    evaluations (U-80..U) and on the pooled training windows alike; trend: both <= 0.02 a plateau, both >= 0.05 still
    rising, else neither, so a gain of 0.03 is neither and the margin decides it."""
    from cleanrl_scaling.utils.aggregate import load_runs
    for name, gain, train_gain in (("flat", 0.0, None), ("rising", 0.2, None), ("slight", 0.03, None),
                                   ("mixed", 0.0, 0.1)):
        late_run(tmp_path / name, seed=1, com=16.0, gain=gain, train_gain=train_gain)
    gains = {name: rule.late_gains(load_runs([str(tmp_path / name)])[0]) for name in ("flat", "rising", "slight",
                                                                                       "mixed")}
    assert gains["flat"]["S_eval"] == pytest.approx(0.0, abs=1e-12)
    assert gains["flat"]["S_train"] == pytest.approx(0.0, abs=1e-12)
    assert gains["rising"]["S_eval"] == pytest.approx(0.2) and gains["rising"]["S_train"] == pytest.approx(0.2)
    assert math.isnan(gains["flat"]["SE(S_eval)"])  # these runs logged no charts/solve_rate_se
    trends = {name: rule.trend(g["S_eval"], g["S_train"]) for name, g in gains.items()}
    assert trends == {"flat": "plateau", "rising": "still rising", "slight": "neither", "mixed": "neither"}
    assert rule.trend(gains["slight"]["S_eval"], gains["slight"]["S_train"], flat=0.04) == "plateau"
    assert rule.trend(gains["slight"]["S_eval"], gains["slight"]["S_train"], rising=0.025) == "still rising"
    # five evaluations 20 apart with SE 0.02 each: SE(S) = 80 x 0.02 x sqrt(sum w^2), w = (-40..40)/4000
    x = np.arange(320.0, 401.0, 20.0)
    s, se = rule.slope_gain(x, 0.1 + 0.001 * x, np.full(5, 0.02))
    assert s == pytest.approx(0.08) and se == pytest.approx(80 * 0.02 * math.sqrt(1 / 4000))


@pytest.mark.parametrize("low_gain, low_level, verdict", [
    (0.0, 0.1, "yes"),  # flat, 0.2 below COM 256's final
    (0.1, 0.1, "no (not shown: still rising)"),
    (0.0, 0.29, "no (contradicts B26: no premature plateau)"),  # flat, but within 0.05 of the others
    (0.03, 0.1, "not shown"),  # neither flat nor rising
])
def test_plateau_rule_verdicts(low_gain, low_level, verdict, tmp_path, capsys):
    """COM 4 is C_low; COMs 16 and 64 end at 0.3 and 0.25 (final = mean of the last three evaluations). Runs shorter
    than --updates do not count (a 200-update run of COM 4 that plateaus far below is left out)."""
    for seed in (1, 2, 3):
        late_run(tmp_path, seed=seed, com=4.0, gain=low_gain, level=low_level)
        late_run(tmp_path, seed=seed, com=16.0, gain=0.2, level=0.3)
        late_run(tmp_path, seed=seed, com=64.0, gain=0.1, level=0.25)
        write_run(tmp_path, seed=seed, com=4.0, evals=[0.0] * 10, last=U, exp_name="short")  # newest, but shorter
    code, text, rows = judge(capsys, "plateau", tmp_path, "--low", 4, "--others", 16, 64, "--updates", U2,
                             "--out", tmp_path / "t")
    assert code == 0 and verdict_of(text) == verdict, text
    low = [r for r in rows if r["COM"] == "4" and r["seed"] != "mean"]
    assert len(low) == 3 and all(r["updates"] == "400" for r in low)
    assert float(low[0]["S_eval"]) == pytest.approx(low_gain, abs=1e-9)
    assert rule.main(["plateau", str(tmp_path), "--low", "4", "--others", "16", "--updates", "40"]) == 2


def test_plateau_rule_needs_both_readings_of_below_in_the_seed_mean(tmp_path, capsys):
    """COM 4 flat at 0.2; COM 16 ends at 0.4, 0.1, 0.1 and COM 64 at 0.1, 0.4, 0.1 by seed. Below per seed in seeds 1
    and 2 (0.2 <= 0.4 - 0.05), not 3. In the seed mean the code's reading (the mean of each seed's best: 0.3) says
    below (0.2 <= 0.25), the text's (the best seed mean: 0.2 for both COMs) says not (0.2 > 0.15): yes by the one,
    the contradiction by the other, so not shown. With COM 64 at 0.4 in every seed both readings say below: yes."""
    for seed, (c16, c64) in zip((1, 2, 3), ((0.4, 0.1), (0.1, 0.4), (0.1, 0.1))):
        late_run(tmp_path / "split", seed=seed, com=4.0, gain=0.0, level=0.2)
        late_run(tmp_path / "split", seed=seed, com=16.0, gain=0.0, level=c16)
        late_run(tmp_path / "split", seed=seed, com=64.0, gain=0.0, level=c64)
    code, text, _ = judge(capsys, "plateau", tmp_path / "split", "--low", 4, "--others", 16, 64, "--updates", U2)
    assert code == 0 and verdict_of(text) == "not shown", text
    assert "code's: yes" in text and "text's: no (contradicts B26: no premature plateau)" in text, text
    for seed, c16 in zip((1, 2, 3), (0.4, 0.1, 0.1)):
        late_run(tmp_path / "agree", seed=seed, com=4.0, gain=0.0, level=0.2)
        late_run(tmp_path / "agree", seed=seed, com=16.0, gain=0.0, level=c16)
        late_run(tmp_path / "agree", seed=seed, com=64.0, gain=0.0, level=0.4)
    code, text, _ = judge(capsys, "plateau", tmp_path / "agree", "--low", 4, "--others", 16, 64, "--updates", U2)
    assert code == 0 and verdict_of(text) == "yes", text
    low, others = {s: (0.0, 0.0, 0.2) for s in (1, 2, 3)}, {1: 0.4, 2: 0.4, 3: 0.1}
    assert rule.plateau_rule(low, others, 0.2)[1] == "not shown"
    assert rule.plateau_rule(low, others, 0.3)[1] == "yes"
    assert rule.plateau_rule(low, {1: 0.2, 2: 0.2, 3: 0.2}, 0.2)[1] == "no (contradicts B26: no premature plateau)"


def test_plateau_rule_reads_an_extension_from_a_checkpoint(tmp_path, capsys):
    """A run continued from a 200-update run's checkpoint logs updates 201-400 only: its last 80 updates are all
    there, so it is judged as a run of 400."""
    for seed in (1, 2, 3):
        late_run(tmp_path, seed=seed, com=4.0, gain=0.0, level=0.1, first=201)
        late_run(tmp_path, seed=seed, com=16.0, gain=0.2, level=0.3, first=201)
    code, text, _ = judge(capsys, "plateau", tmp_path, "--low", 4, "--others", 16, "--updates", U2)
    assert code == 0 and verdict_of(text) == "yes", text


def test_plateau_script_draws_and_judges_its_runs(tmp_path):
    """SCALE=laptop DRAW_ONLY=1 bash benchmark/beukman2026_jax2d_plateau.sh on made-up runs: COM 16 flat at 0.1 over
    its last 80 updates, COMs 256 and 1024 rising to 0.3 (yes). Seed 1's COM 16 continued from its Fig. 5a run's
    checkpoint (updates 201-400 only): its line starts with the Fig. 5a run's, as the runs started over do."""
    import subprocess
    from jax2d_figures import script_env
    source = late_run(tmp_path / "5a", seed=1, com=16.0, gain=0.0, level=0.1, last=U)
    for seed in (1, 2, 3):
        extension = dict(first=201, init_from=str(source / "checkpoints" / "latest.ckpt")) if seed == 1 else {}
        run = late_run(tmp_path / "plateau", seed=seed, com=16.0, gain=0.0, level=0.1, **extension)
        for com in (256.0, 1024.0):
            late_run(tmp_path / "plateau", seed=seed, com=com, gain=0.2, level=0.3)
        for path in (tmp_path / "plateau").iterdir():  # the runs' budget, as their config.json records it
            config = json.loads((path / "config.json").read_text())
            config["args"]["total_timesteps"] = 64 * 128 * U2
            (path / "config.json").write_text(json.dumps(config))
    assert run.exists()
    env = script_env(SCALE="laptop", DRAW_ONLY=1, RUNS_DIR=tmp_path / "plateau", OUT_DIR=tmp_path / "fig",
                     FIG5A_DIR=tmp_path / "5a")
    out = subprocess.run(["bash", str(REPO / "benchmark" / "beukman2026_jax2d_plateau.sh")], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, (out.stdout, out.stderr)
    rows = list(csv.DictReader(open(tmp_path / "fig" / "beukman2026_jax2d_plateau_rule.csv")))
    assert rows[0]["verdict"] == "yes" and {r["COM"] for r in rows} == {"16", "256", "1024"}
    curve = [r for r in csv.DictReader(open(tmp_path / "fig" / "beukman2026_jax2d_plateau.csv"))
             if r["group"] == "COM 16"]
    assert min(float(r["x"]) for r in curve) == 20 * 64 * 128 and all(r["n"] == "3" for r in curve)
