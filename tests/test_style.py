"""The library's docstrings say what and why: none runs past 15 lines, and no docstring or comment in
autotaccl/ holds a measured figure (those live in ``benchmarks/results/``; the code names the benchmark)."""
from __future__ import annotations

import ast
import io
import re
import tokenize

import pytest

from support import REPO

MAX_LINES = 15
#: what a measured figure looks like: a percentage, a ratio such as ``1.81x`` or ``3×`` or ``4x faster``, a time
#: in µs/us/ms, a decimal bandwidth (sizes such as ``1 GiB`` and counts are settings, not measurements)
FIGURE = re.compile(r"\b\d+(?:\.\d+)?\s?%|\b\d+\.\d+\s?[x×](?!\w)|\b\d+\s?×|\b\d+x (?:faster|slower|more|less|fewer)\b"
                    r"|\b\d+(?:\.\d+)?\s?(?:µs|us|ms)\b|\b\d+\.\d+\s?GB/s\b")
SOURCES = sorted((REPO / "autotaccl").rglob("*.py"))


def docstrings(tree: ast.Module):
    """(name, docstring) of the module and of every class and function in it."""
    for node in [tree, *ast.walk(tree)]:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and \
                (text := ast.get_docstring(node, clean=False)):
            yield getattr(node, "name", "<module>"), text


def comments(source: str):
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield f"line {token.start[0]}", token.string


def test_the_figure_pattern_catches_what_used_to_stand_in_the_code():
    caught = ["reaches 97.9% of the attainable bound", "AllReduce 1.81x (LL128 x 3", "20.1 us against 25.2",
              "grows from 36 to 73 µs", "one log_batch (4x faster than per-value calls)", "Intel 39.0 GB/s"]
    settings = ["DGX-H100 x8 at 1 GiB", "the 2x2-GPU test space", "LL x 6 in 4 pieces", "chunk-up = channels"]
    assert all(FIGURE.search(text) for text in caught)
    assert not any(FIGURE.search(text) for text in settings)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_docstrings_are_short_and_docstrings_and_comments_hold_no_measured_figure(path):
    source = path.read_text()
    long = [f"{name} ({len(text.splitlines())} lines)" for name, text in docstrings(ast.parse(source))
            if len(text.splitlines()) > MAX_LINES]
    assert long == [], f"{path.name}: docstrings over {MAX_LINES} lines (move the depth to docs/internals.md)"
    figures = [f"{where}: {m.group(0)!r}" for where, text in [*docstrings(ast.parse(source)), *comments(source)]
               for m in FIGURE.finditer(text)]
    assert figures == [], f"{path.name}: measured figures belong in benchmarks/results/, name the benchmark"
