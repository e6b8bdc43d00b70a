"""Throughput of ppo_atari_envpool.py against its component bound and (optionally) CleanRL's script.

    python benchmark/ppo_atari_throughput.py [--cleanrl PATH_TO_CLEANRL_CHECKOUT] [--iterations 21] [--repeats 3]

Prints, side by side in one run (runs and bound measurements alternated, medians, so machine noise hits all
rows alike):
  * the component bound: envpool random-action stepping + batch-N inference + the update's Adam steps
    (ours: compiled as the script runs them; CleanRL's: eager, default layout), timed alone and summed as a
    serial loop would spend them;
  * the loop bound: the bare serial rollout loop (forward, sample, envpool step, nothing stored) timed as a
    whole, plus the same update steps: what interleaving the network and the emulator costs on this machine,
    which no serial loop avoids (also shown directly: an envpool step after 1.5 ms of sleep vs of busy work);
  * ours at CleanRL's defaults (fp32, --bf16, and fp32 with --diagnostics-every 0: the bound has no diagnostics),
    marginal SPS (first iteration, which compiles, excluded);
  * CleanRL's ppo_atari_envpool.py at its defaults, patched in a temporary copy only so that it accepts
    envpool 1.x's reset/step tuples (its own copy crashes at the first reset), timed the same way;
  * SPS against --num-envs (8..256) and the peak memory of --num-envs 256 --num-steps 64.
Run it with nothing else on the machine; compare ratios, not absolute numbers.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "cleanrl_scaling", "ppo_atari_envpool.py")
CLEANRL_SCRIPT = "ppo_atari_envpool.py"  # CleanRL's, in cleanrl/ of its checkout
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from _throughput_common import (check_cleanrl_checkout, check_repeats, cpu_autocast, int_list,  # noqa: E402
                                marginal_sps, our_run, refuse, run_cleanrl_atari, time_env, time_forward,
                                time_update_step)
from cleanrl_scaling.ppo_atari_envpool import (Agent, Args, Batch, Ranks, make_envs, maybe_compile,  # noqa: E402
                                               minibatch_gradient, ppo_loss, sample_actions)


def time_serial_loop(agent, num_envs, bf16, steps=256):
    """The least a serial rollout can do: batch-N forward, sampling and an envpool step, nothing stored."""
    envs = make_envs("Breakout-v5", num_envs, seed=0)
    obs, _ = envs.reset()
    with torch.no_grad(), cpu_autocast(bf16):
        for i in range(steps + 20):
            if i == 20:
                start = time.perf_counter()
            logits, _ = agent(torch.as_tensor(obs))
            obs, *_ = envs.step(sample_actions(logits.float())[0].numpy())
    return (time.perf_counter() - start) / steps


def time_env_after(work, num_envs=8, steps=300, gap=0.0015):
    """An envpool step right after `gap` seconds of `work` ("none", "sleep", or "busy": a pure-Python loop on
    the main thread): shows what merely keeping a core busy before each step costs on this machine."""
    envs = make_envs("Breakout-v5", num_envs, seed=0)
    envs.reset()
    actions = np.random.default_rng(0).integers(0, envs.action_space.n, size=(steps, num_envs)).astype(np.int32)
    total = 0.0
    for a in actions:
        if work == "sleep":
            time.sleep(gap)
        elif work == "busy":
            until = time.perf_counter() + gap
            while time.perf_counter() < until:
                pass
        start = time.perf_counter()
        envs.step(a)
        total += time.perf_counter() - start
    return total / steps


def adam_step_seconds(agent, mb_size, bf16, ours, reps=20):
    """One Adam step on a minibatch; `ours`: compiled loss and fused Adam as the script runs them, else eager with
    CleanRL's for-loop Adam."""
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5, fused=ours)
    batch = Batch(torch.randint(0, 255, (mb_size, 4, 84, 84), dtype=torch.uint8), torch.randint(0, 4, (mb_size,)),
                  torch.full((mb_size,), -1.386), torch.randn(mb_size), torch.randn(mb_size), torch.randn(mb_size),
                  torch.ones(mb_size))
    return time_update_step(agent, optimizer, minibatch_gradient, maybe_compile(ppo_loss, ours), Args(), batch, Ranks(),
                            bf16, reps)


def component_bound(num_envs=8, num_steps=128, minibatches=4, epochs=4, channels_last=True, bf16=False, ours=True):
    agent = Agent(4, channels_last=channels_last)
    if channels_last:
        agent = agent.to(memory_format=torch.channels_last)
    env_t = time_env(make_envs, num_envs, steps=400)
    fwd_t = time_forward(agent, num_envs, bf16=False, reps=200)
    loop_t = time_serial_loop(agent, num_envs, bf16)
    upd_t = adam_step_seconds(agent, num_envs * num_steps // minibatches, bf16, ours)
    update = epochs * minibatches * upd_t
    return {"env_sps": num_envs / env_t, "forward_ms": fwd_t * 1e3, "loop_step_ms": loop_t * 1e3,
            "update_step_ms": upd_t * 1e3, "bound_sps": num_envs * num_steps / (num_steps * (env_t + fwd_t) + update),
            "loop_bound_sps": num_envs * num_steps / (num_steps * loop_t + update)}


def run_ours(extra, iterations, num_envs=8, num_steps=128):
    points, peak_mb = our_run(SCRIPT, ["--num-envs", str(num_envs), "--num-steps", str(num_steps),
                                       "--total-timesteps", str(iterations * num_envs * num_steps)] + extra)
    return marginal_sps(points), peak_mb


def check_options(opts) -> list:
    """Every value is checked before anything is timed; returns the --sweep sizes."""
    check_repeats(opts.repeats)
    if opts.iterations < 2:  # the first iteration (compilation) is excluded, so one leaves nothing to time
        refuse(f"--iterations must be >= 2 (got {opts.iterations}); the first one is excluded from SPS")
    check_cleanrl_checkout(opts.cleanrl, CLEANRL_SCRIPT)
    sweep = int_list("--sweep", opts.sweep, "8,32,64")
    if any(n < 1 for n in sweep):
        refuse(f"--sweep {opts.sweep!r}: every num_envs must be >= 1")
    return sweep


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl", help="path of a CleanRL checkout (never committed) to time its script too")
    parser.add_argument("--iterations", type=int, default=21,
                        help="iterations per timed run (first excluded; 21 includes one diagnostic iteration)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs of each program, alternated (ours, ours --bf16, CleanRL, ours, ...); medians")
    parser.add_argument("--sweep", default="8,32,64,128,256", help="num_envs values for the SPS sweep")
    opts = parser.parse_args()
    sweep = check_options(opts)
    torch.manual_seed(0)

    bound_kinds = {"ours": {}, "ours_bf16": {"bf16": True}, "ours_eager": {"ours": False},
                   "cleanrl": {"channels_last": False, "ours": False}}  # CleanRL: its layout, eager, for-loop Adam
    programs = [("ours fp32 (defaults)", lambda: run_ours([], opts.iterations)[0], "ours"),
                ("ours --bf16", lambda: run_ours(["--bf16"], opts.iterations)[0], "ours_bf16"),
                ("ours, diagnostics off", lambda: run_ours(["--diagnostics-every", "0"], opts.iterations)[0], "ours")]
    if opts.cleanrl:
        programs.append(("CleanRL (defaults)",
                         lambda: run_cleanrl_atari(opts.cleanrl, CLEANRL_SCRIPT, opts.iterations)[0], "cleanrl"))
    samples = {name: [] for name, _, _ in programs}
    bounds = {kind: [] for kind in bound_kinds}
    for repeat in range(opts.repeats):  # alternated, so slow drifts of a shared machine hit every program alike
        for kind, kwargs in bound_kinds.items():  # the bound too is re-measured in every repeat
            bounds[kind].append(component_bound(**kwargs))
        for name, run, _ in programs:
            samples[name].append(run())
        print(f"repeat {repeat + 1}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in samples.items()) + "; bounds "
              + ", ".join(f"{k} {b[-1]['bound_sps']:.0f}" for k, b in bounds.items()), flush=True)
    bound = {kind: {key: float(np.median([b[key] for b in runs])) for key in runs[0]} for kind, runs in bounds.items()}
    print(f"components, medians (8 envs x 128 steps, 4x4 minibatch steps of 256): envpool {bound['ours']['env_sps']:.0f} "
          f"steps/s, forward {bound['ours']['forward_ms']:.2f} ms, serial loop step (forward + sample + envpool step) "
          f"{bound['ours']['loop_step_ms']:.2f} ms, update step: {bound['ours']['update_step_ms']:.1f} ms "
          f"compiled channels-last fp32 + fused Adam / {bound['ours_eager']['update_step_ms']:.1f} ms eager channels-last / "
          f"{bound['cleanrl']['update_step_ms']:.1f} ms eager default layout / {bound['ours_bf16']['update_step_ms']:.1f} ms compiled bf16")
    after = {work: 1e3 * float(np.median([time_env_after(work) for _ in range(3)])) for work in ("none", "sleep", "busy")}
    print(f"envpool step (8 envs) back-to-back {after['none']:.2f} ms, after 1.5 ms asleep {after['sleep']:.2f} ms, "
          f"after 1.5 ms of busy Python {after['busy']:.2f} ms")
    median = {name: float(np.median(v)) for name, v in samples.items()}
    cleanrl = median.get("CleanRL (defaults)")
    print("\nbound: the components timed alone and summed; loop bound: the bare serial loop (forward, sample, step;"
          " nothing stored)\ntimed as a whole, plus the update steps")
    print(f"{'run (median of ' + str(opts.repeats) + ')':<28}{'SPS':>8}{'bound':>8}{'of bound':>10}{'loop bound':>12}"
          f"{'of loop':>9}{'x CleanRL':>11}")
    for name, _, kind in programs:
        ratio = f"{median[name] / cleanrl:.2f}" if cleanrl else "-"
        b, lb = bound[kind]["bound_sps"], bound[kind]["loop_bound_sps"]
        print(f"{name:<28}{median[name]:>8.0f}{b:>8.0f}{median[name] / b:>9.0%}{lb:>12.0f}{median[name] / lb:>8.0%}{ratio:>11}")

    print("\nSPS against --num-envs (--num-steps 32, 4 minibatches x 4 epochs, fp32, 4 iterations):")
    for n in sweep:
        sps, peak = run_ours([], 4, num_envs=n, num_steps=32)
        print(f"  num_envs {n:>4}: {sps:>7.0f} SPS, peak RSS {peak:.0f} MiB")
    sps, peak = run_ours(["--diagnostics-every", "1"], 3, num_envs=256, num_steps=64)
    print(f"\n--num-envs 256 --num-steps 64 (diagnostics every iteration): {sps:.0f} SPS, "
          f"peak RSS {peak:.0f} MiB (target < 2048 MiB)")


if __name__ == "__main__":
    main()
