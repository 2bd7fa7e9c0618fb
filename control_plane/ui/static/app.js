// httpbus web control plane: a little plain JavaScript, no build step.
// - the filter of the subscription form is checked while typing (same compiler as the API);
// - the subscription page polls its status and redraws its figures and its uPlot chart;
// - the cutover page re-fetches its live part every second until the cutover ends;
// - a form with data-confirm asks before it is sent (the question may name the form's fields
//   as {name}); a hidden "confirm" field tells the server it was asked, else it asks itself;
// - a live page whose polling is refused (401: the session ended) or keeps failing says so in
//   a banner instead of showing frozen figures as if they were current.
"use strict";
window.httpbus = (function () {
  function debounce(fn, ms) {
    let timer = null;
    return function () { clearTimeout(timer); timer = setTimeout(fn, ms); };
  }

  function filterCheck() {
    const area = document.getElementById("filter");
    const out = document.getElementById("error-filter");
    if (!area || !out) return;
    const check = debounce(async function () {
      const url = area.dataset.check + "?expression=" + encodeURIComponent(area.value);
      try {
        const answer = await (await fetch(url, { credentials: "same-origin" })).json();
        out.hidden = answer.ok;
        out.textContent = answer.ok ? "" : answer.problem;
      } catch (e) { /* the server check on submit still applies */ }
    }, 300);
    area.addEventListener("input", check);
  }

  function confirmations() {
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (e) {
        const question = form.dataset.confirm.replace(/\{(\w+)\}/g, function (all, name) {
          const field = form.elements.namedItem(name);
          return field && "value" in field ? field.value : all;
        });
        if (!window.confirm(question)) { e.preventDefault(); return; }
        const asked = form.querySelector('input[name="confirm"]');
        if (asked) asked.value = "yes";
      });
    });
  }

  // What a live page's polling says about its figures: fresh, stale, or signed out.
  const FAILURES_BEFORE_STALE = 3;
  function watcher() {
    const banner = document.getElementById("stale");
    let failures = 0;
    let freshAt = new Date();
    function show(text, link) {
      banner.textContent = text;
      if (link) {
        const a = document.createElement("a");
        a.href = "/ui/login?next=" + encodeURIComponent(location.pathname + location.search);
        a.textContent = link;
        banner.append(" — ", a);
      }
      banner.hidden = false;
    }
    return {
      ok: function () { failures = 0; freshAt = new Date(); banner.hidden = true; },
      signedOut: function () { show("Signed out: these figures stopped updating", "sign in again"); },
      failed: function () {
        failures += 1;
        if (failures >= FAILURES_BEFORE_STALE) {
          show("Figures stale since " + freshAt.toTimeString().slice(0, 8) + ": the control plane does not answer");
        }
      },
    };
  }

  // One poll of a live page: the response when it is usable, else null (the banner says why).
  async function poll(url, watch) {
    try {
      const r = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (r.status === 401) { watch.signedOut(); return null; }
      if (!r.ok) { watch.failed(); return null; }
      watch.ok();
      return r;
    } catch (e) { watch.failed(); return null; }
  }

  function get(obj, path) {
    return path.split(".").reduce(function (o, k) { return o == null ? o : o[k]; }, obj);
  }

  function series(status) {
    const h = status.history || [];
    // history holds counts per 10-second bucket: per-second rates are count / 10.
    return [
      h.map(function (b) { return b.t; }),
      h.map(function (b) { return b.delivered / 10; }),
      h.map(function (b) { return b.failed / 10; }),
      h.map(function (b) { return b.filtered / 10; }),
    ];
  }

  function statusPage() {
    const section = document.getElementById("status");
    const holder = document.getElementById("rates-chart");
    let status = JSON.parse(document.getElementById("status-data").textContent);
    const opts = {
      width: Math.max(320, holder.clientWidth - 10), height: 240,
      series: [{}, { label: "delivered/s", stroke: "#1f7a3a", width: 2 },
               { label: "failed/s", stroke: "#b3261e", width: 2 },
               { label: "filtered/s", stroke: "#8a6d00", width: 2 }],
      axes: [{}, { label: "msg/s" }],
    };
    const chart = new uPlot(opts, series(status), holder);
    function plotted() {  // what the chart holds, for people and tests: messages in the hour
      const h = status.history || [];
      ["delivered", "failed", "filtered"].forEach(function (k) {
        holder.dataset[k] = h.reduce(function (n, b) { return n + b[k]; }, 0);
      });
    }
    plotted();
    function paint() {
      section.querySelectorAll("[data-k]").forEach(function (el) {
        let v = el.dataset.k === "circuit" ? (status.circuit ? status.circuit.state : "—") : get(status, el.dataset.k);
        el.textContent = v == null ? "—" : v;
      });
      chart.setData(series(status));
      plotted();
    }
    const watch = watcher();
    setInterval(async function () {
      const r = await poll(section.dataset.url, watch);
      if (r) { status = await r.json(); paint(); }
    }, 2000);
  }

  function cutoverPage() {
    const live = document.getElementById("cutover-live");
    if (!live || live.dataset.final === "yes") return;
    const watch = watcher();
    const timer = setInterval(async function () {
      const r = await poll(live.dataset.live, watch);
      if (!r) return;
      live.innerHTML = await r.text();
      const phase = document.getElementById("phase");
      if (phase && ["COMPLETE", "ABORTED", "ROLLED_BACK"].includes(phase.dataset.phase)) {
        clearInterval(timer);
        window.location.reload();  // shows the final page (no abort button)
      }
    }, 1000);
  }

  function selectAll() {
    const all = document.getElementById("select-all");
    if (!all) return;
    all.addEventListener("change", function () {
      document.querySelectorAll('input[name="message_id"]').forEach(function (b) { b.checked = all.checked; });
    });
  }

  function backLinks() {
    document.querySelectorAll("a[data-back]").forEach(function (a) {
      a.addEventListener("click", function (e) { e.preventDefault(); history.back(); });
    });
  }

  // No inline script anywhere (the pages' Content-Security-Policy forbids it): each page's
  // code starts here when its elements are present.
  document.addEventListener("DOMContentLoaded", function () {
    confirmations(); filterCheck(); cutoverPage(); selectAll(); backLinks();
    if (document.getElementById("status-data")) statusPage();
  });
  return { statusPage: statusPage };
})();
