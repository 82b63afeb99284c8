"""The build never serves a broken artefact: real faults injected into a tiny book.

Each test injects one fault for real (no monkeypatching of papermill): a truncated cached copy,
a Dask worker process killed (SIGKILL) in the middle of a notebook, SIGINT sent to a build
process, two builds started at once in one directory, an unwritable build directory, a page that
Jupyter Book refuses. The tiny book is ``tests/minibook.py``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import attnsvm_book as book
from attnsvm_book._core import cache_miss_reason
from minibook import _add_notebook, _runs

REPO = Path(__file__).resolve().parents[1]


def _record(root, nb="notebooks/good.ipynb", profile="quick"):
    build = root / "_build"
    return (json.loads((build / "cache" / profile / (nb + ".json")).read_text()),
            build / "executed" / profile / nb)


def _assert_one_valid_entry(root, nb="notebooks/good.ipynb"):
    """The cache holds one record for ``nb`` whose artefact has the recorded hash, and no
    half-written file is left anywhere in the build directory."""
    record, executed = _record(root, nb)
    assert cache_miss_reason(record, record["key"], executed) is None
    assert not list((root / "_build").rglob(".tmp-*"))


def _blocking_notebook(root, name="slow"):
    """A notebook that announces its start in ``<name>.started`` and then waits while the file
    ``<name>.block`` exists (the test decides when it may finish)."""
    started, block = root / f"{name}.started", root / f"{name}.block"
    block.write_text("")
    body = (f"import os, time, pathlib\n"
            f"pathlib.Path({str(started)!r}).write_text(str(os.getpid()))\n"
            f"while os.path.exists({str(block)!r}):\n    time.sleep(0.1)\n")
    _add_notebook(root, name, "k = 1", body)
    return started, block


def _wait_for(path: Path, proc: subprocess.Popen | None = None, timeout: float = 120.0):
    t0 = time.monotonic()
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the build exited ({proc.returncode}) before {path.name}:\n"
                                 f"{out}\n{err}")
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{path} did not appear in {timeout} s")
        time.sleep(0.1)


def _build_process(root, *extra):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "lib"),
                                                        os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "attnsvm_book", "build", "--root", str(root),
                             "--no-render", "--no-progress-bar", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


# ----------------------------------------------------------------------------- cache integrity


def test_truncated_cached_copy_is_re_executed_and_said_so(minibook):
    book.build(minibook, "quick", render_html=False, log=lambda m: None)
    record, executed = _record(minibook)
    assert record["artefact_sha256"]  # the record keeps the content hash of what it serves
    executed.write_bytes(executed.read_bytes()[:100])  # a full disk, a killed copy
    lines = []
    report = book.build(minibook, "quick", render_html=False, log=lines.append)
    assert "notebooks/good.ipynb: cached copy unreadable, re-executing" in lines
    assert _runs(minibook) == ["3", "3"] and report["notebooks"][0]["cached"] is False
    _assert_one_valid_entry(minibook)
    # a readable copy that differs from what was recorded is not served either
    nbj = json.loads(executed.read_text())
    nbj["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "forged"}]
    executed.write_text(json.dumps(nbj))
    lines.clear()
    book.build(minibook, "quick", render_html=False, log=lines.append)
    assert "notebooks/good.ipynb: cached copy does not match its recorded hash, re-executing" in lines
    # a missing copy
    executed.unlink()
    lines.clear()
    book.build(minibook, "quick", render_html=False, log=lines.append)
    assert "notebooks/good.ipynb: cached copy missing, re-executing" in lines
    assert _runs(minibook) == ["3"] * 4
    _assert_one_valid_entry(minibook)


def test_truncated_sweep_point_is_re_executed_and_said_so(minibook):
    nb = minibook / "notebooks" / "good.ipynb"
    rows = book.sweep(nb, {"size": [1, 2]}, root=minibook, log=lambda m: None)
    assert _runs(minibook) == ["1", "2"]
    victim = Path(rows[1]["executed"])
    victim.write_bytes(victim.read_bytes()[:50])
    lines = []
    rows = book.sweep(nb, {"size": [1, 2]}, root=minibook, log=lines.append)
    assert _runs(minibook) == ["1", "2", "2"]
    assert [r["cached"] for r in rows] == [True, False]
    assert any(line.endswith("[size=2]: cached copy unreadable, re-executing") for line in lines)
    record = json.loads(victim.with_suffix(".json").read_text())
    assert cache_miss_reason(record, record["key"], victim) is None


def test_force_only_does_not_call_cached_notebooks_uncached(minibook):
    _add_notebook(minibook, "other", "a = 1", "b = a + 1")
    book.build(minibook, "quick", render_html=False, log=lambda m: None)
    lines = []
    report = book.build(minibook, "quick", only="other", force=True, render_html=False,
                        log=lines.append)
    assert _runs(minibook) == ["3"]  # good.ipynb was not executed again
    by_nb = {e["notebook"]: e for e in report["notebooks"]}
    assert by_nb["notebooks/good.ipynb"]["cached"] is True
    assert by_nb["notebooks/other.ipynb"]["cached"] is False  # --force re-executed it
    assert not any("not cached" in line for line in lines), lines
    assert any(line.endswith("notebooks/good.ipynb: cached (" + line.split("cached (", 1)[-1])
               for line in lines)


# ----------------------------------------------------------------------------- real faults


@pytest.mark.slow
def test_worker_killed_mid_notebook_is_survived(minibook):
    """SIGKILL to the Dask worker process that executes a notebook (the kernel kills its parent,
    the worker): the task is re-run elsewhere, the build completes, the cache holds one entry."""
    marker, starts = minibook / "killed-once", minibook / "victim-starts.txt"
    body = (f"import os, signal, pathlib\n"
            f"with open({str(starts)!r}, 'a') as fh:\n    fh.write('start\\n')\n"
            f"if not pathlib.Path({str(marker)!r}).exists():\n"
            f"    pathlib.Path({str(marker)!r}).write_text(str(os.getppid()))\n"
            f"    os.kill(os.getppid(), signal.SIGKILL)  # the worker that runs papermill\n"
            f"    os._exit(0)\n")
    _add_notebook(minibook, "victim", "k = 1", body)
    report = book.build(minibook, "quick", render_html=False, log=lambda m: None, workers=2,
                        progress_bar=False)
    assert marker.exists(), "the worker was never killed"
    assert starts.read_text().split() == ["start", "start"]  # executed once more, no more
    assert {e["notebook"]: e["status"] for e in report["notebooks"]} == {
        "notebooks/good.ipynb": "ok", "notebooks/victim.ipynb": "ok"}
    _assert_one_valid_entry(minibook, "notebooks/victim.ipynb")
    _assert_one_valid_entry(minibook, "notebooks/good.ipynb")


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigint_to_a_build_process_caches_nothing_partial_and_the_next_build_resumes(minibook,
                                                                                    workers):
    started, block = _blocking_notebook(minibook)
    proc = _build_process(minibook, "--workers", workers)
    try:
        _wait_for(started, proc)
        if workers == "1":  # the serial build ran good.ipynb first: it is cached by now
            assert (minibook / "_build" / "cache" / "quick" / "notebooks" / "good.ipynb.json").exists()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        block.unlink(missing_ok=True)  # an orphaned kernel may finish now
    assert proc.returncode != 0
    # one line of ours (Dask may warn about its dashboard port above it)
    assert err.splitlines()[-1].startswith("error: interrupted; "), err
    build = minibook / "_build"
    assert not (build / "cache" / "quick" / "notebooks" / "slow.ipynb.json").exists()
    assert not (build / "executed" / "quick" / "notebooks" / "slow.ipynb").exists()
    assert not list(build.rglob(".tmp-*"))
    for rec in (build / "cache").rglob("*.json"):  # whatever was recorded is whole and valid
        record = json.loads(rec.read_text())
        nb = str(rec.relative_to(build / "cache" / "quick"))[:-len(".json")]
        assert cache_miss_reason(record, record["key"], build / "executed" / "quick" / nb) is None
    # the next build resumes: what finished is served from the cache, the rest is executed
    runs_before = _runs(minibook)
    lines = []
    report = book.build(minibook, "quick", render_html=False, log=lines.append)
    assert {e["notebook"]: e["status"] for e in report["notebooks"]} == {
        "notebooks/good.ipynb": "ok", "notebooks/slow.ipynb": "ok"}
    slow = {e["notebook"]: e for e in report["notebooks"]}["notebooks/slow.ipynb"]
    assert slow["cached"] is False
    if workers == "1":
        assert runs_before == ["3"] and _runs(minibook) == ["3"]  # good.ipynb served from cache
    _assert_one_valid_entry(minibook, "notebooks/slow.ipynb")


@pytest.mark.slow
def test_two_builds_at_once_in_one_directory_never_both_write(minibook):
    started, block = _blocking_notebook(minibook)
    first = _build_process(minibook, "--workers", "1")
    second = None
    try:
        _wait_for(started, first)
        second = _build_process(minibook, "--workers", "1")
        try:
            _, err = second.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("the second build did not refuse: it is executing too") from None
        assert second.returncode == 1
        assert err.startswith("error: another build is writing to ") and err.count("\n") == 1, err
        assert str(minibook / "_build") in err and f"pid {first.pid}" in err
        assert _runs(minibook) == ["3"]  # the second build executed nothing
        block.unlink()
        out, err = first.communicate(timeout=120)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
        block.unlink(missing_ok=True)
    assert first.returncode == 0, err
    _assert_one_valid_entry(minibook, "notebooks/slow.ipynb")
    # the lock went with the first build: a third one runs (all cached)
    report = book.build(minibook, "quick", render_html=False, log=lambda m: None)
    assert all(e["cached"] for e in report["notebooks"])


def test_unwritable_build_directory_is_a_one_line_error(minibook, capsys):
    # a build directory under a regular file cannot be created, not even by root
    (minibook / "blocker").write_text("a file, not a directory\n")
    target = minibook / "blocker" / "_build"
    code = book.main(["build", "--root", str(minibook), "--build-dir", str(target),
                      "--no-render", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert err.startswith(f"error: cannot write to the build directory {target}")
    assert _runs(minibook) == []


@pytest.mark.slow
def test_render_failure_names_the_page_and_its_source_notebook(minibook):
    import nbformat

    path = minibook / "notebooks" / "good.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("A role that does not exist: {nosuchrole}`x`."))
    nbformat.write(nb, str(path))
    with pytest.raises(book.BuildError) as err:
        book.build(minibook, "quick", log=lambda m: None)
    first = str(err.value).splitlines()[0]
    executed = minibook / "_build" / "executed" / "quick" / "notebooks" / "good.ipynb"
    assert first.startswith("jupyter-book build failed (exit ")
    assert (f"page notebooks/good (source notebooks/good.ipynb, executed copy {executed})"
            in first), first


def test_data_not_on_disk_is_skipped_with_the_reason_and_the_page_shows_the_quick_run(minibook):
    """A notebook raising ``DataNotFoundError`` under ``paper`` (ch12a/ch12b without their data)
    is reported as skipped, with the reason, not as a failure; its page gets the ``quick`` run,
    and its profile line says so. The twin: another exception (``FileNotFoundError``) under
    ``paper`` still fails the build."""
    body = ("from attnsvm.datasets import DataNotFoundError\n"
            "if dataset == 'mnist':\n"
            "    raise DataNotFoundError('MNIST: no data directory given')\n")
    _add_notebook(minibook, "vit", "dataset = 'digits'", body, {})
    prof = yaml.safe_load((minibook / "profiles.yml").read_text())
    prof["paper"]["notebooks"]["notebooks/vit.ipynb"] = {"dataset": "mnist"}
    (minibook / "profiles.yml").write_text(yaml.safe_dump(prof))
    lines = []
    report = book.build(minibook, "paper", render_html=False, log=lines.append)
    row = {r["notebook"]: r for r in report["notebooks"]}["notebooks/vit.ipynb"]
    assert row["status"] == "skipped" and row["reason"] == "data not on disk", row
    assert "MNIST: no data directory given" in row["error"]
    assert row["shown"] == {"profile": "quick", "parameters": {}}
    assert Path(row["executed_path"]).is_file() and "/quick/" in row["executed_path"]
    assert any("its page shows the 'quick' run" in line for line in lines), lines
    from attnsvm_book.build import NotebookResult, profile_line, report_markdown
    line = profile_line(NotebookResult(**row), prof)
    assert "the `quick` profile" in line and "not the `paper` profile" in line, line
    assert "skipped (data not on disk; the page shows the `quick` run)" in report_markdown(report)
    # the twin: any other exception is a failure
    _add_notebook(minibook, "broken", "dataset = 'digits'",
                  "if dataset == 'mnist':\n    raise FileNotFoundError('mnist.idx')\n", {})
    prof = yaml.safe_load((minibook / "profiles.yml").read_text())
    prof["paper"]["notebooks"]["notebooks/broken.ipynb"] = {"dataset": "mnist"}
    (minibook / "profiles.yml").write_text(yaml.safe_dump(prof))
    with pytest.raises(book.NotebookFailed, match="FileNotFoundError"):
        book.build(minibook, "paper", render_html=False, log=lambda m: None)


def _kernelspec(where, name, script):
    """A kernel named ``name`` under ``where`` (a JUPYTER_PATH entry) launched by ``script``."""
    d = where / "kernels" / name
    d.mkdir(parents=True)
    (d / "launch.py").write_text(script)
    (d / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(d / "launch.py"), "-f", "{connection_file}"],
        "display_name": name, "language": "python"}))


def test_a_kernel_that_dies_before_its_first_reply_is_started_again(minibook, tmp_path, monkeypatch):
    """A real kernel start failure (its process exits before replying, as when two kernels race
    for a port on a busy machine: seen once in the slow tier) is retried: a kernel that dies on
    its first start only runs the notebook at the second. The twin: a kernel that always dies
    fails the job after 1 + KERNEL_START_RETRIES starts, with jupyter_client's message."""
    from attnsvm_book._core import KERNEL_START_RETRIES
    from attnsvm_book.parallel import make_job, run_job

    jupyter = tmp_path / "jupyter"
    _kernelspec(jupyter, "flaky", (
        "import os, sys\n"
        "marker = os.path.join(os.path.dirname(__file__), 'starts')\n"
        "with open(marker, 'a') as fh:\n    fh.write('x')\n"
        "if open(marker).read() == 'x':\n    sys.exit(1)\n"
        "from ipykernel import kernelapp\nkernelapp.launch_new_instance()\n"))
    _kernelspec(jupyter, "dead", (
        "import os\n"
        "with open(os.path.join(os.path.dirname(__file__), 'starts'), 'a') as fh:\n"
        "    fh.write('x')\nraise SystemExit(1)\n"))
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    nb = "notebooks/good.ipynb"
    out = tmp_path / "out"
    res = run_job(make_job(minibook, nb, {}, out / "a.ipynb", out / "fa.ipynb", device="cpu",
                           kernel_name="flaky"))
    assert res["status"] == "ok", res
    assert (jupyter / "kernels" / "flaky" / "starts").read_text() == "xx"
    assert _runs(minibook) == ["3"]
    res = run_job(make_job(minibook, nb, {}, out / "b.ipynb", out / "fb.ipynb", device="cpu",
                           kernel_name="dead"))
    assert res["status"] == "failed" and "Kernel died before replying" in res["error"], res
    starts = (jupyter / "kernels" / "dead" / "starts").read_text()
    assert starts == "x" * (1 + KERNEL_START_RETRIES)
