"""The MILP layer: one model, HiGHS and Gurobi backends (real solver runs; Gurobi's bundled licence suffices)."""
import numpy as np
import pytest

from autotaccl.milp import Model, SolverOptions, solve

BOTH = ("highs", "gurobi")


def knapsack() -> Model:
    """max 5a + 4b + 3c s.t. 2a + 3b + c <= 5, a + b + c <= 2 (binary) -> a = b = 1, value 9 (as min -9)."""
    m = Model("knap")
    x = m.add_vars(3, kind="B")
    m.add_row(x, [2, 3, 1], "<=", 5)
    m.add_row(x, [1, 1, 1], "<=", 2)
    m.set_objective(x, [-5, -4, -3])
    return m


@pytest.mark.parametrize("solver", BOTH)
def test_small_milp_same_optimum(solver):
    sol = solve(knapsack(), SolverOptions(solver=solver, time_limit=10))
    assert sol.status == "optimal" and sol.solver == solver
    assert sol.objective == pytest.approx(-9)
    assert np.round(sol.values).tolist() == [1, 1, 0]
    assert (sol.variables, sol.constraints) == (3, 2)


def mixed() -> Model:
    """Integer and continuous columns, an equality, a >= row and an objective constant."""
    m = Model("mixed")
    n = m.add_var(0, 10, "I")
    y = m.add_var(0, 7.5)
    m.add_row([n, y], [1, 1], ">=", 8.2)
    m.add_row([n, y], [1, -1], "==", 1)
    m.set_objective([n, y], [3, 2], constant=1.5)
    return m


def test_both_backends_agree_on_mixed_model():
    objs = [solve(mixed(), SolverOptions(solver=s, time_limit=10)).objective for s in BOTH]
    # n - y = 1, n + y >= 8.2, n integer -> n = 5, y = 4: 15 + 8 + 1.5
    assert objs[0] == pytest.approx(24.5) and objs[1] == pytest.approx(24.5)


def indicator_model(value: int) -> Model:
    """b chooses between two time windows: b=1 => t >= 7, b=0 => t <= 2 and t >= 1; minimise t + 3b."""
    m = Model("ind")
    b = m.add_var(kind="B")
    t = m.add_var(0, 100)
    m.add_indicator(b, 1, [t], [1], ">=", 7)
    m.add_indicator(b, 0, [t], [1], "<=", 2)
    m.add_row([t], [1], ">=", 1)
    m.add_row([b], [1], "==" if value is not None else ">=", value if value is not None else 0)
    m.set_objective([t, b], [1, 3])
    return m


@pytest.mark.parametrize("forced,expected", [(1, 10.0), (0, 1.0), (None, 1.0)])
def test_indicators_native_and_big_m_agree(forced, expected):
    got = {s: solve(indicator_model(forced), SolverOptions(solver=s, time_limit=10)) for s in BOTH}
    for s, sol in got.items():
        assert sol.status == "optimal", s
        assert sol.objective == pytest.approx(expected), s


def test_equality_indicator_big_m_rows():
    m = Model()
    b = m.add_var(kind="B")
    x = m.add_vars(2, 0, 5)
    m.add_indicator(b, 1, x, [1, 1], "==", 4)
    mat, lo, hi = m.big_m_rows()
    assert mat.shape == (2, 3)           # one <= and one >= row
    sol = {s: solve(_with(m, b, x), SolverOptions(solver=s, time_limit=10)) for s in BOTH}
    assert all(v.objective == pytest.approx(-4) for v in sol.values())


def _with(m: Model, b: int, x) -> Model:
    m.add_row([b], [1], "==", 1)
    m.set_objective(x, [-1, -1])
    return m


def test_indicator_needs_finite_bounds():
    m = Model()
    b = m.add_var(kind="B")
    t = m.add_var(0)                     # no upper bound
    m.add_indicator(b, 1, [t], [1], "<=", 3)
    with pytest.raises(ValueError, match="finite bounds"):
        m.big_m_rows()


@pytest.mark.parametrize("solver", BOTH)
def test_infeasible_detected(solver):
    m = Model()
    x = m.add_vars(2, kind="B")
    m.add_row(x, [1, 1], ">=", 3)
    sol = solve(m, SolverOptions(solver=solver, time_limit=10))
    assert sol.status == "infeasible" and sol.values is None and "infeasible" in sol.message


def hard_model(n: int = 200, seed: int = 3) -> Model:
    """A random multi-knapsack with a known feasible start (all zeros); proving it takes seconds (Gurobi ~3.6 s)."""
    rng = np.random.default_rng(seed)
    m = Model("hard")
    x = m.add_vars(n, kind="B")
    for _ in range(25):
        m.add_row(x, rng.integers(5, 60, n), "<=", int(rng.integers(200, 400)))
    m.set_objective(x, -rng.integers(10, 100, n))
    m.set_start(x, np.zeros(n))
    return m


@pytest.mark.parametrize("solver", BOTH)
def test_time_limit_returns_incumbent(solver):
    sol = solve(hard_model(), SolverOptions(solver=solver, time_limit=0.2, mip_gap=0.0, threads=1))
    assert sol.status == "time_limit"
    assert sol.values is not None and sol.objective <= 0      # the start (objective 0) or better


@pytest.mark.parametrize("solver", BOTH)
def test_mip_start_accepted(solver):
    m = knapsack()
    m.set_start(range(3), [1, 0, 1])     # feasible, not optimal
    sol = solve(m, SolverOptions(solver=solver, time_limit=10))
    assert sol.objective == pytest.approx(-9)


def test_auto_picks_gurobi_for_small_models():
    sol = solve(knapsack(), SolverOptions(solver="auto", time_limit=10))
    assert sol.solver == "gurobi" and "licence" in sol.message


def test_auto_falls_back_to_highs_beyond_licence():
    m = Model("big")
    x = m.add_vars(2100, 0, 1)
    m.add_row(x, np.ones(2100), ">=", 3)
    m.set_objective(x, np.arange(2100) + 1.0)
    sol = solve(m, SolverOptions(solver="auto", time_limit=10))
    assert sol.solver == "highs"
    assert sol.message == "gurobi licence limit 2000 exceeded (2100 variables): used highs"
    assert sol.objective == pytest.approx(6.0)


def test_gurobi_refuses_beyond_licence():
    m = Model("big")
    x = m.add_vars(2100, 0, 1)
    m.add_row(x, np.ones(2100), ">=", 3)
    with pytest.raises(RuntimeError, match="size-limited"):
        solve(m, SolverOptions(solver="gurobi", time_limit=10))


def two_lanes(n: int = 40) -> tuple[Model, int, float]:
    """Split n weights over two lanes, minimising the fuller lane T (plus a small tie-break on lane 1):
    a MILP whose known bound is half the total weight. Returns the model, T's column and that bound."""
    weights = [5 + (7 * i) % 46 for i in range(n)]
    m = Model("lanes")
    x, y = m.add_vars(n, kind="B"), m.add_vars(n, kind="B")
    T = m.add_var(0.0, float(sum(weights)))
    for a, b in zip(x, y):
        m.add_row([a, b], [1, 1], "==", 1)
    for lane in (x, y):
        m.add_row([T, *lane], [1.0, *(-w for w in weights)], ">=", 0.0)
    m.set_objective([T, *x], [1.0] + [1e-3] * n)
    m.set_makespan([T], [1.0])
    return m, T, sum(weights) / 2


@pytest.mark.parametrize("solver", BOTH)
def test_stop_at_bound_ends_the_search_once_the_incumbent_is_within_the_gap(solver):
    m, T, bound = two_lanes()
    full = solve(m, SolverOptions(solver=solver, time_limit=30, mip_gap=0.0))
    assert full.status == "optimal" and "stopped" not in full.message
    stopped = solve(m, SolverOptions(solver=solver, time_limit=30, mip_gap=0.0, stop_at=bound * 1.02))
    assert stopped.status == "at_bound"
    assert bound <= stopped.values[T] <= bound * 1.02
    assert "within the gap of the known bound" in stopped.message
    # a target below every feasible makespan never stops the search: the solve ends optimal
    unreachable = solve(m, SolverOptions(solver=solver, time_limit=30, mip_gap=0.0, stop_at=bound * 0.5))
    assert unreachable.status == "optimal" and unreachable.objective == pytest.approx(full.objective)


def test_makespan_expression_and_stop_option_are_checked():
    m, T, _ = two_lanes(4)
    assert m.makespan_of([0.0] * T + [12.5]) == 12.5
    assert Model("none").makespan_of([1.0]) is None
    with pytest.raises(ValueError):
        SolverOptions(stop_at=-1.0)
