// Alerts → Channels → Add: show only the fields the chosen kind uses (webhook: URL, secret, format;
// email: address; apprise: URL). Without this script every field shows and the server still checks.
(function () {
  "use strict";
  var form = document.querySelector("[data-channel-form]");
  if (!form) return;
  var kind = form.querySelector("select[name=kind]");
  function apply() {
    form.querySelectorAll("[data-field-row]").forEach(function (row) {
      var input = row.querySelector("[data-kinds]");
      if (!input) return;
      row.hidden = input.dataset.kinds.split(" ").indexOf(kind.value) < 0;
    });
  }
  kind.addEventListener("change", apply);
  apply();
})();
