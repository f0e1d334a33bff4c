"""Stage 1: which links each chunk crosses (TACCL's routing MILP, taccl.md §4, compact and fixed).

Unlike the reference: variables only for transfers the sketch allows within ``slack`` hops of its shortest
route, symmetry orbits as single columns, single-node sketches, and loads per shared resource. The
objective is the makespan bound. Modules: :mod:`.candidates`, :mod:`.symmetry`, :mod:`.model`,
:mod:`.start` (warm start), :mod:`.trees`, :mod:`.route`. The differences in full: ``docs/internals.md``."""
from .candidates import chunk_edges
from .route import Routing, RoutingOptions, route
from .symmetry import symmetry_permutations
from .trees import Send, sends_of

__all__ = ["Routing", "RoutingOptions", "Send", "chunk_edges", "route", "sends_of", "symmetry_permutations"]
