"""Method pages generated from ``Mechanism.describe()``."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from engine.core.errors import Cancelled, EngineError
from engine.mechanisms import registry

FAMILY_TEXT = {
    "none": "no privacy (reference)",
    "central": "central DP: a trusted curator sees the data and adds noise",
    "distributed": "distributed DP: devices add noise shares; secure aggregation hides individual reports",
    "local": "local DP: each device randomises its own report",
    "federated": "federated: devices answer the server's queries about their own data",
}


# SNH against its own grid and the best of UG, AG and PrivTree at the paper's eps 0.2 (BENCHMARKS.md, "snh").
SNH_EVIDENCE = (
    "on the four synthetic cities at ε 0.2 (100,000 points, query sides 0.5-2%), against UG and AG at the sizes "
    "their error model chooses, SNH's error was 0.73-0.82x the best of UG, AG and PrivTree with query centres on "
    "data points but 1.03-1.15x with uniform centres (1.43x and 1.71x on SF cabs, where PrivTree is best); its own "
    "noisy grid answered directly (IDENTITY@ParamSelect) was 0.95-1.02x SNH's error with data-point centres and "
    "1.04-1.16x with uniform centres: the network adds little accuracy to its grid, mostly compact answers"
)

# Which mechanism for what, from this project's own measurements (BENCHMARKS.md; the command behind each row).
GUIDE = [
    (
        "A trusted curator holds the locations; few of them (about 10,000 or fewer)",
        "AG (adaptive grid), or PrivTree",
        "AG's error is 0.41-0.83x UG's at 10^4 points, ε 0.1, on all four datasets tested (hot-spot city, "
        "SF cabs, Berlin, Snow)",
        "central",
    ),
    (
        "Range queries over a known range of sizes, data from a public workload (SNH)",
        "SNH, or its own noisy grid (IDENTITY@ParamSelect)",
        SNH_EVIDENCE,
        "snh",
    ),
    (
        "A trusted curator; range queries (how many people in this rectangle?)",
        "Hierarchical histogram (HB default)",
        "its leaves sized from a noisy count, rectangles answered from its unbiased least-squares leaves (the map "
        "drawn is their non-negative share-out): 0.24x (ε 0.1) and 0.73x (ε 1) the error of the best "
        "fixed-branching tree at full height at 10^4 points; the drawn map's own sums had 1.02-1.83x that error in "
        "14 of 16 settings",
        "central",
    ),
    (
        "A trusted curator; many rectangles answered with an error known before any data is read",
        "HDMM (workload-optimised matrix mechanism)",
        "on all the rectangles of a 256 x 256 map its expected RMSE is 0.38x Identity's (45.9 against 121.6 at ε 1) "
        "and 3.9x the SVD lower bound, under which no ε-DP matrix mechanism can go (it reproduces its authors' "
        "published 32.69: 32.43); in `bench dpbench`, on DPBench's data at 10^6-10^7 points, the best data-independent "
        "method (average regret 2.38, the hierarchical tree 3.20), though DAWA stays ahead (1.09) and is far ahead on "
        "small samples",
        "hdmm",
    ),
    (
        "No trusted curator: phones send noisy shares through secure aggregation",
        "Adaptive hierarchical histograms",
        "1,293 numbers per phone (flat one-hot: 1,048,576) and 9.6x lower error than flat one-hot on the "
        "synthetic cities",
        "adaptive_hh",
    ),
    (
        "No trusted party at all, not even secure aggregation: each phone randomises its own location (local DP)",
        "HDG (hybrid-dimensional grids)",
        "on four synthetic cities (10^4 to 10^6 users, ε 0.5 to 4) its range-query error is a median 0.58x the best "
        "local DP grid's (lower in 45 of 48 settings; EMD 0.57x, lower in 43), on SF cab pick-ups 0.63x (lower in "
        "12 of 12; EMD 0.28x); Adaptive HH, which trusts secure aggregation, has about a tenth of HDG's error",
        "local",
    ),
    (
        "Where people are, judged by how far they would have to move (EMD), with few people per region",
        "Sparse EMD aggregation",
        "wins EMD and correlation against Laplace and both top-t baselines at every ε from 0.5 to 5; 16 of 16 "
        "comparisons on real SF cab pick-ups",
        "sparse_emd",
    ),
    (
        "An attribute's mean per region (e.g. age), each phone randomising its own bits",
        "Bit-pushing with randomized response (LDP)",
        "adaptive bit allocation grows its error 1.19x from 8 to 32 bits (one-round weighted: 54x)",
        "bit_pushing",
    ),
    (
        "A density surface while the server cannot place any one person",
        "Federated RFF KDE",
        "rank correlation 0.988 with the true density while the attacking server's guesses stay 0.91 as far "
        "off as guessing with nothing (plain federated KDE: 0.007, i.e. it finds people)",
        "rff_kde",
    ),
]


def guide() -> None:
    """The "which mechanism for what" table at the top of Methods."""
    rows = "\n".join(f"| {need} | **{use}** | {why} (`bench {suite}`) |" for need, use, why, suite in GUIDE)
    st.markdown(
        "#### Which mechanism for what\n\n| if you need | use | because, measured here |\n| --- | --- | --- |\n"
        + rows
        + "\n\nEach row comes from `python -m engine bench SUITE` (figures and protocols in BENCHMARKS.md). "
        "Compare and Trade-offs run the same comparison on your own data."
    )


def family(key: str) -> str:
    return registry()[key].family


def code_location(key: str) -> tuple[str, str]:
    """Where a mechanism's code lives: its module's file and its family's package (``engine/mechanisms/<family>/``),
    as paths from the project's root."""
    mod = registry()[key].__module__.split(".")
    package = "/".join(mod[:3]) + "/" if len(mod) > 3 else ""
    return "/".join(mod) + ".py", package


def anchor(key: str) -> str:
    return "m-" + key.replace("_", "-")


def params_frame(params: list[dict]) -> pd.DataFrame:
    rows = []
    for p in params:
        rng = ""
        if p.get("choices"):
            rng = " | ".join(map(str, p["choices"]))
        elif p.get("min") is not None or p.get("max") is not None:
            lo = "−∞" if p.get("min") is None else f"{p['min']:g}"
            hi = "∞" if p.get("max") is None else f"{p['max']:g}"
            rng = f"{lo} … {hi}" + (" (log)" if p.get("log") else "")
        rows.append(
            {
                "Parameter": p["label"],
                "Name": p["name"],
                "Type": p["kind"],
                "Default": str(p["default"]),
                "Range": rng,
                "Meaning": p.get("help", ""),
            }
        )
    return pd.DataFrame(rows)


def section(key: str) -> None:
    d = registry()[key].describe()
    st.header(d["label"], anchor=anchor(key), divider="gray")
    badges = [f":violet-badge[{d['family']}]"]
    if d.get("guarantee"):
        badges.append(f":green-badge[{d['guarantee']}]")
    if d.get("needs"):
        badges.append(f":orange-badge[needs {', '.join(d['needs'])}]")
    if not d.get("uses_epsilon", True):
        badges.append(":gray-badge[spends no ε]")
    st.markdown(" ".join(badges) + f"  `{d['key']}`")
    if d.get("summary"):
        st.markdown(f"**Idea.** {d['summary']}")
    c1, c2 = st.columns(2)
    c1.markdown(f"**Who sees what.** {d.get('threat_model') or '—'}")
    c1.caption(FAMILY_TEXT.get(d["family"], ""))
    c2.markdown(f"**Guarantee.** {d.get('guarantee') or '—'}")
    if d.get("paper"):
        c2.markdown(f"**Paper.** {d['paper']}")
    if d.get("equations"):
        st.markdown(f"**Implements.** {d['equations']}")
    path, package = code_location(key)
    where = f" in the family's package `{package}` (its numerics and baselines beside it)" if package else ""
    st.markdown(f"**Code.** `{path}`{where}")
    if d.get("params"):
        st.dataframe(params_frame(d["params"]), hide_index=True, width="stretch")
    else:
        st.caption("No parameters besides ε.")
    if d.get("doc"):
        with st.expander("Full documentation (docstring: sections, equations, departures from the paper)"):
            st.code(d["doc"], language="text", wrap_lines=True)
    audit_block(key)


def audit_block(key: str) -> None:
    """Run the empirical privacy audit (``python -m engine audit``) for one mechanism in the background."""
    from engine.run.analysis import has_dp_claim

    cls = registry()[key]
    if not has_dp_claim(cls):
        return
    # a mechanism offered under another relation (Adaptive HH's add/remove variant) is audited either way
    variants = {"its defaults": {}}
    if any(p.name == "relation" for p in cls.schema().params):
        variants["relation = add/remove"] = {"relation": "add/remove"}
    which = "its defaults"
    if len(variants) > 1:
        which = st.radio("Audit", list(variants), key=f"audit_variant_{key}", horizontal=True)
    params = variants[which]
    slot = key if not params else f"{key}|{which}"
    audits = st.session_state.setdefault("_audits", {})
    a = audits.get(slot)
    if a is None:
        if st.button(
            "Audit its privacy (ε = 1)",
            key=f"audit_{key}",
            icon=":material/science:",
            help="Runs the mechanism many times on two neighbouring datasets (its own relation) and bounds the ε "
            "an attacker could observe (Clopper-Pearson 95 %); takes seconds to a minute, in the background.",
        ):
            audits[slot] = _start_audit(key, params)
            st.rerun()
        return
    fut, prog = a["future"], a["progress"]
    if not fut.done():

        @st.fragment(run_every=0.5)
        def _poll():
            if fut.done():
                st.rerun()
            st.progress(min(max(prog["f"], 0.0), 1.0), text=f"Auditing… {prog['msg']} · {_time_left(prog)}")
            if st.button("Cancel the audit", key=f"audit_cancel_{slot}", icon=":material/cancel:"):
                prog["cancel"] = True

        _poll()
        return
    exc = fut.exception()
    if isinstance(exc, Cancelled):
        audits.pop(slot, None)
        st.info("The audit was cancelled; press the button to start it again.", icon=":material/cancel:")
        return
    if exc is not None:
        st.error(f"The audit failed: {exc}" if isinstance(exc, EngineError) else "The audit failed unexpectedly.")
        return
    r = fut.result()
    verdict = "within its claim" if r.eps_claimed is None or r.eps_lb <= r.eps_claimed + 1e-9 else "ABOVE its claim"
    st.success(
        f"Audit under **{r.relation}**: ε claimed {r.eps_claimed:g}, measured lower bound ε ≥ {r.eps_lb:.3g} "
        f"({verdict}); {r.runs:,} runs per dataset, {r.seconds:.1f} s. A lower bound at or under the claim is what "
        "a correct mechanism shows; above it, the claim is wrong.",
        icon=":material/verified:",
    )


def _start_audit(key: str, params: dict | None = None) -> dict:
    from engine.run.analysis import audit

    from .jobs import board

    prog = {"f": 0.0, "msg": "", "t0": time.monotonic(), "cancel": False}

    def cb(f, msg=""):
        prog["f"], prog["msg"] = f, msg

    def run():
        return audit(key, 1.0, params=params, progress=cb, cancel=lambda: prog["cancel"])

    return {"future": board().submit_task(run), "progress": prog}


def _time_left(prog: dict) -> str:
    """The time left, extrapolated from the share done so far (the runs take about equal time)."""
    f, spent = prog["f"], time.monotonic() - prog["t0"]
    if f < 0.02 or spent < 1:
        return "estimating the time left…"
    left = spent * (1 - f) / f
    return f"about {left:.0f} s left" if left < 90 else f"about {left / 60:.0f} min left"
