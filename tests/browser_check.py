"""Check the rendered book in a real browser: math typeset without errors, no raw TeX, images.

Headless Chromium (Debian's ``chromium`` package, ``/usr/bin/chromium``), driven through the
``playwright`` package with the system browser (no browser download), with every request that is
neither ``file://`` nor to ``127.0.0.1``/``localhost`` aborted, so a page that needs the network
fails. For each page, after MathJax has finished its first typesetting pass:

* **MathJax errors**: ``mjx-merror`` elements ("Math input error", e.g. a double superscript) and
  undefined macros (shown by MathJax as red ``\\name`` text);
* **raw TeX**: a text node outside MathJax's output (and outside code, ``pre`` and scripts) that
  still holds ``\\(``, ``\\[``, ``$...$`` or a backslash macro, and a page title holding TeX;
* **images**: every ``<img>`` loaded (``naturalWidth > 0``).

Used by ``tests/test_browser.py``; also ``python tests/browser_check.py _build/html``. The
browser itself (where it is, its flags, which requests stay local) is ``tools/chromium.py``,
shared with the PDF printer ``tools/pdf.py``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import http.server
import os
import re
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # tools/chromium.py
from chromium import CHROMIUM, CHROMIUM_ARGS, INSTALL_HINT, chromium_path, is_local  # noqa: E402

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "INSTALL_HINT", "PageReport", "chromium_path",
           "book_pages", "check_pages", "serve", "main"]

#: folders of an HTML build that hold no pages of the book
SKIP_DIRS = ("_static", "_sources", "_images", "_downloads", ".doctrees", "jupyter_execute")

_REFRESH = re.compile(r"<meta[^>]+http-equiv=[\"']?refresh", re.I)

_CHECK_JS = r"""
async () => {
  const wait = (ms) => new Promise((r) => setTimeout(r, ms));
  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
    await Promise.race([window.MathJax.startup.promise, wait(60000)]);
  }
  const imgs = Array.from(document.images);
  await Promise.all(imgs.map((img) => img.complete ? null : Promise.race([
    new Promise((r) => { img.onload = r; img.onerror = r; img.loading = "eager"; }), wait(20000)])));
  const errors = Array.from(document.querySelectorAll("mjx-merror")).map(
    (e) => e.getAttribute("data-mjx-error") || e.textContent);
  // MathJax's internal list: input errors with their formula, and unknown macros (the
  // noundefined extension typesets "\name" in red instead of failing)
  const mdoc = window.MathJax && window.MathJax.startup && window.MathJax.startup.document;
  for (const item of (mdoc && mdoc.math) || []) {
    if (!item.root || !item.root.walkTree) continue;
    item.root.walkTree((node) => {
      if (node.isKind("mtext") && node.attributes.get("mathcolor") === "red") {
        const t = node.childNodes.map((c) => c.text || "").join("");
        if (t.startsWith("\\")) errors.push("undefined macro " + t + " in " + item.math);
      } else if (node.isKind("merror")) {
        errors.push("in " + String(item.math).slice(0, 80));
      }
    });
  }
  const skip = "mjx-container, script, style, pre, code, textarea, noscript, .highlight, " +
               "svg, mjx-assistive-mml, .mathjax_ignore, .tex2jax_ignore";
  const rx = /\\\(|\\\)|\\\[|\\\]|\$[^$\s][^$\n]*\$|\\(?:[A-Za-z]{2,}|[A-Za-z](?![A-Za-z]))/;
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const s = n.nodeValue;
    if (!s || !rx.test(s)) continue;
    const el = n.parentElement;
    if (!el || el.closest(skip)) continue;
    raw.push(s.trim().slice(0, 120));
  }
  if (rx.test(document.title)) raw.push("<title> " + document.title);
  const broken = imgs.filter((i) => !(i.complete && i.naturalWidth > 0)).map(
    (i) => i.getAttribute("src"));
  return {errors, raw, broken, formulas: document.querySelectorAll("mjx-container").length,
          images: imgs.length,
          mathjax: !!(window.MathJax && window.MathJax.version)};
}
"""


@dataclasses.dataclass
class PageReport:
    """What the browser found on one page."""

    page: str
    errors: list  # MathJax errors (messages)
    raw: list  # text left as raw TeX
    broken: list  # images that did not load (their src)
    formulas: int  # typeset formulas (mjx-container elements)
    images: int
    blocked: list  # requests aborted because they left the machine
    mathjax: bool  # MathJax loaded on the page

    @property
    def ok(self) -> bool:
        return not (self.errors or self.raw or self.broken or self.blocked)

    def describe(self) -> str:
        parts = []
        for name in ("errors", "raw", "broken", "blocked"):
            items = getattr(self, name)
            if items:
                parts.append(f"{len(items)} {name}: " + "; ".join(map(str, items[:4])))
        return f"{self.page}: " + (" | ".join(parts) or "ok")


def book_pages(html_dir: str | os.PathLike) -> list[str]:
    """The HTML pages of a build, relative to ``html_dir`` (posix paths, sorted)."""
    html_dir = Path(html_dir)
    return sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html")
                  if not set(p.relative_to(html_dir).parts[:-1]) & set(SKIP_DIRS))


def check_pages(html_dir: str | os.PathLike, pages: list[str] | None = None, *,
                base_url: str | None = None, timeout_s: float = 90.0) -> list[PageReport]:
    """Open each page of ``html_dir`` in headless Chromium (no network) and report it.

    ``base_url`` (e.g. ``http://127.0.0.1:8000/``) loads the pages over HTTP instead of from
    ``file://``. Raises ``RuntimeError`` when Chromium or playwright is missing.
    """
    exe = chromium_path()
    if exe is None:
        raise RuntimeError(f"no Chromium found; {INSTALL_HINT}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise RuntimeError("the playwright package is missing; pip install -r requirements.txt "
                           "-c constraints.txt") from None
    html_dir = Path(html_dir).resolve()
    pages = book_pages(html_dir) if pages is None else pages
    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=list(CHROMIUM_ARGS),
                                     headless=True)
        try:
            context = browser.new_context(service_workers="block")
            blocked: list[str] = []

            def route(r):
                if is_local(r.request.url):
                    r.continue_()
                else:
                    blocked.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            page = context.new_page()
            for rel in pages:
                blocked.clear()
                url = (base_url.rstrip("/") + "/" + rel) if base_url else (html_dir / rel).as_uri()
                page.goto(url, wait_until="load", timeout=timeout_s * 1000)
                if _REFRESH.search((html_dir / rel).read_text(errors="replace")[:4000]):
                    # a redirect page (the root index.html): check the page it lands on
                    page.wait_for_url(lambda u, rel=rel: not u.endswith("/" + rel),
                                      timeout=timeout_s * 1000)
                    page.wait_for_load_state("load", timeout=timeout_s * 1000)
                res = _evaluate(page, timeout_s)
                out.append(PageReport(rel, res["errors"], res["raw"], res["broken"],
                                      res["formulas"], res["images"], list(blocked),
                                      res["mathjax"]))
        finally:
            browser.close()
    return out


def _evaluate(page, timeout_s: float, tries: int = 3):
    """Run the checks; a page that redirects (the root index.html) is checked where it lands."""
    from playwright.sync_api import Error

    for k in range(tries):
        try:
            return page.evaluate(_CHECK_JS)
        except Error as exc:
            if "context was destroyed" not in str(exc) or k == tries - 1:
                raise
            page.wait_for_load_state("load", timeout=timeout_s * 1000)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request log on stderr
        pass


@contextlib.contextmanager
def serve(directory: str | os.PathLike):
    """Serve ``directory`` over HTTP on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m attnsvm_book.browser",
                                 description="check every page of an HTML build in Chromium")
    ap.add_argument("html_dir")
    ap.add_argument("--http", action="store_true", help="serve over HTTP on 127.0.0.1")
    args = ap.parse_args(argv)
    if args.http:
        with serve(args.html_dir) as url:
            reports = check_pages(args.html_dir, base_url=url)
    else:
        reports = check_pages(args.html_dir)
    for r in reports:
        print(f"{r.describe()} ({r.formulas} formulas, {r.images} images)")
    bad = [r for r in reports if not r.ok]
    print(f"{len(reports)} pages, {len(bad)} with problems")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
