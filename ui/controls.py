"""The sidebar: dataset, mechanism(s) and their parameters, ε, users, resolution, seed.

Every page that runs something builds its :class:`Controls` here, so the same
choices carry from page to page and into the URL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import streamlit as st

from engine.core.errors import EngineError
from engine.data.registry import Source
from engine.mechanisms import registry
from engine.run.bookkeeping import release_limit
from engine.run.execution import RunConfig, fresh_seed, with_regions

from . import geocheck, region_panel, state, uploads, widgets
from .jobs import board
from .resolution import GridChoice, grid_controls
from .text import plain

UPLOAD = "__upload__"
# server-side file paths and download addresses are for the command line (operators): a browser user
# must neither read the server's disk nor make the server fetch an address of their choosing
HIDDEN_SOURCE_PARAMS = ("path", "url")
DEFAULT_DATASET = "synthetic:polycentric"
KIND_TAG = {"synthetic": "", "builtin": "", "online": " [online]", "file": ""}
MODES = {"evaluate": "Evaluate", "release": "Release"}
FAMILY_ORDER = {"none": 0, "central": 1, "distributed": 2, "local": 3, "federated": 4}


@dataclass
class Display:
    log: bool = True
    units: str = "km2"
    cmap: str = "viridis"
    basemap: bool = False
    outlines: bool = True

    def url(self) -> dict:
        d = {}
        if not self.log:
            d["scale"] = "linear"
        if self.units != "km2":
            d["units"] = self.units
        if self.cmap != "viridis":
            d["cmap"] = self.cmap
        if self.basemap:
            d["basemap"] = True
        if not self.outlines:
            d["outlines"] = False
        return d


@dataclass
class Controls:
    dataset: str
    dataset_options: dict
    source: object  # engine.data.registry.Source
    epsilon: float
    n_users: int | None
    depth: int
    seed: int
    secure: bool
    mode: str = "evaluate"  # or "release"
    mechanisms: list[str] = field(default_factory=list)
    params: dict[str, dict] = field(default_factory=dict)  # mechanism -> values
    errors: list[str] = field(default_factory=list)
    display: Display = field(default_factory=Display)
    url: dict = field(default_factory=dict)
    side_information: list[str] = field(default_factory=list)  # what the page read off private data
    grid: GridChoice = field(default_factory=GridChoice)  # the resolution and frame (ui/resolution.py)
    regions: object = None  # the analysis's one region set (ui/region_panel.py Choice), None: none

    @property
    def release_limit(self) -> float:
        """The operator's limit on the ε released from this dataset (read-only to every session)."""
        return release_limit(self.dataset)

    @property
    def ready(self) -> bool:
        """False while the dataset is not usable yet (upload pending, download needed) or inputs are bad."""
        return not self.errors and self.dataset != UPLOAD and bool(getattr(self.source, "offline", True))

    def config(self, mechanism: str | None = None, **overrides) -> RunConfig:
        m = mechanism or (self.mechanisms[0] if self.mechanisms else "identity")
        params = dict(overrides.pop("params", self.params.get(m, {})))
        try:  # defaults filled in, so equal releases share one configuration key (and one ledger entry)
            params = registry()[m].schema().resolve(with_regions(m, params, getattr(self.regions, "spec", None)))
        except (EngineError, KeyError):
            pass  # the run reports the problem
        cfg = RunConfig(
            dataset=self.dataset,
            dataset_options=dict(self.dataset_options),
            mechanism=m,
            params=params,
            epsilon=float(self.epsilon),
            n_users=self.n_users,
            seed=int(self.seed),
            secure=bool(self.secure),
            mode=self.mode,
            side_information=tuple(self.side_information),
            **self.grid.config_fields(),
        )
        return replace(cfg, **overrides) if overrides else cfg


# --------------------------------------------------------------------- datasets
def _sources() -> dict:
    """Every dataset source, those the mechanism families register included."""
    from engine.data import sources
    from engine.mechanisms import load_all

    load_all()
    return sources()


def _visible_sources(srcs: dict) -> list[str]:
    """Catalogue sources, plus only this session's own uploads (the registry's "file" source reads
    server paths: command line only)."""
    order = {"synthetic": 0, "builtin": 1, "online": 2}
    keys = sorted(
        (k for k, s in srcs.items() if s.kind != "file"), key=lambda k: (order.get(srcs[k].kind, 9), srcs[k].label)
    )
    return keys + [u.key for u in uploads.mine()]


def _source_label(srcs: dict, key: str) -> str:
    if key == UPLOAD:
        return "Upload a file…"
    s = srcs.get(key)
    if s is None:
        up = uploads.get(key)
        return key if up is None else up.label
    extra = " — download needed" if s.kind == "online" and not s.offline else ""
    return f"{s.label}{KIND_TAG.get(s.kind, '')}{extra}"


def _upload_source(up) -> Source:
    """A session's upload as a Source for the page (never added to the shared registry)."""
    ds = up.dataset
    return Source(
        key=up.key,
        label=up.label,
        kind="file",
        description=f"Uploaded by you: {up.filename}",
        loader=lambda: ds,
        citation="the user's own file",
        license="the user's own data",
    )


def _on_upload() -> None:
    """Parse an uploaded file with the engine and keep it as this session's own dataset."""
    f = st.session_state.get("upload_file")
    st.session_state.pop("_upload_error", None)
    st.session_state.pop("_upload_note", None)
    st.session_state.pop("_upload_pick", None)
    if f is not None:
        _load_upload(f.name, f.getvalue(), None, f)


def _on_pick() -> None:
    """Read the file again with the coordinate columns the user picked (or exchanged)."""
    pick = st.session_state.get("_upload_pick")
    if pick is not None:
        cols = {"lon": st.session_state.get("upload_pick_lon"), "lat": st.session_state.get("upload_pick_lat")}
        st.session_state.pop("_upload_error", None)
        _load_upload(pick["name"], pick["data"], cols)


def _on_crs() -> None:
    """Read the file the uploader still holds (one it could not read, such as one without its CRS) again in the
    CRS now given."""
    if st.session_state.get("_upload_pick") is not None:
        _on_pick()
    elif st.session_state.get("upload_file") is not None and st.session_state.get("_upload_error"):
        _on_upload()


def swap_upload(key: str) -> None:
    """Read an upload again with its longitude and latitude columns exchanged: a new upload, now selected."""
    got = geocheck.found(key)
    if got is not None and got["swap"] is not None:
        sw = got["swap"]
        _load_upload(sw["name"], sw["data"], sw["columns"])


def _load_upload(filename: str, data: bytes, columns: dict | None, raw=None) -> None:
    name = filename if len(filename) <= 80 else filename[:77] + "…"
    try:
        from engine.data.files.columns import MissingColumns
        from engine.data.files.isolate import load_file_isolated

        ds = load_file_isolated(data, filename, columns=columns, crs=st.session_state.get("upload_crs") or None)
    except MissingColumns as exc:  # let the user say which columns hold the coordinates
        st.session_state["_upload_pick"] = {"name": filename, "data": data, "columns": exc.available}
        st.session_state["_upload_error"] = (
            f"{name}: no column is named like a longitude or a latitude. Pick them below."
        )
        return
    except EngineError as exc:
        msg = str(exc)
        st.session_state["_upload_error"] = msg if msg.startswith(name) else f"{name}: {msg}"
        return
    except ImportError:
        st.session_state["_upload_error"] = "file loading is not available in this installation"
        return
    except Exception as exc:  # never a traceback for a user's file
        st.session_state["_upload_error"] = f"{name} could not be read ({type(exc).__name__})"
        return
    key, dropped = uploads.store().add(uploads.owner(), name, ds)
    if raw is not None:
        try:
            uploads.forget_raw(raw)
        except Exception:  # freeing memory early is an optimisation, never an error for the user
            pass
    if dropped:
        st.session_state["_upload_note"] = (
            f"To stay within this server's limits for one session, your oldest upload{'s' if len(dropped) > 1 else ''} "
            f"({', '.join(dropped)}) {'were' if len(dropped) > 1 else 'was'} released."
        )
    geocheck.remember(key, ds, filename, data)
    st.session_state.pop("_upload_pick", None)
    state.put("cfg.ds", key)


def dataset_controls(container=None) -> tuple[str, dict, object, list[str]]:
    c = container or st.sidebar
    srcs = _sources()
    keys = _visible_sources(srcs) + [UPLOAD]
    labels = {k: _source_label(srcs, k) for k in keys}  # computed now: format_func may run outside this session

    def _check(v):
        if v not in keys:
            raise ValueError("unknown dataset (an uploaded file belongs to the session that uploaded it)")
        return v

    state.seed("cfg.ds", DEFAULT_DATASET if DEFAULT_DATASET in keys else keys[0], "ds", _check)
    if state.get("cfg.ds") not in keys:
        state.put("cfg.ds", keys[0])
    key = c.selectbox(
        "Dataset",
        keys,
        **state.bind("cfg.ds"),
        format_func=labels.get,
        help="Synthetic cities and bundled datasets work offline; online datasets are downloaded once.",
    )
    errors: list[str] = []
    if key == UPLOAD:
        c.text_input(
            "CRS of the coordinates (when the file does not say)",
            key="upload_crs",
            placeholder="EPSG:27700",
            on_change=_on_crs,
            help="Empty: longitude and latitude in degrees (WGS84), or the CRS the file declares. Coordinates in "
            "metres or kilometres need theirs: an EPSG code (EPSG:27700 for British National Grid), or a PROJ string "
            "for a projection no code names (+proj=utm +zone=36 +units=km +datum=WGS84: UTM zone 36N in km). A local "
            "grid whose place on the Earth is unknown cannot be placed on a map.",
        )
        c.file_uploader(
            "Your file (CSV with lon/lat columns, GeoJSON, GeoParquet, zipped Shapefile)",
            key="upload_file",
            on_change=_on_upload,
            type=["csv", "tsv", "txt", "json", "geojson", "parquet", "geoparquet", "zip", "gpkg"],
        )
        if st.session_state.get("_upload_error"):
            c.error(plain(st.session_state["_upload_error"], 600))  # it quotes the user's file name
        pick = st.session_state.get("_upload_pick")
        if pick is not None:
            cols = pick["columns"]
            c.selectbox("Longitude column (east-west)", cols, key="upload_pick_lon")
            c.selectbox("Latitude column (north-south)", cols, index=min(1, len(cols) - 1), key="upload_pick_lat")
            c.button("Read the file with these columns", on_click=_on_pick, key="upload_pick_go")
        return key, {}, None, errors
    if st.session_state.get("_upload_note"):
        c.info(plain(st.session_state.pop("_upload_note"), 600))
    up = uploads.get(key)
    geocheck.warning(key, c, on_swap=swap_upload)
    src = _upload_source(up) if up is not None else srcs[key]
    shown = tuple(p for p in src.params if p.name not in HIDDEN_SOURCE_PARAMS)
    opts, errs = widgets.schema_widgets(shown, f"cfg.d.{key}", "d", container=c)
    errors += errs
    try:
        opts = src.schema().resolve(opts)  # coerced, so the run's cache key is stable
    except EngineError as exc:
        errors.append(str(exc))
    if src.kind == "online" and not src.offline:
        download_controls(src, opts, c)
    return key, opts, src, errors


def download_controls(src, opts: dict, c) -> None:
    """Download button with progress for an online source not cached yet."""
    downloads = st.session_state.setdefault("_downloads", {})
    d = downloads.get(src.key)
    c.info(f"{src.label} is not on this machine yet. {src.description}")
    if d is None or d["future"].done():
        if d is not None and d["future"].done():
            exc = d["future"].exception()
            if exc is not None:
                msg = str(exc) if isinstance(exc, EngineError) else f"the download failed ({type(exc).__name__})"
                c.error(msg)
        if c.button(
            "Download",
            key=f"dl_{src.key}",
            icon=":material/download:",
            help="Fetch the public file once into the cache",
        ):
            downloads[src.key] = _start_download(src, opts)
            st.rerun()
        return

    @st.fragment(run_every=0.5)
    def _dl_progress():
        dd = st.session_state["_downloads"].get(src.key)
        if dd is None or dd["future"].done():
            st.rerun()
        st.progress(min(max(dd["progress"]["f"], 0.0), 1.0), text=f"Downloading… {dd['progress']['msg']}")

    with c:
        _dl_progress()


def _start_download(src, opts: dict) -> dict:
    """Fetch an online source on the job pool: ``engine.data.online.prefetch`` reports bytes as it goes;
    a source it does not know is simply loaded (which downloads and caches it)."""
    prog = {"f": 0.0, "msg": ""}

    def cb(done, total=None):
        if total:
            prog["f"], prog["msg"] = done / total, f"{done / 2**20:,.1f} of {total / 2**20:,.1f} MB"
        else:
            prog["f"], prog["msg"] = 0.0, f"{done / 2**20:,.1f} MB"

    def work():
        try:
            from engine.data.online import prefetch
        except ImportError:
            prefetch = None
        # only the catalogue's own address: a download address is never a browser user's parameter
        if prefetch is not None and prefetch(src.key, progress=cb) is not None:
            return True
        src.load(**opts)
        return True

    return {"future": board().submit_task(work), "progress": prog, "started": time.time()}


# ------------------------------------------------------------------ mechanisms
def non_private(cls) -> bool:
    """A reference that adds no privacy noise (the paper's non-private rows, plain federated KDE)."""
    return cls.family == "none" or not cls.uses_epsilon


def is_attribute(cls) -> bool:
    """Estimates a regional mean of the data's ``value`` (painted per region), not where people are."""
    return "value" in cls.needs


def mechanism_keys(kind: str = "all") -> list[str]:
    """Registered mechanisms for a page: ``kind`` "heatmap" (location maps), "attribute" (attribute means) or
    "all"; private mechanisms first by family, non-private references last."""
    reg = registry()
    keys = [k for k in reg if kind == "all" or (kind == "attribute") == is_attribute(reg[k])]
    return sorted(
        keys,
        key=lambda k: (non_private(reg[k]), FAMILY_ORDER.get(reg[k].family, 9), (reg[k].label or k).lower()),
    )


def default_set(n: int = 4) -> list[str]:
    """A small, varied default comparison: the classic baselines, then one mechanism per other family."""
    reg = registry()
    usable = [k for k in mechanism_keys() if not reg[k].needs and reg[k].family != "none" and reg[k].uses_epsilon]
    out = [k for k in ("identity", "uniform") if k in usable]
    for fam in ("distributed", "local", "federated", "central"):
        pick = next((k for k in usable if reg[k].family == fam and k not in out), None)
        if pick is not None and len(out) < n:
            out.append(pick)
    return out or mechanism_keys()[:n]


def mechanism_label(key: str) -> str:
    cls = registry().get(key)
    if cls is None:
        return key
    return f"{cls.label or key} · " + ("non-private reference" if non_private(cls) else cls.family)


def mechanism_params(mech: str, container=None, expanded=False, in_expander=True) -> tuple[dict, list[str]]:
    cls = registry()[mech]
    if not cls.params:
        return {}, []
    c = container or st.sidebar
    box = c.expander(f"Parameters of {cls.label or mech}", expanded=expanded) if in_expander else c
    own = tuple(p for p in cls.params if p.name not in cls.region_params)  # the regions: the sidebar's Regions
    return widgets.schema_widgets(own, f"cfg.p.{mech}", f"p.{mech}", container=box)


def single_mechanism(container=None, key="cfg.mech", url_name="mech", default="identity", kind="heatmap") -> str:
    c = container or st.sidebar
    keys = mechanism_keys(kind)

    def _check(v):
        if v not in keys:
            raise ValueError(f"unknown mechanism; known: {', '.join(keys)}")
        return v

    state.seed(key, default if default in keys else keys[0], url_name, _check)
    if state.get(key) not in keys:
        state.put(key, keys[0])
    m = c.selectbox(
        "Mechanism",
        keys,
        **state.bind(key),
        format_func=mechanism_label,
        help="Every mechanism registered in the engine; see the Methods page for details.",
        filter_mode="contains",  # typing a name finds that mechanism, not every label sharing its letters
    )
    summ = registry()[m].summary
    if summ:
        c.caption(summ)
    return m


def multi_mechanisms(
    container=None, key="cfg.mechs", url_name="mechs", default=None, max_n=None, kind="heatmap"
) -> list[str]:
    c = container or st.sidebar
    keys = mechanism_keys(kind)

    def _check(v):
        named = state.parse_list(v)
        vals = list(dict.fromkeys(named))  # a mechanism named twice runs once
        bad = [x for x in vals if x not in keys]
        if bad:
            raise ValueError(f"unknown mechanism(s) {', '.join(bad)}")
        if max_n is not None and len(vals) > max_n:
            raise ValueError(f"{len(vals)} mechanisms, but this page compares at most {max_n}")
        twice = [x for x in vals if named.count(x) > 1]
        if twice:
            state.warn(f"URL parameter '{url_name}' names {', '.join(twice)} more than once: each runs once")
        return vals

    state.seed(key, default if default is not None else default_set(), url_name, _check)
    kept = list(dict.fromkeys(m for m in state.get(key) if m in keys))
    state.put(key, kept[:max_n] if max_n is not None else kept)
    return list(
        c.multiselect(
            "Mechanisms",
            keys,
            **state.bind(key),
            format_func=mechanism_label,
            max_selections=max_n,
            help="Every mechanism registered in the engine runs on the same data, ε and seed.",
            filter_mode="contains",
        )
    )


# ------------------------------------------------------------------ the sidebar
def display_controls(container=None) -> Display:
    c = container or st.sidebar
    box = c.expander("Map display", expanded=False)
    state.seed("cfg.log", True, "scale", state.one_of({"log": True, "linear": False}))
    state.seed("cfg.units", "km2", "units", state.one_of({"km2": "km2", "share": "share"}))
    state.seed("cfg.cmap", "viridis", "cmap", state.one_of({k: k for k in ("viridis", "magma", "cividis", "inferno")}))
    state.seed("cfg.basemap", False, "basemap", state.parse_bool)
    state.seed("cfg.outlines", True, "outlines", state.parse_bool)
    log = box.toggle("Log colour scale", **state.bind("cfg.log"), help="Cities are heavy-tailed")
    units = box.radio(
        "Units",
        ["km2", "share"],
        **state.bind("cfg.units"),
        format_func=lambda u: {"km2": "locations per km²", "share": "% of all locations"}[u],
        horizontal=True,
    )
    cmap = box.selectbox("Colour map", ["viridis", "magma", "cividis", "inferno"], **state.bind("cfg.cmap"))
    outlines = box.toggle(
        "Outline adaptive cells",
        **state.bind("cfg.outlines"),
        help="For mechanisms that refine a partition of the region",
    )
    basemap = box.toggle(
        "Basemap (online)",
        **state.bind("cfg.basemap"),
        help="Loads map tiles from Carto over the internet. Off by default: the app makes no network request.",
    )
    if basemap:
        box.caption(
            "The basemap needs an internet connection (tiles from Carto). Without one, the maps show the "
            "heatmap and the region's outline only."
        )
    return Display(log=log, units=units, cmap=cmap, basemap=basemap, outlines=outlines)


def sidebar(
    mechanisms: str = "single",
    epsilon: bool = True,
    users: bool = True,
    resolution: bool = True,
    seed: bool = True,
    display: bool = True,
    default_mechs=None,
    max_mechs=None,
    mech_key: str = "cfg.mech",
    default_mech: str | None = None,
    kind: str = "heatmap",
) -> Controls:
    """Build the sidebar for a page. ``mechanisms`` is "single", "multi" or "none"; ``kind`` which
    mechanisms the page offers ("heatmap" or "attribute")."""
    sb = st.sidebar
    sb.markdown("### Data")
    ds, opts, src, errors = dataset_controls(sb)
    mechs: list[str] = []
    params: dict[str, dict] = {}
    url: dict = {"ds": ds if not ds.startswith(uploads.UPLOAD_PREFIX) and ds != UPLOAD else None}
    if src is not None:
        url.update({f"d.{p.name}": opts.get(p.name) for p in src.params if opts.get(p.name) != p.default})
    if mechanisms != "none":
        sb.markdown("### Mechanism" + ("s" if mechanisms == "multi" else ""))
        if mechanisms == "single":
            mechs = [single_mechanism(sb, key=mech_key, default=default_mech or "identity", kind=kind)]
            url["mech"] = mechs[0]
            vals, errs = mechanism_params(mechs[0], sb)
            params[mechs[0]] = vals
            errors += errs
            url.update(widgets.non_default(tuple(registry()[mechs[0]].params), vals, f"p.{mechs[0]}"))
        else:
            mechs = multi_mechanisms(sb, default=default_mechs, max_n=max_mechs, kind=kind)
            url["mechs"] = mechs
            for m in mechs:
                vals, errs = mechanism_params(m, sb)
                params[m] = vals
                errors += errs
                url.update(widgets.non_default(tuple(registry()[m].params), vals, f"p.{m}"))
    regions_box = sb.container()  # filled once the grid is known (H3's default resolution follows the map)
    sb.markdown("### Run")
    eps = widgets.epsilon_widget(container=sb) if epsilon else 1.0
    n = (
        widgets.int_widget(
            "Users sampled (0 = all)",
            "cfg.n",
            "n",
            0,
            container=sb,
            step=1000,
            help="Draw this many users without replacement (all their locations are kept).",
        )
        if users
        else 0
    )
    grid_box = sb.container()  # filled once the mode is known: Evaluate may show what Release may not
    state.seed("cfg.mode", "evaluate", "mode", state.one_of({m: m for m in MODES}))
    # a page without mechanisms has no Mode of its own: it shows what the session's mode allows
    mode = state.get("cfg.mode") if state.get("cfg.mode") in MODES else "evaluate"
    if mechanisms != "none":
        mode = sb.radio(
            "Mode",
            list(MODES),
            **state.bind("cfg.mode"),
            format_func=MODES.get,
            horizontal=True,
            help="Evaluate: seeded, reproducible noise; the true map and the error metrics are shown; exports are "
            "stamped as containing non-private information. Release: OpenDP's floating-point-safe samplers with "
            "fresh entropy, no seed, only the private release is shown and exported, booked against the dataset's ε "
            "limit (refused past it).",
        )
    sd, secure = 0, True
    if mode == "evaluate":
        # no fixed default seed: noise from a seed anyone can guess (0) can be recomputed, so a session starts
        # from a seed drawn from OS entropy, shown here and in the link so a run can be reproduced on purpose
        fresh = st.session_state.setdefault("_fresh_seed", fresh_seed())
        if seed:
            sd = widgets.int_widget(
                "Noise seed",
                "cfg.seed",
                "seed",
                fresh,
                container=sb,
                help="The seed of this evaluation's noise (and of the users sampled), drawn at random for this session: "
                "the same seed gives the same private map, to reproduce a run on purpose; a new seed is a new release. "
                "Release mode has none.",
            )
            sb.button(
                "New seed",
                key="new_seed",
                icon=":material/casino:",
                on_click=lambda: state.put("cfg.seed", fresh_seed()),
                help="Draw a new seed from OS entropy: a new release of the same people.",
            )
        state.seed("cfg.secure", False, "secure", state.parse_bool)
        secure = False
        if mechanisms != "none":
            secure = sb.toggle(
                "Secure noise (OpenDP)",
                **state.bind("cfg.secure"),
                help="Draw the noise with OpenDP's samplers (slower, floating-point safe).",
            )
    elif mechanisms != "none":
        sb.caption("Release: OpenDP samplers with fresh OS entropy; no seed is drawn or recorded.")
    grid = grid_controls(grid_box, ds, opts, src, int(n) if n else None, mode) if resolution else GridChoice()
    disp = display_controls(sb) if display else Display()
    url.update({"eps": eps if epsilon and eps != 1.0 else None, "n": n or None})
    if mode == "evaluate" and seed:
        url["seed"] = sd
    if mode != "evaluate":
        url["mode"] = mode
    url.update(grid.url)
    if secure and mode == "evaluate":
        url["secure"] = True
    url.update(disp.url())
    ctl = Controls(
        dataset=ds,
        dataset_options=opts,
        source=src,
        epsilon=float(eps),
        n_users=int(n) if n else None,
        depth=int(grid.depth),
        seed=int(sd),
        secure=bool(secure),
        mode=mode,
        mechanisms=mechs,
        params=params,
        errors=errors,
        display=disp,
        url={k: v for k, v in url.items() if v is not None},
        grid=grid,
    )
    if kind == "heatmap" and mechanisms != "none":
        region_panel.sidebar(regions_box, ctl)
    return ctl
