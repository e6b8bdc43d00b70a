"""Run a grid of training runs: env ids x flag sets x sweeps x seeds, locally or as a Slurm array.

    python -m cleanrl_scaling.utils.launcher cleanrl_scaling/noisy_sgd.py \
        --sweep learning-rate=0.3,0.03,0.003 --seeds 1 --workers 2 --runs-dir runs/fig1b -- --total-steps 1000

Every run's stdout and stderr go to one log file; failed runs are listed at the end with their log paths and the
launcher exits with code 1. --skip-finished drops the grid points that already have a finished run in --runs-dir
(a run is finished iff its summary.json says so, docs/run_directory.md) started with exactly the point's flags (its config.json
"argv"); --resume-unfinished also continues a point's interrupted or killed run from its checkpoint (--resume).
Usage and the Slurm placeholders: docs/pipeline.md.
"""
import argparse
import itertools
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from cleanrl_scaling.utils import preview
from cleanrl_scaling.utils.rundirs import (as_bool, config_value_or, finished_configs, parse_flags, resumable_runs,
                                           same_value)

DEFAULT_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slurm_template.sh")
# one run = one srun step of --tasks-per-node processes on each of --nodes nodes (sfl_kinetix_jax.py --distributed)
MULTINODE_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slurm_multinode_template.sh")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS")
SLURM_DEFAULTS = {"time": "04:00:00", "mem": "16G"}
# seconds between Slurm's warning (#SBATCH --signal) and the time limit, in which the run finishes its update,
# checkpoints and stops before its task requeues itself: above a 4,096 x 32 MuJoCo update on one core (~110 s,
# docs/cluster.md)
DEFAULT_GRACE = 300


class UsageError(Exception):
    """A user mistake: one line on stderr, exit code 2."""


@dataclass
class Job:
    index: int
    argv: list  # the full command
    flags: dict  # parsed script flags (the run's identity for --skip-finished)
    label: str
    log_path: str = ""
    cpus: list = field(default_factory=list)
    env: dict = field(default_factory=dict)  # set for the run unless the caller's environment sets it (W&B grouping)


# ---------------------------------------------------------------------------------------------------------
# --skip-finished: does a finished run's config.json describe this grid point?
# ---------------------------------------------------------------------------------------------------------
# flags that do not change what a run computes; a resumed run records its --resume and is still its grid point
# (--distributed: one process or several compute the same run, to float tolerance; docs/sfl_kinetix_jax.md)
IGNORED_FOR_IDENTITY = {"runs_dir", "progress", "track", "wandb_project_name", "wandb_entity", "checkpoint_every",
                        "resume", "distributed"}


def run_matches(job: Job, config: dict, script_stem: str) -> bool:
    """Was this finished run started with exactly the grid point's flags? A grid point is finished only when a run
    with exactly its configuration finished, so the run's own argv (config.json "argv") decides: the same flags with
    the same values, no flag more, no flag less. A config.json without argv (a script that does not record it) never
    matches: matching a subset of its values would count, e.g., a PPO-EWMA run as the plain-PPO point of the same
    epsilon."""
    if "script" in config and config["script"] != script_stem:
        return False
    if not isinstance(config.get("argv"), list):
        return False
    wanted = {k: v for k, v in job.flags.items() if k not in IGNORED_FOR_IDENTITY}
    had = {k: v for k, v in parse_flags(config["argv"]).items() if k not in IGNORED_FOR_IDENTITY}
    wanted.setdefault("exp_name", script_stem)  # a run without --exp-name has its script's name
    had.setdefault("exp_name", config_value_or(config, "exp_name", script_stem))
    return had.keys() == wanted.keys() and all(same_value(wanted[k], had[k]) for k in wanted)


def resume_from_checkpoints(jobs: list, runs_dir: str, script_stem: str) -> int:
    """--resume-unfinished: a grid point whose run stopped before finishing (SIGINT/SIGTERM, preemption, kill -9
    after a checkpoint) continues from the newest such checkpoint instead of starting over. Returns how many."""
    candidates = resumable_runs(runs_dir) if os.path.isdir(runs_dir) else []
    resumed = 0
    for job in jobs:
        mine = [ckpt for config, ckpt in candidates if run_matches(job, config, script_stem)]
        if mine:
            job.argv += ["--resume", max(mine, key=os.path.getmtime)]
            job.label += "_resumed"
            resumed += 1
    return resumed


# ---------------------------------------------------------------------------------------------------------
# The grid
# ---------------------------------------------------------------------------------------------------------
def parse_sweep(spec: str) -> list:
    """`learning-rate=0.3,0.03` -> [['--learning-rate', '0.3'], ['--learning-rate', '0.03']];
    the values true/false give --x / --no-x (tyro's boolean flags)."""
    if "=" not in spec:
        raise UsageError(f"--sweep {spec!r}: write NAME=V1,V2,... (e.g. --sweep learning-rate=0.3,0.03)")
    name, values = spec.split("=", 1)
    name = name.strip().lstrip("-")
    items = [v.strip() for v in values.split(",")]
    if not name or not all(items):
        raise UsageError(f"--sweep {spec!r}: needs a flag name and non-empty values separated by commas")
    out = []
    for v in items:
        flag = as_bool(v)
        if flag is None:
            out.append([f"--{name}", v])
        else:
            out.append([f"--{name}" if flag else f"--no-{name}"])
    return out


def slug(text: str, limit: int = 80) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text).strip("_")[:limit] or "run"


def build_jobs(args) -> list:
    script_flags = list(args.script_args)
    common = parse_flags(script_flags)
    for owned in ("runs_dir", "seed", "env_id"):
        if owned in common:
            raise UsageError(f"--{owned.replace('_', '-')} after '--': give it to the launcher "
                             f"(--{'runs-dir' if owned == 'runs_dir' else owned.replace('_', '-') + 's'}) instead")
    flag_sets = [shlex.split(s) for s in args.flag_set] or [[]]
    sweeps = [parse_sweep(s) for s in args.sweep]
    combos = [sum(parts, []) for parts in itertools.product(*sweeps)] if sweeps else [[]]
    envs = args.env_ids or [None]
    seeds = args.seeds or [None]
    jobs = []
    for env_id, flag_set, combo, seed in itertools.product(envs, flag_sets, combos, seeds):
        argv = [args.python, args.script] + script_flags + flag_set + combo
        if env_id is not None:
            argv += ["--env-id", env_id]
        if seed is not None:
            argv += ["--seed", str(seed)]
        argv += ["--runs-dir", args.runs_dir]
        label_parts = ([env_id] if env_id else []) + [" ".join(flag_set + combo).replace("--", "")] + \
                      ([f"s{seed}"] if seed is not None else [])
        jobs.append(Job(len(jobs), argv, parse_flags(argv[2:]), slug("_".join(p for p in label_parts if p))))
    return jobs


def set_wandb_grouping(jobs: list, job_name: str) -> None:
    """With --track, a launch's runs share one W&B group (--job-name) and each is tagged with the flags that vary
    across the grid (`learning-rate=0.3`, `seed=2`); wandb.init reads WANDB_RUN_GROUP and WANDB_TAGS (docs/tracking.md)."""
    def text(value):
        if isinstance(value, bool):
            return str(value).lower()
        return " ".join(map(str, value)) if isinstance(value, list) else str(value)
    keys = sorted({k for job in jobs for k in job.flags if not k.startswith("_")})
    varying = [k for k in keys if len({text(job.flags.get(k)) for job in jobs}) > 1]
    for job in jobs:
        # a W&B tag is at most 64 characters and WANDB_TAGS is split at commas
        tags = [f"{k.replace('_', '-')}={text(job.flags.get(k))}".replace(",", ";")[:64] for k in varying]
        job.env = {"WANDB_RUN_GROUP": job_name, **({"WANDB_TAGS": ",".join(tags)} if tags else {})}


# ---------------------------------------------------------------------------------------------------------
# Local execution: N workers, each run pinned to its share of the cores
# ---------------------------------------------------------------------------------------------------------
def core_slots(cores: list, workers: int) -> list:
    """Split the usable cores into `workers` disjoint groups. With more workers than cores, every run gets every core
    (single-core pins would leave two runs sharing a core while another idles once the queue has emptied)."""
    if workers > len(cores):
        return [list(cores) for _ in range(workers)]
    share = len(cores) // workers
    return [cores[i * share:(i + 1) * share] for i in range(workers)]


def threads_per_run(cores: list, workers: int) -> int:
    """Each run's thread count: its share of the cores, at least one."""
    return max(1, len(cores) // workers)


def run_env(num_threads: int) -> dict:
    env = dict(os.environ)
    for var in THREAD_VARS:
        env[var] = str(num_threads)
    xla = env.get("XLA_FLAGS", "")
    xla = re.sub(r"--xla_cpu_multi_thread_eigen=\S+|intra_op_parallelism_threads=\S+", "", xla).strip()
    eigen = "false" if num_threads == 1 else "true"
    env["XLA_FLAGS"] = f"{xla} --xla_cpu_multi_thread_eigen={eigen} intra_op_parallelism_threads={num_threads}".strip()
    env["PYTHONUNBUFFERED"] = "1"
    return env


# two runs whose names differ only by the second they read are launched this far apart, so their names get distinct
# time stamps (the scripts' claim_run_dir would otherwise add "-2"): the name's one-second resolution plus start-up
# jitter, which on a loaded machine lets two processes launched just over a second apart read the same second
NAME_GAP = 2.0


def run_name_key(job: Job, script_stem: str) -> tuple:
    """What a run's directory name is made of besides the time: env_id, exp_name, seed (docs/run_directory.md)."""
    return job.flags.get("env_id"), job.flags.get("exp_name", script_stem), job.flags.get("seed")


def run_local(jobs: list, workers: int, cores: list, log_dir: str, script_stem: str = "") -> tuple:
    """Run the jobs, at most `workers` at a time. Returns (failed, interrupted) lists of (job, return code).
    Two runs whose directory names would differ only by flags are not started in the same second, so that
    `{env_id}__{exp_name}__{seed}__{int(time.time())}` cannot collide."""
    slots = core_slots(cores, workers)
    pending, running, failed, interrupted = list(jobs), {}, [], []
    total, done = len(jobs), 0
    can_pin = hasattr(os, "sched_setaffinity")
    started = {}  # run-name key -> start time
    handlers = stop_like_ctrl_c()
    try:
        while pending or running:
            for slot in range(len(slots)):
                if slot in running or not pending:
                    continue
                now = time.time()
                free = [j for j in pending if now - started.get(run_name_key(j, script_stem), -math.inf) > NAME_GAP]
                if not free:
                    break
                job = free[0]
                pending.remove(job)
                started[run_name_key(job, script_stem)] = now
                job.cpus = slots[slot]
                log = open(job.log_path, "w")
                log.write(f"$ {shlex.join(job.argv)}\n# cpus {job.cpus}\n")
                log.flush()
                pin = (lambda cpus=tuple(job.cpus): os.sched_setaffinity(0, cpus)) if can_pin else None
                # the caller's WANDB_RUN_GROUP / WANDB_TAGS win
                env = {**job.env, **run_env(threads_per_run(cores, workers))}
                proc = subprocess.Popen(job.argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        preexec_fn=pin, start_new_session=True)
                running[slot] = (job, proc, log, time.time())
            time.sleep(0.05)
            for slot, (job, proc, log, t0) in list(running.items()):
                rc = proc.poll()
                if rc is None:
                    continue
                log.close()
                del running[slot]
                done += 1
                state = "ok  " if rc == 0 else f"FAIL rc={rc}"
                print(f"[{done:>{len(str(total))}}/{total}] {state} {time.time() - t0:6.1f}s  {job.label}", flush=True)
                if rc != 0:
                    failed.append((job, rc))
    except KeyboardInterrupt:
        print(f"\ninterrupted: forwarding SIGINT to {len(running)} running run(s) so they can checkpoint",
              file=sys.stderr)
        for job, proc, log, _ in running.values():
            proc.send_signal(signal.SIGINT)
        for job, proc, log, _ in running.values():
            try:
                rc = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.terminate()
                rc = proc.wait()
            log.close()
            interrupted.append((job, rc))
        interrupted += [(job, None) for job in pending]
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return failed, interrupted


def stop_like_ctrl_c() -> dict:
    """SIGTERM (kill, timeout, a job scheduler) stops the launcher as Ctrl-C does, so its runs get SIGINT and
    checkpoint instead of running on orphaned; and SIGINT works even when a shell started the launcher in the
    background, which leaves SIGINT ignored. Returns the previous handlers."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    return {signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
            signal.SIGTERM: signal.signal(signal.SIGTERM, interrupt)}


# ---------------------------------------------------------------------------------------------------------
# Slurm: a commands file (one run per line) and an array job that runs line $SLURM_ARRAY_TASK_ID + 1
# ---------------------------------------------------------------------------------------------------------
PLACEHOLDER = re.compile(r"(?<!\$)\{([a-z_][a-z0-9_]*)\}")


def render_template(template: str, values: dict) -> str:
    """Replace {name} placeholders; `${VAR}` (shell) is left alone and `{{` / `}}` give literal braces."""
    protected = template.replace("{{", "\x00").replace("}}", "\x01")
    unknown = sorted({m.group(1) for m in PLACEHOLDER.finditer(protected) if m.group(1) not in values})
    if unknown:
        raise UsageError(f"--slurm-template: unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}; "
                         f"known: {', '.join(sorted(values))} (add your own with --slurm-set NAME=VALUE)")
    rendered = PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), protected)
    return rendered.replace("\x00", "{").replace("\x01", "}")


def sbatch_options(args) -> str:
    """The optional #SBATCH lines of {sbatch_options}: partition, GPUs per run, then --sbatch lines as given."""
    lines = [f"--partition={args.partition}"] if args.partition else []
    lines += [f"--gres=gpu:{args.gpus_per_run}"] if args.gpus_per_run else []
    lines += [option.strip() for option in args.sbatch if option.strip()]
    return "\n".join(f"#SBATCH {line}" for line in lines)


def claim_log_dir(base: str, create: bool) -> str:
    """BASE, or BASE_2, BASE_3, ... if taken: two launchers started in one second (two seeds on two pinned cores,
    two figure scripts) must not share a log directory, or one commands.txt overwrites the other's."""
    for path in [base] + [f"{base}_{k}" for k in range(2, 10_000)]:
        if not create:
            if not os.path.exists(path):
                return path
            continue
        try:
            os.makedirs(path)  # atomic: the launcher that creates it owns it
            return path
        except FileExistsError:
            pass
    raise UsageError(f"{base}: 10,000 log directories with this name and time stamp already exist")


def slurm_seconds(limit: str):
    """A Slurm time limit in seconds (sbatch's formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S); None if not one."""
    found = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", limit.strip())
    if not found:
        return None
    days, *rest = found.groups()
    parts = [int(x) for x in rest if x is not None]
    if days is not None:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = parts + [0] * (3 - len(parts))
    elif len(parts) == 3:  # H:M:S
        hours, minutes, seconds = parts
    else:  # M, M:S
        hours, (minutes, seconds) = 0, parts + [0] * (2 - len(parts))
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def check_grace(values: dict) -> None:
    """The warning must come inside the job: a grace as long as the time limit would stop and requeue every start."""
    grace, limit = str(values.get("grace", "")), slurm_seconds(str(values.get("time", "")))
    if not grace.isdigit() or not 0 < int(grace) <= 65535:
        raise UsageError(f"--signal-grace {grace}: give whole seconds between 1 and 65535 (sbatch --signal's range)")
    if limit is not None and int(grace) >= limit:
        raise UsageError(f"--signal-grace {grace} is not below the time limit --time {values['time']} "
                         f"({limit} s): lower it or raise --time")


def slurm_values(args, jobs: list, commands_file: str, log_dir: str) -> dict:
    values = dict(SLURM_DEFAULTS)
    last = len(jobs) - 1
    values.update({
        "job_name": args.job_name, "num_tasks": len(jobs), "last_task": last, "grace": args.signal_grace,
        "max_parallel": args.max_parallel, "cpus": args.cpus_per_run, "gpus": args.gpus_per_run,
        "nodes": args.nodes, "tasks_per_node": args.tasks_per_node,
        "array": f"0-{last}%{args.max_parallel}" if args.max_parallel > 0 else f"0-{last}",
        "commands_file": os.path.abspath(commands_file), "log_dir": os.path.abspath(log_dir),
        "workdir": os.getcwd(), "python": args.python, "sbatch_options": sbatch_options(args),
    })
    values.update({k: v for k, v in (("time", args.time), ("mem", args.mem)) if v})
    for item in args.slurm_set:
        if "=" not in item:
            raise UsageError(f"--slurm-set {item!r}: write NAME=VALUE (e.g. --slurm-set partition=gpu)")
        key, value = item.split("=", 1)
        values[key.strip()] = value
    check_grace(values)
    return values


def queued_in_slurm(job_name: str) -> list:
    """(script, flags) of every run in this user's queued or running Slurm array tasks named job_name, read from the
    commands file next to each task's batch script (task i runs line i + 1); [] without Slurm or when squeue fails."""
    if shutil.which("squeue") is None:
        return []
    try:
        out = subprocess.run(["squeue", "--me", "--noheader", "--array", "--format=%i %o", f"--name={job_name}"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    points = []
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        task_id, _, batch_script = line.strip().partition(" ")
        try:
            with open(os.path.join(os.path.dirname(batch_script), "commands.txt")) as f:
                lines = f.read().splitlines()
        except OSError:
            continue  # not an array this launcher wrote
        index = task_id.partition("_")[2]
        for text in [lines[int(index)]] if index.isdigit() and int(index) < len(lines) else lines:
            argv = shlex.split(text)
            points.append((argv[1], parse_flags(argv[2:])))
    return points


def is_queued(job: Job, queued: list) -> bool:
    """Is this grid point (same script, runs dir and flags, as --skip-finished compares them) in a queued job?"""
    mine = {k: v for k, v in job.flags.items() if k not in IGNORED_FOR_IDENTITY}
    for script, flags in queued:
        if os.path.basename(script) != os.path.basename(job.argv[1]) or \
                os.path.normpath(str(flags.get("runs_dir"))) != os.path.normpath(str(job.flags.get("runs_dir"))):
            continue
        theirs = {k: v for k, v in flags.items() if k not in IGNORED_FOR_IDENTITY}
        if theirs.keys() == mine.keys() and all(same_value(mine[k], theirs[k]) for k in mine):
            return True
    return False


# ---------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m cleanrl_scaling.utils.launcher",
        usage="%(prog)s SCRIPT [options] [-- flags for every run]",
        description="Run a grid (env ids x flag sets x sweeps x seeds) locally or as a Slurm array. "
                    "Flags after '--' go to every run unchanged.")
    p.add_argument("script", help="the training script, e.g. cleanrl_scaling/noisy_sgd.py")
    p.add_argument("--env-ids", nargs="+", default=[], help="passed as --env-id (omit for scripts without one)")
    p.add_argument("--seeds", nargs="+", type=int, default=[], help="passed as --seed (omit: the script's default)")
    p.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2",
                   help="a swept flag (repeatable; the grid is the product); true/false give --NAME / --no-NAME")
    p.add_argument("--flag-set", action="append", default=[], metavar='"FLAGS"',
                   help="one alternative set of flags, quoted (repeatable; crossed with the sweeps)")
    p.add_argument("--runs-dir", default="runs", help="passed to every run; --skip-finished looks here (default runs)")
    p.add_argument("--workers", type=int, default=1, help="runs at once locally; each gets cores // workers cores "
                   "(more workers than cores: one thread each, on any core)")
    p.add_argument("--cores", type=int, default=0, help="cores to share out (default: all this process may use)")
    p.add_argument("--job-name", default="", help="name of the sweep (log directory, Slurm job); default: script name")
    p.add_argument("--log-dir", default="", help="default: RUNS_DIR/_launcher/JOB_NAME_<time>, _2, _3 ... if taken")
    p.add_argument("--dry-run", action="store_true", help="print the commands (and the Slurm script) and run nothing")
    p.add_argument("--skip-finished", action="store_true",
                   help="skip grid points with a finished run (summary.json status finished) in --runs-dir")
    p.add_argument("--resume-unfinished", action="store_true",
                   help="with --skip-finished: continue a grid point's interrupted or killed run from its checkpoint "
                        "(--resume) instead of starting it over; not while another launcher runs the same grid points "
                        "(launchers of disjoint points, e.g. one seed each, may share RUNS_DIR)")
    p.add_argument("--python", default=sys.executable, help="interpreter of the runs (default: this one)")
    p.add_argument("--slurm-template", nargs="?", const="", default=None, metavar="PATH",
                   help="submit a Slurm array rendered from this template (no PATH: the bundled one, or the bundled "
                        "multi-node one with --nodes or --tasks-per-node above 1)")
    p.add_argument("--no-submit", action="store_true",
                   help="with --slurm-template: write the files and print the script; no sbatch")
    p.add_argument("--cpus-per-run", type=int, default=1, help="Slurm: {cpus}, cores per array task")
    p.add_argument("--max-parallel", type=int, default=0, help="Slurm: array throttle %%N (0 = none)")
    p.add_argument("--gpus-per-run", type=int, default=0, help="Slurm: {gpus}, and #SBATCH --gres=gpu:N if > 0")
    p.add_argument("--partition", default="", help="Slurm: #SBATCH --partition=NAME")
    p.add_argument("--time", default="", help=f"Slurm: {{time}}, the time limit of one run "
                                              f"(default {SLURM_DEFAULTS['time']})")
    p.add_argument("--mem", default="", help=f"Slurm: {{mem}}, memory per node of one run "
                                             f"(default {SLURM_DEFAULTS['mem']})")
    p.add_argument("--signal-grace", type=int, default=DEFAULT_GRACE, metavar="SECONDS",
                   help=f"Slurm: {{grace}}, seconds before the time limit at which the run is told to checkpoint and "
                        f"stop, and the task requeues itself to continue it (default {DEFAULT_GRACE}; docs/cluster.md)")
    p.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                   help="Slurm: an extra #SBATCH line, written with = (--sbatch=--account=abc; repeatable)")
    p.add_argument("--nodes", type=int, default=1, help="Slurm: {nodes}, nodes per run (multi-node template)")
    p.add_argument("--tasks-per-node", type=int, default=1,
                   help="Slurm: {tasks_per_node}, processes per node of one run (multi-node template)")
    p.add_argument("--slurm-set", action="append", default=[], metavar="NAME=VALUE",
                   help="Slurm: set or add a placeholder, e.g. time=12:00:00, mem=32G, partition=gpu")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)  # what follows '--' goes to every run untouched
    args = p.parse_args(argv[:split])
    args.script_args = argv[split + 1:]
    return args


def check_args(args) -> None:
    if not os.path.isfile(args.script):
        raise UsageError(f"script {args.script!r} not found; pass the path of a training script")
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1 (got {args.workers})")
    if args.cores < 0 or args.cpus_per_run < 1 or args.max_parallel < 0:
        raise UsageError("--cores must be >= 0, --cpus-per-run >= 1 and --max-parallel >= 0")
    if args.gpus_per_run < 0 or args.nodes < 1 or args.tasks_per_node < 1:
        raise UsageError("--gpus-per-run must be >= 0, --nodes and --tasks-per-node >= 1")
    if args.slurm_template == "":
        args.slurm_template = MULTINODE_TEMPLATE if args.nodes * args.tasks_per_node > 1 else DEFAULT_TEMPLATE
    if args.slurm_template and not os.path.isfile(args.slurm_template):
        raise UsageError(f"--slurm-template {args.slurm_template!r} not found; omit PATH for the bundled template")
    if args.no_submit and not args.slurm_template:
        raise UsageError("--no-submit only applies with --slurm-template")
    if args.resume_unfinished and not args.skip_finished:
        raise UsageError("--resume-unfinished only applies with --skip-finished (a finished point is never resumed)")


def main(argv=None) -> int:
    args = parse_args(argv)
    claimed = None  # the log directory this launcher created, if any
    try:
        check_args(args)
        args.job_name = args.job_name or os.path.splitext(os.path.basename(args.script))[0]
        jobs = build_jobs(args)
        set_wandb_grouping(jobs, args.job_name)  # over the whole grid, so a relaunch tags its runs the same way
        script_stem = os.path.splitext(os.path.basename(args.script))[0]
        skipped = 0
        if args.skip_finished:
            configs = finished_configs(args.runs_dir) if os.path.isdir(args.runs_dir) else []
            unknown = [c for c in configs if c.get("script", script_stem) == script_stem
                       and not isinstance(c.get("argv"), list)]
            if unknown:
                print(f"warning: {len(unknown)} finished run(s) in {args.runs_dir} have no argv in config.json; "
                      "--skip-finished cannot tell which grid point they are and reruns them", file=sys.stderr)
            kept = [j for j in jobs if not any(run_matches(j, c, script_stem) for c in configs)]
            skipped = len(jobs) - len(kept)
            jobs = kept
        # a point still queued or running as a Slurm job has no summary yet: launching it would run it twice
        queued = queued_in_slurm(args.job_name)
        in_slurm = [j for j in jobs if is_queued(j, queued)] if queued else []
        jobs = [j for j in jobs if j not in in_slurm]
        resumed = resume_from_checkpoints(jobs, args.runs_dir, script_stem) if args.resume_unfinished else 0
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_dir = args.log_dir
        if not log_dir:
            create = bool(jobs) and not args.dry_run
            log_dir = claim_log_dir(os.path.join(args.runs_dir, "_launcher", f"{slug(args.job_name)}_{stamp}"), create)
            claimed = log_dir if create else None
        for job in jobs:
            job.log_path = os.path.join(log_dir, f"{job.index:03d}_{job.label}.log")
        commands_file = os.path.join(log_dir, "commands.txt")
        values = slurm_values(args, jobs, commands_file, log_dir) if args.slurm_template and jobs else None
        script_text = None
        if values is not None:
            with open(args.slurm_template) as f:
                script_text = render_template(f.read(), values)
    except UsageError as e:
        if claimed and os.path.isdir(claimed) and not os.listdir(claimed):
            os.rmdir(claimed)  # a usage error leaves nothing behind
        print(f"error: {e}", file=sys.stderr)
        return 2

    header = f"# {len(jobs)} run(s)" + (f", {skipped} skipped as finished" if args.skip_finished else "") + \
        (f", {resumed} resumed from checkpoints" if args.resume_unfinished else "") + \
        (f", {len(in_slurm)} left out as queued or running in Slurm (squeue --me --name={args.job_name}; "
         "DRAW_ONLY=1 draws without launching)" if in_slurm else "")
    if not jobs:
        print(header + ": nothing to do")
        return 0
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if args.cores:
        cores = cores[: args.cores]  # the first K usable cores
    if args.dry_run:
        print(header)
        if script_text is None:
            share = threads_per_run(cores, args.workers)
            where = "any core" if args.workers > len(cores) else f"{share} core(s)"
            print(f"# local: {args.workers} worker(s), {where} and OMP_NUM_THREADS={share} per run")
        for job in jobs:
            print(shlex.join(job.argv))
        print("\n".join(preview.estimate(args.script, [j.flags for j in jobs], 0 if script_text else len(cores))))
        print(f"# writes: {len(jobs)} run directories in {args.runs_dir}/ (ENV__EXP__SEED__TIME: docs/run_directory.md)"
              f" and the runs' logs in {log_dir}/")
        if script_text is not None:
            print(f"# Slurm array script ({args.slurm_template}):")
            print(script_text)
        return 0

    os.makedirs(log_dir, exist_ok=True)
    with open(commands_file, "w") as f:
        f.write("".join(shlex.join(job.argv) + "\n" for job in jobs))
    if script_text is not None:
        script_path = os.path.join(log_dir, f"{slug(args.job_name)}.sbatch")
        with open(script_path, "w") as f:
            f.write(script_text)
        print(f"{header}; commands: {commands_file}; Slurm script: {script_path}; logs: {log_dir}")
        if args.no_submit:
            print(script_text)
            return 0
        if shutil.which("sbatch") is None:
            print("error: sbatch not found on this machine; use --no-submit to only write the script", file=sys.stderr)
            return 2
        out = subprocess.run(["sbatch", os.path.abspath(script_path)], capture_output=True, text=True)
        print(out.stdout.strip() or out.stderr.strip())
        return out.returncode

    print(f"{header}; {args.workers} worker(s); logs in {log_dir}", flush=True)
    t0 = time.time()
    failed, interrupted = run_local(jobs, args.workers, cores, log_dir, script_stem)
    ok = len(jobs) - len(failed) - len(interrupted)
    print(f"{ok}/{len(jobs)} run(s) succeeded in {time.time() - t0:.1f}s")
    if failed:
        print(f"{len(failed)} failed run(s):", file=sys.stderr)
        for job, rc in failed:
            print(f"  rc={rc}  {job.log_path}\n         {shlex.join(job.argv)}", file=sys.stderr)
    if interrupted:
        print(f"{len(interrupted)} run(s) interrupted or not started; rerun with --skip-finished", file=sys.stderr)
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
