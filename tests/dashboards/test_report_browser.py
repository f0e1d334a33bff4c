"""The report page in a real headless Chromium: the plots decode and the table renders.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``); .ci/run installs it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys

import mlflow
import pytest

from autotaccl.cli import main
from support import swept_store

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SPACE = {
    "target": {"hardware": "ndv2", "nodes": 2, "collective": "allgather"},
    "sizes": "1K,1M",
    "fixed": {"engine": "greedy"},
    "parameters": {"chunkup": {"type": "int", "low": 1, "high": 3}},
}
PROBE = """<script>
window.addEventListener("load", () => {
  const imgs = [...document.images];
  document.body.setAttribute("data-images", imgs.length);
  document.body.setAttribute("data-decoded", imgs.filter(i => i.complete && i.naturalWidth > 100).length);
  document.body.setAttribute("data-rows", document.querySelectorAll("table.sizes tr").length);
  document.body.setAttribute("data-bands", document.querySelectorAll("table.winners tr").length - 1);
  document.body.setAttribute("data-links", [...document.querySelectorAll("table.winners a")].length);
  const files = [...document.querySelectorAll("table.winners .file")];
  document.body.setAttribute("data-files", files.length);
  document.body.setAttribute("data-wrapped", files.filter(f => f.getClientRects().length > 1).map(f => f.textContent).join("|"));
  document.body.setAttribute("data-page-width", document.documentElement.scrollWidth);
  const w = document.querySelector("table.winners");
  document.body.setAttribute("data-winners-width", w ? Math.round(w.getBoundingClientRect().width) : 0);
});
</script></body>"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out, _ = swept_store(tmp_path_factory.mktemp("browser"), SPACE, trials=3, sampler="bruteforce", seed=0)
    return out


def dump_dom(url: str) -> str:
    result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                             "--virtual-time-budget=5000", "--dump-dom", url],
                            capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_report_renders_in_headless_chromium(swept, tmp_path):
    out = swept
    uri = f"sqlite:///{out / 'mlflow.db'}"
    assert main(["export", "--tracking-uri", uri, "-o", str(tmp_path / "export")]) == 0
    target = tmp_path / "report"
    assert main(["report", "--tracking-uri", uri, "-o", str(target)]) == 0
    bands = len(json.loads((tmp_path / "export" / "table.json").read_text())["ranges"])
    probe = target / "probe.html"           # the page plus a script that records what the browser decoded
    page = (target / "index.html").read_text()
    probe.write_text(page.replace("</body>", PROBE))
    dom = dump_dom(probe.as_uri())
    assert 'data-images="5"' in dom         # busbw and time vs size, history, importances, best so far per size
    assert 'data-decoded="5"' in dom, "every PNG plot must decode in the browser"
    assert 'data-rows="3"' in dom           # header + 2 sizes
    assert f'data-bands="{bands}"' in dom   # the winners table: one row per exported band
    assert int(re.search(r'data-winners-width="(\d+)"', dom).group(1)) > 300
    assert "ndv2x2-allgather" in dom and "busbw vs size" in dom and "time vs size" in dom
    for cmd in ("MSCCL_ALGO_DIR", "MSCCL_XML_FILES", "ExecutionPlan", "NCCL_TUNER_CONFIG_FILE"):
        assert cmd in dom, cmd
    links = re.findall(r'<a class="file" href="([^"]+)"', page)
    assert any(link.endswith(".plan.json") for link in links) and any("nccl_tuner.conf" in link for link in links)
    assert all((target / link).resolve().is_file() for link in links), links    # every link reaches its file
    shot = tmp_path / "shot.png"
    result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                             "--virtual-time-budget=5000", "--window-size=1280,2400", f"--screenshot={shot}",
                             (target / "index.html").as_uri()], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    from PIL import Image

    pixels = Image.open(shot).convert("L")
    histogram = pixels.histogram()
    assert sum(1 for n in histogram if n) > 50          # text and plots, not a blank page
    assert max(histogram) < 0.97 * sum(histogram)


printed: list[str] = []       # the whole URL `autotaccl ui` printed, query included


@pytest.fixture(scope="module")
def runs_url(swept):
    """`autotaccl ui` on a free loopback port over the sweep: the URL it prints for the experiment, its query
    (the page's view state) cut off (the server stops after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ui = subprocess.Popen([sys.executable, "-m", "autotaccl.cli", "ui", "--out", str(swept), "--port", str(port)],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        lines = []
        for line in ui.stdout:                   # the command prints the runs URL once the server is healthy
            lines.append(line)
            if "#/experiments/" in line:
                break
        url = re.search(r"(http://127\.0\.0\.1:\d+/#/experiments/\d+/runs)(\?\S*)?", "".join(lines))
        assert url, lines
        printed.append(url.group(0))
        yield url.group(1)
    finally:
        ui.send_signal(signal.SIGTERM)          # the command stops its server's process group
        try:
            ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)


def trial_run(out, number: int):
    mlflow.set_tracking_uri(f"sqlite:///{out / 'mlflow.db'}")
    return mlflow.search_runs(experiment_names=["ndv2x2-allgather"],
                              filter_string=f"tags.`optuna.trial` = '{number}'").iloc[0]


def test_mlflow_ui_shows_the_sweep_and_a_trial_in_headless_chromium(swept, runs_url):
    dom = dump_dom(runs_url)
    assert "sweep-ndv2x2-allgather" in dom
    trial = trial_run(swept, 1)
    dom = dump_dom(f"{runs_url}/{trial.run_id}")
    assert "busbw_GBps.1048576" in dom and trial["tags.mlflow.runName"] in dom


def test_a_trial_chart_view_draws_its_per_size_curves(swept, runs_url, tmp_path):
    """The run's "Model metrics" view: charts sort by key, so the first is the algbw_GBps curve (step = log2
    bytes, a line rising with size) and the next a per-size key (one value, a bar with a flat top)."""
    from matplotlib.image import imread

    trial = trial_run(swept, 1)

    def screenshot(attempt: int):
        shot = tmp_path / f"chart{attempt}.png"
        # a long virtual-time budget: the charts load lazily, a short one catches their spinners
        result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                                 "--virtual-time-budget=300000", f"--screenshot={shot}",
                                 f"{runs_url}/{trial.run_id}/model-metrics"], capture_output=True, text=True,
                                timeout=180)
        assert result.returncode == 0, result.stderr[-2000:]
        return (imread(shot)[..., :3] * 255).astype(int)

    def tops(blue, x0: int, x1: int) -> list[int]:    # per pixel column of a panel: the highest blue pixel
        return [int(col.argmax()) for col in blue[300:520, x0:x1].T if col.any()]

    for attempt in range(3):        # the metric fetches run in real time: on a loaded machine a shot can precede them
        pixels = screenshot(attempt)
        blue = pixels[..., 2] - pixels[..., 0] > 80           # the series colour of MLflow's charts
        curve, bar = tops(blue, 215, 470), tops(blue, 480, 735)
        if len(curve) > 50 and len(bar) > 100:
            break
    assert len({tuple(p) for p in pixels[::7, ::7].reshape(-1, 3)}) > 50, "blank screenshot"
    assert len(curve) > 50 and max(curve) - min(curve) > 100, "the first chart is not a curve over the sizes"
    assert len(bar) > 100 and max(bar) - min(bar) <= 3, "the second chart is not one per-size value"


def test_the_url_ui_prints_opens_on_the_comparison_of_the_trials(swept, runs_url, tmp_path):
    """MLflow's training-runs view (not GenAI's traces and evaluation runs), every trial and baseline a row
    of its own (not folded under the sweep's run), the best busbw at the largest size first, and the chart
    view drawing each per-size key with a line per run: all without a click."""
    url = printed[-1]
    assert url.startswith(runs_url + "?")
    mlflow.set_tracking_uri(f"sqlite:///{swept / 'mlflow.db'}")
    (experiment,) = [e for e in mlflow.MlflowClient().search_experiments() if e.name == "ndv2x2-allgather"]
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = mlflow.search_runs(experiment_names=["ndv2x2-allgather"])
    trials = runs[runs["tags.autotaccl.kind"] == "trial"]
    baselines = runs[runs["tags.autotaccl.kind"] == "baseline"]
    assert len(trials) == 3
    for attempt in range(3):        # the charts fetch their metrics in real time: a loaded machine can be late
        dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                              "--virtual-time-budget=120000", "--dump-dom", url], capture_output=True, text=True,
                             timeout=240).stdout
        if all(dom.count(name) >= 2 for name in trials["tags.mlflow.runName"]):
            break
    assert "Evaluation runs" not in dom and "Runs" in dom        # the training-runs view, not GenAI's
    assert "sweep-ndv2x2-allgather" not in dom                          # the parent run folds nothing away
    for name in [*trials["tags.mlflow.runName"], *baselines["tags.mlflow.runName"]]:
        assert dom.count(name) >= 2, name        # its row, and its line in the drawn charts' legends
    for key in ("busbw_GBps", "time_us", "busbw_GBps.1048576"):
        assert key in dom, key                   # a chart per key, titled by it
    rows = runs[runs["tags.autotaccl.kind"] != "sweep"]
    table = dom[dom.index('row-index="0"'):]                   # the runs list, row by row
    first = min(rows["tags.mlflow.runName"], key=table.find)     # the top row
    assert rows.loc[rows["tags.mlflow.runName"] == first, "metrics.busbw_GBps"].iloc[0] == rows["metrics.busbw_GBps"].max()


def test_at_1400_px_no_cell_of_the_deploy_table_wraps_a_file_name(swept, tmp_path):
    """The "What to deploy" table in a 1400 px wide window: each file is one short label on one line (a
    label wrapped over two lines has two client rectangles), the page needs no sideways scroll, and the
    screenshot of the table is not blank."""
    uri = f"sqlite:///{swept / 'mlflow.db'}"
    assert main(["export", "--tracking-uri", uri, "-o", str(tmp_path / "export")]) == 0
    target = tmp_path / "report"
    assert main(["report", "--tracking-uri", uri, "-o", str(target)]) == 0
    probe = target / "probe.html"
    probe.write_text((target / "index.html").read_text().replace("</body>", PROBE))
    result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                             "--virtual-time-budget=5000", "--window-size=1400,900", "--dump-dom", probe.as_uri()],
                            capture_output=True, text=True, timeout=90)
    dom = result.stdout
    assert int(re.search(r'data-files="(\d+)"', dom).group(1)) >= 4       # XML, XML, plan out and in, tuner rows
    assert 'data-wrapped=""' in dom, re.search(r'data-wrapped="([^"]*)"', dom).group(1)
    assert int(re.search(r'data-page-width="(\d+)"', dom).group(1)) <= 1400
    shot = tmp_path / "deploy.png"
    result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                             "--virtual-time-budget=5000", "--window-size=1400,900", f"--screenshot={shot}",
                             (target / "index.html").as_uri()], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    from PIL import Image

    assert Image.open(shot).size == (1400, 900)
    assert len(set(Image.open(shot).convert("L").getdata())) > 20        # the table's text, not a blank page
