"""Data: where the dataset comes from, its licence, size, density and attributes."""

import streamlit as st

from ui import boot, controls, datapage, state, views
from ui.text import plain

boot.ensure_router()  # first: a deep link on a fresh server must go through app.py

views.header(
    "Data",
    "Provenance, licence and size of the dataset chosen in the sidebar, a preview of its density, and the "
    "attributes it carries. Synthetic cities are generated here and labelled as such everywhere.",
)
ctl = controls.sidebar("none", epsilon=False, seed=False)
for e in ctl.errors:
    st.error(plain(e, 600))
url = dict(ctl.url)
if ctl.ready:
    cfg = ctl.config("identity", params={})
    datapage.overview(cfg, ctl, release=ctl.mode == "release")
elif ctl.source is not None:
    datapage.source_card(ctl.source)
    st.info("This dataset is not on this machine yet: download it from the sidebar.", icon=":material/download:")
else:
    st.info("Upload a file in the sidebar to see its provenance and density.", icon=":material/upload:")
st.subheader("Every dataset source")
datapage.catalogue()
state.sync_url(url)
