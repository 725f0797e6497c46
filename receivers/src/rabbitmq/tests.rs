use super::*;

/// `GET /api/queues?columns=…` as RabbitMQ 3.10 answers it: a queue with
/// activity, one never used (no `message_stats` at all), one with a head
/// timestamp.
const QUEUES: &str = r#"[
 {"consumers":1,"messages":120,"messages_ready":110,"messages_unacknowledged":10,
  "message_stats":{"ack":500,"deliver_get":510,"deliver_get_details":{"rate":4.0},"publish":630,"publish_details":{"rate":6.5}},
  "name":"orders","node":"rabbit@mq-0","type":"classic","vhost":"/"},
 {"consumers":0,"messages":0,"messages_ready":0,"messages_unacknowledged":0,
  "name":"idle","node":"rabbit@mq-0","type":"quorum","vhost":"shop"},
 {"consumers":0,"head_message_timestamp":1764650000,"messages":3,"messages_ready":3,"messages_unacknowledged":0,
  "message_stats":{"publish":3,"publish_details":{"rate":0.0}},
  "name":"billing.retry","node":"rabbit@mq-1","vhost":"/"}
]"#;

#[test]
fn queues_parse_with_missing_stats_read_as_zero() {
    let q = parse_queues(QUEUES.as_bytes()).expect("parses");
    assert_eq!(q.len(), 3);
    assert_eq!(
        (q[0].messages, q[0].ready, q[0].unacked, q[0].consumers),
        (120.0, 110.0, 10.0, 1.0)
    );
    assert_eq!(
        (q[0].published, q[0].delivered, q[0].acknowledged),
        (630.0, 510.0, 500.0)
    );
    assert_eq!(
        (q[0].publish_rate, q[0].deliver_rate),
        (Some(6.5), Some(4.0))
    );
    assert_eq!(
        (q[1].published, q[1].delivered, q[1].publish_rate),
        (0.0, 0.0, None)
    );
    assert_eq!(q[2].head_timestamp, Some(1_764_650_000.0));
    for bad in [
        "",
        "{\"error\":\"Not_Authorized\"}",
        "[{\"messages\":1}]",
        "<html>",
    ] {
        assert!(parse_queues(bad.as_bytes()).is_err(), "{bad:?}");
    }
}

fn q(messages: f64, consumers: f64, delivered: f64) -> Queue {
    Queue {
        name: "q".into(),
        messages,
        consumers,
        delivered,
        ..Default::default()
    }
}

#[test]
fn status_stop_stall_warn_and_ok_as_burrow_judges_a_group() {
    // No consumer with a backlog: STOP at once.
    let mut h = History::default();
    assert_eq!(h.judge(0.0, &q(5.0, 0.0, 0.0), 6, 5.0), Status::Stop);
    // Consumers, a backlog, and no delivery across the window: STALL.
    let mut h = History::default();
    assert_eq!(
        h.judge(0.0, &q(50.0, 1.0, 100.0), 6, 5.0),
        Status::Ok,
        "one point: too early"
    );
    assert_eq!(h.judge(10.0, &q(60.0, 1.0, 100.0), 6, 5.0), Status::Stall);
    // A slow consumer: deliveries, and the depth rising point after point: WARN.
    let mut h = History::default();
    for (i, d) in [10.0, 20.0, 35.0].iter().enumerate() {
        let s = h.judge(i as f64 * 10.0, &q(*d, 1.0, i as f64 * 5.0), 6, 5.0);
        assert_eq!(s, if i < 2 { Status::Ok } else { Status::Warn }, "{i}");
    }
    assert!(!h.rising_for(20.0, 300.0));
    assert!(h.rising_for(400.0, 300.0), "rising since the first rise");
    // A request-reply consumer one message at a time: the depth goes 0, 1,
    // 1 (the message in work), never piling up: OK, not WARN.
    let mut h = History::default();
    for (i, d) in [0.0, 1.0, 1.0, 1.0].iter().enumerate() {
        let s = h.judge(i as f64, &q(*d, 1.0, i as f64), 4, 5.0);
        assert_eq!(s, Status::Ok, "{i}");
    }
    let mut h = History::default();
    for (i, d) in [10.0, 20.0, 35.0].iter().enumerate() {
        h.judge(i as f64 * 10.0, &q(*d, 1.0, i as f64 * 5.0), 6, 5.0);
    }
    // Draining: OK, and the rise forgotten.
    assert_eq!(h.judge(30.0, &q(5.0, 1.0, 60.0), 6, 5.0), Status::Ok);
    assert!(!h.rising_for(1000.0, 300.0));
    // Empty is OK whatever the consumers.
    assert_eq!(h.judge(40.0, &q(0.0, 0.0, 60.0), 6, 5.0), Status::Ok);
}

/// RabbitMQ refreshes a queue's counters every `collect_statistics_interval`
/// (5 s): collected every 500 ms, a delivery counter that has not moved for
/// 2 s says nothing (a slow consumer's deliveries not counted yet), and
/// the window is kept 5 s long before a backlog with nothing delivered is
/// STALL.
#[test]
fn no_delivery_is_stall_only_over_the_brokers_statistics_interval() {
    let mut h = History::default();
    for i in 0..4 {
        let s = h.judge(i as f64 * 0.5, &q(1.0, 1.0, 100.0), 4, 5.0);
        assert_eq!(s, Status::Ok, "{i}: 2 s of an unrefreshed counter");
    }
    let mut stalled = None;
    for i in 4..14 {
        if h.judge(i as f64 * 0.5, &q(1.0, 1.0, 100.0), 4, 5.0) == Status::Stall {
            stalled = Some(i as f64 * 0.5);
            break;
        }
    }
    assert_eq!(stalled, Some(5.0), "nothing delivered for 5 s: STALL");
}

#[test]
fn bindings_from_named_exchanges_to_queues_with_their_types() {
    // As RabbitMQ 3.10 answers `?columns=…`: the default exchange's implicit
    // binding (source ""), a topic binding, a fanout one, and an
    // exchange-to-exchange binding.
    let bindings = br##"[
 {"source":"","vhost":"/","destination":"orders.created","destination_type":"queue","routing_key":"orders.created"},
 {"source":"orders","vhost":"/","destination":"orders.created","destination_type":"queue","routing_key":"order.*"},
 {"source":"audit","vhost":"shop","destination":"audit.all","destination_type":"queue","routing_key":""},
 {"source":"orders","vhost":"/","destination":"audit","destination_type":"exchange","routing_key":"#"}
]"##;
    let exchanges = br#"[{"name":"orders","vhost":"/","type":"topic"},{"name":"audit","vhost":"shop","type":"fanout"},{"name":"","vhost":"/","type":"direct"}]"#;
    let b = parse_bindings(bindings, exchanges).expect("parses");
    assert_eq!(
        b,
        vec![
            Binding {
                vhost: "/".into(),
                exchange: "orders".into(),
                exchange_type: "topic".into(),
                key: "order.*".into(),
                queue: "orders.created".into(),
            },
            Binding {
                vhost: "shop".into(),
                exchange: "audit".into(),
                exchange_type: "fanout".into(),
                key: "".into(),
                queue: "audit.all".into(),
            },
        ]
    );
    for (bad_b, bad_e) in [
        (&b"<html>"[..], &b"[]"[..]),
        (b"[]", b"{\"error\":\"Not_Authorized\"}"),
        (b"[{\"vhost\":\"/\"}]", b"[]"),
    ] {
        assert!(parse_bindings(bad_b, bad_e).is_err());
    }
}
