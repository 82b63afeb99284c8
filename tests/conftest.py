"""Fixtures shared by several test files, and the fast tier's time limit."""
from __future__ import annotations

import os
import time

import pytest


@pytest.fixture(scope="session")
def full_build(tmp_path_factory):
    """One full quick-profile build of the book per test session: ``(build_dir, report)``.

    Shared by ``test_book_full.py`` and ``test_browser.py`` so the book is built once.
    ``ATTNSVM_TEST_BUILD_DIR`` names an existing build (a directory holding ``html/`` and
    ``execution-report.json``) to reuse instead, for working on the browser checks.
    """
    import json
    import os
    from pathlib import Path

    import attnsvm_book as book

    reuse = os.environ.get("ATTNSVM_TEST_BUILD_DIR")
    if reuse:
        out = Path(reuse)
        return out, json.loads((out / "execution-report.json").read_text())
    from filelock import FileLock

    # Under pytest-xdist every worker has its own session: the build goes to the run's shared
    # base directory, under a lock, so the first worker that needs it builds and the others reuse.
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out = shared / "attnsvm-full" / "_build"
    with FileLock(str(shared / "attnsvm-full.lock")):
        done = out / "execution-report.json"
        if done.is_file():
            return out, json.loads(done.read_text())
        out.parent.mkdir(parents=True, exist_ok=True)
        # as `make book` does it: the notebooks as Dask tasks on a local cluster of 2 workers
        report = book.build(Path(__file__).resolve().parents[1], "quick", build_dir=out, log=print,
                            workers=2, progress_bar=False)
    return out, report


@pytest.fixture
def minibook(tmp_path):
    """A tiny book (tests/minibook.py): one good notebook that counts its executions."""
    from minibook import make_minibook   # deferred: nbformat, absent where only torch is (a lent GPU)

    return make_minibook(tmp_path)


# ----------------------------------------------------------------------------- the fast tier

#: CPU seconds (setup + call) a test of the fast tier (``-m "not slow"``) may use; one that uses
#: more fails, naming its time: mark it ``@pytest.mark.slow`` or make it faster. The limit is on
#: the CPU time of the test's process and of the child processes it waited for (``os.times``),
#: not on the wall clock, so that a busy machine (other processes on the same cores) does not fail
#: a test that is fast: on a loaded 2-core machine the wall time of a test is 2-3x its CPU time.
FAST_LIMIT_S = float(os.environ.get("ATTNSVM_FAST_LIMIT_S", "20"))
_seconds: dict = {}


def _cpu_seconds() -> float:
    """CPU seconds of this process (all its threads) and of its reaped children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _fast_tier(config) -> bool:
    return (config.getoption("markexpr") or "").replace(" ", "") == "notslow"


def _timed(item):
    start_cpu, start_wall = _cpu_seconds(), time.perf_counter()
    yield
    cpu, wall = _seconds.get(item.nodeid, (0.0, 0.0))
    _seconds[item.nodeid] = (cpu + _cpu_seconds() - start_cpu, wall + time.perf_counter() - start_wall)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _timed(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _timed(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call":
        return
    cpu, wall = _seconds.pop(item.nodeid, (0.0, 0.0))
    log = os.environ.get("ATTNSVM_DURATIONS_LOG")
    if log:  # one line per test as it finishes (survives an interrupted run): CPU s, wall s, test
        with open(log, "a") as fh:
            fh.write(f"{cpu:.2f}\t{wall:.2f}\t{item.nodeid}\n")
    if (rep.passed and _fast_tier(item.config) and cpu > FAST_LIMIT_S
            and item.get_closest_marker("slow") is None):
        rep.outcome = "failed"
        rep.longrepr = (f"{item.nodeid} used {cpu:.1f} s of CPU ({wall:.1f} s wall), over the fast "
                        f"tier's limit of {FAST_LIMIT_S:g} CPU seconds per test "
                        "(ATTNSVM_FAST_LIMIT_S): mark it @pytest.mark.slow or make it faster")
