"""Check the rendered book in a real browser: math typeset without errors, no raw TeX, images.

Headless Chromium (Debian's ``chromium`` package, ``/usr/bin/chromium``), driven through the
``playwright`` package with the system browser (no browser download), with every request that is
neither ``file://`` nor to ``127.0.0.1``/``localhost`` aborted, so a page that needs the network
fails. For each page, after MathJax has finished its first typesetting pass:

* **MathJax errors**: ``mjx-merror`` elements ("Math input error", e.g. a double superscript) and
  undefined macros (shown by MathJax as red ``\\name`` text);
* **raw TeX**: a text node outside MathJax's output (and outside code, ``pre`` and scripts) that
  still holds ``\\(``, ``\\[``, ``$...$`` or a backslash macro, and a page title holding TeX;
* **images**: every ``<img>`` loaded (``naturalWidth > 0``);
* **clipped formulas**: a typeset formula that sticks out of an ancestor whose overflow is
  ``hidden``/``clip`` (a theorem or proof box), so part of it cannot be seen or scrolled to;
* **wide page**: the page scrolls sideways (``scrollWidth`` over the viewport's width);
* **JavaScript errors**: an uncaught error while the page loads (e.g. a script that declares
  the same constant twice);
* **formulas wider than their column**: a display formula whose content sticks out of its
  block or of the text column, reported as *wide* when nothing shows that it does and as
  *scrolling* when it carries the book's scroll cue (``attnsvm-scrolls``, ``attnsvm.js``);
* **"Results at a glance" tables**: a cell outside the box that shows the table (cut);
* **leaks**: text that names a build-machine path (the source tree, the build directory, the
  home directory, a ``site-packages`` folder, ``/home/...``, ``/tmp/...``), a link to the
  ``OWNER`` placeholder repository, and a glued value (``glue:text``) that reads ``nan``/``inf``.

:func:`check_phone_menu` opens a page at a phone's size (390x844), taps the visible menu button
and reports how many links of the chapter list are on screen before and after.

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

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "INSTALL_HINT", "DESKTOP", "PHONE", "PageReport",
           "MenuReport", "chromium_path", "book_pages", "check_pages", "check_phone_menu",
           "forbidden_strings", "serve", "main"]

#: folders of an HTML build that hold no pages of the book
SKIP_DIRS = ("_static", "_sources", "_images", "_downloads", ".doctrees", "jupyter_execute")

_REFRESH = re.compile(r"<meta[^>]+http-equiv=[\"']?refresh", re.I)

_CHECK_JS = r"""
async (forbidden) => {
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
               "svg, mjx-assistive-mml";
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
  // formulas cut off by a box that hides its overflow (nothing to scroll to)
  const tex = new Map();
  for (const item of (mdoc && mdoc.math) || []) {
    if (item.typesetRoot) tex.set(item.typesetRoot, String(item.math));
  }
  const clipped = [];
  for (const c of document.querySelectorAll("mjx-container")) {
    const r = c.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;  // not displayed (a folded cell)
    for (let a = c.parentElement; a && a !== document.body; a = a.parentElement) {
      const s = getComputedStyle(a);
      if (!/hidden|clip/.test(s.overflowX)) continue;  // "auto"/"scroll": it can be scrolled
      const b = a.getBoundingClientRect();
      if (r.right > b.right + 1 || r.left < b.left - 1) {
        clipped.push((tex.get(c) || c.textContent).trim().slice(0, 60));
        break;
      }
    }
  }
  // text of the page (not scripts, styles) and the links: build-machine paths, placeholders
  const texts = [];
  const tw = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = tw.nextNode(); n; n = tw.nextNode()) {
    const el = n.parentElement;
    if (el && !el.closest("script, style")) texts.push(n.nodeValue);
  }
  const body = texts.join("\n");
  const paths = [];
  for (const f of forbidden) {
    let i = body.indexOf(f);
    if (i >= 0) paths.push(body.slice(Math.max(0, i - 30), i + f.length + 40).trim());
  }
  const prx = /(?<![\w:/.~-])\/(?:home|root|tmp|Users|work)\/[\w.-]+|[\w./-]*(?:site|dist)-packages\b/g;
  for (const m of body.matchAll(prx)) paths.push(m[0]);
  const owner = Array.from(document.querySelectorAll("a[href]")).map((a) => a.href).filter(
    (h) => /\/OWNER(\/|$)/.test(h));
  const nans = Array.from(document.querySelectorAll(".pasted-text, .pasted-inline")).map(
    (e) => e.textContent.trim()).filter((t) => /(^|[^\w])(nan|NaN|inf)([^\w]|$)/.test(t));
  // display formulas wider than their column: cut (nothing shows it), or scrolling with the
  // book's visible cue ("attnsvm-scrolls" on the formula or the block it scrolls in)
  const wideFormulas = [], scrollingFormulas = [];
  for (const c of document.querySelectorAll('mjx-container[display="true"]')) {
    const r = c.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const block = c.closest("div.math") || c.parentElement;
    const col = c.closest("article, .bd-article, main") || document.body;
    const over = Math.max(c.scrollWidth - c.clientWidth, block.scrollWidth - block.clientWidth,
                          r.right - col.getBoundingClientRect().right);
    if (over <= 2) continue;
    const cue = [c, block, c.closest(".admonition")].some(
      (e) => e && e.classList.contains("attnsvm-scrolls"));
    const what = (tex.get(c) || c.textContent).trim().replace(/\s+/g, " ").slice(0, 60) +
                 ` (${Math.round(over)} px over)`;
    (cue ? scrollingFormulas : wideFormulas).push(what);
  }
  // "Results at a glance" tables: every cell within the box that shows the table
  const tablesCut = [];
  for (const t of document.querySelectorAll("table.attnsvm-glance")) {
    if (t.getBoundingClientRect().width === 0) continue;
    const box = t.closest(".pst-scrollable-table-container, .table-wrapper, .admonition") ||
                t.parentElement;
    const right = box.getBoundingClientRect().right;
    for (const cell of t.querySelectorAll("td, th")) {
      const b = cell.getBoundingClientRect();
      if (b.width > 0 && b.right > right + 1) {
        tablesCut.push(cell.textContent.trim().slice(0, 40) + ` (${Math.round(b.right - right)} px out)`);
        break;
      }
    }
  }
  const glance = document.querySelectorAll("table.attnsvm-glance").length;
  // figures as shown: the image file's name and its width on the screen (CSS px)
  const figures = imgs.filter((i) => i.closest("figure, div.cell_output") &&
                              i.getBoundingClientRect().width > 0).map(
    (i) => [(i.getAttribute("src") || "").split("/").pop(), i.getBoundingClientRect().width]);
  const pdfLinks = Array.from(document.querySelectorAll('a[href$=".pdf"]')).filter(
    (a) => getComputedStyle(a.closest(".attnsvm-pdf-offer") || a).display !== "none").map(
    (a) => a.getAttribute("href"));
  return {errors, raw, broken, formulas: document.querySelectorAll("mjx-container").length,
          wideFormulas, scrollingFormulas, tablesCut, glance, pdfLinks, figures,
          images: imgs.length,
          mathjax: !!(window.MathJax && window.MathJax.version),
          clipped, paths: Array.from(new Set(paths)), owner: Array.from(new Set(owner)), nans,
          width: document.documentElement.scrollWidth, viewport: window.innerWidth};
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
    clipped: list = dataclasses.field(default_factory=list)  # formulas a box cuts off (TeX)
    paths: list = dataclasses.field(default_factory=list)  # build-machine paths in the text
    owner: list = dataclasses.field(default_factory=list)  # links to the OWNER placeholder
    nans: list = dataclasses.field(default_factory=list)  # glued values reading nan/inf
    width: int = 0  # the page's scrollWidth (px)
    viewport: int = 0  # the screen's width (px; a phone zooms out to fit a wider page)
    js_errors: list = dataclasses.field(default_factory=list)  # uncaught errors while loading
    wide_formulas: list = dataclasses.field(default_factory=list)  # wider than the column, no cue
    scrolling_formulas: list = dataclasses.field(default_factory=list)  # wider, with the cue
    tables_cut: list = dataclasses.field(default_factory=list)  # glance tables cut by their box
    glance: int = 0  # "Results at a glance" tables on the page
    pdf_links: list = dataclasses.field(default_factory=list)  # links to a PDF (not hidden)
    figures: list = dataclasses.field(default_factory=list)  # [image file name, shown width px]

    @property
    def wide(self) -> bool:
        """The page scrolls sideways at this viewport."""
        return self.width > self.viewport + 1

    @property
    def ok(self) -> bool:
        return not (self.errors or self.raw or self.broken or self.blocked or self.clipped
                    or self.paths or self.owner or self.nans or self.wide or self.js_errors
                    or self.wide_formulas or self.tables_cut)

    def describe(self) -> str:
        parts = []
        for name in ("errors", "raw", "broken", "blocked", "clipped", "paths", "owner", "nans",
                     "js_errors", "wide_formulas", "scrolling_formulas", "tables_cut"):
            items = getattr(self, name)
            if items:
                parts.append(f"{len(items)} {name}: " + "; ".join(map(str, items[:4])))
        if self.wide:
            parts.append(f"wide: {self.width} px in a {self.viewport} px viewport")
        return f"{self.page}: " + (" | ".join(parts) or "ok")


def book_pages(html_dir: str | os.PathLike) -> list[str]:
    """The HTML pages of a build, relative to ``html_dir`` (posix paths, sorted)."""
    html_dir = Path(html_dir)
    return sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html")
                  if not set(p.relative_to(html_dir).parts[:-1]) & set(SKIP_DIRS))


#: a desktop screen and a phone (CSS pixels)
DESKTOP = (1366, 900)
PHONE = (390, 844)


def forbidden_strings(*extra) -> list[str]:
    """Build-machine paths no page may print: the source tree, home, Python's prefix, ``extra``."""
    out = {str(Path(__file__).resolve().parents[1]), sys.prefix, *(str(e) for e in extra)}
    home = str(Path.home())
    if home not in ("/", ""):
        out.add(home)
    return sorted(o for o in out if o and o != "/")


def check_pages(html_dir: str | os.PathLike, pages: list[str] | None = None, *,
                base_url: str | None = None, timeout_s: float = 90.0,
                viewport: tuple[int, int] = DESKTOP, forbidden: list[str] | None = None,
                media: str | None = None) -> list[PageReport]:
    """Open each page of ``html_dir`` in headless Chromium (no network) and report it.

    ``base_url`` (e.g. ``http://127.0.0.1:8000/``) loads the pages over HTTP instead of from
    ``file://``. ``viewport`` is (width, height) in CSS pixels (:data:`PHONE` emulates a phone:
    touch, mobile layout). ``forbidden``: strings no page's text may hold (default
    :func:`forbidden_strings` plus ``html_dir``'s parent). ``media="print"`` lays the pages out
    with their print styles (as the whole-book PDF is printed). Raises ``RuntimeError`` when
    Chromium or playwright is missing.
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
    if forbidden is None:
        forbidden = forbidden_strings(html_dir.parent)
    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=list(CHROMIUM_ARGS),
                                     headless=True)
        try:
            context = browser.new_context(service_workers="block", **_viewport(viewport))
            blocked: list[str] = []

            def route(r):
                if is_local(r.request.url):
                    r.continue_()
                else:
                    blocked.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            page = context.new_page()
            js_errors: list[str] = []
            page.on("pageerror", lambda exc: js_errors.append(str(exc)[:200]))
            if media:
                page.emulate_media(media=media)
            for rel in pages:
                blocked.clear()
                js_errors.clear()
                url = (base_url.rstrip("/") + "/" + rel) if base_url else (html_dir / rel).as_uri()
                page.goto(url, wait_until="load", timeout=timeout_s * 1000)
                if _REFRESH.search((html_dir / rel).read_text(errors="replace")[:4000]):
                    # a redirect page (the root index.html): check the page it lands on
                    page.wait_for_url(lambda u, rel=rel: not u.endswith("/" + rel),
                                      timeout=timeout_s * 1000)
                    page.wait_for_load_state("load", timeout=timeout_s * 1000)
                res = _evaluate(page, timeout_s, list(forbidden))
                out.append(PageReport(rel, res["errors"], res["raw"], res["broken"],
                                      res["formulas"], res["images"], list(blocked),
                                      res["mathjax"], res["clipped"], res["paths"],
                                      res["owner"], res["nans"], res["width"], viewport[0],
                                      list(js_errors), res["wideFormulas"],
                                      res["scrollingFormulas"], res["tablesCut"], res["glance"],
                                      res["pdfLinks"], res["figures"]))
        finally:
            browser.close()
    return out


def _viewport(size: tuple[int, int]) -> dict:
    """playwright context options for a viewport; a phone-sized one is a touch phone."""
    w, h = size
    phone = w < 600
    return {"viewport": {"width": w, "height": h}, "is_mobile": phone, "has_touch": phone}


def _evaluate(page, timeout_s: float, forbidden: list[str], tries: int = 3):
    """Run the checks; a page that redirects (the root index.html) is checked where it lands."""
    from playwright.sync_api import Error

    for k in range(tries):
        try:
            return page.evaluate(_CHECK_JS, forbidden)
        except Error as exc:
            if "context was destroyed" not in str(exc) or k == tries - 1:
                raise
            page.wait_for_load_state("load", timeout=timeout_s * 1000)


_MENU_JS = r"""
() => {
  const shown = (e) => {
    const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none" &&
      r.right > 0 && r.left < innerWidth && r.bottom > 0 && r.top < innerHeight &&
      document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2) === e;
  };
  const links = Array.from(document.querySelectorAll(".bd-sidebar-primary nav.bd-links a"));
  return {links: links.length, shown: links.filter(shown).map((a) => a.textContent.trim()),
          toggles: Array.from(document.querySelectorAll(".primary-toggle")).filter(
            (b) => b.getBoundingClientRect().width > 0 && getComputedStyle(b).visibility !==
            "hidden").length,
          search: Array.from(document.querySelectorAll(
            "input[type=search], .search-button, .search-button-field")).filter(
            (e) => e.getBoundingClientRect().width > 0 &&
              getComputedStyle(e).visibility !== "hidden").length};
}
"""


@dataclasses.dataclass
class MenuReport:
    """The chapter list of a page at a phone's size, before and after tapping the menu button."""

    page: str
    toggles: int  # visible menu buttons (the theme's ``.primary-toggle``)
    search: int  # visible search boxes or buttons before the tap
    before: list  # chapter-list links on screen (and not covered) before the tap
    after: list  # ... and after it
    links: int  # links in the chapter list

    @property
    def ok(self) -> bool:
        return self.toggles == 1 and not self.before and len(self.after) >= min(5, self.links)


def check_phone_menu(html_dir: str | os.PathLike, page_rel: str, *,
                     viewport: tuple[int, int] = PHONE, screenshot: str | None = None
                     ) -> MenuReport:
    """Open ``page_rel`` at a phone's size, tap the visible menu button, see the chapter list.

    A link counts as on screen when it lies in the viewport and is the element found at its
    centre (not covered by the page). ``screenshot``: a PNG path for the screen after the tap.
    """
    from playwright.sync_api import sync_playwright

    exe = chromium_path()
    if exe is None:
        raise RuntimeError(f"no Chromium found; {INSTALL_HINT}")
    url = (Path(html_dir).resolve() / page_rel).as_uri()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=list(CHROMIUM_ARGS),
                                     headless=True)
        try:
            context = browser.new_context(service_workers="block", **_viewport(viewport))
            context.route("**/*", lambda r: r.continue_() if is_local(r.request.url)
                          else r.abort())
            page = context.new_page()
            page.goto(url, wait_until="load")
            page.wait_for_timeout(500)
            first = page.evaluate(_MENU_JS)
            buttons = [b for b in page.query_selector_all(".primary-toggle") if b.is_visible()]
            if buttons:
                buttons[0].tap()
                page.wait_for_timeout(800)  # the drawer slides in
            second = page.evaluate(_MENU_JS)
            if screenshot:
                page.screenshot(path=str(screenshot))
        finally:
            browser.close()
    return MenuReport(page_rel, len(buttons), first["search"], first["shown"], second["shown"],
                      second["links"])


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
