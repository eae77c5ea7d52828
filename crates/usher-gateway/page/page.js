// usher waiting-room page. Plain JS, no build step. It speaks the public contract only:
// GET {stream} (SSE), DELETE {tickets}{ticket}, GET {status}?ticket=.
//
// One tab per browser holds the stream (Web Locks API); the others mirror its state over a
// BroadcastChannel, and one of them takes over (resuming with the stored ticket) when the
// holder closes. The ticket is kept in localStorage per queue (a reload resumes the place)
// until admission (a reload never replays an entry). cfg.bind: every request carries a proof
// of a non-extractable WebCrypto key; the page reopens the stream itself, after cfg.retry_ms.
"use strict";
(() => {
  const cfg = JSON.parse(document.getElementById("usher-config").textContent);
  const S = cfg.strings;
  const Q = cfg.queue;
  const $ = (id) => document.getElementById(id);
  const num = new Intl.NumberFormat(cfg.lang);
  const t = (key, vars = {}) =>
    (S[key] || key).replace(/\{(\w+)\}/g, (_, k) => (k in vars ? vars[k] : ""));
  const STORE = "usher:" + Q;
  const SCRIPT = document.currentScript.src; // the assets' base and version (?v=)
  const ANNOUNCE_EVERY_MS = 30000; // screen readers hear the position at most this often
  const ETA_HOLD_MS = 15000; // the ETA text changes at most this often

  // ---- ticket storage (per queue) ----
  const saved = () => {
    try { return JSON.parse(localStorage.getItem(STORE)) || {}; } catch { return {}; }
  };
  const save = (v) => { try { localStorage.setItem(STORE, JSON.stringify(v)); } catch { /* private mode */ } };
  const forget = () => { try { localStorage.removeItem(STORE); } catch { /* ignore */ } };
  let inv = (/[#&]invitation=([\w.-]+)/.exec(location.hash) || [])[1], again1 = 1; // docs/sale-day.md
  if (inv) { history.replaceState(null, "", location.pathname + location.search); forget(); }

  // ---- the entry after admission: this tab only, until the booking form was sent ----
  const ENTRY = STORE + ":entry";
  const entry = () => { try { return JSON.parse(sessionStorage.getItem(ENTRY)); } catch { return null; } };
  const keepEntry = (v) => { try { sessionStorage.setItem(ENTRY, JSON.stringify(v)); } catch { /**/ } };
  const dropEntry = () => { try { sessionStorage.removeItem(ENTRY); } catch { /**/ } };

  // ---- the browser key (docs/security.md, "Places and tokens bound to the browser") ----
  const b64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
    .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const utf8 = (text) => new TextEncoder().encode(text);
  let keyPair = null;
  const keyStore = (mode, use) => new Promise((ok, fail) => {
    const req = indexedDB.open("usher-keys", 1);
    req.onupgradeneeded = () => req.result.createObjectStore("keys");
    req.onerror = () => fail(req.error);
    req.onsuccess = () => {
      const tx = req.result.transaction("keys", mode), r = use(tx.objectStore("keys"));
      tx.oncomplete = () => ok(r.result);
      tx.onerror = () => fail(tx.error);
    };
  });
  // One key per queue (every tab and a kept entry prove the same); its private half cannot be
  // read out, only used to sign.
  async function browserKey() {
    keyPair = keyPair || (await keyStore("readonly", (st) => st.get(Q))) || null;
    if (keyPair) return keyPair;
    keyPair = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, false, ["sign", "verify"]);
    await keyStore("readwrite", (st) => st.put(keyPair, Q));
    return keyPair;
  }
  // An ES256 compact JWS over `claims`, fresh jti and iat, the public key in its header.
  async function proof(claims) {
    const pair = await browserKey();
    const { kty, crv, x, y } = await crypto.subtle.exportKey("jwk", pair.publicKey);
    const header = { alg: "ES256", typ: "usher-pop+jwt", jwk: { kty, crv, x, y } };
    const body = { jti: b64url(crypto.getRandomValues(new Uint8Array(16))), iat: Math.floor(Date.now() / 1000), ...claims };
    const signed = b64url(utf8(JSON.stringify(header))) + "." + b64url(utf8(JSON.stringify(body)));
    const sig = await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, pair.privateKey, utf8(signed));
    return signed + "." + b64url(sig);
  }
  const routeProof = (htu) => proof({ htm: "GET", htu });

  // ---- rendering: one state object, drawn by every tab ----
  let state = { phase: "connecting" };
  let leading = false; // this tab holds the stream
  let etaShown = null, etaAt = 0, etaAvg = null, announcedAt = 0;

  function etaWords(sec) {
    if (sec == null) return t("eta_unknown");
    etaAvg = etaAvg == null ? sec : 0.7 * etaAvg + 0.3 * sec; // smooth tick-to-tick noise
    const s = etaAvg;
    let text;
    if (s < 60) text = t("eta_soon");
    else if (s < 3600) {
      const m = Math.round(s / 60);
      const r = m <= 10 ? m : Math.round(m / 5) * 5; // coarser when far away
      text = r === 1 ? t("eta_minute") : t("eta_minutes", { n: num.format(r) });
    } else {
      const h = Math.round(s / 3600);
      text = h === 1 ? t("eta_hour") : t("eta_hours", { n: num.format(h) });
    }
    const now = Date.now();
    if (etaShown === null || (text !== etaShown && now - etaAt >= ETA_HOLD_MS)) {
      etaShown = text;
      etaAt = now;
    }
    return etaShown;
  }

  function setConn(kind) {
    $("conn").dataset.conn = kind;
    $("conn-text").textContent = t(kind);
  }

  function button(id, label, onClick) {
    const b = $(id);
    b.hidden = !label;
    if (label) { b.textContent = label; b.onclick = onClick; }
  }

  function draw() {
    const st = state;
    document.body.dataset.state = st.phase;
    $("waiting").hidden = st.phase !== "waiting";
    drawChallenge(st);
    const msg = $("message");
    msg.hidden = !st.message;
    msg.textContent = st.message || "";
    if (st.phase === "waiting") {
      const p = st.position;
      document.body.dataset.position = p;
      $("position").textContent = num.format(p);
      // Lanes: a place outside the queue's default lane is told its lane (its position and
      // ETA are that lane's); a default-lane place's events name none.
      $("lane").hidden = !st.lane;
      $("lane").textContent = st.lane ? t("lane", { name: st.lane }) : "";
      $("ahead").textContent =
        p <= 1 ? t("ahead_none") : p === 2 ? t("ahead_one") : t("ahead_many", { n: num.format(p - 1) });
      const first = Math.max(st.first || p, p);
      const pct = first <= 1 ? 100 : Math.round(((first - p) / (first - 1)) * 100);
      $("bar-fill").style.width = pct + "%";
      $("bar").setAttribute("aria-valuenow", String(pct));
      const eta = held ? t("eta_unknown") : etaWords(st.eta); // no ETA while admission holds
      $("eta").textContent = eta;
      drawInventory(st.inventory);
      const now = Date.now();
      if (now - announcedAt >= ANNOUNCE_EVERY_MS) {
        announcedAt = now;
        $("announce").textContent = t("announce", { n: num.format(p), eta });
      }
    }
    const live = leading && (st.phase === "waiting" || st.phase === "scheduled");
    button("leave", live && saved().ticket ? t("leave") : "", askLeave);
    if (!leading || st.phase !== "closed") button("primary", "", null);
  }

  // >>> inventory: what is left, and this place's chance (`inventory` in `waiting`)
  function drawInventory(inv) {
    const box = $("inventory");
    box.hidden = !inv;
    if (!inv) return;
    const out = inv.remaining === 0;
    box.textContent = out ? t("inventory_sold_out") : t("inventory_" + inv.chance, { n: num.format(inv.remaining) });
    if (out) $("eta").textContent = t("eta_unknown"); // none admitted
  }
  // <<< inventory

  function setState(next) {
    state = next;
    draw();
    if (leading && channel) channel.postMessage({ type: "state", state });
  }

  // Maintenance (`event: status`, or cfg on load): shown until it ends; the place is kept.
  let held = false;
  function showStatus(d) {
    const box = $("status"), on = (held = d.state === "maintenance");
    draw();
    if (!box) return;
    box.hidden = !on;
    box.textContent = on ? t("maintenance", { message: d.message }) : "";
  }

  function showNotice(text) {
    $("notices-box").hidden = false;
    const li = document.createElement("li");
    li.textContent = text;
    const list = $("notices");
    list.prepend(li);
    while (list.children.length > 5) list.lastElementChild.remove();
  }

  // ---- the stream (only in the tab that holds the lock) ----
  let es = null, countdown = null;

  let reopen = null;
  // `solution`: a solved proof-of-work puzzle for a join (a resume never needs one).
  async function open(solution) {
    if (es) es.close();
    clearTimeout(reopen);
    const { ticket } = saved();
    const params = new URLSearchParams();
    if (ticket) params.set("ticket", ticket);
    else if (solution) params.set("pow", solution);
    if (!ticket && inv) {
      const r = await fetch(cfg.stream.replace(/stream$/, "invitation"), { method: "POST", headers: { Authorization: "Bearer " + inv } }).catch(() => 0);
      const b = r ? await r.json().catch(() => ({})) : {};
      if (!b.join_code) return r.status > 399 && r.status < 429 ? closed("invitation_" + (/expired/.test(b.error) ? "expired" : "invalid")) : again();
      params.set("join", b.join_code);
    }
    try {
      if (cfg.bind) params.set("proof", await routeProof(cfg.stream));
    } catch {
      return closed("no_key");
    }
    const query = params.toString();
    setConn("connecting");
    const source = new EventSource(cfg.stream + (query ? "?" + query : ""));
    es = source;
    // A stream in maintenance says so (`status`) before its first `waiting`: a first `waiting`
    // without it means maintenance ended while this browser was away.
    let opened = false;
    es.onopen = () => { opened = true; setConn("connected"); };
    es.onerror = () => {
      if (source.readyState === EventSource.CLOSED) return permanentError();
      setConn("reconnecting"); // EventSource retries by itself, with Last-Event-ID = ticket
      if (cfg.bind) { source.close(); again(); } // ... with a spent proof: reopen with a fresh one
    };
    es.addEventListener("proof_required", (e) => {
      source.close();
      if (JSON.parse(e.data).reason === "wrong_key") return closed("wrong_key");
      again();
    });
    es.addEventListener("waiting", (e) => {
      const d = JSON.parse(e.data);
      const s = saved();
      const fresh = s.ticket !== e.lastEventId;
      if (opened && held) showStatus({ state: "open" });
      opened = false;
      save({ ticket: e.lastEventId, first: fresh ? d.position : Math.max(s.first || 0, d.position) });
      stopCountdown();
      setConn("connected");
      setState({ phase: "waiting", position: d.position, eta: d.eta_seconds, first: saved().first,
        inventory: d.inventory, lane: d.lane });
    });
    es.addEventListener("admitted", (e) => {
      es.close();
      admitted(JSON.parse(e.data));
    });
    es.addEventListener("notice", (e) => {
      const d = JSON.parse(e.data);
      showNotice(d.message);
      if (channel) channel.postMessage({ type: "notice", message: d.message });
    });
    es.addEventListener("status", (e) => {
      opened = false;
      const d = JSON.parse(e.data);
      showStatus(d);
      if (channel) channel.postMessage({ type: "status", status: d });
    });
    es.addEventListener("closed", (e) => {
      es.close();
      const d = JSON.parse(e.data);
      closed(d.reason, d.message);
    });
    es.addEventListener("scheduled", (e) => {
      if (e.lastEventId) save({ ...saved(), ticket: e.lastEventId });
      scheduled(JSON.parse(e.data));
    });
    es.addEventListener("draw_void", (e) => drawVoid(JSON.parse(e.data)));
    es.addEventListener("invitation_refused", (e) => {
      es.close();
      const r = JSON.parse(e.data).reason;
      if (r === "join_code" && again1--) return open();
      closed("invitation_" + (r === "join_code" ? "invalid" : r));
    });
    // A scheduled sale's pre-queue holds its `max_entrants`: no place was taken. Say so, and
    // let the person try again (someone may leave) instead of reconnecting by itself.
    es.addEventListener("pre_queue_full", () => {
      es.close();
      stopCountdown();
      setConn("connected");
      setState({ phase: "closed", reason: "pre_queue_full", message: t("pre_queue_full") });
      button("primary", t("join_again"), () => { forget(); open(); });
    });
    // The queue asks a proof of work (docs/security.md, "Proof of work"): the stream ends after this
    // event; solve the puzzle it carries, then join with the solution.
    es.addEventListener("challenge", (e) => {
      es.close();
      solveChallenge(JSON.parse(e.data));
    });
  }

  // ---- proof of work: solved in a Web Worker (pow-worker.js), with progress ----
  let solver = null;
  function solveChallenge(d) {
    if (solver) solver.terminate();
    const expected = Math.pow(2, d.difficulty); // hashes a solution takes on average
    const progress = (hashes) =>
      setState({ phase: "challenge", message: t("challenge"), work: Math.min(0.99, hashes / expected) });
    progress(0);
    const url = new URL("pow-worker.js", SCRIPT);
    url.search = new URL(SCRIPT).search;
    try {
      solver = new Worker(url);
    } catch {
      return challengeFailed();
    }
    solver.onmessage = ({ data }) => {
      if (data.nonce === undefined) return progress(data.hashes);
      solver.terminate();
      solver = null;
      setState({ phase: "challenge", message: t("challenge"), work: 1 });
      open(d.puzzle + "." + data.nonce);
    };
    solver.onerror = () => challengeFailed();
    solver.postMessage({ puzzle: d.puzzle, difficulty: d.difficulty });
  }
  function challengeFailed() {
    if (solver) solver.terminate();
    solver = null;
    setState({ phase: "challenge", message: t("challenge_failed"), work: 0 });
    button("primary", t("challenge_retry"), () => open());
  }
  function drawChallenge(st) {
    $("pow").hidden = st.phase !== "challenge";
    const pct = Math.round((st.work || 0) * 100);
    $("pow-fill").style.width = pct + "%";
    $("pow-bar").setAttribute("aria-valuenow", String(pct));
    $("pow-bar").setAttribute("aria-label", t("challenge_progress"));
  }

  function scheduled(d) {
    const at = typeof d.opens_at === "number"
      ? (d.opens_at < 1e12 ? d.opens_at * 1000 : d.opens_at)
      : Date.parse(d.opens_at);
    stopCountdown();
    // The opening in the browser's time zone; arrival order does not matter (a draw).
    const opens = $("opens");
    if (opens) {
      const when = new Intl.DateTimeFormat(cfg.lang, { dateStyle: "full", timeStyle: "short" }).format(at);
      opens.textContent = t("scheduled_at", { when }) + " " + t("scheduled_order");
      opens.hidden = false;
    }
    const tick = () => {
      const left = Math.max(0, Math.round((at - Date.now()) / 1000));
      if (left === 0) {
        stopCountdown();
        return setState({ phase: "scheduled", message: t("scheduled_draw") });
      }
      const h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
      const pad = (x) => String(x).padStart(2, "0");
      const time = (h ? h + ":" + pad(m) : m) + ":" + pad(s);
      setState({ phase: "scheduled", message: t("scheduled", { time }) });
    };
    tick();
    countdown = setInterval(tick, 1000);
  }
  // The draw this place joined was voided (Redis lost the queue before it ran): say so, and
  // whether a new draw is held. The stream then ends with a short retry: and resumes by itself.
  function drawVoid(d) {
    const text = t(d.commitment ? "draw_void_redrawn" : "draw_void_line");
    showNotice(text);
    if (channel) channel.postMessage({ type: "notice", message: text });
  }
  function stopCountdown() { if (countdown) { clearInterval(countdown); countdown = null; } }

  function again() {
    clearTimeout(reopen);
    reopen = setTimeout(() => open(), cfg.retry_ms * (0.5 + Math.random()));
  }

  function admitted(d) {
    setConn("connected");
    forget(); // a reload must not replay the entry (a shared computer's next user)
    const embedded = window.parent !== window;
    if (embedded && cfg.embed_origin) {
      // Only the configured origin receives the token (targetOrigin pinned).
      window.parent.postMessage(
        { type: "usher:admitted", queue: Q, token: d.token, expires_at: d.expires_at },
        cfg.embed_origin,
      );
      return setState({ phase: "admitted", message: t("admitted_embedded") });
    }
    if (cfg.booking_url) {
      setState({ phase: "admitted", message: t("admitted") });
      keepEntry({ token: d.token, expires_at: d.expires_at, sent: false });
      return book();
    }
    const time = new Date(d.expires_at).toLocaleTimeString(cfg.lang);
    setState({ phase: "admitted", message: t("admitted_here", { time }) });
  }

  // A POST form, so the token never sits in a URL (Referer, history, logs); in a bind queue
  // with a proof over the token and the URL (`ath`, `htu`) for the token's `cnf.jkt`.
  async function book() {
    const e = entry();
    if (!e) return;
    const fields = [["token", e.token], ["queue", Q], ["expires_at", e.expires_at]];
    if (cfg.bind) {
      const ath = b64url(await crypto.subtle.digest("SHA-256", utf8(e.token)));
      fields.push(["proof", await proof({ htm: "POST", htu: cfg.booking_url, ath })]);
    }
    const f = document.createElement("form");
    f.method = "post";
    f.action = cfg.booking_url;
    for (const [k, v] of fields) {
      const i = document.createElement("input");
      i.type = "hidden"; i.name = k; i.value = v;
      f.append(i);
    }
    document.body.append(f);
    keepEntry({ ...e, sent: true });
    f.submit();
  }

  // An entry kept in this tab: sent if it was not, offered again (never sent by itself) if it
  // was, dropped once expired. Such a tab mirrors no other tab.
  let holdsEntry = false;
  function resumeEntry() {
    const e = entry();
    if (!e || !cfg.booking_url) return false;
    if (Date.parse(e.expires_at) <= Date.now()) { dropEntry(); return false; }
    holdsEntry = true;
    if (!e.sent) { setState({ phase: "admitted", message: t("admitted") }); book(); return true; }
    setState({ phase: "admitted", message: t("admitted_sent") });
    button("primary", t("admitted_continue"), () => book());
    return true;
  }

  // `message`: the operator's text of an ended sale.
  function closed(reason, message) {
    stopCountdown();
    setConn("connected");
    if (reason !== "resumed_elsewhere") forget();
    clearTimeout(reopen);
    if ($("opens")) $("opens").hidden = true;
    showStatus({ state: "open" });
    setState({ phase: "closed", reason, message: message || t("closed_" + reason) });
    if (reason === "resumed_elsewhere") button("primary", t("continue_here"), () => open());
    else if (["left", "place_lost", "session_ended", "wrong_key"].includes(reason)) {
      button("primary", t("join_again"), () => { forget(); open(); });
    }
  }

  // A non-200 answer: EventSource gives up. Ask the status route what happened.
  async function permanentError() {
    const { ticket } = saved();
    let reason = "queue_closed";
    if (ticket) {
      try {
        const params = new URLSearchParams({ ticket });
        if (cfg.bind) params.set("proof", await routeProof(cfg.status));
        const r = await fetch(cfg.status + "?" + params, { cache: "no-store" });
        const body = await r.json().catch(() => ({}));
        if (r.status === 410) reason = "place_lost";
        else if (r.status === 400) { forget(); return open(); } // a ticket this queue cannot use
        else if (r.status === 403 && /wrong_key/.test(body.error || "")) reason = "wrong_key";
        else if (r.status === 403) return again();
        else if (r.status === 429) return again(); // this address polls too fast: the stream is not metered
        else if (r.ok && body.reason) reason = body.reason;
        else if (r.ok) return open();
        else if (/sold_out/.test(body.error || "")) reason = "sold_out";
      } catch { return setConn("reconnecting"); }
    }
    closed(reason);
  }

  // ---- leave ----
  function askLeave() {
    const dlg = $("confirm");
    $("confirm-text").textContent = t("leave_confirm");
    button("confirm-no", t("leave_no"), () => dlg.close());
    button("confirm-yes", t("leave_yes"), async () => {
      dlg.close();
      const { ticket } = saved();
      try {
        const path = cfg.tickets + encodeURIComponent(ticket);
        const proven = cfg.bind ? "?proof=" + encodeURIComponent(await proof({ htm: "DELETE", htu: path })) : "";
        const r = await fetch(path + proven, { method: "DELETE" });
        if (!r.ok && r.status !== 410) throw new Error(String(r.status));
        if (es) es.close();
        closed("left");
      } catch {
        showNotice(t("leave_failed"));
      }
    });
    dlg.showModal();
    $("confirm-no").focus();
  }

  // ---- tabs ----
  const channel = "BroadcastChannel" in window ? new BroadcastChannel(STORE) : null;
  const stopWaiting = new AbortController();
  if (channel) {
    channel.onmessage = ({ data }) => {
      if (holdsEntry) return;
      if (leading) {
        if (data.type === "hello") channel.postMessage({ type: "state", state });
        return;
      }
      if (data.type === "notice") showNotice(data.message);
      if (data.type === "status") showStatus(data.status);
      if (data.type !== "state") return;
      const st = data.state;
      if (st.phase === "admitted") st.message = t("admitted_other_tab");
      state = st;
      setConn("mirror");
      draw();
      // The holder ended for good: do not take over (the ticket is spent or forgotten).
      if (st.phase === "admitted" || (st.phase === "closed" && st.reason !== "resumed_elsewhere")) {
        stopWaiting.abort();
      }
    };
  }

  function lead() {
    leading = true;
    open();
    return new Promise(() => {}); // hold the lock while this tab lives
  }

  function start() {
    $("heading").textContent = cfg.title;
    if (cfg.logo_url) { $("logo").src = cfg.logo_url; $("logo").hidden = false; }
    $("notices-label").textContent = t("notices");
    $("pos-label").textContent = t("position_label");
    setConn("connecting");
    try { localStorage.setItem(STORE + ":probe", "1"); localStorage.removeItem(STORE + ":probe"); } catch {
      showNotice(t("no_storage"));
    }
    if (cfg.closed) return closed(cfg.closed, cfg.ended);
    if (cfg.maintenance) showStatus({ state: "maintenance", message: cfg.maintenance });
    if (resumeEntry()) return;
    if (navigator.locks) {
      navigator.locks
        .request("usher-stream:" + Q, { signal: stopWaiting.signal }, lead)
        .catch(() => { /* aborted: the holder ended for good */ });
      if (channel) channel.postMessage({ type: "hello" });
    } else {
      lead();
    }
  }

  draw();
  start();
})();
