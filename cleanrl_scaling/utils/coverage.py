"""M25 App. B.7's coverage metric (Cvg): how much of the learned state space the rollout batches reach.

    python -m cleanrl_scaling.utils.coverage RUNS... --group-by num_envs num_steps --out figures/mayor2025_fig2

The training scripts save, every `--save-features-every K` iterations, the penultimate-layer features of a
fixed-size random subsample of the rollout batch (`features/iter_NNNNNN.npz` in the run directory). This tool

1. takes the same number of points from every saved iteration of every run (`--points-per-iteration`, default
   the smallest saved count), so that no configuration covers more only because it saved more states;
2. fits ONE 2-D UMAP (McInnes et al. 2018) on the union of all compared runs' features, so every configuration
   is embedded in the same plane (M25 Fig. 2 compares configurations in one embedding);
3. bins the union's bounding box into a B x B grid (B = `--bins`, 50 by default) and reports, for every run and
   saved iteration i,
       coverage_iter(i) = |cells occupied by iteration i's points| / B^2
       coverage(i)      = |cells occupied by the points of iterations <= i| / B^2    (M25 B.7, cumulative)

It writes PREFIX.csv (one row per run and saved iteration), PREFIX_final.csv (final coverage per configuration:
mean, std and count over seeds), PREFIX_scatter.png/.pdf (the embedded points coloured by configuration, M25
Figs. 2 and 9) and PREFIX.png/.pdf (coverage against global step: the mean over seeds and their range, or a 95%
t-interval from 5 seeds). Details:
docs/pipeline.md.
"""
import argparse
import glob
import os
import re
import sys
from dataclasses import dataclass, field

import numpy as np

from cleanrl_scaling.utils import plots
from cleanrl_scaling.utils.rundirs import config_value_or, read_json, run_dirs, run_status

FEATURE_FILE = re.compile(r"iter_(\d+)\.npz$")


class UsageError(Exception):
    """A user mistake: one line on stderr, exit code 2."""


@dataclass
class RunFeatures:
    run_dir: str
    label: str
    seed: int
    iterations: list = field(default_factory=list)  # saved iteration numbers, ascending
    global_steps: list = field(default_factory=list)
    features: list = field(default_factory=list)  # one (points, dim) array per saved iteration


# ---------------------------------------------------------------------------------------------------------
# The metric (pure numpy; tests check it against hand-computed cells)
# ---------------------------------------------------------------------------------------------------------
def grid_cells(points: np.ndarray, low: np.ndarray, high: np.ndarray, bins: int) -> np.ndarray:
    """Cell id (row-major, 0 .. bins^2 - 1) of each 2-D point on a bins x bins grid over [low, high]; points on
    the upper edge fall in the last cell (M25 B.7's floor((z - z_min) / (z_max - z_min) * B), clipped)."""
    span = np.where(high > low, high - low, 1.0)
    ij = np.floor((np.asarray(points, dtype=float) - low) / span * bins).astype(np.int64)
    ij = np.clip(ij, 0, bins - 1)
    return ij[:, 0] * bins + ij[:, 1]


def coverage_curve(cells_per_iteration: list, bins: int) -> tuple:
    """(per-iteration coverage, cumulative coverage) as arrays, from each saved iteration's cell ids."""
    seen: set = set()
    per_iteration, cumulative = [], []
    for cells in cells_per_iteration:
        unique = set(np.unique(cells).tolist())
        seen |= unique
        per_iteration.append(len(unique) / bins ** 2)
        cumulative.append(len(seen) / bins ** 2)
    return np.array(per_iteration), np.array(cumulative)


def embed(features: np.ndarray, seed: int, n_neighbors: int = 15, min_dist: float = 0.1) -> np.ndarray:
    """One 2-D UMAP of all points. A fixed random_state makes umap-learn single-threaded and repeatable."""
    import umap  # imported here: numba's first compile takes seconds, and only this step needs it

    reducer = umap.UMAP(n_components=2, n_neighbors=n_neighbors, min_dist=min_dist, random_state=seed)
    return reducer.fit_transform(np.asarray(features, dtype=np.float32))


# ---------------------------------------------------------------------------------------------------------
# Reading the runs
# ---------------------------------------------------------------------------------------------------------
def label_of(config: dict, keys: list) -> str:
    if not keys:
        return str(config_value_or(config, "exp_name", "run"))
    return ", ".join(f"{k}={config_value_or(config, k, '?')}" for k in keys)


def load_runs(roots: list, group_by: list, env_id: str = "", only_finished: bool = False) -> list:
    runs = []
    for root in roots:
        if not os.path.isdir(root):
            raise UsageError(f"{root}: no such directory (give the directories that hold the run directories)")
        for run_dir in sorted(run_dirs(root)):
            files = sorted(glob.glob(os.path.join(run_dir, "features", "iter_*.npz")))
            if not files or (only_finished and run_status(run_dir) != "finished"):
                continue
            config = read_json(os.path.join(run_dir, "config.json")) or {}
            if env_id and config_value_or(config, "env_id", "") != env_id:
                continue  # one game per embedding: features of different games share no space
            run = RunFeatures(run_dir, label_of(config, group_by), int(config_value_or(config, "seed", 0)))
            for path in sorted(files, key=lambda p: int(FEATURE_FILE.search(p).group(1))):
                with np.load(path) as data:
                    run.iterations.append(int(data["iteration"]))
                    run.global_steps.append(int(data["global_step"]))
                    run.features.append(np.asarray(data["features"], dtype=np.float32))
            runs.append(run)
    if not runs:
        where = f" for --env-id {env_id}" if env_id else ""
        raise UsageError(f"no saved features under the given directories{where}: train with --save-features-every K")
    dims = {f.shape[1] for r in runs for f in r.features}
    if len(dims) != 1:
        raise UsageError(f"the runs saved features of different widths {sorted(dims)}: compare one network")
    return runs


def equalise(runs: list, points: int, seed: int) -> int:
    """Keep the same number of points from every saved iteration (a seeded subsample); returns that number."""
    smallest = min(f.shape[0] for r in runs for f in r.features)
    points = points or smallest
    if points > smallest:
        raise UsageError(f"--points-per-iteration {points} is more than the smallest saved set ({smallest})")
    rng = np.random.default_rng(seed)
    for r in runs:
        r.features = [f[np.sort(rng.choice(f.shape[0], points, replace=False))] for f in r.features]
    return points


# ---------------------------------------------------------------------------------------------------------
# The analysis
# ---------------------------------------------------------------------------------------------------------
def analyse(runs: list, bins: int, seed: int, n_neighbors: int = 15, min_dist: float = 0.1, embedder=None) -> tuple:
    """Embed every point at once, bin, and return (rows, embedded points per run). `embedder(features)` replaces
    UMAP where given (the tests pass 2-D features through unchanged to check the binning by hand)."""
    stacked = np.concatenate([f for r in runs for f in r.features])
    plane = embedder(stacked) if embedder else embed(stacked, seed, n_neighbors, min_dist)
    low, high = plane.min(axis=0), plane.max(axis=0)  # one grid over the union: configurations share cells
    rows, embedded, start = [], [], 0
    for r in runs:
        cells, own = [], []
        for f in r.features:
            chunk = plane[start:start + f.shape[0]]
            start += f.shape[0]
            own.append(chunk)
            cells.append(grid_cells(chunk, low, high, bins))
        per_iteration, cumulative = coverage_curve(cells, bins)
        embedded.append(np.concatenate(own))
        for it, step, c_it, c_cum in zip(r.iterations, r.global_steps, per_iteration, cumulative):
            rows.append({"config": r.label, "seed": r.seed, "run_dir": r.run_dir, "iteration": it,
                         "global_step": step, "coverage_iter": c_it, "coverage": c_cum})
    return rows, embedded


def mean_band(values: list, band: str = "auto") -> tuple:
    """Mean over seeds and its band: the seeds' range below 5 seeds (docs/pipeline.md#bands), a 95%
    Student-t CI from 5 (band="auto"), clipped to coverage's range [0, 1]."""
    from cleanrl_scaling.utils.aggregate import mean_ci

    mean, lo, hi = mean_ci(np.asarray(values, dtype=float)[:, None], band=band, limits=(0.0, 1.0))
    return float(mean[0]), float(lo[0]), float(hi[0])


def final_table(rows: list) -> list:
    """Per configuration: the final cumulative coverage of each run, then mean, std, range and count over runs and
    every seed's value (seed:value, space-separated)."""
    last = {}
    for row in rows:
        key = (row["config"], row["run_dir"])
        if key not in last or row["iteration"] > last[key]["iteration"]:
            last[key] = row
    table = []
    for config in dict.fromkeys(r["config"] for r in rows):
        ends = sorted(((row["seed"], row["coverage"]) for (c, _), row in last.items() if c == config))
        finals = [value for _, value in ends]
        table.append({"config": config, "final_coverage_mean": float(np.mean(finals)),
                      "final_coverage_std": float(np.std(finals, ddof=1)) if len(finals) > 1 else float("nan"),
                      "final_coverage_min": float(np.min(finals)), "final_coverage_max": float(np.max(finals)),
                      "runs": len(finals), "seeds": " ".join(f"{seed}:{value:.6g}" for seed, value in ends)})
    return table


def write_csv(rows: list, path: str) -> None:
    import pandas as pd

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)


def draw(runs: list, embedded: list, rows: list, prefix: str, title: str, max_points: int, seed: int,
         band: str = "auto") -> list:
    import matplotlib.pyplot as plt

    configs = list(dict.fromkeys(r.label for r in runs))
    colors = dict(zip(configs, plots.colors(len(configs))))
    rng = np.random.default_rng(seed)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    share = max(1, max_points // max(1, len(runs)))
    drawn = set()
    for r, points in zip(runs, embedded):
        keep = points if len(points) <= share else points[rng.choice(len(points), share, replace=False)]
        ax.scatter(keep[:, 0], keep[:, 1], s=2, alpha=0.4, color=colors[r.label],
                   label=None if r.label in drawn else r.label, rasterized=True)
        drawn.add(r.label)
    ax.set_xlabel("UMAP 1")
    ax.set_ylabel("UMAP 2")
    ax.set_title(title or "Embedded batch features (M25 Fig. 2)")
    ax.legend(markerscale=6, fontsize=8)
    written = plots.save(fig, f"{prefix}_scatter")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for config in configs:
        steps = sorted({row["global_step"] for row in rows if row["config"] == config})
        stats = [mean_band([row["coverage"] for row in rows if row["config"] == config and row["global_step"] == s],
                           band) for s in steps]
        mean, lo, hi = (np.array(v) for v in zip(*stats))
        ax.plot(steps, mean, color=colors[config], label=config)
        if np.isfinite(lo).any():
            ax.fill_between(steps, lo, hi, color=colors[config], alpha=0.2, linewidth=0)
    ax.set_xlabel("global step")
    ax.set_ylabel("coverage (cumulative, fraction of cells)")
    ax.set_title(title or "State coverage (M25 App. B.7)")
    ax.legend(fontsize=8)
    written += plots.save(fig, prefix)
    plt.close(fig)
    return written


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="directories searched (recursively) for run directories with features/")
    p.add_argument("--out", required=True, help="output prefix: PREFIX.csv, PREFIX_final.csv, PREFIX.png, "
                   "PREFIX_scatter.png (and .pdf)")
    p.add_argument("--group-by", nargs="*", default=[], metavar="KEY", help="config.json keys naming a configuration")
    p.add_argument("--env-id", default="", help="only the runs of this environment (one embedding per game)")
    p.add_argument("--only-finished", action="store_true", help="ignore runs whose summary.json is not finished")
    p.add_argument("--bins", type=int, default=50, help="grid cells per axis (M25 B.7's B)")
    p.add_argument("--points-per-iteration", type=int, default=0,
                   help="points kept from every saved iteration (0 = the smallest saved count)")
    p.add_argument("--seed", type=int, default=0, help="seed of the subsample and of UMAP")
    p.add_argument("--n-neighbors", type=int, default=15, help="UMAP n_neighbors")
    p.add_argument("--min-dist", type=float, default=0.1, help="UMAP min_dist")
    p.add_argument("--scatter-points", type=int, default=20000, help="points drawn in the scatter at most")
    p.add_argument("--band", choices=["auto", "range", "bootstrap", "ci95", "none"], default="auto",
                   help="band of the coverage curve over seeds: auto = the seeds' range below 5 seeds, a 95%% t-CI "
                        "from 5 (clipped to [0, 1]; docs/pipeline.md#bands)")
    p.add_argument("--title", default="")
    args = p.parse_args(argv)
    args.group_by = [k.lstrip("-").replace("-", "_") for k in args.group_by]  # the launcher's spelling too
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        if args.bins < 1:
            raise UsageError(f"--bins must be >= 1 (got {args.bins})")
        if args.points_per_iteration < 0:
            raise UsageError(f"--points-per-iteration must be >= 0 (got {args.points_per_iteration})")
        if args.n_neighbors < 2:
            raise UsageError(f"--n-neighbors must be >= 2 (got {args.n_neighbors})")
        runs = load_runs(args.runs, args.group_by, args.env_id, args.only_finished)
        points = equalise(runs, args.points_per_iteration, args.seed)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    total = sum(len(r.features) for r in runs) * points
    print(f"coverage: {len(runs)} runs, {total} points ({points} per saved iteration), one UMAP, {args.bins}x"
          f"{args.bins} grid")
    rows, embedded = analyse(runs, args.bins, args.seed, args.n_neighbors, args.min_dist)
    write_csv(rows, f"{args.out}.csv")
    table = final_table(rows)
    write_csv(table, f"{args.out}_final.csv")
    written = draw(runs, embedded, rows, args.out, args.title, args.scatter_points, args.seed, args.band)
    for row in table:
        print(f"  {row['config']}: final coverage {row['final_coverage_mean']:.4f} "
              f"(std {row['final_coverage_std']:.4f}, {row['runs']} runs)")
    print("wrote", ", ".join([f"{args.out}.csv", f"{args.out}_final.csv"] + written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
