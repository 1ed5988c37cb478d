"""Building blocks the pages share: headers, maps with one colour scale and one view,
metric tables, the ledger, communication, the server's view, exports."""

from __future__ import annotations

import html
import json
from dataclasses import replace

import numpy as np
import streamlit as st

from engine.core.errors import DataError
from engine.mechanisms import registry
from engine.regions import margins
from engine.run import analysis, execution
from engine.run.execution import RunConfig, load_dataset, region_frame, side_information

from . import colors, drawn, explain, export, geo, maps, relations, state, tables, uploads, viewport
from .colors import ColourScale
from .relations import mech_label
from .text import plain

AREAS = {
    "whole region": (0.0, 0.0),
    "north": (0.0, 0.25),
    "north-east": (0.25, 0.25),
    "east": (0.25, 0.0),
    "south-east": (0.25, -0.25),
    "south": (0.0, -0.25),
    "south-west": (-0.25, -0.25),
    "west": (-0.25, 0.0),
    "north-west": (-0.25, 0.25),
}
ZOOMS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)


# ------------------------------------------------------------------- headers
def header(title: str, blurb: str, compact: bool = False) -> None:
    """The page's title and what it does; ``compact``: one small line, the text behind its help mark (a page
    whose maps must fit the window)."""
    if compact:
        st.subheader(title, help=blurb, anchor=False)
    else:
        st.title(title)
        st.caption(blurb)
    state.warnings_box()


def of_dataset(group, ctl):
    """``group`` when its runs are of the dataset chosen now, else None: after a switch of dataset the page shows
    neither the other dataset's maps nor its messages."""
    if group is None or not group.configs or group.configs[0].dataset != ctl.dataset:
        return None
    return group


def data_badge(meta, n_points: int | None = None, n_users: int | None = None, container=None) -> None:
    c = container or st
    size = ""
    if n_points is not None:
        size = f" · {n_points:,} locations" + (
            f" of {n_users:,} users" if n_users is not None and n_users != n_points else ""
        )
    if getattr(meta, "synthetic", False):
        c.markdown(
            f":orange-badge[:material/science: SYNTHETIC DATA] {plain(meta.name)}{size} — generated, no real person.",
        )
    else:
        c.markdown(f":blue-badge[:material/location_on: Real data] {plain(getattr(meta, 'name', ''))}{size}")


# ------------------------------------------------------------------- data
@st.cache_resource(max_entries=8, show_spinner="Loading the dataset…")
def _dataset(key: str, options_json: str):
    return load_dataset(key, json.loads(options_json))


def dataset(cfg: RunConfig):
    """The configuration's dataset: a registry dataset (cached for every session) or this session's
    own upload (never in a shared cache; another session's upload key is an unknown dataset)."""
    if cfg.dataset.startswith(uploads.UPLOAD_PREFIX):
        up = uploads.get(cfg.dataset)
        if up is None:
            raise DataError("unknown dataset (an uploaded file belongs to the session that uploaded it)")
        return up.dataset
    return _dataset(cfg.dataset, json.dumps(cfg.dataset_options, sort_keys=True, default=str))


def prepared(cfg: RunConfig):
    """(sampled dataset, domain, true map) exactly as the run of ``cfg`` sees and scores them
    (:func:`engine.run.execution.prepared`): kept for every session, or an upload's with the upload (one entry,
    so it goes when the upload goes)."""
    memo, kept = None, execution.PREPARED_KEPT
    if cfg.dataset.startswith(uploads.UPLOAD_PREFIX):
        up = uploads.get(cfg.dataset)
        if up is None:
            raise DataError("unknown dataset (an uploaded file belongs to the session that uploaded it)")
        memo, kept = up.memo, 1
    with st.spinner("Preparing the data…"):  # shown only when it takes a while
        return execution.prepared(cfg, dataset(cfg), memo, kept)


def frame(cfg: RunConfig, domain) -> maps.Frame:
    return maps.Frame(domain, dataset(cfg).crs)


def unit_noun(meta, people: bool = False) -> str:
    """What one unit of a map counts, in the plural: people (a file with user ids), the dataset's own unit
    (John Snow's deaths), or locations."""
    from engine.regions.regional_table import counted_word

    return "people" if people else counted_word(meta)


def counts_people(cfg: RunConfig) -> bool:
    """Whether the maps of ``cfg`` count people (a person's locations share weight 1): the dataset has user ids
    (its schema, public) and the mechanism does not count records. One answer for both modes, read off no
    count of the data."""
    from engine.regions.regional_table import counts_people as counts

    return counts(dataset(cfg), cfg.params)


def scale_for(truth: np.ndarray, domain, display, others=(), people: bool = False, noun: str = "") -> ColourScale:
    """One colour scale for the truth and the private maps ``others`` drawn with it (see ColourScale.shared).
    ``people``: the data has user ids, so maps count people (a person's locations share weight 1)."""
    others = [np.asarray(o, dtype=np.float64) for o in others if o is not None]
    sc = ColourScale.shared(
        truth, domain.cell**2 / 1e6, log=display.log, units=display.units, cmap=display.cmap, others=others
    )
    if people:
        unit = "people per km²" if display.units == "km2" else "% of all people (per cell)"
        sc = replace(sc, unit=unit + " (a person's locations share one unit)")
    elif noun and noun != "locations":
        sc = replace(sc, unit=sc.unit.replace("locations", noun))
    return sc


# ------------------------------------------------------------------- maps
def view_controls(fr: maps.Frame, prefix: str = "view", container=None, px: int = 290):
    """One zoom and centre for every map of the page (URL: zoom, area)."""
    c = container or st
    state.seed(f"{prefix}.zoom", 0.0, "zoom", lambda v: state.one_of({f"{z:g}": z for z in ZOOMS})(v))
    state.seed(f"{prefix}.area", "whole region", "area", state.one_of({a: a for a in AREAS}))
    c1, c2 = c.columns(2)
    z = c1.select_slider(
        "Zoom (all maps)",
        ZOOMS,
        **state.bind(f"{prefix}.zoom"),
        format_func=lambda v: "whole region" if v == 0 else f"×{2**v:g}",
        help=viewport.ZOOM_HELP,
    )
    a = c2.selectbox("Centre on", list(AREAS), **state.bind(f"{prefix}.area"))
    url = {}
    if z:
        url["zoom"] = z
    if a != "whole region":
        url["area"] = a
    return fr.view(z, AREAS[a], px=px), url


def heat_chart(
    grid,
    scale: ColourScale,
    fr: maps.Frame,
    view,
    key: str,
    display,
    rects=None,
    extra_layers=(),
    height: int = 330,
    title: str | None = None,
    container=None,
    on_select="ignore",
    selection_mode="single-object",
    context=None,
):
    c = container or st
    if title:  # a fixed-height title keeps small multiples aligned when labels wrap
        c.html(f'<div class="map-title">{html.escape(title)}</div>')
    note = colors.swamp_note(scale, grid)

    def build():
        under = geo.context_layers(fr, context, key)
        layers = [] if display.basemap or not under else [maps.region_layer(fr)]
        layers += under
        if grid is None:
            layers += [] if display.basemap or under else [maps.region_layer(fr)]
        elif display.basemap:  # empty cells transparent over the basemap; the outline shows even with no tiles
            layers.append(maps.heat_layer(grid, scale, fr, f"{key}_heat", opacity=0.8))
            layers.append(maps.outline_layer(np.array([fr.domain.bounds]), fr, f"{key}_region", (90, 90, 100, 220)))
        else:  # one opaque bitmap draws the whole region (transparent where the context shows through)
            layers.append(maps.heat_layer(grid, scale, fr, f"{key}_heat", background=None if under else maps.EMPTY))
        if rects is not None and len(rects) and display.outlines:
            layers.append(maps.outline_layer(rects, fr, f"{key}_cells"))
        layers += list(extra_layers) + geo.frame_layers(fr, key, places=4 if height < 400 else 6)
        if note is not None:
            layers.append(maps.note_layer(fr, note[0], key))
        return maps.deck(layers, view, display.basemap)

    if display.basemap:
        viewport.basemap_watch(f"{key}_basemap")
    parts = ("heat", grid, scale, fr, view.__dict__, key, display, rects, tuple(extra_layers), height, context)
    chart = c.pydeck_chart(
        drawn.deck(parts, build),
        height=height,
        key=key,
        on_select=on_select,
        selection_mode=selection_mode,
    )
    if note is not None:
        c.caption(f":material/warning: {note[1]}")
    return chart


def hover_margins(res, cfg: RunConfig, fr: maps.Frame) -> np.ndarray | None:
    """The 95 % margin of each of the linked map's hover blocks (noise and spreading, from the release alone),
    or None when the release has no closed form."""

    def compute():
        if margins.no_margin_reason(res.release) is not None:
            return None
        m = margins.block_margins(res.release, fr.crs, maps.hover_block(res.release.domain.n)).margin95
        return None if np.isnan(m).all() else m

    return drawn.derived(res.release, f"hover-margins:{cfg.mechanism}:{fr.crs}", compute)


def legend(scale: ColourScale, note: str = "", container=None, shared: bool = True) -> None:
    (container or st).html(scale.legend_html(note, shared=shared))


# ------------------------------------------------------------------ results
def short_label(key: str) -> str:
    """A mechanism's label without its parenthesised detail, for narrow columns."""
    return mech_label(key).split(" (")[0]


def unique_labels(keys: list[str]) -> dict[str, str]:
    """Short labels, falling back to the full label where two mechanisms would share one."""
    short = {k: short_label(k) for k in keys}
    counts = {v: list(short.values()).count(v) for v in short.values()}
    return {k: (v if counts[v] == 1 else mech_label(k)) for k, v in short.items()}


def release_warnings(result, container=None) -> None:
    """The mechanism's own warnings (e.g. a guarantee weaker than planned because
    more clients dropped out than the noise was planned for), shown prominently."""
    c = container or st
    for w in result.release.warnings:
        c.warning(str(w), icon=":material/gpp_maybe:")


def metrics_block(main, others: dict[str, object], container=None) -> None:
    """Primary metrics with one-line explanations, next to baselines' values on the same data."""
    c = container or st
    names = list(others)
    runs = {n: o for n, o in others.items() if hasattr(o, "metrics")}
    sigma = tables.comparison_sigma([main, *runs.values()]) if runs else 0.0
    if sigma > 0:  # a smoothed heatmap among them: every map is scored through the same filter
        scored = tables.like_for_like({"": main, **runs}, sigma)
        main, others = scored.pop(""), {**others, **scored}
    keys = [k for k in explain.ordered(main.metrics) if k in explain.PRIMARY]
    head = "".join(f"<th>{html.escape(short_label(n))}</th>" for n in names)
    rows = [f'<table class="metric-table"><tr><th></th><th>This run</th>{head}</tr>']
    for k in keys:
        lbl, expl, better, _ = explain.info(k)
        arrow = {"lower": " ↓", "higher": " ↑"}.get(better, "")
        cells = [explain.fmt(k, main.metrics.get(k))]
        for n in names:
            o = others[n]
            cells.append(explain.fmt(k, o.metrics.get(k)) if hasattr(o, "metrics") else str(o))
        tds = "".join(f"<td>{html.escape(v)}</td>" for v in cells)
        rows.append(f"<tr><td><b>{html.escape(lbl)}</b>{arrow}</td>{tds}</tr>")
        rows.append(f'<tr class="expl"><td colspan="{len(cells) + 1}">{html.escape(expl)}</td></tr>')
    rows.append("</table>")
    c.html("".join(rows))
    note = (" " + tables.smoothing_note(sigma)) if runs else ""
    c.caption("↓ lower is better · ↑ higher is better. Maps are compared after scaling each to sum to 1." + note)
    with c.expander("All metrics"):
        st.dataframe(
            metrics_frame({"This run": main, **{mech_label(n): o for n, o in others.items()}}), width="stretch"
        )


def metrics_frame(results: dict[str, object]):
    import pandas as pd

    keys: list[str] = []
    for r in results.values():
        for k in getattr(r, "metrics", {}):
            if k not in keys:
                keys.append(k)
    keys = explain.ordered(keys)
    data = {
        name: [explain.fmt(k, r.metrics.get(k)) if hasattr(r, "metrics") else "–" for k in keys]
        for name, r in results.items()
    }
    df = pd.DataFrame(data, index=[explain.label(k) for k in keys])
    df.insert(0, "What it measures", [explain.info(k)[1] for k in keys])
    return df


def ledger_block(result, container=None) -> None:
    c = container or st
    rel = result.release
    led = rel.ledger.to_dict()
    entries = led["entries"]
    if entries:
        import pandas as pd

        df = pd.DataFrame(entries)[["step", "epsilon", "composition", "group", "delta", "note"]]
        df.columns = ["Step", "ε", "Composition", "Group", "δ", "Note"]
        c.dataframe(df, hide_index=True, width="stretch")
    else:
        c.caption("This mechanism spends no privacy budget.")
    delta = f", δ = {led['total_delta']:g}" if led.get("total_delta") else ""
    c.markdown(
        f"**Total ε = {led['total_epsilon']:g}**{delta} of the configured ε = {result.config.epsilon:g}. "
        "Sequential steps add up; a *parallel* group (disjoint cells or users) costs only its largest entry."
    )
    rel = relations.relation_text(result.config, led["total_epsilon"])
    if rel:
        c.markdown(rel)
    c.markdown(f"**Frame**: {region_frame(result.dataset_meta)}.")
    side = side_information(result)
    if side:
        c.markdown("**Side information** (read from the data, or stated, without spending ε):")
        for s in side:
            c.markdown(f"- :material/warning: {s}")
    ev = getattr(result, "evaluation", None) or {}
    if "people_exact" in ev:  # Evaluate only: the exact values behind the frame and grid's DP outputs
        c.caption(
            f"Evaluation only: the exact count for the grid is {ev['people_exact']:,}; the DP count drew "
            f"{ev['people_dp_count']:,}. A release shows neither."
        )
    if "frame_left_out" in ev:
        c.caption(f"Evaluation only: the DP frame leaves {ev['frame_left_out']:,} of the data out of the map (exact).")


def communication_block(result, container=None) -> None:
    c = container or st
    comm = result.release.communication
    unit = "location" if getattr(comm, "per_location", False) else "client"  # central upload: per location
    a, b, d = c.columns(3)
    a.metric(f"Numbers sent per {unit}", f"{comm.elements_per_client:,.4g}")
    if comm.bits_per_client is not None:
        kb = comm.bits_per_client / 8 / 1024
        b.metric(f"Upload per {unit}", f"{kb:,.2f} KiB" if kb >= 1 else f"{comm.bits_per_client:,.0f} bits")
    else:
        b.metric(f"Upload per {unit}", "n/a")
    d.metric("Rounds", f"{comm.rounds}")
    if comm.note:
        c.caption(comm.note)
    per_user = (result.metrics or {}).get("comm_elements_per_client")
    if unit == "location" and per_user is not None:  # evaluation only: the mean is a fact of the true data
        c.caption(f"Per person in this data (evaluation): {per_user:,.4g} numbers on average.")


KIND_TEXT = {
    "clear": ":material/lock_open: sees every location in the clear",
    "aggregate": ":material/lock: sees only the aggregate",
    "per_user": ":material/visibility: sees something from each user",
}


def server_headline(kind: str, family: str) -> str:
    """Who sees what, in one line. A central mechanism's server is the trusted curator: it sees every location,
    and only the public (the attacker of the privacy attack) is limited to the released aggregate."""
    if family == "central" and kind in ("aggregate", "clear"):
        return (
            ":material/lock_open: A trusted curator sees every location in the clear; the public sees only the release"
        )
    return f"The server {KIND_TEXT.get(kind, kind)}"


def server_block(result, container=None) -> None:
    c = container or st
    view = result.release.server_view
    cls = registry().get(result.config.mechanism)
    c.markdown(f"**{server_headline(view.kind, cls.family if cls is not None else '')}.**")
    c.write(view.description)
    if cls is not None and cls.threat_model:
        c.caption(f"Threat model: {cls.threat_model}")
    if cls is not None and cls.guarantee:
        c.caption(f"Guarantee: {cls.guarantee}")


def export_block(result, scale: ColourScale, fr: maps.Frame, url: str, stem: str, container=None) -> None:
    from . import report

    c = container or st
    dens = np.asarray(result.release.density, dtype=np.float64)
    link = (st.context.url or "") + url if url.startswith("?") else url  # the report opens away from the app
    buttons = [
        ("Private map (PNG)", lambda: export.release_png(result, scale), "png", "image/png"),
        ("Grid (GeoTIFF)", lambda: export.release_geotiff(result, fr.crs), "tif", "image/tiff"),
        (
            "Grid (GeoParquet)",
            lambda: export.release_geoparquet(result, fr.crs),
            "parquet",
            "application/vnd.apache.parquet",
        ),
        ("Grid (CSV)", lambda: export.csv_grid(dens, fr.domain, fr.crs), "csv", "text/csv"),
        ("Metrics + config (JSON)", lambda: export.record_json(result, url), "json", "application/json"),
        ("Report (HTML)", lambda: report.html_report(result, scale, link), "html", "text/html"),
    ]
    for i, (label, data, ext, mime) in enumerate(buttons):
        if i % 3 == 0:
            cols = c.columns(3)
        cols[i % 3].download_button(
            label,
            data,
            file_name=f"{stem}_report.html" if ext == "html" else f"{stem}.{ext}",
            mime=mime,
            on_click="ignore",
            key=f"dl_{ext}_{stem}",
        )
    c.caption(
        "The map exports (PNG, GeoTIFF, GeoParquet, CSV) hold only the private release; the GeoTIFF and the "
        "GeoParquet carry each cell's 95 % margin where the mechanism has one. The JSON record and the "
        "HTML report are for evaluation: they contain non-private information about the data (metrics against "
        "the true map, exact counts; the report also shows the true map)."
    )


def stem(cfg: RunConfig) -> str:
    side = "auto" if cfg.resolution == "auto" else 2**cfg.depth
    return f"{cfg.mechanism}_eps{cfg.epsilon:g}_seed{cfg.seed}_{side}px"


def share_url(params: dict) -> str:
    from urllib.parse import urlencode

    return "?" + urlencode({k: state._str(v) for k, v in params.items() if v is not None})


def levels_control(result, container=None):
    """Slider over per-level snapshots of a refined tree (``release.levels``: Adaptive HH's sub-queries, Sparse
    EMD's measured levels).

    Returns (grid, rects, caption) for the chosen level, or None for the final release."""
    levels = result.release.levels
    if not levels:
        return None
    c = container or st
    n = len(levels)
    state.seed("explore.level", n, "level", state.int_in(0, n))
    # the slider belongs to one release: another release opens at its final map, never at a level
    # chosen for the previous one (a link's level applies to the release the link was opened with)
    key = result.config.key()
    owner = st.session_state.setdefault("_level_for", key)
    if owner != key:
        st.session_state["_level_for"] = key
        state.put("explore.level", n)
    if state.get("explore.level") > n:
        state.put("explore.level", n)
    # a snapshot may name its quadtree level (Sparse EMD starts measuring at q); else its index
    names = [f"level {i if snap.level is None else snap.level}" for i, snap in enumerate(levels)]
    lv = c.select_slider(
        "Refinement level",
        list(range(n + 1)),
        **state.bind("explore.level"),
        format_func=lambda i: "final release" if i == n else names[i],
        help="Step through the levels the mechanism refined; each shows the cells kept at that level.",
    )
    if lv == n:
        return None
    snap = levels[lv]
    rects = np.asarray(snap.rects, dtype=np.float64).reshape(-1, 4)
    grid = level_grid(result, lv, rects)
    bits = [names[lv], f"{len(rects):,} cells"]
    if snap.threshold is not None:
        bits.append(f"threshold = {float(snap.threshold):.4g}")
    if snap.epsilon is not None:
        bits.append(f"ε = {float(snap.epsilon):.4g}")
    return grid, rects, " · ".join(bits)


def level_grid(result, index: int, rects: np.ndarray):
    """The map of one refinement level: the mechanism's own picture (``Mechanism.level_map``: it knows how its
    tree nodes share pixels), else each rectangle's count spread evenly over its cells."""
    rel = result.release
    snap = rel.levels[index]
    cls = registry().get(result.config.mechanism)
    if cls is not None:
        try:
            own = cls.level_map(rel, index)
        except Exception:  # fall back to the generic picture
            own = None
        if own is not None:
            return np.asarray(own, dtype=np.float64)
    if snap.counts is None or not len(rects):
        return None
    return maps.rects_to_grid(rects, np.asarray(snap.counts, dtype=np.float64), rel.domain)


def outcome_messages(group, container=None) -> None:
    """Errors and cancellations of a group, as messages (never tracebacks)."""
    c = container or st
    for msg in group.errors:
        c.error(f"The run failed: {plain(msg, 600)}", icon=":material/error:")
    if group.cancelled:
        c.info("The run was cancelled.", icon=":material/stop_circle:")


def proportion_block(result, fr, view, display) -> None:
    """Appendix B proportion estimate: the per-region rate of the flag and the width of
    its confidence interval, each painted on the region's cells."""
    prop = result.release.proportion
    if prop is None:
        return
    from .colors import ColourScale

    level = prop.level
    st.subheader("Proportion estimate (Appendix B)")
    st.caption(
        "Each user also reported its binary attribute; per region the server releases the share of users with it "
        f"and a {level:.0%} confidence interval that accounts for the DP noise. Wide intervals = too few users."
    )
    a, b = st.columns(2)
    rate_scale = ColourScale(0.0, 1.0, False, 1.0, "rate", display.cmap)
    width = np.asarray(prop.ci_width_grid, dtype=float)
    heat_chart(
        np.asarray(prop.rate_grid, dtype=float),
        rate_scale,
        fr,
        view,
        "explore_rate",
        display,
        title="Private rate per region",
        container=a,
    )
    a.html(rate_scale.legend_html("share of users with the attribute", shared=False))
    hi = float(np.nanmax(width)) if np.isfinite(width).any() else 1.0
    w_scale = ColourScale(0.0, max(hi, 1e-6), False, 1.0, "CI width", display.cmap)
    heat_chart(width, w_scale, fr, view, "explore_ciwidth", display, title="Confidence-interval width", container=b)
    b.html(w_scale.legend_html("interval width (rate units)", shared=False))


def margin_block(result, cfg: RunConfig, ctl, scale: ColourScale, fr, view, display) -> None:
    """The private map's 95 % margin per cell (:mod:`engine.regions.margins`): the release's own where it states
    its noise, else estimated from releases with the next seeds, only on request."""
    from . import jobs, run_button

    st.subheader("Margin of error")
    reason = margins.no_margin_reason(result.release)
    cls = registry().get(cfg.mechanism)
    if reason is None:
        cells = drawn.derived(
            result.release, f"cell-margins:{fr.crs}", lambda: margins.cell_margins(result.release, fr.crs)
        )
        moe, how = (
            cells.margin95.reshape(fr.domain.n, fr.domain.n),
            f"from the noise's known scale (closed form: {cells.basis})",
        )
    elif cls is not None and cls.margin == "none":
        st.caption(f"No margin of error: {cls.margin_note}.")
        return
    else:
        name, runs = "explore_se", margins.REPEATS
        configs = analysis.repeat_configs(cfg, runs)
        keys = [c.key() for c in configs]
        g = jobs.get_group(name)
        if g is None or g.keys != keys:
            st.caption(
                "This mechanism's error has no closed form here: estimate it from "
                f"{runs} more releases with the next seeds (each is a release of the same people: the ledger "
                f"counts them, ε = {cfg.epsilon:g} each)."
            )
            # never from a link's run=1: these are extra releases, only on request
            g = run_button.launch(
                name, configs, ctl, label="Margin of error", button=f"Estimate from {runs} runs", autorun=False
            )
            if g is None or g.keys != keys:
                return
        jobs.progress_panel([name], "Estimating")
        if g.running:
            return
        got = margins.empirical([s.result.release.density for s in g.statuses if s.state == "ok"], cfg.seed + 1)
        if got is None:
            st.caption("Too few of the repeated releases succeeded to estimate the margin of error.")
            return
        moe, how = got
    heat_chart(moe, scale, fr, view, "explore_moe", display, title="± margin of error (95 %) per cell")
    blank = int(np.count_nonzero(~np.isfinite(moe)))
    med = f"median over cells ±{float(np.nanmedian(moe)) * scale.factor:.3g} {scale.unit}" if blank < moe.size else ""
    below = margins.cells_below(moe, scale.lo) if scale.log else 0
    st.caption(
        "Same colour scale as the maps above: a cell whose margin is as bright as its estimate is noise. "
        + (
            f"{below:,} cells have a margin under the scale's floor ({scale.lo * scale.factor:.3g} {scale.unit}), "
            "drawn empty like the maps' faint cells. "
            if below
            else ""
        )
        + f"Margin {how}"
        + (f"; {med}." if med else ".")
        + (
            f" {blank:,} cells have none (blank): the mechanism set them to 0 after the noise (clipping or "
            "top-t), a choice biased towards 0 rather than noise around the truth, or they share noise with "
            "released units the release does not describe."
            if blank
            else ""
        )
    )
