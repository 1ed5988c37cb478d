"""Sparse EMD at w = 20 vs the default w_rule vs the Laplace baseline on the street-grid
city (20,000 users, 256 x 256), MSE and EMD (m) of the released estimate. Run: python scripts/sparse_emd_w_rule.py"""

import numpy as np

from engine.bench.unseen import street_grid_city
from engine.mechanisms import RunContext, get
from engine.mechanisms.sparse_emd.readings import w as w_of
from engine.metrics import emd_m, mse

for seed in (0, 1):
    ds = street_grid_city(20000, seed)
    dom = ds.public_domain(8)
    ds = ds.in_domain(dom)
    truth = ds.true_histogram(dom, per_user_normalised=True)
    print("uniform", mse(truth, np.ones_like(truth)))
    for eps in (0.5, 1, 10):
        for key, pp in (("laplace_gauss", {}), ("sparse_emd", {"w": 20}), ("sparse_emd", {})):
            M = get(key)
            r = M().run(ds, dom, eps, M.schema().resolve(pp), RunContext(rng=np.random.default_rng(seed)))
            print(
                seed,
                eps,
                key,
                pp,
                w_of(r),
                f"mse {mse(truth, r.density):.3g} emd {emd_m(truth, r.density, dom.cell, 64)[0]:.1f}",
            )
