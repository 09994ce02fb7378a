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

  var held = {};
  function swap(el, html) {
    el.innerHTML = html;
    window.switchboardConsole.updates += 1;
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
      // A field being typed into (a filter, a reason) is not swapped away: the
      // update waits until the field loses focus.
      if (el.contains(document.activeElement) && document.activeElement.tagName === "INPUT") {
        held[msg.id] = msg.html;
        return;
      }
      swap(el, msg.html);
    });
    document.addEventListener("focusout", function () {
      setTimeout(function () {
        Object.keys(held).forEach(function (id) {
          var el = document.getElementById(id);
          if (el && !el.contains(document.activeElement)) {
            swap(el, held[id]);
            delete held[id];
          }
        });
      }, 0);
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  // Forms marked data-confirm ask first (bulk replays, drains, rejections).
  document.addEventListener("submit", function (e) {
    var form = e.target;
    var q = form.getAttribute && form.getAttribute("data-confirm");
    if (q && !window.confirm(q)) { e.preventDefault(); }
  });
})();
