"""Learning side by side: pqn_atari.py (its defaults) against CleanRL's pqn_atari_envpool.py on one machine.

    python benchmark/pqn_atari_learning.py --cleanrl PATH_TO_CLEANRL_CHECKOUT [--out runs/pqn_learning]
        [--env-id Breakout-v5] [--total 1000000] [--seeds 1 2] [--cleanrl-seeds 1]
    python benchmark/pqn_atari_learning.py --out runs/pqn_learning --summary-only

Every run starts at once, one thread each (OMP_NUM_THREADS=1), so each program sees the same machine. CleanRL's
script runs from a copy patched only for envpool 1.x's reset/step tuples (never committed). Rerunning the same
command continues: a finished run is kept, an unfinished run of ours resumes from its latest checkpoint, an
unfinished CleanRL run (it writes no checkpoint) starts again.

Prints, per run: the steps done; the final training return, i.e. the mean full-game return of the episodes that end
in the last 10% of the budget (with its standard error and count); for ours also the greedy evaluation return
(charts/eval_return) over the same window; and the mean training return in each tenth of the budget.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "cleanrl_scaling", "pqn_atari.py")
BATCH = 8 * 128  # CleanRL's defaults, which both programs run: 8 envs x 128 steps per iteration


def patched_cleanrl(checkout, directory):
    sys.path.insert(0, HERE)
    from pqn_atari_throughput import patched_cleanrl as patch  # one place knows CleanRL's envpool 0.x lines
    return patch(checkout, directory)


def our_run_dir(out, env_id, seed):
    dirs = sorted(glob.glob(os.path.join(out, "ours", f"{env_id}__pqn_atari__{seed}__*")))
    return dirs[-1] if dirs else None


def our_status(run_dir):
    path = os.path.join(run_dir, "summary.json") if run_dir else ""
    return json.load(open(path)).get("status") if os.path.exists(path) else None


def our_command(args, seed):
    run_dir = our_run_dir(args.out, args.env_id, seed)
    latest = os.path.join(run_dir, "checkpoints", "latest.ckpt") if run_dir else ""
    if os.path.exists(latest):
        return [sys.executable, SCRIPT, "--resume", latest, "--progress", "none"]
    return [sys.executable, SCRIPT, "--env-id", args.env_id, "--seed", str(seed), "--total-timesteps",
            str(args.total), "--runs-dir", os.path.join(args.out, "ours"), "--checkpoint-every", "50",
            "--progress", "none"]


def cleanrl_log(out, seed):
    return os.path.join(out, f"cleanrl_s{seed}.log")


def cleanrl_steps(path):
    """CleanRL prints "SPS: ..." once per iteration; its steps done are the iterations it printed."""
    return len(re.findall(r"^SPS: ", open(path).read(), re.M)) * BATCH if os.path.exists(path) else 0


def start_runs(args):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs = []
    for seed in args.seeds:
        if our_status(our_run_dir(args.out, args.env_id, seed)) != "finished":
            log = open(os.path.join(args.out, f"ours_s{seed}.log"), "a")
            procs.append(subprocess.Popen(our_command(args, seed), stdout=log, stderr=subprocess.STDOUT, env=env))
    for seed in args.cleanrl_seeds:
        if cleanrl_steps(cleanrl_log(args.out, seed)) < args.total // BATCH * BATCH:
            path = patched_cleanrl(args.cleanrl, args.out)
            cmd = [sys.executable, path, "--env-id", args.env_id, "--seed", str(seed), "--total-timesteps",
                   str(args.total), "--no-cuda"]
            log = open(cleanrl_log(args.out, seed), "w")
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=args.out))
    print(f"{len(procs)} run(s) started in {args.out}", flush=True)
    return [p.wait() for p in procs]


def our_episodes(run_dir):
    """Training and evaluation (step, return) pairs from metrics.jsonl, and the last step logged."""
    train, evaluation, last = [], [], 0
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        row = json.loads(line)
        last = max(last, row["global_step"])
        if "charts/episodic_return" in row:
            train.append((row["global_step"], row["charts/episodic_return"]))
        if "charts/eval_return" in row:
            evaluation.append((row["global_step"], row["charts/eval_return"]))
    return train, evaluation, last


def cleanrl_episodes(path):
    text = open(path).read()  # one line per finished game: "global_step=S, episodic_return=R"
    return [(int(s), float(r)) for s, r in re.findall(r"global_step=(\d+), episodic_return=\[?([-\d.]+)", text)]


def window_stats(episodes, start):
    values = np.array([r for s, r in episodes if s > start])
    if len(values) < 2:
        return f"{'(fewer than 2 episodes)':>22s}"
    return f"{values.mean():7.2f} ± {values.std(ddof=1) / np.sqrt(len(values)):4.2f} (n={len(values):4d})"


def tenths(episodes, total):
    width = total / 10
    bins = [[r for s, r in episodes if k * width < s <= (k + 1) * width] for k in range(10)]
    return " ".join(f"{np.mean(b):5.1f}" if b else "    -" for b in bins)


def summarize(args):
    window = args.total - args.total // 10
    print(f"{args.env_id}, {args.total} steps: final = mean full-game return of episodes ending after step {window}")
    print(f"{'run':12s} {'steps':>8s} {'final training return':>26s} {'final greedy eval return':>26s}   "
          "training return per tenth of the budget")
    rows = [(f"ours s{s}", our_run_dir(args.out, args.env_id, s)) for s in args.seeds]
    rows += [(f"CleanRL s{s}", cleanrl_log(args.out, s)) for s in args.cleanrl_seeds]
    for name, path in rows:
        if not path or not os.path.exists(path):
            print(f"{name:12s} not started")
            continue
        if name.startswith("ours"):
            train, evaluation, steps = our_episodes(path)
        else:
            train, evaluation, steps = cleanrl_episodes(path), [], cleanrl_steps(path)
        ev = window_stats(evaluation, window) if evaluation else f"{'-':>26s}"
        print(f"{name:12s} {steps:8d} {window_stats(train, window):>26s} {ev:>26s}   {tenths(train, args.total)}")


def refuse(message):
    print(f"error: {message}", file=sys.stderr)  # one line, exit 2, before any run starts
    sys.exit(2)


def check_options(args):
    if args.total < BATCH:
        refuse(f"--total {args.total}: below one iteration of the defaults (8 envs x 128 steps = 1024 steps)")
    if len(set(args.seeds)) != len(args.seeds) or len(set(args.cleanrl_seeds)) != len(args.cleanrl_seeds):
        refuse("--seeds and --cleanrl-seeds: a seed given twice would run twice into the same log")
    if not args.summary_only and args.cleanrl_seeds and not os.path.exists(
            os.path.join(args.cleanrl or "", "cleanrl", "pqn_atari_envpool.py")):
        refuse(f"--cleanrl {args.cleanrl}: not a CleanRL checkout (no cleanrl/pqn_atari_envpool.py); give one, "
               "or --cleanrl-seeds with no seed")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cleanrl", help="a CleanRL checkout (its cleanrl/pqn_atari_envpool.py is patched in --out)")
    p.add_argument("--out", default="runs/pqn_learning")
    p.add_argument("--env-id", default="Breakout-v5")
    p.add_argument("--total", type=int, default=1_000_000)
    p.add_argument("--seeds", type=int, nargs="*", default=[1, 2])
    p.add_argument("--cleanrl-seeds", type=int, nargs="*", default=[1])
    p.add_argument("--summary-only", action="store_true", help="print the table from the runs in --out; run nothing")
    args = p.parse_args()
    check_options(args)
    os.makedirs(args.out, exist_ok=True)
    codes = [] if args.summary_only else start_runs(args)
    summarize(args)
    sys.exit(1 if any(codes) else 0)


if __name__ == "__main__":
    main()
