"""The design of the five-game learning study of ppo_atari_envpool.py against CleanRL's script
(docs/ppo_atari_envpool.md#the-five-game-study), computed from the pilots' per-seed finals:

- the seed-to-seed relative SD (cv) of the final return, taken above the random agent's score, pooled over the
  pilots' arms and games;
- the minimum detectable difference (MDD: a gap that a 95% two-sided interval excludes with 80% power) of (i) one
  game's seed-mean ratio ours/CleanRL and (ii) the pooled human-normalised IQM ratio, against seeds per game; (ii)
  by simulation at the games' expected score levels, and, for reference, with every game weighted equally;
- the seeds per game for a 10% MDD, and for an interval inside +-10% (parity) with 80% probability when there is
  no gap; the cost of the study in env steps, CPU-hours at this project's measured rates, and an estimate for a
  16-core GPU machine.

    python benchmark/ppo_atari_learning_design.py [--cv 0.33] [--seeds 5 10 16 20 30]

MDDs are on the log scale of the ratio and printed as the gap they detect, 1 - exp(-MDD): a ratio of 0.9 is a
10% gap. Per game: Welch's t quantiles with 2(n-1) degrees of freedom; pooled: 5 x 2(n-1).
"""
import argparse
import math
import os
import sys

import numpy as np
from scipy import stats

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), HERE]
from _throughput_common import refuse  # noqa: E402
from cleanrl_scaling.utils import atari_scores  # noqa: E402
from cleanrl_scaling.utils.aggregate import iqm  # noqa: E402

# Per-seed finals (mean full-game return of the games ending in the last 10% of 1M steps, CleanRL's defaults
# 8 x 128), as committed: Breakout in docs/ppo_atari_envpool.md#learning (3 seeds per arm); KungFuMaster's
# 8 x 128 arm of ours --cleanrl-compat in docs/reproducing/mayor2025_fig1a.md (seeds 1-3 and its pilot seed 101).
PILOT_FINALS = {
    ("Breakout-v5", "CleanRL"): (16.24, 22.10, 19.06),
    ("Breakout-v5", "ours"): (20.88, 11.27, 16.16),
    ("Breakout-v5", "ours --cleanrl-compat"): (19.25, 15.25, 15.03),
    ("KungFuMaster-v5", "ours --cleanrl-compat"): (11157.5, 9275.0, 10711.9, 22403.0),
}

# The games' expected final at 1M steps (CleanRL's level), for the pooled IQM's simulation. Measured: Breakout
# (CleanRL's seed mean, above), SpaceInvaders (CleanRL seed 1 at 500k, docs/ppo_atari_envpool.md#learning: a low
# guess for 1M), KungFuMaster (mayor2025_fig1a.md, seeds 1-3), Qbert (mayor2025_fig2.md, 8 x 128, mean of the
# second half of 250k steps: a low guess for 1M). Amidar: not measured here, an assumption (HNS 0.05).
EXPECTED_FINAL = {"Breakout-v5": 19.13, "SpaceInvaders-v5": 428.6, "KungFuMaster-v5": 10381.5, "Qbert-v5": 336.5,
                  "Amidar-v5": 91.5}

# One run's speed on one thread on this project's 2-core machine (steps per second): ours at 8 x 128 ran 219-227
# SPS (docs/reproducing/mayor2025_fig1a.md); CleanRL's script about 200 alone on its core
# (docs/ppo_atari_envpool.md#learning).
SPS_ONE_THREAD = {"ours": 220.0, "CleanRL": 200.0}
# A 16-core GPU machine, all runs together (an estimate, not a measurement): envpool stepped 4,522-13,314 random-
# action steps/s there at 8-256 envs and ours trained at 9,907 SPS at 256 x 64 (docs/gpu.md#measured-on-a-gpu);
# 16 runs of 8 envs share the cores, so 5,000-10,000 steps/s in all.
GPU_MACHINE_SPS = (5_000.0, 10_000.0)

ARMS = ("ours", "ours --cleanrl-compat", "CleanRL")
GAMES = tuple(EXPECTED_FINAL)
TARGET_GAP = 0.10


def above_random(env_id: str, finals) -> np.ndarray:
    random_score, _ = atari_scores.REFERENCE_SCORES[atari_scores.game_name(env_id)]
    return np.asarray(finals, float) - random_score


def pooled_relative_sd(groups: dict) -> tuple:
    """(cv, degrees of freedom): the SD of each group's finals (above random) relative to its own mean, pooled over
    the groups by their degrees of freedom (n - 1 each)."""
    squares, dof = 0.0, 0
    for (env_id, _), finals in groups.items():
        x = above_random(env_id, finals)
        squares += float(((x / x.mean() - 1.0) ** 2).sum())
        dof += len(x) - 1
    return math.sqrt(squares / dof), dof


def cv_interval(cv: float, dof: int, level: float = 0.95) -> tuple:
    """The chi-square interval of an SD estimated with `dof` degrees of freedom."""
    tail = (1 - level) / 2
    return cv * math.sqrt(dof / stats.chi2.ppf(1 - tail, dof)), cv * math.sqrt(dof / stats.chi2.ppf(tail, dof))


def mdd_factor(dof: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """t_{1-alpha/2} + t_{power}: an effect this many standard errors away is excluded with that power."""
    return float(stats.t.ppf(1 - alpha / 2, dof) + stats.t.ppf(power, dof))


def per_game_mdd(cv: float, seeds: int, power: float = 0.8) -> float:
    """MDD of log(mean(ours) / mean(CleanRL)) with `seeds` seeds a side: SE = cv * sqrt(2 / seeds)."""
    return mdd_factor(2 * (seeds - 1), power) * cv * math.sqrt(2.0 / seeds)


def pooled_equal_mdd(cv: float, seeds: int, games: int = 5, power: float = 0.8) -> float:
    """MDD of the mean over games of the per-game log ratios (every game weighted equally): the best a pooled
    statistic can do with these runs."""
    return mdd_factor(games * 2 * (seeds - 1), power) * cv * math.sqrt(2.0 / (seeds * games))


def simulated_hns(levels, cv: float, seeds: int, sims: int, rng) -> list:
    """Per game, `sims` x `seeds` human-normalised finals: log-normal around the game's level with relative SD cv."""
    sigma = math.sqrt(math.log1p(cv * cv))
    return [level * rng.lognormal(-sigma * sigma / 2, sigma, (sims, seeds)) for level in levels]


def iqm_log_ratio_sd(levels, cv: float, seeds: int, sims: int = 4000, seed: int = 0) -> float:
    """The SD of log(IQM(ours) / IQM(CleanRL)) over simulated studies with no gap; IQM over all runs of all games
    (rliable's). levels: each game's human-normalised level."""
    rng = np.random.default_rng(seed)
    ours = iqm(np.concatenate(simulated_hns(levels, cv, seeds, sims, rng), axis=1), axis=1)
    theirs = iqm(np.concatenate(simulated_hns(levels, cv, seeds, sims, rng), axis=1), axis=1)
    return float(np.log(ours / theirs).std(ddof=1))


def pooled_iqm_mdd(levels, cv: float, seeds: int, power: float = 0.8, sims: int = 4000) -> float:
    """MDD of log(IQM ratio) of the human-normalised finals, from the simulated SD."""
    return mdd_factor(len(levels) * 2 * (seeds - 1), power) * iqm_log_ratio_sd(levels, cv, seeds, sims)


def as_gap(log_mdd: float) -> float:
    """The ratio gap a log-scale MDD stands for: ours at exp(-MDD) of CleanRL's."""
    return 1.0 - math.exp(-log_mdd)


def seeds_needed(mdd, target_gap: float = TARGET_GAP, most: int = 400):
    """The fewest seeds per game (from 2) whose MDD (a function of seeds) is at most the target gap; None if none
    up to `most`."""
    for n in range(2, most + 1):
        if as_gap(mdd(n)) <= target_gap:
            return n
    return None


def hns_levels(games=GAMES) -> list:
    return [atari_scores.human_normalized(g, EXPECTED_FINAL[g]) for g in games]


def cost(seeds: int, games: int = 5, total: int = 1_000_000) -> dict:
    """Env steps in all; CPU-hours on this project's machine at one thread per run; hours on a 16-core GPU machine
    (estimate: low, high)."""
    ours_steps, cleanrl_steps = 2 * games * seeds * total, games * seeds * total
    cpu_hours = (ours_steps / SPS_ONE_THREAD["ours"] + cleanrl_steps / SPS_ONE_THREAD["CleanRL"]) / 3600
    steps = ours_steps + cleanrl_steps
    return {"runs": 3 * games * seeds, "steps": steps, "cpu_hours": cpu_hours,
            "gpu_hours": tuple(steps / sps / 3600 for sps in reversed(GPU_MACHINE_SPS))}


def print_design(cv: float, seed_counts: list) -> None:
    levels = hns_levels()
    equal = [float(np.mean(levels))] * len(levels)
    print("| seeds per game | one game | pooled, 5 games equally weighted | pooled HNS IQM, expected levels | "
          "pooled HNS IQM, equal levels | runs | env steps | CPU-hours here | GPU machine, hours (estimate) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in seed_counts:
        c = cost(n)
        print(f"| {n} | {as_gap(per_game_mdd(cv, n)):.0%} | {as_gap(pooled_equal_mdd(cv, n)):.0%} | "
              f"{as_gap(pooled_iqm_mdd(levels, cv, n)):.0%} | {as_gap(pooled_iqm_mdd(equal, cv, n)):.0%} | "
              f"{c['runs']} | {c['steps'] / 1e6:.0f}M | {c['cpu_hours']:.0f} | "
              f"{c['gpu_hours'][0]:.0f}-{c['gpu_hours'][1]:.0f} |")
    print(f"\nseeds per game for a {TARGET_GAP:.0%} MDD (80% power) / for an interval inside +-{TARGET_GAP:.0%} "
          "with 80% probability when there is no gap (t_0.975 + t_0.90 standard errors within log 1.1):")
    for name, mdd in (("one game", lambda n, p: per_game_mdd(cv, n, p)),
                      ("pooled, equally weighted", lambda n, p: pooled_equal_mdd(cv, n, power=p)),
                      ("pooled HNS IQM, expected levels", lambda n, p: pooled_iqm_mdd(levels, cv, n, p, sims=2000)),
                      ("pooled HNS IQM, equal levels", lambda n, p: pooled_iqm_mdd(equal, cv, n, p, sims=2000))):
        parity = seeds_needed(lambda n: mdd(n, 0.9), target_gap=1 - 1 / (1 + TARGET_GAP))  # the upper side binds
        print(f"  {name}: {seeds_needed(lambda n: mdd(n, 0.8))} / {parity}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cv", type=float, default=None,
                   help="the seed-to-seed relative SD to design with (default: the pilots' pooled estimate)")
    p.add_argument("--seeds", type=int, nargs="+", default=[5, 10, 20, 30, 60], help="seeds per game to tabulate")
    args = p.parse_args()
    if args.cv is not None and not 0 < args.cv < 5:
        refuse(f"--cv {args.cv}: give a relative SD between 0 and 5, e.g. 0.25")
    if min(args.seeds) < 2:
        refuse(f"--seeds {' '.join(map(str, args.seeds))}: every count must be >= 2 (an SD needs two seeds)")
    for (env_id, arm), finals in PILOT_FINALS.items():
        x = above_random(env_id, finals)
        print(f"{env_id} {arm}: {len(x)} seeds, relative SD above random {x.std(ddof=1) / x.mean():.3f}")
    breakout = {k: v for k, v in PILOT_FINALS.items() if k[0] == "Breakout-v5"}
    for name, groups in (("Breakout's three arms", breakout), ("all pilots", PILOT_FINALS)):
        cv, dof = pooled_relative_sd(groups)
        lo, hi = cv_interval(cv, dof)
        print(f"pooled over {name}: cv {cv:.3f} ({dof} degrees of freedom; 95% interval {lo:.2f}-{hi:.2f})")
    cv = args.cv if args.cv is not None else pooled_relative_sd(PILOT_FINALS)[0]
    levels = ", ".join(f"{g} {h:.3f}" for g, h in zip(GAMES, hns_levels()))
    print(f"\ndesign cv {cv:.3f}; expected human-normalised levels at 1M steps: {levels}\n")
    print_design(cv, sorted(set(args.seeds)))


if __name__ == "__main__":
    main()
