"""What the benchmark/ Python scripts share. They are maintainer tools run from the repository, not training scripts a
user copies out, so they import this module rather than keep copies of it:
  * refusing a bad option in one line with exit code 2, before the minutes of measuring, as the training scripts do;
  * running a program and reading its throughput: marginal SPS (first iteration excluded) from our metrics.jsonl or
    from the cumulative "SPS:" lines CleanRL prints, and peak RSS from /usr/bin/time -v;
  * CleanRL's Atari scripts adapted to envpool 1.x, and the Atari component timings (envpool steps, inference, one
    optimiser step) of the PPO and PQN benchmarks.
torch is imported only inside the Atari timings: the JAX benchmarks import this module too and report their own RSS.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

TIME_V = ["/usr/bin/time", "-v"]  # GNU time: the child's peak RSS as "Maximum resident set size (kbytes)" on stderr


# ---------------------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------------------
def refuse(message):
    """Bad options: one line and exit 2 before the minutes of measuring, as the training scripts do."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def check_repeats(repeats: int):
    if repeats < 1:  # medians of no run: an empty list after the first row
        refuse(f"--repeats must be >= 1 (got {repeats})")


def check_out_folder(out: str):
    """--out FILE: its folder must exist and be writable, checked before the minutes of measuring."""
    if out and not os.access(os.path.dirname(os.path.abspath(out)), os.W_OK):
        refuse(f"--out {out}: its folder does not exist or is not writable")


def int_list(flag: str, text: str, example: str) -> list:
    """A comma-separated list of integers (empty entries skipped), or a refusal naming the flag."""
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        refuse(f"{flag} {text!r}: pass comma-separated integers, e.g. {example}")


def judged(opts, print_rule, draw, out_example: str) -> bool:
    """--rule JSON [--png PNG]: a figure script's pre-set rule (and its figure) applied to a measurement already
    made, and True; otherwise False, and --out must be given (a refusal names OUT_EXAMPLE)."""
    if opts.rule:
        if not os.path.isfile(opts.rule):
            refuse(f"--rule {opts.rule}: no such file; pass a JSON this script wrote")
        print_rule(opts.rule)
        if opts.png:
            draw(opts.rule, opts.png)
        return True
    if not opts.out:
        refuse(f"pass --out {out_example} (or --rule with the JSON it writes, to judge a measurement)")
    return False


def jax_on_cpu_at_o0():
    """A GPU script's CPU dry run: JAX on the CPU at XLA's -O0, the level the JAX tests compile at (a third of the
    default level's compile time); set before JAX is imported."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()


def check_cleanrl_checkout(checkout, script: str):
    """--cleanrl, when given, must be a CleanRL checkout holding cleanrl/SCRIPT."""
    if checkout and not os.path.isfile(os.path.join(checkout, "cleanrl", script)):
        refuse(f"--cleanrl {checkout}: no cleanrl/{script} there; pass the root of a CleanRL checkout")


def check_configuration(what: str, script: str, usage_error, configure, *args):
    """configure(*args) through the training script's own validation; its UsageError becomes a refusal naming `what`."""
    try:
        return configure(*args)
    except usage_error as err:
        refuse(f"{what} is not a valid {script} configuration ({err})")


# ---------------------------------------------------------------------------------------------------------
# Running a program and reading its throughput
# ---------------------------------------------------------------------------------------------------------
def run_checked(cmd: list, log: str = None, **kwargs) -> subprocess.CompletedProcess:
    """cmd to completion, output captured; a failure raises with the end of its stderr. With `log` (a file), stdout and
    stderr go there together as they come, after a line naming cmd, and come back as both: a run stopped from outside
    (a time limit) leaves its progress behind."""
    if log is None:
        out = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    else:
        with open(log, "a") as f:
            f.write(f"== {time.strftime('%H:%M:%S')} {' '.join(cmd)}\n")
            f.flush()
            start = f.tell()
            code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, **kwargs).returncode
        with open(log) as f:
            f.seek(start)
            text = f.read()
        out = subprocess.CompletedProcess(cmd, code, text, text)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return out


def peak_rss_kib(stderr: str):
    """The peak RSS /usr/bin/time -v printed, in KiB (None without its line)."""
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    return int(found.group(1)) if found else None


def peak_rss_mib(stderr: str) -> float:
    return peak_rss_kib(stderr) / 1024


def marginal_sps(points):
    """SPS between the end of the first iteration and the last one (warm-up excluded); points: (seconds, steps)."""
    (t0, s0), (t1, s1) = points[0], points[-1]
    return (s1 - s0) / (t1 - t0)


def our_run(script: str, flags: list, rss: bool = True, log: str = None, rows: list = None) -> tuple:
    """One of our training scripts with `flags`, into a temporary runs directory, under /usr/bin/time -v unless not
    `rss` (a machine without GNU time): the (wall_time, global_step) of every logged SPS row, and the peak RSS in MiB
    (None without rss). `log`: as run_checked's; `rows`, a list: every row of its metrics.jsonl is appended."""
    with tempfile.TemporaryDirectory() as runs:
        out = run_checked((TIME_V if rss else []) + [sys.executable, script, "--runs-dir", runs, "--progress", "none"]
                          + flags, log=log)
        run_dir = os.path.join(runs, os.listdir(runs)[0])
        logged = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
        if rows is not None:
            rows.extend(logged)
        points = [(r["wall_time"], r["global_step"]) for r in logged if "charts/SPS" in r]
        return points, peak_rss_mib(out.stderr) if rss else None


def loop_time_medians(rows: list) -> dict:
    """Medians of a torch script's time/* tags over the iterations after the first (which compiles), in seconds per
    iteration: its rollout, the part of it spent waiting on the envs, its update (docs/metrics.md#timing); {} when the
    run logged none."""
    later = [r for r in rows if "time/rollout_seconds" in r and r["iteration"] > 1]
    return {name: statistics.median(r[f"time/{name}_seconds"] for r in later)
            for name in ("rollout", "env_wait", "update")} if later else {}


def cleanrl_points(stdout: str, batch: int) -> list:
    """CleanRL prints cumulative SPS = step / (t - start) after every iteration of `batch` steps: each iteration's
    (t - start, step) back."""
    sps = [int(v) for v in re.findall(r"^SPS: (\d+)", stdout, re.M)]
    return [((i + 1) * batch / s, (i + 1) * batch) for i, s in enumerate(sps)]


# ---------------------------------------------------------------------------------------------------------
# CleanRL's Atari scripts (ppo_atari_envpool.py, pqn_atari_envpool.py) on envpool 1.x
# ---------------------------------------------------------------------------------------------------------
ENVPOOL_1X = [  # envpool 1.x's gymnasium API: reset returns (obs, info), step returns terminated and truncated apart
    ("observations = super().reset(**kwargs)", "observations, _ = super().reset(**kwargs)"),
    ("observations, rewards, dones, infos = super().step(action)",
     "observations, rewards, term, trunc, infos = super().step(action)\n        dones = np.logical_or(term, trunc)"),
]


def patched_cleanrl(checkout: str, script: str, directory: str) -> str:
    """CleanRL's cleanrl/SCRIPT with only envpool 1.x's reset/step signatures adapted (nothing else changes; its own
    copy crashes at the first reset), written into `directory` (never committed); its path."""
    source = open(os.path.join(checkout, "cleanrl", script)).read()
    for old, new in ENVPOOL_1X:
        if old not in source:
            raise RuntimeError(f"CleanRL's {script} changed: {old!r} not found; update the patch")
        source = source.replace(old, new)
    path = os.path.join(directory, f"cleanrl_{script}")
    open(path, "w").write(source)
    return path


def run_cleanrl_atari(checkout: str, script: str, iterations: int, batch: int = 8 * 128, flags: tuple = (),
                      rss: bool = True, log: str = None) -> tuple:
    """CleanRL's patched Atari script with `flags` (its defaults: 8 envs x 128 steps; `batch` = envs x steps) for
    `iterations`: marginal SPS and peak RSS in MiB (None without rss, as in our_run). `log`: as run_checked's."""
    with tempfile.TemporaryDirectory() as tmp:
        path = patched_cleanrl(checkout, script, tmp)
        out = run_checked((TIME_V if rss else []) + [sys.executable, path, "--total-timesteps", str(iterations * batch)]
                          + list(flags), log=log, cwd=tmp)
        return marginal_sps(cleanrl_points(out.stdout, batch)), peak_rss_mib(out.stderr) if rss else None


# ---------------------------------------------------------------------------------------------------------
# Atari component timings (the component bound of ppo_atari_throughput.py and pqn_atari_throughput.py)
# ---------------------------------------------------------------------------------------------------------
def failure_row(e: Exception) -> str:
    """A row that raised, in one line: one GPU call measures every row, so a failure is recorded and the next runs."""
    lines = str(e).strip().splitlines()
    return f"failed: {type(e).__name__}: {lines[0][:300] if lines else ''}"


def torch_machine(device) -> dict:
    """Where a torch benchmark ran: date, Python, torch, cores, the device and its GPU's name."""
    import platform
    import torch
    return {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "python": platform.python_version(),
            "torch": torch.__version__, "cpu_cores": os.cpu_count(), "device": str(device),
            "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None}


def cpu_autocast(bf16: bool):
    import torch
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)


def time_env(make_envs, num_envs: int, steps: int, warmup: int = 20) -> float:
    """Seconds per vector step of Breakout under uniformly random actions, after `warmup` untimed steps."""
    envs = make_envs("Breakout-v5", num_envs, seed=0)
    envs.reset()
    rng = np.random.default_rng(0)
    actions = rng.integers(0, envs.action_space.n, size=(warmup + steps, num_envs)).astype(np.int32)
    for a in actions[:warmup]:
        envs.step(a)
    start = time.perf_counter()
    for a in actions[warmup:]:
        envs.step(a)
    return (time.perf_counter() - start) / steps


def time_forward(net, num_envs: int, bf16: bool, reps: int) -> float:
    """Seconds per batch-N inference on random frames, after 10 untimed calls."""
    import torch
    obs = torch.randint(0, 255, (num_envs, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad(), cpu_autocast(bf16):
        for _ in range(10):
            net(obs)
        start = time.perf_counter()
        for _ in range(reps):
            net(obs)
    return (time.perf_counter() - start) / reps


def time_update_step(net, optimizer, minibatch_gradient, loss_fn, args, batch, ranks, bf16: bool, reps: int) -> float:
    """Seconds per optimiser step on one minibatch through the script's own minibatch_gradient (its chunks included)
    and its gradient clipping (args.max_grad_norm), after 3 untimed steps (the first compiles); `batch` is the
    script's named Batch and `ranks` its one-process Ranks()."""
    import torch
    idx = torch.arange(len(batch[0]))

    def autocast():
        return cpu_autocast(bf16)

    def step():
        optimizer.zero_grad(set_to_none=True)
        minibatch_gradient(net, batch, idx, args, autocast, loss_fn, ranks)
        torch.nn.utils.clip_grad_norm_(net.parameters(), args.max_grad_norm)
        optimizer.step()
    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(reps):
        step()
    return (time.perf_counter() - start) / reps
