// The inbox page: re-fetch the list when a delivery arrives (paging.js's socket says so).
(function () {
  "use strict";
  var rows = document.getElementById("inbox-rows");
  if (!rows) return;
  function refresh() {
    fetch(rows.dataset.src, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { rows.innerHTML = html; })
      .catch(function () {});
  }
  document.addEventListener("sparkops:event", function (e) {
    if (e.detail && e.detail.type === "inbox.received") refresh();
  });
  document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });
})();
