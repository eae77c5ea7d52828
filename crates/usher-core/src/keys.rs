//! The Redis key schema. Nothing outside `usher-core` builds key names.
//!
//! This is the one place the schema is documented; numbers in it (ids, times, indexes) are
//! decimal text.
//!
//! Per queue (all under the hash tag `{q:<id>}`, so every per-queue script runs in one slot):
//!
//! | key | type | content |
//! |---|---|---|
//! | `usher:{q:<id>}:meta` | hash | config (`open`, `paused`, `admit_per_second`, `session_ttl_seconds`, `sliding_session`, `max_session_seconds`, `grace_seconds`), `close_reason` (wire name, while closed), `epoch` (set once when the queue is configured: creation ms × 10; a new one means Redis lost the queue), counters (`admitted_total`, `dropped_total`, `fence`), the token bucket (`bucket`, `bucket_ms`, `bucket_rate`, `bucket_burst`: see below), measured `rate` (a `scan` field, written by versions before `parked`, is deleted by the next tick); waiting-room page settings (`page_booking_url`, `page_embed_origin`, `page_title`, `page_logo_url`; absent when unset); the operator's texts `maintenance` (while in maintenance) and `ended` (an ended sale), absent when unset; no-shows: `arrival_seconds` (absent: off), `make_up_no_shows` (`1`/`0`), the window counts `arrivals_n` and `no_shows_n`, and `no_shows_total` |
//! | `usher:{q:<id>}:seq` | string | last place id handed out (`INCRBY`, one per place); starts at the queue's `epoch`, never reset; raised by `restore.lua` above the places gateways put back |
//! | `usher:{q:<id>}:waiting` | zset | member = 6 bytes (place low 32 bits, gateway index 16 bits), score = place id |
//! | `usher:{q:<id>}:away` | zset | place id → end of its grace period (ms): browsers whose connection dropped |
//! | `usher:{q:<id>}:parked` | zset | the away places, out of `waiting`: member and score as there (so a resume puts a place back at its exact spot), each with its `away` entry; the line is `waiting` and `parked` together (positions and `waiting` counts include both), and the tick reads only `waiting`, so its work never grows with away places. A place in `waiting` with an `away` entry (written before `parked` existed, or put in line by a scheduled sale's draw) is moved here when it reaches the head |
//! | `usher:{q:<id>}:lane:<slot>:waiting`, `…:lane:<slot>:parked` | zset | lanes (meta `lanes`; crate::lanes): the places of the lane in slot 1..=7, as `waiting` and `parked` are for the default lane (which is always `waiting`/`parked` themselves, slot 0) |
//! | `usher:{q:<id>}:lane_of` | hash | lanes: place id → its lane's slot (1..=7), for each place in line outside the default lane; deleted with the place's line entry (admitted, dropped, left, closed) |
//! | `usher:{q:<id>}:lease` | string | `<dispatcher replica>\|<fencing token>`, with a TTL: who drives this queue |
//! | `usher:{q:<id>}:active` | zset | member = place id of an admitted place, score = session expiry (ms) |
//! | `usher:{q:<id>}:unarrived` | zset | no-shows (meta `arrival_seconds` set): place id of an admitted place the booking service has not checked yet → its arrival deadline (ms); the first session check, touch or consume removes it (the session arrived), the tick ends the session of one whose deadline passed (a no-show: its slot frees) |
//! | `usher:{q:<id>}:arrivals` | list | the last 200 arrival outcomes, oldest first: `1` arrived, `0` no-show; meta `arrivals_n` and `no_shows_n` count its entries and its `0`s (the no-show share, `lua/prelude.lua` `record_arrival`) |
//! | `usher:{q:<id>}:ended` | zset | place id of an admitted place whose session ended (released or expired) → when to forget it (ms): the end + `max_session_seconds`, so past its token's cap |
//! | `usher:{q:<id>}:tokens` | hash | place id → `<admitted_at ms>\|<expires ms>\|<token>`, written once the token is minted (an `active` place without a record is being minted) |
//! | `usher:{q:<id>}:outbox` | list | admissions not yet delivered to gateways: one entry per tick call (≤ 1,000 admissions), `<admitted_at ms>\|<expires ms>\|<place>:<gateway index>,…`, then `\|<token exp ms>` for a sliding session (without it the token expires with the session) |
//! | `usher:{q:<id>}:gws` | zset | gateway index → expiry (ms): gateways holding browsers of this queue |
//! | `usher:{q:<id>}:spent` | zset | proof of work (meta `challenge` = `pow`, `pow_difficulty`): the id of each puzzle whose solution took a place → until when to remember it (ms: the puzzle's expiry + 60 s, so gateways whose clocks differ by up to a minute still refuse it); `join.lua` adds with `ZADD NX` (one solution, one place) and first trims what is past (`ZREMRANGEBYSCORE`), so it holds the solutions of the last puzzle lifetime only |
//! | `usher:{q:<id>}:bound` | hash | browser binding (meta `bind` = `browser_key`): place id → the RFC 7638 thumbprint of the browser key it joined with (43 base64url characters; about 100 bytes per place with the field and the hash's overhead: 9.8 MB for 100,000 places, Redis 7.0), written by `join.lua` with the place; a scheduled sale's draw moves it to the place's new id in the same call (`place_drawn`, prelude.lua); read by the gateway at each resume, status poll and leave (`place_key.lua`, which follows `drawn` from a pre-queue ticket's id) and by the dispatcher when it mints (`cnf.jkt`); an entry is deleted once its place is over for good (not in `pre`, `waiting`, `parked` or `active`: left, dropped, closed, its session ended) by `prune_bound.lua`, which the replica driving the queue calls once a second over a slice of 500 fields (`HSCAN`, its cursor in meta `bound_cursor`) |
//! | `usher:{q:<id>}:proof:<key>:<jti>` | string | browser binding: a spent proof of possession's `jti` (1..=64 base64url characters) by the key whose thumbprint starts with `<key>` (16 characters), `SET NX PX` for 130 s (past it the proof's `iat` is too old): one proof, one request |
//! | `usher:{q:<id>}:join:<code>` | string | invitations (meta `invitations`, `invitation_keys`): a one-use join code the gateway issued for a checked invitation, `<account id>\n<lane or empty>`, `SET PX` 60 s; the join takes it with `GETDEL` (one use, whichever gateway) |
//! | `usher:{q:<id>}:account:<hash>` | string | invitations: the place id an invited account holds (a pre-queue place's pre-queue id), `<hash>` = the first 32 hex characters of SHA-256 of the account id; written after the account's join (`SET … GET`: of two racing joins the later keeps its place and the earlier is removed), refreshed by each takeover, `EX` 24 h; a record naming a place that is over is ignored (the account joins anew) |
//! | `usher:{q:<id>}:account:<hash>:lock` | string | invitations: held (`SET NX PX` 5 s) by the one join of the account that looks at its place and records the place it takes; another join of the account waits for it, so two devices joining at once end with one place; deleted when that join is set up |
//! | `usher:{q:<id>}:door` | list | the open door (meta `on_outage` = `open`, `door_after_seconds`): the periods gateways held their door open, newest first, each a [`crate::door::DoorPeriod`] as JSON, at most [`crate::door::DOOR_PERIODS_KEPT`] (`lua/door.lua`); meta `door_admitted_total` counts the browsers let through |
//! | `usher:{q:<id>}:passed` | list | admissions made by `join.lua` itself (passthrough), not yet delivered: entries as in `outbox`; drained by the lease holder's passthrough courier, apart from the tick's outbox so the two never trim each other's entries |
//! | `usher:{q:<id>}:record` | string | the fairness report's record (meta `record` = `1`; `lua/record.lua`, [`crate::record`]): one fixed-width entry of [`crate::record::RECORD_WIDTH`] bytes per place (join, leave and why, admission and its ordinal, the ETA shown at join, lane, hashed client network, proof of work, session outcome), at offset (place − meta `record_seq0` − 1) × width; times in ms since meta `record_ms0`; meta `record_admitted` counts admission ordinals, `record_overflow` the places past its cap; written with `SETRANGE` by the scripts that move places, read in slices (`GETRANGE`) by the report; given a TTL of meta `record_retention_seconds` when the queue closes or `record` is turned off (`record_expiring` set); the next recorded join then deletes it and starts a new record (one opening each); written only while the key exists, but by the join that starts it |
//!
//! Policy fields of `meta` (issue 13): `max_active` (absent = no cap), `passthrough` (`1`/`0`),
//! `adaptive` (the [`crate::policy::Adaptive`] setting as JSON, absent = off), and the token
//! bucket shared by the tick and passthrough joins: `bucket` (tokens, a float), `bucket_ms`
//! (when it was last refilled), `bucket_rate` (tokens per second, set by every tick: the
//! effective rate) and `bucket_burst` (its size while nobody waits: one tick's worth, at
//! least 1).
//!
//!
//! Lanes (crate::lanes; `lua/lanes.lua`): meta `lanes` = `<name>:<share>:<slot>,…` in the
//! order configured (absent: no lanes; slot 0 is the default lane, the plain `waiting` and
//! `parked`), written by `lua/put_lanes.lua`; meta `lane_credit` = `<slot>:<credit>,…`, each
//! lane's admissions owed (within ±1), kept by the tick so shares hold across ticks.
//!
//! Scheduled sale (docs/policies.md, "Scheduled sale and the draw"; `lua/draw.lua`):
//!
//! | key | type | content |
//! |---|---|---|
//! | `usher:{q:<id>}:meta` | hash | also `opens_at_ms`, `draw` (`pending` from scheduling until the draw ran, then `done`), `draw_seed` (hex; never shown before the draw), `draw_commitment` (hex SHA-256 of the seed), `draw_beacon_round` (a drand round named in advance), `draw_beacon` (its randomness, hex, recorded by the operator; the draw waits for it) |
//! | `usher:{q:<id>}:meta` | hash | also the inventory (`src/inventory.rs`): settings `basket_size`, `sold_out_grace_seconds`, `inventory_stale_after_seconds`; the booking service's last report `inventory_remaining` and `inventory_at_ms` (ms), absent until the first (the queue admits as before); `inventory_consumed`, sessions consumed since the report (`end_session.lua`; the report resets it); `inventory_idle_ms`, since when nothing is left and no session is active (the sold-out grace's start: set by the tick, cleared by a report above 0 or an active session) |
//! | `usher:{q:<id>}:meta` (after a data loss) | hash | also `draw_void` (why the draw published before the loss is void: `redis_data_lost`) and `draw_void_commitment` (its commitment, when a gateway saw it), written by `lua/restore_pre.lua`; `draw` = `void` when no draw is held (the pre-queue went into the line in join order); a new sale clears them |
//! | `usher:{q:<id>}:pre` | zset | the pre-queue: places taken while the draw is pending, as in `waiting` (6-byte member, score = place id); emptied by the draw |
//! | `usher:{q:<id>}:entrants` | hash | pre-queue place id → its entrant hash (32 raw bytes: SHA-256 of its ticket), written by the gateway before the browser gets its ticket; deleted by the draw |
//! | `usher:{q:<id>}:drawn` | hash | pre-queue place id → the place id the draw gave it in the line (the browser keeps its pre-queue ticket; scripts map it) |
//! | `usher:{q:<id>}:draw` | string | the published draw: the entrant hashes in drawn order, 32 raw bytes each (3.2 MB per 100,000 entrants) |
//! | `usher:{q:<id>}:drawing` | string | the draw so far: created empty when the draw begins (`lua/draw_begin.lua`; from then on the sale's time and beacon round are fixed), each step's hashes appended (`lua/draw_step.lua`), renamed to `draw` at the end (`lua/draw.lua`); deleted by a close mid-draw; never shown |
//! | `usher:{q:<id>}:pre_away` | set | pre-queue place ids whose browser went away (`lua/pre_away.lua`, from a gateway's batch of disconnects); a resume removes its id (`lua/resume.lua`, `Store::mark_back`); renamed to `absent` when the draw begins; deleted by the draw's end, a close mid-draw and a new sale. A queue of the previous version has none: every entrant reads as present |
//! | `usher:{q:<id>}:absent` | set | `pre_away` as it stood when the draw began (`lua/draw_begin.lua`): the entrants the draw puts after every present one, fixed for the whole draw so a draw taken up again splits the entrants alike; deleted with `pre_away` |
//! | `usher:{q:<id>}:meta` (draw groups) | hash | also `draw_absent`: how many of the record's last hashes are absent entrants (each step adds its own, `lua/draw_step.lua`; absent = 0, as a record of the previous version reads); kept with the published `draw`, removed with it; `max_entrants` (absent = no cap): a pre-queue join beyond it is refused (`lua/join.lua`, `event: pre_queue_full`) |
//! | `usher:{q:<id>}:meta` (during a draw) | hash | also `draw_began_ms`: when the draw began (the tick admits nobody while it is set; the draw's end stamps the drawn places' grace again if it took long), and `draw_cutoff`: the place counter then (the draw's entrants are the pre-queue places up to it) |
//!
//! **Draw pending** (what passthrough admission must check): meta `draw` = `pending`. While
//! it is, joins go to `pre`, never to `waiting`, and nobody may be admitted ahead of the draw.
//! The draw runs in steps of [`crate::store::DRAW_STEP`] places, each one script call, so no
//! call holds Redis long; between steps `waiting` already holds the places drawn so far, and
//! `draw` stays `pending` until the last step, so nobody is admitted meanwhile.
//!
//! Positions stay "score = place id": the draw does not re-score places, it gives every
//! pre-queue place a *new* place id, `seq + 1 ..= seq + n` in drawn order (`INCRBY seq n`: ids
//! from the queue's epoch on, raised by `restore.lua`, so unique after a data loss), then
//! the pre-queue places without an entrant hash (joined while the draw was computed) FIFO
//! behind them; later joins take ids after those. So the tick, the snapshots and the
//! gateways' positions are unchanged, and `drawn` maps a pre-queue ticket to its place.
//!
//! Memory: `ended` holds the sessions that ended in the last `max_session_seconds` (at most
//! the admissions of that window, about 20 bytes each plus zset overhead); the tick trims at
//! most 2,000 forgotten ones per call, like its other prunes.
//!
//! Global:
//!
//! | key | type | content |
//! |---|---|---|
//! | `usher:queues` | set | every configured queue id (the dispatcher's registry; no `SCAN`) |
//! | `usher:draws` | set | queue ids with a scheduled sale whose draw may be pending: the only queues whose schedule the dispatcher reads before a tick (added when a sale is scheduled, removed once its draw ran) |
//! | `usher:{gw}:live` | zset | gateway process index (1–65535) → heartbeat expiry (ms); dead ones kept a day |
//! | `usher:{gw}:ids` | hash | gateway process index → server id (names its stream) |
//! | `usher:{gw}:next` | string | last gateway index handed out (one per process start) |
//! | `usher:dispatchers` | zset | dispatcher replica id → heartbeat expiry (ms) |
//! | `usher:{gw:<id>}:stream` | stream | messages for one gateway (consumer group `usher`) |
//! | `usher:dev:jwt-key`, `usher:dev:ticket-key` | string | development keys shared when none are configured |
//! | `usher:{gw}:connections` | hash | gateway process index → `<streams>\|<open client connections>`, its last heartbeat's report (read by the admin API; one field per index ever handed out, so at most 65,535) |
//! | `usher:dispatchers:facts:<replica id>` | string | JSON of what a dispatcher replica reports about itself every 2 s for `GET /admin/readiness` (`DispatcherFacts`: open-files limit and need, development signing key, clock offset from Redis' `TIME`); expires after 10 s without a report |
//! | `usher:{gw}:facts` | hash | gateway process index → JSON of what it reports about itself with each heartbeat for `GET /admin/readiness` (`GatewayFacts`: stream and socket caps, open-files limit and need, development ticket key, clock offset from Redis' `TIME`); a gateway of the previous version writes none |
//! | `usher:{be:<name>}:load` | string | a booking backend's last load report, `<load>\|<received at ms>`, kept [`crate::policy::MAX_STALE_AFTER_SECONDS`] (each queue judges freshness by its own `stale_after_seconds`); read by the dispatcher outside any script |
//! | `usher:challenge-secret` | string | the proof-of-work puzzle secret (hex) gateways share when `USHER_CHALLENGE_SECRET` is not set: the first gateway stores one (`SET NX`), every one reads it back, and running gateways write theirs back after a loss |
//! | `usher:dev:admin-token` | string | the development admin token (dispatcher with `USHER_DEV=1` and no `USHER_ADMIN_TOKEN`) |
//! | `usher:audit` | stream | admin changes, newest last, capped with `XADD MAXLEN ~` (`store::AUDIT_MAXLEN`); fields `at_ms`, `who` (token label), `method`, `path`, `status`, `summary` (the body, shortened; never a token) |
//!
//! Pub/sub: `usher:wake` carries a queue id each time a join admitted a place at once
//! (passthrough), so the lease holder mints and delivers it without waiting for a tick.
//! A channel is no key: the join script does not touch it (the gateway publishes after the
//! script answered), and Redis Cluster forwards `PUBLISH` to every node. A lost wake costs
//! one tick: the passthrough courier also drains every held queue once per tick.
//!
//! Redis Cluster. Every per-queue key carries the hash tag `{q:<id>}`, so a queue lives in one
//! slot (on one master) and its scripts run there; queues spread over the masters by their
//! ids. Nothing operates on two queues' keys at once: a gateway refreshing its interest in
//! several queues sends one pipeline per queue. Of the global keys:
//! * the gateway registry (`live`, `ids`, `next`) shares the tag `{gw}`, because its scripts
//!   (register, heartbeat, prune) touch the three keys together;
//! * each gateway stream has its own tag `{gw:<id>}`, so streams spread over the masters; a
//!   dispatcher writing to several sends one pipeline per stream;
//! * `usher:queues`, `usher:dispatchers`, `usher:audit`, `usher:challenge-secret` and `usher:dev:*` are untagged and need
//!   no tag: every command on them names that one key alone (`SADD`/`SMEMBERS`; a `MULTI` of
//!   three commands on `usher:dispatchers`; `XADD`/`XREVRANGE`; `SET NX` then `GET`);
//! * each backend's load report has its own tag `{be:<name>}` and is read and written alone;
//!   the dispatcher passes the rate it implies to the tick as an argument.
//!
//! When one shard loses its data (a master restarted empty), every global key on it is
//! rebuilt by its writers, so none needs a copy elsewhere: `usher:queues` and `usher:draws` by
//! each dispatcher replica from the queues and pending sales it saw listed (their own keys
//! still say they belong), the `{gw}` registry and `usher:dispatchers` by heartbeats, the
//! development keys by the processes holding them, gateway streams by their gateways; only
//! `usher:audit`'s history is lost (the `topologies` test `cluster_shard_loss::`).
//!
//! No script reads a key outside its tag: values from elsewhere (the live gateways, the lease
//! value) arrive as arguments. The scripts name no key themselves
//! (`store::scripts::tests::no_script_names_a_key_of_its_own`), and the cluster suites would
//! see Redis refuse a call that crossed slots (`CROSSSLOT`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use crate::ids::{QueueId, ServerId};

/// Every key of one queue.
#[derive(Debug, Clone)]
pub struct QueueKeys {
    pub meta: String,
    pub seq: String,
    pub waiting: String,
    pub active: String,
    pub tokens: String,
    pub outbox: String,
    pub gws: String,
    pub away: String,
    /// Away places, out of `waiting` (see the table above).
    pub parked: String,
    pub lease: String,
    pub ended: String,
    /// No-shows (see the table above).
    pub unarrived: String,
    pub arrivals: String,
    pub passed: String,
    /// Proof of work: the spent solutions (see the table above).
    pub spent: String,
    /// Browser binding (see the table above).
    pub bound: String,
    /// Lanes (see the table above): `lane_of`, then the waiting and parked zsets of slots
    /// 1..=7, the order every lane-aware script takes them in ([`QueueKeys::lane_keys`]).
    pub lane_of: String,
    pub lanes: Vec<(String, String)>,
    /// Scheduled sale (see the table above).
    pub pre: String,
    pub entrants: String,
    pub drawn: String,
    pub draw: String,
    pub drawing: String,
    /// Pre-queue disconnects, and the absent entrants as the draw fixed them (see the table).
    pub pre_away: String,
    pub absent: String,
    // >>> door
    /// The open door's recorded periods (see the table above).
    pub door: String,
    // <<< door
    // >>> record
    /// The fairness report's record (see the table above).
    pub record: String,
    // <<< record
}

/// The queues whose keys [`QueueKeys::of`] keeps, at most; past it the cache starts over.
const KEYS_CACHED: usize = 4096;

/// [`QueueKeys::of`]'s cache: each queue's keys, made once.
static QUEUE_KEYS: LazyLock<Mutex<HashMap<QueueId, Arc<QueueKeys>>>> =
    LazyLock::new(Mutex::default);

impl QueueKeys {
    /// `q`'s keys, shared: made once per queue and kept (at most [`KEYS_CACHED`] queues), so
    /// a store call costs a lookup instead of formatting some forty names. A gateway's join
    /// made them on every call, a third of its allocations a join (BENCHMARKS.md, "Where the
    /// time goes"). Key names are a pure function of the queue id: a cached set is never
    /// stale.
    pub fn of(q: &QueueId) -> Arc<QueueKeys> {
        let mut cache = QUEUE_KEYS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = cache.get(q) {
            return k.clone();
        }
        // Queue ids a flood of made-up names brings cost a fresh start, never unbounded memory.
        if cache.len() >= KEYS_CACHED {
            cache.clear();
        }
        let k = Arc::new(QueueKeys::new(q));
        cache.insert(q.clone(), k.clone());
        k
    }

    /// `q`'s keys, made now (store calls take [`QueueKeys::of`]'s shared ones).
    pub fn new(q: &QueueId) -> Self {
        let k = |suffix: &str| format!("usher:{{q:{q}}}:{suffix}");
        Self {
            meta: k("meta"),
            seq: k("seq"),
            waiting: k("waiting"),
            active: k("active"),
            tokens: k("tokens"),
            outbox: k("outbox"),
            gws: k("gws"),
            away: k("away"),
            parked: k("parked"),
            lease: k("lease"),
            ended: k("ended"),
            unarrived: k("unarrived"),
            arrivals: k("arrivals"),
            passed: k("passed"),
            spent: k("spent"),
            bound: k("bound"),
            lane_of: k("lane_of"),
            lanes: (1..crate::lanes::MAX_LANES)
                .map(|slot| {
                    (
                        k(&format!("lane:{slot}:waiting")),
                        k(&format!("lane:{slot}:parked")),
                    )
                })
                .collect(),
            pre: k("pre"),
            entrants: k("entrants"),
            drawn: k("drawn"),
            draw: k("draw"),
            drawing: k("drawing"),
            pre_away: k("pre_away"),
            absent: k("absent"),
            // >>> door
            door: k("door"),
            // <<< door
            record: k("record"),
        }
    }
}

impl QueueKeys {
    /// The keys a lane-aware script takes last (`lua/lanes.lua`): `lane_of`, then slot 1's
    /// waiting and parked zsets, slot 2's, … slot 7's (15 keys), then `record` (the fairness
    /// report's record, `lua/record.lua`, which finds it there: every script that moves a
    /// place in line takes the lane keys, so it records with no other change).
    pub fn lane_keys(&self) -> Vec<&String> {
        let mut v = vec![&self.lane_of];
        for (w, p) in &self.lanes {
            v.push(w);
            v.push(p);
        }
        v.push(&self.record);
        v
    }

    /// The waiting and parked zsets of lane slot `slot` (0: the default lane).
    pub fn lane_sets(&self, slot: usize) -> (&String, &String) {
        match slot.checked_sub(1).and_then(|i| self.lanes.get(i)) {
            Some((w, p)) => (w, p),
            None => (&self.waiting, &self.parked),
        }
    }
}

impl QueueKeys {
    /// The key remembering a spent proof of possession's `jti`, made by the browser key whose
    /// thumbprint is `key` (see the table above): ids are spent per key, so one client cannot
    /// spend ids another key's code might pick. The thumbprint's first 16 characters (96
    /// bits) tell keys apart; a pattern may pass `*` for either part.
    pub fn used_proof(&self, key: &str, jti: &str) -> String {
        let prefix = self.meta.strip_suffix("meta").unwrap_or(&self.meta);
        let key = key.get(..USED_PROOF_KEY_CHARS).unwrap_or(key);
        format!("{prefix}proof:{key}:{jti}")
    }
}

// >>> invitations
impl QueueKeys {
    /// A join code an invitation was exchanged for (see the table above): `<code>` is 22
    /// base64url characters the gateway drew.
    pub fn join_code(&self, code: &str) -> String {
        let prefix = self.meta.strip_suffix("meta").unwrap_or(&self.meta);
        format!("{prefix}join:{code}")
    }

    /// An invited account's place record: the account id is hashed (SHA-256, 32 hex
    /// characters kept), so the shop's ids never appear in key names and cannot grow them.
    pub fn account(&self, account: &str) -> String {
        use sha2::{Digest, Sha256};
        let prefix = self.meta.strip_suffix("meta").unwrap_or(&self.meta);
        let hash = hex::encode(Sha256::digest(account.as_bytes()));
        format!("{prefix}account:{}", &hash[..32])
    }

    /// The lock one join of an account holds from its look at the account's place until it
    /// has recorded the place it took ([`QueueKeys::account`] + `:lock`).
    pub fn account_lock(&self, account: &str) -> String {
        format!("{}:lock", self.account(account))
    }
}
// <<< invitations

/// The characters of a thumbprint that name its spent proofs ([`QueueKeys::used_proof`]).
const USED_PROOF_KEY_CHARS: usize = 16;

pub const QUEUES: &str = "usher:queues";
pub const DRAWS: &str = "usher:draws";
pub const GW_LIVE: &str = "usher:{gw}:live";
pub const GW_IDS: &str = "usher:{gw}:ids";
pub const GW_NEXT: &str = "usher:{gw}:next";
/// Each gateway's connection counts ([`crate::store::GatewayConnections`]).
pub const GW_CONNECTIONS: &str = "usher:{gw}:connections";
/// A dispatcher replica's facts for the readiness report
/// ([`crate::store::DispatcherFacts`]), a string that expires unless renewed.
pub fn dispatcher_facts(replica: &str) -> String {
    format!("usher:dispatchers:facts:{replica}")
}
/// Each gateway's facts for the readiness report ([`crate::store::GatewayFacts`]).
pub const GW_FACTS: &str = "usher:{gw}:facts";
pub const DISPATCHERS: &str = "usher:dispatchers";
pub const DEV_JWT_KEY: &str = "usher:dev:jwt-key";
pub const DEV_TICKET_KEY: &str = "usher:dev:ticket-key";
/// The puzzle secret gateways share when `USHER_CHALLENGE_SECRET` is not set.
pub const CHALLENGE_SECRET: &str = "usher:challenge-secret";
/// Pub/sub channel: a queue id per passthrough admission (see the schema above).
pub const WAKE_CHANNEL: &str = "usher:wake";

/// A booking backend's last load report.
pub fn backend_load(name: &crate::policy::BackendName) -> String {
    format!("usher:{{be:{name}}}:load")
}

pub const DEV_ADMIN_TOKEN: &str = "usher:dev:admin-token";
pub const AUDIT: &str = "usher:audit";
/// Consumer group every gateway uses on its own stream.
pub const STREAM_GROUP: &str = "usher";

pub fn gateway_stream(id: &ServerId) -> String {
    format!("usher:{{gw:{id}}}:stream")
}

/// Waiting-set member of place `seq` held by gateway `gw`: 6 bytes, the low 32 bits of `seq`
/// and the gateway index, big-endian. Six bytes fit Redis' smallest string allocation, which
/// keeps a waiting place small (`usher-bench-redis` measures it, a test bounds it); the full
/// `seq` is the member's score. Members only
/// need to be unique among places waiting at the same time.
pub fn member(seq: u64, gw: u16) -> [u8; 6] {
    let s = (seq & 0xffff_ffff) as u32;
    let [a, b, c, d] = s.to_be_bytes();
    let [e, f] = gw.to_be_bytes();
    [a, b, c, d, e, f]
}

/// The gateway index in a waiting-set member (`None` if it is not a 6-byte member).
pub fn member_gateway(member: &[u8]) -> Option<u16> {
    match member {
        [_, _, _, _, e, f] => Some(u16::from_be_bytes([*e, *f])),
        _ => None,
    }
}

/// Redis Cluster hash slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
pub fn hash_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b.iter().position(|&c| c == b'{').and_then(|s| {
        b[s + 1..]
            .iter()
            .position(|&c| c == b'}')
            .filter(|&len| len > 0)
            .map(|len| &b[s + 1..s + 1 + len])
    });
    let data = tagged.unwrap_or(b);
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// The key patterns (`~pattern`) and channels (`&channel`) the dispatcher touches, in Redis
/// ACL syntax: a least-privilege user's keys. The commands each binary sends are listed with
/// them in `usher_testkit::acl`, which docs/managed-redis.md prints and the `redis` test `redis_acl::` runs each
/// binary under. A new key of the dispatcher's belongs here too.
pub const DISPATCHER_ACL_KEYS: &[&str] = &[
    "~usher:{q:*}:*",
    "~usher:queues",
    "~usher:draws",
    "~usher:dispatchers",
    "~usher:dispatchers:facts:*",
    "~usher:{gw}:*",
    "~usher:{gw:*}:stream",
    "~usher:{be:*}:load",
    "~usher:audit",
    "~usher:dev:jwt-key",
    "~usher:dev:admin-token",
    "&usher:wake",
];

/// The key patterns and channels a gateway touches (see [`DISPATCHER_ACL_KEYS`]). It never
/// reads the dispatchers' keys (the development signing key included).
pub const GATEWAY_ACL_KEYS: &[&str] = &[
    "~usher:{q:*}:*",
    "~usher:{gw}:*",
    "~usher:{gw:*}:stream",
    "~usher:dev:ticket-key",
    "~usher:challenge-secret",
    "&usher:wake",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_keys_are_made_once_and_match_fresh_ones() {
        let q = QueueId::new("shared-keys").expect("valid");
        let (a, b) = (QueueKeys::of(&q), QueueKeys::of(&q));
        assert!(Arc::ptr_eq(&a, &b), "made once");
        let fresh = format!("{:?}", QueueKeys::new(&q));
        assert_eq!(format!("{a:?}"), fresh);
        // A flood of queue ids past the cap starts the cache over: bounded, and still right.
        for i in 0..=KEYS_CACHED {
            QueueKeys::of(&QueueId::new(format!("flood-{i}")).expect("valid"));
        }
        assert!(QUEUE_KEYS.lock().map_or(0, |c| c.len()) <= KEYS_CACHED);
        assert_eq!(format!("{:?}", QueueKeys::of(&q)), fresh);
    }

    #[test]
    fn all_queue_keys_share_one_slot() {
        for name in ["a", "concert-2026", "Z_9"] {
            let k = QueueKeys::new(&QueueId::new(name).expect("valid"));
            let slot = hash_slot(&k.meta);
            for key in [
                &k.seq,
                &k.waiting,
                &k.active,
                &k.tokens,
                &k.outbox,
                &k.gws,
                &k.away,
                &k.parked,
                &k.lease,
                &k.ended,
                &k.unarrived,
                &k.arrivals,
                &k.pre,
                &k.entrants,
                &k.drawn,
                &k.draw,
                &k.drawing,
                &k.pre_away,
                &k.absent,
                &k.passed,
                &k.spent,
                &k.bound,
                &k.door,
                &k.used_proof("NzbLsXh8uDCcd-6M", "a-jti_1"),
            ]
            .into_iter()
            .chain(k.lane_keys())
            {
                assert_eq!(hash_slot(key), slot, "{key}");
            }
        }
        for key in [GW_LIVE, GW_IDS, GW_NEXT, GW_CONNECTIONS, GW_FACTS] {
            assert_eq!(hash_slot(key), hash_slot(GW_LIVE));
        }
        // Known value from the Redis Cluster specification.
        assert_eq!(hash_slot("123456789"), 12739);
        assert_eq!(hash_slot("{user1000}.following"), hash_slot("user1000"));
    }

    #[test]
    fn members_are_six_bytes() {
        assert_eq!(member(1, 2), [0, 0, 0, 1, 0, 2]);
        assert_eq!(member(0x1_0000_0005, 0x0102), [0, 0, 0, 5, 1, 2]);
    }
}
