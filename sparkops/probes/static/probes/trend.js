// Probe trend: the share of good cells per run, change-log entries as vertical lines (the shared chart
// helpers in static/js/charts.js). A click on a run's marker opens the run.
(function () {
  "use strict";
  var el = document.getElementById("probe-trend"), charts = window.sparkopsCharts;
  if (!el || !window.Plotly || !charts) return;
  var d = JSON.parse(el.textContent);

  function trace(ys, name, dash) {
    return {
      x: d.t, y: ys, name: name, mode: "lines+markers", type: "scatter", customdata: d.run, text: d.headline,
      hovertemplate: "run %{customdata}: %{text}<extra></extra>", line: { dash: dash || "solid" },
      marker: { size: 9, symbol: d.tainted.map(function (t) { return t ? "circle-open" : "circle"; }),
                color: d.regression.map(function (r) { return charts.cssVar(r ? "--bad" : "--ok"); }) }
    };
  }

  function draw() {
    var traces = [trace(d.score, "good share")];
    if (d.coerced.some(function (v) { return v !== null; })) traces.push(trace(d.coerced, "coerced", "dot"));
    var marks = charts.changelogMarks(d.annotations);
    var layout = charts.baseLayout({ title: { text: "Good share per run" }, shapes: marks.shapes, annotations: marks.annotations,
                                     margin: { t: 40, r: 20, b: 40, l: 50 }, showlegend: traces.length > 1,
                                     yaxis: { range: [-0.05, 1.05], tickformat: ".0%" } });
    return window.Plotly.react("probe-trend-chart", traces, layout, { responsive: true, displaylogo: false });
  }

  var bound = false;
  charts.onThemeRedraw(function () {
    draw().then(function (div) {
      if (bound) return;
      bound = true;
      div.on("plotly_click", function (ev) { var p = ev.points[0]; if (p) location.href = "../../runs/" + p.customdata + "/"; });
      charts.bindChangelogClicks(div);
    });
  });
})();
