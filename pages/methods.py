"""Methods: one section per registered mechanism, generated from its metadata."""

import streamlit as st

from ui import controls, methods, state, views
from ui.page import page

with page(
    "Methods",
    "Every mechanism the engine registers, described from its own metadata: the idea, who sees what, the "
    "guarantee, the paper and equations it implements, its parameters and its full documentation.",
) as p:
    methods.guide()
    keys = controls.mechanism_keys()
    families = sorted({methods.family(k) for k in keys}, key=lambda f: controls.FAMILY_ORDER.get(f, 9))
    state.seed("methods.family", "all", "family", state.one_of({f: f for f in ["all", *families]}))
    fam = st.segmented_control(
        "Family",
        ["all", *families],
        **state.bind("methods.family"),
        help="central: a trusted curator adds noise · distributed: secure aggregation · local: each device adds "
        "noise · federated: devices answer the server's queries",
    )
    shown = [k for k in keys if fam in (None, "all") or methods.family(k) == fam]
    st.markdown(" · ".join(f"[{views.mech_label(k)}](#{methods.anchor(k)})" for k in shown))
    for k in shown:
        methods.section(k)
    if fam not in (None, "all"):
        p.url["family"] = fam
