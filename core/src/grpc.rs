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
    }
}

/// The gRPC path of a signal's `Export` method.
pub fn export_path(signal: Signal) -> &'static str {
    match signal {
        Signal::Traces => "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        Signal::Logs => "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        Signal::Metrics => "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
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
