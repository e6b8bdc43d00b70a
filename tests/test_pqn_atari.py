"""pqn_atari.py: Q(lambda) and the exploration schedule against hand-computed values, then runs of the script.
The runs share a few tiny trainings (module-scoped fixtures), in-process and eager; what every script promises (bad
input, SIGTERM, diagnostics that do not change training) is in tests/test_every_script.py."""
import dataclasses
import json
import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "cleanrl_scaling", "pqn_atari.py")
sys.path.insert(0, ROOT)
from cleanrl_scaling import pqn_atari as m  # noqa: E402
from inprocess import main_inprocess as run_inprocess  # noqa: E402

TINY = ["--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--update-epochs", "2", "--eval-envs", "2",
        "--progress", "none", "--no-compile"]
BATCH = 16
NO_AUTOCAST = lambda: torch.autocast("cpu", enabled=False)  # noqa: E731


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny batches gain nothing from a second thread, and on a shared machine OpenMP's spinning threads make
    every forward pass many times slower: this module runs on one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def read_metrics(run_dir):
    return [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]


def run_dirs(root):
    return sorted(str(p) for p in (root / "runs").iterdir())


def main_inprocess(args, root):
    """Run the script's main() in this process (no interpreter start); returns (exit code, stdout, stderr)."""
    return run_inprocess(m, args, root)


# ------------------------------------------------------------------------------------------------ Q(lambda)
def q_lambda_by_hand_rollout():
    """One env, 5 steps: obs[2] is terminal (step 2 is envpool's reset step), the env is truncated after step 4."""
    rewards = torch.tensor([[1.0], [2.0], [0.0], [3.0], [4.0]])
    max_q = torch.tensor([[0.5], [1.0], [9.0], [2.0], [5.0]])  # max_a Q(obs[t], a)
    dones = torch.tensor([[0.0], [0.0], [1.0], [0.0], [0.0]])
    terms = dones.clone()
    return rewards, max_q, dones, terms, torch.tensor([7.0]), torch.tensor([1.0]), torch.tensor([0.0])


@pytest.mark.parametrize("lam, expected", [
    # G4 = r4 + g maxQ(s5) (truncation: bootstrap); G3 = r3 + g [l G4 + (1-l) maxQ(s4)]; G1 = r1 (s2 terminal);
    # G0 = r0 + g [l G1 + (1-l) maxQ(s1)]
    (0.5, {4: 4 + 0.9 * 7, 3: 3 + 0.9 * (0.5 * 10.3 + 0.5 * 5), 1: 2.0, 0: 1 + 0.9 * (0.5 * 2 + 0.5 * 1.0)}),
    # lambda = 1: Monte Carlo returns, bootstrapped only where the rollout or a truncation cuts the episode
    (1.0, {4: 4 + 0.9 * 7, 3: 3 + 0.9 * 4 + 0.9 ** 2 * 7, 1: 2.0, 0: 1 + 0.9 * 2}),
    # lambda = 0: one-step targets r_t + g (1 - term) maxQ(s_{t+1})
    (0.0, {4: 4 + 0.9 * 7, 3: 3 + 0.9 * 5, 1: 2.0, 0: 1 + 0.9 * 1.0}),
])
def test_q_lambda_by_hand_with_termination_truncation_and_reset_step(lam, expected):
    targets = m.compute_q_lambda_targets(*q_lambda_by_hand_rollout(), gamma=0.9, lam=lam)
    for t, value in expected.items():  # step 2 is the reset step: masked out of the loss, its target unused
        assert targets[t, 0].item() == pytest.approx(value, abs=1e-5), t


def test_q_lambda_matches_the_closed_form_sum_without_dones():
    g = torch.Generator().manual_seed(0)
    T, gamma, lam = 6, 0.97, 0.65
    rewards, max_q = torch.randn(T, 3, generator=g), torch.randn(T, 3, generator=g)
    next_max_q, zeros = torch.randn(3, generator=g), torch.zeros(T, 3)
    targets = m.compute_q_lambda_targets(rewards, max_q, zeros, zeros, next_max_q, torch.zeros(3), torch.zeros(3), gamma, lam)
    # independent route: G_t = sum_k (g l)^k [r_{t+k} + g (1-l) Q_{t+k+1}] over k < T-1-t, then (g l)^(T-1-t) (r_{T-1} + g Q_T)
    q = torch.cat([max_q, next_max_q[None]])
    for t in range(T):
        n = T - 1 - t
        expected = sum((gamma * lam) ** k * (rewards[t + k] + gamma * (1 - lam) * q[t + k + 1]) for k in range(n))
        expected = expected + (gamma * lam) ** n * (rewards[T - 1] + gamma * q[T])
        assert torch.allclose(targets[t], expected, atol=1e-5)


def test_td_loss_by_hand_with_a_masked_sample():
    q_values = torch.tensor([[1.0, 3.0], [0.5, -1.0], [2.0, 2.0]], requires_grad=True)
    network = lambda obs: q_values[obs]  # noqa: E731  (the "frames" index the fixed Q table)
    obs, actions = torch.tensor([0, 1, 2]), torch.tensor([1, 0, 1])
    targets, valid = torch.tensor([2.0, 1.5, 100.0]), torch.tensor([1.0, 1.0, 0.0])
    loss, stats = m.td_loss(network, obs, actions, targets, valid, valid.sum())
    assert loss.item() == pytest.approx(((3 - 2) ** 2 + (0.5 - 1.5) ** 2) / 2)  # the masked sample adds nothing
    assert stats.td_loss.item() == pytest.approx(1.0) and stats.q_values.item() == pytest.approx((3.0 + 0.5) / 2)


# ------------------------------------------------------------------------------------------------ exploration
def test_epsilon_schedule():
    args = m.Args(total_timesteps=1000)  # 1 -> 0.01 over the first 10% = 100 steps
    assert [m.epsilon_at(s, args) for s in (0, 50, 100, 500)] == pytest.approx([1.0, 0.505, 0.01, 0.01])
    args = m.Args(total_timesteps=10_000_000, exploration_steps=250_000)  # M25 Table 1's decay
    assert m.epsilon_at(125_000, args) == pytest.approx(0.505) and m.epsilon_at(250_000, args) == pytest.approx(0.01)


def test_epsilon_greedy_explores_at_rate_epsilon():
    torch.manual_seed(0)
    q = torch.tensor([[0.0, 1.0, 0.0, 0.0]]).repeat(200_000, 1)
    assert torch.equal(m.epsilon_greedy(q, 0.0), torch.ones(200_000, dtype=torch.long))
    actions = m.epsilon_greedy(q, 0.3)
    freq = torch.bincount(actions, minlength=4).float() / len(actions)
    expected = torch.tensor([0.075, 0.7 + 0.075, 0.075, 0.075])  # eps / A each, plus 1 - eps on the greedy action
    assert torch.allclose(freq, expected, atol=0.005)


def test_greedy_change_by_hand():
    assert m.greedy_change(np.array([0, 1, 2, 3]), np.array([0, 2, 2, 0])) == 0.5


# ------------------------------------------------------------------------------------------------ update
def tiny_batch(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return m.Batch(torch.randint(0, 255, (n, 4, 84, 84), dtype=torch.uint8, generator=g),
                   torch.randint(0, 4, (n,), generator=g), torch.randn(n, generator=g), torch.ones(n))


def gradient(net, batch, idx, args, loss_fn=m.td_loss):
    net.zero_grad(set_to_none=True)
    stats = m.minibatch_gradient(net, batch, idx, args, NO_AUTOCAST, loss_fn, m.Ranks())
    return torch.cat([p.grad.reshape(-1) for p in net.parameters()]), torch.stack(stats)


def test_masked_samples_carry_no_gradient_and_chunks_add_up():
    torch.manual_seed(0)
    net = m.QNetwork(4)
    batch = tiny_batch(12)
    batch.valid[[2, 7]] = 0.0  # two steps the env ignored
    idx = torch.randperm(12)
    whole, stats_whole = gradient(net, batch, idx, m.Args(update_chunk_size=0))
    chunked, stats_chunked = gradient(net, batch, idx, m.Args(update_chunk_size=5))
    assert whole.abs().max() > 0
    assert torch.allclose(whole, chunked, rtol=1e-4, atol=1e-5) and torch.allclose(stats_whole, stats_chunked, rtol=1e-5)
    batch.targets[[2, 7]] = 1e3  # garbage targets on the masked samples change nothing
    garbage, stats_garbage = gradient(net, batch, idx, m.Args(update_chunk_size=0))
    assert torch.allclose(whole, garbage, atol=1e-7) and torch.allclose(stats_whole, stats_garbage, atol=1e-7)


def test_compiled_loss_gives_the_eager_gradient():
    torch.manual_seed(0)
    net = m.QNetwork(4, channels_last=True).to(memory_format=torch.channels_last)
    batch = tiny_batch(16)
    batch.valid[[3, 9]] = 0.0
    idx = torch.randperm(16)
    eager, eager_stats = gradient(net, batch, idx, m.Args())
    compiled, compiled_stats = gradient(net, batch, idx, m.Args(), m.maybe_compile(m.td_loss, True))
    assert eager.abs().max() > 0
    assert torch.allclose(eager, compiled, rtol=1e-4, atol=1e-6)
    assert torch.allclose(eager_stats, compiled_stats, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("bf16", [False, True])
def test_rollout_stores_the_networks_own_max_q_and_greedy_actions(bf16):
    torch.manual_seed(0)
    envs = m.make_envs("Breakout-v5", 2, seed=0)
    net = m.QNetwork(envs.action_space.n).eval()
    storage = m.make_storage(8, 2, envs.observation_space.shape, "cpu")
    obs, _ = envs.reset()
    zeros = torch.zeros(2)
    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
    args = m.Args(num_envs=2, num_steps=8, start_e=0.0, end_e=0.0)  # greedy: the stored action is the argmax
    m.collect_rollout([envs], net, storage, m.NextStep(torch.as_tensor(obs), zeros, zeros), m.EpisodeStats(2), args, "cpu",
                      autocast, 0, None, m.Ranks())
    for t in range(8):
        with torch.no_grad(), autocast():
            q = net(storage.obs[t]).float()
        assert torch.equal(q.max(-1).values, storage.max_q[t]) and torch.equal(q.argmax(-1), storage.actions[t])
    assert storage.obs[1:].float().std() > 0  # the frames moved: the check ran on a real trajectory


class FrameQNetwork(torch.nn.Module):
    """Q-values that are a function of the frames: their pixel sum (exact in float32) on action (sum mod A), 0 on the
    others. Greedy rollouts that differ only in how they draw the exploration noise must then store the same bits."""

    def __init__(self, num_actions):
        super().__init__()
        self.num_actions = num_actions

    def forward(self, obs):
        total = obs.long().sum(dim=(1, 2, 3))
        return total.float()[:, None] * torch.nn.functional.one_hot(total % self.num_actions, self.num_actions).float()


def rollouts(async_envs, num_envs, num_steps, times, seed=7, device="cpu"):
    """`times` consecutive greedy rollouts of FrameQNetwork in one mode, with two evaluation envs (epsilon 0.5, their
    own generator) riding along: (storage, NextStep, finished games, finished eval games, eval frames) of each."""
    groups = m.make_env_groups("Breakout-v5", num_envs, seed, async_envs)
    q_network = FrameQNetwork(groups[0].action_space.n)
    evaluator = m.Evaluator("Breakout-v5", 2, seed + 500_009, 0.5, device)
    args = m.Args(num_envs=num_envs, num_steps=num_steps, start_e=0.0, end_e=0.0)  # greedy: actions from the frames
    stats, zeros = m.EpisodeStats(num_envs), torch.zeros(num_envs, device=device)
    state = m.NextStep(torch.as_tensor(np.concatenate([g.reset()[0] for g in groups]), device=device), zeros, zeros)
    out = []
    for i in range(times):
        storage = m.make_storage(num_steps, num_envs, groups[0].observation_space.shape, device)
        finished, eval_finished, state = m.collect_rollout(groups, q_network, storage, state, stats, args, device,
                                                           NO_AUTOCAST, i * num_envs * num_steps, evaluator, m.Ranks())
        out.append((storage, state, finished, eval_finished, evaluator.obs.clone()))
    for envs in groups + [evaluator.envs]:
        envs.close()
    return out


def test_async_envs_collect_the_transitions_of_one_group(device="cpu"):
    """--async-envs (two halves of the envs stepping in turn through envpool's send/recv) must be a reordering of
    the synchronous rollout: with Q-values that are a function of the frames and epsilon 0, two consecutive rollouts
    store the same frames, actions, max Q, rewards, done and terminated flags, end in the same NextStep and finish
    the same games, env by env; the evaluation envs take one step per step in both. (tests/test_gpu.py runs it on
    CUDA.)"""
    sync, alternating = rollouts(False, 6, 96, 2, device=device), rollouts(True, 6, 96, 2, device=device)
    for (a, a_state, a_done, a_eval, a_eval_obs), (b, b_state, b_done, b_eval, b_eval_obs) in zip(sync, alternating):
        for field in dataclasses.fields(m.Storage):
            assert torch.equal(getattr(a, field.name), getattr(b, field.name)), field.name
        for x, y in zip(a_state, b_state):
            assert torch.equal(x, y)
        assert sorted(a_done) == sorted(b_done) and a_eval == b_eval and torch.equal(a_eval_obs, b_eval_obs)
    storage = sync[1][0]
    # lives were lost, points scored and whole games finished; every action was taken and the envs differ
    assert storage.dones.sum() >= 4 and sum(x[0].rewards.sum() for x in sync) > 0 and len(sync[1][2]) > 0
    assert len(storage.actions.unique()) == 4 and (storage.obs[:, :3] != storage.obs[:, 3:]).any()
    assert not torch.equal(sync[0][4], sync[1][4])  # the evaluation envs moved between the rollouts


def test_async_envs_runs_a_complete_run_and_refuses_an_odd_count(tmp_path):
    code, _, err = main_inprocess(TINY[2:] + ["--num-envs", "5", "--async-envs", "--total-timesteps", "1024"],
                                  tmp_path / "odd")
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "--async-envs" in lines[0] and "even --num-envs" in lines[0], err
    assert not (tmp_path / "odd" / "runs").exists()
    code, out, err = main_inprocess(TINY + ["--async-envs", "--total-timesteps", str(2 * BATCH),
                                            "--diagnostics-every", "2"], tmp_path)
    assert code == 0, err[-3000:]
    (run_dir,) = run_dirs(tmp_path)
    assert "in two alternating halves" in out
    assert json.load(open(os.path.join(run_dir, "config.json")))["args"]["async_envs"] is True
    rows = read_metrics(run_dir)
    assert [r[0] for r in losses(run_dir)] == [1, 2] and any("diagnostics/feature_rank" in r for r in rows)
    assert all(math.isfinite(v) for r in rows for v in r.values())
    assert json.load(open(os.path.join(run_dir, "summary.json")))["status"] == "finished"


def test_evaluator_draws_nothing_from_the_training_stream():
    torch.manual_seed(0)
    evaluator = m.Evaluator("Breakout-v5", 2, seed=5, epsilon=0.5, device="cpu")
    before = torch.get_rng_state()
    for _ in range(5):
        evaluator.step(torch.randn(2, 4, generator=torch.Generator().manual_seed(1)))
    assert torch.equal(before, torch.get_rng_state())
    assert evaluator.generator.get_state().ne(torch.Generator().manual_seed(5).get_state()).any()  # it drew


def test_episode_stats_whole_game_several_per_step_and_truncation():
    stats = m.EpisodeStats(3)
    info = {"reward": np.array([1.0, 2.0, 5.0]), "terminated": np.array([0, 0, 0]), "elapsed_step": np.array([1, 1, 1])}
    assert stats.update(info, np.array([False, False, False])) == []
    info = {"reward": np.array([10.0, 0.0, 1.0]), "terminated": np.array([1, 0, 1]), "elapsed_step": np.array([2, 2, 2])}
    assert stats.update(info, np.array([False, True, False])) == [(11.0, 2), (2.0, 2), (6.0, 2)]


# ------------------------------------------------------------------------------------------------ flags
def test_presets_change_the_defaults_and_explicit_flags_win():
    args = m.parse_args(["--preset", "purejaxql"])
    assert (args.num_envs, args.num_steps, args.num_minibatches, args.update_epochs) == (128, 32, 32, 2)
    assert (args.anneal_lr, args.end_e, args.q_lambda, args.max_grad_norm) == (False, 0.001, 0.65, 10.0)
    assert m.parse_args(["--preset=purejaxql", "--num-envs", "64"]).num_envs == 64
    args = m.parse_args([])
    assert (args.preset, args.num_envs, args.num_steps, args.anneal_lr, args.optimizer) == ("cleanrl", 8, 128, True, "radam")
    # a recipe's base configuration is the preset's defaults: 128 x 32 / 32 minibatches = 128 samples
    scaling = m.resolve_scaling(m.parse_args(["--preset", "purejaxql", "--num-envs", "512", "--scaling-recipe", "more-minibatches"]))
    assert (scaling["minibatch_size"], scaling["num_minibatches"], scaling["base_num_envs"]) == (128, 128, 128)


def test_the_purejaxql_preset_changes_defaults_only_and_keeps_args_help(monkeypatch):
    """PurejaxqlArgs re-declares fields for their defaults alone: the help text of each is Args' (one place to
    edit), and --preset purejaxql --help shows it beside the preset's default."""
    import ast
    import dataclasses

    def field_docs(name):
        source = open(SCRIPT).read()
        (cls,) = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == name]
        return {a.target.id: isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
                for a, b in zip(cls.body, cls.body[1:] + [None]) if isinstance(a, ast.AnnAssign)}

    preset, base = field_docs("PurejaxqlArgs"), field_docs("Args")
    assert len(preset) >= 10 and not any(preset.values())  # no docstring of its own under any field
    assert all(base[name] for name in preset)  # Args has one for each
    defaults = {f.name: f.default for f in dataclasses.fields(m.PurejaxqlArgs)}
    assert {name: defaults[name] for name in preset} != {f.name: f.default for f in dataclasses.fields(m.Args)
                                                           if f.name in preset}
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = run_inprocess(m, ["--preset", "purejaxql", "--help"])
    assert code == 0
    help_line = [line for line in out.splitlines() if "--num-envs INT" in line]
    assert help_line and "the number of parallel game environments" in help_line[0] and "(default: 128)" in help_line[0]


# purejaxql's Atari setting, written from mttga/purejaxql at commit 47af6d7 (file: line):
# purejaxql/config/alg/pqn_atari.yaml and purejaxql/pqn_atari.py
PUREJAXQL = {
    "TOTAL_TIMESTEPS": 5e7,           # pqn_atari.yaml:2
    "TOTAL_TIMESTEPS_DECAY": 5e7,     # pqn_atari.yaml:3 (epsilon's and lr's decay horizon)
    "NUM_ENVS": 128,                  # pqn_atari.yaml:4
    "NUM_STEPS": 32,                  # pqn_atari.yaml:5
    "EPS_START": 1.0,                 # pqn_atari.yaml:6
    "EPS_FINISH": 0.001,              # pqn_atari.yaml:7
    "EPS_DECAY": 0.1,                 # pqn_atari.yaml:8 (a fraction of NUM_UPDATES_DECAY, pqn_atari.py:168-172)
    "NUM_EPOCHS": 2,                  # pqn_atari.yaml:9
    "NUM_MINIBATCHES": 32,            # pqn_atari.yaml:10
    "NORM_TYPE": "layer_norm",        # pqn_atari.yaml:11
    "LR": 0.00025,                    # pqn_atari.yaml:12
    "MAX_GRAD_NORM": 10,              # pqn_atari.yaml:13 (optax.clip_by_global_norm, pqn_atari.py:195)
    "LR_LINEAR_DECAY": False,         # pqn_atari.yaml:14
    "GAMMA": 0.99,                    # pqn_atari.yaml:15
    "LAMBDA": 0.65,                   # pqn_atari.yaml:16
    "episodic_life": True,            # pqn_atari.yaml:21
    "reward_clip": True,              # pqn_atari.yaml:22
    "repeat_action_probability": 0.0,  # pqn_atari.yaml:23
    "frame_skip": 4,                  # pqn_atari.yaml:24
    "noop_max": 30,                   # pqn_atari.yaml:25
    "TEST_ENVS": 8,                   # pqn_atari.yaml:29
    "EPS_TEST": 0.0,                  # pqn_atari.yaml:30
    "optimizer": "radam",             # pqn_atari.py:196 (optax.radam: eps 1e-8)
    "loss_coef": 0.5,                 # pqn_atari.py:331, loss = 0.5 * square(q - target).mean()
}


def test_purejaxql_preset_is_purejaxqls_config_value_by_value():
    args = m.parse_args(["--preset", "purejaxql"])
    p = PUREJAXQL
    assert args.total_timesteps == p["TOTAL_TIMESTEPS"] == p["TOTAL_TIMESTEPS_DECAY"]
    assert (args.num_envs, args.num_steps) == (p["NUM_ENVS"], p["NUM_STEPS"])
    assert (args.start_e, args.end_e, args.exploration_fraction) == (p["EPS_START"], p["EPS_FINISH"], p["EPS_DECAY"])
    assert args.exploration_steps == 0 and args.epsilon_per_update
    assert (args.update_epochs, args.num_minibatches) == (p["NUM_EPOCHS"], p["NUM_MINIBATCHES"])
    assert (args.learning_rate, args.max_grad_norm, args.anneal_lr) == (p["LR"], p["MAX_GRAD_NORM"], p["LR_LINEAR_DECAY"])
    assert (args.gamma, args.q_lambda) == (p["GAMMA"], p["LAMBDA"])
    assert (args.eval_envs, args.eval_epsilon) == (p["TEST_ENVS"], p["EPS_TEST"])
    assert (args.optimizer, args.adam_eps, args.td_loss_coef) == (p["optimizer"], 1e-8, p["loss_coef"])
    assert args.network == "purejaxql" and p["NORM_TYPE"] == "layer_norm"
    # NUM_UPDATES = TOTAL_TIMESTEPS // NUM_STEPS // NUM_ENVS (pqn_atari.py:111-113): 12,207 updates
    scaling = m.resolve_scaling(args)
    assert args.total_timesteps // scaling["batch_size"] == int(p["TOTAL_TIMESTEPS"] // p["NUM_STEPS"] // p["NUM_ENVS"]) == 12207
    assert scaling["minibatch_size"] == 128 and scaling["learning_rate"] == p["LR"]
    # the training envs: envpool with purejaxql's ENV_KWARGS (ours sets two; the others are envpool's defaults)
    config = m.make_envs("Pong-v5", 1, seed=0).spec.config
    for key in ("episodic_life", "reward_clip", "repeat_action_probability", "frame_skip", "noop_max"):
        assert getattr(config, key) == p[key], key


def test_purejaxql_epsilon_is_optax_linear_schedule_over_updates():
    """eps_scheduler(n_updates) = linear_schedule(1, 0.001, 0.1 x NUM_UPDATES_DECAY) (pqn_atari.py:168-172, 230):
    constant within a rollout, 1220.7 updates to reach 0.001."""
    args = m.parse_args(["--preset", "purejaxql"])
    decay_updates = PUREJAXQL["EPS_DECAY"] * (PUREJAXQL["TOTAL_TIMESTEPS_DECAY"] // 32 // 128)
    for n in (0, 1, 610, 1220, 1221, 5000):
        expected = 1.0 + (0.001 - 1.0) * min(n / decay_updates, 1.0)
        for step in (0, 31):  # the first and the last step of the rollout after n updates
            assert m.rollout_epsilon(n * 4096, step, args) == pytest.approx(expected, rel=1e-12), (n, step)
    cleanrl = m.Args(total_timesteps=1000, num_envs=2, num_steps=5)  # per step, counting the current one
    assert [m.rollout_epsilon(40, s, cleanrl) for s in (0, 4)] == pytest.approx([m.epsilon_at(42, cleanrl), m.epsilon_at(50, cleanrl)])


def test_purejaxql_layernorm_is_flax_default_by_hand():
    """flax nn.LayerNorm() on NHWC (pqn_atari.py:34, 80): each position's channels, eps 1e-6, per-channel affine."""
    torch.manual_seed(0)
    net = m.QNetwork(6, network="purejaxql")
    norms = [layer for layer in net.network if isinstance(layer, torch.nn.LayerNorm)]
    assert [tuple(n.normalized_shape) for n in norms] == [(32,), (64,), (64,), (512,)]
    assert all(n.eps == 1e-6 for n in norms)
    ln = norms[0]
    with torch.no_grad():
        ln.weight.copy_(torch.randn(32))
        ln.bias.copy_(torch.randn(32))
    x = 1e-3 * torch.randn(2, 32, 5, 3)  # variance ~1e-6, where eps 1e-6 against 1e-5 shows
    mean = x.mean(dim=1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=1, keepdim=True)
    expected = (x - mean) / torch.sqrt(var + 1e-6) * ln.weight[None, :, None, None] + ln.bias[None, :, None, None]
    assert torch.allclose(ln(x), expected, atol=1e-5, rtol=1e-5)
    wrong_eps = (x - mean) / torch.sqrt(var + 1e-5) * ln.weight[None, :, None, None] + ln.bias[None, :, None, None]
    assert not torch.allclose(ln(x), wrong_eps, atol=1e-3)
    # the cleanrl network keeps CleanRL's LayerNorm over the whole (C, H, W) map with torch's eps 1e-5
    cleanrl = [l for l in m.QNetwork(6).network if isinstance(l, torch.nn.LayerNorm)]
    assert [tuple(n.normalized_shape) for n in cleanrl] == [(32, 20, 20), (64, 9, 9), (64, 7, 7), (512,)]
    assert all(n.eps == 1e-5 for n in cleanrl)


def test_purejaxql_init_he_normal_trunk_and_lecun_normal_head():
    """he_normal for the convs and the 512 layer (pqn_atari.py:44, 53, 62, 67), flax Dense's default lecun_normal
    for the Q head (:88): truncated normals with std sqrt(2 / fan_in) and sqrt(1 / fan_in), zero biases."""
    torch.manual_seed(0)
    net = m.QNetwork(18, network="purejaxql")
    layers = [l for l in net.network if isinstance(l, (torch.nn.Conv2d, torch.nn.Linear))] + [net.q_head]
    fan_ins = [4 * 8 * 8, 32 * 4 * 4, 64 * 3 * 3, 3136, 512]
    scales = [2.0, 2.0, 2.0, 2.0, 1.0]
    for layer, fan_in, scale in zip(layers, fan_ins, scales):
        w = layer.weight.detach().double()
        std = math.sqrt(scale / fan_in)
        assert w.std().item() == pytest.approx(std, rel=0.03), (layer, w.std().item(), std)
        assert w.abs().max().item() <= 2 * std / 0.87962566103423978 + 1e-7  # cut at 2 sigma of the untruncated normal
        assert w.abs().max().item() > 1.8 * std / 0.87962566103423978  # ...and the cut is reached, no narrower
        assert torch.count_nonzero(layer.bias) == 0
    # CleanRL's head (orthogonal, gain sqrt 2) has twice lecun's variance: the check above tells the two apart
    assert m.QNetwork(18).q_head.weight.std().item() == pytest.approx(math.sqrt(2 / 512), rel=0.03)


def test_td_loss_coef_halves_the_gradient():
    """purejaxql's loss is 0.5 x the mean squared TD error (pqn_atari.py:331): half CleanRL's gradient."""
    torch.manual_seed(0)
    net = m.QNetwork(4, network="purejaxql")
    batch = tiny_batch(12)
    idx = torch.arange(12)
    full, full_stats = gradient(net, batch, idx, m.Args(update_chunk_size=0))
    half, half_stats = gradient(net, batch, idx, m.Args(update_chunk_size=0, td_loss_coef=0.5))
    assert full.abs().max() > 0
    assert torch.allclose(half, 0.5 * full, rtol=1e-6, atol=1e-9)
    assert half_stats[0].item() == pytest.approx(0.5 * full_stats[0].item()) and half_stats[1] == full_stats[1]
    assert m.parse_args(["--preset", "purejaxql"]).td_loss_coef == 0.5 and m.parse_args([]).td_loss_coef == 1.0


@pytest.mark.parametrize("network", ["cleanrl", "purejaxql"])
def test_diagnostics_features_are_the_policys_under_bf16(network):
    """Under --bf16 the diagnostics read the trunk under the same autocast as the policy's forward pass."""
    torch.manual_seed(0)
    net = m.QNetwork(4, network=network).eval()
    obs = tiny_batch(6).obs
    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16)
    seen = []
    hook = net.q_head.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0].detach().float()))
    with torch.no_grad(), autocast():
        net(obs)
    with torch.no_grad():
        net(obs)
    hook.remove()
    probe = m.DiagnosticProbe(net, obs, autocast, chunk=4)
    features, magnitudes = probe.representation(net)
    assert np.array_equal(features, seen[0].numpy())
    assert not np.allclose(features, seen[1].numpy(), atol=1e-4)  # bf16 differs from fp32: the check can fail


# PQN's own flags (the mistakes every script refuses: tests/test_every_script.py)
@pytest.mark.parametrize("flags, names", [
    (["--num-envs", "6", "--num-steps", "3"], "--num-minibatches"),
    (["--q-lambda", "1.5"], "--q-lambda"),
    (["--end-e", "nan"], "--end-e"),
    (["--max-grad-norm", "inf"], "--max-grad-norm"),
    (["--exploration-fraction", "0"], "--exploration-fraction"),
    (["--eval-envs", "-1"], "--eval-envs"),
])
def test_bad_input_exits_2_with_one_line_before_anything_is_built(flags, names, tmp_path):
    code, _, err = main_inprocess(flags + ["--total-timesteps", "1024"], tmp_path)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and names in lines[0], err
    assert not (tmp_path / "runs").exists()  # nothing was built or written


# ------------------------------------------------------------------------------------------------ runs
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny eager trainings of 2 iterations: diagnostics off (the base for the resume tests), and a smoke run with
    --track offline and --save-model (the compiled loss has its own test)."""
    root = tmp_path_factory.mktemp("pqn")
    out = {}
    for name, flags in [
        ("plain", ["--diagnostics-every", "0", "--seed", "3"]),
        ("smoke", ["--diagnostics-every", "2", "--track", "--save-model", "--eval-episodes", "1", "--eval-epsilon", "0.5",
                   "--seed", "4"]),
    ]:
        (root / name).mkdir()
        env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            code, stdout, stderr = main_inprocess(TINY + ["--total-timesteps", str(2 * BATCH)] + flags, root / name)
        finally:
            for k, v in old.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        assert code == 0, stderr[-3000:]
        (run_dir,) = run_dirs(root / name)
        out[name] = (run_dir, stdout)
    return root, out


EXPECTED_TAGS = ["charts/SPS", "charts/learning_rate", "charts/epsilon", "losses/td_loss", "losses/q_values",
                 "diagnostics/greedy_change", "diagnostics/update_size", "diagnostics/grad_norm",
                 "diagnostics/feature_rank", "diagnostics/srank", "diagnostics/dormant_frac",
                 "diagnostics/dormant_frac_tau0", "diagnostics/dormant_frac_tau0.1", "diagnostics/weight_norm",
                 "diagnostics/grad_kurtosis", "eval/episodic_return", "time/rollout_seconds", "time/env_wait_seconds",
                 "time/update_seconds"]


def test_smoke_run_writes_a_complete_run_directory(runs):
    _, out = runs
    run_dir, stdout = out["smoke"]
    assert os.path.basename(run_dir).startswith("Breakout-v5__pqn_atari__4__")
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert config["resolved"]["batch_size"] == BATCH and config["resolved"]["minibatch_size"] == BATCH // 2
    assert config["args"]["num_iterations"] == 2 and config["args"]["q_lambda"] == 0.65 and "torch" in config["versions"]
    rows = read_metrics(run_dir)
    tags = set().union(*rows)
    for tag in EXPECTED_TAGS:
        assert tag in tags, tag
    for row in rows:
        assert row.keys() >= {"global_step", "iteration", "wall_time"}
        assert all(math.isfinite(v) for v in row.values()), row
    diag = [r for r in rows if "diagnostics/feature_rank" in r]
    assert [r["iteration"] for r in diag] == [2]
    d = diag[0]
    assert 1 <= d["diagnostics/feature_rank"] <= d["diagnostics/srank"] <= 512 and 0 <= d["diagnostics/greedy_change"] <= 1
    assert d["diagnostics/dormant_frac_tau0"] <= d["diagnostics/dormant_frac"] <= d["diagnostics/dormant_frac_tau0.1"]
    assert d["diagnostics/update_size"] > 0 and d["diagnostics/weight_norm"] > 0
    # epsilon follows the schedule: 1 -> 0.01 over 10% of 32 steps, long over at the logged steps
    assert [r["charts/epsilon"] for r in rows if "charts/epsilon" in r] == pytest.approx([0.01, 0.01])
    assert not os.path.exists(os.path.join(run_dir, "kl_profile.jsonl"))  # no policy-ratio KL in PQN
    assert list(p for p in os.listdir(run_dir) if p.startswith("events.out.tfevents"))
    offline = [p for p in os.listdir(os.path.join(run_dir, "wandb")) if p.startswith("offline-run-")]
    assert offline and any(f.endswith(".wandb") for f in os.listdir(os.path.join(run_dir, "wandb", offline[0])))
    ckpt = pickle.load(open(os.path.join(run_dir, "checkpoints", "latest.ckpt"), "rb"))
    assert ckpt["iteration"] == 2 and ckpt["global_step"] == 2 * BATCH and ckpt["script"] == "pqn_atari"
    m.QNetwork(4).load_state_dict(ckpt["q_network"])
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["status"] == "finished" and summary["global_step"] == 2 * BATCH and "eval_mean_return" in summary
    assert "SPS:" in stdout and "eval return" in stdout


def test_evaluator_plays_whole_games_on_its_own_envs():
    """At epsilon 1 (random play) Breakout games end within a few hundred steps: whole games, unclipped score."""
    evaluator = m.Evaluator("Breakout-v5", 2, seed=7, epsilon=1.0, device="cpu")
    finished, steps = [], 0
    while len(finished) < 2 and steps < 3000:
        finished += evaluator.step(torch.zeros(2, 4))
        steps += 1
    assert len(finished) >= 2 and all(ret >= 0 and length > 20 for ret, length in finished)
    assert evaluator.envs.spec.config.episodic_life is False and evaluator.envs.spec.config.reward_clip is False


def losses(run_dir):
    return [(r["iteration"], r["losses/td_loss"], r["losses/q_values"]) for r in read_metrics(run_dir) if "losses/td_loss" in r]


def test_purejaxql_preset_trains_and_its_checkpoint_names_its_network(tmp_path):
    """A tiny --preset purejaxql run: purejaxql's network and loss train, epsilon holds per update (1 for the first
    rollout, then past its 0.1 x 2-update decay: 0.001), and a resume without the preset, or with CleanRL's network,
    says which to pass."""
    code, _, err = main_inprocess(["--preset", "purejaxql"] + TINY + ["--total-timesteps", str(2 * BATCH),
                                                                      "--diagnostics-every", "1"], tmp_path)
    assert code == 0, err
    (run_dir,) = run_dirs(tmp_path)
    rows = [r for r in read_metrics(run_dir) if "losses/td_loss" in r]
    assert [r["charts/epsilon"] for r in rows] == [1.0, pytest.approx(0.001)]
    assert all(math.isfinite(r["losses/td_loss"]) and math.isfinite(r["diagnostics/feature_rank"]) for r in rows)
    assert json.load(open(os.path.join(run_dir, "config.json")))["args"]["network"] == "purejaxql"
    ckpt = os.path.join(run_dir, "checkpoints", "latest.ckpt")
    code, _, err = main_inprocess(["--resume", ckpt] + TINY + ["--total-timesteps", str(4 * BATCH)], tmp_path)
    assert code == 2 and "pass --preset purejaxql to resume it" in err and "Traceback" not in err
    code, _, err = main_inprocess(["--resume", ckpt, "--preset", "purejaxql", "--network", "cleanrl"] + TINY
                                  + ["--total-timesteps", str(4 * BATCH)], tmp_path)
    assert code == 2 and "pass --network purejaxql to resume it" in err and "Traceback" not in err


def copy_run(run_dir, dst, torch_rng=None):
    """A copy of a finished run whose checkpoint points at the copy (so that it can be resumed separately)."""
    import shutil
    shutil.copytree(run_dir, dst)
    path = os.path.join(dst, "checkpoints", "latest.ckpt")
    state = pickle.load(open(path, "rb"))
    state["run_dir"] = str(dst)
    if torch_rng is not None:
        state["rng"][0]["torch"] = torch_rng
    pickle.dump(state, open(path, "wb"))
    return path


def test_resume_is_bit_exact_given_the_checkpoint(runs, tmp_path):
    """envpool cannot save its state, so a resumed run restarts its envs (docs/run_directory.md#checkpoints-and-resume);
    everything else comes from
    the checkpoint: two resumes of one checkpoint agree bit for bit, and one with another RNG state does not."""
    _, out = runs
    base = out["plain"][0]
    before = pickle.load(open(os.path.join(base, "checkpoints", "latest.ckpt"), "rb"))
    other_rng = torch.Generator().manual_seed(123).get_state()
    results = []
    for name, rng in [("a", None), ("b", None), ("c", other_rng)]:
        ckpt_path = copy_run(base, tmp_path / name, rng)
        code, stdout, err = main_inprocess(TINY + ["--total-timesteps", str(3 * BATCH), "--diagnostics-every", "0",
                                                   "--seed", "3", "--resume", ckpt_path], tmp_path)
        assert code == 0, err
        assert "resuming from iteration 2" in stdout and "envs restart" in stdout
        rows = [r for r in read_metrics(tmp_path / name) if "losses/td_loss" in r]
        assert [(r["iteration"], r["global_step"]) for r in rows] == [(1, BATCH), (2, 2 * BATCH), (3, 3 * BATCH)]
        assert rows[2]["charts/learning_rate"] == pytest.approx(2.5e-4 / 3)  # the annealing continues (1 - 2/3)
        after = pickle.load(open(ckpt_path, "rb"))
        assert after["iteration"] == 3 and after["optimizer"]["state"][0]["step"] == before["optimizer"]["state"][0]["step"] + 4
        results.append((losses(tmp_path / name), after["q_network"]))
    (loss_a, net_a), (loss_b, net_b), (loss_c, net_c) = results
    assert loss_a == loss_b and all(torch.equal(net_a[k], net_b[k]) for k in net_a)
    assert loss_a[:2] == loss_c[:2] and loss_a[2] != loss_c[2]  # the restored RNG state decides the minibatches
    assert not (tmp_path / "runs").exists()  # resumed runs continue in their own directories


def test_a_checkpoint_from_another_kind_of_device_resumes_with_fresh_evaluation_draws(runs, tmp_path):
    """A CUDA generator's state is 16 bytes, a CPU one's 5,056: the evaluator cannot take the other's (torch raises),
    so a run resumed on another device says so and draws its evaluation's epsilon afresh; training resumes as ever."""
    _, out = runs
    ckpt_path = copy_run(out["plain"][0], tmp_path / "moved")
    state = pickle.load(open(ckpt_path, "rb"))
    assert state["rng"][0]["eval"].numel() == torch.Generator().get_state().numel()  # written here, on the CPU
    state["rng"][0]["eval"] = torch.zeros(16, dtype=torch.uint8)  # as a CUDA generator's get_state() gives it
    pickle.dump(state, open(ckpt_path, "wb"))
    code, stdout, err = main_inprocess(TINY + ["--total-timesteps", str(3 * BATCH), "--diagnostics-every", "0",
                                               "--seed", "3", "--resume", ckpt_path], tmp_path)
    assert code == 0, err[-3000:]
    assert "written on another kind of device" in err and "resuming from iteration 2" in stdout
    assert pickle.load(open(ckpt_path, "rb"))["iteration"] == 3


def test_nan_stops_and_keeps_the_last_good_checkpoint(runs, tmp_path):
    """The plain run's checkpoint, recording lr 1e35 (its flags edited, as a run at that lr would have written it):
    resumed, its first update overflows the parameters."""
    _, out = runs
    ckpt_path = copy_run(out["plain"][0], tmp_path / "nan")
    state = pickle.load(open(ckpt_path, "rb"))
    state["signature"]["learning_rate"] = state["args"]["learning_rate"] = 1e35
    pickle.dump(state, open(ckpt_path, "wb"))
    good = open(ckpt_path, "rb").read()
    code, _, err = main_inprocess(TINY + ["--total-timesteps", str(4 * BATCH), "--learning-rate", "1e35", "--seed", "3",
                                          "--checkpoint-every", "1", "--resume", ckpt_path], tmp_path)
    assert code == 3 and "non-finite" in err
    assert open(ckpt_path, "rb").read() == good
    assert json.load(open(tmp_path / "nan" / "summary.json"))["status"] == "diverged"


@pytest.mark.slow
def test_torchrun_two_gloo_ranks(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", SCRIPT,
           "--runs-dir", str(tmp_path / "runs")] + TINY + ["--total-timesteps", str(2 * BATCH), "--diagnostics-every", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=tmp_path,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path)
    assert json.load(open(os.path.join(run_dir, "config.json")))["world_size"] == 2
    assert [r[0] for r in losses(run_dir)] == [1, 2]
    assert len(pickle.load(open(os.path.join(run_dir, "checkpoints", "latest.ckpt"), "rb"))["rng"]) == 2


def test_greedy_change_is_what_the_kl_of_two_epsilon_greedy_policies_measures():
    """docs/metrics.md: KL(pi_before || pi_after) of two epsilon-greedy policies = greedy_change x
    (1 - eps) log(1 + A (1 - eps) / eps), so PQN logs greedy_change instead of kl_behavior."""
    eps, num_actions = 0.1, 4
    before, after = np.array([0, 1, 2, 3, 1]), np.array([0, 2, 2, 1, 1])
    def policy(greedy):
        probs = np.full((len(greedy), num_actions), eps / num_actions)
        probs[np.arange(len(greedy)), greedy] += 1 - eps
        return np.log(probs)
    kl = np.mean(m.categorical_kl(policy(before), policy(after)))
    per_change = (1 - eps) * math.log(1 + num_actions * (1 - eps) / eps)
    assert kl == pytest.approx(m.greedy_change(before, after) * per_change) and m.greedy_change(before, after) == 0.4


LEARNING = ["--env-id", "Breakout-v5", "--num-envs", "16", "--num-steps", "32", "--num-minibatches", "4",
            "--update-epochs", "2", "--no-anneal-lr", "--exploration-steps", "20000", "--eval-envs", "0",
            "--diagnostics-every", "0", "--progress", "none"]


@pytest.mark.slow
def test_pqn_learns_breakout_values_within_minutes(tmp_path):
    """10k steps (a few minutes on 2 free CPU cores): the Q-values of the taken actions rise from their
    initial ~-0.4 to the scale of the rewards they bootstrap (measured ~1.1-1.6 from 2k steps on). With the
    bootstrap's sign flipped in compute_q_lambda_targets they stay at ~0 (measured <= 0.0 from 2k steps on).
    Returns need far more steps to move than a test can afford here."""
    out = subprocess.run([sys.executable, SCRIPT, "--runs-dir", str(tmp_path / "runs"), "--total-timesteps", "10240"]
                         + LEARNING, capture_output=True, text=True, timeout=3600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path)
    q_values = [r["losses/q_values"] for r in read_metrics(run_dir) if "losses/q_values" in r]
    assert len(q_values) == 20 and q_values[0] < 0.5 and min(q_values[-5:]) > 0.5, q_values
