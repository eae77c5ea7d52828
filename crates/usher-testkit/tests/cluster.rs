//! usher on a real Redis Cluster (3 masters + 3 replicas of `redis-server`, created with
//! `redis-cli --cluster create`): the whole flow with queues spread over the masters.

mod common;

use std::collections::BTreeSet;

use common::join_and_admit;
use usher_core::ids::QueueId;
use usher_core::keys::QueueKeys;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_spread_over_the_masters_and_each_admits() -> anyhow::Result<()> {
    let stack = Stack::<RedisCluster>::launch(StackOptions::default()).await?;
    // Queues whose keys land on every master (their hash tags pick the slot).
    let names = ["a", "b", "c", "d", "e", "f"];
    let mut masters = BTreeSet::new();
    for name in names {
        let meta = QueueKeys::new(&QueueId::new(name)?).meta;
        masters.insert(stack.redis.master_port_of(&meta)?);
    }
    assert_eq!(masters.len(), 3, "six queues cover the three masters");
    for name in names {
        join_and_admit(
            &stack.http,
            &stack.dispatcher.url(),
            &stack.gateway_url(0),
            name,
        )
        .await?;
    }
    let listed = stack.queue("a").await?;
    assert_eq!(listed["admitted_total"], 1, "{listed}");
    Ok(())
}
