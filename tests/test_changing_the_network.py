"""The network contract of the four torch scripts (docs/<script>.md, "Changing the network"): the example network
printed on each page replaces the default one and runs a training iteration with diagnostics; a network with
nothing to watch is refused at start with one line (exit code 2)."""
import importlib
import json
import math
import os
import re
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from inprocess import main_inprocess  # noqa: E402

# script -> (class the script builds, arguments of one tiny iteration with diagnostics)
SCRIPTS = {
    "ppo_atari_envpool": ("Agent", ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2",
                                    "--update-epochs", "2", "--total-timesteps", "64", "--save-features-every", "1",
                                    "--features-states", "8"]),
    "pqn_atari": ("QNetwork", ["--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--update-epochs", "2",
                               "--eval-envs", "2", "--total-timesteps", "16"]),
    "ppo_procgen": ("Agent", ["--env-id", "bigfish", "--num-envs", "1", "--num-steps", "64", "--num-minibatches", "2",
                              "--update-epochs", "2", "--total-timesteps", "64"]),
    "ppo_continuous_mujoco": ("Agent", ["--env-id", "HalfCheetah-v4", "--num-envs", "2", "--num-steps", "32",
                                        "--minibatch-size", "16", "--update-epochs", "2", "--diagnostics-states", "32",
                                        "--total-timesteps", "64"]),
}
COMMON = ["--diagnostics-every", "1", "--no-compile", "--progress", "none", "--seed", "1"]


def documented_network(script):
    """The python block of the page's "Changing the network" section, run in the script's namespace."""
    page = open(os.path.join(ROOT, "docs", f"{script}.md")).read()
    section = page.split("## Changing the network\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    m = importlib.import_module(f"cleanrl_scaling.{script}")
    namespace = dict(vars(m))
    exec(code, namespace)
    return m, namespace[SCRIPTS[script][0]]


def test_documented_networks_are_not_sequential_relu_stacks():
    for script in SCRIPTS:
        m, network = documented_network(script)
        net = network(*([6] if script != "ppo_continuous_mujoco" else [17, 6]))
        types = {type(mod) for mod in net.modules()}
        assert nn.GELU in types and nn.ReLU not in types and nn.Tanh not in types, script
        assert not any(isinstance(mod, nn.Sequential) for mod in net.modules()), script
        assert not hasattr(net, "trunk_activations") and not hasattr(net, "critic_network"), script


def test_watched_features_are_the_trunk_output_by_an_independent_route():
    """record_activations' features and magnitudes, against the example trunk's own output computed without hooks."""
    m, network = documented_network("ppo_atari_envpool")
    torch.manual_seed(0)
    agent = network(6)
    obs = torch.randint(0, 255, (5, 4, 84, 84), dtype=torch.uint8)
    (features, magnitudes), = m.record_activations(agent, obs.split(2)).values()
    with torch.no_grad():
        x = agent.trunk.stem(obs.float() / 255.0)
        first = torch.nn.functional.gelu(x)
        hidden = agent.trunk(obs.float() / 255.0)
    assert len(magnitudes) == 3  # the three GELUs, in the order they run
    assert np.allclose(features, hidden.numpy(), atol=1e-6)
    assert np.allclose(magnitudes[0], first.abs().mean((2, 3)).numpy(), atol=1e-6)  # a conv channel is one unit
    assert np.allclose(magnitudes[2], hidden.abs().numpy(), atol=1e-6)


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_documented_network_runs_a_diagnostic_iteration(script, tmp_path, monkeypatch):
    m, network = documented_network(script)
    monkeypatch.setattr(m, SCRIPTS[script][0], network)
    code, stdout, stderr = main_inprocess(m, SCRIPTS[script][1] + COMMON, tmp_path)
    assert code in (0, None), stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    (diag,) = [r for r in rows if "diagnostics/feature_rank" in r]
    for tag, value in diag.items():
        assert math.isfinite(value), (tag, value)
    width = 64 if script == "ppo_continuous_mujoco" else (256 if script == "ppo_procgen" else 512)
    assert 1 <= diag["diagnostics/feature_rank"] <= diag["diagnostics/srank"] <= width
    assert 0 <= diag["diagnostics/dormant_frac_tau0"] <= diag["diagnostics/dormant_frac"] <= 1
    if script == "ppo_continuous_mujoco":  # the example names its critic value_net and declares it
        assert 1 <= diag["diagnostics/critic_feature_rank"] <= 64
        agent = network(17, 6)
        critic = np.linalg.norm(np.concatenate([p.detach().reshape(-1).numpy() for p in agent.value_net.parameters()]))
        assert "diagnostics/critic_weight_norm" in diag and critic > 0
        assert diag["diagnostics/actor_weight_norm"] ** 2 + diag["diagnostics/critic_weight_norm"] ** 2 == \
            pytest.approx(diag["diagnostics/weight_norm"] ** 2, rel=1e-5)
    else:  # one shared trunk: no critic_ metrics
        assert not any(tag.startswith("diagnostics/critic_") for tag in diag)
    if script == "ppo_atari_envpool":
        (saved,) = (run_dir / "features").glob("iter_*.npz")
        with np.load(saved) as data:
            assert data["features"].shape == (8, 512)


class Functional(nn.Module):
    """A network whose only activation is a function call: nothing for the diagnostics to hook."""

    def __init__(self, *sizes, **kwargs):
        super().__init__()
        self.linear = nn.Linear(1, 8)

    def forward(self, obs):  # never reached: the script stops before training
        return torch.relu(self.linear(obs.float().flatten(1)[:, :1]))


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_a_network_with_nothing_to_watch_is_refused_at_start(script, tmp_path, monkeypatch):
    m = importlib.import_module(f"cleanrl_scaling.{script}")
    monkeypatch.setattr(m, SCRIPTS[script][0], Functional)
    code, stdout, stderr = main_inprocess(m, SCRIPTS[script][1] + COMMON, tmp_path)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the diagnostics found no activation module")
    assert f"docs/{script}.md" in lines[0] and "--diagnostics-every 0" in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # before any run directory


def with_a_wrong_shape(cls, script):
    """The script's own network, except that one output has a trailing axis: value [B, 1] (the critic's Linear(., 1)
    without squeeze), or for PQN q-values [B, A, 1]."""
    class WrongShape(cls):
        def forward(self, obs):
            outputs = super().forward(obs)
            if script == "pqn_atari":
                return outputs[..., None]
            return (*outputs[:-1], outputs[-1][:, None])
    return WrongShape


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_a_network_whose_output_breaks_the_contract_is_named_at_start(script, tmp_path, monkeypatch):
    """Such a network used to fail deep in collect_rollout (expand(torch.FloatTensor{[8, 1]}, size=[8]))."""
    m = importlib.import_module(f"cleanrl_scaling.{script}")
    cls = SCRIPTS[script][0]
    monkeypatch.setattr(m, cls, with_a_wrong_shape(getattr(m, cls), script))
    code, stdout, stderr = main_inprocess(m, SCRIPTS[script][1] + COMMON, tmp_path)
    assert code == 2
    (line,) = stderr.strip().splitlines()
    wrong = r"q_values of shape \[2, (\d+), 1\], not \[2, \1\]" if script == "pqn_atari" else \
        r"value of shape \[2, 1\], not \[2\];"
    assert line.startswith("error: WrongShape(obs [2, ") and re.search(wrong, line), line
    assert f"docs/{script}.md, Changing the network" in line and "Traceback" not in stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # before any run directory
