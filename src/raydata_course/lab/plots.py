"""Figures for the lab: a memory timeline per variant and a stacked bar of where bytes sit."""

from __future__ import annotations

from pathlib import Path

from raydata_course.units import MiB

__all__ = ["plot_timeline", "plot_breakdown", "plot_memory_split", "plot_windows", "plot_waits", "plot_pull_vs_push"]


def plot_timeline(result: dict, path: str | Path | None = None, ax=None):
    """Actual object-store bytes vs Ray Data's belief vs its budget, over one run.

    Args:
        result: one run of ``results.json`` (a ``RunResult`` as a dict).
        path: save the figure there (PNG); not saved if None.
        ax: draw into this matplotlib axes; a new figure if None.

    Returns:
        The matplotlib axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4))
    t = result["timeline"]
    ax.plot(t["t_s"], [b / MiB for b in t["used_bytes"]], label="actual (plasma used)", color="black")
    ax.plot(t["believed_t_s"], [b / MiB for b in t["believed_bytes"]], label="Ray Data believes", color="tab:blue")
    ax.plot(t["hidden_t_s"], [b / MiB for b in t["hidden_bytes"]], label="pinned, no ObjectRef (hidden)",
            color="tab:red", linestyle="--")
    ax.axhline(result["budget_bytes"] / MiB, label="Ray Data budget", color="tab:green", linestyle=":")
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("MiB")
    ax.set_title(f"{result['variant']} (epoch {result['repeat']})")
    ax.legend(loc="upper right", fontsize=8)
    if path is not None:
        ax.figure.tight_layout()
        ax.figure.savefig(path, dpi=110)
    return ax


def plot_breakdown(summary_rows: list[dict], runs: list[dict], path: str | Path | None = None, ax=None):
    """Stacked bars at each variant's peak: what Ray Data counts, hidden batches, the rest.

    Args:
        summary_rows: ``results.json["summary"]``.
        runs: ``results.json["runs"]``; the run whose peak is the variant's median is used.
        path: save the figure there (PNG); not saved if None.
        ax: draw into this matplotlib axes; a new figure if None.

    Returns:
        The matplotlib axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4))
    names, believed, hidden, other, budgets = [], [], [], [], []
    for row in summary_rows:
        mine = [r for r in runs if r["variant"] == row["variant"]]
        run = min(mine, key=lambda r: abs(r["peak_bytes"] - row["peak_bytes_median"]))
        b = run["peak_breakdown"]
        names.append(row["variant"])
        believed.append(b["believed_bytes"] / MiB)
        hidden.append(b["hidden_bytes"] / MiB)
        other.append(b["other_bytes"] / MiB)
        budgets.append(row["budget_bytes"] / MiB)
    x = range(len(names))
    ax.bar(x, believed, label="Ray Data's usage (counted)", color="tab:blue")
    ax.bar(x, hidden, bottom=believed, label="hidden: pinned, no ObjectRef", color="tab:red")
    ax.bar(x, other, bottom=[a + b for a, b in zip(believed, hidden)],
           label="other (freed, not yet deleted; estimate error)", color="tab:gray")
    for i, budget in enumerate(budgets):
        ax.hlines(budget, i - 0.4, i + 0.4, color="tab:green", linestyle=":", label="budget" if i == 0 else None)
    ax.set_xticks(list(x), names)
    ax.set_ylabel("MiB at the measured peak")
    ax.legend(fontsize=8)
    if path is not None:
        ax.figure.tight_layout()
        ax.figure.savefig(path, dpi=110)
    return ax


def plot_memory_split(result: dict, ax):
    """Stacked memory of one run at its classified samples: referenced, pinned but
    unreferenced, freed but not yet deleted (the rest of plasma ``used``), with Ray
    Data's belief and its budget as lines, and the executor's own limit where the push split
    lowered it below the budget.

    Args:
        result: one run of ``results.json`` (a ``RunResult`` as a dict).
        ax: matplotlib axes to draw into.

    Returns:
        The axes.
    """
    t = result["timeline"]
    ts = t["hidden_t_s"]
    ref = [b / MiB for b in t["referenced_bytes"]]
    pinned = [b / MiB for b in t["hidden_bytes"]]
    used = [b / MiB for b in t.get("classified_used_bytes", [])] or ref
    freed = [max(0.0, u - r - p) for u, r, p in zip(used, ref, pinned)]
    ax.stackplot(ts, ref, pinned, freed, colors=["tab:blue", "tab:red", "tab:gray"], alpha=0.8,
                 labels=["referenced (an ObjectRef is alive)", "pinned, unreferenced",
                         "freed, not yet deleted"])
    ax.plot(t["believed_t_s"], [b / MiB for b in t["believed_bytes"]], color="black", linewidth=1,
            label="Ray Data believes")
    ax.axhline(result["budget_bytes"] / MiB, color="tab:green", linestyle=":", label="Ray Data budget")
    limits = t.get("limit_bytes") or []
    if any(0 < b < result["budget_bytes"] for b in limits):  # the push split lowered the executor's limit
        pts = [(x, b / MiB) for x, b in zip(t["believed_t_s"], limits) if b > 0]
        ax.step([x for x, _ in pts], [b for _, b in pts], where="post", color="tab:green", linewidth=0.8,
                label="the executor's limit")
    free_ms = result.get("free_objects_period_ms")
    setting = "lazy free, raylet default" if free_ms is None else f"free period {free_ms} ms"
    ax.set_title(f"{result['variant']} ({result.get('split', 'pull')}, {setting}, epoch {result['repeat']})",
                 fontsize=9)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("MiB")
    return ax


def plot_windows(result: dict, ax):
    """The push split's windows over one run: each consumer's window in batches, and the
    bytes the windows hold (the coordinator's refs), from the window controller's samples.

    Args:
        result: one push run of ``results.json`` (a ``RunResult`` as a dict).
        ax: matplotlib axes to draw into.

    Returns:
        The axes (with a twin axis for the held MiB).
    """
    t = result["timeline"]
    batch_rows = result["config"]["batch_rows"]
    windows = t.get("windows_rows") or []
    for i in range(len(windows[0]) if windows else 0):
        ax.step(t["window_t_s"], [w[i] / batch_rows for w in windows], where="post", label=f"consumer {i} window")
    ax.set_ylabel("window (batches)")
    ax.set_xlabel("seconds since the run started")
    ax.set_title(f"{result['variant']}: the adaptive windows (prefetch_batches="
                 f"{result['config']['prefetch_batches']} is the ceiling)", fontsize=9)
    held = ax.twinx()
    held.plot(t.get("window_t_s", []), [b / MiB for b in t.get("window_held_bytes", [])], color="tab:gray",
              linewidth=1, label="held by the windows (MiB)")
    held.set_ylabel("MiB held")
    lines = ax.get_legend_handles_labels()
    more = held.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper right", fontsize=7)
    return ax


def plot_waits(result: dict, ax, label: str = ""):
    """Each consumer's wait for each batch after its first over one run, at the batch's arrival,
    on the same time axis as the memory timeline (from ``timeline["waits"]``; nothing for older
    results); the title gives the stall fraction and the first batch's wait.

    Returns:
        The axes.
    """
    first = []
    for i, rank in enumerate(result.get("timeline", {}).get("waits") or []):
        # the first batch's wait is the execution's start; the title gives it, the bars the rest
        ax.vlines(rank["t_s"][1:], 0, rank["wait_s"][1:], colors=f"C{i}", linewidth=1.5, label=f"consumer {i}")
        first.extend(rank["wait_s"][:1])
    stall = result.get("stall_fraction")
    ax.set_title(f"{label or result['variant']}: waits after the first batch"
                 + ("" if stall is None else f" (D = {stall:.3f}")
                 + ("" if not first else f"; first after {max(first):.2f} s")
                 + ("" if stall is None else ")"), fontsize=9)
    ax.set_ylabel("wait s")
    ax.set_xlabel("seconds since the run started")
    ax.legend(loc="upper right", fontsize=7)
    return ax


def plot_pull_vs_push(pull: dict, push: dict, path: str | Path | None = None):
    """Pull and push timelines side by side, on one memory scale (see
    :func:`plot_memory_split`), under each its consumers' waits per batch on the same time
    axis (:func:`plot_waits`), and at the bottom the push split's windows
    (:func:`plot_windows`) when the push run recorded them.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    has_windows = bool(push.get("timeline", {}).get("windows_rows"))
    rows = 3 if has_windows else 2
    fig = plt.figure(figsize=(13, 9 if has_windows else 6))
    grid = fig.add_gridspec(rows, 2, height_ratios=[3, 1.4, 2][:rows])
    left = fig.add_subplot(grid[0, 0])
    right = fig.add_subplot(grid[0, 1], sharey=left)
    plot_memory_split(pull, left)
    plot_memory_split(push, right)
    right.legend(loc="upper right", fontsize=7)
    wait_left = fig.add_subplot(grid[1, 0], sharex=left)
    plot_waits(pull, wait_left, "pull")
    plot_waits(push, fig.add_subplot(grid[1, 1], sharex=right, sharey=wait_left), "push")
    if has_windows:
        plot_windows(push, fig.add_subplot(grid[2, :]))
    if path is not None:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    return fig
