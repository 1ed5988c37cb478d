"""Range queries: how many people are in this rectangle, according to each release?"""

import pandas as pd
import streamlit as st

from engine.core.csvtext import csv_text
from ui import ranges, state, views
from ui.page import page

with page(
    "Range queries",
    "Draw a rectangle by clicking cells on the map (click again to add cells) or set it by coordinates: each "
    "mechanism answers from its release. Below, the error over a random workload of squares.",
    sidebar={"mechanisms": "multi", "max_mechs": 7},
    release_only="Range queries",
) as p:
    ctl = p.ctl
    # seeded before Run, so an invalid link is caught before it could run (the sliders come after the results)
    state.seed("rq.count", 500, "wq", state.int_in(10, 5000))
    state.seed("rq.size", (2, 10), "wsize", ranges.parse_size)
    configs = [ctl.config(m) for m in ctl.mechanisms] if ctl.ready else []
    g = p.launch("ranges", configs, label="Releases", whole=True)
    show = p.shown("ranges", g, whole=True)
    if show is not None:
        ok = [(c, s.result) for c, s in zip(show.configs, show.statuses) if s.state == "ok"]
        cfg0, r0 = ok[0]
        domain = r0.release.domain
        fr = views.frame(cfg0, domain)
        ds, _, _ = views.prepared(cfg0)
        views.data_badge(r0.dataset_meta, r0.n_points, r0.n_users)
        left, right = st.columns([3, 2], gap="medium")
        with right:
            st.subheader("The rectangle")
            rect, rurl = ranges.rect_controls(domain)
            p.url.update(rurl)
            true = ranges.exact_count(ds, rect)
            people = r0.n_users != r0.n_points
            names = views.unique_labels([c.mechanism for c, _ in ok])
            rows = []
            for c, r in ok:
                raw = float(r.release.answer_range(rect.reshape(1, 4))[0])
                ans = ranges.shown_answer(raw)
                unit = c.params.get("unit", "user")
                true_c = true if unit != "record" else ranges.exact_count(ds, rect, "record")
                rows.append(
                    {
                        "Mechanism": names[c.mechanism],
                        "True": round(true_c, 1),
                        "Answer": round(ans, 1),
                        "Raw estimate": f"{raw:.1f}" if raw < 0 else "",  # empty, never "None", when it is the answer
                        "Error": round(ans - true_c, 1),
                        "Relative error": abs(ans - true_c) / max(true_c, ranges.psi(r.truth)),
                    }
                )
            what = "people (a person's locations share one unit)" if people else "sampled locations"
            st.metric(f"True count ({what} inside)", f"{true:,.1f}" if people else f"{true:,.0f}")
            if any(row["Raw estimate"] for row in rows):
                st.caption("A negative estimate (noise) is shown as 0; its raw value is under *Raw estimate*.")
            counted = "people" if people else "locations"
            answers = pd.DataFrame(rows)
            st.dataframe(
                answers,
                hide_index=True,
                width="stretch",
                column_config={
                    "True": st.column_config.NumberColumn(f"True ({counted})", format="%.1f"),
                    "Answer": st.column_config.NumberColumn(f"Answer ({counted})", format="%.1f"),
                    "Raw estimate": st.column_config.NumberColumn(f"Raw estimate ({counted})", format="%.1f"),
                    "Error": st.column_config.NumberColumn(f"Error ({counted})", format="%+.1f"),
                    "Relative error": st.column_config.NumberColumn(format="%.3f"),
                },
            )
            answers = answers.rename(
                columns={k: f"{k} [{counted}]" for k in ("True", "Answer", "Raw estimate", "Error")}
            )
            x0, y0, x1, y1 = (float(v) for v in rect)
            answers.insert(1, "rectangle x0 y0 x1 y1 [m, local CRS]", f"{x0:.0f} {y0:.0f} {x1:.0f} {y1:.0f}")
            st.download_button(
                "These answers (CSV)",
                csv_text(answers),
                "range_answers.csv",
                "text/csv",
                on_click="ignore",
                icon=":material/download:",
                key="rq.csv.answers",
            )
        with left:
            scale = views.scale_for(r0.truth, domain, ctl.display)  # the truth alone is drawn here
            view = fr.view(0.0, (0.0, 0.0), px=380)
            views.heat_chart(
                r0.truth,
                scale,
                fr,
                view,
                "ranges_map",
                ctl.display,
                extra_layers=[ranges.pick_layer(fr), ranges.rect_layer(rect, fr)],
                title="True locations · click cells to set the rectangle (each click adds its cell)",
                on_select=lambda: ranges.on_pick("ranges_map"),
                selection_mode="multi-object",
                height=440,
            )
            views.legend(scale)

        st.subheader("Error over a random workload")
        w1, w2 = st.columns(2)
        count = w1.slider("Number of random squares", 10, 5000, **state.bind("rq.count"), step=10)
        size = w2.slider("Square side (% of the region's side)", 1, 100, **state.bind("rq.size"))
        p.url.update({"wq": count, "wsize": list(size)})
        results = {names[c.mechanism]: r for c, r in ok}
        df = ranges.workload_errors(r0.truth, results, domain, count, size, cfg0.seed)
        squares = ranges.workload_squares(domain, count, size, cfg0.seed)
        bounds = ranges.workload_bounds(domain, squares, {names[c.mechanism]: c for c, _ in ok})
        a, b = st.columns([3, 2])
        a.altair_chart(ranges.error_box(df), width="stretch")
        b.dataframe(
            ranges.error_summary(df, bounds),
            width="stretch",
            column_config={
                k: st.column_config.NumberColumn(f"{k} relative error", format="%.3f")
                for k in ("mean", "median", "90th percentile")
            }
            | {"queries": st.column_config.NumberColumn(format="%d")}
            | {k: st.column_config.NumberColumn(format="%.2f") for k in ("RMSE", "RMSE ÷ bound")},
        )
        b.caption(ranges.workload_caption(bounds))
        b.download_button(
            "Workload errors, every query (CSV)",
            csv_text(df),
            "range_workload.csv",
            "text/csv",
            on_click="ignore",
            icon=":material/download:",
            key="rq.csv.workload",
        )
    elif not configs:
        st.info("Choose mechanisms in the sidebar and press Run.", icon=":material/arrow_back:")
