// usher's operator dashboard. It speaks the admin API only, with the token the operator typed
// (sessionStorage, this tab only; sent as a bearer, never as a cookie). Numbers are polled every
// POLL_MS; the chart's history (the last hour) is kept here, in the page, not on the server.
// Fields the dispatcher may not have yet (max_active, effective_per_second, rate_reason,
// opens_at, adaptive, passthrough, arrival_seconds, no_show_ratio) are shown as "—" when absent, and a change sends only the
// fields the operator changed, since the admin API refuses fields it does not know.
"use strict";

const TOKEN_KEY = "usher-admin-token";
const POLL_MS = 2000;
const HISTORY_MS = 3600 * 1000;
const SVG = "http://www.w3.org/2000/svg";
const ADAPTIVE_FIELDS = [
  ["backend", "Backend", "text"],
  ["load_low", "Load low", "number"],
  ["load_high", "Load high", "number"],
  ["min_per_second", "Min per second", "number"],
  ["max_per_second", "Max per second", "number"],
  ["stale_after_seconds", "Stale after (s)", "number"],
];
const STATS = [
  ["waiting", "Waiting"],
  ["entrants", "In the pre-queue (draw)"],
  ["away", "Away"],
  ["active", "Active"],
  ["max_active", "Max active"],
  ["admit_per_second", "Configured rate /s"],
  ["effective_per_second", "Effective rate /s"],
  ["measured_per_second", "Measured rate /s"],
  ["rate_reason", "Rate reason"],
  ["no_show_ratio", "No-show share"],
  ["no_shows_total", "No-shows in total"],
  // >>> inventory (what the booking service reports left; "—" while it reports nothing)
  ["inventory_remaining", "Inventory left"],
  ["inventory_report_age_seconds", "Inventory report age (s)"],
  ["basket_size", "Basket size"],
  ["sold_out_grace_seconds", "Sold-out grace (s)"],
  // <<< inventory
  ["eta_last", "ETA of the last in line"],
  ["opens_at", "Opens at"],
  ["admitted_total", "Admitted in total"],
  ["dropped_total", "Dropped in total"],
  ["maintenance", "Maintenance text"],
  ["ended", "Ended text"],
  ["invitations", "Invitations"], // invitations: the mode and the keys' kids (set through the API)
  // Lanes: each lane's share and how many wait in it ("—" without lanes).
  ["lanes", "Lanes (share: waiting)"],
  // >>> door
  ["on_outage", "When Redis is away"],
  ["door_admitted_total", "Let through the open door"],
  ["door_last", "Last open-door period"],
  // <<< door
];

const $ = (id) => document.getElementById(id);
const queues = new Map(); // queue id -> {card, fields, history, last}
let timer = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v == null) continue;
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// ---- the admin API ----------------------------------------------------------------------

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

class ApiFailure extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// `ifMatch`: the ETag of the settings a change was made from (a PUT is then refused with 412
// if someone changed them since, instead of overwriting their change unseen).
async function api(method, path, body, ifMatch) {
  const headers = {};
  const t = token();
  if (t) headers.authorization = "Bearer " + t;
  if (ifMatch) headers["if-match"] = ifMatch;
  if (body !== undefined) headers["content-type"] = "application/json";
  let r;
  try {
    r = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
      cache: "no-store",
    });
  } catch (e) {
    throw new ApiFailure(0, "the dispatcher cannot be reached");
  }
  const text = await r.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch (e) {
    json = null;
  }
  if (!r.ok) {
    throw new ApiFailure(r.status, (json && json.error) || r.statusText || "request failed");
  }
  return json;
}

function describeCall(method, path, body, ifMatch) {
  const lines = [method + " " + path, "Authorization: Bearer [redacted]"];
  if (ifMatch) lines.push("If-Match: " + ifMatch);
  if (body !== undefined) lines.push("", JSON.stringify(body, null, 2));
  return lines.join("\n");
}

function logCall(method, path, body, outcome, failed) {
  const line = method + " " + path + (body === undefined ? "" : " " + JSON.stringify(body)) +
    "  →  " + outcome;
  const li = el("li", { text: new Date().toLocaleTimeString() + "  " + line, class: failed ? "failed" : null });
  $("calls").prepend(li);
  while ($("calls").children.length > 50) $("calls").lastElementChild.remove();
}

// The If-Match of a change made from the settings last shown for a queue (`null` when none
// were shown: a new queue).
function versionOf(q) {
  return q && typeof q.settings_version === "number" ? '"' + q.settings_version + '"' : null;
}

// Asks the operator, then makes the call and logs it. Returns whether it succeeded. A change
// the API refuses without `"confirm": true` (409) is put to the operator again, with the
// API's reason; `onStale` runs when someone else changed the settings since (412).
function confirmCall(what, method, path, body, ifMatch, onStale) {
  const dialog = $("confirm");
  $("confirm-text").textContent = what;
  $("confirm-call").textContent = describeCall(method, path, body, ifMatch);
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", async function onClose() {
      dialog.removeEventListener("close", onClose);
      if (dialog.returnValue !== "ok") {
        resolve(false);
        return;
      }
      try {
        await api(method, path, body, ifMatch);
        logCall(method, path, body, "ok", false);
        setStatus(what + ": done");
        resolve(true);
        poll();
      } catch (e) {
        logCall(method, path, body, (e.status || "network") + " " + e.message, true);
        setStatus(what + " failed: " + e.message);
        if (e.status === 401) signOut("The dispatcher refused the token: " + e.message);
        if (e.status === 412) {
          setStatus(what + " failed: someone changed the settings since they were shown; the form now shows theirs: make your change again");
          if (onStale) onStale();
        }
        if (e.status === 409 && method === "PUT" && body && !body.confirm) {
          const again = Object.assign({}, body, { confirm: true });
          resolve(await confirmCall(what + ". The dispatcher asks you to confirm: " + e.message, method, path, again, ifMatch, onStale));
          return;
        }
        resolve(false);
      }
    });
    dialog.showModal();
    $("confirm-ok").focus();
  });
}

function setStatus(s) {
  $("status").textContent = s;
}

// ---- numbers ----------------------------------------------------------------------------

function shown(v, digits) {
  if (v === undefined || v === null || v === "") return "—";
  if (typeof v === "number") return digits === undefined ? String(v) : v.toFixed(digits);
  if (typeof v === "boolean") return v ? "yes" : "no";
  return String(v);
}

function humanSeconds(s) {
  if (!isFinite(s)) return "never (not admitting)";
  if (s < 1) return "now";
  if (s < 90) return "about " + Math.round(s) + " s";
  if (s < 5400) return "about " + Math.round(s / 60) + " min";
  return "about " + (s / 3600).toFixed(1) + " h";
}

function opensAt(q) {
  const t = q.opens_at ? Date.parse(q.opens_at) : NaN;
  return isNaN(t) ? null : t;
}

function state(q) {
  if (!q.open && q.ended) return ["closed", "ended"];
  if (!q.open) return ["closed", "closed" + (q.close_reason ? " (" + q.close_reason + ")" : "")];
  if (q.maintenance) return ["paused", "maintenance"];
  if (q.paused) return ["paused", "paused"];
  const o = opensAt(q);
  if (o && o > Date.now()) return ["scheduled", "scheduled"];
  return ["open", "open"];
}

// The rate people leave the line at now: the effective rate when the dispatcher reports one,
// else the configured rate; zero while paused or closed.
function admittingRate(q) {
  if (!q.open || q.paused) return 0;
  const r = typeof q.effective_per_second === "number" ? q.effective_per_second : q.admit_per_second;
  return r > 0 ? r : 0;
}

function etaLast(q) {
  if (!q.waiting) return "nobody waiting";
  const wait = q.waiting / admittingRate(q);
  const o = opensAt(q);
  const delay = o && o > Date.now() ? (o - Date.now()) / 1000 : 0;
  return humanSeconds(delay + wait);
}

// ---- one queue --------------------------------------------------------------------------

function button(text, onclick, cls) {
  return el("button", { type: "button", text, onclick, class: cls });
}

function markChanged(form) {
  const mark = (e) => { if (e.target.name) e.target.dataset.changed = "1"; };
  form.addEventListener("input", mark);
  form.addEventListener("change", mark);
}

function numberOrNull(v) {
  return v === "" ? null : Number(v);
}

function isoFromLocal(v) {
  return v === "" ? null : new Date(v).toISOString();
}

function localFromIso(iso) {
  const t = iso ? Date.parse(iso) : NaN;
  if (isNaN(t)) return "";
  const d = new Date(t - new Date(t).getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 16);
}

function settingsForm(id, entry) {
  const adaptive = el("fieldset", {},
    el("legend", { text: "Adaptive rate (follows the booking backend's load)" }),
    el("label", { class: "check" },
      el("input", { type: "checkbox", name: "adaptive_on" }), " Adaptive on"));
  const row = el("div", { class: "row" });
  for (const [name, label, type] of ADAPTIVE_FIELDS) {
    row.append(el("label", {}, label, el("input", { name: "adaptive." + name, type, step: "any" })));
  }
  adaptive.append(row);
  const form = el("form", { class: "controls", autocomplete: "off" },
    el("div", { class: "row" },
      el("label", {}, "Admissions per second",
        el("input", { name: "admit_per_second", type: "number", min: "0.001", step: "any" })),
      el("label", {}, "Max active (empty: no cap)",
        el("input", { name: "max_active", type: "number", min: "0", step: "1" })),
      el("label", {}, "Passthrough",
        el("select", { name: "passthrough" },
          el("option", { value: "", text: "—" }),
          el("option", { value: "true", text: "on" }),
          el("option", { value: "false", text: "off" }))),
      el("label", {}, "Opens at (local time; empty: no schedule)",
        el("input", { name: "opens_at", type: "datetime-local" }))),
    el("div", { class: "row" },
      el("label", {}, "Arrival deadline, s (empty: no-shows off)",
        el("input", { name: "arrival_seconds", type: "number", min: "1", step: "1" })),
      el("label", {}, "Make up no-shows (rate up to 2×)",
        el("select", { name: "make_up_no_shows" },
          el("option", { value: "", text: "—" }),
          el("option", { value: "true", text: "on" }),
          el("option", { value: "false", text: "off" })))),
    // >>> inventory
    el("div", { class: "row" },
      el("label", {}, "Basket size (items per admission)",
        el("input", { name: "basket_size", type: "number", min: "1", max: "1000", step: "1" })),
      el("label", {}, "Sold-out grace, s",
        el("input", { name: "sold_out_grace_seconds", type: "number", min: "1", step: "1" }))),
    // <<< inventory
    // >>> door
    el("div", { class: "row" },
      el("label", {}, "When Redis is away",
        el("select", { name: "on_outage" },
          el("option", { value: "", text: "—" }),
          el("option", { value: "hold", text: "hold the line" }),
          el("option", { value: "open", text: "open the door" }))),
      el("label", {}, "Open the door after, s",
        el("input", { name: "door_after_seconds", type: "number", min: "1", max: "3600", step: "1" }))),
    // <<< door
    adaptive,
    el("div", { class: "row" }, el("button", { type: "submit", class: "primary", text: "Apply changes…" })));
  markChanged(form);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = changedSettings(form);
    if (!Object.keys(body).length) {
      setStatus("Nothing changed in " + id + "'s settings");
      return;
    }
    const stale = async () => { await poll(); fillSettings(form, entry.last, true); };
    if (await confirmCall("Change the settings of " + id, "PUT", queuePath(id), body, form.dataset.version, stale)) {
      fillSettings(form, entry.last, true);
    }
  });
  return form;
}

// The body of a settings change: only the fields the operator touched.
function changedSettings(form) {
  const body = {};
  const changed = (name) => form.elements[name] && form.elements[name].dataset.changed === "1";
  if (changed("admit_per_second") && form.elements.admit_per_second.value !== "") {
    body.admit_per_second = Number(form.elements.admit_per_second.value);
  }
  if (changed("max_active")) body.max_active = numberOrNull(form.elements.max_active.value);
  if (changed("passthrough") && form.elements.passthrough.value !== "") {
    body.passthrough = form.elements.passthrough.value === "true";
  }
  if (changed("opens_at")) body.opens_at = isoFromLocal(form.elements.opens_at.value);
  if (changed("arrival_seconds")) body.arrival_seconds = numberOrNull(form.elements.arrival_seconds.value);
  if (changed("make_up_no_shows") && form.elements.make_up_no_shows.value !== "") {
    body.make_up_no_shows = form.elements.make_up_no_shows.value === "true";
  }
  for (const name of ["basket_size", "sold_out_grace_seconds"]) { // inventory
    if (changed(name) && form.elements[name].value !== "") body[name] = Number(form.elements[name].value);
  }
  // >>> door
  if (changed("on_outage") && form.elements.on_outage.value !== "") body.on_outage = form.elements.on_outage.value;
  if (changed("door_after_seconds") && form.elements.door_after_seconds.value !== "") {
    body.door_after_seconds = Number(form.elements.door_after_seconds.value);
  }
  // <<< door
  const adaptiveTouched = changed("adaptive_on") ||
    ADAPTIVE_FIELDS.some(([n]) => changed("adaptive." + n));
  if (adaptiveTouched) {
    if (!form.elements.adaptive_on.checked) {
      body.adaptive = null;
    } else {
      const a = {};
      for (const [n, , type] of ADAPTIVE_FIELDS) {
        const v = form.elements["adaptive." + n].value;
        if (v !== "") a[n] = type === "number" ? Number(v) : v;
      }
      body.adaptive = a;
    }
  }
  return body;
}

// Fills the settings form from the queue's current view (all of it when `all`, else only the
// fields the operator has not touched).
function fillSettings(form, q, all) {
  // The version a change is made from: the one shown when the operator began editing (a
  // refresh while they edit keeps it, so a change someone made meanwhile is not overwritten).
  const editing = Array.from(form.elements).some((i) => i.dataset.changed === "1");
  if (all || !editing) form.dataset.version = versionOf(q) || "";
  const set = (name, value) => {
    const input = form.elements[name];
    if (!input || (!all && input.dataset.changed === "1")) return;
    delete input.dataset.changed;
    if (input.type === "checkbox") input.checked = !!value;
    else input.value = value == null ? "" : String(value);
  };
  set("admit_per_second", q.admit_per_second);
  set("max_active", q.max_active);
  set("passthrough", typeof q.passthrough === "boolean" ? String(q.passthrough) : "");
  set("opens_at", localFromIso(q.opens_at));
  set("arrival_seconds", q.arrival_seconds);
  set("make_up_no_shows", typeof q.make_up_no_shows === "boolean" ? String(q.make_up_no_shows) : "");
  set("basket_size", q.basket_size); // inventory
  set("sold_out_grace_seconds", q.sold_out_grace_seconds);
  // >>> door
  set("on_outage", q.on_outage || "");
  set("door_after_seconds", q.door_after_seconds);
  // <<< door
  const a = q.adaptive && typeof q.adaptive === "object" ? q.adaptive : null;
  set("adaptive_on", !!a);
  for (const [n] of ADAPTIVE_FIELDS) set("adaptive." + n, a ? a[n] : "");
}

function queuePath(id) {
  return "/admin/queues/" + encodeURIComponent(id);
}

function card(id) {
  const fields = {};
  const stats = el("dl", { class: "stats" });
  for (const [name, label] of STATS) {
    fields[name] = el("dd", { "data-field": name, text: "—" });
    stats.append(el("div", {}, el("dt", { text: label }), fields[name]));
  }
  const badge = el("span", { class: "badge", "data-field": "state" });
  const chart = svg("svg", { viewBox: "0 0 600 160", role: "img", "aria-label": "Waiting and admissions per second, over the chart window" });
  const reason = el("select", { "aria-label": "Close reason" },
    el("option", { value: "queue_closed", text: "queue closed" }),
    el("option", { value: "sold_out", text: "sold out" }));
  const notice = el("input", { name: "message", maxlength: "500", required: true });
  const entry = { id, fields, badge, chart, history: [], last: null };
  entry.settings = settingsForm(id, entry);
  const noticeForm = el("form", { class: "row", autocomplete: "off" },
    el("label", {}, "Notice to everyone waiting", notice),
    el("button", { type: "submit", text: "Send notice…" }));
  noticeForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = { message: notice.value };
    if (await confirmCall("Send a notice to everyone waiting in " + id, "POST", queuePath(id) + "/notice", body)) {
      notice.value = "";
    }
  });
  // Maintenance and the end of the sale, each with the text every waiting browser shows.
  const stateText = el("input", { name: "state_text", maxlength: "500" });
  const withText = (what, field) => {
    if (!stateText.value.trim()) return setStatus("Write the text people will see first");
    confirmCall(what + " " + id + ": \u201c" + stateText.value + "\u201d", "PUT", queuePath(id), { [field]: stateText.value });
  };
  const statesRow = el("div", { class: "row" },
    el("label", {}, "Text for maintenance or the end of the sale", stateText),
    button("Start maintenance…", () => withText("Hold admission for maintenance in", "maintenance")),
    button("End maintenance…", () => confirmCall("End maintenance in " + id + " (admission resumes)", "PUT", queuePath(id), { maintenance: null })),
    button("End the sale…", () => withText("End the sale (closes the line) in", "ended"), "danger"));
  const path = queuePath(id);
  entry.card = el("article", { class: "queue", "data-queue": id, "aria-labelledby": "q-" + id },
    el("header", {}, el("h3", { id: "q-" + id, text: id }), badge),
    el("div", { class: "glance" },
      stats,
      el("div", { class: "chart" }, chart,
        el("p", { class: "legend" },
          el("span", { class: "w", text: "— waiting" }), "  ",
          el("span", { class: "r", text: "— admissions/s (measured)" })))),
    el("div", { class: "controls" },
      el("div", { class: "row" },
        button("Open…", () => confirmCall("Open " + id, "PUT", path, { open: true }, versionOf(entry.last))),
        button("Pause…", () => confirmCall("Pause admission in " + id + " (everyone keeps their place)", "PUT", path, { paused: true }, versionOf(entry.last))),
        button("Resume…", () => confirmCall("Resume admission in " + id, "PUT", path, { paused: false }, versionOf(entry.last))),
        el("label", {}, "Reason", reason),
        button("Close…", () => confirmCall("Close " + id + " for everyone waiting (" + reason.value + ")", "DELETE", path + "?reason=" + reason.value), "danger")),
      noticeForm,
      statesRow,
      // The fairness report (report.html): its own page.
      el("a", { href: "/admin/ui/report?queue=" + encodeURIComponent(id), "data-field": "report" }, "Fairness report"),
      el("details", {}, el("summary", { text: "Rate, capacity, no-shows, the open door, adaptive rate and schedule" }), entry.settings)));
  return entry;
}

function update(entry, q, now) {
  const prev = entry.history[entry.history.length - 1];
  let measured = null;
  if (prev && now > prev.t && q.admitted_total >= prev.admitted) {
    measured = (q.admitted_total - prev.admitted) / ((now - prev.t) / 1000);
  }
  entry.history.push({ t: now, waiting: q.waiting, admitted: q.admitted_total, rate: measured });
  while (entry.history.length && entry.history[0].t < now - HISTORY_MS) entry.history.shift();
  const [cls, text] = state(q);
  entry.badge.className = "badge " + cls;
  entry.badge.textContent = text;
  const values = Object.assign({}, q, {
    measured_per_second: measured === null ? null : measured.toFixed(1),
    eta_last: etaLast(q),
    // A share, shown as a percentage (null until enough sessions arrived or not).
    no_show_ratio: typeof q.no_show_ratio === "number" ? Math.round(q.no_show_ratio * 100) + " %" : null,
    opens_at: opensAt(q) ? new Date(opensAt(q)).toLocaleString() : q.opens_at,
    // invitations: "required (keys shop-1, shop-2)"; "—" for a queue that takes none.
    invitations: q.invitations && q.invitations !== "none"
      ? q.invitations + " (keys " + (q.invitation_keys || []).map((k) => k.kid).join(", ") + ")" : null,
    lanes: lanesText(q),
    // >>> door
    on_outage: q.on_outage === "open" ? "open the door after " + q.door_after_seconds + " s" : q.on_outage,
    door_last: doorPeriod(q),
    // <<< door
  });
  for (const [name] of STATS) {
    const v = values[name];
    entry.fields[name].textContent = shown(typeof v === "number" && !Number.isInteger(v) ? Number(v.toFixed(2)) : v);
  }
  fillSettings(entry.settings, q, entry.last === null);
  entry.last = q;
  draw(entry, now);
}

// Lanes as one line, the default lane marked: "general* 70 %: 3 · members 30 %: 2".
function lanesText(q) {
  if (!Array.isArray(q.lanes) || q.lanes.length === 0) return null;
  return q.lanes.map((l) => l.name + (l.default ? "*" : "") + " " + l.share + " %: " + l.waiting).join(" · ");
}
// >>> door
// The newest open-door period a gateway recorded once Redis was back: when, how long, how many.
function doorPeriod(q) {
  const p = Array.isArray(q.door_periods) ? q.door_periods[0] : null;
  if (!p) return null;
  const opened = new Date(p.opened_at), closed = new Date(p.closed_at);
  const secs = Math.max(0, Math.round((closed - opened) / 1000));
  return opened.toLocaleString() + ", " + secs + " s, " + p.admitted + " let through (gateway " + p.gateway + ")";
}
// <<< door

// The chart's window in milliseconds (the history always keeps the last hour).
function windowMs() {
  return Number($("window").value) * 60000;
}

// The chart: waiting (left scale) and measured admissions per second (right scale).
function draw(entry, now) {
  const W = 600, H = 160, L = 44, R = 44, T = 8, B = 20;
  const span = windowMs();
  const h = entry.history.filter((p) => p.t >= now - span);
  const maxW = Math.max(1, ...h.map((p) => p.waiting));
  const maxR = Math.max(1, ...h.map((p) => p.rate || 0));
  const x = (t) => L + (W - L - R) * (1 - (now - t) / span);
  const y = (v, max) => T + (H - T - B) * (1 - v / max);
  const line = (pick, max, color, name) => svg("polyline", {
    points: h.filter((p) => pick(p) !== null).map((p) => x(p.t).toFixed(1) + "," + y(pick(p), max).toFixed(1)).join(" "),
    fill: "none", stroke: color, "stroke-width": "2", "data-series": name,
  });
  const text = (x0, y0, s, anchor, color) => {
    const t = svg("text", { x: x0, y: y0, "font-size": "11", "text-anchor": anchor, fill: color });
    t.textContent = s;
    return t;
  };
  const c = entry.chart;
  c.replaceChildren(
    svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#8b949e" }),
    text(L - 4, T + 10, String(maxW), "end", "#0b5cad"),
    text(L - 4, H - B, "0", "end", "#0b5cad"),
    text(W - R + 4, T + 10, maxR.toFixed(1), "start", "#b3261e"),
    text(W - R + 4, H - B, "0", "start", "#b3261e"),
    text(L, H - 4, "−" + span / 60000 + " min", "start", "#545c66"),
    text(W - R, H - 4, "now", "end", "#545c66"),
    line((p) => p.waiting, maxW, "#0b5cad", "waiting"),
    line((p) => p.rate, maxR, "#b3261e", "rate"));
}

// ---- polling ----------------------------------------------------------------------------

async function poll() {
  let list, gws;
  try {
    [list, gws] = await Promise.all([api("GET", "/admin/queues"), api("GET", "/admin/gateways")]);
  } catch (e) {
    if (e.status === 401) signOut("The dispatcher refused the token: " + e.message);
    else setStatus("Cannot refresh: " + e.message);
    return false;
  }
  // Signed out while the answer was on its way: it must not bring the cards back.
  if (token() === null) return false;
  const now = Date.now();
  const seen = new Set();
  for (const q of list.queues || []) {
    seen.add(q.queue);
    let entry = queues.get(q.queue);
    if (!entry) {
      entry = card(q.queue);
      queues.set(q.queue, entry);
      $("queues").append(entry.card);
    }
    update(entry, q, now);
  }
  for (const [id, entry] of queues) {
    if (!seen.has(id)) {
      entry.card.remove();
      queues.delete(id);
    }
  }
  $("no-queues").hidden = queues.size > 0;
  renderGateways(gws.gateways || []);
  // Not in the live region: screen readers would announce it every poll.
  $("updated").textContent = "Updated " + new Date(now).toLocaleTimeString();
  return true;
}

function renderGateways(list) {
  const body = $("gateways").tBodies[0];
  body.replaceChildren(...list.map((g) => el("tr", { "data-gateway": g.index },
    el("td", { text: String(g.index) }),
    el("td", { text: g.server_id }),
    el("td", { text: g.alive ? "alive" : "gone" }),
    el("td", { "data-field": "streams", text: shown(g.streams) }),
    el("td", { "data-field": "sockets", text: shown(g.sockets) }),
    el("td", { text: new Date(g.alive_until_ms).toLocaleTimeString() }),
    el("td", { text: g.queues.length ? g.queues.join(", ") : "—" }))));
  if (!list.length) body.append(el("tr", {}, el("td", { colspan: "7", text: "No gateway registered." })));
}

// ---- readiness ------------------------------------------------------------------------

// Runs the readiness report for the crowd typed (none: the crowd checks warn) and shows it.
async function checkReadiness(e) {
  if (e) e.preventDefault();
  const crowd = $("readiness-form").elements.crowd.value;
  const path = "/admin/readiness" + (crowd === "" ? "" : "?crowd=" + encodeURIComponent(crowd));
  let report;
  try {
    report = await api("GET", path);
  } catch (err) {
    if (err.status === 401) signOut("The dispatcher refused the token: " + err.message);
    else setStatus("Cannot check readiness: " + err.message);
    return;
  }
  const outcome = $("readiness-outcome");
  outcome.className = "badge " + report.outcome;
  outcome.textContent = report.outcome;
  outcome.hidden = false;
  const body = $("readiness").tBodies[0];
  body.replaceChildren(...(report.checks || []).map((c) => el("tr", { "data-check": c.check },
    el("td", { text: c.check }),
    el("td", {}, el("span", { class: "badge " + c.outcome, "data-field": "outcome", text: c.outcome })),
    el("td", { text: c.detail }),
    el("td", { "data-field": "fix", text: c.fix || "—" }))));
  $("readiness").hidden = false;
}

// ---- signing in and out -----------------------------------------------------------------

async function signIn(t) {
  sessionStorage.setItem(TOKEN_KEY, t);
  $("login-error").textContent = "";
  if (!(await poll())) {
    if (token() !== null) {
      signOut("Cannot reach the admin API: " + $("status").textContent);
    }
    return;
  }
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  $("create-title").focus();
  clearInterval(timer);
  timer = setInterval(poll, POLL_MS);
}

function signOut(why) {
  clearInterval(timer);
  timer = null;
  sessionStorage.removeItem(TOKEN_KEY);
  for (const entry of queues.values()) entry.card.remove();
  queues.clear();
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = why || "";
  $("token").value = "";
  $("token").focus();
}

function createQueue(e) {
  e.preventDefault();
  const f = e.target;
  const id = f.elements.queue.value.trim();
  const body = {};
  if (f.elements.admit_per_second.value !== "") body.admit_per_second = Number(f.elements.admit_per_second.value);
  if (f.elements.max_active.value !== "") body.max_active = Number(f.elements.max_active.value);
  if (f.elements.opens_at.value !== "") body.opens_at = isoFromLocal(f.elements.opens_at.value);
  if (f.elements.paused.checked) body.paused = true;
  const known = queues.get(id);
  const what = known ? "Update the existing queue " + id : "Create the queue " + id;
  confirmCall(what, "PUT", queuePath(id), body, known ? versionOf(known.last) : null).then((ok) => { if (ok) f.reset(); });
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    signIn($("token").value);
  });
  $("logout").addEventListener("click", () => signOut("Signed out."));
  // Buttons, not a `method="dialog"` form: the policy allows no form submission at all.
  $("confirm-ok").addEventListener("click", () => $("confirm").close("ok"));
  $("confirm-cancel").addEventListener("click", () => $("confirm").close("cancel"));
  $("create-form").addEventListener("submit", createQueue);
  $("readiness-form").addEventListener("submit", checkReadiness);
  $("window").addEventListener("change", () => {
    for (const entry of queues.values()) draw(entry, Date.now());
  });
  const t = token();
  if (t !== null) signIn(t);
  else $("token").focus();
});
