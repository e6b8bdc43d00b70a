"""Learning side by side: ppo_atari_envpool.py (default mode and --cleanrl-compat) against CleanRL's
ppo_atari_envpool.py on one machine.

    python benchmark/ppo_atari_learning.py --cleanrl PATH_TO_CLEANRL_CHECKOUT [--out runs/ppo_atari_learning]
        [--env-id Breakout-v5] [--total 1000000] [--seeds 1 2 3] [--cleanrl-seeds 1 2 3] [--arms default compat]
    python benchmark/ppo_atari_learning.py --out runs/ppo_atari_learning --summary-only

All arms run CleanRL's defaults (8 envs x 128 steps, 4 minibatches x 4 epochs, lr 2.5e-4 annealed, clip 0.1).
CleanRL's script runs from a copy patched only for envpool 1.x's reset/step tuples (never committed). The runs, the
continuation after a stop and the table are those of _learning_comparison.py.

The rule, fixed before the runs (docs/ppo_atari_envpool.md#learning):
- final return of a run = mean full-game return of the episodes that end in the last 10% of the budget;
- an arm of ours is at parity with CleanRL when the 95% percentile bootstrap interval (10,000 resamples of each
  side's seeds) of mean(ours) - mean(CleanRL) contains 0; "behind" when the interval lies below 0;
- an arm that is behind is taken apart on the same seeds, one difference at a time (--arms no-compile,
  no-channels-last; compat already switches CleanRL's episode semantics back on).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _learning_comparison import Comparison, Variant, check_common, parser, run  # noqa: E402
from _throughput_common import patched_cleanrl, refuse  # noqa: E402

STEM = "ppo_atari_envpool"
ARMS = (Variant("ours", STEM),  # default mode: time-limit bootstrapping, masked reset steps, compiled, channels-last
        Variant("ours --cleanrl-compat", f"{STEM}_compat", ("--cleanrl-compat",)),
        # the ablations, run only when an arm is behind (the rule above)
        Variant("ours --no-compile", f"{STEM}_nocompile", ("--no-compile",)),
        Variant("ours --no-channels-last", f"{STEM}_nochannelslast", ("--no-channels-last",)))
ARM_NAMES = {"default": STEM, "compat": f"{STEM}_compat", "no-compile": f"{STEM}_nocompile",
             "no-channels-last": f"{STEM}_nochannelslast"}


def cleanrl_command(args, seed):
    return [sys.executable, patched_cleanrl(args.cleanrl, "ppo_atari_envpool.py", args.out), "--env-id", args.env_id,
            "--seed", str(seed), "--total-timesteps", str(args.total), "--no-cuda"]


PPO = Comparison(script=os.path.join(HERE, "..", "cleanrl_scaling", "ppo_atari_envpool.py"), stem=STEM,
                 batch=8 * 128,  # CleanRL's defaults, which every arm runs: 8 envs x 128 steps per iteration
                 checkpoint_every=50, cleanrl_command=cleanrl_command, variants=ARMS)


def check_options(args):
    unknown = [a for a in args.arms if a not in ARM_NAMES]
    if unknown:
        refuse(f"--arms {' '.join(unknown)}: unknown; choose from {', '.join(ARM_NAMES)}")
    check_common(PPO, args, "ppo_atari_envpool.py")
    args.arms = [ARM_NAMES[a] for a in args.arms]


def main():
    p = parser(__doc__.split("\n")[0], out="runs/ppo_atari_learning", env_id="Breakout-v5")
    p.set_defaults(seeds=[1, 2, 3], cleanrl_seeds=[1, 2, 3])
    p.add_argument("--cleanrl", help="a CleanRL checkout (its cleanrl/ppo_atari_envpool.py is patched in --out)")
    p.add_argument("--arms", nargs="+", default=["default", "compat"],
                   help="which arms of ours: default, compat, and the ablations no-compile, no-channels-last")
    args = p.parse_args()
    check_options(args)
    run(PPO, args)


if __name__ == "__main__":
    main()
