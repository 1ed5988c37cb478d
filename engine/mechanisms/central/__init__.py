"""The classical central-DP baselines (DPBench / DPComp): identity, uniform, UG, AG, PrivTree,
hierarchical (:mod:`.common`). Importing the package registers them.
"""

from . import common  # noqa: F401  (registers the central baselines)
