"""The batch report's PNG plots (matplotlib, no display): speedups, turns to correct, the fast_p curve."""

from __future__ import annotations

from pathlib import Path

from kernelfix.agent.batch.report import FAST_P, Summary, TaskOutcome, fast_fraction
from kernelfix.base import atomic

SPEEDUP, TURNS, FAST_P_CURVE = "speedup.png", "turns_to_correct.png", "fast_p.png"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _not_timed(ax, what: str) -> None:
    ax.text(
        0.5,
        0.5,
        f"{what}: not timed\n(no task ran on a CUDA GPU)",
        ha="center",
        va="center",
        fontsize=13,
        transform=ax.transAxes,
    )
    ax.set_xticks([])
    ax.set_yticks([])


def _speedups(rows: list[TaskOutcome], key: str) -> list[float]:
    return [getattr(r, key) for r in rows if r.correct and r.timed and getattr(r, key) is not None]


def speedup_plot(plt, rows: list[TaskOutcome], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    eager, comp = _speedups(rows, "speedup_eager"), _speedups(rows, "speedup_compile")
    if not any(r.timed for r in rows):
        _not_timed(ax, "speedup")
    elif not eager:
        ax.text(0.5, 0.5, "no correct timed kernel", ha="center", va="center", transform=ax.transAxes)
    else:
        import numpy as np

        lo, hi = min(eager + comp), max(eager + comp)
        bins = np.geomspace(min(lo, 0.5) * 0.9, max(hi, 2.0) * 1.1, 25)
        ax.hist(eager, bins=bins, alpha=0.6, label=f"vs eager (n={len(eager)})")
        if comp:
            ax.hist(comp, bins=bins, alpha=0.6, label=f"vs torch.compile (n={len(comp)})")
        from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

        ax.set_xscale("log")
        ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64) if bins[0] <= t <= bins[-1]]
        ax.set_xticks(ticks)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}x"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.axvline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xlabel("speedup of the best correct kernel (log scale)")
        ax.set_ylabel("tasks")
        ax.legend()
    ax.set_title("Speedup distribution")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def turns_plot(plt, rows: list[TaskOutcome], path: Path) -> None:
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 4))
    counts: dict[int, int] = {}
    for r in rows:
        if r.turns_to_first_correct is not None:
            counts[r.turns_to_first_correct] = counts.get(r.turns_to_first_correct, 0) + 1
    never = sum(r.turns_to_first_correct is None for r in rows)
    top = max([*counts, 1])
    xs = list(range(0, top + 1))
    ax.bar([str(x) for x in xs], [counts.get(x, 0) for x in xs], color="tab:green", label="tasks")
    ax.bar(["never"], [never], color="tab:red")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("model turns to the first correct kernel")
    ax.set_ylabel("tasks")
    ax.set_title(f"Turns to first correct ({len(rows)} tasks)")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def fast_p_plot(plt, rows: list[TaskOutcome], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    if not any(r.timed for r in rows):
        _not_timed(ax, "fast_p")
    else:
        top = max([2.5, *(1.1 * s for s in _speedups(rows, "speedup_eager") + _speedups(rows, "speedup_compile"))])
        ps = [top * i / 200 for i in range(201)]
        for key, label in (("speedup_eager", "vs eager"), ("speedup_compile", "vs torch.compile")):
            ax.plot(ps, [fast_fraction(rows, key, p) for p in ps], label=label)
        for p in FAST_P[1:]:
            ax.axvline(p, color="grey", lw=0.6, ls=":")
        ax.set_xlabel("p (speedup threshold)")
        ax.set_ylabel("fast_p: fraction of tasks")
        ax.set_ylim(0, 1.02)
        ax.legend()
    ax.set_title("fast_p")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _save(fig, path: Path) -> None:
    with atomic.replacing(path) as f:  # a kill mid-render leaves the previous plot, not half a PNG
        fig.savefig(f, dpi=110, format="png")


def write_plots(out: Path, summary: Summary) -> list[str]:
    """The PNGs under OUT/plots; paths relative to OUT."""
    plt = _pyplot()
    d = out / "plots"
    d.mkdir(exist_ok=True)
    made = []
    for name, fn in ((SPEEDUP, speedup_plot), (TURNS, turns_plot), (FAST_P_CURVE, fast_p_plot)):
        fn(plt, summary.rows, d / name)
        made.append(f"plots/{name}")
    return made
