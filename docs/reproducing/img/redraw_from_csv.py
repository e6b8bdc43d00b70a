"""Redraw the figures of docs/reproducing/ whose fixes are cosmetic, from the CSVs committed next to them.

    python docs/reproducing/img/redraw_from_csv.py            # rewrites the PNGs listed in FIGURES

The raw runs behind these figures are gone, so a figure is redrawn from the numbers its script wrote (mean, lo, hi
per point; per run for the coverage and KL-profile CSVs) with the layout its benchmark script now asks for: the
same drawing code (cleanrl_scaling.utils.plots, aggregate.draw_kl_profile, coverage.mean_band). A band stays the one
the CSV holds; the pages say which. A figure script run on new runs draws the same figure from run directories.
"""
import os
import sys

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))  # the repository root: run as a script, not as a module
from cleanrl_scaling.utils import aggregate, coverage, plots  # noqa: E402
RECIPES = ["none", "hybrid", "larger-minibatches", "more-minibatches", "sqrt-lr"]  # B26 Fig. 9's colour order
OLD_T = "the committed band: a 95% t-CI of 3 seeds"


def read(name: str) -> pd.DataFrame:
    return pd.read_csv(os.path.join(HERE, name))


def series_of(frame: pd.DataFrame, x: str = "x") -> tuple:
    frame = frame.sort_values(x)
    return tuple(frame[c].to_numpy(dtype=float) for c in (x, "mean", "lo", "hi"))


def save(fig, name: str) -> None:
    prefix = os.path.join(HERE, name)
    fig.savefig(f"{prefix}.png", bbox_inches="tight")
    plots.plt.close(fig)
    print("wrote", f"{prefix}.png")


def curves(name: str, title: str, ylabel: str, relabel: dict = None, styles: dict = None, legend_title: str = "",
           panel_by: str = "", xlabel: str = "environment steps", ncols: int = 3, frame=None) -> None:
    """A curves figure from its CSV: one panel per task (and per panel_by value), one line per group."""
    frame = read(f"{name}.csv") if frame is None else frame
    relabel = relabel or {}
    frame["group"] = [relabel.get(g, g) for g in frame["group"]]
    labels = list(dict.fromkeys(relabel.values())) or list(dict.fromkeys(frame["group"]))
    labels += [g for g in dict.fromkeys(frame["group"]) if g not in labels]
    keys = ["env_id"] + ([panel_by] if panel_by else [])
    panels = []
    for key, part in frame.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        panel_title = key[0] + (f", {panel_by}={key[1]}" if panel_by else "")
        panels.append({"title": panel_title, "xlabel": xlabel, "ylabel": ylabel,
                       "series": {g: series_of(p) for g, p in part.groupby("group")}})
    save(plots.plot_curves(panels, labels, title, ncols, styles=styles, legend_title=legend_title), name)


def sweep(name: str, frame: pd.DataFrame, x: str, title: str, xlabel: str, ylabel: str, reference: str) -> None:
    """B26 Figs. 13-14 and M25 Fig. 8 as `aggregate sweep --reference-group` draws them: the reference group a dotted
    line with its band, every other line starting from the reference point, error bars at every point."""
    labels = [g for g in RECIPES if g in set(frame["group"])] or list(dict.fromkeys(frame["group"]))
    panel = {"title": frame["env_id"].iloc[0], "xlabel": xlabel, "ylabel": ylabel, "series": {}, "marker": "o",
             "errorbars": True, "hlines": [], "hbands": []}
    base = frame[frame["group"] == reference] if reference in labels else None
    if base is not None and len(base):
        row = base.iloc[0]
        panel["hlines"].append((row["mean"], reference))
        panel["hbands"].append((row["lo"], row["hi"], reference))
    for group, part in frame.groupby("group", sort=False):
        if group == reference:
            continue
        if base is not None and len(base) and base.iloc[0][x] not in set(part[x]):
            part = pd.concat([base.assign(group=group), part])
        panel["series"][group] = series_of(part, x)
    if reference not in labels:
        labels = [reference] + labels
    fig = plots.plot_curves([panel], labels, title, 1, True, f"{reference} (the base)")
    save(fig, name)


def b26_mujoco(env_id: str) -> None:
    curves(f"beukman2026_fig10_mujoco_{env_id}", f"B26 Fig. 10 on MuJoCo: few large minibatches (Singla et al.) "
           f"against B26's recipe ({OLD_T})", "episodic return", panel_by="num_envs", ncols=2,
           frame=fig10_panels(env_id))
    for fig, metric, ylabel in (("13", "charts/SPS", "steps per second (one core)"), ("14", "charts/episodic_return",
                                                                                       "final return")):
        frame = read(f"beukman2026_fig{fig}_mujoco_{env_id}.csv")
        what = "training steps per second" if fig == "13" else "final return"
        sweep(f"beukman2026_fig{fig}_mujoco_{env_id}", frame, "num_envs",
              f"B26 Fig. {fig} on MuJoCo: {what} against N, every recipe from the base\n({OLD_T}, as error bars)",
              "parallel environments", ylabel, "none")
    frame = pd.concat([read(f"mayor2025_fig8_mujoco_by_{arm}_{env_id}.csv") for arm in ("n", "t")])
    base = frame[frame["batch_size"] == frame["batch_size"].min()].iloc[:1].assign(group="N = 64, T = 32")
    frame = pd.concat([base, frame[frame["batch_size"] > frame["batch_size"].min()]])
    frame["group"] = frame["group"].str.replace("through", "grown through")
    sweep(f"mayor2025_fig8_mujoco_by_batch_{env_id}", frame, "batch_size",
          f"M25 Fig. 8 on MuJoCo: the batch grown through N or through T\n({OLD_T}, as error bars)", "batch N x T",
          "final return", "N = 64, T = 32")


def fig10_panels(env_id: str) -> pd.DataFrame:
    """Fig. 10's CSV names N in the group label only (the script now draws --panel-by num_envs): read it from there."""
    frame = read(f"beukman2026_fig10_mujoco_{env_id}.csv")
    frame["num_envs"] = frame["group"].str.extract(r"N=(\d+)")[0].astype(int)
    return frame


def coverage_curve(game: str) -> None:
    """M25 Fig. 2's coverage against steps from the per-run CSV: the seeds' range (2 seeds), in [0, 1]."""
    frame = read(f"mayor2025_fig2_coverage_{game}.csv")
    fig, ax = plots.plt.subplots(figsize=(5.5, 3.6))
    configs = list(dict.fromkeys(frame["config"]))
    for config, color in zip(configs, plots.colors(len(configs))):
        part = frame[frame["config"] == config]
        steps = sorted(set(part["global_step"]))
        stats = [coverage.mean_band(part[part["global_step"] == s]["coverage"].tolist()) for s in steps]
        mean, lo, hi = (np.array(v) for v in zip(*stats))
        ax.plot(steps, mean, color=color, label=config)
        ax.fill_between(steps, lo, hi, color=color, alpha=0.2, linewidth=0)
    ax.set_xlabel("global step")
    ax.set_ylabel("coverage (cumulative, fraction of cells)")
    ax.set_title(f"M25 Fig. 2: {game}, coverage at N x T = 1024 (mean and range, 2 seeds)", fontsize=10)
    ax.legend(fontsize=8)
    save(fig, f"mayor2025_fig2_coverage_{game}")


def kl_profiles() -> None:
    for name, title, dashed in (
            ("honari2025_fig2", "H25 Fig. 2: KL within one update, best run per setting",
             ["500x100 : 1000-sample minibatches"]),
            ("honari2025_fig3", "H25 Fig. 3: KL within one update, best run per setting", ["100x500"])):
        rows = pd.read_csv(os.path.join(HERE, f"{name}.csv.gz")).to_dict("records")
        title += " (line style: setting; colour: phase of training)"
        save(aggregate.draw_kl_profile(rows, title, dashed=dashed), name)


def main() -> int:
    com = {f"com{a}": f"{a}" for a in (2, 32)}
    com.update({f"com{a}_to_{b}": f"{b} ({a})" for a in (2, 32) for b in (2, 32)})
    dashed = {label: {"ls": "--"} for key, label in com.items() if "_to_" in key}
    for name, ylabel in (("beukman2026_fig3a_658a311", "solve rate"),  # the grid of commit 658a311
                         ("beukman2026_fig3a_658a311_train", "solve rate, training episodes")):
        curves(name, ("B26 Fig. 3a: reloaded with another COM" if not name.endswith("_train") else
                      "B26 Fig. 3a from the training episodes") + " (mean and range over seeds)", ylabel, relabel=com,
               styles=dashed, legend_title="COM (starting COM)")
    curves("beukman2026_fig1a_658a311", "B26 Fig. 1a: PPO-EWMA, too low a COM plateaus (mean and range over seeds)",
           "solve rate")  # the grid of commit 658a311
    for env_id in ("Ant-v4", "Humanoid-v4"):
        b26_mujoco(env_id)
    coverage_curve("Qbert-v5")
    kl_profiles()
    return 0


if __name__ == "__main__":
    sys.exit(main())
