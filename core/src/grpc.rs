//! gRPC codecs that move OTLP requests as raw bytes (no prost decode on the
//! hot path), and the OTLP service names and paths.

use bytes::{Buf, BufMut, Bytes};
use prost::Message;
use std::marker::PhantomData;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use crate::model::Signal;

/// The gRPC service name of a signal's OTLP export service.
pub fn service_name(signal: Signal) -> &'static str {
    match signal {
        Signal::Traces => "opentelemetry.proto.collector.trace.v1.TraceService",
        Signal::Logs => "opentelemetry.proto.collector.logs.v1.LogsService",
        Signal::Metrics => "opentelemetry.proto.collector.metrics.v1.MetricsService",
        Signal::Profiles => "opentelemetry.proto.collector.profiles.v1development.ProfilesService",
    }
}

/// The gRPC path of a signal's `Export` method.
pub fn export_path(signal: Signal) -> &'static str {
    match signal {
        Signal::Traces => "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        Signal::Logs => "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        Signal::Metrics => "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        Signal::Profiles => {
            "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
        }
    }
}

/// Server codec: requests arrive as raw bytes, responses are prost messages.
pub struct ServerCodec<R>(PhantomData<R>);

impl<R> Default for ServerCodec<R> {
    fn default() -> Self {
        ServerCodec(PhantomData)
    }
}

impl<R: Message + Send + 'static> Codec for ServerCodec<R> {
    type Encode = R;
    type Decode = Bytes;
    type Encoder = MessageEncoder<R>;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> Self::Encoder {
        MessageEncoder(PhantomData)
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

/// Client codec: requests leave as raw bytes, responses are decoded.
pub struct ClientCodec<R>(PhantomData<R>);

impl<R> Default for ClientCodec<R> {
    fn default() -> Self {
        ClientCodec(PhantomData)
    }
}

impl<R: Message + Default + Send + 'static> Codec for ClientCodec<R> {
    type Encode = Vec<Bytes>;
    type Decode = R;
    type Encoder = RawEncoder;
    type Decoder = MessageDecoder<R>;
    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder
    }
    fn decoder(&mut self) -> Self::Decoder {
        MessageDecoder(PhantomData)
    }
}

/// Writes raw bytes: the parts of a request, one after the other (their
/// concatenation is the request), without first joining them.
pub struct RawEncoder;

impl Encoder for RawEncoder {
    type Item = Vec<Bytes>;
    type Error = Status;
    fn encode(&mut self, item: Vec<Bytes>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        for part in item {
            dst.put(part);
        }
        Ok(())
    }
}

/// Takes the message bytes without copying.
pub struct RawDecoder;

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n)))
    }
}

/// Encodes a prost message.
pub struct MessageEncoder<R>(PhantomData<R>);

impl<R: Message> Encoder for MessageEncoder<R> {
    type Item = R;
    type Error = Status;
    fn encode(&mut self, item: R, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encode response: {e}")))
    }
}

/// Decodes a prost message.
pub struct MessageDecoder<R>(PhantomData<R>);

impl<R: Message + Default> Decoder for MessageDecoder<R> {
    type Item = R;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<R>, Status> {
        R::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("decode response: {e}")))
    }
}

/// The 5-byte prefix of a gRPC message: the compressed flag and the
/// message's length (big-endian).
pub fn frame_header(compressed: bool, len: usize) -> Result<[u8; 5], Status> {
    let n = u32::try_from(len)
        .map_err(|_| Status::resource_exhausted(format!("message of {len} bytes is too large")))?;
    let b = n.to_be_bytes();
    Ok([u8::from(compressed), b[0], b[1], b[2], b[3]])
}

/// The one message of a unary gRPC body: whether it is compressed, and its
/// bytes (sliced from `body`, not copied).
pub fn parse_unary(body: &Bytes) -> Result<(bool, Bytes), String> {
    if body.len() < 5 {
        return Err(format!(
            "body of {} bytes is shorter than a gRPC message prefix",
            body.len()
        ));
    }
    let compressed = match body[0] {
        0 => false,
        1 => true,
        f => return Err(format!("invalid gRPC compressed flag {f}")),
    };
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let end = 5usize.saturating_add(len);
    if body.len() < end {
        return Err(format!(
            "gRPC message declares {len} bytes but the body holds {}",
            body.len() - 5
        ));
    }
    if body.len() > end {
        return Err("more than one message in a unary request".into());
    }
    Ok((compressed, body.slice(5..end)))
}

/// The gRPC status for an HTTP status without `grpc-status`, as the gRPC
/// specification maps them (doc/http-grpc-status-mapping.md).
pub fn code_of_http_status(status: u16) -> tonic::Code {
    match status {
        400 => tonic::Code::Internal,
        401 => tonic::Code::Unauthenticated,
        403 => tonic::Code::PermissionDenied,
        404 => tonic::Code::Unimplemented,
        429 | 502 | 503 | 504 => tonic::Code::Unavailable,
        _ => tonic::Code::Unknown,
    }
}

#[cfg(test)]
mod frame_tests {
    use super::*;

    #[test]
    fn a_framed_message_parses_back() {
        let msg = Bytes::from_static(b"hello");
        let h = frame_header(true, msg.len()).expect("header");
        let mut body = h.to_vec();
        body.extend_from_slice(&msg);
        let (c, m) = parse_unary(&Bytes::from(body.clone())).expect("parse");
        assert!(c);
        assert_eq!(m, msg);
        body.push(0);
        assert!(parse_unary(&Bytes::from(body)).is_err(), "trailing bytes");
        assert!(
            parse_unary(&Bytes::from_static(&[0, 0, 0, 0, 9, 1])).is_err(),
            "short"
        );
        assert!(
            parse_unary(&Bytes::from_static(&[2, 0, 0, 0, 0])).is_err(),
            "flag"
        );
    }
}

/// Why a raw unary call failed.
#[derive(Debug)]
pub enum UnaryError {
    /// No answer: connection refused or broken, response unreadable.
    Transport(String),
    /// The server answered with a non-OK gRPC status (or an HTTP status
    /// that maps to one).
    Status(Status),
}

/// The request headers of a raw unary call: `content-type`, `te`,
/// `grpc-accept-encoding`, and `extra` (metadata).
pub fn unary_headers(extra: http::HeaderMap) -> http::HeaderMap {
    let mut h = extra;
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    h.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    h.insert(
        "grpc-accept-encoding",
        http::HeaderValue::from_static("gzip,zstd,snappy,identity"),
    );
    h
}

/// Responses are small (a partial success at most); a larger one is refused.
const MAX_RESPONSE: usize = 4 << 20;

/// One unary gRPC call whose message is already encoded (and, with `codec`,
/// already compressed): framed here rather than by tonic's client so that a
/// message is compressed by the caller, on the caller's task (several
/// exporter consumers compress several batches at once; tonic compresses
/// inside the connection's body stream), once whatever the number of
/// exporters, and in codecs tonic does not speak (snappy). `parts` are sent
/// one after the other without being joined. Returns the response message,
/// inflated.
pub async fn unary(
    channel: &tonic::transport::Channel,
    path: &'static str,
    headers: &http::HeaderMap,
    codec: crate::compress::Codec,
    parts: Vec<Bytes>,
) -> Result<Bytes, UnaryError> {
    use crate::compress::Codec;
    use http_body_util::{BodyExt, Limited, StreamBody};
    use tower::{Service, ServiceExt};
    let len = parts.iter().map(Bytes::len).sum();
    let header = frame_header(codec != Codec::None, len).map_err(UnaryError::Status)?;
    let frames = std::iter::once(Bytes::copy_from_slice(&header))
        .chain(parts)
        .map(|b| Ok::<_, std::convert::Infallible>(http_body::Frame::data(b)));
    let body = tonic::body::Body::new(StreamBody::new(futures::stream::iter(frames)));
    let mut req = http::Request::new(body);
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = http::Uri::from_static(path);
    let h = req.headers_mut();
    h.clone_from(headers);
    if let Some(name) = codec.name() {
        h.insert("grpc-encoding", http::HeaderValue::from_static(name));
    }
    let chain =
        |e: &(dyn std::error::Error + 'static)| UnaryError::Transport(crate::error::cause_chain(e));
    let mut channel = channel.clone();
    let ready = channel.ready().await.map_err(|e| chain(&e))?;
    let resp = ready.call(req).await.map_err(|e| chain(&e))?;
    let (head, body) = resp.into_parts();
    if let Some(status) = Status::from_header_map(&head.headers) {
        if status.code() != tonic::Code::Ok {
            return Err(UnaryError::Status(status));
        }
    }
    if head.status != http::StatusCode::OK {
        return Err(UnaryError::Status(Status::new(
            code_of_http_status(head.status.as_u16()),
            format!("HTTP status {} without a gRPC status", head.status),
        )));
    }
    let collected = Limited::new(body, MAX_RESPONSE)
        .collect()
        .await
        .map_err(|e| UnaryError::Transport(format!("reading the response: {e}")))?;
    let status = collected
        .trailers()
        .and_then(Status::from_header_map)
        .or_else(|| Status::from_header_map(&head.headers));
    match status {
        Some(s) if s.code() == tonic::Code::Ok => {}
        Some(s) => return Err(UnaryError::Status(s)),
        None => {
            return Err(UnaryError::Transport(
                "the response carries no grpc-status".into(),
            ))
        }
    }
    let data = collected.to_bytes();
    if data.is_empty() {
        return Ok(data);
    }
    let bad = |m: String| UnaryError::Status(Status::internal(format!("invalid response: {m}")));
    let (compressed, msg) = parse_unary(&data).map_err(bad)?;
    if !compressed {
        return Ok(msg);
    }
    let enc = head
        .headers
        .get("grpc-encoding")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    Codec::from_encoding(enc)
        .and_then(|c| c.decompress(&msg, MAX_RESPONSE))
        .map_err(|e| bad(e.to_string()))
}
