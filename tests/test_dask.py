"""The build and sweeps on a real Dask ``distributed.LocalCluster`` (2 worker processes).

Tiny notebooks in a throw-away book (the ``minibook`` of ``test_book.py``) keep each test to
seconds; every parallel call starts its own local cluster, as the command line does.
"""
from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("distributed")

import attnsvm_book as book  # noqa: E402
from attnsvm_book import parallel  # noqa: E402
from attnsvm_book.build import report_markdown  # noqa: E402
from minibook import _add_notebook, _runs  # noqa: E402

SLEEP = 2.0


def _timed_body(root, name, partner=None):
    """A notebook body that records its start and end times and its thread cap. With a
    ``partner``, it announces its start and keeps running until the partner has started too
    (at most 60 s): run in parallel, the two overlap whatever the kernels' start-up times; run one
    after the other, the first gives up waiting and they do not overlap."""
    log = root / f"times-{name}.json"
    wait = "" if partner is None else (
        f"open({str(root / ('started-' + name))!r}, 'w').close()\n"
        f"while not os.path.exists({str(root / ('started-' + partner))!r}) "
        f"and time.time() - t0 < 60:\n    time.sleep(0.05)\n")
    return (f"import json, os, time\nt0 = time.time()\n{wait}time.sleep({SLEEP})\n"
            f"json.dump({{'t0': t0, 't1': time.time(), 'omp': os.environ.get('OMP_NUM_THREADS'), "
            f"'trim': os.environ.get('MALLOC_TRIM_THRESHOLD_')}}, "
            f"open({str(log)!r}, 'w'))")


@pytest.mark.slow
def test_two_notebooks_build_in_parallel_on_two_workers(minibook):
    _add_notebook(minibook, "one", "x = 1\ndevice = 'cpu'", _timed_body(minibook, "one", "two"))
    _add_notebook(minibook, "two", "x = 2\ndevice = 'cpu'", _timed_body(minibook, "two", "one"))
    lines = []
    report = book.build(minibook, "quick", render_html=False, workers=2, log=lines.append)
    entries = {e["notebook"]: e for e in report["notebooks"]}
    assert [e["status"] for e in entries.values()] == ["ok"] * 3
    # the two sleeping notebooks ran at the same time, on two different workers
    one = json.loads((minibook / "times-one.json").read_text())
    two = json.loads((minibook / "times-two.json").read_text())
    assert max(one["t0"], two["t0"]) < min(one["t1"], two["t1"]), (one, two)
    workers = {entries[f"notebooks/{n}.ipynb"]["worker"] for n in ("one", "two")}
    assert len(workers) == 2 and all(w.startswith("tcp://") for w in workers)
    assert all(e["device"] == "cpu" for e in entries.values())
    # each kernel's BLAS/torch threads are capped: the cores shared out among the workers
    assert one["omp"] == two["omp"] == str(parallel.threads_per_worker(2))
    # ... and keeps glibc's memory setting of the process that ran the build, not the Dask
    # worker's MALLOC_TRIM_THRESHOLD_=65536 (which doubles a paper-size notebook's time:
    # parallel.KERNEL_ENVIRON; the worker's own value: the test below)
    assert one["trim"] == two["trim"] == os.environ.get("MALLOC_TRIM_THRESHOLD_")
    # one progress line per notebook as it finishes, naming the worker
    assert len(lines) == 3 and sorted(line[:5] for line in lines) == ["[1/3]", "[2/3]", "[3/3]"]
    assert all("executed in" in line and " on tcp://" in line for line in lines)
    # every success is cached (atomically written records, no temporary files left)
    cache = minibook / "_build" / "cache" / "quick" / "notebooks"
    for n in ("good", "one", "two"):
        record = json.loads((cache / f"{n}.ipynb.json").read_text())
        assert record["worker"].startswith("tcp://")
    assert not list((minibook / "_build" / "executed").rglob(".tmp-*"))
    # the rendered report page gives device and engine, not the worker's address
    page = report_markdown(report)
    assert "| Device | Engine |" in page and "tcp://" not in page
    # a re-run executes nothing (and starts no cluster: every notebook is cached)
    again = book.build(minibook, "quick", render_html=False, workers=2, log=lambda m: None)
    assert all(e["cached"] for e in again["notebooks"])
    assert _runs(minibook) == ["3"]


@pytest.mark.slow
def test_parallel_build_failure_names_notebook_and_cell_and_others_are_cached(minibook):
    _add_notebook(minibook, "broken", "k = 0", "x = 1\ny = x / k")
    _add_notebook(minibook, "fine", "a = 1", "b = a + 1")
    with pytest.raises(book.NotebookFailed) as err:
        book.build(minibook, "quick", render_html=False, workers=2, log=lambda m: None)
    msg = str(err.value)
    assert "notebooks/broken.ipynb" in msg and "cell 1" in msg and "ZeroDivisionError" in msg
    cache = minibook / "_build" / "cache" / "quick" / "notebooks"
    assert (cache / "good.ipynb.json").is_file() and (cache / "fine.ipynb.json").is_file()
    assert not (cache / "broken.ipynb.json").exists()
    assert (minibook / "_build" / "failed" / "quick" / "notebooks" / "broken.ipynb").is_file()


SWEEP_PARAMS = "a = 1        # an int\nb = 0.5      # a float\ndevice = 'cpu'"


def _sweep_notebook(root, fail_at=None):
    counter = root / "points.txt"
    fail = (f"if (a, b) == {fail_at!r}:\n    raise ValueError('bad point')\n" if fail_at else "")
    body = (f"{fail}import numpy as np\nfrom myst_nb import glue\n"
            f"with open({str(counter)!r}, 'a') as fh:\n    fh.write(f'{{a}},{{b}}\\n')\n"
            "glue('prod', a * b, display=False)\nglue('a', a, display=False)\n"
            "glue('npval', np.float64(a) + 1, display=False)\n"
            "glue('label', f'a{a}', display=False)\n"
            "glue('arr', np.arange(3), display=False)\n")
    _add_notebook(root, "cheap", SWEEP_PARAMS, body)
    return counter


def _points(counter):
    return counter.read_text().split() if counter.exists() else []


@pytest.mark.slow
def test_sweep_over_a_2x2_grid_gives_a_tidy_table_and_reruns_only_new_points(minibook, tmp_path):
    counter = _sweep_notebook(minibook)
    out = tmp_path / "s.csv"
    rows = book.sweep("notebooks/cheap.ipynb", {"a": "1,2", "b": "0.5,2"}, root=minibook,
                      workers=2, out=out, log=lambda m: None)
    assert sorted(_points(counter)) == ["1,0.5", "1,2.0", "2,0.5", "2,2.0"]
    assert [(r["a"], r["b"]) for r in rows] == [(1, 0.5), (1, 2.0), (2, 0.5), (2, 2.0)]
    for r in rows:
        assert r["status"] == "ok" and r["error"] is None and r["cached"] is False
        assert r["prod"] == pytest.approx(r["a"] * r["b"])
        assert r["glued_a"] == r["a"]                 # a glued name equal to a parameter's
        assert r["npval"] == pytest.approx(r["a"] + 1)  # numpy scalars are scalars
        assert r["label"] == f"a{r['a']}"
        assert "arr" not in r                        # arrays are not scalars
        assert r["device"] == "cpu" and r["worker"].startswith("tcp://")
        assert r["seconds"] > 0 and os.path.isfile(r["executed"])
    assert len({r["executed"] for r in rows}) == 4   # each executed notebook is kept
    table = book.read_table(out)
    assert [(t["a"], t["b"], t["prod"]) for t in table] == [(r["a"], r["b"], r["prod"])
                                                           for r in rows]
    assert list(table[0])[:2] == ["a", "b"]
    # an enlarged grid executes only its new points; the same grid again executes nothing
    lines = []
    rows = book.sweep("notebooks/cheap.ipynb", {"a": "1,2,3", "b": "0.5,2"}, root=minibook,
                      workers=2, out=out, log=lines.append)
    assert len(rows) == 6 and sorted(_points(counter))[-2:] == ["3,0.5", "3,2.0"]
    assert len(_points(counter)) == 6
    assert [r["cached"] for r in rows] == [True, True, True, True, False, False]
    rows = book.sweep("notebooks/cheap.ipynb", {"a": "1,2,3", "b": "0.5,2"}, root=minibook,
                      workers=2, out=out, log=lines.append)
    assert len(_points(counter)) == 6 and all(r["cached"] for r in rows)
    assert "6 point(s), 0 executed, 6 cached, 0 failed" in lines[-1]
    if _has_pyarrow():
        assert book.read_table(out.with_suffix(".parquet"))[0]["prod"] == rows[0]["prod"]
    else:
        assert not out.with_suffix(".parquet").exists()


def _has_pyarrow():
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.slow
def test_failing_grid_point_is_reported_while_the_others_succeed(minibook, tmp_path, capsys):
    counter = _sweep_notebook(minibook, fail_at=(2, 2.0))
    out = tmp_path / "f.csv"
    code = book.main(["sweep", "notebooks/cheap.ipynb", "-p", "a", "1,2", "-p", "b", "0.5,2",
                      "--root", str(minibook), "--workers", "2", "--out", str(out)])
    assert code == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and "ValueError: bad point" in captured.out
    table = book.read_table(out)
    assert len(table) == 4
    status = {(t["a"], t["b"]): t["status"] for t in table}
    assert status == {(1, 0.5): "ok", (1, 2.0): "ok", (2, 0.5): "ok", (2, 2.0): "failed"}
    (bad,) = [t for t in table if t["status"] == "failed"]
    # cell 2 of the executed copy: papermill inserts the injected parameters after cell 0
    assert "cell 2" in bad["error"] and "ValueError: bad point" in bad["error"]
    assert bad["prod"] is None and os.path.isfile(bad["executed"])  # the failed copy is kept
    assert sorted(_points(counter)) == ["1,0.5", "1,2.0", "2,0.5"]
    # the failure is not cached: a re-run executes that point only (and it fails again)
    rows = book.sweep("notebooks/cheap.ipynb", {"a": "1,2", "b": "0.5,2"}, root=minibook,
                      workers=2, out=out, log=lambda m: None)
    assert [r["cached"] for r in rows] == [True, True, True, False]
    assert rows[3]["status"] == "failed"


def test_sweep_values_are_checked_before_anything_is_submitted(minibook, capsys):
    counter = _sweep_notebook(minibook)
    for args, needle in ((["-p", "a", "1,x"], "-p a x: expected an int"),
                         (["-p", "bogus", "1"], "has no parameter 'bogus'"),
                         (["-p", "b", "0.5,"], "an empty value"),
                         (["-p", "a", "1", "-p", "a", "2"], "given twice")):
        code = book.main(["sweep", "notebooks/cheap.ipynb", *args, "--root", str(minibook),
                          "--workers", "2"])
        err = capsys.readouterr().err
        assert code == 2 and needle in err and err.count("\n") == 1, err
    assert _points(counter) == []
    assert not (minibook / "_build" / "sweeps").exists()


@pytest.mark.slow
def test_build_and_sweep_on_an_existing_cluster_given_by_its_address(minibook, tmp_path):
    from distributed import LocalCluster

    counter = _sweep_notebook(minibook)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        report = book.build(minibook, "quick", render_html=False, scheduler=address,
                            log=lambda m: None)
        assert [e["status"] for e in report["notebooks"]] == ["ok", "ok"]
        workers = set(cluster.scheduler_info["workers"])
        assert all(e["worker"].split()[0] in workers for e in report["notebooks"])
        rows = book.sweep("notebooks/cheap.ipynb", {"a": "1,2"}, root=minibook,
                          scheduler=address, out=tmp_path / "c.csv", log=lambda m: None)
        assert [r["status"] for r in rows] == ["ok", "ok"] and len(_points(counter)) == 3
        again = book.sweep("notebooks/cheap.ipynb", {"a": "1,2"}, root=minibook,
                           scheduler=address, out=tmp_path / "c.csv", log=lambda m: None)
        assert all(r["cached"] for r in again) and len(_points(counter)) == 3
        rebuilt = book.build(minibook, "quick", render_html=False, scheduler=address,
                             log=lambda m: None)
        assert all(e["cached"] for e in rebuilt["notebooks"])


@pytest.mark.slow
def test_dask_workers_trim_memory_and_kernels_do_not_inherit_it(minibook, monkeypatch):
    """The cause of the slow paper build of 2026-11-28: a Dask worker process has
    ``MALLOC_TRIM_THRESHOLD_=65536`` from its nanny (so a kernel started there would inherit it),
    while a notebook run through :func:`attnsvm_book.parallel.run_job` on that worker sees the
    value of the process that made the job: unset here, and a value set there reaches it.
    Twin: with ``KERNEL_ENVIRON`` empty the kernel sees the worker's ``'65536'`` (checked)."""
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    out = minibook / "trim.json"
    _add_notebook(minibook, "trim", "x = 1",
                  f"import json, os\njson.dump(os.environ.get('MALLOC_TRIM_THRESHOLD_'), "
                  f"open({str(out)!r}, 'w'))")
    nb = "notebooks/trim.ipynb"
    with parallel.dask_client(workers=1) as client:
        worker_env = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
        assert list(worker_env.values()) == ["65536"]
        for value in (None, "1048576"):
            if value is not None:
                monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", value)
            job = parallel.make_job(minibook, nb, {}, minibook / "out.ipynb",
                                    minibook / "failed.ipynb", device="cpu", resolved="cpu")
            res = client.submit(parallel.run_job, job, pure=False).result()
            assert res["status"] == "ok", res["error"]
            assert json.loads(out.read_text()) == value
