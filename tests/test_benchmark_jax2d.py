"""benchmark/beukman2026_fig{3a,4,5a,5b,6,7,8,9,12}.sh (issue 17): each script's grid, budgets and refusals from its
DRY_RUN output. Every script drawing its figures from run directories is tested in test_ppo_ewma_jax2d.py, whose real
tiny run serves as the template (helpers: tests/jax2d_figures.py)."""
from jax2d_figures import commands, flags_for, run_script

from cleanrl_scaling.utils.rundirs import parse_flags


def test_dry_runs_print_the_grids_and_honour_the_budgets(tmp_path):
    expected = {"3a": 2, "4": 4 * 4 * 2, "5a": 7, "5b": 6, "6": 6 * 3 + 6 * 4, "7": 2 * (3 + 4), "8": 2 * (8 + 5),
                "9": 2 * 3, "12": 7 * 5}
    for fig, count in expected.items():
        flags = flags_for(fig)
        out = run_script(fig, DRY_RUN=1, RUNS_DIR=tmp_path / fig, SEEDS=1, TOTAL=4096, FLAGS=flags, ITERATIONS=3,
                         NUM_ENVS_LIST="16 64", BUDGETS="2048 4096")
        if fig in ("7", "8"):  # TOTAL does not apply there: refused in one line, nothing launched
            assert out.returncode == 2 and out.stdout == "" and len(out.stderr.strip().splitlines()) == 1
            assert ("ITERATIONS" if fig == "7" else "BUDGETS") in out.stderr
            out = run_script(fig, DRY_RUN=1, RUNS_DIR=tmp_path / fig, SEEDS=1, FLAGS=flags, ITERATIONS=3,
                             NUM_ENVS_LIST="16 64", BUDGETS="2048 4096")
        assert out.returncode == 0, out.stderr
        runs = [parse_flags(c) for c in commands(out.stdout)]
        assert len(runs) == count, (fig, out.stdout)
        assert all(r["num_tasks"] == "8" and r["num_steps"] == "16" and r["seed"] == "1" for r in runs)
        totals = {(r.get("num_envs"), r["total_timesteps"]) for r in runs}
        if fig == "7":  # a fixed number of updates: N x 16 steps x 3 iterations
            assert totals == {("16", str(16 * 16 * 3)), ("64", str(64 * 16 * 3))}
        elif fig == "8":
            assert {t for _, t in totals} == {"2048", "4096"} and all(r["diagnostics_every"] == "5" for r in runs)
        else:
            assert {t for _, t in totals} == {"4096"}
        if fig == "6":  # B26 §4.2's epsilon = 0 is in the grid
            assert {r["clip_coef"] for r in runs if "clip_coef" in r} == {"0", "0.1", "0.2", "0.4"}
        if fig == "9":
            assert {(r["num_envs"], r["scaling_recipe"]) for r in runs} == {
                (n, s) for n in ("16", "64") for s in ("more-minibatches", "larger-minibatches", "sqrt-lr")}
        if fig == "3a":
            assert "phase 2: no finished phase-1 run" in out.stdout
    for fig, env, words in [("9", dict(TOTAL=16 * 256 - 1, NUM_ENVS_LIST="8 16"), ["TOTAL=4095", "16 envs"]),
                            ("5a", dict(TOTAL="1e6"), ["TOTAL=1e6"]), ("3a", dict(TOTAL=10, TOTAL2=5), ["TOTAL2=5"]),
                            ("9", dict(FLAGS="--num-envs 8"), ["--num-envs"])]:
        out = run_script(fig, DRY_RUN=1, RUNS_DIR=tmp_path / "x", **env)
        err = out.stderr.strip().splitlines()
        assert out.returncode == 2 and out.stdout == "" and len(err) == 1 and all(w in err[0] for w in words), err
