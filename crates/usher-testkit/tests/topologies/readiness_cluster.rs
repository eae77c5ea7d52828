//! The readiness report (issue 24, item 7) on a 3-master Redis Cluster: `INFO` answers once
//! per node, and each node is checked.

use serde_json::Value;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_of_a_cluster_is_checked() -> anyhow::Result<()> {
    let stack = Stack::<RedisCluster>::launch(StackOptions::default()).await?;
    let r = stack
        .http
        .get(format!(
            "{}/admin/readiness?crowd=1000",
            stack.dispatcher.url()
        ))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let report: Value = r.json().await?;
    let persistence = report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["check"] == "persistence"))
        .cloned()
        .unwrap_or_default();
    // The cluster's nodes run without AOF (StackOptions' default): each one is named.
    assert_eq!(persistence["outcome"], "fail", "{report}");
    let detail = persistence["detail"].as_str().unwrap_or("");
    assert!(detail.ends_with("of 3 Redis servers"), "{report}");
    Ok(())
}
