"""The book's build: execute the notebooks with papermill under a profile, then render.

Usage (the whole command line, with ``run`` and ``sweep``: :mod:`attnsvm_book.cli`)::

    python -m attnsvm_book build [--profile quick|paper] [--only NOTEBOOK] [--force]
                                 [--workers N | --scheduler ADDRESS]
    python -m attnsvm_book list  [--profile quick|paper]
    python -m attnsvm_book strip NOTEBOOK...     # remove outputs before committing

Steps of ``build``:

1. Read ``_toc.yml``; every notebook in it is executed by papermill with the parameters of the
   chosen profile (``profiles.yml``, one versioned file). A notebook's own ``parameters`` cell
   holds the ``quick`` defaults, so ``papermill notebooks/x.ipynb out.ipynb -p name value`` works
   on its own.
2. Executed notebooks go to ``_build/executed/<profile>/``; sources stay output-free. A staging
   tree ``_build/stage`` (configuration, chapters, executed notebooks, the generated execution
   report page) is rendered by ``jupyter-book build`` with its own execution off and warnings as
   errors (``-W -n --keep-going``). HTML lands in ``_build/html``.
3. Cache: a notebook is re-executed only when its source, its parameters, the source of the
   library it imports (``lib/attnsvm``), the pinned package versions or the device changed.
   Executions are written atomically and a failed or interrupted one is never recorded in the
   cache. Each record keeps the SHA-256 of the executed copy it serves: a copy that is missing,
   unreadable or changed since is a miss, re-executed with one line saying why. One build writes
   to a build directory at a time (:class:`attnsvm_book._core.BuildLock`).
4. A notebook that raises makes the build exit non-zero naming the notebook, the cell and the
   exception; nothing is rendered, so no stale page is published as if it were new.
5. One progress line per notebook, ``_build/execution-report.json`` and a rendered execution
   report page.
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import time
from importlib import metadata
from pathlib import Path

from ._core import (BUILD_DIR, DAMAGED, STAGED_FILES, BuildError, BuildLock, NotebookFailed,
                    _atomic_write_text, _literal, _read_json, cache_key, cache_miss_reason,
                    environment_hash, find_root, library_hash, load_profiles,
                    notebook_parameters, render,
                    toc_notebooks, write_record)
from .apidoc import API_MARKER, api_pages
from .parallel import (Progress, device_resolver, gpu_count, make_job, run_jobs,
                       threads_per_worker, worker_plan)
from .params import resolve_profile
from .prose import check_glued_prose

__all__ = ["NotebookResult", "execute_notebooks", "build", "stage", "write_report",
           "report_markdown", "package_versions", "profile_line", "with_profile_line",
           "without_machine_paths", "source_archive", "run_line", "REPORT_MARKER",
           "REPORT_TEMPLATE", "PROFILE_LINE_TAG", "SOURCE_ARCHIVE", "PDF_NAME", "whole_book_pdf"]

REPORT_TEMPLATE = "book/execution_report.md"
REPORT_MARKER = "<!-- execution-report-table -->"
#: packages whose versions are shown on the execution report page
REPORTED_PACKAGES = ("numpy", "scipy", "torch", "cvxpy", "clarabel", "matplotlib", "papermill",
                     "jupyter-book", "myst-nb")


@dataclasses.dataclass
class NotebookResult:
    """One row of the execution report."""

    notebook: str
    profile: str
    parameters: dict
    executed_path: str | None
    seconds: float | None
    cached: bool
    device: str
    status: str  # "ok", "failed", "skipped"
    error: str | None = None
    worker: str | None = None  # where it was executed (a Dask worker's address, or in-process)
    engine: str | None = None  # the engine paths of its fit calls ("eager", "cuda-graph", ...)
    reason: str | None = None  # why it was skipped ("data not on disk"), when it was
    shown: dict | None = None  # the run its page shows when not this profile's: profile, parameters



def execute_notebooks(root: Path, profile: str, *, only: str | None = None, force: bool = False,
                      build_dir: Path | None = None, kernel_name: str = "python3",
                      toc: str | os.PathLike | None = None, log=print, workers: int | None = 1,
                      scheduler: str | None = None, resources: dict | None = None,
                      progress_bar: bool | None = None, gpus: int | None = None) -> list[NotebookResult]:
    """Execute the notebooks of ``_toc.yml`` under ``profile``, using the cache.

    Returns one :class:`NotebookResult` per notebook, in the order of the table of contents.
    With ``only``, the other notebooks are reported from the cache when they are cached there
    and as ``skipped`` otherwise (``force`` then re-executes only ``only``). ``toc`` replaces
    ``_toc.yml`` by another table of contents (a part of the book).

    ``workers=1`` without ``scheduler`` executes in this process, one notebook after another.
    Otherwise the notebooks are Dask tasks (:mod:`attnsvm_book.parallel`) on a local cluster of
    ``workers`` processes, or on the cluster at ``scheduler``; ``resources`` (e.g.
    ``{"GPU": 1}``) is what each task needs of a worker. Either way: one progress line per
    notebook as it finishes, each success cached at once (atomically), a failure reported with
    its notebook, cell and exception while the others still run, and the report names the worker
    and device of each execution and the engine path of its ``fit`` calls.

    On a local cluster with CUDA cards (``gpus``, default: those torch sees), the workers follow
    :func:`attnsvm_book.parallel.worker_plan`: a notebook with a ``device`` parameter runs on a GPU
    worker (one per card by default), every other notebook on a CPU worker, which sees no card.
    """
    root = Path(root)
    build_dir = Path(build_dir or root / BUILD_DIR)
    subset, toc_file = toc is not None, toc
    toc = toc_notebooks(root, toc)
    if only is not None:
        norm = only if only.endswith(".ipynb") else only + ".ipynb"
        matches = [nb for nb in toc if nb == norm or Path(nb).name == Path(norm).name]
        if not matches:
            raise BuildError(f"unknown notebook {only!r}; notebooks in _toc.yml: {toc}")
        only = matches[0]
    table = resolve_profile(root, profile, toc, subset=subset)  # validates before anything runs
    lib_h, env_h = library_hash(root), environment_hash(root)
    parallel = scheduler is not None or (workers is not None and int(workers) > 1)
    resolve = device_resolver(scheduler, resources)
    # a local cluster on a machine with CUDA: GPU workers for the notebooks that use the device,
    # CPU workers (which see no card) for the rest (parallel.worker_plan)
    plan = (worker_plan(workers, gpus if gpus is not None else gpu_count())
            if parallel and scheduler is None else None)
    gpu_plan = bool(plan) and any(w["resources"] for w in plan)
    threads = (None if (scheduler is not None or not parallel)
               else threads_per_worker(len(plan) if gpu_plan else workers))
    results: dict[str, NotebookResult] = {}
    jobs, keys = [], {}
    progress = Progress(len(toc), log=log, bar=progress_bar if parallel else False)

    def paths(nb):
        return (build_dir / "executed" / profile / nb, build_dir / "cache" / profile / (nb + ".json"),
                build_dir / "failed" / profile / nb)

    for nb in toc:
        params = table[nb]
        defaults = notebook_parameters(root / nb)
        dev_param = str(params.get("device", _literal(defaults.get("device", "'auto'"))))
        uses_device = "device" in params or "device" in defaults
        job_resources = None
        if gpu_plan:
            job_resources = {"GPU": 1} if uses_device else {"CPU": 1}
            device = resolve(dev_param) if uses_device else "cpu"   # a CPU worker sees no card
        else:
            device = resolve(dev_param)
        key = cache_key(root, nb, params, device, lib_h, env_h)
        out_path, record_path, failed_path = paths(nb)
        record = _read_json(record_path)
        miss = cache_miss_reason(record, key, out_path)
        wanted = only is None or nb == only
        if miss is None and not (force and wanted):
            results[nb] = NotebookResult(nb, profile, params, str(out_path), record["seconds"],
                                         True, record["device"], "ok",
                                         worker=record.get("worker"), engine=record.get("engine"))
            progress.step(f"{nb}: cached ({record['seconds']:.1f} s when executed, "
                          f"{record['device']})")
            continue
        if not wanted:
            results[nb] = NotebookResult(nb, profile, params, None, None, False, device,
                                         "skipped")
            why = "not cached" if miss in ("not cached", "inputs changed") else miss
            progress.step(f"{nb}: skipped (--only {only}; {why} under this profile)")
            continue
        if miss in DAMAGED:
            log(f"{nb}: {miss}, re-executing")
        if record_path.exists():
            record_path.unlink()  # the old record no longer describes what will be there
        keys[nb] = (key, device)
        jobs.append(make_job(root, nb, params, out_path, failed_path, device=dev_param,
                             kernel_name=kernel_name, threads=threads,
                             resolved=None if scheduler else device, strict_claims=True,
                             resources=job_resources))

    def on_result(job, res):
        nb = job["notebook"]
        params = job["parameters"]
        out_path, record_path, _ = paths(nb)
        worker = res.get("worker")
        on = f" on {worker}" if parallel and worker else ""
        if res["status"] == "no-data":
            results[nb] = NotebookResult(nb, profile, params, None, res["seconds"], False,
                                         res["device_label"], "skipped", res["error"], worker,
                                         res.get("engine"), reason="data not on disk")
            progress.step(f"{nb}: skipped -- {res['error']}")
            return
        if res["status"] != "ok":
            results[nb] = NotebookResult(nb, profile, params, None, res["seconds"], False,
                                         res["device_label"], "failed", res["error"], worker,
                                         res.get("engine"))
            secs = "" if res["seconds"] is None else f" after {res['seconds']:.1f} s"
            progress.step(f"{nb}: FAILED{secs}{on} -- {res['error']}")
            return
        key, device = keys[nb]
        if res["device"] != device:  # the worker resolved 'auto' differently: key by what ran
            key = cache_key(root, nb, params, res["device"], lib_h, env_h)
        write_record(record_path, out_path,
                     {"key": key, "seconds": res["seconds"], "device": res["device_label"],
                      "worker": worker, "parameters": params, "engine": res.get("engine")})
        results[nb] = NotebookResult(nb, profile, params, str(out_path), res["seconds"], False,
                                     res["device_label"], "ok", worker=worker,
                                     engine=res.get("engine"))
        progress.step(f"{nb}: executed in {res['seconds']:.1f} s ({res['device_label']}){on}")

    try:
        run_jobs(jobs, on_result, workers=workers, scheduler=scheduler, resources=resources,
                 plan=plan if gpu_plan else None)
    finally:
        progress.close()
    for nb in toc:
        r = results[nb]
        if r.reason is not None and profile != FALLBACK_PROFILE:
            _show_fallback(r, root, build_dir, kernel_name, toc_file, log)
    return [results[nb] for nb in toc]


#: the profile whose run a page shows when its notebook's data are not on disk under another one
FALLBACK_PROFILE = "quick"


def _show_fallback(r: NotebookResult, root: Path, build_dir: Path, kernel_name: str, toc_file,
                   log) -> None:
    """Give ``r`` (a notebook skipped because its data are not on disk) the executed copy of its
    :data:`FALLBACK_PROFILE` run (executed now when not cached), so that its page still renders,
    saying so (:func:`profile_line`); the report keeps it as skipped, with the reason."""
    fb = next(x for x in execute_notebooks(root, FALLBACK_PROFILE, only=r.notebook,
                                           build_dir=build_dir, kernel_name=kernel_name,
                                           toc=toc_file, log=lambda *a, **k: None, workers=1)
              if x.notebook == r.notebook)
    if fb.status != "ok":
        raise NotebookFailed(f"{r.error}; its page would show the {FALLBACK_PROFILE!r} run, "
                             f"which failed: {fb.error}")
    r.executed_path = fb.executed_path
    r.shown = {"profile": FALLBACK_PROFILE, "parameters": fb.parameters}
    log(f"{r.notebook}: its page shows the {FALLBACK_PROFILE!r} run "
        f"({'cached' if fb.cached else f'executed in {fb.seconds:.1f} s'})")



# --------------------------------------------------------------------------- report and render


def package_versions() -> dict:
    """Versions of Python and the packages listed in :data:`REPORTED_PACKAGES`."""
    out = {"python": platform.python_version()}
    for name in REPORTED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def write_report(results: list[NotebookResult], path: Path) -> dict:
    """Write the machine-readable execution report (JSON) and return it."""
    report = {
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "packages": package_versions(),
        "notebooks": [dataclasses.asdict(r) for r in results],
    }
    _atomic_write_text(Path(path), json.dumps(report, indent=1, default=str))
    return report


def _notebook_link(nb: str) -> str:
    """A link to a notebook's page from ``book/execution_report.md``, named by its stem."""
    return f"[{Path(nb).stem}](../{nb})"


def report_markdown(report: dict) -> str:
    """The tables of the rendered execution report page.

    Narrow enough to read at 1366 px: the status comes right after the notebook, the parameters
    (long) get a table of their own, and where a notebook ran is shown by its device only (the
    Dask worker's address stays in ``execution-report.json``), with the engine path its ``fit``
    calls took (``eager``, ``cuda-graph``, ...).
    """
    rows = ["| Notebook | Status | Runtime (s) | Cached | Device | Engine | Profile |",
            "|---|---|---:|---|---|---|---|"]
    params_rows = ["| Notebook | Parameters |", "|---|---|"]
    for r in report["notebooks"]:
        params = ", ".join(f"`{k}={v!r}`" for k, v in r["parameters"].items())
        secs = "" if r["seconds"] is None else f"{r['seconds']:.1f}"
        status = r["status"]
        if r.get("reason"):
            status += f" ({r['reason']}" + (f"; the page shows the `{r['shown']['profile']}` run"
                                          if r.get("shown") else "") + ")"
        rows.append(f"| {_notebook_link(r['notebook'])} | {status} | {secs} | "
                    f"{'yes' if r['cached'] else 'no'} | {r['device']} | "
                    f"{r.get('engine') or 'no fit call'} | {r['profile']} |")
        params_rows.append(f"| `{r['notebook']}` | "
                           f"{params or 'its own defaults (the quick values)'} |")
    pk = ["| Package | Version |", "|---|---|"]
    pk += [f"| {k} | {v} |" for k, v in report["packages"].items()]
    return ("\n".join(rows) + f"\n\nGenerated {report['generated']}. Runtime is the wall-clock "
            "time of the execution that produced the page (for a cached notebook, the time it "
            "took when it was executed).\n\n**Parameters** that the profile passed to each "
            "notebook (papermill):\n\n" + "\n".join(params_rows) + "\n\n"
            + "\n".join(pk) + "\n")


PROFILE_LINE_TAG = "attnsvm-profile-line"


def profile_line(r: NotebookResult, profiles: dict) -> str:
    """The line under a notebook page's title naming the profile that produced the page (and,
    when the page shows another profile's run because the data were not on disk, saying so)."""
    shown = r.shown or {"profile": r.profile, "parameters": r.parameters}
    desc = (profiles.get(shown["profile"]) or {}).get("description")
    what = f"the `{shown['profile']}` profile" + (f" ({desc})" if desc else "")
    if r.shown:
        what += (f", not the `{r.profile}` profile this book was built with: its data are not on "
                 f"disk (see the [execution report](../book/execution_report.md))")
    given = ", ".join(f"`{k}={v!r}`" for k, v in shown["parameters"].items())
    params = f" with {given}" if given else " with the notebook's own parameter defaults"
    other = [p for p in profiles if p != shown["profile"]]
    alt = (f" Other profiles: {', '.join(f'`{p}`' for p in other)} "
           f"(`make book PROFILE={other[0]}`).") if other else ""
    return (f"*Every figure and number on this page comes from {what}, executed{params}.{alt} "
            f"Device and runtime: the [execution report](../book/execution_report.md).*")


#: the book's code as one archive, staged at ``code/`` and offered for download by every notebook
#: page and the introduction (``pip install`` takes it as it is: it holds ``pyproject.toml``)
SOURCE_ARCHIVE = "code/attnsvm.tar.gz"
#: what goes into the archive: the library, the build, the notebooks, the chapters and what
#: ``pip install`` and ``make`` read (no build output, no virtual environment, no caches)
ARCHIVE_FILES = ("pyproject.toml", "README.md", "LICENSE", "CITATION.cff", "CONTRIBUTING.md",
                 "CHANGELOG.md", "Makefile", "requirements.txt", "requirements-nodeps.txt",
                 "constraints.txt", "profiles.yml", "_config.yml", "_toc.yml", "postBuild")
ARCHIVE_DIRS = ("lib", "notebooks", "book", "tests", "tools", "benchmarks", "notes")
_ARCHIVE_SKIP = ("__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".hypothesis")


def source_archive(root: Path, target: Path) -> Path:
    """Write the book's code as a gzipped tar to ``target``; return ``target``.

    Members live under ``attnsvm/`` and are sorted, with fixed times and owners, so the same
    sources give the same bytes (a rebuild does not change the page's download). Files are those
    of :data:`ARCHIVE_FILES` and the folders :data:`ARCHIVE_DIRS` of ``root`` (no ``*.egg-info``,
    no caches). ``pip install attnsvm.tar.gz`` installs the library from it.
    """
    import gzip
    import io
    import tarfile

    root, target = Path(root), Path(target)
    files = [root / f for f in ARCHIVE_FILES if (root / f).is_file()]
    for d in ARCHIVE_DIRS:
        files += [p for p in (root / d).rglob("*") if p.is_file()
                  and not set(p.relative_to(root).parts) & set(_ARCHIVE_SKIP)
                  and not any(part.endswith(".egg-info") for part in p.relative_to(root).parts)]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(set(files)):
            data = path.read_bytes()
            info = tarfile.TarInfo("attnsvm/" + path.relative_to(root).as_posix())
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(buf.getvalue())
    target.parent.mkdir(parents=True, exist_ok=True)
    if not (target.is_file() and target.read_bytes() == out.getvalue()):
        target.write_bytes(out.getvalue())
    return target


def run_line(notebook: str) -> str:
    """The line of a notebook page that says how to run it: the two downloads, two commands."""
    name = Path(notebook).name
    up = "../" * (len(Path(notebook).parts) - 1)
    return (f"*Run it yourself:* download this notebook (the download button, `.ipynb`) and "
            f"the book's code, {{download}}`attnsvm.tar.gz <{up}{SOURCE_ARCHIVE}>`, into one "
            f"folder, then\n\n```bash\npip install \"./attnsvm.tar.gz[book]\"\n"
            f"papermill {name} out.ipynb -p seed 1\n```\n\n(any name of the parameters cell "
            f"can be given with `-p`; or open the notebook in Jupyter).")


def without_machine_paths(nb: dict) -> dict:
    """``nb`` without the build machine's absolute paths in its metadata.

    papermill records where it read and wrote the notebook (``metadata.papermill.input_path``
    and ``output_path``, absolute paths of the build machine); the staged notebook is what a
    reader downloads, so those two are dropped.
    """
    meta = dict(nb.get("metadata", {}))
    if isinstance(meta.get("papermill"), dict):
        meta["papermill"] = {k: v for k, v in meta["papermill"].items()
                             if k not in ("input_path", "output_path")}
    return {**nb, "metadata": meta}


def with_profile_line(nb: dict, r: NotebookResult, profiles: dict) -> dict:
    """``nb`` (an executed notebook's JSON) with :func:`profile_line` under its title.

    The line is a markdown cell tagged ``attnsvm-profile-line`` after the first markdown cell
    (the one holding the page's title), so Sphinx still takes the title from the page's top.
    """
    cells = [c for c in nb.get("cells", [])
             if PROFILE_LINE_TAG not in c.get("metadata", {}).get("tags", [])]
    at = next((k + 1 for k, c in enumerate(cells) if c.get("cell_type") == "markdown"), 0)
    line = {"cell_type": "markdown", "metadata": {"tags": [PROFILE_LINE_TAG]},
            "source": profile_line(r, profiles) + "\n\n" + run_line(r.notebook)}
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) >= (4, 5):
        line["id"] = PROFILE_LINE_TAG  # cell ids exist from nbformat 4.5 on
    return {**nb, "cells": cells[:at] + [line] + cells[at:]}


def _sync_file(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` only when the content differs (keeps Sphinx's incremental cache).

    The copy gets the time of copying, not the source's: Sphinx re-reads a page whose file is
    newer than its last reading, and a source edited while a build was reading the old copy
    kept an older time than that reading (``copy2``), so the next build showed the old page.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_file() and dst.read_bytes() == src.read_bytes():
        return
    shutil.copyfile(src, dst)


def _sync_text(text: str, dst: Path) -> None:
    if dst.is_file() and dst.read_text() == text:
        return
    _atomic_write_text(dst, text)


def stage(root: Path, results: list[NotebookResult], report: dict, stage_dir: Path,
          toc: str | os.PathLike | None = None) -> None:
    """Assemble the tree that Jupyter Book renders: configuration, chapters, executed notebooks."""
    root, stage_dir = Path(root), Path(stage_dir)
    wanted = set()
    for name in STAGED_FILES:
        src = Path(toc) if (toc is not None and name == "_toc.yml") else root / name
        _sync_file(src, stage_dir / name)
        wanted.add(stage_dir / name)
    # MathJax ships with the book: attnsvm_book.assets adds static/mathjax to the static files
    for src in sorted((root / "book").rglob("*")):
        if src.is_file() and "__pycache__" not in src.parts:
            dst = stage_dir / src.relative_to(root)
            _sync_file(src, dst)
            wanted.add(dst)
    profiles = load_profiles(root)
    for r in results:
        dst = stage_dir / r.notebook
        if r.executed_path is None:
            raise BuildError(f"{r.notebook} has no executed copy to stage")
        try:
            nb = json.loads(Path(r.executed_path).read_bytes())
        except (OSError, ValueError) as exc:
            raise BuildError(f"{r.notebook}: its executed copy {r.executed_path} is unreadable "
                             f"({type(exc).__name__}); build again to re-execute it") from None
        nb = without_machine_paths(with_profile_line(nb, r, profiles))
        _sync_text(json.dumps(nb, indent=1) + "\n", dst)
        wanted.add(dst)
    # the book's code, offered for download by the notebook pages and the introduction
    wanted.add(source_archive(root, stage_dir / SOURCE_ARCHIVE))
    # the API reference: one page per top-level module, listed on book/api.md (apidoc)
    api_index = root / "book" / "api.md"
    if api_index.is_file() and API_MARKER in api_index.read_text():
        pages, index = api_pages("api", api_index.read_text())
        _sync_text(index, stage_dir / "book" / "api.md")
        for name, text in pages.items():
            _sync_text(text, stage_dir / "book" / "api" / name)
            wanted.add(stage_dir / "book" / "api" / name)
    page = stage_dir / REPORT_TEMPLATE
    template = (root / REPORT_TEMPLATE).read_text()
    if REPORT_MARKER not in template:
        raise BuildError(f"{REPORT_TEMPLATE} lacks the marker {REPORT_MARKER}")
    _sync_text(template.replace(REPORT_MARKER, report_markdown(report)), page)
    # remove staged files that no longer exist in the sources (no stale pages)
    for p in sorted(stage_dir.rglob("*"), reverse=True):
        if p.is_file() and p not in wanted and "_build" not in p.relative_to(stage_dir).parts:
            p.unlink()



#: the whole-book PDF, at the top of the HTML output
PDF_NAME = "attnsvm.pdf"
#: the PDF printer (a tool of the repository: headless Chromium), and its "no browser" exit status
PDF_TOOL = "tools/pdf.py"
_PDF_NO_BROWSER = 3


def whole_book_pdf(root: Path, build_dir: Path, *, required: bool = False, log=print) -> Path | None:
    """Print the staged book to ``build_dir/attnsvm.pdf`` with ``tools/pdf.py``; return its path.

    Returns None, with one line saying why, when the repository has no ``tools/pdf.py`` or the
    machine no Chromium (unless ``required``: then that is a :class:`BuildError`); a failed
    print is a :class:`BuildError` naming the tool's last lines.
    """
    import subprocess
    import sys

    tool = Path(root) / PDF_TOOL
    out = Path(build_dir) / PDF_NAME
    if not tool.is_file():
        why = f"no {PDF_TOOL}"
    else:
        t0 = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[1])]
            + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
        proc = subprocess.run([sys.executable, str(tool), "--build-dir", str(build_dir),
                               "--out", str(out)], capture_output=True, text=True, env=env)
        if proc.returncode == 0 and out.is_file():
            log(f"whole-book PDF in {time.perf_counter() - t0:.1f} s: {out}")
            return out
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        if proc.returncode != _PDF_NO_BROWSER:
            raise BuildError(f"the whole-book PDF failed ({PDF_TOOL}, exit {proc.returncode}):\n"
                             f"{tail}")
        why = tail
    if required:
        raise BuildError(f"no whole-book PDF: {why}")
    log(f"no whole-book PDF ({why}); the site does not offer one")
    return None


def _offer_pdf(stage_dir: Path, name: str) -> None:
    """Tell the staged configuration where the whole-book PDF is (``attnsvm_pdf``; "" for none):
    the pages then link it (``attnsvm_book.assets``)."""
    import yaml

    path = Path(stage_dir) / "_config.yml"
    config = yaml.safe_load(path.read_text()) or {}
    sphinx = config.setdefault("sphinx", {})
    sphinx.setdefault("config", {})
    if (sphinx["config"] or {}).get("attnsvm_pdf", "") == name:
        return
    sphinx["config"] = {**(sphinx["config"] or {}), "attnsvm_pdf": name}
    _atomic_write_text(path, yaml.safe_dump(config, sort_keys=False))


def build(root: str | os.PathLike | None = None, profile: str = "quick", *,
          only: str | None = None, force: bool = False, render_html: bool = True,
          build_dir: str | os.PathLike | None = None, toc: str | os.PathLike | None = None,
          log=print, workers: int | None = 1, scheduler: str | None = None,
          resources: dict | None = None, progress_bar: bool | None = None,
          pdf: bool | None = None) -> dict:
    """Execute (with cache) and render the book. Returns the execution report.

    ``pdf``: also print the whole book to ``<build_dir>/html/attnsvm.pdf`` (:func:`whole_book_pdf`)
    and link it from every page; ``None`` (the default) does it when Chromium is installed,
    ``False`` never, ``True`` always (no Chromium is then an error). A build of part of the book
    (``toc``) makes no PDF unless ``pdf=True``.

    ``build_dir`` defaults to ``<root>/_build``; the HTML lands in ``<build_dir>/html``. ``toc``
    builds a part of the book from another table of contents (for working on a few chapters).
    ``workers``, ``scheduler`` and ``resources``: see :func:`execute_notebooks` (the command
    line's default is one worker per core; this function's is the serial, in-process run).

    Raises
    ------
    BuildError
        Bad configuration (before anything runs), an unwritable build directory, another build
        writing to the same one, or a failed render (naming the page and its source notebook).
    NotebookFailed
        One or more notebooks raised; the message names each notebook, cell and exception.
    """
    root = find_root(root)
    build_dir = Path(build_dir) if build_dir is not None else root / BUILD_DIR
    if build_dir.name != BUILD_DIR:
        raise BuildError(f"build_dir must be a directory named {BUILD_DIR!r}, got {build_dir}")
    with BuildLock(build_dir):  # one writer at a time; an unwritable directory fails here
        t0 = time.perf_counter()
        results = execute_notebooks(root, profile, only=only, force=force, build_dir=build_dir,
                                    toc=toc, log=log, workers=workers, scheduler=scheduler,
                                    resources=resources, progress_bar=progress_bar)
        report = write_report(results, build_dir / "execution-report.json")
        failed = [r for r in results if r.status == "failed"]
        if failed:
            raise NotebookFailed("notebook execution failed; nothing was rendered:\n  "
                                 + "\n  ".join(r.error for r in failed))
        skipped = [r for r in results if r.status == "skipped" and r.executed_path is None]
        if render_html and skipped:
            raise BuildError(f"cannot render: {len(skipped)} notebook(s) have no cached execution "
                             f"under profile {profile!r} ({', '.join(r.notebook for r in skipped)}); "
                             f"run a full build first, or pass --no-render (the executed notebooks "
                             f"are cached)")
        if render_html:
            stage(root, results, report, build_dir / "stage", toc=toc)
            check_glued_prose(build_dir / "stage")  # no unexplained NaN pasted into a sentence
            made = None
            if pdf or (pdf is None and toc is None):
                made = whole_book_pdf(root, build_dir, required=bool(pdf), log=log)
            _offer_pdf(build_dir / "stage", PDF_NAME if made else "")
            render(build_dir / "stage", build_dir.parent,
                   sources={r.notebook: r.executed_path for r in results})
            if made:
                shutil.copy2(made, build_dir / "html" / PDF_NAME)
            elif (build_dir / "html" / PDF_NAME).exists():
                (build_dir / "html" / PDF_NAME).unlink()  # no stale PDF beside new pages
            log(f"built in {time.perf_counter() - t0:.1f} s: {build_dir / 'html' / 'index.html'}")
    return report


