"""Throughput of ppo_continuous_mujoco.py next to CleanRL's ppo_continuous_action.py and the component bound.

    bash benchmark/ppo_continuous_mujoco_throughput.sh [--cleanrl PATH_TO_CLEANRL_CHECKOUT] [--quick]

Rows: CleanRL's defaults (1 env x 2048 steps, 32 minibatches of 64, gymnasium backend) and H25's 500 envs x 100
steps with 1000-sample minibatches (envpool backend), then SPS against --num-envs up to 1000.
- ours: the script run as a user runs it (diagnostics off); SPS is the marginal one it prints (after iteration 1).
- CleanRL: given --cleanrl, its ppo_continuous_action.py under --cleanrl-python (it needs gymnasium 0.29; see
  docs/ppo_continuous_mujoco.md for the venv), marginal SPS from the cumulative SPS lines it prints.
- bound: the same batch's three components timed alone in this process and added: env steps with fixed actions,
  the rollout's forward passes, and the update's minibatch steps (compiled loss, backward, clipping, fused Adam).
Numbers mean something only on a quiet machine: the .sh wrapper holds /tmp/cleanrl_quiet while this runs.
"""
import argparse
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(ROOT, "cleanrl_scaling", "ppo_continuous_mujoco.py")
sys.path[:0] = [HERE, ROOT]
from _throughput_common import (check_cleanrl_checkout, check_configuration, cleanrl_points, int_list,  # noqa: E402
                                marginal_sps, refuse)
from cleanrl_scaling import ppo_continuous_mujoco as ppo  # noqa: E402

CONFIGS = {
    "CleanRL defaults 1x2048 : 32x64": dict(num_envs=1, num_steps=2048, minibatch_size=64, backend="gymnasium"),
    "H25 500x100 : 50x1000": dict(num_envs=500, num_steps=100, minibatch_size=1000, backend="envpool"),
}


def run_ours(env_id, cfg, iterations, timeout, extra=()) -> float:
    batch = cfg["num_envs"] * cfg["num_steps"]
    with tempfile.TemporaryDirectory() as runs:
        cmd = [sys.executable, SCRIPT, "--env-id", env_id, "--num-envs", str(cfg["num_envs"]),
               "--num-steps", str(cfg["num_steps"]), "--minibatch-size", str(cfg["minibatch_size"]),
               "--env-backend", cfg["backend"], "--total-timesteps", str(iterations * batch),
               "--diagnostics-every", "0", "--progress", "none", "--runs-dir", runs, *extra]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return float("nan")
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
        (summary,) = [os.path.join(d, "summary.json") for d, _, files in os.walk(runs) if "summary.json" in files]
        return json.load(open(summary))["SPS"]


def run_cleanrl(path, python, env_id, cfg, iterations, timeout, threads=None) -> float:
    """CleanRL's script at this configuration: marginal SPS from the cumulative SPS it prints, nan past `timeout`."""
    batch = cfg["num_envs"] * cfg["num_steps"]
    script = os.path.join(path, "cleanrl", "ppo_continuous_action.py")
    with tempfile.TemporaryDirectory() as cwd:  # CleanRL writes runs/ into its working directory
        cmd = [python, script, "--env-id", env_id, "--num-envs", str(cfg["num_envs"]), "--num-steps",
               str(cfg["num_steps"]), "--num-minibatches", str(batch // cfg["minibatch_size"]),
               "--total-timesteps", str(iterations * batch)]
        env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:  # no number rather than a wrong one
            return float("nan")
    points = cleanrl_points(out.stdout, batch)
    if out.returncode != 0 or len(points) < 2:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return marginal_sps(points)


def component_bound(env_id, cfg, update_epochs=10, max_update_steps=200) -> dict:
    """Seconds per iteration of each component alone, and the SPS their sum allows."""
    torch.set_num_threads(1)  # the script's default --torch-threads
    n, t, mb = cfg["num_envs"], cfg["num_steps"], cfg["minibatch_size"]
    envs = ppo.make_envs(env_id, n, 1, cfg["backend"])
    obs_space, act_space = ppo.spaces(envs)
    envs.reset()
    action = np.zeros((n,) + act_space.shape, dtype=np.float32)
    envs.step(action)
    start = time.perf_counter()
    for _ in range(t):
        envs.step(action)
    env_time = time.perf_counter() - start
    envs.close()

    agent = ppo.Agent(obs_space.shape[0], act_space.shape[0])
    obs = torch.randn(n, obs_space.shape[0])
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(t):
            mean, logstd, _ = agent(obs)
            ppo.sample_actions(mean, logstd)
    forward_time = time.perf_counter() - start

    args = ppo.Args()
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-4, eps=1e-5, fused=True)
    loss_fn = ppo.maybe_compile(ppo.ppo_loss, True)  # as the script runs it (--compile, the default)
    batch = ppo.Batch(torch.randn(mb, obs_space.shape[0]), torch.randn(mb, act_space.shape[0]),
                      *(torch.randn(mb) for _ in range(4)), torch.ones(mb))
    idx = torch.arange(mb)
    no_autocast = functools.partial(torch.autocast, "cpu", enabled=False)
    steps = n * t // mb * update_epochs
    timed = min(steps, max_update_steps)
    for i in range(timed + 5):  # 5 warm-up steps (the first compiles)
        if i == 5:
            start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        ppo.minibatch_gradient(agent, batch, idx, args, no_autocast, loss_fn, ppo.Ranks())
        torch.nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
        optimizer.step()
    update_time = (time.perf_counter() - start) * steps / timed
    total = env_time + forward_time + update_time
    return {"env": env_time, "forward": forward_time, "update": update_time, "sps": n * t / total,
            "env_sps": n * t / env_time}


def sweep_config(n):
    return dict(num_envs=n, num_steps=100, minibatch_size=1000, backend="envpool")


def check_options(opts) -> list:
    """Every configuration is validated by the script's own validation before anything is timed; returns the
    --num-envs sweep."""
    if not (math.isfinite(opts.timeout) and opts.timeout > 0):
        refuse(f"--timeout must be a number of seconds > 0 (got {opts.timeout})")
    check_cleanrl_checkout(opts.cleanrl, "ppo_continuous_action.py")
    if opts.cleanrl and not os.access(opts.cleanrl_python, os.X_OK):
        refuse(f"--cleanrl-python {opts.cleanrl_python} is not an executable; see docs/ppo_continuous_mujoco.md for the venv")
    missing = [b for b in ("gymnasium", "envpool") if opts.env_id not in ppo.env_ids(b)]
    if missing:  # the rows use both backends
        backends = " and ".join(missing) + " backend" + "s" * (len(missing) > 1)
        refuse(f"--env-id {opts.env_id!r} is not a MuJoCo id of the {backends} (e.g. HalfCheetah-v4)")
    sweep = int_list("--num-envs", opts.num_envs, "10,100,1000")
    configs = [(name, cfg) for name, cfg in CONFIGS.items()] + [(f"--num-envs {n}", sweep_config(n)) for n in sweep]
    for name, cfg in configs:
        args = ppo.Args(env_id=opts.env_id, num_envs=cfg["num_envs"], num_steps=cfg["num_steps"],
                        minibatch_size=cfg["minibatch_size"], env_backend=cfg["backend"],
                        total_timesteps=max(1, cfg["num_envs"]) * cfg["num_steps"])  # so the message names --num-envs
        check_configuration(name, "ppo_continuous_mujoco.py", ppo.UsageError, ppo.validate, args)
    return sweep


def cell(value, spec=".0f") -> str:
    """A table cell: '-' for a run not asked for (None), 'timeout' for one over --timeout (nan), never 'nan'."""
    if value is None:
        return "-"
    return format(value, spec) if math.isfinite(value) else "timeout"


def ratio(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b is not None and math.isfinite(a) and math.isfinite(b) else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="HalfCheetah-v4")
    parser.add_argument("--cleanrl", default=None, help="path of a CleanRL checkout (times its ppo_continuous_action.py)")
    parser.add_argument("--cleanrl-python", default="/tmp/venv_cleanrl/bin/python",
                        help="an interpreter with CleanRL's requirements (gymnasium 0.29, mujoco<3)")
    parser.add_argument("--num-envs", default="10,50,100,250,500,1000", help="the SPS-vs-num_envs sweep (envpool, 100 steps, "
                        "1000-sample minibatches); empty to skip")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (noisier)")
    parser.add_argument("--timeout", type=float, default=150, help="seconds per timed run (a run over it shows 'timeout')")
    opts = parser.parse_args()
    sweep = check_options(opts)
    iters_small, iters_large = (4, 3) if opts.quick else (8, 4)

    print(f"# {opts.env_id}, marginal SPS (first iteration excluded), torch {torch.__version__}, "
          f"{len(os.sched_getaffinity(0))} cores, load average before: {os.getloadavg()[0]:.2f}")
    rows = []
    for name, cfg in CONFIGS.items():
        iterations = iters_small if cfg["num_envs"] == 1 else iters_large
        bound = component_bound(opts.env_id, cfg)
        ours = run_ours(opts.env_id, cfg, iterations, opts.timeout)
        theirs, theirs_1t = None, None
        if opts.cleanrl:  # as it runs out of the box, and with one OpenMP thread like ours
            theirs = run_cleanrl(opts.cleanrl, opts.cleanrl_python, opts.env_id, cfg, iterations, opts.timeout)
            theirs_1t = run_cleanrl(opts.cleanrl, opts.cleanrl_python, opts.env_id, cfg, iterations, opts.timeout, threads=1)
        rows.append((name, cfg, ours, theirs, theirs_1t, bound))
        print(f"measured {name}: ours {cell(ours)}, CleanRL {cell(theirs)} (1 thread: {cell(theirs_1t)}), "
              f"bound {bound['sps']:.0f}", flush=True)

    print("\n| configuration | backend | ours SPS | CleanRL SPS | ours / CleanRL | CleanRL 1 thread | ours / it |"
          " bound SPS | ours / bound | bound: env / forward / update s per iteration |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, cfg, ours, theirs, theirs_1t, bound in rows:
        print(f"| {name} | {cfg['backend']} | {cell(ours)} | {cell(theirs)} | {ratio(ours, theirs)} | {cell(theirs_1t)} | "
              f"{ratio(ours, theirs_1t)} | {bound['sps']:.0f} | {ratio(ours, bound['sps'])} | "
              f"{bound['env']:.2f} / {bound['forward']:.2f} / {bound['update']:.2f} |")

    if sweep:
        print("\n| num_envs | batch | ours SPS | bound SPS | env alone steps/s |")
        print("|---|---|---|---|---|")
        for n in sweep:
            cfg = sweep_config(n)
            iterations = max(3, (40_000 if opts.quick else 100_000) // (n * 100))
            bound = component_bound(opts.env_id, cfg)
            ours = run_ours(opts.env_id, cfg, iterations, opts.timeout)
            print(f"| {n} | {n * 100} | {cell(ours)} | {bound['sps']:.0f} | {bound['env_sps']:.0f} |", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
