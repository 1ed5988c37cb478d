"""The Reproduce page's contents: each paper's headline result that a benchmark suite already measures, the
paper's numbers beside the engine's, and the suite's quick version run in the background.

A reproduction runs the suite's own command line (``python -m engine bench SUITE --quick --json``) in a child
process, through the server's queue of quick runs (:mod:`engine.run.server._quickruns`: at most
``HEATMAP_REPRODUCE_RUNS`` at once for every session, a session's runs ended when it goes): the page shows
exactly what the command prints, its place in the queue, never blocks while it runs, and Cancel ends it (its
whole process group). The engine's numbers of the full suites are the ones recorded in BENCHMARKS.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import streamlit as st

from engine.run.server import QuickRuns

from . import uploads


@dataclass(frozen=True)
class Row:
    what: str
    paper: str  # the paper's number or finding, with where it is printed
    figure: str  # the figure's name in the suite's --json output
    recorded: str  # the full suite's value as BENCHMARKS.md records it
    scale: float = 1.0  # shown value = figure value x scale
    unit: str = ""
    digits: int = 3  # significant digits of a plain number


@dataclass(frozen=True)
class Paper:
    suite: str
    cite: str
    headline: str
    setting: str
    rows: tuple[Row, ...]
    quick: str  # what the quick version runs instead
    quick_s: (
        float  # seconds the quick version takes on an idle machine (its CPU time, 2026-11-28): the bar's first guess
    )

    def command(self, quick: bool = False) -> str:
        return f"python -m engine bench {self.suite}{' --quick' if quick else ''} --json"


PAPERS = (
    Paper(
        "bit_pushing",
        "Cormode, Markov, Srinivasan et al. 2024, Bit-pushing (numerical aggregation)",
        "Figure 1a and 1c: the mean's error without DP, and how it grows with the bit depth",
        "10-bit values, Normal(mean, σ = 100), means 100 … 900, NRMSE over 100 repetitions",
        (
            Row(
                "Adaptive NRMSE, n = 2,000, worst mean",
                "~3 % (Fig. 1a)",
                "fig1a adaptive NRMSE n=2000 (worst mean)",
                "3.93 % (Lemma 3.3 floor 3.39 %)",
                100,
                "%",
            ),
            Row(
                "Adaptive NRMSE, n = 10,000, worst mean",
                "~1 % (Fig. 1a)",
                "fig1a adaptive NRMSE n=10000 (worst mean)",
                "1.61 % (floor 1.52 %)",
                100,
                "%",
            ),
            Row(
                "Adaptive error growth, 8 → 32 bits",
                "flat (Fig. 1c)",
                "fig1c adaptive error growth 8->32 bits",
                "1.14×",
                1,
                "×",
            ),
            Row(
                "One-round weighted (α = 0.5) growth, 8 → 32 bits",
                "grows with the bits (Fig. 1c)",
                "fig1c weighted(alpha=0.5) error growth 8->32 bits",
                "51×",
                1,
                "×",
            ),
        ),
        "the same protocol with fewer means and repetitions",
        10,
    ),
    Paper(
        "adaptive_hh",
        "Bagdasaryan, Kairouz, Mellem et al. 2022, Towards sparse federated analytics: location heatmaps",
        "Table 1: MSE against the non-private map, and communication, at ε = 1, 100k users, S_max = 10,000",
        "synthetic cities at 1024² (the paper: the Manhattan population map); ratios to the non-private oracle level",
        (
            Row(
                "Ours (scheduled ε, adaptive T) / non-private MSE",
                "1.13× (6.99 / 6.19)",
                "all synthetic cities (ratios), 100k users | ours / non-private MSE",
                "2.96× (1.08× on the textured city)",
                1,
                "×",
            ),
            Row(
                "Flat one-hot / non-private MSE",
                "3.46× (21.40 / 6.19)",
                "all synthetic cities (ratios), 100k users | Flat one-hot MSE",
                "28.4×",
                1,
                "×",
            ),
            Row(
                "Hierarchical one-hot (best level) / non-private MSE",
                "1.25× (7.75 / 6.19)",
                "all synthetic cities (ratios), 100k users | Hierarchical one-hot (oracle level) MSE",
                "3.6×",
                1,
                "×",
            ),
            Row(
                "Ours: elements sent per client",
                "1,254",
                "all synthetic cities (ratios), 100k users | ours communication per client",
                "1,293",
                1,
                "",
            ),
            Row(
                "Ours with 10 % dropout / without",
                "1.004× (7.02 / 6.99)",
                "all synthetic cities (ratios), 100k users | ours 10% dropout (DP shard 9,000) / no dropout MSE",
                "≤ 1.003×",
                1,
                "×",
            ),
        ),
        "two cities and two seeds instead of four and five",
        25,
    ),
    Paper(
        "sparse_emd",
        "Ghazi, He, Kohlhoff, Kumar, Manurangsi, Navalpakkam, Singhal 2023, DP heatmaps (sparse EMD aggregation)",
        "Figure 1: SIM, CC, KL and EMD against the Laplace baseline and its top-t variants, 200 users, 256²",
        "ε 0.5 … 5 × 4 metrics = 16 points; a win beats the Laplace baseline and both top-t variants",
        (
            Row(
                "Figure 1 points won, synthetic cities",
                "ours ahead on every metric (Fig. 1)",
                "fig1/offline/wins",
                "14 of 16",
                1,
                "of 16",
            ),
            Row(
                "Figure 1 points won, check-in-like data",
                "ours ahead on every metric (Fig. 1)",
                "fig1/checkin/wins",
                "15 of 16",
                1,
                "of 16",
            ),
            Row(
                "EMD at ε = 1, check-in-like data (side units)",
                "ours below every baseline (Fig. 1)",
                "fig1/checkin/eps=1/EMD",
                "0.075 (Laplace 0.235)",
                1,
                "",
            ),
        ),
        "fewer runs per point (8 instead of 60)",
        70,
    ),
    Paper(
        "rff_kde",
        "Zong, Lin, Kenthapadi et al. 2023, Federated RFF kernel density estimation",
        "Figures 10–12: utility (Spearman) and the localisation attack's error, mixture (a), N = 20,000",
        "128², bandwidth 550 m, 500 attacked users; privacy as a share of the 0-feature attacker's error",
        (
            Row("Spearman of RFF KDE, B = 1", "close to 0.9 (Fig. 10)", "a/spearman_B1_N20000", "0.988", 1, ""),
            Row(
                "Privacy, B = 1 / 0 features",
                "close to 1 (Fig. 11)",
                "a/privacy_B1_over_0features_N20000",
                "0.906",
                1,
                "×",
            ),
            Row(
                "Privacy, federated KDE / 0 features",
                "near 0: the exact KDE gives the user away",
                "a/federated_kde_privacy_over_0features",
                "0.0067",
                1,
                "×",
            ),
            Row(
                "RFF above geo-indistinguishability (B compared)",
                "RFF ahead (Fig. 12)",
                "a/N20000/rff_above_geoind",
                "4 of 4",
                1,
                "of 4",
            ),
        ),
        "2 seeds and N = 20,000 only",
        35,
    ),
    Paper(
        "snh",
        "Zeighami, Ahuja, Ghinita, Shahabi 2022, Spatial Neural Histograms (SNH)",
        "Figures 6–7: relative error of range queries against the best of UG, AG and PrivTree, ε = 0.2, n = 100k",
        "square queries of 0.5–2 % of the side, ψ = 0.1 % of n; ratio SNH / best baseline (below 1: SNH better)",
        (
            Row(
                "SNH / best baseline, polycentric, centres on data",
                "0.5–1 (up to 50 % better)",
                "ratio_snh_best_baseline[polycentric,data]",
                "0.74",
                1,
                "×",
            ),
            Row(
                "SNH / best baseline, polycentric, uniform centres",
                "0.5–1 (up to 50 % better)",
                "ratio_snh_best_baseline[polycentric,unif]",
                "0.94",
                1,
                "×",
            ),
        ),
        "one seed, the polycentric city only, a shorter SNH training",
        55,
    ),
    Paper(
        "dpbench",
        "Hay, Machanavajjhala, Miklau, Chen, Zhang 2016, Principled evaluation of differentially private algorithms "
        "using DPBench (and its DPComp findings)",
        "The 2-D findings: data-dependent methods ahead at small scale, data-independent ones catching up at large "
        "scale, many methods beaten by Identity there",
        "DPBench's six 2-D datasets at 256², 10³ … 10⁷ points, ε 0.1, 1, 10, 2,000 random rectangles, scaled L1; "
        "average regret (1: the best in every setting); data-independent: Identity, HDMM, Privelet, QuadTree",
        (
            Row(
                "DAWA's average regret, 10³–10⁴ points",
                "among the best at small scale",
                "finding/dawa_best_at_small_scale",
                "1.22, the lowest of 14 (PrivTree 1.64, AG 1.87)",
            ),
            Row(
                "Best data-independent / best data-dependent regret, 10³–10⁴",
                "data-dependent ahead (above 1)",
                "finding/independent_over_dependent/small",
                "6.19× (HDMM 7.56 / DAWA 1.22)",
                1,
                "×",
            ),
            Row(
                "Best data-independent / best data-dependent regret, 10⁶–10⁷",
                "data-independent catching up (towards 1)",
                "finding/independent_over_dependent/large",
                "2.19× (HDMM 2.38 / DAWA 1.09)",
                1,
                "×",
            ),
            Row(
                "Best data-independent / best data-dependent regret, 10⁷ alone",
                "data-independent dominate at large scale (1 or below)",
                "finding/independent_over_dependent/n=10^7",
                "2.10× (HDMM 2.36 / DAWA 1.13)",
                1,
                "×",
            ),
            Row(
                "Methods with a larger regret than Identity, 10⁶–10⁷",
                "many, in 1-D and 2-D",
                "finding/beaten_by_identity/large",
                "6 of 13",
                1,
                "of 13",
            ),
        ),
        "cabspottingS only (the bundled cholera map when DPBench's data are absent), 10³, 10⁴ and 10⁷ points, "
        "ε = 1, 2 trials",
        16,
    ),
    Paper(
        "hdmm",
        "McKenna, Miklau, Hay, Machanavajjhala 2018, Optimizing error of high-dimensional statistical queries under "
        "differential privacy (HDMM)",
        "The published figure of its authors' code: the RMSE of all range queries under its optimised p-Identity "
        "strategy",
        "256 × 256 (1-D: 256 cells), p = 16 per axis, ε = √2 (Laplace variance 2/ε² = 1), expected RMSE per query, "
        "data-free",
        (
            Row(
                "All 2-D ranges, 256 × 256: RMSE per query",
                "32.69 (README)",
                "readme/all_2d_ranges_rmse",
                "32.43",
                digits=4,
            ),
            Row(
                "All 1-D ranges, 256 cells: RMSE per query",
                "5.736 (README)",
                "readme/all_1d_ranges_rmse",
                "5.695",
                digits=4,
            ),
        ),
        "the same reproduction; the bound's workloads on 64 × 64 and fewer timed runs",
        8,
    ),
)
BY_SUITE = {p.suite: p for p in PAPERS}


def shown(value, row: Row) -> str:
    """A figure's value the way the page shows it (its unit, a few significant digits)."""
    if value is None:
        return "n/a"
    try:
        v = float(value) * row.scale
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(v):
        return "n/a"
    if row.unit.startswith("of "):
        return f"{v:.0f} {row.unit}"
    if row.unit == "×":
        return f"{v:.4g}×"
    if row.unit == "%":
        return f"{v:.2f} %"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.{row.digits}g}"


def table(paper: Paper, figures: dict | None):
    """The paper's numbers beside the engine's: recorded by the full suite, and those of this quick run."""
    import pandas as pd

    rows = []
    for r in paper.rows:
        row = {"Quantity": r.what, "Paper": r.paper, "Engine, full suite (BENCHMARKS.md)": r.recorded}
        if figures is not None:
            f = figures.get(r.figure)
            row["Engine, this quick run"] = shown(f.get("value"), r) if f else "not in the quick run"
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------- background runs
@st.cache_resource(show_spinner=False)
def queue() -> QuickRuns:
    """The server's quick runs; a session released by the upload store takes its runs with it."""
    q = QuickRuns()
    uploads.store().on_release(q.drop_owner)
    return q


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
