// switchboard console: live regions and small conveniences. No framework, no build.
//
// The page's own URL, asked for text/event-stream, sends `region` events
// {"id", "html"}: the server rendered the region again with the same escaping
// templates as the first paint, and it is swapped in whole. Scripts inside swapped
// HTML never run (innerHTML does not run them, and the CSP allows no inline script).
(function () {
  "use strict";
  var status = document.getElementById("live-status");
  window.switchboardConsole = { updates: 0, connected: false };

  function setStatus(ok) {
    window.switchboardConsole.connected = ok;
    if (status) {
      status.className = ok ? "on" : "off";
      status.title = ok ? "live" : "reconnecting";
    }
  }

  if (document.body.dataset.live && window.EventSource) {
    var source = new EventSource(location.pathname + location.search);
    source.onopen = function () { setStatus(true); };
    source.onerror = function () { setStatus(false); };
    source.addEventListener("region", function (e) {
      var msg;
      try { msg = JSON.parse(e.data); } catch (_) { return; }
      var el = document.getElementById(msg.id);
      if (!el) { return; }
      // Keep a focused field (a filter being typed into) out of the swap.
      if (el.contains(document.activeElement) && document.activeElement.tagName === "INPUT") {
        return;
      }
      el.innerHTML = msg.html;
      window.switchboardConsole.updates += 1;
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  // Forms marked data-confirm ask first (replays of many dead letters, drains).
  document.addEventListener("submit", function (e) {
    var form = e.target;
    var q = form.getAttribute && form.getAttribute("data-confirm");
    if (q && !window.confirm(q)) { e.preventDefault(); }
  });
})();
