"""Run a training script's main() inside the test process (no interpreter start, no second import of torch), as a
user's command line would: shared by the tests that need a script's exit code and its output."""
import contextlib
import io
import signal
import sys


def main_inprocess(module, args, root):
    """module.main() with argv = args and --runs-dir root/runs; returns (exit code, stdout, stderr). The signal
    handlers a run installs are put back, so one run's SIGTERM handling cannot leak into the next test."""
    old_argv, handlers = sys.argv, {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    sys.argv = [module.__file__, "--runs-dir", str(root / "runs")] + args
    out, err, code = io.StringIO(), io.StringIO(), 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            module.main()
    except SystemExit as e:
        code = e.code
    finally:
        sys.argv = old_argv
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return code, out.getvalue(), err.getvalue()
