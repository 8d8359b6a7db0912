// agent-run web: live updates without a framework. Listens to /events (server-sent events whose
// id is the store revision; the browser resends the last one on reconnect) and, when something
// this page shows changed, re-fetches the page and swaps its [data-live] parts in place.
(function () {
  "use strict";
  var body = document.body;
  var watch = (body.dataset.watch || "").split(" ").filter(Boolean);
  var status = document.getElementById("live-status");
  if (!watch.length || !window.EventSource) { return; }
  var refreshing = false, again = false;

  function setStatus(text) { if (status) { status.textContent = text; status.dataset.state = text; } }

  function concerns(summary) {
    if (watch.indexOf("*") >= 0 || summary.truncated) { return true; }
    var ids = (summary.agents || []).concat(summary.batches || []);
    return ids.some(function (id) { return watch.indexOf(id) >= 0; });
  }

  function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Live": "1" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var fresh = el.id && doc.getElementById(el.id);
          if (fresh && !el.contains(document.activeElement)) { el.replaceWith(document.importNode(fresh, true)); }
        });
        body.dataset.revision = doc.body.dataset.revision || body.dataset.revision;
      })
      .catch(function () { again = true; })
      .finally(function () {
        refreshing = false;
        if (again) { again = false; setTimeout(refresh, 200); }
      });
  }

  var url = "/events" + (body.dataset.revision ? "?after=" + encodeURIComponent(body.dataset.revision) : "");
  var source = new EventSource(url);
  source.addEventListener("open", function () { setStatus("live"); });
  source.addEventListener("error", function () { setStatus("reconnecting"); });
  source.addEventListener("hello", function () { setStatus("live"); });
  source.addEventListener("change", function (e) {
    setStatus("live");
    body.dataset.lastEventId = e.lastEventId;
    var summary = {};
    try { summary = JSON.parse(e.data); } catch (err) { summary = { truncated: true }; }
    if (concerns(summary)) { refresh(); }
  });
})();
