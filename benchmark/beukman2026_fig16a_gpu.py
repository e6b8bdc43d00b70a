"""B26 Fig. 16a on one GPU: SFL's training steps per second against the number of minibatches, at one GPU's share
of the 1M-env run (8,192 envs).

The claim (B26 App. D): at 1M envs on 128 GPUs (8,192 envs each), "the wall-clock time difference between 8192
minibatches and 1024 minibatches is substantial, since the former case does not come close to saturating the GPUs
(see Figure 16(a))". Axis: steps per second of the whole training loop (rollouts, SFL's level scoring, updates).

What runs: sfl_kinetix_jax.py itself, one process per number of minibatches K, at the 1m preset's per-device shapes
(SFL_1M_PER_GPU of benchmark/gpu_jax_check.sh, the one copy of them: 8,192 envs x 256 steps, N = 32,768 levels
scored every T = 2 updates, buffer 64, lr 2e-4) with --num-minibatches K, in the order 1024, 8192, 32, 4096, 256
(the two the claim names first). Each run makes --updates updates (default 6). The script times from the end of its
first chunk (one update: it compiles) and cuts its chunks at every scoring round (every T = 2 updates), so chunks
[1], [2], [3, 4], [5, 6]: each 2-update chunk holds one scoring round and two updates, B26's loop at T = 2. Their
own rates are recovered from the cumulative charts/SPS rows (the script leaves the seconds it spends compiling out
of them: the first 2-update chunk compiles level programs); the steady SPS is their steps over their seconds.
nvidia-smi is sampled every second from the end of the first chunk to the run's end (utilisation and power: how
far from saturated). One GPU has no cross-device gradient all-reduce, which B26's 128 GPUs pay once per minibatch
step (8x more often at 8192 than at 1024): one GPU shows the compute side of the gap only.

Time: on one H200 (2026-11-29) a run had not reached its first update after 120 s: at these shapes the script spends
minutes tracing and compiling Kinetix's programs first (53 s to build its envs with every program already in JAX's
compilation cache, 114 s without, then over a minute for the evaluation levels, which these timed runs do not build
(--eval-every 0 --no-final-eval), then the scoring, rollout and update programs). So a run gets --run-limit-s
480 s by default, one K fits one 10-minute GPU call, and --extend carries the runs of one call into the next (each
run keeps its own date); JAX_COMPILATION_CACHE_DIR, when set, is shared by the runs of one call.

THE RULE (committed before any GPU run; docs/reproducing/beukman2026_fig16a_gpu.md):
  * r = steady SPS(1,024 minibatches) / steady SPS(8,192 minibatches).
  * yes: r >= 1.5 ("substantial"); partly: 1.2 <= r < 1.5; no: r < 1.2 (on one GPU: not shown, since the
    all-reduce B26 also paid is absent here, a "no" does not contradict B26's 128-GPU runs).
  * Noise: r's range from the 2-update chunks' own rates (two per run at 6 updates) is reported; a verdict whose
    range crosses its threshold is reported as "not separated" between the two outcomes.
  * A run that times no whole scoring period inside its limit (--run-limit-s) is judged by its summary SPS (after
    its first chunk), else by its first chunk's own rate (the script takes the compile time out of it), marked so; a
    run with no chunk at all (out of memory, the limit) has no SPS and says why; without both 1,024 and 8,192 there
    is no verdict.
  * Reported, not ruled: SPS at 32, 256 and 4,096 minibatches, GPU utilisation and power, peak device memory.

  python benchmark/beukman2026_fig16a_gpu.py --out OUT_DIR      the measurement (<= --deadline-s 560 s) into
                                                                OUT_DIR/fig16a.json
  python benchmark/beukman2026_fig16a_gpu.py --minibatches 8192 --extend EARLIER.json --out OUT_DIR
                                                                a later call: EARLIER's runs kept, these added
  python benchmark/beukman2026_fig16a_gpu.py --cpu-dry-run --out OUT_DIR    tiny sizes on CPU (K 2, 4): catches typos
  python benchmark/beukman2026_fig16a_gpu.py --rule OUT_DIR/fig16a.json [--png FIG.png]   the rule (and the figure)
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]
from _throughput_common import jax_on_cpu_at_o0, judged, refuse  # noqa: E402

SUBSTANTIAL, SOME = 1.5, 1.2  # the rule's thresholds on r
DECIDING = (1024, 8192)


# ---------------------------------------------------------------------------------------------------------
# The rule: pure arithmetic on the JSON (tests/test_throughput_benchmarks.py checks it on made-up numbers)
# ---------------------------------------------------------------------------------------------------------
def outcome(r: float) -> str:
    return "yes" if r >= SUBSTANTIAL else "partly" if r >= SOME else "no"


def sps_of(run: dict):
    """The run's steady SPS (chunks of one whole scoring period), else its summary SPS (after its first chunk), else
    its first chunk's own rate (the script's, compile time taken out): the rule's order of stand-ins."""
    return run.get("steady_SPS") or run.get("SPS") or run.get("first_chunk_sps")


def verdict(results: dict) -> dict:
    """{'verdict', 'r', 'r_range', 'stand_in'} by the rule in this file's header."""
    runs = {int(k): v for k, v in results["runs"].items()}
    fast, slow = runs.get(DECIDING[0], {}), runs.get(DECIDING[1], {})
    if not (sps_of(fast) and sps_of(slow)):
        missing = [str(k) for k, run in zip(DECIDING, (fast, slow)) if not sps_of(run)]
        return {"verdict": f"no verdict: no SPS at {' and '.join(missing)} minibatches", "r": None, "r_range": None,
                "stand_in": []}
    r = sps_of(fast) / sps_of(slow)
    stand_in = [k for k, run in zip(DECIDING, (fast, slow)) if not run.get("steady_SPS")]
    out = {"verdict": outcome(r), "r": r, "r_range": None, "stand_in": stand_in}
    if len(fast.get("chunk_sps", [])) >= 2 and len(slow.get("chunk_sps", [])) >= 2:
        low, high = min(fast["chunk_sps"]) / max(slow["chunk_sps"]), max(fast["chunk_sps"]) / min(slow["chunk_sps"])
        out["r_range"] = (low, high)
        if outcome(low) != outcome(high):
            out["verdict"] = f"not separated ({outcome(low)} to {outcome(high)})"
    return out


def print_rule(path: str) -> None:
    results = json.load(open(path))
    print(f"{results['machine'].get('gpu') or 'no GPU'}, {results['date_utc']}; {results['setting']}")
    print("| minibatches | minibatch size | steady SPS | its chunks' SPS | summary SPS | first chunk's SPS | "
          "filter share | GPU util (median) | power W (median) | peak device GiB | status |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for k, run in sorted(results["runs"].items(), key=lambda kv: int(kv[0])):
        def num(key, fmt):
            return format(run[key], fmt) if run.get(key) is not None else "-"
        peak = f"{run['peak_device_bytes'] / 2**30:.1f}" if run.get("peak_device_bytes") else "-"
        chunks = ", ".join(f"{v:,.0f}" for v in run.get("chunk_sps", [])) or "-"
        print(f"| {k} | {num('minibatch_size', ',')} | {num('steady_SPS', ',.0f')} | {chunks} | {num('SPS', ',.0f')} | "
              f"{num('first_chunk_sps', ',.0f')} | "
              f"{num('filter_share', '.2f')} | "
              f"{num('gpu_util_median', '.0f')} | {num('power_w_median', '.0f')} | {peak} | {run.get('status')} |")
    said = verdict(results)
    r = f"{said['r']:.2f}" if said["r"] else "-"
    span = f" (chunks: {said['r_range'][0]:.2f} to {said['r_range'][1]:.2f})" if said["r_range"] else ""
    print(f"\nr = steady SPS(1024) / steady SPS(8192) = {r}{span}; verdict: {said['verdict']}")
    if said["stand_in"]:
        print(f"(at {' and '.join(map(str, said['stand_in']))} minibatches no whole scoring period was timed in the "
              "run's limit: its summary SPS, else its first chunk's rate, stands in)")


def draw(path: str, png: str) -> None:
    """B26 Fig. 16a's axes: SPS against the number of minibatches (log), the chunks' range as error bars; a run
    without SPS (out of memory, the deadline) is marked at the axis with its status."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    results = json.load(open(path))
    runs = sorted(((int(k), v) for k, v in results["runs"].items()), key=lambda kv: kv[0])
    done = [(k, v) for k, v in runs if sps_of(v)]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    if done:
        ks, sps = [k for k, _ in done], [sps_of(v) for _, v in done]
        low = [s - min(v.get("chunk_sps") or [s]) for s, (_, v) in zip(sps, done)]
        high = [max(v.get("chunk_sps") or [s]) - s for s, (_, v) in zip(sps, done)]
        ax.errorbar(ks, sps, yerr=[low, high], marker="o", capsize=3, color="C0")
    for k, v in runs:
        if not sps_of(v):
            ax.annotate(v.get("status", "no SPS"), (k, 0), xytext=(0, 8), textcoords="offset points", rotation=90,
                        fontsize=7, ha="center", va="bottom")
            ax.plot([k], [0], marker="x", color="C3")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("minibatches")
    ax.set_ylabel("training steps per second (one GPU)")
    ax.set_title(f"B26 Fig. 16a on one GPU: SFL at 8,192 envs ({results['machine'].get('gpu') or 'CPU'})", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"wrote {png}")


# ---------------------------------------------------------------------------------------------------------
# The measurement
# ---------------------------------------------------------------------------------------------------------
def bash_string(name: str, path: str = os.path.join(HERE, "gpu_jax_check.sh")) -> list:
    """The flags of a NAME="..." assignment in a bash script (one copy of the per-GPU shapes), split as bash would."""
    found = re.search(rf'^\s*{name}="([^"]*)"', open(path).read(), re.M)
    if not found:
        refuse(f"{name} not found in {path}")
    return shlex.split(found.group(1).replace("\\\n", " "))


def timed_chunks(rows: list) -> list:
    """(steps, seconds) of each timed chunk, from the cumulative charts/SPS rows (one per update; a chunk's updates
    share it): the clock's timed steps S_k and rate R_k give its seconds S_k / R_k. The script's first chunk (one
    update: it compiles) is not timed; its row is its own rate."""
    per_update, seen = [], set()
    for row in rows:
        if "charts/SPS" in row and row["global_step"] not in seen:
            seen.add(row["global_step"])
            per_update.append((row["global_step"], row["charts/SPS"]))
    ends = []  # (steps, SPS) at each chunk's last update
    for step, sps in per_update:
        if ends and ends[-1][1] == sps:
            ends[-1] = (step, sps)
        else:
            ends.append((step, sps))
    chunks, prev_s, prev_t = [], 0, 0.0
    for step, sps in ends[1:]:
        s_k = step - ends[0][0]
        t_k = s_k / sps
        chunks.append((s_k - prev_s, t_k - prev_t))
        prev_s, prev_t = s_k, t_k
    return chunks


def steady_rate(chunks: list, period_steps: int) -> tuple:
    """(SPS over the chunks of one whole SFL period, those chunks' own rates). The script cuts chunks at every
    scoring round (every T = 2 updates), so a chunk of T updates holds one round, as B26's loop does; the shorter
    chunk after the first does not, and is left out."""
    full = [(s, t) for s, t in chunks if s == period_steps]
    if not full:
        return None, []
    return sum(s for s, _ in full) / sum(t for _, t in full), [s / t for s, t in full]


class GpuSampler:
    """nvidia-smi's utilisation and power every second while a file (the first chunk's row) is present."""

    def __init__(self, ready):
        self.ready, self.samples, self.stop = ready, [], threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        query = ["nvidia-smi", "--query-gpu=utilization.gpu,power.draw", "--format=csv,noheader,nounits", "-i", "0"]
        while not self.stop.wait(1.0):
            if not self.ready():
                continue
            try:
                out = subprocess.run(query, capture_output=True, text=True, timeout=5).stdout.split(",")
                self.samples.append((float(out[0]), float(out[1])))
            except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
                return  # no nvidia-smi (CPU) or an unreadable field: no samples

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def one_run(flags: list, k: int, updates: int, batch: int, period: int, limit: float, log_path: str, env: dict) -> dict:
    """sfl_kinetix_jax.py at K minibatches; SIGTERM at the limit (the script stops at a chunk's end and writes its
    summary), SIGKILL 60 s later."""
    runs = tempfile.mkdtemp(prefix="fig16a_")
    cmd = [sys.executable, os.path.join(ROOT, "cleanrl_scaling", "sfl_kinetix_jax.py"), *flags,
           "--num-minibatches", str(k), "--eval-every", "0", "--no-final-eval",  # timed training, as B26's
           "--total-timesteps", str(updates * batch), "--progress", "none", "--runs-dir", runs]

    def metrics_rows():
        found = [os.path.join(d, "metrics.jsonl") for d in (os.path.join(runs, x) for x in os.listdir(runs))
                 if os.path.isfile(os.path.join(d, "metrics.jsonl"))]
        return [json.loads(line) for line in open(found[0]) if line.strip()] if found else []

    def first_chunk_done():
        try:
            return any("charts/SPS" in row for row in metrics_rows())
        except ValueError:  # a line the script is still writing: not yet
            return False

    t0 = time.time()
    with open(log_path, "w") as log, GpuSampler(first_chunk_done) as gpu:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        try:
            proc.wait(timeout=max(limit, 1))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        finally:  # this process stopped (SIGTERM, Ctrl-C): no run is left behind on the GPU
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    run = {"exit_code": proc.returncode, "seconds": round(time.time() - t0), "args": " ".join(cmd[2:])}
    summaries = [os.path.join(runs, x, "summary.json") for x in os.listdir(runs)]
    summaries = [p for p in summaries if os.path.isfile(p)]
    if summaries:
        s = json.load(open(summaries[0]))
        run.update(status=s["status"], SPS=round(s["SPS"]) if s["iteration"] > 2 else None,
                   SPS_with_warmup=round(s["SPS_with_warmup"]), updates=s["iteration"],
                   filter_share=round(s["filter_share"], 3), peak_device_bytes=s.get("peak_device_bytes"))
    else:
        text = open(log_path).read()
        oom = "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()
        failed = f"failed (exit {proc.returncode}; log {os.path.basename(log_path)})"
        run.update(status="out of memory" if oom else failed, SPS=None)
    rows = metrics_rows()
    steady, per_chunk = steady_rate(timed_chunks(rows), period * batch)
    run["steady_SPS"] = round(steady) if steady else None
    run["chunk_sps"] = [round(v) for v in per_chunk]
    first = next((row["charts/SPS"] for row in rows if "charts/SPS" in row), None)
    run["first_chunk_sps"] = round(first) if first else None
    shutil.rmtree(runs, ignore_errors=True)  # checkpoints of 8,192 envs: nothing here needs them
    if gpu.samples:
        run["gpu_util_median"] = statistics.median(u for u, _ in gpu.samples)
        run["power_w_median"] = statistics.median(p for _, p in gpu.samples)
        run["gpu_samples"] = len(gpu.samples)
    return run


def checked_args(flags: list):
    """The script's Args at these flags, through its own checks (a bad flag: its one line and exit 2)."""
    from cleanrl_scaling import sfl_kinetix_jax as m
    saved = sys.argv
    sys.argv = [m.__file__] + flags
    try:
        return m.read_args()[0]
    finally:
        sys.argv = saved


def earlier_runs(path: str, setting: str, dry_run: bool) -> dict:
    """The runs of an earlier call's fig16a.json, which must be at this setting (and dry or not alike), each with
    its own date and machine."""
    if not os.path.isfile(path):
        refuse(f"--extend {path}: no such file; pass the fig16a.json of an earlier call")
    earlier = json.load(open(path))
    if (earlier.get("setting"), earlier.get("dry_run")) != (setting, dry_run):
        refuse(f"--extend {path}: measured at another setting ({earlier.get('setting')!r}, dry run "
               f"{earlier.get('dry_run')}); runs at different settings do not share a figure")
    when = {"date_utc": earlier["date_utc"], "machine": earlier["machine"]}
    return {k: {**when, **run} for k, run in earlier["runs"].items()}


def machine() -> dict:
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.strip() or None
    except OSError:
        gpu = None
    return {"gpu": gpu, "cpu_cores": os.cpu_count(), "python": sys.version.split()[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the folder for fig16a.json and the runs' logs")
    parser.add_argument("--rule", metavar="JSON", help="apply the rule to a measurement and print the verdict")
    parser.add_argument("--png", help="with --rule: draw the figure here too")
    parser.add_argument("--minibatches", type=int, nargs="+", default=[1024, 8192, 32, 4096, 256],
                        help="in the order measured (the two the claim names first)")
    parser.add_argument("--updates", type=int, default=6, help="per run, in chunks of 2; the first chunk is not timed")
    parser.add_argument("--deadline-s", type=float, default=560.0)
    parser.add_argument("--run-limit-s", type=float, default=480.0, help="one run's limit (SIGTERM, then its summary)")
    parser.add_argument("--extend", metavar="JSON", help="a fig16a.json of an earlier call at the same setting: "
                        "its runs are kept, and the minibatch counts it has an SPS for are not run again")
    parser.add_argument("--cpu-dry-run", action="store_true",
                        help="the tests' tiny SFL flags on CPU at XLA -O0, the limits x 8")
    opts = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so the run under way is stopped too
    if judged(opts, print_rule, draw, "OUT_DIR"):
        return
    if opts.updates < 4 or opts.updates % 2:
        refuse(f"--updates must be even and >= 4 (got {opts.updates}): chunks of 2, the first not timed")
    flags = bash_string("SFL_1M_PER_GPU") + ["--diagnostics-every", "0"]  # B26 timed training, not probes
    if opts.cpu_dry_run:  # CPU compiles take minutes: the limits x 8, as gpu_jax_check.sh's dry run
        opts.deadline_s, opts.run_limit_s = 8 * opts.deadline_s, 8 * opts.run_limit_s
        jax_on_cpu_at_o0()
        flags += bash_string("SFL_TINY")
        if opts.minibatches == parser.get_default("minibatches"):
            opts.minibatches = [2, 4]  # the tiny run has 4 envs; a minibatch holds whole trajectories
    earlier = earlier_runs(opts.extend, " ".join(flags), opts.cpu_dry_run) if opts.extend else {}
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the peak is the run's own
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + paths)  # the runs import this checkout
    os.makedirs(opts.out, exist_ok=True)
    child_env = dict(os.environ)
    os.environ["JAX_PLATFORMS"] = "cpu"  # this process only checks flags: the GPU is the runs' alone
    checked = {k: checked_args(flags + ["--num-minibatches", str(k)]) for k in opts.minibatches}  # every K, first
    batch = {k: args.batch_size for k, args in checked.items()}
    period = checked[opts.minibatches[0]].sfl_update_period  # updates between scoring rounds (T)
    results = {"figure": "B26 Fig. 16a (SFL, one GPU's share of 1M envs)",
               "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "machine": machine(),
               "dry_run": opts.cpu_dry_run, "setting": " ".join(flags), "updates": opts.updates, "runs": earlier}
    end = time.time() + opts.deadline_s
    for k in opts.minibatches:
        if sps_of(results["runs"].get(str(k), {})):
            print(f"== {k} minibatches: kept from {opts.extend}", flush=True)
            continue
        left = end - time.time()
        if left < 60:
            results["runs"][str(k)] = {"status": "skipped: past the deadline", "SPS": None}
            continue
        print(f"== {k} minibatches", flush=True)
        run = one_run(flags, k, opts.updates, batch[k], period, min(opts.run_limit_s, left - 60),
                      os.path.join(opts.out, f"fig16a_k{k}.log"), child_env)
        run.update(minibatch_size=batch[k] // k, date_utc=time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                   machine=results["machine"])
        results["runs"][str(k)] = run
        results["wall_s"] = round(opts.deadline_s - (end - time.time()))
        json.dump(results, open(os.path.join(opts.out, "fig16a.json"), "w"), indent=1)
        print(json.dumps(run), flush=True)
    json.dump(results, open(os.path.join(opts.out, "fig16a.json"), "w"), indent=1)
    print_rule(os.path.join(opts.out, "fig16a.json"))


if __name__ == "__main__":
    main()
