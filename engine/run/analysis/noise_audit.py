"""Raw-output distinguishers of the noise samplers.

Two black-box attacks on the released numbers themselves, not on a statistic of the map
(that is :mod:`engine.run.analysis._audit`'s job), each run on neighbouring datasets D0 (the others) and
D1 (the others plus one person in an empty cell), many times:

* **Floating-point structure** (Mironov, "On significance of the least significant bits
  for differential privacy", CCS 2012). numpy's Laplace draws ``U = k 2^-53`` and returns
  ``± scale log(2U)`` (``log(2 - 2U)``), so ``c + noise`` takes only some floats near
  each value. The test "the released value is not one numpy's sampler can produce for the
  count without the target, ``c0``" never fires under D0 and fires under D1 whenever the
  target's extra 1 lands between those floats. The same test on planar Laplace inverts
  numpy's polar sampler (angle ``2 pi U1``, radius by Lambert W of ``U2``) around the
  location without the target.
* **Seed replay**: the attacker knows D0 and the seed of each release (seeded runs record
  it) and recomputes the release on D0; "differs" never fires under D0 in evaluation mode.
  This reaches every sampler, integer ones (discrete Laplace, Pólya shares, randomized
  response) included.

Each attack's one-sided test (fires = "D1") gives the Clopper-Pearson bound
``eps_lb = log(P1_low / P0_high)`` (each one-sided at alpha/2; 95% confidence at alpha =
0.05), a lower bound on epsilon for the neighbouring pair. Evaluation mode (seeded numpy)
gives a large ``eps_lb``; secure mode (floating-point-safe samplers on OS entropy) must
give ``eps_lb <= eps``.

``python -m engine.run.analysis.noise_audit [--runs N]`` prints the table the tests check.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from ...core.errors import ParamError
from ...core.grid import Domain
from ...data.dataset import Dataset, DatasetMeta
from ...mechanisms import RunContext, get, registry
from ...mechanisms.capabilities import NoiseCase

SIDE_M = 16_000.0
CRS = "+proj=aeqd +lat_0=0 +lon_0=0 +datum=WGS84 +units=m +no_defs"
WINDOW = 64  # 53-bit integers searched on each side of an inverted draw


# ------------------------------------------------------------ numpy's samplers, exactly
def _laplace_from_k(k: int, scale: float) -> float:
    """numpy's Generator.laplace(0, scale) for the draw ``U = k 2^-53`` (random_laplace in C:
    ``0 - scale log(2 - U - U)`` for U >= 1/2, ``0 + scale log(U + U)`` below), with the C
    library's ``log`` as there (``math.log``; numpy's vectorised ``log`` can differ by an ulp)."""
    u = k * 2.0**-53
    return 0.0 - scale * math.log(2.0 - u - u) if u >= 0.5 else 0.0 + scale * math.log(u + u)


def numpy_laplace_producible(y: np.ndarray, base: float, scale: float) -> np.ndarray:
    """For each released ``y``: could ``base + rng.laplace(0, scale)`` (the seeded path of
    ``NoiseSource.add_laplace``) have produced it exactly? The draw is inverted from
    ``y - base`` and the 53-bit integers around it are tried forward."""
    y = np.asarray(y, dtype=np.float64).ravel()
    out = np.zeros(y.size, dtype=bool)
    for i, v in enumerate(y.tolist()):
        n = v - base
        u = 1.0 - 0.5 * math.exp(-n / scale) if n >= 0 else 0.5 * math.exp(n / scale)
        k0 = int(u * 2.0**53)
        ks = range(max(k0 - WINDOW, 1), min(k0 + WINDOW, 2**53 - 1) + 1)
        out[i] = any(base + _laplace_from_k(k, scale) == v for k in ks)
    return out


def _planar_from_k(k1: int, k2: int, eps: float) -> tuple[float, float]:
    """numpy/scipy's planar Laplace displacement (engine.core.noise.planar_laplace, one draw) for
    ``U1 = k1 2^-53`` (angle) and ``U2 = k2 2^-53`` (radius), with length-1 arrays as there."""
    from scipy.special import lambertw

    theta = 0.0 + (2 * np.pi - 0.0) * np.array([k1 * 2.0**-53])
    p = np.array([k2 * 2.0**-53])
    radius = np.maximum(-(np.real(lambertw((p - 1) / np.e, k=-1)) + 1) / eps, 0.0)
    return float((radius * np.cos(theta))[0]), float((radius * np.sin(theta))[0])


def numpy_planar_producible(y: np.ndarray, base: ArrayLike, eps: float, window: int = 3) -> np.ndarray:
    """For each released location ``y`` (n, 2): could ``base + planar_laplace(rng, eps)``
    (the seeded path of ``NoiseSource.add_planar_laplace``) have produced it exactly?"""
    y = np.asarray(y, dtype=np.float64).reshape(-1, 2)
    base = np.asarray(base, dtype=np.float64).reshape(2)
    out = np.zeros(len(y), dtype=bool)
    for i, (yx, yy) in enumerate(y):
        dx, dy = yx - base[0], yy - base[1]
        r = math.hypot(dx, dy)
        k1 = int((math.atan2(dy, dx) % (2 * math.pi)) / (2 * math.pi) * 2.0**53)
        k2 = int((1 - (1 + eps * r) * math.exp(-eps * r)) * 2.0**53)
        found = False
        for a in range(k1 - window, k1 + window + 1):
            for b in range(k2 - window, k2 + window + 1):
                if 0 <= a < 2**53 and 0 <= b < 2**53:
                    nx, ny = _planar_from_k(a, b, eps)
                    if base[0] + nx == yx and base[1] + ny == yy:
                        found = True
                        break
            if found:
                break
        out[i] = found
    return out


# ---------------------------------------------------------------------- bound
def eps_lower_bound(fired1: int, n1: int, fired0: int, n0: int, alpha: float = 0.05) -> float:
    """``log(P1_low / P0_high)`` with one-sided Clopper-Pearson bounds at ``alpha/2`` each
    (0 when the bound is not positive)."""
    lo1 = stats.beta.ppf(alpha / 2, fired1, n1 - fired1 + 1) if fired1 > 0 else 0.0
    hi0 = stats.beta.ppf(1 - alpha / 2, fired0 + 1, n0 - fired0) if fired0 < n0 else 1.0
    return max(0.0, math.log(lo1 / hi0)) if lo1 > 0 else 0.0


@dataclass
class Attack:
    mechanism: str
    attack: str  # "float structure" or "seed replay"
    secure: bool
    runs: int  # per dataset
    fired0: int
    fired1: int
    eps_claimed: float
    eps_lb: float
    seconds: float

    def row(self) -> str:
        mode = "secure" if self.secure else "evaluation"
        return (
            f"{self.mechanism:<18} {self.attack:<16} {mode:<10} {self.runs:>6} {self.fired0 / self.runs:>6.3f} "
            f"{self.fired1 / self.runs:>6.3f} {self.eps_claimed:>5g} {self.eps_lb:>6.2f} {self.seconds:>6.1f}"
        )


HEADER = (
    f"{'mechanism':<18} {'attack':<16} {'mode':<10} {'runs':>6} {'P0':>6} {'P1':>6} {'eps':>5} {'eps_lb':>6} {'s':>6}"
)


# ------------------------------------------------------------------ neighbours
def _dataset(xy, value=None) -> Dataset:
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    deg = 1.0 / 111_320.0
    meta = DatasetMeta(name="noise audit", source="audit", synthetic=True, bbox=(0.0, 0.0, SIDE_M * deg, SIDE_M * deg))
    return Dataset(xy=xy, lonlat=xy * deg, crs=CRS, meta=meta, value=value)


def cases() -> dict[str, NoiseCase]:
    """Every mechanism's neighbouring pairs for this audit (``Mechanism.noise_cases``), by name."""
    return {c.name: replace(c, key=key) for key, cls in registry().items() for c in cls.noise_cases}


def neighbours(case: NoiseCase) -> tuple[Dataset, Dataset, Domain]:
    """D0 and D1 on a small domain: the sink cell holds ``base_users``, the target cell is
    empty in D0 and holds the added person in D1 (values 0 and 255 for the attribute family).
    Geo-indistinguishability: one person at the domain centre (0, 0), moved east in D1."""
    if case.metric_move_m is not None:
        dom = Domain(-SIDE_M / 2, -SIDE_M / 2, SIDE_M, case.depth)
        return _dataset([[0.0, 0.0]]), _dataset([[case.metric_move_m, 0.0]]), dom
    dom = Domain(0.0, 0.0, SIDE_M, case.depth)
    sink = np.repeat([[0.1 * SIDE_M, 0.1 * SIDE_M]], case.base_users, axis=0)
    target = [[0.9 * SIDE_M, 0.9 * SIDE_M]]
    v0 = np.zeros(case.base_users)
    d0 = _dataset(sink, v0)
    d1 = _dataset(np.vstack([sink, target]), np.append(v0, 255.0))
    return d0, d1, dom


def _run(case: NoiseCase, data: Dataset, dom: Domain, eps: float, seed: int, secure: bool):
    cls = get(case.key)
    ctx = RunContext(rng=np.random.default_rng(seed), secure=secure, evaluation=None)
    return cls().run(data, dom, eps, cls.schema().resolve(case.params), ctx)


def _released(case: NoiseCase, rel) -> np.ndarray:
    """The numbers a release publishes, flattened (for the replay comparison): its map and its raw noisy
    measurements (UG's cell counts, the noisy locations, every client's randomised bit...)."""
    parts = [np.asarray(rel.density, dtype=np.float64).ravel()]
    if rel.measurements is not None:
        parts.append(rel.measurements.numbers())
    return np.concatenate(parts)


# --------------------------------------------------------------------- attacks
def float_attack(name: str, runs: int, secure: bool, eps: float = 1.0, seed: int = 0) -> Attack:
    """Mironov's test on the released value of the target: its cell of the release's measured grid (one Laplace
    draw: the identity's cell, UG's one grid count), or the person's noisy location (planar Laplace)."""
    case = cases()[name]
    if not case.float_attack:
        raise ParamError(f"{name}: Mironov's test needs a grid of single Laplace draws or noisy locations")
    d0, d1, dom = neighbours(case)
    t0 = time.perf_counter()
    target = (0.9 * SIDE_M, 0.9 * SIDE_M)  # where neighbours() puts the added person
    fired = []
    for data in (d0, d1):
        ys = []
        for i in range(runs):
            m = _run(case, data, dom, eps, seed + i, secure).measurements
            ys.append(m.locations[0] if m.locations is not None else m.at(*target, dom))
        if m.locations is not None:
            ok = numpy_planar_producible(np.array(ys), [0.0, 0.0], m.planar_epsilon)
        else:  # the count without the target: the others that share its cell
            c0 = float(np.count_nonzero(_cell_of(d0.xy, m, dom) == _cell_of(np.array([target]), m, dom)[0]))
            ok = numpy_laplace_producible(np.array(ys), c0, m.scale)
        fired.append(int((~ok).sum()))
    lb = eps_lower_bound(fired[1], runs, fired[0], runs)
    return Attack(name, "float structure", secure, runs, fired[0], fired[1], eps, lb, time.perf_counter() - t0)


def _cell_of(xy: np.ndarray, m, dom: Domain) -> np.ndarray:
    """The measured grid's cell holding each point (row-major index)."""
    g = np.asarray(m.grid)
    iy = np.clip(((xy[:, 1] - dom.y0) / m.cell_m).astype(int), 0, g.shape[0] - 1)
    ix = np.clip(((xy[:, 0] - dom.x0) / m.cell_m).astype(int), 0, g.shape[1] - 1)
    return iy * g.shape[1] + ix


def replay_attack(name: str, runs: int, secure: bool, eps: float = 1.0, seed: int = 0) -> Attack:
    """Seed replay: release i used seed ``seed + i``, which the attacker knows; it recomputes the
    release on D0 with that seed (evaluation mode, the only reproducible one) and says "D1" when
    the numbers differ."""
    case = cases()[name]
    d0, d1, dom = neighbours(case)
    t0 = time.perf_counter()
    fired = []
    for data in (d0, d1):
        f = 0
        for i in range(runs):
            seen = _released(case, _run(case, data, dom, eps, seed + i, secure))
            guess = _released(case, _run(case, d0, dom, eps, seed + i, False))
            f += int(not (seen.shape == guess.shape and np.array_equal(seen, guess)))
        fired.append(f)
    lb = eps_lower_bound(fired[1], runs, fired[0], runs)
    return Attack(name, "seed replay", secure, runs, fired[0], fired[1], eps, lb, time.perf_counter() - t0)


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000, help="runs per dataset and attack")
    a = ap.parse_args(argv)
    print(HEADER)
    for name, case in cases().items():
        for secure in (False, True) if case.float_attack else ():
            print(float_attack(name, a.runs, secure).row(), flush=True)
    for name in cases():
        for secure in (False, True):
            print(replay_attack(name, max(a.runs // 5, 20), secure).row(), flush=True)


if __name__ == "__main__":
    main()
