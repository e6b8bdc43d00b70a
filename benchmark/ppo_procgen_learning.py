"""Learning side by side: ppo_procgen.py (its defaults) against CleanRL's ppo_procgen.py on one machine.

    python benchmark/ppo_procgen_learning.py --cleanrl CHECKOUT --cleanrl-python VENV/bin/python
        [--out runs/ppo_procgen_learning] [--env-id starpilot] [--total 1000000] [--seeds 1 2] [--cleanrl-seeds 1]
    python benchmark/ppo_procgen_learning.py --out runs/ppo_procgen_learning --summary-only

(benchmark/ppo_procgen_learning.sh makes the venv CleanRL's script needs and calls this.) Both at CleanRL's defaults
(M25 Table 2: easy mode, all levels, 64 envs x 256 steps, 8 minibatches x 3 epochs, lr 5e-4, IMPALA CNN), ours on
its default envpool backend; CleanRL's script runs unpatched from a copy in --out, in its own venv. The runs, the
continuation after a stop and the table (final training return over the last 10% of the budget, with its standard
error and count, and per tenth of the budget) are those of _learning_comparison.py.
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _learning_comparison import Comparison, check_common, parser, run  # noqa: E402


def cleanrl_command(args, seed):
    script = shutil.copy(os.path.join(args.cleanrl, "cleanrl", "ppo_procgen.py"), args.out)
    return [args.cleanrl_python, script, "--env-id", args.env_id, "--seed", str(seed),
            "--total-timesteps", str(args.total)]


PROCGEN = Comparison(script=os.path.join(HERE, "..", "cleanrl_scaling", "ppo_procgen.py"), stem="ppo_procgen",
                     batch=64 * 256,  # CleanRL's defaults, which both programs run: 64 envs x 256 steps per iteration
                     checkpoint_every=5, cleanrl_command=cleanrl_command)


def main():
    p = parser(__doc__.split("\n")[0], out="runs/ppo_procgen_learning", env_id="starpilot")
    p.add_argument("--cleanrl", help="a CleanRL checkout (its cleanrl/ppo_procgen.py is copied to --out)")
    p.add_argument("--cleanrl-python", default=sys.executable, help="the interpreter of CleanRL's venv")
    args = p.parse_args()
    check_common(PROCGEN, args, "ppo_procgen.py")
    run(PROCGEN, args)


if __name__ == "__main__":
    main()
