// Experiment page: redrawn by the server after each repetition. The live WebSocket's
// "experiment.progress" events say when; on (re)connect the page asks once what it missed.
// No polling.
(function () {
  "use strict";
  var box = document.getElementById("exp-status");
  if (!box || box.dataset.live !== "1") return;
  var id = parseInt(box.dataset.experiment, 10), done = parseInt(box.dataset.done, 10);
  var status = box.dataset.status, reloading = false;

  function apply(p) {
    if (reloading || (p.done === done && p.status === status)) return;
    reloading = true;
    setTimeout(function () { location.reload(); }, 200);
  }

  function catchUp() {
    fetch(location.pathname + "?format=progress", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (p) { if (p) apply(p); })
      .catch(function () {});
  }

  // The page's one WebSocket is paging.js's (every signed-in page has it): it re-dispatches each
  // event, live.hello on every (re)connect included, as sparkops:event.
  function connect() {
    document.addEventListener("sparkops:event", function (e) {
      var ev = e.detail;
      if (ev.type === "live.hello") catchUp();
      if (ev.type === "experiment.progress" && ev.payload && ev.payload.experiment === id) apply(ev.payload);
    });
  }
  connect();
})();
