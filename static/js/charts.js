// What every Plotly chart in SparkOps shares (live pages, benchmark trend, ledgers): colours
// from the theme's CSS variables, a transparent base layout, and change-log entries drawn as
// vertical lines with a clickable ✎ (dotted once corrected). Load after plotly.js.
window.sparkopsCharts = (function () {
  "use strict";

  function cssVar(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

  function baseLayout(extra) {
    var layout = { paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: { color: cssVar("--fg"), size: 11 } };
    Object.keys(extra || {}).forEach(function (k) { layout[k] = extra[k]; });
    return layout;
  }

  // {shapes, annotations} for ENTRIES ({time, title, url, corrected}), to add to a layout.
  function changelogMarks(entries) {
    var accent = cssVar("--accent"), out = { shapes: [], annotations: [] };
    (entries || []).forEach(function (a) {
      out.shapes.push({ type: "line", xref: "x", yref: "paper", x0: a.time, x1: a.time, y0: 0, y1: 1,
                        line: { color: accent, width: 1.5, dash: a.corrected ? "dot" : "solid" } });
      out.annotations.push({ x: a.time, xref: "x", y: 1, yref: "paper", yanchor: "top", xanchor: "left", showarrow: false,
                             text: "✎", hovertext: a.title + (a.corrected ? " (corrected)" : ""), captureevents: true,
                             font: { color: accent, size: 13 }, name: "changelog:" + a.url });
    });
    return out;
  }

  // A click on a change-log ✎ opens its entry.
  function bindChangelogClicks(div) {
    div.on("plotly_clickannotation", function (ev) {
      var name = (ev.annotation && ev.annotation.name) || "";
      if (name.indexOf("changelog:") === 0) window.location.href = name.slice("changelog:".length);
    });
  }

  // Draw once now and again whenever the theme changes (the colours are read at draw time).
  function onThemeRedraw(draw) {
    draw();
    document.addEventListener("sparkops:theme", draw);
  }

  return { cssVar: cssVar, baseLayout: baseLayout, changelogMarks: changelogMarks,
           bindChangelogClicks: bindChangelogClicks, onThemeRedraw: onThemeRedraw };
})();
