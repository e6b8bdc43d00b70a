"""envpool's own limit on this machine, beside ppo_atari_envpool.py's SPS (synchronous, --async-envs and
--envpool-async) and CleanRL's, in one run: how close the training loop comes to the envs it waits for
(docs/gpu.md#atari-at-envpools-limit).

    python benchmark/ppo_atari_env_limit.py [--num-envs 8,256] [--seconds 8] [--iterations 8] [--repeats 1]
                                            [--cleanrl PATH] [--ours-flags="--no-compile"] [--out FILE] [--cpu-dry-run]
                                            [--rates sync,async,halves,layouts]
                                            [--programs sync,async-envs,async-envs-half-threads,envpool-async]

For each N of --num-envs, with nothing else running:
  * envpool alone, Breakout-v5 with the script's wrappers (episodic life, clipped rewards), uniformly random actions,
    each for --seconds after a warm-up:
      sync    one instance stepping all N at once (step = send + recv): what a synchronous rollout waits for;
      async   one instance of N envs with batch_size N/2: recv returns the first N/2 envs to finish, which are sent
              their actions at once (envpool's asynchronous mode);
      halves  two instances of N/2 envs stepping in turn through send/recv: --async-envs' pattern, without the network;
              then where its rate goes: halves of half the cores' threads each, those pinned apart (half 1 on the
              first half of the cores, half 2 on the rest), and one instance of all N pinned (pinned rows only where
              this process may use every core of the machine);
  * ppo_atari_envpool.py at N envs x T steps (T = 128 at N <= 16, CleanRL's default, else 64), synchronous,
    --async-envs, --async-envs with --env-threads of half the cores (each half on its share, as the
    halves_half_threads row), and --envpool-async (envpool's own asynchronous mode, as the async row), then CleanRL's ppo_atari_envpool.py (given --cleanrl; patched for envpool 1.x only) at the same
    N x T: each program first runs 2 iterations untimed (compile and disk caches warm), then --repeats timed runs of
    --iterations iterations, the programs alternated; marginal SPS (the first iteration left out), medians.
Printed and written to --out (JSON): every rate, each program's SPS over the synchronous limit at its N, ours over
CleanRL's, and ours' loop per iteration (medians of its time/* tags after the first iteration: the rollout, the part of
it spent waiting on the envs, the update; what keeps ours below the limit), the JSON rewritten after each N; every
run's output (its phases, timed) goes to the --out file's name plus .runs.log, and each run's wall time is printed as it
ends, so a run stopped by a time limit shows what took its time.
On one H200 with 16 cores (2026-11-29) envpool's rates at one N took under a minute, and the first warm-up run of ours
(a cold torch.compile on CUDA) did not end within 150 s at 256 envs nor 90 s at 8: give the default sizes a whole
10-minute GPU call, or pass --ours-flags=--no-compile (ours eager: no compile to wait for; the loop's pace is the
envs', not the kernels'). --ours-flags are added to all of ours' runs and recorded in the JSON. --cpu-dry-run runs
every step at tiny sizes (it catches mistakes; its numbers mean nothing). --rates and --programs keep only the
envpool rates and ours' runs named (the sync rate, every fraction's denominator, always runs), so that a GPU call
lent for minutes spends them on the rows still open (on one H200, 2026-11-30, each of ours' runs at 256 envs, eager,
took 40-45 s: a warm-up of 2 iterations and 4 timed).
"""
import argparse
import contextlib
import io
import json
import os
import platform
import re
import shlex
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
from _throughput_common import (check_cleanrl_checkout, check_out_folder, check_repeats, int_list,  # noqa: E402
                                loop_time_medians, marginal_sps, our_run, refuse, run_cleanrl_atari)

SCRIPT = os.path.join(HERE, "..", "cleanrl_scaling", "ppo_atari_envpool.py")
CLEANRL_SCRIPT = "ppo_atari_envpool.py"  # CleanRL's, in cleanrl/ of its checkout
ENV_ID = "Breakout-v5"


# ---------------------------------------------------------------------------------------------------------
# envpool alone
# ---------------------------------------------------------------------------------------------------------
def make_pool(num_envs: int, seed: int, batch_size: int = 0, threads: int = 0, first_core: int = -1):
    """envpool with the training script's wrappers; batch_size < num_envs makes it asynchronous; threads, at most
    batch_size, 0 for the script's choice, min(batch_size, the cores this process may use) (envpool's default where
    that is every core); first_core >= 0 pins its threads to the cores from there on (-1: not pinned)."""
    from cleanrl_scaling.ppo_atari_envpool import env_threads, import_envpool
    batch_size = batch_size or num_envs
    return import_envpool().make(ENV_ID, env_type="gymnasium", num_envs=num_envs, batch_size=batch_size, seed=seed,
                                 episodic_life=True, reward_clip=True, num_threads=env_threads(batch_size, threads),
                                 thread_affinity_offset=first_core)


def pinnable_cores() -> int:
    """The cores envpool may pin threads to (it numbers them from 0): all of the machine's, or 0 where this process
    may use only some of them (a cgroup or taskset), so that pinning would name cores it cannot run on."""
    allowed = os.sched_getaffinity(0)
    return len(allowed) if allowed == set(range(os.cpu_count())) else 0


def timed(step, seconds: float, warmup: int = 20) -> float:
    """Env steps per second of step() (which returns the steps it took) over `seconds`, after `warmup` calls."""
    for _ in range(warmup):
        step()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += step()
    return steps / (time.perf_counter() - start)


def sync_rate(num_envs: int, seconds: float, first_core: int = -1) -> float:
    envs, rng = make_pool(num_envs, 1, first_core=first_core), np.random.default_rng(0)
    envs.reset()
    n = envs.action_space.n

    def step():
        envs.step(rng.integers(0, n, num_envs))
        return num_envs
    try:
        return timed(step, seconds)
    finally:
        envs.close()


def async_rate(num_envs: int, seconds: float) -> float:
    batch = num_envs // 2
    envs, rng = make_pool(num_envs, 1, batch), np.random.default_rng(0)
    envs.async_reset()
    n = envs.action_space.n

    def step():
        *_, info = envs.recv()
        envs.send(rng.integers(0, n, batch), info["env_id"])
        return batch
    try:
        return timed(step, seconds)
    finally:
        envs.close()


def halves_rate(num_envs: int, seconds: float, threads: int = 0, pinned: bool = False) -> float:
    """threads per half (0: the script's, each half as many as the cores); pinned: half 1 on the first `threads`
    cores, half 2 on the next ones."""
    half = num_envs // 2
    pools = [make_pool(half, 1, threads=threads, first_core=0 if pinned else -1),
             make_pool(half, 1 + half, threads=threads, first_core=threads if pinned else -1)]
    rng = np.random.default_rng(0)
    n = pools[0].action_space.n
    for envs in pools:
        envs.reset()
        envs.send(rng.integers(0, n, half))

    def step():
        for envs in pools:  # receive one half while the other steps, then send it its actions
            envs.recv()
            envs.send(rng.integers(0, n, half))
        return num_envs
    try:
        return timed(step, seconds)
    finally:
        for envs in pools:
            envs.recv()
            envs.close()


def half_the_cores() -> int:
    """Half the cores this process may use (under a cpuset, not the machine's), at least 1: each half's share."""
    return max(1, len(os.sched_getaffinity(0)) // 2)


def thread_layouts(num_envs: int, seconds: float) -> dict:
    """Where the halves' rate goes (on one H200's 16 cores: 1.04 of sync, envpool's async mode 1.34). The halves row
    runs two instances of as many threads as the cores each, twice the cores in all; these rows: halves of half the
    cores' threads each; the same pinned apart, each half on its own cores; and, to tell pinning from the layout, one
    instance pinned. Pinned rows need the whole machine."""
    cores = pinnable_cores()
    half_threads = half_the_cores()
    rates = {"halves_half_threads": halves_rate(num_envs, seconds, threads=half_threads)}
    if cores >= 2:
        rates["halves_pinned_apart"] = halves_rate(num_envs, seconds, threads=half_threads, pinned=True)
        rates["sync_pinned"] = sync_rate(num_envs, seconds, first_core=0)
    return rates


# ---------------------------------------------------------------------------------------------------------
# The training programs
# ---------------------------------------------------------------------------------------------------------
def ours(flags: list, iterations: int, batch: int, log: str = None, times: list = None) -> float:
    """Marginal SPS of ppo_atari_envpool.py with `flags` over `iterations` iterations of `batch` steps (no GNU time:
    a GPU image may lack it); its output appended to `log`, its loop's times appended to `times`."""
    rows = []
    points, _ = our_run(SCRIPT, ["--diagnostics-every", "0", "--total-timesteps", str(iterations * batch)] + flags,
                        rss=False, log=log, rows=rows)
    if times is not None:
        times.append(loop_time_medians(rows))
    return marginal_sps(points)


RATES = ("sync", "async", "halves", "layouts")  # --rates: envpool alone; layouts = thread_layouts' rows
PROGRAMS = {"sync": [], "async-envs": ["--async-envs"], "async-envs-half-threads": None,  # None: set by the cores
            "envpool-async": ["--envpool-async"]}  # --programs: ours' runs, by their flags


def envpool_rates(num_envs: int, opts) -> dict:
    """The envpool-alone rates that --rates names, the sync rate always."""
    rates = {"sync": sync_rate(num_envs, opts.seconds)}
    if "async" in opts.rates:
        rates["async"] = async_rate(num_envs, opts.seconds)
    if "halves" in opts.rates:
        rates["halves"] = halves_rate(num_envs, opts.seconds)
    if "layouts" in opts.rates:
        rates.update(thread_layouts(num_envs, opts.seconds))
    return rates


def programs(num_envs: int, num_steps: int, opts) -> dict:
    """name -> f(iterations) giving its marginal SPS at num_envs x num_steps, for ours' runs that --programs names
    and CleanRL's (given --cleanrl)."""
    batch, size = num_envs * num_steps, ["--num-envs", str(num_envs), "--num-steps", str(num_steps)]
    dry = (["--no-cuda", "--no-compile"] if opts.cpu_dry_run else []) + shlex.split(opts.ours_flags)
    log = opts.out and opts.out + ".runs.log"  # every run's output, with its phases' times
    halves = ["--async-envs", "--env-threads", str(half_the_cores())]  # each half on its share of the cores
    def run_ours(flags):
        return lambda k, times=None: ours(size + dry + flags, k, batch, log, times)
    chosen = [halves if PROGRAMS[key] is None else PROGRAMS[key] for key in PROGRAMS if key in opts.programs]
    found = {" ".join(["ours"] + flags): run_ours(flags) for flags in chosen}
    if opts.cleanrl:  # CUDA where torch sees it
        found["CleanRL"] = lambda k, times=None: run_cleanrl_atari(opts.cleanrl, CLEANRL_SCRIPT, k, batch, size,
                                                                   rss=False, log=log)[0]
    return found


# ---------------------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------------------
def timed_call(what: str, run, iterations: int, times: list = None) -> float:
    """run(iterations), its wall time printed as it ends: a run cut short by a time limit still shows what took it."""
    start = time.time()
    sps = run(iterations, times)
    print(f"   ({what}: {time.time() - start:.0f} s, {sps:,.0f} SPS)", flush=True)
    return sps


def measure(num_envs: int, opts, save=lambda row: None) -> dict:
    """Every number at num_envs; save(row) gets what is measured so far after the envpool rows and after each run
    (a call cut short by its time limit keeps them, marked "partial")."""
    num_steps = (16 if opts.cpu_dry_run else 128) if num_envs <= 16 else (16 if opts.cpu_dry_run else 64)
    print(f"== {num_envs} envs ({ENV_ID}, random actions, {opts.seconds:g} s each)", flush=True)
    limits = envpool_rates(num_envs, opts)
    for name, rate in limits.items():
        print(f"   envpool {name:<19} {rate:>10,.0f} steps/s  ({rate / limits['sync']:.2f} of sync)", flush=True)
    row = {"num_envs": num_envs, "num_steps": num_steps, "envpool_steps_per_s": limits, "partial": True}
    save(row)
    runs = programs(num_envs, num_steps, opts)
    for name, run in runs.items():  # warm-up: torch.compile's and the kernels' caches, CleanRL's imports
        timed_call(f"warm-up, {name}, 2 iterations", run, 2)
    sps, times = {name: [] for name in runs}, {name: [] for name in runs if name != "CleanRL"}
    row.update(sps_runs=sps, loop_seconds_runs=times)
    for _ in range(opts.repeats):
        for name, run in runs.items():
            sps[name].append(timed_call(f"{name}, {opts.iterations} iterations", run, opts.iterations,
                                        times.get(name)))
            save(row)
    medians = {name: statistics.median(values) for name, values in sps.items()}
    print(f"   {num_envs} x {num_steps}, {opts.iterations} iterations, median of {opts.repeats}:")
    width = max(map(len, medians))
    for name, value in medians.items():
        vs = f", {value / medians['CleanRL']:.2f}x CleanRL" if "CleanRL" in medians and name != "CleanRL" else ""
        print(f"   {name:<{width}} {value:>10,.0f} SPS  ({value / limits['sync']:.2f} of envpool's sync limit{vs})",
              flush=True)
    for name, per_run in times.items():  # what bounds ours: the envs (their waits) or the rest of the loop
        for t in (x for x in per_run if x):
            print(f"   {name:<{width}} per iteration: rollout {t['rollout']:.3f} s (waiting on the envs "
                  f"{t['env_wait']:.3f} s), update {t['update']:.3f} s")
    return {"num_envs": num_envs, "num_steps": num_steps, "envpool_steps_per_s": limits, "sps_runs": sps,
            "loop_seconds_runs": times,
            "sps_median": medians, "of_sync_limit": {k: v / limits["sync"] for k, v in medians.items()},
            "x_cleanrl": {k: v / medians["CleanRL"] for k, v in medians.items()} if "CleanRL" in medians else None}


def machine() -> dict:
    out = {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "python": platform.python_version(),
           "cpu_cores": os.cpu_count(), "pinnable_cores": pinnable_cores(),
           "kernel": platform.release()}  # a sandbox's kernel (gVisor says 4.4.0) may not enforce thread affinity
    try:
        import torch
        out.update(torch=torch.__version__, gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    except ImportError:
        out["torch"] = None
    return out


def check_our_flags(flags: list) -> None:
    """--ours-flags through the script's own flag checks before anything runs: a typo is one line and exit 2 here,
    not a failed run minutes into a GPU call. The sizes the benchmark sets itself are refused."""
    taken = {"--num-envs", "--num-steps", "--total-timesteps", "--diagnostics-every", "--async-envs", "--env-threads",
             "--envpool-async", "--runs-dir"}
    clash = [f for f in flags if f.split("=")[0] in taken]
    if clash:
        refuse(f"--ours-flags {' '.join(clash)}: the benchmark sets these itself")
    if not flags:
        return
    from cleanrl_scaling import ppo_atari_envpool as script
    saved, said = sys.argv, io.StringIO()
    sys.argv = [SCRIPT, *flags, "--runs-dir", tempfile.gettempdir()]
    try:
        with contextlib.redirect_stderr(said):
            script.read_args()
    except SystemExit as e:
        if e.code:  # the script's one line, or the line of tyro's box that names an unknown or malformed flag
            lines = [re.sub("[\u2500-\u257f]", "", line).strip() for line in said.getvalue().splitlines()]
            reason = next((line for line in lines if ": " in line), "rejected by the script")
            refuse(f"--ours-flags {' '.join(flags)}: {reason.removeprefix('error: ')}")
    finally:
        sys.argv = saved


def names_in(flag: str, value: str, known) -> list:
    """A comma-separated selection of known names, or one line and exit 2."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        refuse(f"{flag} {value}: pass comma-separated names of {','.join(known)}")
    return names


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", default="8,256", help="comma-separated env counts (each even)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of each envpool-alone rate")
    parser.add_argument("--iterations", type=int, default=8, help="iterations of each timed training run")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs of each program, alternated; medians")
    parser.add_argument("--cleanrl", help="path of a CleanRL checkout (never committed) to time its script too")
    parser.add_argument("--ours-flags", default="",
                        help="more flags for all of ours' runs, e.g. --ours-flags=--no-compile")
    parser.add_argument("--out", help="write the numbers to this JSON file")
    parser.add_argument("--cpu-dry-run", action="store_true", help="tiny sizes on CPU: every step runs, numbers mean nothing")
    parser.add_argument("--rates", default=",".join(RATES),
                        help=f"envpool-alone rates to measure, of {','.join(RATES)} (sync always runs)")
    parser.add_argument("--programs", default=",".join(PROGRAMS),
                        help=f"ours' runs to time, of {','.join(PROGRAMS)} (CleanRL's runs given --cleanrl)")
    opts = parser.parse_args()
    opts.rates, opts.programs = names_in("--rates", opts.rates, RATES), names_in("--programs", opts.programs, PROGRAMS)
    if opts.cpu_dry_run:
        opts.seconds, opts.iterations = min(opts.seconds, 0.5), min(opts.iterations, 3)
    counts = int_list("--num-envs", opts.num_envs, "8,256")
    if not counts or any(n < 2 or n % 2 for n in counts):
        refuse(f"--num-envs {opts.num_envs}: pass even env counts >= 2 (the async modes use halves), e.g. 8,256")
    if opts.seconds <= 0 or opts.iterations < 3:
        refuse("--seconds must be > 0 and --iterations >= 3 (marginal SPS leaves the first iteration out)")
    check_repeats(opts.repeats)
    check_cleanrl_checkout(opts.cleanrl, CLEANRL_SCRIPT)
    check_out_folder(opts.out)
    check_our_flags(shlex.split(opts.ours_flags))
    result = {"machine": machine(), "env_id": ENV_ID, "ours_flags": opts.ours_flags, "results": [],
              "dry_run": opts.cpu_dry_run}
    def save(row=None):  # the Ns finished, and what the current one has measured so far
        if opts.out:
            with open(opts.out, "w") as f:
                json.dump({**result, "results": result["results"] + ([row] if row else [])}, f, indent=1)
    for n in counts:
        result["results"].append(measure(n, opts, save))
        save()


if __name__ == "__main__":
    main()
