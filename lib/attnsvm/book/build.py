"""The book's build: execute the notebooks with papermill under a profile, then render.

Usage (the whole command line, with ``run`` and ``sweep``: :mod:`attnsvm.book.cli`)::

    python -m attnsvm.book build [--profile quick|paper] [--only NOTEBOOK] [--force]
                                 [--workers N | --scheduler ADDRESS]
    python -m attnsvm.book list  [--profile quick|paper]
    python -m attnsvm.book strip NOTEBOOK...     # remove outputs before committing

Steps of ``build``:

1. Read ``_toc.yml``; every notebook in it is executed by papermill with the parameters of the
   chosen profile (``profiles.yml``, one versioned file). A notebook's own ``parameters`` cell
   holds the ``quick`` defaults, so ``papermill notebooks/x.ipynb out.ipynb -p name value`` works
   on its own.
2. Executed notebooks go to ``_build/executed/<profile>/``; sources stay output-free. A staging
   tree ``_build/stage`` (configuration, chapters, executed notebooks, the generated execution
   report page) is rendered by ``jupyter-book build`` with its own execution off and warnings as
   errors (``-W -n --keep-going``). HTML lands in ``_build/html``.
3. Cache: a notebook is re-executed only when its source, its parameters, the library's source,
   the pinned package versions or the device changed. Executions are written atomically and a
   failed or interrupted one is never recorded in the cache.
4. A notebook that raises makes the build exit non-zero naming the notebook, the cell and the
   exception; nothing is rendered, so no stale page is published as if it were new.
5. One progress line per notebook, ``_build/execution-report.json`` and a rendered execution
   report page.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import yaml

__all__ = [
    "BuildError",
    "NotebookFailed",
    "NotebookResult",
    "find_root",
    "load_profiles",
    "toc_notebooks",
    "notebook_parameters",
    "resolve_profile",
    "resolve_device",
    "cache_key",
    "execute_notebooks",
    "build",
    "strip_outputs",
    "main",
]

PROFILES_FILE = "profiles.yml"
BUILD_DIR = "_build"
REPORT_TEMPLATE = "book/execution_report.md"
REPORT_MARKER = "<!-- execution-report-table -->"
#: packages whose versions are shown on the execution report page
REPORTED_PACKAGES = ("numpy", "scipy", "torch", "cvxpy", "clarabel", "matplotlib", "papermill",
                     "jupyter-book", "myst-nb")
#: files of the repository copied into the staging tree (besides book/ and executed notebooks)
STAGED_FILES = ("_config.yml", "_toc.yml")


class BuildError(RuntimeError):
    """A build problem found before or after execution (bad profile, unknown notebook, ...)."""


class NotebookFailed(BuildError):
    """A notebook raised during execution."""


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


# --------------------------------------------------------------------------- configuration


def find_root(start: str | os.PathLike | None = None) -> Path:
    """The book's root: the first directory upwards from ``start`` holding ``_toc.yml``."""
    here = Path(start or os.getcwd()).resolve()
    for cand in (here, *here.parents):
        if (cand / "_toc.yml").is_file():
            return cand
    raise BuildError(f"no _toc.yml found in {here} or any parent directory")


def load_profiles(root: Path) -> dict:
    """Read ``profiles.yml``: ``{profile: {"description": str, "notebooks": {path: params}}}``."""
    path = Path(root) / PROFILES_FILE
    if not path.is_file():
        raise BuildError(f"profile file {path} is missing")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or not data:
        raise BuildError(f"{path} must map profile names to their settings")
    for name, prof in data.items():
        if not isinstance(prof, dict) or not isinstance(prof.get("notebooks", {}), dict):
            raise BuildError(f"profile {name!r} in {path} must have a 'notebooks' mapping")
    return data


def _toc_files(entries) -> list[str]:
    out = []
    for entry in entries or []:
        if not isinstance(entry, dict):
            continue
        if "file" in entry:
            out.append(entry["file"])
        for key in ("parts", "chapters", "sections"):
            if key in entry:
                out.extend(_toc_files(entry[key]))
    return out


def toc_files(root: Path, toc: str | os.PathLike | None = None) -> list[str]:
    """All document paths named in ``_toc.yml`` (or ``toc``), without extension, in reading order."""
    toc = yaml.safe_load(Path(toc or Path(root) / "_toc.yml").read_text())
    files = [toc["root"]] if "root" in toc else []
    return files + _toc_files([toc])


def toc_notebooks(root: Path, toc: str | os.PathLike | None = None) -> list[str]:
    """Paths (relative to ``root``, with ``.ipynb``) of the notebooks named in ``_toc.yml``."""
    out = []
    for f in toc_files(root, toc):
        p = f if f.endswith(".ipynb") else f + ".ipynb"
        if (Path(root) / p).is_file():
            out.append(p)
    return out


def notebook_parameters(path: str | os.PathLike) -> dict:
    """The names assigned in a notebook's cell tagged ``parameters``, with their source defaults.

    The cell is parsed with :mod:`ast` (every top-level assignment counts, whatever its comment).

    Raises
    ------
    BuildError
        When the notebook has no cell tagged ``parameters``, or that cell is not valid Python.
    """
    import ast

    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if not cells:
        raise BuildError(f"{path}: no cell tagged 'parameters'")
    src = cells[0].source
    try:
        tree = ast.parse(src)
    except SyntaxError as exc:
        raise BuildError(f"{path}: the parameters cell is not valid Python: {exc}") from None
    out = {}
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) and node.value else [])
        for tgt in targets:
            if isinstance(tgt, ast.Name):
                out[tgt.id] = ast.get_source_segment(src, node.value)
    return out


def resolve_profile(root: Path, profile: str, notebooks: list[str] | None = None, *,
                    subset: bool = False) -> dict:
    """The parameters each notebook receives under ``profile``, validated before anything runs.

    Every notebook of the table of contents must appear in the profile (an empty mapping means
    "the notebook's own defaults"), the profile may name no other notebook, and every parameter it
    gives must be defined in that notebook's ``parameters`` cell. With ``subset=True`` (a partial
    table of contents), profile entries for other notebooks are ignored.
    """
    profiles = load_profiles(root)
    if profile not in profiles:
        raise BuildError(f"unknown profile {profile!r}; known profiles: {sorted(profiles)}")
    table = profiles[profile].get("notebooks", {}) or {}
    toc = toc_notebooks(root) if notebooks is None else notebooks
    unknown = sorted(set(table) - set(toc))
    if unknown and not subset:
        raise BuildError(f"profile {profile!r} names notebooks that are not in _toc.yml: {unknown}")
    missing = [nb for nb in toc if nb not in table]
    if missing:
        raise BuildError(f"profile {profile!r} has no entry for notebooks {missing} "
                         "(use an empty mapping {} for the notebook's own defaults)")
    out = {}
    for nb in toc:
        params = dict(table[nb] or {})
        defined = notebook_parameters(Path(root) / nb)
        extra = sorted(set(params) - set(defined))
        if extra:
            raise BuildError(f"profile {profile!r} gives {nb} parameters {extra} that its "
                             f"parameters cell does not define (defined: {sorted(defined)})")
        from .params import ParameterError, check_value, notebook_defaults

        literal = notebook_defaults(Path(root) / nb)
        for name, value in params.items():
            try:
                check_value(name, value, literal[name][1])
            except TypeError as exc:
                raise ParameterError(f"profile {profile!r} gives {nb} {name}={value!r}: {exc} "
                                     f"(default {literal[name][0]})") from None
        out[nb] = params
    return out


def resolve_device(device: str = "auto") -> str:
    """The device a notebook runs on, as a short string for cache keys (``"cpu"``, ``"cuda"``).

    Delegates to :func:`attnsvm.devices.device_name` (imported lazily: listing and stripping
    notebooks do not import torch).
    """
    from ..devices import device_name

    return device_name(device)


def _device_label(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return f"{device} ({torch.cuda.get_device_name(0)})"
    return device


# --------------------------------------------------------------------------- cache


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def notebook_source_hash(path: Path) -> str:
    """Hash of a notebook's cells (type, source, tags); outputs and other metadata are ignored."""
    nb = json.loads(Path(path).read_text())
    cells = [(c.get("cell_type"), "".join(c.get("source", "")),
              sorted(c.get("metadata", {}).get("tags", []))) for c in nb.get("cells", [])]
    return _sha(json.dumps(cells, sort_keys=True).encode())


def library_hash(root: Path) -> str:
    """Hash of every file of the ``attnsvm`` package source (``lib/``)."""
    files = sorted(p for p in (Path(root) / "lib").rglob("*.py") if "__pycache__" not in p.parts)
    return _sha(*(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() for p in files))


def environment_hash(root: Path) -> str:
    """Hash of the pinned package versions and the Python version."""
    parts = [platform.python_version().encode()]
    for name in ("requirements.txt", "requirements-nodeps.txt", "constraints.txt"):
        p = Path(root) / name
        parts.append(p.read_bytes() if p.is_file() else b"")
    return _sha(*parts)


def cache_key(root: Path, notebook: str, parameters: dict, device: str,
              lib_hash: str | None = None, env_hash: str | None = None) -> str:
    """The cache key of one execution: source, parameters, library, environment and device."""
    return _sha(notebook_source_hash(Path(root) / notebook).encode(),
                json.dumps(parameters, sort_keys=True, default=str).encode(),
                (lib_hash or library_hash(root)).encode(),
                (env_hash or environment_hash(root)).encode(),
                device.encode())


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------- execution


def _describe_failure(notebook: str, exc: BaseException) -> str:
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        return (f"{notebook}: cell {exc.cell_index} (execution count {exc.exec_count}) raised "
                f"{exc.ename}: {exc.evalue}")
    return f"{notebook}: execution failed with {type(exc).__name__}: {exc}"


def _execute_one(root: Path, notebook: str, parameters: dict, out_path: Path,
                 failed_path: Path, kernel_name: str, strict_claims: bool = False) -> None:
    """Run one notebook with papermill; write it atomically to ``out_path`` only on success.

    ``strict_claims``: the kernel runs with ``ATTNSVM_STRICT_CLAIMS=1``, so a false checked claim
    (:func:`attnsvm.book.claim`) raises and fails the notebook. The book's build sets it; a
    reader's ``run`` or ``sweep`` does not (a false claim then warns). The variable is restored
    afterwards, so the calling process is not changed.
    """
    import papermill

    from ..claims import STRICT_ENV

    old_strict = os.environ.get(STRICT_ENV)
    if strict_claims:
        os.environ[STRICT_ENV] = "1"
    else:
        os.environ.pop(STRICT_ENV, None)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    failed_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_path.parent, prefix=".tmp-", suffix=".ipynb")
    os.close(fd)
    try:
        papermill.execute_notebook(
            str(Path(root) / notebook), tmp, parameters=parameters, kernel_name=kernel_name,
            cwd=str((Path(root) / notebook).parent), progress_bar=False, log_output=False,
            # the kernel's own log (a transport notice on every start, "KeyboardInterrupt
            # caught" when jupyter_client interrupts it at shutdown) is not the build's
            # business: errors in cells still surface through papermill
            extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
        )
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            # keep the executed-with-error notebook for inspection, never in the cache tree
            os.replace(tmp, failed_path)
        raise
    finally:
        if old_strict is None:
            os.environ.pop(STRICT_ENV, None)
        else:
            os.environ[STRICT_ENV] = old_strict


def execute_notebooks(root: Path, profile: str, *, only: str | None = None, force: bool = False,
                      build_dir: Path | None = None, kernel_name: str = "python3",
                      toc: str | os.PathLike | None = None, log=print, workers: int | None = 1,
                      scheduler: str | None = None, resources: dict | None = None,
                      progress_bar: bool | None = None) -> list[NotebookResult]:
    """Execute the notebooks of ``_toc.yml`` under ``profile``, using the cache.

    Returns one :class:`NotebookResult` per notebook, in the order of the table of contents.
    With ``only``, the other notebooks are reported from the cache when they are cached there
    and as ``skipped`` otherwise. ``toc`` replaces ``_toc.yml`` by another table of contents
    (a part of the book).

    ``workers=1`` without ``scheduler`` executes in this process, one notebook after another.
    Otherwise the notebooks are Dask tasks (:mod:`attnsvm.book.parallel`) on a local cluster of
    ``workers`` processes, or on the cluster at ``scheduler``; ``resources`` (e.g.
    ``{"GPU": 1}``) is what each task needs of a worker. Either way: one progress line per
    notebook as it finishes, each success cached at once (atomically), a failure reported with
    its notebook, cell and exception while the others still run, and the report names the worker
    and device of each execution.
    """
    from .parallel import Progress, device_resolver, make_job, run_jobs, threads_per_worker

    root = Path(root)
    build_dir = Path(build_dir or root / BUILD_DIR)
    subset = toc is not None
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
    threads = None if (scheduler is not None or not parallel) else threads_per_worker(workers)
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
        device = resolve(dev_param)
        key = cache_key(root, nb, params, device, lib_h, env_h)
        out_path, record_path, failed_path = paths(nb)
        record = _read_json(record_path)
        cached = (not force and record is not None and record.get("key") == key
                  and out_path.is_file())
        if cached:
            results[nb] = NotebookResult(nb, profile, params, str(out_path), record["seconds"],
                                         True, record["device"], "ok",
                                         worker=record.get("worker"))
            progress.step(f"{nb}: cached ({record['seconds']:.1f} s when executed, "
                          f"{record['device']})")
            continue
        if only is not None and nb != only:
            results[nb] = NotebookResult(nb, profile, params, None, None, False, device,
                                         "skipped")
            progress.step(f"{nb}: skipped (--only {only}; not cached under this profile)")
            continue
        if record_path.exists():
            record_path.unlink()  # the old record no longer describes what will be there
        keys[nb] = (key, device)
        jobs.append(make_job(root, nb, params, out_path, failed_path, device=dev_param,
                             kernel_name=kernel_name, threads=threads,
                             resolved=None if scheduler else device, strict_claims=True))

    def on_result(job, res):
        nb = job["notebook"]
        params = job["parameters"]
        out_path, record_path, _ = paths(nb)
        worker = res.get("worker")
        on = f" on {worker}" if parallel and worker else ""
        if res["status"] != "ok":
            results[nb] = NotebookResult(nb, profile, params, None, res["seconds"], False,
                                         res["device_label"], "failed", res["error"], worker)
            secs = "" if res["seconds"] is None else f" after {res['seconds']:.1f} s"
            progress.step(f"{nb}: FAILED{secs}{on} -- {res['error']}")
            return
        key, device = keys[nb]
        if res["device"] != device:  # the worker resolved 'auto' differently: key by what ran
            key = cache_key(root, nb, params, res["device"], lib_h, env_h)
        _atomic_write_text(record_path, json.dumps(
            {"key": key, "seconds": res["seconds"], "device": res["device_label"],
             "worker": worker, "parameters": params}, indent=1))
        results[nb] = NotebookResult(nb, profile, params, str(out_path), res["seconds"], False,
                                     res["device_label"], "ok", worker=worker)
        progress.step(f"{nb}: executed in {res['seconds']:.1f} s ({res['device_label']}){on}")

    try:
        run_jobs(jobs, on_result, workers=workers, scheduler=scheduler, resources=resources)
    finally:
        progress.close()
    return [results[nb] for nb in toc]


def _literal(src: str):
    import ast

    try:
        return ast.literal_eval(src)
    except (ValueError, SyntaxError):
        return src


def _read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


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


def report_markdown(report: dict) -> str:
    """The table of the rendered execution report page."""
    rows = ["| Notebook | Profile | Parameters | Runtime (s) | Cached | Device | Worker | Status |",
            "|---|---|---|---|---|---|---|---|"]
    for r in report["notebooks"]:
        params = ", ".join(f"`{k}={v!r}`" for k, v in r["parameters"].items()) or "defaults"
        secs = "" if r["seconds"] is None else f"{r['seconds']:.1f}"
        rows.append(f"| {r['notebook']} | {r['profile']} | {params} | {secs} | "
                    f"{'yes' if r['cached'] else 'no'} | {r['device']} | "
                    f"{r.get('worker') or ''} | {r['status']} |")
    pk = ["| Package | Version |", "|---|---|"]
    pk += [f"| {k} | {v} |" for k, v in report["packages"].items()]
    return ("\n".join(rows) + f"\n\nGenerated {report['generated']}. Runtime is the wall-clock "
            "time of the execution that produced the page (for a cached notebook, the time it "
            "took when it was executed).\n\n" + "\n".join(pk) + "\n")


def _sync_file(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` only when the content differs (keeps Sphinx's incremental cache)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_file() and dst.read_bytes() == src.read_bytes():
        return
    shutil.copy2(src, dst)


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
    # MathJax ships with the book: the Sphinx extension attnsvm.book.assets copies it
    for src in sorted((root / "book").rglob("*")):
        if src.is_file() and "__pycache__" not in src.parts:
            dst = stage_dir / src.relative_to(root)
            _sync_file(src, dst)
            wanted.add(dst)
    for r in results:
        dst = stage_dir / r.notebook
        if r.executed_path is None:
            raise BuildError(f"{r.notebook} has no executed copy to stage")
        _sync_file(Path(r.executed_path), dst)
        wanted.add(dst)
    page = stage_dir / REPORT_TEMPLATE
    template = (root / REPORT_TEMPLATE).read_text()
    if REPORT_MARKER not in template:
        raise BuildError(f"{REPORT_TEMPLATE} lacks the marker {REPORT_MARKER}")
    _sync_text(template.replace(REPORT_MARKER, report_markdown(report)), page)
    # remove staged files that no longer exist in the sources (no stale pages)
    for p in sorted(stage_dir.rglob("*"), reverse=True):
        if p.is_file() and p not in wanted and "_build" not in p.relative_to(stage_dir).parts:
            p.unlink()


def render(stage_dir: Path, out_root: Path, *, strict: bool = True) -> None:
    """Run ``jupyter-book build`` on the staging tree; HTML goes to ``out_root/_build/html``."""
    exe = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(stage_dir),
           "--path-output", str(out_root)]
    if strict:
        cmd += ["-W", "-n", "--keep-going"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-60:])
        raise BuildError(f"jupyter-book build failed (exit {proc.returncode}):\n{tail}")


def build(root: str | os.PathLike | None = None, profile: str = "quick", *,
          only: str | None = None, force: bool = False, render_html: bool = True,
          build_dir: str | os.PathLike | None = None, toc: str | os.PathLike | None = None,
          log=print, workers: int | None = 1, scheduler: str | None = None,
          resources: dict | None = None, progress_bar: bool | None = None) -> dict:
    """Execute (with cache) and render the book. Returns the execution report.

    ``build_dir`` defaults to ``<root>/_build``; the HTML lands in ``<build_dir>/html``. ``toc``
    builds a part of the book from another table of contents (for working on a few chapters).
    ``workers``, ``scheduler`` and ``resources``: see :func:`execute_notebooks` (the command
    line's default is one worker per core; this function's is the serial, in-process run).

    Raises
    ------
    BuildError
        Bad configuration (before anything runs) or a failed render.
    NotebookFailed
        One or more notebooks raised; the message names each notebook, cell and exception.
    """
    root = find_root(root)
    build_dir = Path(build_dir) if build_dir is not None else root / BUILD_DIR
    if build_dir.name != BUILD_DIR:
        raise BuildError(f"build_dir must be a directory named {BUILD_DIR!r}, got {build_dir}")
    t0 = time.perf_counter()
    results = execute_notebooks(root, profile, only=only, force=force, build_dir=build_dir,
                                toc=toc, log=log, workers=workers, scheduler=scheduler,
                                resources=resources, progress_bar=progress_bar)
    report = write_report(results, build_dir / "execution-report.json")
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise NotebookFailed("notebook execution failed; nothing was rendered:\n  "
                             + "\n  ".join(r.error for r in failed))
    skipped = [r for r in results if r.status == "skipped"]
    if render_html and skipped:
        raise BuildError(f"cannot render: {len(skipped)} notebook(s) have no cached execution "
                         f"under profile {profile!r} ({', '.join(r.notebook for r in skipped)}); "
                         f"run a full build first, or pass --no-render (the executed notebooks "
                         f"are cached)")
    if render_html:
        stage(root, results, report, build_dir / "stage", toc=toc)
        render(build_dir / "stage", build_dir.parent)
        log(f"built in {time.perf_counter() - t0:.1f} s: {build_dir / 'html' / 'index.html'}")
    return report


def strip_outputs(path: str | os.PathLike) -> bool:
    """Remove outputs and execution counts from a notebook in place; True if it changed.

    Notebooks are committed without outputs: the build executes them.
    """
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    changed = False
    for cell in nb.cells:
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None):
            cell.outputs, cell.execution_count = [], None
            changed = True
    if changed:
        _atomic_write_text(Path(path), nbformat.writes(nb) + "\n")
    return changed


def main(argv=None) -> int:
    """The command line ``python -m attnsvm.book`` (see :mod:`attnsvm.book.cli`)."""
    from .cli import main as cli_main

    return cli_main(argv)
