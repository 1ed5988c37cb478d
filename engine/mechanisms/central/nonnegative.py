"""A non-negative map from a consistent hierarchical tree, top-down (post-processing).

The constrained inference (Hay et al., VLDB 2010) gives the least-squares, unbiased estimate of every
node; where the data are empty its leaves are zero-mean noise, half of it negative. Any map that is
read as a distribution clips those to 0 and keeps the positive half: that mass lies wherever the data
are not. With leaves sized by Guideline 1 (:mod:`.sizing`: m^2 grows with n eps) the leaves' noise
shrinks as fast as their number grows, so the clipped noise mass stays a fixed share of the users,
but on sparse data (check-ins: 3,000 users at 1,334 of 65,536 cells) ever more of the leaves are
empty as eps grows, and the mass moves ever further from the data: the default's EMD grew with eps
(953 m at eps 0.1, 1,257 m at 1, 2,160 m at 10) while its MSE fell, and at any fixed height it falls
with eps (BENCHMARKS.md, "defaults on data nobody tuned them on").

:func:`nonnegative_leaves` walks down from the root instead: a node's non-negative value is shared
among its children in proportion to their estimates clipped at 0 (evenly among the children that
meet the domain when none is positive). Mass never leaves a node whose estimate is positive, so the
noise of an empty region's leaves stays inside the smallest node that holds data, and an empty node's
subtree gets nothing. The root's value is the consistent total, so the map's total is unchanged where
that total is positive.
"""

from __future__ import annotations

import numpy as np


def _block_sum(a: np.ndarray, b: int) -> np.ndarray:
    k = a.shape[0] // b
    return a.reshape(k, b, k, b).sum(axis=(1, 3))


def nonnegative_leaves(levels: list[np.ndarray], b: int, inside: list[int]) -> np.ndarray:
    """Leaves (the last level's grid) of the top-down non-negative tree from the consistent estimates
    ``levels`` (root first, level d a b^d x b^d grid; ``inside[d]`` of its nodes per axis meet the
    domain, the others are padding and get nothing)."""
    value = np.maximum(np.asarray(levels[0], dtype=np.float64), 0.0)
    for d in range(1, len(levels)):
        meets = np.zeros(levels[d].shape)
        meets[: inside[d], : inside[d]] = 1.0
        pos = np.maximum(levels[d], 0.0) * meets

        def up(a):  # a parent's value repeated over its b x b children
            return _block_sum(a, b).repeat(b, axis=0).repeat(b, axis=1)

        parent = value.repeat(b, axis=0).repeat(b, axis=1)
        total = up(pos)
        value = np.where(
            total > 0, parent * pos / np.where(total > 0, total, 1.0), parent * meets / np.maximum(up(meets), 1)
        )
    return value
