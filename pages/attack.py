"""Privacy attack: what an adversarial server can infer about one user from what it receives."""

import streamlit as st

from engine.mechanisms import registry
from ui import attack, controls, explain, state, views
from ui.page import page

per_user_default = next((k for k in controls.mechanism_keys() if registry()[k].family in ("federated", "local")), None)
with page(
    "Privacy attack",
    "An honest-but-curious server tries to locate one user from what that user's device sent. We measure the "
    "privacy distance: how far its guesses land from where the user really is (larger = more private).",
    sidebar={"mechanisms": "single", "mech_key": "atk.mech", "default_mech": per_user_default},
    release_only="the privacy attack",
) as p:
    ctl = p.ctl
    configs = [ctl.config()] if ctl.ready else []
    g = p.launch("attack", configs, label="Attack run")
    show = p.shown("attack", g)
    if show is not None:
        res, rcfg = show.results[0], show.configs[0]
        view = res.release.server_view
        views.data_badge(res.dataset_meta, res.n_points, res.n_users)
        a, b, c, d = st.columns(4)
        a.metric("Privacy distance", explain.fmt("privacy_distance_m", res.metrics.get("privacy_distance_m")))
        b.metric("Uninformed guess", explain.fmt("privacy_baseline_m", res.metrics.get("privacy_baseline_m")))
        c.metric("Privacy ratio", explain.fmt("privacy_ratio", res.metrics.get("privacy_ratio")))
        d.metric("Utility: EMD", explain.fmt("emd_m", res.metrics.get("emd_m")))
        st.caption(
            "Privacy distance: expected distance between a user's true location and the attacker's guess, averaged "
            "over sampled users; ratio 1 = the attacker learns nothing beyond the region. EMD is the map's error."
        )
        st.download_button(
            "Attack figures (CSV)",
            attack.figures_csv(res),
            "privacy_attack.csv",
            "text/csv",
            on_click="ignore",
            icon=":material/download:",
            key="atk.csv",
        )
        views.server_block(res)
        if view.kind == "per_user" and (view.candidates is not None or view.surface is not None):
            ds, domain, _ = views.prepared(rcfg)
            fr = views.frame(rcfg, domain)
            inv, n_users = ds.user_index()
            state.seed("atk.user", 0, "user", state.int_in(0, n_users - 1))
            if state.get("atk.user") > n_users - 1:
                state.put("atk.user", 0)
            u1, u2 = st.columns([3, 1], vertical_alignment="bottom")
            user = int(u1.number_input(f"User (0 … {n_users - 1:,})", 0, n_users - 1, **state.bind("atk.user")))
            u2.button("Random user", on_click=attack.random_user, args=(n_users,))
            p.url["user"] = user
            detail = attack.user_view(res.release, ds, inv, user, fr)
            left, right = st.columns([2, 1], gap="medium")
            with left:
                views.heat_chart(
                    detail.surface,
                    detail.scale,
                    fr,
                    fr.view(0.0, (0.0, 0.0), px=380),
                    "attack_map",
                    ctl.display,
                    extra_layers=detail.layers,
                    title=f"What user {user}'s device sent, and the attacker's guesses",
                    height=460,
                )
                if detail.scale is not None:
                    views.legend(detail.scale, note="this user's received surface", shared=False)
                st.caption(":red[●] true location(s) · :orange[●] attacker's candidates, sized by weight")
            with right:
                st.subheader(f"User {user}")
                for k, v in detail.stats.items():
                    st.metric(k, v)
            attack.curve_section(res, rcfg)
        else:
            central = registry()[rcfg.mechanism].family == "central" if rcfg.mechanism in registry() else False
            who = "The public (a central mechanism's curator is trusted)" if central else "This mechanism's server"
            st.info(
                f"{who} sees nothing per user that it could attack individually: its best guess of "
                "anyone's location is the released map itself, which is what the privacy distance above measures. "
                "Federated and local mechanisms (per-user views) show a single user's attack here.",
                icon=":material/shield:",
            )
