"""Release mode on the pages: the evaluation pages stop, and Explore shows the private map alone with its
ledger, what the server sees and the release files."""

from __future__ import annotations

import numpy as np
import streamlit as st

from engine.run.config import RunConfig

from . import export, maps
from .views import counts_people, heat_chart, ledger_block, legend, scale_for, server_block


def release_only_page(ctl, what: str) -> None:
    """Pages that compare releases with the truth are evaluation tools: in Release mode they say so and stop."""
    if ctl.mode == "release":
        st.info(
            f"Release mode: {what} compares private maps with the true data, which a release never shows. Publish a "
            "release on **Explore**, or switch the sidebar's Mode to Evaluate.",
            icon=":material/lock:",
        )
        st.stop()


def release_view(result, cfg: RunConfig, display) -> None:
    """A Release-mode run: the private map alone (no truth, no metric against it), its ledger and guarantee,
    and the release files (GeoTIFF, GeoJSON, CSV and a JSON manifest of DP outputs only)."""
    dens = np.asarray(result.release.density, dtype=np.float64)
    fr = maps.Frame(result.release.domain, result.crs)
    scale = scale_for(np.clip(dens, 0, None), fr.domain, display, people=counts_people(cfg))
    st.success(
        "Release mode: this map was drawn with OpenDP's samplers and fresh entropy; no seed was recorded. Only the "
        "private release is shown and exported.",
        icon=":material/lock:",
    )
    heat_chart(
        dens,
        scale,
        fr,
        fr.view(px=500),
        "release_private",
        display,
        rects=result.release.partition,
        title=export.release_title(result),
        height=520,
    )
    legend(scale, note=f"{fr.domain.n} × {fr.domain.n} cells of {fr.domain.cell:,.0f} m", shared=False)
    stated_margin(result, cfg)
    t1, t2, t3 = st.tabs(["Privacy ledger", "What the server sees", "Download the release"])
    ledger_block(result, t1)
    server_block(result, t2)
    t3.download_button(
        "Release files (zip: GeoTIFF, GeoJSON, CSV, manifest)",
        lambda: release_zip(result),
        file_name=f"{cfg.mechanism}_release.zip",
        mime="application/zip",
        on_click="ignore",
        key=f"dl_release_{cfg.key()}",
    )
    t3.caption(
        "The files hold the private grid, the ledger, the parameters and the declared side information: no true "
        "count, no metric, no seed."
    )


def release_zip(result) -> bytes:
    import io
    import tempfile
    import zipfile
    from pathlib import Path

    from engine.run.export import write_release

    with tempfile.TemporaryDirectory(prefix="heatmap-release-") as tmp:
        paths = write_release(result, Path(tmp) / "release")
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for p in paths.values():
                z.write(p, arcname=p.name)
        return buf.getvalue()


def stated_margin(result, cfg: RunConfig) -> None:
    """The release's own 95 % margins per cell (from its DP outputs and public parameters only)."""
    from engine.regions.margins import cell_margins
    from engine.run.plan import margin_stats

    m = cell_margins(result.release, cfg.mechanism, result.crs)
    med, p90 = margin_stats(np.asarray(m.margin95))
    if np.isfinite(med):
        st.markdown(
            f"**Stated 95 % margin per cell**: ±{med:,.3g} (median), ±{p90:,.3g} (worst tenth)",
            help=m.basis,
        )
    else:
        st.caption(f"No stated margin: {m.basis}")
