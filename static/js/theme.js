// Light/dark theme, remembered per browser; runs before paint to avoid a flash.
(function () {
  var saved = localStorage.getItem("sparkops-theme");
  var dark = saved ? saved === "dark" : window.matchMedia("(prefers-color-scheme: dark)").matches;
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  document.addEventListener("DOMContentLoaded", function () {
    var btn = document.getElementById("theme-toggle");
    if (!btn) return;
    btn.addEventListener("click", function () {
      var next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
      document.documentElement.dataset.theme = next;
      localStorage.setItem("sparkops-theme", next);
      document.dispatchEvent(new CustomEvent("sparkops:theme", { detail: next }));
    });
  });
})();
