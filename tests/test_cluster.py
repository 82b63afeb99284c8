"""The cluster path for real (issue 39.7): a ``dask scheduler`` and two ``dask worker`` processes,
started here as a reader starts them (the README's *Running on a cluster*), on loopback only
(127.0.0.1), and the build's and the sweep's ``--scheduler ADDRESS`` through the command line.

* a sweep of 4 points and an ``--only`` build run on both workers; a worker killed (SIGKILL, its
  whole process group) while it runs a point loses nothing: every point is ``ok`` and its glued
  values equal those of a local run;
* a killed scheduler ends the command promptly (not after a timeout of its own): the finished
  points are kept (cached), the others are marked failed, and a rerun on a new cluster executes
  only those.

Tiny notebooks in a throwaway book (tests/minibook.py) keep each step to seconds; the points
sleep so that a kill lands mid-run.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")

import attnsvm_book as book  # noqa: E402
from minibook import _add_notebook  # noqa: E402

DASK = Path(sys.executable).with_name("dask")
LOOPBACK = "127.0.0.1"
pytestmark = pytest.mark.skipif(not DASK.exists(), reason=f"no dask command beside {sys.executable}")

PARAMS = "a = 1        # an int\nwait = 0.0   # seconds the point sleeps\ndevice = 'cpu'"


def _point_notebook(root):
    """A notebook that marks its start, sleeps ``wait`` s (or until a file ``release`` exists),
    computes a seeded value, appends its point to ``points.txt`` when done and glues the value."""
    counter, started = root / "points.txt", root / "started"
    body = (f"import os, time\nimport numpy as np\nfrom myst_nb import glue\n"
            f"os.makedirs({str(started)!r}, exist_ok=True)\n"
            f"open(os.path.join({str(started)!r}, f'{{a}}-{{wait}}-{{os.getpid()}}'), 'w').close()\n"
            "t0 = time.time()\n"
            f"while time.time() - t0 < wait and not os.path.exists({str(root / 'release')!r}):\n"
            "    time.sleep(0.05)\n"
            "value = float(np.random.default_rng(a).standard_normal(5).sum())\n"
            f"with open({str(counter)!r}, 'a') as fh:\n    fh.write(f'{{a}},{{wait}}\\n')\n"
            "glue('value', value, display=False)\nglue('pid', os.getpid(), display=False)\n")
    _add_notebook(root, "point", PARAMS, body)
    return counter, started


def _done(counter):
    return counter.read_text().split() if counter.exists() else []


def _free_port():
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class Cluster:
    """A scheduler and two single-threaded workers, each in its own process group."""

    def __init__(self, log_dir):
        self.address = f"tcp://{LOOPBACK}:{_free_port()}"
        self.log_dir = Path(log_dir)
        self.procs = {}
        self._start("scheduler", [str(DASK), "scheduler", "--host", LOOPBACK, "--port",
                                  self.address.rsplit(":", 1)[1], "--no-dashboard"])
        for k in range(2):
            self._start(f"worker{k}", [str(DASK), "worker", self.address, "--nworkers", "1",
                                       "--nthreads", "1", "--host", LOOPBACK, "--no-dashboard",
                                       "--name", f"w{k}"])
        self.wait_for_workers(2)

    def _start(self, name, cmd):
        log = open(self.log_dir / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, env=os.environ.copy())

    def workers(self):
        from distributed import Client

        with Client(self.address, timeout=10) as client:
            return {w["name"]: addr for addr, w in client.scheduler_info()["workers"].items()}

    def wait_for_workers(self, n, timeout=90):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if len(self.workers()) >= n:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the cluster at {self.address} has not {n} workers after {timeout} s; "
                           f"logs in {self.log_dir}")

    def kill(self, name):
        """SIGKILL the process group of ``name`` (a worker's nanny and its worker process)."""
        proc = self.procs[name]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def close(self):
        for name, proc in self.procs.items():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def _cli(args, root, timeout=300):
    """``python -m attnsvm_book ARGS --root ROOT`` as a reader runs it: (exit code, output, s)."""
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "attnsvm_book", *args, "--root", str(root)],
                         capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
    return out.returncode, out.stdout + out.stderr, time.monotonic() - t0


def _wait_for(cond, timeout, what, state=lambda: ""):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"waited {timeout} s for {what} {state()}")


@pytest.mark.slow
def test_sweep_and_only_build_survive_a_killed_worker(cluster, minibook, tmp_path):
    counter, started = _point_notebook(minibook)
    # the reference: the same points run locally, in a copy of the book (its own cache)
    import shutil
    local_root = tmp_path / "local"
    shutil.copytree(minibook, local_root)
    local = book.sweep("notebooks/point.ipynb", {"a": "1,2,3,4"}, root=local_root, workers=1,
                       out=tmp_path / "local.csv", log=lambda m: None)
    assert [r["status"] for r in local] == ["ok"] * 4
    counter.unlink()
    shutil.rmtree(started)

    # the sweep through --scheduler, from the command line, in the background; each point sleeps
    out = tmp_path / "cluster.csv"
    cmd = [sys.executable, "-m", "attnsvm_book", "sweep", "notebooks/point.ipynb", "-p", "a",
           "1,2,3,4", "-p", "wait", "4.0", "--scheduler", cluster.address, "--out", str(out),
           "--root", str(minibook), "--no-progress-bar"]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # both workers start a point; kill the worker w0 while its point sleeps
    _wait_for(lambda: started.exists() and len(list(started.iterdir())) >= 2, 120, "two points to start")
    cluster.kill("worker0")
    text, _ = run.communicate(timeout=300)
    assert run.returncode == 0, text
    table = book.read_table(out)
    assert [t["status"] for t in table] == ["ok"] * 4, text
    # the killed worker's point ran again elsewhere (its orphaned kernel may finish too)
    assert {p.split(",")[0] for p in _done(counter)} == {"1", "2", "3", "4"}
    assert len(list(started.iterdir())) >= 5                          # 4 points + the killed one
    assert all(t["worker"].startswith(f"tcp://{LOOPBACK}:") for t in table)
    for t, ref in zip(table, local):
        assert t["a"] == ref["a"] and t["value"] == ref["value"], (t, ref)

    # an --only build through --scheduler on the surviving worker
    code, text, _ = _cli(["build", "--only", "point.ipynb", "--scheduler", cluster.address,
                          "--no-render", "--no-progress-bar"], minibook)
    assert code == 0, text
    report = json.loads((minibook / "_build" / "execution-report.json").read_text())
    entries = {e["notebook"]: e for e in report["notebooks"]}
    point = entries["notebooks/point.ipynb"]
    assert point["status"] == "ok" and point["worker"].split()[0] in cluster.workers().values()


@pytest.mark.slow
def test_a_killed_scheduler_ends_the_sweep_promptly_and_a_rerun_executes_only_the_rest(
        cluster, minibook, tmp_path):
    counter, started = _point_notebook(minibook)
    out = tmp_path / "s.csv"
    grid = ["-p", "a", "1,2", "-p", "wait", "0.0,600.0"]
    cmd = [sys.executable, "-m", "attnsvm_book", "sweep", "notebooks/point.ipynb", *grid,
           "--scheduler", cluster.address, "--out", str(out), "--root", str(minibook),
           "--no-progress-bar"]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def slow_points_hold_both_workers():
        slow = [p for p in (started.iterdir() if started.exists() else []) if "-600.0-" in p.name]
        return len(_done(counter)) >= 1 and len(slow) == 2

    # the order in which the scheduler hands out the points is its own: wait until a quick point
    # has finished and both workers are held by the slow points (a quick point may still queue)
    _wait_for(slow_points_hold_both_workers, 120, "a point to finish and both workers to hold a slow one",
              lambda: f"(done {_done(counter)}, started {sorted(p.name for p in started.iterdir())})")
    time.sleep(1.0)                                       # the finished results reach the command
    finished = set(_done(counter))
    assert finished and all(p.endswith(",0.0") for p in finished)
    t0 = time.monotonic()
    cluster.kill("scheduler")
    text, _ = run.communicate(timeout=120)
    ended = time.monotonic() - t0
    print(f"the sweep ended {ended:.1f} s after the scheduler was killed")
    assert ended < 30, f"the command took {ended:.1f} s to end after the scheduler died:\n{text}"
    assert run.returncode == 1, text
    table = book.read_table(out)
    status = {f"{t['a']},{t['wait']}": t["status"] for t in table}
    assert status == {p: "ok" if p in finished else "failed"
                      for p in ("1,0.0", "1,600.0", "2,0.0", "2,600.0")}, text
    assert all(t["error"] for t in table if t["status"] == "failed")
    # a new cluster: the rerun executes only the points that did not finish (released now)
    cluster.close()
    (minibook / "release").touch()
    again = Cluster(tmp_path)
    try:
        code, text, _ = _cli(["sweep", "notebooks/point.ipynb", *grid, "--scheduler", again.address,
                              "--out", str(out), "--no-progress-bar"], minibook)
    finally:
        again.close()
    assert code == 0, text
    rows = book.read_table(out)
    assert [r["status"] for r in rows] == ["ok"] * 4, text
    assert {f"{r['a']},{r['wait']}": r["cached"] for r in rows} == {
        p: p in finished for p in ("1,0.0", "1,600.0", "2,0.0", "2,600.0")}, text
    # a finished point ran once; the quick point the scheduler had not handed out ran in the rerun
    assert sorted(p for p in _done(counter) if p.endswith(",0.0")) == ["1,0.0", "2,0.0"]
