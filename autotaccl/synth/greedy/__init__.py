"""The fast engine (``--engine greedy``): no MILP; a few constructions, the simulator picks the fastest.

Constructions book transfers on the arcs' reservation timelines (:mod:`.timeline`). The candidates, and
when each tends to win:

* ``earliest`` (:mod:`.earliest`): every chunk where it arrives soonest, hops joining booked transfers: small sizes.
* ``balanced`` / ``bottleneck`` (:mod:`.balanced`): least-loaded routes, then list scheduling: large sizes.
* ``hierarchy`` (:mod:`.hierarchy`): shared per-rank trees, one crossing per node, so chunks batch.
* ``doubling`` / ``relay`` (:mod:`.exchanges`): Bruck exchanges where the sketch makes nodes complete graphs.
* ``trees`` (:mod:`.forest`): the optimal spanning-tree packing, pipelined: large sizes on switched fabrics.
* ``rails`` (:mod:`.forest`): a tree per root along the network rails, in pieces or slices: rail fabrics.
* ``switch`` (:mod:`.switch`): through a switch that reduces (NVLink SHARP): large sizes, where runtimes run it.

:func:`greedy` (:mod:`.select`) simulates each with the baselines the sketch admits and returns the
fastest. Which wins where: ``benchmarks/synthesis.py``; more in ``docs/synthesis.md``."""
from .schedule import assign_steps, critical_first, greedy_schedule, time_steps
from .select import greedy, sketch_baselines
from .strategies import STRATEGIES
from .strategy import NotApplicable, Strategy

__all__ = ["NotApplicable", "STRATEGIES", "Strategy", "assign_steps", "critical_first", "greedy",
           "greedy_schedule", "sketch_baselines", "time_steps"]
