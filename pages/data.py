"""Data: where the dataset comes from, its licence, size, density and attributes."""

import streamlit as st

from ui import datapage
from ui.page import page

with page(
    "Data",
    "Provenance, licence and size of the dataset chosen in the sidebar, a preview of its density, and the "
    "attributes it carries. Synthetic cities are generated here and labelled as such everywhere.",
    sidebar={"mechanisms": "none", "epsilon": False, "seed": False},
) as p:
    ctl = p.ctl
    if ctl.ready:
        datapage.overview(ctl.config("identity", params={}), ctl, release=ctl.mode == "release")
    elif ctl.source is not None:
        datapage.source_card(ctl.source)
        st.info("This dataset is not on this machine yet: download it from the sidebar.", icon=":material/download:")
    else:
        st.info("Upload a file in the sidebar to see its provenance and density.", icon=":material/upload:")
    st.subheader("Every dataset source")
    datapage.catalogue()
