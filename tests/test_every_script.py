"""What every training script promises, tested once over all of them (as tests/test_golden_numerics.py does): a bad
input exits 2 with one line before anything is built (docs/run_directory.md#failure-behaviour), SIGTERM checkpoints
and exits 128+15, and the diagnostics do not change training. What one script alone does stays in its own file.

Runs are in-process (tests/inprocess.py) and eager (--no-compile); a subprocess only where the process boundary is
what is tested: a real signal, and the command line's output without a traceback."""
import contextlib
import dataclasses
import fcntl
import importlib
import json
import os
import pathlib
import pickle
import re
import signal
import subprocess
import sys
import termios
import time
from typing import Callable

import numpy as np
import pytest
import torch

from inprocess import free_port, main_inprocess, pythonpath


@dataclasses.dataclass(frozen=True)
class Script:
    name: str
    tiny: list  # the smallest run of its own tests, eager, without a progress bar
    batch: int  # steps per iteration of `tiny`
    weights: str  # the checkpoint's key of the network's state_dict
    diagnosed: list = dataclasses.field(default_factory=list)  # what its own diagnostics test also switched on
    check_diagnosed: Callable = lambda on, off: None  # and checked on those runs
    check_interrupted: Callable = lambda ckpt: None  # what a SIGTERM checkpoint holds besides the weights


# What one script's runs show besides what every script's do
def check_atari_features(on, off):
    """--save-features-every 2 --features-states 40: M25's coverage features of 40 of the 64 batch states at
    iterations 2 and 4, post-ReLU float16; the run without the flag saves none."""
    saved = sorted((on / "features").glob("iter_*.npz"))
    assert [p.name for p in saved] == ["iter_000002.npz", "iter_000004.npz"] and not (off / "features").exists()
    with np.load(saved[0]) as data:
        assert data["features"].shape == (40, 512) and data["features"].dtype == np.float16
        assert (int(data["iteration"]), int(data["global_step"])) == (2, 128)
        assert np.isfinite(data["features"]).all() and (data["features"] >= 0).all()  # post-ReLU


def check_procgen_evaluation(on, off):
    """--eval-every 1: a test-level return every iteration; episodes ended inside the runs, so the equal training
    rows cover the envs' resets."""
    assert sum("charts/test_return" in r for r in read_metrics(on)) == 4
    assert any("charts/episodic_return" in r for r in read_metrics(off))


def procgen_env_state_saved(ckpt):
    assert ckpt["envs"][0]["games"] is not None  # the procgen backend saves its games; envpool cannot


def mujoco_env_state_saved(ckpt):
    assert ckpt["ranks"][0]["envs"] is not None  # gymnasium's MuJoCo physics is saved


TORCH_SCRIPTS = [
    Script("ppo_atari_envpool", ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs",
                                 "2", "--no-compile", "--progress", "none"], 64, "agent",
           ["--save-features-every", "2", "--features-states", "40"], check_atari_features),
    Script("pqn_atari", ["--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--update-epochs", "2",
                         "--eval-envs", "2", "--no-compile", "--progress", "none"], 16, "q_network"),
    # the procgen backend (envpool's cannot save its games); bigfish's random-policy episodes last about 100 steps
    Script("ppo_procgen", ["--env-id", "bigfish", "--env-backend", "procgen", "--num-levels", "3", "--num-envs", "1",
                           "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "2", "--no-compile",
                           "--progress", "none"], 64, "agent",
           ["--eval-every", "1", "--eval-episodes", "2"], check_procgen_evaluation, procgen_env_state_saved),
    Script("ppo_continuous_mujoco", ["--env-id", "HalfCheetah-v4", "--num-envs", "2", "--num-steps", "32",
                                     "--minibatch-size", "16", "--update-epochs", "2", "--diagnostics-states", "64",
                                     "--no-compile", "--progress", "none"], 64, "agent",
           check_interrupted=mujoco_env_state_saved),
]
SCRIPT_NAMES = [s.name for s in TORCH_SCRIPTS] + ["ppo_ewma_jax2d", "sfl_kinetix_jax"]
# what builds the first heavy thing: it must not be called on a bad input
BUILDER = {"ppo_ewma_jax2d": "make_train", "sfl_kinetix_jax": "make_train"}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny batches gain nothing from a second thread, and on a shared machine OpenMP's spinning threads make
    every forward pass many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def module(name):
    return importlib.import_module(f"cleanrl_scaling.{name}")


def read_metrics(run_dir):
    return [json.loads(line) for line in open(run_dir / "metrics.jsonl")]


def the_run_dir(root):
    (run_dir,) = sorted((root / "runs").iterdir())
    return run_dir


def load_ckpt(run_dir):
    return pickle.load(open(run_dir / "checkpoints" / "latest.ckpt", "rb"))


def torch_rng(ckpt):
    """Rank 0's torch RNG state (ppo_continuous_mujoco keeps each rank's streams beside its env state)."""
    return (ckpt["ranks"][0]["rng"] if "ranks" in ckpt else ckpt["rng"][0])["torch"]


def foreign_checkpoint(path, name):
    """A checkpoint written by another script than `name`; returns that script's name."""
    other = "pqn_atari" if name == "ppo_atari_envpool" else "ppo_atari_envpool"
    path.write_bytes(pickle.dumps({"script": other, "signature": {}}))
    return other


# ------------------------------------------------------------------------------------------------ bad input
# (flags, what the one line says): the mistakes every script refuses. FOREIGN is a checkpoint of another script
# (OTHER), UNREADABLE a file that is no checkpoint.
BAD_INPUTS = [
    (["--env-id", "NotAGame-v5"], "--env-id"),
    (["--num-envs", "-3"], "--num-envs"),
    (["--total-timesteps", "10"], "--total-timesteps"),
    (["--diagnostics-every", "-1"], "--diagnostics-every"),
    (["--resume", "/nonexistent/latest.ckpt"], "--resume: no checkpoint at"),
    (["--max-grad-norm", "nan"], "--max-grad-norm"),
    (["--ent-coef", "inf"], "--ent-coef"),  # would train, then stop on NaN with exit 3
    (["--runs-dir", "/proc/cleanrl_scaling/runs"], "--runs-dir: cannot write to /proc/cleanrl_scaling/runs"),
    (["--resume", "FOREIGN"], "--resume: FOREIGN was written by OTHER"),
    (["--resume", "UNREADABLE"], "--resume: UNREADABLE is not a readable checkpoint"),
]


def bad_input_cases():
    for name in SCRIPT_NAMES:
        for flags, says in BAD_INPUTS:
            if name == "sfl_kinetix_jax" and flags[0] == "--env-id":  # Kinetix's environments are sizes, not ids
                flags, says = ["--env-size", "huge"], "--env-size"
            if name == "pqn_atari" and flags[0] == "--ent-coef":  # Q-learning has no entropy bonus
                continue
            yield pytest.param(name, flags, says, id=f"{name}:{' '.join(flags)}")
        if name in [s.name for s in TORCH_SCRIPTS]:  # envpool's threads: the torch scripts' flag
            yield pytest.param(name, ["--env-threads", "-1"], "--env-threads", id=f"{name}:--env-threads -1")


@pytest.mark.parametrize("name, flags, says", bad_input_cases())
def test_bad_input_exits_2_with_one_line_before_anything_is_built(name, flags, says, tmp_path, monkeypatch):
    m = module(name)
    builder = BUILDER.get(name, "make_envs")
    monkeypatch.setattr(m, builder, lambda *a, **k: pytest.fail(f"{builder} called on a bad input"))
    files = {"FOREIGN": tmp_path / "foreign.ckpt", "UNREADABLE": tmp_path / "unreadable.ckpt"}
    files["UNREADABLE"].write_bytes(b"not a pickle")
    words = {**{k: str(v) for k, v in files.items()}, "OTHER": foreign_checkpoint(files["FOREIGN"], name)}
    flags, says = [words.get(f, f) for f in flags], re.sub("|".join(words), lambda w: words[w.group()], says)
    code, _, err = main_inprocess(m, flags, tmp_path)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: ") and says in lines[0], lines
    assert not (tmp_path / "runs").exists()  # nothing was written


@pytest.mark.parametrize("name", [s.name for s in TORCH_SCRIPTS])
def test_bad_input_on_the_command_line_has_no_traceback(name, tmp_path):
    """What a user sees: the script run as a program, a checkpoint of another script."""
    foreign = tmp_path / "foreign.ckpt"
    other = foreign_checkpoint(foreign, name)
    out = subprocess.run([sys.executable, module(name).__file__, "--runs-dir", str(tmp_path / "runs"), "--resume",
                          str(foreign)], capture_output=True, text=True, timeout=180, cwd=tmp_path,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().count("\n") == 0 and other in out.stderr and "--resume" in out.stderr
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------------------------------------ SIGTERM
def wait_for_first_row(root, proc, timeout=300):
    start = time.time()
    while time.time() - start < timeout:
        found = list((root / "runs").glob("*/metrics.jsonl"))
        if found and found[0].stat().st_size > 0:
            return found[0].parent
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.kill()
    raise TimeoutError("no metrics row")


@pytest.mark.parametrize("script", TORCH_SCRIPTS, ids=lambda s: s.name)
def test_sigterm_checkpoints_and_exits_cleanly(script, tmp_path):
    """A real SIGTERM (Slurm's preemption) after the first metrics row of a long run: the run checkpoints at the next
    safe point, says how to resume, and exits 128 + 15."""
    cmd = [sys.executable, module(script.name).__file__, "--runs-dir", str(tmp_path / "runs")] + script.tiny + [
        "--total-timesteps", "10000000", "--diagnostics-every", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    run_dir = wait_for_first_row(tmp_path, proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "SIGTERM" in stderr and f"resume with --resume {run_dir / 'checkpoints' / 'latest.ckpt'}" in stdout
    ckpt, summary = load_ckpt(run_dir), json.load(open(run_dir / "summary.json"))
    assert summary["status"] == "interrupted" and ckpt["iteration"] == summary["iteration"] >= 1
    assert ckpt["global_step"] == script.batch * ckpt["iteration"] and ckpt["script"] == script.name
    assert ckpt[script.weights]
    script.check_interrupted(ckpt)


def pipe_is_full(read_end: int, size: int) -> bool:
    """No room for another bar update (~120 bytes) and nothing written for half a second: the writer is blocked."""
    def unread():
        return int.from_bytes(fcntl.ioctl(read_end, termios.FIONREAD, b"\0" * 4), "little")
    before = unread()
    time.sleep(0.5)
    return before > size - 256 and unread() == before


def test_sigterm_while_a_write_to_a_buffered_stderr_is_blocked_still_checkpoints(tmp_path):
    """SIGTERM while the run is blocked writing its progress bar to a full pipe (a `| tee` that fell behind, a stalled
    terminal): the signal interrupts the write, and the handler, which tells stderr, runs inside it. CPython's own
    stderr is an unbuffered FileIO underneath, but a program that wraps it in a buffered writer (as here, through
    sitecustomize) made the handler's print re-enter that writer: "reentrant call" out of the progress bar, a traceback
    and no checkpoint. The handler is the shared block's, so the reference script's run stands for all."""
    script = TORCH_SCRIPTS[0]
    flags = script.tiny[:script.tiny.index("--progress")] + ["--progress", "bar"]  # a write to stderr every iteration
    read_end, write_end = os.pipe()
    size = fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # the smallest pipe: full after a few dozen bar updates
    os.set_blocking(read_end, False)  # the child's end stays blocking
    cmd = [sys.executable, module(script.name).__file__, "--runs-dir", str(tmp_path / "runs")] + flags + [
        "--total-timesteps", "10000000", "--diagnostics-every", "0"]
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "import io, sys\nsys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, 'w', closefd=False)), "
        "line_buffering=True)\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath(tmp_path / "site")}
    with open(tmp_path / "stdout", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=write_end, cwd=tmp_path, env=env)
    os.close(write_end)
    err = bytearray()

    def drain():
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(read_end, 65536):
                err.extend(chunk)
    try:
        start = time.time()
        while not [p for p in (tmp_path / "runs").glob("*/metrics.jsonl") if p.stat().st_size]:  # start-up's output
            drain()
            assert proc.poll() is None and time.time() - start < 300, bytes(err[-3000:])
            time.sleep(0.05)
        while not pipe_is_full(read_end, size):  # reading stopped: the child fills the pipe, then blocks
            assert proc.poll() is None and time.time() - start < 300, bytes(err[-3000:])
        proc.send_signal(signal.SIGTERM)
        while proc.poll() is None and time.time() - start < 420:
            drain()
            time.sleep(0.05)
        drain()
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(read_end)
    text = err.decode(errors="replace")
    assert proc.returncode == 128 + signal.SIGTERM, text[-3000:]
    assert "received SIGTERM" in text and "reentrant" not in text
    run_dir = the_run_dir(tmp_path)
    assert json.load(open(run_dir / "summary.json"))["status"] == "interrupted" and load_ckpt(run_dir)[script.weights]


def test_a_checkpoint_that_cannot_be_written_says_so_in_one_line_and_keeps_the_last_one(tmp_path):
    """A full disk or a quota when a checkpoint is written (here the file-size limit, `ulimit -f`, which makes the
    write fail as ENOSPC would; Python ignores SIGXFSZ): one line naming the checkpoint and how to continue, exit 1,
    the checkpoint written before untouched, and no half-written temp file left to hold the space. Before, a traceback,
    and the temp file stayed. save_checkpoint and atomic_write are the shared blocks', so one script stands for all."""
    script = TORCH_SCRIPTS[0]
    flags = [sys.executable, module(script.name).__file__, "--runs-dir", str(tmp_path / "runs")] + script.tiny + [
        "--diagnostics-every", "0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.run(flags + ["--total-timesteps", str(script.batch)], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    ckpt = the_run_dir(tmp_path) / "checkpoints" / "latest.ckpt"
    before = ckpt.read_bytes()
    assert len(before) > 2 ** 21  # larger than the limit below, which the logs stay under
    resume = flags + ["--total-timesteps", str(3 * script.batch), "--checkpoint-every", "1", "--resume", str(ckpt)]
    # bash's ulimit, not preexec_fn: a fork of this multithreaded process (JAX is loaded) could deadlock
    resumed = subprocess.run(["bash", "-c", 'ulimit -f 2048 && exec "$@"', "bash"] + resume, capture_output=True,
                             text=True, env=env, cwd=tmp_path, timeout=300)
    assert resumed.returncode == 1, resumed.stderr[-3000:]
    last = resumed.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: cannot write the checkpoint {ckpt}: File too large.") and f"--resume {ckpt}" in last
    assert "Traceback" not in resumed.stderr
    assert ckpt.read_bytes() == before and sorted(p.name for p in ckpt.parent.iterdir()) == ["latest.ckpt"]


# ------------------------------------------------------------------------------------------------ resume: the logs
def iterations_in(path) -> list:
    return [json.loads(line)["iteration"] for line in open(path)] if path.exists() else []


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_a_resume_cuts_both_logs_back_to_what_its_checkpoint_saw(name, tmp_path):
    """No row appears twice after a resume (docs/run_directory.md), in metrics.jsonl and kl_profile.jsonl alike. The checkpoint
    records the logs' sizes; a resume cuts each log to them, dropping what followed (a row of the checkpoint's own
    iteration logged after it, such as a final evaluation; later iterations; a line torn by kill -9). A checkpoint
    without sizes (older ones) keeps the rows up to its iteration and drops a torn line, which made json raise."""
    m = module(name)
    logger = m.RunLogger(str(tmp_path / "run"), {}, m.Args(progress="none"), 400)
    run_dir = pathlib.Path(logger.run_dir)

    def after_the_checkpoint():
        logger.log(128, 2, {"eval/return": 5.0})
        logger.log(192, 3, {"losses/value_loss": 3.0})
        logger.log_profile({"global_step": 192, "iteration": 3, "seq_kl": [0.2], "ref_kl": [0.2]})
        logger.flush()
        for log in ("metrics.jsonl", "kl_profile.jsonl"):
            with open(run_dir / log, "a") as f:
                f.write('{"global_step": 256, "iteration": 4, "wall_ti')  # kill -9 in the middle of a write
    logger.log(64, 1, {"losses/value_loss": 1.0})
    logger.log(128, 2, {"losses/value_loss": 2.0})
    logger.log_profile({"global_step": 128, "iteration": 2, "seq_kl": [0.1], "ref_kl": [0.1]})
    ckpt = {"iteration": 2, "log_sizes": logger.log_sizes()}  # what the checkpoint of iteration 2 records
    after_the_checkpoint()
    logger.close({})
    resumed = m.RunLogger(str(run_dir), {}, m.Args(progress="none"), 400, ckpt)
    assert resumed.run_dir == str(run_dir)
    assert [r["losses/value_loss"] for r in read_metrics(run_dir)] == [1.0, 2.0]
    assert iterations_in(run_dir / "kl_profile.jsonl") == [2]

    logger = resumed
    after_the_checkpoint()
    logger.close({})
    m.RunLogger(str(run_dir), {}, m.Args(progress="none"), 400, {"iteration": 2}).close({})  # no sizes recorded
    assert iterations_in(run_dir / "metrics.jsonl") == [1, 2, 2]  # the evaluation row of iteration 2 is kept
    assert iterations_in(run_dir / "kl_profile.jsonl") == [2]


@pytest.mark.parametrize("script", TORCH_SCRIPTS, ids=lambda s: s.name)
def test_a_run_killed_in_the_middle_of_a_log_write_resumes_with_each_row_once(script, tmp_path):
    """A run killed after its checkpoint, in the middle of writing the next iteration's rows (kill -9, the OOM
    killer, a lost node): the resume continues, and each iteration's rows are in both logs once. Before, the torn
    line made the resume raise (JSONDecodeError), and kl_profile.jsonl was never cut back (the next iteration's rows
    twice)."""
    m = module(script.name)
    flags = script.tiny + ["--diagnostics-every", "1"]
    code, _, err = main_inprocess(m, flags + ["--total-timesteps", str(2 * script.batch)], tmp_path)
    assert code == 0, err[-3000:]
    run_dir = the_run_dir(tmp_path)
    for log in ("metrics.jsonl", "kl_profile.jsonl"):
        if (run_dir / log).exists():
            rows = [json.loads(line) for line in open(run_dir / log)]
            with open(run_dir / log, "a") as f:
                f.write(json.dumps({**rows[-1], "iteration": 3}) + "\n")  # the next iteration's row, logged
                f.write('{"global_step": 256, "iteration": 3, "wall_ti')  # and one cut short
    code, _, err = main_inprocess(m, flags + ["--total-timesteps", str(4 * script.batch), "--resume",
                                              str(run_dir / "checkpoints" / "latest.ckpt")], tmp_path)
    assert code == 0, err[-3000:]
    trained = [r["iteration"] for r in read_metrics(run_dir) if "losses/value_loss" in r or "losses/td_loss" in r]
    assert trained == [1, 2, 3, 4]
    profiled = iterations_in(run_dir / "kl_profile.jsonl")
    assert profiled in ([], [1, 2, 3, 4])
    assert profiled or script.name == "pqn_atari"  # PQN has no policy ratio to profile


@pytest.mark.parametrize("script", TORCH_SCRIPTS, ids=lambda s: s.name)
def test_a_moved_run_directory_resumes_in_place(script, tmp_path):
    """A run directory moved (to other storage, another machine) and resumed from there continues in it: each
    iteration's rows once, the checkpoint updated there, nothing written at the recorded path. Before, the resume
    wrote into a new directory at the recorded path (relative to the working directory: resuming from another
    directory split the run the same way)."""
    m = module(script.name)
    flags = script.tiny + ["--diagnostics-every", "0"]
    code, _, err = main_inprocess(m, flags + ["--total-timesteps", str(2 * script.batch)], tmp_path / "first")
    assert code == 0, err[-3000:]
    moved = tmp_path / "moved" / the_run_dir(tmp_path / "first").name
    moved.parent.mkdir()
    the_run_dir(tmp_path / "first").rename(moved)
    code, _, err = main_inprocess(m, flags + ["--total-timesteps", str(4 * script.batch), "--resume",
                                              str(moved / "checkpoints" / "latest.ckpt")], tmp_path / "second")
    assert code == 0, err[-3000:]
    assert not (tmp_path / "first" / "runs").exists() or not any((tmp_path / "first" / "runs").iterdir())
    assert not (tmp_path / "second" / "runs").exists()
    trained = [r["iteration"] for r in read_metrics(moved) if "losses/value_loss" in r or "losses/td_loss" in r]
    assert trained == [1, 2, 3, 4] and load_ckpt(moved)["iteration"] == 4


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_a_checkpoint_continues_the_run_directory_that_holds_it(name, tmp_path):
    m = module(name)
    run = tmp_path / "elsewhere" / "X"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    assert m.run_dir_holding(str(run / "checkpoints" / "latest.ckpt"), "runs/X") == str(run)
    assert m.run_dir_holding(str(run / "checkpoints" / "iteration_8.ckpt"), "runs/X") == str(run)
    assert m.run_dir_holding(str(run / "checkpoints" / "latest.ckpt"), str(run)) == str(run)  # recorded as it is
    assert m.run_dir_holding(str(tmp_path / "backup.ckpt"), "runs/X") == "runs/X"  # kept outside a run directory
    (run / "config.json").unlink()
    assert m.run_dir_holding(str(run / "checkpoints" / "latest.ckpt"), "runs/X") == "runs/X"  # not a run directory


def two_rank_flags(tiny: list) -> list:
    """The tiny run with at least one env per rank (torchrun splits --num-envs over the ranks)."""
    flags = list(tiny)
    i = flags.index("--num-envs") + 1
    flags[i] = str(max(2, int(flags[i])))
    return flags


@pytest.mark.parametrize("script", TORCH_SCRIPTS, ids=lambda s: s.name)
def test_sigterm_to_one_of_two_ranks_stops_both_with_its_code(script, tmp_path):
    """Slurm or a user may signal one task of a torchrun job: both ranks stop at the same iteration (rank 0 writes the
    checkpoint) and both exit 128 + 15. Two gloo ranks started as torchrun starts them (its environment variables),
    so that the signal reaches rank 1 alone; the rank it did not reach once exited 128."""
    port, procs = free_port(), []
    for rank in range(2):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        log = open(tmp_path / f"rank{rank}.log", "w")  # files: a full pipe would block one rank, and the other with it
        procs.append(subprocess.Popen([sys.executable, module(script.name).__file__, "--runs-dir",
                                       str(tmp_path / "runs")] + two_rank_flags(script.tiny) + [
                                       "--total-timesteps", "10000000", "--diagnostics-every", "0"],
                                      stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=env))
    try:
        run_dir = wait_for_first_row(tmp_path, procs[0])
        procs[1].send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    logs = [(tmp_path / f"rank{rank}.log").read_text() for rank in range(2)]
    assert codes == [128 + signal.SIGTERM] * 2, logs
    assert "received SIGTERM" in logs[1] and "received SIGTERM" not in logs[0]
    ckpt, summary = load_ckpt(run_dir), json.load(open(run_dir / "summary.json"))
    assert summary["status"] == "interrupted" and ckpt["iteration"] == summary["iteration"] >= 1


@pytest.mark.parametrize("script", TORCH_SCRIPTS, ids=lambda s: s.name)
def test_a_signal_during_the_stop_agreement_stops_the_next_iteration(script, tmp_path, monkeypatch):
    """SIGTERM landing while the ranks agree on stopping (inside the all-reduce; here one process, whose agreement
    returns what it was given): the agreement's 0 must not overwrite it, so the run stops at the next iteration."""
    m = module(script.name)
    agree, calls = m.max_over_ranks, []

    def signalled_during_the_first(value, world_size, device):
        if sys._getframe(1).f_code.co_name == "agreed_stop":  # not the finite-loss agreement
            calls.append(value)
            if len(calls) == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before this function returns
        return agree(value, world_size, device)
    monkeypatch.setattr(m, "max_over_ranks", signalled_during_the_first)
    code, _, err = main_inprocess(m, script.tiny + ["--total-timesteps", str(6 * script.batch), "--diagnostics-every",
                                                    "0"], tmp_path)
    assert code == 128 + signal.SIGTERM, err[-3000:]
    assert calls == [0, signal.SIGTERM]  # the first agreement got the 0 read before the signal, the next one it
    assert json.load(open(the_run_dir(tmp_path) / "summary.json"))["iteration"] == 2


# ------------------------------------------------------------------------------------------------ diagnostics
def training_rows(run_dir):
    """What training logged (losses, learning rate, exploration, episodes), without diagnostics, evaluations and
    wall-clock values."""
    def trained(key):
        return key.startswith("losses/") or key in ("charts/learning_rate", "charts/epsilon",
                                                    "charts/episodic_return", "charts/episodic_length")
    rows = [{k: v for k, v in r.items() if trained(k) or k in ("global_step", "iteration")} for r in read_metrics(run_dir)]
    return [r for r in rows if any(trained(k) for k in r)]


@pytest.mark.parametrize("script", TORCH_SCRIPTS, ids=lambda s: s.name)
def test_diagnostics_do_not_change_training(script, tmp_path):
    """Two runs from one seed, diagnostics off and every iteration (with what else the script measures on the side):
    the same training rows, final weights and torch RNG state (the diagnostics drew nothing from training's stream)."""
    dirs = {}
    for name, flags in [("off", ["--diagnostics-every", "0"]), ("on", ["--diagnostics-every", "1"] + script.diagnosed)]:
        code, _, err = main_inprocess(module(script.name), script.tiny + ["--total-timesteps", str(4 * script.batch),
                                                                          "--seed", "3"] + flags, tmp_path / name)
        assert code == 0, err[-3000:]
        dirs[name] = the_run_dir(tmp_path / name)
    on, off = dirs["on"], dirs["off"]
    assert [r["iteration"] for r in read_metrics(on) if "diagnostics/grad_kurtosis" in r] == [1, 2, 3, 4]
    assert not any(k.startswith("diagnostics/") for r in read_metrics(off) for k in r)
    rows = training_rows(off)
    assert [r["iteration"] for r in rows if "losses/" + ("td_loss" if script.name == "pqn_atari" else "policy_loss")
            in r] == [1, 2, 3, 4]
    assert training_rows(on) == rows
    a, b = load_ckpt(on), load_ckpt(off)
    assert a[script.weights].keys() == b[script.weights].keys()
    assert all(torch.equal(a[script.weights][k], b[script.weights][k]) for k in a[script.weights])
    assert torch.equal(torch_rng(a), torch_rng(b))
    script.check_diagnosed(on, off)


ENV_THREADS = """
import os, sys
from cleanrl_scaling import {module} as script
envpool = script.import_envpool()
os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})  # one core, as under a cpuset: its threads inherit it
kept = []  # every instance stays open: no thread of an earlier one is still being joined while one is counted
def started(make):
    before = len(os.listdir("/proc/self/task"))
    kept.append(make())
    return len(os.listdir("/proc/self/task")) - before
reference = lambda: envpool.make("{reference}", env_type="gymnasium", num_envs=4, seed=1, num_threads=1)
started(reference)  # the first instance of a game may start threads of its own once (Procgen does)
one_worker = started(reference)
ours = started(lambda: {make})
print(one_worker, ours)
"""


@pytest.mark.parametrize("module,reference,make", [
    ("ppo_atari_envpool", "Breakout-v5", 'script.make_envs("Breakout-v5", 4, 1)'),
    ("pqn_atari", "Breakout-v5", 'script.make_envs("Breakout-v5", 4, 1, train=False)'),
    ("ppo_procgen", "StarpilotEasy-v0", 'script.EnvpoolProcgen("starpilot", "easy", 4, 1, 0, 0).envs'),
])
def test_envpool_starts_a_worker_per_core_the_process_may_use(module, reference, make):
    """envpool's default counts the machine's cores, not the ones a Slurm cpuset or taskset allows: on one allowed
    core of a 2-core machine 4 envs would get 2 workers. The scripts start as many as a 1-worker pool does there (an
    instance also starts one thread besides its workers, hence the reference pool rather than a count)."""
    if os.cpu_count() < 2:
        pytest.skip("one core: envpool's default and ours agree")
    code = ENV_THREADS.format(module=module, reference=reference, make=make)
    out = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    one_worker, ours = map(int, out.stdout.split()[-2:])
    assert one_worker >= 2 and ours == one_worker


@pytest.mark.parametrize("module", ["ppo_atari_envpool", "pqn_atari", "ppo_procgen", "ppo_continuous_mujoco"])
def test_env_threads_count_the_allowed_cores_shared_by_torchruns_ranks(module, monkeypatch):
    """By hand: 8 allowed cores give 256 envs 8 workers and 3 envs 3; under torchrun 2 ranks on the node get 4 each,
    and 16 ranks still one; --env-threads 5 gives 5, at most one per env."""
    script = importlib.import_module(f"cleanrl_scaling.{module}")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8, 16)))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert (script.env_threads(256), script.env_threads(3)) == (8, 3)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert (script.env_threads(256), script.env_threads(3)) == (4, 3)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    assert script.env_threads(256) == 1
    assert (script.env_threads(256, requested=5), script.env_threads(3, requested=5)) == (5, 3)  # --env-threads



def written_on_a_gpu(path):
    """Rewrite the checkpoint at `path` as a CUDA run's pickle is: every tensor's storage tagged cuda:0 (torch pickles
    a tensor with its device's tag, and plain unpickling puts it back there)."""
    import torch.serialization
    state = pickle.load(open(path, "rb"))
    tag = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:0"
    try:
        blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        torch.serialization.location_tag = tag
    path.write_bytes(blob)


@pytest.mark.parametrize("script", TORCH_SCRIPTS, ids=lambda s: s.name)
def test_a_checkpoint_written_on_a_gpu_resumes_on_a_cpu(script, tmp_path):
    """Adam's state is saved where it lives, on the GPU: a preempted GPU run's checkpoint must still resume on a CPU
    (or on another rank's GPU). The script's loader puts every tensor on the CPU; load_state_dict moves them."""
    flags = script.tiny + ["--diagnostics-every", "0", "--seed", "3"]
    code, _, err = main_inprocess(module(script.name), flags + ["--total-timesteps", str(2 * script.batch)], tmp_path)
    assert code == 0, err[-3000:]
    run_dir = the_run_dir(tmp_path)
    path = run_dir / "checkpoints" / "latest.ckpt"
    written_on_a_gpu(path)
    if not torch.cuda.is_available():  # the file does name a GPU: a plain unpickling fails here
        with pytest.raises(RuntimeError, match="CUDA"):
            pickle.load(open(path, "rb"))
    state = module(script.name).load_checkpoint(str(path), script.name, {})
    assert all(v.device.type == "cpu" for s in state["optimizer"]["state"].values() for v in s.values()
               if isinstance(v, torch.Tensor))
    code, stdout, err = main_inprocess(module(script.name), flags + ["--total-timesteps", str(3 * script.batch),
                                                                     "--resume", str(path)], tmp_path)
    assert code == 0, err[-3000:]
    assert "resuming from iteration 2" in stdout
    assert load_ckpt(run_dir)["iteration"] == 3 and json.load(open(run_dir / "summary.json"))["status"] == "finished"



def test_env_threads_flag_sets_each_instances_workers():
    """--env-threads N: N workers in each envpool instance (each half's with --async-envs; envpool's config records
    what it was given); 0 the scripts' count; Procgen's evaluation envs keep that count."""
    for name in ["ppo_atari_envpool", "pqn_atari"]:
        script = module(name)
        for async_envs, threads, expected in [(False, 3, [3]), (True, 2, [2, 2]), (False, 0, [script.env_threads(4)])]:
            groups = script.make_env_groups("Breakout-v5", 4, 1, async_envs, threads)
            assert [g.inner.config["num_threads"] for g in groups] == expected, (name, async_envs, threads)
            for g in groups:
                g.close()
    procgen = module("ppo_procgen")
    args = procgen.Args(env_id="bigfish", num_envs=4, env_threads=3)
    train, test = procgen.make_envs(args, 4, 1), procgen.make_envs(args, 4, 2, test=True)
    assert (train.envs.config["num_threads"], test.envs.config["num_threads"]) == (3, procgen.env_threads(4))
