"""PQN on Atari through envpool (Gallici et al. 2024): CleanRL's pqn_atari_envpool.py (epsilon-greedy rollouts,
Q(lambda) targets, LayerNorm Q-network, no replay buffer) plus the scaling flags and the diagnostics of M25
(mayor2025) §6.1, Fig. 6, the third member of the family; --preset purejaxql gives purejaxql's Atari settings.

    python cleanrl_scaling/pqn_atari.py --env-id Breakout-v5 --num-envs 8 --num-steps 128

Docs: docs/pqn_atari.md. Read top to bottom: Args, then the algorithm (envs, Q-network, rollout, Q(lambda), loss,
update, diagnostics, evaluation, main); below the marked line, the infrastructure every script shares.
"""
import contextlib
import dataclasses
import functools
import io
import json
import math
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Literal, NamedTuple, Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import tyro


# >>> shared:run-args
@dataclass
class RunArgs:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    track: bool = False
    """if toggled, mirror the run to Weights and Biases (set WANDB_MODE=offline to work without an account)"""
    wandb_project_name: str = "cleanrl_scaling"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    runs_dir: str = "runs"
    """where run directories are created"""
    save_model: bool = False
    """if toggled, save the final model to the run directory and evaluate it"""
    checkpoint_every: int = 0
    """write a checkpoint every K iterations (0 = only at the end and on SIGINT/SIGTERM)"""
    resume: Optional[str] = None
    """path of a checkpoint to resume from (continues in that checkpoint's run directory)"""
    progress: Literal["auto", "bar", "lines", "none"] = "auto"
    """progress display: a bar on a terminal, plain periodic lines otherwise (auto)"""
# <<< shared:run-args


# >>> shared:scaling-args
@dataclass
class ScalingArgs:
    minibatch_size: int = 0
    """samples per minibatch; if > 0 it decides instead of --num-minibatches (docs/scaling.md)"""
    scaling_recipe: Literal["none", "more-minibatches", "larger-minibatches", "sqrt-lr", "hybrid"] = "none"
    """how minibatches and lr follow --num-envs relative to --base-num-envs (B26 §5, App. D)"""
    base_num_envs: int = 0
    """number of envs of the base configuration for the recipes (0 = this script's default --num-envs)"""
    minibatch_multiplier: int = 16
    """hybrid recipe: minibatch size x b, minibatches x s/b, lr x sqrt(b) (B26 App. D used b=16)"""
    lr_scaling: Literal["none", "sqrt", "linear"] = "none"
    """scale lr by the minibatch-size ratio to the base configuration (M25 Fig. 11)"""
    diagnostics_every: int = 20
    """compute the diagnostics of docs/metrics.md every K iterations (0 = off)"""
    diagnostics_states: int = 4096
    """at most this many states of the rollout batch are used by the diagnostics"""
    kl_profile: bool = True
    """on diagnostic iterations, write the per-minibatch-step seq/ref KL to kl_profile.jsonl (H25 Fig. 2)"""
# <<< shared:scaling-args


@dataclass
class Args(ScalingArgs, RunArgs):
    preset: Literal["cleanrl", "purejaxql"] = "cleanrl"
    """defaults to start from: CleanRL's pqn_atari_envpool.py (M25's runs) or Gallici et al.'s own Atari setting"""
    init_from: Optional[str] = None
    """path of a checkpoint whose Q-network starts a new run with this run's flags (another game's too, if it has as many actions): a fresh optimizer, step 0 (the lr and epsilon schedules start over), --seed's RNG (docs/run_directory.md#a-new-run-from-old-weights)"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be enabled when available"""
    tf32: bool = True
    """on CUDA, TF32 tensor cores for fp32 matmuls and convolutions (faster on Ampere and later GPUs, 10-bit mantissa inputs); --no-tf32 keeps full fp32. No effect on CPU (docs/gpu.md)"""
    capture_video: bool = False
    """(CleanRL flag; envpool renders no frames) rejected with a clear message if set"""
    bf16: bool = False
    """run forward and backward passes under bfloat16 autocast (parameters and the optimizer stay fp32)"""
    channels_last: bool = False
    """store conv activations channels-last (off: LayerNorm over (C, H, W) undoes the layout; slower here)"""
    async_envs: bool = False
    """step the envs in two halves that take turns: one half steps on envpool's threads while the Q-network picks the other half's actions, hiding a GPU's work behind the envs'; the same transitions (docs/gpu.md#the-envs-in-two-halves)"""
    env_threads: int = 0
    """envpool worker threads of the training envs, at most one per env (0: one per CPU core this process may use, the node's cores shared among its torchrun ranks; with --async-envs, each half's); changes no result"""
    compile: bool = True
    """torch.compile the update's forward pass and loss (compiled in the first iteration, cached on disk; eager, with a warning, where inductor cannot build)"""
    update_chunk_size: int = 512
    """backpropagate minibatches in chunks of at most this many samples (same gradient, bounded memory; 0 = whole)"""
    eval_episodes: int = 10
    """episodes to evaluate the saved model on (with --save-model)"""

    # Algorithm specific arguments
    env_id: str = "Breakout-v5"
    """the id of the environment (any envpool Atari id)"""
    total_timesteps: int = 10_000_000
    """total timesteps of the experiments"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 8
    """the number of parallel game environments (global count under torchrun)"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for the Q-network"""
    gamma: float = 0.99
    """the discount factor gamma"""
    q_lambda: float = 0.65
    """the lambda of the Q(lambda) targets"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs to update the Q-network"""
    max_grad_norm: float = 10.0
    """the maximum norm for the gradient clipping"""
    optimizer: Literal["radam", "adam"] = "radam"
    """RAdam as CleanRL and Gallici et al.; adam is M25 Table 1's wording"""
    adam_eps: float = 1e-8
    """the optimizer's epsilon (M25 Table 1: 1e-8)"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.01
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.10
    """the fraction of `total_timesteps` it takes from start_e to end_e"""
    exploration_steps: int = 0
    """if > 0, epsilon reaches end_e after this many steps instead (M25 Table 1: 250000)"""
    eval_envs: int = 8
    """greedy evaluation envs stepped beside the training envs, logged as charts/eval_return (0 = off)"""
    eval_epsilon: float = 0.0
    """epsilon of the evaluation policy (0 = greedy)"""
    epsilon_per_update: bool = False
    """hold epsilon for a whole rollout at its value after the updates so far (purejaxql) instead of moving it per step"""
    network: Literal["cleanrl", "purejaxql"] = "cleanrl"
    """CleanRL's network (LayerNorm over C x H x W, eps 1e-5, orthogonal init) or purejaxql's (LayerNorm over the channels at each position, eps 1e-6, he_normal / lecun_normal init); see docs/pqn_atari.md"""
    td_loss_coef: float = 1.0
    """the loss is td_loss_coef x the mean squared TD error (CleanRL 1, purejaxql 0.5)"""

    # computed at start from the flags above, so not flags themselves (hidden from --help)
    batch_size: tyro.conf.Suppress[int] = 0
    """the batch size (computed in runtime)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """the number of iterations (computed in runtime)"""


@dataclass
class PurejaxqlArgs(Args):
    """Gallici et al.'s Atari setting (purejaxql): the other set of defaults, selected by --preset purejaxql. Only
    the defaults differ; each flag's help is Args' (tyro reads a field's docstring from the class that has one)."""
    preset: Literal["cleanrl", "purejaxql"] = "purejaxql"
    num_envs: int = 128
    num_steps: int = 32
    num_minibatches: int = 32
    update_epochs: int = 2
    anneal_lr: bool = False
    end_e: float = 0.001
    total_timesteps: int = 50_000_000
    epsilon_per_update: bool = True
    network: Literal["cleanrl", "purejaxql"] = "purejaxql"
    td_loss_coef: float = 0.5


PRESETS = {"cleanrl": Args, "purejaxql": PurejaxqlArgs}


# >>> shared:recipe
def resolve_scaling(args) -> dict:
    """The scaling recipes (B26 §5, App. D; M25 §5.3; docs/scaling.md) on flags that check_scaling_flags passed:
    batch, minibatch size and count, and lr at N = --num-envs from the base configuration at B = --base-num-envs."""
    n, t, recipe = args.num_envs, args.num_steps, args.scaling_recipe
    base_envs = args.base_num_envs or default_of(args, "num_envs")
    s, batch, lr = n / base_envs, n * t, args.learning_rate
    # --lr-scaling's reference: the script's defaults at B envs, whatever else the user changed (M25 Fig. 11)
    reference_mb = base_envs * default_of(args, "num_steps") / default_of(args, "num_minibatches")
    if recipe == "none":  # only the user's own batch matters
        base_mb, mb = reference_mb, args.minibatch_size or batch // args.num_minibatches
    else:  # the minibatch flags describe the base configuration (B envs x T steps), which the recipe scales by s
        base_mb = args.minibatch_size or base_envs * t // args.num_minibatches
        if recipe == "more-minibatches":  # B26 §5: keep the minibatch size, take more steps
            mb = base_mb
        elif recipe == "hybrid":  # B26 App. D: minibatch x b, minibatches x s/b, lr x sqrt(b)
            mb, lr = base_mb * args.minibatch_multiplier, lr * math.sqrt(args.minibatch_multiplier)
        else:  # larger-minibatches, sqrt-lr: keep the number of steps (B26 Fig. 9)
            mb = int(base_mb * s)
            lr = lr * math.sqrt(s) if recipe == "sqrt-lr" else lr
    if args.lr_scaling != "none":  # M25 Fig. 11: lr follows the minibatch size relative to the reference
        lr = lr * (math.sqrt(mb / reference_mb) if args.lr_scaling == "sqrt" else mb / reference_mb)
    return {"batch_size": batch, "minibatch_size": mb, "num_minibatches": batch // mb if mb >= 1 else 0,
            "learning_rate": lr, "scale": s, "base_num_envs": base_envs, "base_minibatch_size": base_mb}


def default_of(args, name: str):
    return next(f.default for f in dataclasses.fields(args) if f.name == name)
# <<< shared:recipe


# ---------------------------------------------------------------------------------------------------------
# Environment and Q-network
# ---------------------------------------------------------------------------------------------------------
def import_envpool():
    with contextlib.redirect_stderr(io.StringIO()):  # envpool imports the old gym, which prints a notice
        import envpool
    return envpool


def make_envs(env_id: str, num_envs: int, seed: int, train: bool = True, threads: int = 0, batch_size: int = 0):
    """envpool's envs; batch_size < num_envs: its asynchronous mode, where recv returns the first batch_size envs."""
    envpool = import_envpool()
    # CleanRL's settings: episodic life and reward clipping for training; the game score for evaluation
    return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed,
                        num_threads=env_threads(num_envs, threads), batch_size=batch_size or num_envs,
                        episodic_life=train, reward_clip=train)


def env_threads(num_envs: int, requested: int = 0) -> int:
    """envpool's workers: `requested` (--env-threads), else one per core this process may use, at most one per env.
    envpool's default counts the machine's cores, i.e. many threads per allowed core under a Slurm cpuset or taskset;
    torchrun's ranks on a node share the cores."""
    cores = max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return min(requested or cores, num_envs)


def make_env_groups(env_id: str, num_envs: int, seed: int, async_envs: bool, threads: int = 0) -> list:
    """The training envs: one envpool instance, or with --async-envs two halves that step in turn (envpool seeds
    env i with seed + i, so env i plays the same games in both modes)."""
    if not async_envs:
        return [EnvClock(make_envs(env_id, num_envs, seed, threads=threads))]
    half = num_envs // 2
    return [EnvClock(make_envs(env_id, half, seed, threads=threads)),
            EnvClock(make_envs(env_id, half, seed + half, threads=threads))]


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def variance_scaling_init(layer, scale: float):
    """flax's variance_scaling(scale, "fan_in", "truncated_normal"): a normal cut at +-2 sigma, rescaled so
    that the weights' std is sqrt(scale / fan_in); zero bias (flax's default)."""
    fan_in = layer.weight[0].numel()
    std = math.sqrt(scale / fan_in) / 0.87962566103423978  # the std of a standard normal cut at +-2
    torch.nn.init.trunc_normal_(layer.weight, 0.0, std, -2.0 * std, 2.0 * std)
    torch.nn.init.zeros_(layer.bias)
    return layer


def he_normal(layer):
    return variance_scaling_init(layer, 2.0)


def lecun_normal(layer):
    return variance_scaling_init(layer, 1.0)


class ChannelLayerNorm(nn.LayerNorm):
    """flax's default LayerNorm on an NHWC map, applied to NCHW: each position's C channels are normalised
    (eps 1e-6) with a per-channel scale and bias."""

    def __init__(self, channels: int):
        super().__init__(channels, eps=1e-6)

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def nature_cnn_layernorm(network: str = "cleanrl") -> nn.Sequential:
    """The Nature CNN with LayerNorm before every ReLU (Gallici et al. 2024 §4: what makes PQN stable
    without a target network; M25 Table 1 'Normalization: LayerNorm'). "cleanrl": CleanRL's LayerNorm over
    (C, H, W) and orthogonal init; "purejaxql": purejaxql's flax LayerNorm over channels and he_normal init."""
    if network == "purejaxql":
        return nn.Sequential(
            he_normal(nn.Conv2d(4, 32, 8, stride=4)), ChannelLayerNorm(32), nn.ReLU(),
            he_normal(nn.Conv2d(32, 64, 4, stride=2)), ChannelLayerNorm(64), nn.ReLU(),
            he_normal(nn.Conv2d(64, 64, 3, stride=1)), ChannelLayerNorm(64), nn.ReLU(),
            nn.Flatten(),  # (C, H, W) order where flax flattens (H, W, C): a fixed permutation of iid weights
            he_normal(nn.Linear(64 * 7 * 7, 512)), nn.LayerNorm(512, eps=1e-6), nn.ReLU(),
        )
    return nn.Sequential(
        layer_init(nn.Conv2d(4, 32, 8, stride=4)), nn.LayerNorm([32, 20, 20]), nn.ReLU(),
        layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.LayerNorm([64, 9, 9]), nn.ReLU(),
        layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.LayerNorm([64, 7, 7]), nn.ReLU(),
        nn.Flatten(),
        layer_init(nn.Linear(64 * 7 * 7, 512)), nn.LayerNorm(512), nn.ReLU(),
    )


class QNetwork(nn.Module):
    """The contract the rest of the script relies on (docs/pqn_atari.md, Changing the network):
    q_network(uint8 frames [B, 4, 84, 84]) -> Q-values [B, A]; the diagnostics read the outputs of every
    activation module (here the four ReLUs) unless watched_activations() lists others; channels_last is optional."""

    def __init__(self, num_actions: int, channels_last: bool = False, network: str = "cleanrl"):
        super().__init__()
        self.channels_last = channels_last
        self.network = nature_cnn_layernorm(network)
        # purejaxql's Q head is a flax Dense with its default lecun_normal init
        self.q_head = (lecun_normal if network == "purejaxql" else layer_init)(nn.Linear(512, num_actions))

    def forward(self, obs):
        """uint8 frames [B, 4, 84, 84] -> Q-values [B, A]."""
        if self.channels_last:  # convert while still uint8: one float copy of the batch instead of three
            obs = obs.contiguous(memory_format=torch.channels_last)
        x = obs.float().mul_(1.0 / 255.0)
        return self.q_head(self.network(x))


def build_q_network(num_actions: int, channels_last: bool, network: str) -> nn.Module:
    """QNetwork(num_actions, channels_last), the construction contract; only --network purejaxql passes the
    default class's network option, so a replacement class with the contract's two arguments still builds."""
    return QNetwork(num_actions, channels_last, **({} if network == "cleanrl" else {"network": network}))


def epsilon_at(step: int, args) -> float:
    """Linear decay from --start-e to --end-e over --exploration-steps (or the fraction of the run), then flat.
    With --epsilon-per-update the fraction is of the run's whole updates, as purejaxql's NUM_UPDATES_DECAY."""
    batch = args.num_envs * args.num_steps
    whole_run = (args.total_timesteps // batch) * batch if args.epsilon_per_update else args.total_timesteps
    duration = args.exploration_steps or args.exploration_fraction * whole_run
    frac = min(step / duration, 1.0)
    return args.start_e + frac * (args.end_e - args.start_e)


def rollout_epsilon(steps_before: int, step: int, args) -> float:
    """epsilon at rollout step `step` (0-based): per step as CleanRL (counting this step), or, with
    --epsilon-per-update, purejaxql's eps_scheduler(n_updates), constant over the rollout."""
    if args.epsilon_per_update:
        return epsilon_at(steps_before, args)
    return epsilon_at(steps_before + (step + 1) * args.num_envs, args)


def epsilon_greedy(q_values: torch.Tensor, epsilon: float, generator=None) -> torch.Tensor:
    """argmax_a Q(s, a), replaced by a uniform action with probability epsilon (two draws per env, always)."""
    n, num_actions = q_values.shape
    random_actions = torch.randint(0, num_actions, (n,), device=q_values.device, generator=generator)
    explore = torch.rand(n, device=q_values.device, generator=generator) < epsilon
    return torch.where(explore, random_actions, q_values.argmax(dim=-1))


# ---------------------------------------------------------------------------------------------------------
# Rollout, Q(lambda) targets and update
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Storage:
    obs: torch.Tensor  # uint8 [T, N, 4, 84, 84]
    actions: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor  # obs[t] ends an episode (life): the env ignores actions[t] and resets
    terminations: torch.Tensor  # obs[t] is terminal (no bootstrap); a truncation bootstraps from max Q(obs[t])
    max_q: torch.Tensor  # max_a Q(obs[t], a) of the network that collected the rollout


def make_storage(num_steps, num_envs, obs_shape, device) -> Storage:
    def zeros(dtype=torch.float32, shape=()):
        return torch.zeros((num_steps, num_envs) + shape, dtype=dtype, device=device)
    return Storage(obs=zeros(torch.uint8, obs_shape), actions=zeros(torch.long), rewards=zeros(), dones=zeros(),
                   terminations=zeros(), max_q=zeros())


class Batch(NamedTuple):
    """The rollout flattened over T x N (row t * N + n), what the update reads."""
    obs: torch.Tensor
    actions: torch.Tensor
    targets: torch.Tensor  # the Q(lambda) targets
    valid: torch.Tensor  # 0 for a step whose action the env ignored (right after a done)


class EpisodeStats:
    """Whole-game return (all lives, unclipped reward) and length, reset on game over or truncation."""

    def __init__(self, num_envs):
        self.returns = np.zeros(num_envs)

    def update(self, info, truncated, envs=slice(None)) -> list:
        """The games that ended in this step of the envs `envs` (all, one --async-envs group, or the env ids that
        --envpool-async's recv returned)."""
        ids = np.arange(len(self.returns))[envs]
        self.returns[ids] += info["reward"]
        game_over = np.logical_or(info["terminated"].astype(bool), truncated)
        finished = [(float(self.returns[ids[i]]), int(info["elapsed_step"][i])) for i in np.flatnonzero(game_over)]
        self.returns[ids[game_over]] = 0.0
        return finished


def store_frames(dst: torch.Tensor, src: torch.Tensor) -> None:
    """On CPU one memcpy: torch's copy wakes its OpenMP pool for these 225 kB and takes ~10x longer."""
    if dst.device.type == "cpu":
        np.copyto(dst.numpy(), src.numpy())
    else:
        dst.copy_(src)


class Evaluator:
    """Greedy (--eval-epsilon) play on separate full-game envs, one step per training step: epsilon-greedy
    training returns understate a value method. Its own generator: no draw from the training stream."""

    def __init__(self, env_id, num_envs, seed, epsilon, device):
        self.envs = make_envs(env_id, num_envs, seed, train=False)
        self.stats = EpisodeStats(num_envs)
        self.epsilon = epsilon
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.obs = torch.as_tensor(self.envs.reset()[0], device=device)

    def step(self, q_values) -> list:
        action = epsilon_greedy(q_values.float(), self.epsilon, self.generator)
        obs_np, _, _, trunc, info = self.envs.step(action.cpu().numpy())
        self.obs = torch.as_tensor(obs_np, device=self.obs.device)
        return self.stats.update(info, trunc)


class NextStep(NamedTuple):
    """Where the rollout continues from (CleanRL's next_obs, next_done): the envs' current observations and
    their done and terminated flags, which the last step of Q(lambda) reads."""
    obs: torch.Tensor
    done: torch.Tensor
    terminated: torch.Tensor


ALL_ENVS = slice(None)


def envs_of(state: NextStep, cols: slice) -> NextStep:
    """The NextStep of the envs `cols` (one --async-envs half)."""
    return NextStep(*(x[cols] for x in state))


def act(q_network, state, storage, step, cols, epsilon, ranks, evaluator=None, eval_finished=None) -> np.ndarray:
    """Store the envs' (cols) current step and pick their epsilon-greedy actions; under torchrun every rank draws the
    whole batch's exploration from all ranks' Q-values and keeps its own envs' actions (torchrun = one process).
    The evaluation envs, if given, share the forward pass and take their step here (their finished games go to
    `eval_finished`)."""
    store_frames(storage.obs[step, cols], state.obs)
    storage.dones[step, cols] = state.done
    storage.terminations[step, cols] = state.terminated
    num_envs = state.obs.shape[0]
    obs = state.obs if evaluator is None else torch.cat([state.obs, evaluator.obs])  # one forward for both
    q_values = q_network(obs).float()
    train_q = q_values[:num_envs]
    action = ranks.own_envs(epsilon_greedy(ranks.gather_envs(train_q), epsilon))
    storage.max_q[step, cols] = train_q.max(dim=-1).values
    storage.actions[step, cols] = action
    if evaluator is not None:
        eval_finished += evaluator.step(q_values[num_envs:])
    return action.cpu().numpy()


def observe(result, storage, step, cols, stats, finished, device) -> NextStep:
    """Store the reward of the envs' (cols) step and return where they are now; ended games go to `finished`."""
    obs_np, reward, term, trunc, info = result
    finished += stats.update(info, trunc, cols)
    storage.rewards[step, cols] = torch.as_tensor(reward, device=device)
    return NextStep(torch.as_tensor(obs_np, device=device), torch.as_tensor(np.logical_or(term, trunc),
                    dtype=torch.float32, device=device), torch.as_tensor(term, dtype=torch.float32, device=device))


def collect_rollout(groups, q_network, storage, state, stats, args, device, autocast, global_step, evaluator, ranks):
    """Run num_steps epsilon-greedy steps in every env; returns (episodes finished, evaluation episodes
    finished, the NextStep after the rollout)."""
    finished, eval_finished = [], []
    # One autocast region for the whole rollout: under --bf16 its cache casts the weights (fixed during the
    # rollout) once, not at every step
    with torch.no_grad(), autocast():
        if len(groups) == 2:
            state = collect_alternating(groups, q_network, storage, state, stats, args, device, global_step,
                                        evaluator, ranks, finished, eval_finished)
            return finished, eval_finished, state
        envs = groups[0]
        for step in range(args.num_steps):
            epsilon = rollout_epsilon(global_step, step, args)
            action = act(q_network, state, storage, step, ALL_ENVS, epsilon, ranks, evaluator, eval_finished)
            state = observe(envs.step(action), storage, step, ALL_ENVS, stats, finished, device)
    return finished, eval_finished, state


def collect_alternating(groups, q_network, storage, state, stats, args, device, global_step, evaluator, ranks,
                        finished, eval_finished) -> NextStep:
    """--async-envs: the same transitions as one group, in another order. While one half of the envs steps on
    envpool's threads (send), the Q-network picks the other half's actions, so the device's work hides behind the
    envs'. Every env takes its num_steps at the same epsilon under the same Q-network; only the exploration's random
    draws are split in two. The evaluation envs ride with the first half's forward pass, one step per step."""
    half = storage.obs.shape[1] // 2
    cols = (slice(0, half), slice(half, 2 * half))
    states = [envs_of(state, c) for c in cols]
    for step in range(args.num_steps + 1):
        for g, envs in enumerate(groups):
            if step > 0:  # this group's previous step, which ran while the other group's actions were picked
                states[g] = observe(envs.recv(), storage, step - 1, cols[g], stats, finished, device)
            if step < args.num_steps:
                epsilon = rollout_epsilon(global_step, step, args)
                riders = evaluator if g == 0 else None  # the evaluation envs step once per step, with the first half
                envs.send(act(q_network, states[g], storage, step, cols[g], epsilon, ranks, riders, eval_finished))
    return NextStep(*(torch.cat(x) for x in zip(*states)))


def compute_q_lambda_targets(rewards, max_q, dones, terminations, next_max_q, next_done, next_term, gamma, lam):
    """Q(lambda) targets (Gallici et al. 2024 eq. 6, Peng and Williams' form), backwards over the rollout:
    G_t = r_t + gamma (1 - term_{t+1}) [lam_t G_{t+1} + (1 - lam_t) max_a Q(s_{t+1}, a)],
    lam_t = lam (1 - done_{t+1}): any episode end cuts the trace, only a termination drops the bootstrap
    (a truncation bootstraps from the final observation envpool returns). The last step bootstraps from
    max_a Q(s_T, a) (G_T := max_a Q(s_T, a)). Steps with dones[t] = 1 are envpool's reset steps (masked)."""
    num_steps = rewards.shape[0]
    targets = torch.zeros_like(rewards)
    g = next_max_q
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            q_next, done_next, term_next = next_max_q, next_done, next_term
        else:
            q_next, done_next, term_next = max_q[t + 1], dones[t + 1], terminations[t + 1]
        lam_t = lam * (1.0 - done_next)
        g = rewards[t] + gamma * (1.0 - term_next) * (lam_t * g + (1.0 - lam_t) * q_next)
        targets[t] = g
    return targets


class LossStats(NamedTuple):
    """The update's losses/* (0-d tensors, on the device until logged), named as their tags."""
    td_loss: torch.Tensor
    q_values: torch.Tensor  # the mean Q of the taken actions

    def floats(self) -> "LossStats":
        """The same statistics as Python floats, in one device-to-host copy."""
        return LossStats(*torch.stack(self).tolist())


def td_loss(q_network, obs, actions, targets, valid, count, coef: float = 1.0):
    """coef x the squared error between Q(s_t, a_t) and the Q(lambda) target, summed over the valid samples
    given and divided by `count`, the minibatch's valid samples, so that chunks add up to the minibatch mean (a
    step whose action envpool ignored, right after a done, carries no learning signal). coef: CleanRL 1,
    purejaxql 0.5 (--td-loss-coef)."""
    q_taken = q_network(obs).float().gather(-1, actions[:, None]).squeeze(-1)
    loss = coef * ((q_taken - targets) ** 2 * valid).sum() / count
    return loss, LossStats(td_loss=loss.detach(), q_values=(q_taken.detach() * valid).sum() / count)


def minibatch_gradient(q_network, batch, idx, args, autocast, loss_fn, ranks) -> LossStats:
    """Backpropagate one minibatch's loss in chunks of at most --update-chunk-size samples: the same gradient
    (up to float summation order) with activation memory bounded by the chunk, not the minibatch. Under
    torchrun idx is this rank's share of the minibatch; the count and the returned LossStats are the whole
    minibatch's."""
    valid = batch.valid[idx]
    count = ranks.sum(valid.sum()).clamp(min=1.0)
    chunk = args.update_chunk_size if args.update_chunk_size > 0 else max(len(idx), 1)
    total = torch.zeros(len(LossStats._fields), device=valid.device)
    for c in range(0, len(idx), chunk):
        j = idx[c:c + chunk]
        obs = batch.obs.index_select(0, j)  # much faster than batch.obs[j] on uint8 frames
        with autocast():
            loss, stats = loss_fn(q_network, obs, batch.actions[j], batch.targets[j], valid[c:c + chunk], count,
                                  args.td_loss_coef)
        loss.backward()
        total = total + torch.stack(stats)
    return LossStats(*ranks.sum(total))


def update(q_network, optimizer, batch, args, mb_size, autocast, ranks, probe=None, loss_fn=td_loss) -> tuple:
    """update_epochs passes over the batch in minibatches; returns (LossStats averaged over the minibatches, the
    mean grad norm, the number of steps). `probe` (diagnostics) sees the first gradient. mb_size is the whole
    minibatch: under torchrun every rank draws the permutation of all ranks' rows and works on its share."""
    device = batch.valid.device
    n = len(batch.valid) * ranks.world_size
    stat_sum = torch.zeros(len(LossStats._fields), device=device)
    grad_norm_sum = torch.zeros((), device=device)
    steps = 0
    for epoch in range(args.update_epochs):
        perm = torch.randperm(n, device=device)
        for start in range(0, n, mb_size):
            optimizer.zero_grad(set_to_none=True)
            idx = ranks.local_rows(perm[start:start + mb_size], args.num_envs)
            stats = minibatch_gradient(q_network, batch, idx, args, autocast, loss_fn, ranks)
            ranks.allreduce_gradients(q_network)
            if probe is not None and steps == 0:
                probe.first_gradient(q_network)
            grad_norm_sum += nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
            optimizer.step()
            stat_sum += torch.stack(stats)
            steps += 1
    return LossStats(*(stat_sum / steps)), grad_norm_sum / steps, steps


# ---------------------------------------------------------------------------------------------------------
# Diagnostics (docs/metrics.md#diagnostics): read-only forward passes on a fixed state set, no RNG draws, no gradients.
# The policy-ratio metrics (kl_behavior, DDR, ESS, seq/ref KL, policy variance) have no PQN counterpart
# worth its cost (docs/metrics.md); greedy_change is what the KL of two epsilon-greedy policies measures.
# ---------------------------------------------------------------------------------------------------------
def flat_numpy(tensors) -> np.ndarray:
    return np.concatenate([t.detach().reshape(-1).float().cpu().numpy() for t in tensors])


class DiagnosticProbe:
    def __init__(self, q_network, obs, autocast, chunk):
        if getattr(q_network, "channels_last", False):  # converted once here, not in each forward pass
            obs = obs.contiguous(memory_format=torch.channels_last)
        self.obs, self.autocast, self.chunk = obs, autocast, chunk or len(obs)
        self.params_before = [p.detach().clone() for p in q_network.parameters()]
        self.greedy_before = self.greedy_actions(q_network)
        self.grad = None

    def greedy_actions(self, q_network) -> np.ndarray:
        with torch.no_grad(), self.autocast():
            q = torch.cat([q_network(obs).float() for obs in self.obs.split(self.chunk)])
        return q.argmax(dim=-1).cpu().numpy()

    def representation(self, q_network) -> tuple:
        """Penultimate features [S, 512] and, per hidden layer, mean |h| of every unit per state [S, units]
        (conv channels averaged over positions): all dormant_fractions needs, in bounded memory."""
        with self.autocast():  # what the policy sees: under --bf16 its autocast activations
            return record_activations(q_network, self.obs.split(self.chunk))[""]

    def first_gradient(self, q_network):
        self.grad = flat_numpy([p.grad for p in q_network.parameters() if p.grad is not None])

    def results(self, q_network, grad_norm) -> dict:
        features, magnitudes = self.representation(q_network)
        rank, srank = feature_ranks(features)
        dormant = dormant_fractions(magnitudes)
        return {
            "diagnostics/greedy_change": greedy_change(self.greedy_before, self.greedy_actions(q_network)),
            "diagnostics/update_size": float(np.linalg.norm(flat_numpy(q_network.parameters()) - flat_numpy(self.params_before))),
            "diagnostics/grad_norm": float(grad_norm),
            "diagnostics/grad_kurtosis": log_grad_kurtosis(self.grad),
            "diagnostics/weight_norm": float(np.linalg.norm(flat_numpy(q_network.parameters()))),
            "diagnostics/feature_rank": rank,
            "diagnostics/srank": srank,
            "diagnostics/dormant_frac": dormant[0.025],
            "diagnostics/dormant_frac_tau0": dormant[0.0],
            "diagnostics/dormant_frac_tau0.1": dormant[0.1],
        }


def greedy_change(before: np.ndarray, after: np.ndarray) -> float:
    """Fraction of states whose greedy action the update changed: KL(pi_before || pi_after) of two
    epsilon-greedy policies with one epsilon is this fraction x (1 - eps) log(1 + A (1 - eps) / eps)."""
    return float(np.mean(before != after))


def diagnostic_states(num_states: int, limit: int) -> np.ndarray:
    """A fixed, evenly strided subset of the batch: deterministic, so no draw from the training RNG."""
    return np.linspace(0, num_states - 1, min(num_states, limit)).round().astype(np.int64)


# ---------------------------------------------------------------------------------------------------------
# Evaluation of a saved model (game score: no episodic life, no reward clipping)
# ---------------------------------------------------------------------------------------------------------
def evaluate(model_path, env_id, eval_episodes, epsilon, device, seed, network="cleanrl"):
    envs = make_envs(env_id, eval_episodes, seed, train=False)
    q_network = build_q_network(envs.action_space.n, False, network).to(device)
    q_network.load_state_dict(torch.load(model_path, map_location=device))
    generator = torch.Generator(device=device).manual_seed(seed)
    obs, _ = envs.reset()
    returns = np.zeros(eval_episodes)
    episode_returns = np.full(eval_episodes, np.nan)
    while np.isnan(episode_returns).any():
        with torch.no_grad():
            action = epsilon_greedy(q_network(torch.as_tensor(obs, device=device)), epsilon, generator)
        obs, reward, term, trunc, info = envs.step(action.cpu().numpy())
        returns += reward
        ended = np.logical_or(term, trunc) & np.isnan(episode_returns)
        episode_returns[ended] = returns[ended]
    envs.close()
    return episode_returns


# ---------------------------------------------------------------------------------------------------------
# Main: the algorithm box; set-up, resume and run-directory plumbing in the named functions above it
# ---------------------------------------------------------------------------------------------------------
SCRIPT = "pqn_atari"


def parse_args(argv=None):
    """--preset chooses the set of defaults (a dataclass) before tyro parses the rest: explicit flags win."""
    argv = sys.argv[1:] if argv is None else argv
    preset = "cleanrl"
    for i, arg in enumerate(argv):
        if arg == "--preset" and i + 1 < len(argv):
            preset = argv[i + 1]
        elif arg.startswith("--preset="):
            preset = arg.split("=", 1)[1]
    defaults = PRESETS.get(preset, Args)  # tyro rejects an unknown preset itself
    return tyro.cli(defaults, args=argv, description=help_description(__doc__))


def validate(args) -> dict:
    """Every user mistake is caught here, before any env or network is built
    (docs/run_directory.md#failure-behaviour)."""
    check_finite_floats(args)
    envpool = import_envpool()
    atari_ids = [e for e in envpool.list_all_envs() if e.endswith("-v5") and not e.startswith(("Procgen", "dm_"))]
    check(args.env_id in atari_ids, f"--env-id {args.env_id!r} is not an envpool Atari id (e.g. Breakout-v5, Pong-v5)")
    check(args.total_timesteps > 0, f"--total-timesteps must be > 0 (got {args.total_timesteps})")
    check(args.update_epochs >= 1, f"--update-epochs must be >= 1 (got {args.update_epochs})")
    check(0 <= args.gamma <= 1 and 0 <= args.q_lambda <= 1, "--gamma and --q-lambda must lie in [0, 1]")
    check(math.isfinite(args.max_grad_norm) and args.max_grad_norm > 0,
          f"--max-grad-norm must be a finite number > 0 (got {args.max_grad_norm})")
    check(math.isfinite(args.adam_eps) and args.adam_eps > 0, f"--adam-eps must be a finite number > 0 (got {args.adam_eps})")
    for name in ("start_e", "end_e", "eval_epsilon"):
        value = getattr(args, name)
        check(0 <= value <= 1, f"--{name.replace('_', '-')} must lie in [0, 1] (got {value})")
    check(args.exploration_steps >= 0, f"--exploration-steps must be >= 0 (got {args.exploration_steps})")
    check(args.exploration_steps > 0 or 0 < args.exploration_fraction <= 1,
          f"--exploration-fraction must lie in (0, 1] (got {args.exploration_fraction}), or pass --exploration-steps")
    check(args.eval_envs >= 0, f"--eval-envs must be >= 0 (got {args.eval_envs})")
    check(args.checkpoint_every >= 0, f"--checkpoint-every must be >= 0 (got {args.checkpoint_every})")
    check(args.diagnostics_every >= 0, f"--diagnostics-every must be >= 0 (got {args.diagnostics_every})")
    check(args.diagnostics_states >= 2, f"--diagnostics-states must be >= 2 (got {args.diagnostics_states})")
    check(args.update_chunk_size >= 0, f"--update-chunk-size must be >= 0 (got {args.update_chunk_size})")
    check(args.td_loss_coef > 0, f"--td-loss-coef must be > 0 (got {args.td_loss_coef})")
    check(args.eval_episodes >= 1, f"--eval-episodes must be >= 1 (got {args.eval_episodes})")
    check(not args.capture_video, "--capture-video: envpool renders no frames; evaluate the saved model with --save-model")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    check(args.num_envs % world_size == 0,
          f"--num-envs {args.num_envs} must be divisible by the {world_size} torchrun ranks")
    check(args.env_threads >= 0, f"--env-threads must be >= 0 (got {args.env_threads})")
    check(not args.async_envs or (args.num_envs // world_size) % 2 == 0,
          f"--async-envs splits each process's {args.num_envs // world_size} envs into two halves: pass an even "
          f"--num-envs{' per torchrun rank' if world_size > 1 else ''}")
    check_scaling_flags(args)
    scaling = resolve_scaling(args)  # under torchrun a minibatch is formed over all ranks' rows: any size works
    check_scaling(args, scaling)
    check(args.total_timesteps >= scaling["batch_size"],
          f"--total-timesteps {args.total_timesteps} is less than one batch ({scaling['batch_size']}); raise it")
    return scaling


# Flags a resume may change besides the shared ones: what the evaluation plays with (its own envs and generator) and
# the episodes of --save-model's (not --eval-envs, whose states share the rollout's forward pass), --init-from,
# which --resume overrides, --async-envs, which reorders the rollout's work (a resumed run's envs restart anyway), and
# --env-threads (envpool steps each env alone)
RESUMABLE = ("eval_episodes", "eval_epsilon", "init_from", "async_envs", "env_threads")
# what a checkpoint written before --network stands for: CleanRL's network, the only one then
SIGNATURE_IMPLIED = {"network": "cleanrl"}
# what --init-from must share with its checkpoint besides the script: nothing (the network's shapes are checked as its
# weights load; another game is a transfer)
INIT_FROM_KEYS = ()


def make_optimizer(q_network, args):
    if args.optimizer == "adam":  # M25 Table 1's wording
        return torch.optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=True)
    return torch.optim.RAdam(q_network.parameters(), lr=args.learning_rate, eps=args.adam_eps, foreach=True)


def load_start(args, signature: dict, scaling: dict):
    """The checkpoint to start from, or None. --resume wins over --init-from: an interrupted new run continues from its
    own checkpoint (the launcher's --resume-unfinished appends --resume to an argv that holds --init-from)."""
    if args.resume:
        implied = older_signature(args, RESUMABLE, SIGNATURE_IMPLIED)
        return load_checkpoint(args.resume, SCRIPT, signature, implied=implied, resolved=scaling,
                               new_run=f"--init-from {args.resume} instead of --resume for a new run from its weights")
    if args.init_from:
        return load_checkpoint(args.init_from, SCRIPT, {key: signature[key] for key in INIT_FROM_KEYS}, "--init-from")
    return None


def read_args() -> tuple:
    """Args from the command line with the scaling resolved, their resume signature, and the checkpoint to start from
    (--resume or --init-from, or None); every usage error exits 2 here, before anything heavy starts."""
    args = parse_args()
    signature = resume_signature(args, RESUMABLE)  # the flags as given: validate and the scaling rewrite args
    try:
        scaling = validate(args)
        ckpt = load_start(args, signature, scaling)
        check_writable_dir(ckpt["run_dir"] if args.resume else args.runs_dir, "--resume" if args.resume else "--runs-dir")
    except UsageError as e:
        exit_usage(e)
    args.batch_size = scaling["batch_size"]
    args.num_minibatches = scaling["num_minibatches"]
    args.learning_rate = scaling["learning_rate"]
    args.num_iterations = args.total_timesteps // args.batch_size
    return args, scaling, signature, ckpt


def seed_everything(args, rank: int) -> None:
    """One torch stream on every rank (the same weights; every rank draws the whole batch's exploration)."""
    random.seed(args.seed + rank)
    np.random.seed(args.seed + rank)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic


def build_q_network_and_optimizer(args, num_actions: int, device) -> tuple:
    """The Q-network and its optimizer; the torch stream is reseeded after the weights are drawn (CleanRL's order)."""
    q_network = build_q_network(num_actions, args.channels_last, args.network).to(device)
    if args.channels_last:
        q_network = q_network.to(memory_format=torch.channels_last)
    try:
        if args.diagnostics_every > 0:
            check_watched_activations(q_network, SCRIPT)
        frames = torch.zeros((2, 4, 84, 84), dtype=torch.uint8, device=device)
        check_network_outputs(q_network, frames, {"q_values": [[2, num_actions]]}, SCRIPT)
    except UsageError as e:
        exit_usage(e)
    optimizer = make_optimizer(q_network, args)
    torch.manual_seed(args.seed)
    return q_network, optimizer


def restore(ckpt: dict, q_network, optimizer, evaluator, args, rank: int, device) -> None:
    """Weights, optimizer state and this rank's RNG streams (the evaluator's too) from a checkpoint."""
    load_weights(q_network, ckpt["q_network"])
    optimizer.load_state_dict(ckpt["optimizer"])
    optimizer.param_groups[0]["lr"] = args.learning_rate  # this run's --learning-rate, not the saved one
    rng = ckpt["rng"][rank]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and rng.get("cuda") is not None:
        torch.cuda.set_rng_state(rng["cuda"], device)
    if evaluator is not None and rng.get("eval") is not None:
        restore_evaluation_draws(evaluator, rng["eval"], rank)


def restore_evaluation_draws(evaluator, saved, rank: int) -> None:
    """The evaluator's generator state, where the checkpoint's comes from a generator of the same kind: a CPU and a
    CUDA generator's states differ (5,056 and 16 bytes), so a run resumed on another device draws afresh from its seed."""
    if saved.numel() == evaluator.generator.get_state().numel():
        evaluator.generator.set_state(saved)
    elif rank == 0:
        print("the checkpoint was written on another kind of device: the evaluation's epsilon draws start again "
              "from their seed", file=sys.stderr)


def start_from(init: dict, q_network, args, rank: int) -> None:
    """--init-from: the checkpoint's Q-network only; the optimizer, the RNG streams and the counters are this new
    run's."""
    load_weights(q_network, init["q_network"], "--init-from")
    if rank == 0:
        print(f"starting from {args.init_from} (weights of iteration {init['iteration']}, step {init['global_step']}); "
              "new run with this run's flags")


def save_run_checkpoint(logger, args, signature, iteration, global_step, wall_time, q_network, optimizer, evaluator,
                        world_size, rank, device):
    """latest.ckpt: weights, optimizer and every rank's RNG streams (gathered to rank 0, which writes)."""
    rngs = [{"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
             "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
             "eval": evaluator.generator.get_state() if evaluator is not None else None}]
    if world_size > 1:
        gathered = [None] * world_size
        dist.all_gather_object(gathered, rngs[0])
        rngs = gathered
    if rank == 0:
        save_checkpoint(os.path.join(logger.run_dir, "checkpoints", "latest.ckpt"), {
            "script": SCRIPT, "signature": signature, "iteration": iteration, "global_step": global_step,
            "wall_time": wall_time, "run_dir": logger.run_dir, "args": dataclasses.asdict(args),
            "log_sizes": logger.log_sizes(),  # what a resume from it keeps of the logs
            "q_network": {k: v.cpu() for k, v in q_network.state_dict().items()},
            "optimizer": optimizer.state_dict(), "rng": rngs})


def make_probe(q_network, b_obs, args, autocast, device, ranks):
    """The diagnostics' probe on rank 0 (None elsewhere); its states are rows of the whole batch, gathered from
    the ranks that hold them."""
    idx = torch.as_tensor(diagnostic_states(args.batch_size, args.diagnostics_states), device=device)
    diag_obs = ranks.gather_rows(b_obs, idx, args.num_envs)
    # 128-state forwards keep conv activations in the CPU caches
    chunk = 128 if device.type == "cpu" else args.update_chunk_size
    return DiagnosticProbe(q_network, diag_obs, autocast, chunk) if ranks.rank == 0 else None


def log_iteration(logger, q_network, args, global_step, iteration, sps, finished, eval_finished, lr, loss_stats,
                  probe, grad_norm, times):
    """Rank 0: the finished training and greedy-evaluation episodes, the charts and losses, the loop's times, and
    the diagnostics when the probe ran."""
    for ep_return, ep_length in finished:
        logger.log(global_step, iteration, {"charts/episodic_return": ep_return, "charts/episodic_length": ep_length})
    for ep_return, ep_length in eval_finished:
        logger.log(global_step, iteration, {"charts/eval_return": ep_return, "charts/eval_length": ep_length})
    scalars = {
        "charts/learning_rate": lr,
        "charts/SPS": sps,
        "charts/epsilon": rollout_epsilon(global_step - args.batch_size, args.num_steps - 1, args),
        "losses/td_loss": loss_stats.td_loss, "losses/q_values": loss_stats.q_values, **times,
    }
    if probe is not None:
        scalars.update(probe.results(q_network, grad_norm.item()))
    logger.log(global_step, iteration, scalars)
    logger.progress(global_step, sps)


def finish_run(logger, args, status, global_step, iteration, clock, steps_taken, q_network, device, run_dir):
    """Rank 0: summary.json, and with --save-model the model file and its evaluation on the game score."""
    final_sps, sps_with_warmup = clock.final_sps(steps_taken, global_step)
    summary = {"status": status, "global_step": global_step, "iteration": iteration, "SPS": final_sps,
               "SPS_with_warmup": sps_with_warmup}
    if args.save_model and status == "finished":
        model_path = os.path.join(run_dir, f"{args.exp_name}.cleanrl_model")
        torch.save({k: v.cpu() for k, v in q_network.state_dict().items()}, model_path)
        episodic_returns = evaluate(model_path, args.env_id, args.eval_episodes, args.eval_epsilon, device,
                                    args.seed + 10_000, args.network)
        for ep_return in episodic_returns:
            logger.log(global_step, iteration, {"eval/episodic_return": ep_return})
        summary["eval_mean_return"] = float(np.mean(episodic_returns))
        print(f"model saved to {model_path}; eval return {np.mean(episodic_returns):.2f} over {args.eval_episodes} episodes")
    logger.close(summary)
    print(f"SPS: {final_sps:.0f} (with warm-up: {summary['SPS_with_warmup']:.0f}); run directory: {run_dir}")
    if status == "interrupted":
        print(f"interrupted; resume with --resume {os.path.join(run_dir, 'checkpoints', 'latest.ckpt')}")


def main():
    args, scaling, signature, start = read_args()
    ckpt, init = (start, None) if args.resume else (None, start)  # --resume continues a run, --init-from starts one
    world_size, rank, device = init_distributed(args)
    set_tf32(device, args.tf32)
    ranks = Ranks(world_size, rank)  # what the rollout, the update and the probe need to know of torchrun
    local_envs = args.num_envs // world_size
    if rank == 0:
        print("resolved: " + ", ".join(f"{k}={v:g}" for k, v in scaling.items()) + f", num_iterations={args.num_iterations}")
    seed_everything(args, rank)

    # Envs (envpool cannot save its state: a resumed run restarts them with a fresh seed,
    # docs/run_directory.md#checkpoints-and-resume)
    start_iteration = ckpt["iteration"] if ckpt else 0
    env_seed = args.seed + rank * local_envs + 1_000_003 * start_iteration
    with Phase(f"starting {local_envs} {args.env_id} envs" + (" in two alternating halves" if args.async_envs else "")
               + (f" and {args.eval_envs} evaluation envs" if args.eval_envs and rank == 0 else ""), show=rank == 0):
        groups = make_env_groups(args.env_id, local_envs, env_seed, args.async_envs, args.env_threads)
        evaluator = None
        if args.eval_envs and rank == 0:  # greedy evaluation envs, seeded apart from the training envs
            evaluator = Evaluator(args.env_id, args.eval_envs, env_seed + 500_009, args.eval_epsilon, device)
    if ckpt and rank == 0:
        print(f"resuming from iteration {start_iteration} (step {ckpt['global_step']}); envs restart with seed {env_seed}")
    q_network, optimizer = build_q_network_and_optimizer(args, groups[0].action_space.n, device)
    if ckpt:
        restore(ckpt, q_network, optimizer, evaluator, args, rank, device)
    elif init:
        start_from(init, q_network, args, rank)
    autocast = functools.partial(torch.autocast, device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16)
    loss_fn = maybe_compile(td_loss, args.compile)
    logger, run_dir = open_run(args, scaling, ckpt, world_size, device, rank)
    stop = StopFlag()

    storage = make_storage(args.num_steps, local_envs, groups[0].observation_space.shape, device)
    stats = EpisodeStats(local_envs)
    obs_np = np.concatenate([envs.reset()[0] for envs in groups])
    zeros = torch.zeros(local_envs, device=device)
    state = NextStep(torch.as_tensor(obs_np, device=device), zeros, zeros)
    global_step = start_step = ckpt["global_step"] if ckpt else 0
    clock = Clock(args.batch_size, ckpt["wall_time"] if ckpt else 0.0)
    status, iteration, times = "finished", start_iteration, LoopTimes(groups)

    def checkpoint(iteration):  # rank 0's logger writes it, with its logs' sizes
        save_run_checkpoint(logger, args, signature, iteration, global_step, clock.wall_time(), q_network, optimizer,
                            evaluator, world_size, rank, device)

    for iteration in range(start_iteration + 1, args.num_iterations + 1):
        first = rank == 0 and iteration == start_iteration + 1  # it pays the one-off costs: say what it is doing
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        # Rollout: num_steps x local_envs epsilon-greedy transitions (and the greedy evaluation envs' steps)
        q_network.eval()
        times.mark("rollout")
        with Phase(f"collecting {args.batch_size:,} steps ({args.num_envs} envs x {args.num_steps})", show=first):
            finished, eval_finished, state = collect_rollout(groups, q_network, storage, state, stats, args, device,
                                                             autocast, global_step, evaluator, ranks)
        times.mark("update")
        finished = ranks.gather_list(finished)
        global_step += args.batch_size

        # Q(lambda) targets on the rollout, bootstrapped from max_a Q of the next state
        with torch.no_grad(), autocast():
            next_max_q = q_network(state.obs).float().max(dim=-1).values
        targets = compute_q_lambda_targets(storage.rewards, storage.max_q, storage.dones, storage.terminations,
                                           next_max_q, state.done, state.terminated, args.gamma, args.q_lambda)
        # Flatten the batch; a step right after a done was ignored by the env and is masked out
        batch = Batch(obs=storage.obs.reshape((-1,) + storage.obs.shape[2:]), actions=storage.actions.reshape(-1),
                      targets=targets.reshape(-1), valid=1.0 - storage.dones.reshape(-1))
        probe = None
        if args.diagnostics_every > 0 and iteration % args.diagnostics_every == 0:
            probe = make_probe(q_network, batch.obs, args, autocast, device, ranks)

        # Update: update_epochs passes over shuffled minibatches of the TD(lambda) regression
        q_network.train()
        with Phase(f"updating: {args.update_epochs} epochs x {args.num_minibatches} minibatches of "
                   f"{scaling['minibatch_size']:,}", compile_note(args.compile), show=first):
            loss_stats, grad_norm, _ = update(q_network, optimizer, batch, args, scaling["minibatch_size"],
                                              autocast, ranks, probe, loss_fn)

        # Non-finite loss or parameters: stop, keep the last good checkpoint (docs/run_directory.md#failure-behaviour)
        loss_stats = loss_stats.floats()
        times.mark("losses")
        if not all_finite(loss_stats, q_network, world_size, device):
            print(f"error: non-finite loss or parameters at iteration {iteration} (step {global_step}); "
                  "the last good checkpoint is kept. Lower --learning-rate or check the inputs.", file=sys.stderr)
            status = "diverged"
            break
        if rank == 0:
            log_iteration(logger, q_network, args, global_step, iteration, clock.tick(), finished, eval_finished,
                          optimizer.param_groups[0]["lr"], loss_stats, probe, grad_norm, times.scalars())

        if agreed_stop(stop, world_size, device):  # every rank stops at the same iteration
            status = "interrupted"
        if args.checkpoint_every and iteration % args.checkpoint_every == 0 or status == "interrupted":
            checkpoint(iteration)
        if rank == 0:
            logger.flush()
        if status == "interrupted":
            break

    for envs in groups:
        envs.close()
    if evaluator is not None:
        evaluator.envs.close()
    if status == "finished":
        checkpoint(iteration)
    if rank == 0:
        finish_run(logger, args, status, global_step, iteration, clock, global_step - start_step, q_network, device, run_dir)
    if world_size > 1:
        dist.destroy_process_group()
    if status == "diverged":
        sys.exit(3)
    if status == "interrupted":
        sys.exit(128 + stop.signum)


# ===== Shared infrastructure: identical in every script, checked by cleanrl_scaling.utils.shared_blocks =====
# >>> shared:torch-run-plumbing
class Clock:
    """Wall-clock bookkeeping: SPS without the first iteration (warm-up), and the run's wall time across resumes."""

    def __init__(self, batch_size: int, wall_offset: float):
        self.batch_size, self.wall_offset = batch_size, wall_offset
        self.start, self.timed_from, self.timed_steps = time.time(), None, 0

    def tick(self) -> float:
        """Called once per iteration; the SPS so far."""
        now = time.time()
        if self.timed_from is None:  # SPS excludes the first iteration (warm-up)
            self.timed_from, self.timed_steps = now, 0
        else:
            self.timed_steps += self.batch_size
        return self.timed_steps / (now - self.timed_from) if self.timed_steps else self.batch_size / (now - self.start)

    def wall_time(self) -> float:
        return self.wall_offset + time.time() - self.start

    def final_sps(self, steps_taken: int, global_step: int) -> tuple:
        """(SPS after warm-up, SPS with warm-up) of this process's steps."""
        elapsed = time.time() - self.start
        sps = (self.timed_steps / (time.time() - self.timed_from) if self.timed_from and self.timed_steps
               else global_step / max(elapsed, 1e-9))
        return sps, steps_taken / max(elapsed, 1e-9)


def uses_cuda(cuda: bool) -> bool:
    """Whether a run with this --cuda runs on a GPU: the one rule for its device and its device-dependent defaults."""
    return cuda and torch.cuda.is_available()


def init_distributed(args) -> tuple:
    """(world_size, rank, device). Data parallelism: each rank runs num_envs / world envs and averages gradients
    (docs/ppo_atari_envpool.md#implementation-details); a single process is world 1, rank 0."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = torch.device("cuda" if uses_cuda(args.cuda) else "cpu")
    if world_size > 1:
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return world_size, rank, device


def set_tf32(device, enabled: bool) -> None:
    """TF32 tensor cores for fp32 matmuls and convolutions on CUDA (inputs rounded to a 10-bit mantissa, fp32
    accumulation: https://docs.pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices);
    a CPU run is left as it is. The allow_tf32 switches, not the per-backend fp32_precision ones: after those, torch
    2.13's own getters that inductor calls (get_float32_matmul_precision, cudnn.allow_tf32) raise."""
    if device.type != "cuda":
        return
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def open_run(args, scaling: dict, ckpt, world_size: int, device, rank: int) -> tuple:
    """(logger, run_dir): a new run directory, or the resumed run's; only rank 0 logs (its logger; None elsewhere)."""
    if ckpt:
        run_dir = ckpt["run_dir"]
    else:
        run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
        run_dir = os.path.join(args.runs_dir, run_name)
    config = {"argv": sys.argv[1:], "args": dataclasses.asdict(args), "resolved": scaling, "world_size": world_size,
              "device": str(device), "versions": package_versions(), "git_commit": git_commit(), "script": SCRIPT,
              "init_from": args.init_from, "start_iteration": 0}  # a new run from old weights counts from 0 too
    logger = RunLogger(run_dir, config, args, args.num_iterations * args.batch_size, ckpt) if rank == 0 else None
    if logger:
        announce_run(logger.run_dir)
    return logger, logger.run_dir if logger else run_dir


def all_finite(loss_stats: np.ndarray, model, world_size: int, device) -> bool:
    """False on every rank if any rank's losses or parameters are not finite
    (docs/run_directory.md#failure-behaviour)."""
    finite = np.isfinite(loss_stats).all() and all(torch.isfinite(p).all() for p in model.parameters())
    return all_ranks_agree(finite, world_size, device)


def load_weights(model, saved: dict, flag: str = "--resume") -> None:
    """A checkpoint's weights into model, or one line and exit 2 when another network wrote them (a class changed
    since: the script's docs page, Changing the network)."""
    own = model.state_dict()
    missing = [k for k in own if k not in saved]
    unexpected = [k for k in saved if k not in own]
    reshaped = [k for k in own if k in saved and tuple(own[k].shape) != tuple(saved[k].shape)]
    if missing or unexpected or reshaped:
        first = (f"{reshaped[0]} is {list(saved[reshaped[0]].shape)} there, {list(own[reshaped[0]].shape)} here"
                 if reshaped else f"{len(missing)} of this network's tensors missing, {len(unexpected)} unknown")
        fix = ("start from a checkpoint of this network" if flag == "--init-from"
               else "resume it with the network that wrote it, or leave out --resume to start a new run")
        exit_usage(UsageError(f"{flag}: the checkpoint holds another network's weights ({first}); {fix}"))
    model.load_state_dict(saved)
# <<< shared:torch-run-plumbing


# >>> shared:errors
class UsageError(Exception):
    """A user mistake: reported as one line on stderr and exit code 2, never a traceback."""


def exit_usage(err: Exception) -> None:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)


def check_finite_floats(args) -> None:
    """inf or nan in any float flag (--ent-coef inf) would train, then stop on a NaN loss: refuse it up front."""
    for field in dataclasses.fields(args):
        value = getattr(args, field.name)
        if isinstance(value, float):
            check(math.isfinite(value), f"--{field.name.replace('_', '-')} must be a finite number (got {value})")
# <<< shared:errors


# >>> shared:help
PAPERS = """The papers the flags cite:
- B26 = Beukman et al. 2026, Preventing Learning Stagnation in PPO by Scaling to 1 Million Parallel Environments, https://arxiv.org/abs/2603.06009
- M25 = Mayor et al. 2025, The Impact of On-Policy Parallelized Data Collection on Deep Reinforcement Learning Networks (ICML 2025), https://arxiv.org/abs/2506.03404
- H25 = Honari et al. 2025, Training PPO-Clip with Parallelized Data Generation: A Case of Fixed-Point Convergence (RLC 2025 workshop), https://openreview.net/forum?id=R9AudTtTIH"""


def help_description(doc: str) -> str:
    """The text --help prints above the flags: the script's docstring, each paragraph on one line (tyro would break
    one before a line that starts with "(" or "§"), then the papers B26, M25 and H25 by name."""
    paragraphs = [" ".join(line.strip() for line in block.splitlines()) for block in doc.strip().split("\n\n")]
    return "\n\n".join(paragraphs + [PAPERS])
# <<< shared:help


# >>> shared:phase
class Phase:
    """One line when a slow phase starts (cold caches, compiling: minutes on a first run on a CPU) and one with its
    time when it ends, so that a run says what it is doing while it does it; show=False says nothing."""

    def __init__(self, what: str, note: str = "", show: bool = True):
        self.what, self.note, self.show = what, note, show

    def __enter__(self):
        self.t0 = time.time()
        if self.show:
            print(f"[{time.strftime('%H:%M:%S')}] {self.what}{' (' + self.note + ')' if self.note else ''} ...", flush=True)
        return self

    def __exit__(self, *exc):
        if self.show and exc[0] is None:
            print(f"[{time.strftime('%H:%M:%S')}] {self.what}: {time.time() - self.t0:.1f}s", flush=True)
# <<< shared:phase


# >>> shared:scaling
def check_scaling_flags(args) -> None:
    """The scaling flags before resolve_scaling: each in its range, then the pairs that contradict each other, so
    that a conflict is named as one and not reported as a batch that does not divide (docs/scaling.md)."""
    n, t, m, mb, recipe = args.num_envs, args.num_steps, args.num_minibatches, args.minibatch_size, args.scaling_recipe
    check(n >= 1, f"--num-envs must be >= 1 (got {n})")
    check(t >= 1, f"--num-steps must be >= 1 (got {t})")
    check(m >= 1, f"--num-minibatches must be >= 1 (got {m})")
    check(mb >= 0, f"--minibatch-size must be >= 0 (got {mb})")
    check(math.isfinite(args.learning_rate) and args.learning_rate > 0,
          f"--learning-rate must be a finite number > 0 (got {args.learning_rate})")
    check(args.base_num_envs >= 0, f"--base-num-envs must be >= 1 (got {args.base_num_envs})")
    check(args.minibatch_multiplier >= 1, f"--minibatch-multiplier must be >= 1 (got {args.minibatch_multiplier})")
    # a flag counts as given when it differs from the script's default (one repeated at its default is harmless)
    given = {name for name in ("num_minibatches", "minibatch_multiplier", "base_num_envs")
             if getattr(args, name) != default_of(args, name)}
    check(not (mb > 0 and "num_minibatches" in given), f"--minibatch-size {mb} and --num-minibatches {m} both set the "
          "minibatches; pass only one of them")
    check(args.lr_scaling == "none" or recipe not in ("sqrt-lr", "hybrid"), f"--lr-scaling {args.lr_scaling} cannot "
          f"be combined with --scaling-recipe {recipe}, which already scales the lr; pass only one of them")
    check(recipe == "hybrid" or "minibatch_multiplier" not in given, f"--minibatch-multiplier "
          f"{args.minibatch_multiplier} applies only to --scaling-recipe hybrid (got {recipe}); drop it or use hybrid")
    check(recipe != "none" or args.lr_scaling != "none" or "base_num_envs" not in given, f"--base-num-envs "
          f"{args.base_num_envs} is read only by --scaling-recipe and --lr-scaling; drop it or pass one of them")


def check_scaling(args, scaling: dict) -> None:
    """What resolve_scaling gave: whole minibatches that divide the batch, and at least one batch to run. Without
    a recipe the messages speak of the user's own batch N x T, with one of the base batch B x T."""
    n, t, m, recipe = args.num_envs, args.num_steps, args.num_minibatches, args.scaling_recipe
    batch, mb, s = scaling["batch_size"], scaling["minibatch_size"], scaling["scale"]
    base_envs, base_mb = scaling["base_num_envs"], scaling["base_minibatch_size"]
    base_batch = base_envs * t
    if recipe == "none":
        check(args.minibatch_size > 0 or batch % m == 0, f"--num-minibatches {m} does not divide the batch "
              f"{n}x{t}={batch}; choose a divisor or pass --minibatch-size")
    elif args.minibatch_size > 0:
        check(base_batch % base_mb == 0, f"--minibatch-size {base_mb} does not divide the base batch "
              f"{base_envs}x{t}={base_batch} of --scaling-recipe {recipe}")
    else:
        check(base_batch % m == 0, f"--num-minibatches {m} does not divide the base batch {base_envs}x{t}="
              f"{base_batch} of --scaling-recipe {recipe}; choose a divisor or pass --minibatch-size")
    check(recipe not in ("larger-minibatches", "sqrt-lr") or float(base_mb * s).is_integer(),
          f"--num-envs {n}: base minibatch {base_mb} x s={s:g} is not an integer")
    check(mb >= 1 and batch % mb == 0,
          f"minibatch size {mb} does not divide the batch {n}x{t}={batch}; adjust --num-envs, --num-steps, "
          "--minibatch-size" + (" or the recipe's --base-num-envs" if recipe != "none" else ""))
    check(args.total_timesteps >= batch, f"--total-timesteps {args.total_timesteps} is less than one batch of "
          f"{n}x{t}={batch} steps; raise it, or lower --num-envs or --num-steps")


def describe_scaling(scaling: dict, args) -> str:
    """The printed 'resolved:' values: the base configuration only where a recipe or --lr-scaling uses it."""
    if args.scaling_recipe != "none":
        hidden = set()
    elif args.lr_scaling != "none":  # M25 Fig. 11 scales by the minibatch ratio to the base; s plays no part
        hidden = {"scale"}
    else:
        hidden = {"scale", "base_num_envs", "base_minibatch_size"}
    return "resolved: " + ", ".join(f"{k}={v:g}" for k, v in scaling.items() if k not in hidden)
# <<< shared:scaling


# >>> shared:rundir
def package_versions() -> dict:
    from importlib import metadata
    names = ["torch", "numpy", "gymnasium", "envpool", "ale-py", "mujoco", "jax", "flax", "optax", "kinetix-env", "tyro"]
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def git_commit() -> Optional[str]:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def atomic_write(path: str, data: bytes) -> None:
    """Temp file + fsync + rename: a kill -9 at any moment leaves either the old or the new file
    (docs/run_directory.md#checkpoints-and-resume). A write that fails (a full disk, a quota) removes its temp file:
    the old file stays, and no half-written copy keeps the space."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def check_writable_dir(path: str, flag: str) -> None:
    """Create `path` if needed and write a file in it: an impossible --runs-dir (under /proc, a file, read-only)
    is then one line and exit 2 before anything heavy starts (docs/run_directory.md#failure-behaviour), not a traceback
    after the envs are built."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".write_test{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as e:
        raise UsageError(f"{flag}: cannot write to {path} ({e.strerror or e}); pass a directory you can write to")


def announce_run(run_dir: str) -> None:
    """At start, not only at the end: where the run writes, and the command that shows its curves while it trains."""
    print(f"run directory: {run_dir}\nwatch it train: tensorboard --logdir {os.path.dirname(run_dir) or '.'}", flush=True)


def claim_run_dir(path: str) -> str:
    """A new run directory, even when two runs with the same name start in the same second (suffix -2, -3…)."""
    candidate, k = path, 1
    while True:
        try:
            os.makedirs(candidate)
            return candidate
        except FileExistsError:
            k += 1
            candidate = f"{path}-{k}"


# The append-only logs: a resumed run cuts them back to what they held when its checkpoint was written
LOG_FILES = ("metrics.jsonl", "kl_profile.jsonl")


def cut_logs(run_dir: str, ckpt: dict) -> None:
    """A resumed run replaces what followed its checkpoint: each log cut to its size when the checkpoint was written
    (which also drops rows of the checkpoint's own iteration logged after it, and a line torn by a kill). A checkpoint
    without recorded sizes (older ones) keeps the rows up to its iteration, and drops a torn line."""
    sizes = ckpt.get("log_sizes")
    for name in LOG_FILES:
        path = os.path.join(run_dir, name)
        if not os.path.exists(path):
            continue
        if sizes is not None:
            with open(path, "rb") as f:
                kept = f.read(sizes.get(name, 0))
        else:
            with open(path) as f:
                kept = "".join(line for line in f if row_up_to(line, ckpt["iteration"])).encode()
        atomic_write(path, kept)


def row_up_to(line: str, iteration: int) -> bool:
    try:
        return json.loads(line).get("iteration", 0) <= iteration
    except ValueError:  # blank, or torn by a kill in the middle of a write
        return False


class RunLogger:
    """metrics.jsonl + TensorBoard (+ W&B with --track) + a progress bar or plain lines (docs/run_directory.md)."""

    def __init__(self, run_dir: str, config: dict, args, total_steps: int, resumed: Optional[dict] = None,
                 headline: str = "charts/episodic_return"):
        """resumed: the checkpoint a resumed run continues (its run directory, logs cut back to it); None: a new run."""
        self.run_dir = run_dir = claim_run_dir(run_dir) if resumed is None else run_dir
        os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
        atomic_write(os.path.join(run_dir, "config.json"), json.dumps(config, indent=2, default=str).encode())
        if resumed is not None:
            cut_logs(run_dir, resumed)
        self.metrics = open(os.path.join(run_dir, "metrics.jsonl"), "a")
        self.kl_profile = None
        from tensorboard.summary import Writer
        self.tb = Writer(run_dir)
        self.wandb = None
        if args.track:
            import wandb
            self.wandb = wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, config=config,
                                    name=os.path.basename(run_dir), dir=run_dir, resume="allow")
        self.t0 = time.time()
        self.total_steps = total_steps
        self.headline, self.last_headline = headline, None  # the tag the progress display shows, and its last value
        mode = args.progress
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.bar = None  # made at the first progress(): the start-up lines print before it, not through it
        self.mode, self.last_line = mode, 0.0

    def wall_clock(self) -> float:
        """A row's wall_time (a script that tracks active time across resumes overrides this)."""
        return time.time()

    def log(self, step: int, iteration: int, scalars: dict) -> None:
        row = {"global_step": int(step), "iteration": int(iteration), "wall_time": self.wall_clock()}
        row.update({k: float(v) for k, v in scalars.items()})
        self.metrics.write(json.dumps(row) + "\n")
        for tag, value in scalars.items():
            self.tb.add_scalar(tag, float(value), int(step))
        if self.wandb is not None:
            self.wandb.log({**scalars, "global_step": step})
        if self.headline in scalars:
            self.last_headline = float(scalars[self.headline])

    def log_profile(self, row: dict) -> None:
        if self.kl_profile is None:
            self.kl_profile = open(os.path.join(self.run_dir, "kl_profile.jsonl"), "a")
        self.kl_profile.write(json.dumps(row) + "\n")

    def headline_text(self) -> str:
        """The headline's last value; before the first one, that none has come yet (a NaN says nothing)."""
        name = "return" if self.headline == "charts/episodic_return" else self.headline.split("/")[-1]
        if self.last_headline is None:
            return "no episode finished yet" if name == "return" else f"no {name} yet"
        return f"{name} {self.last_headline:.2f}"

    def progress(self, step: int, sps: float) -> None:
        if self.mode == "bar" and self.bar is None:
            from tqdm import tqdm
            self.bar = tqdm(total=self.total_steps, unit="step", dynamic_ncols=True, smoothing=0.1)
        if self.bar is not None:
            self.bar.n = min(step, self.total_steps)
            self.bar.set_postfix_str(f"SPS {sps:.0f}, {self.headline_text()}", refresh=False)
            self.bar.refresh()
        elif self.mode == "lines" and time.time() - self.last_line > 10:
            self.last_line = time.time()
            print(f"step {step}/{self.total_steps} SPS {sps:.0f}, {self.headline_text()}", flush=True)

    def log_sizes(self) -> dict:
        """The logs' sizes once flushed: what a resume from a checkpoint written now keeps (a checkpoint's log_sizes)."""
        self.flush()
        return {name: os.path.getsize(path) for name in LOG_FILES
                if os.path.exists(path := os.path.join(self.run_dir, name))}

    def flush(self) -> None:
        self.metrics.flush()
        if self.kl_profile is not None:
            self.kl_profile.flush()
        self.tb.flush()

    def close(self, summary: dict) -> None:
        atomic_write(os.path.join(self.run_dir, "summary.json"), json.dumps(summary, indent=2).encode())
        if self.bar is not None:
            self.bar.close()
        self.flush()
        self.metrics.close()
        if self.kl_profile is not None:
            self.kl_profile.close()
        self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


class StopFlag:
    """SIGINT/SIGTERM (Ctrl-C, Slurm preemption) set a flag; the loop checkpoints and exits at a safe point."""

    def __init__(self):
        self.signum = 0
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if self.signum:  # a second signal: stop now
            raise KeyboardInterrupt
        self.signum = signum
        text = f"\nreceived {signal.Signals(signum).name}: finishing this iteration, then checkpointing\n"
        try:
            sys.stderr.write(text)
        except RuntimeError:  # it interrupted a write to a buffered (wrapped) stderr, which a write here re-enters
            try:
                os.write(2, text.encode())
            except OSError:  # nowhere to say it; the flag is what stops the run
                pass
# <<< shared:rundir


# >>> shared:checkpoint
# Flags a resumed run may change (docs/run_directory.md, What a resume must match): its length, and bookkeeping that
# never changes what it computes: names, paths, tracking, progress, checkpoints, and the diagnostics (they draw
# nothing from training, docs/metrics.md); each script adds its own
RESUMABLE_FLAGS = ("total_timesteps", "exp_name", "track", "wandb_project_name", "wandb_entity", "runs_dir",
                   "save_model", "checkpoint_every", "resume", "progress", "diagnostics_every", "diagnostics_states",
                   "kl_profile")
COMPUTED_FIELDS = ("batch_size", "num_iterations")  # computed from the flags, never given
RESOLVED_FLAGS = ("learning_rate", "num_minibatches")  # flags the scaling recipes rewrite in args (docs/scaling.md)
UNRECORDED = object()


def resume_signature(args, resumable=()) -> dict:
    """What a resumed run must share with its checkpoint: every field of args but the resumable flags and the
    computed fields, so that a flag added later is checked by default. Taken from the flags as given, before the
    scaling writes the resolved lr and minibatches into args."""
    skip = set(RESUMABLE_FLAGS) | set(COMPUTED_FIELDS) | set(resumable)
    return {f.name: plain(getattr(args, f.name)) for f in dataclasses.fields(args) if f.name not in skip}


def older_signature(args, resumable=(), implied=None) -> dict:
    """What a checkpoint written before a flag existed stands for: the flag's default (the behaviour it had before the
    flag), or `implied`'s value where the default changed that behaviour."""
    return {**resume_signature(type(args)(), resumable), **(implied or {})}


def plain(value):
    """Tuples as lists, so that a signature compares equal whichever sequence type recorded it."""
    return list(value) if isinstance(value, tuple) else value


class CheckpointUnpickler(pickle.Unpickler):
    """Reads a checkpoint written under NumPy 1 or 2 with either: NumPy 2 renamed numpy.core to numpy._core, which
    NumPy 1.26 holds only in part (https://numpy.org/doc/stable/numpy_2_0_migration_guide.html). Torch tensors come
    back on the CPU whatever device wrote them, so a checkpoint written on a GPU loads on any machine and any rank."""

    def find_class(self, module: str, name: str):
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return storage_on_cpu
        ours = "numpy.core" if np.__version__.startswith("1.") else "numpy._core"
        for alias in ("numpy.core", "numpy._core"):
            if module == alias or module.startswith(alias + "."):
                return super().find_class(ours + module[len(alias):], name)
        return super().find_class(module, name)


def storage_on_cpu(data: bytes):
    """A torch tensor's storage as pickled by torch (with its device's tag), loaded onto the CPU; the script moves
    weights and optimizer state to its own device (load_state_dict)."""
    import io
    import torch  # only a torch script's checkpoint holds torch storages
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def save_checkpoint(path: str, state: dict) -> None:
    try:
        atomic_write(path, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError as e:  # a full disk or a quota: one line and exit 1; the checkpoint there before is untouched
        raise SystemExit(f"error: cannot write the checkpoint {path}: {e.strerror or e}. The one written there before "
                         f"(if any) is intact: make room, then continue from it with --resume {path}") from None


def load_checkpoint(path: str, script: str, signature: dict, flag: str = "--resume", implied=None, resolved=None,
                    new_run: str = "leave out --resume to start a new run") -> dict:
    """Read and validate a checkpoint before anything heavy is built (docs/run_directory.md); messages name `flag`, the
    flag that gave the path, and on a mismatch `new_run`, the way to other flags. A key the checkpoint's signature
    lacks (it predates the key) takes the value its args record, else `implied`'s (older_signature); `resolved` holds
    this run's resolved lr and minibatches, which those args record."""
    check(os.path.isfile(path), f"{flag}: no checkpoint at {path}; pass the path of a checkpoints/*.ckpt file")
    try:
        with open(path, "rb") as f:
            state = CheckpointUnpickler(f).load()
    except Exception as e:  # a truncated or foreign file
        raise UsageError(f"{flag}: {path} is not a readable checkpoint ({type(e).__name__})")
    check(isinstance(state, dict) and state.get("script") == script,
          f"{flag}: {path} was written by {state.get('script') if isinstance(state, dict) else 'another program'}, "
          f"not {script}; use it with that script")
    for key, value in signature.items():
        saved = recorded_value(state, key, value, implied or {}, resolved or {})
        check(saved is not UNRECORDED, f"{flag}: {path} does not record {key} (an older version of {script} wrote "
              f"it); resume it with that version")
        check(saved == value, f"{flag}: the checkpoint has {key}={saved!r} but this run has {value!r}; pass "
              f"{as_flag(key, saved)}" + (f" to resume it, or {new_run}" if flag == "--resume" else ""))
    if "run_dir" in state:
        state["run_dir"] = run_dir_holding(path, state["run_dir"])
    return state


def run_dir_holding(path: str, recorded: str) -> str:
    """The run directory a checkpoint continues: the one that holds it (X/checkpoints/latest.ckpt -> X), so that a run
    directory moved elsewhere, or resumed from another working directory, continues in place instead of splitting
    into a new one at the recorded (often relative) path; that recorded path for a checkpoint kept outside a run."""
    folder = os.path.dirname(os.path.abspath(path))
    holder = os.path.dirname(folder)
    if os.path.basename(folder) != "checkpoints" or not os.path.isfile(os.path.join(holder, "config.json")):
        return recorded
    return recorded if os.path.abspath(recorded) == holder else holder


def recorded_value(state: dict, key: str, value, implied: dict, resolved: dict):
    """The checkpoint's value of a signature key: its signature's, else its args' (a resolved flag there stands for
    this run's `value` when both resolve alike), else `implied`'s, else UNRECORDED."""
    args = state.get("args", {})
    if key in state.get("signature", {}):
        return state["signature"][key]
    if key in args and key in RESOLVED_FLAGS and key in resolved:
        return value if args[key] == resolved[key] else args[key]
    if key in args:
        return plain(args[key])
    return implied.get(key, UNRECORDED)


def as_flag(key: str, value) -> str:
    """The command-line spelling of key=value: --x / --no-x for booleans, --x A B for sequences ("no --x" when
    empty), --x VALUE otherwise."""
    name = key.replace("_", "-")
    if isinstance(value, bool):
        return f"--{name}" if value else f"--no-{name}"
    if isinstance(value, (list, tuple)):
        return f"--{name} {' '.join(map(str, value))}" if value else f"no --{name}"
    return f"--{name} {value}"
# <<< shared:checkpoint


# >>> shared:diagnostics
def categorical_kl(logp: np.ndarray, logq: np.ndarray) -> np.ndarray:
    """Per-state KL(p || q) of categorical distributions given as log-probabilities [S, A]."""
    return np.sum(np.exp(logp) * (logp - logq), axis=-1)


def gaussian_kl(mu_p, logstd_p, mu_q, logstd_q) -> np.ndarray:
    """Per-state KL(p || q) of diagonal Gaussians, summed over action dimensions."""
    var_p, var_q = np.exp(2 * logstd_p), np.exp(2 * logstd_q)
    return np.sum(logstd_q - logstd_p + (var_p + (mu_p - mu_q) ** 2) / (2 * var_q) - 0.5, axis=-1)


def feature_ranks(features: np.ndarray, threshold: float = 0.99) -> tuple:
    """M25 B.1: smallest k keeping `threshold` of sum(sigma^2) (feature_rank) and of sum(sigma) (srank)."""
    sigma = np.linalg.svd(features.astype(np.float64), compute_uv=False)
    def smallest_k(values):
        total = values.sum()
        if total <= 0:
            return 0
        return int(np.searchsorted(np.cumsum(values) / total, threshold - 1e-12) + 1)
    return smallest_k(sigma ** 2), smallest_k(sigma)


def dormant_fractions(activations: list, taus=(0.0, 0.025, 0.1)) -> dict:
    """M25 B.2 (Sokar et al.): unit i of a layer is dormant if mean|h_i| / mean_layer(mean|h|) <= tau.
    Activations are [S, units] or [S, C, H, W] (a conv channel is one unit)."""
    scores = []
    for h in activations:
        per_unit = np.abs(h).reshape(h.shape[0], h.shape[1], -1).mean(axis=(0, 2))
        layer_mean = per_unit.mean()
        scores.append(per_unit / layer_mean if layer_mean > 0 else np.zeros_like(per_unit))
    scores = np.concatenate(scores)
    return {tau: float(np.mean(scores <= tau)) for tau in taus}


def log_grad_kurtosis(grad: np.ndarray) -> float:
    """M25 B.4 (Garg et al.): kurtosis E[(x-mu)^4] / Var(x)^2 of x = log(|g| + 1e-12)."""
    x = np.log(np.abs(grad.astype(np.float64)) + 1e-12)
    centred = x - x.mean()
    var = np.mean(centred ** 2)
    return float(np.mean(centred ** 4) / var ** 2) if var > 0 else float("nan")


def ess_pct(log_ratio: np.ndarray) -> float:
    """M25 B.5 (Martino et al.): 100 (sum w)^2 / (M sum w^2), w = pi_after(a|s) / pi_behavior(a|s)."""
    w = np.exp(log_ratio.astype(np.float64) - np.max(log_ratio))  # the percentage is scale-invariant
    return float(100.0 * w.sum() ** 2 / (len(w) * np.sum(w ** 2)))


def policy_variance(outputs: np.ndarray) -> float:
    """M25 B.6: mean over actions (or action dims) of the variance across states of pi(a|s) (or mu(s))."""
    return float(np.mean(np.var(outputs.astype(np.float64), axis=0)))


def kl_profile(kl_between) -> tuple:
    """H25 Fig. 2: seq[j] = KL(pi_j || pi_{j-1}) for j = 1..J and ref[j] = KL(pi_J || pi_j) for j = 0..J-1,
    each a mean over the fixed state set; kl_between(i, j) returns that per-state KL(pi_i || pi_j)."""
    num_steps = kl_between.num_policies - 1
    seq = [float(np.mean(kl_between(j, j - 1))) for j in range(1, num_steps + 1)]
    ref = [float(np.mean(kl_between(num_steps, j))) for j in range(num_steps)]
    return seq, ref

# <<< shared:diagnostics


# >>> shared:torch-activations
# What the representation diagnostics (feature rank, srank, dormant units) read from the network: the outputs of
# activation modules, caught by forward hooks while agent(obs) runs. The contract: docs, "Changing the network".
ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.ELU, nn.CELU, nn.SELU, nn.GELU, nn.SiLU,
               nn.Mish, nn.Hardswish, nn.Hardtanh, nn.Tanh, nn.Sigmoid, nn.Softplus, nn.Softsign)


def activation_modules(module: nn.Module) -> list:
    """Every activation module (nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.ELU, nn.LeakyReLU, ...) inside `module`."""
    return [m for m in module.modules() if isinstance(m, ACTIVATIONS)]


def watched_activations(agent) -> dict:
    """{metric prefix: modules whose outputs the diagnostics read}: what agent.watched_activations() marks
    ("" = the policy's trunk, "critic_" = a separate critic's), else every activation module as one trunk."""
    if hasattr(agent, "watched_activations"):
        return dict(agent.watched_activations())
    return {"": activation_modules(agent)}


def check_watched_activations(agent, script: str) -> None:
    """At start, not at the first diagnostic iteration: every trunk must have a module to watch."""
    watched = {"": [], **watched_activations(agent)}  # the policy's trunk ("") is always read
    empty = [prefix or "policy" for prefix, modules in watched.items() if not modules]
    check(not empty, f"the diagnostics found no activation module to watch in the network ({', '.join(empty)} trunk): "
                     "use activation modules (nn.ReLU, nn.GELU, ...) rather than functions, or list the modules in "
                     f"Agent.watched_activations() (docs/{script}.md, Changing the network), or pass --diagnostics-every 0")


def check_network_outputs(network, obs, expected: dict, script: str) -> None:
    """One forward pass on a blank batch at start, in eval mode and without gradients (no statistics, no random
    draws): a network that breaks the contract (docs/<script>.md, Changing the network) is named here in one line,
    not by a shape error deep in the rollout. expected: {output name: [the shapes it may have]}."""
    training = network.training
    network.eval()
    with torch.no_grad():
        outputs = network(obs)
    network.train(training)
    outputs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
    call, fix = f"{type(network).__name__}(obs {list(obs.shape)})", f"see docs/{script}.md, Changing the network"
    check(len(outputs) == len(expected), f"{call} returned {len(outputs)} outputs, not the contract's "
          f"{len(expected)} ({', '.join(expected)}); {fix}")
    for output, (name, shapes) in zip(outputs, expected.items()):
        shape = list(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        check(shape in shapes, f"{call} returned {name} of shape {shape}, not {' or '.join(map(str, shapes))}; {fix}")


def record_activations(agent, obs_chunks) -> dict:
    """{prefix: (features [S, D], [per watched output, mean |h| of each unit per state [S, units]])}: the last
    watched output of each trunk (flattened) and all dormant_fractions needs (dim 1 is the unit, e.g. a conv
    channel, averaged over the rest), from one forward pass per chunk of states."""
    watched = watched_activations(agent)
    current = {prefix: [] for prefix in watched}
    def hook(prefix):
        def record(module, inputs, output):  # reduced at once: a later in-place op cannot change the magnitudes
            h = output.detach().float()
            current[prefix].append((h.abs().flatten(2).mean(2) if h.dim() > 2 else h.abs(), h))
        return record
    handles = [m.register_forward_hook(hook(prefix)) for prefix, modules in watched.items() for m in modules]
    features, magnitudes = {p: [] for p in watched}, {p: [] for p in watched}
    try:
        with torch.no_grad():
            for obs in obs_chunks:
                agent(obs)
                for prefix, outputs in current.items():
                    if not outputs:
                        raise RuntimeError(f"the watched activation modules of trunk '{prefix or 'policy'}' did not run in "
                                           "agent(obs): the diagnostics read the modules the forward pass calls")
                    magnitudes[prefix].append([magnitude for magnitude, _ in outputs])
                    features[prefix].append(outputs[-1][1].flatten(1))
                    outputs.clear()
    finally:
        for handle in handles:
            handle.remove()
    return {p: (torch.cat(features[p]).cpu().numpy(), [torch.cat(layer).cpu().numpy() for layer in zip(*magnitudes[p])])
            for p in watched}


def actor_critic_weight_norms(agent) -> dict:
    """actor_weight_norm and critic_weight_norm when the agent names its critic's own parameters in
    critic_parameters() (none when actor and critic share a trunk); the actor's are all the others."""
    critic = list(agent.critic_parameters()) if hasattr(agent, "critic_parameters") else []
    if not critic:
        return {}
    critic_ids = {id(p) for p in critic}
    actor = [p for p in agent.parameters() if id(p) not in critic_ids]
    return {"diagnostics/actor_weight_norm": float(np.linalg.norm(flat_numpy(actor))),
            "diagnostics/critic_weight_norm": float(np.linalg.norm(flat_numpy(critic)))}
# <<< shared:torch-activations


# >>> shared:loop-timing
class EnvClock:
    """Training envs whose step (and envpool's recv) is timed: the seconds the loop waits on the envs."""

    def __init__(self, envs):
        self.inner, self.waited = envs, 0.0

    def __getattr__(self, name):  # reset, send, close, the spaces, saved states: the envs' own
        return getattr(self.inner, name)

    def step(self, action):
        return self.timed(self.inner.step, action)

    def recv(self):  # envpool's --async-envs: send returns at once, recv waits
        return self.timed(self.inner.recv)

    def timed(self, call, *args):
        start = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.waited += time.perf_counter() - start


class LoopTimes:
    """One iteration's wall seconds (docs/metrics.md#timing): its rollout, the part of it spent waiting on the
    training envs, and the update (targets, a diagnostics probe, the epochs; ended by reading its losses, which
    waits for the device): what bounds the loop, env threads or the network."""

    def __init__(self, groups):
        self.groups, self.marks = groups, {}

    def mark(self, name: str) -> None:
        self.marks[name] = (time.perf_counter(), sum(envs.waited for envs in self.groups))

    def scalars(self) -> dict:
        (start, waited_before), (rolled, waited_after) = self.marks["rollout"], self.marks["update"]
        return {"time/rollout_seconds": rolled - start, "time/env_wait_seconds": waited_after - waited_before,
                "time/update_seconds": self.marks["losses"][0] - rolled}
# <<< shared:loop-timing


# >>> shared:torch-compile
def maybe_compile(fn, enabled: bool):
    """torch.compile what is hot (LeanRL); where inductor cannot build (e.g. no C++ compiler), warn in one
    line and run eagerly: the same function, so training is unchanged up to float rounding. Inductor builds a
    graph's backward at its first backward call, outside this wrapper, so a call with gradients that compiled a
    new graph (the first, or a recompile for new shapes) builds it at once (its gradient discarded, nothing
    accumulated): a backward that cannot build falls back too."""
    if not enabled:
        return fn
    active, backward_built = [torch.compile(fn)], [False]

    def graphs_compiled() -> int:  # dynamo's private count; the first call with gradients is probed whatever it says
        return torch._dynamo.utils.counters["stats"]["unique_graphs"]

    def fall_back(err, *args, **kwargs):
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        print(f"warning: torch.compile failed ({reason}); running eagerly (--no-compile skips it)", file=sys.stderr)
        active[0] = fn
        return fn(*args, **kwargs)

    def build_backward(out, args) -> None:
        loss = out[0] if isinstance(out, tuple) else out
        weights = [p for a in args if isinstance(a, nn.Module) for p in a.parameters() if p.requires_grad]
        if torch.is_tensor(loss) and loss.requires_grad and weights:
            torch.autograd.grad(loss, weights, retain_graph=True, allow_unused=True)
            backward_built[0] = True

    def call(*args, **kwargs):
        if active[0] is fn:
            return fn(*args, **kwargs)
        before = graphs_compiled()
        try:
            out = active[0](*args, **kwargs)
        except torch._dynamo.exc.BackendCompilerFailed as err:
            return fall_back(err, *args, **kwargs)
        if not backward_built[0] or graphs_compiled() != before:
            try:
                build_backward(out, args)
            except torch.OutOfMemoryError:
                raise
            except Exception as err:  # inductor's lazy backward raises its own errors, not BackendCompilerFailed
                return fall_back(err, *args, **kwargs)
        return out
    return call


def compile_note(enabled: bool) -> str:
    """What the first update says while torch.compile builds it; inductor keeps what it built in a disk cache."""
    return "compiling it first: slow on the first run only, cached on disk after" if enabled else ""
# <<< shared:torch-compile


# >>> shared:torch-distributed
# torchrun = one process (docs/ppo_atari_envpool.md#implementation-details, "Data parallelism"): rank r holds envs
# [r L, (r + 1) L) of the N = world_size x L, every rank draws the whole batch's random numbers from the same torch
# stream, and every statistic the single process takes over the batch or a minibatch is reduced over the ranks'
# shares. A batch row is t * N + n globally, t * L + n - rL here.
def allreduce_gradients(agent, world_size):
    """Sum gradients over ranks with one flat all-reduce: each rank's loss is its share of the minibatch's sum
    divided by the whole minibatch's count, so the sum is the single process's gradient. A rank whose share is
    empty contributes zeros."""
    params = [p for p in agent.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


def sum_over_ranks(x: torch.Tensor, world_size: int) -> torch.Tensor:
    """x summed over the ranks (in place); x itself in one process."""
    if world_size > 1:
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


def gather_envs(x: torch.Tensor, world_size: int, dim: int = 0) -> torch.Tensor:
    """Every rank's per-env tensor joined along `dim` (the env axis) in rank order: one process's layout."""
    if world_size == 1:
        return x
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(parts, x)
    return torch.cat(parts, dim=dim)


def gather_list(items: list, world_size: int) -> list:
    """Every rank's list (finished episodes), concatenated in rank order."""
    if world_size == 1:
        return items
    gathered = [None] * world_size
    dist.all_gather_object(gathered, items)
    return [item for part in gathered for item in part]


def local_rows(idx: torch.Tensor, num_envs: int, rank: int, world_size: int) -> torch.Tensor:
    """The rows among the batch rows idx (t * N + n) that this rank holds, as its own rows, in idx's order."""
    if world_size == 1:
        return idx
    local = num_envs // world_size
    t, n = idx // num_envs, idx % num_envs - rank * local
    mine = (n >= 0) & (n < local)
    return t[mine] * local + n[mine]


def gather_rows(b_x: torch.Tensor, idx: torch.Tensor, num_envs: int, rank: int, world_size: int) -> torch.Tensor:
    """Batch rows idx (t * N + n) on every rank, each from the rank that holds it (the diagnostics' states)."""
    if world_size == 1:
        return b_x.index_select(0, idx)
    owner = (idx % num_envs) // (num_envs // world_size)
    counts = torch.bincount(owner, minlength=world_size).tolist()
    part = b_x.new_zeros((max(counts),) + b_x.shape[1:])  # all_gather needs equal shapes: pad to the largest share
    mine = local_rows(idx, num_envs, rank, world_size)
    part[:len(mine)] = b_x.index_select(0, mine)
    parts = [torch.empty_like(part) for _ in range(world_size)]
    dist.all_gather(parts, part)
    out = b_x.new_empty((len(idx),) + b_x.shape[1:])
    for r in range(world_size):
        out[owner == r] = parts[r][:counts[r]]
    return out


def max_over_ranks(value: float, world_size: int, device) -> float:
    """The largest of the ranks' values, for a decision every rank takes together (stop, diverged); one tiny
    all-reduce under torchrun."""
    if world_size == 1:
        return value
    x = torch.tensor([float(value)], device=device)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return x.item()


def all_ranks_agree(flag: bool, world_size: int, device) -> bool:
    return not max_over_ranks(float(not flag), world_size, device)


def agreed_stop(stop, world_size: int, device) -> bool:
    """A stop signal of any rank (Slurm or a user may signal one task only), agreed by every rank, which then all exit
    with its code. A signal that lands during the all-reduce (its handler runs when the all-reduce returns) is kept
    for the next agreement: an agreed 0 must not overwrite it."""
    agreed = int(max_over_ranks(stop.signum, world_size, device))
    if agreed:
        stop.signum = agreed
    return bool(agreed)


class Ranks(NamedTuple):
    """The one distributed context the rollout, the update and the probe take: this process is rank `rank` of
    `world_size`. In one process (Ranks(), rank 0 of 1) every method returns its input or does nothing."""
    world_size: int = 1
    rank: int = 0

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        return sum_over_ranks(x, self.world_size)

    def gather_envs(self, x: torch.Tensor, dim: int = 0) -> torch.Tensor:
        return gather_envs(x, self.world_size, dim)

    def own_envs(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's rows of x [N, ...], a tensor over every rank's envs (gather_envs)."""
        if self.world_size == 1:
            return x
        local = x.shape[0] // self.world_size
        return x[self.rank * local:(self.rank + 1) * local]

    def gather_list(self, items: list) -> list:
        return gather_list(items, self.world_size)

    def local_rows(self, idx: torch.Tensor, num_envs: int) -> torch.Tensor:
        return local_rows(idx, num_envs, self.rank, self.world_size)

    def gather_rows(self, b_x: torch.Tensor, idx: torch.Tensor, num_envs: int) -> torch.Tensor:
        return gather_rows(b_x, idx, num_envs, self.rank, self.world_size)

    def allreduce_gradients(self, model) -> None:
        if self.world_size > 1:
            allreduce_gradients(model, self.world_size)
# <<< shared:torch-distributed


if __name__ == "__main__":
    main()
