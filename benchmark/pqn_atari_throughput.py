"""Throughput of pqn_atari.py against its component bound and (optionally) CleanRL's pqn_atari_envpool.py.

    python benchmark/pqn_atari_throughput.py [--cleanrl PATH_TO_CLEANRL_CHECKOUT] [--iterations 11] [--repeats 3]

Prints, side by side in one run (programs alternated round by round, medians, so machine noise hits every row
alike):
  * ours at CleanRL's defaults (8 envs x 128 steps, 4 x 4 RAdam steps of 256): fp32, --bf16, and fp32 with
    --eval-envs 0 (CleanRL runs no evaluation envs), marginal SPS (the first iteration, which compiles, excluded);
  * CleanRL's pqn_atari_envpool.py at its defaults, patched in a temporary copy only so that it accepts envpool
    1.x's reset/step tuples (its own copy crashes at the first reset), timed the same way;
  * ours under --preset purejaxql (128 envs x 32 steps, 32 x 2 steps of 128) with its component bound and
    peak RSS;
  * the component bound of each setting: envpool random-action stepping + batch-N inference + the update's
    RAdam steps, each timed alone and summed as a serial loop spends them.
Compare ratios within one run, not absolute numbers.
"""
import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "cleanrl_scaling", "pqn_atari.py")
CLEANRL_SCRIPT = "pqn_atari_envpool.py"  # CleanRL's, in cleanrl/ of its checkout
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from _throughput_common import (marginal_sps, our_run, run_cleanrl_atari, time_env, time_forward,  # noqa: E402
                                time_update_step)
from cleanrl_scaling.pqn_atari import (Args, Batch, QNetwork, Ranks, make_envs, make_optimizer,  # noqa: E402
                                       maybe_compile, minibatch_gradient, td_loss)


def radam_step_seconds(net, mb_size, bf16, ours, reps=5):
    """One RAdam step on a minibatch; `ours`: compiled loss and foreach RAdam as the script runs them, else eager
    with the for-loop RAdam (CleanRL's)."""
    args = Args()
    optimizer = make_optimizer(net, args) if ours else torch.optim.RAdam(net.parameters(), lr=2.5e-4, foreach=False)
    batch = Batch(torch.randint(0, 255, (mb_size, 4, 84, 84), dtype=torch.uint8), torch.randint(0, 4, (mb_size,)),
                  torch.randn(mb_size), torch.ones(mb_size))
    return time_update_step(net, optimizer, minibatch_gradient, maybe_compile(td_loss, ours), args, batch, Ranks(),
                            bf16, reps)


def component_bound(num_envs=8, num_steps=128, minibatches=4, epochs=4, bf16=False, ours=True, eval_envs=0):
    net = QNetwork(4)
    env_t = time_env(make_envs, num_envs, steps=200) + (time_env(make_envs, eval_envs, steps=200) if eval_envs else 0.0)
    fwd_t = time_forward(net, num_envs + eval_envs, bf16, reps=50)
    upd_t = radam_step_seconds(net, num_envs * num_steps // minibatches, bf16, ours)
    update = epochs * minibatches * upd_t
    return {"env_ms": env_t * 1e3, "forward_ms": fwd_t * 1e3, "update_step_ms": upd_t * 1e3,
            "bound_sps": num_envs * num_steps / (num_steps * (env_t + fwd_t) + update)}


def run_ours(extra, iterations, batch=1024):
    points, peak_mb = our_run(SCRIPT, ["--total-timesteps", str(iterations * batch)] + extra)
    return marginal_sps(points), peak_mb


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl", help="path of a CleanRL checkout (never committed) to time its script too")
    parser.add_argument("--iterations", type=int, default=11, help="iterations per timed run (first excluded)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each program, alternated; medians")
    opts = parser.parse_args()
    torch.manual_seed(0)

    pjq = ["--preset", "purejaxql"]
    # (name, command, bound settings); --diagnostics-every 0: the bound has no diagnostics
    programs = [("ours fp32 (defaults)", lambda: run_ours([], opts.iterations), dict(eval_envs=8)),
                ("ours fp32, --eval-envs 0", lambda: run_ours(["--eval-envs", "0"], opts.iterations), dict()),
                ("ours --bf16", lambda: run_ours(["--bf16"], opts.iterations), dict(bf16=True, eval_envs=8)),
                ("ours --preset purejaxql", lambda: run_ours(pjq, max(3, opts.iterations // 4), batch=4096),
                 dict(num_envs=128, num_steps=32, minibatches=32, epochs=2, eval_envs=8))]
    if opts.cleanrl:
        programs.append(("CleanRL (defaults)", lambda: run_cleanrl_atari(opts.cleanrl, CLEANRL_SCRIPT, opts.iterations),
                         dict(ours=False)))
    samples = {name: [] for name, _, _ in programs}
    peaks = {name: [] for name, _, _ in programs}
    bounds = {name: [] for name, _, _ in programs}
    for repeat in range(opts.repeats):  # alternated, so slow drifts of a shared machine hit every program alike
        for name, run, bound_kwargs in programs:
            bounds[name].append(component_bound(**bound_kwargs)["bound_sps"])
            sps, peak = run()
            samples[name].append(sps)
            peaks[name].append(peak)
        print(f"repeat {repeat + 1} (SPS / bound / peak RSS MiB): " + ", ".join(
            f"{n} {samples[n][-1]:.0f} / {bounds[n][-1]:.0f} / {peaks[n][-1]:.0f}" for n in samples), flush=True)
    median = {name: float(np.median(v)) for name, v in samples.items()}
    cleanrl = median.get("CleanRL (defaults)")
    print(f"\n{'run (median of ' + str(opts.repeats) + ')':<30}{'SPS':>8}{'bound':>8}{'of bound':>10}{'x CleanRL':>11}"
          f"{'peak RSS MiB':>14}")
    for name, _, _ in programs:
        ratio = f"{median[name] / cleanrl:.2f}" if cleanrl else "-"
        b = float(np.median(bounds[name]))
        print(f"{name:<30}{median[name]:>8.0f}{b:>8.0f}{median[name] / b:>9.0%}{ratio:>11}{max(peaks[name]):>14.0f}")


if __name__ == "__main__":
    main()
