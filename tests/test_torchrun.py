"""torchrun = one process (the "Data parallelism" paragraphs of docs/ppo_atari_envpool.md, docs/ppo_procgen.md,
docs/pqn_atari.md; docs/ppo_continuous_mujoco.md#scaling-and-torchrun).

Slow, per torch script: a run under `torchrun --nproc-per-node 2` (gloo, CPU) and a single-process run of the same
tiny config log the same per-iteration losses, explained variance and diagnostics at iteration 1 (within 1e-5
relative, or 5e-7 absolute where float32 terms cancel; a main loss past that only as far as one process moves it when
only the float summation order changes), and at iteration 2 differ no more than one process differs from itself when
only the summation order changes; the finished episodes are the same. The ranks split the
envs (envpool and gymnasium seed env i with seed + i), draw the whole batch's random numbers from one stream and
reduce every batch statistic over the ranks.

Default: the reduction functions themselves with two gloo processes on synthetic data."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from cleanrl_scaling import ppo_atari_envpool as atari, ppo_continuous_mujoco as mujoco  # noqa: E402
from cleanrl_scaling import ppo_procgen as procgen, pqn_atari as pqn  # noqa: E402
from inprocess import free_port  # noqa: E402

T, N, W = 3, 4, 2  # steps, envs (all ranks), ranks: rank r holds envs [2r, 2r + 2)


def script(name):
    return os.path.join(ROOT, "cleanrl_scaling", f"{name}.py")


def run(name, flags, runs_dir, ranks):
    launcher = [sys.executable] if ranks == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                       "--nproc_per_node", str(ranks)]
    cmd = launcher + [script(name), "--runs-dir", str(runs_dir), "--progress", "none", "--no-compile"] + flags
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"})
    assert out.returncode == 0, out.stderr[-3000:]
    (run_dir,) = [os.path.join(runs_dir, d) for d in os.listdir(runs_dir)]
    assert json.load(open(os.path.join(run_dir, "config.json")))["world_size"] == ranks
    return [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]


# ddr = batch / kl_behavior and the kurtosis of log(|g| + 1e-12) magnify float rounding without bound (a
# gradient entry of 1e-15 in one run and 0 in the other); kl_behavior and the gradient norm are compared instead
NOT_COMPARED = ("diagnostics/ddr", "diagnostics/grad_kurtosis")
# Iteration 1 (the same initial weights; every minibatch step, normaliser and diagnostic of an iteration runs):
# within 1e-5 relative, or 5e-7 absolute for the quantities that are float32 means of O(1) terms cancelling to
# ~1e-4 (approx_kl, the policy loss, explained variance near 0) or to ~1e-6 (the diagnostics' per-step KLs)
RTOL, ATOL = 1e-5, 5e-7
# Per tag, an absolute tolerance on the scale of the quantity where rounding moves it by more: explained variance
# is a fraction of variance (scale 1), float32 variances of a few hundred values; the dormant fractions and ranks
# count units on either side of a threshold, where a unit whose score sits at the threshold can flip
TAG_ATOL = {"losses/explained_variance": 1e-5, "diagnostics/feature_rank": 1, "diagnostics/srank": 1,
            "diagnostics/critic_feature_rank": 1, "diagnostics/critic_srank": 1}
DORMANT_ATOL = 0.01


def by_iteration(rows):
    """{iteration: {tag: value}} of the per-iteration scalars, and {iteration: sorted episodes}."""
    scalars, episodes = {}, {}
    for row in rows:
        it = row["iteration"]
        for tag in ("charts/episodic_return", "charts/eval_return"):
            if tag in row:
                episodes.setdefault((tag, it), []).append((row[tag], row[tag.replace("return", "length")]))
        if any(k.startswith("losses/") for k in row):
            scalars[it] = {k: v for k, v in row.items()
                           if k.startswith(("losses/", "diagnostics/")) and k not in NOT_COMPARED}
    return scalars, {key: sorted(eps) for key, eps in episodes.items()}  # the ranks log episodes in rank order


def differences(one, two, tags=None, iterations=None):
    """(max relative difference, the tags outside RTOL/ATOL) over `iterations` (all) and `tags` (all)."""
    worst, outside = 0.0, []
    for it in iterations or one:
        assert one[it].keys() == two[it].keys()
        for tag, a in one[it].items():
            if tags is not None and tag not in tags:
                continue
            b = two[it][tag]
            if np.isnan(a) and np.isnan(b):
                continue
            worst = max(worst, abs(a - b) / max(abs(a), abs(b), 1e-30))
            atol = DORMANT_ATOL if "dormant_frac" in tag else TAG_ATOL.get(tag, ATOL)
            if abs(a - b) > max(RTOL * max(abs(a), abs(b)), atol):
                outside.append((it, tag, a, b))
    return worst, outside


MAIN_LOSSES = ("losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/td_loss", "losses/q_values")
# 2 iterations, diagnostics in both; CONTROL: a single-process run that changes only the float summation order
CASES = {
    "ppo_atari_envpool": ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "4", "--update-epochs", "2",
                          "--total-timesteps", "128", "--diagnostics-every", "1", "--diagnostics-states", "40",
                          "--update-chunk-size", "6"],
    # starpilot: a random policy's episodes last ~80 steps, so a few end and the episode logs are compared
    "ppo_procgen": ["--env-id", "starpilot", "--num-envs", "4", "--num-steps", "48", "--num-minibatches", "4",
                    "--update-epochs", "2", "--total-timesteps", "384", "--diagnostics-every", "1",
                    "--diagnostics-states", "40", "--update-chunk-size", "6", "--eval-every", "0"],
    "pqn_atari": ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "4", "--update-epochs", "2",
                  "--total-timesteps", "128", "--diagnostics-every", "1", "--diagnostics-states", "40",
                  "--update-chunk-size", "6", "--eval-envs", "2"],
    "ppo_continuous_mujoco": ["--env-id", "HalfCheetah-v4", "--num-envs", "4", "--num-steps", "32",
                              "--minibatch-size", "16", "--update-epochs", "2", "--total-timesteps", "256",
                              "--diagnostics-every", "1", "--diagnostics-states", "40"],
}
CONTROL = {"ppo_atari_envpool": ["--update-chunk-size", "5"], "ppo_procgen": ["--update-chunk-size", "5"],
           "pqn_atari": ["--update-chunk-size", "5"], "ppo_continuous_mujoco": ["--torch-threads", "2"]}


@pytest.mark.slow  # 3 runs of a script: about a minute each on the shared 2-core machine
@pytest.mark.parametrize("name", list(CASES))
def test_two_ranks_log_what_one_process_logs(name, tmp_path):
    scalars_one, episodes_one = by_iteration(run(name, CASES[name], tmp_path / "one", 1))
    scalars_two, episodes_two = by_iteration(run(name, CASES[name], tmp_path / "two", 2))
    scalars_control, _ = by_iteration(run(name, CASES[name] + CONTROL[name], tmp_path / "control", 1))
    assert sorted(scalars_one) == sorted(scalars_two) == [1, 2]
    worst_1, outside = differences(scalars_one, scalars_two, iterations=[1])
    loss_1, _ = differences(scalars_one, scalars_two, MAIN_LOSSES, [1])
    control_1, _ = differences(scalars_one, scalars_control, MAIN_LOSSES, [1])
    # A main loss past RTOL at iteration 1 passes only where the summation-order control moves the losses as much:
    # MuJoCo's logged losses come after 16 Adam steps, which amplify the last bits (measured 2026-11-29, control and
    # two ranks: MuJoCo 1.4e-5 and 2.4e-5, procgen 3.9e-5 and 2.9e-5, Atari 8.9e-7 and 6.7e-6, PQN 0 and 0)
    outside = [o for o in outside if not (o[1] in MAIN_LOSSES and loss_1 <= 10 * control_1)]
    assert not outside, outside
    # Iteration 2 acts with weights that differ by float rounding, which training amplifies (MuJoCo's physics
    # most): the two runs must be as close as one process is to itself when only the summation order changes
    loss_2, _ = differences(scalars_one, scalars_two, MAIN_LOSSES, [2])
    control_2, _ = differences(scalars_one, scalars_control, MAIN_LOSSES, [2])
    print(f"{name}: max relative difference, iteration 1: {loss_1:.1e} in the losses (control {control_1:.1e}), "
          f"{worst_1:.1e} over all {len(scalars_one[1])} tags; iteration 2: {loss_2:.1e} in the losses "
          f"(summation-order control {control_2:.1e})")
    assert loss_2 <= 10 * control_2 + RTOL
    assert episodes_one.keys() == episodes_two.keys()
    assert episodes_one or name != "ppo_procgen"
    for key in episodes_one:
        assert np.allclose(episodes_one[key], episodes_two[key], rtol=1e-6)


# ------------------------------------------------------------------------------------------------ the reductions
# Two gloo processes on synthetic data: each rank holds its half of the envs of one batch, computes what the
# scripts compute under torchrun, and compares it with the single-process computation on the whole batch.
def split(x, rank, dim=1):
    """This rank's envs of a [T, N, ...] (dim 1) or [N, ...] (dim 0) tensor."""
    return x.narrow(dim, rank * (N // W), N // W)


def flat(x):
    return x.reshape((-1,) + x.shape[2:])


def check_gathers(rank):
    g = torch.Generator().manual_seed(0)
    values = torch.randn(T, N, generator=g)
    assert torch.equal(atari.gather_envs(split(values, rank), W, dim=1), values)
    logits = torch.randn(N, 6, generator=g)
    assert torch.equal(atari.gather_envs(split(logits, rank, 0), W), logits)
    idx = torch.randperm(T * N, generator=g)[:7]
    mine = atari.local_rows(idx, N, rank, W)
    assert torch.equal(flat(split(values, rank))[mine], flat(values)[idx][(idx % N) // (N // W) == rank])
    frames = torch.randint(0, 255, (T, N, 2, 3), dtype=torch.uint8, generator=g)
    assert torch.equal(atari.gather_rows(flat(split(frames, rank)), idx, N, rank, W), flat(frames)[idx])
    assert atari.gather_list([(rank, 1.0)] * (rank + 1), W) == [(0, 1.0), (1, 1.0), (1, 1.0)]
    # every rank draws the whole batch's noise from one stream: its actions are one process's for its envs
    torch.manual_seed(1)
    actions, logp = atari.sample_actions(logits)
    torch.manual_seed(1)
    ranks = atari.Ranks(W, rank)
    mine_actions, mine_logp = atari.sample_actions(ranks.gather_envs(split(logits, rank, 0)))
    assert torch.equal(mine_actions, actions) and torch.equal(mine_logp, logp)
    assert torch.equal(ranks.own_envs(mine_actions), split(actions, rank, 0))  # the rollout keeps its envs' actions


def ppo_batch(num_frames_shape, g):
    frames = torch.randint(0, 255, (T, N) + num_frames_shape, dtype=torch.uint8, generator=g)
    valid = torch.ones(T, N)
    valid[1, 2] = valid[2, 0] = 0.0  # envpool's reset steps
    return [frames, torch.randint(0, 4, (T, N), generator=g), torch.full((T, N), -1.4), 3 * torch.randn(T, N, generator=g) + 1,
            torch.randn(T, N, generator=g), torch.randn(T, N, generator=g), valid]


def gradient(net):
    return torch.cat([p.grad.reshape(-1) for p in net.parameters()])


def check_minibatch_gradient(module, make_net, batch, rank, args, loss_fn):
    """One minibatch step: this rank's share with the minibatch's count (and advantage statistics) summed
    over ranks, gradients summed, against one process's whole minibatch."""
    no_autocast = lambda: torch.autocast("cpu", enabled=False)  # noqa: E731
    idx = torch.tensor([9, 0, 5, 2, 11, 6, 7, 3])  # envs 1, 0, 1, 2, 3, 2, 3, 3: uneven shares
    torch.manual_seed(0)
    net = make_net()
    one = module.Batch(*(flat(x) for x in batch))
    stats_one = torch.stack(module.minibatch_gradient(net, one, idx, args, no_autocast, loss_fn, module.Ranks()))
    grad_one = gradient(net)
    net.zero_grad(set_to_none=True)
    ranks = module.Ranks(W, rank)
    local = module.Batch(*(flat(split(x, rank)) for x in batch))
    stats = torch.stack(module.minibatch_gradient(net, local, ranks.local_rows(idx, N), args, no_autocast, loss_fn, ranks))
    ranks.allreduce_gradients(net)
    assert grad_one.abs().max() > 0
    assert torch.allclose(gradient(net), grad_one, rtol=1e-5, atol=1e-7), (gradient(net) - grad_one).abs().max()
    assert torch.allclose(stats, stats_one, rtol=RTOL, atol=ATOL), (stats, stats_one)


def check_mujoco_minibatch(rank):
    g = torch.Generator().manual_seed(2)
    obs, actions = torch.randn(T, N, 5, generator=g), torch.randn(T, N, 2, generator=g)
    advantages, valid = 3 * torch.randn(T, N, generator=g) + 1, torch.ones(T, N)
    valid[0, 3] = 0.0
    batch = [obs, actions, torch.randn(T, N, generator=g) - 3, advantages, torch.randn(T, N, generator=g),
             torch.randn(T, N, generator=g), valid]
    check_minibatch_gradient(mujoco, lambda: mujoco.Agent(5, 2), batch, rank, mujoco.Args(), mujoco.ppo_loss)


def check_reward_normalizer(rank):
    """procgen: one running std over all ranks' envs, as one process's normaliser over all envs."""
    rng = np.random.default_rng(3)
    one, mine = procgen.RewardNormalizer(N, 0.99), procgen.RewardNormalizer(N // W, 0.99, world_size=W)
    own = slice(rank * (N // W), (rank + 1) * (N // W))
    for _ in range(20):
        reward, done, used = rng.normal(size=N), rng.random(N) < 0.2, rng.random(N) < 0.8
        expected = one(reward, done, used)
        assert np.allclose(mine(reward[own], done[own], used[own]), expected[own], rtol=1e-12)
    assert np.isclose(mine.var, one.var, rtol=1e-12) and mine.count == one.count


def two_rank_worker(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=W)
    try:
        check_gathers(rank)
        g = torch.Generator().manual_seed(1)
        check_minibatch_gradient(atari, lambda: atari.Agent(4), ppo_batch((4, 84, 84), g), rank,
                                 atari.Args(update_chunk_size=3), atari.ppo_loss)
        check_minibatch_gradient(procgen, lambda: procgen.Agent(4), [ppo_batch((64, 64, 3), g)[0]] + ppo_batch((4, 84, 84), g)[1:],
                                 rank, procgen.Args(update_chunk_size=3), procgen.ppo_loss)
        frames, actions, _, targets, _, _, valid = ppo_batch((4, 84, 84), g)
        check_minibatch_gradient(pqn, lambda: pqn.QNetwork(4), [frames, actions, targets, valid], rank,
                                 pqn.Args(update_chunk_size=3), pqn.td_loss)
        check_mujoco_minibatch(rank)
        check_reward_normalizer(rank)
    finally:
        dist.destroy_process_group()


def test_reductions_over_two_gloo_ranks_equal_one_process():
    mp.spawn(two_rank_worker, args=(free_port(),), nprocs=W, join=True)
