"""Learning side by side: ppo_atari_envpool.py (default mode and --cleanrl-compat) against CleanRL's
ppo_atari_envpool.py on one machine: one game (the Breakout pilot), or several (the five-game study).

    python benchmark/ppo_atari_learning.py --cleanrl PATH_TO_CLEANRL_CHECKOUT [--out runs/ppo_atari_learning]
        [--env-id Breakout-v5] [--total 1000000] [--seeds 1 2 3] [--cleanrl-seeds 1 2 3] [--arms default compat]
    python benchmark/ppo_atari_learning.py --cleanrl PATH_TO_CLEANRL_CHECKOUT --study [--seeds 11 ... 20]
        [--parallel K] [--cuda] [--dry-run]
    python benchmark/ppo_atari_learning.py --study --summary-only
    python benchmark/ppo_atari_learning.py --async-check [--total 400000] [--seeds 1 2 3]
    python benchmark/ppo_atari_learning.py --envpool-async-check [--total 400000] [--seeds 1 2 3]

All arms run CleanRL's defaults (8 envs x 128 steps, 4 minibatches x 4 epochs, lr 2.5e-4 annealed, clip 0.1).
CleanRL's script runs from a copy patched only for envpool 1.x's reset/step tuples (never committed). The runs, the
continuation after a stop (rerun the same command: ours resume from their checkpoints, an unfinished CleanRL run
starts again) and the table are those of _learning_comparison.py. Every run gets one thread; at most --parallel
(default: the cores) run at once, seed by seed, CleanRL's first. Without --cuda both programs run on the CPU
(--no-cuda); with it both use the GPU. A run resumes only on the device it started on.

The single-game rule (the Breakout pilot, docs/ppo_atari_envpool.md#learning):
- final return of a run = mean full-game return of the episodes that end in the last 10% of the budget;
- an arm of ours is at parity with CleanRL when the 95% percentile bootstrap interval (10,000 resamples of each
  side's seeds) of mean(ours) - mean(CleanRL) contains 0; "behind" when the interval lies below 0.

The --async-envs check (--async-check: arms default and async, no CleanRL run, --out runs/ppo_atari_async_check;
docs/gpu.md#the-envs-in-two-halves): does ours learn with its envs in two alternating halves as with one group? The
two modes store the same transitions for a policy whose actions are a function of the frames (tested); they differ in
how the action-sampling draws are made: on a GPU a seed's run differs as two seeds' runs do, while on a CPU the halves
draw what one batch would, in its order, so there the runs part only by float rounding (at 8 envs, not at all: the
check ran on a CPU gave the same run twice; it needs --cuda). The rule, fixed before the runs: final return as above
(last 10% of the budget); D = mean(async) - mean(default) over the seeds with its 95% percentile bootstrap interval
(10,000 resamples of each side's seeds); no difference detected ("parity") when the interval contains 0, reported
with its half-width, the smallest difference this design could tell; behind (ahead) when it lies below (above) 0.
Both arms at CleanRL's defaults (8 envs: halves of 4), on the CPU unless --cuda; the check is of the mode's learning,
not of its speed.

The --envpool-async check (--envpool-async-check: arms default and envpool-async, no CleanRL run, --out
runs/ppo_atari_envpool_async_check; docs/gpu.md#envpools-own-asynchronous-mode): does ours learn in envpool's own
asynchronous mode as in the synchronous one? Each env's transitions are the synchronous mode's for a policy that is
a function of the frames (tested), but the envs arrive in the order they finish, so the action-sampling draws fall
differently (on a CPU too), and the rows acted before an update (the envs still stepping while the network updates)
were chosen by the previous policy. The same rule as the --async-envs check, at the same defaults (8 envs: recv
returns 4), on the CPU: the difference it tests is the mode's semantics, which do not depend on the device.

The five-game study (--study, or --env-ids; docs/ppo_atari_envpool.md#the-five-game-study): Breakout-v5 and
SpaceInvaders-v5 (where the gap was seen; neither is in Atari-10) and Amidar-v5, KungFuMaster-v5 and Qbert-v5 of
M25's Atari-10 (Aitchison et al. 2023), 1M steps, ours in both modes and CleanRL's script, each game in OUT/GAME/.
Ours run with --save-model: the final policy plays --eval-episodes (10) full games, shown beside the training
final. Seeds in two stages (the pilots used 1-3 and 101): stage A, seeds 11-20; stage B adds seeds 21, 22, ... up
to the count that the summary prints after stage A, the seeds per game for a 10% minimum detectable difference of
the pooled IQM at stage A's own seed variance (every arm, pooled) and CleanRL's levels (the difference between the
arms is not used), at most 60 (benchmark/ppo_atari_learning_design.py: 58 at the pilots' variance). The verdict
is read at the end of each stage; stage B's, on all seeds, is the study's. The study's rule, fixed before its runs:
- final return of a run: the mean full-game return of the games that end in the last 10% of its steps;
- per game: R = mean(ours) / mean(CleanRL) over the seeds, with its 95% percentile bootstrap interval (10,000
  resamples of each side's seeds);
- pooled: each final human-normalised, (final - random) / (human - random) with the random and human scores of
  DQN Zoo's table (Badia et al. 2020, extending Mnih et al. 2015; rliable's, Agarwal et al. 2021); per arm the IQM
  over all runs of the five games; R_IQM = IQM(ours) / IQM(CleanRL) and IQM(ours) - IQM(CleanRL), with 95%
  stratified bootstrap intervals (50,000 resamples of each game's and arm's seeds, Agarwal et al. 2021);
- each interval of a ratio reads: behind (below 1), ahead (above 1), at parity (contains 1 and lies inside
  [0.9, 1.1]), else not separated, with its half-width: the smallest gap this design could tell;
- the headline verdict of an arm is its pooled one; per-game verdicts are shown beside it (ten per-game intervals
  at 95%: a single "behind" among them can be chance); two looks (stages A and B) at 95% each: a false "behind"
  has at most a 5% chance over both;
- an arm behind (pooled, or in a game) is taken apart on the same seeds and games, one difference at a time:
  --arms no-diagnostics (or compat-no-diagnostics for --cleanrl-compat), no-compile, no-channels-last. Masking the
  reset steps and bootstrapping at the time limit are switched together by --cleanrl-compat; the summary counts
  the games cut at the 27,000-step limit, and where there are none bootstrapping cannot act, so default against
  compat is the masking alone.
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), HERE]
import _learning_comparison as lc  # noqa: E402
import ppo_atari_learning_design as design  # noqa: E402
from _learning_comparison import Comparison, Variant, check_common, parser  # noqa: E402
from _throughput_common import patched_cleanrl, refuse  # noqa: E402
from cleanrl_scaling.utils import atari_scores  # noqa: E402
from cleanrl_scaling.utils.aggregate import iqm  # noqa: E402

STEM = "ppo_atari_envpool"
ARMS = (Variant("ours", STEM),  # default mode: time-limit bootstrapping, masked reset steps, compiled, channels-last
        Variant("ours --cleanrl-compat", f"{STEM}_compat", ("--cleanrl-compat",)),
        # the ablations, run only when an arm is behind (the rules above)
        Variant("ours --no-compile", f"{STEM}_nocompile", ("--no-compile",)),
        Variant("ours --no-channels-last", f"{STEM}_nochannelslast", ("--no-channels-last",)),
        Variant("ours --diagnostics-every 0", f"{STEM}_nodiag", ("--diagnostics-every", "0")),
        Variant("ours --cleanrl-compat --diagnostics-every 0", f"{STEM}_compat_nodiag",
                ("--cleanrl-compat", "--diagnostics-every", "0")),
        Variant("ours --async-envs", f"{STEM}_async", ("--async-envs",)),  # the --async-envs check
        Variant("ours --envpool-async", f"{STEM}_envpool_async", ("--envpool-async",)))  # and --envpool-async's
ARM_NAMES = {"default": STEM, "compat": f"{STEM}_compat", "no-compile": f"{STEM}_nocompile",
             "no-channels-last": f"{STEM}_nochannelslast", "no-diagnostics": f"{STEM}_nodiag",
             "compat-no-diagnostics": f"{STEM}_compat_nodiag", "async": f"{STEM}_async",
             "envpool-async": f"{STEM}_envpool_async"}

ASYNC_OUT = "runs/ppo_atari_async_check"
ENVPOOL_ASYNC_OUT = "runs/ppo_atari_envpool_async_check"
STUDY_GAMES = ("Breakout-v5", "SpaceInvaders-v5", "Amidar-v5", "KungFuMaster-v5", "Qbert-v5")
STUDY_SEEDS = tuple(range(11, 21))  # stage A; the pilots used seeds 1-3 (Breakout, SpaceInvaders) and 101
STUDY_OUT = "runs/ppo_atari_study"
STAGE_B_MOST = 60  # seeds per game: stage B's cap (900 runs of 1M steps)
MARGIN = 0.10  # parity: the ratio's interval inside [1 - MARGIN, 1 + MARGIN]
TIME_LIMIT = 27_000  # envpool's Atari max_episode_steps: a game this long was cut, not ended


def device_flag(args) -> str:
    return "--cuda" if getattr(args, "cuda", False) else "--no-cuda"


def cleanrl_command(args, seed):
    script = os.path.join(args.out, "cleanrl_ppo_atari_envpool.py")
    if not getattr(args, "dry_run", False):  # a dry run writes nothing
        script = patched_cleanrl(args.cleanrl, "ppo_atari_envpool.py", args.out)
    return [sys.executable, script, "--env-id", args.env_id, "--seed", str(seed), "--total-timesteps", str(args.total),
            device_flag(args)]


def our_flags(args) -> list:
    return [device_flag(args)] + (["--save-model"] if getattr(args, "env_ids", None) else [])


PPO = Comparison(script=os.path.normpath(os.path.join(HERE, "..", "cleanrl_scaling", "ppo_atari_envpool.py")),
                 stem=STEM,
                 batch=8 * 128,  # CleanRL's defaults, which every arm runs: 8 envs x 128 steps per iteration
                 checkpoint_every=50, cleanrl_command=cleanrl_command, variants=ARMS, our_flags=our_flags)


# ---------------------------------------------------------------------------------------------------------
# The study's rule
# ---------------------------------------------------------------------------------------------------------
def verdict(lo: float, hi: float, margin: float = MARGIN) -> str:
    """The words of the rule for a 95% interval of ours / CleanRL."""
    if hi < 1:
        return "behind"
    if lo > 1:
        return "ahead"
    if 1 - margin <= lo and hi <= 1 + margin:
        return "at parity"
    return "not separated"


def ratio_interval(ours, theirs, resamples: int = 10_000, seed: int = 0) -> tuple:
    """mean(ours) / mean(theirs) and its 95% percentile interval, resampling each side's seeds with replacement."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(ours, float), np.asarray(theirs, float)
    ratios = rng.choice(a, (resamples, len(a))).mean(1) / rng.choice(b, (resamples, len(b))).mean(1)
    return float(a.mean() / b.mean()), float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def human_normalised(finals: dict) -> dict:
    """{game: finals} -> {game: human-normalised finals}."""
    return {game: atari_scores.human_normalized(game, np.asarray(values, float)) for game, values in finals.items()}


def pooled_iqm(ours: dict, theirs: dict, resamples: int = 50_000, seed: int = 0) -> dict:
    """ours, theirs: {game: human-normalised finals}. IQM over all runs of all games per arm; the ratio and the
    difference of the two IQMs with 95% percentile intervals from the stratified bootstrap (each game's runs of each
    arm resampled with replacement on their own; Agarwal et al. 2021)."""
    rng = np.random.default_rng(seed)
    games = sorted(ours)

    def replicates(side):
        return iqm(np.concatenate([rng.choice(np.asarray(side[g], float), (resamples, len(side[g])))
                                   for g in games], axis=1), axis=1)

    point_ours, point_theirs = iqm(np.concatenate([ours[g] for g in games])), iqm(
        np.concatenate([theirs[g] for g in games]))
    a, b = replicates(ours), replicates(theirs)
    ratio, diff = a / b, a - b
    return {"iqm_ours": float(point_ours), "iqm_theirs": float(point_theirs),
            "ratio": float(point_ours / point_theirs), "ratio_lo": float(np.percentile(ratio, 2.5)),
            "ratio_hi": float(np.percentile(ratio, 97.5)), "diff": float(point_ours - point_theirs),
            "diff_lo": float(np.percentile(diff, 2.5)), "diff_hi": float(np.percentile(diff, 97.5))}


def verdict_line(name: str, point: float, lo: float, hi: float) -> str:
    words = verdict(lo, hi)
    width = f"half-width {(hi - lo) / 2:.1%}" + (": the smallest gap this design could tell"
                                                 if words == "not separated" else "")
    return f"{name}: ratio {point:.3f}, 95% interval [{lo:.3f}, {hi:.3f}] -> {words} ({width})"


def study_verdicts(finals: dict, arms: list) -> list:
    """finals: {game: {arm: {seed: final}}} with every chosen seed finished. One line per game and arm, then the
    pooled line per arm."""
    lines = []
    games = list(finals)
    for arm in arms:
        for game in games:
            ours, theirs = list(finals[game][arm].values()), list(finals[game]["CleanRL"].values())
            if np.mean(theirs) <= 0:
                lines.append(f"{arm}, {game}: no ratio (CleanRL's seed mean {np.mean(theirs):.2f} is not positive)")
                continue
            lines.append(verdict_line(f"{arm}, {game}", *ratio_interval(ours, theirs)))
        if len(games) > 1:
            pooled = pooled_iqm(human_normalised({g: list(finals[g][arm].values()) for g in games}),
                                human_normalised({g: list(finals[g]["CleanRL"].values()) for g in games}))
            lines.append(verdict_line(f"{arm}, pooled human-normalised IQM ({pooled['iqm_ours']:.3f} against "
                                      f"{pooled['iqm_theirs']:.3f})", pooled["ratio"], pooled["ratio_lo"],
                                      pooled["ratio_hi"])
                         + f"; IQM difference {pooled['diff']:+.3f} [{pooled['diff_lo']:+.3f}, "
                           f"{pooled['diff_hi']:+.3f}]")
    return lines


def cut_games(run_dir) -> tuple:
    """(games cut at the time limit, games) in one run of ours: bootstrapping at a truncation acts only on those."""
    lengths = [row["charts/episodic_length"] for row in map(json.loads, open(os.path.join(run_dir, "metrics.jsonl")))
               if "charts/episodic_length" in row]
    return sum(n >= TIME_LIMIT for n in lengths), len(lengths)


# ---------------------------------------------------------------------------------------------------------
# Options and the study's runs
# ---------------------------------------------------------------------------------------------------------
def game_args(args, game):
    """One game's comparison: its own folder in --out, laid out as a single-game comparison."""
    return argparse.Namespace(**{**vars(args), "env_id": game, "out": os.path.join(args.out, game)})


def check_options(args):
    if args.async_check and args.envpool_async_check:
        refuse("--async-check and --envpool-async-check: one check at a time (each has its own --out)")
    for check, arm, out in (("async_check", "async", ASYNC_OUT), ("envpool_async_check", "envpool-async",
                                                                  ENVPOOL_ASYNC_OUT)):
        if getattr(args, check):  # ours in both modes, against each other
            flag = "--" + check.replace("_", "-")
            if args.study or args.env_ids or args.cleanrl_seeds:
                refuse(f"{flag}: one game, ours against ours; drop --study, --env-ids and --cleanrl-seeds")
            args.arms, args.cleanrl_seeds, args.reference = ["default", arm], [], "ours"
            args.out = args.out or out
    if args.study:
        args.env_ids = args.env_ids or list(STUDY_GAMES)
        args.out = args.out or STUDY_OUT
        args.seeds = list(STUDY_SEEDS) if args.seeds is None else args.seeds
        args.cleanrl_seeds = list(args.seeds) if args.cleanrl_seeds is None else args.cleanrl_seeds
    args.out = args.out or "runs/ppo_atari_learning"
    args.seeds = [1, 2, 3] if args.seeds is None else args.seeds
    args.cleanrl_seeds = [1, 2, 3] if args.cleanrl_seeds is None else args.cleanrl_seeds
    unknown = [a for a in args.arms if a not in ARM_NAMES]
    if unknown:
        refuse(f"--arms {' '.join(unknown)}: unknown; choose from {', '.join(ARM_NAMES)}")
    if args.parallel < 1:
        refuse(f"--parallel {args.parallel}: give at least 1 (runs at once, one thread each)")
    if args.env_ids is not None:
        check_games(args.env_ids)
    check_common(PPO, args, "ppo_atari_envpool.py")
    args.arms = [ARM_NAMES[a] for a in args.arms]


def check_games(env_ids):
    if not env_ids or len(set(env_ids)) != len(env_ids):
        refuse(f"--env-ids {' '.join(env_ids)}: give one or more games, each once, e.g. --env-ids Breakout-v5 "
               "Qbert-v5")
    for game in env_ids:
        try:
            atari_scores.game_name(game)
        except KeyError:
            refuse(f"--env-ids {game}: no human and random scores for it, so the pooled rule cannot use it; known: "
                   f"{', '.join(g + '-v5' for g in atari_scores.REFERENCE_SCORES)}")


def run_study(args):
    """Every game's runs in one queue, seed by seed, at most --parallel at once; then the tables and the rule."""
    args.out = os.path.abspath(args.out)
    games = [game_args(args, g) for g in args.env_ids]
    if args.dry_run:
        return lc.print_jobs(study_jobs(games))
    codes = []
    if not args.summary_only:
        for g in games:
            os.makedirs(g.out, exist_ok=True)
        codes = lc.run_jobs(study_jobs(games), args.parallel)
    summarize_study(args, games)
    sys.exit(1 if any(codes) else 0)


def study_jobs(games) -> list:
    """Seed by seed, each seed's games in order (the sort is stable), so a stopped study has whole seeds."""
    return sorted((job for g in games for job in lc.pending_jobs(PPO, g)), key=lambda job: job.seed)


def summarize_study(args, games):
    finals = {}
    for g in games:
        finals[g.env_id], _ = lc.print_table(PPO, g)
        print_cut_games(g)
        print()
    arms = [v.name for v in lc.chosen_arms(PPO, args)]
    missing = [f"{g.env_id} {arm}" for g in games for arm, seeds in [("CleanRL", g.cleanrl_seeds)] +
               [(a, g.seeds) for a in arms] if len(finals[g.env_id].get(arm, {})) < len(seeds)]
    if missing:
        print(f"no verdict yet: unfinished seeds in {len(missing)} game-arm(s), e.g. {missing[0]}")
        return
    for line in study_verdicts(finals, arms):
        print(line)
    if len(games) > 1:
        print(seeds_for_stage_b(finals))


def seeds_for_stage_b(finals: dict) -> str:
    """The seeds per game for a 10% pooled MDD, from these runs' own seed variance (every arm, pooled) and CleanRL's
    levels: the difference between the arms is not used (an internal pilot)."""
    groups = {(game, arm): list(by_seed.values()) for game, arms in finals.items() for arm, by_seed in arms.items()}
    cv, dof = design.pooled_relative_sd(groups)
    levels = [atari_scores.human_normalized(g, np.mean(list(finals[g]["CleanRL"].values()))) for g in finals]
    most = 2 * STAGE_B_MOST
    needed = design.seeds_needed(lambda n: design.pooled_iqm_mdd(levels, cv, n, sims=2000), most=most)
    return (f"seed variance of these runs: relative SD {cv:.3f} ({dof} degrees of freedom); at CleanRL's levels here "
            f"a {design.TARGET_GAP:.0%} pooled IQM MDD needs {needed or f'more than {most}'} seeds per game "
            f"(stage B: at most {STAGE_B_MOST})")


def print_cut_games(g):
    for variant in lc.chosen_arms(PPO, g):
        counts = [cut_games(d) for s in g.seeds if (d := lc.our_run_dir(PPO, g.out, g.env_id, s, variant))]
        if counts:
            print(f"{variant.name}: {sum(c for c, _ in counts)} of {sum(n for _, n in counts)} games cut at the "
                  f"{TIME_LIMIT}-step limit")


def main():
    p = parser(__doc__.split("\n\n")[0], out=None, env_id="Breakout-v5")
    p.set_defaults(seeds=None, cleanrl_seeds=None)  # 1 2 3 for one game, the stage-A seeds for --study
    p.add_argument("--cleanrl", help="a CleanRL checkout (its cleanrl/ppo_atari_envpool.py is patched in --out)")
    p.add_argument("--arms", nargs="+", default=["default", "compat"],
                   help=f"which arms of ours: default, compat, and the ablations {', '.join(list(ARM_NAMES)[2:])}")
    p.add_argument("--async-check", action="store_true",
                   help=f"ours with --async-envs against ours without, no CleanRL run, --out {ASYNC_OUT}")
    p.add_argument("--envpool-async-check", action="store_true",
                   help=f"ours with --envpool-async against ours without, no CleanRL run, --out {ENVPOOL_ASYNC_OUT}")
    p.add_argument("--study", action="store_true",
                   help=f"the five-game study: --env-ids {' '.join(STUDY_GAMES)}, seeds 11-20, --out {STUDY_OUT}")
    p.add_argument("--env-ids", nargs="+", default=None, help="several games, each in its own folder of --out")
    p.add_argument("--parallel", type=int, default=len(os.sched_getaffinity(0)),
                   help="runs at once, one thread each (default: the cores this process may use)")
    p.add_argument("--cuda", action="store_true", help="both programs on the GPU (default: both on the CPU)")
    p.add_argument("--dry-run", action="store_true", help="print each run's command line; start and write nothing")
    args = p.parse_args()
    check_options(args)
    if args.env_ids:
        run_study(args)
    else:
        lc.run(PPO, args)


if __name__ == "__main__":
    main()
