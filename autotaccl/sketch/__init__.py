"""Communication sketches (``schema``: TACCL's files, validated) and the logical topology a sketch leaves
for synthesis on a physical topology (``logical``)."""
from .logical import LogicalTopology, logical_topology
from .schema import (CONN_KEYWORDS, ENGINES, INTRANODE_STRATEGIES, ORDERINGS, SWITCH_OBJECTIVES, TACCL_HEURISTICS,
                     Sketch, default_sketch, load_sketch, sketch_from_dict, sketch_key, sketch_to_dict)

__all__ = ["CONN_KEYWORDS", "ENGINES", "INTRANODE_STRATEGIES", "ORDERINGS", "SWITCH_OBJECTIVES", "TACCL_HEURISTICS",
           "LogicalTopology", "Sketch", "default_sketch", "load_sketch", "logical_topology", "sketch_from_dict",
           "sketch_key", "sketch_to_dict"]
