"""ppo_atari_envpool.py: the math against hand-computed values, then end-to-end runs of the script (in-process and
eager; what every script promises, bad input, SIGTERM and diagnostics, is in tests/test_every_script.py)."""
import contextlib
import dataclasses
import importlib
import json
import math
import os
import pickle
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.stats
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "cleanrl_scaling", "ppo_atari_envpool.py")
sys.path.insert(0, ROOT)
from cleanrl_scaling import ppo_atari_envpool as m  # noqa: E402
from inprocess import main_inprocess  # noqa: E402

TINY = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "2",
        "--progress", "none", "--no-compile"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny batches gain nothing from a second thread, and on a shared machine OpenMP's spinning threads make
    every forward pass many times slower (a tiny run here: 8 s on one thread, 42 s on two): this module runs on one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run(args, root, expect=0):
    """main() in this process with --runs-dir root/runs; returns (stdout, stderr) once it exited with `expect`."""
    code, out, err = main_inprocess(m, args, root)
    assert code == expect, err[-3000:]
    return out, err


def run_dirs(tmp_path):
    return sorted((tmp_path / "runs").iterdir())


def read_metrics(run_dir):
    return [json.loads(line) for line in open(run_dir / "metrics.jsonl")]


# ------------------------------------------------------------------------------------------------ math
def test_gae_by_hand_with_termination_truncation_and_reset_steps():
    gamma, lam = 0.9, 0.5
    # one env, 4 steps; obs[2] is terminal (dones[2]=terms[2]=1): the env ignores action 2 and resets
    rewards = torch.tensor([[1.0], [2.0], [0.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [9.0], [2.0]])
    dones = torch.tensor([[0.0], [0.0], [1.0], [0.0]])
    terms = dones.clone()
    next_value, next_done, next_term = torch.tensor([4.0]), torch.tensor([1.0]), torch.tensor([0.0])  # truncated
    adv, ret = m.compute_advantages(rewards, values, dones, terms, next_value, next_done, next_term, gamma, lam)
    d3 = 3.0 + gamma * 4.0 - 2.0  # truncation: bootstrap from V(obs after step 3), trace stops
    a3 = d3
    d2 = 0.0 + gamma * 2.0 - 9.0  # the reset step (masked in the loss), trace continues into step 3
    a2 = d2 + gamma * lam * a3
    d1 = 2.0 + gamma * 9.0 * 0.0 - 1.0  # leads to a terminal obs: no bootstrap, trace cut
    a1 = d1
    d0 = 1.0 + gamma * 1.0 - 0.5
    a0 = d0 + gamma * lam * a1
    expected = torch.tensor([[a0], [a1], [a2], [a3]])
    assert torch.allclose(adv, expected, atol=1e-6)
    assert torch.allclose(ret, expected + values, atol=1e-6)


def test_gae_matches_cleanrl_recursion_without_dones():
    g = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(7, 3, generator=g), torch.randn(7, 3, generator=g)
    zeros = torch.zeros(7, 3)
    next_value = torch.randn(3, generator=g)
    adv, _ = m.compute_advantages(rewards, values, zeros, zeros, next_value, torch.zeros(3), torch.zeros(3), 0.99, 0.95)
    # independent route: A_t = sum_k (gamma lam)^k delta_{t+k}
    v_ext = torch.cat([values, next_value[None]])
    delta = rewards + 0.99 * v_ext[1:] - v_ext[:-1]
    for t in range(7):
        expected = sum((0.99 * 0.95) ** k * delta[t + k] for k in range(7 - t))
        assert torch.allclose(adv[t], expected, atol=1e-5)


def cleanrl_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """CleanRL's GAE loop (ppo_atari_envpool.py), written out in plain Python over one env's lists."""
    num_steps, advantages, lastgaelam = len(rewards), [0.0] * len(rewards), 0.0
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal, nextvalues = 1.0 - next_done, next_value
        else:
            nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
    return advantages


def test_cleanrl_compat_gae_is_cleanrls_on_a_hand_made_rollout():
    """--cleanrl-compat: a truncation ends the trace and drops the bootstrap like a termination, and the reset
    step stays in the batch. Env 0: obs[2] terminal (reset step 2), the rollout ends in a truncation; env 1:
    obs[1] truncated (reset step 1), obs[4] terminal."""
    gamma, lam = 0.9, 0.8
    rewards = [[1.0, 0.5], [2.0, 0.0], [0.0, 1.0], [3.0, 2.0], [1.0, 0.0]]
    values = [[0.5, 1.0], [1.0, 6.0], [9.0, 2.0], [2.0, 3.0], [4.0, 7.0]]
    dones = [[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]
    terms = [[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]
    next_value, next_done, next_term = [5.0, 8.0], [1.0, 0.0], [0.0, 0.0]
    storage = m.make_storage(5, 2, (4, 84, 84), "cpu")
    storage.dones[:], storage.terminations[:] = torch.tensor(dones), torch.tensor(terms)
    state = m.NextStep(None, torch.tensor(next_done), torch.tensor(next_term))
    terminations, bootstrap_term = m.bootstrap_terminations(storage, state, cleanrl_compat=True)
    adv, ret = m.compute_advantages(torch.tensor(rewards), torch.tensor(values), storage.dones, terminations,
                                    torch.tensor(next_value), state[1], bootstrap_term, gamma, lam)
    for i in range(2):
        expected = cleanrl_gae([r[i] for r in rewards], [v[i] for v in values], [d[i] for d in dones],
                               next_value[i], next_done[i], gamma, lam)
        assert adv[:, i].tolist() == pytest.approx(expected)
    # by hand, env 0's last step: the truncation drops the bootstrap V = 5 (the default mode keeps it)
    assert adv[4, 0].item() == pytest.approx(1.0 - 4.0)
    assert m.valid_mask(storage.dones, True).min() == 1.0  # CleanRL masks no reset step
    terminations, bootstrap_term = m.bootstrap_terminations(storage, state, cleanrl_compat=False)
    default, _ = m.compute_advantages(torch.tensor(rewards), torch.tensor(values), storage.dones, terminations,
                                      torch.tensor(next_value), state[1], bootstrap_term, gamma, lam)
    assert default[4, 0].item() == pytest.approx(1.0 + gamma * 5.0 - 4.0)
    assert torch.equal(m.valid_mask(storage.dones, False), 1.0 - storage.dones)


def test_categorical_kl_by_hand():
    p, q = np.array([[0.5, 0.5]]), np.array([[0.9, 0.1]])
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert m.categorical_kl(np.log(p), np.log(q))[0] == pytest.approx(expected)
    assert m.categorical_kl(np.log(p), np.log(p))[0] == pytest.approx(0.0)


def test_gaussian_kl_against_monte_carlo():
    rng = np.random.default_rng(0)
    mu_p, ls_p, mu_q, ls_q = np.array([0.3, -1.0]), np.array([-0.2, 0.1]), np.array([0.0, -0.5]), np.array([0.1, -0.3])
    x = mu_p + np.exp(ls_p) * rng.standard_normal((400_000, 2))
    log_p = scipy.stats.norm.logpdf(x, mu_p, np.exp(ls_p)).sum(-1)
    log_q = scipy.stats.norm.logpdf(x, mu_q, np.exp(ls_q)).sum(-1)
    assert m.gaussian_kl(mu_p, ls_p, mu_q, ls_q) == pytest.approx(np.mean(log_p - log_q), abs=5e-3)


def test_feature_ranks_on_known_singular_values():
    rng = np.random.default_rng(1)
    u, _ = np.linalg.qr(rng.standard_normal((50, 6)))
    v, _ = np.linalg.qr(rng.standard_normal((8, 6)))
    sigma = np.array([10.0, 5.0, 2.0, 0.5, 0.01, 0.0])
    features = u @ np.diag(sigma) @ v.T
    # sigma^2 = 100, 25, 4, .25, 1e-4 (sum 129.2501): two keep 96.7%, three keep 99.8% -> 3
    # sigma = 10, 5, 2, .5, .01 (sum 17.51): three keep 97.1%, four keep 99.94% -> 4
    assert m.feature_ranks(features) == (3, 4)
    assert m.feature_ranks(np.zeros((5, 4))) == (0, 0)


def test_dormant_fractions_with_known_dead_units():
    rng = np.random.default_rng(2)
    dense = np.abs(rng.standard_normal((100, 10))) + 1.0
    dense[:, :2] = 0.0  # two dead units
    dense[:, 2] = 0.05 * dense[:, 2].mean()  # one nearly dead: score ~0.05/ (8.05/10) ~ 0.06
    conv = np.ones((100, 4, 3, 3))
    conv[:, 0] = 0.0  # one dead channel of four
    fr = m.dormant_fractions([dense, conv])
    assert fr[0.0] == pytest.approx(3 / 14)
    assert fr[0.025] == pytest.approx(3 / 14)
    assert fr[0.1] == pytest.approx(4 / 14)


def test_log_grad_kurtosis_matches_scipy():
    g = np.random.default_rng(3).standard_normal(10_000) * 1e-3
    expected = scipy.stats.kurtosis(np.log(np.abs(g) + 1e-12), fisher=False)
    assert m.log_grad_kurtosis(g) == pytest.approx(expected, rel=1e-9)


def test_ess_pct():
    assert m.ess_pct(np.full(64, 0.3)) == pytest.approx(100.0)  # equal ratios: every sample counts
    one_hot = np.full(10, -1e3)
    one_hot[4] = 0.0
    assert m.ess_pct(one_hot) == pytest.approx(10.0)  # one sample carries all the weight: 1/M
    w = np.array([1.0, 2.0, 3.0])
    assert m.ess_pct(np.log(w)) == pytest.approx(100 * 36 / (3 * 14))


def test_policy_variance_by_hand():
    probs = np.array([[0.2, 0.8], [0.6, 0.4]])  # var of each column across states: 0.04 and 0.04
    assert m.policy_variance(probs) == pytest.approx(0.04)


def test_kl_profile_indices():
    class Fake:  # "policies" are numbers; KL(i || j) = 10 i + j per state
        num_policies = 4
        def __call__(self, i, j):
            return np.array([10.0 * i + j, 10.0 * i + j])
    seq, ref = m.kl_profile(Fake())
    assert seq == [10.0, 21.0, 32.0]  # KL(pi_j || pi_{j-1}), j = 1..3
    assert ref == [30.0, 31.0, 32.0]  # KL(pi_3 || pi_j), j = 0..2


def test_gumbel_max_sampling_matches_softmax():
    torch.manual_seed(0)
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]])).repeat(100_000, 1)
    actions, logp = m.sample_actions(logits)
    freq = torch.bincount(actions, minlength=4).float() / len(actions)
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.3, 0.4]), atol=0.006)
    assert torch.allclose(logp, torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4]))[actions], atol=1e-6)


def no_autocast():
    """fp32 throughout: the autocast context update() and the probe take, switched off."""
    return torch.autocast("cpu", enabled=False)


def tiny_batch(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return m.Batch(torch.randint(0, 255, (n, 4, 84, 84), dtype=torch.uint8, generator=g),
                   torch.randint(0, 4, (n,), generator=g), torch.full((n,), -1.4), torch.randn(n, generator=g),
                   torch.randn(n, generator=g), torch.randn(n, generator=g), torch.ones(n))


def gradient(agent, batch, idx, args, loss_fn=m.ppo_loss):
    agent.zero_grad(set_to_none=True)
    stats = m.minibatch_gradient(agent, batch, idx, args, no_autocast, loss_fn, m.Ranks())
    return torch.cat([p.grad.reshape(-1) for p in agent.parameters()]), torch.stack(stats)


def test_masked_samples_carry_no_gradient():
    torch.manual_seed(0)
    agent, args = m.Agent(4), m.Args()
    batch = tiny_batch(6)
    batch.valid[4:] = 0.0  # the last two steps were ignored by the env
    grad_a, stats_a = gradient(agent, batch, torch.arange(6), args)
    for x in (batch.advantages, batch.returns, batch.values):
        x[4:] = 1e3  # garbage advantages, returns and values on the masked samples
    grad_b, stats_b = gradient(agent, batch, torch.arange(6), args)
    assert torch.allclose(grad_a, grad_b, atol=1e-7) and torch.allclose(stats_a, stats_b, atol=1e-7)


def test_update_logs_cleanrls_loss_statistics():
    """losses/*: the last minibatch's losses and KLs, the clip fraction averaged over every minibatch (CleanRL)."""
    torch.manual_seed(0)
    agent, args = m.Agent(4), m.Args(update_epochs=2, update_chunk_size=0, learning_rate=1e-2)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate)
    seen = []
    def recording_loss(*a):
        loss, stats = m.ppo_loss(*a)
        seen.append(torch.stack(stats))
        return loss, stats
    stats, _, steps = m.update(agent, optimizer, tiny_batch(16), args, 4, no_autocast, m.Ranks(),
                               loss_fn=recording_loss)
    seen = torch.stack(seen)
    assert steps == len(seen) == 8
    assert torch.equal(torch.stack(stats)[:5], seen[-1, :5])
    assert stats.clipfrac.item() == pytest.approx(seen[:, 5].mean().item())
    assert not torch.allclose(seen[0, :5], seen[-1, :5])  # the policy moved: first and last minibatch differ


def test_chunked_gradient_equals_the_whole_minibatch_gradient():
    torch.manual_seed(0)
    agent, args = m.Agent(4), m.Args()
    batch = tiny_batch(12)
    batch.valid[[2, 7]] = 0.0
    idx = torch.randperm(12)
    whole, stats_whole = gradient(agent, batch, idx, m.Args(update_chunk_size=0))
    chunked, stats_chunked = gradient(agent, batch, idx, m.Args(update_chunk_size=5))
    assert torch.allclose(whole, chunked, rtol=1e-4, atol=1e-7)
    assert torch.allclose(stats_whole, stats_chunked, rtol=1e-5, atol=1e-7)


def test_compiled_loss_gives_the_eager_gradient():
    torch.manual_seed(0)
    agent, args = m.Agent(4, channels_last=True), m.Args()
    agent = agent.to(memory_format=torch.channels_last)
    batch = tiny_batch(16)
    batch.valid[[3, 9]] = 0.0
    idx = torch.randperm(16)
    grads = []
    for loss_fn in (m.ppo_loss, m.maybe_compile(m.ppo_loss, True)):
        agent.zero_grad(set_to_none=True)
        stats = m.minibatch_gradient(agent, batch, idx, args, no_autocast, loss_fn, m.Ranks())
        grads.append((torch.cat([p.grad.reshape(-1) for p in agent.parameters()]), torch.stack(stats)))
    (eager, eager_stats), (compiled, compiled_stats) = grads
    assert eager.abs().max() > 0
    assert torch.allclose(eager, compiled, rtol=1e-4, atol=1e-6)
    assert torch.allclose(eager_stats, compiled_stats, rtol=1e-4, atol=1e-6)


def cleanrl_style_update(agent, optimizer, batch, args, mb_size, perms):
    """CleanRL's update loop written out on its own (eager, PyTorch's default layout, Categorical, for-loop Adam),
    over the given minibatch permutations: the reference for the test below."""
    obs, actions, logprobs, advantages, returns, values, _ = batch
    for perm in perms:
        for start in range(0, len(perm), mb_size):
            mb = perm[start:start + mb_size]
            logits, newvalue = agent(obs[mb])
            dist = torch.distributions.Categorical(logits=logits)
            ratio = (dist.log_prob(actions[mb]) - logprobs[mb]).exp()
            adv = advantages[mb]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
            v_clipped = values[mb] + torch.clamp(newvalue - values[mb], -args.clip_coef, args.clip_coef)
            v_loss = 0.5 * torch.max((newvalue - returns[mb]) ** 2, (v_clipped - returns[mb]) ** 2).mean()
            loss = pg_loss - args.ent_coef * dist.entropy().mean() + args.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()


def l2(tensors) -> float:
    return sum((t.double() ** 2).sum().item() for t in tensors) ** 0.5


class LockstepProbe:
    """After each of update()'s optimizer steps: how far (L2 over all weights) our weights are from CleanRL's after the same step, and how
    far that step moved CleanRL's; then our weights and Adam moments are set to CleanRL's, so every step starts from
    the same state. Compounded over 16 steps instead, one sample whose ratio or value sits on a clipping edge may
    take the other branch in one of the two float routes and the difference grows from there (seen on an AVX-512
    machine: max difference 2.7e-7 for 9 steps, then 2.6e-5 at step 10 and 1.4e-3 after 16), so per step is what
    rounding allows. Measured here: per step at most 1.8e-6 of the step's own L2 move; 7.9e-5 with ent_coef 0.011
    for ours (a 10% change of one coefficient), so the bound 1e-5 sits between the two."""

    def __init__(self, snapshots, optimizer):
        self.snapshots, self.optimizer, self.k, self.diffs, self.moves = snapshots, optimizer, 0, [], []

    def first_gradient(self, agent):
        pass

    def after_step(self, agent):
        (before, _), (after, moments) = self.snapshots[self.k], self.snapshots[self.k + 1]
        ours = [p.detach() for p in agent.parameters()]
        self.diffs.append(l2(o - a for o, a in zip(ours, after)))
        self.moves.append(l2(a - b for a, b in zip(after, before)))
        with torch.no_grad():
            for o, a in zip(ours, after):
                o.copy_(a)  # copy_ keeps our channels-last strides
            for p, (m1, m2) in zip(agent.parameters(), moments):
                state = self.optimizer.state[p]
                state["exp_avg"].copy_(m1)
                state["exp_avg_sq"].copy_(m2)
        self.k += 1


def test_each_step_of_an_update_is_cleanrls_step_whatever_the_layout_compiler_and_adam():
    """The default mode computes differently from CleanRL (compiled loss, channels-last, fused Adam, loss
    chunks). With CleanRL's episode semantics (all samples valid) and the same minibatches, each of the 16 steps of
    one whole update (4 epochs x 4 minibatches, CleanRL's defaults), from the same weights and Adam moments, lands
    on CleanRL's step up to float rounding."""
    torch.manual_seed(0)
    args = m.Args(learning_rate=1e-3)  # CleanRL's defaults otherwise; lr x4 so that each step moves the weights far
    reference, ours = m.Agent(4), m.Agent(4, channels_last=True)
    ours.load_state_dict(reference.state_dict())
    ours = ours.to(memory_format=torch.channels_last)
    batch = tiny_batch(64, seed=1)
    # behaviour log-probs that differ per sample
    batch = batch._replace(logprobs=batch.logprobs + 0.05 * batch.advantages)
    mb_size = 64 // args.num_minibatches
    torch.manual_seed(7)
    perms = [torch.randperm(64) for _ in range(args.update_epochs)]  # the draws update() makes after manual_seed(7)
    reference_adam = torch.optim.Adam(reference.parameters(), lr=args.learning_rate, eps=1e-5, foreach=False)

    def snapshot():
        params = [p.detach().clone() for p in reference.parameters()]
        moments = [(reference_adam.state[p]["exp_avg"].clone(), reference_adam.state[p]["exp_avg_sq"].clone())
                   if p in reference_adam.state else None for p in reference.parameters()]
        return params, moments

    snapshots = [snapshot()]
    for perm in perms:
        for start in range(0, 64, mb_size):  # CleanRL's loop, one minibatch at a time
            cleanrl_style_update(reference, reference_adam, batch, args, mb_size, [perm[start:start + mb_size]])
            snapshots.append(snapshot())
    torch.manual_seed(7)
    optimizer = torch.optim.Adam(ours.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)  # as build_agent
    probe = LockstepProbe(snapshots, optimizer)
    _, _, steps = m.update(ours, optimizer, batch, dataclasses.replace(args, update_chunk_size=10), mb_size,
                           no_autocast, m.Ranks(), probe=probe, loss_fn=m.maybe_compile(m.ppo_loss, True))
    assert steps == probe.k == 16
    assert min(probe.moves) > 0.05  # every Adam step of 1e-3 moved the weights (0.21 at the least, measured)
    assert max(d / mv for d, mv in zip(probe.diffs, probe.moves)) < 1e-5, (probe.diffs, probe.moves)


def test_compile_falls_back_to_eager_without_a_cxx_compiler(tmp_path, capfd):
    """Inductor needs a C++ compiler; without one, one warning line and the eager loss (same numbers)."""
    calls = []
    def loss(x):
        calls.append(1)
        return (x.relu() * 3).sum()
    from torch._inductor import config as inductor_config
    torch._dynamo.reset()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(inductor_config.cpp, "cxx", (None, str(tmp_path / "no-such-compiler")))
            mp.setattr(inductor_config, "fx_graph_cache", False)  # a cached kernel would need no compiler
            fn = m.maybe_compile(loss, True)
            x = torch.tensor([-1.0, 2.0])
            assert fn(x).item() == 6.0 and fn(x).item() == 6.0
    finally:
        torch._dynamo.reset()
    err = capfd.readouterr().err
    assert err.count("warning: torch.compile failed") == 1 and "running eagerly" in err
    assert len(calls) >= 2  # the eager function ran after the failure


@contextlib.contextmanager
def compiled_with_backward(backward_compiler):
    """Inside the block, torch.compile as maybe_compile calls it, with a backend whose forward runs the traced graph
    and whose backward is `backward_compiler`'s: AOTAutograd calls it lazily, at the first backward, as it calls
    inductor's. Dynamo's caches are cleared before and after."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    backend = aot_autograd(fw_compiler=lambda gm, example: make_boxed_func(gm.forward),
                           bw_compiler=lambda gm, example: make_boxed_func(backward_compiler(gm, example)))
    real_compile = torch.compile
    torch._dynamo.reset()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch, "compile", lambda fn: real_compile(fn, backend=backend))
            yield
    finally:
        torch._dynamo.reset()


def eager_minibatch(update_chunk_size: int) -> tuple:
    """A seeded tiny agent, a minibatch of 6 and its eager gradient: (agent, args, batch, idx, gradient, stats)."""
    torch.manual_seed(0)
    agent, args, batch, idx = m.Agent(4), m.Args(update_chunk_size=update_chunk_size), tiny_batch(6), torch.arange(6)
    return (agent, args, batch, idx, *gradient(agent, batch, idx, args))


def assert_one_compile_warning(capfd, reason: str) -> None:
    err = capfd.readouterr().err
    assert err.count("warning: torch.compile failed") == 1 and f"({reason})" in err, err


def test_compile_builds_the_backward_at_the_first_call_and_keeps_its_gradient_out():
    """Inductor compiles a backward lazily; maybe_compile builds it inside the first call (so that its failure can
    fall back), and that build accumulates nothing: the gradient is the eager one, not twice it."""
    built = []
    def backward_compiler(gm, example):
        built.append(1)
        return gm.forward
    agent, args, batch, idx, eager, _ = eager_minibatch(update_chunk_size=0)
    with compiled_with_backward(backward_compiler):
        fn = m.maybe_compile(m.ppo_loss, True)
        agent.zero_grad(set_to_none=True)
        fn(agent, *batch, batch.valid.sum(), args)
        assert built == [1] and all(p.grad is None for p in agent.parameters())  # built, nothing accumulated
        compiled, _ = gradient(agent, batch, idx, args, fn)
        again, _ = gradient(agent, batch, idx, args, fn)
    assert built == [1]  # built once
    assert eager.abs().max() > 0
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-7)
    assert torch.equal(compiled, again)


def test_compile_falls_back_to_eager_when_the_backward_cannot_build(capfd):
    """A backward compile that fails (raised by AOTAutograd's lazy call, not as BackendCompilerFailed) gives one
    warning line and the eager function from then on, with the eager gradient."""
    def backward_compiler(gm, example):
        raise RuntimeError("ptxas cannot target this GPU\nsecond line")
    calls = []
    def counted_loss(*args):
        calls.append(1)
        return m.ppo_loss(*args)
    agent, args, batch, idx, eager, eager_stats = eager_minibatch(update_chunk_size=0)
    with compiled_with_backward(backward_compiler):
        fn = m.maybe_compile(counted_loss, True)
        compiled, compiled_stats = gradient(agent, batch, idx, args, fn)
        before = len(calls)
        gradient(agent, batch, idx, args, fn)
    assert len(calls) == before + 1  # eager from then on: the eager function ran once more, not traced
    assert torch.equal(compiled, eager) and torch.equal(compiled_stats, eager_stats)
    assert_one_compile_warning(capfd, "ptxas cannot target this GPU")


def test_compile_falls_back_when_a_recompile_for_new_shapes_cannot_build_its_backward(capfd):
    """A minibatch of 6 in chunks of 4 compiles a second graph for the chunk of 2, whose backward is again built
    lazily: its failure there falls back as the first graph's would, with one warning line and the eager gradient."""
    built = []
    def backward_compiler(gm, example):
        built.append(1)
        if len(built) > 1:
            raise RuntimeError("ptxas cannot target this GPU")
        return gm.forward
    agent, args, batch, idx, eager, eager_stats = eager_minibatch(update_chunk_size=4)
    with compiled_with_backward(backward_compiler):
        compiled, compiled_stats = gradient(agent, batch, idx, args, m.maybe_compile(m.ppo_loss, True))
    assert len(built) >= 2  # the first graph's built; the second's tried (AOTAutograd tries a dynamic one early too)
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(compiled_stats, eager_stats, rtol=1e-5, atol=1e-7)
    assert_one_compile_warning(capfd, "ptxas cannot target this GPU")


@pytest.mark.parametrize("bf16", [False, True])
def test_rollout_stores_the_policys_own_logprobs_and_values(bf16):
    """The rollout runs in one autocast region (its bf16 weight cache lives for the whole rollout): what it
    stores must be what a fresh per-step evaluation of the same policy on the stored frames gives."""
    torch.manual_seed(0)
    envs = m.make_envs("Breakout-v5", 2, seed=0)
    agent = m.Agent(envs.action_space.n).eval()
    storage = m.make_storage(8, 2, envs.observation_space.shape, "cpu")
    obs, _ = envs.reset()
    zeros = torch.zeros(2)
    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
    m.collect_rollout([envs], agent, storage, m.NextStep(torch.as_tensor(obs), zeros, zeros), m.EpisodeStats(2),
                      m.Args(num_steps=8), "cpu", autocast, m.Ranks())
    for t in range(8):
        with torch.no_grad(), autocast():
            logits, value = agent(storage.obs[t])
        logp = torch.log_softmax(logits.float(), -1).gather(-1, storage.actions[t][:, None]).squeeze(-1)
        assert torch.equal(logp, storage.logprobs[t]) and torch.equal(value.float(), storage.values[t])
    assert storage.obs[1:].float().std() > 0  # the frames moved: the check ran on a real trajectory


def test_envpool_frame_stacks_shift_by_one_frame_but_at_a_games_first_step():
    """What a copy of the newest frame only would rest on (docs/gpu.md#the-rollout-step): with the script's envpool
    settings (episodic life: a lost life does not restart the stack), each env's 4 frames are its previous 4 shifted
    by one, but at the first step of a new game (info's elapsed_step == 0), whose 4 frames all repeat its first."""
    envs = m.make_envs("Breakout-v5", 8, seed=3)
    obs, _ = envs.reset()
    rng = np.random.default_rng(0)
    first_steps = lives_lost = 0
    for _ in range(600):
        new, _, term, _, info = envs.step(rng.integers(0, envs.action_space.n, 8))
        first = info["elapsed_step"] == 0
        shifted = np.all(new[:, :3] == obs[:, 1:], axis=(1, 2, 3))
        assert np.array_equal(shifted, ~first)
        assert np.all(new[first] == new[first][:, 3:4])
        first_steps += first.sum()
        lives_lost += np.sum(term & (info["lives"] > 0))
        obs = new
    assert first_steps >= 5 and lives_lost >= 5  # both kinds of episode end were seen


def test_bf16_rollout_runs_the_heads_in_fp32():
    """--bf16: the trunk in bf16, the actor and critic heads in fp32. The stored values and log-probs are an fp32
    evaluation of the heads on the bf16 trunk's features (bf16 heads round a value of ~1 by up to 4e-3)."""
    torch.manual_seed(0)
    envs = m.make_envs("Breakout-v5", 2, seed=0)
    agent = m.Agent(envs.action_space.n, separate_encoders=True).eval()
    storage = m.make_storage(8, 2, envs.observation_space.shape, "cpu")
    obs, _ = envs.reset()
    zeros = torch.zeros(2)
    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16)
    m.collect_rollout([envs], agent, storage, m.NextStep(torch.as_tensor(obs), zeros, zeros), m.EpisodeStats(2),
                      m.Args(num_steps=8), "cpu", autocast, m.Ranks())
    for t in range(8):
        x = storage.obs[t].float() / 255.0
        with torch.no_grad():
            with autocast():
                hidden, critic_hidden = agent.network(x), agent.critic_network(x)
            assert hidden.dtype == torch.bfloat16  # the trunk did run in bf16
            logits, value = agent.actor(hidden.float()), agent.critic(critic_hidden.float()).squeeze(-1)
        logp = torch.log_softmax(logits, -1).gather(-1, storage.actions[t][:, None]).squeeze(-1)
        assert torch.allclose(logp, storage.logprobs[t], rtol=0, atol=1e-6)
        assert torch.allclose(value, storage.values[t], rtol=1e-6, atol=1e-7)
        assert value.abs().min() > 1e-2  # values large enough for bf16 rounding (2^-9 relative) to show


def one_env(max_episode_steps=27_000):
    return m.import_envpool().make("Breakout-v5", env_type="gymnasium", num_envs=1, seed=5, episodic_life=True,
                                   reward_clip=True, max_episode_steps=max_episode_steps)


def test_envpool_ignores_the_action_after_a_done_and_returns_the_last_frame_on_truncation():
    """The two envpool facts the default mode is built on (docs/ppo_atari_envpool.md, Auto-reset done right):
    the step after a done resets whatever the action, so masking it loses no signal; and the frame that comes
    with truncated=True is the game's own last frame, so V(obs[t+1]) is the right bootstrap."""
    a, b = one_env(), one_env()
    a.reset(), b.reset()
    rng = np.random.default_rng(0)
    done, reset_steps = False, 0
    for _ in range(3000):
        action = rng.integers(0, 4, 1)
        step_a = a.step(action)
        step_b = b.step((action + 2) % 4 if done else action)  # another action only on the reset step
        assert np.array_equal(step_a[0], step_b[0])  # the same frame: the reset step ignored the action
        reset_steps += done
        done = bool(step_a[2][0] or step_a[3][0])
        if reset_steps == 3:
            break
    assert reset_steps == 3
    for _ in range(3):  # on a normal step the action does matter: RIGHT and LEFT move the paddle apart
        frame_a, frame_b = a.step(np.array([2]))[0], b.step(np.array([3]))[0]
    assert not np.array_equal(frame_a, frame_b)

    short, long = one_env(max_episode_steps=60), one_env()
    short.reset(), long.reset()
    for _ in range(200):  # the same actions in both; lives lost on the way reset within the game
        action = rng.integers(0, 4, 1)
        obs_s, _, term, trunc, _ = short.step(action)
        obs_l, *_ = long.step(action)
        if trunc[0]:
            break
    assert trunc[0] and not term[0]
    assert np.array_equal(obs_s, obs_l)  # the last frame of the game that goes on in `long`, not a reset frame
    assert not np.array_equal(short.step(np.array([0]))[0], long.step(np.array([0]))[0])  # then a new game


def cleanrl_rollout(envs, agent, actions, num_steps):
    """CleanRL's rollout semantics written out on their own, replaying given actions: float frames / 255,
    done = terminated or truncated (per life), stored with the frame it follows, and its GAE loop."""
    obs, _ = envs.reset()
    next_obs, next_done = torch.tensor(obs, dtype=torch.float32), torch.zeros(envs.config["num_envs"])
    stored = {k: [] for k in ("obs", "rewards", "dones", "values")}
    for step in range(num_steps):
        with torch.no_grad():
            value = agent.critic(agent.network(next_obs / 255.0)).flatten()
        stored["obs"].append(next_obs), stored["dones"].append(next_done), stored["values"].append(value)
        obs, reward, term, trunc, _ = envs.step(actions[step].numpy())
        stored["rewards"].append(torch.tensor(reward))
        next_obs, next_done = torch.tensor(obs, dtype=torch.float32), torch.tensor(np.logical_or(term, trunc), dtype=torch.float32)
    with torch.no_grad():
        next_value = agent.critic(agent.network(next_obs / 255.0)).flatten()
    out = {k: torch.stack(v) for k, v in stored.items()}
    out["advantages"] = torch.tensor([cleanrl_gae(out["rewards"][:, i].tolist(), out["values"][:, i].tolist(),
                                                  out["dones"][:, i].tolist(), next_value[i].item(), next_done[i].item(),
                                                  0.99, 0.95) for i in range(out["rewards"].shape[1])]).T
    return out


def test_rollout_and_advantages_on_a_real_game_are_cleanrls():
    """Our rollout (uint8 frames, the done/terminated pairing) and GAE against CleanRL's written out, on Breakout
    with lives lost: the same frames, rewards, dones and advantages in both modes (no truncation in 128 steps, so
    the default mode differs only in its mask, which drops exactly the reset steps)."""
    num_envs, num_steps = 4, 128
    torch.manual_seed(0)
    envs = m.make_envs("Breakout-v5", num_envs, seed=2)
    agent = m.Agent(envs.action_space.n, channels_last=True).to(memory_format=torch.channels_last).eval()
    args = m.Args(num_envs=num_envs, num_steps=num_steps)
    storage = m.make_storage(num_steps, num_envs, envs.observation_space.shape, "cpu")
    obs, _ = envs.reset()
    zeros = torch.zeros(num_envs)
    _, state = m.collect_rollout([envs], agent, storage, m.NextStep(torch.as_tensor(obs), zeros, zeros),
                                 m.EpisodeStats(num_envs), args, "cpu", no_autocast, m.Ranks())
    with torch.no_grad():
        _, next_value = agent(state.obs)

    reference = cleanrl_rollout(m.make_envs("Breakout-v5", num_envs, seed=2), agent, storage.actions, num_steps)
    assert storage.dones.sum() >= 4 and storage.rewards.sum() > 0  # lives were lost and points scored
    assert torch.equal(storage.obs.float(), reference["obs"])
    assert torch.equal(storage.rewards, reference["rewards"]) and torch.equal(storage.dones, reference["dones"])
    assert torch.allclose(storage.values, reference["values"], atol=1e-5)
    for cleanrl_compat in (True, False):
        terminations, next_term = m.bootstrap_terminations(storage, state, cleanrl_compat)
        advantages, _ = m.compute_advantages(storage.rewards, storage.values, storage.dones, terminations, next_value,
                                             state.done, next_term, args.gamma, args.gae_lambda)
        assert torch.allclose(advantages, reference["advantages"], atol=1e-4)
        assert torch.equal(m.valid_mask(storage.dones, cleanrl_compat),
                           torch.ones_like(storage.dones) if cleanrl_compat else 1.0 - reference["dones"])


class ObsHashAgent(torch.nn.Module):
    """A policy whose action is a function of the frames (their sum mod A, a logit margin of 50 nats, so Gumbel-max
    sampling picks it whatever its noise) and whose value is their mean: rollouts that differ only in how they
    draw the sampling noise must then store the same bits."""

    def __init__(self, num_actions):
        super().__init__()
        self.num_actions = num_actions

    def forward(self, obs):
        choice = obs.long().sum(dim=(1, 2, 3)) % self.num_actions
        return 50.0 * torch.nn.functional.one_hot(choice, self.num_actions).float(), obs.float().mean(dim=(1, 2, 3))


def rollouts(async_envs, num_envs, num_steps, times, seed=7, device="cpu"):
    """`times` consecutive rollouts of ObsHashAgent in one mode: (storages, NextSteps, finished games) of each."""
    groups = m.make_env_groups("Breakout-v5", num_envs, seed, async_envs)
    agent = ObsHashAgent(groups[0].action_space.n)
    stats, zeros = m.EpisodeStats(num_envs), torch.zeros(num_envs, device=device)
    state = m.NextStep(torch.as_tensor(np.concatenate([g.reset()[0] for g in groups]), device=device), zeros, zeros)
    out = []
    for _ in range(times):
        storage = m.make_storage(num_steps, num_envs, groups[0].observation_space.shape, device)
        finished, state = m.collect_rollout(groups, agent, storage, state, stats, m.Args(num_steps=num_steps), device,
                                            no_autocast, m.Ranks())
        out.append((storage, state, finished))
    for g in groups:
        g.close()
    return out


def test_halves_draw_the_batchs_actions_on_cpu():
    """On the CPU, sampling the two halves in turn draws the random numbers one batch would, in its order (torch's
    one generator fills its noise row after row): the same actions and log-probabilities. So --async-envs on a CPU
    differs from the synchronous run only by the float rounding of the forward pass at the halves' batch size (in a
    400,000-step Breakout run at 8 envs, none: docs/gpu.md#the-envs-in-two-halves)."""
    logits = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(7)
    whole = m.sample_actions(logits)
    torch.manual_seed(7)
    halves = [m.sample_actions(logits[:4]), m.sample_actions(logits[4:])]
    for got, want in zip((torch.cat(x) for x in zip(*halves)), whole):
        assert torch.equal(got, want)
    torch.manual_seed(8)
    assert not torch.equal(m.sample_actions(logits)[0], whole[0])  # another seed's draws: other actions


def test_loop_times_by_hand(monkeypatch):
    """time/*: the rollout from its mark to the update's, the envs' step and recv inside it (send returns at once:
    not a wait), the update from its mark to the losses' (docs/metrics.md#timing)."""
    class Envs:
        sent = []

        def step(self, action):
            return ("stepped", action)

        def recv(self):
            return "received"

        def send(self, action):
            self.sent.append(action)
    ticks = iter([100.0, 100.5, 101.0, 101.0, 101.25, 102.0, 105.0])
    monkeypatch.setattr(m.time, "perf_counter", lambda: next(ticks))
    envs = m.EnvClock(Envs())
    times = m.LoopTimes([envs])
    times.mark("rollout")  # 100.0
    assert envs.step(3) == ("stepped", 3)  # 100.5 .. 101.0
    envs.send(4)  # envpool's own, untimed
    assert envs.recv() == "received"  # 101.0 .. 101.25
    times.mark("update")  # 102.0
    times.mark("losses")  # 105.0
    assert envs.sent == [4] and envs.waited == 0.75
    assert times.scalars() == {"time/rollout_seconds": 2.0, "time/env_wait_seconds": 0.75, "time/update_seconds": 3.0}


def test_async_envs_collect_the_transitions_of_one_group(device="cpu"):
    """--async-envs (two halves of the envs stepping in turn through envpool's send/recv) must be a reordering of
    the synchronous rollout: with a policy that is a function of the frames, two consecutive rollouts store the
    same frames, actions, log-probs, values, rewards, done and terminated flags, end in the same NextStep and
    finish the same games, env by env. (tests/test_gpu.py runs it on CUDA.)"""
    sync, alternating = rollouts(False, 6, 96, 2, device=device), rollouts(True, 6, 96, 2, device=device)
    for (a, a_state, a_done), (b, b_state, b_done) in zip(sync, alternating):
        for field in dataclasses.fields(m.Storage):
            assert torch.equal(getattr(a, field.name), getattr(b, field.name)), field.name
        for x, y in zip(a_state, b_state):
            assert torch.equal(x, y)
        assert sorted(a_done) == sorted(b_done)
    storage = sync[1][0]
    # lives were lost, points scored and whole games finished; every action was taken and the envs differ
    assert storage.dones.sum() >= 4 and sum(x[0].rewards.sum() for x in sync) > 0 and len(sync[1][2]) > 0
    assert len(storage.actions.unique()) == 4 and (storage.obs[:, :3] != storage.obs[:, 3:]).any()


def test_async_envs_runs_a_complete_run_and_refuses_an_odd_count(tmp_path):
    _, err = run(TINY[2:] + ["--num-envs", "5", "--async-envs", "--total-timesteps", "1024"], tmp_path / "odd", expect=2)
    assert err.strip().count("\n") == 0 and "--async-envs" in err and "even --num-envs" in err
    assert not (tmp_path / "odd" / "runs").exists()
    out, _ = run(TINY + ["--async-envs", "--total-timesteps", "128", "--diagnostics-every", "2"], tmp_path)
    (run_dir,) = run_dirs(tmp_path)
    assert "in two alternating halves" in out
    assert json.load(open(run_dir / "config.json"))["args"]["async_envs"] is True
    rows = read_metrics(run_dir)
    assert [r["iteration"] for r in rows if "losses/policy_loss" in r] == [1, 2]
    assert all(math.isfinite(v) for r in rows for k, v in r.items() if k != "losses/explained_variance")
    assert json.load(open(run_dir / "summary.json"))["status"] == "finished"


def envpool_async_rollouts(num_envs, num_steps, times, seed=7, device="cpu", envs=None, agent=None, between=None):
    """`times` consecutive --envpool-async rollouts: (rollout [T, N], NextStep, finished games) of each, copied out of
    the buffer, which the next rollout reuses; `between(i)` runs after rollout i (an update)."""
    envs = envs or m.EnvClock(m.make_envs("Breakout-v5", num_envs, seed, batch_size=num_envs // 2))
    agent = agent or ObsHashAgent(envs.action_space.n)
    buffer = m.make_storage(m.async_buffer_rows(num_steps), num_envs, (4, 84, 84), device)
    collector, stats, out = m.EnvpoolAsyncRollout(envs, buffer, num_steps, device), m.EpisodeStats(num_envs), []
    for i in range(times):
        finished, state = m.collect_rollout([envs], agent, None, None, stats, m.Args(num_steps=num_steps), device,
                                            no_autocast, m.Ranks(), collector)
        rollout = m.Storage(**{k: v.clone() for k, v in dataclasses.asdict(m.first_rows(buffer, num_steps)).items()})
        out.append((rollout, m.NextStep(*(x.clone() for x in state)), finished))
        if between:
            between(i)
    envs.close()
    return out, collector


def test_envpool_async_collects_each_envs_transitions_of_the_synchronous_mode(device="cpu"):
    """--envpool-async (one instance, recv returns the first half of the envs to finish): with a policy that is a
    function of the frames, each env's column of three consecutive rollouts holds the frames, actions, values,
    rewards and flags the synchronous mode stores, ends in the same NextStep and finishes the same games: the envs
    arriving in any order changes no env's transitions. Its rows past T and the envs' waiting are exercised by the
    fake pool below."""
    sync = rollouts(False, 6, 64, 3, device=device)
    native, collector = envpool_async_rollouts(6, 64, 3, device=device)
    for (a, a_state, a_done), (b, b_state, b_done) in zip(sync, native):
        for field in dataclasses.fields(m.Storage):
            x, y = getattr(a, field.name), getattr(b, field.name)
            assert torch.equal(x, y) if field.name != "logprobs" else torch.allclose(x, y), field.name
        for x, y in zip(a_state, b_state):
            assert torch.equal(x, y)
        assert sorted(a_done) == sorted(b_done)
    assert sync[2][0].dones.sum() >= 2 and sum(x[0].rewards.sum() for x in sync) > 0 and sync[1][2]


class FakeAsyncPool:
    """envpool's asynchronous interface over envs whose steps take random times: recv returns the `batch` in-flight
    envs that finish first (and refuses to wait forever when fewer are in flight). Env e's frame after its k-th
    step spells (e, k); a step's reward is 10 k + the action taken; env e's episodes end every 5 + e steps,
    terminated for even e, truncated for odd. It records every action it was sent, and the version of `agent`
    (the policy) current when it was sent. `reset_time`: how long each env's first observation takes."""
    action_space = type("Space", (), {"n": 4})

    def __init__(self, num_envs, batch, agent, seed=0, reset_time=None):
        self.rng, self.batch, self.steps = np.random.default_rng(seed), batch, np.zeros(num_envs, dtype=np.int64)
        self.finish_at, self.now, self.sent, self.fewest_in_flight, self.agent = {}, 0.0, {}, num_envs, agent
        self.reset_time = reset_time or [self.rng.exponential() for _ in range(num_envs)]

    def async_reset(self):
        for e in range(len(self.steps)):
            self.finish_at[e] = self.reset_time[e]

    def send(self, actions, ids):
        for a, e in zip(actions, ids):
            assert e not in self.finish_at, "an env sent while still stepping"
            self.sent[(int(e), int(self.steps[e]))] = (int(a), self.agent.version)
            self.steps[e] += 1
            self.finish_at[e] = self.now + self.rng.exponential() * (3.0 if self.rng.random() < 0.1 else 1.0)

    def recv(self):
        self.fewest_in_flight = min(self.fewest_in_flight, len(self.finish_at))
        assert len(self.finish_at) >= self.batch, "recv would wait forever"
        ids = np.array(sorted(self.finish_at, key=self.finish_at.get)[:self.batch])
        self.now = max(self.finish_at.pop(e) for e in ids)
        k = self.steps[ids]
        obs = np.zeros((len(ids), 4, 84, 84), dtype=np.uint8)
        obs[:, 0, 0, 0], obs[:, 0, 0, 1], obs[:, 0, 0, 2] = ids, k % 256, k // 256
        reward = np.array([10.0 * (s - 1) + self.sent[(e, s - 1)][0] if s > 0 else 0.0 for e, s in zip(ids, k)])
        end = (k > 0) & (k % (5 + ids) == 0)
        term, trunc = end & (ids % 2 == 0), end & (ids % 2 == 1)
        info = {"env_id": ids, "reward": reward, "terminated": term.astype(np.int32), "elapsed_step": k}
        return obs, reward.astype(np.float32), term, trunc, info

    def close(self):
        pass


class StepReadingAgent(torch.nn.Module):
    """Acts (k + version) mod 4 on the frame of step k (a 50-nat margin: the sample whatever the noise) and values it
    1000 version + k: what a row holds tells which critic valued it."""

    def __init__(self):
        super().__init__()
        self.version = 0

    def forward(self, obs):
        k = obs[:, 0, 0, 1].long() + 256 * obs[:, 0, 0, 2].long()
        choice = (k + self.version) % 4
        return 50.0 * torch.nn.functional.one_hot(choice, 4).float(), (1000.0 * self.version + k).float()


def test_envpool_async_rows_by_hand_over_rollouts_with_updates_between(device="cpu"):
    """The --envpool-async bookkeeping against envs that finish in random order, with an update (a new policy and
    critic) between rollouts: rollout j's row t of env e is that env's step k = j T + t, env by env (frames, flags,
    the reward its action earned, the action it was sent, and that action's log-prob under the policy that chose
    it); every value is the current critic's; the bootstrap is step (j + 1) T, its flags included. The rows acted
    before the update (envs that ran ahead, and those in flight during it) are the first of their env's column; the
    envs that waited are acted by the new policy. The games reported with rollout j are those that ended in its rows
    1..T, with their returns and lengths. recv never waits on fewer than half the envs."""
    num_envs, num_steps, times = 8, 6, 40
    agent = StepReadingAgent()
    pool = FakeAsyncPool(num_envs, num_envs // 2, agent)
    out, collector = envpool_async_rollouts(num_envs, num_steps, times, device=device, envs=pool, agent=agent,
                                            between=lambda i: setattr(agent, "version", i + 1))
    stale = waited = 0
    for j, (rollout, state, finished) in enumerate(out):
        for e in range(num_envs):
            k = j * num_steps + np.arange(num_steps)
            assert rollout.obs[:, e, 0, 0, 0].tolist() == [e] * num_steps
            assert (rollout.obs[:, e, 0, 0, 1].long() + 256 * rollout.obs[:, e, 0, 0, 2].long()).tolist() == k.tolist()
            actions, versions = zip(*(pool.sent[(e, int(s))] for s in k))
            assert rollout.actions[:, e].tolist() == list(actions)
            assert all((a - s) % 4 == v % 4 for s, a, v in zip(k, actions, versions))  # chosen by that version
            assert rollout.logprobs[:, e].abs().max() < 1e-6  # the chosen action's, by a 50-nat margin
            assert rollout.rewards[:, e].tolist() == [10.0 * s + a for s, a in zip(k, actions)]
            end = (k > 0) & (k % (5 + e) == 0)
            assert rollout.dones[:, e].tolist() == end.astype(float).tolist()
            assert rollout.terminations[:, e].tolist() == (end & (e % 2 == 0)).astype(float).tolist()
            assert rollout.values[:, e].tolist() == (1000.0 * j + k).tolist()
            assert int(state.obs[e, 0, 0, 1]) + 256 * int(state.obs[e, 0, 0, 2]) == (j + 1) * num_steps
            old = [v < j for v in versions]
            assert old == sorted(old, reverse=True)  # the rows acted before the update come first
            assert all(v <= j for v in versions)
            stale += sum(old)
            waited += j > 0 and not old[0]
        end = [(j + 1) * num_steps % (5 + e) == 0 for e in range(num_envs)]
        assert state.done.tolist() == [float(x) for x in end]
        assert state.terminated.tolist() == [float(x and e % 2 == 0) for e, x in enumerate(end)]
        games = []
        for e in range(num_envs):
            for k in range(j * num_steps + 1, (j + 1) * num_steps + 1):
                if k % (5 + e) == 0:  # the game of steps k - 5 - e .. k - 1
                    steps = range(max(k - 5 - e, 0), k)
                    games.append((sum(10.0 * s + pool.sent[(e, s)][0] for s in steps), k))
        assert sorted(finished) == sorted(games) and games
    # both ways of opening a rollout are exercised: rows carried from before the update, envs that waited for it
    assert stale > times and waited > times
    assert pool.fewest_in_flight >= num_envs // 2


def test_envpool_async_buffer_holds_the_worst_case():
    """An env whose first observation takes as long as the others' 200 steps: half the envs wait, the other three
    must keep stepping with it (recv needs half of them in flight), in step with it until it has its T + 1 rows.
    They end with 2T + 2 rows, the bound async_buffer_rows allows for, and the rollout is the slow env's steps
    0..T and theirs 0..T, as always; more rollouts with random slow steps stay inside it."""
    num_steps = 16
    agent = StepReadingAgent()
    pool = FakeAsyncPool(8, 4, agent, seed=2, reset_time=[200.0] + [0.1] * 7)  # a seed whose draws reach the bound
    out, collector = envpool_async_rollouts(8, num_steps, 1, envs=pool, agent=agent)
    assert collector.rows.max() == 2 * num_steps + 2 == m.async_buffer_rows(num_steps)  # 2T + 1 would not hold it
    assert collector.rows[0] == num_steps + 1 and pool.fewest_in_flight == 4
    rollout = out[0][0]
    assert (rollout.obs[:, :, 0, 0, 1].long() == torch.arange(num_steps)[:, None]).all()
    slow = FakeAsyncPool(8, 4, agent, seed=3, reset_time=[50.0, 30.0] + [0.1] * 6)
    envpool_async_rollouts(8, num_steps, 20, envs=slow, agent=agent)  # index errors if a row fell outside


def test_envpool_async_runs_resumes_and_refuses_what_it_cannot_do(tmp_path):
    """A whole --envpool-async run (diagnostics on, a checkpoint, a resume that continues it); one clear line and
    exit 2 with --async-envs, --cleanrl-compat or an odd env count, and on a resume that changes the mode (it changes
    what a run computes)."""
    for extra, words in ((["--async-envs"], "pass one"), (["--cleanrl-compat"], "--cleanrl-compat"),
                         (["--num-envs", "5"], "even --num-envs")):
        _, err = run(TINY + ["--envpool-async", "--total-timesteps", "1024"] + extra, tmp_path / "bad", expect=2)
        assert err.strip().count("\n") == 0 and "--envpool-async" in err and words in err, err
    assert not (tmp_path / "bad" / "runs").exists()
    out, _ = run(TINY + ["--envpool-async", "--total-timesteps", "192", "--diagnostics-every", "2",
                         "--checkpoint-every", "1"], tmp_path)
    (run_dir,) = run_dirs(tmp_path)
    assert "envpool's asynchronous mode (batch 2)" in out
    assert json.load(open(run_dir / "config.json"))["args"]["envpool_async"] is True
    rows = read_metrics(run_dir)
    assert [r["iteration"] for r in rows if "losses/policy_loss" in r] == [1, 2, 3]
    assert [r["iteration"] for r in rows if "diagnostics/ess_pct" in r] == [2]
    assert all(math.isfinite(v) for r in rows for k, v in r.items() if k != "losses/explained_variance")
    ckpt = run_dir / "checkpoints" / "latest.ckpt"
    _, err = run(TINY + ["--total-timesteps", "256", "--resume", str(ckpt)], tmp_path / "other", expect=2)
    assert "envpool_async=True" in err and "--envpool-async" in err
    run(TINY + ["--envpool-async", "--total-timesteps", "256", "--resume", str(ckpt)], tmp_path / "again")
    assert [r["iteration"] for r in read_metrics(run_dir) if "losses/policy_loss" in r] == [1, 2, 3, 4]
    assert json.load(open(run_dir / "summary.json"))["status"] == "finished"


def test_advantage_normalisation_matches_cleanrl_when_all_valid():
    adv = torch.randn(50)
    expected = (adv - adv.mean()) / (adv.std() + 1e-8)
    assert torch.allclose(m.normalize_advantages(adv, torch.ones(50), torch.tensor(50.0), m.Ranks()), expected, atol=1e-6)


def test_episode_stats_whole_game_several_per_step_and_truncation():
    stats = m.EpisodeStats(3)
    info = {"reward": np.array([1.0, 2.0, 5.0]), "terminated": np.array([0, 0, 0]), "elapsed_step": np.array([1, 1, 1])}
    assert stats.update(info, np.array([False, False, False])) == []
    info = {"reward": np.array([10.0, 0.0, 1.0]), "terminated": np.array([1, 0, 1]), "elapsed_step": np.array([2, 2, 2])}
    assert stats.update(info, np.array([False, True, False])) == [(11.0, 2), (2.0, 2), (6.0, 2)]
    info = {"reward": np.array([1.0, 1.0, 1.0]), "terminated": np.array([0, 0, 0]), "elapsed_step": np.array([1, 1, 1])}
    assert stats.update(info, np.array([False, False, False])) == [] and list(stats.returns) == [1.0, 1.0, 1.0]
    # --envpool-async: the env ids envpool's recv returned, in its order
    info = {"reward": np.array([4.0, 2.0]), "terminated": np.array([1, 0]), "elapsed_step": np.array([9, 3])}
    assert stats.update(info, np.array([False, False]), np.array([2, 0])) == [(5.0, 9)]
    assert list(stats.returns) == [3.0, 1.0, 0.0]


# ------------------------------------------------------------------------------------------------ scaling
def resolve(**kw):
    args = m.Args(**kw)
    return m.resolve_scaling(args)


def resolve_checked(**kw):
    """What validate does with the scaling flags: the flags and their conflicts, the recipe, then its result."""
    args = m.Args(**kw)
    m.check_scaling_flags(args)
    scaling = m.resolve_scaling(args)
    m.check_scaling(args, scaling)
    return scaling


@pytest.mark.parametrize("kw, mb, nmb, lr", [
    (dict(), 256, 4, 2.5e-4),
    (dict(minibatch_size=128), 128, 8, 2.5e-4),
    (dict(num_envs=64, scaling_recipe="more-minibatches"), 256, 32, 2.5e-4),
    (dict(num_envs=64, scaling_recipe="larger-minibatches"), 2048, 4, 2.5e-4),
    (dict(num_envs=32, scaling_recipe="sqrt-lr"), 1024, 4, 5e-4),
    (dict(num_envs=256, scaling_recipe="hybrid", minibatch_multiplier=4), 1024, 32, 5e-4),
    (dict(num_envs=32, lr_scaling="sqrt"), 1024, 4, 5e-4),
    (dict(num_envs=32, lr_scaling="linear"), 1024, 4, 1e-3),
    (dict(num_envs=64, base_num_envs=16, scaling_recipe="more-minibatches", minibatch_size=512), 512, 16, 2.5e-4),
    # --lr-scaling's reference is the script's defaults at --base-num-envs (8 x 128 / 4 = 256), whatever else is set
    (dict(num_envs=32, minibatch_size=1024, lr_scaling="linear"), 1024, 4, 2.5e-4 * 4),
    (dict(num_steps=512, lr_scaling="sqrt"), 1024, 4, 2.5e-4 * 2),
    (dict(num_steps=256, lr_scaling="sqrt"), 512, 4, 2.5e-4 * 2 ** 0.5),
    (dict(num_envs=32, num_minibatches=8, lr_scaling="linear"), 512, 8, 2.5e-4 * 2),
    (dict(num_envs=16, base_num_envs=16, lr_scaling="linear"), 512, 4, 2.5e-4),
    (dict(num_envs=64, scaling_recipe="more-minibatches", lr_scaling="linear"), 256, 32, 2.5e-4),
    (dict(num_envs=64, scaling_recipe="larger-minibatches", lr_scaling="sqrt"), 2048, 4, 2.5e-4 * 8 ** 0.5),
    (dict(learning_rate=1e-3, minibatch_size=64, lr_scaling="linear"), 64, 16, 1e-3 / 4),
])
def test_recipe_arithmetic(kw, mb, nmb, lr):
    r = resolve_checked(**kw)
    assert (r["minibatch_size"], r["num_minibatches"]) == (mb, nmb)
    assert r["learning_rate"] == pytest.approx(lr)
    assert r["minibatch_size"] * r["num_minibatches"] == r["batch_size"]


def test_batch_messages_speak_of_the_users_batch():
    """Without a recipe, a non-dividing --num-minibatches is reported against the user's own N x T."""
    with pytest.raises(m.UsageError, match=r"--num-minibatches 3 does not divide the batch 8x16=128") as err:
        resolve_checked(num_envs=8, num_steps=16, num_minibatches=3)
    assert "base" not in str(err.value)
    # under a recipe the base configuration is what the flag describes, and the message says so
    with pytest.raises(m.UsageError, match=r"base batch 8x15=120 of --scaling-recipe more-minibatches"):
        resolve_checked(num_envs=16, num_steps=15, num_minibatches=7, scaling_recipe="more-minibatches")


def test_resolved_line_shows_the_base_only_where_it_is_used():
    """The resolved line shows the base (base_num_envs, base_minibatch_size, scale) only where a recipe or an lr
    scaling uses it."""
    plain = m.describe_scaling(resolve(num_envs=16), m.Args(num_envs=16))
    assert plain == "resolved: batch_size=2048, minibatch_size=512, num_minibatches=4, learning_rate=0.00025"
    kw = dict(num_envs=16, lr_scaling="sqrt")
    assert m.describe_scaling(resolve(**kw), m.Args(**kw)).endswith("base_num_envs=8, base_minibatch_size=256")
    kw = dict(num_envs=16, scaling_recipe="more-minibatches")
    assert "scale=2, base_num_envs=8, base_minibatch_size=256" in m.describe_scaling(resolve(**kw), m.Args(**kw))


def test_total_timesteps_message_names_the_batch_it_compares_with():
    with pytest.raises(m.UsageError, match=r"--total-timesteps 1000 is less than one batch of 8x128=1024 steps"):
        resolve_checked(total_timesteps=1000)


@pytest.mark.parametrize("kw, first, second", [
    # ran with 16 minibatches of 64 and no word about --num-minibatches 8
    (dict(minibatch_size=64, num_minibatches=8), "--minibatch-size 64", "--num-minibatches 8"),
    # at the default N was reported as "minibatch size 4096 does not divide the batch"
    (dict(scaling_recipe="hybrid", lr_scaling="sqrt"), "--lr-scaling sqrt", "--scaling-recipe hybrid"),
    (dict(num_envs=64, scaling_recipe="sqrt-lr", lr_scaling="linear"), "--lr-scaling linear", "--scaling-recipe sqrt-lr"),
    # ignored without a word: the multiplier outside hybrid, the base where nothing reads it
    (dict(num_envs=64, scaling_recipe="more-minibatches", minibatch_multiplier=4), "--minibatch-multiplier 4",
     "--scaling-recipe hybrid"),
    (dict(num_envs=64, base_num_envs=16), "--base-num-envs 16", "--scaling-recipe"),
])
def test_conflicting_scaling_flags_are_refused_naming_both(kw, first, second):
    with pytest.raises(m.UsageError) as err:
        resolve_checked(**kw)
    message = str(err.value)
    assert first in message and second in message and "divide" not in message


def test_a_conflict_is_named_before_the_batch_arithmetic():
    """A conflict that also leaves a batch that does not divide is reported as the conflict."""
    kw = dict(num_envs=3, num_steps=16, minibatch_size=512, num_minibatches=1)
    with pytest.raises(m.UsageError, match="minibatch size 512 does not divide"):
        m.check_scaling(m.Args(**kw), resolve(**kw))  # what the recipe's result alone says
    with pytest.raises(m.UsageError, match="--minibatch-size 512 and --num-minibatches 1"):
        resolve_checked(**kw)


def test_the_recipe_is_pure_arithmetic():
    """resolve_scaling only computes: on flags whose batch does not divide it returns, and check_scaling refuses."""
    args = m.Args(num_envs=6, num_steps=3)
    scaling = m.resolve_scaling(args)
    assert scaling["batch_size"] == 18 and scaling == m.resolve_scaling(args)
    with pytest.raises(m.UsageError, match="--num-minibatches 4 does not divide the batch 6x3=18"):
        m.check_scaling(args, scaling)


@pytest.mark.parametrize("kw, flag", [
    (dict(gae_lambda=2.0), "--gae-lambda"), (dict(gamma=-0.1), "--gamma"), (dict(clip_coef=-0.1), "--clip-coef"),
    (dict(vf_coef=-1.0), "--vf-coef"), (dict(max_grad_norm=-0.5), "--max-grad-norm"), (dict(target_kl=0.0), "--target-kl"),
    (dict(update_epochs=0), "--update-epochs"),
])
def test_each_ppo_flag_message_names_only_that_flag(kw, flag):
    """'--gae-lambda 2' is told about --gae-lambda only, not '--gamma and --gae-lambda must lie in [0, 1]'."""
    m.check_ppo_flags(m.Args())  # the defaults pass
    with pytest.raises(m.UsageError) as err:
        m.check_ppo_flags(m.Args(**kw))
    assert re.findall(r"--[a-z][a-z-]*", str(err.value)) == [flag]


FLOAT_FLAGS = [f.name for f in dataclasses.fields(m.Args) if isinstance(getattr(m.Args(), f.name), float)]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_float_flags_are_refused(value):
    """A non-finite float flag is refused up front (--ent-coef inf would train, then stop on NaN with exit 3)."""
    assert {"learning_rate", "gamma", "gae_lambda", "clip_coef", "ent_coef", "vf_coef", "max_grad_norm"} <= set(FLOAT_FLAGS)
    m.check_finite_floats(m.Args())
    for name in FLOAT_FLAGS + ["target_kl"]:  # target_kl: Optional[float], None by default
        with pytest.raises(m.UsageError, match=f"--{name.replace('_', '-')} must be a finite number"):
            m.check_finite_floats(m.Args(**{name: value}))


def test_unwritable_runs_dir_is_refused(tmp_path):
    (tmp_path / "a_file").write_text("")
    for path in ["/proc/cleanrl_scaling_runs", str(tmp_path / "a_file" / "runs")]:
        with pytest.raises(m.UsageError, match="^--runs-dir: cannot write to"):
            m.check_writable_dir(path, "--runs-dir")
    m.check_writable_dir(str(tmp_path / "new" / "runs"), "--runs-dir")
    assert os.listdir(tmp_path / "new" / "runs") == []  # the probe file is gone


def test_checkpoint_messages_name_the_flag_that_gave_the_path(tmp_path):
    with pytest.raises(m.UsageError, match="^--init-from: no checkpoint at"):
        m.load_checkpoint(str(tmp_path / "missing.ckpt"), m.SCRIPT, {}, "--init-from")
    (tmp_path / "x.ckpt").write_bytes(pickle.dumps({"script": m.SCRIPT, "signature": {"num_envs": 4}}))
    with pytest.raises(m.UsageError, match="^--init-from: the checkpoint has num_envs=4"):
        m.load_checkpoint(str(tmp_path / "x.ckpt"), m.SCRIPT, {"num_envs": 8}, "--init-from")
    # booleans are named as the flag a user types; a key the checkpoint never recorded is said so, not "None"
    (tmp_path / "b.ckpt").write_bytes(pickle.dumps({"script": m.SCRIPT, "signature": {"cleanrl_compat": False}}))
    with pytest.raises(m.UsageError, match="cleanrl_compat=False but this run has True; pass --no-cleanrl-compat to "
                       "resume it, or leave out --resume to start a new run$"):
        m.load_checkpoint(str(tmp_path / "b.ckpt"), m.SCRIPT, {"cleanrl_compat": True})
    with pytest.raises(m.UsageError, match="^--resume: .*b.ckpt does not record separate_encoders"):
        m.load_checkpoint(str(tmp_path / "b.ckpt"), m.SCRIPT, {"cleanrl_compat": False, "separate_encoders": False})


def test_keys_added_later_take_the_value_an_older_checkpoint_implies(tmp_path):
    """A signature key newer than a checkpoint is compared with the value the checkpoint stands for (`implied`)."""
    (tmp_path / "old.ckpt").write_bytes(pickle.dumps({"script": m.SCRIPT, "signature": {"num_envs": 8}}))
    implied = {"levels": []}
    state = m.load_checkpoint(str(tmp_path / "old.ckpt"), m.SCRIPT, {"num_envs": 8, "levels": []}, implied=implied)
    assert state["signature"] == {"num_envs": 8}
    with pytest.raises(m.UsageError, match="the checkpoint has levels=\\[\\] but this run has \\['a', 'b'\\]; pass no --levels to"):
        m.load_checkpoint(str(tmp_path / "old.ckpt"), m.SCRIPT, {"num_envs": 8, "levels": ["a", "b"]}, implied=implied)
    (tmp_path / "new.ckpt").write_bytes(pickle.dumps({"script": m.SCRIPT, "signature": {"levels": ["a", "b"]}}))
    with pytest.raises(m.UsageError, match="pass --levels a b to"):  # a recorded value wins over the implied one
        m.load_checkpoint(str(tmp_path / "new.ckpt"), m.SCRIPT, {"levels": []}, implied=implied)
    assert m.as_flag("train_levels", ("s/h0", "s/h1")) == "--train-levels s/h0 s/h1"
    assert m.as_flag("gamma", 0.99) == "--gamma 0.99" and m.as_flag("norm_adv", False) == "--no-norm-adv"


def test_progress_says_no_episode_has_ended_instead_of_nan(tmp_path, capsys):
    """A progress line before any episode has ended prints no 'return nan'."""
    logger = m.RunLogger(str(tmp_path / "lines"), {}, m.Args(progress="lines"), total_steps=100)
    logger.progress(16, 1000.0)
    first = capsys.readouterr().out
    assert "no episode finished yet" in first and "nan" not in first
    logger.log(32, 2, {"charts/episodic_return": 12.5, "charts/episodic_length": 40})
    logger.last_line = 0.0  # plain lines come every 10 s: do not wait for the next
    logger.progress(32, 1000.0)
    assert "return 12.50" in capsys.readouterr().out
    logger.close({"status": "finished"})
    bar = m.RunLogger(str(tmp_path / "bar"), {}, m.Args(progress="bar"), total_steps=100)
    bar.progress(16, 1000.0)
    bar.close({"status": "finished"})
    shown = capsys.readouterr().err
    assert "no episode finished yet" in shown and "nan" not in shown


def test_the_bar_starts_after_the_start_up_lines(tmp_path, capsys):
    """A bar drawn as the run directory opened had the start-up lines print through it."""
    logger = m.RunLogger(str(tmp_path / "bar"), {}, m.Args(progress="bar"), total_steps=100)
    m.announce_run(logger.run_dir)
    shown = capsys.readouterr()
    assert shown.err == "" and "tensorboard --logdir" in shown.out
    logger.progress(16, 1000.0)
    assert "16/100" in capsys.readouterr().err
    logger.close({"status": "finished"})


# ------------------------------------------------------------------------------------------------ end to end
# the scaling flags' mistakes (those of every script: tests/test_every_script.py)
BAD_INPUTS = [
    (["--num-envs", "6", "--num-steps", "3"], "--num-minibatches"),
    (["--minibatch-size", "100"], "minibatch size"),
    (["--num-envs", "3", "--scaling-recipe", "more-minibatches"], "--num-envs"),
    (["--scaling-recipe", "sqrt-lr", "--lr-scaling", "sqrt"], "--lr-scaling"),
    (["--scaling-recipe", "hybrid", "--lr-scaling", "sqrt"], "--scaling-recipe hybrid"),  # not "does not divide"
    (["--minibatch-size", "64", "--num-minibatches", "8"], "--num-minibatches 8"),  # ran with 16 minibatches
]


@pytest.mark.parametrize("flags, names", BAD_INPUTS)
def test_bad_input_exits_2_with_one_line(flags, names, tmp_path):
    _, err = run(flags + ["--total-timesteps", "1024"], tmp_path, expect=2)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # nothing was built or written


def test_a_checkpoint_of_another_network_says_which_flag_resumes_it(tmp_path):
    shaped = tmp_path / "shaped.ckpt"
    shaped.write_bytes(pickle.dumps({"script": "ppo_atari_envpool", "signature": m.resume_signature(
        m.Args(separate_encoders=True, update_chunk_size=512), m.RESUMABLE)}))  # 512: as a CPU run records it
    _, err = run(["--resume", str(shaped)], tmp_path, expect=2)
    assert "pass --separate-encoders to resume it" in err


def test_update_chunk_size_follows_the_device_and_the_signature_records_what_runs(tmp_path, monkeypatch):
    """-1 (the default): chunks of 512 on CPU, whole minibatches where the run uses CUDA; the resume signature holds the
    resolved size, so a CPU run's checkpoint, old or new, records 512 and a GPU run's 0 (docs/gpu.md)."""
    assert m.Args().update_chunk_size == -1
    assert m.update_chunk_for(7, True) == 7 and m.update_chunk_for(0, False) == 0
    monkeypatch.setattr(sys, "argv", ["ppo_atari_envpool.py", "--runs-dir", str(tmp_path)])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert m.update_chunk_for(-1, True) == 512 and m.update_chunk_for(-1, False) == 512
    args, _, signature, _ = m.read_args()
    assert args.update_chunk_size == 512 and signature["update_chunk_size"] == 512
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert m.update_chunk_for(-1, True) == 0 and m.update_chunk_for(-1, False) == 512  # --no-cuda: the CPU's
    args, _, signature, _ = m.read_args()
    assert args.update_chunk_size == 0 and signature["update_chunk_size"] == 0
    monkeypatch.setattr(sys, "argv", ["ppo_atari_envpool.py", "--runs-dir", str(tmp_path), "--update-chunk-size", "64"])
    args, _, signature, _ = m.read_args()
    assert args.update_chunk_size == 64 and signature["update_chunk_size"] == 64


def test_help_documents_every_flag(tmp_path):
    out, _ = run(["--help"], tmp_path)
    for flag in ["--env-id", "--num-envs", "--minibatch-size", "--scaling-recipe", "--base-num-envs",
                 "--minibatch-multiplier", "--lr-scaling", "--separate-encoders", "--diagnostics-every",
                 "--resume", "--checkpoint-every", "--bf16", "--target-kl", "--track"]:
        assert flag in out
    assert "the surrogate clipping coefficient" in out


EXPECTED_TAGS = ["charts/SPS", "charts/learning_rate", "losses/policy_loss", "losses/value_loss", "losses/entropy",
                 "losses/approx_kl", "losses/old_approx_kl", "losses/clipfrac", "losses/explained_variance",
                 "diagnostics/kl_behavior", "diagnostics/ddr", "diagnostics/seq_kl_mean", "diagnostics/ref_kl_mean",
                 "diagnostics/update_size", "diagnostics/grad_norm", "diagnostics/feature_rank", "diagnostics/srank",
                 "diagnostics/dormant_frac", "diagnostics/dormant_frac_tau0", "diagnostics/dormant_frac_tau0.1",
                 "diagnostics/weight_norm", "diagnostics/grad_kurtosis", "diagnostics/ess_pct",
                 "diagnostics/policy_variance", "time/rollout_seconds", "time/env_wait_seconds", "time/update_seconds"]


def test_smoke_run_writes_a_complete_run_directory(tmp_path):
    out, _ = run(TINY + ["--total-timesteps", "256", "--diagnostics-every", "2", "--separate-encoders",
                         "--save-model", "--eval-episodes", "2", "--seed", "3"], tmp_path)
    (run_dir,) = run_dirs(tmp_path)
    assert run_dir.name.startswith("Breakout-v5__ppo_atari_envpool__3__")
    config = json.load(open(run_dir / "config.json"))
    assert config["resolved"]["batch_size"] == 64 and config["resolved"]["minibatch_size"] == 32
    assert config["args"]["num_iterations"] == 4 and "torch" in config["versions"]
    rows = read_metrics(run_dir)
    tags = set().union(*rows)
    for tag in EXPECTED_TAGS + ["diagnostics/critic_feature_rank", "diagnostics/actor_weight_norm",
                                "diagnostics/critic_weight_norm", "eval/episodic_return"]:
        assert tag in tags, tag
    for row in rows:
        assert row.keys() >= {"global_step", "iteration", "wall_time"}
        for tag, value in row.items():
            if tag != "losses/explained_variance":
                assert math.isfinite(value), (tag, value)
    diag = [r for r in rows if "diagnostics/ddr" in r]
    assert [r["iteration"] for r in diag] == [2, 4]
    timed = [r for r in rows if "time/rollout_seconds" in r]  # every iteration, its env waits inside its rollout
    assert [r["iteration"] for r in timed] == [1, 2, 3, 4]
    assert all(0 < r["time/env_wait_seconds"] < r["time/rollout_seconds"] and r["time/update_seconds"] > 0 for r in timed)
    for r in diag:
        assert r["diagnostics/ddr"] == pytest.approx(64 / r["diagnostics/kl_behavior"])
        assert 0 < r["diagnostics/ess_pct"] <= 100 and 0 <= r["diagnostics/dormant_frac"] <= 1
    profile = [json.loads(line) for line in open(run_dir / "kl_profile.jsonl")]
    assert len(profile) == 2 and len(profile[0]["seq_kl"]) == 4 and len(profile[0]["ref_kl"]) == 4
    assert profile[0]["ref_kl"][-1] == pytest.approx(profile[0]["seq_kl"][-1])
    assert list(run_dir.glob("events.out.tfevents.*"))
    ckpt = pickle.load(open(run_dir / "checkpoints" / "latest.ckpt", "rb"))
    assert ckpt["iteration"] == 4 and ckpt["global_step"] == 256 and ckpt["script"] == "ppo_atari_envpool"
    agent = m.Agent(4, separate_encoders=True)
    agent.load_state_dict(ckpt["agent"])
    summary = json.load(open(run_dir / "summary.json"))
    assert summary["status"] == "finished" and summary["global_step"] == 256
    assert "SPS:" in out and "eval return" in out


def test_resume_continues_from_the_checkpoint_step(tmp_path):
    run(TINY + ["--total-timesteps", "128", "--diagnostics-every", "0"], tmp_path)
    (run_dir,) = run_dirs(tmp_path)
    ckpt_path = run_dir / "checkpoints" / "latest.ckpt"
    before = pickle.load(open(ckpt_path, "rb"))
    out, _ = run(TINY + ["--total-timesteps", "256", "--diagnostics-every", "0", "--resume", str(ckpt_path)], tmp_path)
    assert "resuming from iteration 2" in out and "envs restart" in out
    assert run_dirs(tmp_path) == [run_dir]  # continues in the same run directory
    rows = [r for r in read_metrics(run_dir) if "losses/policy_loss" in r]
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert [r["global_step"] for r in rows] == [64, 128, 192, 256]
    after = pickle.load(open(ckpt_path, "rb"))
    assert after["iteration"] == 4 and after["optimizer"]["state"][0]["step"] > before["optimizer"]["state"][0]["step"]
    # the annealed lr continues where the schedule was (1 - 2/4 of the initial value at iteration 3)
    assert rows[2]["charts/learning_rate"] == pytest.approx(2.5e-4 * 0.5)


def recording_lr(ckpt_path, lr: float) -> bytes:
    """The checkpoint as a run at another lr would have written it (its recorded flags edited), so that a resume with
    that --learning-rate matches it."""
    state = pickle.load(open(ckpt_path, "rb"))
    state["signature"]["learning_rate"] = state["args"]["learning_rate"] = lr
    ckpt_path.write_bytes(pickle.dumps(state))
    return ckpt_path.read_bytes()


def test_nan_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    run(TINY + ["--total-timesteps", "128", "--diagnostics-every", "0"], tmp_path)
    (run_dir,) = run_dirs(tmp_path)
    ckpt_path = run_dir / "checkpoints" / "latest.ckpt"
    good = recording_lr(ckpt_path, 1e35)  # a run at lr 1e35: resumed, its first update overflows the parameters
    _, err = run(TINY + ["--total-timesteps", "512", "--diagnostics-every", "0", "--learning-rate", "1e35",
                         "--checkpoint-every", "1", "--resume", str(ckpt_path)], tmp_path, expect=3)
    assert "non-finite" in err and "Traceback" not in err
    assert ckpt_path.read_bytes() == good
    assert json.load(open(run_dir / "summary.json"))["status"] == "diverged"


def wait_for_metrics(run_root, proc, timeout=120):
    start = time.time()
    while time.time() - start < timeout:
        dirs = list(run_root.glob("*/metrics.jsonl")) if run_root.exists() else []
        if dirs and dirs[0].stat().st_size > 0:
            return dirs[0].parent
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise TimeoutError


def test_kill_9_never_leaves_a_broken_checkpoint(tmp_path):
    cmd = [sys.executable, SCRIPT, "--runs-dir", str(tmp_path / "runs")] + TINY + [
        "--total-timesteps", "100000", "--diagnostics-every", "0", "--checkpoint-every", "1"]
    rng = np.random.default_rng(0)
    for attempt in range(3):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
        if attempt == 0:
            run_dir = wait_for_metrics(tmp_path / "runs", proc)
        ckpt_path = run_dir / "checkpoints" / "latest.ckpt"
        while not ckpt_path.exists():
            time.sleep(0.05)
        time.sleep(float(rng.uniform(0.0, 1.5)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = pickle.load(open(ckpt_path, "rb"))
        assert state["iteration"] >= 1 and set(state["agent"]) == set(m.Agent(4).state_dict())
        cmd = [c for c in cmd if c != "--resume"]


def test_track_offline_writes_a_wandb_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run(TINY + ["--total-timesteps", "64", "--diagnostics-every", "0", "--track"], tmp_path)
    (run_dir,) = run_dirs(tmp_path)
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert offline and list(offline[0].glob("*.wandb"))


def test_torchrun_two_gloo_ranks(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", SCRIPT,
           "--runs-dir", str(tmp_path / "runs")] + TINY + ["--total-timesteps", "128", "--diagnostics-every", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path)  # rank 0 alone writes
    config = json.load(open(run_dir / "config.json"))
    assert config["world_size"] == 2
    rows = [r for r in read_metrics(run_dir) if "losses/policy_loss" in r]
    assert [r["global_step"] for r in rows] == [64, 128]  # the global step counts every rank's envs
    ckpt = pickle.load(open(run_dir / "checkpoints" / "latest.ckpt", "rb"))
    assert len(ckpt["rng"]) == 2  # each rank's RNG state, for resume


def test_chunked_representation_gives_the_full_batch_diagnostics():
    torch.manual_seed(0)
    agent = m.Agent(4)
    obs = torch.randint(0, 255, (7, 4, 84, 84), dtype=torch.uint8)
    probe = m.DiagnosticProbe(agent, obs, torch.zeros(7, dtype=torch.long), no_autocast,
                              3, num_policies=9)
    (features, magnitudes), = probe.representation(agent).values()
    with torch.no_grad():  # independent route: the Nature CNN layer by layer, keeping every post-ReLU output
        x, full = obs.float() / 255.0, []
        for layer in agent.network:
            x = layer(x)
            if isinstance(layer, torch.nn.ReLU):
                full.append(x.numpy())
    assert np.allclose(features, full[-1], atol=1e-5)  # float rounding: x / 255 here, x * (1 / 255) in forward
    assert m.dormant_fractions(magnitudes) == pytest.approx(m.dormant_fractions(full))
    logits_full = torch.log_softmax(agent(obs)[0], -1).detach().numpy()
    assert np.allclose(probe.logps[0], logits_full, atol=1e-5)


@pytest.mark.parametrize("script", ["ppo_atari_envpool", "ppo_procgen"])  # both CNN scripts carry the same cap
def test_kl_profile_memory_is_capped_at_large_j(monkeypatch, script):
    """J = 1000 minibatch steps on a tiny linear policy: the profile keeps an evenly strided subset of the
    states within PROFILE_BYTES, and its seq/ref KL equal the uncapped profile's on those states."""
    m = importlib.import_module(f"cleanrl_scaling.{script}")
    class TinyPolicy(torch.nn.Module):
        channels_last = False
        def __init__(self):
            super().__init__()
            self.pi = torch.nn.Linear(3, 6)
        def forward(self, obs):
            return self.pi(obs), obs.sum(-1)
    torch.manual_seed(0)
    num_states, J, kept = 64, 1000, 16
    agent, obs, actions = TinyPolicy(), torch.randn(num_states, 3), torch.zeros(num_states, dtype=torch.long)
    budget = 8 * 6 * (J + 1) * kept  # room for 16 of the 64 states' float64 log-probs of J + 1 policies
    monkeypatch.setattr(m, "PROFILE_BYTES", budget)
    capped = m.DiagnosticProbe(agent, obs, actions, no_autocast, 0, J + 1)
    monkeypatch.setattr(m, "PROFILE_BYTES", 1 << 40)
    full = m.DiagnosticProbe(agent, obs, actions, no_autocast, 0, J + 1)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(J):
            agent.pi.weight += 0.01 * torch.randn(agent.pi.weight.shape, generator=g)
            capped.after_step(agent)
            full.after_step(agent)
    assert len(capped.logps) == J + 1 and all(lp.shape == (kept, 6) for lp in capped.logps)
    assert sum(lp.nbytes for lp in capped.logps) <= budget
    assert len(full.logps[0]) == num_states
    idx = capped.profile_idx
    assert idx[0] == 0 and idx[-1] == num_states - 1 and len(np.unique(idx)) == kept  # spread over the batch
    seq, ref = m.kl_profile(capped)
    seq_full = [np.mean(m.categorical_kl(full.logps[j][idx], full.logps[j - 1][idx])) for j in range(1, J + 1)]
    ref_full = [np.mean(m.categorical_kl(full.logps[J][idx], full.logps[j][idx])) for j in range(J)]
    assert len(seq) == J and seq == pytest.approx(seq_full, rel=1e-12) and ref == pytest.approx(ref_full, rel=1e-12)
    assert min(seq) > 0  # the policy moved at every step
    # kl_behavior and ess still use every diagnostic state: the behaviour policy is kept whole
    assert capped.behavior.shape == (num_states, 6) and np.array_equal(capped.behavior, full.logps[0])


def test_run_directories_never_collide(tmp_path):
    first = m.claim_run_dir(str(tmp_path / "Breakout-v5__x__1__100"))
    second = m.claim_run_dir(str(tmp_path / "Breakout-v5__x__1__100"))
    assert first.endswith("__100") and second.endswith("__100-2") and os.path.isdir(second)


def test_saved_features_take_the_whole_subsample_at_chunk_0(tmp_path):
    """--update-chunk-size 0 (whole minibatches, which a GPU run may pass) reaches save_features as chunk 0: one
    forward pass over the subsample, the same features as a chunk of its size."""
    agent = m.Agent(4)
    obs = torch.randint(0, 256, (12, 4, 84, 84), dtype=torch.uint8)
    saved = [np.load(m.save_features(agent, obs, str(tmp_path / str(chunk)), 1, 12, 10, 0, chunk))["features"]
             for chunk in (0, 10, 3)]
    assert saved[0].shape == (10, 512) and np.array_equal(saved[0], saved[1])
    np.testing.assert_allclose(saved[0].astype(np.float32), saved[2].astype(np.float32), rtol=1e-2, atol=1e-3)
