"""Did a run of sfl_kinetix_jax.py get better on random levels? A paired evaluation with the power a run's own
100-level evaluation lacks: the initial policy (the run's seed, before any update) and the policy of the run's last
checkpoint play the same --levels fresh random levels of the run's distribution, --attempts times each, with the same
action keys (common random numbers). Prints per run: both mean solve rates, their paired difference with a 95% interval
over levels, and how many levels neither / both policies always solve; writes the per-level rates to --csv.
    python benchmark/sfl_kinetix_paired_eval.py runs/sfl_learning_long/Kinetix-s__sfl__1__* --levels 1000 --attempts 4
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

import numpy as np

sys.path.insert(0, __file__.rsplit("/benchmark/", 1)[0])
from cleanrl_scaling import sfl_kinetix_jax as m  # noqa: E402


def refuse(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def run_argv(run_dir: str) -> list:
    """The run's own flags (config.json), without --resume: what rebuilds its programs and its initial policy."""
    argv = list(json.load(open(os.path.join(run_dir, "config.json")))["argv"])
    if "--resume" in argv:
        i = argv.index("--resume")
        del argv[i:i + 2]
    return [a for a in argv if not a.startswith("--resume=")]


def check_options(opts):
    if opts.levels < 2 or opts.attempts < 1:
        refuse(f"--levels must be >= 2 and --attempts >= 1 (got {opts.levels}, {opts.attempts})")
    for run_dir in opts.run_dirs:
        for name in ("config.json", os.path.join("checkpoints", "latest.ckpt")):
            if not os.path.isfile(os.path.join(run_dir, name)):
                refuse(f"{run_dir}: no {name}; pass run directories of sfl_kinetix_jax.py with a checkpoint")


def paired_summary(initial: np.ndarray, final: np.ndarray) -> dict:
    """Per-level rates of the same levels under two policies: means, the paired mean difference and its 95% interval
    (normal approximation over levels), and the levels both never / both always solve."""
    diff = final - initial
    half = 1.96 * diff.std(ddof=1) / math.sqrt(len(diff))
    return {"initial": float(initial.mean()), "final": float(final.mean()), "diff": float(diff.mean()),
            "ci95": float(half), "never": float(((initial == 0) & (final == 0)).mean()),
            "always": float(((initial == 1) & (final == 1)).mean())}


def evaluate(run_dir: str, num_levels: int, attempts: int, level_seed: int):
    """Per-level solve rates of the initial and the last checkpoint's policy; the checkpoint's iteration."""
    import jax
    import tyro
    argv = run_argv(run_dir)
    args = tyro.cli(m.Args, args=argv)
    m.apply_scaling(args, m.validate(args, argv))
    ckpt = m.load_checkpoint(os.path.join(run_dir, "checkpoints", "latest.ckpt"), m.SCRIPT, m.signature(args),
                             flag=run_dir, implied=m.SIGNATURE_IMPLIED)
    setup, _, programs = m.build(m.build_config(args), args.sfl_buffer_size)
    levels = m.fetch(m.sample_levels(programs, args, jax.random.PRNGKey(level_seed), num_levels))
    template = programs.init(jax.tree.map(lambda x: x[0], levels), args.seed)  # the run's initial parameters
    trained = m.restore_runner(template, ckpt["runner"], run_dir)
    tiled = m.tile_attempts(levels, attempts)
    key = jax.random.PRNGKey(level_seed + 1)  # the same action keys for both policies
    rates = [m.level_solve_rates(jax.device_get(programs.first_solved(tiled, params, key)), attempts)
             for params in (template.train.params, trained.train.params)]
    return rates[0], rates[1], ckpt["iteration"], ckpt["global_step"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+")
    p.add_argument("--levels", type=int, default=1000)
    p.add_argument("--attempts", type=int, default=4)
    p.add_argument("--level-seed", type=int, default=2026)
    p.add_argument("--csv", default=None, help="per-level rates of every run (run, level, initial, final)")
    opts = p.parse_args()
    check_options(opts)
    print(f"| run | iteration | steps | initial | final | paired difference (95%) | never solved | always solved |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    rows = []
    for run_dir in opts.run_dirs:
        initial, final, iteration, steps = evaluate(run_dir, opts.levels, opts.attempts, opts.level_seed)
        s = paired_summary(initial, final)
        print(f"| {os.path.basename(os.path.normpath(run_dir))} | {iteration} | {steps} | {s['initial']:.3f} "
              f"| {s['final']:.3f} | {s['diff']:+.3f} ± {s['ci95']:.3f} | {s['never']:.0%} | {s['always']:.0%} |",
              flush=True)
        rows += [(os.path.basename(os.path.normpath(run_dir)), i, a, b) for i, (a, b) in enumerate(zip(initial, final))]
    if opts.csv:
        with open(opts.csv, "w", newline="") as f:
            csv.writer(f).writerows([("run", "level", "initial", "final")] + rows)


if __name__ == "__main__":
    main()
