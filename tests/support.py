"""Data and helpers that several test modules share; fixtures live in the conftest.py files.

(pytest's ``pythonpath`` puts this folder on ``sys.path``; no test module imports another.)
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import mlflow
import yaml
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"          # /work/shared, or ../shared beside a CI checkout
TACCL_EXAMPLES = SHARED / "data" / "taccl-examples"
SKETCHES = TACCL_EXAMPLES / "sketch"
TACCL_TOPO = TACCL_EXAMPLES / "topo"
MSCCL_XML = SHARED / "data" / "msccl-xml"
PUBLIC_TABLES = SHARED / "data" / "nccl-tests-public"   # real nccl-tests tables (INDEX.md names their machines)
VENV_BIN = Path(sys.executable).parent

# --------------------------------------------------------------------------- MLflow stores

# A migrated, empty MLflow SQLite store, created once per machine and copied: creating a fresh store runs
# MLflow's alembic migrations (8-12 s here, ecosystem.md §2.1); the tuning tests need one real store each,
# so they copy this one (made by MLflow itself) into their run directory, where `autotaccl tune` finds it.
TEMPLATE = Path(tempfile.gettempdir()) / f"autotaccl-test-mlflow-{mlflow.__version__}.db"


def fresh_store(out: Path) -> str:
    """Put an empty, migrated store at ``out/mlflow.db``; returns its tracking URI."""
    out.mkdir(parents=True, exist_ok=True)
    if not TEMPLATE.exists():
        with open(TEMPLATE.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not TEMPLATE.exists():
                tmp = TEMPLATE.with_name(f"{TEMPLATE.name}.{os.getpid()}.tmp")
                MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)
                tmp.replace(TEMPLATE)
    shutil.copyfile(TEMPLATE, out / "mlflow.db")
    return f"sqlite:///{out / 'mlflow.db'}"


def swept_store(tmp: Path, space: dict, **request) -> tuple[Path, list]:
    """A real ``tune`` of ``space`` (written to ``tmp/space.yaml``) into a fresh store at ``tmp/runs``:
    (that directory, tune's summaries). ``request``: the other TuneRequest fields."""
    import yaml

    from autotaccl.tuning.sweep import TuneRequest, tune

    path, out = tmp / "space.yaml", tmp / "runs"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    fresh_store(out)
    return out, tune(TuneRequest(space=str(path), out=str(out), progress=False, **request))


def runs(out: Path, name: str = "ndv2x2-allgather"):
    """The MLflow runs of experiment ``name`` in ``out``'s default store."""
    mlflow.set_tracking_uri(f"sqlite:///{out / 'mlflow.db'}")
    return mlflow.search_runs(experiment_names=[name])


# --------------------------------------------------------------------------- search spaces

# ndv2 x 2 AllGather on the simulator: 9 configurations, one seed
NDV2_SPACE = {
    "target": {"hardware": "ndv2", "nodes": 2, "collective": "allgather"},
    "sizes": "1K,64K,4M",
    "fixed": {"engine": "greedy"},
    "parameters": {
        "internode_conn": {"type": "categorical", "choices": ["relay", "direct-map"]},
        "relay_map": {"type": "categorical", "choices": ["0:1", "1:0"], "when": {"internode_conn": "relay"}},
        "chunkup": {"type": "int", "low": 1, "high": 2},
        "protocol": {"type": "categorical", "choices": ["Simple", "LL"]},
    },
    "seeds": [{"internode_conn": "relay", "relay_map": "0:1", "chunkup": 1, "protocol": "Simple"}],
}


def write_space(folder: Path, data: dict = NDV2_SPACE) -> Path:
    """``data`` as ``folder/space.yaml`` (a space naming ``pair.yaml`` gets that profile beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    if data["target"]["hardware"] == "pair.yaml":
        (folder / "pair.yaml").write_text(yaml.safe_dump(PAIR_HARDWARE))
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# A 2 x 2-GPU profile keeps the mpi runner at 4 real ranks (mpiexec from the venv's MPICH wheel).
PAIR_HARDWARE = {
    "name": "pair", "gpus_per_node": 2,
    "link_classes": {"nvlink": {"alpha_us": 0.7, "bandwidth_GBps": 25.0}, "pcie": {"alpha_us": 0.5, "bandwidth_GBps": 16.0},
                     "ib": {"alpha_us": 2.6, "bandwidth_GBps": 12.5}},
    "links": {"class": "nvlink", "pairs": [[0, 1, 1]]},
    "nics": [{"class": "ib", "via": "pcie", "gpus": [0, 1]}],
}
PAIR_SPACE = {   # 2 nodes x 2 GPUs = 4 real MPI ranks
    "target": {"hardware": "pair.yaml", "nodes": 2, "collective": "allgather"},
    "sizes": "1K,64K",
    "fixed": {"engine": "greedy"},
    "parameters": {"internode_conn": {"type": "categorical", "choices": ["relay", "direct-map", "fully-connected"]},
                   "relay_map": {"type": "categorical", "choices": ["0:0", "0:1", "1:1"],
                                 "when": {"internode_conn": "relay"}},
                   "chunkup": {"type": "int", "low": 1, "high": 3}},
}
# the pair space plus a seed: 15 configurations (the cluster tests)
CLUSTER_SPACE = {**PAIR_SPACE, "seeds": [{"internode_conn": "relay", "relay_map": "0:1", "chunkup": 2}]}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def tune_cmd(*args: str) -> list[str]:
    return [str(VENV_BIN / "autotaccl"), "tune", "--no-progress", *args]


def run_tune(*args: str, fault: str | None = None, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    """``autotaccl tune`` in a real process; ``fault`` interrupts it at a named point (autotaccl/faults.py)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("AUTOTACCL_TEST_FAULT", None)
    if fault:
        env["AUTOTACCL_TEST_FAULT"] = fault
    return subprocess.run(tune_cmd(*args), capture_output=True, text=True, timeout=timeout, env=env, **kwargs)


def one_line(proc: subprocess.CompletedProcess, status: int = 2) -> str:
    """The single error line of a refused run (and no traceback)."""
    assert proc.returncode == status, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("autotaccl: ")]
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    return lines[0]


def truncate_half(db: Path) -> None:
    """A store cut short (a full disk, a copy stopped half-way)."""
    os.truncate(db, db.stat().st_size // 2)


def overwrite_middle(db: Path, size: int = 8192) -> None:
    """Random bytes over a stretch in the middle of the file, as a bad disk sector or a stray writer leaves
    them."""
    import random

    with open(db, "r+b") as fh:
        fh.seek(db.stat().st_size // 2)
        fh.write(random.Random(38).randbytes(size))


def exported(uri: str, out: Path) -> dict:
    """``autotaccl export`` of a store, without run ids and trial numbers (which differ between two sweeps
    that found the same algorithms): the table, the XML texts and the winners."""
    run = subprocess.run([str(VENV_BIN / "autotaccl"), "export", "--tracking-uri", uri, "-o", str(out)],
                         capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise AssertionError(f"export failed: {run.stdout}{run.stderr}")
    rows = json.loads((out / "table.json").read_text())["ranges"]
    strip = re.compile(r"trial-\d+|[0-9a-f]{32}")
    table = [{k: strip.sub("*", v) if isinstance(v, str) else v for k, v in r.items()
              if k not in ("run_id", "winner", "trial", "xml")} for r in rows]   # labels such as mscclpp_winner
    xml = sorted(strip.sub("*", p.read_text()) for p in out.rglob("*.xml"))
    return {"table": table, "xml": xml, "winners": [strip.sub("trial", str(r.get("winner"))) for r in rows]}


SWEEP = "ndv2x2-allgather"        # the study and experiment of NDV2_SPACE
SWEEP_ARGS = ("--trials", "5", "--sampler", "tpe", "--seed", "3")


def study_trials(out: Path, name: str = SWEEP) -> list:
    """The trials of study ``name`` in ``out``'s Optuna journal."""
    from optuna import load_study

    from autotaccl.cluster.heartbeat import open_storage

    return load_study(study_name=name, storage=open_storage(str(out / "optuna.journal"))).trials


def sweep_args(tmp_path: Path, name: str = "runs") -> tuple[list[str], Path]:
    """``tune`` arguments of the NDV2_SPACE sweep into ``tmp_path/name`` (a fresh store), and that directory."""
    space = write_space(tmp_path / "space", NDV2_SPACE)
    out = tmp_path / name
    fresh_store(out)
    return ["--space", str(space), *SWEEP_ARGS, "--out", str(out)], out


def configurations(trials) -> list:
    """The counted trials' parameters, sorted (two sweeps that tried the same configurations compare equal)."""
    from autotaccl.tuning.sweep import counted

    return sorted(tuple(sorted(t.params.items())) for t in trials if counted(t))


def assert_like_clean(out: Path, clean: tuple, export_dir: Path, trials: int = 5) -> None:
    """The sweep in ``out`` ended as the uninterrupted one ``clean`` = (its out, export, trials) did: the same
    counted configurations, one MLflow run per trial in its Optuna state, the baselines once, the same export."""
    from autotaccl.tuning.sweep import counted

    _, clean_export, clean_trials = clean
    found = study_trials(out)
    assert sum(counted(t) for t in found) == trials
    assert all(t.state.is_finished() for t in found)
    assert configurations(found) == configurations(clean_trials)      # the same configurations, seeds included
    df = runs(out)
    trial_runs = df[df["tags.autotaccl.kind"] == "trial"]
    assert sorted(trial_runs["tags.optuna.trial"].astype(int)) == [t.number for t in found]   # one run per trial
    states = dict(zip(trial_runs["tags.optuna.trial"].astype(int), zip(trial_runs["tags.state"], trial_runs["status"])))
    status = {"COMPLETE": "FINISHED", "FAIL": "FAILED", "PRUNED": "KILLED"}
    assert states == {t.number: (t.state.name, status[t.state.name]) for t in found}      # MLflow agrees with Optuna
    running = df[df["status"] == "RUNNING"]
    assert (running["tags.autotaccl.kind"] == "sweep").all()
    bases = df[df["tags.autotaccl.kind"] == "baseline"]
    assert sorted(bases["tags.baseline"]) == ["direct", "hierarchical", "ring"]
    assert (bases["status"] == "FINISHED").all()
    assert exported(f"sqlite:///{out / 'mlflow.db'}", export_dir) == clean_export


# --------------------------------------------------------------------------- services: PostgreSQL, MLflow server

def postgres_url() -> str:
    """``AUTOTACCL_TEST_POSTGRES`` (set by .ci/run), else the shared server ``bash .ci/postgres start`` starts."""
    url = os.environ.get("AUTOTACCL_TEST_POSTGRES")
    if url:
        return url
    out = subprocess.run(["bash", str(REPO / ".ci" / "postgres"), "start"], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    line = [x for x in out.splitlines() if "AUTOTACCL_TEST_POSTGRES=" in x][-1]
    url = shlex.split(line.split("=", 1)[1])[0]
    os.environ["AUTOTACCL_TEST_POSTGRES"] = url
    return url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """``mlflow server`` on a free 127.0.0.1 port as a child process, one worker, no job runner, its SQLite
    store copied from the migrated template; ``stop()``/``start()`` keep the store and the port."""

    def __init__(self, root: Path) -> None:
        self.root = root
        fresh_store(root)
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, wait: float = 90.0) -> None:
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        env.pop("AUTOTACCL_TEST_FAULT", None)
        log = open(self.root / "server.log", "ab")
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
             "--default-artifact-root", str(self.root / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            env=env, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
            if self.proc.poll() is not None:
                break
        raise RuntimeError(f"mlflow server did not start: {(self.root / 'server.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)       # the server and its uvicorn worker
            self.proc.wait(timeout=30)
        self.proc = None


# --------------------------------------------------------------------------- a site's own runner

def install_runner(root: Path, name: str, target: str, source: str) -> Path:
    """Install, under ``root``, a distribution shipping runner ``name`` = ``target`` (``module:Class``),
    the module's text being ``source``: a real ``autotaccl.runners`` entry point, found by
    ``importlib.metadata`` once ``root`` is on ``sys.path`` (or PYTHONPATH). Returns ``root``."""
    module = target.split(":")[0]
    dist = root / f"{module}-0.1.dist-info"
    dist.mkdir(parents=True)
    (root / f"{module}.py").write_text(source)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[autotaccl.runners]\n{name} = {target}\n")
    return root


# --------------------------------------------------------------------------- MSCCL XML

def allpairs3(with_nop: bool = True, k: int = 1) -> str:
    """3-rank AllReduce of k chunks: every rank sends its input to both peers' scratch, then one fused
    ``re`` chain adds both scratch copies into the output; the nop carries the chain's second dependency."""
    lines = [f'<algo name="ap3" proto="LL" nchannels="1" nchunksperloop="{k}" ngpus="3" coll="allreduce" '
             'inplace="0" outofplace="1" minBytes="0" maxBytes="0">']

    def step(s, kind, sb, so, db, do, depid=-1, deps=-1, hasdep=0):
        cnt = 0 if kind == "nop" else k
        return (f'      <step s="{s}" type="{kind}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" '
                f'cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>')

    for r in range(3):
        a, b = (r + 1) % 3, (r + 2) % 3
        local = [step(0, "cpy", "i", 0, "o", 0)]
        if with_nop:
            local.append(step(1, "nop", "i", -1, "o", -1, 3, 0))
        local += [step(len(local), "re", "s", 0, "o", 0, 2, 0), step(len(local) + 1, "re", "s", k, "o", 0)]
        lines += [f'  <gpu id="{r}" i_chunks="{k}" o_chunks="{k}" s_chunks="{2 * k}">',
                  f'    <tb id="0" send="{a}" recv="-1" chan="0">', step(0, "s", "i", 0, "s", 0), "    </tb>",
                  f'    <tb id="1" send="{b}" recv="-1" chan="0">', step(0, "s", "i", 0, "s", k), "    </tb>",
                  f'    <tb id="2" send="-1" recv="{a}" chan="0">', step(0, "r", "i", 0, "s", k, hasdep=1),
                  "    </tb>",
                  f'    <tb id="3" send="-1" recv="{b}" chan="0">', step(0, "r", "i", 0, "s", 0, hasdep=1),
                  "    </tb>",
                  '    <tb id="4" send="-1" recv="-1" chan="0">', *local, "    </tb>", "  </gpu>"]
    return "\n".join(lines + ["</algo>"]) + "\n"


# --------------------------------------------------------------------------- NCCL's example tuner plugin
# A reader that follows plugins/tuner/example/plugin.c of NVIDIA/nccl: lines starting with '#' or empty are
# skipped; a line is cut at commas (strtok: empty fields vanish), each field trimmed of spaces and tabs; 8 to
# 10 fields make a rule; unknown names fall back (collective: allreduce, algorithm: ring, protocol: simple).
# getCollInfo sets the channel count to 1, takes the first rule whose collective matches, with
# min <= nBytes <= max, nNodes/nRanks equal or -1 (numPipeOps/regBuff likewise), and whose (algorithm,
# protocol) NCCL has not marked ignored; it zeroes that cost and sets the channels unless the rule says -1.

def plugin_rules(text: str) -> list[dict]:
    rules = []
    for line in text.splitlines(keepends=True):
        if line.startswith("#") or line.startswith("\n"):
            continue
        fields = [f.strip(" \t") for f in line.rstrip("\n").split(",") if f != ""]
        if not 8 <= len(fields) <= 10:
            continue
        fields += ["-1"] * (10 - len(fields))
        coll = fields[0] if fields[0] in ("broadcast", "reduce", "allgather", "reducescatter", "allreduce") \
            else "allreduce"
        algo = fields[3] if fields[3] in ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree",
                                          "pat") else "ring"
        proto = fields[4] if fields[4] in ("ll", "ll128", "simple") else "simple"
        rules.append({"coll": coll, "min": int(fields[1]), "max": int(fields[2]), "algo": algo, "proto": proto,
                      "channels": int(fields[5]), "nodes": int(fields[6]), "ranks": int(fields[7]),
                      "pipe": int(fields[8]), "reg": int(fields[9])})
    return rules


def plugin_choice(rules, coll: str, n_bytes: int, nodes: int, ranks: int, ignored=frozenset(),
                  pipe_ops: int = 1, reg_buff: int = 0) -> tuple[str | None, str | None, int]:
    """(algorithm, protocol, channels) the plugin hands NCCL; (None, None, 1) when no rule applies."""
    for r in rules:
        if (r["coll"] == coll and r["min"] <= n_bytes <= r["max"] and r["nodes"] in (-1, nodes)
                and r["ranks"] in (-1, ranks) and r["pipe"] in (-1, pipe_ops) and r["reg"] in (-1, reg_buff)):
            if (r["algo"], r["proto"]) in ignored:
                continue
            return r["algo"], r["proto"], 1 if r["channels"] == -1 else r["channels"]
    return None, None, 1
