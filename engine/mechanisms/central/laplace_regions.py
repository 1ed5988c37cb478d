"""Laplace over regions: a noisy count per region, for when the regions are the product."""

from __future__ import annotations

import numpy as np

from ...core.accounting import Ledger
from ...core.epsilon import check_epsilon
from ...core.errors import ParamError
from ...core.params import Param
from ...data.region_geometry import build
from ..base import Mechanism, Release, register
from ..common import (
    LAPLACE_SD,
    UNIT_PARAM,
    bound_contributions,
    curator_communication,
    curator_diagnostics,
    curator_view,
    laplace_counts,
)
from ..noise_model import NoiseModel


@register
class LaplaceRegions(Mechanism):
    """Laplace over regions: the Laplace mechanism (Dwork, McSherry, Nissim, Smith, TCC 2006,
    Example 1 / Proposition 1: a histogram of L1 sensitivity 1 plus Laplace(1/eps) per bin) with the
    analyst's regions as its bins, not the grid's cells.

    Regions (``regions``): ``grid`` (each output cell), ``h3:RES`` / ``h3:auto`` (H3 hexagons; auto: the
    finest resolution with about 300 hexagons on the map) or ``PATH[:ID_COLUMN]`` (a polygon file,
    :mod:`engine.data.files.polygons`). They are public: fixed before the data is seen, never read off it.
    Each location counts in one region, the first holding it (a location on a shared boundary is counted
    once); overlapping regions are refused, since a person in two regions would count twice. Locations in
    no region are not counted.

    Threat model: a trusted curator sees every location; the public sees one noisy count per region.

    Guarantee and relation: under ``unit = user`` (default) each person's locations are weighted to total 1
    before counting (:func:`engine.mechanisms.common.bound_contributions`, as the other central baselines), so adding or
    removing a person changes the vector of region counts by at most 1 in L1 and Laplace(1/eps) per
    region is user-level eps-DP under add/remove user; ``unit = record``: add/remove record, a person with
    k locations protected at k eps.

    Map: each region's noisy count is spread over its cells by area share (a cell crossing regions gets
    its share of each), the uniformity the papers' grids use. Noise model (``Release.noise``): the regions
    are the released units, each count of sd sqrt(2)/eps exactly, with their area weights over the cells
    (a cell's sd is sqrt(2)/eps x sqrt(sum over regions of (its share / the region's cells)^2)), so a
    region of its own has the exact noise margin. No departure: there is no paper beyond the Laplace
    mechanism.
    """

    key = "laplace_regions"
    margin = "closed form"
    margin_note = "Laplace(1/eps) per region"
    planner = "exact"
    label = "Laplace over regions"
    family = "central"
    guarantee = "user-level epsilon-DP (central) under add/remove user; add/remove record with unit = record"
    neighbouring = "add/remove user"
    threat_model = "A trusted curator sees all locations; the public sees one noisy count per region."
    summary = "Count each region (hexagons or your polygons) and add Laplace noise to each count."
    paper = "Dwork, McSherry, Nissim, Smith. Calibrating noise to sensitivity in private data analysis. TCC 2006"
    equations = "Example 1 / Proposition 1: a histogram query of L1 sensitivity 1 plus Laplace(1/eps) per bin"
    params = (
        UNIT_PARAM,
        Param(
            "regions",
            "str",
            "h3:auto",
            "the regions counted: grid (each cell), h3:RES (H3 hexagons of resolution RES, 0-15), h3:auto (about "
            "300 hexagons on the map) or the path of a polygon file, PATH[:ID_COLUMN] (command line only)",
            remote=r"grid|h3:(auto|\d{1,2})",
        ),
        Param(
            "regions_crs",
            "str",
            "",
            "the CRS of the polygon file of regions when it declares none (a Shapefile without its .prj): an EPSG "
            "code or a PROJ string (command line only, --regions-crs)",
            remote="",
            shown_if=(("regions", "PATH"),),  # a polygon file comes by its path, from the command line only
        ),
    )
    region_params = ("regions", "regions_crs")
    dp_outputs = ("region_counts", "noise")
    side_information_keys = ("region_ids", "regions", "regions_counted")

    @classmethod
    def planning(cls, params: dict, regions=None, user_ids: bool = False) -> tuple[str, str]:
        """Its own regions are its units, exact; the cells split them, so their margins depend on the counts."""
        return ("exact" if regions is not None and regions.kind != "grid" else "simulated"), ""

    def run(self, data, domain, epsilon, params, ctx):
        eps = check_epsilon(epsilon)
        regions = build(params["regions"], domain, data.crs, file_crs=params.get("regions_crs"))
        if regions.overlapping():
            raise ParamError(
                "some regions overlap: a person inside two of them would be counted twice, so the noise would not "
                "cover them; use regions that do not overlap"
            )
        bounded = bound_contributions(data, domain, params["unit"])
        d = bounded.data
        idx = regions.assign(d.xy)
        ok = idx >= 0
        w = None if d.weight is None else np.asarray(d.weight, dtype=np.float64)[ok]
        counts = np.bincount(idx[ok], weights=w, minlength=len(regions)).astype(np.float64)
        ctx.check_cancelled()
        ledger = Ledger()
        note = f"Laplace(1/eps) per region ({len(regions):,} regions, {regions.public_spec})"
        noisy = laplace_counts(counts, eps, ctx.noise, ledger, "region counts", "regions", note, bounded)
        noisy = np.asarray(noisy, dtype=np.float64)
        A = regions.weights
        cells = np.asarray(A.sum(axis=1)).ravel()  # each region's area in cells (inside the map)
        n = domain.n
        density = np.asarray(A.T @ (noisy / cells)).reshape(n, n)
        diag = curator_diagnostics(eps, bounded, ctx)
        diag.update({"regions": regions.public_spec, "region_count": len(regions)})
        basis = "Laplace(1/eps) per region: sqrt(2)/eps; a cell's share of each region's count"
        return Release(
            density=density,
            domain=domain,
            ledger=ledger,
            communication=curator_communication(),
            server_view=curator_view("one noisy count per region"),
            diagnostics=diag,
            extras={"region_counts": noisy, "region_ids": tuple(regions.ids)},
            noise=NoiseModel.of_areas(noisy, LAPLACE_SD / eps, A, basis),
            regions_counted=regions.public_spec,  # restates the parameter for a release: never a server path
        )
