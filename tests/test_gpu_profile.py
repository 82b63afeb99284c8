"""``benchmarks/gpu_profile.py`` (issue 25.6): without CUDA it says so in one line and exits 2;
with (faked) CUDA it schedules by the build's worker plan and ends with the summary line."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_profile.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_needs_cuda_one_line_exit_2():
    p = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1 and "needs CUDA" in lines[0]


def _module():
    spec = importlib.util.spec_from_file_location("gpu_profile", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_schedule_table_and_summary_line(monkeypatch, capsys):
    """One faked card: notebooks with a ``device`` parameter on the GPU worker, the others on a
    CPU worker; a notebook stopped at the limit is projected from its rerun at steps / factor
    and counted unfinished; a failing claim is counted."""
    mod = _module()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Fake GPU")
    monkeypatch.setattr(mod, "_has_papermill", lambda: True)
    calls = []

    def fake_run(root, nb, params, limit, slot, threads, workdir, tag):
        calls.append((Path(nb).stem, tag, slot["env"].get("CUDA_VISIBLE_DEVICES")))
        card = slot["env"].get("CUDA_VISIBLE_DEVICES")
        dev = f"cuda:{card}" if card else "cpu"
        if Path(nb).stem == "ch01_separable" and tag == "paper":
            return {"notebook": nb, "status": "stopped", "seconds": 10.0, "claims": {},
                    "device": dev, "engine": "cuda-graph"}
        claims = {"a": "holds", "b": "fails"} if Path(nb).stem == "ch04a_trajectories" else {}
        return {"notebook": nb, "status": "finished", "seconds": 2.0, "claims": claims,
                "device": dev, "engine": "eager"}

    monkeypatch.setattr(mod, "_run", fake_run)
    rc = mod.main(["--only", "ch01_separable", "ch04a_trajectories", "ch02_attsvm",
                   "--workers", "3", "--factor", "20"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    from attnsvm_book._core import notebook_parameters
    for stem, tag, card in calls:
        uses = "device" in notebook_parameters(ROOT / "notebooks" / f"{stem}.ipynb")
        assert (card == "0") == uses, (stem, card)
    assert ("ch01_separable", "div20", calls[0][2]) in calls
    m = re.fullmatch(r"paper_minutes=([\d.]+) claims_failing=(\d+) unfinished=(\d+)", out[-1])
    assert m and int(m.group(2)) == 1 and int(m.group(3)) == 1
    assert float(m.group(1)) >= (40 - 10) / 60 - 0.05     # the projection beyond the limit
    assert any(line.startswith("| ch01_separable | stopped") and "projected 40 s" in line
               for line in out)


def test_nbexec_record_of_a_stopped_run(tmp_path, monkeypatch):
    """What came back from the first GPU run: nbexec.py's record of a notebook killed at its
    deadline says ``seconds=">240"`` and which code cell was running; ``_nbexec`` turns it into
    a number and names the call (the cell's first non-import line), not ``import numpy``."""
    import json
    import subprocess as sp

    mod = _module()
    nb = "notebooks/ch09_rates.ipynb"
    rec = {"ch09_rates@paper": {"status": "killed at deadline", "seconds": ">240",
                                "cells": [{"i": 0, "status": "ok"},
                                          {"i": 1, "status": "running",
                                           "first_line": "import numpy as np"}]}}

    def fake_run(cmd, **kw):
        out = Path(cmd[cmd.index("--out") + 1])
        assert out.is_dir()          # made before nbexec.py runs (it writes its log there first)
        (out / "results.json").write_text(json.dumps(rec))
        return sp.CompletedProcess(cmd, 0, "", "")

    tool = tmp_path / "shared" / "tools" / "nbexec.py"
    tool.parent.mkdir(parents=True)
    tool.write_text("")
    monkeypatch.setattr(mod.subprocess, "run", fake_run)
    # the record names its notebook relative to the project: the real ch09 is read for the call
    (tmp_path / "notebooks").mkdir()
    (tmp_path / nb).write_text((ROOT / nb).read_text())
    r = mod._nbexec(tmp_path, nb, 240, tmp_path / "w", "paper", {})
    assert r["status"] == "stopped" and isinstance(r["seconds"], float)
    assert r["why"].startswith("in cell 1: res = rates.rates_experiment("), r["why"]


def test_notebook_parameters_without_nbformat(monkeypatch):
    """On a machine without Jupyter (the lent GPU) the parameters cell is read as plain JSON,
    with the same result as through nbformat."""
    import attnsvm_book._core as core

    path = ROOT / "notebooks" / "ch08_global.ipynb"
    with_nbformat = core.notebook_parameters(path)
    monkeypatch.setitem(sys.modules, "nbformat", None)      # import nbformat -> ImportError
    assert core.notebook_parameters(path) == with_nbformat and "cx_steps" in with_nbformat
