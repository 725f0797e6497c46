//! Each gateway preset against lines as those gateways write them (their
//! documentation's examples, default formats), checking every field the
//! README's table says the preset provides.

use super::parse::{to_record, Format, KeyMap};
use super::presets as p;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::logs::v1::LogRecord;

fn rec(format: &Format, line: &str) -> LogRecord {
    let f = format.parse(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    to_record(line, &f, 1)
}

fn get<'a>(r: &'a LogRecord, k: &str) -> Option<&'a Value> {
    r.attributes
        .iter()
        .find(|a| a.key == k)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text(r: &LogRecord, k: &str) -> String {
    match get(r, k) {
        Some(Value::StringValue(s)) => s.clone(),
        other => panic!("{k}: {other:?}"),
    }
}

fn int(r: &LogRecord, k: &str) -> i64 {
    match get(r, k) {
        Some(Value::IntValue(i)) => *i,
        other => panic!("{k}: {other:?}"),
    }
}

fn secs(r: &LogRecord, k: &str) -> f64 {
    match get(r, k) {
        Some(Value::DoubleValue(d)) => *d,
        other => panic!("{k}: {other:?}"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn json(preset: &[super::parse::PresetKey]) -> Format {
    Format::Json(KeyMap::with_preset(preset, &[]))
}

fn re(r: &str) -> regex::Regex {
    regex::Regex::new(r).expect("preset regex")
}

#[test]
fn kong_log_serializer() {
    let line = r#"{"service":{"host":"httpbin.konghq.com","created_at":1614232642,"connect_timeout":60000,"id":"167290ee-c682-4ebf-bdea-e49a3ac5e260","protocol":"http","read_timeout":60000,"port":80,"path":"/anything","updated_at":1614232642,"write_timeout":60000,"retries":5},"route":{"id":"78f79740-c410-4fd9-a998-d0a60a99dc9b","paths":["/log"],"protocols":["http"],"strip_path":true,"created_at":1614232648,"preserve_host":false,"regex_priority":0,"service":{"id":"167290ee-c682-4ebf-bdea-e49a3ac5e260"},"name":"log"},"request":{"querystring":{},"size":138,"uri":"/log?x=1","url":"http://localhost:8000/log","headers":{"host":"localhost:8000","accept-encoding":"gzip, deflate","user-agent":"HTTPie/2.4.0","accept":"*/*","connection":"keep-alive","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},"method":"GET"},"tries":[{"balancer_latency":0,"port":80,"balancer_start":1614232668399,"ip":"18.211.130.98"}],"client_ip":"192.168.144.1","upstream_uri":"/anything","response":{"headers":{"content-type":"application/json","x-kong-proxy-latency":"57","x-kong-upstream-latency":"457"},"status":200,"size":827},"latencies":{"request":515,"kong":58,"proxy":457},"started_at":1614232668342}"#;
    let r = rec(&json(p::KONG), line);
    assert_eq!(text(&r, "route_id"), "log");
    assert_eq!(int(&r, "http.response.status_code"), 200);
    assert_eq!(text(&r, "http.request.method"), "GET");
    assert_eq!(text(&r, "url.path"), "/log");
    assert!(close(secs(&r, "http.server.request.duration"), 0.515));
    assert!(close(secs(&r, "gateway.upstream.duration"), 0.457));
    assert_eq!(text(&r, "server.address"), "httpbin.konghq.com");
    assert_eq!(text(&r, "client.address"), "192.168.144.1");
    assert_eq!(hex::encode(&r.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(hex::encode(&r.span_id), "00f067aa0ba902b7");
    assert_eq!(r.time_unix_nano, 1_614_232_668_342_000_000);
}

#[test]
fn apisix_logger_format() {
    let line = r#"{"service_id":"","apisix_latency":100.99999809265,"start_time":1703907485819,"latency":101.99999809265,"upstream_latency":1,"client_ip":"127.0.0.1","route_id":"1","server":{"version":"3.7.0","hostname":"localhost"},"request":{"headers":{"host":"127.0.0.1:1984","content-type":"application/x-www-form-urlencoded","user-agent":"lua-resty-http/0.16.1 (Lua) ngx_lua/10025","content-length":"12","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},"method":"POST","size":194,"url":"http://127.0.0.1:1984/hello?log_body=no","uri":"/hello?log_body=no","querystring":{"log_body":"no"}},"response":{"headers":{"content-type":"text/plain","connection":"close","content-length":"12","server":"APISIX/3.7.0"},"status":503,"size":123},"upstream":"127.0.0.1:1982"}"#;
    let r = rec(&json(p::APISIX), line);
    assert_eq!(text(&r, "route_id"), "1");
    assert_eq!(int(&r, "http.response.status_code"), 503);
    assert_eq!(text(&r, "http.request.method"), "POST");
    assert_eq!(text(&r, "url.path"), "/hello");
    assert!(close(
        secs(&r, "http.server.request.duration"),
        0.10199999809265
    ));
    assert!(close(secs(&r, "gateway.upstream.duration"), 0.001));
    assert_eq!(text(&r, "server.address"), "127.0.0.1:1982");
    assert_eq!(hex::encode(&r.trace_id), "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(r.time_unix_nano, 1_703_907_485_819_000_000);
    assert_eq!(r.severity_text, "ERROR");
}

#[test]
fn traefik_json_access_log() {
    let line = r#"{"ClientAddr":"172.18.0.1:50836","ClientHost":"172.18.0.1","ClientPort":"50836","ClientUsername":"-","DownstreamContentSize":19,"DownstreamStatus":429,"Duration":362541,"OriginContentSize":0,"OriginDuration":0,"OriginStatus":0,"Overhead":362541,"RequestAddr":"whoami.localhost","RequestContentSize":0,"RequestCount":12,"RequestHost":"whoami.localhost","RequestMethod":"GET","RequestPath":"/api?x=1","RequestPort":"-","RequestProtocol":"HTTP/1.1","RequestScheme":"http","RetryAttempts":0,"RouterName":"whoami@docker","ServiceAddr":"172.18.0.3:80","ServiceName":"whoami@docker","StartLocal":"2024-05-16T10:12:06.123456789Z","StartUTC":"2024-05-16T10:12:06.123456789Z","TraceId":"4bf92f3577b34da6a3ce929d0e0e4736","SpanId":"00f067aa0ba902b7","entryPointName":"web","level":"info","msg":"","time":"2024-05-16T10:12:06Z"}"#;
    let r = rec(&json(p::TRAEFIK), line);
    assert_eq!(text(&r, "route_id"), "whoami@docker");
    assert_eq!(int(&r, "http.response.status_code"), 429);
    assert_eq!(text(&r, "url.path"), "/api");
    // Nanoseconds: 362541 ns.
    assert!(close(secs(&r, "http.server.request.duration"), 0.000362541));
    assert!(close(secs(&r, "gateway.upstream.duration"), 0.0));
    assert_eq!(text(&r, "server.address"), "172.18.0.3:80");
    assert_eq!(text(&r, "client.address"), "172.18.0.1");
    assert_eq!(hex::encode(&r.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(hex::encode(&r.span_id), "00f067aa0ba902b7");
    assert_eq!(r.time_unix_nano, 1_715_854_326_123_456_789);
}

#[test]
fn envoy_gateway_default_json() {
    let line = r#"{"start_time":"2023-11-21T12:30:09.122Z","method":"GET","x-envoy-origin-path":"/get","protocol":"HTTP/1.1","response_code":"200","response_flags":"-","response_code_details":"via_upstream","connection_termination_details":"-","upstream_transport_failure_reason":"-","bytes_received":"0","bytes_sent":"513","duration":"3","x-envoy-upstream-service-time":"2","x-forwarded-for":"10.244.0.5","user-agent":"curl/8.4.0","x-request-id":"fd8d9b4f-4c87-4a0e-8c3b-9a5e1b2c3d4e","x-envoy-internal":"true","upstream_host":"10.244.0.7:3000","upstream_cluster":"httproute/default/backend/rule/0","upstream_local_address":"10.244.0.8:41362","downstream_local_address":"10.244.0.8:10080","downstream_remote_address":"10.244.0.5:50432","requested_server_name":"-","route_name":"httproute/default/backend/rule/0/match/0/www_example_com"}"#;
    let r = rec(
        &Format::Envoy(KeyMap::with_preset(p::ENVOY_JSON, &[])),
        line,
    );
    assert_eq!(
        text(&r, "route_id"),
        "httproute/default/backend/rule/0/match/0/www_example_com"
    );
    assert_eq!(int(&r, "http.response.status_code"), 200);
    assert_eq!(text(&r, "url.path"), "/get");
    assert!(close(secs(&r, "http.server.request.duration"), 0.003));
    assert!(close(secs(&r, "gateway.upstream.duration"), 0.002));
    assert_eq!(text(&r, "server.address"), "10.244.0.7:3000");
    assert!(
        get(&r, "gateway.response_flags").is_none(),
        "`-` is no flag"
    );
}

#[test]
fn envoy_default_text_format() {
    let f = Format::Regex(re(p::ENVOY_TEXT));
    let line = r#"[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80""#;
    let r = rec(&f, line);
    assert_eq!(int(&r, "http.response.status_code"), 204);
    assert_eq!(text(&r, "http.request.method"), "POST");
    assert_eq!(text(&r, "url.path"), "/api/v1/locations");
    assert!(close(secs(&r, "http.server.request.duration"), 0.226));
    assert!(close(secs(&r, "gateway.upstream.duration"), 0.1));
    assert_eq!(text(&r, "server.address"), "tcp://10.0.2.1:80");
    // A circuit breaker overflow: flag UO, no upstream host, no upstream time.
    let line = r#"[2024-01-10T10:00:00.000Z] "GET /productpage HTTP/1.1" 503 UO 0 81 0 - "-" "curl/8.5.0" "9f1c5d2e-0a1b-4c2d-8e3f-a0b1c2d3e4f5" "productpage:9080" "-""#;
    let r = rec(&f, line);
    assert_eq!(text(&r, "gateway.response_flags"), "UO");
    assert!(get(&r, "gateway.upstream.duration").is_none());
}

#[test]
fn istio_default_text_format() {
    let f = Format::Regex(re(p::ISTIO_TEXT));
    let line = r#"[2020-11-25T21:26:18.409Z] "GET /status/418 HTTP/1.1" 418 - via_upstream - "-" 0 135 4 4 "-" "curl/7.73.0-DEV" "84961386-6d84-929d-98bd-c5aee93b5c88" "httpbin:8000" "10.44.1.27:80" outbound|8000||httpbin.foo.svc.cluster.local 10.44.1.23:37652 10.0.45.184:8000 10.44.1.23:46520 - default"#;
    let r = rec(&f, line);
    assert_eq!(int(&r, "http.response.status_code"), 418);
    assert_eq!(text(&r, "url.path"), "/status/418");
    assert!(close(secs(&r, "http.server.request.duration"), 0.004));
    assert_eq!(text(&r, "server.address"), "10.44.1.27:80");
    assert_eq!(text(&r, "client.address"), "10.44.1.23:46520");
    assert_eq!(text(&r, "route_id"), "default");
    let line = r#"[2024-01-10T10:00:00.000Z] "GET /productpage HTTP/1.1" 503 UO upstream_reset_before_response_started{overflow} - "-" 0 81 0 - "-" "curl/8.5.0" "9f1c5d2e-0a1b-4c2d-8e3f-a0b1c2d3e4f5" "productpage:9080" "-" outbound|9080||productpage.default.svc.cluster.local - 10.96.1.2:9080 10.244.0.5:51234 - default"#;
    let r = rec(&f, line);
    assert_eq!(text(&r, "gateway.response_flags"), "UO");
    assert_eq!(int(&r, "http.response.status_code"), 503);
}

#[test]
fn aws_alb_access_log() {
    let f = Format::AwsAlb(re(p::AWS_ALB));
    let line = r#"http 2018-07-02T22:23:00.186641Z app/my-loadbalancer/50dc6c495c0c9188 192.168.131.39:2817 10.0.0.1:80 0.000 0.001 0.000 200 200 34 366 "GET http://www.example.com:80/ HTTP/1.1" "curl/7.46.0" - - arn:aws:elasticloadbalancing:us-east-2:123456789012:targetgroup/my-targets/73e2d6bc24d8a067 "Root=1-58337262-36d228ad5d99923122bbe354" "-" "-" 0 2018-07-02T22:22:48.364000Z "forward" "-" "-" "10.0.0.1:80" "200" "-" "-""#;
    let r = rec(&f, line);
    assert_eq!(text(&r, "route_id"), "my-targets");
    assert_eq!(int(&r, "http.response.status_code"), 200);
    assert_eq!(text(&r, "url.path"), "/");
    assert!(close(secs(&r, "http.server.request.duration"), 0.001));
    assert!(close(secs(&r, "gateway.upstream.duration"), 0.001));
    assert_eq!(text(&r, "server.address"), "10.0.0.1:80");
    assert_eq!(text(&r, "client.address"), "192.168.131.39");
    // The X-Ray trace id, as the OpenTelemetry X-Ray propagator maps it.
    assert_eq!(hex::encode(&r.trace_id), "5833726236d228ad5d99923122bbe354");
    // The target closed the connection: -1 for its time, the rest counted.
    let line = r#"https 2018-07-02T22:23:00.186641Z app/my-loadbalancer/50dc6c495c0c9188 192.168.131.39:2817 10.0.0.1:80 0.086 -1 -1 502 - 0 0 "GET https://www.example.com:443/api/orders?id=1 HTTP/1.1" "curl/7.46.0" ECDHE-RSA-AES128-GCM-SHA256 TLSv1.2 arn:aws:elasticloadbalancing:us-east-2:123456789012:targetgroup/orders/73e2d6bc24d8a067 "Root=1-58337364-23a8c76965a2ef7629b185e3" "www.example.com" "arn:aws:acm:us-east-2:123456789012:certificate/12345678-1234-1234-1234-123456789012" 1 2018-07-02T22:22:48.364000Z "forward" "-" "-" "10.0.0.1:80" "-" "-" "-""#;
    let r = rec(&f, line);
    assert_eq!(text(&r, "route_id"), "orders");
    assert_eq!(int(&r, "http.response.status_code"), 502);
    assert_eq!(text(&r, "url.path"), "/api/orders");
    assert!(close(secs(&r, "http.server.request.duration"), 0.086));
    assert!(get(&r, "gateway.upstream.duration").is_none());
}

#[test]
fn gcp_load_balancer_request_log() {
    let f = json(p::GCP_LB);
    let line = r#"{"insertId":"1oek5rg3l3fxj7","jsonPayload":{"@type":"type.googleapis.com/google.cloud.loadbalancing.type.LoadBalancerLogEntry","backendTargetProjectNumber":"projects/123456789","remoteIp":"203.0.113.5","statusDetails":"response_sent_by_backend"},"httpRequest":{"requestMethod":"GET","requestUrl":"https://shop.example.com/cart?item=3","requestSize":"142","status":200,"responseSize":"1034","userAgent":"curl/8.1.2","remoteIp":"203.0.113.5","serverIp":"10.128.0.7","latency":"0.412334s","protocol":"HTTP/1.1"},"resource":{"type":"http_load_balancer","labels":{"backend_service_name":"shop-backend","forwarding_rule_name":"shop-fr","project_id":"my-project","target_proxy_name":"shop-proxy","url_map_name":"shop-map","zone":"global"}},"timestamp":"2024-03-04T10:11:12.123456Z","severity":"INFO","logName":"projects/my-project/logs/requests","trace":"projects/my-project/traces/06796866738c859f2f19b7cfb3214824","spanId":"5f9ba05b7c5b1e2f","receiveTimestamp":"2024-03-04T10:11:13.5Z"}"#;
    let r = rec(&f, line);
    assert_eq!(text(&r, "route_id"), "shop-backend");
    assert_eq!(int(&r, "http.response.status_code"), 200);
    assert_eq!(text(&r, "url.path"), "/cart");
    assert!(close(secs(&r, "http.server.request.duration"), 0.412334));
    assert_eq!(
        text(&r, "gateway.response_flags"),
        "response_sent_by_backend"
    );
    assert_eq!(hex::encode(&r.trace_id), "06796866738c859f2f19b7cfb3214824");
    assert_eq!(hex::encode(&r.span_id), "5f9ba05b7c5b1e2f");
    // Cloud Armor throttling: the rule that applied.
    let line = r#"{"jsonPayload":{"@type":"type.googleapis.com/google.cloud.loadbalancing.type.LoadBalancerLogEntry","statusDetails":"denied_by_security_policy","enforcedSecurityPolicy":{"name":"rate-limit-per-ip","priority":1000,"configuredAction":"THROTTLE","outcome":"DENY"}},"httpRequest":{"requestMethod":"POST","requestUrl":"https://shop.example.com/checkout","status":429,"latency":"0.001213s","remoteIp":"198.51.100.7"},"resource":{"type":"http_load_balancer","labels":{"backend_service_name":"shop-backend","url_map_name":"shop-map"}},"timestamp":"2024-03-04T10:11:14Z","trace":"projects/my-project/traces/1f2e3d4c5b6a79881f2e3d4c5b6a7988"}"#;
    let r = rec(&f, line);
    assert_eq!(int(&r, "http.response.status_code"), 429);
    assert_eq!(text(&r, "gateway.rate_limit_rule"), "rate-limit-per-ip");
}

#[test]
fn ingress_nginx_default_text_and_json() {
    let f = Format::IngressNginx(
        KeyMap::with_preset(p::INGRESS_NGINX_JSON, &[]),
        re(p::INGRESS_NGINX_TEXT),
    );
    let line = r#"192.168.65.3 - - [19/Jan/2024:10:01:02 +0000] "GET /api/orders?id=7 HTTP/1.1" 200 615 "-" "curl/8.4.0" 86 0.003 [default-orders-80] [] 10.1.0.23:8080 615 0.003 200 4f0a3e5a1e3c4e9a9b6a2c0d8e7f1a2b"#;
    let r = rec(&f, line);
    assert_eq!(text(&r, "route_id"), "default-orders-80");
    assert_eq!(int(&r, "http.response.status_code"), 200);
    assert_eq!(text(&r, "url.path"), "/api/orders");
    assert!(close(secs(&r, "http.server.request.duration"), 0.003));
    assert_eq!(text(&r, "server.address"), "10.1.0.23:8080");
    assert_eq!(text(&r, "client.address"), "192.168.65.3");
    // Two upstreams tried (the first failed): the times add up.
    let line = r#"192.168.65.3 - - [19/Jan/2024:10:01:03 +0000] "POST /api/pay HTTP/1.1" 200 12 "-" "curl/8.4.0" 120 0.105 [default-pay-80] [] 10.1.0.23:8080, 10.1.0.24:8080 0, 12 0.100, 0.004 502, 200 9d1f0a3e5a1e3c4e9a9b6a2c0d8e7f1a"#;
    let r = rec(&f, line);
    assert!(close(secs(&r, "gateway.upstream.duration"), 0.104));
    assert_eq!(text(&r, "server.address"), "10.1.0.23:8080, 10.1.0.24:8080");
    // No upstream at all (a 503 from a rate limit in the ingress itself).
    let line = r#"192.168.65.3 - - [19/Jan/2024:10:01:04 +0000] "GET /api/orders HTTP/1.1" 503 190 "-" "curl/8.4.0" 86 0.000 [default-orders-80] [] - - - - 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d"#;
    let r = rec(&f, line);
    assert_eq!(int(&r, "http.response.status_code"), 503);
    assert!(get(&r, "server.address").is_none());
    // The JSON form with ingress-nginx's variable names.
    let line = r#"{"time":"2024-01-19T10:01:02+00:00","remote_addr":"192.168.65.3","req_id":"4f0a3e5a1e3c4e9a9b6a2c0d8e7f1a2b","request_uri":"/api/orders?id=7","status":"200","request_time":"0.003","upstream_response_time":"0.002","proxy_upstream_name":"default-orders-80","upstream_addr":"10.1.0.23:8080","request_method":"GET"}"#;
    let r = rec(&f, line);
    assert_eq!(text(&r, "route_id"), "default-orders-80");
    assert!(close(secs(&r, "gateway.upstream.duration"), 0.002));
    assert_eq!(text(&r, "url.path"), "/api/orders");
}
