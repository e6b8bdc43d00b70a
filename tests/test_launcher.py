"""cleanrl_scaling/utils/launcher.py: the grid, --dry-run, failures, --skip-finished, per-run cores, Slurm rendering."""
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from cleanrl_scaling.utils import launcher
from cleanrl_scaling.utils.rundirs import parse_flags, same_value

FAKE = """import json, os, sys, time
args = sys.argv[1:]
flags = {a: b for a, b in zip(args, args[1:] + [""])}
print("threads", os.environ["OMP_NUM_THREADS"], "cpus", len(os.sched_getaffinity(0)))
if "--marker" in flags:
    open(flags["--marker"], "w").write(" ".join(args))
if "--fail" in args:
    print("something broke", file=sys.stderr)
    sys.exit(3)
"""


@pytest.fixture
def fake_script(tmp_path):
    path = tmp_path / "fake_train.py"
    path.write_text(FAKE)
    return str(path)


def commands(out: str) -> list:
    return [shlex.split(line) for line in out.splitlines() if line and not line.startswith("#")]


def test_parse_flags_and_same_value():
    flags = parse_flags(["--a", "1", "--b-c", "x", "y", "--flag", "--no-other", "--d=2", "--neg", "-1"])
    assert flags == {"a": "1", "b_c": ["x", "y"], "flag": True, "other": False, "d": "2", "neg": "-1"}
    assert same_value("0.10", 0.1) and same_value("true", True) and same_value("None", None)
    assert not same_value("0.1", 0.2) and not same_value("1", True) and same_value(["1", "2"], [1, 2])


def test_dry_run_prints_the_grid(fake_script, tmp_path, capsys):
    rc = launcher.main([fake_script, "--env-ids", "A-v5", "B-v5", "--seeds", "1", "2", "--sweep", "lr=0.1,0.01",
                        "--sweep", "anneal-lr=true,false", "--runs-dir", str(tmp_path / "runs"), "--dry-run",
                        "--workers", "2", "--", "--total-timesteps", "100"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("# 16 run(s)")
    cmds = commands(out)
    assert len(cmds) == 16 and all(c[:2] == [sys.executable, fake_script] for c in cmds)
    assert cmds[0][2:] == ["--total-timesteps", "100", "--lr", "0.1", "--anneal-lr", "--env-id", "A-v5", "--seed", "1",
                           "--runs-dir", str(tmp_path / "runs")]
    grid = {(f["env_id"], f["seed"], f["lr"], f["anneal_lr"]) for f in (parse_flags(c[2:]) for c in cmds)}
    assert grid == {(e, s, lr, a) for e in ("A-v5", "B-v5") for s in ("1", "2") for lr in ("0.1", "0.01")
                    for a in (True, False)}
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_dry_run_says_what_each_run_gets(fake_script, tmp_path, capsys):
    for workers, cores, line in (("1", "2", "1 worker(s), 2 core(s) and OMP_NUM_THREADS=2 per run"),
                                 ("3", "2", "3 worker(s), any core and OMP_NUM_THREADS=1 per run")):
        launcher.main([fake_script, "--workers", workers, "--cores", cores, "--runs-dir", str(tmp_path), "--dry-run"])
        assert f"# local: {line}" in capsys.readouterr().out


def test_flag_sets_cross_the_sweeps(fake_script, tmp_path, capsys):
    launcher.main([fake_script, "--flag-set", "--exp-name a --x 1", "--flag-set", "--exp-name b", "--sweep", "y=1,2",
                   "--runs-dir", str(tmp_path), "--dry-run"])
    flags = [parse_flags(c[2:]) for c in commands(capsys.readouterr().out)]
    assert [(f["exp_name"], f.get("x"), f["y"]) for f in flags] == [("a", "1", "1"), ("a", "1", "2"),
                                                                    ("b", None, "1"), ("b", None, "2")]


def test_failed_runs_are_listed_with_their_logs_and_exit_nonzero(fake_script, tmp_path, capsys):
    rc = launcher.main([fake_script, "--flag-set", "", "--flag-set=--fail", "--seeds", "1", "2",
                        "--workers", "2", "--cores", "2", "--runs-dir", str(tmp_path / "runs"),
                        "--log-dir", str(tmp_path / "logs")])
    captured = capsys.readouterr()
    assert rc == 1
    failed = [line.split()[1] for line in captured.err.splitlines() if line.strip().startswith("rc=3")]
    assert len(failed) == 2 and all(os.path.isfile(p) and "_fail_" in p for p in failed)
    for path in failed:
        text = open(path).read()
        assert "something broke" in text and "--fail" in text.splitlines()[0]
    logs = sorted(os.listdir(tmp_path / "logs"))
    assert len(logs) == 5 and "commands.txt" in logs  # 4 run logs + the commands file
    ok_log = next(p for p in logs if p.endswith("_s1.log") and "fail" not in p)
    assert "threads 1 cpus 1" in open(tmp_path / "logs" / ok_log).read()  # 2 cores / 2 workers
    assert "2/4 run(s) succeeded" in captured.out


def test_all_runs_succeed_exit_zero_and_share_the_cores(fake_script, tmp_path, capsys):
    rc = launcher.main([fake_script, "--seeds", "1", "--workers", "1", "--cores", "2",
                        "--runs-dir", str(tmp_path / "runs"), "--log-dir", str(tmp_path / "logs")])
    assert rc == 0
    (log,) = [p for p in os.listdir(tmp_path / "logs") if p.endswith(".log")]
    expected = min(2, len(os.sched_getaffinity(0)))
    assert f"threads {expected} cpus {expected}" in open(tmp_path / "logs" / log).read()


def test_runs_with_the_same_run_name_start_a_second_apart(tmp_path, capsys):
    """Same env_id, exp_name and seed, other flags: started in one second, their run directory names would differ
    only by the scripts' "-2" suffix; the launcher keeps their time stamps apart instead."""
    script = tmp_path / "stamp.py"
    script.write_text("import sys, time\nopen(sys.argv[sys.argv.index('--out') + 1], 'w').write(repr(time.time()))\n")
    rc = launcher.main([str(script), "--seeds", "1", "--flag-set", f"--out {tmp_path / 'a'}", "--flag-set",
                        f"--out {tmp_path / 'b'}", "--workers", "2", "--runs-dir", str(tmp_path / "runs"),
                        "--log-dir", str(tmp_path / "logs")])
    assert rc == 0
    # launched NAME_GAP = 2 s apart; their clocks, read after start-up, must still be a second apart
    assert abs(float((tmp_path / "a").read_text()) - float((tmp_path / "b").read_text())) >= 1.0


def test_core_slots():
    assert launcher.core_slots([0, 1, 2, 3], 2) == [[0, 1], [2, 3]]
    assert launcher.core_slots([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3]]
    assert launcher.core_slots([0, 1], 2) == [[0], [1]]
    # more runs than cores: no run is pinned to a shared core while another core idles
    assert launcher.core_slots([0, 1], 3) == [[0, 1], [0, 1], [0, 1]]
    assert [launcher.threads_per_run([0, 1, 2, 3], w) for w in (1, 2, 3, 4, 6)] == [4, 2, 1, 1, 1]
    env = launcher.run_env(3)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3" and "intra_op_parallelism_threads=3" in env["XLA_FLAGS"]


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_more_workers_than_cores_leaves_every_core_to_every_run(tmp_path):
    script = tmp_path / "affinity.py"
    script.write_text("import os, sys\nopen(sys.argv[sys.argv.index('--out') + 1], 'w').write("
                      "repr((sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'])))\n")
    outs = [tmp_path / f"o{i}" for i in range(3)]
    sets = [x for o in outs for x in ("--flag-set", f"--out {o}")]
    rc = launcher.main([str(script), *sets, "--workers", "3", "--cores", "2", "--runs-dir", str(tmp_path / "runs"),
                        "--log-dir", str(tmp_path / "logs")])
    assert rc == 0
    two = sorted(os.sched_getaffinity(0))[:2]
    assert [eval(o.read_text()) for o in outs] == [(two, "1")] * 3


def write_run(root, name, config, status=None):
    run = root / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(config))
    (run / "metrics.jsonl").write_text("")
    if status:
        (run / "summary.json").write_text(json.dumps({"status": status, "global_step": 1, "iteration": 1}))


def test_skip_finished_never_counts_a_run_without_argv(fake_script, tmp_path, capsys):
    """A config.json without argv cannot say which grid point it is: its run is rerun (with a warning), never
    guessed from a subset of its values (a subset would count PPO-EWMA runs as plain-PPO points)."""
    runs = tmp_path / "runs"
    args = {"exp_name": "fake_train", "env_id": "A-v5", "learning_rate": 0.1, "seed": 1, "ewma_com": 2.0}
    write_run(runs, "A-v5__fake_train__1__1", {"script": "fake_train", "args": args}, "finished")
    rc = launcher.main([fake_script, "--env-ids", "A-v5", "--seeds", "1", "--sweep", "learning-rate=0.1",
                        "--runs-dir", str(runs), "--skip-finished", "--dry-run"])
    out, err = capsys.readouterr()
    assert rc == 0 and out.startswith("# 1 run(s), 0 skipped as finished")
    assert "1 finished run(s)" in err and "no argv" in err


def test_skip_finished_ppo_ewma_run_is_not_the_plain_ppo_point(fake_script, tmp_path, capsys):
    """B26 Fig. 6: after the COM runs finished, the epsilon grid's --clip-coef 0.2 still has to run; only
    a run started with exactly that point's flags counts. Statuses other than finished never count."""
    runs = tmp_path / "runs"
    common = ["--total-timesteps", "1000", "--update-epochs", "4"]
    for i, (flags, status) in enumerate([(["--ewma-com", "2"], "finished"), (["--clip-coef", "0.1"], "finished"),
                                         (["--clip-coef", "0.4"], "interrupted"), (["--clip-coef", "0.4"], None)]):
        argv = common + flags + ["--seed", "1", "--runs-dir", str(runs)]
        write_run(runs, f"J__fake_train__1__{i}", {"script": "fake_train", "argv": argv,
                                                   "args": {"exp_name": "fake_train", "seed": 1, "clip_coef": 0.2,
                                                            "ewma_com": 2.0 if i == 0 else 0.0}}, status)
    write_run(runs, "J__other__1__9", {"script": "other", "argv": common + ["--clip-coef", "0.2", "--seed", "1"]},
              "finished")  # another script's run never counts
    launcher.main([fake_script, "--seeds", "1", "--sweep", "clip-coef=0.1,0.2,0.4", "--runs-dir", str(runs),
                   "--skip-finished", "--dry-run", "--"] + common)
    out = capsys.readouterr().out
    assert out.startswith("# 2 run(s), 1 skipped as finished")
    assert sorted(parse_flags(c[2:])["clip_coef"] for c in commands(out)) == ["0.2", "0.4"]


def test_skip_finished_with_config_argv(fake_script, tmp_path, capsys):
    """Scripts that store their argv (noisy_sgd): matched on exactly the flags they were started with."""
    runs = tmp_path / "runs"
    argv = ["--total-steps", "10", "--learning-rate", "0.30", "--seed", "1", "--runs-dir", "elsewhere"]
    write_run(runs, "X__fake_train__1__1", {"script": "fake_train", "argv": argv,
                                            "args": {"exp_name": "fake_train", "seed": 1}}, "finished")
    launcher.main([fake_script, "--seeds", "1", "--sweep", "learning-rate=0.3,0.03", "--runs-dir", str(runs),
                   "--skip-finished", "--dry-run", "--", "--total-steps", "10"])
    out = capsys.readouterr().out
    assert out.startswith("# 1 run(s), 1 skipped") and parse_flags(commands(out)[0][2:])["learning_rate"] == "0.03"
    launcher.main([fake_script, "--seeds", "1", "--sweep", "learning-rate=0.3", "--runs-dir", str(runs),
                   "--skip-finished", "--dry-run", "--", "--total-steps", "20"])  # another budget: not the same run
    assert capsys.readouterr().out.startswith("# 1 run(s), 0 skipped")


def test_skip_finished_reruns_only_what_did_not_finish_end_to_end(tmp_path, capsys):
    """noisy_sgd through the launcher: a second call runs only the grid point that failed the first time."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "cleanrl_scaling", "noisy_sgd.py")
    common = [script, "--runs-dir", str(tmp_path / "runs"), "--workers", "2", "--sweep", "learning-rate=0.1,-1",
              "--log-dir", str(tmp_path / "logs1"), "--", "--total-steps", "5", "--num-seeds", "2"]
    assert launcher.main(common) == 1
    capsys.readouterr()
    common[common.index("--log-dir") + 1] = str(tmp_path / "logs2")
    assert launcher.main(common[:1] + ["--skip-finished"] + common[1:]) == 1
    out = capsys.readouterr()
    assert "# 1 run(s), 1 skipped as finished" in out.out and "learning-rate_-1" in out.err
    assert len(os.listdir(tmp_path / "runs")) == 2  # the 2 seeds of the good point, run once


def test_resume_unfinished_continues_stopped_runs_from_their_checkpoints(fake_script, tmp_path, capsys):
    """--resume-unfinished: an interrupted run, or one killed after a checkpoint (no summary.json), continues from its
    newest checkpoint; a diverged run or one without a checkpoint starts over; a finished run, also one that was
    itself resumed or used another --checkpoint-every, is skipped."""
    runs = tmp_path / "runs"
    common = ["--total-timesteps", "1000"]

    def run(i, lr, status, ckpt=True, extra=(), mtime=None):
        argv = common + ["--learning-rate", lr, *extra, "--seed", "1", "--runs-dir", str(runs)]
        write_run(runs, f"J__fake_train__1__{i}", {"script": "fake_train", "argv": argv}, status)
        path = runs / f"J__fake_train__1__{i}" / "checkpoints" / "latest.ckpt"
        if ckpt:
            path.parent.mkdir()
            path.write_bytes(b"state")
            if mtime:
                os.utime(path, (mtime, mtime))
        return str(path)

    run(0, "0.1", "finished", extra=["--resume", "elsewhere/latest.ckpt", "--checkpoint-every", "5"])
    newest = run(1, "0.2", "interrupted", mtime=2e9)
    run(2, "0.2", None, mtime=1e9)  # an older killed run of the same point
    killed = run(3, "0.3", None)
    run(4, "0.4", "diverged")
    run(5, "0.5", "interrupted", ckpt=False)
    sweep = ["--sweep", "learning-rate=0.1,0.2,0.3,0.4,0.5"]
    launcher.main([fake_script, "--seeds", "1", *sweep, "--runs-dir", str(runs), "--skip-finished",
                   "--resume-unfinished", "--dry-run", "--"] + common)
    out = capsys.readouterr().out
    assert out.startswith("# 4 run(s), 1 skipped as finished, 2 resumed from checkpoints")
    resume = {parse_flags(c[2:])["learning_rate"]: parse_flags(c[2:]).get("resume") for c in commands(out)}
    assert resume == {"0.2": newest, "0.3": killed, "0.4": None, "0.5": None}
    launcher.main([fake_script, "--seeds", "1", *sweep, "--runs-dir", str(runs), "--skip-finished", "--dry-run",
                   "--"] + common)  # without the flag every unfinished point starts over
    assert all("--resume" not in c for c in commands(capsys.readouterr().out))
    # a second launcher on other grid points (e.g. one seed per pinned core) never takes these runs' checkpoints,
    # so launchers of disjoint points may share RUNS_DIR
    launcher.main([fake_script, "--seeds", "1", "--sweep", "learning-rate=0.4,0.5", "--runs-dir", str(runs),
                   "--skip-finished", "--resume-unfinished", "--dry-run", "--"] + common)
    out = capsys.readouterr().out
    assert out.startswith("# 2 run(s), 0 skipped as finished, 0 resumed") and "--resume" not in out
    assert launcher.main([fake_script, "--resume-unfinished", "--dry-run"]) == 2
    assert "only applies with --skip-finished" in capsys.readouterr().err


def test_slurm_script_is_rendered_and_runs_its_line(fake_script, tmp_path, capsys):
    marker = tmp_path / "ran.txt"
    rc = launcher.main([fake_script, "--sweep", "x=a,b,c", "--seeds", "7", "--runs-dir", str(tmp_path / "runs"),
                        "--log-dir", str(tmp_path / "logs"), "--slurm-template", "--no-submit", "--cpus-per-run", "4",
                        "--max-parallel", "2", "--job-name", "sweep1", "--slurm-set", "time=01:00:00",
                        "--", "--marker", str(marker)])
    out = capsys.readouterr().out
    assert rc == 0
    script_path = tmp_path / "logs" / "sweep1.sbatch"
    text = script_path.read_text()
    assert text in out
    for line in ["#SBATCH --job-name=sweep1", "#SBATCH --array=0-2%2", "#SBATCH --cpus-per-task=4",
                 "#SBATCH --time=01:00:00", "#SBATCH --mem=16G", f"#SBATCH --output={tmp_path / 'logs'}/%x_%A_%a.log",
                 f'"{tmp_path / "logs" / "commands.txt"}"', "export OMP_NUM_THREADS=4", "${SLURM_ARRAY_TASK_ID}"]:
        assert line in text, line
    assert launcher.PLACEHOLDER.search(text) is None  # nothing left unrendered
    lines = (tmp_path / "logs" / "commands.txt").read_text().splitlines()
    assert [parse_flags(shlex.split(line)[2:])["x"] for line in lines] == ["a", "b", "c"]
    # what Slurm would do for array task 1: run line 2 of the commands file
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="1")
    done = subprocess.run(["bash", str(script_path)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--x b" in marker.read_text() and "task 1 of 3" in done.stdout


def test_slurm_placeholders(tmp_path, fake_script, capsys):
    template = tmp_path / "t.sh"
    template.write_text("#SBATCH --partition={partition}\nawk '{{print $1}}' ${HOME}/x {num_tasks}\n")
    rc = launcher.main([fake_script, "--seeds", "1", "2", "--runs-dir", str(tmp_path), "--slurm-template",
                        str(template), "--dry-run"])
    assert rc == 2 and "{partition}" in capsys.readouterr().err
    rc = launcher.main([fake_script, "--seeds", "1", "2", "--runs-dir", str(tmp_path), "--slurm-template",
                        str(template), "--slurm-set", "partition=gpu", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and "#SBATCH --partition=gpu\nawk '{print $1}' ${HOME}/x 2\n" in out


def test_usage_errors_exit_2(fake_script, tmp_path, capsys):
    assert launcher.main(["missing.py", "--dry-run"]) == 2
    assert launcher.main([fake_script, "--sweep", "lr", "--dry-run"]) == 2
    assert launcher.main([fake_script, "--workers", "0", "--dry-run"]) == 2
    assert launcher.main([fake_script, "--dry-run", "--", "--seed", "3"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and all(line.startswith("error: ") for line in err)


SLOW = """import signal, sys, time
def stop(signum, frame):
    open(sys.argv[sys.argv.index("--marker") + 1] + ".stopped", "w").write(signal.Signals(signum).name)
    sys.exit(0)
signal.signal(signal.SIGINT, stop)
open(sys.argv[sys.argv.index("--marker") + 1], "w").write("started")
time.sleep(120)
"""


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_stopped_launcher_forwards_sigint_to_its_runs(signum, tmp_path):
    """Started in the background by a shell (SIGINT ignored, as bash leaves it for `cmd &`), a launcher stopped by
    SIGTERM or SIGINT passes SIGINT to its running run (which checkpoints) and exits, leaving no orphaned run."""
    script, marker = tmp_path / "slow.py", tmp_path / "run"
    script.write_text(SLOW)
    proc = subprocess.Popen([sys.executable, "-m", "cleanrl_scaling.utils.launcher", str(script),
                             "--runs-dir", str(tmp_path / "runs"), "--", "--marker", str(marker)],
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.1)
    assert marker.exists(), proc.communicate(timeout=5)
    proc.send_signal(getattr(signal, signum))
    out, err = proc.communicate(timeout=60)
    assert (tmp_path / "run.stopped").read_text() == "SIGINT", err
    assert "forwarding SIGINT to 1 running run" in err and proc.returncode == 130  # docs/pipeline.md


WANDB_FAKE = """import json, os, sys
args = sys.argv[1:]
flags = dict(zip(args, args[1:]))
out = os.path.join(flags["--runs-dir"], f"env_{flags['--lr']}_{flags['--seed']}.json")
os.makedirs(flags["--runs-dir"], exist_ok=True)
json.dump({k: os.environ.get(k) for k in ("WANDB_RUN_GROUP", "WANDB_TAGS")}, open(out, "w"))
"""


def test_runs_of_a_sweep_share_a_wandb_group_and_are_tagged_with_their_grid_point(tmp_path, capsys, monkeypatch):
    script = tmp_path / "wandb_fake.py"
    script.write_text(WANDB_FAKE)
    runs = tmp_path / "runs"
    monkeypatch.delenv("WANDB_RUN_GROUP", raising=False)
    monkeypatch.delenv("WANDB_TAGS", raising=False)
    rc = launcher.main([str(script), "--sweep", "lr=0.1,0.01", "--seeds", "1", "2", "--job-name", "fig_x",
                        "--runs-dir", str(runs), "--", "--total-timesteps", "100"])
    assert rc == 0
    for lr in ("0.1", "0.01"):
        for seed in ("1", "2"):
            env = json.load(open(runs / f"env_{lr}_{seed}.json"))
            # wandb.init splits WANDB_TAGS at commas; the flag common to every run is no tag
            assert env == {"WANDB_RUN_GROUP": "fig_x", "WANDB_TAGS": f"lr={lr},seed={seed}"}
    # the caller's own group wins
    monkeypatch.setenv("WANDB_RUN_GROUP", "mine")
    rc = launcher.main([str(script), "--sweep", "lr=0.5", "--seeds", "3", "--runs-dir", str(runs)])
    assert rc == 0 and json.load(open(runs / "env_0.5_3.json")) == {"WANDB_RUN_GROUP": "mine", "WANDB_TAGS": None}


def test_slurm_resources_reach_the_script(fake_script, tmp_path, capsys):
    """Partition, GPUs, CPUs, time, memory, throttle and extra #SBATCH lines, in the bundled array template."""
    rc = launcher.main([fake_script, "--seeds", "1", "2", "3", "--runs-dir", str(tmp_path), "--slurm-template",
                        "--partition", "gpu", "--gpus-per-run", "2", "--cpus-per-run", "8", "--time", "1-12:00:00",
                        "--mem", "64G", "--max-parallel", "2", "--sbatch=--account=abc", "--sbatch=--qos=high",
                        "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0
    for line in ["#SBATCH --array=0-2%2", "#SBATCH --cpus-per-task=8", "#SBATCH --time=1-12:00:00", "#SBATCH --mem=64G",
                 "#SBATCH --partition=gpu", "#SBATCH --gres=gpu:2", "#SBATCH --account=abc", "#SBATCH --qos=high",
                 "#SBATCH --ntasks=1"]:
        assert line + "\n" in out, line
    assert "slurm_template.sh" in out and "--nodes" not in out


def test_several_nodes_or_tasks_pick_the_multinode_template(fake_script, tmp_path, capsys):
    """One run = one srun step of --tasks-per-node processes on each of --nodes nodes, every process the same line."""
    marker = tmp_path / "ran"
    rc = launcher.main([fake_script, "--seeds", "1", "--runs-dir", str(tmp_path / "runs"), "--slurm-template",
                        "--nodes", "4", "--gpus-per-run", "4", "--no-submit", "--log-dir", str(tmp_path / "logs"),
                        "--", "--marker", str(marker)])
    out = capsys.readouterr().out
    assert rc == 0 and "slurm_multinode_template.sh" not in out  # --no-submit prints the rendered script
    script = (tmp_path / "logs" / "fake_train.sbatch").read_text()
    for line in ["#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1", "#SBATCH --gres=gpu:4",
                 "srun --kill-on-bad-exit=1 --nodes=4 --ntasks-per-node=1 --cpus-per-task=1\n"]:
        assert line in script, line
    assert launcher.PLACEHOLDER.search(script) is None
    # what Slurm runs for array task 0, with an srun that starts its command twice, as 2 tasks would
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\n"$@" && "$@"\n')
    (fake_bin / "srun").chmod(0o755)
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="0", PATH=f"{fake_bin}:{os.environ['PATH']}")
    done = subprocess.run(["bash", str(tmp_path / "logs" / "fake_train.sbatch")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--seed 1" in marker.read_text() and "1 node(s)" not in done.stdout and "4 node(s)" in done.stdout


def test_grid_points_queued_or_running_in_slurm_are_not_launched_again(fake_script, tmp_path, capsys, monkeypatch):
    """A rerun (local or Slurm) while part of the grid is queued or running as array tasks leaves those points out:
    squeue names the tasks, the commands file next to their batch script says which points they run."""
    runs = str(tmp_path / "runs")
    argv = [fake_script, "--seeds", "1", "2", "3", "--runs-dir", runs, "--job-name", "mygrid"]
    assert launcher.main(argv + ["--slurm-template", "--no-submit", "--log-dir", str(tmp_path / "array")]) == 0
    batch = tmp_path / "array" / "mygrid.sbatch"
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    # array task 0 (seed 1) running and task 2 (seed 3) pending; task 1 has finished and left the queue
    (fake_bin / "squeue").write_text(f'#!/bin/bash\n[[ " $* " == *" --name=mygrid "* ]] && '
                                     f'printf "41_0 {batch}\\n41_2 {batch}\\n"\n')
    (fake_bin / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    capsys.readouterr()
    assert launcher.main(argv + ["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# 1 run(s), 2 left out as queued or running in Slurm" in out
    assert [parse_flags(c[2:])["seed"] for c in commands(out)] == ["2"]
    assert launcher.main(argv + ["--dry-run", "--sweep", "x=1"]) == 0  # other flags: another grid point
    assert len(commands(capsys.readouterr().out)) == 3
    other = [fake_script, "--seeds", "1", "2", "3", "--runs-dir", runs, "--job-name", "other", "--dry-run"]
    assert launcher.main(other) == 0 and len(commands(capsys.readouterr().out)) == 3  # another job name


def test_slurm_resource_usage_errors_exit_2(fake_script, tmp_path, capsys):
    base = [fake_script, "--runs-dir", str(tmp_path), "--slurm-template", "--dry-run"]
    assert launcher.main(base + ["--gpus-per-run", "-1"]) == 2
    assert launcher.main(base + ["--nodes", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)


def test_the_time_limit_warning_comes_inside_the_job(fake_script, tmp_path, capsys):
    """--signal-grace is #SBATCH --signal's lead time on both templates; one at or above --time would stop and
    requeue every start of a task at once, so it is refused, whichever way the time limit is written."""
    base = [fake_script, "--runs-dir", str(tmp_path), "--slurm-template", "--dry-run"]
    for extra in ([], ["--nodes", "2"]):
        assert launcher.main(base + extra + ["--signal-grace", "90", "--time", "2"]) == 0
        out = capsys.readouterr().out
        assert "#SBATCH --signal=B:USR1@90\n" in out and "#SBATCH --requeue\n" in out and "--no-requeue" not in out
    for grace, limit in (("120", "2"), ("3600", "01:00:00"), ("300", "0-00:05"), ("0", "04:00:00"),
                         ("-5", "04:00:00")):
        assert launcher.main(base + ["--signal-grace", grace, "--time", limit]) == 2, (grace, limit)
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: --signal-grace {grace}"), err
    assert launcher.main(base + ["--signal-grace", "90", "--slurm-set", "time=00:01:00"]) == 2  # the value in force
    assert launcher.main(base + ["--time", "UNLIMITED"]) == 0  # no limit, nothing to compare
    assert [launcher.slurm_seconds(t) for t in ("90", "1:30", "1:00:00", "1-0", "1-2:3", "1-2:3:4", "x")] == \
        [5400, 90, 3600, 86400, 93780, 93784, None]


def test_two_launchers_started_in_one_second_keep_their_own_log_directories(fake_script, tmp_path, capsys,
                                                                             monkeypatch):
    """Two pinned launchers (one seed each) started in the same second: each keeps its commands.txt."""
    monkeypatch.setattr(launcher.time, "strftime", lambda fmt, *a: "20261128-004102")
    runs = tmp_path / "runs"
    for seed in ("1", "3"):
        assert launcher.main([fake_script, "--job-name", "fig", "--seeds", seed, "--runs-dir", str(runs)]) == 0
    dirs = sorted(os.listdir(runs / "_launcher"))
    assert dirs == ["fig_20261128-004102", "fig_20261128-004102_2"]
    seeds = [parse_flags(shlex.split(open(runs / "_launcher" / d / "commands.txt").read())[2:])["seed"] for d in dirs]
    assert seeds == ["1", "3"]
    # a dry run names the next free directory and claims nothing
    assert launcher.claim_log_dir(str(runs / "_launcher" / dirs[0]), create=False).endswith("_3")
    assert len(os.listdir(runs / "_launcher")) == 2
    # a usage error found after the claim (a --slurm-set without "=") leaves no empty directory behind
    rc = launcher.main([fake_script, "--job-name", "fig", "--seeds", "1", "--runs-dir", str(runs), "--slurm-template",
                        "--no-submit", "--slurm-set", "partition"])
    assert rc == 2 and "--slurm-set 'partition'" in capsys.readouterr().err
    assert len(os.listdir(runs / "_launcher")) == 2
