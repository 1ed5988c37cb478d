"""Private location heatmaps: the dashboard's router (``streamlit run app.py``).

Pages are thin scripts in ``pages/``; their building blocks live in ``ui/`` and all
computation in ``engine/``. Jobs run in a thread pool (``engine.run.server._board``), so no process
re-imports this file; the ``__main__`` guard keeps it safe if that ever changes.
"""

from pathlib import Path

import streamlit as st

from ui import boot, state, viewport
from ui.jobs import board
from ui.slots import render_slot

HERE = Path(__file__).parent

PAGES = [
    ("Analyse", "pages/explore.py", "Explore", ":material/map:", True),
    ("Analyse", "pages/compare.py", "Compare", ":material/compare:", False),
    ("Analyse", "pages/tradeoffs.py", "Trade-offs", ":material/show_chart:", False),
    ("Analyse", "pages/ranges.py", "Range queries", ":material/crop_free:", False),
    ("Analyse", "pages/attack.py", "Privacy attack", ":material/person_search:", False),
    ("Analyse", "pages/attributes.py", "Attributes", ":material/bar_chart:", False),
    ("Learn", "pages/methods.py", "Methods", ":material/menu_book:", False),
    ("Learn", "pages/reproduce.py", "Reproduce", ":material/science:", False),
    ("Learn", "pages/data.py", "Data", ":material/database:", False),
]


CSS = """<style>
/* the maps take the width: 2 rem side padding instead of wide layout's 5 rem */
[data-testid="stMainBlockContainer"] {padding-left: 2rem; padding-right: 2rem; padding-top: 3.5rem;}
.map-title {font-weight: 600; line-height: 1.3em; height: 2.6em; overflow: hidden;
  display: -webkit-box; -webkit-line-clamp: 2; -webkit-box-orient: vertical;}
.metric-table {border-collapse: collapse; width: 100%; font-size: 0.9rem;}
.metric-table th {text-align: right; font-weight: 600; padding: 2px 6px; border-bottom: 1px solid #ddd;}
.metric-table td {text-align: right; padding: 4px 6px 0 6px; white-space: nowrap;}
.metric-table td:first-child {text-align: left;}
.metric-table tr.expl td {text-align: left; white-space: normal; font-size: 0.75rem; opacity: 0.7;
  padding: 0 6px 5px 6px; border-bottom: 1px solid #eee;}
"""
# a regional map is blank while the browser builds and draws it (seconds when WebGL runs without a GPU): these words
# under its canvas say so until the drawn square covers them
DRAWING = (
    "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='200' height='24'%3E%3Ctext x='100' y='17' "
    "text-anchor='middle' font-family='sans-serif' font-size='15' fill='%23777'%3EDrawing the map%E2%80%A6%3C/text%3E"
    "%3C/svg%3E"
)
CSS += (
    f'[class*="st-key-regionmap_"] [data-testid="stDeckGlJsonChart"] {{background: center / 50% auto no-repeat '
    f'url("{DRAWING}");}}\n</style>'
)


def main() -> None:
    st.set_page_config(
        page_title="Private location heatmaps",
        page_icon=str(HERE / "ui" / "favicon.png"),  # a local file: an icon name would be fetched from Google
        layout="wide",
        initial_sidebar_state="expanded",
    )
    state.init_url()
    board()  # start the shared job pool (and its engine warm-up) with the first page
    st.html(CSS)
    sections: dict[str, list] = {}
    for section, path, title, icon, default in PAGES:
        sections.setdefault(section, []).append(st.Page(path, title=title, icon=icon, default=default))
    pg = st.navigation(sections, position="sidebar")
    boot.mark_routed()
    st.sidebar.markdown("**Private location heatmaps** · a workbench for differentially private maps")
    viewport.wheel_scrolls_page(st.sidebar)  # on every page: the wheel scrolls the page over its maps
    with render_slot():
        pg.run()
    board().warm_up()  # after the page, so it does not compete with the first render


if __name__ == "__main__":
    main()
