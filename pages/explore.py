"""Explore: one mechanism on one dataset, true and private maps side by side."""

import streamlit as st

from engine.mechanisms import registry
from ui import boot, budget, controls, export, geocheck, jobs, mapviews, plan, release, run, state, viewport, views
from ui import regions as uregions
from ui.text import plain

boot.ensure_router()  # first: a deep link on a fresh server must go through app.py

head = st.columns([1, 1], vertical_alignment="bottom")
badge_slot = head[1].container()  # the dataset's badge, beside the title
with head[0]:
    views.header(
        "Explore a private heatmap",
        "Pick a city, a mechanism and a privacy budget ε. The true map (left) is what the mechanism protects; "
        "the private map (right) is what it publishes. Both share one colour scale.",
        compact=True,
    )
ctl = controls.sidebar("single")
for e in ctl.errors:
    st.error(plain(e, 600))

state.seed("explore.baselines", True, "baselines", state.parse_bool)
cfg = ctl.config() if ctl.ready else None
base_keys = [b for b in ("identity", "uniform") if b in registry() and cfg is not None and b != cfg.mechanism]
configs = []
if cfg is not None:
    configs = [cfg]
    if state.get("explore.baselines") and ctl.mode == "evaluate":  # context runs are evaluation only
        configs += [ctl.config(b, params={}) for b in base_keys]

# a compact top: Run, the view's options and the ledger in one row, so both maps and their legend fit a
# 1440 x 900 window under it (secondary controls sit in popovers)
top = st.columns([1.5, 2.1, 1.6, 1.6], vertical_alignment="bottom")
g = run.launch("explore", configs, ctl, label="Explore", container=top[0])
# no map to draw (a file still to upload, or settings in error): the browser's report of its room would rerun
# the page while a file may be arriving, and Streamlit can lose the upload's own rerun in that merge
room = viewport.room("explore_room", container=top[0]) if cfg is not None else viewport.Room()
mode = mapviews.mode_picker(top[1])
options = top[2].popover("Zoom, context, baselines", icon=":material/tune:", width="stretch")
options.toggle(
    "Identity and Uniform on the same data, for context",
    **state.bind("explore.baselines"),
    help="Two classic baselines run alongside (each is a release too, counted in the ledger).",
)
if cfg is not None:
    with top[3].popover(
        f"ε ledger: {budget.spent_label(cfg)} of {ctl.release_limit:g}",
        icon=":material/account_balance:",
        width="stretch",
    ):
        budget.meter(cfg, ctl.release_limit, views.dataset(cfg).meta.name)
jobs.progress_panel(["explore"], "Running")

url = dict(ctl.url)
if not state.get("explore.baselines"):
    url["baselines"] = False
# Fixed slots: the true map keeps its place in the page before and after a run, so the browser
# updates that chart instead of building a new one.
notices = st.container()
show = views.of_dataset(jobs.shown("explore", g), ctl)
if views.of_dataset(g, ctl) is not None:
    views.outcome_messages(g, notices)

res = rcfg = None
if show is not None and show.configs[0].mode == "release":
    if run.is_current(show, configs):
        url["run"] = 1
    release.release_view(show.results[0], show.configs[0], ctl.display)
    state.sync_url(url)
    st.stop()
if ctl.mode == "release":  # no truth on screen in Release mode, not even before a run
    st.info(
        "Release mode: press **Run** to publish a private map of this dataset (its ε is booked against the "
        "dataset's limit first). The true map is not shown in this mode.",
        icon=":material/lock:",
    )
    if cfg is not None:
        plan.panel(cfg, views.dataset(cfg), plan.plannable(), budget.remaining(cfg, ctl.release_limit))
    state.sync_url(url)
    st.stop()
if show is not None:
    res, rcfg = show.results[0], show.configs[0]
    if run.is_current(show, configs):
        url["run"] = 1
    elif g is not None and g.running:
        notices.caption("Showing the previous result while the new run is in progress.")
    else:
        notices.info(
            "Settings changed since this run: showing the previous result. Press **Run** to update.",
            icon=":material/info:",
        )
    meta, n_points, n_users = res.dataset_meta, res.n_points, res.n_users
    truth, domain, view_cfg = res.truth, res.release.domain, rcfg
elif cfg is not None:
    ds, domain, truth = views.prepared(cfg)
    meta, n_points, n_users, view_cfg = ds.meta, len(ds), ds.n_users, cfg

MAP_SQUARE = mapviews.square_px(room)
MAP_PX = MAP_SQUARE + 28  # deck height: the square and its margin

if show is not None or cfg is not None:
    views.data_badge(meta, n_points, n_users, container=badge_slot)
    geocheck.warning(view_cfg.dataset, notices, on_swap=controls.swap_upload, where="explore")
    fr = views.frame(view_cfg, domain)
    # the two maps take the page's whole width (each about half of it), the metrics go under them
    left, right = st.container(), st.container()
    with left:
        view, vurl = views.view_controls(fr, px=MAP_PX, container=options)
        mapviews.context_controls(options)
        context = mapviews.context_for(view_cfg.dataset)
        if context is not None:
            options.caption(f"Drawn under the maps: {context.label}. Public; never given to a mechanism.")
        url.update(vurl)
        lvl_box = st.container()  # the level slider's slot, empty before a run
        lvl = views.levels_control(res, lvl_box) if res is not None else None
        if lvl is not None:
            url["level"] = state.get("explore.level")
        grid, rects, cap = (None, None, None)
        if res is not None:
            grid, rects, cap = (res.release.density, res.release.partition, None) if lvl is None else lvl
        people = views.counts_people(view_cfg)
        noun = views.unit_noun(meta, people=people)
        scale = views.scale_for(truth, domain, ctl.display, [grid], people=people, noun=noun)
        title = export.release_title(res) if res is not None else "Private map"
        diff_scale = None
        if mode == "swipe" and grid is not None:
            mapviews.swipe_view(truth, grid, scale, fr, MAP_SQUARE, "explore_swipe", title)
        elif mode == "diff" and grid is not None:
            diff_scale = mapviews.diff_view(truth, grid, scale, fr, MAP_SQUARE, MAP_PX, "explore_diff", context)
        elif not ctl.display.basemap:  # one deck for both maps: linked zoom and pan, hover values, scale bar
            mapviews.paired_chart(
                truth,
                grid,
                scale,
                fr,
                state.get("view.zoom"),
                views.AREAS[state.get("view.area")],
                "explore",
                ctl.display,
                rects=rects,
                titles=("True " + noun, title),
                margin95=views.hover_margins(res, rcfg, fr) if res is not None and lvl is None else None,
                unit=noun,
                px=MAP_SQUARE,
                height=MAP_PX,
                context=context,
            )
        else:  # a basemap puts each square on its real place: two maps sharing one view
            m1, m2 = st.columns(2)
            kw = dict(height=MAP_PX, context=context)
            views.heat_chart(
                truth, scale, fr, view, "explore_true", ctl.display, title="True " + noun, container=m1, **kw
            )
            if res is not None:
                views.heat_chart(
                    grid, scale, fr, view, "explore_private", ctl.display, rects=rects, title=title, container=m2, **kw
                )
        if cap:
            st.caption(cap)
        if res is None:
            st.info("Press **Run** to release a private heatmap of these locations.", icon=":material/play_arrow:")
        note = f"{fr.domain.n} × {fr.domain.n} cells of {fr.domain.cell:,.0f} m"
        if diff_scale is not None:
            st.html(diff_scale.legend_html())
        else:
            views.legend(scale, note=note)
        if res is not None:
            st.caption(
                f"run {rcfg.key()[:8]} · seed {rcfg.seed} · computed in {res.timings.get('total_s', 0):.2f} s"
                + (" · from the disk cache" if res.cached else "")
            )
    with right:
        st.subheader("How good is it?")
        if res is not None:
            others = {}
            for c, s in zip(show.configs[1:], show.statuses[1:]):
                others[c.mechanism] = s.result if s.state == "ok" else ("…" if s.state == "running" else "failed")
            views.release_warnings(res)
            views.metrics_block(res, others)
        else:
            st.caption("Metrics compare the private map with the true one after a run.")
    if res is not None:
        with st.expander("Margin of error", expanded=bool(jobs.get_group("explore_se"))):
            views.margin_block(res, rcfg, ctl, scale, fr, view, ctl.display)
        with st.expander("Regions", expanded=bool(st.session_state.get("explore.regions.kind") not in (None, "Off"))):
            choice = uregions.control("explore", res.release.domain)
            ds = views.prepared(rcfg)[0] if rcfg.mode == "evaluate" else None
            uregions.block([(title, res)], choice, scale, fr, "explore", noun, ds)
        views.proportion_block(res, fr, view, ctl.display)
        t1, t2, t3, t4 = st.tabs(["Privacy ledger", "Communication", "Who sees what", "Export"])
        views.ledger_block(res, t1)
        views.communication_block(res, t2)
        views.server_block(res, t3)
        views.export_block(res, scale, fr, views.share_url(url), views.stem(rcfg), t4)
elif ctl.dataset == controls.UPLOAD:
    st.info("Upload a file of locations in the sidebar to start.", icon=":material/upload:")
elif ctl.source is not None and not ctl.source.offline:
    st.info("Download this dataset first (sidebar).", icon=":material/download:")

state.sync_url(url)
