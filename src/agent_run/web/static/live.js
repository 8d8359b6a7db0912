// agent-run web: live updates without a framework. Listens to /events (server-sent events whose
// id is the store revision; the browser resends the last one on reconnect) and, when something
// this page shows changed, re-fetches the page and swaps its [data-live] parts in place. It
// brings each part to the fresh one in place (`morph`: only what changed is touched), and
// tells follow.js (the transcript, followed by cursor) through `agentrun:change` / `agentrun:open`
// events on the document. A part marked data-live="agent" (the Session) is swapped only when it
// now shows another agent (a rerun's new attempt); follow.js then reads that one from its start.
(function () {
  "use strict";
  var body = document.body;
  var watch = (body.dataset.watch || "").split(" ").filter(Boolean);
  var status = document.getElementById("live-status");
  if (!watch.length || !window.EventSource) { return; }
  var refreshing = false, again = false, MIN_REFRESH_MS = 500;

  // Bring `el` to `fresh` in place, touching only what differs: a button, a link or an open
  // <details> that did not change stays the same node, so a click under way is never lost to
  // a refresh (the part re-renders twice a second while its agent streams).
  function morph(el, fresh) {
    if (el.nodeType !== fresh.nodeType || el.nodeName !== fresh.nodeName) {
      el.replaceWith(document.importNode(fresh, true));
      return;
    }
    if (el.nodeType === Node.TEXT_NODE || el.nodeType === Node.COMMENT_NODE) {
      if (el.nodeValue !== fresh.nodeValue) { el.nodeValue = fresh.nodeValue; }
      return;
    }
    if (el.nodeType !== Node.ELEMENT_NODE || el.isEqualNode(fresh)) { return; }
    Array.prototype.slice.call(el.attributes).forEach(function (a) {
      if (!fresh.hasAttribute(a.name) && !(a.name === "open" && el.nodeName === "DETAILS")) { el.removeAttribute(a.name); }
    });
    Array.prototype.slice.call(fresh.attributes).forEach(function (a) {
      if (el.getAttribute(a.name) !== a.value && !(a.name === "open" && el.nodeName === "DETAILS")) { el.setAttribute(a.name, a.value); }
    });
    var mine = Array.prototype.slice.call(el.childNodes), theirs = fresh.childNodes;
    for (var i = 0; i < theirs.length; i++) {
      if (i < mine.length) { morph(mine[i], theirs[i]); }
      else { el.appendChild(document.importNode(theirs[i], true)); }
    }
    for (var j = theirs.length; j < mine.length; j++) { mine[j].remove(); }
  }

  function announce(name, detail) { document.dispatchEvent(new CustomEvent(name, { detail: detail })); }

  function setStatus(text) { if (status) { status.textContent = text; status.dataset.state = text; } }

  function concerns(summary) {
    if (watch.indexOf("*") >= 0 || summary.truncated) { return true; }
    var ids = (summary.agents || []).concat(summary.batches || []);
    return ids.some(function (id) { return watch.indexOf(id) >= 0; });
  }

  function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Live": "1", "X-Revision": lastId || "" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var swapped = false;
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var fresh = el.id && doc.getElementById(el.id);
          if (!fresh || el.contains(document.activeElement) || !el.isConnected) { return; }
          if (el.dataset.live === "agent") {
            if (fresh.dataset.agent === el.dataset.agent) { return; }
            swapped = true;
          }
          if (el.dataset.live === "agent") { el.replaceWith(document.importNode(fresh, true)); }
          else { morph(el, fresh); }
        });
        if (swapped) { announce("agentrun:open", {}); }
        body.dataset.revision = doc.body.dataset.revision || body.dataset.revision;
      })
      .catch(function () { again = true; })
      .finally(function () {
        // At most one refresh in flight and two a second: changes in between join the next.
        setTimeout(function () {
          refreshing = false;
          if (again) { again = false; refresh(); }
        }, MIN_REFRESH_MS);
      });
  }

  // The browser itself reconnects after a network error, sending Last-Event-ID; when it gives
  // up (an HTTP error while the server restarts), open a new stream after the last id seen.
  var lastId = body.dataset.revision || "";

  function connect() {
    var source = new EventSource("/events" + (lastId ? "?after=" + encodeURIComponent(lastId) : ""));
    source.addEventListener("open", function () { setStatus("live"); announce("agentrun:open", {}); });
    source.addEventListener("error", function () {
      setStatus("reconnecting");
      if (source.readyState === EventSource.CLOSED) { setTimeout(connect, 1000); }
    });
    source.addEventListener("hello", function (e) { setStatus("live"); lastId = lastId || e.lastEventId; });
    source.addEventListener("change", function (e) {
      setStatus("live");
      lastId = e.lastEventId;
      body.dataset.lastEventId = lastId;
      var summary = {};
      try { summary = JSON.parse(e.data); } catch (err) { summary = { truncated: true }; }
      if (concerns(summary)) { refresh(); }
      summary.revision = Number(lastId);  // listeners (follow.js, tests) see which event it was
      announce("agentrun:change", summary);
    });
  }
  connect();
})();
