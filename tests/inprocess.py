"""Run a training script's main() inside the test process (no interpreter start, no second import of torch), as a
user's command line would: shared by the tests that need a script's exit code and its output, and by what they check
of the run it left."""
import contextlib
import io
import json
import os
import pickle
import signal
import socket
import subprocess
import sys


def main_inprocess(module, args, root=None, capture=True):
    """module.main() with argv = args (plus --runs-dir root/runs when root is given); returns (exit code, stdout,
    stderr), the output empty when capture is False (it goes to pytest's capsys). The signal handlers a run installs
    and torch's thread count (--torch-threads sets it for the process) are put back, so that one run cannot leak into
    the next test."""
    old_argv, handlers = sys.argv, {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else None
    sys.argv = [module.__file__] + (["--runs-dir", str(root / "runs")] if root is not None else []) + [str(a) for a in args]
    out, err, code = io.StringIO(), io.StringIO(), 0
    try:
        with contextlib.ExitStack() as stack:
            if capture:
                stack.enter_context(contextlib.redirect_stdout(out))
                stack.enter_context(contextlib.redirect_stderr(err))
            module.main()
    except SystemExit as e:
        code = e.code
    finally:
        sys.argv = old_argv
        if threads:
            torch.set_num_threads(threads)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return code, out.getvalue(), err.getvalue()


def pythonpath(*first) -> str:
    """PYTHONPATH for a new interpreter: `first`, then this process's own (on a CUDA image without a package index it
    names the folder of the packages the image lacks, docs/gpu.md#without-a-package-index)."""
    inherited = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    return os.pathsep.join([*map(str, first), *inherited])


def json_on_devices(test_module: str, expression: str, devices: int, timeout: int) -> dict:
    """Evaluate `expression` (names a test module as t) in a new interpreter on `devices` forced CPU devices and
    return the JSON value it prints last: a JAX test's check on more devices than this process has."""
    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}",
               PYTHONPATH=pythonpath(os.path.dirname(tests), tests))
    code = f"import json, {test_module} as t; print(json.dumps({expression}))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def assert_finished_unevaluated(run_dir: str, iterations: int) -> list:
    """A JAX script's run that never evaluated (--eval-every 0 --no-final-eval): finished at `iterations` with its
    summary and checkpoint, and no solve rate in the summary or the metrics; returns the metrics rows."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert summary["status"] == "finished" and summary["iteration"] == iterations and summary["SPS"] > 0
    assert not [k for k in summary if k.startswith("solve_rate")]
    assert not [r for r in rows if any(k.startswith("charts/solve_rate") for k in r)]
    with open(os.path.join(run_dir, "checkpoints", "latest.ckpt"), "rb") as f:
        assert pickle.load(f)["iteration"] == iterations
    return rows


def free_port() -> int:
    """A TCP port free on this machine now, for a rendezvous of processes the test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
