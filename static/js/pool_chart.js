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
      margin: { t: 40, r: 20, b: 50, l: 70 }, yaxis: { title: { text: "KV pool (tokens)" }, rangemode: "tozero" },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },  // above the plot: a phone keeps its width
      // Plotly's own date ticks suit the span (times within a day with the date once, days over
      // weeks); a fixed "%b %d" format read "Dec 01" on every tick of a one-day ledger.
      xaxis: { type: "date", hoverformat: "%Y-%m-%d %H:%M", tickangle: 0,
               nticks: Math.max(3, Math.min(8, Math.floor(el.clientWidth / 110))) }, showlegend: true
    }), { displaylogo: false, responsive: true });
  });
})();
