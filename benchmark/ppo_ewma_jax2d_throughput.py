"""Throughput and memory of ppo_ewma_jax2d.py on this machine.

For each num_envs: random-action rollout SPS (the environment alone), training SPS (rollout + GAE + update, the
same jitted chunk the script runs) and their ratio; the compiled training program's memory from XLA's memory
analysis at --mem-steps (256 by default, so batches too large to run in minutes on CPU are still measured),
and the process's peak RSS. Prints one table row per num_envs.
"""
import argparse
import functools
import math
import os
import resource
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
from _throughput_common import check_configuration, check_repeats, refuse  # noqa: E402
from cleanrl_scaling import ppo_ewma_jax2d as m  # noqa: E402


def random_rollout_sps(train, num_envs, num_steps, repeats):
    def step(envs, key):
        keys = jax.random.split(key, num_envs + 1)
        action = jax.vmap(train.env.action_type.random_action)(keys[1:])
        envs, *_ = train.env_step(train.tasks, envs, action, keys[0])
        return envs, None

    runner = train.init(train.tasks, 0)
    placement = train.shardings(runner).envs  # as the script places them; returned so, so one compile

    @functools.partial(jax.jit, out_shardings=placement)
    def rollout(envs, key):
        return jax.lax.scan(step, envs, jax.random.split(key, num_steps))[0]
    envs = jax.block_until_ready(rollout(jax.device_put(runner.envs, placement), jax.random.PRNGKey(0)))  # compile
    t = time.time()
    for i in range(repeats):
        envs = rollout(envs, jax.random.PRNGKey(i + 1))
    jax.block_until_ready(envs)
    return repeats * num_steps * num_envs / (time.time() - t)


def configure(num_envs, num_steps, num_tasks):
    args = m.Args(num_envs=num_envs, num_steps=num_steps, num_tasks=num_tasks, diagnostics_every=0,
                  updates_per_chunk=1, total_timesteps=max(1, num_envs * num_steps))
    scaling = m.validate(args)
    args.batch_size, args.num_minibatches = scaling["batch_size"], scaling["num_minibatches"]
    args.learning_rate, args.num_iterations = scaling["learning_rate"], 1
    return args


def check_options(opts):
    """Every configuration the run will measure is validated first, by the script's own validation."""
    check_repeats(opts.repeats)
    if not (math.isfinite(opts.memory_gib) and opts.memory_gib > 0):
        refuse(f"--memory-gib must be a finite number > 0 (got {opts.memory_gib})")
    for flag, sizes, steps_flag, steps in (("--num-envs", opts.num_envs, "--num-steps", opts.num_steps),
                                           ("--mem-envs", opts.mem_envs, "--mem-steps", opts.mem_steps)):
        for n in sizes:
            check_configuration(f"{flag} {n} with {steps_flag} {steps}", "ppo_ewma_jax2d.py", m.UsageError, configure,
                                n, steps, opts.num_tasks)


def largest_that_fits(measured, memory_gib, measure, step=256):
    """Memory is affine in num_envs: extrapolate from the two largest measured sizes to the largest multiple of
    `step` under memory_gib, then confirm by measuring it. Returns (num_envs, GiB, GiB per env), or a sentence
    saying why there is no estimate (one measured size has no slope)."""
    if len(measured) < 2:
        return "one --mem-envs value gives no slope: pass two or more to extrapolate the largest num_envs that fits"
    (n0, g0), (n1, g1) = sorted(measured.items())[-2:]
    per_env = (g1 - g0) / (n1 - n0)
    if per_env <= 0:
        return f"memory did not grow from {n0} to {n1} envs ({g0:.2f} -> {g1:.2f} GiB): no extrapolation"
    largest = int((memory_gib - (g1 - per_env * n1)) / per_env) // step * step
    gib = measure(largest) if largest >= step else math.inf
    while gib >= memory_gib and largest > step:
        largest -= step
        gib = measure(largest)
    if gib >= memory_gib:
        return f"no multiple of {step} envs fits in {memory_gib:g} GiB"
    return largest, gib, per_env


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--num-steps", type=int, default=32, help="rollout length of the timed runs")
    parser.add_argument("--mem-envs", type=int, nargs="+", default=[2048, 8192],
                        help="sizes whose compiled memory is measured; two or more also extrapolate the largest that fits")
    parser.add_argument("--memory-gib", type=float, default=24.0)
    parser.add_argument("--mem-steps", type=int, default=256)
    parser.add_argument("--num-tasks", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=2)
    opts = parser.parse_args()
    check_options(opts)
    print("| num_envs | steps | random SPS | train SPS | ratio |")
    print("|---:|---:|---:|---:|---:|")
    for n in opts.num_envs:
        args = configure(n, opts.num_steps, opts.num_tasks)
        train = m.make_train(args)
        hyper = m.Hyper(clip_coef=jnp.float32(0.2), ewma_com=jnp.float32(0.0), ent_coef=jnp.float32(0.01),
                        vf_coef=jnp.float32(0.5))
        rand = random_rollout_sps(train, n, opts.num_steps, opts.repeats)
        runner = train.init(train.tasks, 1)
        probe = train.empty_probe(runner.train.params)
        runner = jax.device_put(runner, train.shardings(runner))  # placed as the script places it
        runner, probe, *_ = jax.block_until_ready(train.train_chunk(hyper, train.tasks, runner, probe, 1, -1))  # compile
        t = time.time()
        for _ in range(opts.repeats):
            runner, probe, stats, _ = train.train_chunk(hyper, train.tasks, runner, probe, 1, -1)
        jax.block_until_ready(stats)
        train_sps = opts.repeats * n * opts.num_steps / (time.time() - t)
        print(f"| {n} | {opts.num_steps} | {rand:.0f} | {train_sps:.0f} | {train_sps / rand:.2f} |", flush=True)
    print(f"\npeak RSS of the timed runs: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    print(f"\n| num_envs | steps | XLA temp + args + outputs (GiB) | fits in {opts.memory_gib:g} GiB |")
    print("|---:|---:|---:|---|")
    measured = {n: compiled_memory_gib(n, opts.mem_steps, opts.num_tasks) for n in sorted(set(opts.mem_envs))}
    for n, gib in measured.items():
        print(f"| {n} | {opts.mem_steps} | {gib:.2f} | {'yes' if gib < opts.memory_gib else 'no'} |", flush=True)
    found = largest_that_fits(measured, opts.memory_gib,
                              lambda n: compiled_memory_gib(n, opts.mem_steps, opts.num_tasks))
    if isinstance(found, str):
        print(f"\n{found}")
        return
    largest, gib, per_env = found
    print(f"| {largest} | {opts.mem_steps} | {gib:.2f} | yes (largest multiple of 256, {per_env * 2**10:.2f} MiB/env) |")


def compiled_memory_gib(num_envs, num_steps, num_tasks):
    """XLA's memory analysis of the compiled training chunk (no execution): temp + arguments + outputs."""
    args = configure(num_envs, num_steps, num_tasks)
    train = m.make_train(args)
    hyper = m.Hyper(clip_coef=jnp.float32(0.2), ewma_com=jnp.float32(0.0), ent_coef=jnp.float32(0.01),
                    vf_coef=jnp.float32(0.5))
    runner = jax.eval_shape(train.init, train.tasks, 1)
    probe = jax.eval_shape(lambda: train.empty_probe(train.init(train.tasks, 1).train.params))
    mem = train.train_chunk.lower(hyper, train.tasks, runner, probe, 1, -1).compile().memory_analysis()
    return (mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes) / 2**30


if __name__ == "__main__":
    main()
