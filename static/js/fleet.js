// The Hosts grid kept live: one WebSocket (groups=fleet), "fleet.delta" events applied in place — a
// changed box's word, detail and rank, a changed engine's chip — then the tiles re-sorted (problems first)
// and the summary recounted. The words come from the server (selectors/fleet.py); this file only places
// them. The grid itself is fetched again (server-rendered) on a reconnect, on a return to a hidden tab
// that missed events, and when a box or engine came or went. Re-dispatches every event as
// "sparkops:event" for paging.js, as live.js does.
(function () {
  "use strict";
  var root = document.getElementById("live-root");
  if (!root || root.dataset.groups !== "fleet") return;
  var banner = document.getElementById("live-banner");
  // The watcher sends a heartbeat every 10 s when nothing changed (sparkops/live/fleet.py).
  var QUIET_MS = 30000;
  var state = { socket: null, retry: 0, lastData: Date.now(), connected: false, pending: [], missed: false,
                applied: 0, resorts: 0, fetches: 0 };
  window.sparkopsFleet = state;  // for the browser tests and the bench

  function clock(t) { return new Date(t).toLocaleTimeString(); }
  function showBanner(text) { banner.textContent = text; banner.hidden = false; root.classList.add("is-stale"); }
  function hideBanner() { banner.hidden = true; root.classList.remove("is-stale"); }
  function updated() {
    var el = document.getElementById("fleet-updated");
    if (el) el.textContent = "live · " + clock(state.lastData);
  }

  function connect() {
    var proto = location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(proto + location.host + "/ws/live/?groups=fleet");
    state.socket = ws;
    ws.onopen = function () {
      var wasDown = state.retry > 0;
      state.retry = 0; state.connected = true; hideBanner();
      if (wasDown) { refetch(); document.dispatchEvent(new CustomEvent("sparkops:reconnected")); }
    };
    ws.onmessage = function (msg) {
      state.lastData = Date.now(); hideBanner(); updated();
      var ev = JSON.parse(msg.data);
      if (ev.type === "fleet.delta") onDelta(ev.payload || {});
      document.dispatchEvent(new CustomEvent("sparkops:event", { detail: ev }));
    };
    ws.onclose = function (ev) {
      state.connected = false;
      if (ev.code === 4401 || ev.code === 4403) { showBanner("Signed out — reload the page to log in again."); return; }
      var delay = Math.min(30000, 1000 * Math.pow(2, state.retry++)) * (0.8 + Math.random() * 0.4);
      showBanner("Connection lost — states as of " + clock(state.lastData) + "; retrying in " + Math.round(delay / 1000) + " s");
      setTimeout(connect, delay);
    };
  }

  // A socket can stay open while no worker leads the fleet: then nobody judges the boxes either.
  setInterval(function () {
    if (state.connected && !document.hidden && Date.now() - state.lastData > QUIET_MS) {
      showBanner("No word from the fleet's leader since " + clock(state.lastData) + ": these states may be old (is any worker running?)");
    }
  }, 5000);

  // A hidden tab keeps the deltas (small) and applies them on return, in order.
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) return;
    if (state.missed) { state.missed = false; state.pending = []; refetch(); return; }
    var pending = state.pending; state.pending = [];
    pending.forEach(apply);
  });

  function onDelta(p) {
    if (document.hidden) {
      if (state.pending.length > 50) state.missed = true; else state.pending.push(p);
      return;
    }
    apply(p);
  }

  function apply(p) {
    if (p.layout) { refetch(); return; }
    var tiles = p.tiles || {}, chips = p.chips || {}, resort = false, unknown = false;
    Object.keys(tiles).forEach(function (id) {
      var el = document.getElementById("tile-" + id), t = tiles[id];
      if (!el) { unknown = true; return; }
      if (el.dataset.rank !== String(t.rank)) resort = true;
      el.className = "tile box-" + t.state;
      el.dataset.state = t.state; el.dataset.rank = String(t.rank);
      el.querySelector(".box-word").textContent = t.word;
      el.querySelector(".box-detail").textContent = t.detail;
    });
    Object.keys(chips).forEach(function (id) {
      var el = document.getElementById("chip-" + id), c = chips[id];
      if (!el) { unknown = true; return; }
      el.className = "chip eng-" + c.state;
      el.dataset.state = c.state;
      el.title = el.dataset.engine + ": " + c.title;
      el.querySelector(".chip-word").textContent = c.word;
    });
    if (unknown) { refetch(); return; }
    if (resort) sortTiles();
    summarize();
    state.applied++;
  }

  // Problems first, then by name: the order the server renders.
  function sortTiles() {
    var grid = document.getElementById("fleet-grid");
    var tiles = Array.prototype.slice.call(grid.querySelectorAll(".tile"));
    tiles.sort(function (a, b) {
      return (+a.dataset.rank - +b.dataset.rank) || (a.dataset.name < b.dataset.name ? -1 : a.dataset.name > b.dataset.name ? 1 : 0);
    });
    tiles.forEach(function (t) { grid.appendChild(t); });
    state.resorts++;
  }

  // The counts in the order the words first appear, problems first (as fleet_counts does).
  function summarize() {
    var summary = document.getElementById("fleet-summary"), sep = summary.querySelector(".fleet-sep");
    var boxes = count(".tile .box-word"), engines = count(".tile .chip-word");
    summary.querySelectorAll("[data-count]").forEach(function (el) { el.remove(); });
    boxes.forEach(function (kv) { summary.insertBefore(countSpan("box", kv), sep); });
    engines.forEach(function (kv) { summary.insertBefore(countSpan("engine", kv), document.getElementById("fleet-updated")); });
  }

  function count(selector) {
    var seen = new Map();
    document.querySelectorAll(selector).forEach(function (el) {
      var w = el.textContent; seen.set(w, (seen.get(w) || 0) + 1);
    });
    return Array.from(seen.entries());
  }

  function countSpan(kind, kv) {
    var span = document.createElement("span"), b = document.createElement("b");
    span.className = "fleet-count"; span.dataset.count = kind; span.dataset.word = kv[0];
    b.textContent = String(kv[1]);
    span.appendChild(b); span.appendChild(document.createTextNode(" " + kv[0]));
    return span;
  }

  function refetch() {
    state.fetches++;
    fetch(root.dataset.src, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { document.getElementById("fleet").innerHTML = html; updated(); })
      .catch(function () { state.missed = true; });
  }

  connect();
})();
