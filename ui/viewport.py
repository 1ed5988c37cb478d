"""The browser's room for the maps, and the swipe view.

A deck's view is fixed in pixels per metre, so maps grow with the page only if the server knows how wide
the page is: :func:`room` mounts a tiny in-page component that reports the main column's width, the
window's height and whether the sidebar is open, again whenever they change (the sidebar collapsed or the
window resized), which reruns the page with maps sized to fit. Without a browser (AppTest) it reports
nothing and the page uses 1440 x 900 with the sidebar open.

:func:`swipe` draws the true and the private map as one square with a handle that slides between them:
two images of the same colour scale stacked, the private one clipped at the handle (no network, no
deck; the coordinates of the square's corners are written on its frame).

:func:`basemap_watch` puts a note on every map of the page when the online basemap cannot be reached, and
:func:`wheel_scrolls_page` makes the mouse wheel scroll the page over the maps (they zoom with Ctrl or ⌘ held).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import streamlit as st

from .maps import LABEL_PX

_ROOM_JS = """
export default function(component) {
  const { setStateValue, parentElement } = component;
  const host = parentElement.host || parentElement;
  const main = document.querySelector('[data-testid="stMainBlockContainer"]') || host.parentElement;
  let last = null;
  const report = () => {
    const bar = document.querySelector('[data-testid="stSidebar"]');
    const open = !!bar && bar.getAttribute('data-collapsed') !== 'true';
    const cs = getComputedStyle(main);
    const w = Math.round(main.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight));
    const v = { width: w, height: window.innerHeight, sidebar: open };
    // a change of a scrollbar's width is no reason to redraw (nor to loop: smaller maps, no scrollbar, ...)
    const moved = !last || last.sidebar !== open || Math.abs(last.width - w) > 24 || Math.abs(last.height - v.height) > 24;
    if (moved && w > 0) { last = v; setStateValue('room', v); }
  };
  const ro = new ResizeObserver(() => report());
  ro.observe(main);
  window.addEventListener('resize', report);
  report();
  return () => { ro.disconnect(); window.removeEventListener('resize', report); };
}
"""

_SWIPE_CSS = """
.swipe {position: relative; user-select: none; touch-action: none; margin: 0 auto;}
.swipe img {position: absolute; inset: 0; width: 100%; height: 100%; image-rendering: pixelated;
  border: 1px solid #888; box-sizing: border-box;}
.swipe .over {clip-path: inset(0 0 0 50%);}
.swipe .handle {position: absolute; top: 0; bottom: 0; left: 50%; width: 0; border-left: 3px solid #222;
  cursor: ew-resize;}
.swipe .knob {position: absolute; top: 50%; left: -15px; width: 26px; height: 26px; border-radius: 50%;
  background: #fff; border: 2px solid #222; font: 14px sans-serif; line-height: 26px; text-align: center;}
.swipe .tag {position: absolute; top: 6px; padding: 1px 6px; background: rgba(255,255,255,.85);
  font: 600 {LABEL}px sans-serif; color: #222;}
.swipe .coord {position: absolute; font: 600 {LABEL}px sans-serif; color: #222; background: rgba(255,255,255,.8);
  padding: 0 3px;}
""".replace("{LABEL}", str(LABEL_PX))

_SWIPE_JS = """
export default function(component) {
  const { data, parentElement } = component;
  let box = parentElement.querySelector('.swipe');
  if (!box) { box = document.createElement('div'); box.className = 'swipe'; parentElement.appendChild(box); }
  box.style.width = data.px + 'px'; box.style.height = data.px + 'px';
  box.innerHTML = data.inner;
  const over = box.querySelector('.over'), handle = box.querySelector('.handle');
  const set = (f) => {
    f = Math.min(1, Math.max(0, f));
    over.style.clipPath = `inset(0 0 0 ${f * 100}%)`; handle.style.left = `${f * 100}%`;
    box.dataset.at = f.toFixed(3);
  };
  const move = (e) => { const r = box.getBoundingClientRect(); set((e.clientX - r.left) / r.width); };
  let drag = false;
  box.onpointerdown = (e) => { drag = true; box.setPointerCapture(e.pointerId); move(e); };
  box.onpointermove = (e) => { if (drag) move(e); };
  box.onpointerup = () => { drag = false; };
  set(data.at);
}
"""


# The mouse wheel over a map scrolls the page, as over any other part of it: a talk scrolling down to the metrics
# must not shrink the maps it passes. The map zooms with Ctrl (or ⌘) held, which is also what a trackpad's pinch
# sends, with a double click (Shift: out), the + and - keys, or the page's own zoom control. The wheel reaches deck.gl
# only with the modifier: stopped at the window before it gets to the map, it keeps its default, scrolling.
_WHEEL_JS = """
export default function(component) {
  const guard = (e) => {
    if (e.ctrlKey || e.metaKey) return;
    if (e.target instanceof Element && e.target.closest('[data-testid="stDeckGlJsonChart"]')) e.stopPropagation();
  };
  window.addEventListener('wheel', guard, { capture: true });
  return () => window.removeEventListener('wheel', guard, { capture: true });
}
"""
ZOOM_HELP = "Scrolling moves the page; Ctrl (⌘) + scroll, a pinch or a double click zooms the maps (Shift: out)."

_BASEMAP_JS = """
export default function(component) {
  const { data } = component;
  const say = () => document.querySelectorAll('[data-testid="stDeckGlJsonChart"]').forEach((el) => {
    if (el.querySelector('.basemap-missing')) return;
    const note = document.createElement('div');
    note.className = 'basemap-missing';
    note.textContent = data.text;
    note.style.cssText = 'position:absolute;left:8px;bottom:8px;z-index:5;padding:2px 8px;font:16px sans-serif;' +
      'background:rgba(255,255,255,.9);color:#8a1c1c;border:1px solid #c77;border-radius:3px;pointer-events:none';
    if (getComputedStyle(el).position === 'static') el.style.position = 'relative';
    el.appendChild(note);
  });
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 6000);
  fetch(data.url, { mode: 'no-cors', cache: 'no-store', signal: ctl.signal })
    .then(() => clearTimeout(timer))
    .catch(() => { clearTimeout(timer); say(); setTimeout(say, 1500); });
}
"""
BASEMAP_STYLE = "https://basemaps.cartocdn.com/gl/positron-gl-style/style.json"  # pydeck's Carto "light"


@dataclass(frozen=True)
class Room:
    width: int = 1076  # the main column at 1440 px with the sidebar open
    height: int = 900
    sidebar: bool = True


@st.cache_resource
def _room_component():
    return st.components.v2.component("heatmap_room", js=_ROOM_JS)


@st.cache_resource
def _wheel_component():
    return st.components.v2.component("heatmap_wheel", js=_WHEEL_JS)


def wheel_scrolls_page(container=None) -> None:
    """Mount the guard that lets the mouse wheel scroll the page over every map (see ``_WHEEL_JS``)."""
    try:
        with container or st.container():
            _wheel_component()(key="wheel_scrolls_page", height=0)
    except Exception:  # no browser behind the session (AppTest): no wheel to guard
        pass


@st.cache_resource
def _basemap_component():
    return st.components.v2.component("heatmap_basemap_watch", js=_BASEMAP_JS)


def basemap_watch(key: str) -> None:
    """With the online basemap on: when its tiles' server cannot be reached, every map on the page says so."""
    try:
        _basemap_component()(
            key=key,
            data={
                "url": BASEMAP_STYLE,
                "text": "The online basemap could not load (no network?): only the app's own layers are drawn.",
            },
            height=0,
        )
    except Exception:  # no browser behind the session (AppTest): nothing to watch
        pass


@st.cache_resource
def _swipe_component():
    return st.components.v2.component("heatmap_swipe", css=_SWIPE_CSS, js=_SWIPE_JS)


def room(key: str, container=None) -> Room:
    """The room the browser reports (see the module's note), or 1440 x 900 with the sidebar open."""
    c = container or st
    try:
        with c:
            got = _room_component()(key=key, default={"room": None}, on_room_change=lambda: None, height=0)
    except Exception:  # no browser behind the session (AppTest): the default room
        return Room()
    v = getattr(got, "room", None) or {}
    try:
        out = Room(int(v["width"]), int(v["height"]), bool(v["sidebar"]))
    except (KeyError, TypeError, ValueError):
        out = Room()
    st.session_state[f"_room_{key}"] = out
    return out


def last_room(key: str) -> Room:
    """The room :func:`room` last reported under ``key`` (for what the page lays out before it mounts the
    component), or 1440 x 900 with the sidebar open."""
    return st.session_state.get(f"_room_{key}") or Room()


def swipe(true_png: str, private_png: str, px: int, key: str, labels=("true", "private"), corners=None) -> None:
    """One square: the true map left of the handle, the private map right of it; drag the handle to move it.
    ``true_png``/``private_png`` are data URLs of the same colour scale; ``corners`` = (south-west, north-east)
    labels written on the frame."""
    e = html.escape
    inner = (
        f'<img src="{e(true_png)}" alt="{e(labels[0])}"><img class="over" src="{e(private_png)}" alt="{e(labels[1])}">'
        f'<span class="tag" style="left:6px">◀ {e(labels[0])}</span>'
        f'<span class="tag" style="right:6px">{e(labels[1])} ▶</span>'
        '<div class="handle"><div class="knob">⇔</div></div>'
    )
    if corners:
        inner += f'<span class="coord" style="left:2px;bottom:2px">{e(corners[0])}</span>'
        inner += f'<span class="coord" style="right:2px;top:{LABEL_PX + 16}px">{e(corners[1])}</span>'
    _swipe_component()(key=key, data={"inner": inner, "px": int(px), "at": 0.5}, height=int(px) + 4)
