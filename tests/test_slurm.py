"""A real Slurm of two nodes with 4 simulated GPUs each (munged, slurmctld and two slurmd started here as background
processes, both nodes on this machine) running the figure scripts' Slurm path: an array submitted by SLURM=1 and drawn
by DRAW_ONLY=1; a cancelled array continued from its checkpoints by RESUME=1; a multi-node SFL run whose processes each
get all 4 GPUs of their node; a task requeued by `scontrol requeue`, and a preempted array, continuing from their
checkpoints by themselves; a job at its time limit checkpointing inside its grace and requeueing itself (slow);
sfl_kinetix_jax.py --distributed as 2 Slurm tasks of one run (slow). docs/cluster.md.

The module skips with one line where the daemons are not installed (.ci/run installs Debian's slurmctld, slurmd,
munge and slurm-client) or do not start. No cgroups (they are not available in every container): proctrack/linuxproc
tracks a job's processes by parentage, task/none binds none, memory is not a consumable resource (CR_CPU). The GPUs
are gres on character-device files made here (mknod); where they cannot be made, the GPU test skips. A requeued job
waits about 2 minutes before Slurm starts it again (its credential's lifetime); the tests start it at once instead
(`scontrol update StartTime=now`)."""
import glob
import json
import os
import pathlib
import random
import re
import shutil
import socket
import stat
import subprocess
import sys
import time

import pytest

from inprocess import free_port

REPO = pathlib.Path(__file__).resolve().parents[1]
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "srun")


def memory_mb() -> int:
    """Most of this machine's memory, in MB (slurmd refuses a node configured with more than it has)."""
    with open("/proc/meminfo") as f:
        total_kb = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    return int(total_kb / 1024 * 0.9)


NODE_GPUS = 4


def slurm_conf(root: pathlib.Path, nodes: list, cpus: int, gpus: bool) -> str:
    """Two nodes on this machine, each its own slurmd (slurmd -N NAME) on its own port; the first one is named after
    the machine, so that JAX's coordinator address (the step's first node) resolves. Two partitions on both nodes:
    jobs in `urgent` preempt (requeue) jobs in `debug`."""
    gres = f" Gres=gpu:{NODE_GPUS}" if gpus else ""
    node_lines = "\n".join(f"NodeName={name} NodeAddr=127.0.0.1 Port={free_port()} CPUs={cpus} "
                           f"RealMemory={memory_mb()}{gres} State=UNKNOWN" for name in nodes)
    # job ids from a random start: JAX's coordinator port follows the job id, and two test clusters on one machine
    # would otherwise both start job 1 on port 61441
    return f"""ClusterName=cleanrltest
FirstJobId={random.randint(1000, 60000)}
SlurmctldHost={nodes[0]}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.%n.log
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
GresTypes=gpu
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
{node_lines}
PartitionName=debug Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes={','.join(nodes)} MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
"""


def make_gpu_files(root: pathlib.Path) -> bool:
    """Character-device files for gres (Slurm checks the type, never opens them); False where mknod is not allowed."""
    (root / "dev").mkdir()
    try:
        for i in range(NODE_GPUS):
            os.mknod(root / "dev" / f"nvidia{i}", 0o600 | stat.S_IFCHR, os.makedev(195, i))
    except OSError:
        return False
    (root / "gres.conf").write_text(f"Name=gpu File={root}/dev/nvidia[0-{NODE_GPUS - 1}]\n")
    return True


def node_states() -> dict:
    out = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N %T"], capture_output=True, text=True,
                         timeout=30)
    return dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)


def last_line(path: pathlib.Path) -> str:
    lines = path.read_text().strip().splitlines() if path.exists() else []
    return lines[-1] if lines else "(no output)"


class Cluster:
    def __init__(self, root: pathlib.Path, nodes: list, gpus: bool):
        self.root, self.nodes, self.gpus = root, nodes, gpus


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """Start munged, slurmctld and a slurmd per node in a temporary directory; yield the cluster; stop them (and every
    job) after."""
    missing = [b for b in DAEMONS + CLIENTS if shutil.which(b) is None]
    if missing:
        pytest.skip(f"no Slurm here (missing {' '.join(missing)}; apt-get install slurmctld slurmd munge "
                    "slurm-client)")
    if os.geteuid() != 0:
        pytest.skip("the test Slurm runs its daemons as root; run as root to test it")
    root = tmp_path_factory.mktemp("slurm")
    host = socket.gethostname().split(".")[0]
    nodes = [host, f"{host}-b"]
    for sub in ["state"] + [f"spool/{name}" for name in nodes]:
        (root / sub).mkdir(parents=True)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    gpus = make_gpu_files(root)
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, nodes, len(os.sched_getaffinity(0)), gpus))
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
        for name in nodes:
            start(f"slurmd_{name}", ["slurmd", "-D", "-f", str(conf), "-N", name])
        deadline = time.time() + 60
        while time.time() < deadline and set(node_states().values()) != {"idle"}:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.5)
        if len(node_states()) != len(nodes) or set(node_states().values()) != {"idle"}:
            logs = " | ".join(f"{n}: {last_line(root / f'{n}.out')}" for n in ["munged", "slurmctld"] +
                              [f"slurmd_{name}" for name in nodes])
            pytest.skip(f"the test Slurm did not start (node states {node_states()}): {logs[-300:]}")
        yield Cluster(root, nodes, gpus)
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
KNOBS = dict(SLURM_PARTITION="gpu", SLURM_GPUS_PER_RUN=2, SLURM_CPUS=8, SLURM_TIME="1-00:00:00", SLURM_MEM="48G",
             SLURM_GRACE=120, MAX_PARALLEL=7, SLURM_EXTRA="--account=abc; --qos=high")
KNOB_LINES = ["#SBATCH --partition=gpu", "#SBATCH --gres=gpu:2", "#SBATCH --cpus-per-task=8",
              "#SBATCH --time=1-00:00:00", "#SBATCH --mem=48G", "#SBATCH --signal=B:USR1@120", "#SBATCH --requeue",
              "#SBATCH --account=abc", "#SBATCH --qos=high"]
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
    """B26 Fig. 11 under SLURM=1: 2048 and 8192 one array of single-node runs with SLURM_GPUS_PER_RUN GPUs; 65536 and
    1m one array each, of SFL_NODES_* nodes with SFL_GPUS_PER_NODE GPUs each (B26 App. D: 4) and one --distributed
    process per node, which srun starts with the array's CPUs."""
    for per_node, knobs in ((4, {}), (8, dict(SFL_GPUS_PER_NODE=8))):
        out = figure_script("beukman2026_fig11.sh", DRY_RUN=1, SLURM=1, RUNS_DIR=tmp_path, SEEDS=1, SIZES="s",
                            SFL_NODES_65536=2, SFL_NODES_1M=16, SLURM_GPUS_PER_RUN=1, SLURM_CPUS=6, **knobs)
        assert out.returncode == 0, out.stderr
        scripts = out.stdout.split("# Slurm array script")[1:]
        arrays = {re.search(r"--job-name=(\S+)", s).group(1): s for s in scripts}
        assert {k: re.findall(r"#SBATCH --gres=gpu:(\d+)", s) for k, s in arrays.items()} == {
            "beukman2026_fig11_65536": [str(per_node)], "beukman2026_fig11_1m": [str(per_node)],
            "beukman2026_fig11": ["1"]}
        assert all("srun --kill-on-bad-exit=1 --nodes=" in s and "--cpus-per-task=6\n" in s
                   for k, s in arrays.items() if k != "beukman2026_fig11")
    nodes = {re.search(r"--job-name=(\S+)", s).group(1): re.search(r"--nodes=(\d+)", s) for s in scripts}
    assert {k: v and v.group(1) for k, v in nodes.items()} == {
        "beukman2026_fig11_65536": "2", "beukman2026_fig11_1m": "16", "beukman2026_fig11": None}
    runs = [line for line in out.stdout.splitlines() if "sfl_kinetix_jax.py" in line and not line.startswith("#")]
    large = [line for line in runs if re.search(r"--preset (65536|1m)", line)]
    assert len(runs) == 4 and len(large) == 2 and all("--distributed" in line for line in large)
    assert all("--distributed" not in line for line in runs if line not in large)
    local = figure_script("beukman2026_fig11.sh", DRY_RUN=1, RUNS_DIR=tmp_path, SEEDS=1, SIZES="s")
    assert local.returncode == 0 and "--distributed" not in local.stdout and local.stdout.count("# Slurm") == 0


def test_slurm_gpus_is_refused_because_srun_would_read_it(tmp_path):
    """sbatch hands the submitting environment to the job, and srun reads SLURM_GPUS as --gpus for the whole step
    (on 2 nodes x 4 GPUs, SLURM_GPUS=4 gave one node 3 GPUs and the other 1): the figure scripts refuse it in one
    line that names the knob to use."""
    out = figure_script("beukman2026_fig11.sh", DRY_RUN=1, SLURM=1, RUNS_DIR=tmp_path, SEEDS=1, SIZES="s",
                        PRESETS="65536", SLURM_GPUS=4)
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(err) == 1 and "SLURM_GPUS_PER_RUN=4" in err[0], out.stderr
    assert "# Slurm" not in out.stdout
    bad = figure_script("beukman2026_fig1b.sh", DRY_RUN=1, SLURM=1, RUNS_DIR=tmp_path, SLURM_GRACE="5m")
    assert bad.returncode == 2 and "SLURM_GRACE=5m" in bad.stderr


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


@pytest.mark.slow  # two arrays of three MuJoCo runs, one at a time (about a minute); the launcher's --resume-unfinished
def test_cancelled_array_continues_from_its_checkpoints_with_resume(slurm, tmp_path):  # is tested in test_launcher.py
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


# ---------------------------------------------------------------------------------------------------------
# Two nodes x 4 GPUs: what each process of a multi-node SFL run is given
# ---------------------------------------------------------------------------------------------------------
# Put on PYTHONPATH for one job: a process started as `sfl_kinetix_jax.py ... --distributed` (the run's command in
# every process of its srun step) calls the script's own init_distributed, prints what it was given and exits, instead
# of training (minutes of compiles). JAX's CUDA client opens the GPUs CUDA_VISIBLE_DEVICES shows, all of them or
# those that jax_cuda_visible_devices names (jax/_src/xla_bridge.py).
PROBE = """import os, sys
if sys.argv and sys.argv[0].endswith("sfl_kinetix_jax.py") and "--distributed" in sys.argv:
    import importlib.util, json
    spec = importlib.util.spec_from_file_location("sfl_probe", sys.argv[0])
    sfl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sfl)
    sfl.init_distributed()
    import jax
    from jax._src import xla_bridge
    chosen = xla_bridge.CUDA_VISIBLE_DEVICES.value
    cuda = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    gpus = len(cuda) if chosen == "all" else len([i for i in chosen.split(",") if int(i) < len(cuda)])
    print("PROBE " + json.dumps({"node": os.environ.get("SLURMD_NODENAME"), "rank": jax.process_index(),
                                 "processes": jax.process_count(), "cuda_visible_devices": ",".join(cuda),
                                 "jax_cuda_visible_devices": chosen, "gpus": gpus,
                                 "srun_gpus": os.environ.get("SLURM_GPUS"),
                                 "knob": os.environ.get("SLURM_GPUS_PER_RUN"),
                                 "cpus_per_task": os.environ.get("SLURM_CPUS_PER_TASK")}), flush=True)
    jax.distributed.shutdown()
    os._exit(0)
"""


def task_log(runs: pathlib.Path, job: str, index: int) -> str:
    (path,) = glob.glob(str(runs / "_launcher" / "*" / f"*_{job}_{index}.log"))
    return open(path).read()


def test_multinode_sfl_processes_each_get_every_gpu_of_their_node(slurm, tmp_path):
    """B26 Fig. 11's 65536 preset under SLURM=1 on 2 nodes x 4 GPUs, as a user submits it (SLURM_GPUS_PER_RUN set for
    the single-node runs, SFL_GPUS_PER_NODE=4 by default): inside the step, each of the 2 processes (one per node) sees
    GPUs 0-3 of its node, and after the script's init_distributed JAX keeps all 4 (JAX's Slurm default would keep
    GPU SLURM_LOCALID only); the GPU knob reaches the step without srun reading it as a GPU request."""
    if not slurm.gpus:
        pytest.skip("no simulated GPUs: mknod is not allowed here")
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE)
    runs = tmp_path / "runs"
    sub = figure_script("beukman2026_fig11.sh", SLURM=1, RUNS_DIR=runs, SEEDS=1, SIZES="s", PRESETS="65536",
                        SFL_NODES_65536=2, SLURM_GPUS_PER_RUN=3, SLURM_CPUS=1, SLURM_MEM="1G", SLURM_TIME="00:10:00",
                        PYTHONPATH=f"{probe}:{REPO}")
    assert sub.returncode == 0, sub.stdout + sub.stderr
    (job,) = submitted(sub.stdout)
    wait_for_jobs([job], timeout=300)
    (log,) = glob.glob(str(runs / "_launcher" / "*" / f"beukman2026_fig11_65536_{job}_0.log"))
    text = open(log).read()
    assert array_tasks(job) == {"0": "COMPLETED"}, text[-3000:]
    seen = sorted((json.loads(line.split("PROBE ", 1)[1]) for line in text.splitlines() if "PROBE " in line),
                  key=lambda p: p["rank"])
    assert [(p["node"], p["rank"], p["processes"]) for p in seen] == [(slurm.nodes[0], 0, 2), (slurm.nodes[1], 1, 2)]
    for p in seen:
        assert p["cuda_visible_devices"] == "0,1,2,3" and p["gpus"] == NODE_GPUS, p
        assert p["srun_gpus"] is None and p["knob"] == "3" and p["cpus_per_task"] == "1", p


def test_one_process_per_gpu_when_slurm_binds_one_gpu_to_each_task(slurm, tmp_path):
    """The other layout (docs/cluster.md): --tasks-per-node 2 --gpus-per-run 2 with #SBATCH --gpu-bind=single:1 makes
    Slurm show each process one GPU of its node, and the process keeps exactly that one."""
    if not slurm.gpus:
        pytest.skip("no simulated GPUs: mknod is not allowed here")
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE)
    runs = tmp_path / "runs"
    sub = subprocess.run([sys.executable, "-m", "cleanrl_scaling.utils.launcher", "cleanrl_scaling/sfl_kinetix_jax.py",
                          "--seeds", "1", "--runs-dir", str(runs), "--job-name", "per_gpu", "--slurm-template",
                          "--nodes", "2", "--tasks-per-node", "2", "--gpus-per-run", "2", "--mem", "1G",
                          "--time", "00:10:00", "--sbatch=--gpu-bind=single:1", "--", "--distributed"],
                         cwd=REPO, capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(probe)))
    assert sub.returncode == 0, sub.stdout + sub.stderr
    (job,) = submitted(sub.stdout)
    wait_for_jobs([job], timeout=300)
    text = task_log(runs, job, 0)
    assert array_tasks(job) == {"0": "COMPLETED"}, text[-3000:]
    seen = [json.loads(line.split("PROBE ", 1)[1]) for line in text.splitlines() if "PROBE " in line]
    assert sorted(p["rank"] for p in seen) == [0, 1, 2, 3] and all(p["processes"] == 4 for p in seen)
    assert all(p["gpus"] == 1 for p in seen), seen
    assert sorted((p["node"], p["cuda_visible_devices"]) for p in seen) == \
        sorted((node, gpu) for node in slurm.nodes for gpu in "01")


# ---------------------------------------------------------------------------------------------------------
# Carrying on by itself: requeue, preemption, time limit
# ---------------------------------------------------------------------------------------------------------
def mujoco_array(runs: pathlib.Path, job_name: str, seeds: list, total: int, *launcher_flags) -> str:
    """Submit an array of tiny MuJoCo runs (16 envs x 32 steps = 512 steps per update, a checkpoint after each), one
    per seed, through the launcher's bundled template; returns the array's job id."""
    sub = subprocess.run([sys.executable, "-m", "cleanrl_scaling.utils.launcher", "cleanrl_scaling/ppo_continuous_mujoco.py",
                          "--env-ids", "Hopper-v4", "--seeds", *map(str, seeds), "--runs-dir", str(runs),
                          "--job-name", job_name, "--slurm-template", "--mem", "2G", *launcher_flags, "--",
                          "--num-envs", "16", "--num-steps", "32", "--num-minibatches", "4",
                          "--total-timesteps", str(total), "--checkpoint-every", "1", "--no-compile"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    (job,) = submitted(sub.stdout)
    return job


def job_field(task: str, name: str) -> str:
    out = subprocess.run(["scontrol", "--oneliner", "show", "job", task], capture_output=True, text=True, timeout=30)
    found = re.search(rf"\b{name}=(\S+)", out.stdout)
    return found.group(1) if found else ""


def start_requeued_now(tasks: list, timeout: float) -> None:
    """Wait until each task is back in the queue after a requeue (Restarts > 0, pending), then let it start at once
    instead of after Slurm's delay for requeued jobs."""
    def requeued():
        return all(int(job_field(t, "Restarts") or 0) > 0 and job_field(t, "JobState") == "PENDING" for t in tasks)
    wait_for(requeued, timeout, f"{tasks} requeued")
    # Not in the second of the requeue: slurmd revoked the old start's credential then, at one-second resolution, and
    # a start in that same second is refused ("Killing non-startable batch JobId=...: Job credential revoked" in
    # slurmctld.log, the task then ends with exit 1 and never continues; seen once in the slow set, 2026-12-01)
    time.sleep(2.0)
    for task in tasks:
        subprocess.run(["scontrol", "update", f"JobId={task}", "StartTime=now"], check=True, timeout=30)


def test_requeued_task_continues_its_run_from_the_checkpoint_to_the_end(slurm, tmp_path):
    """`scontrol requeue` of a running task (as an admin or a node failure would have Slurm do): the run checkpoints
    on Slurm's SIGTERM, and the task's next start continues it from that checkpoint in its old run directory
    to the end; no second run directory, nothing started from step 0."""
    runs = tmp_path / "runs"
    job = mujoco_array(runs, "requeue", [1], 512 * 6, "--time", "00:10:00")
    wait_for(lambda: glob.glob(str(runs / "*" / "checkpoints" / "latest.ckpt")), 300, "the first checkpoint")
    subprocess.run(["scontrol", "requeue", f"{job}_0"], check=True, timeout=30)
    start_requeued_now([f"{job}_0"], timeout=180)
    wait_for_jobs([job], timeout=600)
    log = task_log(runs, job, 0)
    assert array_tasks(job) == {"0": "COMPLETED"}, log[-3000:]
    assert resumed_from(log) > 0 and "start 2" in log, log[-3000:]
    done = summaries(runs)
    assert len(done) == 1 and [(s["status"], s["iteration"]) for s in done.values()] == [("finished", 6)]


def test_preempted_array_finishes_every_point_exactly_once(slurm, tmp_path):
    """An array of 3 runs, all running, preempted by a job of the higher-priority partition that takes every CPU of
    both nodes: Slurm signals and requeues the 3 tasks; once the urgent job is done each continues its run from its
    checkpoint. Every point ends with one finished run, in the directory it started in."""
    runs = tmp_path / "runs"
    job = mujoco_array(runs, "preempted", [1, 2, 3], 512 * 12, "--time", "00:10:00")
    wait_for(lambda: len(glob.glob(str(runs / "*" / "checkpoints" / "latest.ckpt"))) == 3, 400,
             "a checkpoint of each of the 3 runs")
    cpus = len(os.sched_getaffinity(0))
    urgent = subprocess.run(["sbatch", "--parsable", "--partition=urgent", f"--nodes={len(slurm.nodes)}",
                             f"--ntasks-per-node={cpus}", f"--output={tmp_path}/urgent.log", "--wrap", "sleep 2"],
                            capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    tasks = [f"{job}_{i}" for i in range(3)]
    start_requeued_now(tasks, timeout=180)
    wait_for_jobs([urgent, job], timeout=900)
    assert array_tasks(job) == {str(i): "COMPLETED" for i in range(3)}, array_tasks(job)
    assert "DUE TO PREEMPTION" in task_log(runs, job, 0)
    for i in range(3):
        log = task_log(runs, job, i)
        assert resumed_from(log) > 0, log[-3000:]
    done = summaries(runs)
    assert len(done) == 3 and all(s["status"] == "finished" and s["iteration"] == 12 for s in done.values()), done
    seeds = sorted(json.load(open(runs / name / "config.json"))["args"]["seed"] for name in done)
    assert seeds == [1, 2, 3]  # one run per point, none started over beside it


@pytest.mark.slow
def test_job_at_its_time_limit_checkpoints_inside_its_grace_and_requeues_itself(slurm, tmp_path):
    """A run longer than its 2-minute limit, with a 30 s grace: Slurm's warning (30-90 s before the limit) makes the
    run checkpoint and the task requeue itself before the limit (never TIMEOUT), and its next start continues from
    that checkpoint (then cancelled: the continuation is what is checked). ~3 minutes."""
    runs = tmp_path / "runs"
    job = mujoco_array(runs, "timelimit", [1], 512 * 5000, "--time", "00:02:00", "--signal-grace", "30")
    task = f"{job}_0"
    start_requeued_now([task], timeout=300)
    assert job_field(task, "JobState") != "TIMEOUT"
    first = task_log(runs, job, 0)
    assert "the time limit is near" in first and f"requeued {task}" in first, first[-3000:]
    ckpt = re.search(r"resume with --resume (\S+)", first).group(1)
    stopped = json.load(open(os.path.join(os.path.dirname(os.path.dirname(ckpt)), "summary.json")))
    assert stopped["status"] == "interrupted" and stopped["iteration"] > 0
    continued = wait_for(lambda: resumed_from(task_log(runs, job, 0)) >= 0 and task_log(runs, job, 0), 300,
                         "the continued run")
    subprocess.run(["scancel", job], check=True, timeout=30)
    assert resumed_from(continued) == stopped["iteration"] and f"--resume {ckpt}" in continued


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


# ---------------------------------------------------------------------------------------------------------
# On a GPU machine: one --distributed process as an srun step starts it keeps every GPU
# ---------------------------------------------------------------------------------------------------------
def jax_gpu_count() -> int:
    """The GPUs JAX sees, asked in a child process (this module does not import JAX); 0 without a CUDA GPU."""
    if shutil.which("nvidia-smi") is None and not os.path.isdir("/proc/driver/nvidia"):
        return 0
    out = subprocess.run([sys.executable, "-c", "import jax; print(len(jax.devices('gpu')))"], capture_output=True,
                         text=True, timeout=600)
    return int(out.stdout.split()[-1]) if out.returncode == 0 and out.stdout.split() else 0


def coordinator_job_id() -> int:
    """A job id whose coordinator port (JAX's Slurm detection: 61440 + id mod 4096) is free on this machine."""
    for job_id in range(1, 4097):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", 61440 + job_id % 4096))
                return job_id
            except OSError:
                continue
    pytest.skip("no free port in 61440-65535 for JAX's coordinator")


@pytest.mark.gpu
def test_distributed_with_one_process_trains_on_every_gpu_of_the_machine(tmp_path):
    """sfl_kinetix_jax.py --distributed as the one process of an srun step on this machine (the step's variables that
    JAX's Slurm detection reads: job id, node list, 1 task, rank 0, local id 0): init_distributed keeps all of the
    machine's GPUs, and a tiny run trains on them (JAX's own choice under Slurm is GPU SLURM_LOCALID alone). On a
    one-GPU machine this is the same path with one GPU. Minutes: the compiles."""
    gpus = jax_gpu_count()
    if not gpus:
        pytest.skip("needs a CUDA GPU that JAX sees")
    sys.path.insert(0, str(REPO / "tests"))
    import test_sfl_kinetix_jax as sfl  # noqa: E402 (JAX only where a GPU is)
    per_device = 1 if 4 % gpus == 0 else gpus  # --num-envs and the filtering batch divide over the devices
    argv = sfl.tiny(4, num_envs=4 * per_device, sfl_filter_batch=4 * per_device,
                    total_timesteps=4 * 4 * per_device * 16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "SLURM_", "CUDA_VISIBLE"))
           or k == "JAX_COMPILATION_CACHE_DIR"}
    env.update(SLURM_JOB_ID=str(coordinator_job_id()), SLURM_STEP_NODELIST="localhost", SLURM_NTASKS="1",
               SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_STEP_NUM_NODES="1", PYTHONPATH=str(REPO))
    run = subprocess.run([sys.executable, sfl.SCRIPT] + argv + ["--distributed", "--runs-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=1800, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    run_dir = sfl.run_dir_of(str(tmp_path))
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert (config["platform"], config["devices"], config["processes"]) == ("gpu", gpus, 1)
    assert json.load(open(os.path.join(run_dir, "summary.json")))["status"] == "finished"
