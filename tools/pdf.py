"""The whole book as one PDF: the ``singlehtml`` build printed by headless Chromium.

Usage (after a build, which leaves the staging tree ``_build/stage``)::

    python tools/pdf.py [--build-dir _build] [--out _build/attnsvm.pdf]

The book's build runs this itself when Chromium is installed (``python -m attnsvm_book build``,
``--no-pdf`` to skip it), and offers the PDF on the site (``_build/html/attnsvm.pdf``: the
introduction and every page's download menu link it). Steps: ``jupyter-book build --builder
singlehtml`` on the staging tree (the executed notebooks, nothing re-executed), then the system
Chromium (``apt-get install chromium``; driven by ``playwright``, no network) opens the single
page in print mode at the width of the printed column, so that MathJax breaks every display
formula to fit the paper, waits for MathJax (shipped with the book) and prints it to PDF (the
print styles of ``attnsvm.css`` hide nothing). Everything comes from the registries: no LaTeX
installation is needed.

Exit status: 0 with the PDF written, 1 on a failed build or print, :data:`NO_BROWSER` (3) when
Chromium or playwright is missing (the book's build then goes on without a PDF).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from attnsvm_book._core import BUILD_DIR, BuildError, find_root
from chromium import CHROMIUM_ARGS, INSTALL_HINT, chromium_path, is_local

__all__ = ["singlehtml", "print_pdf", "main", "NO_BROWSER", "PRINT_WIDTH_PX"]

#: exit status when there is no browser to print with
NO_BROWSER = 3
#: the printed column in CSS pixels: A4 (210 mm) less the 12 mm margins, at 96 px per inch
PRINT_WIDTH_PX = round((210 - 2 * 12) / 25.4 * 96)


class NoBrowser(BuildError):
    """Chromium or playwright is missing: no PDF can be printed."""


def singlehtml(build_dir: Path) -> Path:
    """Render ``build_dir/stage`` with the ``singlehtml`` builder; return its ``index.html``."""
    build_dir = Path(build_dir)
    stage = build_dir / "stage"
    if not (stage / "_toc.yml").is_file():
        raise BuildError(f"{stage} holds no staged book; run 'python -m attnsvm_book build' first")
    exe = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(stage), "--builder",
           "singlehtml", "--path-output", str(build_dir.parent)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    import yaml

    root_doc = yaml.safe_load((stage / "_toc.yml").read_text())["root"]
    page = build_dir / "singlehtml" / f"{root_doc}.html"  # index.html only redirects there
    if proc.returncode != 0 or not page.is_file():
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise BuildError(f"singlehtml build failed (exit {proc.returncode}):\n{tail}")
    # the single page's links (_static/, _images/) are relative to the output's top folder,
    # while Jupyter Book writes it under its root document's folder: put a copy at the top
    index = build_dir / "singlehtml" / "book.html"
    index.write_bytes(page.read_bytes())
    return index


def print_pdf(page: Path, out: Path, timeout_s: float = 300.0) -> Path:
    """Print ``page`` to ``out`` (A4) in headless Chromium after MathJax has typeset it."""
    exe = chromium_path()
    if exe is None:
        raise NoBrowser(f"no Chromium found; {INSTALL_HINT}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise NoBrowser("no playwright; pip install -r requirements.txt -c constraints.txt") from None

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=list(CHROMIUM_ARGS))
        try:
            # the page is laid out and typeset as it will be printed: print styles, the printed
            # column's width (MathJax breaks the display formulas to fit it)
            ctx = browser.new_context(viewport={"width": PRINT_WIDTH_PX, "height": 1100})
            ctx.route("**/*", lambda r: r.continue_() if is_local(r.request.url) else r.abort())
            tab = ctx.new_page()
            tab.emulate_media(media="print")
            tab.goto(Path(page).resolve().as_uri(), wait_until="load", timeout=timeout_s * 1000)
            tab.evaluate("async () => { if (window.MathJax && MathJax.startup) "
                         "await MathJax.startup.promise; }")
            tab.pdf(path=str(out), format="A4", print_background=True,
                    margin={"top": "15mm", "bottom": "15mm", "left": "12mm", "right": "12mm"})
        finally:
            browser.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/pdf.py", description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=None, help="the book's root (default: found from the cwd)")
    ap.add_argument("--build-dir", default=None, help="the build directory (default: <root>/_build)")
    ap.add_argument("--out", default=None, help="the PDF (default: <build-dir>/attnsvm.pdf)")
    args = ap.parse_args(argv)
    try:
        build_dir = Path(args.build_dir) if args.build_dir else find_root(args.root) / BUILD_DIR
        if chromium_path() is None:  # before the (minutes of) singlehtml build
            raise NoBrowser(f"no Chromium found; {INSTALL_HINT}")
        index = singlehtml(build_dir)
        out = print_pdf(index, Path(args.out) if args.out else build_dir / "attnsvm.pdf")
    except NoBrowser as exc:
        print(f"no PDF: {exc}", file=sys.stderr)
        return NO_BROWSER
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"PDF: {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
