"""ppo_atari_envpool.py's PPO update alone, in each setting that changes its speed but not what it computes (up to
float rounding): what a synchronous loop loses to the update, and which setting brings it under the 5% that
running at 0.95 of envpool's limit allows (docs/gpu.md#the-update-alone).

    python benchmark/ppo_atari_update_speed.py [--num-envs 256] [--num-steps 64] [--iterations 5]
                                               [--env-rate STEPS_PER_S] [--variants NAME,...] [--deadline-s 300]
                                               [--out FILE] [--cpu-dry-run]

One iteration's update is the script's own `update` (update_epochs x num_minibatches steps of the clipped loss,
Adam, the gradient clip), at the script's defaults for --num-envs x --num-steps (4 epochs x 4 minibatches), on a batch
of random frames, actions and targets on the device (random data: the update's work does not depend on the values).
Each variant runs one untimed iteration (torch.compile builds there), then --iterations timed ones, each ended by
the script's own host sync (its losses read back); the median is reported, with the device's peak memory. As in the
script, cuDNN is deterministic (--torch-deterministic); each variant starts from a fresh torch.compile state (no
shapes marked dynamic by an earlier variant) and records the graphs it compiled and the CUDA graphs inductor skipped,
so that a compile that fell back to eager shows. Variants, in this order (one that would start past --deadline-s, a
compiled one past --deadline-s minus 90 s, is skipped and marked so; one that fails is recorded and the next runs):
    eager_chunked      --no-compile, minibatches backpropagated in chunks of 512 (--update-chunk-size 512)
    eager_whole        --no-compile, whole minibatches (--update-chunk-size 0)
    eager_whole_no_tf32   the same with --no-tf32: full fp32 matrix multiplications and convolutions (TF32's gain)
    eager_whole_bf16, eager_chunked_bf16   the same under --bf16
    compiled_chunked   torch.compile (the default), chunks of 512: the script's default update on CPU
    compiled_whole     torch.compile, whole minibatches: the script's default update on a GPU
    compiled_whole_no_tf32   the same with --no-tf32
    cudagraphs_whole   torch.compile(mode="reduce-overhead") of the loss, whole minibatches: CUDA graphs replay the
                       forward and backward kernels in one launch each (LeanRL's lever); the scripts do not offer it,
                       this row says whether they should
    compiled_whole_bf16, compiled_chunked_bf16   compiled under --bf16
On CUDA the other fp32 variants use TF32 (the scripts' default). With --env-rate R (envpool's synchronous rate at
this N on this machine, e.g. benchmark/ppo_atari_env_limit.py's "sync" row) it also prints the fraction of that
limit a synchronous loop would reach with each update, rollout / (rollout + update) with the rollout at the limit:
0.95 needs the update within 5.3% of the rollout. A cold torch.compile on CUDA took minutes on one H200
(docs/gpu.md): give the compiled variants a warm TORCHINDUCTOR_CACHE_DIR, or the time. --cpu-dry-run: tiny sizes on
CPU, eager variants only unless --variants names others (its numbers mean nothing).
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
from _throughput_common import check_out_folder, failure_row, refuse, torch_machine  # noqa: E402

VARIANTS = {  # name: (compile, update chunk size, bf16, tf32); the eager ones first: a cold compile may take minutes
    "eager_chunked": (False, 512, False, True), "eager_whole": (False, 0, False, True),
    "eager_whole_no_tf32": (False, 0, False, False),
    "eager_whole_bf16": (False, 0, True, True), "eager_chunked_bf16": (False, 512, True, True),
    "compiled_chunked": (True, 512, False, True), "compiled_whole": (True, 0, False, True),
    "compiled_whole_no_tf32": (True, 0, False, False),
    "cudagraphs_whole": ("reduce-overhead", 0, False, True),
    "compiled_whole_bf16": (True, 0, True, True), "compiled_chunked_bf16": (True, 512, True, True),
}
COMPILE_ALLOWANCE_S = 90  # a compiled variant starts only this long before --deadline-s (a cold CUDA compile)


def random_batch(m, size: int, num_actions: int, device):
    """A Batch of `size` rows as the rollout leaves it, with random values: frames, actions, their log-probs,
    advantages, returns and values; every step valid."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(0)
    obs = torch.randint(0, 256, (size, 4, 84, 84), dtype=torch.uint8, generator=g)
    actions = torch.randint(0, num_actions, (size,), generator=g)
    floats = [torch.randn(size, generator=g) for _ in range(3)]
    logprobs = torch.full((size,), -float(torch.log(torch.tensor(float(num_actions)))))
    return m.Batch(obs=obs.to(device), actions=actions.to(device), logprobs=logprobs.to(device),
                   advantages=floats[0].to(device), returns=floats[1].to(device), values=floats[2].to(device),
                   valid=torch.ones(size, device=device))


def cudagraphed(loss):
    """The loss compiled into CUDA graphs; each call starts a new step, so that a replay may reuse the last one's
    memory (update() reads a call's outputs before the next call)."""
    import torch
    compiled = torch.compile(loss, mode="reduce-overhead")

    def call(*args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args, **kwargs)
    return call


def time_variant(m, name: str, num_envs: int, num_steps: int, iterations: int, batch, device) -> dict:
    """Median seconds of one iteration's update in this variant, and the device's peak memory (CUDA)."""
    import functools
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters
    compiled, chunk, bf16, tf32 = VARIANTS[name]
    torch._dynamo.reset()  # no shapes marked dynamic, no graphs kept, by an earlier variant
    counters.clear()
    args = m.Args(num_envs=num_envs, num_steps=num_steps, compile=bool(compiled), update_chunk_size=chunk, bf16=bf16,
                  tf32=tf32, diagnostics_every=0)
    scaling = m.resolve_scaling(args)
    args.batch_size, args.num_minibatches = scaling["batch_size"], scaling["num_minibatches"]
    m.set_tf32(device, args.tf32)
    torch.backends.cudnn.deterministic = args.torch_deterministic  # the script's cuDNN algorithms
    agent, optimizer = m.build_agent(args, 4, device)  # Breakout's 4 actions
    autocast = functools.partial(torch.autocast, device_type=device.type, dtype=torch.bfloat16, enabled=bf16)
    loss_fn = cudagraphed(m.ppo_loss) if compiled == "reduce-overhead" else m.maybe_compile(m.ppo_loss, compiled)
    ranks = m.Ranks(1, 0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = []
    for i in range(iterations + 1):  # the first builds the compiled programs and warms the caches: not timed
        start = time.perf_counter()
        stats, _, steps = m.update(agent, optimizer, batch, args, scaling["minibatch_size"], autocast, ranks, None,
                                   loss_fn)
        stats.floats()  # the script's host sync: its losses read back
        if i:
            seconds.append(time.perf_counter() - start)
        else:
            first = time.perf_counter() - start
    return {"seconds_median": statistics.median(seconds), "seconds": seconds, "first_iteration_seconds": first,
            "optimizer_steps": steps, "minibatch_size": scaling["minibatch_size"],
            "peak_device_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
            "graphs_compiled": counters["stats"]["unique_graphs"],
            "cudagraph_skips": counters["inductor"]["cudagraph_skips"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=5, help="timed iterations per variant (after one untimed)")
    parser.add_argument("--env-rate", type=float, default=0.0,
                        help="envpool's synchronous steps/s at this N here: prints each update's fraction of it")
    parser.add_argument("--variants", default="", help="comma-separated names (default: all, in order)")
    parser.add_argument("--deadline-s", type=float, default=300.0, help="no variant starts after this many seconds")
    parser.add_argument("--out", default="", help="JSON file of every number")
    parser.add_argument("--cpu-dry-run", action="store_true", help="tiny sizes on CPU, eager variants")
    opts = parser.parse_args()
    names = [v for v in opts.variants.split(",") if v] or (
        [v for v in VARIANTS if v.startswith("eager")] if opts.cpu_dry_run else list(VARIANTS))
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        refuse(f"--variants {','.join(unknown)}: unknown; choose from {','.join(VARIANTS)}")
    if opts.num_envs < 1 or opts.num_steps < 1 or opts.iterations < 1:
        refuse(f"--num-envs, --num-steps and --iterations must be >= 1 (got {opts.num_envs}, {opts.num_steps}, "
               f"{opts.iterations})")
    if opts.env_rate < 0:
        refuse(f"--env-rate must be >= 0 (got {opts.env_rate:g})")
    check_out_folder(opts.out)
    num_envs, num_steps = (8, 16) if opts.cpu_dry_run else (opts.num_envs, opts.num_steps)

    import torch
    from cleanrl_scaling import ppo_atari_envpool as m
    device = torch.device("cuda" if m.uses_cuda(not opts.cpu_dry_run) else "cpu")  # the script's own rule
    started = time.time()
    result = {"machine": torch_machine(device),
              "num_envs": num_envs, "num_steps": num_steps, "iterations": opts.iterations,
              "env_rate": opts.env_rate or None, "variants": {}}
    rollout = num_envs * num_steps / opts.env_rate if opts.env_rate else None
    batch = random_batch(m, num_envs * num_steps, 4, device)  # one for every variant (the update does not change it)
    print(f"== the update of {num_envs} x {num_steps} on {device}, {opts.iterations} timed iterations per variant"
          + (f"; a rollout at {opts.env_rate:,.0f} steps/s takes {rollout:.3f} s" if rollout else ""), flush=True)
    for name in names:
        if time.time() - started > opts.deadline_s - (COMPILE_ALLOWANCE_S if VARIANTS[name][0] else 0):
            result["variants"][name] = "skipped: past the deadline"
            print(f"   {name:<22} skipped (past --deadline-s)", flush=True)
            continue
        try:
            row = time_variant(m, name, num_envs, num_steps, opts.iterations, batch, device)
        except Exception as e:  # noqa: BLE001  (one GPU call for every row: a failure is recorded, the next runs)
            result["variants"][name] = failure_row(e)
            print(f"   {name:<22} {result['variants'][name]}", flush=True)
            continue
        if rollout:
            row["of_sync_limit"] = rollout / (rollout + row["seconds_median"])
        result["variants"][name] = row
        peak = f", peak {row['peak_device_bytes'] / 2**30:.2f} GiB" if row["peak_device_bytes"] else ""
        limit = f", {row['of_sync_limit']:.3f} of the env limit" if rollout else ""
        if VARIANTS[name][0]:
            limit += f"; {row['graphs_compiled']} graphs compiled, {row['cudagraph_skips']} CUDA graphs skipped"
        print(f"   {name:<22} {row['seconds_median']:.4f} s per iteration ({row['optimizer_steps']} steps of "
              f"{row['minibatch_size']:,}; first {row['first_iteration_seconds']:.1f} s){peak}{limit}", flush=True)
        if opts.out:  # rewritten after each variant: a run cut short keeps what it measured
            with open(opts.out, "w") as f:
                json.dump(result, f, indent=1)
    result["wall_seconds"] = round(time.time() - started, 1)
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
