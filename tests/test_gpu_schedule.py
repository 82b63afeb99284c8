"""The build schedules the GPU (issue 25.4): on a machine with CUDA cards the local cluster has
GPU workers (one per card by default) for the notebooks with a ``device`` parameter and CPU
workers, which see no card, for the rest; the execution report records each notebook's device
and engine path. Tested on a CPU by injecting the number of cards."""
import importlib
import json
import os
from pathlib import Path

import pytest

import attnsvm_book as book
from attnsvm_book import parallel

from minibook import _add_notebook

build_mod = importlib.import_module("attnsvm_book.build")     # the module (book.build is a function)


def test_worker_plan():
    assert parallel.worker_plan(4, 0) == [{"name": f"cpu-{i}", "resources": None, "env": {}}
                                          for i in range(4)]
    plan = parallel.worker_plan(16, 1)
    gpu = [w for w in plan if w["resources"] == {"GPU": 1}]
    cpu = [w for w in plan if w["resources"] == {"CPU": 1}]
    assert len(gpu) == 1 and gpu[0]["env"] == {"CUDA_VISIBLE_DEVICES": "0"}
    assert len(cpu) == 15 and all(w["env"] == {"CUDA_VISIBLE_DEVICES": ""} for w in cpu)
    plan = parallel.worker_plan(4, 2, per_card=2)         # 4 GPU workers, still one CPU worker
    assert [w["env"]["CUDA_VISIBLE_DEVICES"] for w in plan] == ["0", "0", "1", "1", ""]
    assert len({w["name"] for w in plan}) == len(plan)


def test_worker_plan_per_card_from_environment(monkeypatch):
    monkeypatch.setenv(parallel.GPU_PER_CARD_ENV, "3")
    assert sum(w["resources"] == {"GPU": 1} for w in parallel.worker_plan(8, 1)) == 3
    monkeypatch.setenv(parallel.GPU_PER_CARD_ENV, "0")
    with pytest.raises(ValueError, match=parallel.GPU_PER_CARD_ENV):
        parallel.worker_plan(8, 1)


def _fake_run_jobs(seen):
    def run_jobs(jobs, on_result, *, workers=1, scheduler=None, resources=None, plan=None):
        seen["plan"], seen["jobs"] = plan, jobs
        for job in jobs:
            out = Path(job["out_path"])
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text((Path(job["root"]) / job["notebook"]).read_text())
            on_result(job, {"status": "ok", "seconds": 0.5, "device": job["resolved"],
                            "device_label": job["resolved"], "engine": "eager",
                            "worker": "w", "error": None})
    return run_jobs


@pytest.mark.parametrize("gpus", [0, 1])
def test_notebooks_routed_to_gpu_and_cpu_workers(minibook, monkeypatch, gpus):
    """With one (injected) card: the notebook with a ``device`` parameter asks for a GPU worker,
    the one without for a CPU worker (and is keyed as a CPU execution); without cards nothing
    asks for resources (the cluster of every build so far). The report has ``device`` and
    ``engine`` for every notebook, also when read back from the cache."""
    _add_notebook(minibook, "nodev", "size = 1", "x = size")
    seen = {}
    monkeypatch.setattr(build_mod, "run_jobs", _fake_run_jobs(seen))
    res = book.execute_notebooks(minibook, "quick", workers=4, gpus=gpus, progress_bar=False,
                                 log=lambda *_: None)
    jobs = {j["notebook"]: j for j in seen["jobs"]}
    if gpus:
        assert jobs["notebooks/good.ipynb"]["resources"] == {"GPU": 1}
        assert jobs["notebooks/nodev.ipynb"]["resources"] == {"CPU": 1}
        assert jobs["notebooks/nodev.ipynb"]["resolved"] == "cpu"
        assert sum(w["resources"] == {"GPU": 1} for w in seen["plan"]) == 1
    else:
        assert all(j["resources"] is None for j in jobs.values()) and seen["plan"] is None
    report = build_mod.write_report(res, minibook / "report.json")
    rows = {r["notebook"]: r for r in json.loads((minibook / "report.json").read_text())["notebooks"]}
    assert rows == {r["notebook"]: r for r in report["notebooks"]}
    assert all(r["engine"] == "eager" and r["device"] for r in rows.values())
    again = book.execute_notebooks(minibook, "quick", workers=4, gpus=gpus, progress_bar=False,
                                   log=lambda *_: None)
    assert all(r.cached and r.engine == "eager" for r in again)


def test_engine_log_reaches_the_report_fields(monkeypatch):
    """:func:`parallel._engine_log` points the kernel's environment at a fresh file and reads the
    lines that ``fit`` appends; :func:`parallel.engine_summary` names each path once."""
    from attnsvm._env import ENGINE_LOG_ENV
    monkeypatch.delenv(ENGINE_LOG_ENV, raising=False)
    with parallel._thread_environment(2), parallel._engine_log() as engines:
        path = os.environ[ENGINE_LOG_ENV]
        with open(path, "a") as fh:
            fh.write("cuda cuda-graph\ncpu eager\ncuda cuda-graph\n")
        assert engines() == "cuda-graph+eager"
    assert ENGINE_LOG_ENV not in os.environ and not os.path.exists(path)
    assert parallel.engine_summary([]) == "none"


@pytest.mark.slow
def test_planned_cluster_gives_each_worker_its_card_and_resources():
    """A real local cluster of :func:`parallel.worker_plan` (2 workers, one injected card): the
    GPU task lands on the worker that sees card 0, the CPU task on the one that sees none."""
    from distributed import Client

    def visible():
        return os.environ.get("CUDA_VISIBLE_DEVICES")

    with parallel._planned_cluster(parallel.worker_plan(2, 1)) as cluster, Client(cluster) as c:
        assert c.submit(visible, resources={"GPU": 1}, pure=False).result() == "0"
        assert c.submit(visible, resources={"CPU": 1}, pure=False).result() == ""
