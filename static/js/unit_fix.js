// A down card's fix (templates/dashboard/partials/_unit_fix.html): Copy buttons for its commands and
// the Restart form's confirmation. Delegated from the document: cards are swapped in by live.js.
(function () {
  "use strict";

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    // Plain http on a LAN address is no secure context: the old way still copies.
    var area = document.createElement("textarea");
    area.value = text; area.setAttribute("readonly", ""); area.className = "offscreen";
    document.body.appendChild(area); area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(area);
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  document.addEventListener("click", function (ev) {
    var button = ev.target.closest && ev.target.closest("button[data-copy]");
    if (!button) return;
    var source = button.parentNode.querySelector(".copy-source");
    if (!source) return;
    copyText(source.textContent).then(function () { button.textContent = "Copied"; button.dataset.copied = "1"; },
                                      function () { button.textContent = "Select and copy"; });
    setTimeout(function () { button.textContent = "Copy"; }, 2500);
  });

  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.classList || !form.classList.contains("unit-restart")) return;
    if (!window.confirm(form.dataset.confirm || "Restart?")) { ev.preventDefault(); return; }
    var token = document.querySelector("input[name=csrfmiddlewaretoken]:not(.csrf-fill)");
    form.querySelectorAll(".csrf-fill").forEach(function (i) { if (token) i.value = token.value; });
    form.querySelector("input[name=confirm]").value = form.dataset.unit || "";
    var next = form.querySelector("input[name=next]");
    if (next) next.value = location.pathname + location.search;
  }, true);
})();
