"""ppo_continuous_mujoco.py: smoke runs per backend, GAE, normaliser, Gaussian KL, resume, failures.

Runs call main() in this process (a subprocess costs seconds of imports), eager; torchrun runs in subprocesses. What
every script promises (bad input, SIGTERM, diagnostics that do not change training) is in tests/test_every_script.py.
"""
import glob
import json
import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "cleanrl_scaling", "ppo_continuous_mujoco.py")
sys.path.insert(0, ROOT)
from cleanrl_scaling import ppo_continuous_mujoco as m  # noqa: E402
from inprocess import main_inprocess  # noqa: E402

# 2 envs x 32 steps, minibatches of 16, 2 epochs: 8 minibatch steps per iteration
TINY = ["--env-id", "HalfCheetah-v4", "--num-envs", "2", "--num-steps", "32", "--minibatch-size", "16",
        "--update-epochs", "2", "--diagnostics-states", "64", "--progress", "none", "--no-compile"]
CLEANRL_TAGS = ["charts/SPS", "charts/learning_rate", "losses/policy_loss", "losses/value_loss", "losses/entropy",
                "losses/approx_kl", "losses/old_approx_kl", "losses/clipfrac", "losses/explained_variance",
                "time/rollout_seconds", "time/env_wait_seconds", "time/update_seconds"]  # and the loop's times
DIAG_TAGS = ["kl_behavior", "ddr", "seq_kl_mean", "ref_kl_mean", "update_size", "grad_norm", "feature_rank", "srank",
             "dormant_frac", "dormant_frac_tau0", "dormant_frac_tau0.1", "weight_norm", "actor_weight_norm",
             "critic_weight_norm", "critic_feature_rank", "critic_dormant_frac", "grad_kurtosis", "ess_pct",
             "policy_variance"]


def run_main(argv):
    """main() in this process, its output to capsys; returns its exit code."""
    return main_inprocess(m, argv, capture=False)[0]


def run_dir_of(runs_dir):
    dirs = [d for d in glob.glob(os.path.join(runs_dir, "*")) if os.path.isdir(d)]
    assert len(dirs) == 1, dirs
    return dirs[0]


def read_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def load_ckpt(run_dir):
    with open(os.path.join(run_dir, "checkpoints", "latest.ckpt"), "rb") as f:
        return pickle.load(f)


def training_rows(rows):
    """The per-iteration loss rows (the trajectory of training), without wall-clock values."""
    return [{k: v for k, v in r.items() if k.startswith("losses/") or k in ("global_step", "iteration")}
            for r in rows if "losses/policy_loss" in r]


# ---------------------------------------------------------------------------------------------------------
# Smoke runs
# ---------------------------------------------------------------------------------------------------------
def check_run_dir(run_dir, iterations, steps_per_iteration):
    rows = read_metrics(run_dir)
    tags = {k for r in rows for k in r}
    for tag in CLEANRL_TAGS + ["charts/episodic_return", "charts/episodic_length"] + [f"diagnostics/{t}" for t in DIAG_TAGS]:
        assert tag in tags, tag
    for r in rows:
        for k, v in r.items():
            if k != "losses/explained_variance":
                assert math.isfinite(v), (k, v)
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert config["resolved"]["minibatch_size"] == 16 and config["resolved"]["num_minibatches"] == 4
    assert config["args"]["num_minibatches"] == 4 and config["script"] == "ppo_continuous_mujoco"
    profile = [json.loads(line) for line in open(os.path.join(run_dir, "kl_profile.jsonl"))]
    assert len(profile) == iterations
    for row in profile:
        assert len(row["seq_kl"]) == steps_per_iteration and len(row["ref_kl"]) == steps_per_iteration
        assert row["ref_kl"][-1] == pytest.approx(row["seq_kl"][-1])  # KL(pi_J || pi_{J-1}) both ways
    given = m.resume_signature(tyro.cli(m.Args, args=config["argv"]), m.RESUMABLE)  # the same command line resumes
    state = m.load_checkpoint(os.path.join(run_dir, "checkpoints", "latest.ckpt"), m.SCRIPT, given)
    assert state["iteration"] == iterations and state["global_step"] == iterations * 64
    agent = m.Agent(17, 6)
    agent.load_state_dict(state["agent"])
    assert state["ranks"][0]["normalizer"]["obs_mean"].shape == (17,)
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["status"] == "finished"
    return rows


def test_smoke_gymnasium(tmp_path):
    """The gymnasium backend: every tag, config.json, checkpoint, saved model."""
    code, out, err = main_inprocess(m, [*TINY, "--total-timesteps", "2048", "--diagnostics-every", "1", "--save-model",
                                        "--eval-episodes", "2", "--runs-dir", tmp_path])
    assert code == 0, err
    assert "SPS:" in out
    run_dir = run_dir_of(tmp_path)
    rows = check_run_dir(run_dir, 32, 8)
    assert any(r.get("charts/episodic_length") == 1000 for r in rows)  # truncated episodes are logged
    assert "eval/episodic_return" in {k for r in rows for k in r}
    model = torch.load(os.path.join(run_dir, "ppo_continuous_mujoco.cleanrl_model"))
    assert model["obs_mean"].shape == (17,) and model["norm_obs"]
    ckpt = load_ckpt(run_dir)
    assert ckpt["ranks"][0]["envs"] is not None  # gymnasium MuJoCo state is saved


def test_smoke_envpool(tmp_path):
    code = run_main([*TINY, "--env-backend", "envpool", "--total-timesteps", "256", "--diagnostics-every", "1",
                     "--norm-stats", "per-env", "--runs-dir", tmp_path])
    assert code == 0
    run_dir = run_dir_of(tmp_path)
    rows = read_metrics(run_dir)
    assert {f"diagnostics/{t}" for t in DIAG_TAGS} <= {k for r in rows for k in r}
    ckpt = load_ckpt(run_dir)
    assert ckpt["ranks"][0]["envs"] is None  # envpool cannot save its state
    assert ckpt["ranks"][0]["normalizer"]["obs_mean"].shape == (2, 17)  # one statistic per env


# ---------------------------------------------------------------------------------------------------------
# Math against hand-computed values
# ---------------------------------------------------------------------------------------------------------
def test_gae_hand_computed_with_truncation_and_termination():
    """One env, T=4, gamma=0.5, lambda=0.5. obs[1] is the truncated last obs of an episode (its action was ignored),
    obs[3] is a terminal obs; the bootstrap after the rollout is V=10."""
    g, lam = 0.5, 0.5
    r = torch.tensor([[1.0], [0.0], [2.0], [3.0]])
    v = torch.tensor([[1.0], [4.0], [2.0], [5.0]])
    dones = torch.tensor([[0.0], [1.0], [0.0], [1.0]])
    terms = torch.tensor([[0.0], [0.0], [0.0], [1.0]])
    adv, ret = m.compute_advantages(r, v, dones, terms, torch.tensor([10.0]), torch.tensor([0.0]), torch.tensor([0.0]), g, lam)
    a3 = 3.0 + g * 10.0 - 5.0  # reset step; its value is masked out of the loss but GAE still runs
    a2 = 2.0 + g * 5.0 * 0 - 2.0  # obs[3] terminal: no bootstrap, trace stops
    a1 = 0.0 + g * 2.0 - 4.0 + g * lam * a2  # reset step of the truncated episode
    a0 = 1.0 + g * 4.0 - 1.0  # obs[1] truncated: bootstrap V(obs[1]) = 4, trace stops
    assert adv[:, 0].tolist() == pytest.approx([a0, a1, a2, a3])
    assert ret[:, 0].tolist() == pytest.approx([a0 + 1, a1 + 4, a2 + 2, a3 + 5])


def test_running_mean_std_matches_numpy():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(5, 3)) for _ in range(7)]
    masks = [rng.random(5) > 0.3 for _ in range(7)]
    shared = m.RunningMeanStd((3,), 5, per_env=False)
    per_env = m.RunningMeanStd((3,), 5, per_env=True)
    for x, mask in zip(batches, masks):
        shared.update(x, mask)
        per_env.update(x, mask)
    seen = np.concatenate([x[mask] for x, mask in zip(batches, masks)])
    # the 1e-4 prior count at mean 0, var 1 is negligible against the samples
    assert shared.mean == pytest.approx(seen.mean(0), rel=1e-4)
    assert shared.var == pytest.approx(seen.var(0), rel=1e-4)
    for i in range(5):
        own = np.stack([x[i] for x, mask in zip(batches, masks) if mask[i]])
        assert per_env.mean[i] == pytest.approx(own.mean(0), rel=1e-4, abs=1e-3)
        assert per_env.var[i] == pytest.approx(own.var(0), rel=1e-3, abs=1e-3)
    pooled_mean, pooled_var = per_env.pooled()
    assert pooled_mean == pytest.approx(seen.mean(0), rel=1e-3)
    assert pooled_var == pytest.approx(seen.var(0), rel=1e-3)


def test_reward_normalizer_scales_by_discounted_return_std():
    args = m.Args(gamma=0.9)
    norm = m.Normalizer((1,), 1, args)
    rewards = [1.0, 2.0, 0.0, 3.0, 1.0]
    reset = [False, False, True, False, False]  # step 2 is the reset step of NEXT_STEP autoreset
    out, ret, seen = [], 0.0, []
    for r, s in zip(rewards, reset):
        out.append(float(norm.reward(np.array([r]), np.array([s]), np.array([False]))[0]))
        ret = 0.0 if s else ret * 0.9 + r
        if not s:
            seen.append(ret)
    assert norm.ret_rms.var[()] == pytest.approx(np.var(seen), rel=1e-3)
    assert out[-1] == pytest.approx(1.0 / np.sqrt(np.var(seen) + 1e-8), rel=1e-3)


def test_reward_normalizer_cleanrl_compat_is_gymnasiums_recurrence_without_reset_steps():
    """--cleanrl-compat: G = G * gamma * (1 - terminated) + r as gymnasium's NormalizeReward, over the steps a
    gymnasium env makes; envpool's reset step (reward 0, action ignored) leaves G and its statistic alone."""
    args = m.Args(gamma=0.9, cleanrl_compat=True)
    norm = m.Normalizer((1,), 1, args)
    rewards = [1.0, 2.0, 0.0, 3.0, 1.0, 4.0]
    term = [False, True, False, False, False, False]  # step 1 terminates, step 2 is envpool's reset step
    reset = [False, False, True, False, False, False]
    # by hand: 1; 0.9 * 1 * 0 + 2 = 2; (reset step: skipped); 2 * 0.9 + 3 = 4.8; 4.8 * 0.9 + 1 = 5.32; 5.32 * 0.9 + 4
    seen = [1.0, 2.0, 4.8, 5.32, 8.788]
    for r, t, s in zip(rewards, term, reset):
        norm.reward(np.array([r]), np.array([s]), np.array([t]))
    assert norm.ret[0] == pytest.approx(seen[-1])
    assert norm.ret_rms.var[()] == pytest.approx(np.var(seen), rel=1e-3)


def cleanrl_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """CleanRL's GAE loop (ppo_continuous_action.py), written out in plain numpy."""
    num_steps = len(rewards)
    advantages = np.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
    return advantages


@pytest.mark.parametrize("num_envs", [1, 2])
def test_cleanrl_compat_matches_cleanrl_env_stack_and_gae(num_envs, monkeypatch):
    """--cleanrl-compat (gymnasium backend) against CleanRL's own env stack, built here as its make_env builds it
    (per-env NormalizeObservation, clip, NormalizeReward, clip; autoreset within the done step) and fed the same
    actions: the same normalised observations, rewards and dones, and CleanRL's GAE loop gives our advantages.
    Hopper falls within ~20 steps with a fresh policy (terminations); a 20-step limit adds truncations."""
    import gymnasium as gym
    real_make = gym.make
    monkeypatch.setattr(gym, "make", lambda env_id, **kw: real_make(env_id, max_episode_steps=20, **kw))
    torch.manual_seed(0)
    n, T = num_envs, 60
    args = m.Args(env_id="Hopper-v4", num_envs=n, num_steps=T, num_minibatches=4, total_timesteps=n * T, cleanrl_compat=True)
    m.validate(args)
    assert args.norm_stats == "per-env"  # implied by --cleanrl-compat
    envs = m.make_envs("Hopper-v4", n, 0, "gymnasium", same_step=m.uses_same_step(args))
    obs_space, act_space = m.spaces(envs)
    agent = m.Agent(obs_space.shape[0], act_space.shape[0])
    storage = m.make_storage(T, n, obs_space.shape, act_space.shape, "cpu")
    normalizer = m.Normalizer(obs_space.shape, n, args)
    obs, _ = envs.reset(seed=0)
    zeros = torch.zeros(n)
    state = (torch.as_tensor(normalizer.obs(obs)), zeros, zeros)
    finished, state = m.collect_rollout(envs, agent, storage, state, m.EpisodeStats(n), normalizer, args, "cpu",
                                        lambda: torch.autocast("cpu", enabled=False), m.Ranks())

    def cleanrl_make_env():  # CleanRL's make_env, without video
        env = real_make("Hopper-v4", max_episode_steps=20)
        env = gym.wrappers.FlattenObservation(env)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = gym.wrappers.ClipAction(env)
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(env, lambda o: np.clip(o, -10, 10), env.observation_space)
        env = gym.wrappers.NormalizeReward(env, gamma=args.gamma)
        return gym.wrappers.TransformReward(env, lambda r: np.clip(r, -10, 10))
    ref = gym.vector.SyncVectorEnv([cleanrl_make_env] * n, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    next_obs, _ = ref.reset(seed=0)
    next_done = np.zeros(n)
    ref_obs, ref_rewards, ref_dones, terms, truncs = [], [], [], 0, 0
    for t in range(T):
        ref_obs.append(next_obs)
        ref_dones.append(next_done)
        next_obs, reward, term, trunc, _ = ref.step(storage.actions[t].numpy())
        next_done = np.logical_or(term, trunc).astype(np.float64)
        ref_rewards.append(reward)
        terms, truncs = terms + term.sum(), truncs + trunc.sum()
    assert terms >= 1 and truncs >= 1  # both kinds of episode end are in the rollout
    assert len(finished) == terms + truncs
    assert np.allclose(storage.obs.numpy(), np.stack(ref_obs), atol=1e-5)
    assert np.allclose(storage.rewards.numpy(), np.stack(ref_rewards), atol=1e-5)
    assert np.array_equal(storage.dones.numpy(), np.stack(ref_dones))
    assert np.array_equal(state.done.numpy(), next_done) and np.allclose(state.obs.numpy(), next_obs, atol=1e-5)

    with torch.no_grad():
        next_value = agent(state.obs)[2]
    terminations, next_term = m.bootstrap_terminations(storage, state, args.cleanrl_compat)
    adv, _ = m.compute_advantages(storage.rewards, storage.values, storage.dones, terminations, next_value,
                                  state.done, next_term, args.gamma, args.gae_lambda)
    expected = cleanrl_gae(np.stack(ref_rewards), storage.values.numpy(), np.stack(ref_dones), next_value.numpy(),
                           next_done, args.gamma, args.gae_lambda)
    assert np.allclose(adv.numpy(), expected, rtol=1e-4, atol=1e-5)
    assert m.valid_mask(storage.dones, args.cleanrl_compat).min() == 1.0  # CleanRL masks nothing
    # the default mode bootstraps truncations: other advantages on the same rollout
    terminations, next_term = m.bootstrap_terminations(storage, state, False)
    default, _ = m.compute_advantages(storage.rewards, storage.values, storage.dones, terminations, next_value,
                                      state.done, next_term, args.gamma, args.gae_lambda)
    assert not np.allclose(default.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_explained_variance_leaves_out_masked_steps():
    values = torch.tensor([[1.0, 2.0], [3.0, 100.0], [2.0, 0.0]])
    returns = torch.tensor([[2.0, 2.0], [5.0, -50.0], [1.0, 1.0]])
    dones = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])  # step 1 of env 1 follows a done: masked
    y, pred = np.array([2.0, 2.0, 5.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0, 2.0, 0.0])
    by_hand = 1 - np.var(y - pred) / np.var(y)
    assert m.explained_variance(values, returns, m.valid_mask(dones, False)) == pytest.approx(by_hand)
    everything = 1 - np.var((returns - values).numpy()) / np.var(returns.numpy())
    assert m.explained_variance(values, returns, m.valid_mask(dones, True)) == pytest.approx(everything)


def test_update_logs_cleanrls_loss_statistics():
    """losses/*: the last minibatch's losses and KLs, the clip fraction averaged over every minibatch (CleanRL)."""
    torch.manual_seed(0)
    agent, args = m.Agent(5, 2), m.Args(update_epochs=2, learning_rate=1e-2)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate)
    n = 32
    batch = m.Batch(torch.randn(n, 5), torch.randn(n, 2), torch.randn(n) - 2.0, torch.randn(n), torch.randn(n),
                    torch.randn(n), torch.ones(n))
    seen = []
    def recording_loss(*a):
        loss, stats = m.ppo_loss(*a)
        seen.append(torch.stack(stats))
        return loss, stats
    stats, _, steps = m.update(agent, optimizer, batch, args, 8, lambda: torch.autocast("cpu", enabled=False), m.Ranks(),
                               loss_fn=recording_loss)
    seen = torch.stack(seen)
    assert steps == len(seen) == 8
    assert torch.equal(torch.stack(stats)[:5], seen[-1, :5])
    assert stats.clipfrac.item() == pytest.approx(seen[:, 5].mean().item())
    assert not torch.allclose(seen[0, :5], seen[-1, :5])  # the policy moved: first and last minibatch differ


def test_compiled_loss_gives_the_eager_gradient():
    torch.manual_seed(0)
    agent, args = m.Agent(5, 2), m.Args()
    n = 64
    batch = m.Batch(torch.randn(n, 5), torch.randn(n, 2), torch.randn(n) - 2.0, torch.randn(n), torch.randn(n),
                    torch.randn(n), torch.ones(n))
    batch.valid[[3, 40]] = 0.0
    idx = torch.randperm(n)
    results = []
    for loss_fn in (m.ppo_loss, m.maybe_compile(m.ppo_loss, True)):
        agent.zero_grad(set_to_none=True)
        stats = m.minibatch_gradient(agent, batch, idx, args, lambda: torch.autocast("cpu", enabled=False), loss_fn,
                                     m.Ranks())
        results.append((torch.cat([p.grad.reshape(-1) for p in agent.parameters()]), torch.stack(stats)))
    (eager, eager_stats), (compiled, compiled_stats) = results
    assert eager.abs().max() > 0
    assert torch.allclose(eager, compiled, rtol=1e-4, atol=1e-6)
    assert torch.allclose(eager_stats, compiled_stats, rtol=1e-4, atol=1e-6)


def rollout_8_steps(bf16: bool) -> tuple:
    """A real 8-step HalfCheetah rollout of a fresh agent on 2 gymnasium envs: (agent, storage, autocast)."""
    torch.manual_seed(0)
    envs = m.make_envs("HalfCheetah-v4", 2, 0, "gymnasium")
    obs_space, act_space = m.spaces(envs)
    agent = m.Agent(obs_space.shape[0], act_space.shape[0])
    args = m.Args(num_steps=8)
    storage = m.make_storage(8, 2, obs_space.shape, act_space.shape, "cpu")
    normalizer = m.Normalizer(obs_space.shape, 2, args)
    obs, _ = envs.reset(seed=0)
    zeros = torch.zeros(2)
    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
    state = (torch.as_tensor(normalizer.obs(obs)), zeros, zeros)
    m.collect_rollout(envs, agent, storage, state, m.EpisodeStats(2), normalizer, args, "cpu", autocast, m.Ranks())
    return agent, storage, autocast


@pytest.mark.parametrize("bf16", [False, True])
def test_rollout_stores_the_policys_own_logprobs_and_values(bf16):
    """The rollout runs in one autocast region (its bf16 weight cache lives for the whole rollout): what it
    stores must be what a fresh per-step evaluation of the same policy on the stored observations gives."""
    agent, storage, autocast = rollout_8_steps(bf16)
    for t in range(8):
        with torch.no_grad(), autocast():
            mean, logstd, value = agent(storage.obs[t])
        dist = torch.distributions.Normal(mean.float(), logstd.float().exp())  # an independent route to log pi(a|s)
        assert torch.allclose(dist.log_prob(storage.actions[t]).sum(-1), storage.logprobs[t], rtol=1e-5, atol=1e-5)
        # not bit-equal in fp32: the same rows at another memory alignment can give other last bits (seen here)
        assert torch.allclose(value.float(), storage.values[t], rtol=1e-5, atol=1e-6)
    assert storage.obs[1:].std() > 0  # the observations moved: the check ran on a real trajectory


def test_bf16_rollout_runs_the_heads_in_fp32():
    """--bf16: the trunks in bf16, the output layers in fp32. The stored values and log-probs are an fp32
    evaluation of the last layers on the bf16 trunk's features (bf16 heads round them to 8 bits)."""
    agent, storage, autocast = rollout_8_steps(True)
    for t in range(8):
        with torch.no_grad():
            outputs = []
            for net in (agent.actor_mean, agent.critic):
                with autocast():
                    features = net[3](net[2](net[1](net[0](storage.obs[t]))))
                assert features.dtype == torch.bfloat16  # the trunk did run in bf16
                outputs.append(net[4](features.float()))
        mean, value = outputs[0], outputs[1].squeeze(-1)
        dist = torch.distributions.Normal(mean, agent.actor_logstd.exp())
        assert torch.allclose(dist.log_prob(storage.actions[t]).sum(-1), storage.logprobs[t], rtol=0, atol=1e-5)
        assert torch.allclose(value, storage.values[t], rtol=1e-6, atol=1e-7)
        assert value.abs().min() > 1e-2  # values large enough for bf16 rounding (2^-9 relative) to show


def test_gaussian_kl_and_logprob_against_monte_carlo():
    rng = np.random.default_rng(1)
    mu_p, mu_q = rng.normal(size=(1, 3)), rng.normal(size=(1, 3))
    ls_p, ls_q = rng.normal(scale=0.3, size=(1, 3)), rng.normal(scale=0.3, size=(1, 3))
    x = mu_p + np.exp(ls_p) * rng.normal(size=(400_000, 3))
    def logpdf(x, mu, ls):
        return np.sum(-0.5 * ((x - mu) / np.exp(ls)) ** 2 - ls - 0.5 * np.log(2 * np.pi), axis=-1)
    mc = np.mean(logpdf(x, mu_p, ls_p) - logpdf(x, mu_q, ls_q))
    assert m.gaussian_kl(mu_p, ls_p, mu_q, ls_q)[0] == pytest.approx(mc, abs=0.01)
    t = [torch.tensor(a) for a in (mu_p, ls_p)]
    actions = torch.tensor(x[:10])
    expected = torch.distributions.Normal(t[0], t[1].exp()).log_prob(actions).sum(-1)
    assert torch.allclose(m.gaussian_logprob(t[0], t[1], actions), expected)
    torch.manual_seed(0)
    a, logp = m.sample_actions(t[0].expand(5, 3), t[1])
    assert torch.allclose(logp, m.gaussian_logprob(t[0], t[1], a))


def test_probe_kl_profile_and_dormant_on_tanh():
    torch.manual_seed(0)
    agent = m.Agent(4, 2)
    obs = torch.randn(50, 4)
    probe = m.DiagnosticProbe(agent, obs, torch.randn(50, 2), lambda: torch.autocast("cpu", enabled=False), 3)
    probe.grad = np.random.default_rng(0).normal(size=100)
    with torch.no_grad():
        for _ in range(2):
            agent.actor_mean[-1].bias += 0.1
            agent.actor_logstd -= 0.05
            probe.after_step(agent)
    out, seq, ref = probe.results(agent, 50, 1.0)
    # shifting the mean by 0.1 per step at std e^{-0.05 j}: KL(pi_j || pi_{j-1}) in closed form
    def kl(j, i):
        sp, sq = math.exp(-0.05 * j), math.exp(-0.05 * i)
        d = 0.1 * (j - i)
        return 2 * (math.log(sq / sp) + (sp ** 2 + d ** 2) / (2 * sq ** 2) - 0.5)
    assert seq == pytest.approx([kl(1, 0), kl(2, 1)])
    assert ref == pytest.approx([kl(2, 0), kl(2, 1)])
    assert out["diagnostics/kl_behavior"] == pytest.approx(kl(0, 2))
    assert out["diagnostics/dormant_frac_tau0"] == 0.0  # tanh units are dormant on |h|, never exactly 0 here


# ---------------------------------------------------------------------------------------------------------
# Resume
# ---------------------------------------------------------------------------------------------------------
def final_agent(run_dir):
    return load_ckpt(run_dir)["agent"]


@pytest.mark.parametrize("num_envs", [1, 2])  # OneEnv and SyncVectorEnv
def test_resume_gymnasium_is_bit_exact(tmp_path, num_envs):
    """4 iterations in one go == 2 iterations, then --resume to 4 (no lr annealing: it depends on the total)."""
    layout = ["--num-envs", str(num_envs), "--num-steps", str(64 // num_envs)]
    common = [*TINY[:2], *layout, *TINY[6:], "--no-anneal-lr", "--diagnostics-every", "0"]
    assert run_main([*common, "--total-timesteps", "256", "--runs-dir", tmp_path / "a"]) == 0
    assert run_main([*common, "--total-timesteps", "128", "--runs-dir", tmp_path / "b"]) == 0
    b = run_dir_of(tmp_path / "b")
    assert run_main([*common, "--total-timesteps", "256", "--resume", os.path.join(b, "checkpoints", "latest.ckpt")]) == 0
    a = run_dir_of(tmp_path / "a")
    assert training_rows(read_metrics(a)) == training_rows(read_metrics(b))
    for k, v in final_agent(a).items():
        assert torch.equal(v, final_agent(b)[k]), k


def test_resume_envpool_continues_from_checkpoint_step(tmp_path, capsys):
    common = [*TINY, "--env-backend", "envpool", "--diagnostics-every", "0"]
    assert run_main([*common, "--total-timesteps", "128", "--runs-dir", tmp_path]) == 0
    run_dir = run_dir_of(tmp_path)
    assert run_main([*common, "--total-timesteps", "256", "--resume", os.path.join(run_dir, "checkpoints", "latest.ckpt")]) == 0
    assert "envs restart with seed" in capsys.readouterr().out
    steps = [r["global_step"] for r in training_rows(read_metrics(run_dir))]
    assert steps == [64, 128, 192, 256]
    assert load_ckpt(run_dir)["iteration"] == 4


# ---------------------------------------------------------------------------------------------------------
# Failures: bad input, NaN
# ---------------------------------------------------------------------------------------------------------
# this script's own mistakes (those of every script: tests/test_every_script.py)
@pytest.mark.parametrize("argv,flag", [
    (["--env-id", "Pong-v5"], "--env-id"),  # an Atari id
    (["--env-id", "HalfCheetah-v4", "--env-backend", "envpool", "--num-envs", "-1"], "--num-envs"),
    (["--num-steps", "100", "--num-minibatches", "32"], "--num-minibatches"),
    (["--minibatch-size", "3"], "minibatch size 3"),
    (["--norm-clip", "0"], "--norm-clip"),
    (["--capture-video"], "--capture-video"),
    (["--gae-lambda", "1.5"], "--gae-lambda must"),
])
def test_bad_input_exits_2_naming_the_flag(argv, flag, capsys, tmp_path):
    assert run_main([*argv, "--runs-dir", tmp_path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and flag in err[0], err
    assert not os.listdir(tmp_path)  # nothing was built


def test_mismatched_checkpoint_exits_2(tmp_path, capsys):
    assert run_main([*TINY, "--total-timesteps", "64", "--diagnostics-every", "0", "--runs-dir", tmp_path / "r"]) == 0
    ckpt = os.path.join(run_dir_of(tmp_path / "r"), "checkpoints", "latest.ckpt")
    capsys.readouterr()
    assert run_main([*TINY, "--num-envs", "4", "--resume", ckpt]) == 2
    assert "--num-envs 2" in capsys.readouterr().err


def test_nan_stops_and_keeps_last_checkpoint(tmp_path, monkeypatch, capsys):
    calls = {"n": 0}
    real = m.ppo_loss
    def poisoned(*a, **k):
        loss, stats = real(*a, **k)
        calls["n"] += 1
        return (loss * float("nan"), stats) if calls["n"] > 16 else (loss, stats)  # iteration 3 onwards
    monkeypatch.setattr(m, "ppo_loss", poisoned)
    code = run_main([*TINY, "--total-timesteps", "320", "--checkpoint-every", "1", "--diagnostics-every", "0",
                     "--runs-dir", tmp_path])  # the patched loss counts its calls: eager (TINY)
    assert code not in (0, 2)
    assert "non-finite" in capsys.readouterr().err
    run_dir = run_dir_of(tmp_path)
    ckpt = load_ckpt(run_dir)
    assert ckpt["iteration"] == 2
    assert all(torch.isfinite(v).all() for v in ckpt["agent"].values())
    assert json.load(open(os.path.join(run_dir, "summary.json")))["status"] == "diverged"


# ---------------------------------------------------------------------------------------------------------
# torchrun and learning
# ---------------------------------------------------------------------------------------------------------
def test_torchrun_two_ranks(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", SCRIPT,
                          *TINY, "--num-envs", "4", "--total-timesteps", "256", "--diagnostics-every", "1",
                          "--runs-dir", tmp_path], capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    run_dir = run_dir_of(tmp_path)
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert config["world_size"] == 2
    ckpt = load_ckpt(run_dir)
    assert len(ckpt["ranks"]) == 2
    # shared normalisation statistics are merged over both ranks: identical on each
    assert np.array_equal(ckpt["ranks"][0]["normalizer"]["obs_mean"], ckpt["ranks"][1]["normalizer"]["obs_mean"])
    assert ckpt["ranks"][0]["normalizer"]["obs_count"] == pytest.approx(1e-4 + 4 * 64 + 4)


@pytest.mark.slow
def test_learns_inverted_pendulum(tmp_path):
    """A random policy balances InvertedPendulum for ~5-10 steps; PPO at CleanRL's defaults reaches 1000."""
    code = run_main(["--env-id", "InvertedPendulum-v4", "--total-timesteps", "100000", "--diagnostics-every", "0",
                     "--progress", "none", "--runs-dir", tmp_path])
    assert code == 0
    returns = [r["charts/episodic_return"] for r in read_metrics(run_dir_of(tmp_path)) if "charts/episodic_return" in r]
    assert np.mean(returns[-10:]) > 500, returns[-10:]


def test_one_env_matches_sync_vector_env_across_resets():
    """The single-env fast path has SyncVectorEnv's NEXT_STEP autoreset, seeds and trajectories."""
    import gymnasium as gym
    fast = m.make_envs("InvertedPendulum-v4", 1, 3, "gymnasium")
    slow = gym.vector.SyncVectorEnv([lambda: gym.make("InvertedPendulum-v4", disable_env_checker=True)],
                                    autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    slow.reset(seed=3)
    assert isinstance(fast, m.OneEnv)
    a, b = fast.reset(), slow.reset()
    assert np.array_equal(a[0], b[0])
    dones = 0
    for t in range(60):  # a constant push topples the pole every few steps
        action = np.full((1, 1), 3.0 if t % 20 < 10 else -3.0, dtype=np.float32)
        out_fast, out_slow = fast.step(action), slow.step(action)
        for x, y in zip(out_fast[:4], out_slow[:4]):
            assert np.array_equal(x, y) and x.dtype == y.dtype and x.shape == y.shape, t
        dones += int(out_fast[2][0] or out_fast[3][0])
    assert dones >= 3
