"""cleanrl_scaling/utils/slurm_task.py without Slurm: what an array task does with Slurm's signals (a time-limit warning
stops the run once and requeues the task; scancel or preemption stops it once and does not), and what a requeued task
runs (its point's newest checkpoint, or nothing once the point has finished). Slurm's commands are fakes on PATH that
log their arguments; tests/test_slurm.py runs the same on a real Slurm."""
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from cleanrl_scaling.utils import slurm_task

# A training script as the scripts behave under signals (docs/run_directory.md): config.json with its argv, a
# checkpoint, and on SIGTERM a last checkpoint, summary "interrupted", exit 143. It logs every SIGTERM it gets.
FAKE_RUN = """import json, os, signal, sys, time
args = sys.argv[1:]
runs_dir = args[args.index("--runs-dir") + 1]
resume = args[args.index("--resume") + 1] if "--resume" in args else None
run_dir = os.path.dirname(os.path.dirname(resume)) if resume else os.path.join(runs_dir, "run%d" % time.time_ns())
os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
json.dump({"script": "fake_train", "argv": args}, open(os.path.join(run_dir, "config.json"), "w"))
log = open(os.environ["RUN_LOG"], "a", buffering=1)
log.write("start " + " ".join(args) + "\\n")

def checkpoint():
    if "--no-checkpoint" not in args:
        tmp = os.path.join(run_dir, "checkpoints", "tmp")
        open(tmp, "w").write(str(time.time_ns()))
        os.replace(tmp, os.path.join(run_dir, "checkpoints", "latest.ckpt"))

def stop(signum, frame):
    log.write("SIGTERM\\n")
    stop.count = getattr(stop, "count", 0) + 1
    if stop.count > 1:
        sys.exit(137)

signal.signal(signal.SIGTERM, stop)
checkpoint()
open(os.environ["RUN_PID"], "w").write(str(os.getpid()))
deadline = time.time() + 60
while time.time() < deadline and not getattr(stop, "count", 0) and "--finish" not in args:
    time.sleep(0.05)
if getattr(stop, "count", 0):
    time.sleep(0.5)  # the rest of the update: a second SIGTERM now would be logged
    checkpoint()
    json.dump({"status": "interrupted"}, open(os.path.join(run_dir, "summary.json"), "w"))
    sys.exit(143)
json.dump({"status": "finished"}, open(os.path.join(run_dir, "summary.json"), "w"))
"""

# scancel --signal=TERM signals the run's srun step: here, the run itself
FAKES = {
    "scontrol": '#!/bin/bash\necho "scontrol $*" >> "$SLURM_LOG"\n',
    "scancel": '#!/bin/bash\necho "scancel $*" >> "$SLURM_LOG"\nkill -TERM "$(cat "$RUN_PID")"\n',
    "srun": '#!/bin/bash\necho "srun $*" >> "$SLURM_LOG"\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n',
}


@pytest.fixture
def task(tmp_path):
    """A one-line commands file for fake_train.py and the environment of its array task 0 (array job 77)."""
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_RUN)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in FAKES.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    runs = tmp_path / "runs"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_ARRAY_JOB_ID="77", SLURM_ARRAY_TASK_ID="0",
               SLURM_JOB_ID="79", RUN_LOG=str(tmp_path / "run.log"), RUN_PID=str(tmp_path / "run.pid"),
               SLURM_LOG=str(tmp_path / "slurm.log"), PYTHONPATH=os.getcwd())
    env.pop("SLURM_RESTART_COUNT", None)

    class Task:
        def __init__(self):
            self.tmp, self.runs, self.env = tmp_path, runs, env

        def line(self, *flags) -> list:
            return [sys.executable, str(script), "--seed", "1", *flags, "--runs-dir", str(runs)]

        def start(self, line: list, launcher=(), **env_extra):
            (tmp_path / "commands.txt").write_text(shlex.join(line) + "\n")
            return subprocess.Popen([sys.executable, "-m", "cleanrl_scaling.utils.slurm_task",
                                     str(tmp_path / "commands.txt"), *launcher], env=dict(env, **env_extra),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def wait_for_run(self):
            deadline = time.time() + 30
            while not (tmp_path / "run.pid").exists() and time.time() < deadline:
                time.sleep(0.05)
            return int((tmp_path / "run.pid").read_text())

        def log(self, name: str) -> list:
            path = tmp_path / name
            return path.read_text().splitlines() if path.exists() else []
    return Task()


@pytest.mark.parametrize("launcher", [(), ("srun", "--nodes=2", "--ntasks-per-node=1")])
def test_time_limit_warning_stops_the_run_once_and_requeues_the_task(task, launcher):
    """SIGUSR1 (#SBATCH --signal=B:USR1@N) to the task: the run gets one SIGTERM (from the task itself, or through
    scancel of the task's steps when srun runs it: srun would SIGKILL its tasks on a SIGTERM of its own), checkpoints
    and exits 143; then the task requeues itself by its own id, 77_0, never the array's."""
    proc = task.start(task.line(), launcher)
    task.wait_for_run()
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert task.log("run.log").count("SIGTERM") == 1
    calls = task.log("slurm.log")
    assert calls[-1] == "scontrol requeue 77_0", calls
    assert ("scancel --signal=TERM 77_0" in calls) == bool(launcher)
    summary, = [json.load(open(p)) for p in task.runs.glob("*/summary.json")]
    assert summary["status"] == "interrupted" and "requeued 77_0" in out


def test_scancel_or_preemption_stops_the_run_once_and_does_not_requeue(task):
    """Slurm's SIGTERM reaches every process of the job: the task does not send the run a second one (which would
    stop it before its checkpoint), and it does not requeue (Slurm requeues a preempted task itself)."""
    proc = task.start(task.line())
    pid = task.wait_for_run()
    proc.send_signal(signal.SIGTERM)
    os.kill(pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    assert task.log("run.log").count("SIGTERM") == 1 and task.log("slurm.log") == []


def test_no_requeue_when_the_run_wrote_no_checkpoint_after_the_warning(task):
    """A run stopped before it could checkpoint would start again from where it was: the task ends instead of
    requeueing itself forever."""
    proc = task.start(task.line("--no-checkpoint"))
    task.wait_for_run()
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143 and task.log("slurm.log") == [] and "not requeued" in out, out


def test_a_requeued_task_continues_its_point_from_the_newest_checkpoint(task):
    """SLURM_RESTART_COUNT > 0: the line runs with --resume of its grid point's newest checkpoint (a --resume already
    in the line, from RESUME=1, is replaced), in the run's old directory; other grid points' runs are not taken."""
    first = task.start(task.line())
    task.wait_for_run()
    first.send_signal(signal.SIGUSR1)
    first.communicate(timeout=60)
    (old_dir,) = task.runs.glob("run*")
    other_seed = task.line()
    other_seed[other_seed.index("--seed") + 1] = "2"
    (task.tmp / "run.pid").unlink()
    other = task.start(other_seed)  # a newer checkpoint, of another grid point
    task.wait_for_run()
    other.send_signal(signal.SIGUSR1)
    other.communicate(timeout=60)
    assert len(list(task.runs.glob("run*"))) == 2

    stale = task.line("--resume", str(task.tmp / "gone.ckpt"))
    (task.tmp / "run.pid").unlink()
    again = task.start(stale, SLURM_RESTART_COUNT="1")
    task.wait_for_run()
    again.send_signal(signal.SIGTERM)
    os.kill(int((task.tmp / "run.pid").read_text()), signal.SIGTERM)
    out, _ = again.communicate(timeout=60)
    started = [line for line in task.log("run.log") if line.startswith("start")]
    assert started[-1].endswith(f"--resume {old_dir / 'checkpoints' / 'latest.ckpt'}"), started
    assert "gone.ckpt" not in started[-1] and "start 2" in out
    assert len(list(task.runs.glob("run*"))) == 2  # no third run directory: the old one goes on


def test_a_requeued_task_whose_point_has_finished_runs_nothing(task):
    done = task.start(task.line("--finish"))
    assert done.wait(timeout=60) == 0
    starts = len(task.log("run.log"))
    again = task.start(task.line("--finish"), SLURM_RESTART_COUNT="2")
    out, _ = again.communicate(timeout=60)
    assert again.returncode == 0 and "nothing to do" in out
    assert len(task.log("run.log")) == starts  # not started a second time


def test_restart_command_without_any_run_is_the_line_itself(tmp_path):
    line = [sys.executable, "train.py", "--seed", "3", "--runs-dir", str(tmp_path / "none")]
    assert slurm_task.restart_command(line) == line
    assert slurm_task.without_resume(line[:2] + ["--resume", "a.ckpt", "--x", "1", "--resume=b.ckpt"]) == \
        line[:2] + ["--x", "1"]
