// k6 browser scenario: virtual users open usher's waiting-room page in Chromium and wait
// until they are admitted, as people do. k6 drives the system's Chromium:
//
//   K6_BROWSER_EXECUTABLE_PATH=/usr/bin/chromium K6_BROWSER_ARGS=no-sandbox \
//     k6 run -e BASE_URL=http://127.0.0.1:8080 -e QUEUE=demo loadtest/k6/page.js
//
// Each iteration is one person: a fresh browser context (no stored ticket), GET /q/{QUEUE},
// then it watches the page (`document.body.dataset.state` and `.position`, which the page
// keeps current) until admission: the page either POSTs the token to the queue's booking URL
// (the browser leaves the gateway's origin) or, without a booking URL, shows `admitted`.
//
// Custom metrics:
//   usher_page_time_to_first_position  page load → first position shown (ms)
//   usher_page_position_updates        position changes seen on the page
//   usher_page_time_to_admission       page load → admitted (ms)
//   usher_page_admitted                share of iterations admitted within WAIT
//   usher_page_browser_unavailable     iterations that got no browser page to open (a fault of the
//                                      load machine, which says nothing about the waiting room)
//
// Environment (all optional):
//   BASE_URL   gateway (or load balancer) origin   (http://127.0.0.1:8080)
//   QUEUE      queue id                           (demo)
//   VUS        virtual users (browsers)           (2)
//   ITERATIONS people per virtual user            (1)
//   WAIT       longest wait in the line, seconds  (120)
//   POLL_MS    how often the page is read         (200)

import { browser } from "k6/browser";
import { check } from "k6";
import { Counter, Rate, Trend } from "k6/metrics";

const BASE_URL = (__ENV.BASE_URL || "http://127.0.0.1:8080").replace(/\/+$/, "");
const QUEUE = __ENV.QUEUE || "demo";
const WAIT_MS = parseInt(__ENV.WAIT || "120", 10) * 1000;
const POLL_MS = parseInt(__ENV.POLL_MS || "200", 10);

export const options = {
  scenarios: {
    waiting_room_page: {
      executor: "per-vu-iterations",
      vus: parseInt(__ENV.VUS || "2", 10),
      iterations: parseInt(__ENV.ITERATIONS || "1", 10),
      maxDuration: __ENV.MAX_DURATION || "10m",
      options: { browser: { type: "chromium" } },
    },
  },
  thresholds: {
    usher_page_admitted: ["rate>0.99"],
    checks: ["rate>0.99"],
  },
};

const firstPosition = new Trend("usher_page_time_to_first_position", true);
const positionUpdates = new Counter("usher_page_position_updates");
const toAdmission = new Trend("usher_page_time_to_admission", true);
const admittedRate = new Rate("usher_page_admitted");
const browserUnavailable = new Counter("usher_page_browser_unavailable");

const sleepMs = (ms) => new Promise((r) => setTimeout(r, ms));

export default async function () {
  let context;
  let page;
  try {
    context = await browser.newContext();
    page = await context.newPage();
  } catch (e) {
    // No browser to open the page in. Count it apart: no person joined, so nobody was
    // refused. (A Chromium that failed to start before the iteration makes k6 abort the
    // whole run instead, exit status 108: no metric of this script records it.)
    console.error(`browser unavailable: ${e}`);
    browserUnavailable.add(1);
    if (context) await context.close();
    return;
  }
  const start = Date.now();
  let shown = null;
  let admitted = false;
  let positions = 0;
  try {
    await page.goto(`${BASE_URL}/q/${QUEUE}`);
    while (Date.now() - start < WAIT_MS) {
      let s;
      try {
        // One line, no object literal: k6 sends the function's source to the page.
        const read = () => JSON.stringify([document.body.dataset.state, document.body.dataset.position, location.origin]);
        const [state, position, origin] = JSON.parse(await page.evaluate(read));
        s = { state, position, origin };
      } catch (e) {
        if (__ENV.DEBUG) console.log(`evaluate: ${e}`);
        // A navigation under way (the POST to the booking URL): read again.
        await sleepMs(POLL_MS);
        continue;
      }
      if (s.position && s.position !== shown) {
        if (shown === null) firstPosition.add(Date.now() - start);
        else positionUpdates.add(1);
        shown = s.position;
        positions++;
      }
      // The page POSTs the token to the booking URL: the browser has left the gateway.
      if (s.state === "admitted" || s.origin !== BASE_URL) {
        admitted = true;
        toAdmission.add(Date.now() - start);
        break;
      }
      if (s.state === "closed") break;
      await sleepMs(POLL_MS);
    }
  } finally {
    admittedRate.add(admitted);
    check(null, {
      "a position was shown": () => positions > 0,
      "admitted": () => admitted,
    });
    await page.close();
    await context.close();
  }
}
