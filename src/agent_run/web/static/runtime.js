// agent-run web: the Model select offers only the chosen runtime's models. Without JS every
// runtime's models are listed, grouped by runtime, and the daemon refuses a mismatch by field.
(function () {
  "use strict";
  var runtime = document.getElementById("f-runtime"), model = document.getElementById("f-model");
  if (!runtime || !model || runtime.tagName !== "SELECT" || model.tagName !== "SELECT") { return; }

  function offer() {
    var chosen = runtime.value || runtime.dataset.default || "";
    model.querySelectorAll("optgroup[data-runtime]").forEach(function (group) {
      var mine = group.dataset.runtime === chosen;
      group.hidden = !mine;
      group.disabled = !mine;
    });
    var picked = model.options[model.selectedIndex];
    if (picked && picked.parentElement.disabled) { model.value = ""; }
  }

  runtime.addEventListener("change", offer);
  offer();
})();
