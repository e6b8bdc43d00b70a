"""The pre-set rule of M25 Fig. 1's laptop reproductions (benchmark/mayor2025_fig1{a,b,c}.sh, SCALE=laptop).

    python benchmark/mayor2025_fig1_rule.py RUNS_DIR [RUNS_DIR ...] --base "num_envs=8 num_steps=128" \
        --arm "4x N: num_envs=32 num_steps=32" [--arm ...] [--metric M] [--lower-is-better] [--out PREFIX]

One game per figure at laptop scale, so the score is the raw return (human normalisation is a constant factor):
- final(run) = mean full-game return of the episodes that end in the last 10% of the run's steps (the aggregation's
  `final`, --final-frac 0.1); only finished runs count; with --metric (a diagnostic, Figs. 3-4), the mean of that
  metric's values logged in the last 10% of steps;
- for each arm against the base: D = mean over seeds of final(arm) - mean over seeds of final(base), and its 95%
  percentile bootstrap interval (10,000 resamples of each side's seeds with replacement, generator seed 0);
- an arm is **better** when every one of its seeds is above the base's median AND the interval lies above 0;
  **worse** when the interval lies below 0; otherwise **not separated** (with --lower-is-better: below, below,
  above);
- the figure script's header says which arms carry the paper's claim and what verdict each outcome gives.
--iterations LO HI replaces the last 10% of steps by the rows logged at iterations LO..HI (both included), the same
window for every run: a post hoc comparison at equal updates (Figs. 3-4's page), not part of any pre-set rule.
Prints every seed's final, the table in markdown (PREFIX.md) and CSV (PREFIX.csv) when --out is given.
"""
import argparse
import csv
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), HERE]
from _learning_comparison import bootstrap_difference  # noqa: E402  (the learning comparisons' rule, same resampling)
from cleanrl_scaling.utils.aggregate import UsageError, load_runs, per_run_scores  # noqa: E402

FINAL_FRAC = 0.1


def parse_config(text: str) -> dict:
    """'num_envs=32 num_steps=32' -> {'num_envs': 32, 'num_steps': 32}."""
    try:
        return {k: int(v) for k, v in (item.split("=") for item in text.split())}
    except ValueError:
        raise UsageError(f"{text!r}: write KEY=INT pairs separated by spaces, e.g. 'num_envs=8 num_steps=128'")


def parse_arm(text: str) -> tuple:
    """'4x N: num_envs=32 num_steps=32' -> ('4x N', {...})."""
    if ":" not in text:
        raise UsageError(f"--arm {text!r}: write 'NAME: KEY=INT ...'")
    name, config = text.split(":", 1)
    return name.strip(), parse_config(config)


def iteration_window_mean(run, metric: str, iterations: tuple) -> float:
    """The mean of metric's values logged at iterations lo..hi (NaN when none): equal updates across runs."""
    m = run.metrics
    if metric not in m or "iteration" not in m:
        return float("nan")
    values = m.loc[m["iteration"].between(*iterations), metric].dropna()
    return float(values.mean()) if len(values) else float("nan")


def finals_of(runs: list, config: dict, metric: str, iterations: tuple = None) -> dict:
    """seed -> final value of every finished run whose config matches (the other flags are the figure's own); with
    iterations, the mean over that iteration window instead."""
    members = [run for run in runs if all(run.value(k) == v for k, v in config.items())]
    if iterations:
        values = [iteration_window_mean(run, metric, iterations) for run in members]
        window = f"iterations {iterations[0]}-{iterations[1]}"
    else:
        values = per_run_scores(members, metric, "final", FINAL_FRAC, None)
        window = f"the last {FINAL_FRAC:.0%} of its steps"
    out = {}
    for run, value in zip(members, values):
        if np.isfinite(value):  # no value in the window: the run does not count (and the verdict waits)
            out[int(run.value("seed"))] = value
        else:
            print(f"warning: {run.path}: no {metric} in {window}", file=sys.stderr)
    return out


def judge(arm: list, base: list, sign: float = 1.0) -> tuple:
    """(D, interval, outcome) by the rule in the module docstring; sign -1 when lower is better."""
    lo, hi = bootstrap_difference(arm, base)
    d = float(np.mean(arm) - np.mean(base))
    beyond_median = all(sign * (v - float(np.median(base))) > 0 for v in arm)
    if sign * lo > 0 and sign * hi > 0 and beyond_median:
        return d, (lo, hi), "better"
    if sign * lo < 0 and sign * hi < 0:
        return d, (lo, hi), "worse"
    return d, (lo, hi), "not separated"


def table(base_name: str, base: dict, arms: list, sign: float = 1.0) -> list:
    """One row per arm and the base: every seed's final, the mean, D and its interval, the outcome."""
    seeds = sorted(set(base).union(*(set(f) for _, f in arms)))
    rows = [{"arm": base_name, **{f"seed {s}": base.get(s) for s in seeds}, "mean": float(np.mean(list(base.values()))),
             "D vs base": None, "95% interval": None, "outcome": "(base)"}]
    for name, finals in arms:
        row = {"arm": name, **{f"seed {s}": finals.get(s) for s in seeds}, "mean": float(np.mean(list(finals.values())))}
        d, (lo, hi), outcome = judge(list(finals.values()), list(base.values()), sign)
        rows.append({**row, "D vs base": d, "95% interval": f"[{number(lo, True)}, {number(hi, True)}]", "outcome": outcome})
    return rows


def number(v: float, signed: bool = False) -> str:
    """Values of 1,000 and more (game returns) as 11,158, smaller ones (diagnostics) to 4 significant digits."""
    sign = "+" if signed else ""
    return f"{v:{sign},.0f}" if abs(v) >= 1000 else f"{v:{sign}.4g}"


def markdown(rows: list) -> str:
    cols = list(rows[0])
    fmt = lambda v: "–" if v is None else (number(v) if isinstance(v, float) else str(v))  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(lines + ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs_dir", nargs="+", help="one or more runs directories (e.g. a figure that reuses Fig. 1a's base)")
    p.add_argument("--base", required=True, help="the base's config, e.g. 'num_envs=8 num_steps=128'")
    p.add_argument("--base-name", default="base")
    p.add_argument("--arm", action="append", required=True, help="'NAME: KEY=INT ...' (repeat)")
    p.add_argument("--metric", default="charts/episodic_return")
    p.add_argument("--lower-is-better", action="store_true", help="the paper's direction for this metric is down")
    p.add_argument("--iterations", type=int, nargs=2, metavar=("LO", "HI"),
                   help="post hoc: judge the mean over iterations LO..HI (equal updates) instead of the last 10%%")
    p.add_argument("--seeds", type=int, default=3, help="seeds every side needs before a verdict (3)")
    p.add_argument("--out", help="write PREFIX.md and PREFIX.csv")
    args = p.parse_args()
    try:
        base_config, arms = parse_config(args.base), [parse_arm(a) for a in args.arm]
        if args.iterations and not 0 < args.iterations[0] <= args.iterations[1]:
            raise UsageError(f"--iterations {args.iterations[0]} {args.iterations[1]}: need 0 < LO <= HI")
        runs = load_runs(args.runs_dir, only_finished=True)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    base = finals_of(runs, base_config, args.metric, args.iterations)
    finals = [(name, finals_of(runs, config, args.metric, args.iterations)) for name, config in arms]
    missing = [n for n, f in [(args.base_name, base)] + finals if len(f) < args.seeds]
    if missing:
        print(f"no verdict yet: fewer than {args.seeds} finished seeds for {', '.join(missing)}")
        for name, f in [(args.base_name, base)] + finals:
            print(f"  {name}: {', '.join(f'seed {s} {number(v)}' for s, v in sorted(f.items())) or 'none'}")
        return
    rows = table(args.base_name, base, finals, -1.0 if args.lower_is_better else 1.0)
    text = markdown(rows)
    print(text, end="")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out + ".md", "w") as f:
            f.write(text)
        with open(args.out + ".csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
