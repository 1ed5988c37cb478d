"""Public geography files of realistic size and shape, made from a stated recipe (deterministic given the seed),
for the benchmarks and the tests: a city's neighbourhoods (the regions an analyst uploads) and its streets (a
context layer drawn under the maps). GeoJSON bytes in longitude and latitude.
"""

from __future__ import annotations

import json

import numpy as np

CHICAGO = (-87.94, 41.64, -87.52, 42.02)  # a city with 77 community areas


def feature_collection(features) -> bytes:
    return json.dumps({"type": "FeatureCollection", "features": features}, separators=(",", ":")).encode()


def feature(geom: dict, **props) -> dict:
    return {"type": "Feature", "properties": props, "geometry": geom}


def neighbourhoods_geojson(n: int = 77, box=CHICAGO, seed: int = 3, centre: float = 0.0) -> bytes:
    """``n`` neighbourhoods tiling the lon/lat ``box``: Voronoi cells whose edges are split every 0.25 % of the
    box's width and bent by a smooth displacement (the same at a shared edge from either side), coordinates to 7
    decimals, properties ``area_num`` and ``community``. ``centre``: the share of the cells' seeds drawn near the
    box's centre (a normal of a tenth of its width) rather than uniformly, so a dense centre of small
    neighbourhoods is ringed by large ones. At ``centre`` 0 (77 cells over Chicago, about 340 kB) each has 90 to
    320 vertices; at 0.5, 46 to 371 (areas 100 times apart)."""
    import shapely

    rng = np.random.default_rng(seed)
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    frame = shapely.box(*box)
    k = int(round(centre * n))
    mid = rng.normal([(x0 + x1) / 2, (y0 + y1) / 2], [0.1 * w, 0.1 * h], (k, 2)).clip([x0, y0], [x1, y1])
    seeds = shapely.multipoints(np.vstack([rng.uniform([x0, y0], [x1, y1], (n - k, 2)), mid]))
    cells = shapely.intersection(shapely.get_parts(shapely.voronoi_polygons(seeds, extend_to=frame)), frame)
    cells = shapely.segmentize(cells, w * 0.0025)

    def bend(xy):
        u, v = (xy[:, 0] - x0) / w, (xy[:, 1] - y0) / h
        a = 0.004 * (np.sin(37 * v + 3 * u) + 0.5 * np.sin(91 * v - 17 * u)) * 4 * u * (1 - u)
        b = 0.004 * (np.sin(41 * u - 5 * v) + 0.5 * np.sin(83 * u + 13 * v)) * 4 * v * (1 - v)
        return np.round(np.column_stack([xy[:, 0] + a * w, xy[:, 1] + b * h]), 7)

    cells = shapely.transform(cells, bend)
    feats = [
        feature(json.loads(shapely.to_geojson(g)), area_num=str(i + 1), community=f"Area {i + 1}")
        for i, g in enumerate(cells)
    ]
    return feature_collection(feats)


def streets_geojson(box=CHICAGO, seed: int = 5, streets: int = 60, avenues: int = 8) -> bytes:
    """A city's street network as a context layer: ``streets`` wavy streets each way across the box, cut into
    ways between crossings (as OpenStreetMap holds them: a LineString of about 14 vertices each, named), and
    ``avenues`` radial avenues from the centre; with the defaults about 7,000 ways, 100,000 vertices, 3 MB."""
    rng = np.random.default_rng(seed)
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    t = np.linspace(0.0, 1.0, 13 * streets + 1)
    feats = []
    for axis in (0, 1):
        for s, pos in enumerate(np.sort(rng.uniform(0.01, 0.99, streets))):
            wobble = 0.003 * np.sin(2 * np.pi * (t * rng.uniform(2, 6) + rng.uniform()))
            across = pos + wobble
            xy = np.column_stack([t, across] if axis == 0 else [across, t]) * [w, h] + [x0, y0]
            name = f"{'W' if axis == 0 else 'N'} {s + 1} St"
            for i in range(0, t.size - 1, 13):
                way = np.round(xy[i : i + 14], 7).tolist()
                feats.append(feature({"type": "LineString", "coordinates": way}, name=name, highway="residential"))
    for a in range(avenues):
        angle = 2 * np.pi * (a + rng.uniform(0.2, 0.8)) / avenues
        r = np.linspace(0.0, 0.49, 400)
        xy = np.column_stack([0.5 + r * np.cos(angle), 0.5 + r * np.sin(angle)]) * [w, h] + [x0, y0]
        coords = np.round(xy, 7).tolist()
        feats.append(feature({"type": "LineString", "coordinates": coords}, name=f"Avenue {a + 1}", highway="primary"))
    return feature_collection(feats)
