//! `GET /admin/readiness?crowd=N`: is this deployment ready for a sale of `N` people? Each
//! check passes, warns or fails, and says the fix in one sentence when it does not pass.
//!
//! Everything comes from what a managed Redis answers (`INFO`, `TIME`: such services refuse
//! `CONFIG`), the registries in Redis (dispatcher replicas, gateways and the facts each
//! gateway reports with its heartbeat) and this dispatcher's own settings. The store reads
//! are usher-core's (`store/readiness.rs`); the rules are here.

use std::collections::HashMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use usher_core::store::{DispatcherFacts, GatewayFacts, RedisFacts, MEMORY_PER_PLACE_BYTES};
use usher_core::time::now_ms;
use usher_http::ApiError;

use crate::state::{redis_down, AppState};

/// A clock further than this from Redis' warns; one further than [`CLOCK_FAIL_MS`] fails.
/// Time rules (grace periods, sessions, `opens_at`) run on each server's own clock.
pub(crate) const CLOCK_WARN_MS: u64 = 250;
pub(crate) const CLOCK_FAIL_MS: u64 = 1000;

/// How a check came out. Ordered: the report's outcome is its worst check's.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Warn,
    Fail,
}

/// What a check looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckName {
    /// Redis persists with AOF (`aof_enabled`).
    Persistence,
    /// Redis never evicts keys (`maxmemory-policy noeviction`).
    Eviction,
    /// Redis has the memory for the crowd.
    Memory,
    /// No server signs with a development key.
    SigningKeys,
    /// Two or more dispatcher replicas are live.
    DispatcherReplicas,
    /// The live gateways' stream caps hold the crowd.
    GatewayCapacity,
    /// Each server may open the files its socket cap needs.
    OpenFiles,
    /// The servers' clocks agree with Redis'.
    Clocks,
}

/// One check's result.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Check {
    pub check: CheckName,
    pub outcome: Outcome,
    /// What was found.
    pub detail: String,
    /// The fix, in one sentence (`null` when the check passes).
    pub fix: Option<String>,
}

impl Check {
    fn pass(check: CheckName, detail: String) -> Self {
        Self {
            check,
            outcome: Outcome::Pass,
            detail,
            fix: None,
        }
    }
    fn not(check: CheckName, outcome: Outcome, detail: String, fix: &str) -> Self {
        Self {
            check,
            outcome,
            detail,
            fix: Some(fix.to_owned()),
        }
    }
}

/// `GET /admin/readiness` answer.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Readiness {
    /// The worst check's outcome.
    pub outcome: Outcome,
    /// The crowd the checks were made for (`null`: none given; the crowd checks warn).
    pub crowd: Option<u64>,
    pub checks: Vec<Check>,
}

/// `GET /admin/readiness` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReadinessQuery {
    /// The most people expected at once (waiting, in the pre-queue or connected): the memory
    /// and gateway checks are made for it.
    pub crowd: Option<u64>,
}

/// What the checks need from Redis and the registries, read once.
struct Facts {
    redis: Vec<RedisFacts>,
    /// This dispatcher's clock minus Redis', and half the round trip it was measured in.
    clock_offset_ms: i64,
    clock_uncertainty_ms: u64,
    dispatchers: Vec<String>,
    /// The other live replicas' reports (this one is measured here).
    replicas: Vec<(String, DispatcherFacts)>,
    dev_key_stored: bool,
    /// Live gateways: index → (server id, its facts if it reports them).
    gateways: Vec<(u16, String, Option<GatewayFacts>)>,
}

#[utoipa::path(
    get,
    path = "/admin/readiness",
    tag = "admin",
    security(("admin_token" = [])),
    params(ReadinessQuery),
    responses(
        (status = 200, description = "Each check's outcome (`pass`, `warn`, `fail`), what it found and the fix; `outcome` is the worst.", body = Readiness),
        (status = 400, description = "A malformed query (`crowd` not a whole number, an unknown parameter).", body = usher_http::openapi::ErrorBody),
        super::errors::AdminReadErrors,
    ),
)]
pub(crate) async fn readiness(
    State(st): State<AppState>,
    query: Result<Query<ReadinessQuery>, QueryRejection>,
) -> Result<Json<Readiness>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let facts = read(&st).await?;
    let crowd = query.crowd;
    let checks = vec![
        persistence(&facts.redis),
        eviction(&facts.redis),
        memory(&facts.redis, crowd),
        signing_keys(&st, &facts),
        replicas(&facts.dispatchers),
        gateway_capacity(&facts.gateways, crowd),
        open_files(&st, &facts),
        clocks(&facts),
    ];
    let outcome = checks
        .iter()
        .map(|c| c.outcome)
        .max()
        .unwrap_or(Outcome::Pass);
    Ok(Json(Readiness {
        outcome,
        crowd,
        checks,
    }))
}

async fn read(st: &AppState) -> Result<Facts, ApiError> {
    let store = &st.store;
    let redis = store.redis_facts().await.map_err(redis_down)?;
    let before = now_ms();
    let redis_ms = store.redis_time_ms().await.map_err(redis_down)?;
    let after = now_ms();
    let mid = before + after.saturating_sub(before) / 2;
    let now = now_ms();
    let reports = store.gateway_facts().await.map_err(redis_down)?;
    let gateways = store
        .gateways(now)
        .await
        .map_err(redis_down)?
        .into_iter()
        .filter(|g| g.is_alive(now))
        .map(|g| {
            (
                g.index,
                g.server_id.to_string(),
                reports.get(&g.index).copied(),
            )
        })
        .collect();
    let dispatchers = store.live_dispatchers(now).await.map_err(redis_down)?;
    let others: Vec<String> = dispatchers
        .iter()
        .filter(|id| **id != st.replica)
        .cloned()
        .collect();
    let mut replicas: Vec<(String, DispatcherFacts)> = store
        .dispatcher_facts(&others)
        .await
        .map_err(redis_down)?
        .into_iter()
        .collect();
    replicas.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Facts {
        redis,
        clock_offset_ms: signed(mid) - signed(redis_ms),
        clock_uncertainty_ms: after.saturating_sub(before) / 2,
        dispatchers,
        replicas,
        dev_key_stored: store.dev_signing_key_stored().await.map_err(redis_down)?,
        gateways,
    })
}

fn signed(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn persistence(redis: &[RedisFacts]) -> Check {
    let off = redis.iter().filter(|r| !r.aof_enabled).count();
    if off == 0 {
        return Check::pass(CheckName::Persistence, "AOF is on".into());
    }
    Check::not(
        CheckName::Persistence,
        Outcome::Fail,
        format!("AOF is off on {off} of {} Redis servers", redis.len()),
        "Turn on AOF (appendonly yes, or the managed service's persistence setting) so a Redis restart keeps the line and the sessions.",
    )
}

fn eviction(redis: &[RedisFacts]) -> Check {
    let evicting: Vec<&str> = redis
        .iter()
        .map(|r| r.maxmemory_policy.as_str())
        .filter(|p| *p != "noeviction")
        .collect();
    if evicting.is_empty() {
        return Check::pass(CheckName::Eviction, "maxmemory-policy is noeviction".into());
    }
    Check::not(
        CheckName::Eviction,
        Outcome::Fail,
        format!("maxmemory-policy is {}", evicting.join(", ")),
        "Set maxmemory-policy to noeviction: any other policy silently deletes places and sessions when memory runs short.",
    )
}

fn memory(redis: &[RedisFacts], crowd: Option<u64>) -> Check {
    let Some(crowd) = crowd else {
        return Check::not(
            CheckName::Memory,
            Outcome::Warn,
            "no crowd given".into(),
            "Give the crowd you expect (?crowd=N) to check Redis' memory for it.",
        );
    };
    let need = crowd.saturating_mul(MEMORY_PER_PLACE_BYTES);
    // A queue's line lives on one server: each must hold the whole crowd.
    let mut worst: Option<(u64, u64, bool)> = None;
    for r in redis {
        let limited = r.maxmemory > 0;
        let limit = if limited {
            r.maxmemory
        } else {
            r.total_system_memory
        };
        let free = limit.saturating_sub(r.used_memory);
        if worst.is_none_or(|(f, _, _)| free < f) {
            worst = Some((free, limit, limited));
        }
    }
    let Some((free, limit, limited)) = worst.filter(|(_, limit, _)| *limit > 0) else {
        return Check::not(
            CheckName::Memory,
            Outcome::Warn,
            "Redis reports neither maxmemory nor the system's memory".into(),
            "Set maxmemory on Redis so its limit is known (and writes are refused, not the process killed, when it is reached).",
        );
    };
    let detail = format!(
        "{crowd} people need about {need} bytes ({MEMORY_PER_PLACE_BYTES} each); {free} of {limit} bytes are free{}",
        if limited { "" } else { " (no maxmemory: the system's memory)" }
    );
    if free < need {
        return Check::not(
            CheckName::Memory,
            Outcome::Fail,
            detail,
            "Give Redis more memory (raise maxmemory, or a larger instance) before the sale.",
        );
    }
    if !limited {
        return Check::not(
            CheckName::Memory,
            Outcome::Warn,
            detail,
            "Set maxmemory below the machine's memory so Redis refuses writes (usher answers 507) instead of being killed.",
        );
    }
    Check::pass(CheckName::Memory, detail)
}

fn signing_keys(st: &AppState, f: &Facts) -> Check {
    let mut found = Vec::new();
    let dev_replicas: Vec<&str> = f
        .replicas
        .iter()
        .filter(|(_, r)| r.dev_signing_key)
        .map(|(id, _)| id.as_str())
        .collect();
    if st.dev_signing_key {
        found.push("this dispatcher signs entry tokens with the development key".to_owned());
    }
    if !dev_replicas.is_empty() {
        found.push(format!(
            "dispatchers sign entry tokens with the development key: {}",
            dev_replicas.join(", ")
        ));
    }
    if !st.dev_signing_key && dev_replicas.is_empty() && f.dev_key_stored {
        found.push("a development entry-token key is stored in Redis (a dispatcher runs, or ran, without a configured key)".to_owned());
    }
    let dev_gateways: Vec<&str> = f
        .gateways
        .iter()
        .filter(|(_, _, facts)| facts.is_some_and(|g| g.dev_ticket_key))
        .map(|(_, id, _)| id.as_str())
        .collect();
    if !dev_gateways.is_empty() {
        found.push(format!(
            "gateways sign tickets with the development key: {}",
            dev_gateways.join(", ")
        ));
    }
    if found.is_empty() {
        return Check::pass(
            CheckName::SigningKeys,
            "entry-token and ticket keys are configured".into(),
        );
    }
    Check::not(
        CheckName::SigningKeys,
        Outcome::Fail,
        found.join("; "),
        "Configure USHER_JWT_KEY_FILE on every dispatcher and USHER_TICKET_KEY on every gateway, restart them, then delete the development key from Redis.",
    )
}

fn replicas(live: &[String]) -> Check {
    let detail = format!("{} live: {}", live.len(), live.join(", "));
    if live.len() >= 2 {
        return Check::pass(CheckName::DispatcherReplicas, detail);
    }
    Check::not(
        CheckName::DispatcherReplicas,
        Outcome::Fail,
        detail,
        "Run a second dispatcher replica (its own USHER_REPLICA_ID) so admission goes on when one stops.",
    )
}

fn gateway_capacity(gateways: &[(u16, String, Option<GatewayFacts>)], crowd: Option<u64>) -> Check {
    let caps: Vec<u64> = gateways
        .iter()
        .filter_map(|(_, _, f)| f.map(|f| f.max_streams))
        .collect();
    let silent = gateways.len() - caps.len();
    let total: u64 = caps.iter().sum();
    let largest = caps.iter().copied().max().unwrap_or(0);
    let mut detail = format!(
        "{} live gateways hold {total} streams at most",
        gateways.len()
    );
    if silent > 0 {
        detail.push_str(&format!(
            "; {silent} report no cap (a version before readiness)"
        ));
    }
    let Some(crowd) = crowd else {
        return Check::not(
            CheckName::GatewayCapacity,
            Outcome::Warn,
            detail,
            "Give the crowd you expect (?crowd=N) to check the gateways' capacity for it.",
        );
    };
    detail.push_str(&format!(" for a crowd of {crowd}"));
    if total < crowd {
        return Check::not(
            CheckName::GatewayCapacity,
            Outcome::Fail,
            detail,
            "Start more gateways (or raise USHER_MAX_CONNECTIONS where memory and open files allow) until their caps hold the crowd.",
        );
    }
    if total - largest < crowd || silent > 0 {
        return Check::not(
            CheckName::GatewayCapacity,
            Outcome::Warn,
            detail,
            "Add a gateway so the crowd still fits when the largest one stops (and upgrade any that report no cap).",
        );
    }
    Check::pass(CheckName::GatewayCapacity, detail)
}

fn open_files(st: &AppState, f: &Facts) -> Check {
    let gateways = &f.gateways;
    let shown = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
    let own = usher_runtime::open_files_limit();
    let own_need = st.max_sockets + crate::facts::OWN_FILES;
    let mut short = Vec::new();
    if own.is_some_and(|n| n < own_need) {
        short.push(format!(
            "this dispatcher: {} of {own_need} needed",
            shown(own)
        ));
    }
    for (id, r) in &f.replicas {
        if r.open_files.is_some_and(|n| n < r.open_files_needed) {
            short.push(format!(
                "dispatcher {id}: {} of {} needed",
                shown(r.open_files),
                r.open_files_needed
            ));
        }
    }
    let mut reported = 0;
    for (_, id, facts) in gateways {
        let Some(f) = facts else { continue };
        reported += 1;
        if f.open_files.is_some_and(|n| n < f.open_files_needed) {
            short.push(format!(
                "gateway {id}: {} of {} needed",
                shown(f.open_files),
                f.open_files_needed
            ));
        }
    }
    let silent = gateways.len() - reported;
    let mut detail = format!(
        "this dispatcher may open {} files; {} other dispatchers and {reported} gateways report theirs",
        shown(own),
        f.replicas.len()
    );
    if silent > 0 {
        detail.push_str(&format!(
            ", {silent} do not (a version before readiness: only this dispatcher's own limit is known for them)"
        ));
    }
    if !short.is_empty() {
        return Check::not(
            CheckName::OpenFiles,
            Outcome::Fail,
            format!("{detail}; too low: {}", short.join("; ")),
            "Raise the open-files limit (LimitNOFILE=, ulimit -n, the container's nofile) above each server's USHER_MAX_SOCKETS plus its reserve, or lower USHER_MAX_SOCKETS.",
        );
    }
    if silent > 0 {
        return Check::not(
            CheckName::OpenFiles,
            Outcome::Warn,
            detail,
            "Upgrade the gateways that report no limit, or check their open-files limit by hand (cat /proc/<pid>/limits).",
        );
    }
    Check::pass(CheckName::OpenFiles, detail)
}

fn clocks(f: &Facts) -> Check {
    // This dispatcher's offset counts beyond the uncertainty of its measure.
    let own = f
        .clock_offset_ms
        .unsigned_abs()
        .saturating_sub(f.clock_uncertainty_ms);
    let mut offsets: Vec<(String, u64)> = vec![("this dispatcher".into(), own)];
    offsets.extend(f.replicas.iter().filter_map(|(id, r)| {
        Some((
            format!("dispatcher {id}"),
            r.clock_offset_ms?.unsigned_abs(),
        ))
    }));
    let reported: HashMap<&str, i64> = f
        .gateways
        .iter()
        .filter_map(|(_, id, g)| Some((id.as_str(), g.and_then(|g| g.clock_offset_ms)?)))
        .collect();
    offsets.extend(
        reported
            .iter()
            .map(|(id, off)| (format!("gateway {id}"), off.unsigned_abs())),
    );
    let worst = offsets.iter().map(|(_, o)| *o).max().unwrap_or(0);
    let far: Vec<String> = offsets
        .iter()
        .filter(|(_, o)| *o > CLOCK_WARN_MS)
        .map(|(who, o)| format!("{who} {o} ms"))
        .collect();
    let detail = format!(
        "{} clocks compared with Redis' TIME (this dispatcher's; {} other dispatchers and {} gateways report theirs); the furthest is {worst} ms off{}",
        offsets.len(),
        f.replicas.len(),
        reported.len(),
        if far.is_empty() {
            String::new()
        } else {
            format!(": {}", far.join(", "))
        }
    );
    let fix = "Run time synchronisation (chrony or NTP) on every server: grace periods, sessions and the opening time run on each server's own clock.";
    if worst > CLOCK_FAIL_MS {
        Check::not(CheckName::Clocks, Outcome::Fail, detail, fix)
    } else if worst > CLOCK_WARN_MS {
        Check::not(CheckName::Clocks, Outcome::Warn, detail, fix)
    } else {
        Check::pass(CheckName::Clocks, detail)
    }
}
