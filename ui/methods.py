"""Method pages generated from ``Mechanism.describe()``."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.mechanisms import registry

FAMILY_TEXT = {
    "none": "no privacy (reference)",
    "central": "central DP: a trusted curator sees the data and adds noise",
    "distributed": "distributed DP: devices add noise shares; secure aggregation hides individual reports",
    "local": "local DP: each device randomises its own report",
    "federated": "federated: devices answer the server's queries about their own data",
}


def family(key: str) -> str:
    return registry()[key].family


def anchor(key: str) -> str:
    return "m-" + key.replace("_", "-")


def params_frame(params: list[dict]) -> pd.DataFrame:
    rows = []
    for p in params:
        rng = ""
        if p.get("choices"):
            rng = " | ".join(map(str, p["choices"]))
        elif p.get("min") is not None or p.get("max") is not None:
            lo = "−∞" if p.get("min") is None else f"{p['min']:g}"
            hi = "∞" if p.get("max") is None else f"{p['max']:g}"
            rng = f"{lo} … {hi}" + (" (log)" if p.get("log") else "")
        rows.append(
            {
                "Parameter": p["label"],
                "Name": p["name"],
                "Type": p["kind"],
                "Default": str(p["default"]),
                "Range": rng,
                "Meaning": p.get("help", ""),
            }
        )
    return pd.DataFrame(rows)


def section(key: str) -> None:
    d = registry()[key].describe()
    st.header(d["label"], anchor=anchor(key), divider="gray")
    badges = [f":violet-badge[{d['family']}]"]
    if d.get("guarantee"):
        badges.append(f":green-badge[{d['guarantee']}]")
    if d.get("needs"):
        badges.append(f":orange-badge[needs {', '.join(d['needs'])}]")
    if not d.get("uses_epsilon", True):
        badges.append(":gray-badge[spends no ε]")
    st.markdown(" ".join(badges) + f"  `{d['key']}`")
    if d.get("summary"):
        st.markdown(f"**Idea.** {d['summary']}")
    c1, c2 = st.columns(2)
    c1.markdown(f"**Who sees what.** {d.get('threat_model') or '—'}")
    c1.caption(FAMILY_TEXT.get(d["family"], ""))
    c2.markdown(f"**Guarantee.** {d.get('guarantee') or '—'}")
    if d.get("paper"):
        c2.markdown(f"**Paper.** {d['paper']}")
    if d.get("equations"):
        st.markdown(f"**Implements.** {d['equations']}")
    if d.get("params"):
        st.dataframe(params_frame(d["params"]), hide_index=True, width="stretch")
    else:
        st.caption("No parameters besides ε.")
    if d.get("doc"):
        with st.expander("Full documentation (docstring: sections, equations, departures from the paper)"):
            st.code(d["doc"], language="text", wrap_lines=True)
