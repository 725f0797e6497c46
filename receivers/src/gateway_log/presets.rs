//! Ready field mappings for the gateways people run: which key (or which
//! part of a text line) holds the trace id, the route, the status, the
//! durations, the rate-limit rule and the circuit or outlier state. Each was
//! written against the gateway's documented default format and is tested
//! with real lines (`tests.rs`, and real NGINX for ingress-nginx).

use super::parse::{Canon, PresetKey};

/// Kong Gateway's log serializer (file-log, http-log, tcp-log, …).
pub const KONG: &[PresetKey] = &[
    (Canon::RouteId, "route.name", 1.0),
    (Canon::RouteId, "route.id", 1.0),
    (Canon::Status, "response.status", 1.0),
    (Canon::Method, "request.method", 1.0),
    (Canon::Path, "request.uri", 1.0),
    (Canon::DurationMs, "latencies.request", 1.0),
    (Canon::UpstreamMs, "latencies.proxy", 1.0),
    (Canon::Upstream, "service.host", 1.0),
    (Canon::ClientIp, "client_ip", 1.0),
    (Canon::Timestamp, "started_at", 1.0),
    (Canon::TraceId, "trace_id.w3c", 1.0),
    (Canon::Traceparent, "request.headers.traceparent", 1.0),
    (Canon::RequestId, "request.id", 1.0),
    (Canon::RequestId, "request.headers.x-request-id", 1.0),
];

/// Apache APISIX's default logger format (http-logger, file-logger, …).
pub const APISIX: &[PresetKey] = &[
    (Canon::RouteId, "route_id", 1.0),
    (Canon::Status, "response.status", 1.0),
    (Canon::Method, "request.method", 1.0),
    (Canon::Path, "request.uri", 1.0),
    (Canon::DurationMs, "latency", 1.0),
    (Canon::UpstreamMs, "upstream_latency", 1.0),
    (Canon::Upstream, "upstream", 1.0),
    (Canon::ClientIp, "client_ip", 1.0),
    (Canon::Timestamp, "start_time", 1.0),
    (Canon::Traceparent, "request.headers.traceparent", 1.0),
    (Canon::RequestId, "request.headers.x-request-id", 1.0),
];

/// Traefik's JSON access log (durations in nanoseconds).
pub const TRAEFIK: &[PresetKey] = &[
    (Canon::RouteId, "RouterName", 1.0),
    (Canon::Status, "DownstreamStatus", 1.0),
    (Canon::Method, "RequestMethod", 1.0),
    (Canon::Path, "RequestPath", 1.0),
    (Canon::DurationMs, "Duration", 1e-6),
    (Canon::UpstreamMs, "OriginDuration", 1e-6),
    (Canon::Upstream, "ServiceAddr", 1.0),
    (Canon::ClientIp, "ClientHost", 1.0),
    (Canon::Timestamp, "StartUTC", 1.0),
    (Canon::TraceId, "TraceId", 1.0),
    (Canon::SpanId, "SpanId", 1.0),
    (Canon::Traceparent, "request_Traceparent", 1.0),
    (Canon::RequestId, "request_X-Request-Id", 1.0),
];

/// Envoy Gateway's (and Envoy's) default JSON access log.
pub const ENVOY_JSON: &[PresetKey] = &[
    (Canon::RouteId, "route_name", 1.0),
    (Canon::Status, "response_code", 1.0),
    (Canon::Method, "method", 1.0),
    (Canon::Path, "x-envoy-origin-path", 1.0),
    (Canon::DurationMs, "duration", 1.0),
    (Canon::UpstreamMs, "x-envoy-upstream-service-time", 1.0),
    (Canon::Upstream, "upstream_host", 1.0),
    (Canon::ClientIp, "downstream_remote_address", 1.0),
    (Canon::Timestamp, "start_time", 1.0),
    (Canon::ResponseFlags, "response_flags", 1.0),
    (Canon::RequestId, "x-request-id", 1.0),
    (Canon::Traceparent, "traceparent", 1.0),
];

/// A Google Cloud load balancer's request log (a Cloud Logging `LogEntry`,
/// as a log sink or `gcloud logging read --format=json` writes it).
pub const GCP_LB: &[PresetKey] = &[
    (Canon::RouteId, "resource.labels.backend_service_name", 1.0),
    (Canon::RouteId, "resource.labels.url_map_name", 1.0),
    (Canon::Status, "httpRequest.status", 1.0),
    (Canon::Method, "httpRequest.requestMethod", 1.0),
    (Canon::Path, "httpRequest.requestUrl", 1.0),
    (Canon::RequestTime, "httpRequest.latency", 1.0),
    (Canon::Upstream, "httpRequest.serverIp", 1.0),
    (Canon::ClientIp, "httpRequest.remoteIp", 1.0),
    (Canon::Timestamp, "timestamp", 1.0),
    (Canon::TraceId, "trace", 1.0),
    (Canon::SpanId, "spanId", 1.0),
    (Canon::ResponseFlags, "jsonPayload.statusDetails", 1.0),
    (
        Canon::RateLimitRule,
        "jsonPayload.enforcedSecurityPolicy.name",
        1.0,
    ),
];

/// ingress-nginx's JSON `log-format-upstream` written with its own variable names.
pub const INGRESS_NGINX_JSON: &[PresetKey] = &[
    (Canon::RouteId, "proxy_upstream_name", 1.0),
    (Canon::RequestId, "req_id", 1.0),
    (Canon::Upstream, "upstream_addr", 1.0),
    (Canon::Status, "status", 1.0),
    (Canon::RequestTime, "request_time", 1.0),
    (Canon::UpstreamTime, "upstream_response_time", 1.0),
];

/// ingress-nginx's default `log-format-upstream`:
/// `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
/// "$http_referer" "$http_user_agent" $request_length $request_time
/// [$proxy_upstream_name] [$proxy_alternative_upstream_name] $upstream_addr
/// $upstream_response_length $upstream_response_time $upstream_status $req_id`
pub const INGRESS_NGINX_TEXT: &str = r#"^(?P<client_ip>\S+) - \S+ \[(?P<timestamp>[^\]]+)\] "(?:(?P<method>[A-Z]+) (?P<path>[^ ?"]*)[^"]*|[^"]*)" (?P<status_code>\d{3}) \d+ "(?:[^"\\]|\\.)*" "(?:[^"\\]|\\.)*" \d+ (?P<request_time>[\d.]+) \[(?P<route_id>[^\]]*)\] \[[^\]]*\] (?P<upstream>-|\S+(?:, \S+)*(?: : \S+(?:, \S+)*)*) (?:-|\S+(?:, \S+)*(?: : \S+(?:, \S+)*)*) (?P<upstream_response_time>-|[\d.]+(?:, [\d.-]+)*(?: : [\d.-]+(?:, [\d.-]+)*)*) (?:-|\S+(?:, \S+)*(?: : \S+(?:, \S+)*)*) (?P<request_id>\S+)$"#;

/// Envoy's default text format (also Envoy Gateway's and Contour's):
/// `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"
/// %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION%
/// %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%"
/// "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"`
pub const ENVOY_TEXT: &str = r#"^\[(?P<timestamp>[^\]]+)\] "(?P<method>\S+) (?P<path>[^ ?"]*)\S* \S+" (?P<status_code>\d+) (?P<response_flags>\S+) \d+ \d+ (?P<duration_ms>\d+) (?P<upstream_service_time_ms>\S+) "[^"]*" "[^"]*" "(?P<request_id>[^"]*)" "[^"]*" "(?P<upstream>[^"]*)""#;

/// Istio's default text format (Envoy's, plus response code details, the
/// upstream cluster, the addresses, SNI and `%ROUTE_NAME%`).
pub const ISTIO_TEXT: &str = r#"^\[(?P<timestamp>[^\]]+)\] "(?P<method>\S+) (?P<path>[^ ?"]*)\S* \S+" (?P<status_code>\d+) (?P<response_flags>\S+) \S+ \S+ "[^"]*" \d+ \d+ (?P<duration_ms>\d+) (?P<upstream_service_time_ms>\S+) "[^"]*" "[^"]*" "(?P<request_id>[^"]*)" "[^"]*" "(?P<upstream>[^"]*)" \S+ \S+ \S+ (?P<client_ip>\S+) \S+ (?P<route_id>\S+)"#;

/// AWS Application Load Balancer access log: `type time elb client:port
/// target:port request_processing_time target_processing_time
/// response_processing_time elb_status_code target_status_code received_bytes
/// sent_bytes "request" "user_agent" ssl_cipher ssl_protocol target_group_arn
/// "trace_id" …`. The route is the target group's name; the trace id is the
/// X-Ray `Root`.
pub const AWS_ALB: &str = r#"^\S+ (?P<timestamp>\S+) \S+ (?P<client_ip>[^ ]+?):\d+ (?:(?P<upstream>[^ -][^ ]*)|-) (?P<rpt>-?[\d.]+) (?P<tpt>-?[\d.]+) (?P<spt>-?[\d.]+) (?:(?P<status_code>\d+)|-) \S+ \d+ \d+ "(?:(?P<method>[A-Z]+) (?:[a-z]+://[^/ ]*)?(?P<path>[^ ?"]*)[^"]*|[^"]*)" "(?:[^"\\]|\\.)*" \S+ \S+ (?:arn:\S*?:targetgroup/(?P<route_id>[^/ ]+)/\S+|\S+) "(?P<trace_id>[^"]*)""#;
