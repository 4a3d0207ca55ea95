// outbox console: refreshes the overview's figures every few seconds from
// /overview.json. Pages read fine without it. Values are set as text, never
// as HTML.
"use strict";
(function () {
  var box = document.querySelector("[data-refresh]");
  if (!box) { return; }
  var url = box.getAttribute("data-refresh");
  function refresh() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (figures) {
        if (!figures) { return; }
        Object.keys(figures).forEach(function (key) {
          var el = box.querySelector('[data-figure="' + key + '"]');
          if (el) { el.textContent = figures[key]; }
        });
        box.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { /* the next tick tries again */ });
  }
  window.setInterval(refresh, 3000);
})();
