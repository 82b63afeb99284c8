"""Parameter sweeps: the product grid of one notebook's papermill executions, as one tidy table.

``python -m attnsvm_book sweep notebooks/X.ipynb -p name v1,v2 [-p other w1,w2] [--workers N |
--scheduler ADDRESS] --out results.csv`` (:func:`sweep`):

* every name and value is checked against the notebook's parameters cell before anything is
  submitted (:mod:`attnsvm_book.params`);
* each grid point is one job (:mod:`attnsvm_book.parallel`): in this process, on a local Dask
  cluster or on an existing one;
* each point is cached by the build's content key, its record holding the SHA-256 of the
  executed copy (a missing, unreadable or changed copy is re-executed, with a line saying why);
  each point is cached by the build's content key (:func:`attnsvm_book.build.cache_key`: the
  notebook's source, its parameters, the library, the pinned packages, the device); its executed
  notebook is kept under ``<build_dir>/sweeps/<notebook>/``, so a re-run executes only the
  points that are new or whose inputs changed;
* the table has one row per grid point, in grid order: the parameters given, every glued scalar
  of the run (numbers, booleans, strings; figures and arrays are left out), then ``seconds``,
  ``device``, ``worker``, ``status`` (``ok`` or ``failed``), ``error`` (notebook, cell and
  exception), ``cached`` and ``executed`` (the path of the executed notebook; for a failed point,
  the copy kept for inspection). A failed point is a row with its error, never dropped. A glued
  name equal to a parameter's or to one of those columns is prefixed ``glued_``; a parameter
  named like one of those columns (``device``) is prefixed ``param_``.
* the table is written as CSV and, when ``pyarrow`` is importable, as Parquet next to it.
"""
from __future__ import annotations

import ast
import csv
import json
import math
import os
import re
from pathlib import Path

from ._core import (BUILD_DIR, DAMAGED, BuildLock, _atomic_write_text, _literal, _read_json,
                    cache_key, cache_miss_reason, environment_hash, find_root, library_hash,
                    notebook_parameters, write_record)
from .parallel import Progress, device_resolver, make_job, run_jobs, threads_per_worker
from .params import parameter_grid, resolve_profile, validate_overrides
from .run import relative_notebook

__all__ = ["RESULT_COLUMNS", "glue_records", "glued_scalars", "sweep", "write_table", "read_table",
           "point_paths"]

#: the columns after the parameters and the glued values
RESULT_COLUMNS = ("seconds", "device", "worker", "status", "error", "cached", "executed")

_NUMPY_SCALAR = re.compile(r"^np\.(?:float|int|uint|bool|str)\w*\((.*)\)$", re.S)
_SPECIAL = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "np.True_": True,
            "np.False_": False, "True": True, "False": False}


def _scalar(text: str):
    """The value of a glued ``text/plain`` repr when it is a scalar, else ``None``."""
    text = text.strip()
    m = _NUMPY_SCALAR.match(text)
    if m:
        text = m.group(1).strip()
    if text in _SPECIAL:
        return _SPECIAL[text]
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, (bool, int, float, str)) else None


def glue_records(path: str | os.PathLike) -> dict:
    """``{name: {mime type: content}}`` of every glue record (``myst_nb.glue``) of an executed
    notebook, figures included: an output whose metadata holds ``scrapbook.name``, with the
    record's mime prefix removed from its keys."""
    nb = json.loads(Path(path).read_text())
    out = {}
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            meta = (output.get("metadata") or {}).get("scrapbook")
            if not meta or "name" not in meta:
                continue
            prefix = meta.get("mime_prefix", "")
            out[meta["name"]] = {k[len(prefix):]: v for k, v in (output.get("data") or {}).items()
                                 if k.startswith(prefix)}
    return out


def glued_scalars(path: str | os.PathLike) -> dict:
    """``{name: value}`` of every scalar glued (``myst_nb.glue``) in an executed notebook.

    A glue record (:func:`glue_records`) is a scalar when its only representation is
    ``text/plain`` and that parses as a number, a boolean or a string (``np.float64(0.5)``
    included). Figures, arrays and other objects are left out.
    """
    out = {}
    for name, data in glue_records(path).items():
        if set(data) != {"text/plain"}:
            continue
        text = data["text/plain"]
        value = _scalar("".join(text) if isinstance(text, list) else text)
        if value is not None:
            out[name] = value
    return out


def point_paths(build_dir: Path, notebook: str, key: str) -> tuple[Path, Path, Path]:
    """``(executed, record, failed)`` paths of one grid point, named by its content key."""
    base = Path(build_dir) / "sweeps" / Path(notebook).with_suffix("")
    return (base / f"{key[:20]}.ipynb", base / f"{key[:20]}.json",
            base / "failed" / f"{key[:20]}.ipynb")


def _cell(value):
    """A table cell: lists and dicts as JSON text (one type per column in CSV and Parquet)."""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return value


def write_table(rows: list[dict], out: str | os.PathLike, log=print) -> list[Path]:
    """Write ``rows`` as CSV at ``out`` and as Parquet (``.parquet`` next to it) when ``pyarrow``
    is importable. Returns the paths written."""
    out = Path(out)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    lines = []

    class _Sink:
        def write(self, s):
            lines.append(s)

    writer = csv.DictWriter(_Sink(), fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else _cell(row.get(k))) for k in columns})
    _atomic_write_text(out, "".join(lines))
    written = [out]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        log(f"pyarrow is not installed: {out} only (no Parquet copy)")
        return written
    data = {}
    for k in columns:
        col = [_cell(row.get(k)) for row in rows]
        kinds = {type(v) for v in col if v is not None}
        if kinds and kinds <= {int, float} and float in kinds:
            col = [None if v is None else float(v) for v in col]
        elif len(kinds) > 1:
            col = [None if v is None else str(v) for v in col]
        data[k] = col
    pq_path = out.with_suffix(".parquet")
    tmp = pq_path.with_name(".tmp-" + pq_path.name)
    pq.write_table(pa.table(data), tmp)
    os.replace(tmp, pq_path)
    written.append(pq_path)
    return written


def read_table(path: str | os.PathLike) -> list[dict]:
    """Read a sweep table written by :func:`write_table` (CSV or Parquet) as a list of rows;
    CSV cells that look like numbers or booleans become numbers or booleans."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    def cell(text):
        if text == "":
            return None
        value = _scalar(text)
        return text if value is None or isinstance(value, str) else value

    with path.open(newline="") as fh:
        return [{k: cell(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def sweep(notebook: str | os.PathLike, values: dict, *, root: str | os.PathLike | None = None,
          profile: str | None = None, workers: int | None = 1, scheduler: str | None = None,
          resources: dict | None = None, build_dir: str | os.PathLike | None = None,
          out: str | os.PathLike | None = None, force: bool = False, kernel_name: str = "python3",
          log=print, progress_bar: bool | None = None) -> list[dict]:
    """Execute ``notebook`` at every point of the product grid of ``values``; return the table.

    Parameters
    ----------
    notebook : path
        The notebook (relative to the current directory or to the book's root).
    values : dict or list of (name, values) pairs
        ``{name: "v1,v2"}`` (texts as on the command line) or ``{name: [value, ...]}``; checked
        and converted as ``-p`` values (:func:`attnsvm_book.params.validate_overrides`), all of
        them before anything runs. A name with one value is a fixed parameter.
    profile : str, optional
        Start from this profile's parameters of the notebook (default: the notebook's own).
    workers, scheduler, resources
        Where the points run (:func:`attnsvm_book.parallel.run_jobs`).
    out : path, optional
        Where the table is written (CSV, plus Parquet when pyarrow is importable); default
        ``<build_dir>/sweeps/<notebook>.csv``.
    force : bool
        Execute every point, cached or not.

    Returns
    -------
    list of dict
        One row per grid point, in grid order (see the module's documentation for the columns).
    """
    root = find_root(root)
    nb = relative_notebook(root, notebook)
    build_dir = Path(build_dir) if build_dir is not None else root / BUILD_DIR
    with BuildLock(build_dir):  # one writer at a time; an unwritable directory fails here
        items = values.items()     if isinstance(values, dict) else values
        pairs = [(k, v if isinstance(v, str) else ",".join(map(repr, v)) if isinstance(v, (list, tuple))
                  else repr(v)) for k, v in items]
        checked = validate_overrides(root / nb, pairs, root=root, sweep=True)
        base = {}
        if profile is not None:
            base = dict(resolve_profile(root, profile, [nb], subset=True)[nb])
        grid = parameter_grid(checked)
        defaults = notebook_parameters(root / nb)
        lib_h, env_h = library_hash(root), environment_hash(root)
        parallel = scheduler is not None or (workers is not None and int(workers) > 1)
        resolve = device_resolver(scheduler, resources)
        threads = None if (scheduler is not None or not parallel) else threads_per_worker(workers)
        progress = Progress(len(grid), log=log, bar=progress_bar if parallel else False, desc="points")
        rows: list[dict | None] = [None] * len(grid)
        jobs, info = [], {}
        reserved = set(RESULT_COLUMNS)

        def label(point):
            return ", ".join(f"{k}={v!r}" for k, v in point.items())

        def row_for(i, params, glued, res, executed, cached):
            row = {}
            for k, v in params.items():
                row[f"param_{k}" if k in reserved else k] = v
            for k, v in glued.items():
                row[f"glued_{k}" if (k in row or k in reserved) else k] = v
            row.update({"seconds": res.get("seconds"), "device": res.get("device"),
                        "worker": res.get("worker"), "status": res["status"],
                        "error": res.get("error"), "cached": cached,
                        "executed": None if executed is None else str(executed)})
            rows[i] = row

        for i, point in enumerate(grid):
            params = {**base, **point}
            dev_param = str(params.get("device", _literal(defaults.get("device", "'auto'"))))
            device = resolve(dev_param)
            key = cache_key(root, nb, params, device, lib_h, env_h)
            executed, record_path, failed = point_paths(build_dir, nb, key)
            record = _read_json(record_path)
            miss = cache_miss_reason(record, key, executed)
            if not force and miss is None:
                row_for(i, params, record.get("glued", {}),
                        {"status": "ok", "seconds": record["seconds"], "device": record["device"],
                         "worker": record.get("worker")}, executed, True)
                progress.step(f"{nb} [{label(point)}]: cached ({record['seconds']:.1f} s when "
                              f"executed, {record['device']})")
                continue
            if miss in DAMAGED:
                log(f"{nb} [{label(point)}]: {miss}, re-executing")
            if record_path.exists():
                record_path.unlink()  # the old record no longer describes what will be there
            info[len(jobs)] = (i, params, key, device, point)
            jobs.append(make_job(root, nb, params, executed, failed, device=dev_param,
                                 kernel_name=kernel_name, threads=threads,
                                 resolved=None if scheduler else device,
                                 name=f"{nb} [{label(point)}]"))
            jobs[-1]["index"] = len(jobs) - 1

        def on_result(job, res):
            i, params, key, device, point = info[job["index"]]
            executed, record_path, failed = point_paths(build_dir, nb, key)
            on = f" on {res['worker']}" if parallel and res.get("worker") else ""
            if res["status"] != "ok":
                row_for(i, params, {}, {**res, "device": res.get("device_label")},
                        failed if failed.is_file() else None, False)
                progress.step(f"FAILED{on} -- {res['error']}")
                return
            glued = glued_scalars(executed)
            if res["device"] != device:  # the worker resolved 'auto' differently: key by what ran
                key = cache_key(root, nb, params, res["device"], lib_h, env_h)
                new_exec, record_path, _ = point_paths(build_dir, nb, key)
                os.replace(executed, new_exec)
                executed = new_exec
            write_record(record_path, executed,
                         {"key": key, "notebook": nb, "parameters": params, "seconds": res["seconds"],
                          "device": res["device_label"], "worker": res.get("worker"), "glued": glued})
            row_for(i, params, glued, {**res, "device": res["device_label"]}, executed, False)
            progress.step(f"{job['name']}: executed in {res['seconds']:.1f} s "
                          f"({res['device_label']}){on}")

        try:
            run_jobs(jobs, on_result, workers=workers, scheduler=scheduler, resources=resources)
        finally:
            progress.close()
        out = Path(out) if out is not None else build_dir / "sweeps" / (Path(nb).stem + ".csv")
        written = write_table(rows, out, log=log)
        failed_n = sum(r["status"] != "ok" for r in rows)
        log(f"sweep of {nb}: {len(rows)} point(s), {len(jobs)} executed, "
            f"{len(rows) - len(jobs)} cached, {failed_n} failed; table: "
            + ", ".join(map(str, written)))
        return rows
