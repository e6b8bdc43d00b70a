"""The pre-set rules of B26's Jax2D laptop runs (docs/reproducing/beukman2026_jax2d_design.md), one
subcommand per figure, judged from finished run directories; each prints every seed's numbers and the verdict.

    python benchmark/beukman2026_jax2d_rule.py fig5a RUNS_DIR... --low C_LOW --star C_STAR --high C_HIGH [--out PREFIX]
    (fig1a, fig5b the same; fig2c, fig2b: --low --star; fig7a: --weak --strong; fig8: --updates U; fig3a:
     --switched DIR --low --star; plateau: --low C_LOW --others C... --updates U; grid PLACEMENT NAME...: the
     placement's values as shell assignments;
     table RUNS_DIR... [--out PREFIX]: every finished run's numbers, the tables of the reproduction pages)

Per run (U = its last update; evaluations every 20 updates, the last at U):
- final = mean evaluation solve rate (charts/solve_rate) of its last three evaluations (updates U-40, U-20, U);
  mid = of the three evaluations around U/2 (the one nearest U/2, the earlier on a tie, and its two neighbours:
  80, 100, 120 at U = 200; 120, 140, 160 at U = 300); late gain = final - mid;
- the training solve rate (charts/train_solve_rate) of a window of updates is pooled over the episodes that ended in
  it (each update's rate weighted by its charts/episodic_return rows; unweighted if it logged none); windows are
  updates 1-20, 21-40, ...; learned = its best window - its first; train last 20 = over updates U-19..U (reported).
"In >= 2 of 3 seeds": in at least two thirds of the seeds every arm of the figure has (paired by seed); a verdict
needs --seeds (3) such seeds. Comparisons carry a 1e-9 tolerance, so a hand-computed boundary counts as written.
- Fig. 5a (and Fig. 1a on its three lines, lowest, C* and highest COM): (a) plateau: C_low's late gain <= 0.01, its
  final <= C*'s final - 0.05 and its learned >= 0.03, in the seed mean and in >= 2 of 3 seeds; (b) slow: C_high's
  final <= C*'s final - 0.05 and its late gain > 0.01, in the seed mean and in >= 2 of 3 seeds. yes = (a) and (b),
  partly = one of them, no = neither.
- Fig. 5b: as Fig. 5a for plain PPO (COM 0) with epsilon in place of 1/COM: --low is the largest epsilon (the
  plateau side), --star the reference epsilon, --high the smallest (the slow side).
- Fig. 2c: per seed, each COM's median KL to the behaviour policy (diagnostics/kl_behavior) over the second half
  (updates > U/2); yes if in every seed it falls strictly with the COM (over every COM in the runs) and C_low's is
  >= 3x C*'s; else no.
- Fig. 2b: per seed, each COM's median gradient norm (diagnostics/grad_norm) over the run; yes if in every seed
  C_low's is >= 1.5x every higher COM's; else no.
- Fig. 7a: gap(N) = final(strong COM) - final(weak COM) at N envs, per seed; d = gap(16) - gap(64). yes if d >= 0.05
  in the seed mean and in >= 2 of 3 seeds; no (against B26) if the mean d <= -0.05; otherwise not shown.
- Fig. 8: per seed and budget b in U/4, U/2, U (prefixes: a run's first b updates), DDR*(b) = the mean
  diagnostics/ddr over the first b updates of the run (COM or epsilon) with the highest max evaluation solve rate
  within b (on a tie, the mean over the tied runs). yes if DDR*(U) >= 1.5 x DDR*(U/4) in >= 2 of 3 seeds; no if
  DDR*(U) <= DDR*(U/4) in >= 2 of 3 seeds; otherwise not shown. Only runs of at least U updates count.
- Fig. 3a: with the seed means of final, raising (com{C_low}_to_{C*}) holds if it ends closer to C*'s reference (the
  Fig. 5a run at C*) than to C_low's; lowering (com{C*}_to_{C_low}) if closer to C_low's than to C*'s. not shown if
  the two references end within 0.05 of each other (|difference| < 0.05); else yes = both, partly = one, no = neither.
- plateau (B26 Figs. 1a/5a's plateau at a longer budget; runs of at least --updates U updates, the newest per COM
  and seed): per run, two measures of the gain over its last 80 updates, each = 80 x a least-squares slope against
  the update: S_eval over the five evaluations at U-80, U-60, ..., U (with SE from charts/solve_rate_se) and S_train
  over the pooled training solve rate of the four 20-update windows U-79..U (window centres as x). The run
  *plateaus* if both are <= 0.02 (a fall counts: it no longer improves), is *still rising* if both are >= 0.05,
  else neither; final as above. C_low is *below* in a seed if its final <= the highest final of the other COMs
  (--others) - 0.05. yes = C_low plateaus in the seed mean (both seed-mean S <= 0.02) and in >= 2 of 3 seeds, and
  is below in the seed mean and in >= 2 of 3 seeds; no (not shown: still rising) = C_low is still rising in the
  seed mean (both >= 0.05) and in >= 2 of 3 seeds; no (contradicts B26: no premature plateau) = C_low plateaus as
  for yes but is not below in the seed mean; otherwise not shown. The other COMs' trends are reported, not judged.
  "Below in the seed mean" is read both ways: against the seed mean of each seed's best other COM (the code's first
  reading) and against the best other COM's seed mean (the text's, stricter); a verdict the two readings disagree on
  is not shown (the stricter decides: docs/reproducing/index.md).
- table (no verdict): per finished run, its N, COM, clip, reload source (exp_name of a reloaded run), seed, updates,
  the pooled training windows, final, mid, late gain, learned, the median KL to the behaviour policy and the mean DDR
  over the second half (updates > U/2), sorted by N, exp_name, COM, seed.
Writes PREFIX.md (the table, the tests and the verdict) and PREFIX.csv (one row per arm and seed, and the seed
means; the verdict in every row) when --out is given.
"""
import argparse
import csv
import json
import math
import os
import shlex
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..")]

EVAL, TRAIN, EPISODE = "charts/solve_rate", "charts/train_solve_rate", "charts/episodic_return"
EVAL_SE = "charts/solve_rate_se"
KL, GRAD, DDR = "diagnostics/kl_behavior", "diagnostics/grad_norm", "diagnostics/ddr"
WINDOW = 20  # updates per training-solve-rate window
EPS = 1e-9
LATE = 80  # the plateau rule's window: the last 80 updates, five evaluations 20 apart
FLAT, STILL_RISING = 0.02, 0.05  # S (gain per 80 updates) at most FLAT: a plateau; at least STILL_RISING: rising


class RuleError(Exception):
    """A usage mistake: one line, exit code 2."""


def le(a: float, b: float) -> bool:
    return a <= b + EPS


def ge(a: float, b: float) -> bool:
    return a >= b - EPS


# ---------------------------------------------------------------------------------------------------------
# One run's numbers
# ---------------------------------------------------------------------------------------------------------
def by_iteration(run, metric: str) -> tuple:
    """(iterations, values) of one metric, the last row of each update kept (sorted by update)."""
    if metric not in run.metrics:
        return np.array([], int), np.array([])
    rows = run.metrics.loc[run.metrics[metric].notna(), ["iteration", metric]]
    rows = rows.drop_duplicates("iteration", keep="last").sort_values("iteration")
    return rows["iteration"].to_numpy(int), rows[metric].to_numpy(float)


def last_update(run) -> int:
    return int(run.metrics["iteration"].max()) if "iteration" in run.metrics else 0


def final_of(run) -> float:
    """Mean of the last three evaluations."""
    _, y = by_iteration(run, EVAL)
    return float(np.mean(y[-3:])) if len(y) >= 3 else math.nan


def mid_of(run) -> float:
    """Mean of the three evaluations around U/2: the nearest (the earlier on a tie) and its two neighbours."""
    x, y = by_iteration(run, EVAL)
    if len(y) < 3:
        return math.nan
    i = int(np.argmin(np.abs(x - last_update(run) / 2)))  # argmin: the first, i.e. earlier, on a tie
    i = min(max(i, 1), len(y) - 2)
    return float(np.mean(y[i - 1:i + 2]))


def train_rate(run, first: int, last: int) -> float:
    """The training solve rate pooled over the episodes that ended in updates first..last."""
    x, rate = by_iteration(run, TRAIN)
    inside = (x >= first) & (x <= last)
    if not inside.any():
        return math.nan
    weights = np.ones(inside.sum())
    if EPISODE in run.metrics:
        counts = run.metrics.loc[run.metrics[EPISODE].notna(), "iteration"].value_counts()
        episodes = np.array([counts.get(i, 0) for i in x[inside]], float)
        if episodes.sum() > 0:
            weights = episodes
    return float(np.sum(rate[inside] * weights) / np.sum(weights))


def windows(run) -> list:
    """The pooled training solve rate of updates 1-20, 21-40, ... (windows without episodes left out)."""
    out = [train_rate(run, start, start + WINDOW - 1) for start in range(1, last_update(run) + 1, WINDOW)]
    return [w for w in out if math.isfinite(w)]


def numbers(run) -> dict:
    w, u = windows(run), last_update(run)
    final, mid = final_of(run), mid_of(run)
    return {"final": final, "mid": mid, "late gain": final - mid,
            "train last 20": train_rate(run, u - WINDOW + 1, u),
            "learned": max(w) - w[0] if w else math.nan, "updates": u}


def median_after(run, metric: str, half: bool) -> float:
    x, y = by_iteration(run, metric)
    if half:
        y = y[x > last_update(run) / 2]
    return float(np.median(y)) if len(y) else math.nan


def prefix(run, budget: int) -> tuple:
    """(max evaluation solve rate, mean DDR) over the run's first `budget` updates."""
    x, y = by_iteration(run, EVAL)
    dx, dy = by_iteration(run, DDR)
    score = float(np.max(y[x <= budget])) if (x <= budget).any() else math.nan
    ddr = float(np.mean(dy[dx <= budget])) if (dx <= budget).any() else math.nan
    return score, ddr


def slope_gain(x: np.ndarray, y: np.ndarray, errors=None, window: int = LATE) -> tuple:
    """(window x the least-squares slope of y against x: the gain the fit implies over the window, its standard
    error from independent errors of the y, NaN without them)."""
    weights = (x - x.mean()) / np.sum((x - x.mean()) ** 2)  # slope = sum(weights * y)
    se = math.nan if errors is None else math.sqrt(float(np.sum((weights * errors) ** 2)))
    return window * float(np.sum(weights * y)), window * se


def late_gains(run, window: int = LATE) -> dict:
    """The plateau rule's numbers of one run: S_eval (and its SE) over the evaluations of the last `window` updates
    (both ends included), S_train over the pooled training windows of updates U-window+1..U. NaN when the run has
    fewer than three such evaluations or windows."""
    u = last_update(run)
    x, y = by_iteration(run, EVAL)
    sx, se = by_iteration(run, EVAL_SE)
    inside = x >= u - window
    errors = dict(zip(sx, se))
    s_eval = slope_gain(x[inside].astype(float), y[inside], np.array([errors.get(i, math.nan) for i in x[inside]]),
                        window) if inside.sum() >= 3 else (math.nan, math.nan)
    starts = np.arange(u - window + 1, u + 1, WINDOW)
    rates = np.array([train_rate(run, a, a + WINDOW - 1) for a in starts])
    ok = np.isfinite(rates)
    s_train = slope_gain(starts[ok] + (WINDOW - 1) / 2, rates[ok], None, window)[0] if ok.sum() >= 3 else math.nan
    return {"S_eval": s_eval[0], "SE(S_eval)": s_eval[1], "S_train": s_train}


def trend(s_eval: float, s_train: float, flat: float = FLAT, rising: float = STILL_RISING) -> str:
    """A run's last updates by both gains: a plateau (both <= flat; a fall counts: it no longer improves), still
    rising (both >= rising) or neither (the two disagree, or a gain in between)."""
    if le(s_eval, flat) and le(s_train, flat):
        return "plateau"
    return "still rising" if ge(s_eval, rising) and ge(s_train, rising) else "neither"


# ---------------------------------------------------------------------------------------------------------
# Runs by arm and seed
# ---------------------------------------------------------------------------------------------------------
def load(roots: list) -> list:
    from cleanrl_scaling.utils.aggregate import UsageError, deduplicate, load_runs
    try:
        return deduplicate(load_runs(roots, only_finished=True))
    except UsageError as e:
        raise RuleError(str(e))


def matching(runs: list, **config) -> dict:
    """seed -> the run whose config has these values (the newest if several)."""
    from cleanrl_scaling.utils.rundirs import same_value
    out = {}
    for run in runs:
        if all(same_value(v, run.value(k)) for k, v in config.items()):
            seed = int(run.value("seed"))
            if seed not in out or run.stamp() > out[seed].stamp():
                out[seed] = run
    return out


def paired(arms: dict, need: int) -> list:
    """The seeds every arm has, or an empty list (printing what is missing) when fewer than `need`: the verdict
    waits."""
    seeds = sorted(set.intersection(*(set(runs) for runs in arms.values()))) if arms else []
    if len(seeds) < need:
        print(f"no verdict yet: {len(seeds)} seed(s) with every arm finished, {need} needed")
        for name, runs in arms.items():
            print(f"  {name}: seeds {', '.join(map(str, sorted(runs))) or 'none'}")
        return []
    return seeds


def majority(flags: list) -> bool:
    """In >= 2 of 3 seeds (at least two thirds)."""
    return 3 * sum(flags) >= 2 * len(flags)


def g(v: float) -> str:
    return f"{v:g}"


# ---------------------------------------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------------------------------------
def step_size_rule(arms: dict, seeds: list, param: str) -> tuple:
    """Fig. 5a / 1a / 5b: arms = {'low': {seed: numbers}, 'star': ..., 'high': ...}; (tests, verdict)."""
    low, star, high = (arms[k] for k in ("low", "star", "high"))
    mean = lambda arm, key: float(np.mean([arm[s][key] for s in seeds]))  # noqa: E731
    plateau = [le(low[s]["late gain"], 0.01) and le(low[s]["final"], star[s]["final"] - 0.05)
               and ge(low[s]["learned"], 0.03) for s in seeds]
    plateau_mean = (le(mean(low, "late gain"), 0.01) and le(mean(low, "final"), mean(star, "final") - 0.05)
                    and ge(mean(low, "learned"), 0.03))
    slow = [le(high[s]["final"], star[s]["final"] - 0.05) and high[s]["late gain"] > 0.01 + EPS for s in seeds]
    slow_mean = le(mean(high, "final"), mean(star, "final") - 0.05) and mean(high, "late gain") > 0.01 + EPS
    a, b = plateau_mean and majority(plateau), slow_mean and majority(slow)
    tests = [(f"(a) plateau: the low {param}'s late gain <= 0.01, final <= the reference's - 0.05, learned >= 0.03",
              f"seed mean {'holds' if plateau_mean else 'fails'}; seeds {sum(plateau)}/{len(seeds)}", a),
             (f"(b) slow: the high {param}'s final <= the reference's - 0.05 and late gain > 0.01",
              f"seed mean {'holds' if slow_mean else 'fails'}; seeds {sum(slow)}/{len(seeds)}", b)]
    return tests, "yes" if a and b else "partly" if a or b else "no"


def fig7a_rule(d: dict) -> tuple:
    """d = {seed: gap(16) - gap(64)}."""
    mean = float(np.mean(list(d.values())))
    yes = ge(mean, 0.05) and majority([ge(v, 0.05) for v in d.values()])
    verdict = "yes" if yes else "no (against B26)" if le(mean, -0.05) else "not shown"
    return [("gap(16) - gap(64) >= 0.05 in the seed mean and >= 2 of 3 seeds",
             f"mean {mean:+.4g}; seeds {sum(ge(v, 0.05) for v in d.values())}/{len(d)}", yes)], verdict


def fig8_rule(ratio: dict) -> tuple:
    """ratio = {seed: (DDR*(U/4), DDR*(U))}."""
    grows = [ge(hi, 1.5 * lo) for lo, hi in ratio.values()]
    shrinks = [le(hi, lo) for lo, hi in ratio.values()]
    verdict = "yes" if majority(grows) else "no" if majority(shrinks) else "not shown"
    return [("DDR*(U) >= 1.5 x DDR*(U/4)", f"seeds {sum(grows)}/{len(grows)}", majority(grows)),
            ("DDR*(U) <= DDR*(U/4)", f"seeds {sum(shrinks)}/{len(shrinks)}", majority(shrinks))], verdict


def fig3a_rule(raise_, lower, ref_low, ref_star) -> tuple:
    """Seed means of the four finals."""
    apart = abs(ref_star - ref_low)
    up = abs(raise_ - ref_star) < abs(raise_ - ref_low)
    down = abs(lower - ref_low) < abs(lower - ref_star)
    tests = [("the references end >= 0.05 apart", f"|{ref_star:.4g} - {ref_low:.4g}| = {apart:.4g}", ge(apart, 0.05)),
             ("raising ends closer to C*'s reference than to C_low's",
              f"{abs(raise_ - ref_star):.4g} against {abs(raise_ - ref_low):.4g}", up),
             ("lowering ends closer to C_low's reference than to C*'s",
              f"{abs(lower - ref_low):.4g} against {abs(lower - ref_star):.4g}", down)]
    if not ge(apart, 0.05):
        return tests, "not shown"
    return tests, "yes" if up and down else "partly" if up or down else "no"


def plateau_rule(low: dict, others: dict, others_mean: float) -> tuple:
    """low = {seed: (S_eval, S_train, final)} of C_low; others = {seed: the highest final of the other COMs};
    others_mean = the highest seed-mean final of the other COMs; (tests, verdict).
    "Below in the seed mean" reads two ways: the code committed first compares C_low's seed-mean final with the seed
    mean of `others` (each seed's best other COM), the text's "the higher of COM 256's and COM 1024's finals" with
    others_mean (never higher: the stricter reading of "below"). The stricter reading decides
    (docs/reproducing/index.md), so a claim stands only where both readings make it: yes needs below in both, the
    contradiction below in neither; where they disagree on the verdict, not shown."""
    seeds = sorted(low)
    mean = lambda k: float(np.mean([low[s][k] for s in seeds]))  # noqa: E731
    mean_trend = trend(mean(0), mean(1))
    count = lambda kind: sum(trend(*low[s][:2]) == kind for s in seeds)  # noqa: E731
    flat = mean_trend == "plateau" and majority([trend(*low[s][:2]) == "plateau" for s in seeds])
    rising = mean_trend == "still rising" and majority([trend(*low[s][:2]) == "still rising" for s in seeds])
    below = [le(low[s][2], others[s] - 0.05) for s in seeds]
    readings = {"code": float(np.mean([others[s] for s in seeds])), "text": others_mean}
    below_mean = {k: le(mean(2), v - 0.05) for k, v in readings.items()}
    gains = f"seed-mean S_eval {mean(0):+.4g}, S_train {mean(1):+.4g}"
    tests = [(f"plateau: C_low's S_eval and S_train <= {FLAT} in the seed mean and >= 2 of 3 seeds",
              f"{gains}; seeds {count('plateau')}/{len(seeds)}", flat),
             (f"still rising: C_low's S_eval and S_train >= {STILL_RISING} in the seed mean and >= 2 of 3 seeds",
              f"{gains}; seeds {count('still rising')}/{len(seeds)}", rising)]
    for k, what in (("code", "the seed mean of each seed's best other COM's final"),
                    ("text", "the best other COM's seed-mean final")):
        tests.append((f"below ({k}'s reading): C_low's final <= {what} - 0.05 in the seed mean and >= 2 of 3 seeds",
                      f"{mean(2):.4g} against {readings[k]:.4g} - 0.05: seed mean "
                      f"{'holds' if below_mean[k] else 'fails'}; seeds {sum(below)}/{len(seeds)}",
                      below_mean[k] and majority(below)))

    def verdict(below_in_mean: bool) -> str:
        if flat and below_in_mean and majority(below):
            return "yes"
        if rising:
            return "no (not shown: still rising)"
        if flat and not below_in_mean:
            return "no (contradicts B26: no premature plateau)"
        return "not shown"
    by_reading = {k: verdict(v) for k, v in below_mean.items()}
    if by_reading["code"] == by_reading["text"]:
        return tests, by_reading["code"]
    tests.append(("the two readings of 'below in the seed mean' agree", ", ".join(
        f"{k}'s: {v}" for k, v in by_reading.items()), False))
    return tests, "not shown"


# ---------------------------------------------------------------------------------------------------------
# Subcommands: each returns (rows, tests, verdict) or None (no verdict yet)
# ---------------------------------------------------------------------------------------------------------
def cmd_step_size(args, figure: str):
    runs = load(args.runs)
    sides = ("low", "star", "high")
    if figure == "fig5b":  # plain PPO: COM 0, one epsilon per arm
        param, picks = "epsilon", {k: matching(runs, ewma_com=0, clip_coef=getattr(args, k)) for k in sides}
    else:
        param, picks = "COM", {k: matching(runs, ewma_com=getattr(args, k)) for k in sides}
    seeds = paired(picks, args.seeds)
    if not seeds:
        return None
    arms = {k: {s: numbers(picks[k][s]) for s in seeds} for k in picks}
    rows = [{"arm": k, param: g(getattr(args, k)), "seed": s, **arms[k][s]} for k in arms for s in seeds]
    rows += [{"arm": k, param: g(getattr(args, k)), "seed": "mean",
              **{c: float(np.mean([arms[k][s][c] for s in seeds])) for c in arms[k][seeds[0]]}} for k in arms]
    tests, verdict = step_size_rule(arms, seeds, param)
    return rows, tests, verdict


def coms_of(runs: list) -> list:
    return sorted({float(r.value("ewma_com") or 0) for r in runs} - {0.0})


def cmd_fig2(args, metric: str, half: bool):
    runs = load(args.runs)
    coms = coms_of(runs)
    picks = {c: matching(runs, ewma_com=c) for c in coms}
    if not ({args.low, args.star} <= set(coms)):
        raise RuleError(f"no runs at COM {g(args.low)} and {g(args.star)} among {', '.join(map(g, coms)) or 'none'}")
    seeds = paired(picks, args.seeds)
    if not seeds:
        return None
    value = {c: {s: median_after(picks[c][s], metric, half) for s in seeds} for c in coms}
    rows = [{"COM": g(c), **{f"seed {s}": value[c][s] for s in seeds}} for c in coms]
    if metric == KL:
        falls = [all(value[a][s] > value[b][s] for a, b in zip(coms, coms[1:])) for s in seeds]
        ratio = [value[args.low][s] >= 3 * value[args.star][s] - EPS for s in seeds]
        tests = [("the median KL falls strictly with the COM", f"seeds {sum(falls)}/{len(seeds)}", all(falls)),
                 (f"COM {g(args.low)}'s >= 3x COM {g(args.star)}'s", f"seeds {sum(ratio)}/{len(seeds)}", all(ratio))]
        verdict = "yes" if all(falls) and all(ratio) else "no"
    else:
        higher = [c for c in coms if c > args.low]
        above = [all(ge(value[args.low][s], 1.5 * value[c][s]) for c in higher) for s in seeds]
        tests = [(f"COM {g(args.low)}'s median gradient norm >= 1.5x every higher COM's",
                  f"seeds {sum(above)}/{len(seeds)}", all(above))]
        verdict = "yes" if all(above) else "no"
    return rows, tests, verdict


def cmd_fig7a(args):
    runs = load(args.runs)
    picks = {(n, c): matching(runs, num_envs=n, ewma_com=c) for n in (args.small_envs, args.large_envs)
             for c in (args.weak, args.strong)}
    seeds = paired({f"N {n}, COM {g(c)}": v for (n, c), v in picks.items()}, args.seeds)
    if not seeds:
        return None
    final = {k: {s: final_of(picks[k][s]) for s in seeds} for k in picks}
    gap = {n: {s: final[(n, args.strong)][s] - final[(n, args.weak)][s] for s in seeds}
           for n in (args.small_envs, args.large_envs)}
    d = {s: gap[args.small_envs][s] - gap[args.large_envs][s] for s in seeds}
    rows = [{"seed": s, **{f"final N {n} COM {g(c)}": final[(n, c)][s] for n, c in picks},
             **{f"gap({n})": gap[n][s] for n in gap}, "gap(16) - gap(64)": d[s]} for s in seeds]
    tests, verdict = fig7a_rule(d)
    return rows, tests, verdict


def best_ddr(runs: list, budget: int) -> float:
    scored = [prefix(r, budget) for r in runs]
    top = max((score for score, _ in scored if math.isfinite(score)), default=math.nan)
    return float(np.mean([ddr for score, ddr in scored if score >= top - EPS]))


def cmd_fig8(args):
    runs = [r for r in load(args.runs) if last_update(r) >= args.updates]
    budgets = (args.updates // 4, args.updates // 2, args.updates)
    by_seed = {}
    for run in runs:
        by_seed.setdefault(int(run.value("seed")), []).append(run)
    seeds = sorted(by_seed)
    if len(seeds) < args.seeds:
        print(f"no verdict yet: runs of >= {args.updates} updates in {len(seeds)} seed(s), {args.seeds} needed")
        return None
    star = {s: {b: best_ddr(by_seed[s], b) for b in budgets} for s in seeds}
    rows = [{"seed": s, **{f"DDR*({b})": star[s][b] for b in budgets}, "runs": len(by_seed[s])} for s in seeds]
    if args.figure:
        draw_fig8(runs, budgets, args.figure)
    tests, verdict = fig8_rule({s: (star[s][budgets[0]], star[s][budgets[-1]]) for s in seeds})
    return rows, tests, verdict


def draw_fig8(runs: list, budgets: tuple, out: str) -> None:
    """B26 Fig. 8's scatter from prefixes: one dot per run and budget (its mean DDR, its max solve rate)."""
    from cleanrl_scaling.utils import plots
    from cleanrl_scaling.utils.aggregate import write_csv
    points, rows = {}, []
    for b in budgets:
        label = f"first {b} updates"
        dots = [(r, *prefix(r, b)) for r in runs]
        points[label] = (np.array([d for _, _, d in dots]), np.array([s for _, s, _ in dots]))
        rows += [{"group": label, "run": os.path.basename(r.path), "seed": r.value("seed"),
                  "ewma_com": r.value("ewma_com"), "clip_coef": r.value("clip_coef"), "budget": b,
                  "mean(diagnostics/ddr)": d, "max(charts/solve_rate)": s} for r, s, d in dots]
    fig = plots.plot_scatter(points, list(points), "DDR (samples per unit KL)", "max solve rate",
                             "B26 Fig. 8: DDR against max solve rate, one dot per run and budget", logx=True,
                             legend_title="budget")
    plots.save(fig, out)
    write_csv(rows, out)


def cmd_fig3a(args):
    switched = load([args.switched])
    references = load(args.runs)
    low, star = g(args.low), g(args.star)
    picks = {"raising": matching(switched, exp_name=f"com{low}_to_{star}"),
             "lowering": matching(switched, exp_name=f"com{star}_to_{low}"),
             "reference C_low": matching(references, ewma_com=args.low, init_from=None),
             "reference C*": matching(references, ewma_com=args.star, init_from=None)}
    seeds = paired(picks, args.seeds)
    if not seeds:
        return None
    final = {k: {s: final_of(picks[k][s]) for s in seeds} for k in picks}
    rows = [{"run": k, **{f"seed {s}": final[k][s] for s in seeds}, "mean": float(np.mean(list(final[k].values())))}
            for k in picks]
    means = [row["mean"] for row in rows]
    tests, verdict = fig3a_rule(*means)
    return rows, tests, verdict


def cmd_plateau(args):
    runs = [r for r in load(args.runs) if last_update(r) >= args.updates]
    coms = [args.low] + [c for c in args.others if c != args.low]
    picks = {c: matching(runs, ewma_com=c) for c in coms}
    seeds = paired({f"COM {g(c)}": v for c, v in picks.items()}, args.seeds)
    if not seeds:
        return None
    rows = [{"COM": g(c), "seed": s, "updates": last_update(picks[c][s]), **late_gains(picks[c][s]),
             "final": final_of(picks[c][s])} for c in coms for s in seeds]
    for row in rows:
        row["trend"] = trend(row["S_eval"], row["S_train"])
    for c in coms:
        mine = [r for r in rows if r["COM"] == g(c)]
        means = {k: float(np.mean([r[k] for r in mine])) for k in ("S_eval", "S_train", "final")}
        rows.append({"COM": g(c), "seed": "mean", **means, "trend": trend(means["S_eval"], means["S_train"])})
    by = {(r["COM"], r["seed"]): r for r in rows}
    low = {s: tuple(by[(g(args.low), s)][k] for k in ("S_eval", "S_train", "final")) for s in seeds}
    best_other = {s: max(by[(g(c), s)]["final"] for c in coms[1:]) for s in seeds}
    best_mean = max(by[(g(c), "mean")]["final"] for c in coms[1:])
    tests, verdict = plateau_rule(low, best_other, best_mean)
    return rows, tests, verdict


def cmd_table(args):
    """Every finished run's numbers (the pages' per-seed tables regenerate from the committed runs)."""
    rows = []
    for run in load(args.runs):
        n, u = numbers(run), last_update(run)
        dx, dy = by_iteration(run, DDR)
        late = dy[dx > u / 2]
        rows.append({"N": int(run.value("num_envs")), "run": str(run.value("exp_name")),
                     "COM": g(float(run.value("ewma_com"))), "clip": g(float(run.value("clip_coef"))),
                     "seed": int(run.value("seed")), "updates": u,
                     "windows": " ".join(f"{w:.3f}" for w in windows(run)), "final": n["final"], "mid": n["mid"],
                     "late gain": n["late gain"], "learned": n["learned"], "KL 2nd half": median_after(run, KL, True),
                     "DDR 2nd half": int(round(float(np.mean(late)))) if len(late) else math.nan})
    if not rows:
        raise RuleError(f"no finished runs under {', '.join(args.runs)}")
    rows.sort(key=lambda r: (r["N"], r["run"], float(r["COM"]), r["seed"]))
    return rows, [], None


def cmd_grid(args) -> None:
    """The placement's values as shell assignments (the figure scripts eval them; an explicit value wins there)."""
    try:
        with open(args.placement) as f:
            p = json.load(f)
        values = {"C_LOW": g(p["c_low"]), "C_STAR": g(p["c_star"]), "C_HIGH": g(p["c_high"]),
                  "COMS": ",".join(g(c) for c in p["coms"]), "U": str(int(p["updates"])),
                  "FIG5B": "1" if p["fig5b"] else "0"}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RuleError(f"PLACEMENT={args.placement}: not a placement file of benchmark/beukman2026_jax2d_placement.py "
                        f"({type(e).__name__}: {e})")
    for name in args.names:
        if name not in values:
            raise RuleError(f"grid: no value {name!r} (one of {', '.join(values)})")
        print(f"{name}={shlex.quote(values[name])}")


# ---------------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------------
def fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def report(title: str, rows: list, tests: list, verdict: str, out: str) -> None:
    cols = list(dict.fromkeys(c for r in rows for c in r))
    lines = [f"## {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    lines += [""] + [f"- {name}: {detail}: **{'holds' if ok else 'fails'}**" for name, detail, ok in tests]
    lines += ["", f"**Verdict: {verdict}**", ""] if verdict is not None else []  # a table has none
    text = "\n".join(lines)
    print(text)
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out + ".md", "w") as f:
            f.write(text)
        with open(out + ".csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols + (["verdict"] if verdict is not None else []))
            w.writeheader()
            w.writerows({**r, "verdict": verdict} if verdict is not None else r for r in rows)


TITLES = {"fig5a": "B26 Fig. 5a (Jax2D, laptop): the COM grid", "fig1a": "B26 Fig. 1a (Jax2D, laptop): three COMs",
          "fig5b": "B26 Fig. 5b (Jax2D, laptop): PPO's epsilon", "fig2c": "B26 Fig. 2c: median KL to the behaviour "
          "policy, second half", "fig2b": "B26 Fig. 2b: median gradient norm", "fig7a": "B26 Fig. 7a: envs x COM, "
          "at equal updates", "fig8": "B26 Fig. 8: the best run's DDR per budget", "fig3a": "B26 Fig. 3a: reloaded "
          "with another COM", "plateau": "B26 Figs. 1a/5a: the low COM's plateau over the last 80 updates",
          "table": "B26 Jax2D runs: per-run numbers"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("runs", nargs="+", help="runs directories (searched recursively; finished runs only)")
    common.add_argument("--seeds", type=int, default=3, help="seeds every arm needs before a verdict (3)")
    common.add_argument("--out", default="", help="write PREFIX.md and PREFIX.csv")
    for name in ("fig5a", "fig1a", "fig5b"):
        s = sub.add_parser(name, parents=[common])
        unit = "epsilon" if name == "fig5b" else "COM"
        s.add_argument("--low", type=float, required=True, help=f"the plateau side's {unit} (C_low)")
        s.add_argument("--star", type=float, required=True, help=f"the reference {unit} (C*)")
        s.add_argument("--high", type=float, required=True, help=f"the slow side's {unit} (C_high)")
    for name in ("fig2c", "fig2b", "fig3a"):
        s = sub.add_parser(name, parents=[common])
        s.add_argument("--low", type=float, required=True, help="C_low")
        s.add_argument("--star", type=float, required=True, help="C*")
        if name == "fig3a":
            s.add_argument("--switched", required=True,
                           help="the reloaded runs' directory (RUNS_DIR: the Fig. 5a runs, the references)")
    s = sub.add_parser("fig7a", parents=[common])
    s.add_argument("--weak", type=float, required=True, help="the weak COM (C*/4)")
    s.add_argument("--strong", type=float, required=True, help="the strong COM (C*)")
    s.add_argument("--small-envs", type=int, default=16)
    s.add_argument("--large-envs", type=int, default=64)
    s = sub.add_parser("fig8", parents=[common])
    s.add_argument("--updates", type=int, required=True, help="U: the budgets are U/4, U/2 and U updates")
    s.add_argument("--figure", default="", help="also draw the scatter: PREFIX.png, .pdf, .csv")
    s = sub.add_parser("plateau", parents=[common])
    s.add_argument("--low", type=float, required=True, help="the COM whose plateau is tested (C_low)")
    s.add_argument("--others", type=float, nargs="+", required=True,
                   help="the higher COMs it must end below (their trends are reported)")
    s.add_argument("--updates", type=int, required=True, help="U: only runs of at least U updates count")
    sub.add_parser("table", parents=[common])
    s = sub.add_parser("grid")
    s.add_argument("placement", help="the placement JSON of the pilot")
    s.add_argument("names", nargs="+", help="C_LOW C_STAR C_HIGH COMS U FIG5B")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "grid":
            cmd_grid(args)
            return 0
        if args.command == "fig8" and args.updates < 4:
            raise RuleError(f"--updates {args.updates}: must be at least 4 (budgets U/4, U/2, U)")
        if args.command == "plateau" and args.updates < LATE:
            raise RuleError(f"--updates {args.updates}: must be at least {LATE} (the rule reads the last {LATE})")
        result = {"fig5a": lambda: cmd_step_size(args, "fig5a"), "fig1a": lambda: cmd_step_size(args, "fig1a"),
                  "fig5b": lambda: cmd_step_size(args, "fig5b"), "fig2c": lambda: cmd_fig2(args, KL, True),
                  "fig2b": lambda: cmd_fig2(args, GRAD, False), "fig7a": lambda: cmd_fig7a(args),
                  "fig8": lambda: cmd_fig8(args), "fig3a": lambda: cmd_fig3a(args),
                  "plateau": lambda: cmd_plateau(args), "table": lambda: cmd_table(args)}[args.command]()
    except RuleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if result is not None:
        report(TITLES[args.command], *result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
