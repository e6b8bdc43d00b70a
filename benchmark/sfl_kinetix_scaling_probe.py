"""Host work of sfl_kinetix_jax.py as N grows: does the host loop's own work per update stay flat
while the devices' work grows with the number of envs?

Part 1, for N = 1,024, 4,096, 16,384 envs (each in its own process under /usr/bin/time -v, 8 forced CPU devices):
the script's own main() runs three updates (MLP, --env-size s, the 2048 preset's PPO, --num-steps 16 so that one
16k-env update takes a minute or two here instead of half an hour at 256 steps; rho = 0.5, so N/2 fresh levels are
generated, no-op filtered and assigned every update, as at scale). The first update compiles and is left out; of
updates 2 and 3 it reports the mean of
  - wall time per update: from the loop's start of the update (next_stop) to its end (the chunk's lockstep): fresh
    levels, the training chunk, reading its statistics, the NaN check, the log rows;
  - device time per update: the time inside the script's compiled programs (level generator, no-op filter, the fresh
    levels' keys and placement, the training chunk), each timed from ready inputs to ready outputs (block_until_ready);
  - host time per update = wall - device: Python, the un-jitted jnp ops, host <-> device copies and logging, split
    into making the fresh levels (fresh_levels' wall minus its programs), writing log rows (RunLogger.log: one row per
    finished episode up to 1,024 an iteration, then one row of aggregates, plus the iteration's scalars) and the rest;
plus the process's peak RSS and how many compiled calls an update made. The rule: host time at 16k
within 1.5x of host time at 1k while device time grows. It is judged on host time without the log rows: those are
bounded by construction (at most 1,024 episode rows an iteration, so they rise from 1k to 4k envs and drop to one
row once more than 1,024 episodes end), and a row costs a hand-off to TensorBoard's writer thread, whose timing the
machine's load decides; the table shows them, and the total's ratio is printed too. The SFL buffer is refreshed once before update 1 with a
small constant N_sfl = 512 (not timed; the buffer refresh's share is part 2).

Part 2, the filtering share of wall time at each preset (2048, 8192, 65536, 1m) scaled down to 64 envs: every env
count of the preset (envs, N_sfl, K, filter batch) divided by the same factor, T, L = 512, 256 steps and rho kept,
the update one minibatch (the presets' minibatches divided by the factor round to one), 8 devices. With T = 1 the
script refreshes the buffer before every update; the second refresh R and the second update U (both compiled by
then) give share = R / (R + T U), the preset's wall-time share of buffer updates if costs scale linearly with the
counts.

  python benchmark/sfl_kinetix_scaling_probe.py [--num-envs 1024 4096 16384] [--skip-share]
      [--skip-scaling] [--presets 2048 8192 65536 1m]
XLA_FLAGS gets --xla_force_host_platform_device_count=8 for the child processes; --level-batch 128 (a compute knob
only: at 1,024 the generator takes over 20 minutes to compile on this CPU). Page: docs/sfl_kinetix_jax.md
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmark"))
from _throughput_common import TIME_V, peak_rss_kib, refuse  # noqa: E402

DEVICES = 8
STEPS = 16
LEVEL_BATCH = 128
SHARE_ENVS = 64
PRESET_COUNTS = {  # B26 Table 3 (the script's PRESETS): envs, N_sfl, K, filter batch per call, T
    "2048": (2048, 12288, 1024, 4096, 128),
    "8192": (8192, 262144, 8192, 32768, 256),
    "65536": (65536, 262144, 8192, 32768, 32),
    "1m": (1048576, 4194304, 8192, 524288, 2),
}


def common_flags(runs_dir):
    return ["--network", "mlp", "--env-size", "s", "--level-batch", str(LEVEL_BATCH), "--updates-per-chunk", "1",
            "--eval-every", "0", "--eval-random-levels", str(DEVICES), "--eval-attempts", "1", "--diagnostics-every", "0",
            "--checkpoint-every", "0", "--progress", "none", "--runs-dir", runs_dir]


def scaling_argv(n, runs_dir):
    return common_flags(runs_dir) + [
        "--num-envs", str(n), "--num-steps", str(STEPS), "--total-timesteps", str(3 * n * STEPS),
        "--sfl-num-levels", "512", "--sfl-filter-batch", "512", "--sfl-buffer-size", "256",
        "--sfl-rollout-length", "16", "--sfl-update-period", "1000"]


def share_argv(preset, runs_dir):
    envs, levels, k, batch, _ = PRESET_COUNTS[preset]
    factor = envs // SHARE_ENVS
    return common_flags(runs_dir) + [
        "--num-envs", str(SHARE_ENVS), "--num-steps", "256", "--num-minibatches", "1",
        "--total-timesteps", str(3 * SHARE_ENVS * 256), "--sfl-num-levels", str(levels // factor),
        "--sfl-filter-batch", str(max(batch // factor, DEVICES)), "--sfl-buffer-size", str(max(k // factor, 1)),
        "--sfl-rollout-length", "512", "--sfl-update-period", "1"]


# ---------------------------------------------------------------------------------------------------------
# Child: the script's main() with its compiled programs timed and the update loop's boundaries recorded
# ---------------------------------------------------------------------------------------------------------
class Done(Exception):
    """Raised after the last measured update: the final evaluation and checkpoint are not part of the probe."""


def child(argv, updates):
    sys.path.insert(0, REPO)
    import jax
    from cleanrl_scaling import sfl_kinetix_jax as m

    ledger = {"device": 0.0, "calls": 0, "by_program": {}, "levels_wall": 0.0, "levels_device": 0.0, "log_wall": 0.0,
              "log_rows": 0}

    def timed(fn, name):
        def call(*args):
            jax.block_until_ready(args)  # the inputs' own work belongs to whoever made them
            t = time.perf_counter()
            out = jax.block_until_ready(fn(*args))
            seconds = time.perf_counter() - t
            ledger["device"] += seconds
            ledger["calls"] += 1
            ledger["by_program"][name] = ledger["by_program"].get(name, 0.0) + seconds
            return out
        return call

    make_train = m.make_train
    timed_programs = {"train_chunk": "chunk", "sample": "sample", "noop_solved": "noop_solved", "score": "score",
                      "merge": "merge"}  # make_train's field: the name it is reported under

    def timed_make_train(args):
        train = make_train(args)
        return train._replace(**{field: timed(getattr(train, field), name) for field, name in timed_programs.items()})
    m.make_train = timed_make_train
    program = m.level_program  # the fresh levels' small programs: keys, picks, placement
    m.level_program = lambda name, *static: timed(program(name, *static), name)

    marks, records = {}, []
    next_stop, refresh, fresh_levels, log = m.next_stop, m.refresh_buffer, m.fresh_levels, m.RunLogger.log
    counted = ("device", "calls", "levels_wall", "levels_device", "log_wall", "log_rows")

    def timed_fresh_levels(*args, **kwargs):  # the host's part of making the fresh levels = its wall - its programs
        t, device = time.perf_counter(), ledger["device"]
        out = fresh_levels(*args, **kwargs)
        ledger["levels_wall"] += time.perf_counter() - t
        ledger["levels_device"] += ledger["device"] - device
        return out

    def timed_log(self, *args, **kwargs):
        t = time.perf_counter()
        log(self, *args, **kwargs)
        ledger["log_wall"] += time.perf_counter() - t
        ledger["log_rows"] += 1

    def start_update(*args, **kwargs):
        marks.update({key: ledger[key] for key in counted}, t=time.perf_counter(),
                     by_program=dict(ledger["by_program"]))
        return next_stop(*args, **kwargs)

    def timed_refresh(*args, **kwargs):
        t, device = time.perf_counter(), ledger["device"]
        out = refresh(*args, **kwargs)
        records.append({"kind": "refresh", "wall": time.perf_counter() - t, "device": ledger["device"] - device})
        return out

    def lockstep(name):
        if name == "chunk":
            records.append({"kind": "update", "wall": time.perf_counter() - marks["t"],
                            **{key: ledger[key] - marks[key] for key in counted},
                            "by_program": {k: v - marks["by_program"].get(k, 0.0)
                                           for k, v in ledger["by_program"].items()}})
            if sum(r["kind"] == "update" for r in records) == updates:
                raise Done
    m.next_stop, m.refresh_buffer, m.lockstep, m.fresh_levels = start_update, timed_refresh, lockstep, timed_fresh_levels
    m.RunLogger.log = timed_log
    sys.argv = [m.__file__] + argv
    try:
        m.main()
    except Done:
        pass
    print("PROBE " + json.dumps({"devices": jax.device_count(), "records": records}), flush=True)


# ---------------------------------------------------------------------------------------------------------
# Parent: one child process per configuration, peak RSS from /usr/bin/time -v
# ---------------------------------------------------------------------------------------------------------
def run_child(argv, updates, log_path):
    env = dict(os.environ, PYTHONPATH=REPO, JAX_COMPILATION_CACHE_DIR=os.environ.get(
        "JAX_COMPILATION_CACHE_DIR", os.path.join(REPO, ".jax_cache")),
        XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={DEVICES}").strip())
    timer = TIME_V if os.access(TIME_V[0], os.X_OK) else []
    cmd = timer + [sys.executable, os.path.abspath(__file__), "--child", str(updates), "--"] + argv
    t0 = time.time()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    with open(log_path, "w") as f:
        f.write(" ".join(cmd) + "\n" + out.stdout + out.stderr)
    found = [line for line in out.stdout.splitlines() if line.startswith("PROBE ")]
    if out.returncode or not found:
        sys.exit(f"error: a probe process failed (exit {out.returncode}); its output is in {log_path}")
    rss_kib = peak_rss_kib(out.stderr)
    result = json.loads(found[-1][len("PROBE "):])
    result.update(rss_gib=rss_kib / 2**20 if rss_kib is not None else float("nan"), process_seconds=time.time() - t0)
    return result


def measured(records, kind, skip):
    """The mean of the records of this kind after the first `skip` (which compiled)."""
    rows = [r for r in records if r["kind"] == kind][skip:]
    return {key: sum(r[key] for r in rows) / len(rows) for key in rows[0] if key not in ("kind", "by_program")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--skip-share", action="store_true", help="only part 1 (host time against N)")
    parser.add_argument("--skip-scaling", action="store_true", help="only part 2 (the filtering share)")
    parser.add_argument("--presets", nargs="+", default=list(PRESET_COUNTS), help="part 2's presets")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        return child(opts.rest, opts.child)
    unknown = [p for p in opts.presets if p not in PRESET_COUNTS]
    if unknown:
        refuse(f"--presets {' '.join(unknown)}: unknown; choose from {', '.join(PRESET_COUNTS)}")
    if opts.skip_share and opts.skip_scaling:
        refuse("--skip-share and --skip-scaling together leave nothing to run")
    for n in opts.num_envs:
        if n < 2 * DEVICES or n % (32 * DEVICES):
            refuse(f"--num-envs {n}: needs a multiple of {32 * DEVICES} (32 minibatches of whole trajectories, "
                   f"{DEVICES} devices, half fresh)")
    logs = tempfile.mkdtemp(prefix="sfl_scaling_probe_")
    print(f"# sfl_kinetix_jax scaling probe, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {DEVICES} forced "
          f"CPU devices on {os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}; logs in {logs}")
    if not opts.skip_scaling:
        scaling_part(opts, logs)
    if not opts.skip_share:
        share_part(opts, logs)


def scaling_part(opts, logs):
    print("\n## Part 1: host time per update against N (MLP, s, 16 steps, rho 0.5, mean of updates 2-3)")
    print("| num_envs | fresh levels / update | compiled calls / update | wall s / update | device s / update "
          "| host s / update | of which: making levels, log rows (count), rest | peak RSS GiB |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|")
    hosts, totals, devices = [], [], []
    for n in opts.num_envs:
        with tempfile.TemporaryDirectory() as runs:
            r = run_child(scaling_argv(n, runs), 3, os.path.join(logs, f"envs{n}.log"))
        u = measured(r["records"], "update", 1)
        host = u["wall"] - u["device"]
        totals.append(host)
        hosts.append(host - u["log_wall"])
        devices.append(u["device"])
        levels_host = u["levels_wall"] - u["levels_device"]
        rest = host - levels_host - u["log_wall"]
        print(f"| {n:,} | {n // 2:,} | {u['calls']:.0f} | {u['wall']:.2f} | {u['device']:.2f} | {host:.3f} "
              f"| {levels_host:.3f}, {u['log_wall']:.3f} ({u['log_rows']:.0f}), {rest:.3f} | {r['rss_gib']:.2f} |",
              flush=True)
    ratio = hosts[-1] / hosts[0]
    grows = devices[-1] > devices[0]
    verdict = "PASS" if ratio <= 1.5 and grows else "FAIL"
    print(f"\n{verdict}: host time per update without log rows at {opts.num_envs[-1]:,} envs is {ratio:.2f}x that at "
          f"{opts.num_envs[0]:,} (rule: <= 1.5x) while device time grows {devices[-1] / devices[0]:.1f}x; with the "
          f"log rows {totals[-1] / totals[0]:.2f}x (largest/smallest over N: {max(totals) / min(totals):.2f}x)")


def share_part(opts, logs):
    print(f"\n## Part 2: filtering share of wall time, presets scaled to {SHARE_ENVS} envs (256 steps, L = 512)")
    print("| preset | scaled N_sfl / K / filter batch | T | refresh R s | update U s | share R / (R + T U) |")
    print("|---|---|---:|---:|---:|---:|")
    for preset in opts.presets:
        envs, levels, k, batch, period = PRESET_COUNTS[preset]
        factor = envs // SHARE_ENVS
        with tempfile.TemporaryDirectory() as runs:
            r = run_child(share_argv(preset, runs), 2, os.path.join(logs, f"share{preset}.log"))
        refresh, update = measured(r["records"], "refresh", 1)["wall"], measured(r["records"], "update", 1)["wall"]
        print(f"| {preset} | {levels // factor} / {max(k // factor, 1)} / {max(batch // factor, DEVICES)} | {period} "
              f"| {refresh:.1f} | {update:.2f} | {refresh / (refresh + period * update):.1%} |", flush=True)


if __name__ == "__main__":
    main()
