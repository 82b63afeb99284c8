// The book's own script (attnsvm_book.assets adds it to every page). Once MathJax has typeset
// the page:
// * an inline formula wider than its line gets the class "attnsvm-wide" (attnsvm.css), which
//   lets it scroll sideways on its own instead of being cut off or widening the page;
// * whatever still scrolls sideways (a display formula, a table, an output, a box) gets the
//   class "attnsvm-scrolls", a visible cue (a fading right edge until scrolled to its end);
// * the "Results at a glance" table gets the class "attnsvm-glance" and each cell its column's
//   name (data-label), so that a phone shows its rows as cards;
// * a display formula that MathJax could not break to fit its column (a long fraction, a
//   matrix) is set in a smaller size that fits: on paper (print media: the whole-book PDF, or a
//   reader's print) always, on a screen when it is at most 10% too wide;
// * the search page's snippets show formulas as plain text (no "\\(", no backslash macros):
//   Sphinx's search builds them from the pages' HTML, where the formulas are still TeX;
// * with the whole-book PDF built (window.ATTNSVM_PDF, set by attnsvm_book.assets), the page's
//   download menu offers it and links of the class "attnsvm-pdf" show; without it they hide.
(function () {
  "use strict";
  var SCROLLERS = 'mjx-container[display="true"], div.math, .admonition, ' +
    ".pst-scrollable-table-container, .table-wrapper, div.cell_output, div.highlight, figure, " +
    "mjx-container.attnsvm-wide";
  function markWide() {
    document.querySelectorAll('mjx-container:not([display="true"])').forEach(function (c) {
      c.classList.remove("attnsvm-wide");
      var line = c.parentElement;  // the block the formula sits in (not its inline span)
      while (line && getComputedStyle(line).display.indexOf("inline") === 0) {
        line = line.parentElement;
      }
      if (!line) return;
      if (c.getBoundingClientRect().width > line.clientWidth + 1) c.classList.add("attnsvm-wide");
    });
  }
  function atEnd(e) {
    e.classList.toggle("attnsvm-scroll-end", e.scrollLeft + e.clientWidth >= e.scrollWidth - 2);
  }
  function markScrollers() {
    document.querySelectorAll(SCROLLERS).forEach(function (e) {
      var s = getComputedStyle(e).overflowX;
      var scrolls = (s === "auto" || s === "scroll") && e.scrollWidth > e.clientWidth + 1;
      e.classList.toggle("attnsvm-scrolls", scrolls);
      if (scrolls && !e.dataset.attnsvmCue) {
        e.dataset.attnsvmCue = "1";
        e.addEventListener("scroll", function () { atEnd(e); }, {passive: true});
      }
      if (scrolls) atEnd(e);
    });
  }
  function glanceTables() {
    document.querySelectorAll(".admonition").forEach(function (box) {
      var title = box.querySelector(".admonition-title");
      if (!title || title.textContent.trim().toLowerCase() !== "results at a glance") return;
      box.querySelectorAll("table").forEach(function (t) {
        t.classList.add("attnsvm-glance");
        var names = Array.prototype.map.call(t.querySelectorAll("thead th"), function (th) {
          return th.textContent.trim();
        });
        t.querySelectorAll("tbody tr").forEach(function (tr) {
          Array.prototype.forEach.call(tr.children, function (td, k) {
            if (names[k]) td.setAttribute("data-label", names[k]);
          });
        });
      });
    });
  }
  function offerPdf() {
    var pdf = window.ATTNSVM_PDF;
    var root = document.documentElement.dataset.content_root || "";
    document.querySelectorAll("a.attnsvm-pdf").forEach(function (a) {
      var offer = a.closest(".attnsvm-pdf-offer") || a;
      offer.style.display = pdf ? "" : "none";
    });
    if (!pdf) return;
    document.querySelectorAll(".dropdown-download-buttons ul, .dropdown-download-buttons .dropdown-menu")
      .forEach(function (menu) {
        if (menu.querySelector(".attnsvm-pdf-item")) return;
        var li = document.createElement("li");
        li.className = "attnsvm-pdf-item";
        var a = document.createElement("a");
        a.href = root + pdf;
        a.className = "btn btn-sm dropdown-item";
        a.title = "The whole book as one PDF";
        a.textContent = "Whole book (.pdf)";
        li.appendChild(a);
        menu.appendChild(li);
      });
  }
  // TeX as plain text: no delimiters, macro names without their backslash, no braces
  function plainTex(t) {
    return t.replace(/\\[()\[\]]/g, "").replace(/\\([A-Za-z]+)/g, "$1 ")
      .replace(/\\(?=\W)/g, "").replace(/[{}]/g, "").replace(/\s+/g, " ");
  }
  function plainSearchSnippets() {
    if (typeof Search === "undefined" || !Search.htmlToText || Search.attnsvmPlain) return;
    var toText = Search.htmlToText;
    Search.htmlToText = function (html, anchor) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      doc.querySelectorAll(".math").forEach(function (m) {
        m.textContent = plainTex(m.textContent);
      });
      return toText(doc.documentElement.outerHTML, anchor);
    };
    Search.attnsvmPlain = true;
  }
  var PRINT = window.matchMedia ? window.matchMedia("print") : null;
  // set a display formula that sticks out of its column by at most 1 - minRatio in a size that
  // fits (on paper: any formula; on a screen: one a few pixels too wide, where MathJax found no
  // break; a wider one keeps its size and scrolls, with the cue)
  function fit(on, minRatio) {
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (c) {
      if (c.dataset.attnsvmFit) {
        c.style.fontSize = "";
        delete c.dataset.attnsvmFit;
      }
      if (!on || !c.clientWidth) return;
      var ratio = c.clientWidth / c.scrollWidth;
      if (ratio < 0.999 && ratio >= minRatio) {
        c.style.fontSize = Math.floor(ratio * 98) + "%";
        c.dataset.attnsvmFit = "1";
      }
    });
  }
  function all() {
    markWide();
    fit(true, PRINT && PRINT.matches ? 0 : 0.9);
    markScrollers();
  }
  window.addEventListener("beforeprint", function () { fit(true, 0); });
  window.addEventListener("afterprint", function () { all(); });
  glanceTables();
  offerPdf();
  plainSearchSnippets();
  function whenTypeset() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(all);
    } else {
      all();
    }
  }
  if (document.readyState === "complete") whenTypeset();
  else window.addEventListener("load", whenTypeset);
  var timer = null;
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(all, 150);
  });
})();
