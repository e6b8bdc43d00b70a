"""Helpers of the benchmark/beukman2026_fig*.sh tests: run a figure script, read its DRY_RUN grid, write
finished run directories for that grid in a real run's exact format, and check the figures the script draws.

tests/test_benchmark_scripts.py checks the grids and budgets from DRY_RUN; tests/test_ppo_ewma_jax2d.py draws every
figure, with its module's real tiny run as the template (so the figure test costs no extra training run): for every
command a script's DRY_RUN prints, a finished run directory is written (config.json with the command's argv and
values, the template's metrics.jsonl with a known solve rate). The script then runs for real: the launcher finds every
grid point finished (--skip-finished on the recorded argv) and starts nothing, and the script draws its figures."""
import csv
import dataclasses
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

import pytest

from cleanrl_scaling.utils.rundirs import parse_flags

REPO = pathlib.Path(__file__).resolve().parents[1]
FIGURES = {"3a": ["beukman2026_fig3a", "beukman2026_fig3a_train"], "4": ["beukman2026_fig4"],
           "5a": ["beukman2026_fig5a", "beukman2026_fig5a_train", "beukman2026_fig1a", "beukman2026_fig2b",
                  "beukman2026_fig2c"],
           "5b": ["beukman2026_fig5b"], "6": ["beukman2026_fig6a", "beukman2026_fig6b"],
           "7": ["beukman2026_fig7a", "beukman2026_fig7b"], "8": ["beukman2026_fig8"],
           "9": ["beukman2026_fig9", "beukman2026_fig13", "beukman2026_fig14"],
           "12": ["beukman2026_fig12a", "beukman2026_fig12b"],
           "jax2d_pilot": ["beukman2026_jax2d_pilot", "beukman2026_jax2d_pilot_eval", "beukman2026_jax2d_pilot_kl"]}
def flags_for(fig: str) -> str:
    """FLAGS of the smoke configuration; Figs. 7 and 9 sweep --num-envs themselves (NUM_ENVS_LIST)."""
    return "--num-tasks 8 --num-steps 16" + ("" if fig in ("7", "9") else " --num-envs 8")


def script_env(**extra) -> dict:
    knobs = ("DRY_RUN", "TOTAL", "TOTAL2", "FLAGS", "BUDGETS", "ITERATIONS", "NUM_ENVS_LIST", "SEEDS", "RUNS_DIR",
             "OUT_DIR", "WORKERS", "TOTAL_TIMESTEPS", "ENV_IDS", "GAMES", "LARGEST_BATCH", "MINIBATCH_SIZE", "SLURM",
             "SCALE", "EVERY", "STATES", "GAMMAS", "NUM_ENVS", "SCRIPT", "CLEANRL_COMPAT", "SIZES", "PRESETS",
             "MINIBATCHES", "LRS", "COMS", "DIAGNOSTICS_EVERY", "BAND", "EPSILONS", "PILOT_TASK_SEED")
    env = {k: v for k, v in os.environ.items() if k not in knobs}  # the scripts' knobs come from the test only
    env.update(PYTHON=sys.executable, PYTHONPATH=str(REPO), **{k: str(v) for k, v in extra.items()})
    return env


def run_script(fig: str, **env) -> subprocess.CompletedProcess:
    """benchmark/beukman2026_fig{fig}.sh, or beukman2026_{fig}.sh for the scripts that are not one figure (the pilot)."""
    name = f"beukman2026_{fig}" if fig.startswith("jax2d") else f"beukman2026_fig{fig}"
    return subprocess.run(["bash", str(REPO / "benchmark" / f"{name}.sh")], capture_output=True,
                          text=True, env=script_env(**env), timeout=600)


def commands(out: str) -> list:
    """The runs a DRY_RUN prints: the flags of each ppo_ewma_jax2d.py command."""
    return [shlex.split(line)[2:] for line in out.splitlines() if line and not line.startswith("#")]


def typed(value: str):
    for kind in (int, float):
        try:
            return kind(value)
        except (TypeError, ValueError):
            pass
    return value


def solve_rate(args: dict) -> float:
    """A known final solve rate per configuration (any deterministic function of the swept values will do)."""
    return round(0.01 * args["seed"] + 0.1 * min(args["ewma_com"], 8) / 8 + args["clip_coef"] / 10
                 + 0.001 * args["update_epochs"] + 1e-6 * args["num_envs"] + 10 * args["learning_rate"]
                 + (0.05 if args["anneal_lr"] else 0.0), 6)


def write_like(template: pathlib.Path, runs_dir: pathlib.Path, argv: list, index: int) -> dict:
    """A finished run of `argv` in the template's exact format, with charts/solve_rate rising to solve_rate(args):
    config.json's args are the script's defaults with the command's flags, as the run itself would record them."""
    from cleanrl_scaling import ppo_ewma_jax2d

    config = json.loads((template / "config.json").read_text())
    config["argv"] = argv
    config["args"] = dataclasses.asdict(ppo_ewma_jax2d.Args())
    for key, value in parse_flags(argv).items():
        if key in config["args"]:  # tyro's parse: the field's type (clip_coef 0 is 0.0)
            default = config["args"][key]
            config["args"][key] = value if isinstance(value, bool) or default is None else type(default)(value)
        if key in config["resolved"]:
            config["resolved"][key] = typed(value)
    args = config["args"]
    final = solve_rate(args)
    run = runs_dir / f"{args['env_id']}__{args['exp_name']}__{args['seed']}__{1000 + index}"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("summary.json", "kl_profile.jsonl", os.path.join("checkpoints", "latest.ckpt")):  # B26 Fig. 3a reloads
        shutil.copy(template / name, run / name)
    (run / "config.json").write_text(json.dumps(config))
    rows = [json.loads(line) for line in (template / "metrics.jsonl").read_text().splitlines()]
    last = max(r["global_step"] for r in rows)
    for r in rows:
        if "charts/solve_rate" in r:
            r["charts/solve_rate"] = final * r["global_step"] / last
        if "losses/policy_loss" in r:  # a longer run logs it at every update in which training episodes ended
            r["charts/train_solve_rate"] = final * r["global_step"] / last
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return args


def populate(fig: str, runs_dir: pathlib.Path, template: pathlib.Path, env: dict, sub: str = "") -> list:
    out = run_script(fig, DRY_RUN=1, **env)
    assert out.returncode == 0, out.stderr
    argvs = commands(out.stdout)
    for i, argv in enumerate(argvs):
        target = pathlib.Path(parse_flags(argv)["runs_dir"])
        if sub and target.name != sub:
            continue
        target.mkdir(parents=True, exist_ok=True)
        write_like(template, target, argv, i)
    return argvs


def draw_every_figure(template: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Every script end to end on run directories shaped like `template` (a real finished tiny run)."""
    for fig, names in FIGURES.items():
        runs_dir, out_dir = tmp_path / f"runs{fig}", tmp_path / "figures"
        env = dict(RUNS_DIR=runs_dir, OUT_DIR=out_dir, SEEDS="1", FLAGS=flags_for(fig), TOTAL=4096, TOTAL2=8192,
                   ITERATIONS=3, NUM_ENVS_LIST="16 64", BUDGETS="2048 4096")
        if fig in ("7", "8"):
            del env["TOTAL"]
        if fig == "jax2d_pilot":  # laptop only
            env["SCALE"] = "laptop"
        populate(fig, runs_dir, template, env)
        if fig == "3a":  # phase 2 appears once phase 1 finished: one reload per run and COM, then written too
            reloads = [parse_flags(a) for a in populate(fig, runs_dir, template, env, sub="reloaded")]
            assert sorted((r["exp_name"], r["seed"]) for r in reloads) == [
                ("com2_to_2", "1"), ("com2_to_32", "1"), ("com32_to_2", "1"), ("com32_to_32", "1")]
            assert all(r["init_from"].endswith("checkpoints/latest.ckpt") for r in reloads)
        out = run_script(fig, **env)
        assert out.returncode == 0, (fig, out.stdout, out.stderr)
        assert "nothing to do" in out.stdout and "0 run(s)" in out.stdout  # every point was found finished
        for name in names:
            for ext in ("png", "pdf", "csv"):
                assert (out_dir / f"{name}.{ext}").stat().st_size > 0, (fig, name, ext)
    check_figure_numbers(tmp_path / "figures")


def read_csv(path) -> list:
    with open(path) as f:
        return list(csv.DictReader(f))


def check_figure_numbers(out_dir: pathlib.Path) -> None:
    """What each figure plots, from its CSV, against the solve rates written above."""
    base = {"seed": 1, "ewma_com": 2.0, "clip_coef": 0.2, "update_epochs": 8, "num_envs": 8, "learning_rate": 3e-4,
            "anneal_lr": False}

    def expected(**changes):  # the final solve rate of seed 1
        return solve_rate({**base, **changes})

    fig4 = read_csv(out_dir / "beukman2026_fig4.csv")  # annealing adds 0.05: always the best
    assert len(fig4) == 16 and all(r["anneal_lr"] == "True" for r in fig4)
    assert all(float(r["mean"]) == pytest.approx(expected(ewma_com=float(r["group"].split()[1]),
                                                          learning_rate=float(r["learning_rate"]), anneal_lr=True))
               for r in fig4)
    fig5a = read_csv(out_dir / "beukman2026_fig5a_train.csv")  # the training-episode curves end at the same values
    last5a = max(float(r["x"]) for r in fig5a)
    assert {r["group"] for r in fig5a} == {f"COM {c}" for c in (1, 2, 4, 8, 16, 32, 64)}
    assert all(float(r["mean"]) == pytest.approx(expected(ewma_com=float(r["group"].split()[1])))
               for r in fig5a if float(r["x"]) == last5a)
    fig12a = read_csv(out_dir / "beukman2026_fig12a.csv")  # the largest epsilon adds the most
    assert {r["clip_coef"] for r in fig12a} == {"0.8"} and len(fig12a) == 7
    cells = read_csv(out_dir / "beukman2026_fig12b.csv")
    assert len(cells) == 35 and all(float(r["mean"]) == pytest.approx(
        expected(ewma_com=float(r["ewma_com"]), clip_coef=float(r["clip_coef"]))) for r in cells)
    dots = read_csv(out_dir / "beukman2026_fig8.csv")
    assert len(dots) == 2 * (8 + 5) and {r["group"] for r in dots} == {"2048 steps", "4096 steps"}
    fig14 = read_csv(out_dir / "beukman2026_fig14.csv")
    assert {(r["group"], r["num_envs"]) for r in fig14} == {
        (s, n) for s in ("more-minibatches", "larger-minibatches", "sqrt-lr") for n in ("16", "64")}
    assert all(float(r["mean"]) == pytest.approx(expected(num_envs=int(r["num_envs"]), ewma_com=0.0)) for r in fig14)
    assert {r["group"] for r in read_csv(out_dir / "beukman2026_fig13.csv")} == {
        "more-minibatches", "larger-minibatches", "sqrt-lr"}
    fig7a = read_csv(out_dir / "beukman2026_fig7a.csv")
    assert {(r["num_envs"], r["group"]) for r in fig7a} == {(n, f"COM {c}") for n in ("16", "64") for c in (2, 8, 32)}
    fig6b = read_csv(out_dir / "beukman2026_fig6b.csv")
    assert {r["clip_coef"] for r in fig6b} == {"0", "0.1", "0.2", "0.4"}  # the CSV writes 0.0 as 0
    pilot = read_csv(out_dir / "beukman2026_jax2d_pilot_eval.csv")  # plain PPO named so; each arm ends at its value
    groups = {f"COM {c}, ε 0.2": dict(ewma_com=float(c)) for c in (4, 16, 64, 256, 1024)}
    groups.update({f"PPO, ε {e}": dict(ewma_com=0.0, clip_coef=e) for e in (0.2, 0.8)})
    last = max(float(r["x"]) for r in pilot)
    assert {r["group"] for r in pilot} == set(groups)
    assert all(float(r["mean"]) == pytest.approx(expected(**groups[r["group"]])) for r in pilot if float(r["x"]) == last)
    for name in ("beukman2026_fig3a", "beukman2026_fig3a_train"):  # B26's legend: COM (starting COM)
        assert {r["group"] for r in read_csv(out_dir / f"{name}.csv")} == {
            "2", "32", "2 (2)", "32 (2)", "2 (32)", "32 (32)"}
