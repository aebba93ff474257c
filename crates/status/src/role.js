"use strict";
// A role's status page: the figures of /api/status (and /api/workers where the role keeps
// workers), drawn at once from the copy embedded in the page, then refreshed every two seconds.
// The shares chart is drawn from the refreshes this page has seen: the role keeps counters, not
// a history.

const REFRESH_MS = 2000;
/** Ten minutes of refreshes. */
const HISTORY = 300;
const ACCEPTED = "#0072b2";
const REJECTED = "#d55e00";

const page = JSON.parse(document.getElementById("status-data").textContent);
const history = [];
const started = performance.now();

function remember(status) {
  const shares = status.shares;
  if (!shares) return;
  history.push({ t: (performance.now() - started) / 1000, accepted: shares.accepted || 0, rejected: shares.rejected || 0 });
  if (history.length > HISTORY) history.shift();
}

function sharesChart() {
  const acc = [], rej = [];
  for (let i = 1; i < history.length; i++) {
    const a = history[i - 1], b = history[i];
    const dt = b.t - a.t;
    if (dt <= 0) continue;
    // A restarted role's counters start again from zero: no negative rate.
    acc.push([b.t, Math.max(0, b.accepted - a.accepted) / dt]);
    rej.push([b.t, Math.max(0, b.rejected - a.rejected) / dt]);
  }
  const last = history.length ? history[history.length - 1].t : 0;
  const caption = history.length < 2
    ? "Collecting: the rates appear after the next refresh."
    : `Shares per second by verdict over the last ${duration(last - history[0].t)} (seen by this page; the role keeps totals, below).`;
  return lineChart(
    [{ name: "accepted", color: ACCEPTED, points: acc }, { name: "rejected", color: REJECTED, points: rej }],
    { id: "shares", label: "shares per second by verdict", xmin: history.length ? history[0].t : 0, xmax: last,
      xfmt: agoLabels(last), caption });
}

function dependencies(deps) {
  const rows = Object.entries(deps || {}).map(([name, d]) => [
    name,
    el("td", { class: d.up ? "up" : "down" }, d.up ? "up" : "down"),
    d.state || "–",
    duration(d.for_s ?? d.state_for_s),
    d.failures ?? "–",
    el("td", { class: "err" }, d.error || ""),
  ]);
  if (rows.length === 0) return el("p", { class: "note" }, "No dependencies.");
  return table(["dependency", "", "state", "for", "failures", "last error"], rows);
}

function sharesByReason(shares, title) {
  const rows = [["accepted", shares.accepted]];
  for (const [reason, n] of Object.entries(shares.rejected_by_reason || {})) rows.push(["rejected: " + reason, n]);
  for (const [k, v] of Object.entries(shares)) {
    if (!["accepted", "rejected", "rejected_by_reason"].includes(k) && typeof v === "number") rows.push([k, v]);
  }
  return table([title, "shares"], rows);
}

function workers(w) {
  const rows = w.workers.map((x) => [
    x.name, x.connections, hashrate(x.hashrate_1m), hashrate(x.hashrate_10m), x.accepted, x.rejected,
    x.last_share_age_s === null ? "never" : duration(x.last_share_age_s) + " ago",
  ]);
  const note = w.total > w.workers.length
    ? el("p", { class: "note" }, `The first ${w.workers.length} of ${num(w.total)} workers, by name (/api/workers pages through all).`)
    : null;
  return [table(["worker", "connections", "hash rate 1 min", "hash rate 10 min", "accepted", "rejected", "last share"], rows), note];
}

function section(id, title, ...body) {
  return el("section", { id }, el("h2", {}, title), body);
}

function render() {
  const s = page.status;
  const h = page.health;
  const links = ["/api/status", "/metrics", "/healthz"].concat(page.workers ? ["/api/workers"] : []);
  const header = el("header", {},
    el("h1", {}, "stratumlab " + page.role),
    el("p", { class: "sub" }, `up ${duration(s.uptime_s)} · refreshed every ${REFRESH_MS / 1000} s · `,
      links.map((l) => [el("a", { href: l }, l), " "])),
    el("div", { id: "health", class: "health " + (h.ok ? "ok" : "bad") }, h.text.trim()),
    el("p", { id: "fetch-error", class: "stale" }, fetchError));

  const tiles = [];
  const rate = s.hashrate_1m ?? s.hashrate;
  if (rate !== undefined) tiles.push(tile("hash rate" + (s.hashrate_1m !== undefined ? " (1 min)" : ""), hashrate(rate)));
  if (s.connections !== undefined) tiles.push(tile("connections", num(s.connections)));
  if (s.workers !== undefined) tiles.push(tile("workers", num(s.workers)));
  if (s.shares) {
    tiles.push(tile("shares accepted", num(s.shares.accepted)));
    tiles.push(tile("shares rejected", num(s.shares.rejected)));
  }
  if (s.blocks) tiles.push(tile("blocks found", num(s.blocks.found)));

  const sections = [
    el("div", { class: "tiles" }, tiles),
    section("dependencies", "Dependencies", dependencies(s.dependencies)),
  ];
  if (s.shares) {
    const tables = [sharesByReason(s.shares, "verdict")];
    if (s.upstream_shares) tables.push(sharesByReason(s.upstream_shares, "upstream"));
    sections.push(section("shares", "Shares", sharesChart(), el("div", { class: "row" }, tables)));
  }
  if (s.blocks) {
    sections.push(section("blocks", "Blocks found and their fate",
      table(["blocks", "count"], Object.entries(s.blocks).map(([k, v]) => [k, v]))));
  }
  if (page.workers) sections.push(section("workers", "Workers", workers(page.workers)));
  sections.push(section("all", "Every figure", el("details", {}, el("summary", {}, "/api/status as it was last read"), kvTable(s))));

  document.getElementById("page").replaceChildren(header, ...sections);
  document.title = `stratumlab ${page.role}: ${h.ok ? "ok" : "not serving"}`;
}

async function refresh() {
  const [status, health, workers] = await Promise.all([
    getJson("/api/status"),
    getJson("/healthz"),
    page.workers ? getJson("/api/workers?limit=100") : Promise.resolve(null),
  ]);
  if (status && health) {
    fetchError = "";
    page.status = status.body;
    page.health = { ok: health.status === 200, text: health.body };
    if (workers) page.workers = workers.body;
    remember(page.status);
  }
  render();
}

remember(page.status);
render();
setInterval(refresh, REFRESH_MS);
