//! usher on a real Redis Cluster (3 masters + 3 replicas of `redis-server`, created with
//! `redis-cli --cluster create`): the whole flow with queues spread over the masters.

use std::collections::BTreeSet;

use usher_core::ids::QueueId;
use usher_core::keys::QueueKeys;
use usher_testkit::line::join_and_admit;
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

/// On a cluster, each binary runs as an ACL user with its docs/managed-redis.md list plus
/// `usher_testkit::acl::CLUSTER_EXTRA` (the slot map), set on every node; no node logs a denial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_users_work_on_a_cluster_with_the_slot_map_rule() -> anyhow::Result<()> {
    use usher_testkit::acl::{Component, CLUSTER_EXTRA};
    use usher_testkit::stack;

    const PASSWORD: &str = "cluster-acl-password";
    let cluster = RedisCluster::start(&["--save", "", "--appendonly", "no"])?;
    for node in &cluster.nodes {
        for c in Component::ALL {
            let line = format!(
                "{} {}",
                c.setuser(c.name(), PASSWORD),
                CLUSTER_EXTRA.join(" ")
            );
            let args: Vec<&str> = line.split_whitespace().collect();
            cluster.cli_on(node.port(), &args)?;
        }
        cluster.cli_on(node.port(), &["ACL", "LOG", "RESET"])?;
    }
    let urls = |c: Component| {
        let list: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("redis://{}:{PASSWORD}@127.0.0.1:{}", c.name(), n.port()))
            .collect();
        usher_core::store::RedisArgs::cluster(&list)
    };
    let mut d = usher_testkit::config::dispatcher("", 100);
    d.redis = urls(Component::Dispatcher);
    let dispatcher = stack::dispatcher_with(d).await?;
    let mut g = usher_testkit::config::gateway("");
    g.redis = urls(Component::Gateway);
    let gateway = stack::gateway_with(g).await?;
    let http = usher_testkit::config::admin_client();
    for name in ["a", "b", "c"] {
        join_and_admit(&http, &dispatcher.url(), &gateway.url(), name).await?;
    }
    gateway.stop().await?;
    dispatcher.stop().await?;
    for node in &cluster.nodes {
        let log = cluster.cli_on(node.port(), &["ACL", "LOG"])?;
        assert!(log.trim().is_empty(), "node {} denied: {log}", node.port());
    }
    Ok(())
}
