"""Turn run directories (docs/run_directory.md: config.json, metrics.jsonl, summary.json) into figures and the numbers behind them.

    python -m cleanrl_scaling.utils.aggregate curves  RUNS... --metric charts/neg_distance --group-by learning_rate
    python -m cleanrl_scaling.utils.aggregate iqm     RUNS... --metric charts/episodic_return --normalize atari-human
    python -m cleanrl_scaling.utils.aggregate scatter RUNS... --x-metric diagnostics/ddr --y-metric charts/solve_rate
    python -m cleanrl_scaling.utils.aggregate heatmap RUNS... --rows ewma_com --cols clip_coef --metric M
    python -m cleanrl_scaling.utils.aggregate sweep   RUNS... --x-key learning_rate --group-by ewma_com --best-over anneal_lr
    python -m cleanrl_scaling.utils.aggregate kl-profile RUNS... --group-by minibatch_size
    python -m cleanrl_scaling.utils.aggregate table   RUNS...   (charts/episodic_return; one row per task and setup)

Runs are grouped by configuration (exp_name plus the --group-by keys of config.json, spelt learning_rate or
learning-rate; table without --group-by: every flag that differs between the runs) and by env_id (the task).
Curves: per run, the mean of the values logged at each step (then --smooth), interpolated onto one x grid; the mean
over seeds and a band: the seeds' range below 5 seeds, a 95% Student-t CI from 5, clipped to the metric's range
(--band). A run's "final" score: the mean of the values (episodes) logged in
the last 10% of its total steps. IQM: 25% trimmed mean over all runs of all tasks with stratified bootstrap percentile
CIs (Agarwal et al. 2021, the protocol M25 uses; the same numbers as rliable, with its 50,000 replicates by default).
Scatter --budget-iterations 50,100,200 cuts every run at those updates: one dot per run and budget (B26 Fig. 8).
Every command writes PREFIX.png, PREFIX.pdf and PREFIX.csv (table: PREFIX.md and PREFIX.csv). Details and every
CSV's columns: docs/pipeline.md.
"""
import argparse
import gzip
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from cleanrl_scaling.utils import atari_scores
from cleanrl_scaling.utils.rundirs import (config_value_or, parse_flags, read_json, run_dirs, run_status,
                                           same_value)

SPECIAL_KEYS = ("env_id", "exp_name", "seed", "status", "run_name")


class UsageError(Exception):
    """A user mistake: one line on stderr, exit code 2."""


def _plots():
    """The plotting module, imported on first use: matplotlib takes ~0.7 s to import, and the rule scripts, tables and
    CSV-only paths that import this module never draw."""
    from cleanrl_scaling.utils import plots
    return plots


# ---------------------------------------------------------------------------------------------------------
# Statistics (pure numpy; the tests check them against hand-computed values and against rliable)
# ---------------------------------------------------------------------------------------------------------
# docs/pipeline.md#bands: below this many seeds a Student-t interval is wider than the data and leaves the
# metric's range, so the band is the seeds' range instead
MIN_SEEDS_FOR_T = 5

# the range a metric cannot leave (docs/metrics.md): bands are clipped to it
METRIC_RANGES = {
    "charts/solve_rate": (0.0, 1.0), "charts/solve_rate_random": (0.0, 1.0), "charts/solve_rate_handmade": (0.0, 1.0),
    "charts/train_solve_rate": (0.0, 1.0), "diagnostics/dormant_frac": (0.0, 1.0), "diagnostics/ess_pct": (0.0, 100.0),
    "losses/clipfrac": (0.0, 1.0), "sfl/frac_learnable": (0.0, 1.0), "coverage": (0.0, 1.0),
    "charts/SPS": (0.0, math.inf), "diagnostics/grad_norm": (0.0, math.inf), "diagnostics/weight_norm": (0.0, math.inf),
    "diagnostics/update_size": (0.0, math.inf), "diagnostics/kl_behavior": (0.0, math.inf),
    "diagnostics/kl_prox": (0.0, math.inf), "diagnostics/feature_rank": (0.0, math.inf),
    "diagnostics/srank": (0.0, math.inf), "diagnostics/policy_variance": (0.0, math.inf),
    "diagnostics/seq_kl_mean": (0.0, math.inf), "diagnostics/ref_kl_mean": (0.0, math.inf),
}
BANDS = ["auto", "range", "bootstrap", "ci95", "std", "none"]
_warned: set = set()


def warn_once(text: str) -> None:
    if text not in _warned:
        _warned.add(text)
        print(f"warning: {text}", file=sys.stderr)


def band_used(band: str, n: int) -> str:
    """The band actually drawn for n seeds: auto = a 95% t-interval from 5 seeds, the seeds' range below; ci95 below
    5 seeds is replaced by the range (docs/pipeline.md#bands: never a t-interval from fewer than 5 seeds)."""
    band = "range" if band == "minmax" else band
    if n < 2 or band == "none":
        return "none"
    if band in ("auto", "ci95") and n < MIN_SEEDS_FOR_T:
        if band == "ci95":
            warn_once(f"--band ci95 with {n} seeds: drawing the seeds' range instead (a t-interval needs "
                      f"{MIN_SEEDS_FOR_T} seeds or more)")
        return "range"
    return "ci95" if band == "auto" else band


def mean_ci(values: np.ndarray, level: float = 0.95, band: str = "auto", limits: tuple = None,
            reps: int = 2000, seed: int = 0) -> tuple:
    """Mean over axis 0 (the seeds) and its band (see band_used): the seeds' range, a percentile bootstrap of the
    mean, a Student-t CI of the mean (ci95), mean +- sample std (std), or none (NaN). limits=(low, high): the
    metric's range, which the band is clipped to."""
    values = np.asarray(values, dtype=float)
    n = values.shape[0]
    mean = values.mean(axis=0)
    kind = band_used(band, n)
    if kind == "none":
        nan = np.full_like(mean, np.nan)
        return mean, nan, nan
    if kind == "range":
        lo, hi = values.min(axis=0), values.max(axis=0)
    elif kind == "bootstrap":
        out = stratified_bootstrap([values], ("mean",), reps, level, seed)["mean"]
        lo, hi = np.asarray(out["lo"], dtype=float), np.asarray(out["hi"], dtype=float)
    else:
        sd = values.std(axis=0, ddof=1)
        if kind == "std":
            half = sd
        else:
            from scipy import stats  # slow to import, and only the t band needs it
            half = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
        lo, hi = mean - half, mean + half
    if limits is not None:
        lo, hi = np.clip(lo, *limits), np.clip(hi, *limits)
    return mean, lo, hi


def iqm(values: np.ndarray, axis: Optional[int] = None) -> np.ndarray:
    """Interquartile mean: drop floor(n/4) values at each end and average the rest (scipy's trim_mean(., 0.25))."""
    values = np.asarray(values, dtype=float)
    if axis is None:
        values, axis = values.reshape(-1), 0
    n = values.shape[axis]
    cut = int(0.25 * n)
    kept = np.take(np.sort(values, axis=axis), np.arange(cut, n - cut), axis=axis)
    return kept.mean(axis=axis)


def aggregate(tasks: list, name: str) -> np.ndarray:
    """tasks: one array per task of shape (reps, runs_k, ...). IQM pools every run of every task; mean and median
    are taken over the per-task mean scores (rliable's aggregate_mean / aggregate_median)."""
    if name == "iqm":
        return iqm(np.concatenate(tasks, axis=1), axis=1)
    per_task = np.stack([t.mean(axis=1) for t in tasks], axis=1)
    if name == "mean":
        return per_task.mean(axis=1)
    if name == "median":
        return np.median(per_task, axis=1)
    raise ValueError(name)


def stratified_bootstrap(tasks: list, names=("iqm",), reps: int = 50000, level: float = 0.95, seed: int = 0) -> dict:
    """Point estimate and percentile CI of each aggregate. tasks: one array per task, shape (runs_k, ...) (runs may
    differ between tasks). Each replicate resamples the runs of every task with replacement, independently per
    task (stratified by task); the CI is the (1-level)/2 and (1+level)/2 percentiles of the replicates."""
    tasks = [np.asarray(t, dtype=float) for t in tasks]
    rng = np.random.default_rng(seed)
    out = {name: {"point": aggregate([t[None] for t in tasks], name)[0]} for name in names}
    replicates = {name: [] for name in names}
    size = sum(len(t) for t in tasks) * int(np.prod(tasks[0].shape[1:]))
    block = max(1, min(reps, 2**24 // max(size, 1)))
    for start in range(0, reps, block):
        b = min(block, reps - start)
        sampled = [t[rng.integers(0, len(t), size=(b, len(t)))] for t in tasks]
        for name in names:
            replicates[name].append(aggregate(sampled, name))
    tail = 100 * (1 - level) / 2
    for name in names:
        lo, hi = np.percentile(np.concatenate(replicates[name]), [tail, 100 - tail], axis=0)
        out[name].update(lo=lo, hi=hi)
    return out


def run_stat(x: np.ndarray, y: np.ndarray, stat: str, final_frac: float = 0.1, total: float = None) -> float:
    """One number per run: last, max, min, mean, or final = the mean of the values (one per episode; several episodes
    may end in one step) whose step x lies in the last final_frac of the run's total steps, x >= (1 - final_frac) *
    total, total = the run's last step (default: the last x)."""
    if len(y) == 0:
        return math.nan
    if stat == "last":
        return float(y[-1])
    if stat == "max":
        return float(np.max(y))
    if stat == "min":
        return float(np.min(y))
    if stat == "mean":
        return float(np.mean(y))
    if stat == "final":
        total = float(x[-1]) if total is None or not math.isfinite(total) else float(total)
        inside = np.asarray(x, dtype=float) >= (1.0 - final_frac) * total
        return float(np.mean(y[inside])) if inside.any() else math.nan
    raise ValueError(stat)


def common_grid(xs: list, points: int) -> Optional[np.ndarray]:
    """The shared x of several runs: their x if all are equal, else `points` values over the range all of them
    cover (None if they do not overlap)."""
    if all(len(x) == len(xs[0]) and np.array_equal(x, xs[0]) for x in xs):
        return xs[0]
    lo, hi = max(x[0] for x in xs), min(x[-1] for x in xs)
    if hi < lo:
        return None
    return np.linspace(lo, hi, points) if hi > lo else np.array([lo])


# ---------------------------------------------------------------------------------------------------------
# Loading runs
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Run:
    path: str
    config: dict
    status: str
    metrics: pd.DataFrame = field(repr=False)

    def value(self, key: str):
        if key == "status":
            return self.status
        if key == "run_name":
            return os.path.basename(self.path)
        return config_value_or(self.config, key, prefer=("resolved", "args"))

    @property
    def env_id(self) -> str:
        """The config's env_id; a script without that flag (sfl_kinetix_jax.py: Kinetix-<size>) names its task first in
        the run name (docs/run_directory.md), so that name is used instead of 'None'."""
        value = self.value("env_id")
        return str(value) if value is not None else os.path.basename(self.path).split("__")[0]

    @property
    def seed(self):
        return self.value("seed")

    def total_steps(self) -> float:
        """The run's last environment step: the largest global_step it logged (any tag)."""
        if "global_step" not in self.metrics or self.metrics["global_step"].isna().all():
            return math.nan
        return float(self.metrics["global_step"].max())

    def stamp(self) -> tuple:
        """Newest last: the run name's trailing time stamp, then the directory's mtime."""
        tail = os.path.basename(self.path).rsplit("__", 1)[-1]
        return (int(tail) if tail.isdigit() else 0, os.path.getmtime(self.path))


def open_metrics(path: str):
    """metrics.jsonl, or where only its gzip copy is there (docs/reproducing/runs/ keeps them so), that copy."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        return gzip.open(path + ".gz", "rt")
    return open(path)


def read_metrics(path: str) -> pd.DataFrame:
    rows = []
    if os.path.exists(path) or os.path.exists(path + ".gz"):
        with open_metrics(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:  # a line cut short by a kill: skip it
                    continue
    frame = pd.DataFrame(rows)
    if "global_step" in frame:
        frame = frame.sort_values(["global_step"], kind="stable").reset_index(drop=True)
    return frame


def parse_filters(items: list) -> list:
    out = []
    for item in items:
        if "=" not in item:
            raise UsageError(f"--filter {item!r}: write KEY=VALUE or KEY=V1,V2 (e.g. --filter env_id=Pong-v5)")
        key, values = item.split("=", 1)
        out.append((key.strip(), values.split(",")))
    return out


def load_runs(roots: list, filters: list = (), only_finished: bool = False) -> list:
    runs = []
    for root in roots:
        if not os.path.isdir(root):
            raise UsageError(f"runs directory {root!r} not found")
        for path in run_dirs(root):
            config = read_json(os.path.join(path, "config.json"))
            if not isinstance(config, dict):
                continue
            run = Run(path, config, run_status(path), read_metrics(os.path.join(path, "metrics.jsonl")))
            if only_finished and run.status != "finished":
                continue
            if all(any(same_value(v, run.value(key)) for v in values) for key, values in filters):
                runs.append(run)
    if not runs:
        raise UsageError(f"no runs (config.json + metrics.jsonl) under {', '.join(roots)}"
                         + (" matching the filters" if filters else ""))
    unfinished = [r for r in runs if r.status != "finished"]
    if unfinished:
        print(f"warning: {len(unfinished)} of {len(runs)} runs are not finished "
              f"({', '.join(sorted({r.status for r in unfinished}))}); --only-finished drops them", file=sys.stderr)
    return runs


# ---------------------------------------------------------------------------------------------------------
# Groups (configurations), labels, metric series
# ---------------------------------------------------------------------------------------------------------
def sort_key(values: tuple) -> tuple:
    out = []
    for v in values:
        try:
            out.append((0, float(v), ""))
        except (TypeError, ValueError):
            out.append((1, 0.0, str(v)))
    return tuple(out)


def fmt_value(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


class Grouping:
    """A run's configuration = exp_name + the --group-by keys; its label comes from --label (a format string over
    those keys and env_id) or is 'key=value, ...'."""

    def __init__(self, runs: list, keys: list, label_format: str = "", relabel: dict = None):
        self.keys = ["exp_name"] + [k for k in keys if k != "exp_name"]
        self.label_format = label_format
        self.relabel = relabel or {}
        exp_names = {r.value("exp_name") for r in runs}
        self.show_exp_name = len(exp_names) > 1 or not keys

    def key(self, run: Run) -> tuple:
        return tuple(run.value(k) for k in self.keys)

    def label(self, key: tuple) -> str:
        label = self.formatted(key)
        return self.relabel.get(label, label)

    def formatted(self, key: tuple) -> str:
        named = dict(zip(self.keys, key))
        if self.label_format:
            try:
                values = {k: fmt_value(v) for k, v in named.items()}
                return self.label_format.format(**values, **{k.replace("_", "-"): v for k, v in values.items()
                                                             if "_" in k})
            except (KeyError, IndexError) as e:
                raise UsageError(f"--label {self.label_format!r}: unknown key {e}; use the --group-by keys or exp_name")
        parts = [fmt_value(named["exp_name"])] if self.show_exp_name else []
        parts += [f"{k}={fmt_value(v)}" for k, v in named.items() if k != "exp_name"]
        return ", ".join(parts)


NOT_IDENTITY = {"runs_dir", "progress", "track", "wandb_project_name", "wandb_entity", "resume", "checkpoint_every",
                "save_model"}


def training_flags(run: Run) -> dict:
    """Every training flag of the run (config["args"], else the whole config) except where it logs to."""
    args = run.config.get("args", run.config)
    return {k: v for k, v in args.items() if k not in NOT_IDENTITY}


def identity(run: Run) -> str:
    return json.dumps(training_flags(run), sort_keys=True, default=str)


def differing_flags(runs: list) -> list:
    """The flags that tell the runs apart, seed and task aside: every varying flag given on the command line
    (config.json "argv"), then only those other varying values that split the runs further, so that a derived value
    (batch_size from num_envs x num_steps) is named only where the given flags do not already tell the runs apart."""
    flags = [training_flags(r) for r in runs]
    given = {k for r in runs for k in parse_flags_of(r)}
    names = flags_that_vary(runs, flags)
    chosen = [k for k in names if k in given]

    def blocks(keys):
        return len({tuple(value_key(f.get(k)) for k in keys) for f in flags})

    for key in [k for k in names if k not in given]:
        if blocks(chosen + [key]) > blocks(chosen):
            chosen.append(key)
    return chosen


def flags_that_vary(runs: list, flags: Optional[list] = None) -> list:
    """Every flag (seed and task aside) that does not have one value in all runs, sorted; `flags` are the runs'
    training_flags where the caller has them already."""
    flags = flags or [training_flags(r) for r in runs]
    names = sorted({k for f in flags for k in f} - set(SPECIAL_KEYS) - {"argv", "resolved"})
    return [k for k in names if len({value_key(f.get(k)) for f in flags}) > 1]


def value_key(value) -> str:
    """A flag's value as a hashable, comparable key (lists and dicts included)."""
    return json.dumps(value, sort_keys=True, default=str)


def parse_flags_of(run: Run) -> dict:
    """The flags a run was started with (config.json "argv"), by config key."""
    argv = run.config.get("argv")
    return parse_flags(argv) if isinstance(argv, list) else {}


def deduplicate(runs: list) -> list:
    """Keep the newest of runs with identical flags (env_id and seed included): a rerun replaces its predecessor."""
    newest = {}
    for run in runs:
        key = (identity(run), run.env_id, str(run.seed))
        if key not in newest or run.stamp() > newest[key].stamp():
            newest[key] = run
    if len(newest) < len(runs):
        print(f"warning: {len(runs) - len(newest)} older duplicate run(s) (identical flags, env_id and seed) "
              "ignored; the newest of each is used (--keep-duplicates keeps them)", file=sys.stderr)
    return list(newest.values())


def normalizer(kind: str):
    if kind == "none":
        return lambda env_id, y: y
    if kind == "atari-human":
        def normalize(env_id, y):
            try:
                return atari_scores.human_normalized(env_id, y)
            except KeyError:
                raise UsageError(f"--normalize atari-human: no reference scores for {env_id!r}; known games: "
                                 f"{', '.join(atari_scores.REFERENCE_SCORES)}")
        return normalize
    raise UsageError(f"--normalize {kind!r}: choose none or atari-human")


def series(run: Run, metric: str, x_kind: str, smooth: int = 1, normalize=None) -> tuple:
    """(x, y) of one metric of one run, one point per distinct x (the mean of the values logged there), sorted by x;
    smooth > 1: then a trailing rolling mean over that many of those points. x_kind: a metrics.jsonl column
    (global_step, iteration, wall_time: seconds since the run's first event) or pct (% of the run's data:
    100 * global_step / last step)."""
    frame = run.metrics
    if metric not in frame:
        return np.array([]), np.array([])
    rows = frame[frame[metric].notna()]
    y = rows[metric].to_numpy(dtype=float)
    if x_kind == "pct":
        x = 100.0 * rows["global_step"].to_numpy(dtype=float) / max(float(frame["global_step"].max()), 1.0)
    elif x_kind == "wall_time":
        x = rows["wall_time"].to_numpy(dtype=float) - float(frame["wall_time"].min())
    elif x_kind in rows:
        x = rows[x_kind].to_numpy(dtype=float)
    else:
        raise UsageError(f"--x {x_kind!r}: not a column of {run.path}/metrics.jsonl (use global_step, iteration, "
                         "wall_time or pct)")
    if normalize is not None:
        y = normalize(run.env_id, y)
    x, y = mean_per_x(x, y)
    if smooth > 1:
        y = pd.Series(y).rolling(smooth, min_periods=1).mean().to_numpy()
    return x, y


def mean_per_x(x: np.ndarray, y: np.ndarray) -> tuple:
    """One point per logged x: the mean of all values logged there (several episodes end in the same step when
    N >= 8; np.interp would otherwise pick one of them), sorted by x."""
    if len(x) == 0:
        return x, y
    xs, inverse = np.unique(x, return_inverse=True)
    return xs, np.bincount(inverse, weights=y) / np.bincount(inverse)


def raw_values(run: Run, metric: str, normalize=None) -> tuple:
    """(global_step, value) of every logged value of a metric, unaveraged (one row per episode for returns)."""
    frame = run.metrics
    if metric not in frame:
        return np.array([]), np.array([])
    rows = frame[frame[metric].notna()]
    y = rows[metric].to_numpy(dtype=float)
    if normalize is not None:
        y = normalize(run.env_id, y)
    return rows["global_step"].to_numpy(dtype=float), y


def check_metric(runs: list, metric: str) -> None:
    if not any(metric in r.metrics for r in runs):
        seen = sorted({c for r in runs for c in r.metrics.columns if "/" in c})
        raise UsageError(f"--metric {metric!r} is in no metrics.jsonl; logged tags: {', '.join(seen) or 'none'}")


def write_csv(rows: list, prefix: str) -> str:
    path = f"{prefix}.csv"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.10g")
    return path


def write_text(text: str, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def grouped(runs: list, grouping: Grouping) -> list:
    """[(config key, label, [runs])] in a stable, numeric-aware order."""
    groups = {}
    for run in runs:
        groups.setdefault(grouping.key(run), []).append(run)
    return [(k, grouping.label(k), groups[k]) for k in sorted(groups, key=sort_key)]


# ---------------------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------------------
X_LABELS = {"global_step": "environment steps", "iteration": "updates (iterations)", "wall_time": "seconds",
            "pct": "% of data processed"}


def cmd_curves(args, runs: list, grouping: Grouping) -> dict:
    """Mean and band over seeds, one panel per (metric, env_id)."""
    norm = normalizer(args.normalize)
    hlines = [parse_hline(h) for h in args.hline]
    def panel_of(run: Run) -> tuple:  # one panel per env_id and per value of the --panel-by keys
        return (run.env_id,) + tuple(run.value(k) for k in args.panel_by)

    panel_keys = sorted({panel_of(r) for r in runs}, key=sort_key)
    sources = init_sources(runs) if args.join_init_from else {}
    metric_labels = parse_pairs(args.metric_label, "--metric-label", "TAG=WORDS", "=")
    panels, rows, labels = [], [], []
    for metric in args.metric:
        check_metric(runs, metric)
        for panel_key in panel_keys:
            env_id = panel_key[0]
            name = ", ".join([env_id] + [f"{k}={fmt_value(v)}" for k, v in zip(args.panel_by, panel_key[1:])])
            words = metric_labels.get(metric, metric)
            panel = {"title": name if len(args.metric) == 1 else f"{name}: {words}",
                     "xlabel": args.xlabel or X_LABELS.get(args.x, args.x), "ylabel": args.ylabel or words,
                     "series": {}, "hlines": [(v, t) for v, t, m in hlines if m in (None, metric)],
                     "logy": args.logy is not None and (not args.logy or metric in args.logy), "ylim": args.ylim}
            for key, label, members in grouped([r for r in runs if panel_of(r) == panel_key], grouping):
                curves = [joined(r, sources, args.join_init_from, metric, args.x, args.smooth, norm)
                          for r in members]
                curves = [(x, y) for x, y in curves if len(x)]
                if not curves:
                    continue
                grid = common_grid([x for x, _ in curves], args.points)
                if grid is None:
                    print(f"warning: the runs of {label} ({env_id}) share no x range; skipped", file=sys.stderr)
                    continue
                values = np.stack([np.interp(grid, x, y) for x, y in curves])
                limits = None if args.normalize != "none" else METRIC_RANGES.get(metric)
                mean, lo, hi = mean_ci(values, band=args.band, limits=limits)
                kind = band_used(args.band, len(curves))
                panel["series"][label] = (grid, mean, lo if kind != "none" else None, hi)
                if label not in labels:
                    labels.append(label)
                rows += [{"metric": metric, "env_id": env_id, **dict(zip(args.panel_by, panel_key[1:])), "group": label,
                          "x": xv, "mean": m, "lo": l, "hi": h, "n": len(curves), "band": kind}
                         for xv, m, l, h in zip(grid, mean, lo, hi)]
            panels.append(panel)
    palette = {label: colour for label, colour in zip(args.palette, _plots().colors(len(args.palette)))}
    fig = _plots().plot_curves(panels, labels, args.title, args.ncols, args.logx, args.hline_legend,
                               styles=parse_styles(args.style), legend_title=args.legend_title, palette=palette,
                               sharey=args.sharey)
    return {"fig": fig, "rows": rows}


def start_iteration(run: Run) -> Optional[int]:
    """The update a run started with --init-from began after: config.json's start_iteration, else the checkpoint's
    name (iteration_K.ckpt), else the update before its first logged one."""
    if run.value("start_iteration") is not None:
        return int(run.value("start_iteration"))
    found = re.search(r"iteration_(\d+)\.ckpt$", str(run.value("init_from")))
    if found:
        return int(found.group(1))
    return int(run.metrics["iteration"].min()) - 1 if "iteration" in run.metrics else None


def init_sources(runs: list) -> dict:
    """{run path: the run its --init-from checkpoint came from}: the run directory of that name among `runs` (the
    path it names may be another machine's), else the directory the path names, if it exists here."""
    by_name = {os.path.basename(r.path): r for r in runs}
    out = {}
    for run in runs:
        ckpt = run.value("init_from")
        if not ckpt:
            continue
        source_dir = os.path.dirname(os.path.dirname(str(ckpt)))  # RUN/checkpoints/NAME.ckpt
        source = by_name.get(os.path.basename(source_dir))
        if source is None and os.path.isfile(os.path.join(source_dir, "config.json")):
            source = Run(source_dir, read_json(os.path.join(source_dir, "config.json")), run_status(source_dir),
                         read_metrics(os.path.join(source_dir, "metrics.jsonl")))
        if source is not None:
            out[run.path] = source
    return out


def joined(run: Run, sources: dict, mode: str, metric: str, x_kind: str, smooth: int, normalize) -> tuple:
    """A run's series; with --join-init-from, a run started from another run's state is drawn from that state on:
    'switch' prepends the source's last point at or before the start (B26 Fig. 3a: the reloaded line starts at the
    switch), 'history' every point up to it (a run continued at the same COM is one line)."""
    x, y = series(run, metric, x_kind, smooth, normalize)
    source, start = sources.get(run.path), start_iteration(run)
    # start 0: a new run from old weights whose counters restart (the torch scripts, sfl): no point to join it at
    if source is None or not start or "iteration" not in source.metrics:
        return x, y
    before = Run(source.path, source.config, source.status, source.metrics[source.metrics["iteration"] <= start])
    sx, sy = series(before, metric, x_kind, smooth, normalize)
    keep = slice(-1, None) if mode == "switch" else slice(None)
    return np.concatenate([sx[keep], x]), np.concatenate([sy[keep], y])


def parse_pairs(items: list, option: str, form: str, sep: str) -> dict:
    """['A->B', ...] -> {A: B}; a missing separator is a usage error."""
    out = {}
    for item in items:
        old, found, new = item.partition(sep)
        if not found or not old:
            raise UsageError(f"{option} {item!r}: write {form}")
        out[old] = new
    return out


def parse_styles(items: list) -> dict:
    """--style LABEL=LINESTYLE (e.g. 'lr 0.03 (from 0.3)=--'): {label: {"ls": LINESTYLE}}."""
    out = {}
    for item in items:
        label, _, style = item.rpartition("=")
        if not label or style not in ("-", "--", ":", "-."):
            raise UsageError(f"--style {item!r}: write LABEL=LINESTYLE with LINESTYLE one of - -- : -.")
        out[label] = {"ls": style}
    return out


def parse_hline(text: str) -> tuple:
    """[METRIC=]VALUE[:LABEL] -> (value, label, metric or None: every panel)."""
    head, _, label = text.partition(":")
    metric, _, value = head.rpartition("=")
    try:
        return float(value), label, metric or None
    except ValueError:
        raise UsageError(f"--hline {text!r}: write [METRIC=]VALUE[:LABEL] (e.g. --hline=-0.5:plateau)")


def per_run_scores(runs: list, metric: str, stat: str, final_frac: float, norm, x_kind: str = "global_step"):
    """One score per run. final: every logged value (episode) of the last final_frac of the run's steps weighs the
    same (raw_values), as the pages say; the other stats read the per-step series."""
    out = []
    for run in runs:
        if stat == "final":
            steps, values = raw_values(run, metric, norm)
            out.append(run_stat(steps, values, stat, final_frac, run.total_steps()))
        else:
            x, y = series(run, metric, x_kind, 1, norm)
            out.append(run_stat(x, y, stat, final_frac))
    return out


def cmd_iqm(args, runs: list, grouping: Grouping) -> dict:
    """IQM (and mean, median) across tasks and seeds with stratified bootstrap CIs, per configuration."""
    check_metric(runs, args.metric)
    norm = normalizer(args.normalize)
    names = ["iqm", "median", "mean"]
    titles = {"iqm": "IQM", "median": "Median", "mean": "Mean"}
    envs_all = sorted({r.env_id for r in runs})
    rows, estimates, labels, panels = [], {titles[n]: {} for n in names}, [], []
    curve_panel = {"title": "", "xlabel": args.xlabel or X_LABELS.get(args.x, args.x),
                   "ylabel": args.ylabel or f"IQM {args.metric}", "series": {}}
    for key, label, members in grouped(runs, grouping):
        by_env = {}
        for run in members:
            by_env.setdefault(run.env_id, []).append(run)
        missing = sorted(set(envs_all) - set(by_env))
        if missing:
            print(f"warning: {label} has no runs on {', '.join(missing)}; its aggregate covers fewer tasks",
                  file=sys.stderr)
        envs = sorted(by_env)
        if not args.over_time:
            tasks = [np.array(per_run_scores(by_env[e], args.metric, args.stat, args.final_frac,
                                             norm)) for e in envs]
            tasks = [t[np.isfinite(t)] for t in tasks]
            if any(len(t) == 0 for t in tasks):
                raise UsageError(f"{label}: a task has no finite {args.metric} values")
            result = stratified_bootstrap(tasks, names, args.reps, 0.95, args.seed)
            for name in names:
                r = result[name]
                estimates[titles[name]][label] = (float(r["point"]), float(r["lo"]), float(r["hi"]))
                rows.append({"group": label, "aggregate": name, "point": float(r["point"]), "lo": float(r["lo"]),
                             "hi": float(r["hi"]), "tasks": len(tasks), "runs": sum(len(t) for t in tasks),
                             "metric": args.metric, "stat": args.stat})
        else:
            curves = {e: [series(r, args.metric, args.x, args.smooth, norm)
                          for r in by_env[e]] for e in envs}
            grid = common_grid([x for e in envs for x, y in curves[e] if len(x)], args.points)
            if grid is None:
                print(f"warning: the runs of {label} share no x range; skipped", file=sys.stderr)
                continue
            tasks = [np.stack([np.interp(grid, x, y) for x, y in curves[e] if len(x)]) for e in envs]
            result = stratified_bootstrap(tasks, ["iqm"], args.reps, 0.95, args.seed)["iqm"]
            curve_panel["series"][label] = (grid, result["point"], result["lo"], result["hi"])
            rows += [{"group": label, "x": xv, "iqm": p, "lo": l, "hi": h, "tasks": len(tasks),
                      "runs": sum(len(t) for t in tasks), "metric": args.metric}
                     for xv, p, l, h in zip(grid, result["point"], result["lo"], result["hi"])]
        labels.append(label)
    xlabel = args.xlabel or ("Human-normalised score" if args.normalize == "atari-human" else args.metric)
    if args.over_time:
        curve_panel["logy"] = args.logy is not None
        fig = _plots().plot_curves([curve_panel], labels, args.title, 1, args.logx)
    else:
        fig = _plots().plot_intervals(estimates, labels, xlabel)
        if args.title:
            fig.suptitle(args.title, y=1.02)
    return {"fig": fig, "rows": rows}


def cmd_scatter(args, runs: list, grouping: Grouping) -> dict:
    """One dot per run: a per-run statistic of one metric against another (B26 Fig. 8: DDR vs max solve rate);
    with --budget-iterations, one dot per run and budget, coloured by budget."""
    check_metric(runs, args.x_metric)
    check_metric(runs, args.y_metric)
    if args.budget_iterations:
        return scatter_by_budget(args, runs, grouping, parse_budgets(args.budget_iterations))
    points, rows, labels = {}, [], []
    for key, label, members in grouped(runs, grouping):
        xs = per_run_scores(members, args.x_metric, args.x_stat, args.final_frac, None)
        ys = per_run_scores(members, args.y_metric, args.y_stat, args.final_frac, None)
        points[label] = (np.array(xs), np.array(ys))
        labels.append(label)
        rows += [{"group": label, "run": os.path.basename(r.path), "env_id": r.env_id, "seed": r.seed,
                  f"{args.x_stat}({args.x_metric})": x, f"{args.y_stat}({args.y_metric})": y}
                 for r, x, y in zip(members, xs, ys)]
    fig = _plots().plot_scatter(points, labels, args.xlabel or f"{args.x_stat} {args.x_metric}",
                                args.ylabel or f"{args.y_stat} {args.y_metric}", args.title, args.logx,
                                args.logy is not None,
                                ", ".join(grouping.keys[1:]))
    return {"fig": fig, "rows": rows}


def parse_budgets(text: str) -> list:
    """'50,100,200' -> [50, 100, 200]: positive whole numbers of updates, ascending."""
    try:
        budgets = sorted({int(b) for b in text.split(",")})
    except ValueError:
        budgets = []
    if not budgets or budgets[0] < 1:
        raise UsageError(f"--budget-iterations {text!r}: write positive whole numbers of updates separated by commas, "
                         "e.g. 50,100,200")
    return budgets


def iterations_of(run: Run) -> int:
    """The run's last update: the largest iteration it logged."""
    if "iteration" not in run.metrics or run.metrics["iteration"].isna().all():
        raise UsageError(f"--budget-iterations: {run.path}/metrics.jsonl has no iteration column to cut at")
    return int(run.metrics["iteration"].max())


def prefix_of(run: Run, budget: int) -> Run:
    """The run as if it had stopped after `budget` updates: only its rows at or before that iteration."""
    rows = run.metrics[run.metrics["iteration"] <= budget].reset_index(drop=True)
    return Run(run.path, run.config, run.status, rows)


def scatter_by_budget(args, runs: list, grouping: Grouping, budgets: list) -> dict:
    """B26 Fig. 8 from prefixes: each run cut at each budget (in updates), both statistics computed only from its rows
    up to that budget; a run shorter than a budget is left out of that budget."""
    x_name, y_name = f"{args.x_stat}({args.x_metric})", f"{args.y_stat}({args.y_metric})"
    points, rows, labels = {}, [], []
    for budget in budgets:
        xs, ys = [], []
        for key, label, members in grouped(runs, grouping):
            for run in members:
                length = iterations_of(run)
                if length < budget:
                    print(f"warning: {run.path} has {length} updates, fewer than the budget {budget}; left out of it",
                          file=sys.stderr)
                    continue
                cut = prefix_of(run, budget)
                x = per_run_scores([cut], args.x_metric, args.x_stat, args.final_frac, None)[0]
                y = per_run_scores([cut], args.y_metric, args.y_stat, args.final_frac, None)[0]
                xs.append(x)
                ys.append(y)
                rows.append({"group": label, "run": os.path.basename(run.path), "env_id": run.env_id,
                             "seed": run.seed, "budget": budget, x_name: x, y_name: y})
        if xs:
            points[f"{budget}"] = (np.array(xs), np.array(ys))
            labels.append(f"{budget}")
    fig = _plots().plot_scatter(points, labels, args.xlabel or f"{args.x_stat} {args.x_metric}",
                                args.ylabel or f"{args.y_stat} {args.y_metric}", args.title, args.logx,
                                args.logy is not None, "budget (updates)")
    return {"fig": fig, "rows": rows}


def cmd_heatmap(args, runs: list, grouping: Grouping) -> dict:
    """Mean over runs (seeds and tasks) of a per-run statistic for every (rows key, cols key) pair (B26 Fig. 12b)."""
    check_metric(runs, args.metric)
    cells = {}
    for run in runs:
        score = per_run_scores([run], args.metric, args.stat, args.final_frac, None)[0]
        cells.setdefault((run.value(args.rows), run.value(args.cols)), []).append(score)
    row_values = sorted({k[0] for k in cells}, key=lambda v: sort_key((v,)))
    col_values = sorted({k[1] for k in cells}, key=lambda v: sort_key((v,)))
    matrix = np.full((len(row_values), len(col_values)), np.nan)
    rows = []
    for (rv, cv), values in sorted(cells.items(), key=lambda kv: sort_key(kv[0])):
        values = np.array(values)
        mean, lo, hi = mean_ci(values[:, None], band=args.band, limits=METRIC_RANGES.get(args.metric))
        matrix[row_values.index(rv), col_values.index(cv)] = mean[0]
        rows.append({args.rows: rv, args.cols: cv, "mean": mean[0], "lo": lo[0], "hi": hi[0], "n": len(values),
                     "band": band_used(args.band, len(values)),
                     "metric": args.metric, "stat": args.stat})
    fig = _plots().plot_heatmap(matrix, [fmt_value(v) for v in row_values], [fmt_value(v) for v in col_values],
                                args.rows, args.cols, f"{args.stat} {args.metric}", args.title)
    return {"fig": fig, "rows": rows}


def cmd_sweep(args, runs: list, grouping: Grouping) -> dict:
    """A per-run score against a swept config value, one line per configuration of the --group-by keys, mean over
    seeds and 95% CI at every x; one panel per task (env_id), since returns of different tasks are not on one scale.
    The --best-over keys are tuned away: at each (line, x) the value of those keys with the highest mean is shown and
    named in the CSV (B26 Fig. 4: the better of annealing the lr or not; Fig. 12a: the best epsilon per COM).
    B26 Figs. 13-14: SPS and final solve rate against num_envs."""
    check_metric(runs, args.metric)
    if args.x_key in grouping.keys or args.x_key in args.best_over:
        raise UsageError(f"--x-key {args.x_key}: also in --group-by or --best-over; a key can play one role only")
    env_ids = sorted({r.env_id for r in runs}, key=lambda v: sort_key((v,)))
    panels, rows, labels = [], [], []
    for env_id in env_ids:
        panel = {"title": env_id, "xlabel": args.xlabel or args.x_key,
                 "ylabel": args.ylabel or f"{args.stat} {args.metric}", "series": {}, "logy": args.logy is not None,
                 "marker": "o", "errorbars": True, "hlines": []}
        lines = {}
        for key, label, members in sweep_groups([r for r in runs if r.env_id == env_id], grouping, args.series):
            points, point_rows = sweep_points(args, members, label, env_id)
            rows += point_rows
            if points:
                lines[label] = points
        reference = lines.pop(args.reference_group, None) if args.reference_group else None
        if reference is not None:  # B26 Figs. 13-14: every recipe starts from the base, drawn as a reference line
            panel["hlines"].append((reference[0][1], args.reference_group))
            panel["hbands"] = [(reference[0][2], reference[0][3], args.reference_group)]
            labels += [args.reference_group] if args.reference_group not in labels else []
        for label, points in lines.items():
            if reference is not None and all(p[0] != reference[0][0] for p in points):
                points = [reference[0]] + points
            panel["series"][label] = tuple(np.array(v) for v in zip(*points))
            if label not in labels:
                labels.append(label)
        panels.append(panel)
    if args.reference_group and args.reference_group not in labels:
        raise UsageError(f"--reference-group {args.reference_group!r}: no such group; groups: {', '.join(labels)}")
    fig = _plots().plot_curves(panels, labels, args.title, min(len(panels), 3), args.logx,
                               f"{args.reference_group} (the base)" if args.reference_group else "reference",
                               legend_title=args.legend_title)
    return {"fig": fig, "rows": rows}


def sweep_groups(runs: list, grouping: Grouping, series: list) -> list:
    """The lines of a sweep: the --group-by configurations, or one line per --series KEY=V1,V2:LABEL (a run may be on
    several lines: M25 Fig. 8's base starts both the N-grown and the T-grown line)."""
    if not series:
        return grouped(runs, grouping)
    out = []
    for item in series:
        head, _, label = item.partition(":")
        ((key, values),) = parse_filters([head])
        members = [r for r in runs if any(same_value(v, r.value(canonical_key(key))) for v in values)]
        if members:
            out.append((None, label or head, members))
    return out


def sweep_points(args, members: list, label: str, env_id) -> tuple:
    """One line of one task: [(x, mean, lo, hi)] and its CSV rows."""
    by_x, rows = {}, []
    for run in members:
        by_x.setdefault(run.value(args.x_key), []).append(run)
    points = []
    for xv in sorted(by_x, key=lambda v: sort_key((v,))):
        try:
            x = float(xv)
        except (TypeError, ValueError):
            raise UsageError(f"--x-key {args.x_key}: value {xv!r} of {by_x[xv][0].path} is not a number")
        candidates = {}
        for run in by_x[xv]:
            candidates.setdefault(tuple(run.value(k) for k in args.best_over), []).append(run)
        scored = []
        for cand, cand_runs in sorted(candidates.items(), key=lambda kv: sort_key(kv[0])):
            scores = np.array(per_run_scores(cand_runs, args.metric, args.stat, args.final_frac, None))
            scores = scores[np.isfinite(scores)]
            if len(scores):
                scored.append((float(scores.mean()), cand, scores))
        if not scored:
            continue
        _, cand, scores = max(scored, key=lambda item: item[0])  # the first of equal means: the lowest value
        limits = METRIC_RANGES.get(args.metric)
        mean, lo, hi = (float(v[0]) for v in mean_ci(scores[:, None], band=args.band, limits=limits))
        points.append((x, mean, lo, hi))
        rows.append({"env_id": env_id, "group": label, args.x_key: xv, **dict(zip(args.best_over, cand)),
                     "mean": mean, "lo": lo, "hi": hi, "n": len(scores), "band": band_used(args.band, len(scores)),
                     "metric": args.metric, "stat": args.stat})
    return points, rows


def read_profile(run: Run) -> list:
    """kl_profile.jsonl of a run: [{global_step, iteration, seq_kl: [J values], ref_kl: [J values]}], by step."""
    out = []
    path = os.path.join(run.path, "kl_profile.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:  # a line cut short by a kill
                    continue
    return sorted(out, key=lambda row: row["global_step"])


def cmd_kl_profile(args, runs: list, grouping: Grouping) -> dict:
    """H25 Figs. 2-3: within one update, the sequential KL(pi_j || pi_(j-1)) (top row) and the reference
    KL(pi_J || pi_j) (bottom row) against the % of the update's data processed (100 * j / J: settings with different
    numbers of minibatch steps J share one axis), log scale; for the best run of each setting (highest --select-stat
    of --select-metric; H25 selects "two of the best runs") at several phases of training (--at, % of its steps)."""
    profiles = {run.path: read_profile(run) for run in runs}
    runs = [r for r in runs if profiles[r.path]]
    if not runs:
        raise UsageError("no kl_profile.jsonl in these runs; train with --kl-profile and --diagnostics-every K > 0")
    rows = []
    for env_id in sorted({r.env_id for r in runs}):
        for key, label, members in grouped([r for r in runs if r.env_id == env_id], grouping):
            if args.select == "best":
                scores = per_run_scores(members, args.select_metric, args.select_stat, args.final_frac, None)
                finite = [(s, i) for i, s in enumerate(scores) if math.isfinite(s)]
                members = [members[max(finite)[1]]] if finite else members[:1]
            for run in members:
                profile = profiles[run.path]
                last = max(float(run.metrics["global_step"].max()) if "global_step" in run.metrics else 0.0,
                           float(profile[-1]["global_step"]), 1.0)
                pcts = np.array([100.0 * p["global_step"] / last for p in profile])
                for at in args.at:
                    p = profile[int(np.argmin(np.abs(pcts - at)))]
                    phase = 100.0 * p["global_step"] / last
                    for kind in ("seq", "ref"):
                        kl = np.asarray(p[f"{kind}_kl"], dtype=float)
                        steps = np.arange(1, len(kl) + 1) if kind == "seq" else np.arange(len(kl))
                        rows += [{"env_id": env_id, "group": label, "run": os.path.basename(run.path),
                                  "global_step": p["global_step"], "pct_of_training": phase, "kind": kind, "j": int(j),
                                  "pct_of_update": 100.0 * j / len(kl), "kl": v} for j, v in zip(steps, kl)]
    return {"fig": draw_kl_profile(rows, args.title, args.xlabel, args.dashed), "rows": rows}


def draw_kl_profile(rows: list, title: str = "", xlabel: str = "", dashed: list = ()) -> "matplotlib.figure.Figure":
    """The kl-profile figure from its CSV rows: seq KL on top, ref KL below, one column per task; as H25 Figs. 2-3
    draw it, one line style per setting and one colour per phase of training: the `dashed` settings dashed, the
    others solid (without `dashed`: solid, dashed, dotted, ... in the settings' order)."""
    envs = sorted({r["env_id"] for r in rows})
    groups = list(dict.fromkeys(r["group"] for r in rows))
    runs_of = {}  # the runs drawn per task and setting: their seeds are named only when there are several
    for r in rows:
        runs_of.setdefault((r["env_id"], r["group"]), {})[r["run"]] = None
    phases_of = {}  # the phases of each run in order: the k-th phase of every run shares the k-th colour
    for r in rows:
        phases_of.setdefault(r["run"], []).append(float(r["pct_of_training"]))
    phases_of = {run: sorted(set(v)) for run, v in phases_of.items()}
    panels = {(kind, env_id): {"title": f"{env_id}: {name}", "xlabel": xlabel or "% of the update's data processed",
                               "ylabel": f"{kind} KL", "series": {}, "logy": True}
              for kind, name in (("seq", "sequential KL(pi_j || pi_j-1)"), ("ref", "reference KL(pi_J || pi_j)"))
              for env_id in envs}
    series, labels, styles, palette = {}, [], {}, {}
    phase_colors = _plots().colors(max(len(v) for v in phases_of.values()))
    line_styles = ["-", "--", ":", "-."]
    for r in rows:
        phase = float(r["pct_of_training"])
        several = len(runs_of[(r["env_id"], r["group"])]) > 1
        seed = f" ({r['run'].split('__')[2] if '__' in r['run'] else r['run']})" if several else ""
        name = f"{r['group']}{seed} @ {phase:.0f}%"
        series.setdefault((r["kind"], r["env_id"], name), []).append((float(r["pct_of_update"]), float(r["kl"])))
        if name not in styles:
            labels.append(name)
            style = ("--" if r["group"] in dashed else "-") if dashed else line_styles[groups.index(r["group"]) % 4]
            styles[name] = {"ls": style}
            palette[name] = phase_colors[phases_of[r["run"]].index(phase)]
    for (kind, env_id, name), points in series.items():
        x, y = (np.array(v) for v in zip(*sorted(points)))
        panels[(kind, env_id)]["series"][name] = (x, y, None, None)
    ordered = [panels[("seq", e)] for e in envs] + [panels[("ref", e)] for e in envs]
    return _plots().plot_curves(ordered, labels, title, len(envs), False, styles=styles, palette=palette)


def table_row(env_id, label: str, members: list, scores: list, args) -> dict:
    """One group of one task: every seed's score, their mean and IQM, and the interval of the mean (the seeds'
    range below 5 seeds, else a 95% percentile bootstrap; --interval chooses)."""
    pairs = sorted(((r.seed, s) for r, s in zip(members, scores) if math.isfinite(s)), key=lambda p: sort_key(p[:1]))
    values = np.array([s for _, s in pairs])
    kind = args.interval
    if kind == "auto":
        kind = "range" if len(values) < MIN_SEEDS_FOR_T else "bootstrap"
    if len(values) == 0:
        mean = middle = lo = hi = math.nan
    else:
        mean, middle = float(values.mean()), float(iqm(values))
        if kind == "range" or len(values) < 2:
            lo, hi = float(values.min()), float(values.max())
        else:
            out = stratified_bootstrap([values], ("mean",), args.reps, 0.95, args.seed)["mean"]
            lo, hi = float(out["lo"]), float(out["hi"])
    return {"env_id": env_id, "group": label, "n": len(values), "mean": mean, "iqm": middle, "lo": lo, "hi": hi,
            "interval": kind, "seeds": " ".join(f"{seed}:{value:.6g}" for seed, value in pairs),
            "metric": args.metric, "stat": args.stat, "final_frac": args.final_frac if args.stat == "final" else ""}


def check_one_setup(members: list, label: str, env_id) -> None:
    """A row's seeds must be one setup: a seed that appears twice means that runs of different flags were pooled."""
    seeds = [str(r.seed) for r in members]
    twice = sorted({s for s in seeds if seeds.count(s) > 1}, key=lambda v: sort_key((v,)))
    apart = flags_that_vary(members)
    where = f"{label} on {env_id}"
    if twice and apart:
        raise UsageError(f"--group-by: {where} would count seed {twice[0]} twice: its runs differ in "
                         f"{', '.join(apart)}; add the flags that tell them apart to --group-by, or keep one value "
                         "with --filter")
    if twice:
        raise UsageError(f"--keep-duplicates: {where} would count seed {twice[0]} twice (reruns with identical flags); "
                         "drop --keep-duplicates to keep the newest run of each")
    if apart:
        warn_once(f"{where} pools runs that differ in {', '.join(apart)}; add them to --group-by to split them")


def markdown_table(rows: list, digits: int) -> str:
    """The table as GitHub markdown: one line per (task, group), every seed's number in the last column."""
    def num(v):
        return "–" if not math.isfinite(v) else f"{v:.{digits}g}"

    lines = ["| task | group | seeds | mean | IQM | interval | per seed |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        interval = f"[{num(r['lo'])}, {num(r['hi'])}] ({r['interval']})"
        per_seed = ", ".join(f"{seed}: {num(float(v))}" for seed, v in (p.split(":") for p in r["seeds"].split()))
        lines.append(f"| {r['env_id']} | {r['group']} | {r['n']} | {num(r['mean'])} | {num(r['iqm'])} | {interval} "
                     f"| {per_seed} |")
    return "\n".join(lines) + "\n"


def cmd_table(args, runs: list, grouping: Grouping) -> dict:
    """One row per task and configuration: the per-run score (default: final = the mean of the episodes ending in the
    last --final-frac of the run's steps), every seed's score, mean, IQM and an interval; markdown and CSV."""
    check_metric(runs, args.metric)
    norm = normalizer(args.normalize)
    rows = []
    for env_id in sorted({r.env_id for r in runs}, key=lambda v: sort_key((v,))):
        for key, label, members in grouped([r for r in runs if r.env_id == env_id], grouping):
            check_one_setup(members, label, env_id)
            scores = per_run_scores(members, args.metric, args.stat, args.final_frac, norm)
            rows.append(table_row(env_id, label, members, scores, args))
    return {"fig": None, "rows": rows, "markdown": markdown_table(rows, args.digits)}


COMMANDS = {"curves": cmd_curves, "iqm": cmd_iqm, "scatter": cmd_scatter, "heatmap": cmd_heatmap, "sweep": cmd_sweep,
            "kl-profile": cmd_kl_profile, "table": cmd_table}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m cleanrl_scaling.utils.aggregate",
                                     description="Figures (PNG, PDF) and their numbers (CSV) from run directories.")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("runs", nargs="+", help="directories searched (recursively) for run directories")
    common.add_argument("--out", default="", metavar="PREFIX",
                        help="output prefix (default runs/figures/COMMAND_METRIC): the figures write PREFIX.png, "
                             "PREFIX.pdf and PREFIX.csv; table writes PREFIX.md and PREFIX.csv")
    common.add_argument("--group-by", nargs="*", default=[], metavar="KEY",
                        help="config.json keys that tell configurations apart (exp_name always does); table "
                             "without it: every flag that differs between the runs")
    common.add_argument("--label", default="", help="legend label format, e.g. 'lr={learning_rate}'")
    common.add_argument("--filter", action="append", default=[], metavar="KEY=V1,V2",
                        help="keep runs whose config value is one of these (repeatable; all must hold)")
    common.add_argument("--only-finished", action="store_true", help="ignore runs whose summary.json is not finished")
    common.add_argument("--keep-duplicates", action="store_true",
                        help="keep older runs with identical flags, env_id and seed (default: the newest only)")
    common.add_argument("--relabel", action="append", default=[], metavar="OLD->NEW",
                        help="rename one legend label (repeatable), e.g. 'com32_to_2->2 (32)'")
    common.add_argument("--legend-title", default="", help="title of the legend, e.g. 'COM (starting COM)'")
    common.add_argument("--title", default="")
    common.add_argument("--xlabel", default="")
    common.add_argument("--ylabel", default="")
    common.add_argument("--logx", action="store_true")
    common.add_argument("--logy", nargs="*", default=None, metavar="METRIC",
                        help="log-scale y (curves: only the panels of the METRICs given, if any)")
    common.add_argument("--final-frac", type=float, default=0.1,
                        help="stat 'final' = the mean of the values (episodes) logged in the last FRAC of the run's "
                             "total steps (default 0.1)")
    common.add_argument("--band", choices=BANDS + ["minmax"], default="auto",
                        help="the band (curves) or error bar (sweep, heatmap CSV) over seeds: auto (default) = 95%% "
                             "Student-t CI from 5 seeds, the seeds' range below 5; range (minmax); bootstrap (95%% "
                             "percentile CI of the mean); ci95 (the range below 5 seeds); std; none. Clipped to the "
                             "metric's range (docs/pipeline.md#bands)")
    stats = ["final", "last", "max", "min", "mean"]

    p = sub.add_parser("curves", parents=[common], help="learning curves: mean and band over seeds (--band)")
    p.add_argument("--metric", nargs="+", required=True, help="metric tag(s); one row of panels each")
    p.add_argument("--x", default="global_step", help="global_step, iteration, wall_time or pct (%% of data)")
    p.add_argument("--smooth", type=int, default=1,
                   help="per run, a trailing rolling mean over this many logged steps (after averaging the values "
                        "logged at the same step), before the runs are interpolated onto one x grid")
    p.add_argument("--points", type=int, default=200, help="x grid size when runs log at different x")
    p.add_argument("--normalize", default="none", help="none or atari-human")
    p.add_argument("--hline", action="append", default=[], metavar="[METRIC=]VALUE[:LABEL]",
                   help="a dotted reference line (repeatable); METRIC= limits it to that metric's panels")
    p.add_argument("--hline-legend", default="reference",
                   help="legend entry of the reference lines whose LABEL is a series label (drawn in its colour)")
    p.add_argument("--ylim", nargs=2, type=float, default=None, metavar=("LOW", "HIGH"))
    p.add_argument("--ncols", type=int, default=3)
    p.add_argument("--metric-label", action="append", default=[], metavar="TAG=WORDS",
                   help="axis label and panel title of one metric in words, e.g. 'diagnostics/update_size=update size' "
                        "(repeatable; default: the tag)")
    p.add_argument("--style", action="append", default=[], metavar="LABEL=LINESTYLE",
                   help="line style of one series (- -- : -.), e.g. for runs that overlap (repeatable)")
    p.add_argument("--panel-by", nargs="*", default=[], metavar="KEY",
                   help="one panel per value of these config keys (and per env_id), e.g. num_envs (B26 Fig. 7)")
    p.add_argument("--sharey", action="store_true", help="every panel on one y scale (panels to be compared by eye)")
    p.add_argument("--palette", type=lambda text: text.split(","), default=[], metavar="LABEL,LABEL,...",
                   help="the labels of a page's whole grid, in order: each keeps that position's colour, so a figure "
                        "that shows some of them colours them as the figure that shows all")
    p.add_argument("--join-init-from", choices=["switch", "history"], default=None,
                   help="a run started with --init-from from another run's state (found among the runs, or at the "
                        "path it names) starts at that state: 'switch' adds the source's point at the start (B26 "
                        "Fig. 3a), 'history' the source's whole curve up to it (a run continued at the same settings)")

    p = sub.add_parser("iqm", parents=[common], help="IQM, median, mean with stratified bootstrap 95%% CIs")
    p.add_argument("--metric", required=True)
    p.add_argument("--stat", choices=stats, default="final", help="score of a run (default final)")
    p.add_argument("--normalize", default="none", help="none or atari-human")
    p.add_argument("--reps", type=int, default=50000,
                   help="bootstrap replicates (default 50000, rliable's: fewer let the CI endpoints wander with --seed)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--over-time", action="store_true", help="IQM at every x instead of one score per run")
    p.add_argument("--x", default="global_step")
    p.add_argument("--smooth", type=int, default=1)
    p.add_argument("--points", type=int, default=100)

    p = sub.add_parser("scatter", parents=[common], help="one dot per run (B26 Fig. 8)")
    p.add_argument("--x-metric", required=True)
    p.add_argument("--x-stat", choices=stats, default="mean")
    p.add_argument("--y-metric", required=True)
    p.add_argument("--y-stat", choices=stats, default="max")
    p.add_argument("--budget-iterations", default="", metavar="U1,U2,...",
                   help="budgets in updates (the iteration column of metrics.jsonl), e.g. 50,100,200: each run is "
                        "cut at each budget (its rows at or before that update) and gives one dot per budget, "
                        "coloured by budget (B26 Fig. 8 from one set of runs); a run shorter than a budget is left "
                        "out of it. Choose multiples of the runs' evaluation interval, so that each cut ends with an "
                        "evaluation as a run of that budget does")

    p = sub.add_parser("heatmap", parents=[common], help="per-cell mean over runs (B26 Fig. 12b)")
    p.add_argument("--rows", required=True, help="config key of the rows")
    p.add_argument("--cols", required=True, help="config key of the columns")
    p.add_argument("--metric", required=True)
    p.add_argument("--stat", choices=stats, default="final")

    p = sub.add_parser("sweep", parents=[common], help="a per-run score against a swept config value (B26 Figs. 4, "
                                                       "12a, 13, 14)")
    p.add_argument("--x-key", required=True, help="config key on the x axis, e.g. learning_rate, num_envs")
    p.add_argument("--metric", required=True)
    p.add_argument("--stat", choices=stats, default="final", help="score of a run (default final)")
    p.add_argument("--best-over", nargs="*", default=[], metavar="KEY",
                   help="config keys tuned away: the best value (highest mean score) at every point is shown")
    p.add_argument("--series", action="append", default=[], metavar="KEY=V1,V2:LABEL",
                   help="one line per filter instead of --group-by (repeatable; a run may be on several lines), "
                        "e.g. 'num_steps=32:grown through N'")
    p.add_argument("--reference-group", default="", metavar="LABEL",
                   help="the group (its legend label) drawn as a dotted reference line with its band, every other "
                        "line starting from its point (B26 Figs. 13-14: the base)")

    p = sub.add_parser("table", parents=[common], help="one row per task and configuration: every seed's score, mean, "
                                                       "IQM and interval (PREFIX.md and PREFIX.csv)")
    p.add_argument("--metric", default="charts/episodic_return",
                   help="metric tag (default charts/episodic_return, the episodic return)")
    p.add_argument("--stat", choices=stats, default="final", help="score of a run (default final)")
    p.add_argument("--interval", choices=["auto", "range", "bootstrap"], default="auto",
                   help="interval of the mean over seeds: auto (default) = the seeds' range below 5 seeds, a 95%% "
                        "percentile bootstrap from 5")
    p.add_argument("--normalize", default="none", help="none or atari-human")
    p.add_argument("--reps", type=int, default=10000, help="bootstrap replicates")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--digits", type=int, default=4, help="significant digits in the markdown table")

    p = sub.add_parser("kl-profile", parents=[common], help="H25 Figs. 2-3: seq and ref KL within an update "
                                                            "(kl_profile.jsonl)")
    p.add_argument("--at", nargs="+", type=float, default=[10.0, 50.0, 100.0], metavar="PCT",
                   help="phases of training shown: the profiled update nearest to each %% of the run's steps")
    p.add_argument("--dashed", nargs="*", default=[], metavar="LABEL",
                   help="settings (legend labels) drawn dashed, the others solid (H25 Fig. 3: 100x500 dashed)")
    p.add_argument("--select", choices=["best", "all"], default="best",
                   help="the best run of each setting (H25), or every run")
    p.add_argument("--select-metric", default="charts/episodic_return", help="what 'best' ranks runs by")
    p.add_argument("--select-stat", choices=stats, default="final")
    return parser.parse_args(argv)


def canonical_key(key: str) -> str:
    """A config key as config.json spells it: the launcher's and the scripts' flag spelling (learning-rate,
    --learning-rate) names the same field as learning_rate."""
    return key.lstrip("-").replace("-", "_")


def canonical_keys(args) -> None:
    """Every option that names config keys accepts either spelling."""
    for name in ("group_by", "panel_by", "best_over"):
        if getattr(args, name, None):
            setattr(args, name, [canonical_key(k) for k in getattr(args, name)])
    for name in ("x_key", "rows", "cols"):
        if getattr(args, name, None):
            setattr(args, name, canonical_key(getattr(args, name)))
    args.filter = [canonical_key(f.split("=", 1)[0]) + "=" + f.split("=", 1)[1] if "=" in f else f
                   for f in args.filter]


def default_table_keys(runs: list) -> list:
    """table without --group-by: one row per setup, i.e. grouped by every flag that differs between the runs."""
    keys = differing_flags(runs)
    if keys:
        print(f"table: grouped by {' '.join(keys)} (the flags that differ between the runs; --group-by chooses)",
              file=sys.stderr)
    return keys


def main(argv=None) -> int:
    args = parse_args(argv)
    canonical_keys(args)
    try:
        runs = load_runs(args.runs, parse_filters(args.filter), args.only_finished)
        if not args.keep_duplicates:
            runs = deduplicate(runs)
        if args.command == "table" and not args.group_by:
            args.group_by = default_table_keys(runs)
        grouping = Grouping(runs, args.group_by, args.label, parse_pairs(args.relabel, "--relabel", "OLD->NEW", "->"))
        if getattr(args, "smooth", 1) < 1:
            raise UsageError(f"--smooth must be >= 1 (got {args.smooth}); 1 = no smoothing")
        if getattr(args, "reps", 1) < 1:
            raise UsageError(f"--reps must be >= 1 (got {args.reps})")
        metric = args.metric[0] if isinstance(getattr(args, "metric", None), list) else getattr(args, "metric", "")
        name = metric or ("kl_profile" if args.command == "kl-profile" else f"{args.y_metric}_vs_{args.x_metric}")
        prefix = args.out or os.path.join("runs", "figures", f"{args.command}_{re.sub(r'[^A-Za-z0-9]+', '_', name)}")
        result = COMMANDS[args.command](args, runs, grouping)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    paths = _plots().save(result["fig"], prefix) if result["fig"] is not None else []  # table: no figure
    paths.append(write_csv(result["rows"], prefix))
    if "markdown" in result:
        paths.append(write_text(result["markdown"], f"{prefix}.md"))
        print(result["markdown"], end="")
    print(f"{len(runs)} runs -> " + ", ".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
