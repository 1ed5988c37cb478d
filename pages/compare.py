"""Compare: several mechanisms on the same data, ε and seed."""

import streamlit as st

from ui import budget, explain, region_panel, relations, state, tables, views
from ui.page import page

SEEDS = 5  # the ranking is over this many releases per mechanism (DPComp's protocol; cached once run)

with page(
    "Compare mechanisms",
    "Every selected mechanism releases a map of the same people with the same ε and seed. "
    "Small multiples share one colour scale; ★ marks the best value of each metric. The ranking repeats "
    "each release over 5 seeds.",
    sidebar={"mechanisms": "multi", "max_mechs": 7},
    release_only="Compare",
) as p:
    ctl = p.ctl
    if not ctl.mechanisms:
        st.info("Choose at least one mechanism in the sidebar.", icon=":material/arrow_back:")
    # first the maps' runs (the chosen seed), then the other seeds of the ranking
    mains = [ctl.config(m) for m in ctl.mechanisms] if ctl.ready else []
    configs = mains + [ctl.config(m, seed=ctl.seed + s) for s in range(1, SEEDS) for m in ctl.mechanisms]

    top = st.columns([1, 3], vertical_alignment="center")
    g = p.launch("compare", configs, label="Compare", title="Comparing", container=top[0], whole=True)
    if configs:
        budget.meter(configs[0], ctl.release_limit, views.dataset(configs[0]).meta.name, container=top[1])
    show = p.shown("compare", g, whole=True)
    if show is not None:
        n_mech = len({c.mechanism for c in show.configs})
        by_seed = list(zip(show.configs, show.statuses))
        ok = [(c, s.result) for c, s in by_seed[:n_mech] if s.state == "ok"]
        if not p.current:
            st.info("Settings changed since this comparison: showing the previous one. Press **Run** to update.")
        relations.relations_notice([c for c, _ in ok])
        apart = [c.mechanism for c, r in ok if r.release.domain != ok[0][1].release.domain]
        if apart:  # a DP frame or grid drawn under another neighbouring relation (its own noise): another grid
            st.warning(
                f"{', '.join(map(views.mech_label, apart))}: fitted {'its' if len(apart) == 1 else 'their'} frame or grid "
                "under another neighbouring relation, so the maps are on other grids and are left out here: compare them "
                "with a fixed resolution and the dataset's region, or one by one in Explore.",
                icon=":material/grid_off:",
            )
            ok = [(c, r) for c, r in ok if c.mechanism not in apart]
        first = ok[0][1]
        fr = views.frame(ok[0][0], first.release.domain)
        scale = views.scale_for(
            first.truth,
            first.release.domain,
            ctl.display,
            [r.release.density for _, r in ok],
            people=views.counts_people(ok[0][0]),
        )
        views.data_badge(first.dataset_meta, first.n_points, first.n_users)
        view, vurl = views.view_controls(fr, px=215)
        p.url.update(vurl)
        panels = [("True locations", first.truth, None, "compare_true")] + [
            (f"{views.mech_label(c.mechanism)}", r.release.density, r.release.partition, f"compare_{c.mechanism}")
            for c, r in ok
        ]
        for row in range(0, len(panels), 4):
            cols = st.columns(4)
            for col, (title, grid, rects, key) in zip(cols, panels[row : row + 4]):
                views.heat_chart(
                    grid, scale, fr, view, key, ctl.display, rects=rects, title=title, container=col, height=250
                )
        views.legend(scale, note=f"ε = {ok[0][0].epsilon:g} · seed {ok[0][0].seed} for every mechanism")
        with st.expander("Regions", expanded=ctl.regions is not None):
            choice = ctl.regions
            ds = views.prepared(ok[0][0])[0] if ok[0][0].mode == "evaluate" else None
            unit = "people" if first.n_users != first.n_points else "locations"
            region_panel.block(
                [(views.mech_label(c.mechanism), r) for c, r in ok], choice, scale, fr, "compare", unit, ds, 4
            )
        names = views.unique_labels([c.mechanism for c, _ in ok])
        sigma = tables.comparison_sigma([r for _, r in ok])
        if sigma > 0:  # a paper's protocol smooths before scoring: every map or none, never only some
            state.seed("compare.smooth", "smoothed", "smooth", state.one_of({k: k for k in tables.SMOOTHING}))
            smooth = st.radio(
                "Score SIM, CC and KL on",
                list(tables.SMOOTHING),
                **state.bind("compare.smooth"),
                format_func=tables.SMOOTHING.get,
                horizontal=True,
                help="Smoothing raises SIM and CC and lowers KL whatever the mechanism, so every map gets the same.",
            )
            if smooth != "smoothed":
                p.url["smooth"] = smooth
            sigma = sigma if smooth == "smoothed" else 0.0
        results = tables.like_for_like({names[c.mechanism]: r for c, r in ok}, sigma)
        st.subheader("Metrics")
        st.dataframe(tables.compare_table(results), width="stretch")
        st.caption(
            "★ best of the compared mechanisms · ↓ lower is better · ↑ higher is better. Every metric is computed "
            "the same way for every mechanism. " + tables.smoothing_note(sigma) + " " + tables.bound_note(results)
        )
        st.subheader("Ranking")
        r1, r2, r3 = st.columns([1, 1, 2], vertical_alignment="bottom")
        state.seed("compare.rank", "emd_m", "rank", state.one_of({k: k for k in tables.RANK_METRICS}))
        metric = r1.selectbox("Rank on", tables.RANK_METRICS, **state.bind("compare.rank"), format_func=explain.label)
        if metric != "emd_m":
            p.url["rank"] = metric
        state.seed("compare.rank_by", "mean", "rank_by", state.one_of({k: k for k in tables.RANK_BY}))
        rank_by = r2.radio(
            "Rank by", list(tables.RANK_BY), **state.bind("compare.rank_by"), format_func=tables.RANK_BY.get
        )
        per_seed: dict[str, list] = {}
        for c, s in by_seed:
            if s.state == "ok":
                per_seed.setdefault(names.get(c.mechanism, c.mechanism), []).append(s.result)
        n_seeds = min((len(v) for v in per_seed.values()), default=0)
        per_seed = {
            k: list(tables.like_for_like(dict(enumerate(v[:n_seeds])), sigma).values()) for k, v in per_seed.items()
        }
        seeds = f"over {n_seeds} releases per mechanism (seeds {ok[0][0].seed}–{ok[0][0].seed + n_seeds - 1})"
        if rank_by == "mean":
            rank = tables.ranking(per_seed, metric)
            r3.markdown(tables.ties_line(rank))
            st.dataframe(rank, hide_index=True, width="stretch")
            st.caption(
                f"{explain.label(metric)} {seeds}: mean and 95 % interval. *Tied with the best*: not significantly "
                "different from the best mechanism (paired t-test over the same seeds, 5 % level), as DPComp marks ties."
            )
        else:
            p.url["rank_by"] = rank_by
            regret = tables.regret_ranking(tables.seed_settings(per_seed, metric), metric)
            if regret.empty:
                st.info("Average regret ranks errors (lower is better): choose EMD, L1, MSE, KL or a range error.")
            else:
                st.dataframe(regret, hide_index=True, width="stretch")
                st.caption(
                    f"{explain.label(metric)} {seeds}: at each seed, a mechanism's value over the best value at that "
                    "seed, averaged over the seeds (DPComp's average regret; 1 = best at every seed)."
                )
        d1, d2 = st.columns(2)
        d1.download_button(
            "Metrics table (CSV)",
            tables.metrics_csv(results, sigma),
            file_name="compare_metrics.csv",
            mime="text/csv",
            on_click="ignore",
            icon=":material/download:",
            key="compare.csv.metrics",
        )
        d2.download_button(
            "Ranking, every seed (CSV)",
            tables.seeds_csv(per_seed, sigma),
            file_name="compare_ranking_seeds.csv",
            mime="text/csv",
            on_click="ignore",
            icon=":material/download:",
            key="compare.csv.seeds",
        )
        with st.expander("What the metrics mean"):
            st.dataframe(views.metrics_frame(results)[["What it measures"]], width="stretch")
