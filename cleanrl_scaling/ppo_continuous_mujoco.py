"""PPO on MuJoCo (gymnasium or envpool): CleanRL's ppo_continuous_action.py (Gaussian policy, observation and
reward normalisation) plus the scaling flags of B26 (beukman2026; §5, App. D), the experiments of M25 (mayor2025;
§4-5) and the diagnostics of B26 §4.4, M25 App. B and H25 (honari2025; Fig. 2).

    python cleanrl_scaling/ppo_continuous_mujoco.py --env-id HalfCheetah-v4 --num-envs 1 --num-steps 2048

Docs: docs/ppo_continuous_mujoco.md. Read top to bottom: Args, then the algorithm (envs, normalisation, network,
rollout, GAE, loss, update, diagnostics, evaluation, main); below the marked line, the infrastructure every script
shares.
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
    init_from: Optional[str] = None
    """path of a checkpoint of the same --env-id whose weights and observation/reward normaliser statistics start a new run with this run's flags: fresh Adam, step 0, --seed's RNG (docs/run_directory.md#a-new-run-from-old-weights)"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be enabled when available"""
    tf32: bool = True
    """on CUDA, TF32 tensor cores for fp32 matmuls and convolutions (faster on Ampere and later GPUs, 10-bit mantissa inputs); --no-tf32 keeps full fp32. No effect on CPU (docs/gpu.md)"""
    capture_video: bool = False
    """(CleanRL flag; video needs moviepy, not in requirements.txt) rejected with a clear message if set"""
    bf16: bool = False
    """run the networks' trunks under bfloat16 autocast, forward and backward (the output layers, parameters and Adam stay fp32)"""
    eval_episodes: int = 10
    """episodes to evaluate the saved model on (with --save-model)"""
    env_backend: Literal["gymnasium", "envpool"] = "gymnasium"
    """gymnasium 1.x vector envs (fastest for a few envs) or envpool (C++ threads: the way to 100s of envs)"""
    env_threads: int = 0
    """envpool worker threads (0 = one per CPU core this process may use)"""
    torch_threads: int = 1
    """torch intra-op threads (0 = torch's default); a 64-64 MLP gains nothing from more, and idle OpenMP workers spin on the cores envpool's threads need"""
    compile: bool = True
    """torch.compile the update's forward pass and loss (about 30% faster minibatch steps on CPU; compiled in the first iteration, cached on disk; eager, with a warning, where inductor cannot build)"""
    norm_obs: bool = True
    """normalise observations by a running mean and variance (CleanRL's NormalizeObservation)"""
    norm_reward: bool = True
    """scale rewards by the running std of the discounted return (CleanRL's NormalizeReward)"""
    norm_stats: Literal["shared", "per-env"] = "shared"
    """one set of normalisation statistics for all envs (and ranks), or one per env as CleanRL's wrappers keep"""
    norm_clip: float = 10.0
    """normalised observations and rewards are clipped to [-norm_clip, norm_clip]"""
    cleanrl_compat: bool = False
    """CleanRL's semantics, as H25 ran them: truncation as termination (no bootstrap), gymnasium's per-env normalisation (implies --norm-stats per-env), gymnasium envs reset within the done step, no masking on envpool"""

    # Algorithm specific arguments
    env_id: str = "HalfCheetah-v4"
    """the id of the environment (a gymnasium MuJoCo v4/v5 id; with envpool, any id it lists)"""
    total_timesteps: int = 1_000_000
    """total timesteps of the experiments"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    num_envs: int = 1
    """the number of parallel game environments (global count under torchrun)"""
    num_steps: int = 2048
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 32
    """the number of mini-batches"""
    update_epochs: int = 10
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: Optional[float] = None
    """the target KL divergence threshold"""

    # computed at start from the flags above, so not flags themselves (hidden from --help)
    batch_size: tyro.conf.Suppress[int] = 0
    """the batch size (computed in runtime)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """the number of iterations (computed in runtime)"""


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
# Environment and agent
# ---------------------------------------------------------------------------------------------------------
def import_envpool():
    with contextlib.redirect_stderr(io.StringIO()):  # envpool imports the old gym, which prints a notice
        import envpool
    return envpool


def quiet_gymnasium():
    import warnings
    import gymnasium as gym
    import mujoco
    warnings.filterwarnings("ignore", module="gymnasium")  # v4 ids print a deprecation notice per env
    # gymnasium's HalfCheetah XML uses an attribute MuJoCo 4 deprecates: unhandled, every env build prints the
    # notice and appends it to MUJOCO_LOG.TXT in the working directory
    mujoco.set_mju_user_warning(mujoco_warning)
    return gym


def mujoco_warning(message: str) -> None:
    if "settotalmass" not in message:
        print(f"MuJoCo warning: {message}", file=sys.stderr)


def gymnasium_mujoco_ids() -> list:
    gym = quiet_gymnasium()
    return sorted(k for k, spec in gym.registry.items()
                  if isinstance(spec.entry_point, str) and spec.entry_point.startswith("gymnasium.envs.mujoco"))


def env_threads(num_envs: int, requested: int = 0) -> int:
    """envpool's workers: `requested` (--env-threads), else one per core this process may use, at most one per env.
    envpool's default counts the machine's cores, i.e. many threads per allowed core under a Slurm cpuset or taskset;
    torchrun's ranks on a node share the cores."""
    cores = max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return min(requested or cores, num_envs)


def make_envs(env_id: str, num_envs: int, seed: int, backend: str, threads: int = 0, same_step: bool = False):
    """num_envs environments with NEXT_STEP autoreset on both backends: the step after a done returns the first
    observation of the next episode (reward 0, not done) and ignores its action. same_step (gymnasium only):
    the done step itself returns the next episode's first observation, the terminal one in info["final_obs"]
    (the autoreset of gymnasium 0.29, which CleanRL's ppo_continuous_action.py ran on)."""
    if backend == "envpool":
        envpool = import_envpool()
        return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed,
                            num_threads=env_threads(num_envs, threads))
    gym = quiet_gymnasium()
    mode = gym.vector.AutoresetMode.SAME_STEP if same_step else gym.vector.AutoresetMode.NEXT_STEP
    if num_envs == 1:
        envs = OneEnv(gym.make(env_id, disable_env_checker=True), same_step)
    else:
        envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id, disable_env_checker=True) for _ in range(num_envs)],
                                        copy=False, autoreset_mode=mode)
    envs.reset(seed=seed)  # env i is seeded with seed + i; the reset() in main then draws from its own RNG
    return envs


class OneEnv:
    """One gymnasium env behind the vector API, with SyncVectorEnv's NEXT_STEP or SAME_STEP autoreset (same seeds,
    same trajectories): at CleanRL's 1 env, SyncVectorEnv's bookkeeping (info merging, copies) costs half a MuJoCo step."""

    def __init__(self, env, same_step: bool = False):
        self.envs = [env]
        self.single_observation_space, self.single_action_space = env.observation_space, env.action_space
        self._autoreset_envs = np.zeros(1, dtype=bool)
        self.same_step = same_step

    def reset(self, seed=None):
        obs, info = self.envs[0].reset(seed=seed)
        self._autoreset_envs[0] = False
        return obs[None], info

    def step(self, actions):
        if self._autoreset_envs[0]:  # the step after a done resets and ignores its action
            (obs, info), reward, term, trunc = self.envs[0].reset(), 0.0, False, False
        else:
            obs, reward, term, trunc, info = self.envs[0].step(actions[0])
        if self.same_step and (term or trunc):  # SyncVectorEnv's SAME_STEP info layout
            final_obs = np.empty(1, dtype=object)
            final_obs[0] = obs
            obs, info = self.envs[0].reset()
            info = {"final_obs": final_obs, "_final_obs": np.array([True])}
        else:
            self._autoreset_envs[0] = term or trunc
        return obs[None], np.array([reward], dtype=np.float64), np.array([term]), np.array([trunc]), info

    def close(self):
        self.envs[0].close()


def get_env_state(envs) -> Optional[dict]:
    """gymnasium MuJoCo envs: physics integration state, RNG, time limit and autoreset flags, which is all a
    resumed run needs to continue bit for bit; None for envpool (its state cannot be read)."""
    if not hasattr(envs, "envs"):
        return None
    import mujoco
    states = []
    for env in envs.envs:
        base = env.unwrapped
        if not hasattr(base, "model") or not hasattr(base, "data"):
            return None
        physics = np.empty(mujoco.mj_stateSize(base.model, mujoco.mjtState.mjSTATE_INTEGRATION))
        mujoco.mj_getState(base.model, base.data, physics, mujoco.mjtState.mjSTATE_INTEGRATION)
        states.append({"physics": physics, "rng": base.np_random.bit_generator.state,
                       "elapsed": time_limit(env)._elapsed_steps})
    return {"envs": states, "autoreset": envs._autoreset_envs.copy()}


def set_env_state(envs, state: dict) -> None:
    import mujoco
    for env, saved in zip(envs.envs, state["envs"]):
        base = env.unwrapped
        mujoco.mj_setState(base.model, base.data, saved["physics"], mujoco.mjtState.mjSTATE_INTEGRATION)
        base.np_random.bit_generator.state = saved["rng"]
        time_limit(env)._elapsed_steps = saved["elapsed"]
    envs._autoreset_envs = state["autoreset"].copy()  # gymnasium keeps the NEXT_STEP flags privately


def time_limit(env):
    while not hasattr(env, "_elapsed_steps"):
        env = env.env
    return env


class RunningMeanStd:
    """Running mean and variance, merged batch by batch (Chan et al.'s parallel algorithm, as gymnasium's
    RunningMeanStd). shape [N, ...] with per_env keeps one statistic per row; shared merges all rows (and all
    torchrun ranks) into one."""

    def __init__(self, shape, num_envs: int, per_env: bool, world_size: int = 1):
        lead = (num_envs,) if per_env else ()
        self.mean = np.zeros(lead + tuple(shape))
        self.var = np.ones(lead + tuple(shape))
        self.count = np.full(lead + (1,) * len(shape), 1e-4)
        self.per_env, self.world_size = per_env, world_size

    def update(self, x: np.ndarray, mask: Optional[np.ndarray] = None) -> None:
        """x [N, ...]; rows with mask False are left out."""
        x = np.asarray(x, dtype=np.float64)
        if self.per_env:  # each row is a batch of one (or zero) samples of its own env's statistic
            count = np.ones(self.count.shape) if mask is None else mask.reshape(self.count.shape).astype(np.float64)
            self.merge(x, np.zeros_like(x), count)
            return
        rows = x if mask is None else x[mask]
        count = float(len(rows))
        mean = rows.sum(axis=0) / max(count, 1.0)
        m2 = np.square(rows - mean).sum(axis=0)
        if self.world_size > 1:  # gather every rank's batch moments and merge them in rank order
            on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None  # NCCL: CUDA only
            local = torch.as_tensor(np.concatenate([[count], mean.ravel(), m2.ravel()]), device=on)
            gathered = [torch.zeros_like(local) for _ in range(self.world_size)]
            dist.all_gather(gathered, local)
            parts = [g.cpu().numpy() for g in gathered]
            count, mean, m2 = parts[0][0], parts[0][1:1 + mean.size].reshape(mean.shape), parts[0][1 + mean.size:].reshape(m2.shape)
            for p in parts[1:]:
                c, mu, m = p[0], p[1:1 + mean.size].reshape(mean.shape), p[1 + mean.size:].reshape(m2.shape)
                total = count + c
                if total > 0:
                    delta = mu - mean
                    mean, m2, count = mean + delta * c / total, m2 + m + delta ** 2 * count * c / total, total
        if count > 0:
            self.merge(mean, m2 / count, count)

    def merge(self, batch_mean, batch_var, batch_count) -> None:
        total = self.count + batch_count
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta ** 2 * self.count * batch_count / total
        self.var = m2 / total
        self.count = total

    def pooled(self) -> tuple:
        """(mean, var) over all envs: per-env statistics merged into one (for evaluation)."""
        if not self.per_env:
            return self.mean, self.var
        w = self.count / self.count.sum()
        mean = (w * self.mean).sum(axis=0)
        return mean, (w * (self.var + (self.mean - mean) ** 2)).sum(axis=0)


def normalize(obs, mean, var, clip) -> np.ndarray:
    return np.clip((obs - mean) / np.sqrt(var + 1e-8), -clip, clip).astype(np.float32)


class Normalizer:
    """CleanRL's NormalizeObservation + NormalizeReward + clipping at 10, vectorised over envs and done in the
    script so that both backends, checkpoints and the saved model share it. The discounted return whose std
    scales the reward restarts at every episode start; gymnasium's wrapper (--cleanrl-compat) restarts it with a
    termination's own reward and never on truncation. The reset step of NEXT_STEP autoreset is not a sample of
    the return statistic; an observation is a sample of the observation statistic whenever the env returns it
    (also the terminal one and the first of an episode, as gymnasium's wrapper sees them)."""

    def __init__(self, obs_shape, num_envs: int, args, world_size: int = 1):
        per_env = args.norm_stats == "per-env"
        self.gymnasium_return = args.cleanrl_compat
        self.obs_rms = RunningMeanStd(obs_shape, num_envs, per_env, world_size)
        self.ret_rms = RunningMeanStd((), num_envs, per_env, world_size)
        self.ret = np.zeros(num_envs)
        self.norm_obs, self.norm_reward, self.clip, self.gamma = args.norm_obs, args.norm_reward, args.norm_clip, args.gamma

    def obs(self, obs: np.ndarray, update: bool = True, final: Optional[tuple] = None) -> np.ndarray:
        """Normalised float32 observations [N, ...]; the statistics first take in this batch, preceded by the
        terminal observations `final` = (obs [N, ...], mask [N]) that a SAME_STEP autoreset left in info."""
        if not self.norm_obs:
            return obs.astype(np.float32)
        if update:
            if final is not None:
                self.obs_rms.update(*final)
            self.obs_rms.update(obs)
        return normalize(obs, self.obs_rms.mean, self.obs_rms.var, self.clip)

    def reward(self, reward: np.ndarray, reset_step: np.ndarray, terminated: np.ndarray) -> np.ndarray:
        if not self.norm_reward:
            return reward.astype(np.float32)
        if self.gymnasium_return:  # gymnasium's NormalizeReward: G = G * gamma * (1 - terminated) + r
            self.ret = np.where(reset_step, self.ret, self.ret * self.gamma * (1.0 - terminated) + reward)
        else:
            self.ret = np.where(reset_step, 0.0, self.ret * self.gamma + reward)
        self.ret_rms.update(self.ret, ~reset_step)
        normed = reward / np.sqrt(self.ret_rms.var + 1e-8)
        return np.clip(normed, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict:
        state = {f"{name}_{key}": getattr(rms, key).copy() for name, rms in (("obs", self.obs_rms), ("ret", self.ret_rms))
                 for key in ("mean", "var", "count")}
        return state | {"ret": self.ret.copy()}

    def load_state_dict(self, state: dict, restart_returns: bool = False) -> None:
        for name, rms in (("obs", self.obs_rms), ("ret", self.ret_rms)):
            for key in ("mean", "var", "count"):
                setattr(rms, key, state[f"{name}_{key}"].copy())
        self.ret = np.zeros_like(self.ret) if restart_returns else state["ret"].copy()


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(obs_dim: int, out_dim: int, out_std: float) -> nn.Sequential:
    return nn.Sequential(
        layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
        layer_init(nn.Linear(64, 64)), nn.Tanh(),
        layer_init(nn.Linear(64, out_dim), std=out_std),
    )


def mlp_forward(net: nn.Sequential, x):
    """net(x) as three functional calls: nn.Module's per-call overhead is most of a 64-unit layer's cost on CPU.
    While the diagnostics hook the Tanh modules, the modules run instead (the same numbers)."""
    l1, tanh1, l2, tanh2, l3 = net
    if tanh1._forward_hooks or tanh2._forward_hooks:
        x = tanh2(l2(tanh1(l1(x))))
    else:
        x = torch.tanh(nn.functional.linear(x, l1.weight, l1.bias))
        x = torch.tanh(nn.functional.linear(x, l2.weight, l2.bias))
    if x.dtype == torch.float32:
        return nn.functional.linear(x, l3.weight, l3.bias)
    # --bf16: the trunk runs in bf16, the head in fp32 (bf16 would round values and action means to 8 bits)
    with torch.autocast(x.device.type, enabled=False):
        return nn.functional.linear(x.float(), l3.weight, l3.bias)


class Agent(nn.Module):
    """The contract the rest of the script relies on (docs/ppo_continuous_mujoco.md, Changing the network):
    agent(normalised observations [B, obs_dim]) -> (mean [B, act_dim], logstd [1 or B, act_dim], value [B]);
    optional: watched_activations() and critic_parameters(), read by the diagnostics."""

    def __init__(self, obs_dim: int, act_dim: int):
        super().__init__()
        self.actor_mean = mlp(obs_dim, act_dim, 0.01)
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))  # state-independent, as CleanRL
        self.critic = mlp(obs_dim, 1, 1.0)

    def forward(self, obs):
        """normalised observations [B, obs_dim] -> (mean [B, act_dim], logstd [1, act_dim], value [B])."""
        return mlp_forward(self.actor_mean, obs), self.actor_logstd, mlp_forward(self.critic, obs).squeeze(-1)

    def watched_activations(self) -> dict:
        """The Tanhs of the actor's and the critic's MLP, whose outputs the diagnostics read (the last = features)."""
        return {"": activation_modules(self.actor_mean), "critic_": activation_modules(self.critic)}

    def critic_parameters(self) -> list:
        """The critic MLP's parameters (critic_weight_norm); the actor's are the mean MLP's and logstd."""
        return list(self.critic.parameters())


LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def gaussian_logprob(mean, logstd, actions):
    """log N(actions; mean, exp(logstd)^2) summed over action dimensions (torch.distributions.Normal's)."""
    return (-0.5 * ((actions - mean) / logstd.exp()) ** 2 - logstd - LOG_SQRT_2PI).sum(-1)


def sample_actions(mean, logstd) -> tuple:
    """a = mean + std * noise: the same distribution as Normal(mean, std).sample(), without its overhead."""
    noise = torch.randn_like(mean)
    actions = mean + logstd.exp() * noise
    return actions, -0.5 * (noise * noise).sum(-1) - (logstd + LOG_SQRT_2PI).sum(-1)


def spaces(envs) -> tuple:
    """(observation space, action space) of one env, for gymnasium vector envs and envpool alike."""
    if hasattr(envs, "single_observation_space"):
        return envs.single_observation_space, envs.single_action_space
    return envs.observation_space, envs.action_space


# ---------------------------------------------------------------------------------------------------------
# Rollout, advantages and update
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Storage:
    obs: torch.Tensor  # normalised float32 [T, N, obs_dim]
    actions: torch.Tensor  # the sampled (unclipped) actions [T, N, act_dim]
    logprobs: torch.Tensor
    rewards: torch.Tensor  # normalised
    dones: torch.Tensor  # obs[t] ends an episode: the env ignores actions[t] and resets
    terminations: torch.Tensor  # obs[t] is terminal (no bootstrap); a truncation bootstraps from V(obs[t])
    values: torch.Tensor


def make_storage(num_steps, num_envs, obs_shape, act_shape, device) -> Storage:
    def zeros(dtype=torch.float32, shape=()):
        return torch.zeros((num_steps, num_envs) + shape, dtype=dtype, device=device)
    return Storage(obs=zeros(shape=obs_shape), actions=zeros(shape=act_shape), logprobs=zeros(),
                   rewards=zeros(), dones=zeros(), terminations=zeros(), values=zeros())


class Batch(NamedTuple):
    """The rollout flattened over T x N (row t * N + n), what the update reads."""
    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    values: torch.Tensor
    valid: torch.Tensor  # 0 for a step whose action the env ignored (valid_mask)


class EpisodeStats:
    """Return (raw reward, before normalisation) and length of every finished episode, also truncated ones."""

    def __init__(self, num_envs):
        self.returns = np.zeros(num_envs)
        self.lengths = np.zeros(num_envs, dtype=np.int64)

    def update(self, reward, terminated, truncated, reset_step) -> list:
        self.returns = np.where(reset_step, 0.0, self.returns + reward)  # a reset step is no step of an episode
        self.lengths = np.where(reset_step, 0, self.lengths + 1)
        ended = np.flatnonzero(np.logical_or(terminated, truncated))
        finished = [(float(self.returns[i]), int(self.lengths[i])) for i in ended]
        self.returns[ended], self.lengths[ended] = 0.0, 0  # SAME_STEP autoreset has no reset step to do it
        return finished


def final_observations(info: dict, obs: np.ndarray) -> Optional[tuple]:
    """(terminal observations [N, ...], mask [N]) from a SAME_STEP autoreset's info, or None."""
    if "final_obs" not in info:
        return None
    mask = np.asarray(info["_final_obs"], dtype=bool)
    final = obs.copy()
    final[mask] = np.stack(info["final_obs"][mask])
    return final, mask


def uses_same_step(args) -> bool:
    """--cleanrl-compat on gymnasium reproduces gymnasium 0.29's autoreset within the done step (no reset step)."""
    return args.cleanrl_compat and args.env_backend == "gymnasium"


class NextStep(NamedTuple):
    """Where the rollout continues from (CleanRL's next_obs, next_done): the envs' current observations and
    their done and terminated flags, which the last step of GAE reads."""
    obs: torch.Tensor
    done: torch.Tensor
    terminated: torch.Tensor


def collect_rollout(envs, agent, storage, state, stats, normalizer, args, device, autocast, ranks):
    """Run num_steps in every env; returns (episodes finished, the NextStep after the rollout). Under torchrun
    every rank samples the whole batch's actions from all ranks' means and keeps its own envs' (torchrun = one
    process)."""
    next_obs, next_done, next_term = state
    same_step = uses_same_step(args)
    reset_step = (next_done.cpu().numpy() > 0) & (not same_step)
    act_space = spaces(envs)[1]
    finished = []
    # One autocast region for the whole rollout: under --bf16 its cache casts the weights (fixed during the
    # rollout) once, not at every step
    with torch.no_grad(), autocast():
        for step in range(args.num_steps):
            storage.obs[step] = next_obs
            storage.dones[step] = next_done
            storage.terminations[step] = next_term
            mean, logstd, value = agent(next_obs)
            action, logprob = sample_actions(ranks.gather_envs(mean.float()), logstd.float())
            action, logprob = ranks.own_envs(action), ranks.own_envs(logprob)
            storage.values[step] = value.float()
            storage.actions[step] = action
            storage.logprobs[step] = logprob
            # CleanRL's ClipAction: the env gets the clipped action, the batch keeps the sampled one
            env_action = np.clip(action.cpu().numpy(), act_space.low, act_space.high)
            obs_np, reward, term, trunc, info = envs.step(env_action)
            finished += stats.update(reward, term, trunc, reset_step)
            storage.rewards[step] = torch.as_tensor(normalizer.reward(reward, reset_step, term), device=device)
            next_obs = torch.as_tensor(normalizer.obs(obs_np, final=final_observations(info, obs_np)), device=device)
            # NEXT_STEP: the step after a done is a reset step; SAME_STEP (--cleanrl-compat, gymnasium) has none
            done = np.logical_or(term, trunc)
            reset_step = done & (not same_step)
            next_term = torch.as_tensor(term.astype(np.float32), device=device)  # cast in numpy: cheaper than in torch
            next_done = torch.as_tensor(done.astype(np.float32), device=device)
    return finished, NextStep(next_obs, next_done, next_term)


def compute_advantages(rewards, values, dones, terminations, next_value, next_done, next_term, gamma, lam):
    """GAE (Schulman et al. 2016) with NEXT_STEP auto-reset (envpool and gymnasium 1.x alike): dones[t+1] marks
    obs[t+1] as the last of its episode, so the trace stops there; only a termination (not a truncation) drops
    the bootstrap V(obs[t+1])."""
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(next_value)
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            v_next, done_next, term_next = next_value, next_done, next_term
        else:
            v_next, done_next, term_next = values[t + 1], dones[t + 1], terminations[t + 1]
        delta = rewards[t] + gamma * v_next * (1.0 - term_next) - values[t]
        lastgaelam = delta + gamma * lam * (1.0 - done_next) * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def masked_mean(x, valid, count):
    """Sum of x over the valid samples, divided by count (the whole minibatch's valid samples, so that ranks add
    up to the minibatch mean), as a dot with valid / count: this script's reduction since its first version (the
    image scripts' (x * valid).sum() / count rounds otherwise)."""
    return torch.dot(x, valid / count)


def normalize_advantages(advantages, valid, count, ranks):
    """Per-minibatch normalisation over its valid samples (CleanRL's, with the unbiased std); under torchrun
    over every rank's share of the minibatch. count: the minibatch's valid samples (at least 1)."""
    mean = ranks.sum(masked_mean(advantages, valid, count))
    var = ranks.sum(masked_mean((advantages - mean) ** 2, valid, count)) * count / (count - 1).clamp(min=1.0)
    return (advantages - mean) / (var.sqrt() + 1e-8)


def evaluate_actions(agent, obs, actions) -> tuple:
    """(log pi(a|s), entropy of pi(.|s), V(s)) under the current weights: the Gaussian head's part of the loss."""
    mu, logstd, newvalue = agent(obs)
    mu, logstd, newvalue = mu.float(), logstd.float(), newvalue.float()
    newlogprob = gaussian_logprob(mu, logstd, actions)
    entropy = (0.5 + LOG_SQRT_2PI + logstd).sum(-1).expand(mu.shape[0])
    return newlogprob, entropy, newvalue


class LossStats(NamedTuple):
    """CleanRL's losses/* of one minibatch, named as their tags (0-d tensors, on the device until logged)."""
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor
    old_approx_kl: torch.Tensor
    approx_kl: torch.Tensor
    clipfrac: torch.Tensor

    def floats(self) -> "LossStats":
        """The same statistics as Python floats, in one device-to-host copy."""
        return LossStats(*torch.stack(self).tolist())


def ppo_loss(agent, obs, actions, logprobs, advantages, returns, values, valid, count, args):
    """CleanRL's clipped surrogate, clipped value loss and entropy bonus on (normalised) advantages, each a
    masked_mean over the valid samples given (a step whose action the env ignored, right after a done, carries
    no learning signal). Returns (loss, LossStats)."""
    newlogprob, entropy, newvalue = evaluate_actions(agent, obs, actions)
    logratio = newlogprob - logprobs
    ratio = logratio.exp()
    def mean(x):
        return masked_mean(x, valid, count)
    with torch.no_grad():
        old_approx_kl = mean(-logratio)
        approx_kl = mean((ratio - 1) - logratio)
        clipfrac = mean(((ratio - 1.0).abs() > args.clip_coef).float())
    pg_loss = mean(torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)))
    if args.clip_vloss:
        v_clipped = values + torch.clamp(newvalue - values, -args.clip_coef, args.clip_coef)
        v_loss = 0.5 * mean(torch.max((newvalue - returns) ** 2, (v_clipped - returns) ** 2))
    else:
        v_loss = 0.5 * mean((newvalue - returns) ** 2)
    entropy_loss = mean(entropy)
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    return loss, LossStats(policy_loss=pg_loss.detach(), value_loss=v_loss.detach(), entropy=entropy_loss.detach(),
                           old_approx_kl=old_approx_kl, approx_kl=approx_kl, clipfrac=clipfrac)


def minibatch_gradient(agent, batch, idx, args, autocast, loss_fn, ranks) -> LossStats:
    """Backpropagate one minibatch's loss. Under torchrun idx is this rank's share of the minibatch; the count,
    the advantage statistics and the returned LossStats are the whole minibatch's."""
    valid = batch.valid[idx]
    count = ranks.sum(valid.sum()).clamp(min=1.0)
    advantages = batch.advantages[idx]
    if args.norm_adv:
        advantages = normalize_advantages(advantages, valid, count, ranks)
    with autocast():
        loss, stats = loss_fn(agent, batch.obs[idx], batch.actions[idx], batch.logprobs[idx], advantages,
                              batch.returns[idx], batch.values[idx], valid, count, args)
    loss.backward()
    return LossStats(*ranks.sum(torch.stack(stats)))


def update(agent, optimizer, batch, args, mb_size, autocast, ranks, probe=None, loss_fn=ppo_loss) -> tuple:
    """update_epochs passes over the batch in minibatches; returns (LossStats as CleanRL logs them: the last
    minibatch's, with the clip fraction averaged over all minibatches; the mean grad norm; the number of steps).
    `probe` (diagnostics) is called after every optimizer step and sees the first gradient. mb_size is the whole
    minibatch: under torchrun every rank draws the permutation of all ranks' rows and works on its share."""
    device = batch.valid.device
    n = len(batch.valid) * ranks.world_size
    clipfrac_sum = torch.zeros((), device=device)
    grad_norm_sum = torch.zeros((), device=device)
    steps = 0
    for epoch in range(args.update_epochs):
        perm = torch.randperm(n, device=device)
        for start in range(0, n, mb_size):
            optimizer.zero_grad(set_to_none=True)
            idx = ranks.local_rows(perm[start:start + mb_size], args.num_envs)
            stats = minibatch_gradient(agent, batch, idx, args, autocast, loss_fn, ranks)
            ranks.allreduce_gradients(agent)
            if probe is not None and steps == 0:
                probe.first_gradient(agent)
            grad_norm_sum += nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            clipfrac_sum += stats.clipfrac
            steps += 1
            if probe is not None:
                probe.after_step(agent)
        if args.target_kl is not None and stats.approx_kl.item() > args.target_kl:  # the same on every rank
            break
    return stats._replace(clipfrac=clipfrac_sum / steps), grad_norm_sum / steps, steps


# ---------------------------------------------------------------------------------------------------------
# Diagnostics (docs/metrics.md#diagnostics): read-only forward passes on a fixed state set, no RNG draws, no gradients
# ---------------------------------------------------------------------------------------------------------
def flat_numpy(tensors) -> np.ndarray:
    return np.concatenate([t.detach().reshape(-1).float().cpu().numpy() for t in tensors])


PROFILE_BYTES = 256 << 20  # the KL profile keeps mu(s) of every policy pi_0..pi_J; beyond this, fewer states


class DiagnosticProbe:
    def __init__(self, agent, obs, actions, autocast, num_policies):
        self.obs, self.actions, self.autocast = obs, actions, autocast
        self.params_before = [p.detach().clone() for p in agent.parameters()]
        # H25 Fig. 2 at 1000 minibatches x 10 epochs is 10^4 policies: the profile uses an evenly strided subset
        keep = max(2, min(len(obs), PROFILE_BYTES // (4 * actions.shape[1] * num_policies)))
        self.profile_idx = torch.as_tensor(diagnostic_states(len(obs), keep), device=obs.device)
        self.behavior = self.policy(agent, self.obs)  # pi_0 = the behaviour policy, on every diagnostic state
        self.mus = [self.behavior[0][self.profile_idx.cpu().numpy()].astype(np.float32)]
        self.logstds = [self.behavior[1]]
        self.grad = None

    def policy(self, agent, obs) -> tuple:
        with torch.no_grad(), self.autocast():
            mean, logstd, _ = agent(obs)
        return mean.float().cpu().numpy().astype(np.float64), logstd.detach().float().cpu().numpy().astype(np.float64)

    def first_gradient(self, agent):
        self.grad = flat_numpy([p.grad for p in agent.parameters() if p.grad is not None])

    def after_step(self, agent):
        mean, logstd = self.policy(agent, self.obs[self.profile_idx])
        self.mus.append(mean.astype(np.float32))
        self.logstds.append(logstd)

    def __call__(self, i, j):
        return gaussian_kl(self.mus[i].astype(np.float64), self.logstds[i], self.mus[j].astype(np.float64), self.logstds[j])

    @property
    def num_policies(self):
        return len(self.mus)

    def results(self, agent, batch_size, grad_norm) -> tuple:
        (mu_behavior, logstd_behavior), (mu_after, logstd_after) = self.behavior, self.policy(agent, self.obs)
        kl_behavior = float(np.mean(gaussian_kl(mu_behavior, logstd_behavior, mu_after, logstd_after)))
        seq, ref = kl_profile(self)
        acts = self.actions.cpu().numpy().astype(np.float64)
        def logp(mu, logstd):  # the log(2 pi) constants cancel in the ratio
            return np.sum(-0.5 * ((acts - mu) / np.exp(logstd)) ** 2 - logstd, axis=-1)
        log_ratio = logp(mu_after, logstd_after) - logp(mu_behavior, logstd_behavior)
        out = {
            "diagnostics/kl_behavior": kl_behavior,
            "diagnostics/ddr": batch_size / max(kl_behavior, 1e-12),  # B26 §4.4
            "diagnostics/seq_kl_mean": float(np.mean(seq)),
            "diagnostics/ref_kl_mean": float(np.mean(ref)),
            "diagnostics/update_size": float(np.linalg.norm(flat_numpy(agent.parameters()) - flat_numpy(self.params_before))),
            "diagnostics/grad_norm": float(grad_norm),
            "diagnostics/grad_kurtosis": log_grad_kurtosis(self.grad),
            "diagnostics/ess_pct": ess_pct(log_ratio),
            "diagnostics/policy_variance": policy_variance(mu_after),
            "diagnostics/weight_norm": float(np.linalg.norm(flat_numpy(agent.parameters()))),
        }
        for prefix, (features, magnitudes) in record_activations(agent, [self.obs]).items():
            rank, srank = feature_ranks(features)
            dormant = dormant_fractions(magnitudes)  # on |h|: a tanh unit is dormant when it stays near 0
            out[f"diagnostics/{prefix}feature_rank"] = rank
            out[f"diagnostics/{prefix}srank"] = srank
            out[f"diagnostics/{prefix}dormant_frac"] = dormant[0.025]
            out[f"diagnostics/{prefix}dormant_frac_tau0"] = dormant[0.0]
            out[f"diagnostics/{prefix}dormant_frac_tau0.1"] = dormant[0.1]
        out.update(actor_critic_weight_norms(agent))
        return out, seq, ref


def diagnostic_states(num_states: int, limit: int) -> np.ndarray:
    """A fixed, evenly strided subset of the batch: deterministic, so no draw from the training RNG."""
    return np.linspace(0, num_states - 1, min(num_states, limit)).round().astype(np.int64)


# ---------------------------------------------------------------------------------------------------------
# Evaluation of a saved model (raw reward; observations normalised with the statistics saved with it)
# ---------------------------------------------------------------------------------------------------------
def evaluate(model_path, env_id, eval_episodes, backend, device, seed):
    envs = make_envs(env_id, eval_episodes, seed, backend)
    obs_space, act_space = spaces(envs)
    model = torch.load(model_path, map_location="cpu")  # the normaliser's statistics are read as NumPy arrays
    agent = Agent(obs_space.shape[0], act_space.shape[0]).to(device)
    agent.load_state_dict(model["agent"])
    stats = EpisodeStats(eval_episodes)
    obs, _ = envs.reset()
    episode_returns = np.full(eval_episodes, np.nan)
    reset_step = np.zeros(eval_episodes, dtype=bool)
    while np.isnan(episode_returns).any():
        normed = normalize(obs, model["obs_mean"].numpy(), model["obs_var"].numpy(), model["norm_clip"]) if model["norm_obs"] else obs
        with torch.no_grad():
            mean, logstd, _ = agent(torch.as_tensor(normed, dtype=torch.float32, device=device))
            action, _ = sample_actions(mean, logstd)
        obs, reward, term, trunc, info = envs.step(np.clip(action.cpu().numpy(), act_space.low, act_space.high))
        for i, (ep_return, _) in zip(np.flatnonzero(np.logical_or(term, trunc)), stats.update(reward, term, trunc, reset_step)):
            if np.isnan(episode_returns[i]):
                episode_returns[i] = ep_return
        reset_step = np.logical_or(term, trunc)
    envs.close()
    return episode_returns


# ---------------------------------------------------------------------------------------------------------
# Main: the algorithm box; set-up, resume and run-directory plumbing in the named functions above it
# ---------------------------------------------------------------------------------------------------------
SCRIPT = "ppo_continuous_mujoco"


def env_ids(backend: str) -> list:
    """gymnasium's MuJoCo v4 and v5 ids (v2/v3 need mujoco-py); with envpool, its ids of the same tasks."""
    families = {i.rsplit("-v", 1)[0] for i in gymnasium_mujoco_ids()}
    if backend == "gymnasium":
        return [i for i in gymnasium_mujoco_ids() if i.endswith(("-v4", "-v5"))]
    return [i for i in import_envpool().list_all_envs() if i.rsplit("-v", 1)[0] in families]


def validate(args) -> dict:
    """Every user mistake is caught here, before any env or network is built
    (docs/run_directory.md#failure-behaviour)."""
    check_finite_floats(args)
    if args.cleanrl_compat:  # CleanRL's gymnasium wrappers keep their statistics per env
        args.norm_stats = "per-env"
    known = env_ids(args.env_backend)
    check(args.env_id in known, f"--env-id {args.env_id!r} is not a MuJoCo id of the {args.env_backend} backend "
          f"(e.g. {', '.join(known[:3])}; see --env-backend)")
    check(args.total_timesteps > 0, f"--total-timesteps must be > 0 (got {args.total_timesteps})")
    check_ppo_flags(args)
    check(args.norm_clip > 0, f"--norm-clip must be > 0 (got {args.norm_clip})")
    check(args.env_threads >= 0, f"--env-threads must be >= 0 (got {args.env_threads})")
    check(args.torch_threads >= 0, f"--torch-threads must be >= 0 (got {args.torch_threads})")
    check(args.checkpoint_every >= 0, f"--checkpoint-every must be >= 0 (got {args.checkpoint_every})")
    check(args.diagnostics_every >= 0, f"--diagnostics-every must be >= 0 (got {args.diagnostics_every})")
    check(args.diagnostics_states >= 2, f"--diagnostics-states must be >= 2 (got {args.diagnostics_states})")
    check(args.eval_episodes >= 1, f"--eval-episodes must be >= 1 (got {args.eval_episodes})")
    check(not args.capture_video, "--capture-video: needs moviepy, which requirements.txt does not pin; "
          "evaluate the saved model with --save-model")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    check(args.num_envs % world_size == 0,
          f"--num-envs {args.num_envs} must be divisible by the {world_size} torchrun ranks")
    check_scaling_flags(args)
    scaling = resolve_scaling(args)  # under torchrun a minibatch is formed over all ranks' rows: any size works
    check_scaling(args, scaling)
    return scaling


# Flags a resume may change besides the shared ones: the evaluation of --save-model (its own envs, after training),
# --init-from, which --resume overrides, and --env-threads (envpool steps each env alone)
RESUMABLE = ("eval_episodes", "init_from", "env_threads")
# what --init-from must share with its checkpoint: the task, whose observations its weights and statistics describe
INIT_FROM_KEYS = ("env_id",)


def load_start(args, signature: dict, scaling: dict):
    """The checkpoint to start from, or None. --resume wins over --init-from: an interrupted new run continues from its
    own checkpoint (the launcher's --resume-unfinished appends --resume to an argv that holds --init-from)."""
    if args.resume:
        implied = older_signature(args, RESUMABLE)
        return load_checkpoint(args.resume, SCRIPT, signature, implied=implied, resolved=scaling,
                               new_run=f"--init-from {args.resume} instead of --resume for a new run from its weights")
    if args.init_from:
        init = load_checkpoint(args.init_from, SCRIPT, {key: signature[key] for key in INIT_FROM_KEYS}, "--init-from")
        check_statistics_layout(init["args"], args)
        return init
    return None


def check_statistics_layout(saved: dict, args) -> None:
    """--init-from carries the normaliser's statistics: shared ones onto any envs, per-env ones onto as many envs."""
    def layout(a: dict) -> str:
        return "shared" if a["norm_stats"] == "shared" else f"per-env over {a['num_envs']} envs"
    if saved["norm_stats"] == "shared":
        fix = "--norm-stats shared" + (" without --cleanrl-compat (it keeps them per env)" if args.cleanrl_compat else "")
    else:
        fix = f"--norm-stats per-env --num-envs {saved['num_envs']}"
    check(layout(saved) == layout(vars(args)), f"--init-from: the checkpoint's normaliser statistics are "
          f"{layout(saved)}, this run's {layout(vars(args))}; pass {fix}")


def read_args() -> tuple:
    """Args from the command line with the scaling resolved, their resume signature, and the checkpoint to start from
    (--resume or --init-from, or None); every usage error exits 2 here, before anything heavy starts."""
    args = tyro.cli(Args, description=help_description(__doc__))
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
    """One torch stream on every rank (the same weights; every rank draws the whole batch's samples)."""
    random.seed(args.seed + rank)
    np.random.seed(args.seed + rank)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)


def build_agent(args, obs_dim: int, act_dim: int, device) -> tuple:
    """The agent, its Adam and the (maybe compiled) loss; the torch stream is reseeded after the weights are drawn
    (CleanRL's order)."""
    agent = Agent(obs_dim, act_dim).to(device)
    try:
        if args.diagnostics_every > 0:
            check_watched_activations(agent, SCRIPT)
        observations = torch.zeros((2, obs_dim), device=device)
        check_network_outputs(agent, observations, {"mean": [[2, act_dim]], "logstd": [[1, act_dim], [2, act_dim]],
                                                    "value": [[2]]}, SCRIPT)
    except UsageError as e:
        exit_usage(e)
    # fused Adam: one kernel for all parameters instead of a dozen small ops per tensor
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    loss_fn = maybe_compile(ppo_loss, args.compile)
    torch.manual_seed(args.seed)
    return agent, optimizer, loss_fn


def restore(ckpt: dict, saved: dict, agent, optimizer, args, device) -> None:
    """Weights, Adam state and this rank's RNG streams from a checkpoint."""
    load_weights(agent, ckpt["agent"])
    optimizer.load_state_dict(ckpt["optimizer"])
    optimizer.param_groups[0]["lr"] = args.learning_rate  # this run's --learning-rate, not the saved one
    rng = saved["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and rng.get("cuda") is not None:
        torch.cuda.set_rng_state(rng["cuda"], device)


def start_from(init: dict, agent, args, rank: int) -> None:
    """--init-from: the checkpoint's weights (its normaliser's statistics come through start_envs); Adam, the RNG
    streams and the counters are this new run's."""
    load_weights(agent, init["agent"], "--init-from")
    if rank == 0:
        print(f"starting from {args.init_from} (weights of iteration {init['iteration']}, step {init['global_step']}); "
              "new run with this run's flags")


def init_statistics(init: Optional[dict], rank: int, local_envs: int) -> Optional[dict]:
    """--init-from: this rank's start in a checkpoint rank's form: no env state (the envs reset) and the checkpoint's
    normaliser statistics, shared ones as every rank holds them, per-env ones this rank's rows of all envs; None
    without --init-from."""
    if init is None:
        return None
    states = [saved["normalizer"] for saved in init["ranks"]]
    if init["args"]["norm_stats"] == "shared":
        return {"envs": None, "normalizer": states[0]}
    rows = slice(rank * local_envs, (rank + 1) * local_envs)
    return {"envs": None, "normalizer": {key: np.concatenate([s[key] for s in states])[rows] for key in states[0]}}


def start_envs(envs, normalizer, stats, saved, restart: bool, local_envs: int, device) -> tuple:
    """The first NextStep: the saved one where the envs continue from the checkpoint, else a reset (the
    normaliser's statistics continue either way)."""
    if saved is not None and not restart:
        set_env_state(envs, saved["envs"])
        normalizer.load_state_dict(saved["normalizer"])
        stats.returns, stats.lengths = saved["episodes"]
        return NextStep(*(t.to(device) for t in saved["rollout"]))
    if saved is not None:
        normalizer.load_state_dict(saved["normalizer"], restart_returns=True)
    obs_np, _ = envs.reset()
    zeros = torch.zeros(local_envs, device=device)
    return NextStep(torch.as_tensor(normalizer.obs(obs_np), device=device), zeros, zeros)


def save_run_checkpoint(logger, args, signature, iteration, global_step, wall_time, agent, optimizer, envs, normalizer,
                        stats, state, world_size, rank, device):
    """latest.ckpt: weights, Adam, and every rank's RNG streams, env physics, normaliser and episode accumulators
    (gathered to rank 0, which writes)."""
    ranks = [{"rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                      "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None},
              "envs": get_env_state(envs), "normalizer": normalizer.state_dict(),
              "episodes": (stats.returns.copy(), stats.lengths.copy()), "rollout": tuple(t.cpu() for t in state)}]
    if world_size > 1:
        gathered = [None] * world_size
        dist.all_gather_object(gathered, ranks[0])
        ranks = gathered
    if rank == 0:
        save_checkpoint(os.path.join(logger.run_dir, "checkpoints", "latest.ckpt"), {
            "script": SCRIPT, "signature": signature, "iteration": iteration, "global_step": global_step,
            "wall_time": wall_time, "run_dir": logger.run_dir, "args": dataclasses.asdict(args),
            "log_sizes": logger.log_sizes(),  # what a resume from it keeps of the logs
            "agent": {k: v.cpu() for k, v in agent.state_dict().items()},
            "optimizer": optimizer.state_dict(), "ranks": ranks})


def flatten_batch(storage, advantages, returns, cleanrl_compat: bool) -> Batch:
    """The Batch over T x N; a step right after a done was ignored by the env and is masked out (not by CleanRL)."""
    return Batch(obs=storage.obs.reshape((-1,) + storage.obs.shape[2:]),
                 actions=storage.actions.reshape((-1,) + storage.actions.shape[2:]),
                 logprobs=storage.logprobs.reshape(-1), advantages=advantages.reshape(-1), returns=returns.reshape(-1),
                 values=storage.values.reshape(-1), valid=valid_mask(storage.dones, cleanrl_compat).reshape(-1))


def make_probe(agent, batch, args, autocast, device, ranks):
    """The diagnostics' probe on rank 0 (None elsewhere); its states are rows of the whole batch, gathered from
    the ranks that hold them."""
    idx = torch.as_tensor(diagnostic_states(args.batch_size, args.diagnostics_states), device=device)
    diag_obs = ranks.gather_rows(batch.obs, idx, args.num_envs)
    diag_actions = ranks.gather_rows(batch.actions, idx, args.num_envs)
    if ranks.rank != 0:
        return None
    return DiagnosticProbe(agent, diag_obs, diag_actions, autocast, args.num_minibatches * args.update_epochs + 1)


def log_iteration(logger, agent, args, global_step, iteration, sps, finished, lr, loss_stats, ev, probe, grad_norm,
                  times):
    """Rank 0: the finished episodes, CleanRL's charts and losses, the loop's times, and the diagnostics when the
    probe ran."""
    for ep_return, ep_length in finished:
        logger.log(global_step, iteration, {"charts/episodic_return": ep_return, "charts/episodic_length": ep_length})
    scalars = {
        "charts/learning_rate": lr,
        "charts/SPS": sps,
        "losses/policy_loss": loss_stats.policy_loss, "losses/value_loss": loss_stats.value_loss,
        "losses/entropy": loss_stats.entropy, "losses/old_approx_kl": loss_stats.old_approx_kl,
        "losses/approx_kl": loss_stats.approx_kl, "losses/clipfrac": loss_stats.clipfrac,
        "losses/explained_variance": ev, **times,
    }
    if probe is not None:
        diag, seq, ref = probe.results(agent, args.batch_size, grad_norm.item())
        scalars.update(diag)
        if args.kl_profile:
            logger.log_profile({"global_step": global_step, "iteration": iteration, "seq_kl": seq, "ref_kl": ref})
    logger.log(global_step, iteration, scalars)
    logger.progress(global_step, sps)


def finish_run(logger, args, status, global_step, iteration, clock, steps_taken, agent, normalizer, device, run_dir):
    """Rank 0: summary.json, and with --save-model the model file (with the observation statistics) and its
    evaluation on the raw reward."""
    final_sps, sps_with_warmup = clock.final_sps(steps_taken, global_step)
    summary = {"status": status, "global_step": global_step, "iteration": iteration, "SPS": final_sps,
               "SPS_with_warmup": sps_with_warmup}
    if args.save_model and status == "finished":
        model_path = os.path.join(run_dir, f"{args.exp_name}.cleanrl_model")
        obs_mean, obs_var = normalizer.obs_rms.pooled()
        torch.save({"agent": {k: v.cpu() for k, v in agent.state_dict().items()}, "norm_obs": args.norm_obs,
                    "obs_mean": torch.as_tensor(obs_mean), "obs_var": torch.as_tensor(obs_var),
                    "norm_clip": args.norm_clip}, model_path)
        episodic_returns = evaluate(model_path, args.env_id, args.eval_episodes, args.env_backend, device, args.seed + 10_000)
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
        print(describe_scaling(scaling, args) + f", num_iterations={args.num_iterations}")
    seed_everything(args, rank)

    # Envs: gymnasium MuJoCo envs continue from the checkpoint's physics state (bit-exact resume); envpool
    # cannot save its state, so a resumed run restarts them with a fresh seed
    # (docs/run_directory.md#checkpoints-and-resume); --init-from's new run resets them, its statistics continue
    start_iteration = ckpt["iteration"] if ckpt else 0
    saved = ckpt["ranks"][rank] if ckpt else init_statistics(init, rank, local_envs)
    restart = saved is not None and saved["envs"] is None
    env_seed = args.seed + rank * local_envs + (1_000_003 * start_iteration if restart else 0)
    envs = EnvClock(make_envs(args.env_id, local_envs, env_seed, args.env_backend, args.env_threads,
                              uses_same_step(args)))  # times its steps: time/env_wait_seconds
    obs_space, act_space = spaces(envs)
    if ckpt and rank == 0:
        print(f"resuming from iteration {start_iteration} (step {ckpt['global_step']}); "
              + (f"envs restart with seed {env_seed}" if restart else "envs continue from their saved state"))
    agent, optimizer, loss_fn = build_agent(args, obs_space.shape[0], act_space.shape[0], device)
    if ckpt:
        restore(ckpt, saved, agent, optimizer, args, device)
    elif init:
        start_from(init, agent, args, rank)
    autocast = functools.partial(torch.autocast, device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16)
    logger, run_dir = open_run(args, scaling, ckpt, world_size, device, rank)
    stop = StopFlag()

    # Storage and normalisation (statistics shared over all envs and ranks unless --norm-stats per-env)
    storage = make_storage(args.num_steps, local_envs, obs_space.shape, act_space.shape, device)
    stats = EpisodeStats(local_envs)
    normalizer = Normalizer(obs_space.shape, local_envs, args, world_size if args.norm_stats == "shared" else 1)
    state = start_envs(envs, normalizer, stats, saved, restart, local_envs, device)
    global_step = start_step = ckpt["global_step"] if ckpt else 0
    clock = Clock(args.batch_size, ckpt["wall_time"] if ckpt else 0.0)
    status, iteration, times = "finished", start_iteration, LoopTimes([envs])

    def checkpoint(iteration):  # rank 0's logger writes it, with its logs' sizes
        save_run_checkpoint(logger, args, signature, iteration, global_step, clock.wall_time(), agent, optimizer, envs,
                            normalizer, stats, state, world_size, rank, device)

    for iteration in range(start_iteration + 1, args.num_iterations + 1):
        first = rank == 0 and iteration == start_iteration + 1  # it pays the one-off costs: say what it is doing
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        # Rollout: num_steps x local_envs transitions under the current policy, observations normalised
        agent.eval()
        times.mark("rollout")
        with Phase(f"collecting {args.batch_size:,} steps ({args.num_envs} envs x {args.num_steps})", show=first):
            finished, state = collect_rollout(envs, agent, storage, state, stats, normalizer, args, device, autocast,
                                              ranks)
        times.mark("update")
        finished = ranks.gather_list(finished)
        global_step += args.batch_size

        # GAE on the rollout, bootstrapped from the value of the next state
        with torch.no_grad(), autocast():
            _, _, next_value = agent(state.obs)
        terminations, next_term = bootstrap_terminations(storage, state, args.cleanrl_compat)
        advantages, returns = compute_advantages(storage.rewards, storage.values, storage.dones, terminations,
                                                 next_value.float(), state.done, next_term, args.gamma, args.gae_lambda)
        batch = flatten_batch(storage, advantages, returns, args.cleanrl_compat)
        probe = None
        if args.diagnostics_every > 0 and iteration % args.diagnostics_every == 0:
            probe = make_probe(agent, batch, args, autocast, device, ranks)

        # PPO update: update_epochs passes over shuffled minibatches of the clipped surrogate
        agent.train()
        with Phase(f"updating: {args.update_epochs} epochs x {args.num_minibatches} minibatches of "
                   f"{scaling['minibatch_size']:,}", compile_note(args.compile), show=first):
            loss_stats, grad_norm, _ = update(agent, optimizer, batch, args, scaling["minibatch_size"], autocast, ranks,
                                              probe, loss_fn)
        # explained variance over all ranks' samples, in one process's layout
        ev = explained_variance(*(ranks.gather_envs(x, dim=1) for x in
                                  (storage.values, returns, valid_mask(storage.dones, args.cleanrl_compat))))

        # Non-finite loss or parameters: stop, keep the last good checkpoint (docs/run_directory.md#failure-behaviour)
        loss_stats = loss_stats.floats()
        times.mark("losses")
        if not all_finite(loss_stats, agent, world_size, device):
            print(f"error: non-finite loss or parameters at iteration {iteration} (step {global_step}); "
                  "the last good checkpoint is kept. Lower --learning-rate or check the inputs.", file=sys.stderr)
            status = "diverged"
            break
        if rank == 0:
            log_iteration(logger, agent, args, global_step, iteration, clock.tick(), finished,
                          optimizer.param_groups[0]["lr"], loss_stats, ev, probe, grad_norm, times.scalars())

        if agreed_stop(stop, world_size, device):  # every rank stops at the same iteration
            status = "interrupted"
        if args.checkpoint_every and iteration % args.checkpoint_every == 0 or status == "interrupted":
            checkpoint(iteration)
        if rank == 0:
            logger.flush()
        if status == "interrupted":
            break

    if status == "finished":
        checkpoint(iteration)
    envs.close()
    if rank == 0:
        finish_run(logger, args, status, global_step, iteration, clock, global_step - start_step, agent, normalizer,
                   device, run_dir)
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


# >>> shared:ppo-flags
def check_ppo_flags(args) -> None:
    """CleanRL's PPO flags, one flag per message, so that it names only what the user got wrong
    (docs/run_directory.md#failure-behaviour)."""
    check(args.update_epochs >= 1, f"--update-epochs must be >= 1 (got {args.update_epochs})")
    check(0 <= args.gamma <= 1, f"--gamma must lie in [0, 1] (got {args.gamma})")
    check(0 <= args.gae_lambda <= 1, f"--gae-lambda must lie in [0, 1] (got {args.gae_lambda})")
    # B26 Fig. 6b uses eps = 0: the clipped objective is still defined (gradients stop once the ratio leaves 1)
    check(args.clip_coef >= 0, f"--clip-coef must be >= 0 (got {args.clip_coef})")
    check(args.vf_coef >= 0, f"--vf-coef must be >= 0 (got {args.vf_coef})")
    check(args.max_grad_norm > 0, f"--max-grad-norm must be > 0 (got {args.max_grad_norm}); "
          "clipping at 0 or below zeroes or flips the gradient")
    check(args.target_kl is None or args.target_kl > 0,
          f"--target-kl must be > 0 (got {args.target_kl}); leave it out to never stop an update early")
# <<< shared:ppo-flags


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


# >>> shared:ppo-batch
def bootstrap_terminations(storage, state, cleanrl_compat: bool) -> tuple:
    """(per step, after the rollout) flags that drop the bootstrap V(obs[t+1]) in GAE: terminations only, or
    every done with --cleanrl-compat (CleanRL treats a truncation as a termination). state: the NextStep."""
    return (storage.dones, state.done) if cleanrl_compat else (storage.terminations, state.terminated)


def valid_mask(dones, cleanrl_compat: bool) -> torch.Tensor:
    """1 for a sample that carries a learning signal; 0 for the step after a done, whose action the env ignored.
    CleanRL keeps every step (--cleanrl-compat)."""
    return torch.ones_like(dones) if cleanrl_compat else 1.0 - dones
# <<< shared:ppo-batch


# >>> shared:explained-variance
def explained_variance(values, returns, valid) -> float:
    """CleanRL's 1 - Var(returns - values) / Var(returns), over the valid (unmasked) samples only."""
    keep = valid.reshape(-1).cpu().numpy() > 0
    y_pred, y_true = values.reshape(-1).cpu().numpy()[keep], returns.reshape(-1).cpu().numpy()[keep]
    var_y = np.var(y_true) if len(y_true) else 0.0
    return float("nan") if var_y == 0 else float(1 - np.var(y_true - y_pred) / var_y)
# <<< shared:explained-variance


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
