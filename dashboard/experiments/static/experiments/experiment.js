// Experiment page: redrawn by the server after each repetition. The live WebSocket's
// "experiment.progress" events say when; on (re)connect the page asks once what it missed.
// No polling.
(function () {
  "use strict";
  var box = document.getElementById("exp-status");
  if (!box || box.dataset.live !== "1") return;
  var id = parseInt(box.dataset.experiment, 10), done = parseInt(box.dataset.done, 10);
  var status = box.dataset.status, retry = 0, reloading = false;

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

  function connect() {
    var proto = location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(proto + location.host + "/ws/live/");
    ws.onopen = function () { retry = 0; };
    ws.onmessage = function (msg) {
      var ev = JSON.parse(msg.data);
      if (ev.type === "live.hello") catchUp();
      if (ev.type === "experiment.progress" && ev.payload && ev.payload.experiment === id) apply(ev.payload);
    };
    ws.onclose = function (ev) {
      if (ev.code === 4401 || ev.code === 4403) return;
      setTimeout(connect, Math.min(30000, 1000 * Math.pow(2, retry++)));
    };
  }
  connect();
})();
