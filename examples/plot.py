#!/usr/bin/env python3
"""Redraw a dpbandits regret figure from summary.csv with pandas and matplotlib.

    python3 examples/plot.py results/fig4a            # writes results/fig4a/regret_mpl.png
    python3 examples/plot.py results/fig4a --log-y --out my.pdf

Assumes the tidy summary.csv of a regret experiment: one row per (configuration, checkpoint t),
one column per parameter, and the columns `label`, `kind`, `t`, `mean`, `q05`, `q95` (older
folders name the label column `policy`). Style as dpbandits' own figures: a colour, a line
pattern and a marker per curve (distinct in greyscale for up to 20 curves), the 5%-95% band
shaded, the legend outside the axes, full labels.
"""
import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

COLOURS = plt.get_cmap("tab10").colors + (
    "#000080", "#800000", "#006e6e", "#6e6e00", "#c800c8",
    "#00c878", "#4b0082", "#ffd700", "#ff0064", "#4682ff",
)
PATTERNS = ["-", "--", ":", (0, (11, 3))]
MARKERS = ["o", "s", "^", "x", "$\\circ$"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a dpbandits results folder")
    ap.add_argument("--out", type=Path, help="output file (default FOLDER/regret_mpl.png)")
    ap.add_argument("--log-y", action="store_true", help="log-scale y axis")
    a = ap.parse_args()

    df = pd.read_csv(a.folder / "summary.csv")
    if "label" not in df.columns and "policy" in df.columns:
        df = df.rename(columns={"policy": "label"})
    missing = {"label", "t", "mean", "q05", "q95"} - set(df.columns)
    if missing:
        print(f"{a.folder}/summary.csv: no column(s) {sorted(missing)}; "
              "this script draws regret experiments (BAI summaries have no t)", file=sys.stderr)
        return 2
    if "status" in df.columns:
        df = df[df["status"].fillna("ok") == "ok"]

    labels = list(dict.fromkeys(df["label"]))  # file order
    if len(labels) > 20:
        print(f"{len(labels)} curves: styles repeat after 20", file=sys.stderr)
    fig, ax = plt.subplots(figsize=(12, 6.4))
    for i, label in enumerate(labels):
        d = df[df["label"] == label].sort_values("t")
        c, ls, m = COLOURS[i % 20], PATTERNS[i % 4], MARKERS[i % 5]
        ax.fill_between(d["t"], d["q05"], d["q95"], color=c, alpha=0.12 if len(labels) <= 6 else 0.06,
                        linewidth=0)
        ax.plot(d["t"], d["mean"], color=c, linestyle=ls, marker=m, markevery=max(1, len(d) // 8),
                linewidth=1.8, label=label)
    ax.set_xscale("log")
    if a.log_y:
        ax.set_yscale("log")
    ax.set_xlabel("t")
    ax.set_ylabel("mean cumulative pseudo-regret")
    runs = f", {int(df['runs'].iloc[0])} runs" if "runs" in df.columns else ""
    ax.set_title(f"{a.folder.name}: mean cumulative pseudo-regret{runs}; band 5%-95% over runs")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=True)
    ax.grid(True, alpha=0.3)
    out = a.out or a.folder / "regret_mpl.png"
    fig.savefig(out, bbox_inches="tight", dpi=120)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
