// idem console: optional niceties only; every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // The payload editor: Tab inserts two spaces instead of leaving the field.
  document.querySelectorAll("textarea[name=payload]").forEach(function (ta) {
    ta.addEventListener("keydown", function (e) {
      if (e.key !== "Tab" || e.shiftKey) { return; }
      e.preventDefault();
      var s = ta.selectionStart;
      ta.value = ta.value.slice(0, s) + "  " + ta.value.slice(ta.selectionEnd);
      ta.selectionStart = ta.selectionEnd = s + 2;
    });
  });
  // A submitted form's buttons are disabled, so a double click sends once.
  document.querySelectorAll("form[method=post]").forEach(function (f) {
    f.addEventListener("submit", function () {
      setTimeout(function () { f.querySelectorAll("button").forEach(function (b) { b.disabled = true; }); }, 0);
    });
  });
});
