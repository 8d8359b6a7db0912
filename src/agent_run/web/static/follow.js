// agent-run web: the Session follows its agent's transcript by cursor. On a change to the agent
// (and whenever the event stream (re)opens) it asks /agents/<id>/transcript for the blocks after
// the last one it has and appends them; a trailing tool group, which can still grow, is asked
// for from its start and replaced. Nothing is read twice, nothing is skipped: the cursor is the
// store's message id, so a page that was away (web process or daemon restarted) catches up.
(function () {
  "use strict";
  var busy = false, again = false, PAUSE_MS = 200, RETRY_MS = 1000;

  function lastBlock(box) {
    var blocks = box.querySelectorAll("[data-block]");
    return blocks.length ? blocks[blocks.length - 1] : null;
  }

  function follow() {
    var section = document.getElementById("session"), box = document.getElementById("transcript");
    if (!section || !box || !section.dataset.agent) { return; }
    if (busy) { again = true; return; }
    busy = true;
    var agent = section.dataset.agent, last = lastBlock(box), replace = !!last && last.dataset.kind === "tools";
    var before = last && last.previousElementSibling;
    var after = last ? (replace ? last.dataset.after : last.dataset.last) : "0";
    var turn = last ? (replace ? (before ? before.dataset.turn : "0") : last.dataset.turn) : "0";
    var pause = PAUSE_MS;
    fetch("/agents/" + encodeURIComponent(agent) + "/transcript?after=" + encodeURIComponent(after) +
          "&turn=" + encodeURIComponent(turn), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (page) {
        if (document.getElementById("transcript") !== box || lastBlock(box) !== last) { again = true; return; }
        if (page.html) {
          if (replace) { last.remove(); }
          box.insertAdjacentHTML("beforeend", page.html);
          var empty = document.getElementById("transcript-empty");
          if (empty) { empty.remove(); }
        }
        section.dataset.cursor = page.cursor;
        if (page.more) { again = true; }
      })
      .catch(function (err) {  // retry while the server is away; a refusal (4xx) is final
        if (typeof err !== "number" || err >= 500) { again = true; pause = RETRY_MS; }
      })
      .finally(function () {
        setTimeout(function () {
          busy = false;
          if (again) { again = false; follow(); }
        }, pause);
      });
  }

  function concerns(summary) {
    var section = document.getElementById("session");
    return !!section && (summary.truncated || (summary.agents || []).indexOf(section.dataset.agent) >= 0);
  }

  document.addEventListener("agentrun:open", follow);
  document.addEventListener("agentrun:change", function (e) { if (concerns(e.detail || {})) { follow(); } });
})();
