"""Figures: a legend that would be clipped fails the figure, whatever backend (or none) the caller has."""

from __future__ import annotations

from matplotlib.figure import Figure

from offload_lab.paper.figures import legend_problems


def _figure(**legend: object) -> Figure:
    fig = Figure(figsize=(4.0, 2.0), layout="constrained")
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], label="on each GPU")
    ax.plot([0, 1], [1, 0], label="in pinned host memory")
    ax.legend(**legend)
    return fig


def test_a_legend_inside_the_axes_or_above_them_passes() -> None:
    assert legend_problems(_figure(loc="upper left")) == []
    assert legend_problems(_figure(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2)) == []


def test_a_legend_past_the_figures_edge_fails_naming_it() -> None:
    fig = _figure(loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.axes[0].get_legend().set_in_layout(False)  # beside the axes, and the layout makes no room for it
    problems = legend_problems(fig)
    assert len(problems) == 1 and "'on each GPU'" in problems[0] and "clipped" in problems[0]


def test_a_legend_over_the_points_is_found_and_one_beside_them_is_not() -> None:
    from offload_lab.paper.figures import legend_covers

    def bars(loc: str) -> Figure:
        fig = Figure(figsize=(4.0, 2.0), layout="constrained")
        ax = fig.subplots()
        ax.bar(range(6), [5, 5, 5, 5, 5, 5], label="tokens/s")  # bars fill the axes: any inside legend covers one
        ax.axhline(1, color="black", gid="guide", label="bar")  # a guide may lie under a legend
        ax.legend(loc=loc) if loc != "beside" else ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        return fig

    covered = legend_covers(bars("center"))
    assert len(covered) == 1 and "'tokens/s'" in covered[0]
    assert legend_covers(bars("beside")) == []
