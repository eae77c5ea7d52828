// The fairness report page (docs/fairness-report.md): GET /admin/queues/{queue}/report with the
// admin token the dashboard keeps in this tab (sessionStorage), drawn as inline SVG. It only
// reads; every number it shows is in the report's JSON (and its CSV).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const TOKEN_KEY = "usher-admin-token"; // the dashboard's (dashboard.js)
const COLORS = { p50: "#0b5cad", p90: "#8a5300", p99: "#b3261e", eta: "#17663a", joined: "#8b949e", admitted: "#0b5cad" };
const W = 560, H = 220, PAD = { l: 44, r: 12, t: 12, b: 30 };

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
}

// A chart frame: the SVG, and scales from data to pixels. `xs` are the x values' count
// (categories) and `ymax` the top of the y axis; y ticks at 0, half and the top.
function frame(label, n, ymax) {
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label });
  const top = ymax > 0 ? ymax : 1;
  const x = (i) => PAD.l + (i + 0.5) * (W - PAD.l - PAD.r) / Math.max(n, 1);
  const y = (v) => H - PAD.b - (v / top) * (H - PAD.t - PAD.b);
  for (const t of [0, top / 2, top]) {
    s.append(svg("line", { x1: PAD.l, x2: W - PAD.r, y1: y(t), y2: y(t), stroke: "#d5d9df" }));
    s.append(svg("text", { x: PAD.l - 4, y: y(t) + 4, "text-anchor": "end" }, fmt(t)));
  }
  return { s, x, y, band: (W - PAD.l - PAD.r) / Math.max(n, 1) };
}

function fmt(v) {
  if (v == null) return "—";
  if (Math.abs(v) >= 100 || Number.isInteger(v)) return String(Math.round(v));
  return v.toFixed(1);
}

function xLabels(f, labels) {
  const every = Math.max(1, Math.ceil(labels.length / 12));
  labels.forEach((l, i) => {
    if (i % every === 0) f.s.append(svg("text", { x: f.x(i), y: H - PAD.b + 14, "text-anchor": "middle" }, l));
  });
}

function legend(f, items) {
  items.forEach(([name, color], i) => {
    const x = PAD.l + 8 + i * 110;
    f.s.append(svg("rect", { x, y: PAD.t, width: 10, height: 10, fill: color }));
    f.s.append(svg("text", { x: x + 14, y: PAD.t + 9 }, name));
  });
}

// Lines of `series` ([name, color, values (null: a gap)]) over `labels`.
function lines(label, labels, series) {
  const max = Math.max(0, ...series.flatMap(([, , v]) => v.filter((x) => x != null)));
  const f = frame(label, labels.length, max * 1.1);
  for (const [name, color, values] of series) {
    let d = "";
    values.forEach((v, i) => {
      if (v == null) return;
      d += (d === "" || values[i - 1] == null ? "M" : "L") + f.x(i).toFixed(1) + " " + f.y(v).toFixed(1);
      f.s.append(svg("circle", { cx: f.x(i), cy: f.y(v), r: 2.5, fill: color, "data-series": name }));
    });
    if (d) f.s.append(svg("path", { d, fill: "none", stroke: color, "stroke-width": 2, "data-series": name }));
  }
  xLabels(f, labels);
  legend(f, series.map(([n, c]) => [n, c]));
  return f.s;
}

// Grouped bars: `series` ([name, color, values]) side by side for each label.
function bars(label, labels, series) {
  const max = Math.max(0, ...series.flatMap(([, , v]) => v));
  const f = frame(label, labels.length, max * 1.15);
  const w = Math.min(28, f.band * 0.8 / series.length);
  series.forEach(([name, color, values], k) => {
    values.forEach((v, i) => {
      const x = f.x(i) - (series.length * w) / 2 + k * w;
      f.s.append(svg("rect", { x, y: f.y(v), width: w - 1, height: Math.max(f.y(0) - f.y(v), 0), fill: color, "data-series": name },));
      if (series.length === 1) f.s.append(svg("text", { x: x + w / 2, y: f.y(v) - 3, "text-anchor": "middle" }, fmt(v)));
    });
  });
  xLabels(f, labels);
  if (series.length > 1) legend(f, series.map(([n, c]) => [n, c]));
  return f.s;
}

function card(name, value, bad) {
  return el("div", bad ? { class: "bad" } : {}, el("dt", { text: name }), el("dd", { text: value }));
}

function show(r) {
  $("report").hidden = false;
  const cards = $("cards");
  cards.replaceChildren();
  if (!r.recorded) {
    $("error").textContent = "The queue " + r.queue + " did not record: turn \"record\" on before a sale to get its report.";
    $("report").hidden = true;
    return;
  }
  const o = r.order, s = r.sessions, e = r.eta;
  cards.append(
    card("Places recorded", fmt(r.record.places)),
    card("Admitted", fmt(o.admitted)),
    card("Stayed connected", fmt(o.stayed_connected)),
    card("Inversions (connected)", fmt(o.inversions)),
    card("Kendall's tau", o.kendall_tau == null ? "—" : o.kendall_tau.toFixed(3)),
    card("Unexplained inversions", fmt(o.explained.unexplained), o.explained.unexplained > 0),
    card("Median ETA error (s)", fmt(e.median_error_seconds)),
    card("Admitted within ETA", e.within_eta == null ? "—" : Math.round(e.within_eta * 100) + " %"),
    card("Booked", fmt(s.booked)),
    card(r.record.closed ? "Waiting at close" : "Still waiting",
      fmt(r.record.closed ? r.record.waiting_at_close : r.record.still_waiting)),
    card("Let through an open door", fmt(r.record.let_through_door)),
  );
  const minutes = r.waits.map((w) => String(w.minute));
  $("plot-waits").replaceChildren(lines("Wait by arrival minute", minutes, [
    ["median", COLORS.p50, r.waits.map((w) => w.p50_seconds)],
    ["90th", COLORS.p90, r.waits.map((w) => w.p90_seconds)],
    ["99th", COLORS.p99, r.waits.map((w) => w.p99_seconds)],
    ["ETA shown", COLORS.eta, r.waits.map((w) => w.eta_p50_seconds)],
  ]));
  $("plot-joined").replaceChildren(bars("Joined and admitted by arrival minute", minutes, [
    ["joined", COLORS.joined, r.waits.map((w) => w.joined)],
    ["admitted", COLORS.admitted, r.waits.map((w) => w.admitted)],
  ]));
  const x = o.explained;
  $("plot-order").replaceChildren(bars("Inversions by explanation", ["lane", "away", "draw", "unexplained"],
    [["inversions", COLORS.p50, [x.lane, x.away, x.draw, x.unexplained]]]));
  const ab = r.abandonment;
  $("plot-abandon").replaceChildren(bars("Abandonment by minutes waited", ab.map((a) => String(a.minutes_waited)), [
    ["left", COLORS.p90, ab.map((a) => a.left)],
    ["away expired", COLORS.p99, ab.map((a) => a.away_expired)],
    ["dropped", COLORS.joined, ab.map((a) => a.dropped)],
  ]));
  $("plot-sessions").replaceChildren(bars("Sessions", ["booked", "released", "expired", "no-show", "open"],
    [["sessions", COLORS.eta, [s.booked, s.released, s.expired, s.no_show, s.open]]]));
  const n = r.networks[0];
  $("plot-networks").replaceChildren(bars("Busiest networks", n.busiest.map((b) => b.network.slice(0, 6)),
    [["share %", COLORS.p99, n.busiest.map((b) => Math.round(b.share * 1000) / 10)]]));
  const d = $("draw");
  d.replaceChildren();
  if (!r.draw) d.append(el("dt", { text: "Draw" }), el("dd", { text: "none: not a scheduled sale" }));
  else for (const k of ["status", "commitment", "seed", "beacon_round", "beacon", "record_url", "verify"]) {
    d.append(el("dt", { text: k }), el("dd", { text: r.draw[k] == null ? "—" : String(r.draw[k]) }));
  }
}

async function load(queue) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  $("signin").hidden = token !== null;
  $("error").textContent = "";
  if (token === null) return;
  $("status").textContent = "Loading " + queue + "…";
  const path = "/admin/queues/" + encodeURIComponent(queue) + "/report";
  try {
    const res = await fetch(path, { headers: { Authorization: "Bearer " + token } });
    const body = await res.json();
    if (!res.ok) throw new Error(body.error || res.status);
    show(body);
    $("status").textContent = "Report of " + queue;
    // The CSV needs the token too: fetched, then offered as a file.
    const a = $("csv");
    a.hidden = false;
    a.onclick = async (ev) => {
      ev.preventDefault();
      const c = await fetch(path + "?format=csv", { headers: { Authorization: "Bearer " + token } });
      const url = URL.createObjectURL(await c.blob());
      const link = el("a", { href: url, download: queue + "-fairness.csv" });
      link.click();
      URL.revokeObjectURL(url);
    };
  } catch (err) {
    $("report").hidden = true;
    $("status").textContent = "";
    $("error").textContent = "The report of " + queue + " could not be read: " + err.message;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const q = new URLSearchParams(location.search).get("queue");
  $("pick").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = $("queue").value;
    history.replaceState(null, "", "?queue=" + encodeURIComponent(v));
    load(v);
  });
  if (q) {
    $("queue").value = q;
    load(q);
  } else {
    $("signin").hidden = sessionStorage.getItem(TOKEN_KEY) !== null;
  }
});
