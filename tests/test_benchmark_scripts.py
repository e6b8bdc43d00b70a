"""benchmark/*.sh: each Jax2D script's grid, budgets and refusals from its DRY_RUN output, Fig. 3a's
reloads, one WORKERS default, the H25 scripts drawing their KL profiles, and gpu_jax_check.sh's command lines. Every script drawing its figures from run directories is tested in test_ppo_ewma_jax2d.py, whose real
tiny run serves as the template (helpers: tests/jax2d_figures.py)."""
import csv
import json
import math
import os
import re
import subprocess
import sys

import pytest

from jax2d_figures import REPO, commands, flags_for, run_script, script_env

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
                            ("9", dict(FLAGS="--num-envs 8"), ["--num-envs"]), ("5a", dict(BAND="ci90"), ["BAND=ci90"])]:
        out = run_script(fig, DRY_RUN=1, RUNS_DIR=tmp_path / "x", **env)
        err = out.stderr.strip().splitlines()
        assert out.returncode == 2 and out.stdout == "" and len(err) == 1 and all(w in err[0] for w in words), err


@pytest.mark.parametrize("script, env, words", [
    ("mayor2025_fig1b", dict(TOTAL=5000), ["TOTAL=5000", "8192"]),  # 64 x 128 and 8 x 1024
    ("mayor2025_fig1a", dict(TOTAL="1e8"), ["TOTAL=1e8", "1024"]),
    ("honari2025_nxt", dict(TOTAL_TIMESTEPS=49999), ["TOTAL_TIMESTEPS=49999", "50000"]),
    ("honari2025_minibatch", dict(TOTAL_TIMESTEPS=-1), ["TOTAL_TIMESTEPS=-1"]),
])
def test_m25_and_h25_budgets_below_one_update_are_refused_in_one_line(script, env, words):
    out = subprocess.run(["bash", str(REPO / "benchmark" / f"{script}.sh")], capture_output=True, text=True,
                         env=script_env(DRY_RUN=1, **env), timeout=120)
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and out.stdout == "" and len(err) == 1 and all(w in err[0] for w in words), err


def write_finished(run_dir, config: dict, rows=(), profile=(), status="finished"):
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if profile:
        (run_dir / "kl_profile.jsonl").write_text("".join(json.dumps(p) + "\n" for p in profile))
    (run_dir / "summary.json").write_text(json.dumps({"status": status}))


def test_fig3a_reloads_each_finished_run_once(tmp_path):
    """Phase 2 lists one reload per *finished* phase-1 run and COM (the other COM, and its own as the reference; an
    interrupted run is not reloaded), shows them in DRY_RUN, and does not repeat one once it finished."""
    runs = tmp_path / "runs"
    for seed, status in ((1, "finished"), (2, "interrupted")):
        run = runs / f"Jax2D-Locomotion-l__com2__{seed}__100"
        write_finished(run, {"script": "ppo_ewma_jax2d", "args": {"exp_name": "com2", "ewma_com": 2.0, "seed": seed,
                                                                  "init_from": None}}, status=status)
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "latest.ckpt").write_bytes(b"x")
    env = dict(DRY_RUN=1, RUNS_DIR=runs, SEEDS=1, TOTAL=4096, TOTAL2=8192, FLAGS="--num-envs 8 --num-steps 16")
    out = run_script("3a", **env)
    assert out.returncode == 0, out.stderr
    reloads = [parse_flags(c) for c in commands(out.stdout) if "--init-from" in c]
    assert sorted((r["exp_name"], r["ewma_com"], r["seed"]) for r in reloads) == [
        ("com2_to_2", "2", "1"), ("com2_to_32", "32", "1")]
    ckpt = str(runs / "Jax2D-Locomotion-l__com2__1__100" / "checkpoints" / "latest.ckpt")
    assert all(r["init_from"] == ckpt for r in reloads)
    argv = [c for c in commands(out.stdout) if "com2_to_32" in c][0]
    write_finished(runs / "reloaded" / "Jax2D-Locomotion-l__com2_to_32__1__200",
                   {"script": "ppo_ewma_jax2d", "argv": argv, "args": {"exp_name": "com2_to_32"}})
    out = run_script("3a", **env)
    left = [parse_flags(c)["exp_name"] for c in commands(out.stdout) if "--init-from" in c]
    assert left == ["com2_to_2"] and "1 skipped as finished" in out.stdout


def test_workers_default_is_one_everywhere():
    """One WORKERS default, stated once in benchmark/README.md."""
    defaults = {p.name: re.findall(r"WORKERS=\$\{WORKERS:-(\d+)\}", p.read_text())
                for p in (REPO / "benchmark").glob("*.sh")}
    assert {d for found in defaults.values() for d in found} == {"1"}
    readme = (REPO / "benchmark" / "README.md").read_text()
    assert re.findall(r"`WORKERS` \((\d+)", readme) == ["1"]


@pytest.mark.parametrize("name, figure, kept", [
    ("honari2025_nxt", "honari2025_fig3", {"1000x50", "100x500"}),
    # the same two aggregation commands on the 20-run grid: slow on a loaded 2-core machine, so not in the default run
    pytest.param("honari2025_minibatch", "honari2025_fig2",
                 {"500x100 : 50-sample minibatches", "500x100 : 1000-sample minibatches"}, marks=pytest.mark.slow),
])
def test_honari_scripts_draw_returns_and_kl_profiles(name, figure, kept, tmp_path):
    """H25 Figs. 2-3: both scripts end with the KL profile of kl_profile.jsonl (aggregate kl-profile), drawn here from
    finished runs of their own grid (the launcher finds them all finished and starts nothing); one backend for all."""
    runs, out_dir = tmp_path / name, tmp_path / "figures"
    env = script_env(DRY_RUN=1, RUNS_DIR=runs, OUT_DIR=out_dir, ENV_IDS="Ant-v4", TOTAL_TIMESTEPS=50000)
    script = str(REPO / "benchmark" / f"{name}.sh")
    dry = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=120)
    argvs = commands(dry.stdout)
    assert dry.returncode == 0 and len(argvs) == (20 if name.endswith("minibatch") else 12)
    assert {parse_flags(a)["env_backend"] for a in argvs} == {"envpool"}
    for i, argv in enumerate(argvs):
        flags = parse_flags(argv)
        key = flags["minibatch_size"] if name.endswith("minibatch") else flags["num_envs"]
        args = {"exp_name": "ppo_continuous_mujoco", "env_id": flags["env_id"], "seed": int(flags["seed"]),
                "num_envs": int(flags["num_envs"]), "num_steps": int(flags["num_steps"]),
                "minibatch_size": int(flags.get("minibatch_size", 0))}
        rows = [{"global_step": s, "iteration": s // 100, "wall_time": s / 100.0,
                 "charts/episodic_return": float(flags["seed"]) * s} for s in (100, 1000)]
        profile = [{"global_step": s, "iteration": s // 100, "seq_kl": [0.1, 0.2], "ref_kl": [0.3, 0.1]}
                   for s in (100, 1000)]
        write_finished(runs / f"Ant-v4__ppo_continuous_mujoco__{flags['seed']}__{i}__{key}",
                       {"script": "ppo_continuous_mujoco", "argv": argv, "args": args}, rows, profile)
    env.pop("DRY_RUN")
    out = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "nothing to do" in out.stdout
    for ext in ("png", "pdf", "csv"):
        assert (out_dir / f"{name}_Ant-v4.{ext}").stat().st_size > 0
        assert (out_dir / f"{figure}.{ext}").stat().st_size > 0
    with open(out_dir / f"{figure}.csv") as f:
        profile_rows = list(csv.DictReader(f))
    assert {r["run"].split("__")[2] for r in profile_rows} == {"4"}  # seed 4 has the highest final return
    assert {r["group"] for r in profile_rows} == kept


def dry_run(script, **env):
    return subprocess.run(["bash", str(REPO / "benchmark" / f"{script}.sh")], capture_output=True, text=True,
                          env=script_env(DRY_RUN=1, **env), timeout=120)


def test_m25_coverage_and_gamma_laptop_grids(tmp_path):
    """SCALE=laptop: one game, 2 seeds, 250k (Fig. 2, run here) or 500k steps, features saved for the
    coverage metric."""
    grids = {"mayor2025_fig2": ({("8", "128"), ("32", "32"), ("128", "8")}, None, "250000"),
             "mayor2025_fig9": ({("8", "128"), ("32", "128")}, None, "500000"),
             "mayor2025_fig12": ({("8", "128"), ("64", "128")}, {"0.95", "0.99", "0.999"}, "500000")}
    for script, (settings, gammas, total) in grids.items():
        out = dry_run(script, SCALE="laptop", RUNS_DIR=tmp_path / script)
        assert out.returncode == 0, out.stderr
        runs = [parse_flags(c) for c in commands(out.stdout)]
        assert {r["env_id"] for r in runs} == {"Qbert-v5"} and {r["seed"] for r in runs} == {"1", "2"}
        assert {r["total_timesteps"] for r in runs} == {total} and all(r["cleanrl_compat"] for r in runs)
        assert {(r["num_envs"], r["num_steps"]) for r in runs} == settings
        if gammas:
            assert {r["gamma"] for r in runs} == gammas and len(runs) == 2 * 2 * 3
        else:
            assert {r["save_features_every"] for r in runs} == {"25"} and {r["features_states"] for r in runs} == {"1024"}
    paper = [parse_flags(c) for c in commands(dry_run("mayor2025_fig2", RUNS_DIR=tmp_path / "p").stdout)]
    assert len(paper) == 10 * 5 * 3 and {r["save_features_every"] for r in paper} == {"2000"}


def test_scale_is_checked_in_one_line(tmp_path):
    for script, scale in (("mayor2025_fig11", "laptop"), ("mayor2025_fig2", "huge")):
        out = dry_run(script, SCALE=scale, RUNS_DIR=tmp_path / "x")
        err = out.stderr.strip().splitlines()
        assert out.returncode == 2 and out.stdout == "" and len(err) == 1 and f"SCALE={scale}" in err[0], err


SFL_GRIDS = {"11": 3 * 4 * 3, "20": 3 * 4 * 3, "15": 3 * 3 * 3, "16": 3 * 3 * 3, "17": 3 * 2 * 3, "18": 3 * 4 * 3,
             "19": 3 * 3 * 3}


def test_sfl_dry_runs_print_b26_grids(tmp_path):
    """The SFL figure scripts (B26 Figs. 11, 15-20): sfl_kinetix_jax.py commands, s/m/l x the figure's settings x 3
    seeds; every command passes the script's own validation, and the presets resolve as B26 Table 3 / App. D."""
    import tyro
    from cleanrl_scaling import sfl_kinetix_jax as sfl
    for fig, count in SFL_GRIDS.items():
        out = run_script(fig, DRY_RUN=1, RUNS_DIR=tmp_path / fig)
        assert out.returncode == 0, out.stderr
        lines = [line for line in out.stdout.splitlines() if line and not line.startswith("#")]
        assert all(line.split()[1] == "cleanrl_scaling/sfl_kinetix_jax.py" for line in lines)
        argvs = commands(out.stdout)
        runs = [parse_flags(c) for c in argvs]
        assert len(runs) == count, (fig, out.stdout)
        assert {r["seed"] for r in runs} == {"1", "2", "3"} and {r["env_size"] for r in runs} == {"s", "m", "l"}
        resolved = []
        for argv in argvs:
            args = tyro.cli(sfl.Args, args=argv)
            resolved.append((args, sfl.validate(args, argv)))
        if fig in ("11", "20"):
            assert {r["preset"] for r in runs} == {"2048", "8192", "65536", "1m"}
            envs = {a.preset: (a.num_envs, a.sfl_num_levels, a.sfl_update_period, a.sfl_buffer_size, s["num_minibatches"],
                               s["learning_rate"]) for a, s in resolved}
            assert envs == {"2048": (2048, 12288, 128, 1024, 32, 5e-5), "8192": (8192, 262144, 256, 8192, 128, 5e-5),
                            "65536": (65536, 262144, 32, 8192, 1024, 5e-5),
                            "1m": (1048576, 4194304, 2, 8192, 1024, 2e-4)}
        elif fig in ("15", "16"):
            lrs = {s["num_minibatches"]: s["learning_rate"] for _, s in resolved}
            assert set(lrs) == {32, 1024, 8192} and all(a.num_envs == 1048576 for a, _ in resolved)
            assert math.isclose(lrs[1024], 2e-4) and math.isclose(lrs[32], 5e-5 * math.sqrt(512))  # App. D at 1024
        elif fig == "17":
            assert {r["learning_rate"] for r in runs} == {"5e-5", "1e-5"} and all(a.num_envs == 8192 for a, _ in resolved)
        elif fig == "18":
            assert {r["ewma_com"] for r in runs} == {"0", "64", "256", "1024"}
        elif fig == "19":
            assert {(a.exp_name, a.sfl_num_levels, a.sfl_buffer_size) for a, _ in resolved} == {
                ("baseline", 262144, 8192), ("more_filtering", 4194304, 8192),
                ("more_filtering_larger_buffer", 4194304, 131072)}
    for fig, env, words in [("11", dict(TOTAL=1000), ["TOTAL=1000", "2048"]), ("11", dict(PRESETS="4096"), ["4096"]),
                            ("15", dict(FLAGS="--num-minibatches 64"), ["--num-minibatches"]),
                            ("17", dict(TOTAL=8192 * 256 - 1), ["TOTAL=2097151"])]:
        out = run_script(fig, DRY_RUN=1, RUNS_DIR=tmp_path / "x", **env)
        err = out.stderr.strip().splitlines()
        assert out.returncode == 2 and out.stdout == "" and len(err) == 1 and all(w in err[0] for w in words), err
    slurm = run_script("17", DRY_RUN=1, SLURM=1, SIZES="s", LRS="1e-5", SEEDS="1", RUNS_DIR=tmp_path / "slurm")
    assert slurm.returncode == 0 and "#SBATCH --array=0-0" in slurm.stdout


def test_h25_and_b26_laptop_grids(tmp_path):
    """SCALE=laptop: H25 on HalfCheetah and Walker2d, 4 seeds, 2.1M steps, KL profiles every 4 of the 42
    updates (the 1 x 2048 reference left out). B26's laptop grids: test_b26_jax2d_main_runs_* below."""
    both = {"HalfCheetah-v4", "Walker2d-v4"}
    mb = [parse_flags(c) for c in commands(dry_run("honari2025_minibatch", SCALE="laptop", RUNS_DIR=tmp_path / "m").stdout)]
    assert len(mb) == 2 * 4 * 5 and {r["env_id"] for r in mb} == both and {r["seed"] for r in mb} == set("1234")
    assert {r["minibatch_size"] for r in mb} == {"50", "100", "200", "500", "1000"}
    assert {(r["num_envs"], r["num_steps"], r["total_timesteps"], r["diagnostics_every"]) for r in mb} == {
        ("500", "100", "2100000", "4")} and all(r["kl_profile"] and r["cleanrl_compat"] for r in mb)
    nxt = [parse_flags(c) for c in commands(dry_run("honari2025_nxt", SCALE="laptop", RUNS_DIR=tmp_path / "n").stdout)]
    assert len(nxt) == 2 * 4 * 2 and {r["env_id"] for r in nxt} == both
    assert {(r["num_envs"], r["num_steps"], r["minibatch_size"]) for r in nxt} == {("1000", "50", "1000"),
                                                                                  ("100", "500", "1000")}
    paper = [parse_flags(c) for c in commands(dry_run("honari2025_nxt", RUNS_DIR=tmp_path / "p").stdout)]
    assert len(paper) == 4 * 4 * 3 and {r["total_timesteps"] for r in paper} == {"10000000"}
    out = dry_run("beukman2026_fig5a", COMS="8", RUNS_DIR=tmp_path / "x")
    assert out.returncode == 2 and out.stdout == "" and "COMS=8" in out.stderr


@pytest.mark.parametrize("script, scale", [("beukman2026_fig4", "laptop"), ("beukman2026_fig5a", "huge"),
                                           ("honari2025_nxt", "huge"), ("honari2025_minibatch", "laptop2")])
def test_h25_and_b26_scale_is_checked_in_one_line(script, scale, tmp_path):
    out = dry_run(script, SCALE=scale, RUNS_DIR=tmp_path / "x")
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and out.stdout == "" and len(err) == 1 and f"SCALE={scale}" in err[0], err


def mujoco_runs(script, tmp_path, **env):
    out = dry_run(script, SCALE="laptop", RUNS_DIR=tmp_path / "recipes", **env)
    assert out.returncode == 0, out.stderr
    return commands(out.stdout)


def test_mujoco_recipe_grids_resolve_as_their_pages_say(tmp_path):
    """The laptop grids of the three MuJoCo substitutes, each run's minibatches and lr as ppo_continuous_mujoco
    resolves them (checked by hand: base 64 x 32 = 2048 samples in 32 minibatches of 64, lr 3e-4), and Fig. 8's N
    runs being exactly Fig. 9's larger-minibatches runs, so that the shared RUNS_DIR runs them once."""
    import tyro
    from cleanrl_scaling import ppo_continuous_mujoco as mj

    def resolved(argv):
        s = mj.resolve_scaling(tyro.cli(mj.Args, args=argv))
        return int(s["num_envs"]) if "num_envs" in s else None, s["minibatch_size"], s["num_minibatches"], s["learning_rate"]

    lr = 3e-4
    laptop9 = [parse_flags(a) for a in mujoco_runs("beukman2026_fig9_mujoco", tmp_path)]
    assert len(laptop9) == 2 * 3 * (1 + 4) and {r["num_envs"] for r in laptop9} == {"64", "1024"}
    fig9 = mujoco_runs("beukman2026_fig9_mujoco", tmp_path, NUM_ENVS_LIST="64 256 1024")  # with the middle N
    assert len(fig9) == 2 * 3 * (1 + 2 * 4)
    want = {("64", "none"): (64, 32, lr),
            ("256", "more-minibatches"): (64, 128, lr), ("1024", "more-minibatches"): (64, 512, lr),
            ("256", "larger-minibatches"): (256, 32, lr), ("1024", "larger-minibatches"): (1024, 32, lr),
            ("256", "sqrt-lr"): (256, 32, lr * 2), ("1024", "sqrt-lr"): (1024, 32, lr * 4),
            ("256", "hybrid"): (128, 64, lr * math.sqrt(2)), ("1024", "hybrid"): (128, 256, lr * math.sqrt(2))}
    got = {}
    for argv in fig9:
        f = parse_flags(argv)
        assert f["env_id"] in ("Ant-v4", "Humanoid-v4") and f["total_timesteps"] == "2100000"
        _, mb, nmb, rate = resolved(argv)
        got[(f["num_envs"], f.get("scaling_recipe", "none"))] = (mb, nmb, pytest.approx(rate))
    assert got == want
    for n in ("256", "1024"):  # 'none' from the same base is larger-minibatches, which is why it is not run apart
        base = ["--num-envs", n, "--num-steps", "32", "--num-minibatches", "32", "--total-timesteps", "2000000"]
        assert resolved(base)[1:] == resolved(base + ["--base-num-envs", "64", "--scaling-recipe", "larger-minibatches"])[1:]
    shared = {json.dumps(parse_flags(a), sort_keys=True) for a in fig9}
    fig8 = [parse_flags(a) for a in mujoco_runs("mayor2025_fig8_mujoco", tmp_path, NUM_ENVS_LIST="64 256 1024")]
    assert len(fig8) == 30 and {(r["num_envs"], r["num_steps"]) for r in fig8} == {
        ("64", "32"), ("256", "32"), ("1024", "32"), ("64", "128"), ("64", "512")}
    assert sum(json.dumps(r, sort_keys=True) in shared for r in fig8) == 2 * 3 * 3  # base + both N runs
    laptop8 = [parse_flags(a) for a in mujoco_runs("mayor2025_fig8_mujoco", tmp_path)]
    assert len(laptop8) == 18 and {(r["num_envs"], r["num_steps"]) for r in laptop8} == {
        ("64", "32"), ("1024", "32"), ("64", "512")}
    laptop9 = {json.dumps(r, sort_keys=True) for r in laptop9}
    assert sum(json.dumps(r, sort_keys=True) in laptop9 for r in laptop8) == 2 * 3 * 2  # the base and 1024 x 32
    fig10 = mujoco_runs("beukman2026_fig10_mujoco", tmp_path)
    got = {parse_flags(a)["exp_name"]: resolved(a)[1:3] for a in fig10}
    assert got == {"base": (256, 4), "singla": (4096, 4), "b26": (256, 64)} and len(fig10) == 18
    assert all(parse_flags(a)["update_epochs"] == "5" and parse_flags(a)["num_steps"] == "16" for a in fig10)
    paper = [parse_flags(a) for a in commands(dry_run("beukman2026_fig9_mujoco", RUNS_DIR=tmp_path / "p").stdout)]
    assert {r["num_envs"] for r in paper} == {"64", "256", "1024", "4096"} and len(paper) == 2 * 3 * (1 + 3 * 4)


@pytest.mark.parametrize("script, names", [
    ("beukman2026_fig10_mujoco", ["beukman2026_fig10_mujoco"]),
    ("beukman2026_fig9_mujoco", ["beukman2026_fig9_mujoco", "beukman2026_fig13_mujoco", "beukman2026_fig14_mujoco"]),
    ("mayor2025_fig8_mujoco", ["mayor2025_fig8_mujoco", "mayor2025_fig8_mujoco_by_batch"])])
def test_mujoco_recipe_scripts_draw_one_figure_per_task(script, names, tmp_path):
    """Every figure of the MuJoCo substitutes is drawn per task (NAME_<env_id>), from that task's runs
    only: Ant's returns are never averaged with Humanoid's. Drawn from finished runs of the script's own grid, so
    the launcher starts nothing."""
    runs, out_dir = tmp_path / "recipes", tmp_path / "figures"
    grid = "64 256 1024"  # with the middle N, so that Fig. 14's sweep has more than one point past the base
    argvs = mujoco_runs(script, tmp_path, NUM_ENVS_LIST=grid)
    scale = {"Ant-v4": 1000.0, "Humanoid-v4": 10.0}
    for i, argv in enumerate(argvs):
        flags = parse_flags(argv)
        args = {"exp_name": "ppo_continuous_mujoco", "update_epochs": "10", "scaling_recipe": "none",  # the defaults
                **{k: flags[k] for k in flags if k != "seed"}, "seed": int(flags["seed"])}
        final = scale[flags["env_id"]] * int(flags["num_envs"]) / 64
        rows = [{"global_step": s, "iteration": s // 100, "wall_time": s / 100.0, "charts/SPS": 1000.0,
                 "charts/episodic_return": final * s / 1000} for s in (100, 1000)]
        resolved = {"batch_size": int(flags["num_envs"]) * int(flags["num_steps"])}  # what the script records
        write_finished(runs / f"{flags['env_id']}__{args['exp_name']}__{flags['seed']}__{i}",
                       {"script": "ppo_continuous_mujoco", "argv": argv, "args": args, "resolved": resolved}, rows)
    out = subprocess.run(["bash", str(REPO / "benchmark" / f"{script}.sh")], capture_output=True, text=True,
                         env=script_env(SCALE="laptop", NUM_ENVS_LIST=grid, RUNS_DIR=runs, OUT_DIR=out_dir),
                         timeout=600)
    assert out.returncode == 0 and "nothing to do" in out.stdout, out.stderr[-2000:]
    for name in names:
        for env_id, factor in scale.items():
            rows = list(csv.DictReader(open(out_dir / f"{name}_{env_id}.csv")))
            assert rows and {r["env_id"] for r in rows} == {env_id}
            values = [float(r["mean"]) for r in rows if r["metric"] == "charts/episodic_return"]
            assert all(0 <= v <= factor * 1024 / 64 for v in values), (name, env_id, max(values))  # not pooled
            if name.endswith("by_batch"):  # M25 Fig. 8: both arms on one axis, the base (2048 samples) on each
                got = {(r["group"], int(r["batch_size"])) for r in rows}
                assert {b for g, b in got if g.startswith("grown through N")} == {2048, 8192, 32768}
                assert {b for g, b in got if g.startswith("grown through T")} == {2048, 8192, 32768}
            if name.endswith("fig14_mujoco"):  # final return at N: the last logged return, factor x N / 64
                got = {int(r["num_envs"]): float(r["mean"]) for r in rows if r["group"] == "more-minibatches"}
                assert got == {n: pytest.approx(factor * n / 64) for n in (256, 1024)}


@pytest.mark.parametrize("env, words", [(dict(SCALE="huge"), ["SCALE=huge"]),
                                        (dict(NUM_ENVS_LIST="32 256"), ["NUM_ENVS_LIST", "base"]),
                                        (dict(NUM_ENVS_LIST="64 100"), ["100", "multiple"]),
                                        (dict(TOTAL="1000"), ["TOTAL=1000"])])
def test_mujoco_recipe_scripts_refuse_bad_settings_in_one_line(env, words, tmp_path):
    for script in ("beukman2026_fig9_mujoco", "beukman2026_fig10_mujoco", "mayor2025_fig8_mujoco"):
        out = dry_run(script, RUNS_DIR=tmp_path / "x", **env)
        err = out.stderr.strip().splitlines()
        assert out.returncode == 2 and out.stdout == "" and len(err) == 1 and all(w in err[0] for w in words), err


def test_sfl_learning_check_runs_both_arms_and_tabulates_them(tmp_path):
    """benchmark/sfl_kinetix_learning.sh: SFL and --no-sfl at the same budget and seeds, every command valid
    for the script; benchmark/sfl_kinetix_learning.py reads initial and final solve rates back from run directories."""
    import tyro
    from cleanrl_scaling import sfl_kinetix_jax as sfl
    out = dry_run("sfl_kinetix_learning", RUNS_DIR=tmp_path / "dry")
    assert out.returncode == 0, out.stderr
    argvs = commands(out.stdout)
    runs = [parse_flags(c) for c in argvs]
    assert sorted((r["exp_name"], r["seed"], r.get("sfl", True)) for r in runs) == [
        ("no_sfl", "1", False), ("no_sfl", "2", False), ("sfl", "1", True), ("sfl", "2", True)]
    assert {r["total_timesteps"] for r in runs} == {"1572864"} and {r["env_size"] for r in runs} == {"s"}
    for argv in argvs:
        args = tyro.cli(sfl.Args, args=argv)
        scaling = sfl.validate(args, argv)
        assert args.total_timesteps // scaling["batch_size"] == 384 and scaling["num_minibatches"] == 8
    bad = dry_run("sfl_kinetix_learning", RUNS_DIR=tmp_path / "dry", TOTAL="100")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "TOTAL=100" in bad.stderr
    # a long run over several stops and resumes: rarer evaluations, stopped runs continue from their checkpoints
    long = dry_run("sfl_kinetix_learning", RUNS_DIR=tmp_path / "dry", TOTAL="20971520", EVAL_EVERY="512", RESUME="1")
    assert long.returncode == 0, long.stderr
    runs = [parse_flags(c) for c in commands(long.stdout)]
    assert {(r["eval_every"], r["total_timesteps"], r["checkpoint_every"]) for r in runs} == {("512", "20971520", "16")}
    assert "resumed from checkpoints" in long.stdout  # the launcher got --resume-unfinished
    bad = dry_run("sfl_kinetix_learning", RUNS_DIR=tmp_path / "dry", EVAL_EVERY="0")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "EVAL_EVERY=0" in bad.stderr

    for arm, seed, rates in [("sfl", 1, [0.3, 0.4, 0.5]), ("sfl", 2, [0.3, 0.35, 0.7]), ("no_sfl", 1, [0.3, 0.3, 0.2])]:
        run = tmp_path / "runs" / f"Kinetix-s__{arm}__{seed}"
        run.mkdir(parents=True)
        (run / "config.json").write_text(json.dumps({"args": {"no_sfl": arm == "no_sfl", "seed": seed}}))
        (run / "summary.json").write_text(json.dumps({"status": "finished", "SPS": 900.0, "filter_share": 0.25}))
        rows = [{"global_step": 4096 * i, "iteration": i, "wall_time": 60.0 * i, "charts/solve_rate_random": r,
                 "charts/solve_rate_handmade": 0.1} for i, r in enumerate(rates)]
        rows.insert(1, {"global_step": 4096, "iteration": 1, "wall_time": 30.0, "sfl/frac_learnable": 0.75,
                        "sfl/learnability_mean": 0.2})
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = subprocess.run(["python", str(REPO / "benchmark" / "sfl_kinetix_learning.py"), str(tmp_path / "runs")],
                           capture_output=True, text=True, timeout=60)
    assert table.returncode == 0, table.stderr
    assert "sfl: random-level solve rate 0.300 -> 0.600 (mean of 2 run(s))" in table.stdout
    assert "no-sfl: random-level solve rate 0.300 -> 0.200 (mean of 1 run(s))" in table.stdout
    assert "| sfl | 2 | finished | 0.30 0.35 0.70 | 0.10 -> 0.10 | 0.75 | 0.200 | 0.25 | 900 | 2.0 |" in table.stdout


def fig1_rule(runs_dir, *flags):
    """benchmark/mayor2025_fig1_rule.py RUNS_DIR FLAGS..., its output captured."""
    return subprocess.run(["python", str(REPO / "benchmark" / "mayor2025_fig1_rule.py"), str(runs_dir), *flags],
                          capture_output=True, text=True, timeout=120)


def kungfu_run(root, seed: int, n: int, t: int, rows):
    """A finished KungFuMaster-v5 run of ppo_atari_envpool at N = n, T = t logging `rows`."""
    write_finished(root / f"KungFuMaster-v5__ppo__{seed}__{n}x{t}",
                   {"script": "ppo_atari_envpool", "args": {"env_id": "KungFuMaster-v5", "seed": seed,
                                                            "num_envs": n, "num_steps": t}}, rows)


def test_m25_fig1a_laptop_grid_and_its_rule(tmp_path):
    """M25 Fig. 1a at laptop scale is KungFuMaster, 3 seeds, 1M steps, N x T = 1024 three ways; the rule script
    judges finished runs by the header's rule (values worked out by hand below)."""
    out = dry_run("mayor2025_fig1a", SCALE="laptop", CORES="1", RUNS_DIR=tmp_path / "1a")
    assert out.returncode == 0, out.stderr
    runs = [parse_flags(c) for c in commands(out.stdout)]
    assert len(runs) == 9 and {r["env_id"] for r in runs} == {"KungFuMaster-v5"}
    assert {r["seed"] for r in runs} == {"1", "2", "3"} and {r["total_timesteps"] for r in runs} == {"1000000"}
    assert {(r["num_envs"], r["num_steps"]) for r in runs} == {("8", "128"), ("32", "32"), ("128", "8")}
    assert all(r["cleanrl_compat"] for r in runs) and {r["checkpoint_every"] for r in runs} == {"100"}
    assert "1 core(s)" in out.stdout and {r["diagnostics_every"] for r in runs} == {"10"}
    # finished runs of 1,000 steps: final = mean return of the episodes ending at step >= 900
    finals = {(8, 128): [10, 20, 30], (32, 32): [31, 40, 50], (128, 8): [5, 25, 35]}
    for (n, t), values in finals.items():
        for seed, v in enumerate(values, 1):
            rows = [{"global_step": 100, "charts/episodic_return": -1e6},  # outside the last 10%: ignored
                    {"global_step": 950, "charts/episodic_return": v - 4}, {"global_step": 1000, "charts/episodic_return": v + 4}]
            kungfu_run(tmp_path / "r", seed, n, t, rows)
    rule = fig1_rule(tmp_path / "r", "--base", "num_envs=8 num_steps=128", "--arm", "4x: num_envs=32 num_steps=32",
                     "--arm", "16x: num_envs=128 num_steps=8", "--out", tmp_path / "t")
    assert rule.returncode == 0, rule.stderr
    table = {r["arm"]: r for r in csv.DictReader(open(tmp_path / "t.csv"))}
    assert float(table["base"]["seed 2"]) == 20 and float(table["base"]["mean"]) == 20
    # 4x: every seed (31, 40, 50) above the base's median 20, D = 40.33 - 20; the smallest resampled difference is
    # 31 - 30 = 1 > 0, so the whole interval lies above 0: better
    assert math.isclose(float(table["4x"]["D vs base"]), 121 / 3 - 20) and table["4x"]["outcome"] == "better"
    # 16x: seed 1 (5) is below the base's median and D = 65/3 - 20 is small: not separated
    assert table["16x"]["outcome"] == "not separated"
    worse = fig1_rule(tmp_path / "r", "--base", "num_envs=32 num_steps=32", "--arm", "x: num_envs=8 num_steps=128")
    assert "| worse |" in worse.stdout, worse.stdout  # the reverse comparison: largest resample 30 - 31 < 0
    bad = fig1_rule(tmp_path / "r", "--base", "num_envs=8", "--arm", "no colon")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "NAME" in bad.stderr


def test_m25_fig1a_eval_reruns_save_and_evaluate_the_final_policies(tmp_path):
    """EVAL=1 runs the 9 laptop runs again into their own folder with --save-model --eval-episodes 30, and the rule
    reads eval/episodic_return: the 30 games of the final policy, all logged at the last step (mean 20 and 40)."""
    out = dry_run("mayor2025_fig1a", SCALE="laptop", EVAL="1")
    assert out.returncode == 0, out.stderr
    runs = [parse_flags(c) for c in commands(out.stdout)]
    assert len(runs) == 9 and all(r["save_model"] and r["eval_episodes"] == "30" for r in runs)
    assert {r["runs_dir"] for r in runs} == {"runs/mayor2025_fig1a_eval"}
    refused = dry_run("mayor2025_fig1a", EVAL="1")  # the paper's grid has no evaluation reruns
    assert refused.returncode == 2 and "SCALE=laptop only" in refused.stderr
    for (n, t), mean in {(8, 128): 20, (32, 32): 40}.items():
        for seed in (1, 2, 3):
            rows = [{"global_step": 1000, "charts/episodic_return": 1e6}]  # the training final: not read here
            rows += [{"global_step": 1000, "eval/episodic_return": mean + seed + d} for d in (-5, 5)]
            kungfu_run(tmp_path / "r", seed, n, t, rows)
    rule = fig1_rule(tmp_path / "r", "--base", "num_envs=8 num_steps=128", "--arm", "4x: num_envs=32 num_steps=32",
                     "--metric", "eval/episodic_return", "--out", tmp_path / "t")
    assert rule.returncode == 0, rule.stderr
    table = {r["arm"]: r for r in csv.DictReader(open(tmp_path / "t.csv"))}
    assert float(table["base"]["seed 2"]) == 22 and math.isclose(float(table["4x"]["D vs base"]), 20)


def test_m25_fig1_rule_prints_returns_with_thousands_separators(tmp_path):
    """The pages paste the rule's markdown: returns of 1,000 and more print as 11,158 (not 1.116e+04), signed in
    the interval; base mean (9,275 + 10,712 + 11,158) / 3 = 10,381.7 and D = 21,000 - 10,381.7 = 10,618.3."""
    for n, values in ((8, [11158, 9275, 10712]), (32, [20000, 21000, 22000])):
        for seed, v in enumerate(values, 1):
            write_finished(tmp_path / "r" / f"g__{seed}__{n}", {"args": {"seed": seed, "num_envs": n}},
                           [{"global_step": 1000, "charts/episodic_return": v}])
    out = fig1_rule(tmp_path / "r", "--base", "num_envs=8", "--arm", "4x N: num_envs=32")
    assert "| base | 11,158 | 9,275 | 10,712 | 10,382 | – | – | (base) |" in out.stdout, out.stdout
    row = r"\| 4x N \| 20,000 \| 21,000 \| 22,000 \| 21,000 \| 10,618 \| \[\+\d{1,2},\d{3}, \+\d{1,2},\d{3}\] \| better \|"
    assert re.search(row, out.stdout), out.stdout


def test_m25_fig1_rule_judges_a_diagnostic_where_lower_is_better(tmp_path):
    """--metric with --lower-is-better (Figs. 3-4: dormant units, weight norm, kurtosis, policy variance fall with N):
    an arm whose every seed is below the base's median, with the whole interval below 0, is 'better'; a run without
    the metric in its last 10% does not count, so no verdict is given."""
    for n, values in ((8, [0.5, 0.6, 0.7]), (32, [0.1, 0.2, 0.3])):
        for seed, v in enumerate(values, 1):
            rows = [{"global_step": 950, "diagnostics/dormant_frac": v}, {"global_step": 1000}]
            write_finished(tmp_path / "r" / f"g__{seed}__{n}", {"args": {"seed": seed, "num_envs": n}}, rows)
    cmd = ["--base", "num_envs=8", "--arm", "4x N: num_envs=32", "--metric", "diagnostics/dormant_frac"]
    lower = fig1_rule(tmp_path / "r", *cmd, "--lower-is-better")
    assert "| better |" in lower.stdout and "| -0.4 |" in lower.stdout, lower.stdout
    higher = fig1_rule(tmp_path / "r", *cmd)
    assert "| worse |" in higher.stdout, higher.stdout
    write_finished(tmp_path / "r" / "g__4__32", {"args": {"seed": 4, "num_envs": 32}}, [{"global_step": 1000}])
    missing = fig1_rule(tmp_path / "r", *cmd, "--seeds", "4")
    assert "no verdict yet" in missing.stdout and "no diagnostics/dormant_frac" in missing.stderr


def test_m25_fig1_rule_iterations_judges_an_equal_updates_window(tmp_path):
    """--iterations LO HI (post hoc, Figs. 3-4's page): the mean over the rows logged at iterations LO..HI replaces
    the last 10% of steps, the same window for base and arm. Base rows 9, 9, 1, 1 and arm rows 0, 0, 5, 5 at
    iterations 1-4 (+ seed / 100): the last 10% (iteration 4) says better, iterations 1-2 say worse."""
    for n, values in ((8, [9, 9, 1, 1]), (32, [0, 0, 5, 5])):
        for seed in (1, 2, 3):
            rows = [{"global_step": 100 * i, "iteration": i, "diagnostics/feature_rank": v + seed / 100}
                    for i, v in enumerate(values, 1)]
            write_finished(tmp_path / "r" / f"g__{seed}__{n}", {"args": {"seed": seed, "num_envs": n}}, rows)
    cmd = ["--base", "num_envs=8", "--arm", "4x N: num_envs=32", "--metric", "diagnostics/feature_rank"]
    last = fig1_rule(tmp_path / "r", *cmd)
    assert "| better |" in last.stdout and "| 4 |" in last.stdout, last.stdout  # D = 5 - 1 over the last 10%
    early = fig1_rule(tmp_path / "r", *cmd, "--iterations", "1", "2")
    assert "| worse |" in early.stdout and "| -9 |" in early.stdout, early.stdout  # D = 0 - 9 at iterations 1-2
    empty = fig1_rule(tmp_path / "r", *cmd, "--iterations", "7", "9")
    assert "no verdict yet" in empty.stdout and "no diagnostics/feature_rank in iterations 7-9" in empty.stderr
    bad = fig1_rule(tmp_path / "r", *cmd, "--iterations", "3", "2")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == ["error: --iterations 3 2: need 0 < LO <= HI"]


def fake_atari_run(root, seed: int, n: int, t: int, level: float, epochs: int = 4):
    """A finished KungFuMaster run of 1,000 steps: returns and every Figs. 3-4 diagnostic at `level` (+ seed / 10)."""
    metrics = ("feature_rank", "ess_pct", "dormant_frac", "weight_norm", "grad_kurtosis", "policy_variance")
    rows = [{"global_step": s, "iteration": s // 100, "charts/episodic_return": level + seed / 10,
             **{f"diagnostics/{m}": level + seed / 10 for m in metrics}} for s in range(100, 1001, 100)]
    write_finished(root / f"KungFuMaster-v5__ppo_atari_envpool__{seed}__{n}x{t}x{epochs}",
                   {"script": "ppo_atari_envpool", "args": {"env_id": "KungFuMaster-v5", "seed": seed, "num_envs": n,
                                                            "num_steps": t, "update_epochs": epochs,
                                                            "total_timesteps": 1000}}, rows)


def test_m25_fig1a_draws_its_network_tables_and_eval_draws_only_its_two_rule_tables(tmp_path):
    """Drawing the archived grid writes the curves, the rule and the post hoc network tables (made-up runs: 32x32 and
    128x8 at level 9 against the base's 1, so feature rank is higher and the dormant fraction too: better, worse);
    EVAL=1 writes only its two rule tables, so it cannot overwrite the archived runs' figures in a shared OUT_DIR.
    Eval made-up: training finals 10 / 40 / 30 + seed (base, 32x32, 128x8), evaluations 20 / 5 / 20 + seed."""
    for seed in (1, 2, 3):
        for n, t, level in ((8, 128, 1.0), (32, 32, 9.0), (128, 8, 9.0)):
            fake_atari_run(tmp_path / "1a", seed, n, t, level)
        for n, t, train, evaluation in ((8, 128, 10, 20), (32, 32, 40, 5), (128, 8, 30, 20)):
            kungfu_run(tmp_path / "1a_eval", seed, n, t, [{"global_step": 1000, "charts/episodic_return": train + seed},
                                                          {"global_step": 1000, "eval/episodic_return": evaluation + seed}])
    draw = lambda runs, out, **env: subprocess.run(  # noqa: E731
        ["bash", str(REPO / "benchmark" / "mayor2025_fig1a.sh")], capture_output=True, text=True, timeout=600,
        env=script_env(DRAW_ONLY=1, SCALE="laptop", RUNS_DIR=tmp_path / runs, OUT_DIR=tmp_path / out, **env))
    outcome = lambda out, name: {r["arm"]: r["outcome"] for r in csv.DictReader(open(tmp_path / out / f"{name}.csv"))}  # noqa: E731
    archived = draw("1a", "fig")
    assert archived.returncode == 0, archived.stderr
    assert outcome("fig", "mayor2025_fig1a_rule")["32x32 (4x N)"] == "better"
    assert outcome("fig", "mayor2025_fig1a_network_feature_rank")["128x8 (16x N)"] == "better"
    assert outcome("fig", "mayor2025_fig1a_network_dormant_frac")["32x32 (4x N)"] == "worse"
    assert (tmp_path / "fig" / "mayor2025_fig1a_curves.png").exists()
    reruns = draw("1a_eval", "eval", EVAL="1")
    assert reruns.returncode == 0, reruns.stderr
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == [
        f"mayor2025_fig1a_rule_{kind}.{ext}" for kind in ("eval", "training") for ext in ("csv", "md")]
    assert outcome("eval", "mayor2025_fig1a_rule_training")["32x32 (4x N)"] == "better"
    assert outcome("eval", "mayor2025_fig1a_rule_eval") == {"8x128 (base)": "(base)", "32x32 (4x N)": "worse",
                                                            "128x8 (16x N)": "not separated"}


def test_m25_fig1b_laptop_reads_fig1a_base_and_applies_its_rules(tmp_path):
    """M25 Fig. 1b at laptop scale runs only N x4 and T x4 (6 runs) and reads Fig. 1a's 8x128 runs as its
    base; drawing (DRAW_ONLY) writes the curves, Figs. 3-4 and every rule table, with the outcomes of the header's
    rule on made-up runs: 32x128 > 8x512 > 8x128 in every metric."""
    out = dry_run("mayor2025_fig1b", SCALE="laptop", RUNS_DIR=tmp_path / "1b")
    runs = [parse_flags(c) for c in commands(out.stdout)]
    assert out.returncode == 0 and len(runs) == 6, out.stderr
    assert {(r["num_envs"], r["num_steps"]) for r in runs} == {("32", "128"), ("8", "512")}
    assert {r["diagnostics_every"] for r in runs} == {"10"} and {r["env_id"] for r in runs} == {"KungFuMaster-v5"}
    for seed in (1, 2, 3):
        for n, t, level in ((8, 128, 1.0), (32, 32, 9.0), (128, 8, 9.0)):  # 1a's 32x32 and 128x8 must not join
            fake_atari_run(tmp_path / "1a", seed, n, t, level)
        fake_atari_run(tmp_path / "1b", seed, 32, 128, 3.0)
        fake_atari_run(tmp_path / "1b", seed, 8, 512, 2.0)
    draw = subprocess.run(["bash", str(REPO / "benchmark" / "mayor2025_fig1b.sh")], capture_output=True, text=True,
                          timeout=600, env=script_env(DRAW_ONLY=1, SCALE="laptop", RUNS_DIR=tmp_path / "1b",
                                                      FIG1A_DIR=tmp_path / "1a", OUT_DIR=tmp_path / "fig",
                                                      EQUAL_UPDATES="2 4"))
    assert draw.returncode == 0, draw.stderr
    outcome = lambda name: {r["arm"]: r["outcome"] for r in csv.DictReader(open(tmp_path / "fig" / f"{name}.csv"))}  # noqa: E731
    assert outcome("mayor2025_fig1b_rule_n_vs_t") == {"8x512 (T x4)": "(base)", "32x128 (N x4)": "better"}
    assert outcome("mayor2025_fig1b_rule_vs_base") == {"8x128 (base)": "(base)", "32x128 (N x4)": "better",
                                                       "8x512 (T x4)": "better"}
    assert outcome("mayor2025_fig3_fig4_rule_feature_rank")["32x128 (N x4)"] == "better"
    assert outcome("mayor2025_fig3_fig4_rule_dormant_frac")["32x128 (N x4)"] == "worse"  # higher, the paper says lower
    curves = open(tmp_path / "fig" / "mayor2025_fig1b_curves.csv").read()
    assert "N=8 T=128" in curves and "N=32 T=32" not in curves and "N=128 T=8" not in curves
    assert (tmp_path / "fig" / "mayor2025_fig3_fig4.png").exists()
    # post hoc: against updates, and at equal updates (EQUAL_UPDATES iterations 2-4) with both x4 arms
    assert "N=8 T=512" in open(tmp_path / "fig" / "mayor2025_fig3_fig4_updates.csv").read()
    assert outcome("mayor2025_fig3_fig4_equal_updates_ess_pct") == {"8x128 (base)": "(base)",
                                                                    "32x128 (N x4)": "better", "8x512 (T x4)": "better"}


def test_m25_fig1c_laptop_runs_epochs_x2_and_reads_the_4_epoch_arms(tmp_path):
    """M25 Fig. 1c at laptop scale runs 8 epochs at N 8 and 32 (6 runs); the 4-epoch arms are Fig. 1a's 8x128
    and Fig. 1b's 32x128 runs; other T do not join. Made-up finals: (4, 8) 5, (8, 8) 1, (8, 32) 6, (4, 32) 7."""
    out = dry_run("mayor2025_fig1c", SCALE="laptop", RUNS_DIR=tmp_path / "1c")
    runs = [parse_flags(c) for c in commands(out.stdout)]
    assert out.returncode == 0 and len(runs) == 6, out.stderr
    assert {(r["update_epochs"], r["num_envs"]) for r in runs} == {("8", "8"), ("8", "32")}
    assert all("num_steps" not in r for r in runs)  # T = 128, the script's default
    for seed in (1, 2, 3):
        fake_atari_run(tmp_path / "1a", seed, 8, 128, 5.0)
        fake_atari_run(tmp_path / "1a", seed, 32, 32, 99.0)  # other T: must not join
        fake_atari_run(tmp_path / "1b", seed, 32, 128, 7.0)
        fake_atari_run(tmp_path / "1b", seed, 8, 512, 99.0)
        fake_atari_run(tmp_path / "1c", seed, 8, 128, 1.0, epochs=8)
        fake_atari_run(tmp_path / "1c", seed, 32, 128, 6.0, epochs=8)
    draw = subprocess.run(["bash", str(REPO / "benchmark" / "mayor2025_fig1c.sh")], capture_output=True, text=True,
                          timeout=600, env=script_env(DRAW_ONLY=1, SCALE="laptop", RUNS_DIR=tmp_path / "1c",
                                                      FIG1A_DIR=tmp_path / "1a", FIG1B_DIR=tmp_path / "1b",
                                                      OUT_DIR=tmp_path / "fig"))
    assert draw.returncode == 0, draw.stderr
    outcome = lambda name: {r["arm"]: r["outcome"] for r in csv.DictReader(open(tmp_path / "fig" / f"{name}.csv"))}  # noqa: E731
    assert outcome("mayor2025_fig1c_rule_vs_base") == {"4 epochs, N 8": "(base)", "8 epochs, N 8": "worse",
                                                       "8 epochs, N 32": "better"}
    assert outcome("mayor2025_fig1c_rule_envs")["8 epochs, N 32"] == "better"
    assert outcome("mayor2025_fig1c_rule_n32")["8 epochs, N 32"] == "worse"
    means = {(r["group"], r["n"]): float(r["mean"]) for r in csv.DictReader(open(tmp_path / "fig" / "mayor2025_fig1c_curves.csv"))}
    assert means == {("epochs=4 N=8", "3"): 5.2, ("epochs=8 N=8", "3"): 1.2, ("epochs=8 N=32", "3"): 6.2,
                     ("epochs=4 N=32", "3"): 7.2}  # 3 seeds each, and 1a's 32x32 (99) did not join 1b's 32x128


def test_b26_jax2d_pilot_grid_and_refusals(tmp_path):
    """The Jax2D pilot: SCALE=laptop only; B26's 32 x 8 inner loop on 16 tasks of a task seed that is not the main
    runs' (31), five COMs 4 apart and plain PPO at two epsilons, one seed, 200 updates; RESUME=1 resumes."""
    out = dry_run("beukman2026_jax2d_pilot", SCALE="laptop", RUNS_DIR=tmp_path / "p", RESUME=1)
    assert out.returncode == 0, out.stderr
    runs = [parse_flags(c) for c in commands(out.stdout)]
    setting = {"task_seed": "152", "num_tasks": "16", "num_envs": "64", "num_steps": "128", "num_minibatches": "32",
               "update_epochs": "8", "total_timesteps": str(64 * 128 * 200), "seed": "1", "eval_attempts": "10"}
    assert all({k: r.get(k) for k in setting} == setting for r in runs), runs
    arms = [(r.get("ewma_com", "0"), r.get("clip_coef", "0.2")) for r in runs]  # unset: the script's defaults
    assert sorted(arms) == sorted([(c, "0.2") for c in ("4", "16", "64", "256", "1024")] + [("0", "0.2"), ("0", "0.8")])
    assert "0 resumed from checkpoints" in out.stdout
    one_core = dry_run("beukman2026_jax2d_pilot", SCALE="laptop", RUNS_DIR=tmp_path / "p", CORES="1")
    assert "1 worker(s), 1 core(s) and OMP_NUM_THREADS=1 per run" in one_core.stdout, one_core.stdout
    no_ppo = [parse_flags(c) for c in commands(dry_run("beukman2026_jax2d_pilot", SCALE="laptop", EPSILONS="",
                                                       RUNS_DIR=tmp_path / "q").stdout)]
    assert len(no_ppo) == 5 and all("clip_coef" not in r for r in no_ppo)
    for env, words in [(dict(), ["SCALE=paper", "laptop"]), (dict(SCALE="laptop", PILOT_TASK_SEED="31"), ["31"]),
                       (dict(SCALE="laptop", COMS="16"), ["COMS=16"]),
                       (dict(SCALE="laptop", FLAGS="--task-seed 3"), ["--task-seed"])]:
        bad = dry_run("beukman2026_jax2d_pilot", RUNS_DIR=tmp_path / "x", **env)
        err = bad.stderr.strip().splitlines()
        assert bad.returncode == 2 and bad.stdout == "" and len(err) == 1 and all(w in err[0] for w in words), err


PLACEMENT = {"c_star": 64.0, "c_low": 4.0, "c_high": 1024.0, "coms": [4.0, 16.0, 64.0, 256.0, 1024.0], "updates": 200,
             "fig3a": [4.0, 64.0], "fig5b": True, "bracketed": {"low": True, "high": False}, "arms": {},
             "pilot_runs_dir": "runs/beukman2026_jax2d_pilot"}
JAX2D_SETTING = {"task_seed": "31", "num_tasks": "16", "num_steps": "128", "num_minibatches": "32",
                 "update_epochs": "8", "eval_every": "20", "eval_attempts": "20", "diagnostics_every": "10"}


def placement(tmp_path, **changes):
    path = tmp_path / f"placement{len(changes)}.json"
    path.write_text(json.dumps({**PLACEMENT, **changes}))
    return path


def laptop_runs(script, tmp_path, **env):
    out = dry_run(script, SCALE="laptop", RUNS_DIR=tmp_path / script, **env)
    assert out.returncode == 0, out.stderr
    runs = [parse_flags(c) for c in commands(out.stdout)]
    assert all({k: r[k] for k in JAX2D_SETTING} == JAX2D_SETTING for r in runs), runs
    return out, runs


def test_b26_jax2d_main_runs_grids_from_the_placement(tmp_path):
    """The Jax2D main runs (SCALE=laptop): the pilot's placement sets the COM grid, U and C*; 16 tasks of task seed
    31, B26's 32 x 8 inner loop, evaluation every 20 updates x 20 episodes, 3 seeds. Fig. 5a: the grid at 64 envs;
    Fig. 5b: four epsilons; Fig. 7a: N = 16 at C*/4 and C* (N = 64 is Fig. 5a's); Fig. 8: nothing new; Fig. 3a:
    phase 1 at C_low and C* for U/2 updates."""
    where = dict(PLACEMENT=placement(tmp_path), RESUME=1)
    out, fig5a = laptop_runs("beukman2026_fig5a", tmp_path, **where)
    assert len(fig5a) == 5 * 3 and {r["ewma_com"] for r in fig5a} == {"4", "16", "64", "256", "1024"}
    assert {(r["num_envs"], r["total_timesteps"]) for r in fig5a} == {("64", str(64 * 128 * 200))}
    assert {r["seed"] for r in fig5a} == {"1", "2", "3"} and "0 resumed from checkpoints" in out.stdout
    _, fig5b = laptop_runs("beukman2026_fig5b", tmp_path, **where)
    assert len(fig5b) == 4 * 3 and {r["clip_coef"] for r in fig5b} == {"0.1", "0.2", "0.4", "0.8"}
    assert all("ewma_com" not in r and r["num_envs"] == "64" for r in fig5b)  # plain PPO: the script's COM 0
    _, fig7 = laptop_runs("beukman2026_fig7", tmp_path, **where)
    assert len(fig7) == 2 * 3 and {r["ewma_com"] for r in fig7} == {"16", "64"}
    assert {(r["num_envs"], r["total_timesteps"]) for r in fig7} == {("16", str(16 * 128 * 200))}
    out, fig8 = laptop_runs("beukman2026_fig8", tmp_path, **where)
    assert fig8 == [] and "launches nothing" in out.stdout
    _, fig3a = laptop_runs("beukman2026_fig3a", tmp_path, **where)
    assert sorted({(r["exp_name"], r["ewma_com"], r["num_envs"], r["total_timesteps"]) for r in fig3a}) == [
        ("com4", "4", "64", str(64 * 128 * 100)), ("com64", "64", "64", str(64 * 128 * 100))] and len(fig3a) == 6
    # explicit values win over the placement, and stand in for it
    _, over = laptop_runs("beukman2026_fig5a", tmp_path, **where, COMS="4,64,1024,4096", U=300, SEEDS="1")
    assert {(r["ewma_com"], r["total_timesteps"]) for r in over} == {(c, str(8192 * 300)) for c in ("4", "64", "1024",
                                                                                                    "4096")}
    bad = dry_run("beukman2026_fig5a", SCALE="laptop", RUNS_DIR=tmp_path / "x", **where, COMS="2,8")
    assert bad.returncode == 2 and bad.stdout == "" and "C_LOW=4 is not in COMS=2,8" in bad.stderr
    _, given = laptop_runs("beukman2026_fig7", tmp_path, PLACEMENT=tmp_path / "none.json", C_STAR="32.0", U=40)
    assert {r["ewma_com"] for r in given} == {"8", "32"} and {r["total_timesteps"] for r in given} == {str(16 * 128 * 40)}
    out = dry_run("beukman2026_fig5b", SCALE="laptop", PLACEMENT=placement(tmp_path, fig5b=False),
                  RUNS_DIR=tmp_path / "skip")
    assert out.returncode == 0 and out.stdout.startswith("# Fig. 5b skipped") and out.stdout.count("\n") == 1


def test_b26_jax2d_main_runs_read_the_committed_pilot_placement_by_default(tmp_path):
    """Without PLACEMENT the laptop scripts read the placement our pilot printed (committed before the main runs,
    docs/reproducing/beukman2026_jax2d_design.md#pilot-results): COMs 16-4096, 200 updates, Fig. 7a at 256 and 1024,
    Fig. 3a switching 16 and 1024, no Fig. 5b; its .md and .csv say the same."""
    committed = json.loads((REPO / "docs/reproducing/img/beukman2026_jax2d_placement.json").read_text())
    assert (committed["c_low"], committed["c_star"], committed["c_high"], committed["updates"]) == (16, 1024, 4096, 200)
    _, fig5a = laptop_runs("beukman2026_fig5a", tmp_path)
    assert sorted({float(r["ewma_com"]) for r in fig5a}) == committed["coms"] == [16, 64, 256, 1024, 4096]
    assert len(fig5a) == 15 and {r["total_timesteps"] for r in fig5a} == {str(64 * 128 * 200)}
    _, fig7 = laptop_runs("beukman2026_fig7", tmp_path)
    assert {r["ewma_com"] for r in fig7} == {"256", "1024"}
    _, fig3a = laptop_runs("beukman2026_fig3a", tmp_path)
    assert {r["exp_name"] for r in fig3a} == {"com16", "com1024"}
    out = dry_run("beukman2026_fig5b", SCALE="laptop", RUNS_DIR=tmp_path / "skip")
    assert out.returncode == 0 and out.stdout.startswith("# Fig. 5b skipped")
    table = (REPO / "docs/reproducing/img/beukman2026_jax2d_placement.md").read_text()
    assert "main COM grid: 16, 64, 256, 1024, 4096" in table and "C* = 1024" in table
    rows = {r["arm"]: r for r in csv.DictReader(open(REPO / "docs/reproducing/img/beukman2026_jax2d_placement.csv"))}
    assert {a: r["class"] for a, r in rows.items() if r["class"] in ("C*", "plateaus")} == {
        "COM 1024, ε 0.2": "C*", "COM 16, ε 0.2": "plateaus"}


@pytest.mark.parametrize("script", ["beukman2026_fig5a", "beukman2026_fig5b", "beukman2026_fig7", "beukman2026_fig8",
                                    "beukman2026_fig3a"])
def test_b26_jax2d_main_runs_refuse_without_a_placement(script, tmp_path):
    """No placement and no values: one line naming the pilot's command, exit 2, nothing launched; the same for a
    TOTAL (the laptop budget is U updates) and a bad value."""
    for env, words in [(dict(PLACEMENT=tmp_path / "none.json"), ["none.json", "benchmark/beukman2026_jax2d_pilot.sh"]),
                       (dict(PLACEMENT=placement(tmp_path), TOTAL=1000), ["TOTAL=1000", "U"]),
                       (dict(PLACEMENT=placement(tmp_path), U="2e2"), ["U=2e2"])]:
        out = dry_run(script, SCALE="laptop", RUNS_DIR=tmp_path / "x", **env)
        err = out.stderr.strip().splitlines()
        assert out.returncode == 2 and out.stdout == "" and len(err) == 1 and all(w in err[0] for w in words), err


def test_b26_jax2d_fig3a_laptop_reloads_only_the_switched_runs(tmp_path):
    """Fig. 3a at SCALE=laptop: a finished phase-1 run at C_low is reloaded with C* only (its own continuation is the
    Fig. 5a run), to U updates."""
    runs = tmp_path / "runs"
    run = runs / "Jax2D-Locomotion-l__com4__1__100"
    write_finished(run, {"script": "ppo_ewma_jax2d", "args": {"exp_name": "com4", "ewma_com": 4.0, "seed": 1,
                                                              "init_from": None}})
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "latest.ckpt").write_bytes(b"x")
    out = dry_run("beukman2026_fig3a", SCALE="laptop", RUNS_DIR=runs, SEEDS="1", PLACEMENT=placement(tmp_path))
    reloads = [parse_flags(c) for c in commands(out.stdout) if "--init-from" in c]
    assert [(r["exp_name"], r["ewma_com"], r["total_timesteps"]) for r in reloads] == [
        ("com4_to_64", "64", str(64 * 128 * 200))]
    assert reloads[0]["runs_dir"] == str(runs / "reloaded") and reloads[0]["task_seed"] == "31"


def test_b26_jax2d_fig3a_laptop_starts_from_the_states_fig5a_kept(tmp_path):
    """Fig. 5a at SCALE=laptop keeps each run's state at update U/2; Fig. 3a then runs no phase 1 and reloads those
    states (the switched COM only). With one state missing, phase 1 runs and the kept state is still preferred for
    its COM and seed. A kept state of another budget does not count."""
    where = dict(PLACEMENT=placement(tmp_path), SEEDS="1")
    _, fig5a = laptop_runs("beukman2026_fig5a", tmp_path, **where)
    assert {r["keep_checkpoints"] for r in fig5a} == {"100"}  # U = 200
    fig5a_dir, total = tmp_path / "fig5a", str(64 * 128 * 200)

    def fig5a_run(com, budget=total, stamp=100):
        run = fig5a_dir / f"Jax2D-Locomotion-l__ppo_ewma_jax2d__1__{stamp}"
        write_finished(run, {"script": "ppo_ewma_jax2d", "args": {"exp_name": "ppo_ewma_jax2d", "ewma_com": com,
                                                                  "seed": 1, "total_timesteps": int(budget),
                                                                  "init_from": None}}, status="interrupted")
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "iteration_100.ckpt").write_bytes(b"x")
        return str(run / "checkpoints" / "iteration_100.ckpt")

    low = fig5a_run(4.0)
    fig5a_run(64.0, budget=64 * 128 * 300, stamp=101)  # another U: its state at 100 is not half of this budget
    env = dict(SCALE="laptop", RUNS_DIR=tmp_path / "runs", FIG5A_DIR=fig5a_dir, **where)
    out = dry_run("beukman2026_fig3a", **env)
    assert out.returncode == 0, out.stderr
    runs = [parse_flags(c) for c in commands(out.stdout)]
    assert sorted((r["exp_name"], r["ewma_com"]) for r in runs if "init_from" not in r) == [("com4", "4"),
                                                                                          ("com64", "64")]
    assert [(r["exp_name"], r["init_from"]) for r in runs if "init_from" in r] == [("com4_to_64", low)]
    star = fig5a_run(64.0, stamp=102)
    out = dry_run("beukman2026_fig3a", **env)
    runs = [parse_flags(c) for c in commands(out.stdout)]
    assert "# phase 1: not run" in out.stdout and all("init_from" in r for r in runs)
    assert sorted((r["exp_name"], r["ewma_com"], r["init_from"], r["total_timesteps"], r["seed"]) for r in runs) == [
        ("com4_to_64", "64", low, total, "1"), ("com64_to_4", "4", star, total, "1")]


def test_b26_jax2d_plateau_extension_grid(tmp_path):
    """B26's plateau at 400 updates (SCALE=laptop only): COMs 16, 256 and 1024 x seeds 1-3 in Fig. 5a's setting, to
    400 updates; a COM and seed whose finished Fig. 5a run kept its final checkpoint continue from it (--init-from),
    the others start over. A Fig. 5a run without a checkpoint, or one that did not finish, starts nothing."""
    fig5a_dir = tmp_path / "fig5a"

    def fig5a_run(com, seed, status="finished", ckpt=True):
        run = fig5a_dir / f"Jax2D-Locomotion-l__ppo_ewma_jax2d__{seed}__{100 + int(com) + seed}"
        write_finished(run, {"script": "ppo_ewma_jax2d", "args": {"ewma_com": com, "seed": seed, "init_from": None,
                                                                  "total_timesteps": 64 * 128 * 200}}, status=status)
        (run / "checkpoints").mkdir()
        if ckpt:
            (run / "checkpoints" / "latest.ckpt").write_bytes(b"x")
        return str(run / "checkpoints" / "latest.ckpt")

    kept = fig5a_run(16.0, 1)
    fig5a_run(256.0, 2, ckpt=False)
    fig5a_run(1024.0, 3, status="interrupted")
    out, runs = laptop_runs("beukman2026_jax2d_plateau", tmp_path, FIG5A_DIR=fig5a_dir)
    assert len(runs) == 9 and {(r["num_envs"], r["total_timesteps"]) for r in runs} == {("64", str(64 * 128 * 400))}
    assert sorted((r["ewma_com"], r["seed"]) for r in runs) == sorted(
        (c, s) for c in ("16", "256", "1024") for s in ("1", "2", "3"))
    assert [(r["ewma_com"], r["seed"], r["init_from"]) for r in runs if "init_from" in r] == [("16", "1", kept)]
    for env, words in [(dict(SCALE="paper"), ["SCALE=paper", "laptop"]), (dict(UPDATES="40"), ["UPDATES=40", "80"]),
                       (dict(COMS="16"), ["COMS=16"]), (dict(FLAGS="--seed 4"), ["--seed"])]:
        bad = dry_run("beukman2026_jax2d_plateau", **{"SCALE": "laptop", "RUNS_DIR": tmp_path / "x", **env})
        err = bad.stderr.strip().splitlines()
        assert bad.returncode == 2 and bad.stdout == "" and len(err) == 1 and all(w in err[0] for w in words), err


def cost_hours(text: str) -> float:
    """The CPU-core hours of a dry run's cost line ('~11 h', '~1.5 h', '~25 min', '~3 s')."""
    number, unit = re.search(r"# cost: ~([\d,.]+) (h|min|s) of CPU-core time", text).groups()
    return float(number.replace(",", "")) / {"h": 1, "min": 60, "s": 3600}[unit]


def test_dry_run_prints_the_cost_and_the_files_it_will_write(tmp_path):
    """M25 Fig. 1a at laptop scale: the cost is the printed runs' steps over the PPO Atari rate (CPU-core hours, the
    wall time on the cores given, and M25's 2-3 A100-days per 100M steps), then the run directories and the
    figures, all under the user's RUNS_DIR and OUT_DIR; the laptop-only curves and rule table only at SCALE=laptop."""
    from cleanrl_scaling.utils.preview import RATES
    out = dry_run("mayor2025_fig1a", SCALE="laptop", CORES="1", RUNS_DIR=tmp_path / "1a", OUT_DIR=tmp_path / "fig")
    assert out.returncode == 0, out.stderr
    steps = sum(int(parse_flags(c)["total_timesteps"]) for c in commands(out.stdout))
    rate = RATES["ppo_atari_envpool.py"]
    assert math.isclose(cost_hours(out.stdout), steps / rate.cpu / 3600, rel_tol=0.05)
    assert "on the 1 core(s) here" in out.stdout and "docs/ppo_atari_envpool.md" in out.stdout
    assert f"# cost: {2 * 24 * steps / 1e8:,.0f}-{3 * 24 * steps / 1e8:,.0f} GPU-hours (M25 §4.1" in out.stdout
    assert f"# writes: 9 run directories in {tmp_path / '1a'}/" in out.stdout
    figures = next(line for line in out.stdout.splitlines() if line.startswith("# figures:"))
    assert f"into {tmp_path / 'fig'}/" in figures
    assert all(name in figures for name in ("mayor2025_fig1a_iqm", "mayor2025_fig1a_curves", "mayor2025_fig1a_rule"))
    paper = dry_run("mayor2025_fig1a", GAMES="Pong-v5", SEEDS="1", RUNS_DIR=tmp_path / "p")
    assert "mayor2025_fig1a_iqm" in paper.stdout and "mayor2025_fig1a_curves" not in paper.stdout
    assert not (tmp_path / "1a").exists() and not (tmp_path / "fig").exists()  # a dry run writes nothing


def test_every_training_script_has_a_measured_rate_with_its_source():
    """A dry run can price any script's grid: every training script has a rate and says where it was measured."""
    from cleanrl_scaling.utils import preview
    scripts = {p.name for p in (REPO / "cleanrl_scaling").glob("*.py") if p.name != "__init__.py"}
    assert scripts == set(preview.RATES)
    assert all(rate.cpu > 0 and rate.source for rate in preview.RATES.values())
    lines = preview.estimate(str(REPO / "cleanrl_scaling" / "noisy_sgd.py"), [{}, {"total_steps": "3000"}])
    assert "2 run(s), 4k steps in all" in lines[0]  # the script's default 1,000 steps, read from its Args
    assert "no measured rate" in preview.estimate("my_script.py", [{"total_timesteps": "10"}])[-1]


def test_figures_of_the_mujoco_and_m25_helpers_are_listed(tmp_path):
    """Figures drawn through the shared helpers (aggregate NAME on MuJoCo: one per task; M25's figure NAME: two IQM
    figures) are listed by their names, with <env_id> / <game> standing for each value."""
    from cleanrl_scaling.utils.preview import figure_prefixes
    fig10 = figure_prefixes(str(REPO / "benchmark" / "beukman2026_fig10_mujoco.sh"))
    assert fig10 == ["beukman2026_fig10_mujoco_<env_id>"]
    assert figure_prefixes(str(REPO / "benchmark" / "mayor2025_fig5.sh"))[:2] == ["mayor2025_fig5_iqm",
                                                                                   "mayor2025_fig5_iqm_curves"]
    assert "mayor2025_fig7_<game>_iqm" in figure_prefixes(str(REPO / "benchmark" / "mayor2025_fig7.sh"))


@pytest.mark.parametrize("script, paper", [("beukman2026_fig12", "_beukman2026_common.sh"),
                                           ("mayor2025_fig5", "_mayor2025_common.sh")])
def test_both_papers_take_the_shared_preambles_knobs_alike(script, paper, tmp_path):
    """The B26 and M25 figure scripts start from one preamble, benchmark/_figure_common.sh: the same seeds,
    checkpoint period, core pinning and resume reach every run, and bad settings get the same one-line refusals."""
    assert 'source "$(dirname "${BASH_SOURCE[0]}")/_figure_common.sh"' in (REPO / "benchmark" / paper).read_text()
    out = dry_run(script, RUNS_DIR=tmp_path / "runs", SEEDS="4", CHECKPOINT_EVERY="7", CORES="1", RESUME="1")
    assert out.returncode == 0, out.stderr
    runs = [parse_flags(c) for c in commands(out.stdout)]
    assert runs and all(r["seed"] == "4" and r["checkpoint_every"] == "7" for r in runs)
    assert "0 resumed from checkpoints" in out.stdout and "# local: 1 worker(s), 1 core(s)" in out.stdout
    for bad, name in ((dict(CHECKPOINT_EVERY="x"), "CHECKPOINT_EVERY=x"), (dict(SCALE="laptop"), "SCALE=laptop")):
        refused = dry_run(script, RUNS_DIR=tmp_path / "runs", **bad)
        assert refused.returncode == 2 and refused.stdout == "" and len(refused.stderr.splitlines()) == 1
        assert refused.stderr.startswith(f"error: {name}:"), refused.stderr


ENV_LIMIT = REPO / "benchmark" / "ppo_atari_env_limit.py"


@pytest.mark.parametrize("flags, words", [
    (["--num-envs", "8,7"], "--num-envs 8,7: pass even env counts"),
    (["--num-envs", "eight"], "--num-envs 'eight': pass comma-separated integers"),
    (["--iterations", "2"], "--iterations >= 3"),
    (["--cleanrl", "/nonexistent"], "--cleanrl /nonexistent: no cleanrl/ppo_atari_envpool.py there"),
    (["--ours-flags=--no-compil"], "--ours-flags --no-compil: Unrecognized options: --no-compil"),  # tyro's, one line
    (["--ours-flags=--learning-rate -1"], "--ours-flags --learning-rate -1: --learning-rate must be a finite number"),
    (["--ours-flags=--num-steps=32 --no-compile"], "--ours-flags --num-steps=32: the benchmark sets these itself"),
    (["--ours-flags=--env-threads 2"], "--ours-flags --env-threads: the benchmark sets these itself"),
    (["--ours-flags=--envpool-async"], "--ours-flags --envpool-async: the benchmark sets these itself"),
    (["--rates", "sync,pinned"], "--rates sync,pinned: pass comma-separated names of sync,async,halves,layouts"),
    (["--programs", "envpool_async"], "--programs envpool_async: pass comma-separated names of sync,async-envs,"),
])
def test_env_limit_benchmark_refuses_bad_options_in_one_line(flags, words):
    out = subprocess.run(["python3", str(ENV_LIMIT)] + flags, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.strip().splitlines()) == 1
    assert words in out.stderr


@pytest.mark.slow
def test_env_limit_benchmark_dry_run_writes_every_rate(tmp_path):
    """envpool's random-action rates (its modes and thread layouts) and our four runs at 4 envs, tiny, on CPU:
    every number is there and positive (their values mean nothing here)."""
    out = subprocess.run(["python3", str(ENV_LIMIT), "--cpu-dry-run", "--num-envs", "4", "--out", str(tmp_path / "r.json")],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    written = json.load(open(tmp_path / "r.json"))
    (result,) = written["results"]
    assert "partial" not in result and written["machine"]["kernel"]  # the finished N, not a run cut short
    pinned = {"halves_pinned_apart", "sync_pinned"} if written["machine"]["pinnable_cores"] >= 2 else set()
    assert set(result["envpool_steps_per_s"]) == {"sync", "async", "halves", "halves_half_threads"} | pinned
    half = max(1, len(os.sched_getaffinity(0)) // 2)
    assert set(result["sps_median"]) == {"ours", "ours --async-envs", f"ours --async-envs --env-threads {half}",
                                         "ours --envpool-async"}
    assert result["x_cleanrl"] is None
    for (t,) in result["loop_seconds_runs"].values():  # ours' loop per iteration: the env waits inside the rollout
        assert 0 < t["env_wait"] < t["rollout"] and t["update"] > 0
    assert "per iteration: rollout" in out.stdout
    assert all(v > 0 for v in list(result["envpool_steps_per_s"].values()) + list(result["sps_median"].values()))
    assert "of envpool's sync limit" in out.stdout


def test_gpu_jax_check_command_lines_pass_the_scripts_checks_and_match_the_1m_preset_per_device(tmp_path):
    """benchmark/gpu_jax_check.sh's first step, on its own (STEPS=none): the GPU's command lines parse and pass the
    scripts' checks, and its 8,192-env SFL run holds the 1m preset's values per device of the preset's 128."""
    from cleanrl_scaling import ppo_ewma_jax2d, sfl_kinetix_jax
    env = script_env(STEPS="none", JAX_PLATFORMS="cpu")
    out = subprocess.run(["bash", str(REPO / "benchmark" / "gpu_jax_check.sh"), "--cpu-dry-run", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    flags = json.load(open(tmp_path / "gpu_jax_check.json"))["flags"]
    assert all(isinstance(v, dict) for v in flags.values()), flags
    assert all(v["eval_every"] == 0 and v["final_eval"] is False for v in flags.values())  # timed training only
    assert flags["jax2d_default"]["num_envs"] == flags["jax2d_b26"]["num_envs"] == ppo_ewma_jax2d.Args.num_envs
    preset, devices = sfl_kinetix_jax.PRESETS["1m"], sfl_kinetix_jax.PRESETS["1m"]["per_device_stats"]
    per_gpu = flags["sfl_1m_per_gpu"]
    for name in ("num_envs", "sfl_num_levels", "sfl_buffer_size", "sfl_filter_batch"):
        assert per_gpu[name] * devices == preset[name], name
    assert per_gpu["sfl_update_period"] == preset["sfl_update_period"]
    whole = whole_1m_args()
    assert per_gpu["num_minibatches"] == whole.num_minibatches and per_gpu["learning_rate"] == whole.learning_rate


def site_without_tyro(tmp_path) -> str:
    """A SITE folder whose tyro fails to import, as a folder missing a package the scripts need makes them fail."""
    site = tmp_path / "site" / "tyro"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'tyro'\", name='tyro')\n")
    return str(site.parent)


def test_gpu_jax_check_stops_before_the_heavy_steps_when_the_scripts_do_not_import(tmp_path):
    """A SITE folder that lacks a package the scripts import (here tyro, shadowed by one that fails to import): the
    check says so in one line, runs no heavy step, records the failure in its JSON and exits 2."""
    out_dir = tmp_path / "out"
    env = script_env(STEPS="jax2d_default sfl_2048", JAX_PLATFORMS="cpu", SITE=site_without_tyro(tmp_path))
    out = subprocess.run(["bash", str(REPO / "benchmark" / "gpu_jax_check.sh"), "--cpu-dry-run", str(out_dir)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "error: the JAX scripts do not import here" in out.stdout + out.stderr
    result = json.load(open(out_dir / "gpu_jax_check.json"))
    assert result["flags"].startswith("failed: the scripts do not import")
    assert "jax2d_default" not in result and "sfl_2048" not in result  # the heavy steps never started
    assert not (out_dir / "jax2d_default.log").exists()


def test_gpu_check_stops_after_the_versions_when_the_atari_scripts_do_not_import(tmp_path):
    """benchmark/gpu_check.sh with a SITE that breaks an import the torch scripts need: versions, one line, the
    failure in its JSON, exit 2, and no test or SPS step."""
    out_dir = tmp_path / "out"
    out = subprocess.run(["bash", str(REPO / "benchmark" / "gpu_check.sh"), "--cpu-dry-run", str(out_dir)],
                         capture_output=True, text=True, env=script_env(SITE=site_without_tyro(tmp_path)), timeout=300)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "error: the Atari scripts, envpool or tensorboard do not import here" in out.stdout + out.stderr
    result = json.load(open(out_dir / "gpu_check.json"))
    assert result["preflight"].startswith("failed") and "versions" in result
    assert not any(k.startswith("sps_") or k == "gpu_tests" for k in result)


def test_gpu_check_runs_only_the_steps_named_and_pqn_whole_minibatches(tmp_path):
    """STEPS=pqn_128x32_whole on CPU (tiny): that one SPS run, with --update-chunk-size 0 in its recorded command
    line and its loop times, and no gpu tests, envpool rates or other SPS runs."""
    out_dir = tmp_path / "out"
    out = subprocess.run(["bash", str(REPO / "benchmark" / "gpu_check.sh"), "--cpu-dry-run", str(out_dir)],
                         capture_output=True, text=True, env=script_env(STEPS="pqn_128x32_whole"), timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    result = json.load(open(out_dir / "gpu_check.json"))
    run = result["sps_pqn_128x32_whole"]
    assert isinstance(run, dict), run
    assert "--update-chunk-size 0" in run["args"] and run["SPS"] > 0 and run["update_seconds_median"] > 0
    assert [k for k in result if k.startswith("sps_") or k == "gpu_tests" or k.startswith("envpool")] \
        == ["sps_pqn_128x32_whole"]


def test_gpu_check_refuses_an_unknown_step_before_it_writes_anything(tmp_path):
    out = subprocess.run(["bash", str(REPO / "benchmark" / "gpu_check.sh"), "--cpu-dry-run", str(tmp_path / "out")],
                         capture_output=True, text=True, env=script_env(STEPS="gpu_tests pqn_whole"), timeout=60)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("error: STEPS holds pqn_whole; choose among gpu_tests envpool atari_default_tf32")
    assert not (tmp_path / "out").exists()


def test_gpu_check_names_every_sps_run_it_makes_in_its_steps():
    """STEPS selects SPS runs by SPS_NAMES, a list written beside the sps_run calls: a run missing from it would never
    run. Both lists, the dry run's calls and the GPU's, hold exactly SPS_NAMES."""
    text = (REPO / "benchmark" / "gpu_check.sh").read_text()
    listed = re.search(r'SPS_NAMES="([^"]*)"', text).group(1).split()
    dry, gpu = text.split('if [ "$DRY" = 1 ]; then  # tiny sizes on CPU')[1].split("\nelse\n")[:2]
    for calls in (dry, gpu):
        assert sorted(re.findall(r"^\s*sps_run (\S+)", calls, re.M)) == sorted(listed)


def test_gpu_torch_site_refuses_an_unknown_part_before_it_writes_anything(tmp_path):
    """benchmark/gpu_torch_site.sh with a PARTS entry it cannot build: one line naming the choices, exit 2, and no
    folder made (pip never ran)."""
    out = subprocess.run(["bash", str(REPO / "benchmark" / "gpu_torch_site.sh"), str(tmp_path / "site")],
                         capture_output=True, text=True, env=script_env(PARTS="atari vizdoom"), timeout=60)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stderr.strip() == "error: PARTS holds vizdoom; choose among atari procgen mujoco"
    assert not (tmp_path / "site").exists()


def whole_1m_args():
    """sfl_kinetix_jax.py --preset 1m's resolved flags (its hybrid recipe's minibatches and learning rate)."""
    from cleanrl_scaling import sfl_kinetix_jax
    argv, sys.argv = sys.argv, [sfl_kinetix_jax.__file__, "--preset", "1m"]
    try:
        return sfl_kinetix_jax.read_args()[0]
    finally:
        sys.argv = argv
