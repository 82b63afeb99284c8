"""One notebook, one page: ``python -m attnsvm_book run notebooks/X.ipynb -p name value ...``.

:func:`run_notebook` checks every ``-p`` against the notebook's parameters cell (names and
types, :mod:`attnsvm_book.params`) before anything runs, executes the notebook with papermill
(optionally on top of a profile's parameters), and renders that notebook alone as an HTML page
with the book's configuration — its math macros, MathJax settings and glued figures — through
Jupyter Book, in a small project of its own under ``<build_dir>/run/<notebook>/``. Cross
references to the book's chapters do not resolve in a page of its own; they are shown as text.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import yaml

from ._core import (BUILD_DIR, STAGED_FILES, BuildError, BuildLock, NotebookFailed,
                    _atomic_write_text, _literal, find_root, notebook_parameters, render)
from .parallel import make_job, run_job
from .params import resolve_profile, validate_overrides

__all__ = ["run_notebook", "stage_single"]


def relative_notebook(root: Path, notebook) -> str:
    """``notebook`` (a path, absolute or relative to the cwd or to ``root``) relative to the
    book's root; a clear BuildError when it does not exist or lies outside the root."""
    path = Path(notebook)
    if not path.is_absolute() and not path.is_file():
        path = root / path
    if not path.is_file():
        raise BuildError(f"notebook {notebook} not found")
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        raise BuildError(f"notebook {notebook} is not inside the book's root {root}") from None


def stage_single(root: Path, executed: Path, stage_dir: Path) -> Path:
    """A Jupyter Book project holding only ``executed`` (plus the book's configuration and
    bibliography); returns the staged notebook's path."""
    root, stage_dir = Path(root), Path(stage_dir)
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    stage_dir.mkdir(parents=True)
    config = yaml.safe_load((root / "_config.yml").read_text()) or {}
    mathjax = os.environ.get("ATTNSVM_MATHJAX_PATH")
    if mathjax:  # the same offline-math switch as the book's build
        config.setdefault("sphinx", {}).setdefault("config", {})["mathjax_path"] = mathjax
    for name in STAGED_FILES:
        if name != "_toc.yml" and name != "_config.yml" and (root / name).is_file():
            shutil.copy2(root / name, stage_dir / name)
    for bib in config.get("bibtex_bibfiles", []) or []:
        if (root / bib).is_file():
            (stage_dir / bib).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / bib, stage_dir / bib)
    for static in ("_static", "book/_static"):
        if (root / static).is_dir():
            shutil.copytree(root / static, stage_dir / static, dirs_exist_ok=True)
    page = stage_dir / executed.name
    shutil.copy2(executed, page)
    _atomic_write_text(stage_dir / "_config.yml", yaml.safe_dump(config, sort_keys=False))
    _atomic_write_text(stage_dir / "_toc.yml", yaml.safe_dump(
        {"format": "jb-book", "root": page.stem}, sort_keys=False))
    return page


def run_notebook(notebook, overrides=(), *, root=None, profile: str | None = None,
                 build_dir=None, render_html: bool = True, kernel_name: str = "python3",
                 log=print) -> dict:
    """Execute one notebook with ``-p`` overrides and render it alone as an HTML page.

    Parameters
    ----------
    notebook : path
        The notebook (relative to the current directory or the book's root).
    overrides : iterable of (str, str)
        ``-p name value`` pairs as given on the command line; checked (names and types) before
        anything runs.
    profile : str, optional
        Start from this profile's parameters (default: the notebook's own defaults).
    build_dir : path, optional
        Default ``<root>/_build``; the run goes to ``<build_dir>/run/<notebook name>/``.

    Returns
    -------
    dict
        ``{"notebook", "parameters", "executed", "html", "seconds", "device"}`` (``html`` is None
        with ``render_html=False``).

    Raises
    ------
    ParameterError
        A bad ``-p`` (one line), before anything runs.
    NotebookFailed
        The notebook raised (the message names the cell and the exception).
    """
    root = find_root(root)
    nb = relative_notebook(root, notebook)
    params = validate_overrides(root / nb, list(overrides), root=root)
    if profile is not None:
        params = {**resolve_profile(root, profile, [nb], subset=True)[nb], **params}
    build_dir = Path(build_dir) if build_dir is not None else root / BUILD_DIR
    base = build_dir / "run" / Path(nb).stem
    executed = base / Path(nb).name
    failed = base / "failed" / Path(nb).name
    defaults = notebook_parameters(root / nb)
    device = str(params.get("device", _literal(defaults.get("device", "'auto'"))))
    with BuildLock(build_dir):  # one writer at a time; an unwritable directory fails here
        shown = ", ".join(f"{k}={v!r}" for k, v in params.items()) or "its defaults"
        log(f"running {nb} with {shown}")
        res = run_job(make_job(root, nb, params, executed, failed, device=device,
                               kernel_name=kernel_name))
        if res["status"] != "ok":
            raise NotebookFailed(f"{res['error']} (the executed copy is kept in {failed})")
        log(f"executed in {res['seconds']:.1f} s ({res['device_label']}): {executed}")
        html = None
        if render_html:
            t0 = time.perf_counter()
            page = stage_single(root, executed, base / "stage")
            render(base / "stage", base, strict=False)
            html = base / "_build" / "html" / (page.stem + ".html")
            if not html.is_file():
                raise BuildError(f"jupyter-book reported success but wrote no {html}")
            log(f"rendered in {time.perf_counter() - t0:.1f} s: {html}")
    return {"notebook": nb, "parameters": params, "executed": str(executed),
            "html": None if html is None else str(html), "seconds": res["seconds"],
            "device": res["device_label"]}
