"""The quick build of a fixed subset of notebooks, serially and on 2 Dask workers, side by side.

Both runs execute the same notebooks under the ``quick`` profile with ``force=True`` (no cache)
into separate temporary build directories, without rendering (``build --no-render``):

* serial: ``workers=1``, the notebooks one after another in this process's kernels (each kernel
  with the default number of torch/BLAS threads);
* parallel: ``workers=2``, a ``distributed.LocalCluster`` of 2 worker processes started inside
  the timed region (its start-up is counted), each kernel capped to cores/2 BLAS/torch threads.

Wall-clock time of each whole build, and per notebook. On a shared machine other load lowers
the ratio; run it when the machine is otherwise idle for a clean figure, or with ``--repeat 2``
(serial and parallel alternate; the best time of each is compared).

The last line printed is ``parallel_speedup=<serial seconds / parallel seconds>``.

Usage: ``python benchmarks/build_parallel.py [--workers 2] [--repeat 1] [--notebooks NB ...]``
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import yaml

from attnsvm_book import build, find_root

#: a fixed subset of the book's notebooks, each well under a minute under the quick profile
SUBSET = ("notebooks/ch01_separable.ipynb", "notebooks/ch09_rates.ipynb",
          "notebooks/ch10_sparsity.ipynb", "notebooks/ch07_beyond.ipynb")


def _timed_build(root: Path, toc: Path, build_dir: Path, workers: int) -> tuple[float, dict]:
    t0 = time.perf_counter()
    report = build(root, "quick", force=True, render_html=False, toc=toc, build_dir=build_dir,
                   workers=workers, log=lambda m: print("   ", m, flush=True), progress_bar=False)
    seconds = time.perf_counter() - t0
    per = {e["notebook"]: e["seconds"] for e in report["notebooks"]}
    bad = [e["notebook"] for e in report["notebooks"] if e["status"] != "ok"]
    if bad:
        raise SystemExit(f"notebooks failed: {bad}")
    return seconds, per


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--notebooks", nargs="+", default=list(SUBSET))
    parser.add_argument("--repeat", type=int, default=1,
                        help="alternate serial and parallel builds this many times; the best "
                             "(smallest) wall time of each is compared")
    args = parser.parse_args(argv)
    root = find_root(Path(__file__).resolve().parent)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} before; "
          f"notebooks: {', '.join(args.notebooks)}")
    with tempfile.TemporaryDirectory(prefix="build-parallel-") as tmp:
        tmp = Path(tmp)
        toc = tmp / "toc.yml"
        toc.write_text(yaml.safe_dump({"format": "jb-book", "root": "book/intro", "chapters": [
            {"file": nb.removesuffix(".ipynb")} for nb in args.notebooks]}))
        t_serial = t_par = float("inf")
        for rep in range(args.repeat):
            print(f"serial (workers=1), run {rep + 1}:", flush=True)
            t, per = _timed_build(root, toc, tmp / f"serial{rep}" / "_build", 1)
            if t < t_serial:
                t_serial, per_serial = t, per
            print(f"parallel (workers={args.workers}), run {rep + 1}:", flush=True)
            t, per = _timed_build(root, toc, tmp / f"parallel{rep}" / "_build", args.workers)
            if t < t_par:
                t_par, per_par = t, per
    print(f"{'notebook':<40} {'serial s':>9} {'parallel s':>11}")
    for nb in args.notebooks:
        print(f"{nb:<40} {per_serial[nb]:>9.1f} {per_par[nb]:>11.1f}")
    print(f"{'whole build (wall clock)':<40} {t_serial:>9.1f} {t_par:>11.1f}")
    print(f"load average {os.getloadavg()[0]:.1f} after (other processes share these cores)")
    print(f"sum of notebook times / parallel wall time: {sum(per_par.values()) / t_par:.2f} "
          f"(notebooks running at once, on average)")
    print(f"parallel_speedup={t_serial / t_par:.2f}")


if __name__ == "__main__":
    main()
