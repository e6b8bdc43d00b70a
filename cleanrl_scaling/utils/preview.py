"""What a grid will cost and write, told before it runs (a figure script's DRY_RUN=1, the launcher's --dry-run).

    python -m cleanrl_scaling.utils.launcher SCRIPT ... --dry-run    # the commands, then the cost and the run dirs
    python -m cleanrl_scaling.utils.preview figures benchmark/mayor2025_fig1a.sh runs/figures laptop

The cost: the grid's environment steps over the measured speed of its training script. RATES is the one place the
rates live (benchmark/cluster_table.py prints docs/cluster.md's per-figure table from it). CPU-core-hours use the
speed measured on this project's 2-core development machine, on the page named beside each rate; GPU-hours are given
only where a paper reports its run times (M25 §4.1: one A100, 2-3 days per 100M-step Atari run); B26 and H25 report
none. A rate is one setting's: large N is faster per step on a GPU, and evaluation, diagnostics and SFL scoring add
to it. The files: the figures and rule tables a figure script draws, read from the --out of its drawing commands.
"""
import os
import re
import sys
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Rate:
    cpu: float  # environment steps per CPU core-second of one run
    source: str  # where that speed was measured
    gpu_days_per_100m: Optional[tuple] = None  # (low, high) GPU-days per 100M steps, where a paper reports them
    gpu_source: str = ""


M25_GPU = ((2.0, 3.0), "M25 §4.1: one A100, 2-3 days per 100M-step run")

RATES = {
    "ppo_atari_envpool.py": Rate(449 / 2, "449 SPS on 2 cores at CleanRL's 8 x 128 (docs/ppo_atari_envpool.md, "
                                          "Performance)", *M25_GPU),
    "pqn_atari.py": Rate(245 / 2, "245 SPS on 2 cores at the defaults (docs/pqn_atari.md, Performance)", *M25_GPU),
    "ppo_procgen.py": Rate(85.7 / 2, "85.7 SPS on 2 cores at the defaults (docs/ppo_procgen.md, Performance)"),
    "ppo_continuous_mujoco.py": Rate(1200, "~1.2k SPS on 1 core (docs/ppo_continuous_mujoco.md, Reproducing H25)"),
    "ppo_ewma_jax2d.py": Rate(1_638_400 / (0.73 * 3600), "0.73 CPU-hours per 1.64M-step run of 64 envs x 128 steps "
                                                          "on 1 core (benchmark/beukman2026_fig5a.sh, laptop grid)"),
    "sfl_kinetix_jax.py": Rate(131_072 / (10.4 * 60), "131,072 steps in 10.4 CPU-minutes, the default transformer "
                                                      "with SFL (docs/sfl_kinetix_jax.md, MLP against transformer)"),
    "noisy_sgd.py": Rate(100_000 / 34.7, "100,000 steps of 5 seeds in 34.7 CPU-seconds at --log-every 5 "
                                         "(python cleanrl_scaling/noisy_sgd.py --total-steps 100000)"),
}


def default_steps(script: str) -> Optional[int]:
    """The script's own default budget: the first `total_timesteps: int = N` (or total_steps) of its Args."""
    try:
        with open(script) as f:
            found = re.search(r"^\s+total_(?:timesteps|steps): int = ([\d_]+)", f.read(), re.M)
    except OSError:
        return None
    return int(found.group(1).replace("_", "")) if found else None


def run_steps(flags: dict, script: str) -> Optional[int]:
    """The steps one run takes: its --total-timesteps (--total-steps for noisy_sgd.py), else the script's default."""
    value = flags.get("total_timesteps", flags.get("total_steps"))
    try:
        return int(float(value)) if value is not None else default_steps(script)
    except (TypeError, ValueError):
        return default_steps(script)


def hours(seconds: float) -> str:
    """A duration as a person reads it: seconds, minutes, or hours with thousands separators."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.0f} h" if seconds >= 36000 else f"{seconds / 3600:.1f} h"


def human(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:g}"


def estimate(script: str, flag_sets: list, cores: int = 0) -> list:
    """'# '-lines for a dry run: the runs' steps in all, their CPU-core time at the script's measured rate (and the
    wall time on `cores` cores if given), and GPU time where the paper reports it."""
    steps = [run_steps(flags, script) for flags in flag_sets]
    total = sum(s for s in steps if s)
    name = os.path.basename(script)
    lines = [f"# cost: {len(steps)} run(s), {human(total)} steps in all"
             + ("" if all(steps) else " (some runs' budgets unknown)")]
    rate = RATES.get(name)
    if rate is None:
        return lines + [f"# cost: no measured rate for {name} (cleanrl_scaling/utils/cost.py)"]
    cpu = total / rate.cpu
    wall = f" (about {hours(cpu / cores)} on the {cores} core(s) here)" if cores else ""
    lines.append(f"# cost: ~{hours(cpu)} of CPU-core time{wall} at {rate.cpu:,.0f} steps per core-second: "
                 f"{rate.source}")
    if rate.gpu_days_per_100m:
        low, high = (days * 24 * total / 1e8 for days in rate.gpu_days_per_100m)
        lines.append(f"# cost: {low:,.0f}-{high:,.0f} GPU-hours ({rate.gpu_source})")
    return lines


# a figure script's drawing commands name their output as --out "$OUT_DIR/PREFIX"; M25's figure NAME draws two IQM
# figures (benchmark/_mayor2025_common.sh) and the MuJoCo scripts' aggregate COMMAND NAME one per task
# (benchmark/_mujoco_recipes_common.sh)
OUT = re.compile(r'--out "\$\{?OUT_DIR\}?/([^"]+)"')
M25_FIGURE = re.compile(r"^\s*figure (\S+)")
MUJOCO_AGGREGATE = re.compile(r"^\s*aggregate \S+ ([A-Za-z0-9_]+)")
LAPTOP_ONLY = re.compile(r'\[\[ "\$SCALE" == laptop[^]]*\]\] \|\| exit 0')  # what follows draws at SCALE=laptop only


def readable(prefix: str) -> str:
    """Shell variables as placeholders: mayor2025_fig7_${game}_iqm -> mayor2025_fig7_<game>_iqm."""
    return re.sub(r"\$\{([A-Za-z_]\w*)[^}]*\}|\$([A-Za-z_]\w*)",
                  lambda m: f"<{(m.group(1) or m.group(2)).lower()}>", prefix)


def figure_prefixes(script: str, scale: str = "paper") -> list:
    """The output prefixes (under OUT_DIR) of a figure script's figures and tables at this SCALE, in script order."""
    with open(script) as f:
        text = f.read()
    mayor = "_mayor2025_common.sh" in text
    mujoco = "_mujoco_recipes_common.sh" in text
    out, laptop_only = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        laptop_only = laptop_only or bool(LAPTOP_ONLY.search(line))
        if laptop_only and scale != "laptop":
            break
        found = [m.group(1) for m in OUT.finditer(line)]
        if mayor and M25_FIGURE.match(line):
            name = M25_FIGURE.match(line).group(1)
            found += [f"mayor2025_{name}_iqm", f"mayor2025_{name}_iqm_curves"]
        if mujoco and MUJOCO_AGGREGATE.match(line):
            found.append(MUJOCO_AGGREGATE.match(line).group(1) + "_${ENV_ID}")
        out += [readable(p) for p in found if readable(p) not in out]
    return out


def figures_line(script: str, out_dir: str, scale: str) -> str:
    prefixes = figure_prefixes(script, scale)
    if not prefixes:
        return "# figures: none drawn by this script"
    return (f"# figures: into {out_dir.rstrip('/')}/ once the runs have finished (each PREFIX.png .pdf .csv, a rule's "
            f"table .md .csv; <x>: one per value of x): {', '.join(prefixes)}")


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "figures":
        sys.exit("usage: python -m cleanrl_scaling.utils.preview figures SCRIPT.sh OUT_DIR SCALE")
    print(figures_line(*sys.argv[2:]))
