// Profile trend: median per run with min–max bars, change-log entries as vertical lines.
(function () {
  "use strict";
  var el = document.getElementById("bench-trend");
  if (!el || !window.Plotly) return;
  var d = JSON.parse(el.textContent), dark = document.documentElement.dataset.theme === "dark";

  function trace(metric, name) {
    var s = d[metric];
    return {
      x: d.t, y: s.median, name: name, mode: "lines+markers", type: "scatter",
      customdata: d.run, hovertemplate: "run %{customdata}: %{y:.2f}<extra></extra>",
      error_y: { type: "data", symmetric: false, array: s.max.map(function (v, i) { return v - s.median[i]; }),
                 arrayminus: s.median.map(function (v, i) { return v - s.min[i]; }) },
      marker: { size: 9, symbol: d.tainted.map(function (t) { return t ? "circle-open" : "circle"; }),
                color: d.regression.map(function (r) { return r ? "#d33" : "#2a7"; }) }
    };
  }

  function layout(title) {
    var shapes = [], notes = [];
    d.annotations.forEach(function (a) {
      shapes.push({ type: "line", xref: "x", yref: "paper", x0: a.time, x1: a.time, y0: 0, y1: 1,
                    line: { dash: a.corrected ? "dot" : "dash", width: 1, color: "#888" } });
      notes.push({ x: a.time, y: 1, xref: "x", yref: "paper", text: a.title + (a.corrected ? " (corrected)" : ""),
                   showarrow: false, textangle: -90, xanchor: "right", yanchor: "top", font: { size: 10 } });
    });
    return { title: title, shapes: shapes, annotations: notes, margin: { t: 40, r: 20, b: 40, l: 60 },
             paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
             font: { color: dark ? "#ddd" : "#222" }, showlegend: false };
  }

  function openRun(ev) { var p = ev.points[0]; if (p) location.href = "../../runs/" + p.customdata + "/"; }
  var opts = { responsive: true, displaylogo: false };
  Plotly.newPlot("trend-decode", [trace("decode_tokens_per_s", "decode tok/s")], layout("Decode tokens/s"), opts)
    .then(function (gd) { gd.on("plotly_click", openRun); });
  Plotly.newPlot("trend-ttft", [trace("ttft_ms", "TTFT ms")], layout("TTFT ms"), opts)
    .then(function (gd) { gd.on("plotly_click", openRun); });
})();
