// Run page: the progress bar follows "bench.progress" events on the live WebSocket (a probe run's
// page names "probe.progress" in data-event); the page reloads once when the run ends, to show the
// server-rendered result. No polling.
(function () {
  "use strict";
  var box = document.getElementById("run-status");
  if (!box || box.dataset.live !== "1") return;
  var runId = parseInt(box.dataset.run, 10), bar = document.getElementById("run-progress");
  var eventType = box.dataset.event || "bench.progress";
  var text = document.getElementById("run-progress-text"), status = document.getElementById("run-status-text");
  window.benchProgress = { events: 0 };  // inspected by the browser test

  function apply(p) {
    window.benchProgress.events += 1;
    bar.max = p.total; bar.value = p.done;
    text.textContent = p.done + " / " + p.total + " requests";
    status.textContent = p.status; status.className = "run-" + p.status;
    if (p.status !== "queued" && p.status !== "running") setTimeout(function () { location.reload(); }, 300);
  }

  // A run only moves forward (queued, running, then an end; its done count only grows): a reading
  // behind the one shown is not applied. The catch-up below is read before the socket's next event
  // and can be answered after it: applied, it took the page back to "queued" mid-run.
  var STAGE = { queued: 0, running: 1 };
  function stage(s) { return s in STAGE ? STAGE[s] : 2; }
  function ahead(p) {
    if (p.done !== bar.value) return p.done > bar.value;
    return stage(p.status) > stage(status.textContent);
  }

  // Events sent before the socket joined its groups (or while it was down) are gone: ask once.
  function catchUp() {
    fetch(location.pathname + "?format=progress", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (p) { if (p && ahead(p)) apply(p); })
      .catch(function () {});
  }

  // The page's one WebSocket is paging.js's (every signed-in page has it): it re-dispatches each
  // event, live.hello on every (re)connect included, as sparkops:event.
  function connect() {
    document.addEventListener("sparkops:event", function (e) {
      var ev = e.detail;
      if (ev.type === "live.hello") catchUp();  // subscribed now: fetch what happened before
      if (ev.type === eventType && ev.payload && ev.payload.run === runId && ahead(ev.payload)) apply(ev.payload);
    });
  }
  connect();
})();
