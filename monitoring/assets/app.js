// Basalt monitoring dashboard: plain JavaScript, no framework, no network access beyond this
// server. Reads /api/health, /api/history and (if present) /api/stats; draws SVG charts.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const COLORS = ["#58a6ff", "#3fb950", "#d29922", "#f85149", "#bc8cff", "#39c5cf", "#ff7b72",
  "#a5d6ff", "#7ee787", "#e3b341", "#ffa198", "#d2a8ff", "#56d4dd", "#f0883e"];
const state = { range: "1d", snapshot: null };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function fmtBytes(b) {
  if (b === null || b === undefined) return "–";
  const units = ["B", "kB", "MB", "GB", "TB", "PB"];
  let i = 0;
  while (b >= 1000 && i < units.length - 1) { b /= 1000; i++; }
  return (i === 0 ? b.toFixed(0) : b.toFixed(1)) + " " + units[i];
}

function fmt(v, suffix) { return v === null || v === undefined ? "–" : v + (suffix || ""); }

function thresholds(d) {
  return [d.temperature_warning_c ?? 70, d.temperature_critical_c ?? 80];
}

function metric(label, value, sub, cls) {
  return el("div", { class: "metric" }, el("div", { class: "label" }, label),
    el("div", { class: "value " + (cls || "") }, value), sub ? el("div", { class: "sub" }, sub) : null);
}

function renderCard(d, proj) {
  const [w, c] = thresholds(d);
  const t = d.temperature_c;
  const tcls = "temp" + (t !== null && t >= c ? " critical" : t !== null && t >= w ? " hot" : "");
  const thrSrc = d.temperature_warning_c !== null ? "drive" : "default";
  const used = d.percentage_used;
  const wear = el("div", { class: "wear " + (used >= 100 ? "crit" : used >= 80 ? "warn" : "") },
    el("div", { style: "width:" + Math.min(100, used ?? 0) + "%" }));
  const hasRate = !!proj && (proj.percentage_used_per_day > 0 || (proj.rated_tbw_bytes > 0 && proj.bytes_written_per_day > 0));
  const eol = proj && proj.end_of_life_date ? proj.end_of_life_date : hasRate ? "> 100 years" : "–";
  const source = (s) => (s === "trend" ? "trend" : "lifetime avg");
  const eolSub = proj && proj.end_of_life_basis
    ? (proj.end_of_life_basis === "tbw" ? "rated TBW reached · " + source(proj.bytes_written_rate_source)
      : "100% used · " + source(proj.percentage_used_rate_source))
    : hasRate ? "at the current rate" : "no wear measured";
  const perDay = proj && proj.bytes_written_per_day !== null && proj.bytes_written_per_day !== undefined
    ? fmtBytes(proj.bytes_written_per_day) + "/day" : "–";
  const usedBox = metric("Used", fmt(used, "%"), null);
  usedBox.append(wear);
  const card = el("article", { class: "card status-" + d.status, "data-device": d.device },
    el("div", { class: "head" },
      el("span", { class: "dev" }, d.device),
      el("span", { class: "badge " + d.status }, d.status)),
    el("div", { class: "model", title: d.model || "" },
      (d.model || "unknown model") + (d.serial ? " · " + d.serial : "") + (d.protocol ? " · " + d.protocol.toUpperCase() : "")),
    el("div", { class: "metrics" },
      metric("Temperature", fmt(t, " °C"), "warn " + w + " / crit " + c + " °C (" + thrSrc + ")", tcls),
      usedBox,
      metric("End of life", eol, eolSub),
      metric("Writes", perDay, "total " + fmtBytes(d.host_bytes_written)),
      metric("Spare", fmt(d.available_spare_pct, "%"), d.available_spare_threshold_pct !== null ? "threshold " + d.available_spare_threshold_pct + "%" : null),
      metric("Power-on", d.power_on_hours !== null ? Math.round(d.power_on_hours / 24) + " d" : "–",
        d.media_errors !== null ? "media errors " + d.media_errors : null)));
  if (d.reasons.length) card.append(el("ul", { class: "reasons" }, ...d.reasons.map((r) => el("li", {}, r))));
  return card;
}

function renderSummary(snap) {
  const counts = { ok: 0, warn: 0, crit: 0 };
  for (const d of snap.devices) counts[d.status]++;
  const s = document.getElementById("summary");
  s.replaceChildren(el("b", {}, snap.devices.length + " devices"),
    ...["crit", "warn", "ok"].filter((k) => counts[k]).map((k) => el("span", { class: "pill " + k }, counts[k] + " " + k)),
    " · sampled " + (snap.taken_at ? new Date(snap.taken_at * 1000).toLocaleString() : "never"));
}

function renderDevices(snap) {
  const byDev = new Map(snap.projections.map((p) => [p.device, p]));
  const order = { crit: 0, warn: 1, ok: 2 };
  const devices = [...snap.devices].sort((a, b) => order[a.status] - order[b.status]);
  document.getElementById("devices").replaceChildren(...devices.map((d) => renderCard(d, byDev.get(d.device))));
  const errs = document.getElementById("errors");
  errs.hidden = !snap.errors.length;
  errs.replaceChildren(...snap.errors.map((e) => el("div", {}, e)));
}

// Draws a multi-series line chart into `target` (an <svg>); series: [{name, points: [[ts, v]]}].
function lineChart(target, series, opts) {
  const W = target.clientWidth || 600, H = target.clientHeight || 240;
  const m = { l: 42, r: 130, t: 10, b: 24 };
  target.setAttribute("viewBox", `0 0 ${W} ${H}`);
  target.replaceChildren();
  const all = series.flatMap((s) => s.points);
  if (!all.length) {
    target.append(svg("text", { class: "empty", x: W / 2, y: H / 2, "text-anchor": "middle" }, "no samples in this range"));
    target.dataset.series = "0";
    return;
  }
  const x0 = opts.from, x1 = opts.to;
  let y0 = Math.min(...all.map((p) => p[1]), ...(opts.lines || []).map((l) => l.value));
  let y1 = Math.max(...all.map((p) => p[1]), ...(opts.lines || []).map((l) => l.value));
  if (opts.yMin !== undefined) y0 = Math.min(y0, opts.yMin);
  if (y1 - y0 < 1) { y1 += 0.5; y0 -= 0.5; }
  const pad = (y1 - y0) * 0.08; y0 -= pad; y1 += pad;
  const sx = (t) => m.l + ((t - x0) / (x1 - x0)) * (W - m.l - m.r);
  const sy = (v) => H - m.b - ((v - y0) / (y1 - y0)) * (H - m.t - m.b);
  const grid = svg("g", { class: "grid" }), axis = svg("g", { class: "axis" });
  for (let i = 0; i <= 4; i++) {
    const v = y0 + ((y1 - y0) * i) / 4;
    grid.append(svg("line", { x1: m.l, x2: W - m.r, y1: sy(v), y2: sy(v) }));
    axis.append(svg("text", { x: m.l - 6, y: sy(v) + 3, "text-anchor": "end" }, v.toFixed(v >= 100 ? 0 : 1)));
  }
  const span = x1 - x0;
  for (let i = 0; i <= 4; i++) {
    const t = x0 + (span * i) / 4, d = new Date(t * 1000);
    const label = span > 2 * 86400 ? d.toLocaleDateString([], { month: "short", day: "numeric" })
      : d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    axis.append(svg("text", { x: sx(t), y: H - 6, "text-anchor": "middle" }, label));
  }
  target.append(grid, axis);
  for (const l of opts.lines || []) {
    target.append(svg("line", { class: "threshold", x1: m.l, x2: W - m.r, y1: sy(l.value), y2: sy(l.value), stroke: l.color }));
    target.append(svg("text", { class: "legend", x: m.l + 4, y: sy(l.value) - 3, fill: l.color }, l.label));
  }
  let drawn = 0;
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const color = COLORS[i % COLORS.length];
    const pts = s.points.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
    const line = svg("polyline", { class: "series", points: pts, stroke: color, "data-name": s.name });
    line.append(svg("title", {}, s.name));
    target.append(line);
    if (drawn < 12) {
      const y = m.t + 8 + drawn * 13;
      target.append(svg("rect", { x: W - m.r + 8, y: y - 7, width: 9, height: 3, fill: color }));
      target.append(svg("text", { class: "legend", x: W - m.r + 21, y: y - 3 }, s.name.length > 18 ? s.name.slice(0, 17) + "…" : s.name));
    }
    drawn++;
  });
  if (drawn > 12) target.append(svg("text", { class: "legend", x: W - m.r + 8, y: m.t + 8 + 12 * 13 }, "+" + (drawn - 12) + " more"));
  target.dataset.series = String(drawn);
}

async function getJSON(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(url + ": HTTP " + r.status);
  return r.json();
}

async function renderCharts(snap) {
  const range = state.range;
  const devices = snap.devices.filter((d) => d.temperature_c !== null || d.percentage_used !== null);
  const hist = await Promise.all(devices.map((d) =>
    getJSON("/api/history?range=" + range + "&device=" + encodeURIComponent(d.device)).catch(() => null)));
  const ok = hist.filter(Boolean);
  const from = ok.length ? ok[0].from : snap.taken_at - 86400, to = ok.length ? ok[0].to : snap.taken_at;
  const named = (h, key) => ({ name: h.device, points: (h.series[key] || []) });
  const warnC = Math.min(...snap.devices.map((d) => thresholds(d)[0]));
  lineChart(document.getElementById("chart-temperature"), ok.map((h) => named(h, "temperature_c")),
    { from, to, lines: [{ value: warnC, label: "warn " + warnC + " °C", color: "#d29922" }] });
  lineChart(document.getElementById("chart-wear"), ok.map((h) => named(h, "percentage_used")),
    { from, to, yMin: 0, lines: [{ value: 80, label: "warn 80%", color: "#d29922" }] });
  const chips = [...new Set(snap.sensors.filter((s) => s.chip !== "nvme" && s.chip !== "drivetemp").map((s) => s.chip))];
  const cpu = await Promise.all(chips.map((c) =>
    getJSON("/api/history?range=" + range + "&device=" + encodeURIComponent("hwmon/" + c)).catch(() => null)));
  const cpuSeries = cpu.filter(Boolean).flatMap((h) => Object.entries(h.series).map(([k, pts]) =>
    ({ name: h.device.replace("hwmon/", "") + " " + k.replace("temperature_c/", ""), points: pts })));
  lineChart(document.getElementById("chart-cpu"), cpuSeries, { from, to });
}

function flatten(obj, prefix, out) {
  for (const [k, v] of Object.entries(obj || {})) {
    const key = prefix ? prefix + "." + k : k;
    if (v !== null && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
    else if (typeof v === "number" || typeof v === "string" || typeof v === "boolean") out.push([key, v]);
  }
  return out;
}

async function renderEngine() {
  const panel = document.getElementById("engine-panel");
  try {
    const stats = await getJSON("/api/stats");
    const rows = flatten(stats, "", []).slice(0, 24);
    panel.hidden = rows.length === 0;
    document.getElementById("engine-stats").replaceChildren(...rows.flatMap(([k, v]) =>
      [el("dt", {}, k), el("dd", {}, typeof v === "number" && Math.abs(v) >= 1e5 ? v.toLocaleString() : String(v))]));
  } catch (e) {
    panel.hidden = true;
  }
}

async function refresh() {
  try {
    const snap = await getJSON("/api/health");
    state.snapshot = snap;
    renderSummary(snap);
    renderDevices(snap);
    await Promise.all([renderCharts(snap), renderEngine()]);
    document.getElementById("footer").textContent = "Prometheus metrics at /metrics · JSON at /api/health";
    document.body.dataset.ready = "1";
  } catch (e) {
    document.getElementById("summary").textContent = "cannot load health: " + e.message;
  }
}

document.getElementById("ranges").addEventListener("click", (ev) => {
  const b = ev.target.closest("button");
  if (!b) return;
  state.range = b.dataset.range;
  for (const x of document.querySelectorAll("#ranges button")) x.classList.toggle("active", x === b);
  document.body.dataset.ready = "";
  if (state.snapshot) renderCharts(state.snapshot).then(() => { document.body.dataset.ready = "1"; });
});
window.addEventListener("resize", () => { if (state.snapshot) renderCharts(state.snapshot); });
refresh();
setInterval(refresh, 60000);
