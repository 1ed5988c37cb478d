"""Before spending: a release's accuracy predicted, and a study's releases planned under one budget.

* ``_forecast.py``: one release's 95 % margins predicted from public inputs (a proxy over the public frame,
  a stated or released number of users), and the smallest ε meeting a target (:func:`make_plan`);
* ``_study_file.py``: a study's TOML (:func:`load_study`, :func:`parse_study`, :class:`Product`);
* ``_study_plan.py``: the mechanism and ε of every release of a study under one budget
  (:func:`make_study_plan`), and its reservation in the ledger (:func:`reserve`, :func:`cancel`);
* ``_study_bias.py``: bias and noise apart, where a mechanism bounds each person's contribution.
"""

from __future__ import annotations

from ._forecast import (
    MAX_USERS,
    PROXY_PRESET,
    Frame,
    Proxy,
    describe_plan,
    exact,
    frame_from,
    frame_of,
    frame_regions,
    make_plan,
    plannable,
    predict,
    released_proxy,
    released_users,
    stated_users,
    synthetic_proxy,
    target_value,
)
from ._study_file import Product, load_study, parse_study
from ._study_plan import (
    Inputs,
    StudyWatch,
    cancel,
    choice_params,
    dataset_options,
    describe_study,
    figure,
    held,
    interval,
    make_study_plan,
    reserve,
    stderr_progress,
)

__all__ = [
    "cancel",
    "choice_params",
    "dataset_options",
    "describe_plan",
    "describe_study",
    "exact",
    "figure",
    "Frame",
    "frame_from",
    "frame_of",
    "frame_regions",
    "held",
    "Inputs",
    "interval",
    "load_study",
    "make_plan",
    "make_study_plan",
    "MAX_USERS",
    "parse_study",
    "plannable",
    "predict",
    "Product",
    "Proxy",
    "PROXY_PRESET",
    "released_proxy",
    "released_users",
    "reserve",
    "stated_users",
    "stderr_progress",
    "StudyWatch",
    "synthetic_proxy",
    "target_value",
]
