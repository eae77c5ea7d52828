// k6 user journey through the usher waiting room, against `make run`:
//
//   1. GET {gateway}/api/queues/{QUEUE}/stream   (SSE; the response ends after `admitted`)
//   2. parse the event stream, take the entry token from the `admitted` event
//   3. POST {BOOKING_URL} with `Authorization: Bearer <token>` and {"queue": QUEUE}
//
// k6's plain http client reads the whole body, which is fine here because usher ends the
// stream after `admitted` (or `closed`). If a stream ends early (a bare `retry:` answer
// from a gateway at its connection cap, draining, or without Redis), the script does what
// EventSource does: waits `retry` and asks again with `Last-Event-ID`, on the next gateway.
// A stream that outlives STREAM_TIMEOUT is not final either: k6 keeps the part of the body
// that arrived, so the journey takes the ticket from it and resumes its place with
// `Last-Event-ID` (counted in `usher_resumes`), as EventSource does after a dropped
// connection, instead of joining again at the back.
//
// Environment (all optional):
//   BASE_URLS       gateways, comma-separated     (http://127.0.0.1:8080,http://127.0.0.1:8090)
//   QUEUE           queue id                      (demo)
//   BOOKING_URL     booking endpoint              (http://127.0.0.1:8082/api/bookings)
//   VUS             virtual users                 (10)
//   DURATION        how long new journeys start   (1m)
//   STREAM_TIMEOUT  longest single stream request (300s); a longer wait resumes the place
//   MAX_ATTEMPTS    stream requests per journey   (20)
//
// Example: k6 run -e VUS=5 -e DURATION=20s loadtest/k6/queue.js

import http from "k6/http";
import { check, sleep } from "k6";
import { Counter, Rate, Trend } from "k6/metrics";

const BASE_URLS = (__ENV.BASE_URLS || "http://127.0.0.1:8080,http://127.0.0.1:8090")
  .split(",")
  .map((s) => s.trim().replace(/\/+$/, ""))
  .filter((s) => s.length > 0);
const QUEUE = __ENV.QUEUE || "demo";
const BOOKING_URL = __ENV.BOOKING_URL || "http://127.0.0.1:8082/api/bookings";
const STREAM_TIMEOUT = __ENV.STREAM_TIMEOUT || "300s";
const MAX_ATTEMPTS = parseInt(__ENV.MAX_ATTEMPTS || "20", 10);

export const options = {
  scenarios: {
    waiting_room: {
      executor: "constant-vus",
      vus: parseInt(__ENV.VUS || "10", 10),
      duration: __ENV.DURATION || "1m",
      // A journey that started before the end may wait in the line for a while.
      gracefulStop: __ENV.GRACEFUL_STOP || STREAM_TIMEOUT,
    },
  },
  thresholds: {
    checks: ["rate>0.99"],
    // Stream requests that hit STREAM_TIMEOUT count as failed requests in k6, but the journey
    // resumes them: only the booking requests are held to the failure rate.
    "http_req_failed{name:booking}": ["rate<0.01"],
    usher_admitted: ["rate>0.99"],
  },
};

const admittedRate = new Rate("usher_admitted");
const waitTime = new Trend("usher_wait_ms", true);
const reconnects = new Counter("usher_reconnects");
const resumes = new Counter("usher_resumes");
const streamTimeouts = new Counter("usher_stream_timeouts");
const bookingDuration = new Trend("usher_booking_ms", true);

/** Parses a text/event-stream body into [{event, data, id}] and the last `retry:`. */
function parseSse(body) {
  const events = [];
  let retry = null;
  let event = "";
  let data = [];
  let hasData = false;
  let lastId = "";
  for (const line of (body || "").split(/\r\n|\r|\n/)) {
    if (line === "") {
      if (hasData) {
        events.push({ event: event || "message", data: data.join("\n"), id: lastId });
      }
      event = "";
      data = [];
      hasData = false;
      continue;
    }
    if (line.startsWith(":")) continue; // comment (keepalive)
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") {
      data.push(value);
      hasData = true;
    } else if (field === "id" && value.indexOf("\0") < 0) lastId = value;
    else if (field === "retry" && /^\d+$/.test(value)) retry = parseInt(value, 10);
  }
  return { events, retry };
}

export default function () {
  const start = Date.now();
  let ticket = null;
  let gotWaiting = false;
  let admitted = null;
  let closed = null;
  let status200 = true;
  let retryMs = 3000;
  let gw = (__VU + __ITER) % BASE_URLS.length;
  let lastTimedOut = false;

  for (let attempt = 0; attempt < MAX_ATTEMPTS && !admitted && !closed; attempt++) {
    if (attempt > 0) {
      reconnects.add(1);
      // A timed-out stream was cut by us, not by the gateway: reconnect at once.
      if (!lastTimedOut) sleep(retryMs / 1000);
    }
    const headers = { Accept: "text/event-stream" };
    if (ticket) {
      headers["Last-Event-ID"] = ticket;
      resumes.add(1);
    }
    const url = `${BASE_URLS[gw]}/api/queues/${QUEUE}/stream`;
    gw = (gw + 1) % BASE_URLS.length;
    const res = http.get(url, {
      headers,
      timeout: STREAM_TIMEOUT,
      tags: { name: "stream" },
    });
    // k6's request timeout (error code 1050): the body so far is kept; resume below.
    const timedOut = res.status === 0 && res.error_code === 1050;
    if (timedOut) streamTimeouts.add(1);
    else if (res.status !== 200) {
      // EventSource gives up on any other status; so do we.
      status200 = false;
      break;
    }
    lastTimedOut = timedOut;
    const { events, retry } = parseSse(res.body);
    if (retry !== null) retryMs = retry;
    for (const e of events) {
      if (e.id) ticket = e.id;
      if (e.event === "waiting") gotWaiting = true;
      else if (e.event === "admitted") admitted = JSON.parse(e.data);
      else if (e.event === "closed") closed = JSON.parse(e.data);
    }
  }

  check(null, {
    "stream status 200": () => status200,
    "got waiting": () => gotWaiting,
    "got admitted": () => admitted !== null && typeof admitted.token === "string",
  });
  admittedRate.add(admitted !== null);
  if (!admitted) return;
  waitTime.add(Date.now() - start);

  const booking = http.post(BOOKING_URL, JSON.stringify({ queue: QUEUE }), {
    headers: {
      Authorization: `Bearer ${admitted.token}`,
      "Content-Type": "application/json",
    },
    tags: { name: "booking" },
  });
  bookingDuration.add(booking.timings.duration);
  check(booking, { "booking 201": (r) => r.status === 201 });
}
