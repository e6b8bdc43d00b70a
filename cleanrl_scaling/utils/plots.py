"""Matplotlib drawing for cleanrl_scaling.utils.aggregate: curves with bands, interval estimates, scatter, heat maps.

Pure drawing: every function takes the numbers already computed (the same ones written to the CSV) and returns a
figure; `save` writes it as PNG and PDF.
"""
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 150, "axes.grid": True, "grid.alpha": 0.3,
                     "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
                     "pdf.fonttype": 42})


def colors(n: int) -> list:
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def compact_number(value: float, _position=None) -> str:
    """Tick labels that do not run into each other: 800000 -> 800k, 25000000 -> 25M, 0.5 stays 0.5."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def save(fig, prefix: str) -> list:
    """Write PREFIX.png and PREFIX.pdf; returns their paths."""
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    paths = [f"{prefix}.png", f"{prefix}.pdf"]
    for path in paths:
        fig.savefig(path, bbox_inches="tight", metadata={"CreationDate": None} if path.endswith(".pdf") else None)
    plt.close(fig)
    return paths


def _grid(n_panels: int, ncols: int, width: float = 4.6, height: float = 3.4, sharey: bool = False):
    ncols = max(1, min(ncols, n_panels))
    nrows = math.ceil(n_panels / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, sharey=sharey)
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def plot_curves(panels: list, labels: list, title: str = "", ncols: int = 3, logx: bool = False,
                hline_legend: str = "reference", styles: dict = None, palette: dict = None,
                legend_title: str = "", sharey: bool = False) -> plt.Figure:
    """panels: [{"title", "xlabel", "ylabel", "series": {label: (x, mean, lo, hi)}, "hlines": [(value, text)],
    "hbands": [(lo, hi, text)], "logy": bool, "marker": a matplotlib marker or None, "errorbars": bool}]; one colour
    per label across panels (palette: {label: colour} overrides); lo/hi may be None (no band). A series of one point,
    or any series of an "errorbars" panel, draws its band as error bars (a band over one x is invisible). styles:
    {label: matplotlib line keywords, e.g. {"ls": "--"}} (runs that would overlap stay distinguishable). A
    reference line whose text is a series label is drawn dotted in that series' colour (one legend entry,
    hline_legend, for all of them), with its band (hbands) shaded; any other is grey and annotated with its text.
    sharey: every panel on one y scale, its tick labels on the first column only."""
    fig, axes = _grid(len(panels), ncols, sharey=sharey)
    palette = {**dict(zip(labels, colors(len(labels)))), **(palette or {})}
    styles = styles or {}
    coloured_hline = False
    for ax, panel in zip(axes, panels):
        for label in labels:
            if label not in panel["series"]:
                continue
            x, mean, lo, hi = panel["series"][label]
            style = {"color": palette[label], "lw": 1.6, "marker": panel.get("marker"), "ms": 4,
                     **styles.get(label, {})}
            has_band = lo is not None and np.isfinite(lo).any()
            if has_band and (len(x) == 1 or panel.get("errorbars")):
                below, above = np.asarray(mean) - np.asarray(lo), np.asarray(hi) - np.asarray(mean)
                ax.errorbar(x, mean, yerr=np.clip(np.nan_to_num([below, above]), 0, None), label=label, capsize=3,
                            **{"marker": "o", **style})
                continue
            ax.plot(x, mean, label=label, **style)
            if has_band:
                ax.fill_between(x, lo, hi, color=palette[label], alpha=0.2, lw=0)
        for low, high, text in panel.get("hbands", ()):
            if np.isfinite(low) and np.isfinite(high):
                ax.axhspan(low, high, color=palette.get(text, "0.5"), alpha=0.12, lw=0)
        for value, text in panel.get("hlines", ()):
            if text in palette:
                ax.axhline(value, color=palette[text], ls=":", lw=1.4, alpha=0.9)
                coloured_hline = True
                continue
            ax.axhline(value, color="0.35", ls=":", lw=1.2)
            if text:
                ax.annotate(text, (1.0, value), xycoords=("axes fraction", "data"), xytext=(-2, 2),
                            textcoords="offset points", ha="right", va="bottom", fontsize=7, color="0.3")
        ax.set_title(panel.get("title", ""), fontsize=10)
        ax.set_xlabel(panel.get("xlabel", ""))
        ax.set_ylabel(panel.get("ylabel", ""))
        if logx:
            ax.set_xscale("log")
        else:
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(compact_number))
        if panel.get("logy"):
            ax.set_yscale("log")
        if panel.get("ylim"):
            ax.set_ylim(*panel["ylim"])
    handles, names = [], []
    for ax in axes:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            if name not in names:
                handles.append(handle)
                names.append(name)
    if coloured_hline:
        handles.append(plt.Line2D([], [], color="0.3", ls=":", lw=1.4))
        names.append(hline_legend)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    if handles:
        fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=9,
                   title=legend_title or None, title_fontsize=9)
    return fig


def plot_intervals(estimates: dict, labels: list, xlabel: str = "Human-normalised score") -> plt.Figure:
    """estimates: {aggregate name: {label: (point, lo, hi)}} -> one panel per aggregate, one bar per label
    (rliable's interval-estimate plot)."""
    names = list(estimates)
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 0.45 * len(labels) + 1.2), squeeze=False)
    palette = dict(zip(labels, colors(len(labels))))
    for ax, name in zip(axes[0], names):
        for i, label in enumerate(labels):
            point, lo, hi = estimates[name][label]
            ax.barh(i, hi - lo, left=lo, height=0.6, color=palette[label], alpha=0.75)
            ax.vlines(point, i - 0.3, i + 0.3, color="k", lw=1.5)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels if ax is axes[0][0] else [])
        ax.set_title(name, fontsize=11)
        ax.set_xlabel(xlabel)
        ax.invert_yaxis()
    fig.tight_layout()
    return fig


def plot_scatter(points: dict, labels: list, xlabel: str, ylabel: str, title: str = "", logx: bool = False,
                 logy: bool = False, legend_title: str = "") -> plt.Figure:
    """points: {label: (x array, y array)}; one colour per label (B26 Fig. 8: one dot per run)."""
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    for label, color in zip(labels, colors(len(labels))):
        x, y = points[label]
        ax.scatter(x, y, s=22, color=color, label=label, alpha=0.85, edgecolors="none")
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    if len(labels) > 1 or labels and labels[0]:
        ax.legend(title=legend_title or None, fontsize=8, title_fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def plot_heatmap(matrix: np.ndarray, row_labels: list, col_labels: list, row_name: str, col_name: str,
                 value_name: str, title: str = "", fmt: str = "{:.3g}") -> plt.Figure:
    """One annotated cell per (row, column) value pair (B26 Fig. 12b); NaN cells stay blank."""
    fig, ax = plt.subplots(figsize=(0.9 * len(col_labels) + 2.4, 0.6 * len(row_labels) + 1.6))
    masked = np.ma.masked_invalid(matrix)
    image = ax.imshow(masked, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(col_labels)))
    ax.set_xticklabels(col_labels)
    ax.set_yticks(range(len(row_labels)))
    ax.set_yticklabels(row_labels)
    ax.set_xlabel(col_name)
    ax.set_ylabel(row_name)
    ax.grid(False)
    finite = matrix[np.isfinite(matrix)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for i in range(matrix.shape[0]):
        for j in range(matrix.shape[1]):
            if np.isfinite(matrix[i, j]):
                ax.text(j, i, fmt.format(matrix[i, j]), ha="center", va="center", fontsize=8,
                        color="white" if matrix[i, j] < middle else "black")
    fig.colorbar(image, ax=ax, label=value_name)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
