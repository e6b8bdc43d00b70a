"""B26 Figs. 13/14 on Jax2D, on one GPU: training steps per second per scaling recipe against N.

The claim (B26 §5, footnote 4): larger minibatches "tend to result in better hardware utilization ... This is
typically beneficial when compute bound ..., whereas in our sample-bound locomotion task, the wall-clock gains are
marginal (see Figure 14 in Appendix C)"; App. C: "there is little difference between the various scaling approaches,
and this translates to little difference in overall wall-clock time". Axis: steps per second at equal settings.

What runs (ppo_ewma_jax2d.py's own jitted chunk, in this process, one update per call): B26 Table 2's Jax2D setting
(the script's defaults: 2048 envs x 256 steps, 32 minibatches, 8 epochs, 512 tasks) as the base, and at each larger
N the recipes of B26 Fig. 9 from that base (docs/scaling.md): more-minibatches (the base's minibatch size) and
larger-minibatches (the base's 32 minibatches), and at --sqrt-lr-at (the largest N) also sqrt-lr, which has
larger-minibatches' shapes and differs by one constant, so a compile per N would buy little. Per N also the
environment alone: random actions, the same envs and steps. After each arm's compile, R rounds time every arm once in
turn (drift hits every arm alike); the numbers are each round's. A compile that would not leave time to time it
is skipped and marked so.

THE RULE (committed before any GPU run; docs/reproducing/beukman2026_fig13_jax2d_gpu.md):
  * SPS of an arm at N = the median of its rounds; spread(N) = the largest arm's SPS / the smallest arm's at N.
  * Scope. B26 judges the recipes in its "sample-bound" task. N is sample-bound here when the environment alone
    (random actions) takes at least half the training time: env_share(N) = SPS(more-minibatches) / SPS(env alone)
    >= 0.5. (The policy's forward pass makes collection costlier still, so the share is a lower bound.)
  * Only N >= 4 x the base count (8192 and up) decide, as B26's Fig. 9 panels beyond the base do.
  * yes: every deciding N in scope has spread <= 1.25 (the same 1.25 as the MuJoCo page's pre-set speed rule), and
    at least one deciding N is in scope.
  * no (contradicts B26 inside its scope): a deciding N in scope has spread > 1.25 with the arms' rounds separated
    (the fastest arm's slowest round above the slowest arm's fastest round).
  * not separated: a deciding N in scope has spread > 1.25 but the rounds overlap, and none says no.
  * not testable at this setting: no deciding N is in scope (the run is not sample-bound on this GPU); the page then
    reports whether larger minibatches run > 1.25x faster, footnote 4's compute-bound half, as a description.

  python benchmark/beukman2026_fig13_jax2d_gpu.py --out OUT.json     the measurement, <= --deadline-s (520 s) of work
  python benchmark/beukman2026_fig13_jax2d_gpu.py --cpu-dry-run --out OUT.json   tiny sizes on CPU: catches typos
  python benchmark/beukman2026_fig13_jax2d_gpu.py --rule OUT.json [--png FIG.png]   the rule on a measurement: a
                                                                      table, a verdict (and the figure)
The JSON is rewritten after every N, so a run stopped by its time limit still returns what it measured.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
from _throughput_common import jax_on_cpu_at_o0, judged, refuse  # noqa: E402

RECIPES = ("more-minibatches", "larger-minibatches", "sqrt-lr")
MARGINAL = 1.25  # the rule's spread
IN_SCOPE = 0.5  # the rule's env share
DECIDING_FACTOR = 4  # N >= 4 x base decides


# ---------------------------------------------------------------------------------------------------------
# The rule: pure arithmetic on the JSON (tests/test_throughput_benchmarks.py checks it on made-up numbers)
# ---------------------------------------------------------------------------------------------------------
def judge_n(group: dict, base: int) -> dict:
    """One N's medians, env share, spread and whether the spread's extreme arms are separated round by round."""
    arms = {name: arm["sps"] for name, arm in group["arms"].items() if arm.get("sps")}
    out = {"num_envs": group["num_envs"], "deciding": group["num_envs"] >= DECIDING_FACTOR * base,
           "sps": {name: statistics.median(v) for name, v in arms.items()}}
    env = group.get("env_sps") or []
    more = out["sps"].get("more-minibatches")
    out["env_share"] = more / statistics.median(env) if env and more else None
    out["in_scope"] = out["env_share"] is not None and out["env_share"] >= IN_SCOPE
    if len(arms) >= 2:
        fast = max(out["sps"], key=out["sps"].get)
        slow = min(out["sps"], key=out["sps"].get)
        out.update(fastest=fast, slowest=slow, spread=out["sps"][fast] / out["sps"][slow],
                   separated=min(arms[fast]) > max(arms[slow]))
    else:
        out["spread"] = None
    return out


def verdict(results: dict) -> tuple:
    """(verdict, the per-N rows) by the rule in this file's header."""
    rows = [judge_n(g, results["base_num_envs"]) for g in results["groups"]]
    deciding = [r for r in rows if r["deciding"] and r["spread"] is not None]
    scoped = [r for r in deciding if r["in_scope"]]
    if not scoped:
        return "not testable at this setting", rows
    if any(r["spread"] > MARGINAL and r["separated"] for r in scoped):
        return "no", rows
    if any(r["spread"] > MARGINAL for r in scoped):
        return "not separated", rows
    return "yes", rows


def print_rule(path: str) -> None:
    results = json.load(open(path))
    results["groups"].sort(key=lambda g: g["num_envs"])  # measured most wanted first, read in order of N
    said, rows = verdict(results)
    print(f"{results.get('machine', {}).get('gpu') or results.get('machine', {}).get('backend')}, "
          f"{results.get('date_utc')}; base {results['base_num_envs']} envs")
    print("| N | arm | SPS (median) | rounds | env alone | env share | spread | deciding |")
    print("|---:|---|---:|---|---:|---:|---:|---|")
    for group, row in zip(results["groups"], rows):
        env = group.get("env_sps") or []
        for name, arm in group["arms"].items():
            rounds = ", ".join(f"{v:,.0f}" for v in arm.get("sps") or []) or arm.get("skipped", "-")
            sps = f"{row['sps'][name]:,.0f}" if name in row["sps"] else "-"
            share = f"{row['env_share']:.2f}" if row["env_share"] is not None else "-"
            spread = f"{row['spread']:.2f}" if row["spread"] is not None else "-"
            print(f"| {group['num_envs']} | {name} | {sps} | {rounds} | "
                  f"{statistics.median(env) if env else float('nan'):,.0f} | {share} | {spread} | "
                  f"{'yes' if row['deciding'] else 'no'} |")
    print(f"\nverdict: {said}")
    for row in rows:
        if row["deciding"] and row["spread"] is not None and not row["in_scope"]:
            faster = row["sps"].get("larger-minibatches", 0) / row["sps"].get("more-minibatches", float("inf"))
            print(f"N = {row['num_envs']} is out of scope (env share {row['env_share']:.2f} < {IN_SCOPE}): "
                  f"larger-minibatches / more-minibatches = {faster:.2f} (footnote 4's compute-bound half: > "
                  f"{MARGINAL} expected)")


def draw(path: str, png: str) -> None:
    """B26 Fig. 13's axes: SPS against N, one line per recipe from the base, each round's range as an error bar; the
    environment alone (random actions) dashed: the ceiling a sample-bound run approaches."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    results = json.load(open(path))
    base = next((g for g in results["groups"] if g["num_envs"] == results["base_num_envs"]), None)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for i, recipe in enumerate(RECIPES):  # the default colour cycle in recipe order, as the Fig. 9 figures
        base_rounds = base["arms"]["base"]["sps"] if base else []
        points = [(results["base_num_envs"], base_rounds)] if base_rounds else []
        points += [(g["num_envs"], g["arms"][recipe]["sps"]) for g in results["groups"]
                   if recipe in g["arms"] and g["arms"][recipe]["sps"]]
        points.sort()
        if len(points) < 2:
            continue
        xs, mid = [n for n, _ in points], [statistics.median(v) for _, v in points]
        err = [[m - min(v) for m, (_, v) in zip(mid, points)], [max(v) - m for m, (_, v) in zip(mid, points)]]
        ax.errorbar(xs, mid, yerr=err, marker="o", capsize=3, color=f"C{i}", label=recipe)
    env = sorted((g["num_envs"], statistics.median(g["env_sps"])) for g in results["groups"] if g.get("env_sps"))
    if env:
        ax.plot(*zip(*env), ls="--", color="0.5", label="environment alone (random actions)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("parallel environments")
    ax.set_ylabel("training steps per second")
    gpu = results.get("machine", {}).get("gpu") or results.get("machine", {}).get("backend")
    ax.set_title(f"B26 Fig. 13 on one GPU: Jax2D, scaling recipes ({gpu})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"wrote {png}")


# ---------------------------------------------------------------------------------------------------------
# The measurement
# ---------------------------------------------------------------------------------------------------------
def configure(m, num_envs: int, recipe: str, base: int, extra: dict):
    """ppo_ewma_jax2d.py's Args at N = num_envs by `recipe` from the base, through the script's own validation."""
    scaled = {} if recipe == "base" else {"scaling_recipe": recipe, "base_num_envs": base}
    steps = extra.get("num_steps", 256)
    args = m.Args(num_envs=num_envs, diagnostics_every=0, updates_per_chunk=1, total_timesteps=num_envs * steps,
                  **scaled, **extra)
    m.apply_scaling(args, m.validate(args))
    return args


def check_options(m, opts, extra: dict) -> None:
    """Every configuration is validated before the first compile (one line, exit 2)."""
    if opts.rounds < 1:
        refuse(f"--rounds must be >= 1 (got {opts.rounds})")
    if opts.base not in opts.num_envs:
        refuse(f"--num-envs {' '.join(map(str, opts.num_envs))} must include the base {opts.base}")
    for n in opts.num_envs:
        for recipe in arms_at(n, opts):
            try:
                configure(m, n, recipe, opts.base, extra)
            except m.UsageError as err:
                refuse(f"--num-envs {n} with {recipe} is not a valid ppo_ewma_jax2d.py configuration ({err})")


def arms_at(num_envs: int, opts) -> tuple:
    if num_envs == opts.base:
        return ("base",)
    return RECIPES if num_envs in sqrt_lr_at(opts) else RECIPES[:2]


def sqrt_lr_at(opts) -> list:
    return opts.sqrt_lr_at if opts.sqrt_lr_at is not None else [max(opts.num_envs)]


class Deadline:
    """The run's end, and the longest compile seen so far (of any N: a larger N's compile is not shorter), which a
    new arm's compile must leave time for."""

    def __init__(self, seconds: float):
        self.end, self.longest_compile = time.time() + seconds, 0.0

    def left(self) -> float:
        return self.end - time.time()


def machine() -> dict:
    import jax
    device = jax.devices()[0]
    out = {"backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
           "gpu": getattr(device, "device_kind", None) if jax.default_backend() == "gpu" else None,
           "cpu_cores": os.cpu_count(), "python": platform.python_version(), "jax": jax.__version__}
    import jaxlib
    out["jaxlib"] = jaxlib.__version__
    return out


def tasks_made_once(m) -> None:
    """The script's make_train with its training tasks generated once per (seed, count): every arm and N here has the
    same environment, and each make_train would trace Kinetix's level generator again (1.6 of its 1.8 s per arm after
    the first, on this project's CPU)."""
    generate, made = m.generate_tasks, {}

    def once(env, env_params, static_params, task_seed: int, num_tasks: int):
        if (task_seed, num_tasks) not in made:
            made[task_seed, num_tasks] = generate(env, env_params, static_params, task_seed, num_tasks)
        return made[task_seed, num_tasks]
    m.generate_tasks = once


def measure_group(m, opts, extra: dict, n: int, deadline: Deadline) -> dict:
    """One N: the environment alone, then each arm compiled (while time is left), then R interleaved rounds."""
    import jax
    import jax.numpy as jnp
    from ppo_ewma_jax2d_throughput import random_rollout_sps
    steps = extra.get("num_steps", 256)
    group = {"num_envs": n, "num_steps": steps, "arms": {}, "env_sps": []}
    hyper = m.Hyper(clip_coef=jnp.float32(0.2), ewma_com=jnp.float32(0.0), ent_coef=jnp.float32(0.01),
                    vf_coef=jnp.float32(0.5))  # B26 Table 2; ewma_com 0 is PPO, as B26 Fig. 9
    live = {}
    for recipe in arms_at(n, opts):
        args = configure(m, n, recipe, opts.base, extra)
        arm = {"minibatch_size": args.batch_size // args.num_minibatches, "num_minibatches": args.num_minibatches,
               "learning_rate": args.learning_rate, "sps": []}
        group["arms"][recipe] = arm
        if deadline.left() < 1.5 * deadline.longest_compile + 30:  # a compile that would leave no time to time it
            arm["skipped"] = "past the deadline"
            continue
        t = time.time()
        train = m.make_train(args)
        runner = train.init(train.tasks, 1)
        runner = jax.device_put(runner, train.shardings(runner))  # placed as the script places it
        probe = train.empty_probe(runner.train.params)
        runner, probe, stats, _ = train.train_chunk(hyper, train.tasks, runner, probe, 1, -1)
        jax.block_until_ready(stats)  # compile and one untimed update
        arm["compile_and_first_update_s"] = round(time.time() - t, 1)
        deadline.longest_compile = max(deadline.longest_compile, arm["compile_and_first_update_s"])
        live[recipe] = [train, runner, probe]
        if not group["env_sps"]:  # the environment alone, on the first arm's envs and tasks: R rollouts' mean
            group["env_sps"] = [round(random_rollout_sps(train, n, steps, opts.rounds), 1)]
    for _ in range(opts.rounds):
        for recipe, state in live.items():
            if deadline.left() < 5:
                group["arms"][recipe].setdefault("stopped", "deadline")
                continue
            train, runner, probe = state
            t = time.time()
            runner, probe, stats, _ = train.train_chunk(hyper, train.tasks, runner, probe, 1, -1)
            jax.block_until_ready(stats)
            group["arms"][recipe]["sps"].append(round(n * steps / (time.time() - t), 1))
            state[1:] = [runner, probe]
    group["peak_device_bytes_so_far"] = m.peak_device_bytes(jax.devices())  # None on CPU
    live.clear()
    return group


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the JSON to write (the measurement), or with --rule the JSON to judge")
    parser.add_argument("--rule", metavar="JSON", help="apply the rule to a measurement and print the verdict")
    parser.add_argument("--png", help="with --rule: draw the figure here too")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[2048, 16384, 8192],
                        help="in the order measured (the most wanted first); must include --base")
    parser.add_argument("--base", type=int, default=2048, help="B26 Table 2's Jax2D env count")
    parser.add_argument("--sqrt-lr-at", type=int, nargs="*", help="the N that also time sqrt-lr (default: the largest)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deadline-s", type=float, default=520.0)
    parser.add_argument("--cpu-dry-run", action="store_true",
                        help="tiny sizes on CPU at XLA -O0, the deadline x 8; numbers mean nothing")
    opts = parser.parse_args()
    if judged(opts, print_rule, draw, "OUT.json"):
        return
    extra = {}
    if opts.cpu_dry_run:  # CPU compiles take minutes: the deadline x 8, as gpu_jax_check.sh's dry run
        opts.deadline_s *= 8
        jax_on_cpu_at_o0()
        extra = dict(num_tasks=8, num_steps=16, num_minibatches=2, update_epochs=2, hidden_size=32)
        if opts.num_envs == parser.get_default("num_envs"):
            opts.num_envs, opts.base = [8, 32, 16], 8
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the peak is the run's own, not 75% of the GPU
    from cleanrl_scaling import ppo_ewma_jax2d as m
    check_options(m, opts, extra)
    tasks_made_once(m)
    deadline = Deadline(opts.deadline_s)
    results = {"figure": "B26 Figs. 13/14 (Jax2D)", "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
               "machine": machine(), "dry_run": opts.cpu_dry_run, "base_num_envs": opts.base,
               "settings": {"rounds": opts.rounds, **extra}, "groups": []}
    for n in opts.num_envs:
        if deadline.left() < 30:
            results.setdefault("skipped_num_envs", []).append(n)
            continue
        print(f"== N = {n}", flush=True)
        results["groups"].append(measure_group(m, opts, extra, n, deadline))
        results["wall_s"] = round(opts.deadline_s - deadline.left())
        with open(opts.out, "w") as f:
            json.dump(results, f, indent=1)
        print(json.dumps(results["groups"][-1]), flush=True)
    print_rule(opts.out)


if __name__ == "__main__":
    main()
