// Profile trend: median per run with min–max bars, the noise band (the median of the last five
// comparable runs ± the regression check's threshold: a next run outside it is a regression, inside it noise),
// change-log entries as vertical lines (shared with the live charts: static/js/charts.js). A click on a
// run's marker opens the run.
(function () {
  "use strict";
  var el = document.getElementById("bench-trend"), charts = window.sparkopsCharts;
  if (!el || !window.Plotly || !charts) return;
  var d = JSON.parse(el.textContent);

  function trace(metric, name) {
    var s = d[metric];
    return {
      x: d.t, y: s.median, name: name, mode: "lines+markers", type: "scatter",
      customdata: d.run, hovertemplate: "run %{customdata}: %{y:.2f}<extra></extra>",
      error_y: { type: "data", symmetric: false, array: s.max.map(function (v, i) { return v - s.median[i]; }),
                 arrayminus: s.median.map(function (v, i) { return v - s.min[i]; }) },
      marker: { size: 9, symbol: d.tainted.map(function (t) { return t ? "circle-open" : "circle"; }),
                color: d.regression.map(function (r) { return charts.cssVar(r ? "--bad" : "--ok"); }) }
    };
  }

  // The noise band as a shaded rectangle across the chart (layout shape, under the data).
  function band(metric) {
    var b = d[metric].band;
    if (!b) return [];
    return [{ type: "rect", xref: "paper", x0: 0, x1: 1, yref: "y", y0: b.low, y1: b.high, layer: "below",
              line: { width: 0 }, fillcolor: "rgba(128,128,128,0.18)", name: "noise band" }];
  }

  function layout(title, metric) {
    var marks = charts.changelogMarks(d.annotations);
    // From zero: run-to-run noise (40.000–40.025) must not look like a cliff.
    return charts.baseLayout({ title: { text: title }, shapes: band(metric).concat(marks.shapes), annotations: marks.annotations,
                               margin: { t: 40, r: 20, b: 40, l: 60 }, showlegend: false,
                               yaxis: { rangemode: "tozero", title: { text: title.indexOf("TTFT") >= 0 ? "ms" : "tokens/s" } } });
  }

  function openRun(ev) { var p = ev.points[0]; if (p && p.customdata !== undefined) location.href = "../../runs/" + p.customdata + "/"; }
  var panels = [["trend-decode", "decode_tokens_per_s", "decode tok/s", "Decode tokens/s"],
                ["trend-ttft", "ttft_ms", "TTFT ms", "TTFT ms"]];
  var opts = { responsive: true, displaylogo: false }, bound = false;
  charts.onThemeRedraw(function () {
    Promise.all(panels.map(function (p) { return window.Plotly.react(p[0], [trace(p[1], p[2])], layout(p[3], p[1]), opts); }))
      .then(function (divs) {
        if (bound) return;
        bound = true;
        divs.forEach(function (div) { div.on("plotly_click", openRun); charts.bindChangelogClicks(div); });
      });
  });
})();
