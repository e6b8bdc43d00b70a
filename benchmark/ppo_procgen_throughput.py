"""Throughput of ppo_procgen.py against CleanRL's ppo_procgen.py, and of its two env backends.

    python benchmark/ppo_procgen_throughput.py --cleanrl CHECKOUT --cleanrl-python VENV/bin/python
        [--num-envs 64] [--num-steps 256] [--iterations 3] [--repeats 3] [--rss-epochs 3]

(benchmark/ppo_procgen_throughput.sh makes the venv CleanRL's script needs and calls this.) Prints, from one run:
  * marginal SPS (first iteration excluded: it compiles and warms up) of ours fp32, ours --bf16 and CleanRL's
    script at the same N x T and CleanRL's other defaults, runs alternated (ours, ours --bf16, CleanRL, ours, ...)
    so that a shared machine's drifts hit every program alike; medians;
  * random-action steps per second of envpool's Procgen against the procgen package's ProcgenEnv (64 envs),
    alternated, medians;
  * one 3x3 padded convolution (IMPALA's 16 -> 16 channels at 32x32, batch 64) in fp32 and under bf16 autocast:
    where the CPU has no fast bf16 kernel for it, --bf16 slows the IMPALA CNN down (--no-bf16 skips those runs);
  * peak resident memory of ours at the defaults (64 x 256, minibatches of 2048 backpropagated in chunks of
    512, diagnostics on the iteration), one iteration; --rss-epochs 1 runs one epoch instead of 3 to save time
    (the peak is one minibatch's, so an epoch count does not change it).
CleanRL's script runs unpatched, from a temporary copy, in its own environment (never in this repository).
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "cleanrl_scaling", "ppo_procgen.py")
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from _throughput_common import cleanrl_points, marginal_sps, our_run, run_checked  # noqa: E402
from cleanrl_scaling.ppo_procgen import Args, make_envs  # noqa: E402


def run_ours(extra, num_envs, num_steps, iterations):
    points, peak_mb = our_run(SCRIPT, ["--num-envs", str(num_envs), "--num-steps", str(num_steps),
                                       "--total-timesteps", str(iterations * num_envs * num_steps)] + extra)
    return (marginal_sps(points) if len(points) > 1 else float("nan")), peak_mb


def run_cleanrl(checkout, python, num_envs, num_steps, iterations):
    """CleanRL's script, unpatched, from a temporary copy, in its own environment."""
    batch = num_envs * num_steps
    with tempfile.TemporaryDirectory() as tmp:
        path = shutil.copy(os.path.join(checkout, "cleanrl", "ppo_procgen.py"), tmp)
        out = run_checked([python, path, "--num-envs", str(num_envs), "--num-steps", str(num_steps),
                           "--total-timesteps", str(iterations * batch)], cwd=tmp)
        return marginal_sps(cleanrl_points(out.stdout, batch))


def env_sps(backend, num_envs, steps=300):
    envs = make_envs(Args(env_id="starpilot", env_backend=backend), num_envs, seed=0)
    envs.reset()
    actions = np.random.default_rng(0).integers(0, 15, size=(steps + 20, num_envs)).astype(np.int32)
    for a in actions[:20]:
        envs.step(a)
    start = time.perf_counter()
    for a in actions[20:]:
        envs.step(a)
    envs.close()
    return num_envs * steps / (time.perf_counter() - start)


def conv_ms(bf16, reps=5):
    import torch
    conv = torch.nn.Conv2d(16, 16, 3, padding=1).to(memory_format=torch.channels_last)
    x = torch.randn(64, 16, 32, 32).contiguous(memory_format=torch.channels_last)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        conv(x)
        start = time.perf_counter()
        for _ in range(reps):
            conv(x)
    return (time.perf_counter() - start) / reps * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl", required=True, help="path of a CleanRL checkout (its script is copied to a temp dir)")
    parser.add_argument("--cleanrl-python", required=True, help="interpreter of the environment CleanRL's script needs")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=256, help="rollout length of the timed runs (CleanRL: 256)")
    parser.add_argument("--iterations", type=int, default=3, help="iterations per timed run (the first is excluded)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each program, alternated; medians")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True, help="time ours --bf16 too")
    parser.add_argument("--env-num-envs", type=int, default=64, help="envs of the backend comparison")
    parser.add_argument("--rss-epochs", type=int, default=3, help="epochs of the one-iteration peak-memory run (0: skip it)")
    opts = parser.parse_args()
    n, t = opts.num_envs, opts.num_steps
    programs = {
        "ours fp32": lambda: run_ours([], n, t, opts.iterations)[0],  # defaults: no diagnostic before iteration 20
        **({"ours --bf16": lambda: run_ours(["--bf16"], n, t, opts.iterations)[0]} if opts.bf16 else {}),
        "CleanRL": lambda: run_cleanrl(opts.cleanrl, opts.cleanrl_python, n, t, opts.iterations),
    }
    samples = {name: [] for name in programs}
    envs = {"envpool": [], "procgen": []}
    for repeat in range(opts.repeats):
        for backend in envs:
            envs[backend].append(env_sps(backend, opts.env_num_envs))
        for name, run in programs.items():
            samples[name].append(run())
        print(f"repeat {repeat + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in samples.items())
              + "; random-action steps/s " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in envs.items()), flush=True)
    median = {name: float(np.median(v)) for name, v in samples.items()}
    print(f"\nmarginal SPS, {n} envs x {t} steps, 8 minibatches x 3 epochs "
          f"(median of {opts.repeats}; per-round ratios in brackets)")
    for name, values in samples.items():
        ratios = ", ".join(f"{a / b:.2f}" for a, b in zip(values, samples["CleanRL"]))
        print(f"  {name:<14}{median[name]:>8.1f} SPS  x CleanRL {median[name] / median['CleanRL']:.2f}  [{ratios}]")
    env_median = {k: float(np.median(v)) for k, v in envs.items()}
    print(f"random-action steps/s with {opts.env_num_envs} envs (starpilot easy): envpool {env_median['envpool']:.0f}, procgen "
          f"{env_median['procgen']:.0f} ({env_median['envpool'] / env_median['procgen']:.2f}x)")
    fp32, bf16 = np.median([conv_ms(False) for _ in range(3)]), np.median([conv_ms(True) for _ in range(3)])
    print(f"3x3 padded conv 16->16 at 32x32, batch 64, channels-last: fp32 {fp32:.1f} ms, bf16 autocast {bf16:.1f} ms")
    if opts.rss_epochs == 0:
        return
    sps, peak = run_ours(["--diagnostics-every", "1", "--update-epochs", str(opts.rss_epochs)], 64, 256, 1)
    print(f"peak RSS at the defaults (64 x 256, one iteration, {opts.rss_epochs} epoch(s), diagnostics on): {peak:.0f} MiB")


if __name__ == "__main__":
    main()
