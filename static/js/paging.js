// Paging on the open page, on every page of SparkOps: a browser notification for each alert that
// starts firing (permission asked from a button, never on load), the firing count in the tab
// title, and an optional tone (off until switched on; the choice is kept in this browser).
// Alert changes come over the live WebSocket: live.js's on pages that have one (it re-dispatches
// each event as "sparkops:event"), else a socket of this file's own, which re-dispatches each event
// the same way for the page's own script (a run, a sweep, an experiment): one socket a page. It fetches the firing list on
// load and after a reconnect or a return to the tab, never on a timer.
(function () {
  "use strict";
  var box = document.getElementById("paging");
  if (!box) return;
  var SOUND_KEY = "sparkops.sound";
  var enableBtn = document.getElementById("paging-enable");
  var soundBtn = document.getElementById("paging-sound");
  var baseTitle = document.title;
  var state = { firing: {}, notified: {}, shown: {}, loaded: false, sound: false, tones: 0, socket: null, retry: 0 };
  window.sparkopsPaging = state; // lets the browser tests and a curious operator inspect it

  function alertTitle(a) { return a.rule + " on " + a.subject; }

  function showCount() {
    var n = Object.keys(state.firing).length;
    document.title = n ? "(" + n + ") " + baseTitle : baseTitle;
    box.dataset.firing = String(n);
  }

  // ---------- notifications ----------
  function canNotify() { return "Notification" in window && Notification.permission === "granted"; }

  function showPermission() {
    if (!("Notification" in window)) { enableBtn.hidden = true; return; }
    var p = Notification.permission;
    enableBtn.hidden = p === "granted";
    enableBtn.disabled = p === "denied";
    enableBtn.textContent = p === "denied" ? "Notifications blocked" : "Enable notifications";
    enableBtn.title = p === "denied"
      ? "This browser blocks SparkOps's notifications: allow them in the site settings (the icon left of the address)"
      : "Ask this browser to show a notification when an alert starts firing";
  }

  enableBtn.addEventListener("click", function () {
    var asked = Notification.requestPermission(showPermission);  // older browsers take a callback
    if (asked && asked.then) asked.then(showPermission);
  });

  function page(a) {
    if (state.notified[a.id]) return;
    state.notified[a.id] = true;
    if (state.sound) tone();
    if (!canNotify()) return;
    var n = new Notification(alertTitle(a), {
      body: a.message || a.cause || "", tag: "sparkops-alert-" + a.id, requireInteraction: a.severity === "critical"
    });
    n.onclick = function () { window.focus(); location.href = "/alerts/" + a.id + "/"; };
    state.shown[a.id] = n;
  }

  function settle(id) {  // resolved: its notification goes away with it
    delete state.firing[id];
    if (state.shown[id]) { state.shown[id].close(); delete state.shown[id]; }
  }

  function onAlert(a) {
    if (a.state === "firing") {
      var fresh = !state.firing[a.id];
      state.firing[a.id] = alertTitle(a);
      if (fresh) page(a);
    } else {
      settle(a.id);
    }
    showCount();
  }

  // ---------- the firing list: on load, after a reconnect, on return to the tab ----------
  function sync() {
    fetch(box.dataset.src, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (data) {
        var now = {};
        (data.alerts || []).forEach(function (a) { now[a.id] = a; });
        Object.keys(state.firing).forEach(function (id) { if (!now[id]) settle(id); });
        Object.keys(now).forEach(function (id) {
          var a = now[id];
          if (!state.firing[id] && state.loaded) page(a);  // fired while the socket was away
          else state.notified[id] = true;                  // already firing when the page opened
          state.firing[id] = alertTitle(a);
        });
        state.loaded = true;
        showCount();
      })
      .catch(function () {});
  }

  // ---------- sound (WebAudio: two short tones, no audio file) ----------
  var audio = null;
  function tone() {
    var Ctx = window.AudioContext || window.webkitAudioContext;
    if (!Ctx) return;
    audio = audio || new Ctx();
    if (audio.state === "suspended") audio.resume();
    [880, 660].forEach(function (hz, i) {
      var osc = audio.createOscillator(), gain = audio.createGain(), t = audio.currentTime + i * 0.18;
      osc.type = "sine"; osc.frequency.value = hz;
      gain.gain.setValueAtTime(0.0001, t);
      gain.gain.exponentialRampToValueAtTime(0.2, t + 0.02);
      gain.gain.exponentialRampToValueAtTime(0.0001, t + 0.16);
      osc.connect(gain).connect(audio.destination);
      osc.start(t); osc.stop(t + 0.17);
    });
    state.tones++;
  }

  function showSound() {
    soundBtn.setAttribute("aria-pressed", state.sound ? "true" : "false");
    soundBtn.textContent = state.sound ? "♪ Sound on" : "♪ Sound off";
    soundBtn.title = state.sound ? "A tone plays when an alert starts firing (click to turn it off)"
                                 : "Play a tone when an alert starts firing";
  }

  function storedSound() { try { return localStorage.getItem(SOUND_KEY) === "on"; } catch (e) { return false; } }
  soundBtn.addEventListener("click", function () {
    state.sound = !state.sound;
    try { localStorage.setItem(SOUND_KEY, state.sound ? "on" : "off"); } catch (e) { /* private mode: this page only */ }
    showSound();
    if (state.sound) tone();  // a preview, and the click lets the browser start audio
  });

  // ---------- events ----------
  function onEvent(ev) {
    if (ev && ev.type === "alert.changed" && ev.payload) onAlert(ev.payload);
  }

  function ownSocket() {  // pages without live.js (the change log, the inbox, a run, a sweep…)
    var proto = location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(proto + location.host + "/ws/live/");
    state.socket = ws;
    ws.onopen = function () { if (state.retry > 0) sync(); state.retry = 0; };
    ws.onmessage = function (msg) {
      var ev = JSON.parse(msg.data);
      onEvent(ev);
      document.dispatchEvent(new CustomEvent("sparkops:event", { detail: ev }));
    };
    ws.onclose = function (ev) {
      if (ev.code === 4401 || ev.code === 4403) return;  // signed out: the page says so when used
      var delay = Math.min(30000, 1000 * Math.pow(2, state.retry++)) * (0.8 + Math.random() * 0.4);
      setTimeout(ownSocket, delay);
    };
  }

  state.sound = storedSound();
  showSound();
  showPermission();
  sync();
  if (document.getElementById("live-root")) {
    document.addEventListener("sparkops:event", function (e) { onEvent(e.detail); });
    document.addEventListener("sparkops:reconnected", sync);
  } else {
    ownSocket();
  }
  document.addEventListener("visibilitychange", function () { if (!document.hidden) sync(); });
})();
