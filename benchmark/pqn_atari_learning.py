"""Learning side by side: pqn_atari.py (its defaults) against CleanRL's pqn_atari_envpool.py on one machine.

    python benchmark/pqn_atari_learning.py --cleanrl PATH_TO_CLEANRL_CHECKOUT [--out runs/pqn_learning]
        [--env-id Breakout-v5] [--total 1000000] [--seeds 1 2] [--cleanrl-seeds 1]
    python benchmark/pqn_atari_learning.py --out runs/pqn_learning --summary-only

CleanRL's script runs from a copy patched only for envpool 1.x's reset/step tuples (never committed). The runs, the
continuation after a stop and the table are those of _learning_comparison.py: per run, the steps done; the final
training return (the mean full-game return of the episodes that end in the last 10% of the budget, with its
standard error and count); for ours also the greedy evaluation return (charts/eval_return) over the same window;
and the mean training return in each tenth of the budget.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _learning_comparison import Comparison, check_common, parser, run  # noqa: E402
from _throughput_common import patched_cleanrl  # noqa: E402


def cleanrl_command(args, seed):
    return [sys.executable, patched_cleanrl(args.cleanrl, "pqn_atari_envpool.py", args.out), "--env-id", args.env_id,
            "--seed", str(seed), "--total-timesteps", str(args.total), "--no-cuda"]


PQN = Comparison(script=os.path.join(HERE, "..", "cleanrl_scaling", "pqn_atari.py"), stem="pqn_atari",
                 batch=8 * 128,  # CleanRL's defaults, which both programs run: 8 envs x 128 steps per iteration
                 checkpoint_every=50, cleanrl_command=cleanrl_command)


def check_options(args):
    check_common(PQN, args, "pqn_atari_envpool.py")


def main():
    p = parser(__doc__.split("\n")[0], out="runs/pqn_learning", env_id="Breakout-v5")
    p.add_argument("--cleanrl", help="a CleanRL checkout (its cleanrl/pqn_atari_envpool.py is patched in --out)")
    args = p.parse_args()
    check_options(args)
    run(PQN, args)


if __name__ == "__main__":
    main()
