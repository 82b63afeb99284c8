"""The book's command line, ``python -m attnsvm_book COMMAND``.

::

    build  [--profile P] [--only NB] [--force] [--no-render] [--workers N | --scheduler ADDR]
           [--resources GPU=1] [--toc TOC] [--build-dir DIR]
    list   [--profile P]                       # notebooks, parameters, defaults, overrides
    run    NOTEBOOK [-p NAME VALUE]... [--profile P] [--no-render]
    sweep  NOTEBOOK -p NAME V1,V2,... [-p ...] [--workers N | --scheduler ADDR] [--out FILE]
    strip  NOTEBOOK...                         # remove outputs before committing

Errors are one line on stderr (``error: ...``). A ``-p`` that names no parameter of the notebook,
or gives a value of the wrong type, is refused before anything runs with exit status 2; other
errors (an unknown profile or notebook, a failed execution or render, an unwritable build
directory, another build writing to it) exit with status 1; an interrupt (Ctrl-C, SIGINT) with
status 130, nothing of the interrupted execution cached.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._core import BuildError, find_root, strip_outputs
from .build import build
from .parallel import default_workers, parse_resources
from .params import ParameterError, notebook_defaults, resolve_profile
from .run import run_notebook
from .sweep import sweep

__all__ = ["main", "list_lines"]


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers must be a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"--workers must be a positive integer, got {n}")
    return n


def _add_execution_options(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--workers", type=_workers, default=None,
                   help=f"execute {what} as Dask tasks on a local cluster of N worker processes "
                        f"(default: the number of cores, {default_workers()}; 1 runs them in "
                        "this process, one after another)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="use the existing Dask cluster at ADDRESS (e.g. tcp://host:8786) "
                        "instead of a local one")
    p.add_argument("--resources", default=None, metavar="NAME=AMOUNT[,...]",
                   help="Dask worker resources each execution needs, e.g. GPU=1")
    p.add_argument("--no-progress-bar", action="store_true",
                   help="no progress bar (the bar is shown on a terminal only)")


def _execution_kwargs(args) -> dict:
    if args.scheduler and args.workers:
        raise BuildError("give --workers (a local cluster) or --scheduler (an existing one), "
                         "not both")
    return {"workers": args.workers if args.workers is not None else default_workers(),
            "scheduler": args.scheduler, "resources": parse_resources(args.resources),
            "progress_bar": False if args.no_progress_bar else None}


def list_lines(root: Path, profile: str) -> list[str]:
    """The lines of ``list``: each notebook, then each parameter with its value under ``profile``
    (the notebook's default, or the profile's value marked with the default it replaces)."""
    lines = []
    for nb, params in resolve_profile(root, profile).items():
        lines.append(f"{nb}:")
        defaults = notebook_defaults(Path(root) / nb)
        width = max((len(k) for k in defaults), default=0)
        for name, (src, _) in defaults.items():
            if name in params:
                lines.append(f"    {name:<{width}} = {params[name]!r}   "
                             f"[profile {profile}; default {src}]")
            else:
                lines.append(f"    {name:<{width}} = {src}")
    return lines


def _pairs(items) -> list[tuple[str, str]]:
    return [(name, value) for name, value in (items or [])]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnsvm_book",
        description="The book's build: execute the notebooks under a profile, then render.",
        epilog="Each command has its own --help.")
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="execute the notebooks (cached) and render the book")
    b.add_argument("--profile", default="quick", help="profile of profiles.yml (default: quick)")
    b.add_argument("--only", default=None,
                   help="execute only this notebook (path or file name); renders only when "
                        "every other notebook is cached, else exits 1 (use --no-render)")
    b.add_argument("--force", action="store_true", help="ignore the cache and re-execute")
    b.add_argument("--no-render", action="store_true", help="execute only; do not render HTML")
    b.add_argument("--root", default=None, help="the book's root (default: found from the cwd)")
    b.add_argument("--build-dir", default=None,
                   help="build directory; its last component must be named _build (Jupyter "
                        "Book writes the HTML to <its parent>/_build/html); default <root>/_build")
    b.add_argument("--toc", default=None,
                   help="another table of contents (a YAML file like _toc.yml listing some "
                        "pages), to execute and render part of the book")
    pdf = b.add_mutually_exclusive_group()
    pdf.add_argument("--pdf", dest="pdf", action="store_const", const=True, default=None,
                     help="also print the whole book to _build/html/attnsvm.pdf, offered on every "
                          "page (default: when Chromium is installed and the whole book is built)")
    pdf.add_argument("--no-pdf", dest="pdf", action="store_const", const=False,
                     help="make no whole-book PDF")
    _add_execution_options(b, "the notebooks")

    ls = sub.add_parser("list", help="list the notebooks, their parameters and default values")
    ls.add_argument("--profile", default="quick")
    ls.add_argument("--root", default=None)

    r = sub.add_parser("run", help="execute one notebook with your parameters and render it "
                                   "alone as an HTML page")
    r.add_argument("notebook")
    r.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="a parameter of the notebook's parameters cell (repeatable)")
    r.add_argument("--profile", default=None,
                   help="start from this profile's parameters (default: the notebook's own)")
    r.add_argument("--no-render", action="store_true", help="execute only")
    r.add_argument("--root", default=None)
    r.add_argument("--build-dir", default=None, help="default <root>/_build; the run goes to "
                                                     "<build-dir>/run/<notebook>/")

    sw = sub.add_parser("sweep", help="execute one notebook over a grid of parameters; one "
                                      "tidy table of the glued values")
    sw.add_argument("notebook")
    sw.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUES"),
                    required=True,
                    help="a parameter and its comma-separated values (repeatable; the grid is "
                         "the product)")
    sw.add_argument("--out", default=None,
                    help="the table (CSV; Parquet next to it when pyarrow is installed); "
                         "default <build-dir>/sweeps/<notebook>.csv")
    sw.add_argument("--profile", default=None,
                    help="start from this profile's parameters (default: the notebook's own)")
    sw.add_argument("--force", action="store_true", help="execute every point, cached or not")
    sw.add_argument("--root", default=None)
    sw.add_argument("--build-dir", default=None,
                    help="default <root>/_build; points are kept in <build-dir>/sweeps/")
    _add_execution_options(sw, "the grid points")

    st = sub.add_parser("strip", help="remove outputs and execution counts from notebooks")
    st.add_argument("notebooks", nargs="+")

    args = parser.parse_args(argv)
    try:
        if args.command == "strip":
            for path in args.notebooks:
                print(f"{path}: {'stripped' if strip_outputs(path) else 'clean'}")
            return 0
        if args.command == "list":
            root = find_root(args.root)
            print("\n".join(list_lines(root, args.profile)))
            return 0
        if args.command == "run":
            out = run_notebook(args.notebook, _pairs(args.parameter), root=args.root,
                               profile=args.profile, build_dir=args.build_dir,
                               render_html=not args.no_render)
            print(f"executed notebook: {out['executed']}")
            if out["html"]:
                print(f"HTML page: {out['html']}")
            return 0
        if args.command == "sweep":
            rows = sweep(args.notebook, _pairs(args.parameter), root=args.root,
                         profile=args.profile, build_dir=args.build_dir, out=args.out,
                         force=args.force, **_execution_kwargs(args))
            return 1 if any(r["status"] != "ok" for r in rows) else 0
        build(args.root, args.profile, only=args.only, force=args.force,
              render_html=not args.no_render, build_dir=args.build_dir, toc=args.toc,
              pdf=args.pdf, **_execution_kwargs(args))
    except ParameterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # e.g. a bad --resources, a device that is not available
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted; the execution under way was not cached (the notebooks that "
              "finished are, and the next build resumes from them)", file=sys.stderr)
        return 130
    return 0

