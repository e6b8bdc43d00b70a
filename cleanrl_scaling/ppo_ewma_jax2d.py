"""PPO and PPO-EWMA on procedurally generated Jax2D locomotion tasks: the experiment of B26 (beukman2026; §2.2-5,
App. A-C), where PPO-EWMA's proximal policy is an exponential moving average of the weights (B26 §2.2, eq. 4), with
the scaling flags of B26 §5 / App. D and the diagnostics of B26 §4.4, M25 (mayor2025) App. B and H25 (honari2025).
PureJaxRL's shape: make_train(args) returns the jitted pieces, and a host loop runs chunks of jitted updates, logging,
evaluating and checkpointing between them.

    python cleanrl_scaling/ppo_ewma_jax2d.py --ewma-com 16

Docs: docs/ppo_ewma_jax2d.md. Read top to bottom: Args, then the algorithm (the task set, the network, GAE, the
loss, make_train: rollout, update, evaluation; diagnostics, main); below the marked line, the infrastructure every
script shares.
"""
import dataclasses
import functools
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, NamedTuple, Optional

import numpy as np
import tyro

os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "cleanrl_scaling_jax"))
import jax  # noqa: E402  (after the cache directory is chosen)
from jax.flatten_util import ravel_pytree  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import flax.linen as nn  # noqa: E402
import optax  # noqa: E402
from flax import struct  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


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
    capture_video: bool = False
    """(CleanRL flag) not supported here: rejected with a clear message if set"""

    # Algorithm specific arguments (defaults: B26 App. A, Table 2)
    env_id: str = "Jax2D-Locomotion-l"
    """Jax2D-Locomotion-l: kinetix's procedural locomotion generator at the large scene size (the only one it fits)"""
    total_timesteps: int = 100_000_000
    """total timesteps of the experiments"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    num_envs: int = 2048
    """the number of parallel environments (split over all visible devices)"""
    num_steps: int = 256
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = False
    """Toggle learning rate annealing (off: B26 used Stoix's constant learning rate; Fig. 4 sweeps both)"""
    gamma: float = 0.995
    """the discount factor gamma"""
    gae_lambda: float = 0.9
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 32
    """the number of mini-batches"""
    update_epochs: int = 8
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: Optional[float] = None
    """the target KL divergence threshold"""

    # PPO-EWMA (B26 §2.2, Hilton et al. 2022)
    ewma_com: float = 0.0
    """center of mass C of the proximal policy, in minibatch steps (0 = plain PPO); beta = C / (C + 1)"""
    imp_samp_max: float = 100.0
    """PPO-EWMA: truncate the importance ratio pi/pi_behavior at this value, as Hilton et al.'s code (0 = off)"""

    # Tasks, network, evaluation
    task_seed: int = 0
    """seed of the fixed task set (the same tasks, bit for bit, on every run)"""
    num_tasks: int = 512
    """number of tasks; task i depends only on --task-seed and i, so a smaller set is a prefix of the full one"""
    hidden_size: int = 256
    """width of the actor and critic MLPs"""
    num_hidden_layers: int = 3
    """hidden layers of the actor and critic MLPs"""
    eval_every: int = 10
    """log charts/solve_rate over all tasks every K iterations, sampled and greedy (0 = only at the end)"""
    eval_attempts: Optional[int] = None
    """sampled episodes per task and evaluation (default ceil(625/--num-tasks): SE <= 0.5/sqrt(tasks x K) <= 0.02; 79 on 8 tasks)"""
    final_eval: bool = True
    """evaluate the final policy (its solve rates in summary.json); --no-final-eval with --eval-every 0 never evaluates: timed runs (B26 Figs. 13/14)"""
    updates_per_chunk: int = 4
    """updates per jitted chunk; logging, evaluation and checkpoints happen between chunks"""
    init_from: Optional[str] = None
    """start a new run from a checkpoint's state, with this run's hyperparameters (e.g. another COM, B26 Fig. 3a)"""
    keep_checkpoints: tuple[int, ...] = ()
    """also keep the state at these iterations as checkpoints/iteration_<N>.ckpt (Fig. 3a reloads Fig. 5a's runs at U/2)"""

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
# Environment: a fixed set of generated tasks, replayed by resetting to a stored level
# ---------------------------------------------------------------------------------------------------------
# Only "l": kinetix's locomotion generator needs a body, two legs and two ankles beyond the 4 fixed polygons (the s and
# m scenes have 1 and 2 free polygons, and the generator fails on them with a negative array size).
ENV_SIZES = {"Jax2D-Locomotion-l": "l"}


def make_env(env_id: str):
    """Symbolic-flat observations (an MLP's input, B26 App. A) and multi-discrete motor/thruster actions."""
    from kinetix.environment.env import make_kinetix_env
    from kinetix.environment.env_state import EnvParams
    from kinetix.environment.spaces import ActionType, ObservationType
    from kinetix.environment.utils import static_env_params_from_size
    static_params = static_env_params_from_size(ENV_SIZES[env_id])
    env_params = EnvParams()
    env = make_kinetix_env(ActionType.MULTI_DISCRETE, ObservationType.SYMBOLIC_FLAT, None, env_params,
                           static_params, auto_reset=False)
    return env, env_params, static_params


class Tasks(struct.PyTreeNode):
    states: Any  # EnvState with a leading [num_tasks] axis: the level each task resets to
    obs: jnp.ndarray  # [num_tasks, obs_dim] observation of each stored level


def generate_tasks(env, env_params, static_params, task_seed: int, num_tasks: int) -> Tasks:
    """Task i = the locomotion generator at fold_in(PRNGKey(task_seed), i): fixed, and prefix-stable."""
    from kinetix.environment.ued.locomotion_distribution import sample_locomotion_level

    def one(i):
        level = sample_locomotion_level(jax.random.fold_in(jax.random.PRNGKey(task_seed), i), env_params, static_params)
        return level, env.get_obs(level)
    states, obs = jax.jit(jax.vmap(one))(jnp.arange(num_tasks))
    return Tasks(states=states, obs=obs)


def action_layout(env, env_params):
    """Choices per action dimension (3 per motor, 2 per thruster) and the [D, A] mask of valid choices."""
    dims = np.asarray(env.action_space(env_params).number_of_dims_per_distribution)
    mask = np.arange(dims.max())[None, :] < dims[:, None]
    return dims, mask


def tree_select(cond, on_true, on_false):
    """Per-env select between two batched pytrees (cond: [N])."""
    return jax.tree.map(lambda a, b: jnp.where(cond.reshape(cond.shape + (1,) * (a.ndim - 1)), a, b), on_true, on_false)


# ---------------------------------------------------------------------------------------------------------
# Agent: separate actor and critic MLPs (B26 App. A: 3 layers of width 256)
# ---------------------------------------------------------------------------------------------------------
class MLP(nn.Module):
    hidden_size: int
    num_layers: int
    out_size: int
    out_scale: float

    @nn.compact
    def __call__(self, x):
        hidden = []
        for _ in range(self.num_layers):
            x = nn.tanh(nn.Dense(self.hidden_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
            hidden.append(x)
        return nn.Dense(self.out_size, kernel_init=nn.initializers.orthogonal(self.out_scale))(x), hidden


class ActorCritic(nn.Module):
    action_mask: Any  # numpy [D, A] bool
    hidden_size: int
    num_layers: int

    @nn.compact
    def __call__(self, obs):
        """obs [..., O] -> (masked logits [..., D, A], value [...], actor hidden list, critic hidden list)."""
        d, a = self.action_mask.shape
        logits, actor_hidden = MLP(self.hidden_size, self.num_layers, d * a, 0.01, name="actor")(obs)
        value, critic_hidden = MLP(self.hidden_size, self.num_layers, 1, 1.0, name="critic")(obs)
        logits = jnp.where(self.action_mask, logits.reshape(obs.shape[:-1] + (d, a)), -1e9)
        return logits, value[..., 0], actor_hidden, critic_hidden


def log_prob(logits, actions):
    """Multi-discrete log-probability: the sum over action dimensions."""
    logp_all = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(logp_all, actions[..., None], axis=-1)[..., 0].sum(-1)


def entropy(logits):
    logp_all = jax.nn.log_softmax(logits, axis=-1)
    return -(jnp.exp(logp_all) * logp_all).sum((-2, -1))


# ---------------------------------------------------------------------------------------------------------
# State: named pytrees instead of positional tuples
# ---------------------------------------------------------------------------------------------------------
class TrainState(struct.PyTreeNode):
    params: Any
    opt_state: Any
    prox_params: Any  # theta_prox, the EWMA of theta (B26 §2.2); equal to params when --ewma-com 0


class EnvBatch(struct.PyTreeNode):
    state: Any  # EnvState [N]
    obs: jnp.ndarray  # [N, O]
    ep_return: jnp.ndarray  # [N] return of the running episode
    ep_length: jnp.ndarray  # [N]


class RunnerState(struct.PyTreeNode):
    train: TrainState
    envs: EnvBatch
    key: jnp.ndarray  # the training RNG stream (diagnostics and evaluation never draw from it)


class Transition(NamedTuple):
    obs: jnp.ndarray
    action: jnp.ndarray
    logp: jnp.ndarray
    value: jnp.ndarray
    reward: jnp.ndarray
    done: jnp.ndarray  # the episode ended after this step
    terminated: jnp.ndarray  # ended by the goal, a hazard or a NaN: no bootstrap (a time limit bootstraps)
    next_value: jnp.ndarray  # V(true next observation), used only when the episode was truncated


class Episodes(NamedTuple):
    done: jnp.ndarray  # [T, N]
    ep_return: jnp.ndarray
    ep_length: jnp.ndarray
    solved: jnp.ndarray  # the episode ended touching the goal


class Batch(NamedTuple):
    obs: jnp.ndarray
    action: jnp.ndarray
    logp: jnp.ndarray
    advantages: jnp.ndarray
    returns: jnp.ndarray
    value: jnp.ndarray


class Hyper(struct.PyTreeNode):
    """Hyperparameters passed as traced values: changing them (a COM or epsilon sweep, a reload with
    another COM) reuses the compiled program."""
    clip_coef: jnp.ndarray
    ewma_com: jnp.ndarray
    ent_coef: jnp.ndarray
    vf_coef: jnp.ndarray


class Probe(struct.PyTreeNode):
    """What the diagnostics need from one update, filled only when that update is probed (lax.cond)."""
    params_before: Any
    first_grad: jnp.ndarray  # flat first-minibatch gradient
    logits: jnp.ndarray  # [J+1, S, D, A]: pi_0 (behavior) ... pi_J on the fixed state set S
    obs: jnp.ndarray  # [S, O]
    actions: jnp.ndarray  # [S, D]
    steps: jnp.ndarray  # minibatch steps taken (J unless --target-kl stopped early)


class UpdateCarry(struct.PyTreeNode):
    train: TrainState
    probe: Probe
    stat_sum: jnp.ndarray  # [7]: the six loss statistics and the pre-clipping gradient norm
    steps: jnp.ndarray
    stopped: jnp.ndarray  # --target-kl ended the epochs


# ---------------------------------------------------------------------------------------------------------
# Advantages: GAE
# ---------------------------------------------------------------------------------------------------------
def gae_step(gamma: float, lam: float, carry, t: Transition):
    """GAE (Schulman et al. 2016) backwards in time; a truncated episode bootstraps from V(true next obs)."""
    next_adv, next_value = carry
    v_next = jnp.where(t.done, jnp.where(t.terminated, 0.0, t.next_value), next_value)
    delta = t.reward + gamma * v_next - t.value
    adv = delta + gamma * lam * (1.0 - t.done) * next_adv
    return (adv, t.value), adv


def compute_gae(traj: Transition, last_value, gamma: float, lam: float):
    _, advantages = jax.lax.scan(functools.partial(gae_step, gamma, lam), (jnp.zeros_like(last_value), last_value),
                                 traj, reverse=True)
    return advantages, advantages + traj.value


# ---------------------------------------------------------------------------------------------------------
# Loss: PPO's, with PPO-EWMA's proximal policy (B26 eq. 4)
# ---------------------------------------------------------------------------------------------------------
def ewma_update(prox_params, params, com: float):
    """B26 §2.2: theta_prox <- beta theta_prox + (1 - beta) theta, beta = C / (C + 1) (footnote 1)."""
    beta = com / (com + 1.0)
    return jax.tree.map(lambda q, p: beta * q + (1.0 - beta) * p, prox_params, params)


def decoupled_pg_loss(newlogp, prox_logp, behavior_logp, advantages, clip_coef: float, imp_samp_max: float):
    """B26 eq. 4 per sample: pi_prox/pi_behavior * max(-A r_prox, -A clip(r_prox)). As in Hilton et al.'s code,
    pi_behavior is raised to pi/imp_samp_max so that pi/pi_behavior <= imp_samp_max (no gradient through it).
    With pi_prox = pi_behavior and no truncation this is CleanRL's PPO loss, bit for bit."""
    logp_adj = behavior_logp
    if imp_samp_max > 0:
        logp_adj = jnp.maximum(behavior_logp, jax.lax.stop_gradient(newlogp) - math.log(imp_samp_max))
    ratio = jnp.exp(newlogp - prox_logp)
    weight = jnp.exp(prox_logp - logp_adj)
    return jnp.maximum(-advantages * ratio, -advantages * jnp.clip(ratio, 1 - clip_coef, 1 + clip_coef)) * weight


def ppo_loss(args, network: ActorCritic, hyper: Hyper, params, prox_params, mb: Batch):
    """CleanRL's PPO loss; with --ewma-com C > 0 the policy term is B26 eq. 4 with theta_prox. Returns the loss and
    [policy loss, value loss, entropy, old approx KL, approx KL, clip fraction]."""
    logits, newvalue, _, _ = network.apply(params, mb.obs)
    newlogp = log_prob(logits, mb.action)
    logratio = newlogp - mb.logp
    ratio = jnp.exp(logratio)
    advantages = mb.advantages
    if args.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std(ddof=1) + 1e-8)
    if args.ewma_com > 0:
        prox_logits, _, _, _ = network.apply(prox_params, mb.obs)
        prox_logp = jax.lax.stop_gradient(log_prob(prox_logits, mb.action))
        pg_loss = decoupled_pg_loss(newlogp, prox_logp, mb.logp, advantages, hyper.clip_coef, args.imp_samp_max).mean()
        clip_ratio = jnp.exp(newlogp - prox_logp)
    else:  # plain PPO: the behavior policy is also the proximal one, nothing to truncate
        pg_loss = decoupled_pg_loss(newlogp, mb.logp, mb.logp, advantages, hyper.clip_coef, 0.0).mean()
        clip_ratio = ratio
    if args.clip_vloss:
        v_clipped = mb.value + jnp.clip(newvalue - mb.value, -hyper.clip_coef, hyper.clip_coef)
        v_loss = 0.5 * jnp.maximum((newvalue - mb.returns) ** 2, (v_clipped - mb.returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((newvalue - mb.returns) ** 2).mean()
    entropy_loss = entropy(logits).mean()
    loss = pg_loss - hyper.ent_coef * entropy_loss + v_loss * hyper.vf_coef
    stats = jnp.stack([pg_loss, v_loss, entropy_loss, (-logratio).mean(), ((ratio - 1) - logratio).mean(),
                       (jnp.abs(clip_ratio - 1.0) > hyper.clip_coef).mean()])
    return loss, jax.lax.stop_gradient(stats)


def make_optimizer(args):
    """Adam after global-norm clipping; --anneal-lr: CleanRL's linear decay to zero, constant within an iteration."""
    schedule = args.learning_rate
    if args.anneal_lr:
        steps_per_iteration = args.update_epochs * args.num_minibatches
        def schedule(count):
            return args.learning_rate * (1.0 - (count // steps_per_iteration) / args.num_iterations)
    return optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(schedule, eps=1e-5))


# ---------------------------------------------------------------------------------------------------------
# Evaluation: the solve rate over every task, with sampled and greedy actions (B26 §3)
# ---------------------------------------------------------------------------------------------------------
class EvalCarry(NamedTuple):
    state: Any
    obs: jnp.ndarray
    finished: jnp.ndarray
    solved: jnp.ndarray
    ep_return: jnp.ndarray
    keys: jnp.ndarray  # [K] one RNG stream per sampled attempt
    t: jnp.ndarray


class EvalResult(NamedTuple):
    solve_rate: jnp.ndarray  # mean over the K x tasks sampled episodes
    solve_rate_se: jnp.ndarray  # its standard error across those episodes
    solve_rate_greedy: jnp.ndarray
    eval_return: jnp.ndarray
    eval_return_se: jnp.ndarray
    eval_return_greedy: jnp.ndarray
    solved: jnp.ndarray  # [K + 1, tasks] per episode: the K sampled attempts, then the greedy one
    ep_return: jnp.ndarray


def default_eval_attempts(num_tasks: int) -> int:
    """Enough attempts that the worst-case (p = 1/2) SE 0.5/sqrt(tasks x K) is <= 0.02, i.e. tasks x K >= 625."""
    return -(-625 // num_tasks)  # 625 = (0.5 / 0.02)^2


def attempt_keys(key, attempts: int):
    """Attempt 0 draws from the evaluation key itself, so K = 1 is the one-episode evaluation of earlier runs."""
    return jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(attempts)).at[0].set(key)


def standard_error(x):
    """Sample standard deviation (ddof 1) over the episodes / sqrt(episodes): nan for a single episode."""
    return x.std(ddof=1) / jnp.sqrt(x.size)


def summarise_eval(solved, ep_return) -> EvalResult:
    """solved, ep_return: [K + 1, tasks], the last row greedy. Greedy play is deterministic, so it has no SE."""
    sampled, sampled_return = solved[:-1].ravel().astype(jnp.float32), ep_return[:-1].ravel()
    return EvalResult(solve_rate=sampled.mean(), solve_rate_se=standard_error(sampled),
                      solve_rate_greedy=solved[-1].mean(), eval_return=sampled_return.mean(),
                      eval_return_se=standard_error(sampled_return), eval_return_greedy=ep_return[-1].mean(),
                      solved=solved, ep_return=ep_return)


# ---------------------------------------------------------------------------------------------------------
# make_train: the task set, the agent and the jitted pieces of one configuration (PureJaxRL's shape)
# ---------------------------------------------------------------------------------------------------------
class Train(NamedTuple):
    """What make_train returns. The jitted functions take the task set as an argument (it lives on the devices)."""
    tasks: Tasks  # replicated on every device
    eval_tasks: Tasks  # on the one device that evaluates
    network: ActorCritic
    env: Any
    init: Callable  # (tasks, seed) -> RunnerState
    train_chunk: Callable  # (hyper, tasks, runner, probe, num_updates, probe_at) -> (runner, probe, stats, episodes)
    evaluate: Callable  # (tasks, params, key, attempts=K) -> EvalResult
    empty_probe: Callable  # params -> Probe
    shardings: Callable  # RunnerState -> its shardings (envs split over the devices, the rest replicated)
    env_step: Callable  # (tasks, envs, action, reset_key) -> (envs, obs, reward, done, terminated, episodes)


def make_train(args) -> Train:
    """Closes over the configuration (args after apply_scaling); the hyperparameters a sweep changes are traced
    (Hyper), so one compiled program serves them all."""
    env, env_params, static_params = make_env(args.env_id)
    network = ActorCritic(action_mask=action_layout(env, env_params)[1], hidden_size=args.hidden_size,
                          num_layers=args.num_hidden_layers)
    optimizer = make_optimizer(args)
    mesh = Mesh(np.array(jax.devices()), ("envs",))
    probe_index = diagnostic_states(args.batch_size, args.diagnostics_states)  # rows of the flattened batch
    max_timesteps = int(env_params.max_timesteps)
    tasks = generate_tasks(env, env_params, static_params, args.task_seed, args.num_tasks)
    tasks = jax.device_put(tasks, NamedSharding(mesh, P()))

    def shard_envs(tree):
        """The env axis is split over all devices; everything else is replicated
        (docs/ppo_ewma_jax2d.md#diagnostics-checkpoints-devices)."""
        spec = NamedSharding(mesh, P("envs"))
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, spec), tree)

    replicated = NamedSharding(mesh, P())

    def shardings(runner: RunnerState) -> RunnerState:
        sharded = NamedSharding(mesh, P("envs"))
        return RunnerState(train=jax.tree.map(lambda _: replicated, runner.train),
                           envs=jax.tree.map(lambda _: sharded, runner.envs), key=replicated)

    def init(tasks: Tasks, seed) -> RunnerState:
        """One PRNG key, split into the initial weights and the training stream; every task played from the start."""
        key, key_init = jax.random.split(jax.random.PRNGKey(jnp.uint32(seed)))
        params = network.init(key_init, tasks.obs[:1])
        idx = jnp.arange(args.num_envs) % args.num_tasks
        # strongly typed as env_step returns it (kinetix's last_distance starts as a Python float): one compiled chunk
        state = jax.tree.map(lambda x: jax.lax.convert_element_type(x[idx], x.dtype), tasks.states)
        envs = EnvBatch(state=state, obs=tasks.obs[idx],
                        ep_return=jnp.zeros(args.num_envs), ep_length=jnp.zeros(args.num_envs, jnp.int32))
        train = TrainState(params=params, opt_state=optimizer.init(params), prox_params=jax.tree.map(jnp.copy, params))
        return RunnerState(train=train, envs=envs, key=key)

    # Rollout
    def env_step(tasks: Tasks, envs: EnvBatch, action, reset_key):
        """Step every env; an ended episode resets to a task drawn uniformly from the stored set."""
        obs, state, reward, done, info = jax.vmap(env.step_env, (None, 0, 0, None))(None, envs.state, action, env_params)
        solved = done & info["GoalR"]
        terminated = done & ((state.timestep < max_timesteps) | solved)
        ep_return, ep_length = envs.ep_return + reward, envs.ep_length + 1
        idx = jax.random.randint(reset_key, (args.num_envs,), 0, args.num_tasks)
        reset_state = jax.tree.map(lambda x: x[idx], tasks.states)
        new_envs = EnvBatch(state=tree_select(done, reset_state, state), obs=jnp.where(done[:, None], tasks.obs[idx], obs),
                            ep_return=jnp.where(done, 0.0, ep_return), ep_length=jnp.where(done, 0, ep_length))
        episodes = Episodes(done=done, ep_return=ep_return, ep_length=ep_length, solved=solved)
        return shard_envs(new_envs), obs, reward, done, terminated, episodes

    def rollout_step(tasks: Tasks, params, envs: EnvBatch, key):
        key_action, key_reset = jax.random.split(key)
        logits, value, _, _ = network.apply(params, envs.obs)
        action = jax.random.categorical(key_action, logits)
        new_envs, true_next_obs, reward, done, terminated, episodes = env_step(tasks, envs, action, key_reset)
        _, next_value, _, _ = network.apply(params, true_next_obs)  # bootstraps a time-limit truncation
        transition = Transition(obs=envs.obs, action=action, logp=log_prob(logits, action), value=value, reward=reward,
                                done=done, terminated=terminated, next_value=next_value)
        return new_envs, (transition, episodes)

    # Update: update_epochs x num_minibatches steps; theta_prox follows theta after every step (B26 §2.2)
    def minibatch_step(hyper: Hyper, probe_on, carry: UpdateCarry, mb: Batch):
        train = carry.train
        (_, stats), grads = jax.value_and_grad(functools.partial(ppo_loss, args, network, hyper), has_aux=True)(
            train.params, train.prox_params, mb)
        grad_norm = optax.global_norm(grads)
        updates, opt_state = optimizer.update(grads, train.opt_state, train.params)
        params = optax.apply_updates(train.params, updates)
        new_train = TrainState(params=params, opt_state=opt_state,
                               prox_params=ewma_update(train.prox_params, params, hyper.ewma_com))
        probe = jax.lax.cond(probe_on, record_probe_step, lambda *_: carry.probe, carry.probe, carry.steps, grads, params)
        new = UpdateCarry(train=new_train, probe=probe, stat_sum=carry.stat_sum + jnp.append(stats, grad_norm),
                          steps=carry.steps + 1, stopped=carry.stopped)
        return new, stats

    def update_epoch(hyper: Hyper, batch: Batch, probe_on, carry: UpdateCarry, key):
        def run(carry):
            n = batch.obs.shape[0]
            perm = jax.random.permutation(key, n).reshape(args.num_minibatches, -1)
            minibatches = jax.tree.map(lambda x: x[perm], batch)
            carry, stats = jax.lax.scan(functools.partial(minibatch_step, hyper, probe_on), carry, minibatches)
            stopped = stats[-1, 4] > args.target_kl if args.target_kl is not None else carry.stopped
            return carry.replace(stopped=stopped)
        return jax.lax.cond(carry.stopped, lambda c: c, run, carry), None

    def update_iteration(hyper: Hyper, tasks: Tasks, runner: RunnerState, probe: Probe, probe_on):
        """One PPO iteration: rollout, GAE, update_epochs x num_minibatches steps."""
        key, key_rollout, key_update = jax.random.split(runner.key, 3)
        params = runner.train.params
        envs, (traj, episodes) = jax.lax.scan(functools.partial(rollout_step, tasks, params), runner.envs,
                                              jax.random.split(key_rollout, args.num_steps))
        _, last_value, _, _ = network.apply(params, envs.obs)
        advantages, returns = compute_gae(traj, last_value, args.gamma, args.gae_lambda)
        batch = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]),
                             Batch(traj.obs, traj.action, traj.logp, advantages, returns, traj.value))
        probe = jax.lax.cond(probe_on, start_probe, lambda *_: probe, probe, params, batch)
        carry = UpdateCarry(train=runner.train, probe=probe, stat_sum=jnp.zeros(7), steps=jnp.zeros((), jnp.int32),
                            stopped=jnp.zeros((), bool))
        keys = jax.random.split(key_update, args.update_epochs)
        carry, _ = jax.lax.scan(functools.partial(update_epoch, hyper, batch, probe_on), carry, keys)
        var_y = jnp.var(batch.returns)
        explained_var = jnp.where(var_y == 0, jnp.nan, 1 - jnp.var(batch.returns - batch.value) / var_y)
        stats = jnp.append(carry.stat_sum / carry.steps, explained_var)
        return RunnerState(train=carry.train, envs=envs, key=key), carry.probe, stats, episodes

    def train_chunk(hyper: Hyper, tasks: Tasks, runner: RunnerState, probe: Probe, num_updates, probe_at):
        """Run num_updates (<= --updates-per-chunk, dynamic: one compiled program for every chunk length) updates;
        the update at index probe_at (-1: none) fills the probe. Returns per-update stats and episodes."""
        max_updates = args.updates_per_chunk
        stats_buf = jnp.full((max_updates, 8), jnp.nan)
        shape = (max_updates, args.num_steps, args.num_envs)
        episodes_buf = Episodes(jnp.zeros(shape, bool), jnp.zeros(shape), jnp.zeros(shape, jnp.int32),
                                jnp.zeros(shape, bool))

        def body(i, carry):
            runner, probe, stats_buf, episodes_buf = carry
            runner, probe, stats, episodes = update_iteration(hyper, tasks, runner, probe, i == probe_at)
            episodes_buf = jax.tree.map(lambda b, e: b.at[i].set(e), episodes_buf, episodes)
            return runner, probe, stats_buf.at[i].set(stats), episodes_buf

        return jax.lax.fori_loop(0, num_updates, body, (runner, probe, stats_buf, episodes_buf))

    # Diagnostics (docs/metrics.md#diagnostics): recorded inside the probed update behind lax.cond, read-only, no
    # training RNG draws
    def empty_probe(params) -> Probe:
        d, a = network.action_mask.shape
        num_policies = args.update_epochs * args.num_minibatches + 1
        flat, _ = ravel_pytree(params)
        num_diag, obs_dim = len(probe_index), tasks.obs.shape[-1]
        probe = Probe(params_before=jax.tree.map(jnp.zeros_like, params), first_grad=jnp.zeros_like(flat),
                      logits=jnp.zeros((num_policies, num_diag, d, a)), obs=jnp.zeros((num_diag, obs_dim)),
                      actions=jnp.zeros((num_diag, d), jnp.int32), steps=jnp.zeros((), jnp.int32))
        return jax.device_put(probe, replicated)  # placed as train_chunk returns it (one compiled chunk)

    def start_probe(probe: Probe, params, batch: Batch) -> Probe:
        obs, actions = batch.obs[probe_index], batch.action[probe_index]
        logits, _, _, _ = network.apply(params, obs)
        return probe.replace(params_before=params, obs=obs, actions=actions, logits=probe.logits.at[0].set(logits),
                             steps=jnp.zeros((), jnp.int32))

    def record_probe_step(probe: Probe, step, grads, params) -> Probe:
        first_grad = jnp.where(step == 0, ravel_pytree(grads)[0], probe.first_grad)
        logits, _, _, _ = network.apply(params, probe.obs)
        return probe.replace(first_grad=first_grad, logits=probe.logits.at[step + 1].set(logits), steps=step + 1)

    # Evaluation: every task `attempts` times with sampled actions and once greedily, in one batch
    def eval_step(params, attempts: int, carry: EvalCarry) -> EvalCarry:
        keys, keys_action = jnp.moveaxis(jax.vmap(jax.random.split)(carry.keys), 1, 0)
        logits, _, _, _ = network.apply(params, carry.obs)  # [(K + 1) x tasks, D, A]
        sampled = logits[:attempts * args.num_tasks].reshape((attempts, args.num_tasks) + logits.shape[1:])
        # a draw's first rows do not depend on its length (partitionable threefry): attempt 0 = the old [2 x tasks] draw
        sampled = jax.vmap(jax.random.categorical)(keys_action, sampled).reshape((-1,) + logits.shape[1:2])
        action = jnp.concatenate([sampled, jnp.argmax(logits[attempts * args.num_tasks:], -1)])
        obs, state, reward, done, info = jax.vmap(env.step_env, (None, 0, 0, None))(None, carry.state, action, env_params)
        live = ~carry.finished
        return EvalCarry(state=state, obs=obs, finished=carry.finished | done,
                         solved=carry.solved | (live & done & info["GoalR"]),
                         ep_return=carry.ep_return + jnp.where(live, reward, 0.0), keys=keys, t=carry.t + 1)

    def evaluate(tasks: Tasks, params, key, attempts: int) -> EvalResult:
        """Until every episode ended (or the time limit): the sampled attempts, then the greedy episodes."""
        copies = attempts + 1
        envs = jax.tree.map(lambda x: jnp.concatenate([x] * copies), tasks)
        size = copies * args.num_tasks
        carry = EvalCarry(state=envs.states, obs=envs.obs, finished=jnp.zeros(size, bool), solved=jnp.zeros(size, bool),
                          ep_return=jnp.zeros(size), keys=attempt_keys(key, attempts), t=jnp.zeros((), jnp.int32))
        carry = jax.lax.while_loop(lambda c: (c.t < max_timesteps + 1) & ~c.finished.all(),
                                   functools.partial(eval_step, params, attempts), carry)
        return summarise_eval(carry.solved.reshape(copies, -1), carry.ep_return.reshape(copies, -1))

    # runner and probe come back placed as they went in: XLA's choice (unsplit envs) would compile the next chunk again
    chunk_placement = (shardings(jax.eval_shape(init, tasks, 0)), replicated, None, None)
    return Train(tasks=tasks, eval_tasks=jax.device_put(tasks, jax.devices()[0]), network=network, env=env,
                 init=jax.jit(init),  # one compiled program, not hundreds of eager ops
                 train_chunk=jax.jit(train_chunk, donate_argnums=(2, 3), out_shardings=chunk_placement),
                 evaluate=jax.jit(evaluate, static_argnames="attempts"),  # a small program: one device
                 empty_probe=empty_probe, shardings=shardings, env_step=env_step)


# ---------------------------------------------------------------------------------------------------------
# Diagnostics (docs/metrics.md#diagnostics) from the probed update, on the host in float64
# ---------------------------------------------------------------------------------------------------------
def diagnostic_states(num_states: int, limit: int) -> np.ndarray:
    """A fixed, evenly strided subset of the batch: deterministic, so no draw from the training RNG."""
    return np.linspace(0, num_states - 1, min(num_states, limit)).round().astype(np.int64)


def log_softmax64(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


class PolicyKL:
    """kl_between(i, j) = per-state KL(pi_i || pi_j), summed over the action dimensions (for kl_profile)."""

    def __init__(self, logps):
        self.logps = logps
        self.num_policies = len(logps)

    def __call__(self, i, j):
        return categorical_kl(self.logps[i], self.logps[j]).sum(-1)


def flat_params(params) -> np.ndarray:
    return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(params)])


def compute_diagnostics(network: ActorCritic, probe: Probe, train: TrainState, batch_size: int, grad_norm: float):
    probe = jax.device_get(probe)
    mask = np.asarray(network.action_mask)
    steps = int(probe.steps)
    logps = [log_softmax64(probe.logits[j]) for j in range(steps + 1)]
    kl = PolicyKL(logps)
    seq, ref = kl_profile(kl)
    kl_behavior = float(np.mean(kl(0, steps)))
    after, behavior = logps[-1], logps[0]
    taken = np.take_along_axis(after - behavior, probe.actions[..., None], axis=-1)[..., 0].sum(-1)
    apply = jax.jit(network.apply)  # a small MLP forward pass
    prox_logits, _, actor_h, critic_h = apply(train.prox_params, probe.obs)
    params_after = flat_params(train.params)
    out = {
        "diagnostics/kl_behavior": kl_behavior,
        "diagnostics/ddr": batch_size / max(kl_behavior, 1e-12),  # B26 §4.4
        "diagnostics/kl_prox": float(np.mean(categorical_kl(log_softmax64(np.asarray(prox_logits)), after).sum(-1))),
        "diagnostics/seq_kl_mean": float(np.mean(seq)),
        "diagnostics/ref_kl_mean": float(np.mean(ref)),
        "diagnostics/update_size": float(np.linalg.norm(params_after - flat_params(probe.params_before))),
        "diagnostics/grad_norm": float(grad_norm),
        "diagnostics/grad_kurtosis": log_grad_kurtosis(np.asarray(probe.first_grad)),
        "diagnostics/ess_pct": ess_pct(taken),
        "diagnostics/policy_variance": policy_variance(np.exp(after)[:, mask]),
        "diagnostics/weight_norm": float(np.linalg.norm(params_after)),
        "diagnostics/actor_weight_norm": float(np.linalg.norm(flat_params(train.params["params"]["actor"]))),
        "diagnostics/critic_weight_norm": float(np.linalg.norm(flat_params(train.params["params"]["critic"]))),
    }
    for prefix, hidden in (("", actor_h), ("critic_", critic_h)):
        hidden = [np.asarray(h, np.float64) for h in hidden]
        rank, srank = feature_ranks(hidden[-1])
        dormant = dormant_fractions(hidden)
        out[f"diagnostics/{prefix}feature_rank"] = rank
        out[f"diagnostics/{prefix}srank"] = srank
        out[f"diagnostics/{prefix}dormant_frac"] = dormant[0.025]
        out[f"diagnostics/{prefix}dormant_frac_tau0"] = dormant[0.0]
        out[f"diagnostics/{prefix}dormant_frac_tau0.1"] = dormant[0.1]
    return out, seq, ref


# ---------------------------------------------------------------------------------------------------------
# Main: the algorithm box; set-up, resume and run-directory plumbing in the named functions above it
# ---------------------------------------------------------------------------------------------------------
SCRIPT = "ppo_ewma_jax2d"
STAT_NAMES = ["losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/old_approx_kl",
              "losses/approx_kl", "losses/clipfrac", "diagnostics/grad_norm", "losses/explained_variance"]


def validate(args) -> dict:
    """Every user mistake is caught here, before any env or network is built
    (docs/run_directory.md#failure-behaviour)."""
    check_finite_floats(args)
    check(args.env_id in ENV_SIZES, f"--env-id {args.env_id!r} is not one of {', '.join(ENV_SIZES)}")
    check(args.total_timesteps > 0, f"--total-timesteps must be > 0 (got {args.total_timesteps})")
    check_ppo_flags(args)
    check(args.ewma_com >= 0, f"--ewma-com must be >= 0 (got {args.ewma_com}); 0 is plain PPO")
    check(args.imp_samp_max == 0 or args.imp_samp_max > 1, f"--imp-samp-max must be > 1, or 0 to disable (got {args.imp_samp_max})")
    check(args.num_tasks >= 1, f"--num-tasks must be >= 1 (got {args.num_tasks})")
    check(args.task_seed >= 0, f"--task-seed must be >= 0 (got {args.task_seed})")
    check(args.hidden_size >= 1, f"--hidden-size must be >= 1 (got {args.hidden_size})")
    check(args.num_hidden_layers >= 1, f"--num-hidden-layers must be >= 1 (got {args.num_hidden_layers})")
    check(args.eval_every >= 0, f"--eval-every must be >= 0 (got {args.eval_every})")
    check(args.eval_attempts is None or args.eval_attempts >= 1, f"--eval-attempts must be >= 1 (got {args.eval_attempts})")
    check(args.updates_per_chunk >= 1, f"--updates-per-chunk must be >= 1 (got {args.updates_per_chunk})")
    check(args.checkpoint_every >= 0, f"--checkpoint-every must be >= 0 (got {args.checkpoint_every})")
    check(all(k >= 1 for k in args.keep_checkpoints), f"--keep-checkpoints must be iterations >= 1 (got "
          f"{' '.join(map(str, args.keep_checkpoints))})")
    check(args.diagnostics_every >= 0, f"--diagnostics-every must be >= 0 (got {args.diagnostics_every})")
    check(args.diagnostics_states >= 2, f"--diagnostics-states must be >= 2 (got {args.diagnostics_states})")
    check(not args.capture_video, "--capture-video is not supported by this script; drop the flag")
    check_scaling_flags(args)
    scaling = resolve_scaling(args)
    check_scaling(args, scaling)
    devices = jax.device_count()
    check(args.num_envs % devices == 0, f"--num-envs {args.num_envs} must be divisible by the {devices} devices")
    return scaling


def apply_scaling(args, scaling: dict) -> None:
    """Write the resolved batch, minibatches, learning rate and evaluation attempts into args (what the run uses)."""
    args.batch_size = scaling["batch_size"]
    args.num_minibatches = scaling["num_minibatches"]
    args.learning_rate = scaling["learning_rate"]
    args.num_iterations = args.total_timesteps // args.batch_size
    if args.eval_attempts is None:
        args.eval_attempts = default_eval_attempts(args.num_tasks)


# Flags a resume may change besides the shared ones: the evaluation (its own key, never training's: a run may go on
# with another K), the kept checkpoints, and --init-from, which --resume overrides
RESUMABLE = ("eval_every", "eval_attempts", "final_eval", "keep_checkpoints", "init_from")
# what --init-from must share with its checkpoint: the shapes of the state it continues (network, envs, tasks)
INIT_FROM_KEYS = ("env_id", "num_envs", "num_tasks", "task_seed", "hidden_size", "num_hidden_layers")


def load_start(args, signature: dict, scaling: dict):
    """The checkpoint to start from, or None. --resume wins over --init-from: an interrupted reload continues from its
    own checkpoint (the launcher's --resume-unfinished appends --resume to the grid point's argv, which holds the
    --init-from it started from)."""
    implied = older_signature(args, RESUMABLE)
    if args.resume:
        return load_checkpoint(args.resume, SCRIPT, signature, implied=implied, resolved=scaling,
                               new_run=f"--init-from {args.resume} instead of --resume for a new run from its state")
    if args.init_from:
        shapes = {key: signature[key] for key in INIT_FROM_KEYS}
        return load_checkpoint(args.init_from, SCRIPT, shapes, "--init-from", implied=implied)
    return None


def read_args() -> tuple:
    """Args from the command line with the scaling resolved, their resume signature, and the checkpoint to start from
    (--resume or --init-from, or None); every usage error exits 2 here, before anything heavy starts."""
    args = tyro.cli(Args, description=help_description(__doc__))
    signature = resume_signature(args, RESUMABLE)  # the flags as given: validate and the scaling rewrite args
    try:
        scaling = validate(args)
        ckpt = load_start(args, signature, scaling)
        last = args.total_timesteps // scaling["batch_size"]  # the run's final iteration
        check(not ckpt or ckpt["iteration"] < last,
              f"--total-timesteps {args.total_timesteps}: the checkpoint is already at iteration "
              f"{ckpt and ckpt['iteration']}; raise it to continue")
        check(all(k <= last for k in args.keep_checkpoints), f"--keep-checkpoints "
              f"{max(args.keep_checkpoints, default=0)}: the run ends at iteration {last}; keep iterations up to it")
        check_writable_dir(ckpt["run_dir"] if args.resume else args.runs_dir, "--resume" if args.resume else "--runs-dir")
    except UsageError as e:
        exit_usage(e)
    apply_scaling(args, scaling)
    return args, scaling, signature, ckpt


def restore_runner(template: RunnerState, leaves: list, flag: str) -> RunnerState:
    ref = jax.tree.leaves(template)
    check(len(ref) == len(leaves) and all(np.shape(a) == np.shape(b) and np.asarray(a).dtype == np.asarray(b).dtype
                                          for a, b in zip(ref, leaves)),
          f"{flag}: the checkpoint's state does not match this configuration (network or env shapes)")
    return jax.tree.unflatten(jax.tree.structure(template), [jnp.asarray(x) for x in leaves])


def initial_runner(train: Train, args, ckpt) -> RunnerState:
    """A new state from --seed, or the checkpoint's (--resume: the same run; --init-from: a new run from its state,
    with this run's hyperparameters), placed on the devices."""
    runner = train.init(train.tasks, args.seed)
    if ckpt:
        flag = "--resume" if args.resume else "--init-from"
        try:
            runner = restore_runner(runner, ckpt["runner"], flag)
        except UsageError as e:
            exit_usage(e)
        print(f"{'resuming' if args.resume else 'starting from'} {args.resume or args.init_from} at iteration "
              f"{ckpt['iteration']}" + (f" with --ewma-com {args.ewma_com} --clip-coef {args.clip_coef}"
                                        if args.init_from and not args.resume else ""))
    return jax.device_put(runner, train.shardings(runner))


def next_stop(iteration: int, args) -> int:
    """The next iteration after which the host has something to do (log events, checkpoint, end)."""
    stops = [args.num_iterations, iteration + args.updates_per_chunk]
    for every in (args.eval_every, args.diagnostics_every, args.checkpoint_every):
        if every:
            stops.append((iteration // every + 1) * every)
    stops += [k for k in args.keep_checkpoints if k > iteration]
    return min(stops)


class ChunkClock:
    """SPS without the first chunk (compilation, warm-up), and the wall time a checkpoint carries across resumes."""

    def __init__(self, batch_size: int, wall_offset: float):
        self.batch_size, self.wall_offset = batch_size, wall_offset
        self.start, self.timed_from, self.timed_steps = time.time(), None, 0

    def tick(self, updates: int) -> float:
        now = time.time()
        if self.timed_from is None:
            self.timed_from, self.timed_steps = now, 0
        else:
            self.timed_steps += updates * self.batch_size
        if self.timed_steps:
            return self.timed_steps / (now - self.timed_from)
        return updates * self.batch_size / (now - self.start)

    def wall_time(self) -> float:
        return self.wall_offset + time.time() - self.start

    def final_sps(self, steps_taken: int) -> tuple:
        """(SPS after the first chunk, SPS with it) of this process's steps."""
        with_warmup = steps_taken / max(time.time() - self.start, 1e-9)
        if self.timed_from and self.timed_steps:
            return self.timed_steps / (time.time() - self.timed_from), with_warmup
        return with_warmup, with_warmup


def started_at(run_dir: str, default: int) -> int:
    """The iteration a resumed run first started from (0, or its --init-from checkpoint's), from its config.json."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            return int(json.load(f).get("start_iteration", default))
    except (OSError, ValueError, TypeError):
        return default


def open_run(args, scaling: dict, ckpt, start_iteration: int):
    """The run directory (--resume: the checkpoint's) with config.json, and its logger."""
    if args.resume:
        run_dir = ckpt["run_dir"]
        start_iteration = started_at(run_dir, start_iteration)
    else:
        run_dir = os.path.join(args.runs_dir, f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}")
    config = {"argv": sys.argv[1:], "args": dataclasses.asdict(args), "resolved": scaling, "devices": jax.device_count(),
              "platform": jax.default_backend(), "versions": package_versions(), "git_commit": git_commit(),
              "script": SCRIPT, "init_from": args.init_from, "start_iteration": start_iteration}
    logger = RunLogger(run_dir, config, args, args.num_iterations * args.batch_size,
                       ckpt if args.resume else None)
    announce_run(logger.run_dir)
    return logger


def save_run_checkpoint(logger, args, signature: dict, iteration: int, wall_time: float, runner: RunnerState,
                        name: str = "latest.ckpt") -> None:
    """The whole runner state (weights, Adam, theta_prox, RNG key, env states) as numpy leaves, with the logs' sizes
    (what a resume from it keeps of them)."""
    save_checkpoint(os.path.join(logger.run_dir, "checkpoints", name), {
        "script": SCRIPT, "signature": signature, "iteration": iteration,
        "global_step": iteration * args.batch_size, "wall_time": wall_time, "run_dir": logger.run_dir,
        "log_sizes": logger.log_sizes(),
        "args": dataclasses.asdict(args), "runner": [np.asarray(x) for x in jax.device_get(jax.tree.leaves(runner))]})


def first_bad_update(stats: np.ndarray, runner: RunnerState, updates: int) -> Optional[int]:
    """The index of the chunk's first update with a non-finite loss (the last one if only the parameters are not
    finite), or None (docs/run_directory.md#failure-behaviour)."""
    params_ok = all(np.isfinite(x).all() for x in jax.device_get(jax.tree.leaves(runner.train.params)))
    finite_rows = np.isfinite(stats[:updates, :7]).all(axis=1)
    if not finite_rows.all():
        return int(np.argmin(finite_rows))
    return None if params_ok else updates - 1


def log_update(logger, args, scaling: dict, iteration: int, stats: np.ndarray, episodes: Episodes, sps: float,
               diagnostics) -> None:
    """One update's rows: its finished episodes, then CleanRL's charts and losses (and the diagnostics if probed)."""
    step = iteration * args.batch_size
    ended = np.flatnonzero(episodes.done.ravel())
    for ret, length in zip(episodes.ep_return.ravel()[ended], episodes.ep_length.ravel()[ended]):
        logger.log(step, iteration, {"charts/episodic_return": ret, "charts/episodic_length": length})
    lr = scaling["learning_rate"]
    if args.anneal_lr:
        lr = lr * (1.0 - (iteration - 1.0) / args.num_iterations)
    scalars = {"charts/learning_rate": lr, "charts/SPS": sps}
    scalars.update({name: stats[j] for j, name in enumerate(STAT_NAMES) if name != "diagnostics/grad_norm"})
    if len(ended):
        scalars["charts/train_solve_rate"] = float(np.mean(episodes.solved.ravel()[ended]))
    if diagnostics is not None:
        diag, seq, ref = diagnostics
        scalars.update(diag)
        if args.kl_profile:
            logger.log_profile({"global_step": step, "iteration": iteration, "seq_kl": seq, "ref_kl": ref})
    logger.log(step, iteration, scalars)


def evaluate_and_log(train: Train, args, logger, iteration: int, params) -> dict:
    """charts/solve_rate over every task, sampled and greedy, on one device, from its own key stream (evaluation
    never draws from training's)."""
    key = jax.random.fold_in(jax.random.PRNGKey(args.seed + 7919), iteration)
    params = jax.device_put(params, jax.devices()[0])
    result = jax.device_get(train.evaluate(train.eval_tasks, params, key, attempts=args.eval_attempts))
    scalars = {"charts/solve_rate": result.solve_rate, "charts/solve_rate_greedy": result.solve_rate_greedy,
               "charts/eval_return": result.eval_return, "charts/eval_return_greedy": result.eval_return_greedy}
    if args.eval_attempts * args.num_tasks > 1:  # a standard error needs two episodes
        scalars.update({"charts/solve_rate_se": result.solve_rate_se, "charts/eval_return_se": result.eval_return_se})
    logger.log(iteration * args.batch_size, iteration, scalars)
    return scalars


def peak_device_bytes(devices) -> Optional[int]:
    """The most memory any of these devices held at once (the allocator's peak_bytes_in_use), or None where the
    backend keeps no such count (CPU): with XLA_PYTHON_CLIENT_PREALLOCATE=false it measures the run itself
    (https://docs.jax.dev/en/latest/gpu_memory_allocation.html)."""
    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in devices]
    peaks = [p for p in peaks if p is not None]
    return int(max(peaks)) if peaks else None


def peak_text(peak: Optional[int]) -> str:
    return "" if peak is None else f", peak device memory {peak / 2**30:.2f} GiB"


def final_evaluation(train: Train, args, logger, iteration: int, params) -> dict:
    """The final policy's solve rates: logged, printed, and returned for summary.json."""
    last_eval = evaluate_and_log(train, args, logger, iteration, params)
    rates = {"solve_rate": float(last_eval["charts/solve_rate"]),
             "solve_rate_greedy": float(last_eval["charts/solve_rate_greedy"])}
    if "charts/solve_rate_se" in last_eval:
        rates["solve_rate_se"] = float(last_eval["charts/solve_rate_se"])
    print(f"solve rate over {args.num_tasks} tasks: {rates['solve_rate']:.4f} sampled "
          f"(SE {rates.get('solve_rate_se', float('nan')):.4f}, --eval-attempts {args.eval_attempts}), "
          f"{rates['solve_rate_greedy']:.4f} greedy")
    return rates


def finish_run(train: Train, args, signature: dict, logger, status: str, iteration: int, start_iteration: int,
               clock: ChunkClock, runner: RunnerState) -> None:
    """summary.json; a finished run is also checkpointed, evaluated (unless --no-final-eval) and (--save-model) saved."""
    final_sps, sps_with_warmup = clock.final_sps((iteration - start_iteration) * args.batch_size)
    summary = {"status": status, "global_step": iteration * args.batch_size, "iteration": iteration, "SPS": final_sps,
               "SPS_with_warmup": sps_with_warmup}
    if status == "finished":
        save_run_checkpoint(logger, args, signature, iteration, clock.wall_time(), runner)
        if args.final_eval:
            summary.update(final_evaluation(train, args, logger, iteration, runner.train.params))
        if args.save_model:
            model_path = os.path.join(logger.run_dir, f"{args.exp_name}.cleanrl_model")
            atomic_write(model_path, pickle.dumps(jax.device_get(runner.train.params)))
            summary["model_path"] = model_path
            print(f"model saved to {model_path}")
    summary["peak_device_bytes"] = peak_device_bytes(jax.local_devices())
    logger.close(summary)
    print(f"SPS: {final_sps:.0f} (with warm-up: {sps_with_warmup:.0f}){peak_text(summary['peak_device_bytes'])}; "
          f"run directory: {logger.run_dir}")
    if status == "interrupted":
        print(f"interrupted; resume with --resume {os.path.join(logger.run_dir, 'checkpoints', 'latest.ckpt')}")


def main():
    args, scaling, signature, ckpt = read_args()
    print(describe_scaling(scaling, args) + f", num_iterations={args.num_iterations}"
          + f", eval_attempts={args.eval_attempts}, devices={jax.device_count()}")

    # Tasks, agent and the jitted pieces; the hyperparameters a sweep changes are traced values
    with Phase(f"building {args.num_tasks} tasks and the agent"):
        train = make_train(args)
        hyper = Hyper(clip_coef=jnp.float32(args.clip_coef), ewma_com=jnp.float32(args.ewma_com),
                      ent_coef=jnp.float32(args.ent_coef), vf_coef=jnp.float32(args.vf_coef))
        runner = initial_runner(train, args, ckpt)
        probe = train.empty_probe(runner.train.params)
    start_iteration = ckpt["iteration"] if ckpt else 0
    logger = open_run(args, scaling, ckpt, start_iteration)
    stop = StopFlag()
    clock = ChunkClock(args.batch_size, ckpt["wall_time"] if args.resume else 0.0)
    status, iteration = "finished", start_iteration

    while iteration < args.num_iterations:
        # A jitted chunk of updates, each: rollout, GAE, epochs x minibatches of the PPO(-EWMA) loss, theta_prox
        # following theta (B26 §2.2); on a diagnostics iteration the chunk's last update is probed
        end = next_stop(iteration, args)
        n = end - iteration
        diag_at = end if args.diagnostics_every and end % args.diagnostics_every == 0 else None
        with Phase(f"first {n} updates of {args.batch_size:,} steps", "compiling them first: slow on the first run only, "
                   f"cached in {os.environ['JAX_COMPILATION_CACHE_DIR']} after", show=iteration == start_iteration):
            runner, probe, stats, episodes = train.train_chunk(hyper, train.tasks, runner, probe, n,
                                                               n - 1 if diag_at else -1)
            stats, episodes = jax.device_get((stats, episodes))
        bad = first_bad_update(stats, runner, n)
        sps = clock.tick(n)

        # Log every good update: its episodes, losses and (probed) diagnostics
        for i in range(n if bad is None else bad):
            it = iteration + i + 1
            diagnostics = None
            if it == diag_at:
                diagnostics = compute_diagnostics(train.network, probe, runner.train, args.batch_size, stats[i, 6])
            log_update(logger, args, scaling, it, stats[i], jax.tree.map(lambda x: x[i], episodes), sps, diagnostics)
        if bad is not None:  # non-finite loss or parameters: stop, keep the last good checkpoint
            print(f"error: non-finite loss or parameters at iteration {iteration + bad + 1}; the last good checkpoint "
                  "is kept. Lower --learning-rate or check the inputs.", file=sys.stderr)
            status = "diverged"
            break
        iteration = end

        # Evaluate the solve rate over every task; checkpoint; stop at a safe point on SIGINT/SIGTERM
        if args.eval_every and iteration % args.eval_every == 0 and iteration < args.num_iterations:
            evaluate_and_log(train, args, logger, iteration, runner.train.params)
        logger.progress(iteration * args.batch_size, sps)
        if stop.signum:
            status = "interrupted"
        if args.checkpoint_every and iteration % args.checkpoint_every == 0 or status == "interrupted":
            save_run_checkpoint(logger, args, signature, iteration, clock.wall_time(), runner)
        if iteration in args.keep_checkpoints:  # kept beside latest.ckpt: another run can start from this state
            save_run_checkpoint(logger, args, signature, iteration, clock.wall_time(), runner,
                                f"iteration_{iteration}.ckpt")
        logger.flush()
        if status == "interrupted":
            break

    finish_run(train, args, signature, logger, status, iteration, start_iteration, clock, runner)
    if status == "diverged":
        sys.exit(3)
    if status == "interrupted":
        sys.exit(128 + stop.signum)


# ===== Shared infrastructure: identical in every script, checked by cleanrl_scaling.utils.shared_blocks =====
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


if __name__ == "__main__":
    main()
