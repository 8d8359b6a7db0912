// agent-run web: the New batch form's live project inspect. When the project folder changes,
// ask the project_inspect tool (through the JSON API, with the page's CSRF token) what it is.
(function () {
  "use strict";
  var input = document.getElementById("f-project");
  var out = document.getElementById("inspect");
  if (!input || !out) { return; }

  function show(parts) {
    out.textContent = "";
    parts.forEach(function (p) {
      var el = document.createElement(p[0] ? "code" : "span");
      el.textContent = p[1];
      if (p[2]) { el.className = p[2]; }
      out.appendChild(el);
    });
  }

  input.addEventListener("change", function () {
    if (!input.value.trim()) { show([]); return; }
    fetch("/api/tools/project_inspect", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": document.body.dataset.csrf },
      body: JSON.stringify({ path: input.value.trim() })
    }).then(function (r) { return r.json(); }).then(function (info) {
      if (info.error) { show([[false, info.error.message, "error"]]); return; }
      if (!info.is_repository) { show([[false, "not inside a git repository", "error"]]); return; }
      show([[false, "repository "], [true, info.repository_root],
            [false, info.subdir ? ", folder " : ""], [true, info.subdir || ""],
            [false, ", branch "], [true, info.branch || "(detached)"],
            [false, ", HEAD "], [true, (info.head || "").slice(0, 12)], [false, " " + (info.head_subject || "")]]);
    });
  });
})();
