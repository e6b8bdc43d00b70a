"""benchmark/beukman2026_jax2d_placement.py (the Jax2D pilot's rule) on synthetic run directories with hand-computed
answers, and the prefix property the main runs' design relies on (Fig. 8's budgets as prefixes of one run, Fig. 3a
reusing the Fig. 5a runs), checked on the tiny configuration of tests/test_ppo_ewma_jax2d.py."""
import csv
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("placement", REPO / "benchmark" / "beukman2026_jax2d_placement.py")
placement = importlib.util.module_from_spec(spec)
spec.loader.exec_module(placement)


# ---------------------------------------------------------------------------------------------------------
# The prefix property of ppo_ewma_jax2d.py (a real run of the tiny configuration)
# ---------------------------------------------------------------------------------------------------------
NOT_COMPUTED = {"charts/SPS", "wall_time"}  # the clock: the only fields two equal computations may differ in


def logged(run_dir, name="metrics.jsonl"):
    """Every row of a run's log without the clock's fields, in the order written."""
    with open(os.path.join(run_dir, name)) as f:
        return [{k: v for k, v in json.loads(line).items() if k not in NOT_COMPUTED} for line in f]


@pytest.mark.slow
def test_prefix_and_same_com_reload_are_bit_exact(tmp_path):
    """(a) A run of k updates logs exactly the first k updates' rows (losses, episodes, diagnostics, evaluations) of
    the run of 2k updates with the same flags; (b) --init-from the k-update run's final checkpoint with the same COM
    continues to exactly the 2k-update run's rows k+1..2k; (c) the state the 2k-update run kept at update k
    (--keep-checkpoints k, Fig. 3a's phase 1 at SCALE=laptop) is the k-update run's final state, leaf for leaf.
    Evaluation and diagnostics every 4 updates, so both happen inside each half and at its end; k = 16 updates of 16
    steps, so that episodes (256 steps at most) end in each half. Measured: 626 s (214 CPU-s) on 2 cores at load 6,
    270 s (259 CPU-s) at load 3, with the compiled programs cached."""
    import test_ppo_ewma_jax2d as t  # the tiny configuration, its XLA flags and its shared compiled programs
    m = t.m
    k = 16
    every = dict(diagnostics_every=4, eval_every=4)
    m.make_train = t.shared_make_train
    try:
        short, long_, reload = (str(tmp_path / name) for name in ("short", "long", "reload"))
        assert t.run_main(t.tiny(k, **every) + ["--runs-dir", short]) == 0
        assert t.run_main(t.tiny(2 * k, **every) + ["--runs-dir", long_, "--keep-checkpoints", str(k)]) == 0
        ckpt = os.path.join(t.run_dir_of(short), "checkpoints", "latest.ckpt")
        assert t.run_main(t.tiny(2 * k, **every) + ["--init-from", ckpt, "--runs-dir", reload]) == 0
    finally:
        m.make_train = t.MAKE_TRAIN
    short, long_, reload = (t.run_dir_of(d) for d in (short, long_, reload))
    for name in ("metrics.jsonl", "kl_profile.jsonl"):
        full = logged(long_, name)
        first, second = [r for r in full if r["iteration"] <= k], [r for r in full if r["iteration"] > k]
        tags = set().union(*first)
        assert name != "metrics.jsonl" or {"losses/policy_loss", "charts/episodic_return", "charts/solve_rate",
                                           "diagnostics/ddr", "diagnostics/kl_behavior"} <= tags, tags
        assert first and second
        assert logged(short, name) == first, name  # (a) the prefix
        assert logged(reload, name) == second, name  # (b) the reload with its own COM
    kept, final = (m.load_checkpoint(os.path.join(d, "checkpoints", f), m.SCRIPT, {}, "--init-from")
                   for d, f in ((long_, f"iteration_{k}.ckpt"), (short, "latest.ckpt")))  # as --init-from reads them
    assert kept["iteration"] == final["iteration"] == k and len(kept["runner"]) == len(final["runner"]) > 10
    for a, b in zip(kept["runner"], final["runner"]):  # (c) weights, Adam, theta_prox, key, env states
        assert a.dtype == b.dtype and np.array_equal(a, b)

# ---------------------------------------------------------------------------------------------------------
# The placement rule on synthetic pilots: ten 20-update windows per run, 20 episodes per update, so a window's
# training solve rate is (solved episodes) / 400 unless a window gives its updates explicitly
# ---------------------------------------------------------------------------------------------------------
EPISODES = 20  # per update
BATCH_STEPS = 64 * 128


def update_rows(window):
    """A window as 20 (episodes, solved) updates: an int n spreads n solved over 20 x 20 episodes evenly."""
    if isinstance(window, list):
        return window
    return [(EPISODES, window // 20 + (i < window % 20)) for i in range(20)]


def write_pilot_run(root, com, clip_coef, windows, evals=(0.1, 0.2, 0.3, 0.4, 0.5), kls=None, stamp=None):
    """A finished run as ppo_ewma_jax2d.py writes it: per update one row per finished episode, then one row of
    charts/train_solve_rate and the losses (with the diagnostics every 20 updates); an evaluation every 40."""
    stamp = stamp or int(1000 + com * 10 + clip_coef * 100)
    run = root / f"Jax2D-Locomotion-l__ppo_ewma_jax2d__1__{stamp}"
    run.mkdir(parents=True)
    config = {"args": {"exp_name": "ppo_ewma_jax2d", "env_id": "Jax2D-Locomotion-l", "seed": 1, "ewma_com": com,
                       "clip_coef": clip_coef, "task_seed": 152}, "script": "ppo_ewma_jax2d"}
    (run / "config.json").write_text(json.dumps(config))
    kls = kls or [0.01 * (j + 1) for j in range(len(windows))]
    lines, it = [], 0
    for w, window in enumerate(windows):
        for episodes, solved in update_rows(window):
            it += 1
            step = it * BATCH_STEPS
            for e in range(episodes):
                lines.append({"global_step": step, "iteration": it, "wall_time": it, "charts/episodic_return":
                              1.0 if e < solved else 0.0, "charts/episodic_length": 100})
            row = {"global_step": step, "iteration": it, "wall_time": it, "losses/policy_loss": 0.0}
            if episodes:
                row["charts/train_solve_rate"] = solved / episodes
            if it % 20 == 0:
                row.update({"diagnostics/kl_behavior": kls[it // 20 - 1], "diagnostics/ddr": 1.0})
            lines.append(row)
            if it % 40 == 0:
                lines.append({"global_step": step, "iteration": it, "wall_time": it,
                              "charts/solve_rate": evals[it // 40 - 1]})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (run / "summary.json").write_text(json.dumps({"status": "finished", "iteration": it}))
    return run


# windows as solved episodes out of 400; hand values below are these / 400
C_STAR_64 = [20, 40, 60, 80, 100, 120, 130, 140, 150, 160]  # W1 .05, MID .25, FINAL .40
PLATEAU_16 = [20, 40, 55, 60, 60, 60, 61, 60, 60, 61]  # BEST .1525 >= .08; FINAL - MID .0025; FINAL .1525 <= .35
COLLAPSED = [20, 24, 10, 8, 8, 8, 8, 8, 8, 8]  # BEST .06 < W1 + .03 = .08
NEAR_STAR = [20, 30, 40, 60, 80, 100, 120, 130, 140, 152]  # FINAL .38 > .40 - .05: neither
TOO_HIGH = [20, 22, 24, 26, 28, 30, 40, 50, 60, 80]  # FINAL .20 <= .35, FINAL - MID = .20 - .07 > .01
PPO_REF = [20, 40, 60, 80, 100, 110, 120, 120, 120, 120]  # FINAL .30
PPO_PLATEAU = [20, 40, 60, 60, 60, 60, 60, 60, 61, 60]  # BEST .1525, FINAL - MID 0, FINAL .15 <= .25


def pilot(root, coms, eps=None):
    """coms: {COM: windows} (epsilon 0.2); eps: {epsilon: windows} of plain PPO."""
    for com, windows in coms.items():
        write_pilot_run(root, com, 0.2, windows)
    for e, windows in (eps or {}).items():
        write_pilot_run(root, 0, e, windows)
    return root


def place(tmp_path, root):
    """The placement of a synthetic pilot: (exit code, PREFIX.json, PREFIX.csv's rows by arm)."""
    prefix = tmp_path / "out" / "placement"
    code = placement.main([str(root), "--out", str(prefix)])
    if code != 0:
        return code, None, None
    with open(f"{prefix}.csv", encoding="utf-8") as f:
        rows = {r["arm"]: r for r in csv.DictReader(f)}
    return code, json.loads(pathlib.Path(f"{prefix}.json").read_text(encoding="utf-8")), rows


def test_clean_bracket_with_collapsed_low_com_and_fig5b(tmp_path):
    """COM 4 collapses, 16 plateaus, 64 is C*, 256 is near it, 1024 too high; epsilon 0.8 plateaus against 0.2.
    COM 4's first window mixes updates of 10 and 30 episodes: pooled by episodes, not by updates."""
    mixed = [(10, 5)] * 10 + [(30, 0)] * 10  # 50 of 400 solved: .125 (the mean of the updates' rates would be .25)
    root = pilot(tmp_path / "runs", {4: [mixed] + COLLAPSED[1:], 16: PLATEAU_16, 64: C_STAR_64, 256: NEAR_STAR,
                                     1024: TOO_HIGH}, {0.2: PPO_REF, 0.8: PPO_PLATEAU})
    code, out, rows = place(tmp_path, root)
    assert code == 0
    assert (out["c_star"], out["c_low"], out["c_high"]) == (64, 16, 1024)
    assert out["coms"] == [16, 64, 256, 1024] and out["updates"] == 200 and out["fig3a"] == [16, 64]
    assert out["fig5b"] is True and out["bracketed"] == {"low": True, "high": True}
    assert out["pilot_runs_dir"] == str(root)
    classes = {label: arm["class"] for label, arm in out["arms"].items()}
    assert classes == {"COM 4, ε 0.2": "collapsed", "COM 16, ε 0.2": "plateaus", "COM 64, ε 0.2": "C*",
                       "COM 256, ε 0.2": "neither", "COM 1024, ε 0.2": "too high", "PPO, ε 0.2": "ε reference",
                       "PPO, ε 0.8": "plateaus"}
    com4 = out["arms"]["COM 4, ε 0.2"]
    assert com4["w1"] == pytest.approx(50 / 400) and com4["best"] == pytest.approx(50 / 400)  # 24/400 < 50/400
    com16 = out["arms"]["COM 16, ε 0.2"]
    assert (com16["com"], com16["clip_coef"]) == (16, 0.2)
    assert (com16["w1"], com16["mid"], com16["final"], com16["best"]) == pytest.approx((0.05, 0.15, 0.1525, 0.1525))
    assert set(com16) == {"com", "clip_coef", "w1", "mid", "final", "best", "class"}
    assert set(out) == {"c_star", "c_low", "c_high", "coms", "updates", "fig3a", "fig5b", "bracketed", "arms",
                        "pilot_runs_dir"}
    row = rows["COM 16, ε 0.2"]
    assert row["best_window"] == "121-140" and float(row["final_minus_mid"]) == pytest.approx(0.0025)
    assert float(row["final_eval"]) == 0.5 and row["final_eval_iteration"] == "200"  # the evaluation at update 200
    assert float(row["kl_behavior_median"]) == pytest.approx(0.055)  # median of .01 ... .10: (.05 + .06) / 2
    md = (tmp_path / "out" / "placement.md").read_text(encoding="utf-8")
    assert "C* = 64" in md and "main COM grid: 16, 64, 256, 1024" in md and "Fig. 5b: runs" in md


def test_nothing_plateaued_extends_x2_above_the_highest_collapse(tmp_path):
    """COMs 4 and 16 collapse: C_low = 2 x 16 = 32, not bracketed; the grid keeps C* and its x4 steps; U = 200 (C_low
    was not measured); epsilon 0.8 collapses: no Fig. 5b."""
    root = pilot(tmp_path / "runs", {4: COLLAPSED, 16: COLLAPSED, 64: C_STAR_64, 256: NEAR_STAR, 1024: TOO_HIGH},
                 {0.2: PPO_REF, 0.8: COLLAPSED})
    code, out, _ = place(tmp_path, root)
    assert code == 0
    assert (out["c_star"], out["c_low"], out["c_high"]) == (64, 32, 1024)
    assert out["coms"] == [32, 64, 256, 1024] and out["fig3a"] == [32, 64] and out["updates"] == 200
    assert out["bracketed"] == {"low": False, "high": True} and out["fig5b"] is False
    assert out["arms"]["PPO, ε 0.8"]["class"] == "collapsed"
    assert "not bracketed: no COM plateaued" in (tmp_path / "out" / "placement.md").read_text(encoding="utf-8")


def test_no_too_high_com_extends_x4_above_the_grid(tmp_path):
    """COM 1024 ends within 0.05 of C* (neither): C_high = 4 x 1024, not bracketed."""
    root = pilot(tmp_path / "runs", {4: COLLAPSED, 16: PLATEAU_16, 64: C_STAR_64, 256: NEAR_STAR, 1024: NEAR_STAR})
    code, out, _ = place(tmp_path, root)
    assert code == 0
    assert (out["c_star"], out["c_low"], out["c_high"]) == (64, 16, 4096)
    assert out["coms"] == [16, 64, 256, 1024, 4096] and out["bracketed"] == {"low": True, "high": False}
    assert out["fig5b"] is False  # no plain-PPO arms
    assert "not bracketed: no COM too high" in (tmp_path / "out" / "placement.md").read_text(encoding="utf-8")


def test_creeping_plateau_asks_for_300_updates_and_no_fig5b(tmp_path):
    """C_low's FINAL - MID = 63/400 - 60/400 = .0075: a plateau (<= .01) still creeping (> .005): U = 300.
    Epsilon 0.8 ends at .28, within .05 of epsilon 0.2's .30: neither, so Fig. 5b does not run."""
    creeping = [20, 40, 55, 60, 60, 60, 61, 61, 62, 63]  # BEST = FINAL .1575
    root = pilot(tmp_path / "runs", {4: COLLAPSED, 16: creeping, 64: C_STAR_64, 256: NEAR_STAR, 1024: TOO_HIGH},
                 {0.2: PPO_REF, 0.8: [20, 40, 60, 80, 100, 105, 108, 110, 111, 112]})
    code, out, _ = place(tmp_path, root)
    assert code == 0
    assert out["c_low"] == 16 and out["arms"]["COM 16, ε 0.2"]["class"] == "plateaus" and out["updates"] == 300
    assert out["arms"]["PPO, ε 0.8"]["class"] == "neither" and out["fig5b"] is False


def test_a_run_short_of_200_updates_is_refused(tmp_path, capsys):
    root = pilot(tmp_path / "runs", {16: PLATEAU_16, 64: C_STAR_64})
    short = write_pilot_run(root, 256, 0.2, NEAR_STAR[:9] + [[(EPISODES, 7)] * 19])  # 199 updates
    code, _, _ = place(tmp_path, root)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and str(short) in err[0] and "199 of the 200" in err[0], err


def test_pilot_script_prints_the_placement(tmp_path):
    """SCALE=laptop DRAW_ONLY=1 bash benchmark/beukman2026_jax2d_pilot.sh: the three figures, then the placement."""
    root = pilot(tmp_path / "runs", {4: COLLAPSED, 16: PLATEAU_16, 64: C_STAR_64, 256: NEAR_STAR, 1024: TOO_HIGH},
                 {0.2: PPO_REF, 0.8: PPO_PLATEAU})
    env = {k: v for k, v in os.environ.items() if k not in ("DRY_RUN", "SLURM", "FLAGS", "COMS", "EPSILONS")}
    env.update(SCALE="laptop", DRAW_ONLY="1", RUNS_DIR=str(root), OUT_DIR=str(tmp_path / "fig"), PYTHON=sys.executable)
    out = subprocess.run(["bash", str(REPO / "benchmark" / "beukman2026_jax2d_pilot.sh")], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "C* = 64" in out.stdout and "main COM grid: 16, 64, 256, 1024" in out.stdout
    placement = json.loads((tmp_path / "fig" / "beukman2026_jax2d_placement.json").read_text(encoding="utf-8"))
    assert placement["coms"] == [16, 64, 256, 1024]
    assert (tmp_path / "fig" / "beukman2026_jax2d_pilot.png").stat().st_size > 0
