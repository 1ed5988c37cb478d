"""Compare: several mechanisms on the same data, ε and seed."""

import streamlit as st

from ui import boot, budget, controls, explain, jobs, release, run, state, tables, views
from ui.text import plain

boot.ensure_router()  # first: a deep link on a fresh server must go through app.py

views.header(
    "Compare mechanisms",
    "Every selected mechanism releases a map of the same people with the same ε and seed. "
    "Small multiples share one colour scale; ★ marks the best value of each metric. The ranking repeats "
    "each release over 5 seeds.",
)
ctl = controls.sidebar("multi", max_mechs=7)
for e in ctl.errors:
    st.error(plain(e, 600))
release.release_only_page(ctl, "Compare")
if not ctl.mechanisms:
    st.info("Choose at least one mechanism in the sidebar.", icon=":material/arrow_back:")
SEEDS = 5  # the ranking is over this many releases per mechanism (DPComp's protocol; cached once run)
# first the maps' runs (the chosen seed), then the other seeds of the ranking
mains = [ctl.config(m) for m in ctl.mechanisms] if ctl.ready else []
configs = mains + [ctl.config(m, seed=ctl.seed + s) for s in range(1, SEEDS) for m in ctl.mechanisms]

top = st.columns([1, 3], vertical_alignment="center")
g = run.launch("compare", configs, ctl, label="Compare", container=top[0])
if configs:
    budget.meter(configs[0], ctl.release_limit, views.dataset(configs[0]).meta.name, container=top[1])
jobs.progress_panel(["compare"], "Comparing")

url = dict(ctl.url)
if g is not None:
    views.outcome_messages(g)
show = jobs.shown("compare", g, whole=True)

if show is not None:
    n_mech = len({c.mechanism for c in show.configs})
    by_seed = list(zip(show.configs, show.statuses))
    ok = [(c, s.result) for c, s in by_seed[:n_mech] if s.state == "ok"]
    if run.is_current(show, configs):
        url["run"] = 1
    else:
        st.info("Settings changed since this comparison: showing the previous one. Press **Run** to update.")
    views.relations_notice([c for c, _ in ok])
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
    url.update(vurl)
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
    names = views.unique_labels([c.mechanism for c, _ in ok])
    results = {names[c.mechanism]: r for c, r in ok}
    st.subheader("Metrics")
    st.dataframe(tables.compare_table(results), width="stretch")
    st.caption("★ best of the compared mechanisms · ↓ lower is better · ↑ higher is better")
    a, b = st.columns([2, 3], gap="medium")
    with a:
        st.subheader("Ranking")
        state.seed("compare.rank", "emd_m", "rank", state.one_of({k: k for k in tables.RANK_METRICS}))
        metric = st.selectbox("Rank on", tables.RANK_METRICS, **state.bind("compare.rank"), format_func=explain.label)
        if metric != "emd_m":
            url["rank"] = metric
        per_seed: dict[str, list] = {}
        for c, s in by_seed:
            if s.state == "ok":
                per_seed.setdefault(names.get(c.mechanism, c.mechanism), []).append(s.result)
        n_seeds = min((len(v) for v in per_seed.values()), default=0)
        per_seed = {k: v[:n_seeds] for k, v in per_seed.items()}
        st.dataframe(tables.ranking(per_seed, metric), hide_index=True, width="stretch")
        st.caption(
            f"{explain.label(metric)} over {n_seeds} releases per mechanism (seeds {ok[0][0].seed}–"
            f"{ok[0][0].seed + n_seeds - 1}): mean and 95 % interval. *Tied with the best*: not significantly "
            "different from the best mechanism (paired t-test over the same seeds, 5 % level), as DPComp marks ties."
        )
    with b:
        st.subheader("What the metrics mean")
        st.dataframe(views.metrics_frame(results)[["What it measures"]], width="stretch")

state.sync_url(url)
