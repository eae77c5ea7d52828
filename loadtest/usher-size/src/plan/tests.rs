//! Plans with round made-up costs, so every answer can be checked by hand.

use super::*;
use crate::arrivals::Shape;

fn fig(value: f64) -> Figure {
    Figure {
        value,
        text: fmt_number(value),
        source: format!("test: {value}"),
    }
}

/// Six gateways that took 6,000 joins/s (1,000 each) and held 60,000 streams (10,000 each),
/// 60 MiB idle (10 each), 4 KiB a stream; 100 B a waiting place, 200 B away, 50 B bound.
fn costs() -> Costs {
    Costs {
        machine_vcpus: fig(2.0),
        load_gateways: fig(6.0),
        join_rate: fig(6_000.0),
        held: fig(60_000.0),
        kib_per_connection: fig(4.0),
        idle_mib_all_gateways: fig(60.0),
        waiting_commands_per_s: fig(176.0),
        bytes_per_waiting: fig(100.0),
        bytes_per_away: fig(200.0),
        bytes_per_bound: fig(50.0),
        gateway_us_per_join: fig(100.0),
        redis_us_per_join: fig(50.0),
        redis_us_per_admission: fig(5.0),
        dispatcher_ms_per_burst: fig(10.0),
        burst_places: fig(5_000.0),
        dispatcher_replicas: fig(2.0),
        gateway_failover_ms: fig(769.0),
    }
}

fn inputs(joins: Vec<u64>, rate: f64) -> Inputs {
    Inputs {
        joins,
        rate,
        away_share: 0.0,
        bind: false,
        open_files: 20_000,
        max_connections: 18_000,
        headroom_percent: 0,
    }
}

#[test]
fn the_line_grows_while_joins_outrun_the_rate_and_drains_at_the_rate() {
    // 10 a second for 3 s at 4 a second: 6, 12, 18 waiting; then 18 / 4 = 4.5 -> 5 s more.
    let (queue, empties) = simulate(&[10, 10, 10], 4.0);
    assert_eq!(queue, vec![6.0, 12.0, 18.0]);
    assert_eq!(empties, 8);
    // A lull drains it: 6, 2, 0, then 6 again; it ends with 6 waiting -> 2 s more.
    let (queue, empties) = simulate(&[10, 0, 0, 10], 4.0);
    assert_eq!(queue, vec![6.0, 2.0, 0.0, 6.0]);
    assert_eq!(empties, 6);
    // Emptied before the curve's end: the last second with a line was index 1.
    let (_, empties) = simulate(&[10, 0, 0, 0], 4.0);
    assert_eq!(empties, 3);
    // Never a line.
    let (queue, empties) = simulate(&[3, 0, 2, 0], 4.0);
    assert_eq!(queue, vec![0.0; 4]);
    assert_eq!(empties, 3);
}

#[test]
fn a_spike_of_100000_over_60_s_at_500_a_second() {
    let p = plan(&inputs(Shape::Spike.joins(100_000, 60), 500.0), &costs());
    assert_eq!(p.crowd.value, 100_000.0);
    assert_eq!(p.peak_join_rate.value, 1_667.0);
    // 100,000 joined in 60 s, 30,000 admitted: 70,000 at the end of the curve, the peak.
    assert_eq!(p.peak_waiting.value, 70_000.0);
    assert_eq!(p.longest_wait.value, 140.0);
    // 60 s + 70,000 / 500 s.
    assert_eq!(p.line_empties.value, 200.0);
    assert_eq!(p.peak_streams.value, 70_000.0);
    // min(18,000, 20,000 - 64, 60,000 / 6).
    assert_eq!(p.streams_per_gateway_max.value, 10_000.0);
    assert_eq!(p.gateways_for_streams.value, 7.0);
    // 1,667 / 1,000 a gateway.
    assert_eq!(p.gateways_for_joins.value, 2.0);
    assert_eq!(p.gateways.value, 8.0);
    // 70,000 over the 7 left when one is drained.
    assert_eq!(p.streams_per_gateway.value, 10_000.0);
    assert_eq!(p.open_files_per_gateway.value, 10_064.0);
    // 10 MiB + 10,000 x 4 KiB = 10 + 39.06.
    assert_eq!(p.gateway_rss.value, 49.1);
    // 1,667 x 100 µs.
    assert_eq!(p.gateway_cpu_joins.value, 0.17);
    // 70,000 x 100 B = 7,000,000 B = 6.68 MiB.
    assert_eq!(p.redis_memory.value, 6.7);
    assert_eq!(p.redis_commands_waiting.value, 176.0);
    // 1,667 x 50 + 500 x 5 = 85,850 µs a second.
    assert_eq!(p.redis_cpu.value, 0.09);
    assert_eq!(p.dispatcher_replicas.value, 2.0);
    // 500 x 10 ms / 5,000 = 1 ms of CPU a second.
    assert_eq!(p.dispatcher_cpu.value, 1.0);
    assert!(p.assumptions[0].contains("2-core machine"), "{p:?}");
    // 70,000 streams is more than the 60,000 measured; 8 gateways more than 6.
    assert!(p.assumptions.iter().any(|a| a.contains("70,000 streams")));
    assert!(p.assumptions.iter().any(|a| a.contains("8 gateways")));
}

#[test]
fn headroom_away_places_and_binding_change_what_they_should() {
    let mut i = inputs(Shape::Spike.joins(100_000, 60), 500.0);
    i.headroom_percent = 30;
    let p = plan(&i, &costs());
    // 70,000 x 1.3 / 10,000 = 9.1 -> 10, + 1.
    assert_eq!(p.gateways_for_streams.value, 10.0);
    assert_eq!(p.gateways.value, 11.0);
    assert_eq!(p.streams_per_gateway.value, 7_000.0);
    // 7,000,000 B x 1.3 = 8.68 MiB.
    assert_eq!(p.redis_memory.value, 8.7);

    i.headroom_percent = 0;
    i.away_share = 0.5;
    i.bind = true;
    let p = plan(&i, &costs());
    assert_eq!(p.peak_streams.value, 35_000.0);
    assert_eq!(p.gateways_for_streams.value, 4.0);
    // 70,000 x (0.5 x 100 + 0.5 x 200 + 50) B = 14,000,000 B = 13.35 MiB.
    assert_eq!(p.redis_memory.value, 13.4);
    assert!(
        p.redis_memory.source.contains("test: 50"),
        "{:?}",
        p.redis_memory
    );
}

#[test]
fn joins_can_need_more_gateways_than_streams() {
    // 5,000 joins in one second, admitted at 5,000 a second: never a line, 5 gateways of joins.
    let p = plan(&inputs(vec![5_000], 5_000.0), &costs());
    assert_eq!(p.peak_waiting.value, 0.0);
    assert_eq!(p.gateways_for_streams.value, 0.0);
    assert_eq!(p.gateways_for_joins.value, 5.0);
    assert_eq!(p.gateways.value, 6.0);
    assert_eq!(p.line_empties.value, 1.0);
}

#[test]
fn a_small_sale_still_gets_two_of_each_and_a_tight_open_files_limit_binds() {
    let mut i = inputs(vec![100, 100], 10.0);
    i.open_files = 1_064;
    let p = plan(&i, &costs());
    assert_eq!(p.peak_waiting.value, 180.0);
    assert_eq!(p.streams_per_gateway_max.value, 1_000.0);
    assert!(
        p.assumptions
            .iter()
            .any(|a| a.contains("USHER_MAX_CONNECTIONS 18,000 is above the open-files limit 1,064")),
        "{:?}",
        p.assumptions
    );
    assert_eq!(p.gateways.value, 2.0);
    assert_eq!(p.dispatcher_replicas.value, 2.0);
    assert!(p.assumptions.iter().all(|a| !a.contains("more than")));
    // At the default limits (18,000 streams under 20,000 files) no such warning.
    let p = plan(&inputs(vec![100, 100], 10.0), &costs());
    assert!(p
        .assumptions
        .iter()
        .all(|a| !a.contains("USHER_MAX_CONNECTIONS")));
}

#[test]
fn every_line_names_its_source() {
    let p = plan(&inputs(Shape::Ramp.joins(1_000, 10), 50.0), &costs());
    for (key, line) in p.lines() {
        assert!(!line.source.is_empty() && !line.how.is_empty(), "{key}");
    }
    assert_eq!(p.gateway_rss.source, "test: 4; test: 60");
}

#[test]
fn numbers_are_written_for_people() {
    assert_eq!(fmt_number(1_234_567.0), "1,234,567");
    assert_eq!(fmt_number(1_700.5), "1,700.5");
    assert_eq!(fmt_number(0.25), "0.25");
    assert_eq!(fmt_number(999.0), "999");
}
