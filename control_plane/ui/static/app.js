// httpbus web control plane: a little plain JavaScript, no build step.
// - the filter of the subscription form is checked while typing (same compiler as the API);
// - the subscription page polls its status and redraws its figures and its uPlot chart;
// - the cutover page re-fetches its live part every second until the cutover ends.
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
    setInterval(async function () {
      try {
        const r = await fetch(section.dataset.url, { credentials: "same-origin" });
        if (r.ok) { status = await r.json(); paint(); }
      } catch (e) { /* keep the last figures; try again */ }
    }, 2000);
  }

  function cutoverPage() {
    const live = document.getElementById("cutover-live");
    if (!live || live.dataset.final === "yes") return;
    const timer = setInterval(async function () {
      try {
        const r = await fetch(live.dataset.live, { credentials: "same-origin" });
        if (!r.ok) return;
        live.innerHTML = await r.text();
        const phase = document.getElementById("phase");
        if (phase && ["COMPLETE", "ABORTED", "ROLLED_BACK"].includes(phase.dataset.phase)) {
          clearInterval(timer);
          window.location.reload();  // shows the final page (no abort button)
        }
      } catch (e) { /* try again */ }
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
    filterCheck(); cutoverPage(); selectAll(); backLinks();
    if (document.getElementById("status-data")) statusPage();
  });
  return { statusPage: statusPage };
})();
