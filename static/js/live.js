// SparkOps live client: one WebSocket per page, server-rendered cards swapped in, Plotly
// charts extended in place. Never polls: it fetches only on load, on a range change, on
// reconnect, on return to a hidden tab, and when an event says a list changed.
(function () {
  "use strict";
  var root = document.getElementById("live-root");
  if (!root) return;
  var banner = document.getElementById("live-banner");
  var state = { socket: null, retry: 0, lastData: Date.now(), connected: false, paused: document.hidden,
                pendingCards: {}, alertsDirty: false, chartsDirty: false, sparks: {}, traceIndex: {},
                range: { range: "1h" } };
  var SPARK_MS = 15 * 60 * 1000, MAX_LIVE_POINTS = 2500, QUIET_MS = 15000, GAP_MS = 15000;
  window.sparkopsLive = state; // lets the browser tests and a curious operator inspect it

  // ---------- connection + banner ----------
  function clock(t) { return new Date(t).toLocaleTimeString(); }
  function showBanner(text) { banner.textContent = text; banner.hidden = false; document.body.classList.add("is-stale"); }
  function hideBanner() { banner.hidden = true; document.body.classList.remove("is-stale"); }

  function connect() {
    var proto = location.protocol === "https:" ? "wss://" : "ws://";
    var groups = encodeURIComponent(root.dataset.groups || "");
    var ws = new WebSocket(proto + location.host + "/ws/live/?groups=" + groups);
    state.socket = ws;
    ws.onopen = function () {
      var wasDown = state.retry > 0;
      state.retry = 0; state.connected = true; hideBanner();
      if (wasDown) { catchUp(); document.dispatchEvent(new CustomEvent("sparkops:reconnected")); }
    };
    ws.onmessage = function (msg) {
      state.lastData = Date.now(); hideBanner();
      var ev = JSON.parse(msg.data);
      onEvent(ev);
      document.dispatchEvent(new CustomEvent("sparkops:event", { detail: ev }));  // paging.js pages on alerts
    };
    ws.onclose = function (ev) {
      state.connected = false;
      if (ev.code === 4401 || ev.code === 4403) { showBanner("Signed out — reload the page to log in again."); return; }
      var delay = Math.min(30000, 1000 * Math.pow(2, state.retry++)) * (0.8 + Math.random() * 0.4);
      showBanner("Connection lost — data stale since " + clock(state.lastData) + "; retrying in " + Math.round(delay / 1000) + " s");
      setTimeout(connect, delay);
    };
  }

  // A socket can stay open while nothing publishes (worker stopped): say so too.
  setInterval(function () {
    if (state.connected && !state.paused && Date.now() - state.lastData > QUIET_MS) {
      showBanner("No updates — data stale since " + clock(state.lastData));
    }
  }, 5000);

  document.addEventListener("visibilitychange", function () {
    state.paused = document.hidden;
    if (!state.paused) { applyPendingCards(); catchUp(); }
  });

  function catchUp() {
    loadSparks();
    if (chartsEl) loadCharts();
    refreshAlerts();
  }

  // ---------- events ----------
  function onEvent(ev) {
    var p = ev.payload || {};
    if (ev.type === "engine.sample") card("engine-card-" + p.id, p.html, "card engine status-" + p.status, "engine." + p.id, p);
    else if (ev.type === "host.sample") card("host-cards-" + p.id, p.html, null, "host." + p.id, p);
    else if (ev.type === "alert.changed") { state.alertsDirty = true; if (!state.paused) refreshAlerts(); }
    else if (ev.type === "changelog.entry") { state.chartsDirty = true; if (!state.paused && chartsEl) loadCharts(); }
  }

  function card(id, html, cls, subject, p) {
    if (state.paused) { state.pendingCards[id] = { html: html, cls: cls }; extendSparks(subject, p); return; }
    extendSparks(subject, p);  // first, so the card's smoothed decode includes this poll
    swapCard(id, html, cls);
    extendCharts(subject, p);
  }

  function swapCard(id, html, cls) {
    var el = document.getElementById(id);
    if (!el || html == null) return;
    if (cls) el.className = cls;
    el.innerHTML = html;
    drawSparks(el);
  }

  function applyPendingCards() {
    Object.keys(state.pendingCards).forEach(function (id) { swapCard(id, state.pendingCards[id].html, state.pendingCards[id].cls); });
    state.pendingCards = {};
  }

  function refreshAlerts() {
    var box = document.getElementById("firing-alerts");
    if (!box || !root.dataset.alerts) return;
    state.alertsDirty = false;
    fetch(root.dataset.alerts, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        box.innerHTML = html;
        // The partial was rendered for /live/alerts/; after an Ack, come back to this page.
        box.querySelectorAll('input[name="next"]').forEach(function (i) { i.value = location.pathname; });
      })
      .catch(function () { state.alertsDirty = true; });
  }

  // ---------- sparklines (inline SVG, 15 minutes) ----------
  function loadSparks() {
    if (!root.dataset.sparks) return;
    fetch(root.dataset.sparks, { credentials: "same-origin" }).then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) return;
        Object.keys(data.sparks).forEach(function (k) {
          var s = data.sparks[k];
          state.sparks[k] = { t: s.t.map(function (x) { return Date.parse(x); }), y: s.y };
        });
        drawSparks(document);
      }).catch(function () {});
  }

  function extendSparks(subject, p) {
    var t = Date.parse(p.t), pts = p.points || {};
    Object.keys(pts).forEach(function (m) {
      var s = state.sparks[subject + "|" + m];
      if (!s || !isFinite(t)) return;
      s.t.push(t); s.y.push(pts[m]);
      while (s.t.length && s.t[0] < t - SPARK_MS) { s.t.shift(); s.y.shift(); }
    });
  }

  // Decode over the last SMOOTH_MS, not one 2 s poll (which flickers 0 ↔ 300 tok/s between requests):
  // the card's Decode and its sparkline's caption show this same number.
  var SMOOTH_MS = 30000;
  function smoothed(s, now) {
    var sum = 0, n = 0;
    for (var i = s.t.length - 1; i >= 0 && s.t[i] >= now - SMOOTH_MS; i--) if (s.y[i] != null) { sum += s.y[i]; n++; }
    return n ? sum / n : null;
  }

  function drawSparks(scope) {
    scope.querySelectorAll(".spark[data-spark]").forEach(function (el) {
      var s = state.sparks[el.dataset.spark + "|" + el.dataset.metric];
      if (!s || !s.t.length) { el.innerHTML = ""; return; }
      var avg = el.dataset.metric === "generation_tokens_per_s" ? smoothed(s, Date.now()) : undefined;
      var decode = avg !== undefined && el.closest(".card") && el.closest(".card").querySelector("[data-field=decode]");
      // A card that is not up shows no rate: the last 30 s of a dead engine are not its decode now.
      var down = decode && decode.dataset.down === "1";
      if (down) avg = null;
      if (decode && !down) decode.textContent = avg == null ? "— tok/s" : avg.toFixed(1) + " tok/s · 30 s avg";
      var now = Date.now(), ys = s.y.filter(function (v) { return v != null; });
      var lo = Math.min.apply(null, ys.concat([0])), hi = Math.max.apply(null, ys.concat([1e-9]));
      var pts = [];
      s.t.forEach(function (t, i) {
        if (s.y[i] == null) return;
        var x = 100 - (now - t) / SPARK_MS * 100, y = 22 - (s.y[i] - lo) / (hi - lo || 1) * 20;
        pts.push(x.toFixed(2) + "," + y.toFixed(2));
      });
      var last = ys.length ? ys[ys.length - 1] : null;
      var shown = down ? "not up now" : avg !== undefined ? (avg == null ? "—" : avg.toFixed(1) + " (30 s avg)") : (last == null ? "—" : (+last).toFixed(1));
      el.innerHTML = '<svg viewBox="0 0 100 24" preserveAspectRatio="none" aria-hidden="true"><polyline points="' +
        pts.join(" ") + '"/></svg><span class="spark-label" data-field="spark-caption">' + (el.dataset.label || "") + " · " +
        shown + "</span>";
    });
  }

  // ---------- Plotly charts ----------
  var chartsEl = document.getElementById("charts"), charts = window.sparkopsCharts, cssVar = charts && charts.cssVar;

  function layoutFor(panel, data) {
    var fg = cssVar("--fg"), line = cssVar("--line"), bad = cssVar("--bad");
    var marks = charts.changelogMarks(data.annotations), shapes = marks.shapes, annotations = marks.annotations;
    (data.alerts || []).forEach(function (a) {
      shapes.push({ type: "rect", xref: "x", yref: "paper", x0: a.start, x1: a.end, y0: 0, y1: 1, layer: "below",
                    fillcolor: bad, opacity: a.severity === "critical" ? 0.16 : 0.09, line: { width: 0 } });
    });
    (data.shaded || []).forEach(function (s) {
      shapes.push({ type: "rect", xref: "x", yref: "paper", x0: s.start, x1: s.end, y0: 0, y1: 1, layer: "below",
                    fillcolor: cssVar("--warn"), opacity: 0.15, line: { width: 0 } });
    });
    (data.restarts || []).forEach(function (r) {
      shapes.push({ type: "line", xref: "x", yref: "paper", x0: r.time, x1: r.time, y0: 0, y1: 1,
                    line: { color: cssVar("--warn"), width: 1, dash: "dash" } });
      annotations.push({ x: r.time, xref: "x", y: 1, yref: "paper", yanchor: "top", xanchor: "right", showarrow: false,
                         text: "↻", hovertext: r.title, font: { color: cssVar("--warn"), size: 13 }, name: "restart" });
    });
    // Many traces: the legend goes under the plot, where it cannot cover the title.
    var many = panel.traces.length > 2;
    var yaxis = { gridcolor: line, tickformat: panel.tickformat || "", rangemode: "tozero", fixedrange: false,
                  title: { text: panel.unit || "", font: { size: 11, color: cssVar("--muted") }, standoff: 4 } };
    if ((panel.tickformat || "").indexOf("%") >= 0) {  // a ratio: 0–100 % with distinct ticks, never "1 %, 1 %, 0 %"
      var top = 1;
      panel.traces.forEach(function (tr) { tr.y.forEach(function (v) { if (v != null && v > top) top = v; }); });
      yaxis.range = [0, top]; yaxis.dtick = top > 1 ? null : 0.25; yaxis.autorange = false;
    }
    return charts.baseLayout({ title: { text: panel.title, font: { size: 13, color: fg }, x: 0.01 }, height: many ? 270 : 230,
             margin: { l: 58, r: 12, t: 34, b: many ? 64 : 30 }, showlegend: true,
             legend: many ? { orientation: "h", x: 0, xanchor: "left", y: -0.22, yanchor: "top" }
                          : { orientation: "h", x: 1, xanchor: "right", y: 1.02, yanchor: "bottom" },
             xaxis: { type: "date", gridcolor: line, range: [viewStart(data), data.range.end] },
             yaxis: yaxis, shapes: shapes, annotations: annotations, hovermode: "x unified" });
  }

  // A preset range longer than the history (a fresh box asked for 7 days) starts where the data
  // starts instead of drawing days of nothing; a custom range is drawn as asked.
  function dataStart(data) {
    var first = null;
    (data.panels || []).forEach(function (p) {
      p.traces.forEach(function (tr) {
        for (var i = 0; i < tr.t.length; i++) {
          if (tr.y[i] != null) { var t = Date.parse(tr.t[i]); if (first === null || t < first) first = t; break; }
        }
      });
    });
    return first;
  }

  function viewStart(data) {
    var start = Date.parse(data.range.start), first = dataStart(data);
    if (data.range.key === "custom" || first === null || first <= start) return data.range.start;
    return new Date(first).toISOString();
  }

  function tracesFor(panel) {
    return panel.traces.map(function (tr) {
      return { x: tr.t, y: tr.y, name: tr.name, type: "scatter", mode: "lines", line: { width: 1.5 },
               connectgaps: false, hovertemplate: "%{y:.3~f}" };
    });
  }

  function rangeQuery() {
    var q = new URLSearchParams(state.range).toString();
    return chartsEl.dataset.src + (chartsEl.dataset.src.indexOf("?") >= 0 ? "&" : "?") + q;
  }

  function setStatus(text) { var s = document.querySelector("[data-chart-status]"); if (s) s.textContent = text; }

  function loadCharts() {
    var started = performance.now();
    state.chartsDirty = false;
    setStatus("loading…");
    return fetch(rangeQuery(), { credentials: "same-origin" })
      .then(function (r) { return r.json().then(function (body) { return r.ok ? body : Promise.reject(body.error || r.status); }); })
      .then(function (data) { renderCharts(data); setStatus(""); state.renderMs = performance.now() - started; })
      .catch(function (err) { setStatus("Could not load the charts: " + err); });
  }

  function renderCharts(data) {
    state.chartData = data; state.traceIndex = {};
    data.panels.forEach(function (panel) {
      var div = document.getElementById("chart-" + panel.id.replace(/\W/g, "_"));
      if (!div) {
        div = document.createElement("div");
        div.id = "chart-" + panel.id.replace(/\W/g, "_"); div.className = "chart-panel";
        chartsEl.appendChild(div);
      }
      window.Plotly.react(div, tracesFor(panel), layoutFor(panel, data), { responsive: true, displaylogo: false, displayModeBar: false });
      if (!div.dataset.bound) { bindChart(div); div.dataset.bound = "1"; }
      panel.traces.forEach(function (tr, i) {
        var key = tr.subject + "|" + tr.metric;
        (state.traceIndex[key] = state.traceIndex[key] || []).push({ div: div, index: i, scale: tr.scale || 1 });
      });
    });
    fillStats(data.stats);
  }

  function bindChart(div) {
    // A zoom by the user pins the view; a double-click (autorange) hands it back to the live window.
    div.on("plotly_relayout", function (ev) {
      if (div._sliding) return;
      if (ev["xaxis.range[0]"] !== undefined || ev["xaxis.range"]) div._userZoom = true;
      if (ev["xaxis.autorange"]) { div._userZoom = false; slide(div); }
    });
    charts.bindChangelogClicks(div);
  }

  function extendCharts(subject, p) {
    if (!chartsEl || !state.chartData || state.range.start) return; // a custom range is a fixed window
    var pts = p.points || {}, byDiv = new Map();
    var t = Date.parse(p.t);
    Object.keys(pts).forEach(function (m) {
      (state.traceIndex[subject + "|" + m] || []).forEach(function (ref) {
        var e = byDiv.get(ref.div) || { x: [], y: [], idx: [] };
        var xs = (ref.div.data && ref.div.data[ref.index] && ref.div.data[ref.index].x) || [];
        var last = xs.length ? Date.parse(xs[xs.length - 1]) : NaN;
        var y = pts[m] == null ? null : pts[m] * ref.scale;
        if (isFinite(last) && isFinite(t) && t - last > GAP_MS) {  // back after an outage: break the line
          e.x.push([new Date((t + last) / 2).toISOString(), p.t]); e.y.push([null, y]);
        } else { e.x.push([p.t]); e.y.push([y]); }
        e.idx.push(ref.index);
        byDiv.set(ref.div, e);
      });
    });
    byDiv.forEach(function (e, div) {
      window.Plotly.extendTraces(div, { x: e.x, y: e.y }, e.idx, MAX_LIVE_POINTS);
      slide(div);
    });
  }

  // Preset ranges are "the last N": keep the window ending now unless the user zoomed.
  function slide(div) {
    var r = state.chartData && state.chartData.range;
    if (!r || r.key === "custom" || div._userZoom) return;
    var span = Date.parse(r.end) - Date.parse(r.start), now = Date.now();
    var first = dataStart(state.chartData), from = now - span;
    if (first !== null && first > from) from = first;
    div._sliding = true;
    window.Plotly.relayout(div, { "xaxis.range": [new Date(from).toISOString(), new Date(now).toISOString()] })
      .then(function () { div._sliding = false; }, function () { div._sliding = false; });
  }

  // The penalty (1 − together/alone) as the change it is: "−55 % (slower together)", signed.
  function together(penalty) {
    if (penalty == null) return "—";
    var change = Math.round(-penalty);
    if (change === 0) return "0 % (the same)";
    return (change > 0 ? "+" : "−") + Math.abs(change) + " % (" + (change > 0 ? "faster" : "slower") + " together)";
  }

  function fillStats(stats) {
    var body = document.querySelector("#coresidency-stats tbody");
    if (!body || !stats) return;
    var fmt = function (v, d) { return v == null ? "—" : (+v).toFixed(d); };
    body.innerHTML = Object.keys(stats).map(function (name) {
      var s = stats[name], cell = document.createElement("td"); cell.textContent = name;
      return "<tr>" + cell.outerHTML + "<td>" + fmt(s.alone, 1) + "</td><td>" + fmt(s.together, 1) + "</td><td>" +
        together(s.penalty_pct) + "</td></tr>";
    }).join("");
  }

  // The range lives in the query string (?range=7d, or ?start=…&end=…): a reload, a bookmark or a
  // shared link shows the same span; Back returns to the previous one.
  function rangeFromUrl() {
    var q = new URLSearchParams(location.search);
    if (q.get("start")) {
      var r = { start: q.get("start") };
      if (q.get("end")) r.end = q.get("end");
      return r;
    }
    var key = q.get("range");
    var known = key && document.querySelector('.range-bar button[data-range="' + key.replace(/[^\w]/g, "") + '"]');
    return { range: known ? key : "1h" };
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function localInput(iso) {
    var d = new Date(iso);
    if (!isFinite(d)) return "";
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" + pad(d.getHours()) + ":" + pad(d.getMinutes());
  }

  function showRange() {
    document.querySelectorAll(".range-bar button[data-range]").forEach(function (b) {
      b.classList.toggle("active", !state.range.start && b.dataset.range === state.range.range);
    });
    var form = document.querySelector("[data-custom-range]");
    if (form && state.range.start) {
      form.elements.start.value = localInput(state.range.start);
      form.elements.end.value = state.range.end ? localInput(state.range.end) : "";
    }
  }

  function setRange(range) {
    state.range = range;
    var q = new URLSearchParams(location.search);
    ["range", "start", "end"].forEach(function (k) { q.delete(k); });
    Object.keys(range).forEach(function (k) { q.set(k, range[k]); });
    var url = location.pathname + "?" + q.toString() + location.hash;
    if (url !== location.pathname + location.search + location.hash) history.pushState({ range: range }, "", url);
    showRange();
    loadCharts();
  }

  function bindRangeBar() {
    state.range = rangeFromUrl();
    showRange();
    document.querySelectorAll("[data-range]").forEach(function (btn) {
      if (btn.tagName !== "BUTTON") return;
      btn.addEventListener("click", function () { setRange({ range: btn.dataset.range }); });
    });
    var form = document.querySelector("[data-custom-range]");
    if (form) form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var start = new Date(form.elements.start.value), end = form.elements.end.value;
      if (!isFinite(start)) { setStatus("Give the start of the range."); return; }
      var range = { start: start.toISOString() };
      if (end && isFinite(new Date(end))) range.end = new Date(end).toISOString();
      setRange(range);
    });
    window.addEventListener("popstate", function () { state.range = rangeFromUrl(); showRange(); loadCharts(); });
  }

  document.addEventListener("sparkops:theme", function () { if (state.chartData) renderCharts(state.chartData); });

  // ---------- start ----------
  loadSparks();
  if (chartsEl && window.Plotly && charts) { bindRangeBar(); loadCharts(); }
  else if (chartsEl) setStatus("plotly.js did not load");
  connect();
})();
