// The book's own script (attnsvm_book.assets adds it to every page): once MathJax has typeset
// the page, an inline formula wider than its line gets the class "attnsvm-wide" (attnsvm.css),
// which lets it scroll sideways on its own instead of being cut off or widening the page.
(function () {
  "use strict";
  function mark() {
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
  function whenTypeset() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(mark);
    }
  }
  window.addEventListener("load", whenTypeset);
  var timer = null;
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(mark, 150);
  });
})();
