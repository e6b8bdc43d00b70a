"""Throughput and filtering cost of sfl_kinetix_jax.py on this machine.

For each num_envs (MLP network): random-action rollout SPS on the same levels (the environment alone), training SPS
(the script's jitted chunk: level assignment, rollout, GAE, update) and their ratio (target >= 0.70), and the same
with 1 epoch instead of B26's 8 (R + U against R + 8U: how much of the gap is the update's arithmetic); the compile
time of the training chunk, the level generator and the SFL scoring program; the cost per level of the generator and
per level-step of the scoring rollout, and from them the share of wall time that SFL's buffer updates take at the
2048 preset (N = 12288 levels x L = 512 steps every T = 128 updates of 2048 x 256 steps, plus 1024 fresh levels per
update). The share is an extrapolation from the measured per-step costs at --num-envs, not a 2048-env run (one
2048 x 256 update takes minutes on this CPU). Memory and the largest real run are measured by the .sh wrapper.

Whether the ratio target can be met at 8 epochs on this machine at all: XLA's FLOP count of one epoch's update (one
minibatch step over the whole batch), the rate that step runs at alone, and the rate of a large dense float32 matmul
on the same devices (what this CPU does at best); from them the best ratio training could reach if the update ran at
that matmul rate and the rest of the chunk (rollout with the policy, levels, GAE) stayed as measured.
"""
import argparse
import functools
import os
import sys
import time

import jax
import jax.numpy as jnp
import tyro

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
from _throughput_common import check_configuration, check_repeats, refuse  # noqa: E402
from cleanrl_scaling import sfl_kinetix_jax as m  # noqa: E402


def configure(num_envs, num_steps, env_size, update_epochs=8):
    """The 2048 preset's SFL and PPO settings (B26 Table 2: 8 epochs) at this num_envs and rollout length, MLP network,
    one update a chunk."""
    argv = ["--preset", "2048", "--network", "mlp", "--num-envs", str(num_envs), "--num-steps", str(num_steps),
            "--env-size", env_size, "--updates-per-chunk", "1", "--diagnostics-every", "0",
            "--total-timesteps", str(num_envs * num_steps), "--num-minibatches", "1",
            "--update-epochs", str(update_epochs)]
    args = tyro.cli(m.Args, args=argv)  # parsed as the script parses it: one list of flags, not two
    m.apply_scaling(args, m.validate(args, argv))  # one iteration: total = one batch
    args.level_batch = min(args.level_batch, num_envs)
    return args


def check_options(opts):
    check_repeats(opts.repeats)
    if opts.env_size not in m.ENV_SIZES:
        refuse(f"--env-size {opts.env_size!r} is not one of {', '.join(m.ENV_SIZES)}")
    for n in opts.num_envs:
        check_configuration(f"--num-envs {n} with --num-steps {opts.num_steps}", "sfl_kinetix_jax.py", m.UsageError,
                            configure, n, opts.num_steps, opts.env_size)


def timed(fn, *args):
    t = time.time()
    out = jax.block_until_ready(fn(*args))
    return out, time.time() - t


def random_rollout_sps(train, args, levels, num_steps, repeats):
    """The same env step as training (auto-reset to the env's level), with uniformly random valid actions."""
    dims = jnp.asarray(m.action_layout(train.env, train.env_params)[0])

    def step(envs, key):
        action = jax.random.randint(key, (args.num_envs, dims.shape[0]), 0, dims)
        return train.env_step(envs, action)[0], None

    @jax.jit
    def rollout(levels, key):
        return jax.lax.scan(step, train.start_envs(levels), jax.random.split(key, num_steps))[0]
    jax.block_until_ready(rollout(levels, jax.random.PRNGKey(0)))  # compile
    t = time.time()
    for i in range(repeats):
        envs = rollout(levels, jax.random.PRNGKey(i + 1))
    jax.block_until_ready(envs)
    return repeats * num_steps * args.num_envs / (time.time() - t)


def train_sps(train, args, levels, repeats):
    """Training SPS of the jitted chunk (level assignment, rollout, GAE, update) and its compile time; the runner it
    ends with (for the scoring program's parameters)."""
    runner = train.init(jax.tree.map(lambda x: x[0], levels), 1)
    runner = runner.replace(buffer=m.top_k_levels(runner.buffer, levels, jnp.zeros(args.num_envs)))
    fresh = jax.tree.map(lambda x: x[None, :m.sfl_counts(args)[1]], levels)
    hyper = m.Hyper(clip_coef=jnp.float32(0.2), ewma_com=jnp.float32(0.0), ent_coef=jnp.float32(0.01),
                    vf_coef=jnp.float32(0.5))
    (runner, *_), compile_chunk = timed(train.train_chunk, hyper, fresh, runner, 0, 1)
    runner, *_ = jax.block_until_ready(train.train_chunk(hyper, fresh, runner, 0, 1))  # its own outputs
    t = time.time()
    for _ in range(repeats):
        runner, stats, _ = train.train_chunk(hyper, fresh, runner, 0, 1)
    jax.block_until_ready(stats)
    return repeats * args.num_envs * args.num_steps / (time.time() - t), compile_chunk, runner


def matmul_gflops(repeats, size=2048):
    """GFLOP/s of a large dense float32 matmul: the best this CPU does on the arithmetic an MLP update is made of."""
    a = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32)
    matmul = jax.jit(lambda x: x @ a)
    x = jax.block_until_ready(matmul(a))
    t = time.time()
    for _ in range(repeats):
        x = matmul(x * 1e-3)
    jax.block_until_ready(x)
    return repeats * 2 * size**3 / (time.time() - t) / 1e9


def xla_flops(compiled) -> float:
    cost = compiled.cost_analysis()
    return float((cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"])


def update_epoch_cost(train, args, runner, levels, num_samples, repeats):
    """One epoch at one minibatch = one Adam step on num_samples samples: XLA's FLOP count and its seconds alone."""
    obs = jax.vmap(train.env.get_obs)(levels)
    obs = jax.tree.map(lambda x: jnp.resize(x, (num_samples,) + x.shape[1:]), obs)
    dims = m.action_layout(train.env, train.env_params)[0]
    key_a, key_b = jax.random.split(jax.random.PRNGKey(0))
    batch = m.Batch(obs=obs, action=jax.random.randint(key_a, (num_samples, len(dims)), 0, jnp.asarray(dims)),
                    logp=jnp.full(num_samples, -5.0), advantages=jax.random.normal(key_b, (num_samples,)),
                    returns=jnp.ones(num_samples), value=jnp.zeros(num_samples))
    hyper = m.Hyper(clip_coef=jnp.float32(0.2), ewma_com=jnp.float32(0.0), ent_coef=jnp.float32(0.01),
                    vf_coef=jnp.float32(0.5))
    carry = m.UpdateCarry(train=runner.train, probe=None, stat_sum=jnp.zeros(7), steps=jnp.zeros((), jnp.int32),
                          stopped=jnp.zeros((), bool))
    step = jax.jit(lambda carry, batch: train.minibatch_step(hyper, carry, batch)[0])
    compiled = step.lower(carry, batch).compile()
    carry = jax.block_until_ready(compiled(carry, batch))
    t = time.time()
    for _ in range(repeats):
        carry = compiled(carry, batch)
    jax.block_until_ready(carry)
    return xla_flops(compiled), (time.time() - t) / repeats


def best_case_ratio(rand_sps, train_sps, train_one_sps, epochs, epoch_flops, gflops):
    """Training/random ratio if each epoch's update took epoch_flops at `gflops` and the rest of the chunk stayed as
    measured. Per step: random r = 1/rand, training R + E*U = 1/train, with one epoch R + U = 1/train_one."""
    per_epoch = (1 / train_sps - 1 / train_one_sps) / (epochs - 1)  # U, seconds per env step
    rest = 1 / train_one_sps - per_epoch  # R
    return (1 / rand_sps) / (rest + epochs * epoch_flops / (gflops * 1e9))


def filter_share(level_seconds, score_step_seconds, train_step_seconds, n=12288, length=512, period=128,
                 envs=2048, steps=256, fresh_per_update=1024):
    """Share of wall time in SFL's buffer updates at the 2048 preset, from per-level and per-step costs: every T
    updates, N generated levels and N x L scoring steps; every update, its fresh levels and envs x steps training."""
    filtering = n * level_seconds + n * length * score_step_seconds
    training = period * (fresh_per_update * level_seconds + envs * steps * train_step_seconds)
    return filtering / (filtering + training)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[256])
    parser.add_argument("--num-steps", type=int, default=32, help="rollout length of the timed runs")
    parser.add_argument("--env-size", default="s")
    parser.add_argument("--repeats", type=int, default=2)
    opts = parser.parse_args()
    check_options(opts)
    print("| num_envs | steps | random SPS | train SPS | ratio | train SPS, 1 epoch | ratio, 1 epoch | "
          "compile s (chunk, generator, scoring) | s per level | s per scoring step | filtering share at 2048 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    bounds = []
    for n in opts.num_envs:
        args = configure(n, opts.num_steps, opts.env_size)
        train = m.make_train(args)
        # first calls compile; each program is timed on a later call with the argument types the script passes
        sample = functools.partial(m.sample_levels, train, args)
        _, compile_sample = timed(sample, jax.random.PRNGKey(0), n)
        levels, sample_seconds = timed(sample, jax.random.PRNGKey(1), n)
        rand = random_rollout_sps(train, args, levels, opts.num_steps, opts.repeats)
        train_rate, compile_chunk, runner = train_sps(train, args, levels, opts.repeats)
        # the same chunk with 1 epoch: R + U and R + 8U give the update's share (rollout R, one epoch U)
        one = configure(n, opts.num_steps, opts.env_size, update_epochs=1)
        train_one = train_sps(m.make_train(one), one, levels, opts.repeats)[0]
        score = functools.partial(train.score, runner.train.params, levels)
        _, compile_score = timed(score, jax.random.PRNGKey(0))
        _, score_seconds = timed(score, jax.random.PRNGKey(1))
        per_level = sample_seconds / n
        per_score_step = score_seconds / (n * args.sfl_rollout_length)
        share = filter_share(per_level, per_score_step, 1.0 / train_rate)
        print(f"| {n} | {opts.num_steps} | {rand:.0f} | {train_rate:.0f} | {train_rate / rand:.2f} | {train_one:.0f} "
              f"| {train_one / rand:.2f} | {compile_chunk:.0f}, "
              f"{compile_sample:.0f}, {compile_score:.0f} | {per_level:.2e} | {per_score_step:.2e} | {share:.1%} |",
              flush=True)
        bounds.append((n, rand, train_rate, train_one, args.update_epochs,
                       *update_epoch_cost(train, args, runner, levels, n * opts.num_steps, opts.repeats)))
    gemm = matmul_gflops(max(3, opts.repeats))
    print(f"\nCan 8 epochs reach the target here? Dense float32 matmul ({jax.device_count()} device(s)): {gemm:.1f} GFLOP/s")
    print("| num_envs | one epoch's update, GFLOP (XLA) | its seconds alone | GFLOP/s | share of the matmul rate | "
          "best ratio at 8 epochs, update at the matmul rate |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, rand, train_rate, train_one, epochs, flops, seconds in bounds:
        best = best_case_ratio(rand, train_rate, train_one, epochs, flops / (n * opts.num_steps), gemm)
        print(f"| {n} | {flops / 1e9:.2f} | {seconds:.3f} | {flops / seconds / 1e9:.1f} | "
              f"{flops / seconds / 1e9 / gemm:.0%} | {best:.2f} |", flush=True)


if __name__ == "__main__":
    main()
