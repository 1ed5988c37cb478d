"""Explore: one mechanism on one dataset, true and private maps side by side."""

import streamlit as st

from ui import controls, explore, geocheck, mapviews, release, state, viewport, views
from ui.page import page

with page(
    "Explore a private heatmap",
    "Pick a city, a mechanism and a privacy budget ε. The true map (left) is what the mechanism protects; "
    "the private map (right) is what it publishes. Both share one colour scale.",
    sidebar={"mechanisms": "single"},
    compact=True,
) as p:
    ctl = p.ctl
    cfg, configs = explore.configs(ctl)
    # a compact top: Run, the view's options and the ledger in one row (two in a narrow window), so both maps and
    # their legend fit a 1440 x 900 or 1024 x 768 window under it (secondary controls sit in popovers)
    top = mapviews.control_row(viewport.last_room("explore_room"))
    g = p.launch("explore", configs, label="Explore", container=top[0])
    # no map to draw (a file still to upload, or settings in error): the browser's report of its room would rerun
    # the page while a file may be arriving, and Streamlit can lose the upload's own rerun in that merge
    room = viewport.room("explore_room", container=top[0]) if cfg is not None else viewport.Room()
    mode = mapviews.mode_picker(top[1])
    options = explore.options(top[2], ctl.mode)
    if cfg is not None:
        explore.ledger(top[3], cfg, ctl)
    if not state.get("explore.baselines"):
        p.url["baselines"] = False
    # Fixed slots: the true map keeps its place in the page before and after a run, so the browser
    # updates that chart instead of building a new one.
    notices = st.container()
    show = p.shown("explore", g, notices=notices)
    if show is not None and show.configs[0].mode == "release":
        release.release_view(show.results[0], show.configs[0], ctl.display, mapviews.release_px(room), ctl.regions)
        p.stop()
    if ctl.mode == "release":  # no truth on screen in Release mode, not even before a run
        explore.before_release(cfg, ctl)
        p.stop()
    if show is not None and not p.current:
        explore.stale_note(g, notices)
    on = explore.seen(show, cfg)
    res = on.res if on is not None else None
    if on is not None:
        views.data_badge(on.meta, on.n_points, on.n_users, container=p.aside)
        geocheck.warning(on.cfg.dataset, notices, on_swap=controls.swap_upload, where="explore")
        fr = views.frame(on.cfg, on.domain)
        square = mapviews.square_px(room)
        # the two maps take the page's whole width (each about half of it), the metrics go under them
        left, right = st.container(), st.container()
        with left:
            view, vurl = views.view_controls(fr, px=square + 28, container=options)
            mapviews.context_controls(options)
            context = mapviews.context_for(on.cfg.dataset)
            if context is not None:
                options.caption(f"Drawn under the maps: {context.label}. Public; never given to a mechanism.")
            p.url.update(vurl)
            lvl_box = st.container()  # the level slider's slot, empty before a run
            grid, rects, cap, title, level = (None, None, None, "Private map", False)
            if res is not None:
                grid, rects, cap, title, level = explore.private_layer(res, p.url, lvl_box)
            people = views.counts_people(on.cfg)
            noun = views.unit_noun(on.meta, people=people)
            scale = views.scale_for(on.truth, on.domain, ctl.display, [grid], people=people, noun=noun)
            hover = None if res is None or level else (lambda: views.hover_margins(res, on.cfg, fr))
            # the margins are for the map whose sums answer ranges; the hover shows those sums when it is not the drawn map
            summed = None if hover is None else res.release.summed_map()
            diff_scale = mapviews.pair(
                mode,
                on.truth,
                grid,
                scale,
                fr,
                view,
                ctl.display,
                square,
                rects,
                title,
                noun,
                hover,
                context,
                estimate=None if summed is None or summed is res.release.density else summed,
            )
            if cap:
                st.caption(cap)
            if res is None:
                st.info("Press **Run** to release a private heatmap of these locations.", icon=":material/play_arrow:")
            if diff_scale is not None:
                st.html(diff_scale.legend_html())
            else:
                views.legend(scale, note=f"{fr.domain.n} × {fr.domain.n} cells of {fr.domain.cell:,.0f} m")
            if res is not None:
                st.caption(
                    f"run {on.cfg.key()[:8]} · seed {on.cfg.seed} · computed in {res.timings.get('total_s', 0):.2f} s"
                    + (" · from the disk cache" if res.cached else "")
                )
        with right:
            explore.metrics(show)
        if res is not None:
            explore.details(res, on.cfg, ctl, scale, fr, view, title, noun, p.url)
    elif ctl.dataset == controls.UPLOAD:
        st.info("Upload a file of locations in the sidebar to start.", icon=":material/upload:")
    elif ctl.source is not None and not ctl.source.offline:
        st.info("Download this dataset first (sidebar).", icon=":material/download:")
