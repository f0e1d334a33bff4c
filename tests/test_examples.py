"""examples/: the scripts the README and docs/ point to run as written."""
from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from support import REPO, fresh_store, runs


@pytest.mark.slow
def test_the_sweep_example_tunes_and_exports_from_python(tmp_path):
    out = tmp_path / "example"
    fresh_store(out / "runs")       # a migrated empty store (MLflow's migrations take seconds); the script finds it
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "sweep.py"), str(out)], capture_output=True,
                          text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("default sketch: ") and " us at 1M " in lines[0]
    assert any(line.startswith("study ndv2x2-allgather: best objective ") for line in lines)
    assert lines[-1] == f"exported {len(pd.read_csv(out / 'export' / 'table.csv'))} size range(s) to {out / 'export'}"
    trials = runs(out / "runs")
    assert (trials["tags.autotaccl.kind"] == "trial").sum() == 6
    table = pd.read_csv(out / "export" / "table.csv")
    assert table["min_size"].iloc[0] == 1024 and table["max_size"].iloc[-1] == 16 << 20


def test_the_readme_python_example_is_the_sweep_example():
    """Every line of docs/python.md's Python block is a line of examples/sweep.py, which the test above runs."""
    page = (REPO / "docs" / "python.md").read_text()
    block = page.split("# From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    script = {line.strip() for line in (REPO / "examples" / "sweep.py").read_text().splitlines()}
    missing = [line for line in block.splitlines() if line.strip() and line.strip() not in script]
    assert missing == []
    compile(block, "docs/python.md", "exec")              # and the block alone is a valid script
