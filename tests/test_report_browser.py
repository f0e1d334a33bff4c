"""The report page in a real headless Chromium: the plots decode and the table renders.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``); .ci/run installs it.
"""
from __future__ import annotations

import shutil
import subprocess

import yaml

from autotaccl.cli import main
from autotaccl.tuning.sweep import TuneRequest, tune
from test_tuning_store import fresh_store

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
  document.body.setAttribute("data-rows", document.querySelectorAll("table tr").length);
});
</script></body>"""


def dump_dom(url: str) -> str:
    result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                             "--virtual-time-budget=5000", "--dump-dom", url],
                            capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_report_renders_in_headless_chromium(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    out = tmp_path / "runs"
    fresh_store(out)
    tune(TuneRequest(space=str(space), trials=3, out=str(out), sampler="bruteforce", seed=0, progress=False))
    target = tmp_path / "report"
    assert main(["report", "--tracking-uri", f"sqlite:///{out / 'mlflow.db'}", "-o", str(target)]) == 0
    probe = target / "probe.html"           # the page plus a script that records what the browser decoded
    probe.write_text((target / "index.html").read_text().replace("</body>", PROBE))
    dom = dump_dom(probe.as_uri())
    assert 'data-images="3"' in dom
    assert 'data-decoded="3"' in dom, "every PNG plot must decode in the browser"
    assert 'data-rows="3"' in dom           # header + 2 sizes
    assert "ndv2x2-allgather" in dom and "busbw vs size" in dom
