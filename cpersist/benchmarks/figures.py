"""The run's figures (matplotlib, PNG): storage bars and Pareto fronts per
dataset."""

import math
import os

from .output import as_float as _f, safe_name as _safe


def _plt():
    import matplotlib
    matplotlib.use("Agg")  # files only, no display needed (CI, servers)
    import matplotlib.pyplot as plt
    return plt


_FAMILY_COLORS = {
    "cpersist": "tab:red", "numpy": "tab:blue", "pickle": "tab:gray", "joblib": "tab:green",
    "tables": "tab:purple", "nibabel": "tab:orange", "blosc2": "tab:cyan", "zarr": "tab:olive",
    "h5py": "tab:brown", "safetensors": "tab:pink",
}


def _minor_label(v, _pos=None):
    """Label the 2x and 5x minor ticks of a log axis in plain numbers."""
    if v <= 0:
        return ""
    lead = round(v / 10 ** math.floor(math.log10(v)), 6)
    return f"{v:g}" if lead in (2.0, 5.0) else ""


#: One colour per level, the same in every chart; distinct for the levels
#: runs use (0 grey: raw; red is kept for failed methods).
LEVEL_COLORS = {0: "#9e9e9e", 1: "#1f77b4", 2: "#17becf", 3: "#2ca02c", 4: "#bcbd22",
                5: "#9467bd", 6: "#ff7f0e", 7: "#8c564b", 8: "#e377c2", 9: "#17184b"}


def bar_figure(plt, rows, key, ylabel, title, log):
    """One horizontal bar per (method, level) of ``rows``, coloured by level
    (legend in level order); method names whole on the left, one line each.
    Methods whose rows all failed are listed with a red "failed" mark."""
    from matplotlib.patches import Patch
    methods = list(dict.fromkeys(r["method"] for r in rows))
    ok = [r for r in rows if r.get("status") == "ok"]
    levels = sorted({int(r["level"]) for r in ok if str(r["level"]) != ""})
    fig, ax = plt.subplots(figsize=(9.0, 1.3 + 0.22 * len(methods)))
    failed = []
    values = [v for v in (_f(r[key]) for r in ok) if v is not None]
    for i, m in enumerate(methods):
        mrows = sorted((r for r in ok if r["method"] == m), key=lambda r: int(r["level"]))
        if not mrows:
            failed.append(i)
            continue
        height = 0.8 / len(mrows)
        for j, r in enumerate(mrows):
            v = _f(r[key])
            if v is None:
                continue
            y = i + (j - (len(mrows) - 1) / 2) * height
            ax.barh(y, max(v, 1e-9) if log else v, height=height * 0.95,
                    color=LEVEL_COLORS.get(int(r["level"]), "black"))
    ax.set_yticks(range(len(methods)))
    ax.set_yticklabels(methods, fontsize=8)
    for i in failed:
        ax.get_yticklabels()[i].set_color("tab:red")
        ax.annotate("failed (see the CSV 'reason')", (0.01, i), xycoords=("axes fraction", "data"),
                    va="center", fontsize=7, color="tab:red")
    ax.set_ylim(len(methods) - 0.5, -0.5)  # first method on top
    if log:
        from matplotlib.ticker import FuncFormatter
        ax.set_xscale("log")
        if values:
            ax.set_xlim(min(values) / 1.5, max(values) * 1.5)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(_minor_label))
        ax.tick_params(axis="x", which="minor", labelsize=6)
    ax.set_xlabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=LEVEL_COLORS.get(lv, "black"), label=f"level {lv}") for lv in levels]
    handles += [Patch(color="tab:red", label="failed")] if failed else []
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0),
              borderaxespad=0.0)
    # Fixed margins instead of tight_layout: it measures every tick label
    # and doubles the time per figure (dozens of figures per run).
    width, tall = fig.get_figwidth(), fig.get_figheight()
    longest = max([len(str(m)) for m in methods] + [8])
    fig.subplots_adjust(left=min(0.45, (0.25 + 0.075 * longest) / width), right=1.0 - 1.0 / width,
                        top=1.0 - 0.45 / tall, bottom=0.6 / tall)
    return fig


def _place_labels(ax, pts, labels, front, fontsize=6):
    """Label points without overlaps: each label tries a few positions around
    its point (Pareto-front points first) and takes the first free one; a
    label with no free position is left out and counted."""
    fig = ax.figure
    fig.canvas.draw()
    to_px = ax.transData.transform
    char_w, line_h = fontsize * 0.62 * fig.dpi / 72, fontsize * 1.25 * fig.dpi / 72
    boxes, skipped = [], 0
    order = list(front) + [i for i in range(len(pts)) if i not in set(front)]
    for i in order:
        x, y = to_px(pts[i])
        w = char_w * len(labels[i])
        for dx, dy in ((4, 3), (4, -line_h - 2), (-w - 4, 3), (-w - 4, -line_h - 2),
                       (4, line_h + 4), (4, -2 * line_h - 4), (-w / 2, line_h + 5),
                       (-w / 2, -2 * line_h - 5)):
            box = (x + dx, y + dy, x + dx + w, y + dy + line_h)
            if any(not (box[2] < b[0] or box[0] > b[2] or box[3] < b[1] or box[1] > b[3])
                   for b in boxes):
                continue
            boxes.append(box)
            ax.annotate(labels[i], pts[i], xytext=(dx * 72 / fig.dpi, dy * 72 / fig.dpi),
                        textcoords="offset points", fontsize=fontsize,
                        color="black" if i in front else "dimgray")
            break
        else:
            skipped += 1
    return skipped


def _pareto_front(points):
    """Indices of points not dominated (higher speed and higher ratio win)."""
    front = [i for i, (x, y) in enumerate(points)
             if not any((x2 >= x and y2 >= y) and (x2 > x or y2 > y) for x2, y2 in points)]
    return sorted(front, key=lambda i: points[i][0])


def plot_pareto(rows, path, title=""):
    """Ratio-vs-speed scatter of one dataset's (method, level) points: write
    throughput on the left, read on the right, the Pareto front joined."""
    plt = _plt()
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ok = [r for r in rows if r.get("status") == "ok"]
    fig, axes = plt.subplots(1, 2, figsize=(15, 7.5), sharey=True)
    fams_seen = []
    for ax, key, label in ((axes[0], "write_MBps", "write"), (axes[1], "read_MBps", "read")):
        pts, labels, fams = [], [], []
        for r in ok:
            x, y = _f(r[key]), _f(r["ratio"])
            if x and y:
                pts.append((x, y))
                labels.append(f"{r['method']} L{r['level']}")
                fams.append(r["family"])
        for fam in dict.fromkeys(fams):
            idx = [i for i, f in enumerate(fams) if f == fam]
            ax.scatter([pts[i][0] for i in idx], [pts[i][1] for i in idx], s=22,
                       color=_FAMILY_COLORS.get(fam, "black"), label=fam, alpha=0.8)
        fams_seen = fams_seen or list(dict.fromkeys(fams))
        front = _pareto_front(pts) if pts else []
        if front:
            ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "k--", lw=0.8, alpha=0.6)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{label} throughput, MB/s of uncompressed data")
        ax.grid(alpha=0.3)
        unlabelled = _place_labels(ax, pts, labels, front) if pts else 0
        ax.set_title(f"ratio vs {label} speed (Pareto front dashed, its labels in black"
                     + (f"; {unlabelled} crowded points unlabelled" if unlabelled else "") + ")",
                     fontsize=9)
    axes[0].set_ylabel("compression ratio (in-memory / on-disk)")
    if fams_seen:
        fig.legend(*axes[0].get_legend_handles_labels(), fontsize=7, loc="lower center",
                   ncol=min(len(fams_seen), 10), frameon=False)
    bad = [f"{r['method']} L{r['level']}" for r in rows if r.get("status") == "failed"]
    if bad:
        fig.text(0.01, 0.005, "failed, not shown: " + ", ".join(bad), fontsize=7, color="tab:red")
    fig.suptitle(title or "Pareto view", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_storage(rows, out_dir):
    """Per dataset of the storage rows: disk, write and read bar charts and the
    Pareto scatter (``ok`` rows drawn, ``failed`` ones marked); the paths of the
    PNG files written to ``out_dir``."""
    plt = _plt()
    os.makedirs(out_dir, exist_ok=True)
    paths, by_ds = [], {}
    for r in rows:
        if r.get("status") in ("ok", "failed"):
            disk_mb = (_f(r["disk_bytes"]) or 0) / 1e6
            by_ds.setdefault(r["dataset"], []).append(dict(r, disk_MB=disk_mb))
    for name, rs in by_ds.items():
        if not any(r.get("status") == "ok" for r in rs):
            continue
        cache = rs[0].get("cache", "")
        sub = f"{name} ({(_f(rs[0]['size_bytes']) or 0) / 1e6:.3g} MB in memory)"
        # Disk sizes linear: those of one dataset are comparable and bars must start at 0.
        for chart, key, label, title, log in (
                ("disk", "disk_MB", "disk size, MB", "disk size", False),
                ("write", "write_s", "write time, s (median)", "write time", True),
                ("read", "read_s", f"read time, s (median, {cache} cache)",
                 f"read time ({cache} cache; mmap rows touch every byte)", True)):
            fig = bar_figure(plt, rs, key, label, f"{sub}: {title}", log)
            paths.append(os.path.join(out_dir, f"{_safe(name)}_{chart}.png"))
            fig.savefig(paths[-1], dpi=90)
            plt.close(fig)
        paths.append(plot_pareto(rs, os.path.join(out_dir, f"{_safe(name)}_pareto.png"),
                                 f"{sub}: compression ratio against speed"))
    return paths
