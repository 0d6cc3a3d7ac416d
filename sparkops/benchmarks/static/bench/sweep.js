// Sweep page: aggregate and per-stream decode against the axis (plus TTFT), drawn with the shared chart
// helpers; while the sweep runs, each "bench.sweep" event on the live WebSocket replaces its cell's row
// (server-rendered) and redraws the chart from the numbers it carries; the running cell counts its requests
// from its run's "bench.progress" events. Reloads once when the sweep ends.
(function () {
  "use strict";
  var box = document.getElementById("sweep-status"), dataEl = document.getElementById("sweep-data");
  if (!box || !dataEl) return;
  var sweepId = parseInt(box.dataset.sweep, 10), data = JSON.parse(dataEl.textContent);
  window.sweepLive = { events: 0, rows: 0 };  // inspected by the browser test

  function draw() {
    var charts = window.sparkopsCharts;
    if (!window.Plotly || !charts) return;
    var axisTitle = data.axis === "depth" ? "context depth (prompt tokens)" : "concurrency (streams)";
    var x = { title: { text: axisTitle }, type: "category" };
    var opts = { responsive: true, displaylogo: false };
    var rates = [
      { x: data.x, y: data.aggregate, name: "aggregate decode", mode: "lines+markers", type: "scatter",
        error_y: { type: "data", array: data.aggregate_sd, visible: true } },
      { x: data.x, y: data.per_stream, name: "per-stream decode", mode: "lines+markers", type: "scatter" }
    ];
    window.Plotly.react("sweep-chart", rates, charts.baseLayout({
      title: { text: "Decode tokens/s" }, margin: { t: 40, r: 20, b: 50, l: 60 }, xaxis: x,
      yaxis: { rangemode: "tozero", title: { text: "tokens/s" } }, legend: { orientation: "h", y: -0.3 } }), opts);
    window.Plotly.react("sweep-ttft", [{ x: data.x, y: data.ttft_ms, name: "TTFT median", mode: "lines+markers",
      type: "scatter" }], charts.baseLayout({ title: { text: "TTFT median ms" }, margin: { t: 40, r: 20, b: 50, l: 60 },
      xaxis: x, yaxis: { rangemode: "tozero", title: { text: "ms" } }, showlegend: false }), opts);
  }

  function apply(p) {
    window.sweepLive.events += 1;
    if (p.html) {
      var row = document.querySelector('#sweep-cells tr[data-value="' + p.value + '"]');
      if (row) { row.outerHTML = p.html; window.sweepLive.rows += 1; }
    }
    if (p.chart) { data = p.chart; draw(); }
    var status = document.getElementById("sweep-status-text");
    status.textContent = p.status; status.className = "run-" + p.status;
    if (p.stop_reason) { var stop = document.getElementById("sweep-stop"); stop.hidden = false; stop.textContent = "Stopped early: " + p.stop_reason; }
    if (p.status !== "queued" && p.status !== "running") setTimeout(function () { location.reload(); }, 300);
  }

  function progress(p) {  // the running cell's own requests, as its run page shows them
    var span = document.querySelector('#sweep-cells .cell-progress[data-run="' + p.run + '"]');
    if (!span) return;
    span.textContent = "· " + p.done + " / " + p.total + " requests";
    window.sweepLive.progress = (window.sweepLive.progress || 0) + 1;
  }

  // A sweep only moves forward (queued, running, then an end; its done cells only grow): the catch-up,
  // read before the socket's next event and answered after it, reloads the page only when it is ahead.
  var STAGE = { queued: 0, running: 1 };
  function stage(s) { return s in STAGE ? STAGE[s] : 2; }

  function catchUp() {  // events sent before the socket joined (or while it was down) are gone: ask once
    fetch(location.pathname + "?format=progress", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (p) {
        var shown = document.querySelectorAll('#sweep-cells tr[data-state="done"]').length;
        var now = document.getElementById("sweep-status-text").textContent;
        if (p && (p.cells > shown || (p.cells === shown && stage(p.status) > stage(now)))) location.reload();
      })
      .catch(function () {});
  }

  // The page's one WebSocket is paging.js's (every signed-in page has it): it re-dispatches each
  // event, live.hello on every (re)connect included, as sparkops:event.
  function connect() {
    document.addEventListener("sparkops:event", function (e) {
      var ev = e.detail;
      if (ev.type === "live.hello") catchUp();
      if (ev.type === "bench.sweep" && ev.payload && ev.payload.sweep === sweepId) apply(ev.payload);
      if (ev.type === "bench.progress" && ev.payload) progress(ev.payload);
    });
  }

  if (window.sparkopsCharts) window.sparkopsCharts.onThemeRedraw(draw); else draw();
  if (box.dataset.live === "1") connect();
})();
