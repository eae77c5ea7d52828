//! What a run costs Redis, as `INFO` tells it: memory in use and commands processed, summed
//! over the nodes that answer. A rehearsal (`usher-rehearse`) samples it through its run.

use redis::Value;

use super::readiness::info_texts;
use super::{protocol, Result, Store};

/// Memory and command counters of the Redis servers behind a store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedisUsage {
    /// `used_memory` of `INFO memory`, bytes.
    pub used_memory: u64,
    /// `total_commands_processed` of `INFO stats`, since the server started.
    pub commands: u64,
}

impl RedisUsage {
    /// From one node's `INFO` text; `None` when a field is missing.
    pub fn parse(info: &str) -> Option<Self> {
        let field = |name: &str| {
            info.lines()
                .filter_map(|l| l.trim().split_once(':'))
                .find(|(k, _)| *k == name)
                .and_then(|(_, v)| v.parse::<u64>().ok())
        };
        Some(Self {
            used_memory: field("used_memory")?,
            commands: field("total_commands_processed")?,
        })
    }
}

impl Store {
    /// Memory in use and commands processed, summed over every node that answers `INFO`.
    pub async fn redis_usage(&self) -> Result<RedisUsage> {
        let v: Value = redis::cmd("INFO").query_async(&mut self.c()).await?;
        let mut texts = Vec::new();
        info_texts(v, &mut texts);
        let nodes = texts
            .iter()
            .map(|t| RedisUsage::parse(t))
            .collect::<Option<Vec<_>>>()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| protocol("INFO without used_memory or total_commands_processed"))?;
        Ok(nodes.iter().fold(RedisUsage::default(), |a, n| RedisUsage {
            used_memory: a.used_memory + n.used_memory,
            commands: a.commands + n.commands,
        }))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn info_fields_are_read() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n# Stats\r\ntotal_commands_processed:42\r\n";
        assert_eq!(
            super::RedisUsage::parse(info),
            Some(super::RedisUsage {
                used_memory: 1_048_576,
                commands: 42
            })
        );
        assert_eq!(super::RedisUsage::parse("used_memory:1\r\n"), None);
    }
}
