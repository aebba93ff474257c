"use strict";
// The live page of a run: per configuration, shares, stale share, time to job and share latency
// (percentiles over the last minute), blocks, and each role's CPU and memory, from /api/live
// (embedded at first, then read every two seconds). The charts are drawn from the refreshes this
// page has seen.

const REFRESH_MS = 2000;
const HISTORY = 600;

let live = JSON.parse(document.getElementById("status-data").textContent);
const history = [];
const started = performance.now();

function remember() {
  const t = (performance.now() - started) / 1000;
  const point = { t, configs: {} };
  for (const c of live.configs) {
    point.configs[c.name] = {
      accepted: c.pool.accepted,
      ttj: c.time_to_job_ms ? c.time_to_job_ms.p50 : null,
      latency: c.share_latency_ms ? c.share_latency_ms.p50 : null,
    };
  }
  history.push(point);
  if (history.length > HISTORY) history.shift();
}

function ms(v) {
  return v === null || v === undefined ? "–" : num(v) + " ms";
}

function percentiles(p) {
  return p ? [ms(p.p50), ms(p.p90), ms(p.p99), num(p.n)] : ["–", "–", "–", "0"];
}

function mib(bytes) {
  return num(bytes / 1048576) + " MiB";
}

function configCell(c) {
  return el("td", {}, el("span", { class: "swatch", style: `background:${c.color}` }), c.name);
}

function chart(id, label, pick, yfmt, rate) {
  const series = live.configs.map((c) => {
    const points = [];
    for (let i = rate ? 1 : 0; i < history.length; i++) {
      const b = history[i].configs[c.name];
      if (!b) continue;
      if (rate) {
        const a = history[i - 1].configs[c.name];
        const dt = history[i].t - history[i - 1].t;
        if (!a || dt <= 0) continue;
        points.push([history[i].t, Math.max(0, b.accepted - a.accepted) / dt]);
      } else if (pick(b) !== null) {
        points.push([history[i].t, pick(b)]);
      }
    }
    return { name: c.name, color: c.color, points };
  });
  const last = history.length ? history[history.length - 1].t : 0;
  const first = history.length ? history[0].t : 0;
  return lineChart(series, {
    id, label, xmin: first, xmax: last, yfmt,
    xfmt: agoLabels(last),
    caption: history.length < 2 ? "Collecting: the lines appear after the next refresh." : null,
  });
}

function render() {
  const progress = live.duration_s > 0 ? Math.min(100, (100 * live.elapsed_s) / live.duration_s) : 0;
  const header = el("header", {},
    el("h1", {}, "stratumlab run"),
    el("p", { class: "sub", id: "stage" },
      live.duration_s > 0
        ? `${duration(live.elapsed_s)} of ${duration(live.duration_s)} measured (${num(progress)}%) · `
        : "",
      live.stage || "starting", " · refreshed every 2 s · ",
      ["/api/live", "/metrics", "/sd"].map((l) => [el("a", { href: l }, l), " "])),
    el("p", { id: "fetch-error", class: "stale" }, fetchError));

  const rows = live.configs.map((c) => [
    configCell(c),
    c.pool.accepted, c.pool.rejected,
    c.stale_pct_1m === null ? "–" : num(c.stale_pct_1m) + "%",
    ...percentiles(c.time_to_job_ms).slice(0, 3),
    ...percentiles(c.share_latency_ms).slice(0, 3),
    c.pool.blocks,
  ]);
  const figures = el("section", { id: "configs" }, el("h2", {}, "Configurations"),
    table(["configuration", "accepted", "rejected", "stale (1 min)", "time to job p50", "p90", "p99",
      "share latency p50", "p90", "p99", "blocks"], rows,
      `Shares as each pool counts them; stale share, time to job and share latency over the last ${live.window_s} s, as the devices see them.`));

  const charts = el("section", { id: "charts" }, el("h2", {}, "As it happens"),
    el("h3", {}, "Time to job, median over the last minute"),
    chart("time_to_job", "time to job p50 (ms) per configuration", (b) => b.ttj, (v) => num(v) + " ms"),
    el("h3", {}, "Share latency, median over the last minute"),
    chart("share_latency", "share latency p50 (ms) per configuration", (b) => b.latency, (v) => num(v) + " ms"),
    el("h3", {}, "Accepted shares per second"),
    chart("shares", "accepted shares per second per configuration", null, num, true));

  const roles = el("section", { id: "roles" }, el("h2", {}, "Roles"),
    table(["role", "CPU (100% = one core)", "memory"],
      live.roles.map((r) => [r.name, num(r.cpu_pct) + "%", mib(r.rss_bytes)])));

  const endpoints = el("section", { id: "endpoints" }, el("h2", {}, "Status pages of the roles"),
    live.endpoints.length === 0 ? el("p", { class: "note" }, "None yet: the roles are starting.")
      : table(["role", "configuration", "page"], live.endpoints.map((e) =>
        [e.name, e.config, el("td", {}, el("a", { href: `http://${e.addr}/` }, `http://${e.addr}/`))])));

  document.getElementById("page").replaceChildren(header, figures, charts, roles, endpoints);
  document.title = `stratumlab run: ${live.stage || "starting"}`;
}

async function refresh() {
  const r = await getJson("/api/live");
  if (r) {
    fetchError = "";
    live = r.body;
    remember();
  }
  render();
}

remember();
render();
setInterval(refresh, REFRESH_MS);
