"""The placement rule of B26's Jax2D pilot: from its runs, the main runs' COM grid, budget and figure choices, by the
rule in benchmark/beukman2026_jax2d_pilot.sh's header (written before the pilot ran; the design:
docs/reproducing/beukman2026_jax2d_design.md).

    python benchmark/beukman2026_jax2d_placement.py RUNS_DIR [--out PREFIX]

What is read, per run (one run per arm; the newest of runs with identical flags):
- the training solve rate of a 20-update window, pooled over its episodes. ppo_ewma_jax2d.py logs
  charts/train_solve_rate once per update (the fraction of that update's finished episodes that ended at the goal)
  and one row per finished episode at the same iteration (charts/episodic_return), so a window's rate is
  sum(rate x episodes) / sum(episodes) over its 20 updates: every episode weighs the same, not every update
  (beukman2026_jax2d_rule.py's train_rate, the one definition both rules use);
- the windows are the ten disjoint ones of updates 1-20, 21-40, ..., 181-200: W1 = 1-20, MID = 81-100, FINAL =
  181-200, BEST = the highest of the ten. The rule is written for 200 updates: a run with fewer finished is refused
  (exit 2, naming it), and updates after 200 are not read;
- beside them (the pilot page's table, not the rule): the last evaluation at or before update 200
  (charts/solve_rate) and the median of diagnostics/kl_behavior (KL to the behaviour policy) over updates 1-200.
The rule: C* = the COM (PPO-EWMA, ewma_com > 0) with the highest FINAL (a tie: the lower COM). Below C*, a COM
*plateaus* if BEST >= W1 + 0.03, FINAL - MID <= 0.01, FINAL >= BEST - 0.05 and FINAL <= FINAL(C*) - 0.05; it
*collapsed* if BEST < W1 + 0.03. Above C*, a COM is *too high* if FINAL <= FINAL(C*) - 0.05 and FINAL - MID > 0.01.
Otherwise *neither*. C_low = the highest plateauing COM, else (not bracketed) 2 x the highest collapsing COM, else
the lowest pilot COM / 4; C_high = the lowest too-high COM, else (not bracketed) 4 x the highest pilot COM.
Main grid (our reading of "x4 steps from C_low to C_high"): the x4 steps through C* (the pilot's lattice) between
C_low and C_high, and C_low and C_high themselves, so that C* is always on it (C_low = 2 x a collapsing COM is off
the lattice, one x2 step below its next point). U = 300 updates if C_low's FINAL - MID > 0.005, else 200 (also when
C_low is not a pilot arm: nothing measured it creeping). Fig. 3a: C_low and C*. Fig. 5b runs if plain PPO at
epsilon 0.8 plateaus against epsilon 0.2 by the same test (epsilon 0.2 in C*'s place; a larger epsilon is the
weaker regulariser, as a lower COM, so epsilons above 0.2 take the test below C*, those under it the one above).
Comparisons allow 1e-9 for float rounding. Writes PREFIX.md (printed too), PREFIX.csv (every arm's numbers) and
PREFIX.json (the placement; the main figure scripts read it).
"""
import argparse
import csv
import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]  # the repository, and the rule beside this file
from cleanrl_scaling.utils.aggregate import Run, UsageError, deduplicate, read_metrics  # noqa: E402
from cleanrl_scaling.utils.rundirs import read_json, run_dirs, run_status  # noqa: E402
from beukman2026_jax2d_rule import EPISODE, TRAIN, train_rate  # noqa: E402  (one pooled rate for both rules)

UPDATES = 200  # the rule is written for the pilot's 200 updates
WINDOW = 20
W1, MID, FINAL = 0, 4, 9  # window indices: updates 1-20, 81-100, 181-200
LEARNED, STOPPED, FELL_BACK, BELOW_STAR, CREEPING = 0.03, 0.01, 0.05, 0.05, 0.005  # the header's margins
TOL = 1e-9
REFERENCE_EPS, WEAK_EPS = 0.2, 0.8


@dataclass
class Arm:
    label: str
    com: float
    clip_coef: float
    run: str
    updates: int
    windows: list  # pooled training solve rate of the ten windows
    final_eval: float
    final_eval_iteration: Optional[int]
    kl_median: float
    cls: str = ""

    @property
    def w1(self):
        return self.windows[W1]

    @property
    def mid(self):
        return self.windows[MID]

    @property
    def final(self):
        return self.windows[FINAL]

    @property
    def best(self):
        return max(self.windows)

    def best_window(self) -> str:
        i = self.windows.index(self.best)
        return f"{i * WINDOW + 1}-{(i + 1) * WINDOW}"


# ---------------------------------------------------------------------------------------------------------
# Reading one run
# ---------------------------------------------------------------------------------------------------------
def column(frame, tag):
    """(iteration, value) rows of one tag at updates 1-200."""
    if tag not in frame:
        return frame.iloc[0:0][["iteration"]].assign(value=[])
    rows = frame[frame[tag].notna() & (frame["iteration"] <= UPDATES)]
    return rows[["iteration"]].assign(value=rows[tag].to_numpy(dtype=float))


def finished_updates(run) -> int:
    frame = run.metrics
    if "iteration" not in frame or "losses/policy_loss" not in frame or frame["losses/policy_loss"].isna().all():
        return 0
    return int(frame.loc[frame["losses/policy_loss"].notna(), "iteration"].max())


def window_rates(run) -> list:
    """The ten windows' training solve rates, each pooled over the episodes that ended in it."""
    rates = column(run.metrics, TRAIN)
    episodes = column(run.metrics, EPISODE).groupby("iteration").size()
    if rates["iteration"].duplicated().any() or set(rates["iteration"]) != set(episodes.index):
        raise UsageError(f"{run.path}: charts/train_solve_rate is not one row per update with finished episodes; "
                         "was it written by ppo_ewma_jax2d.py?")
    out = []
    for first in range(1, UPDATES + 1, WINDOW):
        rate = train_rate(run, first, first + WINDOW - 1)
        if not math.isfinite(rate):
            raise UsageError(f"{run.path}: no training episode ended in updates {first}-{first + WINDOW - 1}; "
                             "the rule cannot read that window")
        out.append(rate)
    return out


def arm_label(com: float, clip_coef: float) -> str:
    """The pilot figure's legend: plain PPO (COM 0) is named so."""
    return f"COM {com:g}, ε {clip_coef:g}" if com > 0 else f"PPO, ε {clip_coef:g}"


def read_arm(run) -> Arm:
    updates = finished_updates(run)
    if updates < UPDATES:
        raise UsageError(f"{run.path} has {updates} of the {UPDATES} updates the rule reads; let it finish "
                         "(RESUME=1 continues it) or remove it")
    if run.value("clip_coef") is None:
        raise UsageError(f"{run.path}: its config.json has no clip_coef; not a ppo_ewma_jax2d.py run")
    com, clip_coef = float(run.value("ewma_com") or 0.0), float(run.value("clip_coef"))
    evals = column(run.metrics, "charts/solve_rate")
    last = evals.sort_values("iteration", kind="stable").tail(1)
    kl = column(run.metrics, "diagnostics/kl_behavior")["value"]
    return Arm(label=arm_label(com, clip_coef), com=com, clip_coef=clip_coef, run=run.path, updates=updates,
               windows=window_rates(run), final_eval=float(last["value"].iloc[0]) if len(last) else math.nan,
               final_eval_iteration=int(last["iteration"].iloc[0]) if len(last) else None,
               kl_median=float(np.median(kl)) if len(kl) else math.nan)


def load_runs(runs_dir: str) -> list:
    """Every run directory under runs_dir, finished or not (a run that stopped early is refused, not skipped)."""
    if not os.path.isdir(runs_dir):
        raise UsageError(f"runs directory {runs_dir!r} not found")
    runs = []
    for path in run_dirs(runs_dir):
        config = read_json(os.path.join(path, "config.json"))
        if isinstance(config, dict):
            runs.append(Run(path, config, run_status(path), read_metrics(os.path.join(path, "metrics.jsonl"))))
    if not runs:
        raise UsageError(f"no runs (config.json + metrics.jsonl) under {runs_dir}")
    return runs


def read_arms(runs_dir: str) -> list:
    arms = [read_arm(run) for run in deduplicate(load_runs(runs_dir))]
    seen = {}
    for arm in arms:
        if arm.label in seen:
            raise UsageError(f"two runs of {arm.label} ({seen[arm.label]}, {arm.run}): the rule reads one seed per arm")
        seen[arm.label] = arm.run
    return sorted(arms, key=lambda a: (a.com == 0, a.com, a.clip_coef))


# ---------------------------------------------------------------------------------------------------------
# The rule
# ---------------------------------------------------------------------------------------------------------
def at_least(a: float, b: float) -> bool:
    return a >= b - TOL


def at_most(a: float, b: float) -> bool:
    return a <= b + TOL


def learned(arm: Arm) -> bool:
    return at_least(arm.best, arm.w1 + LEARNED)


def class_below(arm: Arm, best_final: float) -> str:
    """A COM below C* (an epsilon above 0.2): plateaus, collapsed or neither."""
    if not learned(arm):
        return "collapsed"
    if (at_most(arm.final - arm.mid, STOPPED) and at_least(arm.final, arm.best - FELL_BACK)
            and at_most(arm.final, best_final - BELOW_STAR)):
        return "plateaus"
    return "neither"


def class_above(arm: Arm, best_final: float) -> str:
    """A COM above C* (an epsilon under 0.2): too high (still rising, well below C*) or neither."""
    rising = not at_most(arm.final - arm.mid, STOPPED)
    return "too high" if at_most(arm.final, best_final - BELOW_STAR) and rising else "neither"


def main_grid(c_low: float, c_star: float, c_high: float) -> list:
    """x4 steps through C* within [C_low, C_high], and both ends."""
    grid = {c_low, c_high}
    x = c_star
    while x >= c_low:
        if x <= c_high:
            grid.add(x)
        x /= 4
    x = c_star * 4
    while x <= c_high:
        grid.add(x)
        x *= 4
    return sorted(grid)


def place(arms: list) -> dict:
    coms = [a for a in arms if a.com > 0]
    if len(coms) < 2:
        raise UsageError(f"{len(coms)} PPO-EWMA run(s) (ewma_com > 0); the rule compares two or more COMs")
    star = max(coms, key=lambda a: (a.final, -a.com))
    for a in coms:
        a.cls = "C*" if a is star else class_below(a, star.final) if a.com < star.com else class_above(a, star.final)
    plateau = [a.com for a in coms if a.cls == "plateaus"]
    collapsed = [a.com for a in coms if a.cls == "collapsed"]
    high = [a.com for a in coms if a.cls == "too high"]
    if plateau:
        c_low, low_note = max(plateau), "the highest plateauing COM"
    elif collapsed:
        c_low = 2 * max(collapsed)
        low_note = f"not bracketed: no COM plateaued; x2 above the highest collapsing COM ({max(collapsed):g})"
    else:
        c_low = min(a.com for a in coms) / 4
        low_note = "not bracketed: no COM below C* plateaued or collapsed; one x4 step below the lowest pilot COM"
    if high:
        c_high, high_note = min(high), "the lowest too-high COM"
    else:
        c_high = 4 * max(a.com for a in coms)
        high_note = "not bracketed: no COM too high; one x4 step above the highest pilot COM"
    if c_low >= star.com:
        print(f"warning: C_low {c_low:g} is not below C* {star.com:g}; the x2 extension assumes a x4 pilot grid",
              file=sys.stderr)
    low_arm = next(a for a in coms if a.com == c_low) if plateau else None
    creeping = low_arm is not None and low_arm.final - low_arm.mid > CREEPING + TOL
    if low_arm is None:
        budget_note = "C_low is not a pilot arm, so nothing measured it creeping"
    else:
        budget_note = f"C_low's FINAL - MID = {low_arm.final - low_arm.mid:.4f} {'>' if creeping else '<='} {CREEPING}"
    return {"c_star": star.com, "c_low": c_low, "c_high": c_high, "coms": main_grid(c_low, star.com, c_high),
            "updates": 300 if creeping else 200, "fig3a": [c_low, star.com],
            "fig5b": place_epsilons(arms), "bracketed": {"low": bool(plateau), "high": bool(high)},
            "notes": {"c_star": f"the highest FINAL, {star.final:.4f}", "c_low": low_note, "c_high": high_note,
                      "updates": budget_note}}


def place_epsilons(arms: list) -> bool:
    """Classes of the plain-PPO arms against epsilon 0.2; True if epsilon 0.8 plateaus (Fig. 5b runs)."""
    ppo = {a.clip_coef: a for a in arms if a.com == 0}
    ref = ppo.get(REFERENCE_EPS)
    for eps, a in ppo.items():
        if ref is None:
            a.cls = f"no ε {REFERENCE_EPS:g} arm"
        elif a is ref:
            a.cls = "ε reference"
        else:
            a.cls = class_below(a, ref.final) if eps > REFERENCE_EPS else class_above(a, ref.final)
    return ref is not None and WEAK_EPS in ppo and ppo[WEAK_EPS].cls == "plateaus"


# ---------------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------------
def csv_rows(arms: list) -> list:
    return [{"arm": a.label, "com": a.com, "clip_coef": a.clip_coef, "w1": a.w1, "mid": a.mid, "final": a.final,
             "best": a.best, "best_window": a.best_window(), "final_minus_mid": a.final - a.mid,
             "final_eval": a.final_eval, "final_eval_iteration": a.final_eval_iteration,
             "kl_behavior_median": a.kl_median, "updates": a.updates, "class": a.cls, "run": a.run} for a in arms]


def markdown(arms: list, placement: dict, runs_dir: str) -> str:
    def num(v, fmt=".4f"):
        return "–" if v is None or not math.isfinite(v) else format(v, fmt)

    notes = placement["notes"]
    lines = [f"Pilot placement from {runs_dir} (training solve rate pooled over the episodes of each 20-update window; "
             "rule: benchmark/beukman2026_jax2d_pilot.sh's header)", "",
             "| arm | W1 (1-20) | MID (81-100) | FINAL (181-200) | BEST (updates) | FINAL - MID | final evaluation "
             "(update) | median KL to behaviour | class |", "|---|---|---|---|---|---|---|---|---|"]
    for a in arms:
        evaluation = f"{num(a.final_eval)} ({a.final_eval_iteration})" if a.final_eval_iteration else "–"
        lines.append(f"| {a.label} | {num(a.w1)} | {num(a.mid)} | {num(a.final)} | {num(a.best)} ({a.best_window()}) "
                     f"| {num(a.final - a.mid, '+.4f')} | {evaluation} | {num(a.kl_median, '.3g')} | {a.cls} |")
    fig5b = placement["fig5b"]
    lines += ["", f"- C* = {placement['c_star']:g} ({notes['c_star']})",
              f"- C_low = {placement['c_low']:g} ({notes['c_low']})",
              f"- C_high = {placement['c_high']:g} ({notes['c_high']})",
              f"- main COM grid: {', '.join(f'{c:g}' for c in placement['coms'])}",
              f"- main budget U = {placement['updates']} updates ({notes['updates']})",
              f"- Fig. 3a: C_low {placement['fig3a'][0]:g} and C* {placement['fig3a'][1]:g}",
              f"- Fig. 5b: {'runs' if fig5b else 'does not run'} (ε {WEAK_EPS:g} "
              f"{'plateaus' if fig5b else 'does not plateau or is missing'} against ε {REFERENCE_EPS:g})"]
    return "\n".join(lines) + "\n"


def write_outputs(prefix: str, arms: list, placement: dict, runs_dir: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    text = markdown(arms, placement, runs_dir)
    with open(f"{prefix}.md", "w", encoding="utf-8") as f:
        f.write(text)
    rows = csv_rows(arms)
    with open(f"{prefix}.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = {k: v for k, v in placement.items() if k != "notes"}
    out["arms"] = {a.label: {"com": a.com, "clip_coef": a.clip_coef, "w1": a.w1, "mid": a.mid, "final": a.final,
                             "best": a.best, "class": a.cls} for a in arms}
    out["pilot_runs_dir"] = runs_dir
    with open(f"{prefix}.json", "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2, ensure_ascii=False)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs_dir", help="the pilot's runs directory (runs/beukman2026_jax2d_pilot)")
    parser.add_argument("--out", default=os.path.join("runs", "figures", "beukman2026_jax2d_placement"),
                        help="writes PREFIX.md, PREFIX.csv and PREFIX.json")
    args = parser.parse_args(argv)
    try:
        arms = read_arms(args.runs_dir)
        placement = place(arms)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(write_outputs(args.out, arms, placement, args.runs_dir), end="")
    print(f"-> {args.out}.md, {args.out}.csv, {args.out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
