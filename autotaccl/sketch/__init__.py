"""Communication sketches (``schema``: TACCL's files, validated), the logical topology a sketch leaves for
synthesis on a physical topology (``logical``), and sketches as flat knobs a search space samples (``knobs``)."""
from .knobs import knobs_of, sketch_from_knobs
from .logical import LogicalTopology, logical_topology
from .schema import (CONN_KEYWORDS, ENGINES, INTRANODE_STRATEGIES, ORDERINGS, SWITCH_OBJECTIVES, TACCL_HEURISTICS,
                     Engine, OrderingName, Sketch, default_sketch, load_sketch, sketch_from_dict, sketch_key,
                     sketch_to_dict)

__all__ = ["CONN_KEYWORDS", "ENGINES", "INTRANODE_STRATEGIES", "ORDERINGS", "SWITCH_OBJECTIVES", "TACCL_HEURISTICS",
           "Engine", "LogicalTopology", "OrderingName", "Sketch", "default_sketch", "knobs_of", "load_sketch",
           "logical_topology", "sketch_from_dict", "sketch_from_knobs", "sketch_key", "sketch_to_dict"]
