//! Admissions are never queued behind a tick's position fan-out: in every gateway's stream a
//! tick's admissions come before the tick's line snapshot (the gateway applies a batch
//! admissions first as well: `usher_gateway`'s `admissions_first` unit tests).
//!
//! The test plays the gateway (a registered index and its stream, no gateway process) so it
//! reads exactly what a real dispatcher wrote, in the order written.

use std::time::Duration;

use usher_core::ids::QueueId;
use usher_core::messages::StreamMessage;
use usher_core::store::{QueueConfig, Store};
use usher_core::time::now_ms;
use usher_testkit::wait::eventually_within;
use usher_testkit::{stack, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticks_admissions_precede_its_state_in_the_gateway_stream() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("first")?;
    // 100 ms ticks at 100/s: ten admissions a tick, so the line moves every tick.
    store
        .put_queue(
            &q,
            &QueueConfig {
                admit_per_second: 100.0,
                ..Default::default()
            },
        )
        .await?;
    let (gw, index) = usher_testkit::line::played_gateway(&store, "gw-first").await?;
    store.join_many(&q, index, now_ms(), 60).await?;
    let dispatcher = stack::dispatcher(&redis.url(), 100).await?;

    // Read the stream as the gateway would, until three ticks with admissions were seen.
    let mut log: Vec<StreamMessage> = Vec::new();
    eventually_within(
        "three ticks' admissions and states",
        Duration::from_secs(30),
        async || {
            let mut read = Vec::new();
            usher_testkit::line::read_played(&store, &gw, &mut read).await?;
            log.extend(read.into_iter().map(|(_, m)| m));
            let ticks = states_after_admissions(&log);
            anyhow::ensure!(ticks >= 3, "{ticks} ticks with admissions so far");
            Ok(())
        },
    )
    .await?;
    dispatcher.stop().await?;

    // Every admission of a tick (admitted at the tick's time) comes before that tick's state.
    let mut checked = 0;
    for (i, m) in log.iter().enumerate() {
        let StreamMessage::State(s) = m else { continue };
        let late: Vec<usize> = log[i + 1..]
            .iter()
            .enumerate()
            .filter(|(_, m)| admitted_at(m) == Some(s.at_ms))
            .map(|(j, _)| i + 1 + j)
            .collect();
        assert!(
            late.is_empty(),
            "admissions of the tick at {} written after its state (entry {i}): entries {late:?}",
            s.at_ms
        );
        checked += usize::from(log[..i].iter().any(|m| admitted_at(m) == Some(s.at_ms)));
    }
    assert!(checked >= 3, "{checked} ticks checked");
    Ok(())
}

/// When the places of an admission message were admitted (`None`: not an admission).
fn admitted_at(m: &StreamMessage) -> Option<u64> {
    match m {
        StreamMessage::Admitted { items, .. } => items.first().map(|a| a.admitted_at_ms),
        StreamMessage::AdmittedStaged { admitted_at_ms, .. } => Some(*admitted_at_ms),
        _ => None,
    }
}

/// States whose tick's admissions were read before them.
fn states_after_admissions(log: &[StreamMessage]) -> usize {
    log.iter()
        .enumerate()
        .filter(|(i, m)| {
            matches!(m, StreamMessage::State(s)
                if log[..*i].iter().any(|a| admitted_at(a) == Some(s.at_ms)))
        })
        .count()
}
