"""ppo_atari_envpool.py's synchronous rollout step taken apart: where the seconds of a rollout go that are not spent
waiting on the envs (docs/gpu.md#the-rollout-step). On one H200 at 256 x 64 that was 0.22 s of a 1.34 s rollout,
3.4 ms a step, which alone holds a synchronous loop to ~0.84 of envpool's limit.

    python benchmark/ppo_atari_rollout_step.py [--num-envs 256] [--steps 200] [--out FILE] [--cpu-dry-run]

Breakout-v5 with the script's own envs (make_envs: its wrappers, one env thread per core), agent (build_agent, its
initial weights; TF32 on CUDA, as the script's default) and rollout buffer. After --steps // 4 untimed steps:
  as_script     the script's own act + envs.step + observe for --steps steps, in its loop: ms per step of each (act
                ends by copying the actions to the host, which waits for the device; observe's copies from the
                envs' pageable arrays wait too, so each part's clock holds its device work)
then, on the frames of the last step, each piece alone (median of --steps calls, each ended by a device sync):
  forward                 agent(frames), eager (as the rollout runs it)
  forward_compiled        torch.compile(agent) (the script compiles its update, not the rollout's policy)
  forward_cudagraphs      torch.compile(agent, mode="reduce-overhead"): the forward's kernels replayed as one graph
  sample                  the script's sample_actions on the forward's logits
  actions_to_host         the sampled actions' copy to the host (.cpu().numpy())
  frames_pageable         torch.as_tensor(frames, device): observe's copy of the [N, 4, 84, 84] uint8 frames
  frames_pinned           the same frames through a pinned host buffer (np.copyto, then a non-blocking copy)
  newest_frame_pageable   only the newest of the 4 stacked frames (the other 3 are on the device already, but for
                          envs that reset), pageable
  newest_frame_pinned     the same through a pinned buffer
  flags_to_device         observe's other copies: rewards, done and terminated flags (three small pageable copies)
  episode_stats           the script's EpisodeStats.update on the step's info (host only)
Printed and written to --out (JSON, rewritten after each piece), with the machine. What a row says: its milliseconds per step times
--num-steps (64 at 256 envs) is what it adds to one iteration's rollout; the envs' own time per step is the
as_script row's env_step. On CPU the copies are no-ops and the numbers mean little (--cpu-dry-run: 8 envs, 20 steps,
the compiled variants left out).
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


def median_ms(call, repeats: int, sync) -> float:
    """Median milliseconds of call() over `repeats` calls after 3 untimed ones, each ended by sync()."""
    for _ in range(3):
        call()
        sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def time_script_loop(m, envs, agent, storage, state, stats, steps: int, warmup: int, device) -> tuple:
    """The script's own rollout step (act, envs.step, observe) for warmup + steps steps; ms per timed step of each
    part, the last step's result (frames and info) and the state after it."""
    ranks, finished = m.Ranks(1, 0), []
    parts = {"act": 0.0, "env_step": 0.0, "observe": 0.0}
    rows = storage.obs.shape[0]
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        action = m.act(agent, state, storage, i % rows, m.ALL_ENVS, ranks)
        t1 = time.perf_counter()
        result = envs.step(action)
        t2 = time.perf_counter()
        state = m.observe(result, storage, i % rows, m.ALL_ENVS, stats, finished, device)
        t3 = time.perf_counter()
        if i >= warmup:
            for name, seconds in (("act", t1 - t0), ("env_step", t2 - t1), ("observe", t3 - t2)):
                parts[name] += seconds
    return {name: 1e3 * total / steps for name, total in parts.items()}, result, state


def time_pieces(m, agent, result, state, stats, steps: int, device, compiled: bool):
    """Each piece of the step alone, on the last step's frames and info: (name, median ms), one by one."""
    import numpy as np
    import torch
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    frames_np, reward, term, trunc, info = result
    frames = state.obs
    logits = agent(frames)[0]
    actions = m.sample_actions(logits.float())[0]
    pinned = torch.empty(frames_np.shape, dtype=torch.uint8, pin_memory=cuda)
    newest = np.ascontiguousarray(frames_np[:, -1])
    pinned_newest = torch.empty(newest.shape, dtype=torch.uint8, pin_memory=cuda)

    def through_pinned(buffer, array):
        np.copyto(buffer.numpy(), array)
        return buffer.to(device, non_blocking=True)

    pieces = {
        "forward": lambda: agent(frames),
        "sample": lambda: m.sample_actions(logits.float()),
        "actions_to_host": lambda: actions.cpu().numpy(),
        "frames_pageable": lambda: torch.as_tensor(frames_np, device=device),
        "frames_pinned": lambda: through_pinned(pinned, frames_np),
        "newest_frame_pageable": lambda: torch.as_tensor(frames_np[:, -1], device=device),
        "newest_frame_pinned": lambda: through_pinned(pinned_newest, frames_np[:, -1]),
        "flags_to_device": lambda: (torch.as_tensor(reward, device=device),
                                    torch.as_tensor(np.logical_or(term, trunc), dtype=torch.float32, device=device),
                                    torch.as_tensor(term, dtype=torch.float32, device=device)),
        # a fresh EpisodeStats: the loop's own returns stay as they were
        "episode_stats": lambda: m.EpisodeStats(len(stats.returns)).update(info, trunc),
    }
    if compiled:
        import torch._dynamo
        torch._dynamo.reset()
        pieces["forward_compiled"] = lambda f=torch.compile(agent): f(frames)
        graphed = torch.compile(agent, mode="reduce-overhead")

        def forward_cudagraphs():
            torch.compiler.cudagraph_mark_step_begin()
            return graphed(frames)
        pieces["forward_cudagraphs"] = forward_cudagraphs
    with torch.no_grad():
        for name, call in pieces.items():
            try:
                yield name, median_ms(call, steps, sync)
            except Exception as e:  # noqa: BLE001  (one GPU call for every row: a failure is recorded, the next runs)
                yield name, failure_row(e)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--num-steps", type=int, default=64, help="the rollout's T: ms per step x T = per iteration")
    parser.add_argument("--steps", type=int, default=200, help="timed steps of the loop, and calls of each piece")
    parser.add_argument("--out", default="", help="JSON file of every number")
    parser.add_argument("--cpu-dry-run", action="store_true", help="8 envs, 20 steps on CPU; no compiled variants")
    opts = parser.parse_args()
    if opts.num_envs < 1 or opts.num_steps < 1 or opts.steps < 1:
        refuse(f"--num-envs, --num-steps and --steps must be >= 1 (got {opts.num_envs}, {opts.num_steps}, "
               f"{opts.steps})")
    check_out_folder(opts.out)
    num_envs, steps = (8, 20) if opts.cpu_dry_run else (opts.num_envs, opts.steps)

    import numpy as np
    import torch
    from cleanrl_scaling import ppo_atari_envpool as m
    device = torch.device("cuda" if m.uses_cuda(not opts.cpu_dry_run) else "cpu")  # the script's own rule
    started = time.time()
    args = m.Args(num_envs=num_envs, num_steps=opts.num_steps, diagnostics_every=0)
    m.set_tf32(device, args.tf32)
    torch.backends.cudnn.deterministic = args.torch_deterministic  # the script's cuDNN algorithms
    envs = m.EnvClock(m.make_envs(args.env_id, num_envs, args.seed))
    agent, _ = m.build_agent(args, envs.action_space.n, device)
    storage = m.make_storage(opts.num_steps, num_envs, envs.observation_space.shape, device)
    stats = m.EpisodeStats(num_envs)
    zeros = torch.zeros(num_envs, device=device)
    state = m.NextStep(torch.as_tensor(envs.reset()[0], device=device), zeros, zeros)
    result = {"machine": {**torch_machine(device), "numpy": np.__version__, "env_threads": m.env_threads(num_envs)},
              "env_id": args.env_id, "num_envs": num_envs, "num_steps": opts.num_steps, "steps": steps}
    print(f"== the synchronous rollout step of {num_envs} {args.env_id} envs on {device} "
          f"({result['machine']['env_threads']} env threads), {steps} timed steps", flush=True)
    with torch.no_grad():
        loop, last, state = time_script_loop(m, envs, agent, storage, state, stats, steps, max(1, steps // 4), device)
    result["as_script_ms"] = loop
    own = loop["act"] + loop["observe"]
    result["own_ms_per_step"] = own
    result["own_share_of_rollout"] = own / (own + loop["env_step"])
    print(f"   as the script runs it, ms per step: act {loop['act']:.3f}, env step {loop['env_step']:.3f}, observe "
          f"{loop['observe']:.3f}; its own work {own:.3f} ms = {own * opts.num_steps / 1e3:.3f} s per rollout of "
          f"{opts.num_steps} steps, {result['own_share_of_rollout']:.1%} of the rollout", flush=True)
    result["pieces_ms"] = {}
    save(result, opts.out)
    for name, ms in time_pieces(m, agent, last, state, stats, steps, device,
                                compiled=not opts.cpu_dry_run):
        result["pieces_ms"][name] = ms
        print(f"   {name:<22} " + (f"{ms:8.3f} ms" if isinstance(ms, float) else ms), flush=True)
        save(result, opts.out)  # after each piece: a run cut short by its time limit keeps what it measured
    envs.close()
    result["wall_seconds"] = round(time.time() - started, 1)
    save(result, opts.out)


def save(result: dict, path: str) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
