/* The planner page: predictions move with the share and window inputs, no reload.
   The same arithmetic as sparkops/planner/engine_model.py (EngineModel.predict, box_use, share_for,
   suggest) over the JSON the view embeds (#planner-data); keep the two alike. */
(function () {
  "use strict";
  var SAME_SHARE = 0.005;
  var node = document.getElementById("planner-data");
  if (!node) return;
  var data = JSON.parse(node.textContent);
  var models = {};
  data.engines.forEach(function (m) { models[m.engine] = m; });

  function round(x, d) { var f = Math.pow(10, d || 0); return Math.round(x * f) / f; }
  function num(x, d) {
    return Number(x).toLocaleString("en-US", { minimumFractionDigits: d || 0, maximumFractionDigits: d || 0 });
  }
  function ceil2(x) { return Math.ceil(Number((x * 100).toFixed(6))) / 100; }
  function floor2(x) { return Math.floor(Number((x * 100).toFixed(6))) / 100; }

  function baseFor(m, window) {
    var wm = m.windows[String(window)] || m.windows[String(m.current_window)];
    if (!wm) throw new Error("engine " + m.engine + " has no ledger row with a pool and a window");
    return wm;
  }
  function notPredictable(text) { var e = new Error(text); e.missing = true; return e; }

  function predict(m, share, window) {
    if (m.missing) throw notPredictable("cannot predict " + m.engine + ": " + m.missing);
    if (!(share > 0 && share <= 1)) throw new Error("the share is a fraction between 0 and 1, e.g. 0.45");
    window = window || m.current_window;
    if (!(window > 0)) throw new Error("the window is a positive number of tokens");
    var wm = baseFor(m, window);
    var measured = wm.measured.filter(function (r) { return Math.abs(r.util - share) <= SAME_SHARE; });
    var basis = [], pool, kv, tpg = wm.tokens_per_gib, method;
    if (measured.length) {
      var row = measured[measured.length - 1];
      pool = row.pool_tokens; kv = row.kv_gib; tpg = row.tokens_per_gib || tpg;
      method = "measured at util " + row.util + " and window " + num(wm.window) + " (row #" + row.id + ")";
      basis.push(row);
    } else if (wm.slope !== null && tpg) {
      kv = wm.intercept + wm.slope * share;
      if (kv <= 0) {
        throw new Error("at util " + share + " " + m.engine + " has no KV memory left: its rows put the weights and workspace at util " +
          (-wm.intercept / wm.slope).toFixed(3));
      }
      pool = kv * tpg;
      method = wm.line_method + "; tokens per GiB from " + wm.tpg_rows.length + " row(s)";
      basis = basis.concat(wm.line_rows);
      wm.tpg_rows.forEach(function (r) { if (!basis.some(function (b) { return b.id === r.id; })) basis.push(r); });
    } else {
      throw notPredictable("cannot predict " + m.engine + " at util " + share + ": " + wm.missing);
    }
    var out = { engine: m.engine, util: share, window: window, base_window: wm.window, method: method,
      tokens_per_gib: tpg ? Math.round(tpg) : null, tokens_per_gib_spread: wm.tokens_per_gib_spread,
      naive_concurrency: null, corrected_concurrency: null, concurrency_range: null, workspace_gib: null, raise_basis: null };
    if (window !== wm.window) {
      var rm = m.raise, naive = pool / window;
      out.naive_concurrency = round(naive, 2);
      if (rm.tokens_per_doubling !== null) {
        var lost = rm.tokens_per_doubling * Math.log2(window / wm.window);
        pool = Math.max(0, pool - lost);
        out.corrected_concurrency = round(pool / window, 2);
        out.workspace_gib = tpg ? round(lost / tpg, 2) : null;
        if (kv !== null && out.workspace_gib !== null) kv -= out.workspace_gib;
        out.raise_basis = num(rm.tokens_per_doubling) + " pool tokens per doubling of the window, from this engine's raise(s): " +
          rm.pairs.map(function (p) { return "#" + p[0].id + " → #" + p[1].id; }).join("; ");
      } else {
        var doublings = Math.log2(window / wm.window);
        var low = doublings > 0 ? naive * Math.max(0, 1 - rm.loss_per_doubling * doublings) : naive;
        out.concurrency_range = [round(Math.min(low, naive), 2), round(Math.max(low, naive), 2)];
        out.raise_basis = rm.none_basis;
      }
      rm.pairs.forEach(function (p) { p.forEach(function (r) { if (!basis.some(function (b) { return b.id === r.id; })) basis.push(r); }); });
      if (rm.tokens_per_doubling === null) rm.loss_rows.forEach(function (r) { if (!basis.some(function (b) { return b.id === r.id; })) basis.push(r); });
    }
    out.pool_tokens = Math.round(pool);
    out.kv_gib = kv === null || kv === undefined ? null : round(kv, 2);
    out.concurrency = round(pool / window, 2);
    out.basis = basis;
    return out;
  }

  function boxUse(shares) {
    var box = data.box, total = box.memory_gib, engines = 0;
    Object.keys(shares).forEach(function (n) { engines += shares[n] * total; });
    var used = box.other_gib + engines, sum = 0;
    Object.keys(shares).forEach(function (n) { sum += shares[n]; });
    return { memory_gib: total, engines_gib: engines, other_gib: box.other_gib, used_gib: used, free_gib: total - used,
      headroom_gib: box.headroom_gib, over_headroom_gib: Math.max(0, used + box.headroom_gib - total),
      shares_sum: sum, share_limit: box.share_limit, over_share_limit: Math.max(0, sum - box.share_limit) };
  }

  // box.py share_budget: what is left after the rest of the box and the headroom, never past the audit's limit.
  function shareBudget() {
    var box = data.box;
    return Math.min((box.memory_gib - box.other_gib - box.headroom_gib) / box.memory_gib, box.share_limit);
  }

  function shareFor(m, concurrency, window) {
    var wm = baseFor(m, window);
    if (wm.slope === null || !wm.tokens_per_gib || wm.slope <= 0) throw new Error(m.engine + " has no share → KV line at " + num(wm.window));
    var pool = concurrency * window;
    if (window !== wm.window && m.raise.tokens_per_doubling !== null) pool += m.raise.tokens_per_doubling * Math.log2(window / wm.window);
    return ceil2((pool / wm.tokens_per_gib - wm.intercept) / wm.slope);
  }

  var forms = Array.prototype.slice.call(document.querySelectorAll("form.plan-engine"));
  function inputs(form) {
    return { share: parseFloat(form.elements.util.value), window: parseInt(form.elements.window.value, 10),
      min: parseFloat(form.querySelector(".min").value) };
  }
  function put(form, key, html) { var el = form.querySelector('[data-out="' + key + '"]'); if (el) el.innerHTML = html; }
  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) { return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]; }); }
  function rowLink(r) {
    return '<a href="' + esc(data.ledger_url) + "#kv-" + r.id + '">#' + r.id + " " + esc(r.date) + " util " + r.util +
      " @ " + num(r.window) + "</a>";
  }

  function suggestion(shares) {
    var box = data.box, mins = {}, fixed = {}, need = {}, per = {};
    forms.forEach(function (f) {
      var m = models[f.dataset.engine], v = inputs(f);
      if (m.retired) return;
      if (v.min > 0) mins[m.engine] = v; else if (shares[m.engine] !== undefined) fixed[m.engine] = shares[m.engine];
    });
    var names = Object.keys(mins);
    if (!box.memory_gib) return { html: "The box's memory is unknown: no MemTotal reading and no memory set." };
    if (!names.length) return fitSuggestion();
    var budget = shareBudget();
    Object.keys(fixed).forEach(function (n) { budget -= fixed[n]; });
    var total = 0;
    try {
      names.forEach(function (n) {
        var m = models[n], w = mins[n].window || m.current_window;
        need[n] = Math.max(0.01, shareFor(m, mins[n].min, w)); per[n] = baseFor(m, w).tokens_per_gib; total += need[n];
      });
    } catch (e) { return { html: esc(e.message) }; }
    var rest = budget - total;
    var starved = names.reduce(function (a, b) { return per[a] <= per[b] ? a : b; });
    var split = Object.assign({}, need);
    if (rest >= -1e-9) split[starved] = floor2(need[starved] + rest);
    var parts = names.map(function (n) {
      var p = predict(models[n], split[n], mins[n].window || models[n].current_window);
      return '<li><b>' + esc(n) + "</b> util " + split[n].toFixed(2) + " → " + p.concurrency + "× (min " + mins[n].min + "×)</li>";
    });
    var text = "<ul>" + parts.join("") + "</ul>";
    if (rest >= -1e-9) {
      text += '<p>Meets every minimum; the rest (' + round(rest, 2).toFixed(2) + ") goes to <b>" + esc(starved) +
        "</b>, the engine with the fewest tokens per GiB.</p>";
    } else {
      text += '<p class="bad">Infeasible: the targets need ' + num(-rest * box.memory_gib, 2) + " GiB (util " +
        (-rest).toFixed(2) + ") more than the box has after headroom.</p>";
    }
    return { html: text, split: rest >= -1e-9 ? split : null };
  }

  // With no minimum asked for: the engines' shares now, brought within the budget (box.py fit, computed by the view).
  function fitSuggestion() {
    var fit = data.box.fit, hint = "Set a minimum concurrency on one or more engines for a split that meets it.";
    if (!fit || !fit.scaled) {
      return { html: (fit && !fit.fits ? '<p class="bad">The shares the engines hold now do not fit the budget (' +
        shareBudget().toFixed(2) + "), and none of them can be predicted at a smaller share.</p>" : "") + hint };
    }
    var parts = Object.keys(fit.split).map(function (n) {
      var m = models[n], p = null;
      try { p = m && !m.missing ? predict(m, fit.split[n], m.current_window) : null; } catch (e) { p = null; }
      return "<li><b>" + esc(n) + "</b> util " + fit.split[n].toFixed(2) + (p ? " → " + p.concurrency + "×" : " (kept: not predicted at a smaller share)") + "</li>";
    });
    return { html: "<p>The shares the engines hold now sum past what the box allows (" + shareBudget().toFixed(2) +
      ", " + esc(data.box.share_limit_means) + "); scaled down together, within it:</p><ul>" + parts.join("") + "</ul>" + hint,
      split: fit.split };
  }

  var lastSplit = null;
  function update() {
    var shares = {}, unpredicted = [];
    forms.forEach(function (form) {
      var m = models[form.dataset.engine], v = inputs(form), p;
      // The share is what the engine reserves whether or not the ledger can predict its pool:
      // the box's sum counts it either way (an engine is never dropped from it).
      if (!m.retired && v.share > 0 && v.share <= 1) shares[m.engine] = v.share;
      try {
        p = predict(m, v.share, v.window);
      } catch (e) {
        put(form, "missing", e.missing ? "Not predicted: " + esc(e.message) : "");
        put(form, "error", e.missing ? "" : esc(e.message));
        if (e.missing && !m.retired) unpredicted.push(m.engine);
        ["kv_gib", "pool_tokens", "concurrency", "tokens_per_gib", "raise", "basis"].forEach(function (k) { put(form, k, "—"); });
        form.dataset.ok = "0";
        return;
      }
      form.dataset.ok = "1";
      // a measured share predicts itself, but without KV memory nothing else can be learned: say so
      var wmNow = baseFor(m, v.window);
      put(form, "missing", p.tokens_per_gib || !wmNow.missing ? "" : "Tokens per GiB not known: " + esc(wmNow.missing));
      put(form, "error", "");
      put(form, "kv_gib", p.kv_gib === null ? "—" : num(p.kv_gib, 2) + " GiB");
      put(form, "pool_tokens", num(p.pool_tokens) + " tokens");
      put(form, "concurrency", p.concurrency.toFixed(2) + "× at " + num(p.window));
      var s = p.tokens_per_gib_spread;
      put(form, "tokens_per_gib", p.tokens_per_gib ? num(p.tokens_per_gib) + (s ? " (±" + s.pct.toFixed(2) + " % over " + s.rows + (s.rows === 1 ? " row)" : " rows)") : "") : "—");
      var r = "—";
      if (p.naive_concurrency !== null) {
        r = "naive " + p.naive_concurrency.toFixed(2) + "× (pool unchanged) · ";
        r += p.corrected_concurrency !== null
          ? "corrected " + p.corrected_concurrency.toFixed(2) + "× (" + p.workspace_gib + " GiB workspace)"
          : "range " + p.concurrency_range[0].toFixed(2) + "–" + p.concurrency_range[1].toFixed(2) + "×";
        r += '<br><span class="muted small">' + esc(p.raise_basis) + "</span>";
      }
      put(form, "raise", r);
      put(form, "basis", esc(p.method) + "<br>" + p.basis.map(rowLink).join(" · "));
    });
    var box = document.getElementById("box-plan");
    if (box && data.box.memory_gib) {
      var b = boxUse(shares);
      box.innerHTML = "Planned: <b>" + num(b.used_gib, 1) + "</b> of " + num(b.memory_gib, 1) + " GiB used (engines " +
        num(b.engines_gib, 1) + ", rest of the box " + num(b.other_gib, 1) + "), <b>" + num(b.free_gib, 1) + " GiB free</b>" +
        (b.over_headroom_gib > 0 ? ' — <span class="bad">' + num(b.over_headroom_gib, 1) + " GiB into the headroom of " +
          num(b.headroom_gib, 1) + "</span>" : " · headroom " + num(b.headroom_gib, 1) + " GiB kept") +
        " · shares sum to <b>" + b.shares_sum.toFixed(2) + "</b> of at most " + b.share_limit.toFixed(2) +
        (b.over_share_limit > 1e-9 ? ' — <span class="bad" id="over-share-limit">over the audit\'s limit by ' + b.over_share_limit.toFixed(2) +
          "</span>" : "") + ' <span class="muted small">(' + esc(data.box.share_limit_means) + ")</span>";
      if (unpredicted.length) box.innerHTML += '<br><span class="muted small">Counted at their share, not predicted: ' + esc(unpredicted.join(", ")) + ".</span>";
      if (data.box.in_other.length) box.innerHTML += '<br><span class="muted small">Counted in the rest of the box at what they use now, not planned by share: ' + esc(data.box.in_other.join(", ")) + ".</span>";
    }
    var sug = suggestion(shares), el = document.getElementById("suggestion");
    if (el) el.innerHTML = sug.html;
    lastSplit = sug.split || null;
    var apply = document.getElementById("apply-suggestion");
    if (apply) apply.disabled = !lastSplit;
  }

  forms.forEach(function (form) {
    form.addEventListener("input", update);
    form.addEventListener("submit", function (ev) { if (form.dataset.ok !== "1") ev.preventDefault(); });
  });
  var apply = document.getElementById("apply-suggestion");
  if (apply) {
    apply.addEventListener("click", function () {
      if (!lastSplit) return;
      forms.forEach(function (form) {
        if (lastSplit[form.dataset.engine] !== undefined) form.elements.util.value = lastSplit[form.dataset.engine].toFixed(2);
      });
      update();
    });
  }
  window.sparkopsPlanner = { predict: predict, models: models };
  // Out of the box: shares past what the box allows (vLLM's default 0.9 beside another engine) are no plan to start
  // from; the page starts from the fitted split and says what the engines hold now.
  var fitNow = data.box.fit, started = document.getElementById("plan-start");
  if (fitNow && fitNow.scaled) {
    forms.forEach(function (form) {
      var share = fitNow.split[form.dataset.engine];
      if (share !== undefined) form.elements.util.value = share.toFixed(2);
    });
    if (started) {
      started.innerHTML = "Started from a split that fits: the engines hold " + Object.keys(data.held).map(function (n) {
        return esc(n) + " " + data.held[n]; }).join(" + ") + " now, past the budget of " + shareBudget().toFixed(2) + ".";
      started.hidden = false;
    }
  }
  update();
})();
