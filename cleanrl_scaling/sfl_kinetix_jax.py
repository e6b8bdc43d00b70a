"""SFL (Rutherford et al. 2024, "No Regrets") on Kinetix's random-level distributions, from 2048 to 1M parallel
environments (B26 §6, App. D-F): PPO trains on levels of which a fraction rho comes from a buffer of the K most
learnable levels, refilled every T updates by scoring N fresh random levels with the current policy.
PureJaxRL's shape: make_train(args) returns the jitted pieces (a chunk of PPO updates, the level generator and its
no-op filter, the scoring rollout, the buffer merge, the evaluation, the diagnostics pass), and a host loop runs the
SFL iterations around them: refresh the buffer, a chunk of updates, log, evaluate, checkpoint.

    python cleanrl_scaling/sfl_kinetix_jax.py --env-size s --preset 2048

Docs: docs/sfl_kinetix_jax.md. Read top to bottom: Args and the presets, then the algorithm (the environment and its
random levels with their layout on the devices, the network, the SFL buffer, GAE, the loss and the minibatches,
make_train: rollout, update, scoring, evaluation; diagnostics; the multi-device helpers; the host's SFL steps; main
and its set-up, resume and run-directory plumbing); below the marked line, the infrastructure every script shares.
"""
import dataclasses
import functools
import glob
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, NamedTuple, Optional

import numpy as np
import tyro

os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "cleanrl_scaling_jax"))
import jax  # noqa: E402  (after the cache directory is chosen)
from jax.experimental import multihost_utils  # noqa: E402
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
    preset: str = "none"
    """2048 | 8192 | 65536 | 1m: B26 Table 3's SFL values with Table 2's PPO values and the env count (the 1m preset adds App. D's hybrid recipe); flags given on the command line win over the preset (none = the flags as given)"""

    # Algorithm specific arguments (defaults: B26 Table 2, SFL column, i.e. the 2048-env configuration)
    env_size: str = "s"
    """Kinetix's random-level distribution: s, m or l (the maximum number of entities in a scene)"""
    total_timesteps: int = 1_073_741_824
    """total timesteps of the experiments (Kinetix's default budget, 2^30)"""
    learning_rate: float = 5e-5
    """the learning rate of the optimizer (B26 Table 2, SFL)"""
    num_envs: int = 2048
    """the number of parallel environments (split over all visible devices)"""
    num_steps: int = 256
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = False
    """Toggle learning rate annealing (off, as Kinetix's SFL configuration)"""
    gamma: float = 0.995
    """the discount factor gamma"""
    gae_lambda: float = 0.9
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 32
    """the number of mini-batches"""
    update_epochs: int = 8
    """the K epochs to update the policy"""
    minibatch_form: Literal["trajectories", "steps"] = "trajectories"
    """trajectories: a minibatch is the whole T-step rollouts of N/M envs, as Kinetix forms them (so M <= N, B26 App. D); steps: T/S random steps of each of N/G envs (S x G = M; works also when M > N)"""
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
    """the maximum norm for the gradient clipping: B26 Table 2's 0.5, in every preset. Kinetix's own configuration (https://github.com/FLAIROx/Kinetix/blob/main/configs/learning/ppo-base.yaml) has 1.0, and B26 App. A.1 says its 2048 run used Kinetix's values: pass 1.0 for those. diagnostics/grad_norm and diagnostics/grad_clip_frac (the share of steps clipped) are logged every update"""
    target_kl: Optional[float] = None
    """the target KL divergence threshold"""
    per_device_stats: int = 1
    """G: advantages normalised over each of G equal parts of a minibatch and the buffer kept as the top K/G of each of G equal parts of the scored levels, as Kinetix's pmap over G devices computes them (B26 App. D: 1M envs on 128 GPUs; the 1m preset's 128); 1 = over the whole minibatch and all levels. Emulated: any real device count gives the same result, and G real devices hold exactly their parts"""
    bootstrap_time_limit: bool = False
    """bootstrap the value of an episode cut by --episode-length from V(next observation); off (default), as Kinetix, the time limit ends the episode's returns like a termination"""

    # PPO-EWMA (B26 §2.2, App. E.2 / Fig. 18)
    ewma_com: float = 0.0
    """center of mass C of the proximal policy, in minibatch steps (0 = plain PPO); beta = C / (C + 1)"""
    imp_samp_max: float = 100.0
    """PPO-EWMA: truncate the importance ratio pi/pi_behavior at this value, as Hilton et al.'s code (0 = off)"""

    # SFL (B26 Table 3, 2048 column; Rutherford et al. 2024)
    no_sfl: bool = False
    """plain PPO on fresh random levels every update (domain randomisation, Kinetix's baseline): no buffer or filter"""
    train_levels: tuple[str, ...] = ()
    """train on these hand-designed levels of --env-size (e.g. s/h4_thrust_aim) instead of random ones, env i on level i mod their count, as Kinetix's fixed training-level lists; checks that the agent learns a level. Needs --no-sfl"""
    sfl_num_levels: int = 12288
    """N: random levels scored at every buffer update"""
    sfl_rollout_length: int = 512
    """L: steps each scored level is played with the current policy (auto-resetting to itself)"""
    sfl_buffer_size: int = 1024
    """K: the buffer keeps the K levels of highest learnability p(1-p) among the N scored"""
    sfl_update_period: int = 128
    """T: PPO updates between buffer updates (the first is before update 1)"""
    sfl_sample_ratio: float = 0.5
    """rho: fraction of the envs that play a buffer level at each update; the others play fresh random levels"""
    sfl_filter_batch: int = 4096
    """levels scored per compiled filtering call over all devices, each call one no-op filter request (Kinetix: 3 batches of 4096 = N per device; the 8192, 65536 and 1m presets use 32768, 32768, 524288); N must be a multiple"""

    # Levels, network, evaluation
    episode_length: int = 256
    """steps before an episode is truncated (Kinetix: 256); the no-op filter and evaluation use it too"""
    level_batch: int = 1024
    """random levels generated per device and loop step of the compiled generator and no-op filter (a compute knob: a level depends only on its key); a request's steps run in one call on the devices"""
    level_filter_ratio: int = 2
    """Kinetix's no-op filter: each random level is chosen among this many candidates, avoiding ones a no-op solves"""
    level_filter_steps: int = 64
    """Kinetix's no-op filter: steps of the all-zero action that decide whether a candidate is solved by doing nothing"""
    network: str = "transformer"
    """transformer (permutation-invariant entity transformer on symbolic-entity observations, Kinetix's default) or mlp (symbolic-flat observations, faster on CPU)"""
    obs_dtype: str = "float32"
    """float32 or bfloat16: the dtype observations are kept in (the rollout stores num_envs x num_steps of them, most of an update's memory at 65k+ envs); the policy acts on the same rounded values it is trained on"""
    hidden_size: int = 128
    """width of the actor and critic MLP heads (Kinetix: 128)"""
    num_hidden_layers: int = 5
    """hidden layers of the actor and critic MLP heads (Kinetix: 5)"""
    embed_dim: int = 128
    """transformer: width of the entity embeddings (Kinetix's transformer_encoder_size: 128)"""
    attention_size: int = 16
    """transformer: width of the queries, keys and values summed over the heads (Kinetix's transformer_size: 16, so 2 per head)"""
    num_heads: int = 8
    """transformer: attention heads, a multiple of the observation's 4 attention masks (Kinetix: 8)"""
    transformer_depth: int = 2
    """transformer: gated self-attention layers, each followed by the joint and thruster messages (Kinetix: 2)"""
    eval_every: int = 128
    """log charts/solve_rate_random and charts/solve_rate_handmade before training and every K iterations (0 = only at the end)"""
    eval_random_levels: int = 100
    """size of the fixed random evaluation set (Kinetix: 100)"""
    eval_level_seed: int = 100
    """seed of the random evaluation set: the same levels for every run seed"""
    eval_attempts: int = 20
    """attempts per evaluation level; a level's solve rate is the mean over attempts of 'the first episode solved'"""
    final_eval: bool = True
    """evaluate the final policy (its solve rates in summary.json); --no-final-eval with --eval-every 0 never builds the evaluation levels: timed runs (B26 Fig. 16a)"""
    updates_per_chunk: int = 4
    """updates per jitted chunk; logging, evaluation, buffer updates and checkpoints happen between chunks"""
    init_from: Optional[str] = None
    """path of a checkpoint whose network parameters start a new run with this run's flags: fresh optimizer, level buffer and RNG from --seed, step 0 (docs/run_directory.md#a-new-run-from-old-weights)"""
    distributed: bool = False
    """call jax.distributed.initialize() first, for several processes (one per node under Slurm, each using every GPU it sees; elsewhere set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID); see docs/sfl_kinetix_jax.md"""
    estimate_memory: bool = False
    """print the per-device memory of this configuration's compiled programs (XLA's analysis) and exit; trains nothing"""

    # to be filled in runtime
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
# Presets: B26 Table 3 (SFL), Table 2 (PPO) and App. D (the 1M-env hybrid recipe)
# ---------------------------------------------------------------------------------------------------------
# B26 Table 2, SFL column. Its max grad norm 0.5, the only value B26 states, is every preset's; Kinetix's
# configs/learning/ppo-base.yaml has 1.0, which B26 App. A.1's "same exact values" implies: --max-grad-norm 1.0
B26_PPO = {"learning_rate": 5e-5, "max_grad_norm": 0.5, "gamma": 0.995, "gae_lambda": 0.9, "num_steps": 256,
           "update_epochs": 8, "num_minibatches": 32, "clip_coef": 0.2, "ent_coef": 0.01, "vf_coef": 0.5}
PRESETS = {  # B26 Table 3: N (filtering batch size), T (update period), K (buffer size), L, rho
    "2048": {"num_envs": 2048, "sfl_num_levels": 12288, "sfl_update_period": 128, "sfl_buffer_size": 1024},
    # 8192 and 65536: B26's recipe (App. D: same minibatch size and lr, more minibatches); our reading, the paper
    # states the hybrid recipe only for 1M
    # from 8192 on, N is scored in calls of 32,768 levels (8 of Kinetix's per-device 4,096), not 64-1,024 calls
    "8192": {"num_envs": 8192, "sfl_num_levels": 262144, "sfl_update_period": 256, "sfl_buffer_size": 8192,
             "scaling_recipe": "more-minibatches", "base_num_envs": 2048, "sfl_filter_batch": 32768},
    "65536": {"num_envs": 65536, "sfl_num_levels": 262144, "sfl_update_period": 32, "sfl_buffer_size": 8192,
              "scaling_recipe": "more-minibatches", "base_num_envs": 2048, "sfl_filter_batch": 32768},
    # App. D: 1M = 512 x 2048 envs; 1024 minibatches (32x), each 16x larger, lr x sqrt(16) = 4; run with Kinetix's
    # code on 128 GPUs, so its advantages and top K were per device (B26 does not say the other runs' GPU counts)
    "1m": {"num_envs": 1048576, "sfl_num_levels": 4194304, "sfl_update_period": 2, "sfl_buffer_size": 8192,
           "scaling_recipe": "hybrid", "base_num_envs": 2048, "minibatch_multiplier": 16, "sfl_filter_batch": 524288,
           "per_device_stats": 128},
}
for _preset in PRESETS.values():
    _preset.update({"sfl_rollout_length": 512, "sfl_sample_ratio": 0.5, **B26_PPO})


def given_flags(argv: list) -> set:
    """Field names of the flags written on the command line (--x, --x=v, --no-x)."""
    names = set()
    for token in argv:
        if token.startswith("--"):
            name = token[2:].split("=", 1)[0].replace("-", "_")
            names.add(name)
            if name.startswith("no_"):
                names.add(name[3:])
    return names


def apply_preset(args, argv: list) -> None:
    check(args.preset == "none" or args.preset in PRESETS,
          f"--preset {args.preset!r} is not one of none, {', '.join(PRESETS)}")
    if args.preset == "none":
        return
    given = given_flags(argv)
    for name, value in PRESETS[args.preset].items():
        if name not in given:  # a flag on the command line wins over the preset
            setattr(args, name, value)


# ---------------------------------------------------------------------------------------------------------
# Environment: Kinetix with multi-discrete actions; every env auto-resets to the level it was given
# ---------------------------------------------------------------------------------------------------------
ENV_SIZES = ("s", "m", "l")
NETWORKS = ("transformer", "mlp")
OBS_DTYPES = ("float32", "bfloat16")


def make_env(env_size: str, network: str, episode_length: int = 256, obs_dtype: str = "float32"):
    """Symbolic-entity observations for the transformer, symbolic-flat ones for the MLP; Kinetix's env settings
    (dense reward scale 0.2, frame skip 2 from its env configs; 256-step episodes)."""
    from kinetix.environment.env import make_kinetix_env
    from kinetix.environment.env_state import EnvParams
    from kinetix.environment.spaces import ActionType, ObservationType
    from kinetix.environment.utils import static_env_params_from_size
    static_params = static_env_params_from_size(env_size)
    env_params = EnvParams().replace(dense_reward_scale=0.2, max_timesteps=episode_length)
    obs_type = ObservationType.SYMBOLIC_ENTITY if network == "transformer" else ObservationType.SYMBOLIC_FLAT
    env = make_kinetix_env(ActionType.MULTI_DISCRETE, obs_type, None, env_params, static_params, auto_reset=False)
    return ObsEnv(env, network == "transformer", jnp.dtype(obs_dtype)), env_params, static_params


class EntityObs(struct.PyTreeNode):
    """Kinetix's symbolic-entity observation as its network reads it: per-entity features and presence, the shapes each
    joint and thruster acts on (without them the relative joint and thruster features do not say which body a motor or
    thruster moves) and the four [S, S] attention masks over the shapes (all, not colliding, jointed, in contact)."""
    polygons: jnp.ndarray
    circles: jnp.ndarray
    joints: jnp.ndarray
    thrusters: jnp.ndarray
    polygon_mask: jnp.ndarray
    circle_mask: jnp.ndarray
    joint_mask: jnp.ndarray
    thruster_mask: jnp.ndarray
    attention_mask: jnp.ndarray  # [4, S, S] bool, shapes = polygons then circles
    joint_indexes: jnp.ndarray  # [2J, 2] int: (shape the message goes to, the other shape); both ends of each joint
    thruster_indexes: jnp.ndarray  # [R] int: the shape each thruster is fixed to


NO_TIME_LIMIT = 2**30  # Kinetix's own time limit, lifted: ObsEnv applies --episode-length itself


class ObsEnv:
    """Kinetix's env with the observation the network reads (EntityObs, or the flat one), its float parts in
    --obs-dtype; it applies the time limit itself, so that info["terminated"] says whether the episode ended by the
    goal, a hazard or a NaN, also on the last step (where Kinetix's done cannot tell)."""

    def __init__(self, env, entity: bool, dtype):
        self.env, self.physics_engine, self.entity, self.dtype = env, env.physics_engine, entity, dtype

    def action_space(self, params):
        return self.env.action_space(params)

    def get_obs(self, state):
        return self.compact(self.env.get_obs(state))

    def step_env(self, rng, state, action, params):
        obs, state, reward, terminated, info = self.env.step_env(rng, state, action,
                                                                 params.replace(max_timesteps=NO_TIME_LIMIT))
        done = terminated | (state.timestep >= params.max_timesteps)
        return self.compact(obs), state, reward, done, {**info, "terminated": terminated}

    def compact(self, obs):
        if self.entity:
            obs = EntityObs(**{f.name: getattr(obs, f.name) for f in dataclasses.fields(EntityObs)})
        return jax.tree.map(lambda x: store_obs(x, self.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, obs)


def store_obs(x, dtype):
    """bfloat16 observations are kept as their bits (uint16): XLA's CPU backend converted a stored bfloat16 batch back
    to float32 all at once (both copies alive), but does not move the decode of a gathered minibatch out of the loop."""
    return x if dtype == jnp.float32 else jax.lax.bitcast_convert_type(x.astype(jnp.bfloat16), jnp.uint16)


def read_obs(x):
    """What the network computes on: float32 (bfloat16 bits decoded, masks left alone)."""
    if x.dtype == jnp.uint16:
        return jax.lax.bitcast_convert_type(x, jnp.bfloat16).astype(jnp.float32)
    return x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x


def action_layout(env, env_params):
    """Choices per action dimension (3 per motor, 2 per thruster) and the [D, A] mask of valid choices."""
    dims = np.asarray(env.action_space(env_params).number_of_dims_per_distribution)
    mask = np.arange(dims.max())[None, :] < dims[:, None]
    return dims, mask


def tree_select(cond, on_true, on_false):
    """Per-env select between two batched pytrees (cond: [N])."""
    return jax.tree.map(lambda a, b: jnp.where(cond.reshape(cond.shape + (1,) * (a.ndim - 1)), a, b), on_true, on_false)


def tree_take(tree, idx):
    return jax.tree.map(lambda x: x[idx], tree)


def tree_concat(trees):
    return jax.tree.map(lambda *xs: jnp.concatenate(xs), *trees)


# ---------------------------------------------------------------------------------------------------------
# Random levels: Kinetix's generator behind its no-op filter, a level a function of its key
# ---------------------------------------------------------------------------------------------------------
def handmade_level_names(env_size: str) -> list:
    """The hand-designed levels the package ships for this size (levels/{s,m,l}/*.json: Kinetix's eval sets)."""
    import kinetix
    folder = os.path.join(os.path.dirname(kinetix.__file__), "levels", env_size)
    return sorted(f"{env_size}/{os.path.basename(p)[:-len('.json')]}" for p in glob.glob(os.path.join(folder, "*.json")))


@functools.lru_cache(maxsize=2)  # --train-levels and the evaluation read the same levels: loaded once
def load_handmade_levels(env_size: str, static_params):
    from kinetix.util.saving import load_evaluation_levels
    levels, _ = load_evaluation_levels(handmade_level_names(env_size), static_env_params_override=static_params)
    return levels


class LevelSampler(NamedTuple):
    """Kinetix's random level generator behind its no-op filter, for one level per key (B26 §6)."""
    env: Any
    env_params: Any
    static_params: Any
    filter_ratio: int
    filter_steps: int
    level: Any = None  # random_level on this sampler, jitted: the filter's and the generator's programs share its trace


def noop_solves(sampler: LevelSampler, level) -> jnp.ndarray:
    """Does the first episode of the all-zero action (motors and thrusters off) end on the goal within the filter's
    steps? Such levels teach nothing, so the filter avoids them (Kinetix's level_filter_n_steps)."""
    env, params = sampler.env, sampler.env_params
    action = jnp.zeros(env.action_space(params).shape, jnp.int32)

    def step(carry, _):
        state, ended, solved = carry
        _, state, reward, done, _ = env.step_env(None, state, action, params)
        first = done & ~ended
        return (state, ended | done, solved | (first & (reward > 0.5))), None

    (_, _, solved), _ = jax.lax.scan(step, (level, jnp.zeros((), bool), jnp.zeros((), bool)), None, sampler.filter_steps)
    return solved


def candidate_keys(key, ratio: int):
    """The keys of a level's `ratio` candidates for the no-op filter (the first one is the level when not filtering)."""
    return jax.random.split(key, ratio + 1)[1:]


def random_level(sampler: LevelSampler, key):
    """One level of Kinetix's random distribution, a function of its key only."""
    from kinetix.environment.ued.distributions import sample_kinetix_level
    from kinetix.environment.ued.ued_state import UEDParams
    engine = sampler.env.physics_engine  # built outside the trace (it precomputes index arrays)
    return sample_kinetix_level(key, engine, sampler.env_params, sampler.static_params, UEDParams())


def candidates_noop_solved(sampler: LevelSampler, keys):
    """[G, ratio] bools: which of each of G levels' candidates a no-op solves. The candidates are made in `ratio`
    blocks of G, the generator program's batch: JAX batches Kinetix's generator once per batch size, and batching it
    again at G x ratio was most of this program's trace. Then all G x ratio are played as one batch."""
    ratio = sampler.filter_ratio
    candidates = jax.vmap(functools.partial(candidate_keys, ratio=ratio))(keys)  # [G, ratio, 2]
    blocks = jax.lax.map(jax.vmap(sampler.level), jnp.swapaxes(candidates, 0, 1))  # [ratio, G, ...]
    levels = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape((-1,) + x.shape[2:]), blocks)  # level-major
    return jax.vmap(functools.partial(noop_solves, sampler))(levels).reshape(keys.shape[0], ratio)


@functools.partial(jax.jit, static_argnums=2)
def pick_candidates(key, trivial, count: int):
    """Kinetix's no-op filter over a whole request: `count` of its candidates drawn without replacement, weight 1 each,
    0.001 when a no-op solves it (Gumbel top-k = successive weighted draws); trivial [C] -> indexes [count]. A trivial
    candidate survives only where the request has fewer than `count` others."""
    logw = jnp.where(trivial, math.log(0.001), 0.0)
    return jax.lax.top_k(logw + jax.random.gumbel(key, logw.shape), count)[1]


def level_keys(key, start: int, count: int):
    """Key of level j of a request: fold_in(key, j), whatever the batching."""
    return jax.vmap(functools.partial(jax.random.fold_in, key))(jnp.arange(start, start + count, dtype=jnp.uint32))


def sample_levels(train, args, key, n: int):
    """n random levels: one request, filtered as one batch (Kinetix's filter runs per sampler call); split evenly over
    the devices when they divide n, else replicated."""
    return random_levels(train, args, key, None, 1, n, 0)


# ---------------------------------------------------------------------------------------------------------
# Level generation on the devices: a request's keys laid out per device, the generator and no-op filter looped over
# them in one call, the levels placed where their envs play them
# ---------------------------------------------------------------------------------------------------------
def random_levels(train: "Train", args, key, first: Optional[int], rows: int, cols: int, out_rows: int, filtered=True):
    """rows requests of cols random levels -> levels [out_rows, cols] (out_rows 0: [cols]; rows past `rows` repeat the
    last), split over the devices when they divide cols (each level made on the device that holds it), else
    replicated. Request r's key is fold_in(key, first + r) (first None: key itself, one request); its level j is the
    no-op filter's pick among the candidates of fold_in(request key, j) (pick_candidates), so a level is a function of
    its key and the batching (--level-batch, chunks, devices) never changes it. Whatever the count, the host makes
    the same five calls: the candidates' keys, the filter, the picks laid out per device, the generator, the levels
    placed; filter and generator loop over their steps of level_batch keys per device on the devices."""
    devices, batch = jax.device_count(), args.level_batch
    count = rows * cols
    spread = cols % devices == 0
    own = count // devices if spread else -(-count // devices)  # keys per device
    capacity = max(level_calls(args), -(-own // batch))
    ratio, fold = args.level_filter_ratio, first is not None
    key = to_global(fetch(key), NamedSharding(env_mesh(), P()))  # 8 bytes: every process passes the same global key
    trivial = None
    if filtered and args.level_filter_steps and ratio > 1:
        laid = level_program("candidate_keys", rows, cols, fold, devices, batch, capacity)(key, first or 0)
        trivial = train.noop_solved(laid, -(-count // (devices * batch)))
    laid = level_program("chosen_keys", rows, cols, ratio, fold, devices, batch, capacity, spread)(key, first or 0,
                                                                                                 trivial)
    return level_program("place_levels", rows, cols, out_rows, spread)(train.sample(laid, -(-own // batch)))


@functools.lru_cache(maxsize=64)
def level_program(name: str, *static):
    """random_levels' small programs (keys, picks, placement) for these static shapes, compiled in step by every
    process (InStep: the placement of an uneven split gathers across devices)."""
    fn = {"candidate_keys": candidate_keys_laid, "chosen_keys": chosen_keys_laid, "place_levels": place_levels}[name]
    return InStep(name, jax.jit(functools.partial(fn, *static)))


def level_calls(args) -> int:
    """Loop steps per device of the run's largest request (a chunk's fresh levels, a scoring batch, the evaluation set):
    the size of the looped programs' key array, so one compiled generator and one filter serve them all."""
    devices = jax.device_count()
    requests = [args.updates_per_chunk * max(sfl_counts(args)[1], 1), max(args.eval_random_levels, 1)]
    if not args.no_sfl:
        requests.append(min(args.sfl_filter_batch, args.sfl_num_levels))
    return max(-(-count // (devices * args.level_batch)) for count in requests)


def looped(per_call, sharding):
    """per_call (levels or no-op outcomes of G keys) as one program over keys [C, G, 2]: the first `calls` rows in a loop
    on the devices, the rest left zero; so a request's host work is one call whatever its size (was: a host slice, a
    transfer and a dispatch per row)."""
    per_call = jax.jit(per_call)  # its trace for the carry's shapes is the one the loop body reuses: Kinetix traced once

    def run(keys, calls):
        row = jax.ShapeDtypeStruct(keys.shape[1:], keys.dtype, sharding=sharding)  # the body's row, as constrained
        out = jax.tree.map(lambda s: jnp.zeros((keys.shape[0],) + s.shape, s.dtype), jax.eval_shape(per_call, row))

        def body(i, out):
            made = per_call(jax.lax.with_sharding_constraint(jax.lax.dynamic_index_in_dim(keys, i, keepdims=False),
                                                             sharding))
            return jax.tree.map(lambda o, x: jax.lax.dynamic_update_index_in_dim(o, x, i, 0), out, made)
        return jax.lax.fori_loop(0, calls, body, out)
    return run


def request_level_keys(key, first, rows: int, cols: int, fold: bool):
    """[rows, cols, 2]: fold_in(request key, j), request r's key fold_in(key, first + r) (fold False: key, one row)."""
    requests = jax.vmap(functools.partial(jax.random.fold_in, key))(
        jnp.asarray(first, jnp.uint32) + jnp.arange(rows, dtype=jnp.uint32)) if fold else key[None]
    return jax.vmap(lambda k: level_keys(k, 0, cols))(requests), requests


def lay_keys(keys, devices: int, batch: int, capacity: int, spread: bool):
    """keys [rows, cols, 2] -> [capacity, devices x batch, 2], row c the keys of loop step c. spread (the devices divide
    cols): device d's part of every row is `batch` of its own columns' keys, row-major, so each level is made on the
    device that holds it; else the keys in order. Padded with the last key: a level made twice is dropped once."""
    rows, cols = keys.shape[:2]
    if spread:
        own = keys.reshape(rows, devices, cols // devices, 2).transpose(1, 0, 2, 3).reshape(devices, -1, 2)
        own = jnp.pad(own, ((0, 0), (0, capacity * batch - own.shape[1]), (0, 0)), mode="edge")
        laid = own.reshape(devices, capacity, batch, 2).transpose(1, 0, 2, 3)
    else:
        flat = keys.reshape(-1, 2)
        laid = jnp.pad(flat, ((0, capacity * devices * batch - flat.shape[0]), (0, 0)), mode="edge")
    return jax.lax.with_sharding_constraint(laid.reshape(capacity, devices * batch, 2),
                                            NamedSharding(env_mesh(), P(None, "envs")))


def candidate_keys_laid(rows: int, cols: int, fold: bool, devices: int, batch: int, capacity: int, key, first):
    """The requests' level keys laid out for the no-op filter (each gives its `ratio` candidates' outcomes)."""
    return lay_keys(request_level_keys(key, first, rows, cols, fold)[0].reshape(1, -1, 2), devices, batch, capacity,
                    False)


def chosen_keys_laid(rows: int, cols: int, ratio: int, fold: bool, devices: int, batch: int, capacity: int,
                     spread: bool, key, first, trivial):
    """The kept candidates' keys laid out for the generator: request r keeps cols of its cols x ratio candidates by
    Kinetix's weights (pick_candidates, key split(request key)[1]); trivial None: no filter, candidate 0 of each."""
    keys, requests = request_level_keys(key, first, rows, cols, fold)
    candidates = jax.vmap(jax.vmap(functools.partial(candidate_keys, ratio=ratio)))(keys)  # [rows, cols, ratio, 2]
    if trivial is None:
        chosen = candidates[:, :, 0]
    else:
        trivial = trivial.reshape(-1, ratio)[:rows * cols].reshape(rows, cols * ratio)
        picks = jax.vmap(pick_candidates, (0, 0, None))(jax.vmap(lambda k: jax.random.split(k)[1])(requests), trivial,
                                                        cols)  # [rows, cols]
        chosen = candidates.reshape(rows, cols * ratio, 2)[jnp.arange(rows)[:, None], picks]
    return lay_keys(chosen, devices, batch, capacity, spread)


def place_levels(rows: int, cols: int, out_rows: int, spread: bool, made):
    """The generator's output (laid out by lay_keys) as [out_rows, cols] levels, the rows past `rows` repeating the last
    (out_rows 0: [cols]); spread: cols split over the mesh, every step moving levels within their device only."""
    mesh = env_mesh()
    devices = mesh.size

    def on_devices(x, spec):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec if spread else P()))

    def one(x):
        tail = x.shape[2:]
        if spread:
            x = on_devices(x.reshape((x.shape[0], devices, -1) + tail), P(None, "envs"))  # [C, D, batch, ...]
            x = jnp.swapaxes(x, 0, 1).reshape((devices, -1) + tail)[:, :rows * (cols // devices)]  # [D, own, ...]
            x = jnp.swapaxes(on_devices(x.reshape((devices, rows, cols // devices) + tail), P("envs")), 0, 1)
            x = x.reshape((rows, cols) + tail)
        else:
            x = x.reshape((-1,) + tail)[:rows * cols].reshape((rows, cols) + tail)
        if out_rows == 0:
            return on_devices(x[0], P("envs"))
        return on_devices(jnp.concatenate([x, jnp.repeat(x[-1:], out_rows - rows, axis=0)]), P(None, "envs"))
    return jax.tree.map(one, made)


# ---------------------------------------------------------------------------------------------------------
# Agent: a permutation-invariant entity transformer (default) or the flat observation, then actor and critic MLPs
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


class Gate(nn.Module):
    """GTrXL's GRU-style gate (Parisotto et al. 2020), as Kinetix's transformer layers use it: the residual x and the
    layer output y mix through reset and update gates instead of x + y."""
    width: int

    @nn.compact
    def __call__(self, x, y):
        def lin(name, v):
            return nn.Dense(self.width, use_bias=False, name=name)(v)
        r = jax.nn.sigmoid(lin("wr", y) + lin("ur", x))
        z = jax.nn.sigmoid(lin("wz", y) + lin("uz", x) - self.param("bias", nn.initializers.zeros, (self.width,)))
        h = jnp.tanh(lin("wg", y) + lin("ug", r * x))
        return (1.0 - z) * x + z * h


def gather_shapes(x, index):
    """x [..., S, E], index [..., K] -> [..., K, E]: the embedding of the shape each entry points at. An index past the
    shapes reads the last one, as Kinetix's x[index] does (take_along_axis's default fills NaN there)."""
    return jnp.take_along_axis(x, index[..., None], axis=-2, mode="clip")


def scatter_add_shapes(x, index, messages):
    """x [..., S, E] + messages [..., K, E] added to the shapes `index` [..., K] names (several may hit one shape)."""
    one_hot = jax.nn.one_hot(index, x.shape[-2], dtype=x.dtype)  # [..., K, S]: a sum, independent of entry order
    return x + jnp.einsum("...ks,...ke->...se", one_hot, messages)


class EntityTransformer(nn.Module):
    """Kinetix's permutation-invariant entity network (models/transformer_model.py at its SFL config: dummy_and_mean,
    no feed-forward expansion, gated, single-layer joint/thruster mixing): shape tokens (polygons then circles, each
    tagged with its kind) plus a constant summary token; per layer, gated masked self-attention over the shapes, then
    every joint's message (both shapes and the joint) added into the shape it acts on and every thruster's (its shape
    and the thruster) into its shape; out: the mean over the summary token and the present shapes. No positions, so
    the output does not depend on the order of the entities."""
    embed_dim: int
    attention_size: int
    num_heads: int
    depth: int

    @nn.compact
    def __call__(self, obs):
        e = self.embed_dim

        def embed(name, features, width):
            dense = nn.Dense(width, kernel_init=nn.initializers.orthogonal(np.sqrt(2)), name=f"embed_{name}")
            return jnp.tanh(dense(features))

        def shape_tokens(name, features, kind):
            h = embed(name, features, e - 1)
            return jnp.concatenate([h, jnp.full(h.shape[:-1] + (1,), kind, h.dtype)], axis=-1)
        shapes = jnp.concatenate([shape_tokens("polygons", obs.polygons, 1.0),
                                  shape_tokens("circles", obs.circles, 0.0)], axis=-2)
        batch = shapes.shape[:-2]
        x = jnp.concatenate([jnp.ones(batch + (1, e), shapes.dtype), shapes], axis=-2)
        present = jnp.concatenate([jnp.ones(batch + (1,), bool), obs.polygon_mask.astype(bool),
                                   obs.circle_mask.astype(bool)], axis=-1)
        # the summary token attends to and is seen by every present shape; the observation's 4 masks cover the shapes
        masks = obs.attention_mask.astype(bool)
        num_masks, s = masks.shape[-3], present.shape[-1]
        full = jnp.ones(batch + (num_masks, s, s), bool).at[..., 1:, 1:].set(masks)
        full = full & present[..., None, :, None] & present[..., None, None, :]
        full = jnp.repeat(full, self.num_heads // num_masks, axis=-3)  # heads 2m, 2m+1 use mask m (8 heads)
        joints, thrusters = embed("joints", obs.joints, e), embed("thrusters", obs.thrusters, e)
        # +1: the summary token is shape 0
        joint_to, joint_from = obs.joint_indexes[..., 0] + 1, obs.joint_indexes[..., 1] + 1
        thruster_on = obs.thruster_indexes + 1
        for i in range(self.depth):
            y = nn.MultiHeadDotProductAttention(self.num_heads, qkv_features=self.attention_size, out_features=e,
                                                name=f"attn_{i}")(nn.LayerNorm(name=f"ln_attn_{i}")(x), mask=full)
            y = Gate(e, name=f"gate_attn_{i}")(x, jax.nn.relu(y))
            h = nn.Dense(e, name=f"dense_{i}")(nn.LayerNorm(name=f"ln_dense_{i}")(y))
            x = Gate(e, name=f"gate_dense_{i}")(y, jax.nn.relu(h))
            joint_msg = nn.Dense(e, name=f"joint_{i}")(jnp.concatenate(
                [gather_shapes(x, joint_to), gather_shapes(x, joint_from), joints], axis=-1))
            thruster_msg = nn.Dense(e, name=f"thruster_{i}")(jnp.concatenate(
                [gather_shapes(x, thruster_on), thrusters], axis=-1))
            x = scatter_add_shapes(x, joint_to, joint_msg * obs.joint_mask[..., None])
            x = scatter_add_shapes(x, thruster_on, thruster_msg * obs.thruster_mask[..., None])
        weights = present[..., None].astype(x.dtype)
        return (x * weights).sum(-2) / weights.sum(-2)


class ActorCritic(nn.Module):
    action_mask: Any  # numpy [D, A] bool
    network: str
    hidden_size: int
    num_layers: int
    embed_dim: int = 128
    attention_size: int = 16
    num_heads: int = 8
    depth: int = 2

    @nn.compact
    def __call__(self, obs):
        """obs -> (masked logits [..., D, A], value [...], actor hidden list, critic hidden list)."""
        obs = jax.tree.map(read_obs, obs)
        if self.network == "mlp":
            x = obs
        else:
            x = EntityTransformer(self.embed_dim, self.attention_size, self.num_heads, self.depth)(obs)
        d, a = self.action_mask.shape
        logits, actor_hidden = MLP(self.hidden_size, self.num_layers, d * a, 0.01, name="actor")(x)
        value, critic_hidden = MLP(self.hidden_size, self.num_layers, 1, 1.0, name="critic")(x)
        logits = jnp.where(self.action_mask, logits.reshape(x.shape[:-1] + (d, a)), -1e9)
        return logits, value[..., 0], actor_hidden, critic_hidden


def log_prob(logits, actions):
    """Multi-discrete log-probability: the sum over action dimensions."""
    logp_all = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(logp_all, actions[..., None], axis=-1)[..., 0].sum(-1)


def entropy(logits):
    logp_all = jax.nn.log_softmax(logits, axis=-1)
    return -(jnp.exp(logp_all) * logp_all).sum((-2, -1))


# ---------------------------------------------------------------------------------------------------------
# SFL: learnability, the top-K buffer, and which level each env plays (Rutherford et al. 2024; B26 §6, Table 3)
# ---------------------------------------------------------------------------------------------------------
def solve_rates(episodes_done, episodes_solved):
    """p per level = solved / completed episodes of its rollout; a level with no completed episode has p = 0."""
    return jnp.where(episodes_done > 0, episodes_solved / jnp.maximum(episodes_done, 1), 0.0)


def learnability(p):
    """Rutherford et al. 2024: p(1 - p), highest for levels solved half the time (neither too easy nor too hard)."""
    return p * (1.0 - p)


class LevelBuffer(struct.PyTreeNode):
    levels: Any  # EnvState [K]
    score: jnp.ndarray  # [K] learnability p(1-p)
    p: jnp.ndarray  # [K] solve rate of the scoring rollout


def top_k_levels(buffer: LevelBuffer, levels, p) -> LevelBuffer:
    """Merge scored levels into the buffer and keep the K highest learnability; equal learnability prefers the higher
    solve rate (as Kinetix's tie-break), then the earlier entry. Running, so N levels never need to be in memory."""
    k = buffer.score.shape[0]
    score = jnp.concatenate([buffer.score, learnability(p)])
    rate = jnp.concatenate([buffer.p, p])
    order = jnp.lexsort((jnp.arange(score.shape[0]), -rate, -score))[:k]  # last key is the primary one
    kept = order < k

    def pick(old, new):  # K picks from each side: concatenating the sharded batch gathered all of it on every device
        chosen = kept.reshape(kept.shape + (1,) * (old.ndim - 1))
        return jnp.where(chosen, old[jnp.minimum(order, k - 1)], new[jnp.maximum(order - k, 0)])
    return LevelBuffer(levels=jax.tree.map(pick, buffer.levels, levels), score=score[order], p=rate[order])


def top_k_by_part(parts: int, buffer: LevelBuffer, levels, p) -> LevelBuffer:
    """top_k_levels on each of G = parts equal slices: slice g of the buffer keeps the K/G most learnable of its own
    entries and slice g of the scored levels, as each of Kinetix's G devices keeps the top K/G of the levels it scored
    (B26 App. D). The buffer is their concatenation, from which every env draws, as in Kinetix."""
    if parts == 1:
        return top_k_levels(buffer, levels, p)

    def split(x):
        return x.reshape((parts, -1) + x.shape[1:])
    kept = jax.vmap(top_k_levels)(jax.tree.map(split, buffer), jax.tree.map(split, levels), split(p))
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), kept)


def empty_buffer(levels, k: int) -> LevelBuffer:
    """Placeholder entries with score -1: any scored level (learnability >= 0) replaces them."""
    return LevelBuffer(levels=jax.tree.map(lambda x: jnp.zeros((k,) + x.shape[1:], x.dtype), levels),
                       score=jnp.full(k, -1.0), p=jnp.zeros(k))


def buffer_stats(buffer: LevelBuffer) -> dict:
    """The buffer's statistics from its scores alone: its K levels stay on the devices."""
    score, p = (np.asarray(x) for x in fetch((buffer.score, buffer.p)))
    return {"sfl/learnability_mean": float(score.mean()), "sfl/learnability_max": float(score.max()),
            "sfl/frac_learnable": float(np.mean((p > 0) & (p < 1))), "sfl/solve_rate_mean": float(p.mean())}


def level_blocks(num_from_buffer: int, num_fresh: int) -> int:
    """g = gcd(B, F): the envs' blocks of level assignment, each of B/g buffer and F/g fresh levels. It depends on B and
    F only, never on the device count, so one device gives the result of many (docs/sfl_kinetix_jax.md#checkpoints-failures-devices)."""
    return math.gcd(num_from_buffer, num_fresh)


def assign_levels(key, buffer_levels, fresh, num_from_buffer: int, shard=lambda x: x):
    """The levels of one update (B26 §6): the N = B + F envs form g = level_blocks(B, F) blocks of N/g neighbours;
    block i plays fresh levels iF/g ... (i+1)F/g - 1 and B/g levels drawn uniformly from the (replicated) buffer, at
    random positions within the block, so exactly B = round(rho N) envs play buffer levels and each does with
    probability rho. No block reads another's levels: when the devices divide g (shard lays the block axis over them)
    every level stays on its device, where a permutation over all N envs moved every level to every device."""
    if num_from_buffer == 0:  # --no-sfl: env i plays fresh level i
        return fresh
    num_fresh = jax.tree.leaves(fresh)[0].shape[0]
    blocks = level_blocks(num_from_buffer, num_fresh)
    size = (num_fresh + num_from_buffer) // blocks
    key_pick, key_perm = jax.random.split(key)
    k = jax.tree.leaves(buffer_levels)[0].shape[0]
    picks = shard(jax.random.randint(key_pick, (blocks, num_from_buffer // blocks), 0, k))
    slots = jnp.broadcast_to(jnp.arange(size), (blocks, size))  # in a block: F/g fresh slots, then B/g buffer ones
    order = shard(jax.random.permutation(key_perm, slots, axis=1, independent=True))

    def one(f, b):
        own = shard(f.reshape((blocks, num_fresh // blocks) + f.shape[1:]))  # [g, F/g, ...]: its fresh levels
        block = jnp.concatenate([own, b[picks]], axis=1)  # [g, N/g, ...]
        placed = jnp.take_along_axis(block, order.reshape(order.shape + (1,) * (f.ndim - 1)), axis=1)
        return placed.reshape((-1,) + f.shape[1:])
    return jax.tree.map(one, fresh, buffer_levels)


def shard_blocks(mesh: Mesh, x):
    """assign_levels' block axis over the devices when they divide it (else GSPMD places the blocks: correct, not
    local)."""
    if x.shape[0] % mesh.size:
        return x
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("envs")))


# ---------------------------------------------------------------------------------------------------------
# State: named pytrees instead of positional tuples
# ---------------------------------------------------------------------------------------------------------
class TrainState(struct.PyTreeNode):
    params: Any
    opt_state: Any
    prox_params: Any  # theta_prox, the EWMA of theta (B26 §2.2); equal to params when --ewma-com 0


class EnvBatch(struct.PyTreeNode):
    state: Any  # EnvState [N]
    obs: Any  # [N, ...] observation pytree
    level: Any  # EnvState [N]: where each env resets to
    level_obs: Any
    ep_return: jnp.ndarray  # [N] return of the running episode
    ep_length: jnp.ndarray  # [N]


class RunnerState(struct.PyTreeNode):
    train: TrainState
    buffer: LevelBuffer
    key: jnp.ndarray  # the training RNG stream (diagnostics, evaluation and level sampling never draw from it)


class Transition(NamedTuple):
    obs: Any
    action: jnp.ndarray
    logp: jnp.ndarray
    value: jnp.ndarray
    reward: jnp.ndarray
    done: jnp.ndarray  # the episode ended after this step
    terminated: jnp.ndarray  # ended by the goal, a hazard or a NaN (also on the last step): never bootstrapped
    next_value: jnp.ndarray  # V(true next observation): bootstraps a time-limit cut with --bootstrap-time-limit


class Episodes(NamedTuple):
    done: jnp.ndarray  # [T, N]
    ep_return: jnp.ndarray
    ep_length: jnp.ndarray
    solved: jnp.ndarray  # the episode ended touching the goal


EPISODE_ROWS = 1024  # per-episode log rows per iteration; beyond, one row of aggregates (logging O(1) in N)


class EpisodeStats(NamedTuple):
    """One update's finished episodes, reduced on the device: counts, sums, extremes, and the first EPISODE_ROWS
    episodes in time-major order (what the host logs one by one when there are no more)."""
    count: jnp.ndarray
    solved: jnp.ndarray
    return_sum: jnp.ndarray
    return_min: jnp.ndarray
    return_max: jnp.ndarray
    length_sum: jnp.ndarray
    length_min: jnp.ndarray
    length_max: jnp.ndarray
    first_return: jnp.ndarray  # [min(EPISODE_ROWS, T N)]
    first_length: jnp.ndarray


def episode_stats(episodes: Episodes) -> EpisodeStats:
    done = episodes.done.ravel()
    ret, length = episodes.ep_return.ravel(), episodes.ep_length.ravel()
    first = jnp.nonzero(done, size=min(EPISODE_ROWS, done.shape[0]), fill_value=0)[0]
    lo, hi = jnp.finfo(jnp.float32).max, jnp.iinfo(jnp.int32).max
    return EpisodeStats(count=done.sum(), solved=(done & episodes.solved.ravel()).sum(),
                        return_sum=jnp.where(done, ret, 0.0).sum(), return_min=jnp.where(done, ret, lo).min(),
                        return_max=jnp.where(done, ret, -lo).max(), length_sum=jnp.where(done, length, 0).sum(),
                        length_min=jnp.where(done, length, hi).min(), length_max=jnp.where(done, length, -hi).max(),
                        first_return=ret[first], first_length=length[first])


def episode_rows(stats: EpisodeStats, i: int) -> list:
    """Update i's episode log rows (docs/sfl_kinetix_jax.md#logging-and-diagnostics-at-large-n): one per finished episode up to EPISODE_ROWS, else one row of the mean
    with _count, _min and _max."""
    count = int(stats.count[i])
    if count <= EPISODE_ROWS:
        return [{"charts/episodic_return": r, "charts/episodic_length": n}
                for r, n in zip(stats.first_return[i][:count], stats.first_length[i][:count])]
    return [{"charts/episodic_return": stats.return_sum[i] / count, "charts/episodic_return_count": count,
             "charts/episodic_return_min": stats.return_min[i], "charts/episodic_return_max": stats.return_max[i],
             "charts/episodic_length": stats.length_sum[i] / count, "charts/episodic_length_min": stats.length_min[i],
             "charts/episodic_length_max": stats.length_max[i]}]


class Hyper(struct.PyTreeNode):
    """Hyperparameters passed as traced values: changing them reuses the compiled program."""
    clip_coef: jnp.ndarray
    ewma_com: jnp.ndarray
    ent_coef: jnp.ndarray
    vf_coef: jnp.ndarray


class Batch(NamedTuple):
    obs: Any
    action: jnp.ndarray
    logp: jnp.ndarray
    advantages: jnp.ndarray
    returns: jnp.ndarray
    value: jnp.ndarray


KL_REF_POINTS = 64  # policies kept per probed update for ref KL(pi_J || pi_j): the probe's size does not grow with J


class Probe(struct.PyTreeNode):
    """What the diagnostics need from one update, recorded by the diagnostics pass (diagnose) that replays it; the
    training chunk never holds one. Its size does not depend on the J minibatch steps but for seq_kl (J floats):
    KL(pi_j || pi_j-1) is accumulated step by step and only KL_REF_POINTS policies are kept for the ref profile."""
    params_before: Any
    first_grad: jnp.ndarray  # flat first-minibatch gradient
    start_logits: jnp.ndarray  # [S, D, A]: pi_0 (behavior) on the fixed state set S
    last_logits: jnp.ndarray  # [S, D, A]: the latest policy (pi_J at the end)
    kept_logits: jnp.ndarray  # [P, S, D, A]: pi_j at the steps j of ref_steps(J)
    seq_kl: jnp.ndarray  # [J]: mean over S of KL(pi_j+1 || pi_j), float32
    obs: Any  # [S, ...]
    actions: jnp.ndarray  # [S, D]
    steps: jnp.ndarray  # minibatch steps taken (J unless --target-kl stopped early)


class UpdateCarry(struct.PyTreeNode):
    train: TrainState
    probe: Optional[Probe]  # None in the training chunk: only the diagnostics pass carries one
    stat_sum: jnp.ndarray  # [8]: the six loss statistics, the pre-clipping gradient norm and whether it was clipped
    steps: jnp.ndarray
    stopped: jnp.ndarray  # --target-kl ended the epochs


class ScoreCarry(NamedTuple):
    envs: EnvBatch
    done: jnp.ndarray  # [B] completed episodes
    solved: jnp.ndarray  # [B] completed episodes that reached the goal


class EvalCarry(NamedTuple):
    state: Any
    obs: Any
    finished: jnp.ndarray
    solved: jnp.ndarray
    key: jnp.ndarray
    t: jnp.ndarray


# ---------------------------------------------------------------------------------------------------------
# Advantages
# ---------------------------------------------------------------------------------------------------------
def gae_step(gamma: float, lam: float, bootstrap_time_limit: bool, carry, t: Transition):
    """GAE (Schulman et al. 2016) backwards in time. An ended episode adds nothing after its last step (Kinetix's
    GAE); with bootstrap_time_limit an episode cut by the time limit bootstraps from V(true next obs) instead."""
    next_adv, next_value = carry
    cut = t.done & ~t.terminated if bootstrap_time_limit else jnp.zeros_like(t.done)
    v_next = jnp.where(t.done, jnp.where(cut, t.next_value, 0.0), next_value)
    delta = t.reward + gamma * v_next - t.value
    adv = delta + gamma * lam * (1.0 - t.done) * next_adv
    return (adv, t.value), adv


def compute_gae(traj: Transition, last_value, gamma: float, lam: float, bootstrap_time_limit: bool = True):
    _, advantages = jax.lax.scan(functools.partial(gae_step, gamma, lam, bootstrap_time_limit),
                                 (jnp.zeros_like(last_value), last_value), traj, reverse=True)
    return advantages, advantages + traj.value


# ---------------------------------------------------------------------------------------------------------
# Loss, optimizer and minibatches
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


def normalize_advantages(advantages, parts: int):
    """CleanRL's normalisation over the minibatch; parts G > 1: over each of its G equal slices, which are the devices'
    parts when G devices hold it, as Kinetix normalises on each device under pmap (B26 App. D)."""
    if parts == 1:
        return (advantages - advantages.mean()) / (advantages.std(ddof=1) + 1e-8)
    split = advantages.reshape(parts, -1)
    normalized = (split - split.mean(1, keepdims=True)) / (split.std(1, ddof=1, keepdims=True) + 1e-8)
    return normalized.reshape(advantages.shape)


def ppo_loss(args, network: ActorCritic, hyper: Hyper, params, prox_params, mb: Batch):
    """CleanRL's PPO loss; with --ewma-com C > 0 the policy term is B26 eq. 4 with theta_prox."""
    logits, newvalue, _, _ = network.apply(params, mb.obs)
    newlogp = log_prob(logits, mb.action)
    logratio = newlogp - mb.logp
    ratio = jnp.exp(logratio)
    advantages = normalize_advantages(mb.advantages, args.per_device_stats) if args.norm_adv else mb.advantages
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
    """Adam behind global-norm clipping; --anneal-lr: CleanRL's linear decay to zero, constant within an iteration."""
    schedule = args.learning_rate
    if args.anneal_lr:
        steps_per_iteration = args.update_epochs * args.num_minibatches

        def schedule(count):
            return args.learning_rate * (1.0 - (count // steps_per_iteration) / args.num_iterations)
    return optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(schedule, eps=1e-5))


def minibatch_layout(num_steps: int, num_minibatches: int) -> tuple:
    """(S, G): S time slots x G env groups = the minibatches. S = gcd(M, T) is the most slots T allows, and
    G = M / S divides N whenever M divides N x T."""
    slots = math.gcd(num_minibatches, num_steps)
    return slots, num_minibatches // slots


def epoch_order(key, num_steps: int, num_envs: int, num_minibatches: int):
    """An epoch's draw: each env's own random order of its T steps, cut into S slots (shape [S, T/S, N]), and the
    random order in which the M = S x G minibatches are taken."""
    slots, groups = minibatch_layout(num_steps, num_minibatches)
    key_time, key_mb = jax.random.split(key)
    steps = jnp.broadcast_to(jnp.arange(num_steps)[:, None], (num_steps, num_envs))
    order = jax.random.permutation(key_time, steps, axis=0, independent=True)
    return order.reshape(slots, num_steps // slots, num_envs), jax.random.permutation(key_mb, num_minibatches)


def take_minibatch(batch, order, index, groups: int):
    """Minibatch `index` = slot index // G of env group index % G (envs g, g + G, ...), from a [T, N, ...] batch.
    It gathers along time within each env, so a device reads only its own envs: minibatches of a permuted flat
    batch made XLA copy the whole batch to every device (2 devices: 34.6 GiB each at 65k envs, 29.1 on one)."""
    group = index % groups

    def own_group(x):  # [T', N, ...] -> [T', N/G, ...]: the group's envs first, so the gather reads 1/G of the batch
        return jax.lax.dynamic_index_in_dim(x.reshape((x.shape[0], -1, groups) + x.shape[2:]), group, 2, False)
    rows = own_group(order[index // groups])  # [T/S, N/G]: this slot's steps of the group's envs

    def take(x):
        picked = jnp.take_along_axis(own_group(x), rows.reshape(rows.shape + (1,) * (x.ndim - 2)), axis=0)
        return jnp.swapaxes(picked, 0, 1).reshape((-1,) + x.shape[2:])  # env-major: the env axis stays sharded
    return jax.tree.map(take, batch)


def trajectory_order(key, num_envs: int, num_minibatches: int):
    """An epoch's draw for whole-trajectory minibatches: [N/M, M], row b deals the M envs bM ... bM+M-1 of block b
    one to each minibatch in a random order. Kinetix deals a random permutation of a device's envs; dealing within
    blocks of M neighbours gives every minibatch the same share of each device's envs on any device count."""
    blocks = num_envs // num_minibatches
    dealt = jnp.broadcast_to(jnp.arange(num_minibatches), (blocks, num_minibatches))
    return jax.random.permutation(key, dealt, axis=1, independent=True)


def take_trajectories(batch, order, index):
    """Minibatch `index` = all T steps of env bM + order[b, index] of every block b, from a [T, N, ...] batch; the
    gather stays within each block, so a device reads only its own envs when M divides its env count."""
    num_minibatches = order.shape[1]
    cols = order[:, index]  # [N/M]

    def take(x):
        blocks = x.reshape((x.shape[0], -1, num_minibatches) + x.shape[2:])
        picked = jnp.take_along_axis(blocks, cols.reshape((1, -1, 1) + (1,) * (x.ndim - 2)), axis=2)[:, :, 0]
        return jnp.swapaxes(picked, 0, 1).reshape((-1,) + x.shape[2:])  # env-major: the env axis stays sharded
    return jax.tree.map(take, batch)


# ---------------------------------------------------------------------------------------------------------
# Evaluation: a level's solve rate = the mean over attempts of "the first episode reached the goal" (B26 Figs. 11, 20)
# ---------------------------------------------------------------------------------------------------------
def tile_attempts(levels, attempts: int):
    """Every level `attempts` times, level-major: [n * attempts]."""
    return jax.tree.map(lambda x: jnp.repeat(x, attempts, axis=0), levels)


def level_solve_rates(solved: np.ndarray, attempts: int) -> np.ndarray:
    """Per level: the mean over its attempts of the first-episode outcome."""
    return np.asarray(solved, np.float64).reshape(-1, attempts).mean(axis=1)


# ---------------------------------------------------------------------------------------------------------
# make_train: the envs, the agent and the jitted pieces of one configuration (PureJaxRL's shape)
# ---------------------------------------------------------------------------------------------------------
class Train(NamedTuple):
    """What make_train returns: the env and agent it built and the jitted programs (those over the global mesh wrapped
    in InStep, so that several processes start them together)."""
    env: Any  # ObsEnv
    env_params: Any
    static_params: Any
    network: ActorCritic
    mesh: Mesh  # one axis "envs" over every device of every process
    probe_index: np.ndarray  # the diagnostic states' rows of the flattened [T x N] batch; empty: diagnostics off
    init: Callable  # (level, seed) -> RunnerState
    train_chunk: Callable  # (hyper, fresh [U, F], runner, start, stop) -> (runner, stats, episodes)
    diagnose: Optional[Callable]  # (hyper, fresh [U, F], runner, i) -> (probe, replayed train state); None: off
    sample: Callable  # (keys [C, G], calls) -> levels [C, G], rows < calls made (looped)
    noop_solved: Callable  # (keys [C, G], calls) -> [C, G, level_filter_ratio] bools: a no-op solves the candidate
    score: Callable  # (params, levels [B], key) -> p [B]
    merge: Callable  # (buffer, levels [B], p [B]) -> buffer
    first_solved: Callable  # (levels [E], params, key) -> [E] bools, on one device
    shardings: Callable  # RunnerState -> its shardings (replicated: the envs live inside one update)
    start_envs: Callable  # levels [N] -> EnvBatch
    env_step: Callable  # (envs, action) -> (envs, obs, reward, done, terminated, episodes)
    minibatch_step: Callable  # (hyper, carry, minibatch) -> (carry, stats)


def make_train(args) -> Train:
    """Closes over the configuration (args after apply_scaling); the hyperparameters a sweep changes are traced
    (Hyper), so one compiled program serves them all."""
    env, env_params, static_params = make_env(args.env_size, args.network, args.episode_length, args.obs_dtype)
    network = ActorCritic(action_mask=action_layout(env, env_params)[1], network=args.network,
                          hidden_size=args.hidden_size, num_layers=args.num_hidden_layers, embed_dim=args.embed_dim,
                          attention_size=args.attention_size, num_heads=args.num_heads, depth=args.transformer_depth)
    optimizer = make_optimizer(args)
    mesh = env_mesh()
    replicated = NamedSharding(mesh, P())
    probe_index = diagnostic_states(args.batch_size, args.diagnostics_states if args.diagnostics_every else 0)
    max_timesteps = int(env_params.max_timesteps)
    num_from_buffer = sfl_counts(args)[0]  # round(rho N), 0 with --no-sfl

    def shard_envs(tree):
        """docs/sfl_kinetix_jax.md#checkpoints-failures-devices: the env (or level) axis is split over all devices; everything else is replicated."""
        spec = NamedSharding(mesh, P("envs"))
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, spec), tree)

    def shardings(runner: RunnerState):
        return jax.tree.map(lambda _: replicated, runner)

    def init(level, seed) -> RunnerState:
        """Parameters from the seed's init key; the buffer starts as placeholders (filled before update 1)."""
        key, key_init = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(jnp.uint32(seed)), 0))
        obs = jax.tree.map(lambda x: x[None], env.get_obs(level))
        params = network.init(key_init, obs)
        train = TrainState(params=params, opt_state=optimizer.init(params), prox_params=jax.tree.map(jnp.copy, params))
        levels = jax.tree.map(lambda x: x[None], level)
        return RunnerState(train=train, buffer=empty_buffer(levels, args.sfl_buffer_size), key=key)

    # Rollout: every env starts the update on its assigned level and resets to it when an episode ends
    def start_envs(levels) -> EnvBatch:
        levels = shard_envs(levels)
        obs = jax.vmap(env.get_obs)(levels)
        n = jax.tree.leaves(levels)[0].shape[0]
        return EnvBatch(state=levels, obs=obs, level=levels, level_obs=obs, ep_return=jnp.zeros(n),
                        ep_length=jnp.zeros(n, jnp.int32))

    def env_step(envs: EnvBatch, action):
        """Step every env; an ended episode restarts the env's own level."""
        obs, state, reward, done, info = jax.vmap(env.step_env, (None, 0, 0, None))(None, envs.state, action, env_params)
        solved = done & info["GoalR"]
        terminated = done & info["terminated"]
        ep_return, ep_length = envs.ep_return + reward, envs.ep_length + 1
        new_envs = envs.replace(state=tree_select(done, envs.level, state), obs=tree_select(done, envs.level_obs, obs),
                                ep_return=jnp.where(done, 0.0, ep_return), ep_length=jnp.where(done, 0, ep_length))
        episodes = Episodes(done=done, ep_return=ep_return, ep_length=ep_length, solved=solved)
        return shard_envs(new_envs), obs, reward, done, terminated, episodes

    def rollout_step(params, envs: EnvBatch, key):
        logits, value, _, _ = network.apply(params, envs.obs)
        action = jax.random.categorical(key, logits)
        new_envs, true_next_obs, reward, done, terminated, episodes = env_step(envs, action)
        if args.bootstrap_time_limit:  # a second forward pass per step, only when a truncation is bootstrapped
            _, next_value, _, _ = network.apply(params, true_next_obs)
        else:
            next_value = jnp.zeros_like(value)
        transition = Transition(obs=envs.obs, action=action, logp=log_prob(logits, action), value=value, reward=reward,
                                done=done, terminated=terminated, next_value=next_value)
        return new_envs, (transition, episodes)

    # Update: update_epochs x num_minibatches Adam steps; theta_prox follows theta after every step (B26 §2.2)
    def minibatch_step(hyper: Hyper, carry: UpdateCarry, mb: Batch):
        """One Adam step on a minibatch; the loss is a mean over the whole (sharded) minibatch, so the gradient is the
        average over every device's samples."""
        train = carry.train
        (_, stats), grads = jax.value_and_grad(functools.partial(ppo_loss, args, network, hyper), has_aux=True)(
            train.params, train.prox_params, mb)
        grad_norm = optax.global_norm(grads)
        clipped = (grad_norm >= args.max_grad_norm).astype(jnp.float32)  # optax.clip_by_global_norm scales it down
        updates, opt_state = optimizer.update(grads, train.opt_state, train.params)
        params = optax.apply_updates(train.params, updates)
        new_train = TrainState(params=params, opt_state=opt_state,
                               prox_params=ewma_update(train.prox_params, params, hyper.ewma_com))
        probe = carry.probe
        if probe is not None:  # traced only into the diagnostics pass: it reads, never writes, the training values
            probe = record_probe_step(network, probe, carry.steps, grads, params)
        step_stats = jnp.concatenate([stats, jnp.stack([grad_norm, clipped])])
        new = UpdateCarry(train=new_train, probe=probe, stat_sum=carry.stat_sum + step_stats, steps=carry.steps + 1,
                          stopped=carry.stopped)
        return new, stats

    def update_epoch(hyper: Hyper, batch: Batch, carry: UpdateCarry, key):
        """Every sample once, in M minibatches of whole trajectories (default) or of T/S steps of each of N/G envs;
        the same minibatches on any device count."""
        if args.minibatch_form == "trajectories":
            order = trajectory_order(key, args.num_envs, args.num_minibatches)
            mb_order = jnp.arange(args.num_minibatches)  # membership is already random

            def take(index):
                return take_trajectories(batch, order, index)
        else:
            groups = minibatch_layout(args.num_steps, args.num_minibatches)[1]
            order, mb_order = epoch_order(key, args.num_steps, args.num_envs, args.num_minibatches)

            def take(index):
                return take_minibatch(batch, order, index, groups)

        def step(carry, index):
            return minibatch_step(hyper, carry, take(index))

        def run(carry):
            carry, stats = jax.lax.scan(step, carry, mb_order)
            stopped = stats[-1, 4] > args.target_kl if args.target_kl is not None else carry.stopped
            return carry.replace(stopped=stopped)
        return jax.lax.cond(carry.stopped, lambda c: c, run, carry), None

    def update_iteration(hyper: Hyper, fresh, runner: RunnerState, probed: bool = False):
        """One PPO iteration: assign levels (buffer or fresh), rollout, GAE, update_epochs x num_minibatches steps;
        probed (the diagnostics pass only): also record the probe of this update, else the probe is None."""
        key, key_levels, key_rollout, key_update = jax.random.split(runner.key, 4)
        params = runner.train.params
        levels = assign_levels(key_levels, runner.buffer.levels, fresh, num_from_buffer,
                               functools.partial(shard_blocks, mesh))
        envs, (traj, episodes) = jax.lax.scan(functools.partial(rollout_step, params), start_envs(levels),
                                              jax.random.split(key_rollout, args.num_steps))
        _, last_value, _, _ = network.apply(params, envs.obs)
        advantages, returns = compute_gae(traj, last_value, args.gamma, args.gae_lambda, args.bootstrap_time_limit)
        batch = Batch(traj.obs, traj.action, traj.logp, advantages, returns, traj.value)  # [T, N, ...], envs sharded
        probe = None
        if probed:
            probe = start_probe(network, probe_index, args.num_envs, empty_probe(
                network, params, jax.tree.map(lambda x: x[0, :1], batch.obs), len(probe_index),
                args.update_epochs * args.num_minibatches), params, batch)
        carry = UpdateCarry(train=runner.train, probe=probe, stat_sum=jnp.zeros(8), steps=jnp.zeros((), jnp.int32),
                            stopped=jnp.zeros((), bool))
        keys = jax.random.split(key_update, args.update_epochs)
        carry, _ = jax.lax.scan(functools.partial(update_epoch, hyper, batch), carry, keys)
        var_y = jnp.var(batch.returns)
        explained_var = jnp.where(var_y == 0, jnp.nan, 1 - jnp.var(batch.returns - batch.value) / var_y)
        stats = jnp.append(carry.stat_sum / carry.steps, explained_var)
        return runner.replace(train=carry.train, key=key), carry.probe, stats, episodes

    def train_chunk(hyper: Hyper, fresh, runner: RunnerState, start, stop):
        """Run updates start ... stop - 1 of a chunk (stop <= --updates-per-chunk; both dynamic: one compiled program
        for every chunk length and split), update i on the pre-sampled fresh levels fresh[i], into row i of the stats
        and episodes. Episodes come back reduced (EpisodeStats per update), so what the host reads does not grow
        with N."""
        max_updates = args.updates_per_chunk
        stats_buf = jnp.full((max_updates, len(STAT_NAMES)), jnp.nan)
        empty = jax.eval_shape(episode_stats, Episodes(*(jax.ShapeDtypeStruct((args.num_steps, args.num_envs), d)
                                                         for d in (bool, jnp.float32, jnp.int32, bool))))
        episodes_buf = jax.tree.map(lambda x: jnp.zeros((max_updates,) + x.shape, x.dtype), empty)

        def body(i, carry):
            runner, stats_buf, episodes_buf = carry
            runner, _, stats, episodes = update_iteration(hyper, tree_take(fresh, i), runner)
            episodes_buf = jax.tree.map(lambda b, e: b.at[i].set(e), episodes_buf, episode_stats(episodes))
            return runner, stats_buf.at[i].set(stats), episodes_buf

        return jax.lax.fori_loop(start, stop, body, (runner, stats_buf, episodes_buf))

    def diagnose(hyper: Hyper, fresh, runner: RunnerState, index):
        """The diagnostics pass (docs/metrics.md#diagnostics): update `index` of a chunk replayed from the runner before it (which carries
        the key: the same levels, rollout and minibatches) with the probe recording it. Training never reads what it
        returns: the probe, and the replayed train state (to check that the replay is the chunk's update)."""
        replayed, probe, _, _ = update_iteration(hyper, tree_take(fresh, index), runner, probed=True)
        return probe, replayed.train

    # SFL scoring: play each candidate level for L steps with the current policy and count solved episodes
    def score_levels(params, levels, key):
        """p per level over an L-step rollout (sampled actions, auto-reset to the same level), then p(1-p)."""
        def step(carry: ScoreCarry, key):
            logits, _, _, _ = network.apply(params, carry.envs.obs)
            envs, _, _, done, _, episodes = env_step(carry.envs, jax.random.categorical(key, logits))
            return ScoreCarry(envs, carry.done + done, carry.solved + episodes.solved), None

        n = jax.tree.leaves(levels)[0].shape[0]
        carry = ScoreCarry(start_envs(levels), jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.int32))
        carry, _ = jax.lax.scan(step, carry, jax.random.split(key, args.sfl_rollout_length))
        return solve_rates(carry.done, carry.solved)

    # Evaluation: the first episode from each level, sampled actions (as Kinetix evaluates)
    def first_episode_solved(levels, params, key):
        """[E] bools: the first episode from each level ended on the goal."""
        def step(carry: EvalCarry) -> EvalCarry:
            key, key_action = jax.random.split(carry.key)
            logits, _, _, _ = network.apply(params, carry.obs)
            obs, state, _, done, info = jax.vmap(env.step_env, (None, 0, 0, None))(
                None, carry.state, jax.random.categorical(key_action, logits), env_params)
            live = ~carry.finished
            return EvalCarry(state=state, obs=obs, finished=carry.finished | done,
                             solved=carry.solved | (live & done & info["GoalR"]), key=key, t=carry.t + 1)

        n = jax.tree.leaves(levels)[0].shape[0]
        carry = EvalCarry(state=levels, obs=jax.vmap(env.get_obs)(levels), finished=jnp.zeros(n, bool),
                          solved=jnp.zeros(n, bool), key=key, t=jnp.zeros((), jnp.int32))
        carry = jax.lax.while_loop(lambda c: (c.t < max_timesteps + 1) & ~c.finished.all(), step, carry)
        return carry.solved

    sampler = LevelSampler(env=env, env_params=env_params, static_params=static_params,
                           filter_ratio=args.level_filter_ratio, filter_steps=args.level_filter_steps)
    sampler = sampler._replace(level=jax.jit(functools.partial(random_level, sampler)))
    sharded = NamedSharding(mesh, P("envs"))
    calls = NamedSharding(mesh, P(None, "envs"))  # [loop step, keys over the devices]
    in_calls = (calls, replicated)
    return Train(
        env=env, env_params=env_params, static_params=static_params, network=network, mesh=mesh,
        probe_index=probe_index,
        init=jax.jit(init),  # one compiled program, not hundreds of eager ops
        # the runner comes back placed as it went in (replicated): another placement compiles the next chunk again
        train_chunk=InStep("chunk", jax.jit(train_chunk, donate_argnums=(2,), out_shardings=(replicated, None, None))),
        # only when diagnostics are on; it reads the runner, never donates it (the next chunk goes on from it)
        diagnose=InStep("diagnose", jax.jit(diagnose, out_shardings=replicated)) if probe_index.size else None,
        sample=InStep("sample", jax.jit(looped(jax.vmap(sampler.level), sharded),
                                        in_shardings=in_calls, out_shardings=calls)),
        noop_solved=InStep("noop_solved", jax.jit(looped(functools.partial(candidates_noop_solved, sampler), sharded),
                                                  in_shardings=in_calls, out_shardings=calls)),
        score=InStep("score", jax.jit(score_levels)),
        merge=InStep("merge", jax.jit(functools.partial(top_k_by_part, args.per_device_stats))),
        first_solved=jax.jit(first_episode_solved),  # a small program: one device of this process
        shardings=shardings, start_envs=start_envs, env_step=env_step, minibatch_step=minibatch_step)


# ---------------------------------------------------------------------------------------------------------
# Diagnostics (docs/metrics.md#diagnostics): a separate pass replays the probed update and records the probe (the training chunk has
# none; no training RNG draws); the host computes them in float64
# ---------------------------------------------------------------------------------------------------------
def diagnostic_states(num_states: int, limit: int) -> np.ndarray:
    """A fixed, evenly strided subset of the batch: deterministic, so no draw from the training RNG."""
    return np.linspace(0, num_states - 1, min(num_states, limit)).round().astype(np.int64)


def ref_steps(num_steps: int) -> np.ndarray:
    """The steps j whose policy is kept for ref KL(pi_J || pi_j): all J when J <= KL_REF_POINTS, else evenly spaced."""
    if num_steps <= KL_REF_POINTS:
        return np.arange(num_steps)
    return np.unique(np.linspace(0, num_steps - 1, KL_REF_POINTS).round().astype(np.int64))


def ref_slots(num_steps: int) -> np.ndarray:
    """[J + 1]: where step j's policy goes in Probe.kept_logits, -1 if it is not kept."""
    slots = np.full(num_steps + 1, -1, np.int32)
    kept = ref_steps(num_steps)
    slots[kept] = np.arange(len(kept))
    return slots


def empty_probe(network: ActorCritic, params, obs_example, num_diag: int, num_steps: int) -> Probe:
    """The probe of num_diag states over num_steps minibatch steps, zeros until start_probe fills it."""
    d, a = network.action_mask.shape
    flat, _ = ravel_pytree(params)
    logits = jnp.zeros((num_diag, d, a))
    return Probe(params_before=jax.tree.map(jnp.zeros_like, params), first_grad=jnp.zeros_like(flat),
                 start_logits=logits, last_logits=logits,
                 kept_logits=jnp.zeros((len(ref_steps(num_steps)), num_diag, d, a)), seq_kl=jnp.zeros(num_steps),
                 obs=jax.tree.map(lambda x: jnp.zeros((num_diag,) + x.shape[1:], x.dtype), obs_example),
                 actions=jnp.zeros((num_diag, d), jnp.int32), steps=jnp.zeros((), jnp.int32))


def start_probe(network: ActorCritic, probe_index: np.ndarray, num_envs: int, probe: Probe, params, batch: Batch) -> Probe:
    t, n = np.divmod(probe_index, num_envs)  # flat index t x N + n of the [T, N] batch
    obs, actions = jax.tree.map(lambda x: x[t, n], batch.obs), batch.action[t, n]
    logits, _, _, _ = network.apply(params, obs)
    return probe.replace(params_before=params, obs=obs, actions=actions, start_logits=logits, last_logits=logits,
                         kept_logits=probe.kept_logits.at[0].set(logits), seq_kl=jnp.zeros_like(probe.seq_kl),
                         steps=jnp.zeros((), jnp.int32))


def mean_policy_kl(logits_p, logits_q):
    """Mean over states of KL(p || q) summed over action dimensions; the log-ratio is formed from logit differences
    first (float32, on the device)."""
    logp = jax.nn.log_softmax(logits_p, axis=-1)
    log_ratio = (logits_p - logits_q) - (jax.nn.logsumexp(logits_p, -1, keepdims=True)
                                         - jax.nn.logsumexp(logits_q, -1, keepdims=True))
    return (jnp.exp(logp) * log_ratio).sum((-2, -1)).mean()


def record_probe_step(network: ActorCritic, probe: Probe, step, grads, params) -> Probe:
    first_grad = jnp.where(step == 0, ravel_pytree(grads)[0], probe.first_grad)
    logits, _, _, _ = network.apply(params, probe.obs)
    slot = jnp.asarray(ref_slots(probe.seq_kl.shape[0]))[step + 1]
    at = jnp.maximum(slot, 0)
    kept = probe.kept_logits.at[at].set(jnp.where(slot >= 0, logits, probe.kept_logits[at]))
    return probe.replace(first_grad=first_grad, last_logits=logits, kept_logits=kept,
                         seq_kl=probe.seq_kl.at[step].set(mean_policy_kl(logits, probe.last_logits)), steps=step + 1)


def log_softmax64(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def flat_params(params) -> np.ndarray:
    return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(params)])


def compute_diagnostics(network: ActorCritic, probe: Probe, train: TrainState, batch_size: int, grad_norm: float):
    probe, train = fetch((probe, train))  # on every process (a collective); the rest is host math
    mask = np.asarray(network.action_mask)
    steps = int(probe.steps)
    after, behavior = log_softmax64(probe.last_logits), log_softmax64(probe.start_logits)
    seq = [float(x) for x in probe.seq_kl[:steps]]
    kept = [j for j in ref_steps(len(probe.seq_kl)) if j < steps]  # --target-kl may have stopped early
    ref = [float(np.mean(categorical_kl(after, log_softmax64(probe.kept_logits[slot])).sum(-1)))
           for slot, _ in enumerate(kept)]
    kl_behavior = float(np.mean(categorical_kl(behavior, after).sum(-1)))
    taken = np.take_along_axis(after - behavior, probe.actions[..., None], axis=-1)[..., 0].sum(-1)
    apply = jax.jit(network.apply)
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
    return out, seq, ref, [int(j) for j in kept]


# ---------------------------------------------------------------------------------------------------------
# Several devices and processes: the mesh, host <-> device boundaries, barriers, programs started in step
# ---------------------------------------------------------------------------------------------------------
def init_distributed() -> None:
    """Several hosts form one device mesh. Under Slurm (or another cluster JAX detects) every process finds the
    coordinator and its rank itself; elsewhere set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID."""
    count, rank = os.environ.get("JAX_NUM_PROCESSES"), os.environ.get("JAX_PROCESS_ID")
    # without it, CPU processes have no cross-process collectives; only the CPU backend reads it (GPUs use NCCL)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(num_processes=int(count) if count else None, process_id=int(rank) if rank else None)
    if "JAX_LOCAL_DEVICE_IDS" not in os.environ:  # a user who names the devices keeps them
        use_every_visible_gpu()


def use_every_visible_gpu() -> None:
    """Under Slurm, jax.distributed.initialize keeps one GPU per process (GPU number SLURM_LOCALID); a process here
    uses every GPU that Slurm lets it see (one process per node: all of the node's; one per GPU: its own)."""
    jax.config.update("jax_cuda_visible_devices", "all")
    jax.config.update("jax_rocm_visible_devices", "all")


def env_mesh() -> Mesh:
    """docs/sfl_kinetix_jax.md#checkpoints-failures-devices: one mesh axis "envs" over every device of every process (jax.devices() is the global list)."""
    return Mesh(np.array(jax.devices()), ("envs",))


# Host <-> device boundaries of the host loop. With several processes a sharded array is one global value of which each
# process holds only its devices' shards: host values go in with to_global, results come out with fetch.
def to_global(host_tree, shardings):
    """Host values as global arrays laid out by `shardings` (one sharding or a matching tree); each process fills only
    its own devices' shards, from the same host value (everything is derived from the seed, so all processes agree)."""
    if isinstance(shardings, jax.sharding.Sharding):
        shardings = jax.tree.map(lambda _: shardings, host_tree)

    def one(x, sharding):
        x = np.asarray(x)
        if jax.process_count() == 1:  # one transfer call for all devices
            return jax.device_put(x, sharding)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])
    return jax.tree.map(one, host_tree, shardings)


def fetch(tree):
    """Numpy copy of device arrays; an array spread over several processes is gathered from all of them, which is a
    collective: every process must call fetch at the same point of the loop, also when only process 0 uses the result."""
    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return multihost_utils.process_allgather(x, tiled=True)
        return jax.device_get(x)
    return jax.tree.map(one, tree)


def lockstep(name: str) -> None:
    """Several processes: wait until all get here (the coordination service's barrier, the one JAX's own checkpointing
    uses; no timeout that a slow step could hit), so that work done by process 0 alone (logs, checkpoint files) never
    makes the others' next collective wait past gloo's 30 s."""
    if jax.process_count() > 1:
        from jax._src import distributed
        lockstep.count = getattr(lockstep, "count", 0) + 1  # a barrier name is used once
        distributed.global_state.client.wait_at_barrier(f"sfl_kinetix_jax/{name}/{lockstep.count}", 24 * 3600 * 1000)


class InStep:
    """A jitted program that, with several processes, every process compiles first and then starts together with the
    others: gloo connects the processes when a program first runs a collective and gives up if one is 30 s late, and
    compiles (minutes for the level generator) take each process a different time. One process: the plain jit."""

    def __init__(self, name: str, jitted):
        self.name, self.jitted, self.compiled = name, jitted, {}

    def lower(self, *args):
        return self.jitted.lower(*args)

    def __call__(self, *args):
        if jax.process_count() == 1:
            return self.jitted(*args)
        leaves, tree = jax.tree.flatten(args)
        key = (tree, tuple((np.shape(x), np.result_type(x), getattr(x, "sharding", None)) for x in leaves))
        if key not in self.compiled:
            self.compiled[key] = self.jitted.lower(*args).compile()
            lockstep(f"compiled {self.name}")
        return self.compiled[key](*args)


def agreed_signal(signum: int) -> int:
    """The stop signal of any process (Slurm or a user may signal one task only), so that all stop at the same chunk
    with the same exit code."""
    if jax.process_count() == 1:
        return signum
    lockstep("stop")  # evaluation compiles on each process alone, at its own speed
    return int(multihost_utils.process_allgather(np.int32(signum)).max())


# ---------------------------------------------------------------------------------------------------------
# SFL on the host: the level streams, the buffer refresh every T updates, a chunk's fresh levels
# ---------------------------------------------------------------------------------------------------------
def level_streams(seed: int):
    """Keys of the level streams, separate from the training stream: fresh training levels and SFL candidates."""
    root = jax.random.fold_in(jax.random.PRNGKey(seed), 1)
    return jax.random.fold_in(root, 0), jax.random.fold_in(root, 1)


def refresh_buffer(train: Train, args, runner: RunnerState, filter_key, period_index: int,
                   stopped=lambda: False) -> Optional[RunnerState]:
    """Every T updates (B26 Table 3): score N fresh random levels with the current policy, batch by batch, and keep
    the K most learnable (the buffer is replaced, as in Kinetix's SFL). None when stopped() turns true between
    batches: the refresh is dropped, and a resumed run redoes it from the same keys."""
    batch = min(args.sfl_filter_batch, args.sfl_num_levels)
    key = jax.random.fold_in(filter_key, period_index)
    buffer = runner.buffer.replace(score=jnp.full_like(runner.buffer.score, -1.0))  # the previous buffer is not kept
    replicated = NamedSharding(env_mesh(), P())
    for b in range(args.sfl_num_levels // batch):
        if b and stopped():
            return None
        levels = sample_levels(train, args, jax.random.fold_in(key, 2 * b), batch)
        score_key = to_global(fetch(jax.random.fold_in(key, 2 * b + 1)), replicated)
        p = train.score(runner.train.params, levels, score_key)
        buffer = train.merge(buffer, levels, p)
    return runner.replace(buffer=buffer)


def fresh_levels(train: Train, args, fresh_key, first_iteration: int, n: int):
    """[updates_per_chunk, F] fresh random levels for updates first+1 ... first+n (the rest repeat the last, unused);
    update i's levels (one filter request, as Kinetix samples an update's levels in one call) depend only on i, so
    chunking and resuming do not change them. When the devices divide F, level f is made on the device whose envs
    play it (assign_levels' blocks), so fresh levels never cross devices."""
    num_fresh = sfl_counts(args)[1]
    levels = random_levels(train, args, fresh_key, first_iteration, n, max(num_fresh, 1), args.updates_per_chunk)
    return levels if num_fresh else jax.tree.map(lambda x: x[:, :0], levels)  # rho = 1: no fresh levels


def listed_levels(levels, num_envs: int, updates_per_chunk: int):
    """[updates_per_chunk, N] levels for --train-levels: env i plays listed level i mod their count at every update."""
    count = jax.tree.leaves(levels)[0].shape[0]
    per_env = tree_take(levels, jnp.arange(num_envs) % count)
    return jax.tree.map(lambda x: jnp.broadcast_to(x[None], (updates_per_chunk, *x.shape)), per_env)


# ---------------------------------------------------------------------------------------------------------
# Set-up phases announced: what JAX traces, compiles and loads from the compilation cache while each runs
# ---------------------------------------------------------------------------------------------------------
class CompileWatch:
    """What JAX traces, compiles and loads from the persistent compilation cache: counted from the events its compiler
    records (jax.monitoring), and, while a phase runs, read from where the thread that runs it is in JAX's code
    (tracing, reading the cache, compiling). The names are jax 0.7's and 0.11's (whose jit traces in
    trace_to_jaxpr_nocache); a test checks them. Programs that compile faster than the cache's threshold
    (jax_persistent_cache_min_compile_time_secs: eager ops, small jits) are never cached and not counted."""
    SPANS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
             "/jax/core/compile/backend_compile_duration")  # the last one ends every compile, a cache hit's too
    ACTIVITIES = {"trace_to_jaxpr_dynamic": "tracing a program",  # the innermost of these on the stack says it
                  "trace_to_jaxpr_nocache": "tracing a program",
                  "_cache_read": "loading a program from the compilation cache",
                  "backend_compile_and_load": "compiling a program not in the compilation cache"}

    def __init__(self):
        self.spans = []  # (start, end) wall times of every trace, lowering and compile
        self.compiled = self.loaded = 0
        self.hit = False

    def listen(self) -> "CompileWatch":
        jax.monitoring.register_event_listener(self.event)
        jax.monitoring.register_event_time_span_listener(self.span)
        return self

    def event(self, event: str, **kwargs) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self.hit = True

    def span(self, event: str, start: float, end: float, **kwargs) -> None:
        if event not in self.SPANS:
            return
        self.spans.append((start, end))
        if event == self.SPANS[-1]:
            worth_caching = end - start >= jax.config.jax_persistent_cache_min_compile_time_secs
            self.loaded, self.compiled = self.loaded + self.hit, self.compiled + (not self.hit and worth_caching)
            self.hit = False

    def seconds_between(self, t0: float, t1: float) -> float:
        """Wall seconds of [t0, t1] spent tracing, lowering or compiling (nested traces counted once)."""
        total, reached = 0.0, t0
        for start, end in sorted(self.spans):
            start, end = max(start, reached), min(end, t1)
            if end > start:
                total, reached = total + end - start, end
        return total

    @classmethod
    def activity(cls, thread_id: int) -> str:
        """What that thread does in JAX's compiler now ("" if nothing): Kinetix's level generator and no-op filter
        take minutes to trace on a loaded CPU even when the cache has them, and minutes to compile when it has not."""
        frame = sys._current_frames().get(thread_id)
        while frame is not None:
            if frame.f_code.co_name in cls.ACTIVITIES:
                return cls.ACTIVITIES[frame.f_code.co_name]
            frame = frame.f_back
        return ""


COMPILES = CompileWatch().listen()
HEARTBEAT_SECONDS = 10.0  # while a phase runs, a line at least this often: a first run on a CPU compiles for minutes


class Phase:
    """A phase of the run, announced: a line when it starts, one every HEARTBEAT_SECONDS while it runs (saying whether
    JAX is tracing, loading a program from the persistent compilation cache or compiling one it did not have, then
    with `note`), and one with its time and what it compiled or loaded when it ends. quiet: only the periodic lines
    and, after them, the last."""

    def __init__(self, what: str, note: str = "", quiet: bool = False):
        self.what, self.note, self.quiet = what, note, quiet

    def __enter__(self):
        self.t0, self.counts, self.beats = time.time(), (COMPILES.compiled, COMPILES.loaded), 0
        self.done, self.thread_id = threading.Event(), threading.get_ident()
        if not self.quiet:
            self.say(f"{self.what} ...")
        self.heartbeat = threading.Thread(target=self.beat, daemon=True)
        self.heartbeat.start()
        return self

    def beat(self) -> None:
        while not self.done.wait(self.until_next_beat()):
            self.beats += 1
            self.say(f"{self.what}: {time.time() - self.t0:.0f}s so far{self.status()}")

    def until_next_beat(self) -> float:
        """Seconds to the next multiple of HEARTBEAT_SECONDS since the start, so that a line a busy CPU delayed does
        not delay the ones after it; at least half a period, so that a late line is not followed at once by another."""
        wait = HEARTBEAT_SECONDS - (time.time() - self.t0) % HEARTBEAT_SECONDS
        return wait if wait >= HEARTBEAT_SECONDS / 2 else wait + HEARTBEAT_SECONDS

    def status(self, end: bool = False) -> str:
        now = time.time()
        compiled, loaded = COMPILES.compiled - self.counts[0], COMPILES.loaded - self.counts[1]
        parts = []
        if compiled or loaded:
            parts.append(f"{compiled} program(s) compiled, {loaded} loaded from the compilation cache")
        activity = "" if end else COMPILES.activity(self.thread_id)
        if activity:
            parts.append(activity + (f": {self.note}" if self.note and activity.startswith("compiling") else ""))
        if end and parts:
            parts.append(f"{COMPILES.seconds_between(self.t0, now):.0f}s of it tracing and compiling")
        return f" ({'; '.join(parts)})" if parts else ""

    def say(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def __exit__(self, *exc):
        self.done.set()
        self.heartbeat.join()
        if exc[0] is None and (not self.quiet or self.beats):
            self.say(f"{self.what}: {time.time() - self.t0:.1f}s{self.status(end=True)}")


# ---------------------------------------------------------------------------------------------------------
# Main: the algorithm box; set-up, resume and run-directory plumbing in the named functions above it
# ---------------------------------------------------------------------------------------------------------
SCRIPT = "sfl_kinetix_jax"
STAT_NAMES = ["losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/old_approx_kl",
              "losses/approx_kl", "losses/clipfrac", "diagnostics/grad_norm", "diagnostics/grad_clip_frac",
              "losses/explained_variance"]


def sfl_counts(args) -> tuple:
    """(envs playing buffer levels, envs playing fresh levels) at every update."""
    from_buffer = 0 if args.no_sfl else int(round(args.sfl_sample_ratio * args.num_envs))
    return from_buffer, args.num_envs - from_buffer


def validate(args, argv: list) -> dict:
    """Every user mistake is caught here, before any env or network is built (docs/run_directory.md#failure-behaviour)."""
    apply_preset(args, argv)
    check_finite_floats(args)
    check(args.env_size in ENV_SIZES, f"--env-size {args.env_size!r} is not one of {', '.join(ENV_SIZES)}")
    check(args.network in NETWORKS, f"--network {args.network!r} is not one of {', '.join(NETWORKS)}")
    check(args.obs_dtype in OBS_DTYPES, f"--obs-dtype {args.obs_dtype!r} is not one of {', '.join(OBS_DTYPES)}")
    check(args.total_timesteps > 0, f"--total-timesteps must be > 0 (got {args.total_timesteps})")
    check_ppo_flags(args)
    check(args.ewma_com >= 0, f"--ewma-com must be >= 0 (got {args.ewma_com}); 0 is plain PPO")
    check(args.imp_samp_max == 0 or args.imp_samp_max > 1, f"--imp-samp-max must be > 1, or 0 to disable (got {args.imp_samp_max})")
    for name in ("episode_length", "sfl_num_levels", "sfl_rollout_length", "sfl_buffer_size", "sfl_update_period",
                 "sfl_filter_batch", "level_batch", "level_filter_ratio", "hidden_size", "num_hidden_layers",
                 "attention_size", "num_heads", "transformer_depth", "eval_attempts", "updates_per_chunk"):
        check(getattr(args, name) >= 1, f"--{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    for name in ("level_filter_steps", "eval_random_levels", "eval_every", "checkpoint_every", "diagnostics_every",
                 "eval_level_seed"):
        check(getattr(args, name) >= 0, f"--{name.replace('_', '-')} must be >= 0 (got {getattr(args, name)})")
    check(0 <= args.sfl_sample_ratio <= 1, f"--sfl-sample-ratio must lie in [0, 1] (got {args.sfl_sample_ratio})")
    if args.train_levels:
        check(args.no_sfl, "--train-levels: SFL chooses its levels among random ones; add --no-sfl to train on a list")
        known = handmade_level_names(args.env_size)
        unknown = [name for name in args.train_levels if name not in known]
        check(not unknown, f"--train-levels {' '.join(unknown)}: not a hand-designed level of --env-size "
              f"{args.env_size}; one of {', '.join(known)}")
    check(args.sfl_buffer_size <= args.sfl_num_levels, f"--sfl-buffer-size {args.sfl_buffer_size} exceeds "
          f"--sfl-num-levels {args.sfl_num_levels}: the buffer keeps the best K of the N levels scored")
    filter_batch = min(args.sfl_filter_batch, args.sfl_num_levels)
    check(args.sfl_num_levels % filter_batch == 0, f"--sfl-num-levels {args.sfl_num_levels} is not a multiple of "
          f"--sfl-filter-batch {filter_batch}; choose a divisor")
    check(args.embed_dim >= 2, f"--embed-dim must be >= 2 (got {args.embed_dim}): a shape's embedding ends with its kind")
    check(args.attention_size % args.num_heads == 0,
          f"--attention-size {args.attention_size} must be divisible by --num-heads {args.num_heads}")
    check(args.num_heads % 4 == 0, f"--num-heads {args.num_heads} must be a multiple of 4: the heads share out the "
          "observation's 4 attention masks")
    check(args.diagnostics_states >= 2, f"--diagnostics-states must be >= 2 (got {args.diagnostics_states})")
    check(not args.capture_video, "--capture-video is not supported by this script; drop the flag")
    check(args.minibatch_form in ("trajectories", "steps"),
          f"--minibatch-form {args.minibatch_form!r} is not one of trajectories, steps")
    check_scaling_flags(args)
    scaling = resolve_scaling(args)
    check_scaling(args, scaling)
    check(args.minibatch_form == "steps" or args.num_envs % scaling["num_minibatches"] == 0,
          f"--num-envs {args.num_envs} is not a multiple of the {scaling['num_minibatches']} minibatches: a minibatch "
          "holds whole trajectories of num_envs / minibatches envs; change the minibatches or pass "
          "--minibatch-form steps")
    check_per_device_stats(args, scaling["num_minibatches"], filter_batch)
    devices = jax.device_count()
    check(args.num_envs % devices == 0, f"--num-envs {args.num_envs} must be divisible by the {devices} devices")
    check(filter_batch % devices == 0, f"--sfl-filter-batch {filter_batch} must be divisible by the {devices} devices")
    return scaling


def check_per_device_stats(args, num_minibatches: int, filter_batch: int) -> None:
    """--per-device-stats G: each of the G parts holds the same envs of every minibatch, K/G buffer levels and F/G
    levels of every scoring batch, as each of Kinetix's G devices does."""
    parts = args.per_device_stats
    check(parts >= 1, f"--per-device-stats must be >= 1 (got {parts}); 1 computes the statistics over everything")
    # a minibatch holds N/M envs (trajectories) or N/G envs of G groups (steps): a part must hold whole groups
    groups = num_minibatches if args.minibatch_form == "trajectories" else minibatch_layout(args.num_steps,
                                                                                           num_minibatches)[1]
    check(args.num_envs % (parts * groups) == 0, f"--per-device-stats {parts}: --num-envs {args.num_envs} is not a "
          f"multiple of {parts} parts x {groups} envs, one per minibatch (Kinetix allows at most as many minibatches "
          "as envs per device, B26 App. D); lower --per-device-stats or the minibatches")
    if not args.no_sfl:
        check(args.sfl_buffer_size % parts == 0 and filter_batch % parts == 0,
              f"--per-device-stats {parts} must divide --sfl-buffer-size {args.sfl_buffer_size} and --sfl-filter-batch "
              f"{filter_batch}: each part keeps the top K/G of its F/G levels of every scoring batch")


# Flags a resume may change besides the shared ones: the evaluation (its own levels and key, never training's), the
# process layout (one process or several compute the same run), --estimate-memory, which trains nothing, and
# --init-from, which --resume overrides
RESUMABLE = ("eval_every", "eval_random_levels", "eval_level_seed", "eval_attempts", "final_eval", "distributed",
             "estimate_memory", "init_from")
# what --init-from must share with its checkpoint: what decides the network parameters' shapes (the env size decides
# the observation and action sizes), the transformer's widths only for the transformer
INIT_FROM_KEYS = ("env_size", "network", "hidden_size", "num_hidden_layers")
TRANSFORMER_KEYS = ("embed_dim", "attention_size", "num_heads", "transformer_depth")
# what a checkpoint written before a flag existed stands for, where not the flag's default: one written before
# --train-levels trained on random levels, one written before --obs-dtype on float32 observations; before
# --attention-size only MLP checkpoints can resume (the older transformer fails restore_runner's shape check); one
# written before --minibatch-form took minibatches of steps, one before --bootstrap-time-limit bootstrapped, one
# before --per-device-stats computed its statistics over everything
SIGNATURE_IMPLIED = {"train_levels": [], "obs_dtype": "float32", "attention_size": 16, "minibatch_form": "steps",
                     "bootstrap_time_limit": True, "per_device_stats": 1}


def apply_scaling(args, scaling: dict) -> None:
    """Write the resolved batch, minibatches and learning rate into args (what make_train and the loop read)."""
    args.batch_size = scaling["batch_size"]
    args.num_minibatches = scaling["num_minibatches"]
    args.learning_rate = scaling["learning_rate"]
    args.num_iterations = args.total_timesteps // args.batch_size


def load_start(args, signature: dict, scaling: dict):
    """The checkpoint to start from, or None. --resume wins over --init-from: an interrupted new run continues from its
    own checkpoint (the launcher's --resume-unfinished appends --resume to the argv that held --init-from)."""
    implied = older_signature(args, RESUMABLE, SIGNATURE_IMPLIED)
    if args.resume:
        return load_checkpoint(args.resume, SCRIPT, signature, implied=implied, resolved=scaling,
                               new_run=f"--init-from {args.resume} instead of --resume for a new run from its weights")
    if args.init_from:
        keys = INIT_FROM_KEYS + (TRANSFORMER_KEYS if args.network == "transformer" else ())
        return load_checkpoint(args.init_from, SCRIPT, {key: signature[key] for key in keys}, "--init-from",
                               implied=implied)
    return None


def read_args() -> tuple:
    """Args from the command line with the scaling resolved, their resume signature, and the checkpoint to start from
    (--resume or --init-from, or None); every usage error exits 2 here, before anything heavy starts. With
    --distributed, the processes join first."""
    if "--distributed" in sys.argv[1:]:  # before anything touches the devices
        init_distributed()
    args = tyro.cli(Args, description=help_description(__doc__))
    try:
        scaling = validate(args, sys.argv[1:])
        signature = resume_signature(args, RESUMABLE)  # the flags as given (and the preset's), before apply_scaling
        ckpt = load_start(args, signature, scaling)
        check(not args.resume or ckpt["iteration"] < args.total_timesteps // scaling["batch_size"],
              f"--total-timesteps {args.total_timesteps}: the checkpoint is already at iteration "
              f"{ckpt and ckpt['iteration']}; raise it to continue")
        if not args.estimate_memory:
            check_writable_dir(ckpt["run_dir"] if args.resume else args.runs_dir, "--resume" if args.resume else "--runs-dir")
    except UsageError as e:
        exit_usage(e)
    apply_scaling(args, scaling)
    return args, scaling, signature, ckpt


def describe_run(args, scaling: dict) -> None:
    """The resolved configuration, and a note when the devices do not divide the level assignment's blocks."""
    from_buffer, from_fresh = sfl_counts(args)
    print(describe_scaling(scaling, args) + f", num_iterations={args.num_iterations}, devices={jax.device_count()}"
          + (f", preset={args.preset}" if args.preset != "none" else "")
          + (f", per_device_stats={args.per_device_stats}" if args.per_device_stats > 1 else "")
          + (f", train_levels={' '.join(args.train_levels)}" if args.train_levels else "")
          + (", no_sfl" if args.no_sfl else f", sfl N={args.sfl_num_levels} T={args.sfl_update_period} "
             f"K={args.sfl_buffer_size} L={args.sfl_rollout_length} rho={args.sfl_sample_ratio} "
             f"({from_buffer} buffer + {from_fresh} fresh envs)"))
    blocks = level_blocks(from_buffer, from_fresh)
    if (blocks if from_buffer else from_fresh) % jax.device_count():
        print(f"note: the {jax.device_count()} devices do not divide the {blocks} blocks of level assignment "
              f"(gcd of {from_buffer} buffer and {from_fresh} fresh envs): correct, but levels move between devices "
              "at every update (docs/sfl_kinetix_jax.md, SFL)")


def estimate_memory(train: Train, args, template: RunnerState, sample_level_example) -> dict:
    """XLA's compiled-memory analysis of each program at this configuration's shapes, per device; nothing runs."""
    mesh = train.mesh
    sharded, replicated = NamedSharding(mesh, P("envs")), NamedSharding(mesh, P())

    def abstract(tree, sharding, lead=()):
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(lead + tuple(x.shape), x.dtype, sharding=sharding), tree)

    def per_level(n, sharding):
        return abstract(jax.tree.map(lambda x: x[0], sample_level_example), sharding, (n,))
    runner = abstract(template, replicated)
    fresh_count = sfl_counts(args)[1]
    fresh_sharding = NamedSharding(mesh, P(None, "envs") if fresh_count % jax.device_count() == 0 else P())
    fresh = jax.tree.map(lambda x: jax.ShapeDtypeStruct((args.updates_per_chunk, fresh_count) + x.shape[1:], x.dtype,
                                                        sharding=fresh_sharding), sample_level_example)
    hyper = Hyper(*(jax.ShapeDtypeStruct((), jnp.float32, sharding=replicated) for _ in range(4)))
    scalar = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)
    filter_batch = min(args.sfl_filter_batch, args.sfl_num_levels)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated)
    keys = jax.ShapeDtypeStruct((level_calls(args), args.level_batch * jax.device_count(), 2), jnp.uint32,
                                sharding=NamedSharding(mesh, P(None, "envs")))
    lowered = {"train_chunk": train.train_chunk.lower(hyper, fresh, runner, scalar, scalar),
               "level_sampler": train.sample.lower(keys, scalar)}
    if train.diagnose is not None:  # the diagnostics pass: one update and the probe
        lowered["diagnostics"] = train.diagnose.lower(hyper, fresh, runner, scalar)
    if args.level_filter_steps and args.level_filter_ratio > 1:
        lowered["level_filter"] = train.noop_solved.lower(keys, scalar)
    if not args.no_sfl:
        lowered["sfl_scoring"] = train.score.lower(runner.train.params, per_level(filter_batch, sharded), key)
    out = {}
    for name, low in lowered.items():
        t0 = time.time()
        stats = low.compile().memory_analysis()
        if stats is None:  # jax documents that a backend may keep none
            exit_usage(UsageError(f"--estimate-memory: JAX's {jax.default_backend()} backend gives no memory analysis "
                                  f"of a compiled program ({name}); read the peak from a short run's summary.json"))
        total = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes - stats.alias_size_in_bytes
        out[name] = {"argument_bytes": stats.argument_size_in_bytes, "output_bytes": stats.output_size_in_bytes,
                     "temp_bytes": stats.temp_size_in_bytes, "alias_bytes": stats.alias_size_in_bytes,
                     "total_bytes": total, "compile_seconds": time.time() - t0}
    return out


def print_memory_estimate(report: dict) -> None:
    """--estimate-memory's lines, then the report as one JSON line."""
    for name, stats in report.items():
        print(f"{name}: {stats['total_bytes'] / 2**30:.3f} GiB per device (arguments "
              f"{stats['argument_bytes'] / 2**30:.3f}, outputs {stats['output_bytes'] / 2**30:.3f}, temporaries "
              f"{stats['temp_bytes'] / 2**30:.3f}, aliased {stats['alias_bytes'] / 2**30:.3f}; compiled in "
              f"{stats['compile_seconds']:.1f}s)")
    peak = max(s["total_bytes"] for s in report.values())
    print(f"estimated peak per device: {peak / 2**30:.3f} GiB over {jax.device_count()} devices "
          f"({jax.default_backend()}); the programs run one at a time")
    print(json.dumps({"estimate_memory": report, "peak_bytes": peak, "devices": jax.device_count()}))


def restore_runner(template: RunnerState, leaves: list, flag: str) -> RunnerState:
    ref = jax.tree.leaves(template)
    check(len(ref) == len(leaves) and all(np.shape(a) == np.shape(b) and np.asarray(a).dtype == np.asarray(b).dtype
                                          for a, b in zip(ref, leaves)),
          f"{flag}: the checkpoint's state does not match this configuration (network or env shapes)")
    return jax.tree.unflatten(jax.tree.structure(template), [jnp.asarray(x) for x in leaves])


def with_params_of(template: RunnerState, leaves: list) -> RunnerState:
    """--init-from: the runner of --seed with the checkpoint's network parameters, theta_prox equal to them as a new
    run starts it (make_train's init); optimizer, level buffer and RNG key are the template's. The parameters lead the
    checkpoint's leaves (RunnerState flattens train.params first)."""
    count = len(jax.tree.leaves(template.train.params))
    params = restore_runner(template.train.params, leaves[:count], "--init-from")
    return template.replace(train=template.train.replace(params=params, prox_params=jax.tree.map(jnp.copy, params)))


def initial_state(train: Train, args, ckpt, template: RunnerState) -> tuple:
    """(runner, hyper) as global values: the runner of --seed (template), of the checkpoint (--resume) or of --seed
    with the checkpoint's parameters (--init-from), and the hyperparameters a sweep changes (traced, so one compiled
    chunk serves them all)."""
    runner = template
    try:
        if args.resume:
            runner = restore_runner(template, ckpt["runner"], "--resume")
            print(f"resuming {args.resume} at iteration {ckpt['iteration']}")
        elif ckpt:
            runner = with_params_of(template, ckpt["runner"])
            print(f"starting from {args.init_from} (parameters of iteration {ckpt['iteration']}); new run with this "
                  "run's flags")
    except UsageError as e:
        exit_usage(e)
    lockstep("init")  # init compiled on each process alone
    replicated = NamedSharding(train.mesh, P())
    runner = to_global(fetch(runner), train.shardings(runner))
    hyper = to_global(Hyper(clip_coef=np.float32(args.clip_coef), ewma_com=np.float32(args.ewma_com),
                            ent_coef=np.float32(args.ent_coef), vf_coef=np.float32(args.vf_coef)), replicated)
    return runner, hyper


def run_chunk(train: Train, hyper: Hyper, fresh, runner: RunnerState, n: int, probe_at: Optional[int]) -> tuple:
    """The chunk's n updates: (runner, stats, episodes, probe), stats and episodes fetched (global values, the same
    on every process). With probe_at (a diagnostics iteration) the chunk runs as two calls split there, and the
    diagnostics pass replays update probe_at from the runner between them: one update's extra compute, and training
    goes on from the chunk's own state (docs/metrics.md#diagnostics)."""
    if probe_at is None:
        runner, stats, episodes = train.train_chunk(hyper, fresh, runner, 0, n)
        return (runner, *fetch((stats, episodes)), None)
    if probe_at:
        runner, *before = train.train_chunk(hyper, fresh, runner, 0, probe_at)
    probe, _ = train.diagnose(hyper, fresh, runner, probe_at)  # started before the next call donates runner
    runner, *after = train.train_chunk(hyper, fresh, runner, probe_at, n)
    after = fetch(after)
    if probe_at:  # the rows of updates 0 ... probe_at - 1 come from the first call
        after = jax.tree.map(lambda a, b: np.concatenate([a[:probe_at], b[probe_at:]]), fetch(before), after)
    return (runner, *after, probe)


class Evaluation(NamedTuple):
    levels: Any  # the random set, then the hand-designed levels, each --eval-attempts times, on one local device
    handmade_names: list
    key: jnp.ndarray  # its own stream: evaluation never touches training's


def load_evaluation(train: Train, args) -> Evaluation:
    """A fixed random evaluation set (the same for every seed) and the package's hand-designed levels. Built at the
    first evaluation, so a run that evaluates late (or never: --eval-every 0 --no-final-eval) starts training sooner."""
    with Phase(f"generating the {args.eval_random_levels} random evaluation levels",
               "Kinetix's no-op filter takes minutes on a CPU, once: the cache keeps it"):
        eval_random = fetch(sample_levels(train, args, jax.random.PRNGKey(args.eval_level_seed),
                                          max(args.eval_random_levels, 1)))
    names = handmade_level_names(args.env_size)
    with Phase(f"loading the {len(names)} hand-designed levels of size {args.env_size}"):  # a minute on a loaded CPU
        handmade = load_handmade_levels(args.env_size, train.static_params)
        levels = tree_concat([tile_attempts(jax.tree.map(lambda x: x[:args.eval_random_levels], eval_random),
                                            args.eval_attempts), tile_attempts(handmade, args.eval_attempts)])
        levels = jax.device_put(fetch(levels), jax.local_devices()[0])
    lockstep("evaluation levels")  # the hand-designed levels load on each process alone
    return Evaluation(levels, names, jax.random.PRNGKey(args.seed + 7919))


def load_train_levels(train: Train, args):
    """The --train-levels levels, the same every update, laid out like fresh ones (envs split over the devices)."""
    names = handmade_level_names(args.env_size)
    with Phase(f"loading the {len(args.train_levels)} hand-designed training levels of size {args.env_size}"):
        handmade = load_handmade_levels(args.env_size, train.static_params)
        index = jnp.array([names.index(name) for name in args.train_levels])
        listed = to_global(fetch(listed_levels(tree_take(handmade, index), args.num_envs, args.updates_per_chunk)),
                           NamedSharding(train.mesh, P(None, "envs")))
    lockstep("training levels")  # the hand-designed levels load on each process alone
    return listed


def next_stop(iteration: int, args, first: bool = False) -> int:
    """The next iteration after which the host has something to do (log events, buffer update, checkpoint, end). A
    session's first chunk is one update: it compiles the chunk, and a stop signal is answered right after."""
    stops = [args.num_iterations, iteration + (1 if first else args.updates_per_chunk)]
    periods = [args.eval_every, args.diagnostics_every, args.checkpoint_every]
    if not args.no_sfl:
        periods.append(args.sfl_update_period)
    for every in periods:
        if every:
            stops.append((iteration // every + 1) * every)
    return min(stops)


class ChunkClock:
    """SPS from the end of the first chunk on (that chunk compiles), and the first chunk's own SPS, both without the
    time spent tracing and compiling (the first chunk of --updates-per-chunk updates compiles level programs of its
    own); the run's active wall time across resumes; the seconds spent refreshing the buffer."""

    def __init__(self, batch_size: int, wall_offset: float, filter_seconds: float, compiles=None):
        self.batch_size, self.wall_offset, self.filter_seconds = batch_size, wall_offset, filter_seconds
        self.compiles = compiles or COMPILES  # a CompileWatch
        self.start, self.timed_from, self.timed_steps = time.time(), None, 0

    def tick(self, updates: int, chunk_start: float) -> float:
        """The SPS to log for a chunk of `updates` that began at chunk_start."""
        now = time.time()
        if self.timed_from is None:  # a session's first chunk: its own time, less what compiling took of it
            self.timed_from, self.timed_steps = now, 0
            running = now - chunk_start - self.compiles.seconds_between(chunk_start, now)
            return updates * self.batch_size / max(running, 1e-9)
        self.timed_steps += updates * self.batch_size
        return self.timed_steps / self.timed_seconds(now)

    def timed_seconds(self, now: float) -> float:
        """Seconds since the first chunk's end, less those spent compiling since then (scoring rounds included)."""
        return max(now - self.timed_from - self.compiles.seconds_between(self.timed_from, now), 1e-9)

    def wall_time(self) -> float:
        return self.wall_offset + time.time() - self.start

    def final_sps(self, steps_taken: int) -> tuple:
        """(SPS after the first chunk, SPS with it) of this session's steps."""
        with_warmup = steps_taken / max(time.time() - self.start, 1e-9)
        if self.timed_from and self.timed_steps:
            return self.timed_steps / self.timed_seconds(time.time()), with_warmup
        return with_warmup, with_warmup


# The run directory: rows timed by the run's active seconds (the logs are cut back on resume by the shared RunLogger)
def active_time_logger(run_dir: str, config: dict, args, total_steps: int, resumed: Optional[dict],
                       clock: ChunkClock):
    """The run logger with each row's wall_time = the run's active seconds (B26 Fig. 16b's wall-clock axis): the
    sessions before the resumed checkpoint plus this one, never the time between sessions."""
    logger = RunLogger(run_dir, config, args, total_steps, resumed, headline="charts/solve_rate_random")
    logger.wall_clock = clock.wall_time  # the shared logger's hook for a row's wall_time
    return logger


def open_run(args, scaling: dict, ckpt, clock: ChunkClock):
    """Process 0: the run directory (absolute: run files record it; --resume: the checkpoint's, its logs cut back to
    the checkpoint) with config.json, and its logger; None on the other processes, which write nothing. config.json
    records the --init-from checkpoint and the iteration the run started from, 0 (utils/aggregate.py reads both)."""
    if jax.process_index() != 0:
        return None
    if args.resume:
        run_dir = os.path.abspath(ckpt["run_dir"])
    else:
        run_name = f"Kinetix-{args.env_size}__{args.exp_name}__{args.seed}__{int(time.time())}"
        run_dir = os.path.abspath(os.path.join(args.runs_dir, run_name))
    from_buffer, from_fresh = sfl_counts(args)
    config = {"argv": sys.argv[1:], "args": dataclasses.asdict(args), "resolved": scaling, "devices": jax.device_count(),
              "processes": jax.process_count(), "platform": jax.default_backend(), "versions": package_versions(),
              "git_commit": git_commit(), "script": SCRIPT, "init_from": args.init_from,
              "start_iteration": 0,  # every run counts from update 0, a new run from --init-from too
              "sfl": {"envs_from_buffer": from_buffer, "envs_fresh": from_fresh,
                      "level_blocks": level_blocks(from_buffer, from_fresh),
                      "handmade_levels": handmade_level_names(args.env_size), "train_levels": list(args.train_levels)}}
    logger = active_time_logger(run_dir, config, args, args.num_iterations * args.batch_size,
                                ckpt if args.resume else None, clock)
    announce_run(logger.run_dir)
    return logger


def save_run_checkpoint(logger, args, signature: dict, iteration: int, clock: ChunkClock, runner: RunnerState) -> None:
    """latest.ckpt: the runner state (weights, Adam, theta_prox, RNG key, buffer) as numpy leaves, gathered on every
    process (a collective); process 0 writes it with its logs' sizes, what a resume from it keeps."""
    leaves = [np.asarray(x) for x in fetch(jax.tree.leaves(runner))]
    if not logger:
        return
    save_checkpoint(os.path.join(logger.run_dir, "checkpoints", "latest.ckpt"), {
        "script": SCRIPT, "signature": signature, "iteration": iteration,
        "global_step": iteration * args.batch_size, "wall_time": clock.wall_time(),
        "filter_seconds": clock.filter_seconds, "run_dir": logger.run_dir, "args": dataclasses.asdict(args),
        "log_sizes": logger.log_sizes(), "runner": leaves})


def agreed_stop(stop) -> bool:
    """A stop signal of any process, agreed by every process, so that all stop at the same point. A signal that
    arrives while the processes agree (its handler runs when the collective returns) is kept for the next agreement:
    an agreed 0 must not overwrite it."""
    agreed = agreed_signal(stop.signum)
    if agreed:
        stop.signum = agreed  # every process exits with the same code
    return bool(agreed)


def first_bad_update(stats: np.ndarray, runner: RunnerState, updates: int) -> Optional[int]:
    """The index of the chunk's first update with a non-finite loss (the last one if only the parameters are not
    finite), or None (docs/run_directory.md#failure-behaviour); the same decision on every process (gathered values)."""
    params_ok = all(np.isfinite(x).all() for x in fetch(jax.tree.leaves(runner.train.params)))
    finite_rows = np.isfinite(stats[:updates, :7]).all(axis=1)
    if not finite_rows.all():
        return int(np.argmin(finite_rows))
    return None if params_ok else updates - 1


def log_update(logger, args, scaling: dict, iteration: int, stats: np.ndarray, episodes: EpisodeStats, i: int,
               sps: float, diagnostics) -> None:
    """Update i of the chunk: its finished episodes, then CleanRL's charts and losses (and the diagnostics if probed)."""
    step = iteration * args.batch_size
    for row in episode_rows(episodes, i):
        logger.log(step, iteration, row)
    lr = scaling["learning_rate"] * (1.0 - (iteration - 1.0) / args.num_iterations) if args.anneal_lr else scaling["learning_rate"]
    scalars = {"charts/learning_rate": lr, "charts/SPS": sps}
    scalars.update({name: stats[j] for j, name in enumerate(STAT_NAMES)})  # grad_norm too: clipping's every update
    if episodes.count[i]:
        scalars["charts/train_solve_rate"] = float(episodes.solved[i] / episodes.count[i])
    if diagnostics is not None:
        diag, seq, ref, ref_at = diagnostics
        scalars.update(diag)
        if args.kl_profile:
            logger.log_profile({"global_step": step, "iteration": iteration, "seq_kl": seq, "ref_kl": ref,
                                "ref_steps": ref_at})
    logger.log(step, iteration, scalars)


def evaluate_and_log(train: Train, args, logger, evaluation: Evaluation, iteration: int, params) -> dict:
    """charts/solve_rate_random and charts/solve_rate_handmade (and per hand-designed level). Every process evaluates
    the same on its own device, so that all stay in step; process 0 logs."""
    device = jax.local_devices()[0]
    solved = jax.device_get(train.first_solved(evaluation.levels, jax.device_put(fetch(params), device),
                                               jax.random.fold_in(evaluation.key, iteration)))
    rates = level_solve_rates(solved, args.eval_attempts)
    handmade_rates = rates[args.eval_random_levels:]
    scalars = {"charts/solve_rate_handmade": float(handmade_rates.mean())}
    for name, rate in zip(evaluation.handmade_names, handmade_rates):  # per level: what the mean hides
        scalars[f"charts/solve_rate_handmade/{name.split('/', 1)[1]}"] = float(rate)
    if args.eval_random_levels:
        scalars["charts/solve_rate_random"] = float(rates[:args.eval_random_levels].mean())
    if logger:
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


def finish_run(train: Train, args, signature: dict, logger, evaluation, status: str, iteration: int,
               start_iteration: int, clock: ChunkClock, runner: RunnerState) -> None:
    """summary.json; a finished run is also evaluated (unless --no-final-eval), checkpointed and (--save-model) saved.
    evaluation() gives the evaluation set, built at its first call."""
    final_sps, sps_with_warmup = clock.final_sps((iteration - start_iteration) * args.batch_size)
    summary = {"status": status, "global_step": iteration * args.batch_size, "iteration": iteration, "SPS": final_sps,
               "SPS_with_warmup": sps_with_warmup, "filter_seconds": clock.filter_seconds,
               "filter_share": clock.filter_seconds / max(clock.wall_time(), 1e-9)}
    if status == "finished":
        if args.final_eval:  # evaluated first: the checkpoint's log sizes include the final evaluation
            levels = evaluation()  # generated, and the evaluation compiled, here when --eval-every 0 evaluated nothing
            with Phase("final evaluation", quiet=True):
                last_eval = evaluate_and_log(train, args, logger, levels, iteration, runner.train.params)
            summary.update({k.split("/")[1]: v for k, v in last_eval.items() if k.count("/") == 1})
            summary["solve_rate_handmade_levels"] = {k.split("/")[2]: v for k, v in last_eval.items()
                                                     if k.count("/") == 2}
            print(f"solve rate: {summary.get('solve_rate_random', float('nan')):.4f} on {args.eval_random_levels} "
                  f"random levels, {summary['solve_rate_handmade']:.4f} on {len(levels.handmade_names)} hand-designed "
                  f"levels ({args.eval_attempts} attempts each)")
        save_run_checkpoint(logger, args, signature, iteration, clock, runner)
        lockstep("final")  # process 0 has written the checkpoint
        params = fetch(runner.train.params) if args.save_model else None  # on every process: a collective
        if args.save_model and logger:
            model_path = os.path.join(logger.run_dir, f"{args.exp_name}.cleanrl_model")
            atomic_write(model_path, pickle.dumps(params))
            summary["model_path"] = model_path
            print(f"model saved to {model_path}")
    summary["peak_device_bytes"] = peak_device_bytes(jax.local_devices())  # this process's devices
    if logger:
        logger.close(summary)
        print(f"SPS: {final_sps:.0f} (with warm-up: {sps_with_warmup:.0f}){peak_text(summary['peak_device_bytes'])}; "
              f"filtering took {summary['filter_share']:.1%} of the wall time; run directory: {logger.run_dir}")
        if status == "interrupted":
            print(f"interrupted; resume with --resume {os.path.join(logger.run_dir, 'checkpoints', 'latest.ckpt')}")


def main():
    args, scaling, signature, ckpt = read_args()
    describe_run(args, scaling)

    # Envs, levels and agent (one seed: separate streams for init/training, fresh levels, SFL candidates, evaluation)
    t0 = time.time()
    with Phase("building the envs, the level generator and the agent",
               "Kinetix's random level generator takes minutes on a CPU, once: the cache keeps it"):
        train = make_train(args)
        fresh_key, filter_key = level_streams(args.seed)
        example = fetch(random_levels(train, args, jax.random.PRNGKey(0), None, 1, 1, 0, filtered=False))  # shapes
        template = train.init(jax.tree.map(lambda x: x[0], example), args.seed)
    if args.estimate_memory:
        with Phase("compiling every program at this configuration's shapes, to read their memory"):
            report = estimate_memory(train, args, template, example)
        print_memory_estimate(report)
        return
    runner, hyper = initial_state(train, args, ckpt, template)
    listed = load_train_levels(train, args) if args.train_levels else None
    evaluation = functools.cache(functools.partial(load_evaluation, train, args))  # built at the first evaluation
    print(f"envs, levels and the agent built in {time.time() - t0:.1f}s")
    start_iteration = ckpt["iteration"] if args.resume else 0
    clock = ChunkClock(args.batch_size, ckpt["wall_time"] if args.resume else 0.0,
                       ckpt.get("filter_seconds", 0.0) if args.resume else 0.0)
    logger = open_run(args, scaling, ckpt, clock)
    stop = StopFlag()
    lockstep("run directory")  # process 0 has written it
    status, iteration, first = "finished", start_iteration, True

    if args.eval_every and not args.resume:  # the initial policy's solve rates: the baseline later ones are read against
        levels = evaluation()
        with Phase(f"first evaluation: {args.eval_random_levels} random + {len(levels.handmade_names)} "
                   f"hand-designed levels x {args.eval_attempts} attempts"):
            evaluate_and_log(train, args, logger, levels, 0, runner.train.params)
        if agreed_stop(stop):
            status = "interrupted"
            save_run_checkpoint(logger, args, signature, iteration, clock, runner)
    while iteration < args.num_iterations and status != "interrupted":
        # SFL's buffer (B26 §6, Table 3): every T updates, score N fresh random levels by an L-step rollout of the
        # current policy each, and keep the K of highest learnability p(1 - p)
        if not args.no_sfl and iteration % args.sfl_update_period == 0:
            t_filter = time.time()
            with Phase(f"SFL buffer: scoring {args.sfl_num_levels} random levels for {args.sfl_rollout_length} "
                       "steps each", quiet=not first):
                refreshed = refresh_buffer(train, args, runner, filter_key, iteration // args.sfl_update_period,
                                           functools.partial(agreed_stop, stop))
                # on every process (a collective); it waits for the scoring, which runs after its calls return
                stats_buffer = buffer_stats(refreshed.buffer) if refreshed is not None else None
            if refreshed is None:  # a stop signal between scoring batches: answered now, redone on resume
                status = "interrupted"
                save_run_checkpoint(logger, args, signature, iteration, clock, runner)
                break
            runner = refreshed
            clock.filter_seconds += time.time() - t_filter
            if logger:
                logger.log(iteration * args.batch_size, iteration, {**stats_buffer, "sfl/filter_seconds": time.time() - t_filter})

        # A jitted chunk of updates, each: assign levels (round(rho N) envs play buffer levels, the others fresh ones),
        # rollout, GAE, epochs x minibatches of PPO(-EWMA); on a diagnostics iteration its last update is replayed
        end = next_stop(iteration, args, first)
        n = end - iteration
        diag_at = end if args.diagnostics_every and end % args.diagnostics_every == 0 else None
        t_chunk = time.time()
        with Phase("first update: its fresh levels, then the update" if first else f"updates {iteration + 1}-{end}",
                   quiet=not first):
            fresh = listed if args.train_levels else fresh_levels(train, args, fresh_key, iteration, n)
            runner, stats, episodes, probe = run_chunk(train, hyper, fresh, runner, n, n - 1 if diag_at else None)
        first = False
        bad = first_bad_update(stats, runner, n)
        sps = clock.tick(n, t_chunk)

        # Log every good update: its episodes, losses and (probed) diagnostics
        for i in range(n if bad is None else bad):
            it = iteration + i + 1
            diagnostics = None
            if it == diag_at:  # on every process: a collective
                grad_norm = stats[i, STAT_NAMES.index("diagnostics/grad_norm")]
                diagnostics = compute_diagnostics(train.network, probe, runner.train, args.batch_size, grad_norm)
            if logger:
                log_update(logger, args, scaling, it, stats[i], episodes, i, sps, diagnostics)
        if bad is not None:  # non-finite loss or parameters: stop, keep the last good checkpoint
            print(f"error: non-finite loss or parameters at iteration {iteration + bad + 1}; the last good checkpoint "
                  "is kept. Lower --learning-rate or check the inputs.", file=sys.stderr)
            status = "diverged"
            break
        iteration = end

        # Evaluate the solve rates; checkpoint; stop at a chunk boundary on SIGINT/SIGTERM (every process or none)
        if args.eval_every and iteration % args.eval_every == 0 and iteration < args.num_iterations:
            evaluate_and_log(train, args, logger, evaluation(), iteration, runner.train.params)
        if logger:
            logger.progress(iteration * args.batch_size, sps)
        if agreed_stop(stop):
            status = "interrupted"
        if args.checkpoint_every and iteration % args.checkpoint_every == 0 or status == "interrupted":
            save_run_checkpoint(logger, args, signature, iteration, clock, runner)
        if logger:
            logger.flush()
        lockstep("chunk")  # process 0 has logged and written the checkpoint
        if status == "interrupted":
            break

    finish_run(train, args, signature, logger, evaluation, status, iteration, start_iteration, clock, runner)
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
