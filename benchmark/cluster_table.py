"""The per-figure table of docs/cluster.md, from each figure script's DRY_RUN=1 SLURM=1 output (its real grid):
runs, steps per run, the Slurm arrays it submits, and a cost estimate from the rates of cleanrl_scaling/utils/preview.py
(the ones a dry run prints).

    python benchmark/cluster_table.py > /tmp/table.md     # then paste into docs/cluster.md
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from cleanrl_scaling.utils.preview import RATES, human  # noqa: E402
from cleanrl_scaling.utils.rundirs import parse_flags  # noqa: E402

# figure scripts that run a grid of their own (fig16 and fig20 run fig15's and fig11's)
FIGURES = ["beukman2026_fig1b", "beukman2026_fig2a", "beukman2026_fig3b", "beukman2026_fig3a", "beukman2026_fig4",
           "beukman2026_fig5a", "beukman2026_fig5b", "beukman2026_fig6", "beukman2026_fig7", "beukman2026_fig8",
           "beukman2026_fig9", "beukman2026_fig12", "beukman2026_fig11", "beukman2026_fig15", "beukman2026_fig17",
           "beukman2026_fig18", "beukman2026_fig19", "beukman2026_fig9_mujoco", "beukman2026_fig10_mujoco",
           "mayor2025_fig1a", "mayor2025_fig1b", "mayor2025_fig1c", "mayor2025_fig2", "mayor2025_fig5",
           "mayor2025_fig6", "mayor2025_fig7", "mayor2025_fig9", "mayor2025_fig11", "mayor2025_fig12",
           "mayor2025_fig13", "mayor2025_fig8_mujoco", "honari2025_minibatch", "honari2025_nxt"]


def dry_run(figure: str) -> str:
    with tempfile.TemporaryDirectory() as runs:
        env = dict(os.environ, DRY_RUN="1", SLURM="1", RUNS_DIR=runs, PYTHON=sys.executable)
        out = subprocess.run(["bash", os.path.join(REPO, "benchmark", f"{figure}.sh")], env=env, capture_output=True,
                             text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"error: {figure}.sh DRY_RUN=1 SLURM=1 failed: {out.stderr.strip()[-300:]}")
    return out.stdout


def grid(text: str) -> dict:
    """Runs, their training script, steps per run and the arrays (job name, nodes) of one dry run."""
    runs = [shlex.split(line) for line in text.splitlines() if " --runs-dir " in line and not line.startswith("#")]
    flags = [parse_flags(argv[2:]) for argv in runs]
    steps = sorted({int(f.get("total_timesteps") or f.get("total_steps") or 0) for f in flags})
    arrays = re.findall(r"#SBATCH --job-name=(\S+)\n#SBATCH --array=\S+\n(?:#SBATCH --nodes=(\d+))?", text)
    return {"runs": len(runs), "script": sorted({os.path.basename(a[1]) for a in runs}), "steps": steps,
            "total": sum(int(f.get("total_timesteps") or f.get("total_steps") or 0) for f in flags),
            "arrays": [(name, int(nodes or 1)) for name, nodes in arrays]}


def row(figure: str, g: dict) -> str:
    script = g["script"][0] if len(g["script"]) == 1 else "/".join(g["script"])
    rate = RATES.get(g["script"][0])
    hours = g["total"] / rate.cpu / 3600 if rate else None
    cpu = "?" if hours is None else "<1" if hours < 0.5 else f"{hours:,.0f}"
    gpu = "—"
    if rate and rate.gpu_days_per_100m:
        low, high = (days * 24 * g["total"] / 1e8 for days in rate.gpu_days_per_100m)
        gpu = f"{low:,.0f}–{high:,.0f}"
    steps = " – ".join(human(s) for s in (g["steps"][0], g["steps"][-1]) if s) if g["steps"] else "?"
    steps = human(g["steps"][0]) if len(g["steps"]) == 1 else steps
    arrays = ", ".join(f"{name} ({nodes} nodes)" if nodes > 1 else name for name, nodes in g["arrays"])
    return f"| `{figure}.sh` | {g['runs']} | `{script}` | {steps} | {human(g['total'])} | {cpu} | {gpu} | {arrays} |"


def main() -> None:
    print("| figure script | runs | training script | steps per run | steps in all | CPU core-hours (measured rate) "
          "| GPU-hours (paper's run time) | Slurm arrays (job names) |")
    print("|---|---:|---|---|---:|---:|---:|---|")
    for figure in FIGURES:
        print(row(figure, grid(dry_run(figure))), flush=True)
    print("\n| training script | steps per CPU core-second | measured | GPU time (paper) |\n|---|---:|---|---|")
    for script, rate in RATES.items():
        print(f"| `{script}` | {rate.cpu:,.0f} | {rate.source} | {rate.gpu_source or '—'} |")


if __name__ == "__main__":
    main()
