"""The ``paper`` profile on this machine, timed, beside the ``quick`` profile.

For every notebook of ``_toc.yml``: one papermill execution under ``quick`` (no limit) and one
under ``paper`` with a wall-clock limit (``--limit`` seconds), each in its own process, into a
temporary directory (``--keep DIR`` keeps the executed copies). papermill saves the executed
copy at the start and end of every cell, so a ``paper`` run stopped at the limit (its whole
process tree is killed) still tells how far it got: the code cells completed and the driver
call that was running. Each notebook's work sits in one driver call, so that count says
little; a run stopped at the limit is therefore repeated with every step count of the profile
(parameters named ``*steps*`` and ``horizons``) divided by each of ``--factors`` in turn, until
one finishes, and the table gives the *projected* time, that run's time multiplied by the
factor (an overestimate by the fixed costs, such as SVM solves and imports, times the factor
minus one). A finished ``paper`` run's checked claims (the glued words of
:mod:`attnsvm.claims`; the runs are not strict, so a false claim is reported, not raised) are
counted, the failing ones named; for a stopped run, the claims of the scaled run that finished
(by default steps / 10, an intermediate size between ``quick`` and ``paper``) are reported in
its place, marked with the factor. ``--scaled-limit`` gives the scaled runs their own limit
(``--limit 1 --scaled-limit 600 --only ch09_rates`` checks ch09's claims at steps / 10 without
waiting for the full run).
A notebook whose data files are not on disk (it raises
:class:`attnsvm.datasets.DataNotFoundError`) is reported as skipped, with the error's message.

Wall-clock seconds; ``--jobs`` executions run at once (default 2, one per core of the machine
the table was first made on), each kernel with one BLAS/torch thread when ``--jobs`` > 1.

Output: a Markdown table on stdout (also written to ``--out``) and the raw records as JSON
(``--json``). The last line printed is ``finished=<k>/<n> stopped=<m> skipped=<s>``.

Usage::

    python benchmarks/paper_profile.py [--limit 360] [--jobs 2] [--only ch09_rates ...]
        [--out paper_profile.md] [--json paper_profile.json] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import psutil
import torch
import yaml

from attnsvm_book import find_root, glue_records
from attnsvm_book._core import toc_notebooks
from attnsvm_book.params import resolve_profile


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every descendant (papermill's kernel is a child process)."""
    try:
        proc = psutil.Process(pid)
        procs = proc.children(recursive=True) + [proc]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


def _headline(source: str) -> str:
    """The line of a cell that says what it runs: its first assignment from a call that is not
    a container or numpy (such as ``res = rates.rates_experiment(...``), else its first line."""
    lines = [ln.strip() for ln in source.splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    calls = [ln for ln in lines if (m := re.match(r"^[\w, ]+=\s*([\w.]+)\(", ln))
             and not m.group(1).startswith(("dict", "list", "tuple", "np.", "A.plot"))]
    return (calls or lines or [""])[0]


def _progress(path: Path) -> dict:
    """How far the (possibly partial) executed copy at ``path`` got."""
    try:
        nb = nbformat.read(str(path), as_version=4)
    except (OSError, ValueError, nbformat.reader.NotJSONError) as exc:
        return {"cells": None, "done": 0, "done_s": 0.0, "running": None, "error": None,
                "claims": {}, "read_error": f"{type(exc).__name__}: {exc}"}
    code = [c for c in nb.cells if c.cell_type == "code"
            and "injected-parameters" not in c.metadata.get("tags", [])]
    done, done_s, running, error = 0, 0.0, None, None
    for c in code:
        meta = c.metadata.get("papermill", {})
        if meta.get("status") == "completed" and not meta.get("exception"):
            done += 1
            done_s += float(meta.get("duration") or 0.0)
        elif meta.get("status") == "running" and running is None:
            running = _headline(c.source)
        for out in c.get("outputs", []):
            if out.get("output_type") == "error" and error is None:
                error = (out.get("ename"), out.get("evalue"))
    claims = {}
    if done == len(code):                # the checked claims of a finished run (glued words)
        for name, rec in glue_records(path).items():
            word = str(rec.get("text/plain", "")).strip("'\"")
            if name.startswith("claim_") and not name.endswith("_detail") and word in ("holds", "fails"):
                claims[name[len("claim_"):]] = word
    return {"cells": len(code), "done": done, "done_s": done_s, "running": running,
            "error": error, "claims": claims}


def execute(root: Path, notebook: str, params: dict, limit: float | None, threads: int | None,
            workdir: Path, tag: str, env: dict | None = None) -> dict:
    """One papermill execution of ``notebook`` with ``params``; wall seconds and how it ended.
    ``env``: variables set for the execution (e.g. ``CUDA_VISIBLE_DEVICES``)."""
    out = workdir / f"{Path(notebook).stem}.{tag}.ipynb"
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    if threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(threads)
    cmd = [sys.executable, "-m", "papermill", str(root / notebook), str(out),
           "-y", yaml.safe_dump(params or {}, default_flow_style=True),
           "--cwd", str((root / notebook).parent), "--no-progress-bar",
           "--request-save-on-cell-execute"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=limit)
        status = "finished" if proc.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)
        _, err = proc.communicate()
        status = "stopped"
    seconds = time.perf_counter() - t0
    rec = {"notebook": notebook, "profile": tag, "status": status, "seconds": seconds,
           **_progress(out)}
    if status == "failed":
        ename, evalue = rec["error"] or (None, None)
        if ename == "DataNotFoundError":
            rec["status"] = "skipped"
            rec["why"] = str(evalue).splitlines()[0] if evalue else "data files missing"
        else:
            tail = (err or b"").decode(errors="replace").strip().splitlines()[-3:]
            rec["why"] = f"{ename}: {evalue}" if ename else " / ".join(tail)
    return rec


def scale_steps(params: dict, factor: int) -> dict:
    """``params`` with every step count (names containing ``steps``, and ``horizons``) divided
    by ``factor`` (at least 1)."""
    def div(v):
        if isinstance(v, bool) or not isinstance(v, (int, list, tuple)):
            return v
        return [div(x) for x in v] if isinstance(v, (list, tuple)) else max(1, round(v / factor))
    return {k: (div(v) if ("steps" in k or k == "horizons") else v) for k, v in params.items()}


def _fmt_s(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def table(records: list[dict], limit: float) -> str:
    """The Markdown table: notebook, paper-profile CPU time (or how far it got), quick time."""
    by = {}
    for r in records:
        by.setdefault(r["notebook"], {})[r["profile"]] = r
    lines = ["| notebook | `paper` on this CPU | its checked claims | `quick` on this CPU |",
             "|---|---|---|---|"]
    for nb, rs in by.items():
        p, q = rs.get("paper"), rs.get("quick")
        if p is None:
            cell = "not run"
        elif p["status"] == "finished":
            cell = _fmt_s(p["seconds"])
        elif p["status"] == "stopped":
            run = p.get("running") or ""
            call = run.split("(")[0].split("=")[-1].strip()
            cell = f"not finished in {_fmt_s(limit)}" + (f" (in `{call}`)" if call else "")
            proj = p.get("projection")
            if proj:
                cell += (f"; projected {_fmt_s(proj['seconds'] * proj['factor'])} (steps / "
                         f"{proj['factor']}: {_fmt_s(proj['seconds'])})")
        elif p["status"] == "skipped":
            cell = f"skipped: {p['why']}"
        else:
            cell = f"failed: {p.get('why')}"
        qcell = "not run" if q is None else (_fmt_s(q["seconds"]) if q["status"] == "finished"
                                             else f"{q['status']}: {q.get('why')}")
        claims, at = (p or {}).get("claims") or {}, ""
        if not claims and (p or {}).get("projection", {}).get("claims"):
            claims = p["projection"]["claims"]
            at = f"at steps / {p['projection']['factor']}: "
        failing = sorted(k for k, w in claims.items() if w == "fails")
        ccell = ("" if not claims else
                 at + (f"all {len(claims)} hold" if not failing else
                       f"{len(claims) - len(failing)} of {len(claims)} hold; fail: "
                       + ", ".join(f"`{k}`" for k in failing)))
        lines.append(f"| `{Path(nb).stem}` | {cell} | {ccell} | {qcell} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=float, default=360.0, help="seconds per paper-profile run")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="notebook stems")
    ap.add_argument("--factors", type=int, nargs="*", default=[10, 20, 200],
                    help="step divisors for projecting a stopped paper run (and checking its "
                         "claims at that size)")
    ap.add_argument("--scaled-limit", type=float, default=None,
                    help="seconds per scaled run (default: --limit)")
    ap.add_argument("--profiles", nargs="*", default=["quick", "paper"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", default=None, help="keep the executed notebooks in this directory")
    args = ap.parse_args(argv)
    root = find_root()
    notebooks = toc_notebooks(root)
    if args.only:
        stems = {Path(nb).stem: nb for nb in notebooks}
        bad = sorted(set(args.only) - set(stems))
        if bad:
            ap.error(f"--only: unknown notebooks {bad}; known: {sorted(stems)}")
        notebooks = [stems[s] for s in args.only]
    params = {prof: resolve_profile(root, prof, notebooks, subset=True) for prof in args.profiles}
    threads = 1 if args.jobs > 1 else None
    jobs = [(nb, prof) for prof in args.profiles for nb in notebooks]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                            capture_output=True).stdout.strip()
    print(f"commit {commit}; machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"cuda={torch.cuda.is_available()}; {args.jobs} executions at once; paper limit "
          f"{args.limit:.0f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="paper-profile-") as tmp:
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            tmp = args.keep
        def one(job):
            nb, prof = job
            rec = execute(root, nb, params[prof][nb], args.limit if prof == "paper" else None,
                          threads, Path(tmp), prof)
            print(f"  {prof:5s} {Path(nb).stem:28s} {rec['status']:8s} {rec['seconds']:8.1f} s"
                  f"  cells {rec['done']}/{rec['cells']}", flush=True)
            for f in (args.factors if rec["status"] == "stopped" else []):
                small = execute(root, nb, scale_steps(params[prof][nb], f),
                                args.scaled_limit or args.limit, threads, Path(tmp),
                                f"{prof}-div{f}")
                print(f"  {prof}/{f:<4d}{Path(nb).stem:28s} {small['status']:8s} "
                      f"{small['seconds']:8.1f} s", flush=True)
                if small["status"] == "finished":
                    rec["projection"] = {"factor": f, "seconds": small["seconds"],
                                         "claims": small.get("claims") or {}}
                    break
                if small["status"] != "stopped":
                    rec["projection_failed"] = f"steps / {f}: {small.get('why')}"
                    break
            return rec
        with ThreadPoolExecutor(args.jobs) as pool:
            records = list(pool.map(one, jobs))
    md = table(records, args.limit)
    print(md)
    if args.out:
        Path(args.out).write_text(md + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1, default=str))
    paper = [r for r in records if r["profile"] == "paper"]
    count = {s: sum(r["status"] == s for r in paper) for s in ("finished", "stopped", "skipped")}
    print(f"finished={count['finished']}/{len(paper)} stopped={count['stopped']} "
          f"skipped={count['skipped']}")


if __name__ == "__main__":
    main()
