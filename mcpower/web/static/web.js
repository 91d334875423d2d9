// mcpower web pages: progressive enhancement only; every page works without this file.
// 1. "/" focuses the search box (or opens the search page).
// 2. The datasets page refreshes its list in place every few seconds (live re-index state).
(function () {
  "use strict";
  var POLL_MS = 3000;

  function typing(target) {
    var tag = target && target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  document.addEventListener("keydown", function (event) {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    var box = document.getElementById("q");
    event.preventDefault();
    if (box) { box.focus(); box.select(); } else { window.location.assign("/search"); }
  });

  function poll(section) {
    var status = document.querySelector('[data-testid="live-status"]');
    var busy = false;
    function refresh() {
      if (busy || document.hidden) return;
      busy = true;
      fetch("/", { headers: { "Accept": "text/html" }, credentials: "same-origin", cache: "no-store" })
        .then(function (response) {
          if (!response.ok || response.redirected) throw new Error("status " + response.status);
          return response.text();
        })
        .then(function (html) {
          var fresh = new DOMParser().parseFromString(html, "text/html").querySelector('[data-testid="datasets"]');
          if (!fresh) return;
          var current = document.querySelector('[data-testid="datasets"]');
          if (current && fresh.innerHTML !== current.innerHTML) {
            current.replaceWith(document.importNode(fresh, true));
          }
          if (status) {
            status.textContent = "Live · checked " + new Date().toISOString().slice(11, 19) + " UTC";  // as every time on the page
            status.removeAttribute("data-stale");
          }
        })
        .catch(function () {
          if (status) { status.textContent = "Not updating: the server did not answer"; status.setAttribute("data-stale", "true"); }
        })
        .then(function () { busy = false; });
    }
    window.setInterval(refresh, POLL_MS);
    document.addEventListener("visibilitychange", refresh);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var section = document.querySelector('[data-testid="datasets"]');
    if (section) poll(section);
  });
})();
