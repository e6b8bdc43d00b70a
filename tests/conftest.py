"""Two hooks: the order in which pytest-xdist hands test files to its two workers (pytest.ini: -n 2 --dist loadfile),
and the skip of gpu-marked tests where no CUDA GPU is present (at the end).

xdist 3.6 hands out files by their number of tests, so the heaviest file (test_ppo_ewma_jax2d.py, 39 tests, 9 minutes
of compiles) started after lighter files with more tests and one worker ran on alone at the end: 1,105 s against
958 s when replayed from the measured file times, 18:51 wall in a clean clone. Heaviest first (longest processing
time first) evens the two workers out (1,031 s each in the same replay)."""
import os
import subprocess

import pytest

# One XLA set-up for every JAX test, read when JAX's CPU backend starts (so here, before any test module imports JAX,
# in every xdist worker; subprocesses inherit it): the persistent compilation cache in the gitignored .jax_cache/, and
# XLA's backend optimisation at -O0, about 3x faster compiles of Kinetix's large step programs, which the tiny test runs
# execute in seconds either way. Every comparison a test makes is between programs compiled alike; the golden numbers
# (test_golden_numerics.py) set their own flags for the subprocesses they start.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".jax_cache"))
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

# Seconds of each file's tests, measured on this 2-core machine in a clean clone (pytest --durations=0 --junitxml,
# 2026-11-29); a file not listed counts as 0 and keeps xdist's order among those. Only the order depends on these.
FILE_SECONDS = {
    "test_ppo_ewma_jax2d.py": 253, "test_sfl_kinetix_jax.py": 207, "test_golden_numerics.py": 135, "test_slurm.py": 77,
    "test_benchmark_scripts.py": 104, "test_ppo_atari_envpool.py": 76, "test_every_script.py": 73,
    "test_ppo_procgen.py": 36, "test_ppo_continuous_mujoco.py": 30, "test_resume_signature.py": 28,
    "test_pqn_atari.py": 27, "test_aggregate.py": 21,
}


@pytest.hookimpl(optionalhook=True)  # a machine without pytest-xdist (a GPU image) still loads this file
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None  # another --dist: xdist's own scheduler
    from xdist.scheduler import LoadFileScheduling

    class HeaviestFileFirst(LoadFileScheduling):
        def _assign_work_unit(self, node):
            # xdist pops the front of its queue: put the heaviest waiting file there first
            heaviest = max(self.workqueue, key=lambda scope: FILE_SECONDS.get(os.path.basename(scope), 0))
            self.workqueue.move_to_end(heaviest, last=False)
            super()._assign_work_unit(node)

    return HeaviestFileFirst(config, log)


def torch_sees_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def driver_lists_a_gpu() -> bool:
    """nvidia-smi -L lists a GPU that CUDA_VISIBLE_DEVICES does not hide: for the JAX tests, which must run (and fail,
    saying so, if JAX cannot use it) where torch is absent or a CPU build, as in the JAX environment docs/installation.md
    sets up."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def pytest_collection_modifyitems(config, items):
    """Tests marked gpu are skipped where their framework has no CUDA GPU (pytest.ini's marker): torch's tests where
    torch sees none, JAX's (marked gpu("jax")) where the driver lists none. torch is imported only when such a test
    was collected, so a run of other files does not pay for it here."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    present = {"torch": torch_sees_cuda(), "jax": driver_lists_a_gpu()}
    for item in gpu_items:
        framework = (item.get_closest_marker("gpu").args or ("torch",))[0]
        if not present[framework]:
            item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU that {framework} can use: none seen"))
