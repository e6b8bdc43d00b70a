"""Did a run of sfl_kinetix_jax.py get better on random levels? A paired evaluation with the power a run's own
100-level evaluation lacks: the initial policy (the run's seed, before any update) and the policy of the run's last
checkpoint play the same --levels fresh random levels of the run's distribution, --attempts times each, with the same
action keys (common random numbers). Prints per run: both mean solve rates, their paired difference with a 95% interval
over levels, and how many levels neither / both policies always solve; writes the per-level rates to --csv.
    python benchmark/sfl_kinetix_paired_eval.py runs/sfl_learning_long/Kinetix-s__sfl__1__* --levels 1000 --attempts 4
With --pair and two runs (e.g. the MLP and the transformer after the same budget), both runs' initial and final
policies play the same levels with the same action keys, and a third row pairs the two finals (second minus first):
    python benchmark/sfl_kinetix_paired_eval.py RUN_MLP RUN_TRANSFORMER --pair --levels 1000 --attempts 4
A level's solve rate is the run's own definition (the mean over attempts of "the first episode reached the goal").
The levels come from --level-seed (default 2026), not the run's --eval-level-seed, so they are new to both the run's
evaluations and its training (training levels come from the seed's own stream).
"""
import argparse
import csv
import json
import math
import os
import pickle
import sys
from typing import Any, NamedTuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
from _throughput_common import refuse  # noqa: E402
from cleanrl_scaling import sfl_kinetix_jax as m  # noqa: E402


def run_argv(run_dir: str) -> list:
    """The run's own flags (config.json), without --resume: what rebuilds its programs and its initial policy."""
    argv = list(json.load(open(os.path.join(run_dir, "config.json")))["argv"])
    if "--resume" in argv:
        i = argv.index("--resume")
        del argv[i:i + 2]
    return [a for a in argv if not a.startswith("--resume=")]


def check_options(opts):
    if opts.pair and len(opts.run_dirs) != 2:
        refuse(f"--pair compares exactly two runs (got {len(opts.run_dirs)})")
    if opts.levels < 2 or opts.attempts < 1:
        refuse(f"--levels must be >= 2 and --attempts >= 1 (got {opts.levels}, {opts.attempts})")
    for run_dir in opts.run_dirs:
        for name in ("config.json", os.path.join("checkpoints", "latest.ckpt")):
            if not os.path.isfile(os.path.join(run_dir, name)):
                refuse(f"{run_dir}: no {name}; pass run directories of sfl_kinetix_jax.py with a checkpoint")


TABLE_HEAD = ("| run | iteration | steps | initial | final | paired difference (95%) | never solved | always solved |\n"
              "|---|---:|---:|---:|---:|---|---:|---:|")


def paired_summary(initial: np.ndarray, final: np.ndarray) -> dict:
    """Per-level rates of the same levels under two policies: means, the paired mean difference and its 95% interval
    (normal approximation over levels), and the levels both never / both always solve."""
    diff = final - initial
    half = 1.96 * diff.std(ddof=1) / math.sqrt(len(diff))
    return {"initial": float(initial.mean()), "final": float(final.mean()), "diff": float(diff.mean()),
            "ci95": float(half), "never": float(((initial == 0) & (final == 0)).mean()),
            "always": float(((initial == 1) & (final == 1)).mean())}


class Run(NamedTuple):
    name: str
    args: Any
    train: Any  # the script's make_train(args)
    checkpoint: dict


def level_distribution(args) -> tuple:
    """The flags that decide which random levels a key gives (the network and the PPO settings do not)."""
    return (args.env_size, args.episode_length, args.level_filter_ratio, args.level_filter_steps)


def load_run(run_dir: str) -> Run:
    """Rebuild a run's programs from its flags, and read its last checkpoint."""
    import tyro
    argv = run_argv(run_dir)
    args = tyro.cli(m.Args, args=argv)
    scaling = m.validate(args, argv)
    signature = m.resume_signature(args, m.RESUMABLE)  # before apply_scaling rewrites the lr and minibatches
    m.apply_scaling(args, scaling)
    ckpt = m.load_checkpoint(os.path.join(run_dir, "checkpoints", "latest.ckpt"), m.SCRIPT, signature, flag=run_dir,
                             implied=m.older_signature(args, m.RESUMABLE, m.SIGNATURE_IMPLIED), resolved=scaling)
    return Run(os.path.basename(os.path.normpath(run_dir)), args, m.make_train(args), ckpt)


def policies(run: Run, levels) -> dict:
    """{"initial": the run's initial parameters (its seed, before any update), "final": its last checkpoint's}."""
    import jax
    template = run.train.init(jax.tree.map(lambda x: x[0], levels), run.args.seed)
    trained = m.restore_runner(template, run.checkpoint["runner"], run.name)
    return {"initial": template.train.params, "final": trained.train.params}


def new_levels(run: Run, num_levels: int, level_seed: int):
    import jax
    return m.fetch(m.sample_levels(run.train, run.args, jax.random.PRNGKey(level_seed), num_levels))


def solve_rates(run: Run, params, levels, attempts: int, level_seed: int) -> np.ndarray:
    """Per-level solve rates of one policy; the action keys depend only on --level-seed (common to all policies)."""
    import jax
    key = jax.random.PRNGKey(level_seed + 1)
    solved = run.train.first_solved(m.tile_attempts(levels, attempts), params, key)
    return m.level_solve_rates(jax.device_get(solved), attempts)


def evaluate(run_dir: str, num_levels: int, attempts: int, level_seed: int):
    """Per-level solve rates of the initial and the last checkpoint's policy; the checkpoint's iteration."""
    run = load_run(run_dir)
    levels = new_levels(run, num_levels, level_seed)
    rates = [solve_rates(run, params, levels, attempts, level_seed) for params in policies(run, levels).values()]
    return rates[0], rates[1], run.checkpoint["iteration"], run.checkpoint["global_step"]


def table_row(name: str, iteration, steps, s: dict) -> str:
    return (f"| {name} | {iteration} | {steps} | {s['initial']:.3f} | {s['final']:.3f} | {s['diff']:+.3f} ± "
            f"{s['ci95']:.3f} | {s['never']:.0%} | {s['always']:.0%} |")


def evaluate_pair(run_dirs: list, num_levels: int, attempts: int, level_seed: int) -> dict:
    """Both runs' initial and final policies on the same levels and action keys: {(run name, "initial"|"final"):
    per-level rates}, plus the two Runs."""
    runs = [load_run(d) for d in run_dirs]
    if level_distribution(runs[0].args) != level_distribution(runs[1].args):
        refuse(f"--pair: the runs draw levels differently (env size, episode length, level filter: "
               f"{level_distribution(runs[0].args)} vs {level_distribution(runs[1].args)})")
    levels = new_levels(runs[0], num_levels, level_seed)  # the same levels for both: a key gives the same level
    rates = {}
    for run in runs:
        for which, params in policies(run, levels).items():
            rates[(run.name, which)] = solve_rates(run, params, levels, attempts, level_seed)
            print(f"  {run.name} {which}: {rates[(run.name, which)].mean():.3f}", file=sys.stderr, flush=True)
    return {"runs": runs, "rates": rates}


def pair_rows(runs: list, rates: dict) -> list:
    """Each run against its own initial policy, then the second run's final against the first's."""
    a, b = runs
    rows = [table_row(r.name, r.checkpoint["iteration"], r.checkpoint["global_step"],
                      paired_summary(rates[(r.name, "initial")], rates[(r.name, "final")])) for r in runs]
    rows.append(table_row(f"{b.name} final − {a.name} final",
                          f"{a.checkpoint['iteration']} / {b.checkpoint['iteration']}",
                          f"{a.checkpoint['global_step']} / {b.checkpoint['global_step']}",
                          paired_summary(rates[(a.name, "final")], rates[(b.name, "final")])))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+")
    p.add_argument("--levels", type=int, default=1000)
    p.add_argument("--attempts", type=int, default=4)
    p.add_argument("--level-seed", type=int, default=2026)
    p.add_argument("--pair", action="store_true",
                   help="two runs on the same levels and action keys; a third row: second final minus first final")
    p.add_argument("--csv", default=None, help="per-level rates of every run (run, level, initial, final)")
    opts = p.parse_args()
    check_options(opts)
    if opts.pair:
        return main_pair(opts)
    print(TABLE_HEAD)
    rows = []
    for run_dir in opts.run_dirs:
        initial, final, iteration, steps = evaluate(run_dir, opts.levels, opts.attempts, opts.level_seed)
        print(table_row(os.path.basename(os.path.normpath(run_dir)), iteration, steps,
                        paired_summary(initial, final)), flush=True)
        rows += [(os.path.basename(os.path.normpath(run_dir)), i, a, b) for i, (a, b) in enumerate(zip(initial, final))]
    if opts.csv:
        with open(opts.csv, "w", newline="") as f:
            csv.writer(f).writerows([("run", "level", "initial", "final")] + rows)


def main_pair(opts):
    result = evaluate_pair(opts.run_dirs, opts.levels, opts.attempts, opts.level_seed)
    print(TABLE_HEAD)
    print("\n".join(pair_rows(result["runs"], result["rates"])), flush=True)
    if opts.csv:
        names = [r.name for r in result["runs"]]
        columns = [(n, w) for n in names for w in ("initial", "final")]
        with open(opts.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["level"] + [f"{n} {which}" for n, which in columns])
            w.writerows([i] + [result["rates"][c][i] for c in columns] for i in range(opts.levels))


if __name__ == "__main__":
    main()
