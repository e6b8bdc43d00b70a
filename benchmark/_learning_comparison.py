"""The learning comparisons against CleanRL (pqn_atari_learning.py, ppo_procgen_learning.py): the runs, their
logs and the table. A comparison is one of our scripts and one of CleanRL's at CleanRL's defaults, on one machine.

Every run starts at once, one thread each (OMP_NUM_THREADS=1), so each program sees the same machine. Rerunning the
same command continues: a finished run is kept, an unfinished run of ours resumes from its latest checkpoint (with
its own flags, so its budget and schedules stay those it started with), an unfinished CleanRL run (it writes no
checkpoint) starts again. Final return: the mean full-game return of the episodes that end in the last 10% of the
budget, with its standard error and count; both programs log the game's own score.
"""
import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _throughput_common import refuse  # noqa: E402
from cleanrl_scaling.utils.aggregate import open_metrics  # noqa: E402


@dataclass(frozen=True)
class Variant:
    name: str  # the row label: "ours", "ours --cleanrl-compat", ...
    stem: str  # its exp_name: runs are ours/{env_id}__{stem}__{seed}__{time}
    flags: tuple = ()  # what it adds to our script's command line


@dataclass(frozen=True)
class Comparison:
    script: str  # our training script
    stem: str  # its exp_name: runs are ours/{env_id}__{stem}__{seed}__{time}
    batch: int  # steps of one iteration at CleanRL's defaults (CleanRL prints one "SPS: " line per iteration)
    checkpoint_every: int  # our checkpoint period, in iterations
    cleanrl_command: Callable  # (args, seed) -> the argv of CleanRL's run, started in args.out
    variants: tuple = ()  # several arms of ours (each its own exp_name); empty: one arm, "ours", at our defaults
    our_flags: Callable = None  # (args) -> flags every run of ours adds (device, --save-model); None: none

    def arms(self) -> tuple:
        return self.variants or (Variant("ours", self.stem),)


def our_run_dir(cmp: Comparison, out, env_id, seed, variant: Variant = None):
    prefix = f"{env_id}__{(variant or cmp.arms()[0]).stem}__{seed}__"
    dirs = sorted(d for d in os.listdir(os.path.join(out, "ours")) if d.startswith(prefix)) \
        if os.path.isdir(os.path.join(out, "ours")) else []
    return os.path.join(out, "ours", dirs[-1]) if dirs else None


def our_status(run_dir):
    path = os.path.join(run_dir, "summary.json") if run_dir else ""
    return json.load(open(path)).get("status") if os.path.exists(path) else None


def our_command(cmp: Comparison, args, seed, variant: Variant = None):
    """The run's own flags, plus --resume when it left a checkpoint: a resume without them would take the script's
    defaults (another budget, so other lr and exploration schedules), or refuse another env."""
    variant = variant or cmp.arms()[0]
    exp_name = ["--exp-name", variant.stem] if cmp.variants else []
    cmd = [sys.executable, cmp.script, "--env-id", args.env_id, "--seed", str(seed), "--total-timesteps",
           str(args.total), "--runs-dir", os.path.join(args.out, "ours"), "--checkpoint-every",
           str(cmp.checkpoint_every), "--progress", "none", *exp_name, *variant.flags,
           *(cmp.our_flags(args) if cmp.our_flags else ())]
    run_dir = our_run_dir(cmp, args.out, args.env_id, seed, variant)
    latest = os.path.join(run_dir, "checkpoints", "latest.ckpt") if run_dir else ""
    return cmd + (["--resume", latest] if os.path.exists(latest) else [])


def cleanrl_log(out, seed):
    return os.path.join(out, f"cleanrl_s{seed}.log")


def cleanrl_steps(cmp: Comparison, path):
    """CleanRL prints "SPS: ..." once per iteration; its steps done are the iterations it printed."""
    return len(re.findall(r"^SPS: ", open(path).read(), re.M)) * cmp.batch if os.path.exists(path) else 0


@dataclass(frozen=True)
class Job:
    seed: int
    argv: list
    log: str
    mode: str  # "a": ours, whose resumed run continues its log; "w": CleanRL's, which starts again
    cwd: str = None


def pending_jobs(cmp: Comparison, args) -> list:
    """The runs not finished yet, seed by seed (CleanRL's first, then each arm of ours), so that a comparison stopped
    part way has whole seeds of every arm."""
    jobs = []
    for variant in chosen_arms(cmp, args):
        for seed in args.seeds:
            if our_status(our_run_dir(cmp, args.out, args.env_id, seed, variant)) != "finished":
                log = os.path.join(args.out, f"{variant.stem}_s{seed}.log" if cmp.variants else f"ours_s{seed}.log")
                jobs.append(Job(seed, our_command(cmp, args, seed, variant), log, "a"))
    for seed in args.cleanrl_seeds:
        if cleanrl_steps(cmp, cleanrl_log(args.out, seed)) < args.total // cmp.batch * cmp.batch:
            jobs.append(Job(seed, cmp.cleanrl_command(args, seed), cleanrl_log(args.out, seed), "w", args.out))
    # CleanRL's first within a seed: its runs are the slowest (docs/ppo_atari_envpool.md#performance); the sort is
    # stable, so the arms of ours keep their order
    return sorted(jobs, key=lambda j: (j.seed, j.mode != "w"))


def start_runs(cmp: Comparison, args):
    return run_jobs(pending_jobs(cmp, args), getattr(args, "parallel", None))


def _stop(signum, frame):
    raise KeyboardInterrupt


def run_jobs(jobs: list, parallel: int = None) -> list:
    """Each job on one thread, at most `parallel` at once (None: all), in order; their exit codes. Stopped (Ctrl-C,
    SIGTERM), it passes one SIGTERM to each running job (ours checkpoint at the end of the iteration, a second
    signal would stop them without; docs/run_directory.md#checkpoints-and-resume), starts no more, and exits 130.
    The jobs run in their own sessions so that a Ctrl-C in the terminal reaches them only through this."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    queue, running, codes = list(jobs), [], []
    limit = parallel or max(len(jobs), 1)
    print(f"{len(jobs)} run(s) to run, at most {limit} at once", flush=True)
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        while queue or running:
            while queue and len(running) < limit:
                job = queue.pop(0)
                running.append(subprocess.Popen(job.argv, stdout=open(job.log, job.mode), stderr=subprocess.STDOUT,
                                                env=env, cwd=job.cwd, start_new_session=True))
            codes += [p.returncode for p in running if p.poll() is not None]
            running = [p for p in running if p.returncode is None]
            if running:
                time.sleep(0.2)
    except KeyboardInterrupt:
        print(f"stopping: SIGTERM to {len(running)} running run(s), {len(queue)} not started", flush=True)
        for p in running:
            p.send_signal(signal.SIGTERM)
        for p in running:
            p.wait()
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return codes


def print_jobs(jobs: list) -> None:
    """--dry-run: each run's command line, where it starts and its log; nothing is started or written."""
    for job in jobs:
        where = f"cd {shlex.quote(job.cwd)} && " if job.cwd else ""
        redirect = ">>" if job.mode == "a" else ">"
        print(f"{where}OMP_NUM_THREADS=1 {shlex.join(job.argv)} {redirect} {shlex.quote(job.log)} 2>&1")


def our_episodes(run_dir):
    """Training and evaluation (step, return) pairs from metrics.jsonl (or the gzipped copy that
    docs/reproducing/runs/ keeps), and the last step logged."""
    train, evaluation, last = [], [], 0
    for line in open_metrics(os.path.join(run_dir, "metrics.jsonl")):
        row = json.loads(line)
        last = max(last, row["global_step"])
        if "charts/episodic_return" in row:
            train.append((row["global_step"], row["charts/episodic_return"]))
        for tag in ("charts/eval_return", "eval/episodic_return"):  # PQN's greedy evaluation; PPO's final policy's
            if tag in row:
                evaluation.append((row["global_step"], row[tag]))
    return train, evaluation, last


def cleanrl_episodes(path):
    text = open(path).read()  # one line per finished game: "global_step=S, episodic_return=R"
    return [(int(s), float(r)) for s, r in re.findall(r"global_step=(\d+), episodic_return=\[?([-\d.]+)", text)]


def chosen_arms(cmp: Comparison, args) -> tuple:
    names = getattr(args, "arms", None)
    return tuple(v for v in cmp.arms() if not names or v.stem in names)


def final_return(episodes, start):
    """The final statistic: mean return of the episodes that end after step `start` (None if there are none)."""
    values = [r for s, r in episodes if s > start]
    return float(np.mean(values)) if values else None


def bootstrap_difference(ours, theirs, resamples=10_000, seed=0):
    """95% percentile interval of mean(ours) - mean(theirs), resampling each side's seeds with replacement."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(ours, float), np.asarray(theirs, float)
    diffs = rng.choice(a, (resamples, len(a))).mean(1) - rng.choice(b, (resamples, len(b))).mean(1)
    return float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))


def window_stats(episodes, start):
    values = np.array([r for s, r in episodes if s > start])
    if len(values) < 2:
        return f"{'(fewer than 2 episodes)':>22s}"
    return f"{values.mean():7.2f} ± {values.std(ddof=1) / np.sqrt(len(values)):4.2f} (n={len(values):4d})"


def tenths(episodes, total):
    width = total / 10
    bins = [[r for s, r in episodes if k * width < s <= (k + 1) * width] for k in range(10)]
    return " ".join(f"{np.mean(b):5.1f}" if b else "    -" for b in bins)


def summarize(cmp: Comparison, args):
    """The table, then each arm against the reference: CleanRL, or with args.reference (a row label) one of ours."""
    finals, _ = print_table(cmp, args)
    reference = getattr(args, "reference", None) or "CleanRL"
    if getattr(cmp, "variants", ()) and reference in finals:
        expected = len(args.cleanrl_seeds) if reference == "CleanRL" else len(args.seeds)
        print_verdicts(finals, len(args.seeds), expected, reference)


def print_table(cmp: Comparison, args) -> tuple:
    """One row per run; returns each arm's finals and evaluation finals ({arm: {seed: value}}) of finished runs."""
    window = args.total - args.total // 10
    print(f"{args.env_id}, {args.total} steps: final = mean full-game return of episodes ending after step {window}")
    print(f"{'run':12s} {'steps':>8s} {'final training return':>26s} {'final evaluation return':>26s}   "
          "training return per tenth of the budget")
    rows = [(f"{v.name} s{s}", v.name, s, our_run_dir(cmp, args.out, args.env_id, s, v))
            for v in chosen_arms(cmp, args) for s in args.seeds]
    rows += [(f"CleanRL s{s}", "CleanRL", s, cleanrl_log(args.out, s)) for s in args.cleanrl_seeds]
    finals, evals = {}, {}  # arm -> {seed: the final (evaluation) return} of its finished runs
    width = max(12, *(len(name) for name, _, _, _ in rows))
    for name, arm, seed, path in rows:
        if not path or not os.path.exists(path):
            print(f"{name:{width}s} not started")
            continue
        if arm != "CleanRL":
            train, evaluation, steps = our_episodes(path)
        else:
            train, evaluation, steps = cleanrl_episodes(path), [], cleanrl_steps(cmp, path)
        if steps >= args.total // cmp.batch * cmp.batch and final_return(train, window) is not None:
            finals.setdefault(arm, {})[seed] = final_return(train, window)
            if final_return(evaluation, window) is not None:
                evals.setdefault(arm, {})[seed] = final_return(evaluation, window)
        ev = window_stats(evaluation, window) if evaluation else f"{'-':>26s}"
        print(f"{name:{width}s} {steps:8d} {window_stats(train, window):>26s} {ev:>26s}   {tenths(train, args.total)}")
    return finals, evals


def print_verdicts(finals, our_seeds, reference_seeds, reference="CleanRL"):
    """The rule fixed before the runs (the comparison script's header): parity when the 95% bootstrap interval of
    mean(arm) - mean(reference) over seeds contains 0; behind (or ahead) when it lies below (above) 0. The interval's
    half-width is printed: the smallest difference the design could tell."""
    finals = {arm: list(by_seed.values()) for arm, by_seed in finals.items()}
    theirs = finals[reference]
    print(f"{reference} final per seed: {' '.join(f'{v:.2f}' for v in theirs)} (mean {np.mean(theirs):.2f}, "
          f"range {min(theirs):.2f}..{max(theirs):.2f})")
    for arm, ours in finals.items():
        if arm == reference:
            continue
        if len(ours) < our_seeds or len(theirs) < reference_seeds:
            print(f"{arm}: {len(ours)} of {our_seeds} seeds and {len(theirs)} of {reference_seeds} {reference} seeds "
                  "finished; no verdict yet")
            continue
        lo, hi = bootstrap_difference(ours, theirs)
        verdict = "parity" if lo <= 0 <= hi else ("behind" if hi < 0 else "ahead")
        inside = min(theirs) <= np.mean(ours) <= max(theirs)
        print(f"{arm}: per seed {' '.join(f'{v:.2f}' for v in ours)}, mean {np.mean(ours):.2f}; "
              f"difference {np.mean(ours) - np.mean(theirs):+.2f}, 95% bootstrap [{lo:+.2f}, {hi:+.2f}] -> {verdict}"
              f" (half-width {(hi - lo) / 2:.2f}; seed mean {'inside' if inside else 'outside'} {reference}'s seed "
              "range)")


def parser(description: str, out: str, env_id: str) -> argparse.ArgumentParser:
    """The options every comparison takes; each script adds how to find and run CleanRL's side."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", default=out)
    p.add_argument("--env-id", default=env_id)
    p.add_argument("--total", type=int, default=1_000_000)
    p.add_argument("--seeds", type=int, nargs="*", default=[1, 2])
    p.add_argument("--cleanrl-seeds", type=int, nargs="*", default=[1])
    p.add_argument("--summary-only", action="store_true", help="print the table from the runs in --out; run nothing")
    return p


def check_common(cmp: Comparison, args, checkout_file: str):
    if args.total < cmp.batch:
        refuse(f"--total {args.total}: below one iteration of CleanRL's defaults ({cmp.batch} steps)")
    if len(set(args.seeds)) != len(args.seeds) or len(set(args.cleanrl_seeds)) != len(args.cleanrl_seeds):
        refuse("--seeds and --cleanrl-seeds: a seed given twice would run twice into the same log")
    if not args.seeds and not args.cleanrl_seeds:
        refuse("--seeds and --cleanrl-seeds both empty: nothing to run or summarise")
    if not args.summary_only and args.cleanrl_seeds and not os.path.exists(
            os.path.join(args.cleanrl or "", "cleanrl", checkout_file)):
        refuse(f"--cleanrl {args.cleanrl}: not a CleanRL checkout (no cleanrl/{checkout_file}); give one, "
               "or --cleanrl-seeds with no seed")


def run(cmp: Comparison, args):
    args.out = os.path.abspath(args.out)  # CleanRL's runs start in it: its script's path must not be relative to it
    if getattr(args, "dry_run", False):
        return print_jobs(pending_jobs(cmp, args))
    os.makedirs(args.out, exist_ok=True)
    codes = [] if args.summary_only else start_runs(cmp, args)
    summarize(cmp, args)
    sys.exit(1 if any(codes) else 0)
