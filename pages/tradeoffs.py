"""Trade-offs: error against ε (and users) with repeated trials, 95 % bands and the frontier."""

import os

import streamlit as st

from engine.core.csvtext import csv_text
from engine.run import analysis
from ui import budget, explain, relations, state, sweep, tables, views, widgets
from ui.page import page


@st.cache_resource(show_spinner=False, ttl=60)
def cluster_choice(setting: str = ""):
    """Where sweeps run: the Dask cluster named in HEATMAP_DASK_SCHEDULER (``setting``, part of the cache key)
    or .streamlit/secrets.toml, else here."""
    from engine.run.execution import cluster_from_setting

    return cluster_from_setting()


with page(
    "Privacy–accuracy trade-offs",
    "Sweep ε (and optionally the number of users) with repeated trials. Lines are means, bands 95 % confidence "
    "intervals over trials; the frontier shows which mechanism is best at each point.",
    sidebar={"mechanisms": "multi", "epsilon": False, "display": False},
    release_only="Trade-offs",
) as p:
    ctl = p.ctl
    c1, c2, c3 = st.columns([3, 1, 2])
    state.seed(
        "sweep.eps", [0.1, 0.3, 1.0, 3.0], "eps_list", lambda v: sorted(widgets._eps(x) for x in state.parse_list(v))
    )
    eps_list = c1.multiselect(
        "ε values",
        sorted(set(widgets.EPS_GRID) | set(state.get("sweep.eps"))),
        **state.bind("sweep.eps"),
        format_func=lambda v: f"{v:g}",
    )
    state.seed("sweep.trials", 5, "trials", state.int_in(1, 50))  # ties need seeds: DPComp uses several
    trials = int(c2.number_input("Trials", 1, 50, **state.bind("sweep.trials"), help="Seeds 0, 1, …"))
    USERS = [1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000]
    state.seed(
        "sweep.users",
        [],
        "users_list",
        lambda v: [state.one_of({str(u): u for u in USERS})(x) for x in state.parse_list(v)],
    )
    users_list = c3.multiselect(
        "Also vary users sampled (optional)",
        USERS,
        **state.bind("sweep.users"),
        format_func=lambda v: f"{v:,}",
    )
    users = sorted(users_list) if users_list else [ctl.n_users]
    base = {m: ctl.config(m) for m in ctl.mechanisms} if ctl.ready else {}
    configs = analysis.configs(base, sorted(eps_list), users, trials, seed0=ctl.seed) if eps_list else []
    if len(configs) > analysis.MAX_SWEEP_RUNS:
        st.error(
            f"This sweep has {len(configs)} runs; the limit is {analysis.MAX_SWEEP_RUNS}. Fewer ε values, users or trials."
        )
        configs = []
    elif configs:
        st.caption(
            f"{len(configs)} runs: {len(base)} mechanism(s) × {len(eps_list)} ε × {len(users)} size(s) × {trials} trials"
        )
    if not ctl.mechanisms:
        st.info("Choose mechanisms in the sidebar.", icon=":material/arrow_back:")

    # display choices seeded before Run, so an invalid link is caught before it could run
    state.seed("sweep.x", "epsilon", "x", state.one_of({x: x for x in ["epsilon", "eps_x_n", "n_users"]}))
    state.seed("sweep.logy", True, "logy", state.parse_bool)
    top = st.columns([1, 3], vertical_alignment="center")
    choice = cluster_choice(os.environ.get("HEATMAP_DASK_SCHEDULER", ""))
    g = p.launch(
        "sweep",
        configs,
        label="Sweep",
        title="Sweeping",
        caption=choice.description,
        container=top[0],
        light=True,
        cluster=choice.client,
        whole=True,
    )
    if configs:
        budget.meter(configs[0], ctl.release_limit, views.dataset(configs[0]).meta.name, container=top[1])
    p.url.update({"eps_list": sorted(eps_list), "trials": trials})
    if users_list:
        p.url["users_list"] = sorted(users_list)
    show = p.shown("sweep", g, whole=True, any_dataset=True)
    if show is not None:
        ok = [(c, s.result) for c, s in zip(show.configs, show.statuses) if s.state == "ok"]
        relations.relations_notice(list({c.mechanism: c for c, _ in ok}.values()))
        df = analysis.trials_frame(ok, {c.mechanism: views.mech_label(c.mechanism) for c, _ in ok})
        metrics = [
            k for k in explain.ordered([c for c in df.columns if c in ok[0][1].metrics]) if sweep.ensure_numeric(df, k)
        ]
        o1, o2, o3 = st.columns([2, 2, 1])
        state.seed(
            "sweep.metric",
            "emd_m" if "emd_m" in metrics else metrics[0],
            "metric",
            state.one_of({m: m for m in metrics}),
        )
        if state.get("sweep.metric") not in metrics:
            state.put("sweep.metric", metrics[0])
        metric = o1.selectbox("Error measure", metrics, **state.bind("sweep.metric"), format_func=explain.label)
        xs = ["epsilon", "eps_x_n"] + (["n_users"] if df["n_users"].nunique() > 1 else [])
        if state.get("sweep.x") not in xs:
            state.put("sweep.x", "epsilon")
        x = o2.radio(
            "x-axis",
            xs,
            **state.bind("sweep.x"),
            horizontal=True,
            format_func=sweep.AXIS.get,
            help="ε × users: DPBench's scale-ε exchangeability (error often depends on their product).",
        )
        log_y = o3.toggle("Log y", **state.bind("sweep.logy"))
        p.url.update({"metric": metric, "x": x})
        st.caption(explain.info(metric)[1])
        mixed = tables.mixed_smoothing(df, metric)
        if mixed:
            st.warning(mixed, icon=":material/compare_arrows:")
        summ = analysis.summarise(df, metric, x)
        st.altair_chart(sweep.error_chart(summ, metric, x, log_y), width="stretch")
        fr = analysis.frontier(summ, metric, x, df, better=explain.better(metric) or "lower")
        st.subheader("Frontier: the best mechanism at each point")
        f1, f2 = st.columns([3, 2])
        f1.altair_chart(sweep.frontier_chart(fr, metric, x, log_y), width="stretch")
        unit = explain.info(metric)[3]
        f2.dataframe(
            fr,
            hide_index=True,
            width="stretch",
            column_config={
                "mean": st.column_config.NumberColumn(
                    f"mean {explain.label(metric)}" + (f" ({unit})" if unit else ""), format="%.4g"
                ),
                x: st.column_config.NumberColumn(sweep.AXIS[x], format="%g"),
            },
        )
        st.subheader("Ranking over the sweep")
        state.seed("sweep.rank_by", "mean", "rank_by", state.one_of({k: k for k in tables.SWEEP_RANK_BY}))
        rank_by = st.radio(
            "Rank by", list(tables.SWEEP_RANK_BY), **state.bind("sweep.rank_by"), format_func=tables.SWEEP_RANK_BY.get
        )
        if rank_by != "mean":
            p.url["rank_by"] = rank_by
        ranked = tables.sweep_ranking(summ, metric, x, rank_by)
        if ranked.empty:
            st.info("Average regret ranks errors (lower is better): choose EMD, L1, MSE, KL or a range error.")
        else:
            st.dataframe(ranked, hide_index=True, width="stretch")
            st.caption(
                f"Average regret: at each {sweep.AXIS[x]} point, a mechanism's mean {explain.label(metric)} over the "
                "best mean at that point, averaged over the points (DPComp's ranking; 1 = best everywhere). The mean "
                "over the points is dominated by the points with the largest errors."
            )
        st.download_button(
            "All trial results (CSV)",
            csv_text(df),
            file_name="tradeoff_trials.csv",
            mime="text/csv",
            on_click="ignore",
            icon=":material/download:",
        )
        with st.expander(f"All {len(df)} trials"):
            st.dataframe(df, hide_index=True, width="stretch")
