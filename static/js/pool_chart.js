// Ledgers page: pool tokens per engine over time; step lines because a pool only changes at a restart.
(function () {
  "use strict";
  var el = document.getElementById("pool-chart"), data = document.getElementById("pool-chart-data");
  if (!el || !data || !window.Plotly || !window.sparkopsCharts) return;
  var traces = JSON.parse(data.textContent).map(function (t) {
    return { x: t.x, y: t.y, text: t.text, name: t.name, type: "scatter", mode: "lines+markers", line: { shape: "hv" } };
  });
  window.sparkopsCharts.onThemeRedraw(function () {
    window.Plotly.react(el, traces, window.sparkopsCharts.baseLayout({
      margin: { t: 20, r: 20, b: 40, l: 70 }, yaxis: { title: { text: "KV pool (tokens)" }, rangemode: "tozero" },
      xaxis: { type: "date", tickformat: "%b %d\n%H:%M", hoverformat: "%Y-%m-%d %H:%M", nticks: 8 }, showlegend: true
    }), { displaylogo: false, responsive: true });
  });
})();
