"""QuadTree (Cormode, Procopiuc, Srivastava, Shen, Yu, ICDE 2012): the full quadtree's noisy counts under the
geometric budget and their least-squares post-processing (:mod:`.mechanism`, key ``quadtree``; the tree's
arithmetic is shared with the hierarchical baseline in :mod:`engine.mechanisms.central.trees`). Importing the
package registers it."""

from . import mechanism  # noqa: F401  (registers the mechanism)
