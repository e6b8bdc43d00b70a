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
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "cleanrl_scaling", "pqn_atari.py")
sys.path.insert(0, os.path.join(HERE, ".."))
from cleanrl_scaling.pqn_atari import (Args, Batch, QNetwork, Ranks, make_envs, make_optimizer,  # noqa: E402
                                       maybe_compile, minibatch_gradient, td_loss)


def time_env(num_envs, steps=200):
    envs = make_envs("Breakout-v5", num_envs, seed=0)
    envs.reset()
    actions = np.random.default_rng(0).integers(0, envs.action_space.n, size=(steps + 20, num_envs)).astype(np.int32)
    for a in actions[:20]:
        envs.step(a)
    start = time.perf_counter()
    for a in actions[20:]:
        envs.step(a)
    return (time.perf_counter() - start) / steps  # seconds per vector step


def time_forward(net, num_envs, bf16, reps=50):
    obs = torch.randint(0, 255, (num_envs, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for _ in range(10):
            net(obs)
        start = time.perf_counter()
        for _ in range(reps):
            net(obs)
    return (time.perf_counter() - start) / reps


def time_update_step(net, mb_size, bf16, ours, reps=5):
    """One RAdam step through the script's own minibatch_gradient; `ours`: compiled loss and foreach RAdam as
    the script runs them, else eager with the for-loop RAdam (CleanRL's)."""
    args = Args()
    loss_fn = maybe_compile(td_loss, ours)
    optimizer = make_optimizer(net, args) if ours else torch.optim.RAdam(net.parameters(), lr=2.5e-4, foreach=False)
    batch = Batch(torch.randint(0, 255, (mb_size, 4, 84, 84), dtype=torch.uint8), torch.randint(0, 4, (mb_size,)),
                  torch.randn(mb_size), torch.ones(mb_size))
    idx = torch.arange(mb_size)
    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
    def step():
        optimizer.zero_grad(set_to_none=True)
        minibatch_gradient(net, batch, idx, args, autocast, loss_fn, Ranks())
        torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
        optimizer.step()
    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(reps):
        step()
    return (time.perf_counter() - start) / reps


def component_bound(num_envs=8, num_steps=128, minibatches=4, epochs=4, bf16=False, ours=True, eval_envs=0):
    net = QNetwork(4)
    env_t = time_env(num_envs) + (time_env(eval_envs) if eval_envs else 0.0)
    fwd_t = time_forward(net, num_envs + eval_envs, bf16)
    upd_t = time_update_step(net, num_envs * num_steps // minibatches, bf16, ours)
    update = epochs * minibatches * upd_t
    return {"env_ms": env_t * 1e3, "forward_ms": fwd_t * 1e3, "update_step_ms": upd_t * 1e3,
            "bound_sps": num_envs * num_steps / (num_steps * (env_t + fwd_t) + update)}


def marginal_sps(times_steps):
    """SPS between the end of the first iteration and the last one (warm-up excluded)."""
    (t0, s0), (t1, s1) = times_steps[0], times_steps[-1]
    return (s1 - s0) / (t1 - t0)


def run_ours(extra, iterations, batch=1024):
    with tempfile.TemporaryDirectory() as runs:
        cmd = [sys.executable, SCRIPT, "--runs-dir", runs, "--progress", "none",
               "--total-timesteps", str(iterations * batch)] + extra
        out = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        peak_mb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr).group(1)) / 1024
        run_dir = os.path.join(runs, os.listdir(runs)[0])
        rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
        points = [(r["wall_time"], r["global_step"]) for r in rows if "charts/SPS" in r]
        return marginal_sps(points), peak_mb


def patched_cleanrl(checkout, directory):
    """CleanRL's script with only envpool 1.x's reset/step signatures adapted (nothing else changes)."""
    source = open(os.path.join(checkout, "cleanrl", "pqn_atari_envpool.py")).read()
    for old, new in [("observations = super().reset(**kwargs)", "observations, _ = super().reset(**kwargs)"),
                     ("observations, rewards, dones, infos = super().step(action)",
                      "observations, rewards, term, trunc, infos = super().step(action)\n"
                      "        dones = np.logical_or(term, trunc)")]:
        if old not in source:
            raise RuntimeError(f"CleanRL's pqn_atari_envpool.py changed: {old!r} not found; update the patch")
        source = source.replace(old, new)
    path = os.path.join(directory, "cleanrl_pqn_atari_envpool.py")
    open(path, "w").write(source)
    return path


def run_cleanrl(checkout, iterations):
    """CleanRL prints cumulative SPS = step / (t - start) every iteration; recover each iteration's time."""
    with tempfile.TemporaryDirectory() as tmp:
        path = patched_cleanrl(checkout, tmp)
        out = subprocess.run(["/usr/bin/time", "-v", sys.executable, path, "--total-timesteps", str(iterations * 1024)],
                             cwd=tmp, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        peak_mb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr).group(1)) / 1024
        sps = [int(v) for v in re.findall(r"^SPS: (\d+)", out.stdout, re.M)]
        points = [((i + 1) * 1024 / s, (i + 1) * 1024) for i, s in enumerate(sps)]
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
        programs.append(("CleanRL (defaults)", lambda: run_cleanrl(opts.cleanrl, opts.iterations), dict(ours=False)))
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
