//! The few `google.rpc` messages OTLP uses for errors and retry hints, and
//! helpers to build and read them.

use prost::Message;
use std::time::Duration;

/// `google.rpc.Status`: the error body of OTLP/HTTP and the
/// `grpc-status-details-bin` payload of OTLP/gRPC.
#[derive(Clone, PartialEq, Message)]
pub struct RpcStatus {
    /// The gRPC status code.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// A developer-facing message.
    #[prost(string, tag = "2")]
    pub message: String,
    /// Details such as `RetryInfo`.
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    /// Type URL.
    #[prost(string, tag = "1")]
    pub type_url: String,
    /// Encoded message.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, Message)]
pub struct RetryInfo {
    /// How long the client should wait before retrying.
    #[prost(message, optional, tag = "1")]
    pub retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, Message)]
pub struct ProtoDuration {
    /// Seconds.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Nanoseconds.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// The type URL of `RetryInfo`.
pub const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// gRPC codes used by OTLP (numeric values of `google.rpc.Code`).
pub mod code {
    /// OK.
    pub const OK: i32 = 0;
    /// INVALID_ARGUMENT.
    pub const INVALID_ARGUMENT: i32 = 3;
    /// RESOURCE_EXHAUSTED.
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    /// UNIMPLEMENTED.
    pub const UNIMPLEMENTED: i32 = 12;
    /// INTERNAL.
    pub const INTERNAL: i32 = 13;
    /// UNAVAILABLE.
    pub const UNAVAILABLE: i32 = 14;
}

impl RpcStatus {
    /// A status with an optional retry hint.
    pub fn new(code: i32, message: impl Into<String>, retry_after: Option<Duration>) -> Self {
        let details = retry_after
            .map(|d| Any {
                type_url: RETRY_INFO_TYPE.to_string(),
                value: RetryInfo {
                    retry_delay: Some(ProtoDuration {
                        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
                    }),
                }
                .encode_to_vec(),
            })
            .into_iter()
            .collect();
        RpcStatus {
            code,
            message: message.into(),
            details,
        }
    }

    /// The retry delay carried in a `RetryInfo` detail, if any.
    pub fn retry_delay(&self) -> Option<Duration> {
        self.details
            .iter()
            .filter(|a| a.type_url == RETRY_INFO_TYPE)
            .find_map(|a| RetryInfo::decode(a.value.as_slice()).ok())
            .and_then(|ri| ri.retry_delay)
            .map(|d| {
                Duration::from_secs(u64::try_from(d.seconds).unwrap_or(0))
                    + Duration::from_nanos(u64::try_from(d.nanos).unwrap_or(0))
            })
    }

    /// The JSON form used by OTLP/HTTP JSON error bodies.
    pub fn to_json(&self) -> serde_json::Value {
        let details: Vec<serde_json::Value> = self
            .details
            .iter()
            .map(|d| {
                let delay = RetryInfo::decode(d.value.as_slice())
                    .ok()
                    .and_then(|r| r.retry_delay)
                    .map(|d| format!("{}.{:09}s", d.seconds, d.nanos));
                serde_json::json!({"@type": d.type_url, "retryDelay": delay})
            })
            .collect();
        serde_json::json!({"code": self.code, "message": self.message, "details": details})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_round_trips() {
        let s = RpcStatus::new(code::UNAVAILABLE, "full", Some(Duration::from_millis(1500)));
        let back = RpcStatus::decode(s.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(back.retry_delay(), Some(Duration::from_millis(1500)));
        assert_eq!(
            RpcStatus::new(code::INTERNAL, "x", None).retry_delay(),
            None
        );
    }
}
