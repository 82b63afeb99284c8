"""The ``paper`` profile on a CUDA machine, with the build's own scheduling (issue 25.6).

Every notebook of ``_toc.yml`` but those of ``--skip`` (default: ch12a and ch12b, which need data
on disk) runs once under ``paper`` on the workers of the build's local cluster,
:func:`attnsvm_book.parallel.worker_plan`: a notebook with a ``device`` parameter on a GPU
worker (one per card by default, ``ATTNSVM_GPU_WORKERS_PER_CARD``), each seeing only its card,
every other notebook on a CPU worker, which sees none. Each execution is its own process (a
papermill run, or ``shared/tools/nbexec.py`` (in the checkout or beside it) where
Jupyter/papermill are absent), so that ``--limit`` can stop it: a notebook still running after
``--limit`` seconds is killed and, with papermill, rerun with its step counts divided by
``--factor``; its projected time is that run's time times the factor (as
``benchmarks/paper_profile.py`` does). A notebook not started by
``--deadline`` seconds is reported as not started. Claims are not strict here: a false claim
is counted and named, not raised.

Printed per notebook: wall seconds (or how it ended and the projection), the device it ran on,
the engine path of its ``fit`` calls (``$ATTNSVM_ENGINE_LOG``: ``cuda-graph``, ``eager``, ...)
and its checked claims. The last line is
``paper_minutes=<m> claims_failing=<k> unfinished=<u>``: ``m`` the wall-clock minutes of the
run, plus, for each notebook stopped at the limit, its projected time beyond the limit (added
serially, so an upper estimate); ``k`` the failing claims of the finished notebooks; ``u``
the notebooks that did not finish (stopped, failed or not started).

On a machine without CUDA it prints one line saying so and exits with status 2.

Usage::

    python benchmarks/gpu_profile.py [--limit 240] [--deadline 540] [--only ch08_global ...]
        [--workers N] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SKIP = ("ch12a_vit", "ch12b_text")


def _has_papermill() -> bool:
    try:
        import papermill  # noqa: F401
    except ImportError:
        return False
    return True


def _cell_call(path, i):
    """The first line of the ``i``-th code cell of a notebook that is not an import (the call a
    stopped run was in), at most 60 characters."""
    try:
        cells = [c for c in json.loads(Path(path).read_text())["cells"] if c["cell_type"] == "code"]
        lines = "".join(cells[i]["source"]).splitlines()
    except (OSError, ValueError, KeyError, IndexError):
        return "?"
    calls = [ln.strip() for ln in lines
             if ln.strip() and not ln.lstrip().startswith(("import ", "from ", "#"))]
    return (calls or lines or ["?"])[0][:60]


def _nbexec(root, notebook, limit, workdir, tag, env):
    """One execution by ``../shared/tools/nbexec.py`` (no Jupyter needed), as a record of
    :func:`paper_profile.execute`'s form."""
    tools = [root / "shared" / "tools" / "nbexec.py", root.parent / "shared" / "tools" / "nbexec.py"]
    tool = next((t for t in tools if t.is_file()), None)
    if tool is None:
        return {"notebook": notebook, "status": "failed", "seconds": 0.0, "claims": {},
                "why": f"no papermill and no nbexec.py (looked in {[str(t) for t in tools]})"}
    out = Path(workdir) / f"{Path(notebook).stem}.{tag}"
    out.mkdir(parents=True, exist_ok=True)   # nbexec.py writes its log there before anything
    cmd = [sys.executable, str(tool), "--proj", str(root), "--profile", "paper", "--out",
           str(out), "--only", Path(notebook).stem, "--jobs", "1", "--deadline", str(limit)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    try:
        recs = json.loads((out / "results.json").read_text())
        r = next(v for k, v in recs.items() if k.startswith(Path(notebook).stem))
    except (OSError, ValueError, StopIteration):
        return {"notebook": notebook, "status": "failed", "seconds": seconds, "claims": {},
                "why": proc.stderr.strip()[-300:]}
    status = {"ok": "finished", "killed at deadline": "stopped"}.get(r.get("status"), "failed")
    claims = {k: ("holds" if str(w) == "holds" else "fails")
              for k, w in (r.get("claims") or {}).items() if not k.endswith("_detail")}
    # a stopped run's record says ">240" and which cell was running (its first line)
    own = r.get("seconds")
    running = [c for c in r.get("cells", []) if c.get("status") == "running"]
    why = (r.get("error") or "")[-300:] or None
    if status == "stopped" and running:
        why = f"in cell {running[-1]['i']}: {_cell_call(root / notebook, running[-1]['i'])}"
    return {"notebook": notebook, "status": status,
            "seconds": own if isinstance(own, (int, float)) else seconds,
            "claims": claims if status == "finished" else {}, "why": why,
            "cuda_max_mem_MiB": r.get("cuda_max_mem_MiB")}


def _run(root, notebook, params, limit, slot, threads, workdir, tag):
    """One execution on ``slot`` (a worker of the plan); adds ``device`` and ``engine``."""
    from attnsvm._env import ENGINE_LOG_ENV
    from attnsvm_book.parallel import THREAD_VARIABLES, engine_summary

    log = Path(workdir) / f"{Path(notebook).stem}.{tag}.engines"
    env = {**slot["env"], ENGINE_LOG_ENV: str(log),
           **{k: str(threads) for k in THREAD_VARIABLES}}
    if _has_papermill():
        import paper_profile
        rec = paper_profile.execute(root, notebook, params, limit, None, Path(workdir), tag, env)
    else:
        rec = _nbexec(root, notebook, limit, workdir, tag, env)
    card = slot["env"].get("CUDA_VISIBLE_DEVICES")
    rec["device"] = f"cuda:{card}" if card else "cpu"
    rec["engine"] = engine_summary(log.read_text().splitlines() if log.exists() else [])
    return rec


def _fmt(s):
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=float, default=240.0, help="seconds per notebook run")
    ap.add_argument("--deadline", type=float, default=540.0,
                    help="no notebook starts after this many seconds")
    ap.add_argument("--factor", type=int, default=20, help="step divisor of a projection run")
    ap.add_argument("--only", nargs="*", default=None, help="notebook stems")
    ap.add_argument("--skip", nargs="*", default=list(SKIP), help="notebook stems left out")
    ap.add_argument("--workers", type=int, default=None, help="workers (default: the cores)")
    ap.add_argument("--json", default=None, help="write the records here")
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("gpu_profile: needs CUDA (torch sees no CUDA device on this machine); nothing was run")
        return 2
    sys.path.insert(0, str(HERE))
    from attnsvm_book import find_root
    from attnsvm_book._core import notebook_parameters, toc_notebooks
    from attnsvm_book.params import resolve_profile
    from attnsvm_book.parallel import default_workers, threads_per_worker, worker_plan

    root = find_root()
    stems = {Path(nb).stem: nb for nb in toc_notebooks(root)}
    wanted = args.only or [s for s in stems if s not in set(args.skip)]
    bad = sorted(set(wanted) - set(stems))
    if bad:
        ap.error(f"unknown notebooks {bad}; known: {sorted(stems)}")
    notebooks = [stems[s] for s in wanted]
    params = resolve_profile(root, "paper", notebooks, subset=True)
    plan = worker_plan(args.workers or default_workers(), torch.cuda.device_count())
    threads = threads_per_worker(len(plan))
    uses = {nb: "device" in params[nb] or "device" in notebook_parameters(root / nb)
            for nb in notebooks}
    queues = {"gpu": [nb for nb in notebooks if uses[nb]],
              "cpu": [nb for nb in notebooks if not uses[nb]]}
    print(f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}; workers: "
          f"{sum(w['resources'] == {'GPU': 1} for w in plan)} GPU, "
          f"{sum(w['resources'] != {'GPU': 1} for w in plan)} CPU; limit {args.limit:.0f} s per "
          f"notebook; {'papermill' if _has_papermill() else 'nbexec.py'}", flush=True)
    records, lock, t_start = {}, threading.Lock(), time.perf_counter()

    def work(slot, kind, tmp):
        while True:
            with lock:
                if not queues[kind]:
                    return
                nb = queues[kind].pop(0)
            if time.perf_counter() - t_start > args.deadline:
                records[nb] = {"notebook": nb, "status": "not started", "seconds": 0.0,
                               "device": "-", "engine": "-", "claims": {}}
                continue
            rec = _run(root, nb, params[nb], args.limit, slot, threads, tmp, "paper")
            if rec["status"] == "stopped" and _has_papermill():   # nbexec takes no parameters
                from paper_profile import scale_steps   # (nbformat, psutil: with papermill only)
                small = _run(root, nb, scale_steps(params[nb], args.factor), args.limit, slot,
                             threads, tmp, f"div{args.factor}")
                if small["status"] == "finished":
                    rec["projection"] = small["seconds"] * args.factor
            records[nb] = rec
            proj = f"; projected {_fmt(rec['projection'])}" if rec.get("projection") else ""
            print(f"  {Path(nb).stem:28s} {rec['status']:9s} {rec['seconds']:7.1f} s{proj}  "
                  f"{rec['device']:7s} {rec['engine']}", flush=True)

    with tempfile.TemporaryDirectory(prefix="gpu-profile-") as tmp:
        pool = [threading.Thread(target=work, args=(w, "gpu" if w["resources"] == {"GPU": 1}
                                                    else "cpu", tmp)) for w in plan]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    wall = time.perf_counter() - t_start
    print("| notebook | time | device | engine | claims |\n|---|---|---|---|---|")
    failing, unfinished, extra = 0, 0, 0.0
    for nb in notebooks:
        r = records[nb]
        claims = r.get("claims") or {}
        bad_claims = sorted(k for k, w in claims.items() if w == "fails")
        failing += len(bad_claims)
        if r["status"] != "finished":
            unfinished += 1
        if r.get("projection"):
            extra += max(0.0, r["projection"] - r["seconds"])
        when = (_fmt(r["seconds"]) if r["status"] == "finished" else
                f"{r['status']}" + (f" after {_fmt(r['seconds'])}" if r["seconds"] else "")
                + (f", projected {_fmt(r['projection'])}" if r.get("projection") else "")
                + (f" ({r['why'][:80]})" if r.get("why") and r["status"] != "finished" else ""))
        cl = ("" if not claims else f"all {len(claims)} hold" if not bad_claims else
              f"{len(claims) - len(bad_claims)}/{len(claims)} hold; fail: " + ", ".join(bad_claims))
        print(f"| {Path(nb).stem} | {when} | {r['device']} | {r['engine']} | {cl} |")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1, default=str))
    print(f"paper_minutes={(wall + extra) / 60:.1f} claims_failing={failing} unfinished={unfinished}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
