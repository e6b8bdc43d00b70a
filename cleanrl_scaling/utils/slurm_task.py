"""One array task of a launcher Slurm job: run line SLURM_ARRAY_TASK_ID + 1 of the commands file, and carry on by
itself after a time limit, a preemption, `scontrol requeue` or a lost node. The bundled templates end with

    exec PYTHON -m cleanrl_scaling.utils.slurm_task COMMANDS_FILE [srun OPTIONS]   (srun: the multi-node template)

- Time limit. Slurm does not requeue a job at its time limit, so the templates ask it for SIGUSR1 `--signal-grace`
  seconds before the limit, sent to this process only (`#SBATCH --signal=B:USR1@N`). This process then sends SIGTERM
  to the run (every process of an srun step), which finishes its update, checkpoints and exits 143; then it requeues
  its own array task (`scontrol requeue`).
- Preemption, `scontrol requeue`, a lost node: Slurm requeues the task itself (`#SBATCH --requeue`); it sends SIGTERM
  to every process of the job, so the run checkpoints unaided (a second SIGTERM from here would stop it at once).
- A requeued task (SLURM_RESTART_COUNT > 0) runs its line as the launcher's --skip-finished --resume-unfinished would:
  not at all if its grid point has a finished run in --runs-dir, else from the point's newest checkpoint, else anew.
- scancel: the run checkpoints and the task ends; `--resume-unfinished` (a figure script's RESUME=1) continues it.
docs/cluster.md says what happens when, and what the tests check on a real Slurm.
"""
import os
import shlex
import signal
import socket
import subprocess
import sys
from typing import Optional

from cleanrl_scaling.utils.launcher import Job, resume_from_checkpoints, run_matches
from cleanrl_scaling.utils.rundirs import finished_configs, parse_flags

# the training scripts' exit code after the checkpoint that SIGTERM asks for (docs/run_directory.md)
INTERRUPTED = 128 + signal.SIGTERM


def read_commands(commands_file: str) -> list:
    with open(commands_file) as f:
        return f.read().splitlines()


def without_resume(argv: list) -> list:
    """argv without its --resume PATH (a line written by --resume-unfinished names the checkpoint it started from)."""
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token == "--resume":
            skip = True
        elif not token.startswith("--resume="):
            out.append(token)
    return out


def restart_command(argv: list) -> Optional[list]:
    """The command of a requeued task: None when its grid point finished meanwhile (it never runs twice), else the
    point's own flags plus --resume of its newest checkpoint, else (no checkpoint yet) the line as it is."""
    argv = without_resume(argv)
    job = Job(0, argv, parse_flags(argv[2:]), "")
    runs_dir = str(job.flags.get("runs_dir", "runs"))
    script_stem = os.path.splitext(os.path.basename(argv[1]))[0]
    finished = finished_configs(runs_dir) if os.path.isdir(runs_dir) else []
    if any(run_matches(job, config, script_stem) for config in finished):
        return None
    resume_from_checkpoints([job], runs_dir, script_stem)
    return job.argv


def newest_checkpoint(argv: list) -> Optional[tuple]:
    """(path, modification time) of the newest checkpoint a restart would continue from; None if there is none."""
    command = restart_command(argv) or []
    if "--resume" not in command:
        return None
    path = command[command.index("--resume") + 1]
    return path, os.stat(path).st_mtime_ns


def this_task() -> str:
    """The Slurm id of this array task alone (ARRAYID_TASK): the bare job id of one task can be the whole array's."""
    array_id, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array_id}_{task}" if array_id and task else os.environ["SLURM_JOB_ID"]


def say(text: str) -> None:
    print(f"slurm_task: {text}", flush=True)


class Task:
    """The run as a child process, and what Slurm's signals mean for it."""

    def __init__(self, argv: list, launcher: list):
        self.argv, self.launcher = argv, launcher
        self.in_srun_step = bool(launcher) and os.path.basename(launcher[0]) == "srun"
        self.time_limit_near = False
        self.checkpoint_at_warning = None
        self.run = None

    def listen(self) -> None:
        """From the task's first moment: Slurm's SIGUSR1 would otherwise end this process, and with it the task."""
        signal.signal(signal.SIGUSR1, self.stop_for_the_time_limit)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.slurm_stops_the_run)

    def start(self) -> None:
        self.run = subprocess.Popen(self.launcher + self.argv)

    def stop_for_the_time_limit(self, signum, frame) -> None:
        """Slurm's warning (--signal=B:USR1): SIGTERM to the run, which checkpoints and stops; the task is requeued
        once the run has stopped."""
        if self.time_limit_near or self.run is None or self.run.poll() is not None:
            return  # warned already, or no run (yet, or any more) to stop
        self.time_limit_near = True
        self.checkpoint_at_warning = newest_checkpoint(self.argv)
        say("the time limit is near (Slurm's SIGUSR1): SIGTERM to the run, which checkpoints and stops; then requeue")
        if self.in_srun_step:  # the task's steps, not its batch step: srun itself would SIGKILL its tasks on SIGTERM
            subprocess.run(["scancel", "--signal=TERM", this_task()], check=False)
        else:
            self.run.send_signal(signal.SIGTERM)

    def slurm_stops_the_run(self, signum, frame) -> None:
        """scancel, preemption or a requeue: Slurm signals every process of the job, the run too."""
        if self.run is not None and self.run.poll() is None:
            say(f"received {signal.Signals(signum).name}: the run, signalled too, checkpoints and stops")

    def wait(self) -> int:
        rc = self.run.wait()
        return 128 - rc if rc < 0 else rc  # killed by a signal: the shell's 128 + signal

    def requeue(self) -> int:
        """Put this array task back in the queue: its next start continues the run from the checkpoint just written.
        Not without such a checkpoint (a run stopped before it could write one): the next start would get no further."""
        if newest_checkpoint(self.argv) in (None, self.checkpoint_at_warning):
            say("the run wrote no checkpoint after the warning: not requeued (lower --signal-grace or raise --time)")
            return INTERRUPTED
        done = subprocess.run(["scontrol", "requeue", this_task()], capture_output=True, text=True)
        if done.returncode != 0:
            say(f"scontrol requeue {this_task()} failed ({(done.stderr or done.stdout).strip()}); "
                "--resume-unfinished (RESUME=1) continues the run from its checkpoint")
            return INTERRUPTED
        say(f"requeued {this_task()}: its next start continues the run from its checkpoint")
        return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: python -m cleanrl_scaling.utils.slurm_task COMMANDS_FILE [LAUNCHER...]", file=sys.stderr)
        return 2
    commands_file, launcher = argv[0], argv[1:]
    index, lines = int(os.environ["SLURM_ARRAY_TASK_ID"]), read_commands(commands_file)
    command = shlex.split(lines[index])
    task = Task(command, launcher)
    task.listen()
    restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    where = f"task {index} of {len(lines)} on {socket.gethostname()}" + (f", start {restarts + 1}" if restarts else "")
    if restarts:
        task.argv = restart_command(command)
        if task.argv is None:
            say(f"{where}: its grid point has a finished run in its --runs-dir; nothing to do")
            return 0
    say(f"{where}: {shlex.join(task.argv)}")
    task.start()
    rc = task.wait()
    return task.requeue() if task.time_limit_near and rc == INTERRUPTED else rc


if __name__ == "__main__":
    sys.exit(main())
