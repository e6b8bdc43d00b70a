"""A real single-node Slurm (munged, slurmctld, slurmd started here as background processes) running the figure
scripts' Slurm path: an array submitted by SLURM=1 and drawn by DRAW_ONLY=1; a cancelled array continued from its
checkpoints by RESUME=1; a job that hits its time limit continued the same way (slow); sfl_kinetix_jax.py
--distributed as 2 Slurm tasks of one run (slow). docs/cluster.md.

The module skips with one line where the daemons are not installed (.ci/run installs Debian's slurmctld, slurmd,
munge and slurm-client) or do not start. The cluster is one node, this machine, with its CPUs; no cgroups (they are
not available in every container): proctrack/linuxproc tracks a job's processes by parentage, task/none binds none,
memory is not a consumable resource (CR_CPU)."""
import glob
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "srun")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_mb() -> int:
    """Most of this machine's memory, in MB (slurmd refuses a node configured with more than it has)."""
    with open("/proc/meminfo") as f:
        total_kb = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    return int(total_kb / 1024 * 0.9)


def slurm_conf(root: pathlib.Path, host: str, cpus: int) -> str:
    return f"""ClusterName=cleanrltest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=sched_interval=1
ReturnToService=2
KillWait=60
MinJobAge=600
InactiveLimit=0
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb()} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def node_state() -> str:
    out = subprocess.run(["sinfo", "--noheader", "--format=%T"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def last_line(path: pathlib.Path) -> str:
    lines = path.read_text().strip().splitlines() if path.exists() else []
    return lines[-1] if lines else "(no output)"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """Start munged, slurmctld and slurmd in a temporary directory; yield it; stop them (and every job) after."""
    missing = [b for b in DAEMONS + CLIENTS if shutil.which(b) is None]
    if missing:
        pytest.skip(f"no single-node Slurm here (missing {' '.join(missing)}; apt-get install slurmctld slurmd munge "
                    "slurm-client)")
    if os.geteuid() != 0:
        pytest.skip("the single-node Slurm runs its daemons as root; run as root to test it")
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname().split(".")[0]
    cpus = len(os.sched_getaffinity(0))
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, host, cpus))
    old_conf = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)  # every client (and the figure scripts' sbatch/squeue) talks to this cluster
    procs = []

    def start(name, argv):
        log = open(root / f"{name}.out", "w")
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    try:
        start("munged", ["munged", "--foreground", "--force", f"--socket={root}/munge.socket", f"--key-file={key}",
                         f"--pid-file={root}/munged.pid", f"--seed-file={root}/munged.seed",
                         f"--log-file={root}/munged.log"])
        deadline = time.time() + 15
        while not (root / "munge.socket").exists() and time.time() < deadline:
            time.sleep(0.1)
        start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf)])
        start("slurmd", ["slurmd", "-D", "-f", str(conf)])
        deadline = time.time() + 60
        while time.time() < deadline and node_state() != "idle":
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.5)
        if node_state() != "idle":
            logs = " | ".join(f"{n}: {last_line(root / f'{n}.out')}" for n in DAEMONS)
            pytest.skip(f"the single-node Slurm did not start (node state {node_state()!r}): {logs[-300:]}")
        yield root
    finally:
        stop_every_job()  # before the daemons: a job step outlives a stopped slurmd
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        if old_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old_conf


def stop_every_job(timeout: float = 90) -> None:
    """scancel every job of this cluster and wait until they are gone (their runs checkpoint within KillWait)."""
    subprocess.run(["scancel", "--user=root"], capture_output=True, timeout=30)
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run(["squeue", "--noheader"], capture_output=True, text=True, timeout=30)
        if out.returncode != 0 or not out.stdout.strip():
            return
        time.sleep(1)


def figure_script(script: str, **env) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=sys.executable, **{k: str(v) for k, v in env.items()})
    return subprocess.run(["bash", str(REPO / "benchmark" / script)], env=env, capture_output=True, text=True,
                          timeout=600)


def submitted(out: str) -> list:
    return re.findall(r"Submitted batch job (\d+)", out)


def array_tasks(job_id: str) -> dict:
    """{array task id: state} of a job the controller still remembers (MinJobAge)."""
    out = subprocess.run(["scontrol", "--oneliner", "show", "job", job_id], capture_output=True, text=True, timeout=30)
    tasks = {}
    for line in out.stdout.splitlines():
        task, state = re.search(r"ArrayTaskId=(\S+)", line), re.search(r"JobState=(\S+)", line)
        if task and state:
            tasks[task.group(1)] = state.group(1)
    return tasks


def wait_for_jobs(job_ids: list, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run(["squeue", "--noheader", "--array", "--format=%i %T %r", f"--jobs={','.join(job_ids)}"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and not out.stdout.strip():
            return
        time.sleep(1)
    raise AssertionError(f"jobs {job_ids} still queued after {timeout:.0f}s: {out.stdout}")


def wait_for(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def summaries(runs_dir) -> dict:
    return {os.path.basename(os.path.dirname(p)): json.load(open(p))
            for p in glob.glob(os.path.join(runs_dir, "*", "summary.json"))}


# ---------------------------------------------------------------------------------------------------------
# Without Slurm: the knobs reach the job script of every preamble, and DRAW_ONLY launches nothing
# ---------------------------------------------------------------------------------------------------------
KNOBS = dict(SLURM_PARTITION="gpu", SLURM_GPUS=2, SLURM_CPUS=8, SLURM_TIME="1-00:00:00", SLURM_MEM="48G",
             MAX_PARALLEL=7, SLURM_EXTRA="--account=abc; --qos=high")
KNOB_LINES = ["#SBATCH --partition=gpu", "#SBATCH --gres=gpu:2", "#SBATCH --cpus-per-task=8",
              "#SBATCH --time=1-00:00:00", "#SBATCH --mem=48G", "#SBATCH --account=abc", "#SBATCH --qos=high"]
ONE_OF_EACH = {  # one figure script per preamble, with a grid small enough to print in seconds
    "mayor2025_fig1b.sh": dict(GAMES="Pong-v5", SEEDS=1, TOTAL=10 ** 6),
    "beukman2026_fig4.sh": dict(SEEDS=1),
    "mayor2025_fig8_mujoco.sh": dict(ENV_IDS="Hopper-v4", SEEDS=1),
    "beukman2026_fig1b.sh": {},  # the noisy_sgd scripts and the H25 ones source _slurm_common.sh themselves
    "honari2025_nxt.sh": dict(ENV_IDS="Hopper-v4"),
}


@pytest.mark.parametrize("script", sorted(ONE_OF_EACH))
def test_every_preamble_passes_the_slurm_knobs_through(script, tmp_path):
    out = figure_script(script, DRY_RUN=1, SLURM=1, RUNS_DIR=tmp_path, **KNOBS, **ONE_OF_EACH[script])
    assert out.returncode == 0, out.stderr
    for line in KNOB_LINES:
        assert line + "\n" in out.stdout, (script, line)
    assert re.search(r"#SBATCH --array=0-\d+%7\n", out.stdout)
    if script != "beukman2026_fig1b.sh":  # noisy_sgd keeps no checkpoints; the others checkpoint by default
        runs = [line for line in out.stdout.splitlines() if "--runs-dir" in line and not line.startswith("#")]
        assert runs and all("--checkpoint-every" in line for line in runs)
    template = tmp_path / "mine.sh"
    template.write_text("#SBATCH --job-name={job_name}\n#SBATCH --constraint=a100\n{sbatch_options}\n")
    mine = figure_script(script, DRY_RUN=1, SLURM=1, SLURM_TEMPLATE=template, RUNS_DIR=tmp_path, **ONE_OF_EACH[script])
    assert mine.returncode == 0 and "#SBATCH --constraint=a100" in mine.stdout, mine.stderr


def test_the_large_sfl_presets_are_multinode_arrays(tmp_path):
    """B26 Fig. 11 under SLURM=1: 2048 and 8192 one array of single-node runs; 65536 and 1m one array each, of
    SFL_NODES_* nodes with one --distributed process per node."""
    out = figure_script("beukman2026_fig11.sh", DRY_RUN=1, SLURM=1, RUNS_DIR=tmp_path, SEEDS=1, SIZES="s",
                        SFL_NODES_65536=2, SFL_NODES_1M=16, SLURM_GPUS=4)
    assert out.returncode == 0, out.stderr
    scripts = out.stdout.split("# Slurm array script")[1:]
    assert len(scripts) == 3
    nodes = {re.search(r"--job-name=(\S+)", s).group(1): re.search(r"--nodes=(\d+)", s) for s in scripts}
    assert {k: v and v.group(1) for k, v in nodes.items()} == {
        "beukman2026_fig11_65536": "2", "beukman2026_fig11_1m": "16", "beukman2026_fig11": None}
    runs = [line for line in out.stdout.splitlines() if "sfl_kinetix_jax.py" in line and not line.startswith("#")]
    large = [line for line in runs if re.search(r"--preset (65536|1m)", line)]
    assert len(runs) == 4 and len(large) == 2 and all("--distributed" in line for line in large)
    assert all("--distributed" not in line for line in runs if line not in large)
    local = figure_script("beukman2026_fig11.sh", DRY_RUN=1, RUNS_DIR=tmp_path, SEEDS=1, SIZES="s")
    assert local.returncode == 0 and "--distributed" not in local.stdout and local.stdout.count("# Slurm") == 0


FAKE_PYTHON = """#!/bin/bash
echo "$*" >> "$CALLS"
"""


@pytest.mark.parametrize("script", sorted(ONE_OF_EACH))
def test_draw_only_draws_and_launches_nothing(script, tmp_path):
    """DRAW_ONLY=1 (with SLURM=1 still set from the submission) calls the aggregation only, never the launcher."""
    fake, calls = tmp_path / "python", tmp_path / "calls.txt"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = dict(os.environ, PYTHON=str(fake), CALLS=str(calls), DRAW_ONLY="1", SLURM="1", RUNS_DIR=str(tmp_path / "r"),
               **{k: str(v) for k, v in ONE_OF_EACH[script].items()})
    out = subprocess.run(["bash", str(REPO / "benchmark" / script)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    made = calls.read_text().splitlines()
    assert made and not any("utils.launcher" in c for c in made) and any("utils.aggregate" in c for c in made), made


# ---------------------------------------------------------------------------------------------------------
# With the single-node Slurm
# ---------------------------------------------------------------------------------------------------------
def test_figure_grid_runs_as_an_array_and_is_drawn_by_draw_only(slurm, tmp_path):
    """B26 Fig. 1b (noisy_sgd, 4 runs of seconds) through SLURM=1 with every knob; a rerun while the array is queued
    is refused; once it has run, DRAW_ONLY=1 draws the figure from its runs and launches nothing."""
    runs, out_dir = tmp_path / "runs", tmp_path / "figures"
    knobs = dict(RUNS_DIR=runs, OUT_DIR=out_dir, SLURM_PARTITION="debug", SLURM_CPUS=1, SLURM_MEM="1G",
                 SLURM_TIME="00:10:00", MAX_PARALLEL=2, SLURM_EXTRA="--comment=cleanrl-test;--hold")
    sub = figure_script("beukman2026_fig1b.sh", SLURM=1, **knobs)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    (job,) = submitted(sub.stdout)
    (sbatch,) = glob.glob(str(runs / "_launcher" / "*" / "beukman2026_fig1b.sbatch"))
    text = open(sbatch).read()
    for line in ("#SBATCH --partition=debug", "#SBATCH --array=0-3%2", "#SBATCH --cpus-per-task=1",
                 "#SBATCH --mem=1G", "#SBATCH --time=00:10:00", "#SBATCH --comment=cleanrl-test", "#SBATCH --hold"):
        assert line in text, line
    # held in the queue (--hold): a plain rerun would start its runs a second time here; it leaves them out
    again = figure_script("beukman2026_fig1b.sh", **knobs)
    assert "# 0 run(s), 0 skipped as finished, 4 left out as queued or running in Slurm" in again.stdout, again.stdout
    assert len(os.listdir(runs / "_launcher")) == 1 and not summaries(runs)
    subprocess.run(["scontrol", "release", job], check=True, timeout=30)
    wait_for_jobs([job], timeout=240)
    assert array_tasks(job) == {str(i): "COMPLETED" for i in range(4)}
    done = summaries(runs)
    assert len(done) == 20 and all(s["status"] == "finished" for s in done.values())  # 4 step sizes x 5 seeds
    logs = glob.glob(str(runs / "_launcher" / "*" / f"beukman2026_fig1b_{job}_*.log"))
    assert len(logs) == 4  # one log per array task

    draw = figure_script("beukman2026_fig1b.sh", DRAW_ONLY=1, SLURM=1, **knobs)
    assert draw.returncode == 0, draw.stderr
    assert (out_dir / "beukman2026_fig1b.png").stat().st_size > 0
    assert len(os.listdir(runs / "_launcher")) == 1 and not submitted(draw.stdout)  # nothing launched
    assert len(summaries(runs)) == 20


MUJOCO = dict(SCALE="laptop", ENV_IDS="Hopper-v4", SEEDS=1, NUM_ENVS_LIST="64 128", CHECKPOINT_EVERY=1,
              SLURM_CPUS=1, SLURM_MEM="2G")


def resumed_from(log_text: str) -> int:
    found = re.search(r"resuming from iteration (\d+)", log_text)
    return int(found.group(1)) if found else -1


def test_cancelled_array_continues_from_its_checkpoints_with_resume(slurm, tmp_path):
    """M25 Fig. 8 on MuJoCo (3 tiny runs, one at a time): scancel once the first run has written its first
    checkpoint; RESUME=1 SLURM=1 resubmits the 3 points, the cancelled one continuing from its checkpoint in its old
    run directory (iteration > 0), and all finish."""
    runs = tmp_path / "runs"
    env = dict(MUJOCO, RUNS_DIR=runs, TOTAL=12288, SLURM_TIME="00:10:00")  # 6 updates of 64x32, 3 of the others
    sub = figure_script("mayor2025_fig8_mujoco.sh", SLURM=1, MAX_PARALLEL=1, **env)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    (job,) = submitted(sub.stdout)
    ckpt = wait_for(lambda: glob.glob(str(runs / "*" / "checkpoints" / "latest.ckpt")), 300, "the first checkpoint")
    subprocess.run(["scancel", job], check=True, timeout=30)
    wait_for_jobs([job], timeout=120)
    (run_dir,) = {os.path.dirname(os.path.dirname(p)) for p in ckpt}
    # Slurm's SIGTERM makes the run checkpoint at the end of its update and say "interrupted"; on a loaded machine an
    # update can outlast KillWait, and SIGKILL leaves no summary: then the periodic checkpoint is resumed
    summary = os.path.join(run_dir, "summary.json")
    try:
        wait_for(lambda: os.path.exists(summary), 30, "the stopped run's summary")
    except AssertionError:
        pass
    stopped = json.load(open(summary))["iteration"] if os.path.exists(summary) else None
    assert stopped is None or (json.load(open(summary))["status"] == "interrupted" and 0 < stopped < 6)
    assert set(array_tasks(job).values()) == {"CANCELLED"}

    again = figure_script("mayor2025_fig8_mujoco.sh", SLURM=1, RESUME=1, **env)
    assert again.returncode == 0 and "3 run(s), 0 skipped as finished, 1 resumed from checkpoints" in again.stdout, \
        again.stdout + again.stderr
    (job2,) = submitted(again.stdout)
    wait_for_jobs([job2], timeout=600)
    assert set(array_tasks(job2).values()) == {"COMPLETED"}, array_tasks(job2)
    logs = "".join(open(p).read() for p in glob.glob(str(runs / "_launcher" / "*" / f"*_{job2}_*.log")))
    assert resumed_from(logs) > 0 and resumed_from(logs) == (stopped or resumed_from(logs))
    done = summaries(runs)
    assert len(done) == 3 and all(s["status"] == "finished" for s in done.values())  # the resumed one in its old dir
    assert done[os.path.basename(run_dir)]["iteration"] == 6


@pytest.mark.slow
def test_job_at_its_time_limit_is_continued_by_resume(slurm, tmp_path):
    """A run longer than its 1-minute limit: Slurm's SIGTERM at the limit makes it checkpoint (state TIMEOUT);
    RESUME=1 resubmits it from that checkpoint (then cancelled: the continuation is what is checked). ~3 minutes."""
    runs = tmp_path / "runs"
    env = dict(MUJOCO, RUNS_DIR=runs, TOTAL=2048 * 400, MAX_PARALLEL=1, CHECKPOINT_EVERY=1000)
    sub = figure_script("mayor2025_fig8_mujoco.sh", SLURM=1, SLURM_TIME="00:01:00", **env)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    (job,) = submitted(sub.stdout)
    wait_for(lambda: "TIMEOUT" in array_tasks(job).values(), 400, "the time limit")
    subprocess.run(["scancel", job], check=True, timeout=30)  # the tasks not started yet
    wait_for_jobs([job], timeout=120)
    (first_log,) = glob.glob(str(runs / "_launcher" / "*" / f"*_{job}_0.log"))
    ckpt = re.search(r"resume with --resume (\S+)", open(first_log).read()).group(1)  # the timed-out run's
    stopped = json.load(open(os.path.join(os.path.dirname(os.path.dirname(ckpt)), "summary.json")))
    assert stopped["status"] == "interrupted" and stopped["iteration"] > 0
    again = figure_script("mayor2025_fig8_mujoco.sh", SLURM=1, RESUME=1, SLURM_TIME="00:10:00", **env)
    assert again.returncode == 0 and re.search(r"[1-9] resumed from checkpoints", again.stdout), \
        again.stdout + again.stderr
    (job2,) = submitted(again.stdout)

    def resumed_log():
        for path in glob.glob(str(runs / "_launcher" / "*" / f"*_{job2}_*.log")):
            text = open(path).read()
            if f"--resume {ckpt}" in text and resumed_from(text) >= 0:
                return text
    log = wait_for(resumed_log, 300, "the resumed run")
    subprocess.run(["scancel", job2], check=True, timeout=30)
    assert resumed_from(log) == stopped["iteration"] > 0


@pytest.mark.slow
def test_sfl_distributed_as_two_slurm_tasks_gives_the_four_device_result(slurm, tmp_path):
    """sfl_kinetix_jax.py --distributed as one run of 2 Slurm tasks on the one node (the launcher's multi-node
    template, --tasks-per-node 2): jax.distributed finds the coordinator and the ranks in srun's environment alone
    (no JAX_* variables) and the 2 x 2-device run equals the 4-device one-process run, as
    test_sfl_kinetix_jax.py's 2-process test checks. Minutes: Kinetix's compiles (JAX_COMPILATION_CACHE_DIR helps)."""
    sys.path.insert(0, str(REPO / "tests"))
    import test_sfl_kinetix_jax as sfl  # noqa: E402 (JAX only in this slow test)
    argv = sfl.tiny(4, eval_every=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_") or k == "JAX_COMPILATION_CACHE_DIR"}
    reference = tmp_path / "one_process"
    one = subprocess.run([sys.executable, sfl.SCRIPT] + argv + ["--runs-dir", str(reference)], capture_output=True,
                         text=True, timeout=3600, env=dict(env, PYTHONPATH=str(REPO), XLA_FLAGS=os.environ["XLA_FLAGS"]
                                                           + " --xla_force_host_platform_device_count=4"))
    assert one.returncode == 0, one.stderr[-2000:]

    runs = tmp_path / "runs"
    sub = subprocess.run([sys.executable, "-m", "cleanrl_scaling.utils.launcher", sfl.SCRIPT, "--runs-dir", str(runs),
                          "--job-name", "sfl_two_tasks", "--slurm-template", "--tasks-per-node", "2", "--mem", "8G",
                          "--time", "01:00:00", "--"] + argv + ["--distributed"], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env=dict(env, XLA_FLAGS=os.environ["XLA_FLAGS"]
                                                          + " --xla_force_host_platform_device_count=2"))
    assert sub.returncode == 0, sub.stdout + sub.stderr
    (job,) = submitted(sub.stdout)
    wait_for_jobs([job], timeout=3600)
    (log,) = glob.glob(str(runs / "_launcher" / "*" / f"sfl_two_tasks_{job}_0.log"))
    assert array_tasks(job) == {"0": "COMPLETED"}, open(log).read()[-3000:]
    assert "1 node(s) x 2 process(es)" in open(log).read()
    (run_dir,) = [d for d in glob.glob(str(runs / "*")) if not d.endswith("_launcher")]  # only process 0 writes
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert config["devices"] == 4 and config["processes"] == 2
    assert json.load(open(os.path.join(run_dir, "summary.json")))["status"] == "finished"
    sfl.assert_same_early_training(run_dir, sfl.run_dir_of(str(reference)))
