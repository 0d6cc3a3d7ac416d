// Explore: fetch the chart's JSON for this page's query string and draw it with the vendored Plotly
// (charts.js for colours and change-log marks). Zooming writes the range into the address, so the
// link reproduces what is on the screen. No inline script or style: the CSP allows neither.
(function () {
  "use strict";
  var div = document.getElementById("explore-chart"), charts = window.sparkopsCharts;
  var status = document.getElementById("explore-status"), link = document.getElementById("explore-link");
  if (!div || !div.dataset.src || !charts || !window.Plotly) return;

  function layout(data) {
    var cssVar = charts.cssVar, line = cssVar("--line"), bad = cssVar("--bad");
    var marks = charts.changelogMarks(data.annotations), shapes = marks.shapes, notes = marks.annotations;
    (data.alerts || []).forEach(function (a) {
      shapes.push({ type: "rect", xref: "x", yref: "paper", x0: a.start, x1: a.end, y0: 0, y1: 1, layer: "below",
                    fillcolor: bad, opacity: a.severity === "critical" ? 0.16 : 0.09, line: { width: 0 } });
      notes.push({ x: a.start, xref: "x", y: 0, yref: "paper", yanchor: "bottom", xanchor: "left", showarrow: false,
                   text: "⚠", hovertext: a.subject + " · " + a.title, font: { color: bad, size: 13 }, name: "alert" });
    });
    var yaxis = { gridcolor: line, tickformat: data.tickformat || "", rangemode: "tozero",
                  title: { text: data.unit || "", font: { size: 11, color: cssVar("--muted") }, standoff: 4 } };
    var narrow = div.clientWidth < 600;
    return charts.baseLayout({ title: { text: data.title, font: { size: 13, color: cssVar("--fg") }, x: 0.01 },
      height: narrow ? 380 : 460, margin: { l: 58, r: 12, t: 34, b: 70 }, showlegend: true, hovermode: "x unified",
      legend: { orientation: "h", x: 0, xanchor: "left", y: -0.12, yanchor: "top" },
      xaxis: { type: "date", gridcolor: line, range: [data.range.start, data.range.end] },
      yaxis: yaxis, shapes: shapes, annotations: notes });
  }

  function traces(data) {
    return data.traces.map(function (tr) {
      return { x: tr.t, y: tr.y, name: tr.name, type: "scatter", mode: "lines", line: { width: 1.5 },
               connectgaps: false, hovertemplate: "%{y:.3~f}" };
    });
  }

  function draw(data) {
    window.Plotly.react(div, traces(data), layout(data), { responsive: true, displaylogo: false, displayModeBar: false });
  }

  // A zoom or pan: the address (and the link) take the range shown, as start and end.
  function follow(ev) {
    var a = ev["xaxis.range[0]"], b = ev["xaxis.range[1]"];
    if (ev["xaxis.range"]) { a = ev["xaxis.range"][0]; b = ev["xaxis.range"][1]; }
    if (!a || !b) return;
    var q = new URLSearchParams(window.location.search);
    q.delete("range"); q.set("start", String(a).slice(0, 19).replace(" ", "T") + "Z"); q.set("end", String(b).slice(0, 19).replace(" ", "T") + "Z");
    window.history.replaceState(null, "", "?" + q.toString());
    if (link) link.href = "?" + q.toString();
  }

  fetch(div.dataset.src, { credentials: "same-origin" })
    .then(function (r) { return r.json().then(function (body) { return r.ok ? body : Promise.reject(body.error || r.status); }); })
    .then(function (data) {
      charts.onThemeRedraw(function () { draw(data); });
      charts.bindChangelogClicks(div);
      div.on("plotly_relayout", follow);
      div.dataset.traces = String(data.traces.length);
      if (status) status.textContent = data.traces.length ? "" : "No samples in this range.";
    })
    .catch(function (err) { if (status) status.textContent = "Could not load the chart: " + err; });
})();
