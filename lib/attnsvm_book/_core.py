"""The bottom of the build: errors, configuration, the parameters cell, cache keys, atomic
writes, one papermill execution and one Jupyter Book render.

Every other module of :mod:`attnsvm_book` imports from here and this module imports none of
them, so the package has no import circle (``_core`` <- ``params`` <- ``parallel`` <- ``build``,
``run``, ``sweep`` <- ``cli``).
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

PROFILES_FILE = "profiles.yml"
BUILD_DIR = "_build"
#: files of the repository copied into the staging tree (besides book/ and executed notebooks)
STAGED_FILES = ("_config.yml", "_toc.yml")
#: the library the notebooks import, relative to the book's root: its source is in every cache key
LIBRARY_DIR = "lib/attnsvm"

class BuildError(RuntimeError):
    """A build problem found before or after execution (bad profile, unknown notebook, ...)."""


class NotebookFailed(BuildError):
    """A notebook raised during execution."""



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
    try:
        import nbformat
    except ImportError:   # a machine without Jupyter (a lent GPU running nbexec.py): plain JSON
        nbformat = None
    if nbformat is not None:
        cells = nbformat.read(str(path), as_version=4).cells
    else:
        try:
            cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
        except (OSError, ValueError, KeyError) as exc:
            raise BuildError(f"{path}: not a readable notebook: {exc}") from None
    cells = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if not cells:
        raise BuildError(f"{path}: no cell tagged 'parameters'")
    src = cells[0]["source"]
    src = "".join(src) if isinstance(src, list) else src
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


def resolve_device(device: str = "auto") -> str:
    """The device a notebook runs on, as a short string for cache keys (``"cpu"``, ``"cuda"``).

    Delegates to :func:`attnsvm.devices.device_name` (imported lazily: listing and stripping
    notebooks do not import torch).
    """
    from attnsvm.devices import device_name

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
    """Hash of every source file of the library the notebooks import (``lib/attnsvm``): its
    Python modules.

    The build tool itself (``lib/attnsvm_book``), the tests and the tools are not part of it:
    editing them re-executes nothing.
    """
    lib = Path(root) / LIBRARY_DIR
    files = sorted(p for p in lib.rglob("*") if p.suffix == ".py" and p.is_file()
                   and "__pycache__" not in p.parts)
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


def file_hash(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (the content hash a cache record keeps of its artefact)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cache_miss_reason(record: dict | None, key: str, artefact: Path) -> str | None:
    """Why the cache entry ``record`` cannot serve ``artefact`` under ``key``; None when it can.

    ``"not cached"`` and ``"inputs changed"`` are the ordinary misses (nothing is wrong); the
    others say what is wrong with the copy on disk: ``"cached copy missing"``, ``"cached copy
    unreadable"`` (not a notebook: a truncated or half-written file), ``"cached copy does not
    match its recorded hash"`` (changed since it was recorded) and ``"cache record without a
    content hash"`` (written by an older build).
    """
    if record is None:
        return "not cached"
    if record.get("key") != key:
        return "inputs changed"
    artefact = Path(artefact)
    if not artefact.is_file():
        return "cached copy missing"
    try:
        digest = file_hash(artefact)
    except OSError:
        return "cached copy unreadable"
    if digest == record.get("artefact_sha256"):
        return None
    try:
        nb = json.loads(artefact.read_bytes())
        if not isinstance(nb, dict) or "cells" not in nb:
            raise ValueError
    except (OSError, ValueError):
        return "cached copy unreadable"
    if "artefact_sha256" not in record:
        return "cache record without a content hash"
    return "cached copy does not match its recorded hash"


#: the misses that say something is wrong with the cache (printed as "..., re-executing")
DAMAGED = ("cached copy missing", "cached copy unreadable",
           "cached copy does not match its recorded hash", "cache record without a content hash")


def write_record(path: Path, artefact: Path, fields: dict) -> None:
    """Write the cache record of ``artefact`` (atomically), with its content hash."""
    _atomic_write_text(Path(path), json.dumps(
        {**fields, "artefact_sha256": file_hash(artefact)}, indent=1, default=str))


# --------------------------------------------------------------------------- build directory


class BuildLock:
    """The build directory's lock: one writer at a time (``fcntl.flock`` on ``<dir>/.lock``).

    A second build in the same directory is refused at once with a message naming the directory
    and the holder's pid; the kernel drops the lock when the holder exits, however it exits
    (a killed build leaves no stale lock). Creating the directory is the writability check: an
    unwritable build directory is a one-line :class:`BuildError` naming it.
    """

    def __init__(self, build_dir: str | os.PathLike):
        self.build_dir = Path(build_dir)
        self.path = self.build_dir / ".lock"
        self._fh = None

    def __enter__(self):
        import fcntl

        try:
            self.build_dir.mkdir(parents=True, exist_ok=True)
            fh = open(self.path, "a+")
        except OSError as exc:
            raise BuildError(f"cannot write to the build directory {self.build_dir}: "
                             f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise BuildError(f"another build is writing to {self.build_dir} (pid {holder}); wait "
                             f"for it to finish or give another --build-dir") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh
        self._remove_leftovers()
        return self

    def _remove_leftovers(self) -> None:
        """Under the lock no other writer exists: half-written files (``.tmp-*``) are left-overs
        of a killed build or of a killed worker's execution."""
        for tmp in self.build_dir.rglob(".tmp-*"):
            if tmp.is_file():
                tmp.unlink(missing_ok=True)

    def __exit__(self, *exc):
        try:
            self._remove_leftovers()
        finally:
            self._fh.close()  # closing the descriptor releases the lock
            self._fh = None
        return False


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


#: the exception a notebook raises when the data files it needs are not on disk
#: (:class:`attnsvm.datasets.DataNotFoundError`): the build reports it as skipped, not failed
MISSING_DATA = "DataNotFoundError"


def missing_data(exc: BaseException) -> str | None:
    """The message of ``exc`` when a notebook raised :data:`MISSING_DATA` (data not on disk),
    else None."""
    if getattr(exc, "ename", None) == MISSING_DATA:
        return str(getattr(exc, "evalue", "") or exc)
    return None


#: what jupyter_client raises when a kernel exits before its first reply: on a busy machine two
#: kernels starting at once can race for a TCP port ("Address already in use", seen in the
#: slow tier); nothing of the notebook has run then, so it is started again
KERNEL_START_FAILED = "Kernel died before replying to kernel_info"
#: how many times a notebook whose kernel failed to start is started again
KERNEL_START_RETRIES = 2


def kernel_start_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is a kernel that died before running anything (:data:`KERNEL_START_FAILED`)."""
    return isinstance(exc, RuntimeError) and KERNEL_START_FAILED in str(exc)


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
    (:func:`attnsvm.claims.claim`) raises and fails the notebook. The book's build sets it; a
    reader's ``run`` or ``sweep`` does not (a false claim then warns). The kernel also gets the
    notebook's name (``ATTNSVM_NOTEBOOK``, the file's stem), so a notebook never names itself.
    Both variables are restored afterwards, so the calling process is not changed.
    """
    import papermill

    from attnsvm.claims import NOTEBOOK_ENV, STRICT_ENV

    old_strict, old_name = os.environ.get(STRICT_ENV), os.environ.get(NOTEBOOK_ENV)
    os.environ[NOTEBOOK_ENV] = Path(notebook).stem
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
        for name, old in ((STRICT_ENV, old_strict), (NOTEBOOK_ENV, old_name)):
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


_NO_DEFAULT = object()  # a default that is an expression, not a literal


def literal(src: str, fallback=_NO_DEFAULT):
    """The value of the Python literal ``src``; ``fallback`` when it is none (default: the
    marker ``_NO_DEFAULT``). One parser of the parameters cell's values for the whole build."""
    try:
        return ast.literal_eval(src)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return fallback


def _literal(src: str):
    """``src``'s literal value, or ``src`` itself when it is not a literal."""
    return literal(src, src)


def _read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def failing_pages(output: str, stage_dir: Path, sources: dict | None = None) -> list[str]:
    """The pages of the staging tree that Jupyter Book's ``output`` names in an error or a
    warning, each as ``"page P (source S)"``; ``sources`` maps a staged file (relative to
    ``stage_dir``) to where it came from (the executed copy of a notebook)."""
    stage_dir = Path(stage_dir).resolve()
    found = []
    for line in output.splitlines():
        if not any(w in line for w in ("ERROR", "WARNING", "Error", "error:")):
            continue
        for token in line.replace(":", " ").replace(",", " ").split():
            try:
                rel = Path(token).resolve().relative_to(stage_dir)
            except (ValueError, OSError, RuntimeError):
                continue
            rel = str(rel)
            if rel not in found and (stage_dir / rel).is_file():
                found.append(rel)
    out = []
    for rel in found:
        src = (sources or {}).get(rel)
        page = rel.rsplit(".", 1)[0]
        out.append(f"page {page} (source {rel}" + (f", executed copy {src})" if src else ")"))
    return out


def render(stage_dir: Path, out_root: Path, *, strict: bool = True,
           sources: dict | None = None) -> None:
    """Run ``jupyter-book build`` on the staging tree; HTML goes to ``out_root/_build/html``.

    A failure is a :class:`BuildError` whose first line names the pages Jupyter Book complained
    about and their source notebooks (``sources``: staged path -> executed copy), then the tail
    of Jupyter Book's own output.
    """
    exe = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(stage_dir),
           "--path-output", str(out_root)]
    if strict:
        cmd += ["-W", "-n", "--keep-going"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        output = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)  # no colour codes
        pages = failing_pages(output, stage_dir, sources)
        where = "; ".join(pages) if pages else "no page named in its output"
        tail = "\n".join(output.splitlines()[-60:])
        raise BuildError(f"jupyter-book build failed (exit {proc.returncode}) on {where}:\n{tail}")


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

