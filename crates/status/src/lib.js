"use strict";
// What every live page draws with: DOM building (text only: worker names and errors come from
// clients and peers, so nothing is ever parsed as HTML), number formats, tables and an SVG line
// chart whose value axis starts at zero.

const SVG_NS = "http://www.w3.org/2000/svg";

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

/** A count or rate with at most three significant decimals, thousands grouped. */
function num(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v !== "number") return String(v);
  if (!Number.isFinite(v)) return String(v);
  const abs = Math.abs(v);
  const digits = abs >= 100 || Number.isInteger(v) ? 0 : abs >= 10 ? 1 : abs >= 1 ? 2 : 3;
  return v.toLocaleString("en-US", { maximumFractionDigits: digits });
}

/** Hashes per second in H/s, kH/s, ... EH/s. */
function hashrate(v) {
  if (v === null || v === undefined) return "–";
  const units = ["H/s", "kH/s", "MH/s", "GH/s", "TH/s", "PH/s", "EH/s"];
  let i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return num(v) + " " + units[i];
}

/** Seconds as "3 s", "4 min 10 s", "2 h 5 min", "3 d 4 h". */
function duration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, s);
  if (s < 60) return num(s) + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min " + Math.floor(s % 60) + " s";
  const h = Math.floor(m / 60);
  if (h < 48) return h + " h " + (m % 60) + " min";
  return Math.floor(h / 24) + " d " + (h % 24) + " h";
}

function tile(label, value) {
  return el("div", { class: "tile" }, el("div", { class: "v" }, value), el("div", { class: "k" }, label));
}

/** A table of `rows` (arrays of cells: a string, a number, or a <td> element). */
function table(headers, rows, caption) {
  const head = el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h))));
  const body = el("tbody", {}, rows.map((r) =>
    el("tr", {}, r.map((c) => (c instanceof Node ? c : el("td", {}, typeof c === "number" ? num(c) : c))))));
  const t = el("table", {}, caption ? el("caption", {}, caption) : null, head, body);
  return el("div", { class: "wrap" }, t);
}

/** Any JSON value as nested key/value tables: the page shows all that the API answers. */
function kvTable(value) {
  if (value === null || typeof value !== "object") return document.createTextNode(typeof value === "number" ? num(value) : String(value));
  if (Array.isArray(value)) {
    if (value.length === 0) return document.createTextNode("none");
    return el("ol", {}, value.map((v) => el("li", {}, kvTable(v))));
  }
  const rows = Object.entries(value).map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, kvTable(v))));
  return el("table", { class: "kv" }, el("tbody", {}, rows));
}

/**
 * A line chart: `series` is [{name, color, points: [[x, y], ...]}]; x in seconds, drawn from
 * `xmin` to `xmax`; the value axis always starts at zero and ends at a round number above the
 * highest point, so a flat zero line sits on the axis instead of in the middle of a range
 * around zero.
 */
function lineChart(series, opts) {
  const W = 1200, H = opts.height || 220, L = 64, R = 16, T = 12, B = 30;
  const xmin = opts.xmin, xmax = Math.max(opts.xmax, opts.xmin + 1);
  let ymax = 0;
  for (const s of series) for (const [, y] of s.points) ymax = Math.max(ymax, y);
  ymax = niceCeil(ymax);
  const sx = (x) => L + ((x - xmin) / (xmax - xmin)) * (W - L - R);
  const sy = (y) => T + (1 - y / ymax) * (H - T - B);
  const parts = [];
  for (let i = 0; i <= 4; i++) {
    const y = (ymax * i) / 4;
    parts.push(svg("line", { class: "grid", x1: L, x2: W - R, y1: sy(y), y2: sy(y) }));
    parts.push(svg("text", { x: L - 6, y: sy(y) + 4, "text-anchor": "end" }, (opts.yfmt || num)(y)));
  }
  for (let i = 0; i <= 6; i++) {
    const x = xmin + ((xmax - xmin) * i) / 6;
    parts.push(svg("text", { x: sx(x), y: H - 10, "text-anchor": "middle" }, (opts.xfmt || num)(x)));
  }
  parts.push(svg("line", { class: "axis", x1: L, x2: W - R, y1: sy(0), y2: sy(0) }));
  parts.push(svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
  for (const s of series) {
    if (s.points.length === 0) continue;
    const d = s.points.map(([x, y]) => sx(x).toFixed(1) + "," + sy(y).toFixed(1)).join(" ");
    parts.push(svg("polyline", { points: d, fill: "none", stroke: s.color, "stroke-width": 2, "data-series": s.name }));
  }
  const chart = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": opts.label }, parts);
  const legend = el("div", { class: "legend" }, series.map((s) =>
    el("span", {}, el("span", { class: "swatch", style: `background:${s.color}` }), s.name)));
  return el("figure", { "data-chart": opts.id }, chart, legend, opts.caption ? el("figcaption", { class: "note" }, opts.caption) : null);
}

/** An x axis in seconds of page time, labelled as how long before `last` ("now" at the end). */
function agoLabels(last) {
  return (x) => (last - x < 0.5 ? "now" : "-" + duration(last - x).replace(/ 0 s$/, ""));
}

function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** Why the last refresh failed ("" when it did not): the page says so beside the old figures. */
let fetchError = "";

/** Fetches `url` (JSON, or text for /healthz, whose 503 is an answer), or null on failure. */
async function getJson(url) {
  try {
    const r = await fetch(url, { cache: "no-store" });
    if (!r.ok && r.status !== 503) throw new Error(url + ": HTTP " + r.status);
    return { status: r.status, body: url.endsWith("/healthz") ? await r.text() : await r.json() };
  } catch (e) {
    fetchError = "Could not refresh, these figures are from the last refresh that worked: " + e.message;
    return null;
  }
}
