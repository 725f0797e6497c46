use super::*;
use config::Match;

/// `/jsz?accounts=true&streams=true&consumers=true&config=true` as
/// nats-server 2.9.10 (Debian) answers it, cut to what is read: a stream
/// with a push consumer filtered to one subject and a pull consumer.
const JSZ_ANSWER: &str = r#"{
 "server_id": "NDGBRQ5442G75ZB6LKHHRSCPTLFMHDUMFON7EOUCUJQK2JIZA4KZS7EP",
 "now": "2026-12-03T12:44:57.610988552Z",
 "config": {"max_memory": 18956992512, "max_storage": 36509359104, "store_dir": "/tmp/natsx/store/jetstream"},
 "memory": 0, "storage": 264, "accounts": 1, "ha_assets": 0, "api": {"total": 12, "errors": 2},
 "streams": 1, "consumers": 2, "messages": 2, "bytes": 264,
 "account_details": [{
  "name": "$G", "id": "$G", "memory": 0, "storage": 264,
  "stream_detail": [{
   "name": "ORDERS", "created": "2026-12-03T12:44:50.37889108Z",
   "config": {"name": "ORDERS", "subjects": ["orders.>"], "retention": "limits", "storage": "file", "num_replicas": 1},
   "state": {"messages": 2, "bytes": 264, "first_seq": 1, "last_seq": 2, "consumer_count": 2},
   "consumer_detail": [
    {"stream_name": "ORDERS", "name": "billing", "created": "2026-12-03T12:44:50.376645901Z",
     "config": {"durable_name": "billing", "deliver_policy": "all", "ack_policy": "explicit", "ack_wait": 30000000000,
                "max_deliver": -1, "filter_subject": "orders.created", "replay_policy": "instant", "max_ack_pending": 1000,
                "deliver_subject": "_INBOX.DaGNptiGIDg0rgNntuSzk8", "num_replicas": 0},
     "delivered": {"consumer_seq": 7, "stream_seq": 9, "last_active": "2026-12-03T12:44:54.165098627Z"},
     "ack_floor": {"consumer_seq": 5, "stream_seq": 7},
     "num_ack_pending": 2, "num_redelivered": 1, "num_waiting": 0, "num_pending": 40},
    {"stream_name": "ORDERS", "name": "audit", "created": "2026-12-03T12:44:54.16Z",
     "config": {"durable_name": "audit", "ack_policy": "explicit", "max_waiting": 512, "num_replicas": 0},
     "delivered": {"consumer_seq": 1, "stream_seq": 1},
     "ack_floor": {"consumer_seq": 1, "stream_seq": 1},
     "num_ack_pending": 0, "num_redelivered": 0, "num_waiting": 1, "num_pending": 1}
   ]
  }]
 }]
}"#;

#[test]
fn consumers_parse_with_their_stream_subjects_and_filters() {
    let c = parse_jsz(JSZ_ANSWER.as_bytes()).expect("parses");
    assert_eq!(c.len(), 2);
    assert_eq!(
        (
            c[0].account.as_str(),
            c[0].stream.as_str(),
            c[0].name.as_str()
        ),
        ("$G", "ORDERS", "billing")
    );
    assert_eq!(c[0].subjects, vec!["orders.>"]);
    assert_eq!(c[0].filters, vec!["orders.created"]);
    assert_eq!(
        (
            c[0].pending,
            c[0].ack_pending,
            c[0].redelivered,
            c[0].delivered
        ),
        (40.0, 2.0, 1.0, 7.0)
    );
    assert_eq!(c[0].backlog(), 42.0);
    assert!(c[1].filters.is_empty(), "no filter: every subject");
    assert_eq!(c[1].waiting, 1.0);
}

#[test]
fn newer_servers_filter_subjects_are_read_too() {
    let body = JSZ_ANSWER.replace(
        r#""filter_subject": "orders.created""#,
        r#""filter_subjects": ["orders.created", "orders.paid"]"#,
    );
    let c = parse_jsz(body.as_bytes()).expect("parses");
    assert_eq!(c[0].filters, vec!["orders.created", "orders.paid"]);
}

#[test]
fn what_is_not_a_jsz_answer_is_refused_with_a_reason() {
    for (bad, says) in [
        ("", "not JSON"),
        ("[]", "not a JSON object"),
        ("{\"connections\": 3}", "no server_id"),
        (
            r#"{"server_id":"x","account_details":[{"name":"$G","stream_detail":[{"config":{}}]}]}"#,
            "without a name",
        ),
    ] {
        let e = parse_jsz(bad.as_bytes()).expect_err(bad);
        assert!(e.contains(says), "{bad:?}: {e}");
    }
    // A server without JetStream's details: no consumer, not an error.
    assert!(parse_jsz(br#"{"server_id":"x"}"#).unwrap().is_empty());
}

fn cfg() -> NatsConfig {
    causeway_core::config::decode(&serde_yaml::from_str("backlog_threshold: 100").unwrap()).unwrap()
}

fn value(rms: &[ResourceMetrics], consumer: &str, name: &str) -> Option<i64> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value as N};
    let rm = rms.iter().find(|rm| {
        rm.resource.as_ref().unwrap().attributes.iter().any(|a| {
            a.key == "nats.consumer.name"
                && a.value.as_ref().and_then(|v| v.value.as_ref())
                    == Some(&V::StringValue(consumer.into()))
        })
    })?;
    let m = rm.scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == name)?;
    let p = match m.data.as_ref()? {
        Data::Gauge(g) => &g.data_points[0],
        Data::Sum(s) => &s.data_points[0],
        _ => return None,
    };
    match p.value? {
        N::AsInt(i) => Some(i),
        N::AsDouble(d) => Some(d as i64),
    }
}

#[test]
fn each_consumer_is_written_with_its_backlog_and_the_alarm_fires_at_the_threshold_or_on_growth() {
    let c = cfg();
    let all = Match::default().compile().unwrap();
    let mut consumers = parse_jsz(JSZ_ANSWER.as_bytes()).unwrap();
    let mut rising = HashMap::new();
    let rms = collect(&c, (&all, &all), &consumers, &mut rising, 1000.0, 0);
    assert_eq!(rms.len(), 2);
    assert_eq!(value(&rms, "billing", "nats.consumer.pending"), Some(40));
    assert_eq!(value(&rms, "billing", "nats.consumer.backlog"), Some(42));
    assert_eq!(value(&rms, "billing", "nats.consumer.delivered"), Some(7));
    assert_eq!(
        value(&rms, "billing", "nats.consumer.backlog_alarm"),
        Some(0)
    );
    // Over the threshold: the alarm.
    consumers[0].pending = 150.0;
    let rms = collect(&c, (&all, &all), &consumers, &mut rising, 1010.0, 0);
    assert_eq!(
        value(&rms, "billing", "nats.consumer.backlog_alarm"),
        Some(1)
    );
    // Below it, but rising without a decrease for growth_window (5m).
    consumers[1].pending = 5.0;
    let mut t = 1020.0;
    for step in 0..32 {
        consumers[1].pending += 1.0;
        let rms = collect(&c, (&all, &all), &consumers, &mut rising, t, 0);
        let alarm = value(&rms, "audit", "nats.consumer.backlog_alarm");
        assert_eq!(alarm, Some(i64::from(step >= 30)), "step {step}");
        t += 10.0;
    }
    // It comes down: no longer.
    consumers[1].pending = 2.0;
    let rms = collect(&c, (&all, &all), &consumers, &mut rising, t, 0);
    assert_eq!(value(&rms, "audit", "nats.consumer.backlog_alarm"), Some(0));
    // Filters: only the streams and consumers asked for.
    let only: Match = serde_yaml::from_str("include: billing").unwrap();
    let rms = collect(
        &c,
        (&all, &only.compile().unwrap()),
        &consumers,
        &mut rising,
        t,
        0,
    );
    assert_eq!(rms.len(), 1);
    assert_eq!(rising.len(), 1, "the consumers left out are forgotten");
}
