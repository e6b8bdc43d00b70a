"""--tf32 in the four torch scripts: on by default, applied on CUDA only, and set so that torch's own precision
getters (which inductor calls while compiling) still answer. Runs without a GPU: torch's switches can be set and
read on a CPU build; tests/test_gpu.py checks them after real CUDA runs."""
import importlib
import os
import sys

import pytest
import torch
import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SCRIPTS = ["ppo_atari_envpool", "pqn_atari", "ppo_procgen", "ppo_continuous_mujoco"]


@pytest.fixture
def restore_tf32():
    """The process-wide switches as they were before the test."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("script", SCRIPTS)
def test_tf32_is_a_flag_on_by_default(script):
    m = importlib.import_module(f"cleanrl_scaling.{script}")
    assert tyro.cli(m.Args, args=[]).tf32 is True
    assert tyro.cli(m.Args, args=["--no-tf32"]).tf32 is False


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_cpu_run_leaves_the_precision_switches_alone(script, restore_tf32):
    m = importlib.import_module(f"cleanrl_scaling.{script}")
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
    m.set_tf32(torch.device("cpu"), True)
    m.set_tf32(torch.device("cpu"), False)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, True)
    assert torch.get_float32_matmul_precision() == "highest"


@pytest.mark.parametrize("enabled, precision", [(True, "high"), (False, "highest")])
def test_cuda_switches_matmuls_and_convolutions_and_torchs_getters_still_answer(enabled, precision, restore_tf32):
    m = importlib.import_module("cleanrl_scaling.ppo_atari_envpool")
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = not enabled, not enabled
    m.set_tf32(torch.device("cuda"), enabled)
    assert torch.backends.cuda.matmul.allow_tf32 is enabled and torch.backends.cudnn.allow_tf32 is enabled
    # the getters inductor reads (its tf32 warning, its autotuning cache keys) must not raise
    assert torch.get_float32_matmul_precision() == precision
    assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if enabled else "ieee")  # inductor's TF32 warning reads it
