//! The hub's rules, without sockets.

use std::sync::Arc;

use super::*;
use usher_core::messages::{Admission, AdmittedEvent, QueueState, WaitingEvent};

fn q() -> QueueId {
    QueueId::new("q").expect("valid")
}

fn waiting(position: u64) -> WaitingEvent {
    WaitingEvent {
        queue: q(),
        position,
        waiting: position,
        eta_seconds: Some(0),
        as_of_ms: 0,
        inventory: None,
        lane: None,
    }
}

fn place(seq: u64) -> PlaceId {
    PlaceId(seq)
}

fn connect(hub: &Hub, p: PlaceId, pos: u64) -> (Attached, latest::Receiver<Update>) {
    let r = hub.reserve(&q(), p, None);
    hub.attach(r, Update::Waiting(waiting(pos)))
        .expect("attached")
}

#[test]
fn newest_connection_owns_the_place() {
    let hub = Hub::new();
    let (a1, rx1) = connect(&hub, place(5), 5);
    let r2 = hub.reserve(&q(), place(5), None);
    assert_eq!(
        *rx1.borrow(),
        Update::closed(&q(), CloseReason::ResumedElsewhere),
        "the older connection is told its place was resumed elsewhere"
    );
    assert!(
        !hub.detach(&a1),
        "the old connection no longer owns the place"
    );
    let (a2, _rx2) = hub
        .attach(r2, Update::Waiting(waiting(5)))
        .expect("attached");
    assert_eq!(hub.connections(), 1);
    assert!(hub.detach(&a2));
    assert_eq!(hub.connections(), 0);
}

#[test]
fn an_abandoned_reservation_reports_ownership_once() {
    let hub = Hub::new();
    let r = hub.reserve(&q(), place(1), None);
    assert!(hub.unreserve(&r));
    assert!(!hub.unreserve(&r));
    assert_eq!(hub.connections(), 0);
    let r1 = hub.reserve(&q(), place(2), None);
    let _r2 = hub.reserve(&q(), place(2), None);
    assert!(!hub.unreserve(&r1), "a newer reservation owns it");
    assert!(hub.attach(r1, Update::Waiting(waiting(1))).is_none());
}

#[test]
fn positions_never_increase_and_gone_places_are_reported_once() {
    let hub = Hub::new();
    let (_a, rx) = connect(&hub, place(10), 3);
    let mut s = QueueState {
        waiting: 9,
        rate: 1.0,
        runs: vec![(1, 9), (10, 1)],
        ..QueueState::empty(q())
    };
    assert!(hub.apply_state(&s).is_empty());
    assert!(matches!(&*rx.borrow(), Update::Waiting(w) if w.position == 3));
    s.runs = vec![(10, 1)];
    hub.apply_state(&s);
    assert!(
        matches!(&*rx.borrow(), Update::Waiting(w) if w.position == 1 && w.eta_seconds == Some(1))
    );
    s.runs = vec![(11, 1)];
    assert_eq!(hub.apply_state(&s), vec![place(10)]);
    assert!(
        hub.apply_state(&s).is_empty(),
        "reported once until resync_done"
    );
    hub.resync_done(&q(), place(10));
    assert_eq!(hub.apply_state(&s), vec![place(10)]);
}

#[test]
fn admissions_reach_reserved_and_not_yet_attached_places() {
    let hub = Hub::new();
    let adm = |p: PlaceId| Admission {
        place: p,
        token: "t".into(),
        admitted_at_ms: 1,
        expires_at_ms: 2,
    };
    // Arrives before the reservation: kept as an orphan.
    assert_eq!(hub.admit(&q(), &[adm(place(4))], None), 0);
    let r = hub.reserve(&q(), place(4), None);
    let (_a, rx) = hub
        .attach(r, Update::Waiting(waiting(1)))
        .expect("attached");
    assert!(matches!(&*rx.borrow(), Update::Admitted(e) if e.token == "t"));
    // Arrives while reserved: kept in the slot.
    let r = hub.reserve(&q(), place(5), None);
    assert_eq!(hub.admit(&q(), &[adm(place(5))], None), 1);
    let (_a, rx) = hub
        .attach(r, Update::Waiting(waiting(1)))
        .expect("attached");
    assert!(matches!(&*rx.borrow(), Update::Admitted(_)));
    assert_eq!(hub.connections(), 0);
}

#[test]
fn staged_tokens_are_shown_only_when_admitted_and_render_like_any_event() {
    let hub = Hub::new();
    let (_a, rx) = connect(&hub, place(7), 1);
    let (_b, rx_other) = connect(&hub, place(8), 2);
    let adm = |p: PlaceId, at: u64| Admission {
        place: p,
        token: "tok\"en".into(),
        admitted_at_ms: at,
        expires_at_ms: at + 1000,
    };
    hub.stage(&q(), vec![adm(place(7), 5), adm(place(8), 5)]);
    assert!(!rx.has_changed().unwrap_or(true), "staged is not admitted");
    // A tick that admits place 7 at another time than staged: its token is not used.
    assert_eq!(
        hub.admit_staged(&q(), 6, 1006, &[place(7)], None),
        vec![place(7)]
    );
    assert!(matches!(&*rx.borrow(), Update::Waiting(_)));
    // Place 8 with the staged time gets the staged token, its JSON rendered once.
    assert!(hub
        .admit_staged(&q(), 5, 1005, &[place(8)], None)
        .is_empty());
    let Update::Admitted(a) = &*rx_other.borrow() else {
        panic!("admitted expected");
    };
    let expected = AdmittedEvent::new(q(), &adm(place(8), 5));
    assert_eq!(a.event, expected);
    assert_eq!(a.json, serde_json::to_string(&expected).expect("json"));
    assert_eq!(
        Update::Admitted(a.clone()).frame("tk"),
        Some(crate::frames::event_frame(
            "admitted",
            Some("tk"),
            &expected
        ))
    );
}

#[test]
fn a_browser_that_does_not_read_holds_one_pending_update_at_most() {
    let hub = Hub::new();
    let (_a, rx) = connect(&hub, place(5000), 5000);
    // Nobody reads `rx` while the line moves 4,000 times.
    for left in (1000..5000u64).rev() {
        hub.apply_state(&QueueState {
            waiting: left,
            rate: 1.0,
            runs: vec![(5000 - left + 1, left)],
            ..QueueState::empty(q())
        });
    }
    assert!(rx.has_changed().unwrap_or(false));
    assert!(matches!(&*rx.borrow(), Update::Waiting(w) if w.position == 1000));
}

#[test]
fn a_notice_waits_in_the_one_pending_update_and_never_displaces_an_admission() {
    let hub = Hub::new();
    let (a, mut rx) = connect(&hub, place(10), 3);
    let (_b, rx_admitted) = connect(&hub, place(11), 4);
    let admission = Admission {
        place: place(11),
        token: "t".into(),
        admitted_at_ms: 1,
        expires_at_ms: 2,
    };
    assert_eq!(hub.admit(&q(), &[admission], None), 1);
    // Two notices before the browser reads: the newer replaces the older, and the
    // admitted connection keeps its admission.
    assert_eq!(hub.notify(&q(), "first"), 1);
    assert_eq!(hub.notify(&q(), "second"), 1);
    assert!(matches!(&*rx_admitted.borrow(), Update::Admitted(_)));
    // A position update keeps the pending notice and moves its `waiting` along.
    hub.apply_state(&QueueState {
        waiting: 1,
        rate: 1.0,
        runs: vec![(10, 1)],
        ..QueueState::empty(q())
    });
    let u = rx.borrow_and_update().clone();
    let Update::Notice { notice, waiting } = &u else {
        panic!("notice expected, got {u:?}");
    };
    assert_eq!(waiting.position, 1);
    assert_eq!(
        &**notice,
        "event: notice\ndata: {\"queue\":\"q\",\"message\":\"second\"}\n\n"
    );
    assert_eq!(
        u.frame("tk"),
        Some(format!(
            "{notice}{}",
            crate::frames::event_frame("waiting", Some("tk"), waiting)
        ))
    );
    // Once written, it turns back into `waiting` without waking the connection.
    hub.notice_shown(&a, notice);
    assert!(!rx.has_changed().unwrap_or(true));
    assert!(matches!(&*rx.borrow(), Update::Waiting(w) if w.position == 1));
    // A terminal update replaces a pending notice.
    assert_eq!(hub.notify(&q(), "third"), 1);
    hub.close_queue(&q(), CloseReason::SoldOut);
    assert_eq!(hub.notify(&q(), "fourth"), 0);
    assert!(matches!(&*rx.borrow(), Update::Closed(c) if c.reason == CloseReason::SoldOut));
}

#[test]
fn draining_ends_connections_with_a_retry() {
    let hub = Hub::new();
    let rxs: Vec<_> = (1..=5).map(|i| connect(&hub, place(i), i).1).collect();
    assert_eq!(hub.end_some(3, || 1234), 3);
    assert_eq!(hub.connections(), 2);
    let ended = rxs
        .iter()
        .filter(|rx| {
            *rx.borrow()
                == Update::Ended {
                    retry_ms: Some(1234),
                }
        })
        .count();
    assert_eq!(ended, 3);
    assert_eq!(hub.end_some(10, || 1), 2);
    assert_eq!(hub.connections(), 0);
}

#[test]
fn pre_queue_places_are_restored_apart_and_told_of_a_void_draw() {
    use usher_core::messages::ScheduledEvent;
    let hub = Hub::new();
    let (_w, rx_waiting) = connect(&hub, place(3), 1);
    let opens_at_ms = 1_900_000_000_000;
    let mut pre = Vec::new();
    // A binding queue's places keep the key they were proven with, to be put back with it.
    let key = |c: char| Thumbprint::parse(&format!("{}A", c.to_string().repeat(42)));
    for (p, c) in [(9, 'x'), (7, 'y')] {
        let r = hub.reserve(&q(), place(p), key(c).as_ref());
        let first = Update::Scheduled(ScheduledEvent::new(q(), opens_at_ms));
        pre.push(hub.attach(r, first).expect("attached").1);
    }
    assert!(key('x').is_some());
    assert_eq!(hub.places_in_line_order(&q()), vec![(place(3), None)]);
    assert_eq!(hub.held_key(&q(), place(9)), key('x'));
    assert_eq!(
        hub.scheduled_places(&q()),
        (
            vec![(place(7), key('y')), (place(9), key('x'))],
            Some(opens_at_ms)
        ),
        "in join order with their keys, and the opens_at their streams were told"
    );
    let frame: Arc<str> = "event: draw_void\ndata: {}\n\n".into();
    assert_eq!(hub.void_scheduled(&q(), &frame, || 1500), 2);
    for rx in &pre {
        let u = rx.borrow().clone();
        assert!(u.is_terminal());
        assert_eq!(
            u.frame("t").as_deref(),
            Some("event: draw_void\ndata: {}\n\nretry: 1500\n\n")
        );
    }
    assert!(matches!(*rx_waiting.borrow(), Update::Waiting(_)));
    assert_eq!(hub.scheduled_places(&q()), (vec![], None));
    assert_eq!(hub.connections(), 1);
}

/// Lanes: a place in a lane reads its position and ETA off its lane's snapshot (its lane's
/// effective rate), a default-lane place off the top-level one, and both keep their lane in
/// the events they hear.
#[test]
fn each_lane_reads_its_own_snapshot_and_rate() {
    use usher_core::lanes::LaneName;
    use usher_core::messages::LaneState;
    let hub = Hub::new();
    let members = LaneName::new("members").expect("valid");
    // Place 4 is the 2nd member; place 9 the 5th in the default lane.
    let r = hub.reserve(&q(), place(4), None);
    let (_m, rx_m) = hub
        .attach(
            r,
            Update::Waiting(WaitingEvent {
                lane: Some(members.clone()),
                ..waiting(2)
            }),
        )
        .expect("attached");
    let (_g, rx_g) = connect(&hub, place(9), 5);
    let s = QueueState {
        waiting: 5,
        rate: 7.0,
        runs: vec![(5, 5)],
        lanes: vec![
            LaneState {
                name: LaneName::new("general").expect("valid"),
                default: true,
                share: 70,
                waiting: 5,
                rate: 7.0,
                runs: vec![(5, 5)],
                samples: Vec::new(),
            },
            LaneState {
                name: members.clone(),
                default: false,
                share: 30,
                waiting: 3,
                rate: 3.0,
                runs: vec![(2, 3)],
                samples: Vec::new(),
            },
        ],
        ..QueueState::empty(q())
    };
    assert!(hub.apply_state(&s).is_empty(), "nobody is gone");
    // Member place 4 is 3rd in its lane's run [2, 3, 4] and was told 2: it stays 2 (never up);
    // read off the default lane's run [5..10) it would be gone.
    match &*rx_m.borrow() {
        Update::Waiting(w) => {
            assert_eq!((w.position, w.waiting), (2, 3));
            assert_eq!(w.eta_seconds, Some(1), "2 places at the lane's 3/s");
            assert_eq!(w.lane.as_ref(), Some(&members));
        }
        other => panic!("{other:?}"),
    }
    match &*rx_g.borrow() {
        Update::Waiting(w) => {
            assert_eq!((w.position, w.waiting), (5, 5));
            assert_eq!(w.eta_seconds, Some(1), "5 places at the default lane's 7/s");
            assert_eq!(w.lane, None);
        }
        other => panic!("{other:?}"),
    };
}

#[test]
fn an_inventory_push_counts_the_places_every_lane_admits_first() {
    use usher_core::inventory::{Chance, InventoryState};
    use usher_core::lanes::LaneName;
    use usher_core::messages::LaneState;
    let hub = Hub::new();
    let members = LaneName::new("members").expect("valid");
    // Place 2 is the 2nd member (members 3/s, general 7/s).
    let r = hub.reserve(&q(), place(2), None);
    let (_m, rx) = hub
        .attach(
            r,
            Update::Waiting(WaitingEvent {
                lane: Some(members.clone()),
                ..waiting(2)
            }),
        )
        .expect("attached");
    let lane = |name: LaneName, default, share, rate, runs| LaneState {
        name,
        default,
        share,
        waiting: 10,
        rate,
        runs,
        samples: Vec::new(),
    };
    let s = QueueState {
        waiting: 10,
        rate: 7.0,
        runs: vec![(10, 10)],
        lanes: vec![
            lane(
                LaneName::new("general").expect("valid"),
                true,
                70,
                7.0,
                vec![(10, 10)],
            ),
            lane(members, false, 30, 3.0, vec![(1, 10)]),
        ],
        ..QueueState::empty(q())
    };
    hub.apply_state(&s);
    // While its 2nd member place waits, the queue admits about 2 × 10/3 ≈ 7 places: 4 left is
    // unlikely for it, though only one member is ahead (its lane position alone said likely).
    let inv = InventoryState {
        remaining: 4,
        held: 0,
        basket_size: 1,
        stale: false,
    };
    hub.apply_inventory(&q(), &inv);
    let told = match &*rx.borrow() {
        Update::Waiting(w) => (w.position, w.inventory.map(|i| i.chance)),
        other => panic!("{other:?}"),
    };
    assert_eq!(told, (2, Some(Chance::Unlikely)));
}

/// Another gateway's takeover news is acted on only for an attached connection: one still
/// being set up (its resume may reach Redis after the other gateway's) is marked, and checked
/// once attached, once.
#[test]
fn a_takeover_during_set_up_is_checked_once_attached() {
    let hub = Hub::new();
    let r = hub.reserve(&q(), place(7), None);
    assert_eq!(
        hub.taken_over_connection(&q(), place(7)),
        None,
        "a connection being set up is not named"
    );
    let (a, rx) = hub
        .attach(r, Update::Waiting(waiting(7)))
        .expect("attached");
    assert_eq!(
        *rx.borrow(),
        Update::Waiting(waiting(7)),
        "nothing ended it"
    );
    assert!(hub.take_takeover_check(&a), "checked once attached");
    assert!(!hub.take_takeover_check(&a), "once");

    // Attached: named, and no mark left behind.
    let c = hub.taken_over_connection(&q(), place(7));
    assert!(c.is_some(), "an attached connection is named");
    assert!(!hub.take_takeover_check(&a));
    // A connection with no takeover news is never asked about.
    let (b, _rx) = connect(&hub, place(8), 8);
    assert!(!hub.take_takeover_check(&b));
}
