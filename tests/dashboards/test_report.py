"""`autotaccl report`: a real sweep's runs become an HTML page with PNG plots; names are escaped."""
from __future__ import annotations

from types import SimpleNamespace

import mlflow
import pytest

from autotaccl.cli import main
from support import swept_store
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
    out, _ = swept_store(tmp, SPACE, trials=4, sampler="random", seed=5)
    return tmp, f"sqlite:///{out / 'mlflow.db'}"


@pytest.mark.slow
def test_report_has_every_plot_and_the_table(tracked, capsys):
    tmp, uri = tracked
    target = tmp / "report"
    assert main(["report", "--tracking-uri", uri, "-o", str(target)]) == 0
    assert str(target / "index.html") in capsys.readouterr().out
    page = (target / "index.html").read_text()
    for name in ("ndv2x2-allgather-busbw.png", "ndv2x2-allgather-time.png", "ndv2x2-allgather-history.png",
                 "ndv2x2-allgather-importances.png", "ndv2x2-allgather-progress.png"):
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


@pytest.mark.slow
def test_report_links_the_export_it_is_given_and_names_its_winners(tracked, capsys):
    import json
    import re

    tmp, uri = tracked
    assert main(["report", "--tracking-uri", uri, "--export", str(tmp / "nowhere"), "-o", str(tmp / "r3")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--export" in err and not (tmp / "r3").exists()
    assert main(["export", "--tracking-uri", uri, "-o", str(tmp / "exp")]) == 0
    moved = tmp / "elsewhere"
    (tmp / "exp").rename(moved)                 # the export's own record now points at a missing directory
    assert main(["report", "--tracking-uri", uri, "-o", str(tmp / "r4")]) == 0
    assert "No export of this experiment found" in (tmp / "r4" / "index.html").read_text()
    assert main(["report", "--tracking-uri", uri, "--export", str(moved), "-o", str(tmp / "r5")]) == 0
    page = (tmp / "r5" / "index.html").read_text()
    links = re.findall(r'<a class="file" href="([^"]+)"', page)
    assert all((tmp / "r5" / link).resolve().is_file() for link in links) and any("elsewhere" in li for li in links)
    table = json.loads((moved / "table.json").read_text())
    assert json.loads((tmp / "r5" / "report.json").read_text())["winners"] == table["winners"]
    assert json.loads((tmp / "r4" / "report.json").read_text())["winners"] == table["winners"]   # computed alike
    for band in table["ranges"]:
        assert band["winner"] in page and band["protocol"] in page


@pytest.mark.parametrize("cell, label, note", [
    ("msccl/ndv2x2-allgather-from1M-up.xml", "XML", ""),
    ("mscclpp/ndv2x2-allgather-from1M-up.outofplace.plan.json", "plan out", ""),
    ("mscclpp/ndv2x2-allgather-from1M-up.inplace.plan.json", "plan in", ""),
    ("nccl/nccl_tuner.conf line 8", "tuner line 8", ""),
    ("nccl/nccl_tuner.conf line 10 (fallback: the synthesized algorithm needs msccl/mscclpp)", "tuner line 10",
     "fallback: the synthesized algorithm needs msccl/mscclpp"),
])
def test_the_deploy_table_names_files_by_short_labels(cell, label, note):
    from dashboards.report import file_label

    path, _, rest = cell.partition(" ")
    assert file_label(path, rest) == (label, note)


def test_the_deploy_table_keeps_each_full_path_on_hover(tmp_path):
    from dashboards.report import deploy_section

    row = {"min_bytes": 0, "max_bytes": "", "winner": "trial-1", "engine": "greedy", "config": "chunkup=2",
           "protocol": "Simple", "instances": 1, "msccl": "msccl/a-from0-up.xml", "msccl_legacy": "stock NCCL (no file)",
           "mscclpp": "mscclpp/a-from0-up.outofplace.plan.json, mscclpp/a-from0-up.inplace.plan.json",
           "nccl": "nccl/nccl_tuner.conf line 3"}
    page = deploy_section([row], tmp_path / "export", tmp_path / "report")
    for path, label in (("msccl/a-from0-up.xml", "XML"), ("mscclpp/a-from0-up.inplace.plan.json", "plan in"),
                        ("nccl/nccl_tuner.conf", "tuner line 3")):
        assert f'href="../export/{path}" title="{tmp_path / "export" / path}">{label}</a>' in page
    assert "a-from0-up.xml</a>" not in page and "stock NCCL (no file)" in page
