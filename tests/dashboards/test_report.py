"""`autotaccl report`: a real sweep's runs become an HTML page with PNG plots; names are escaped."""
from __future__ import annotations

from types import SimpleNamespace

import mlflow
import pytest
import yaml

from autotaccl.cli import main
from autotaccl.tuning.sweep import TuneRequest, tune
from support import fresh_store
from dashboards.report import experiment_section

SPACE = {
    "target": {"hardware": "ndv2", "nodes": 2, "collective": "allgather"},
    "sizes": "1K,64K,4M",
    "fixed": {"engine": "greedy"},
    "parameters": {
        "internode_conn": {"type": "categorical", "choices": ["relay", "direct-map"]},
        "chunkup": {"type": "int", "low": 1, "high": 2},
    },
}
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    space = tmp / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    out = tmp / "runs"
    fresh_store(out)
    tune(TuneRequest(space=str(space), trials=4, out=str(out), sampler="random", seed=5, progress=False))
    return tmp, f"sqlite:///{out / 'mlflow.db'}"


def test_report_has_every_plot_and_the_table(tracked, capsys):
    tmp, uri = tracked
    target = tmp / "report"
    assert main(["report", "--tracking-uri", uri, "-o", str(target)]) == 0
    assert str(target / "index.html") in capsys.readouterr().out
    page = (target / "index.html").read_text()
    for name in ("ndv2x2-allgather-busbw.png", "ndv2x2-allgather-time.png", "ndv2x2-allgather-history.png",
                 "ndv2x2-allgather-importances.png"):
        assert f'src="{name}"' in page
        assert (target / name).read_bytes().startswith(PNG)
    sizes = page.split('<table class="sizes">')[1].split("</table>")[0]
    assert sizes.count("<tr>") == 1 + 3                  # header + one row per size
    assert "hierarchical" in page and "% of bound" in page


def test_names_are_escaped(tracked):
    _, uri = tracked
    mlflow.set_tracking_uri(uri)
    frame = mlflow.search_runs(experiment_names=["ndv2x2-allgather"])
    frame.loc[frame["tags.autotaccl.kind"] == "baseline", "tags.baseline"] = "<script>alert(1)</script>"
    client = mlflow.MlflowClient()
    real = client.get_experiment_by_name("ndv2x2-allgather")
    experiment = SimpleNamespace(name="x<b>&y", experiment_id=real.experiment_id, tags=real.tags)
    html, _ = experiment_section(experiment, frame, tracked[0], client)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "x&lt;b&gt;&amp;y" in html and "<b>" not in html


def test_unknown_experiment_is_exit_2(tracked, capsys):
    tmp, uri = tracked
    assert main(["report", "--tracking-uri", uri, "--experiment", "none-such", "-o", str(tmp / "r2")]) == 2
    assert "--experiment: none-such" in capsys.readouterr().err
    assert not (tmp / "r2").exists()
