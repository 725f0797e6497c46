//! The data that travels between components.
//!
//! A [`Batch`] carries one signal. Its data is kept in the cheapest form that
//! the components touching it need: as received (one or more encoded OTLP
//! `Export*ServiceRequest` messages) until a component asks for the decoded
//! prost types. A forwarding pipeline therefore never decodes a span: an
//! `Export*ServiceRequest` is a single repeated field, so encoded requests
//! concatenate into a valid request.
//!
//! Profiles are the exception: an `ExportProfilesServiceRequest` carries a
//! dictionary its samples index into, so two requests do not concatenate.
//! A profiles batch stays one encoded request, never appended or split, and
//! is decoded only by whoever reads profiles (`to_profiles_request`).

use bytes::{Bytes, BytesMut};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::logs::v1::ResourceLogs;
use opentelemetry_proto::tonic::metrics::v1::{metric, ResourceMetrics};
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use prost::Message;

use crate::error::CoreError;

pub use crate::signal::{Signal, SignalSet};

/// The data of a batch, encoded or decoded.
#[derive(Debug, Clone)]
pub enum Data {
    /// Encoded `Export*ServiceRequest` messages, in order. Their concatenation
    /// is itself a valid request.
    Encoded(Vec<Bytes>),
    /// Decoded spans.
    Traces(Vec<ResourceSpans>),
    /// Decoded log records.
    Logs(Vec<ResourceLogs>),
    /// Decoded metrics.
    Metrics(Vec<ResourceMetrics>),
}

/// An acknowledgement: fires once every holder of a clone has dropped it,
/// telling the source whether all of them delivered. Receivers that must
/// not lose data (file tailing) advance their checkpoints only on it.
#[derive(Debug, Clone)]
pub struct Ack(std::sync::Arc<AckInner>);

#[derive(Debug)]
struct AckInner {
    failed: std::sync::atomic::AtomicBool,
    cancelled: std::sync::atomic::AtomicBool,
    tx: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<bool>>>,
}

impl Ack {
    /// A new acknowledgement and the receiver of its outcome (`true`: delivered).
    pub fn new() -> (Ack, tokio::sync::oneshot::Receiver<bool>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (
            Ack(std::sync::Arc::new(AckInner {
                failed: std::sync::atomic::AtomicBool::new(false),
                cancelled: std::sync::atomic::AtomicBool::new(false),
                tx: std::sync::Mutex::new(Some(tx)),
            })),
            rx,
        )
    }

    /// The source no longer wants this data delivered: it will read it
    /// again elsewhere (a Kafka partition revoked from this instance).
    /// Components that hold data back (tail sampling) drop what carries a
    /// cancelled acknowledgement instead of deciding on it.
    pub fn cancel(&self) {
        self.0
            .cancelled
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether [`Ack::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A handle that does not keep the acknowledgement from firing, to
    /// cancel it later if it is still pending.
    pub fn downgrade(&self) -> WeakAck {
        WeakAck(std::sync::Arc::downgrade(&self.0))
    }

    /// Whether two handles are the same acknowledgement.
    pub fn same(&self, other: &Ack) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }

    fn fail(&self) {
        self.0
            .failed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A handle on an [`Ack`] that does not hold it back.
#[derive(Debug, Clone)]
pub struct WeakAck(std::sync::Weak<AckInner>);

impl WeakAck {
    /// Cancel the acknowledgement if it has not fired yet (see [`Ack::cancel`]).
    pub fn cancel(&self) {
        if let Some(a) = self.0.upgrade() {
            a.cancelled.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl Drop for AckInner {
    fn drop(&mut self) {
        let tx = match self.tx.lock() {
            Ok(mut g) => g.take(),
            Err(p) => p.into_inner().take(),
        };
        if let Some(tx) = tx {
            // The source may have stopped listening; nothing to do then.
            tx.send(!self.failed.load(std::sync::atomic::Ordering::SeqCst))
                .ok();
        }
    }
}

/// A unit of work flowing through a pipeline: items of one signal.
#[derive(Debug, Clone)]
pub struct Batch {
    signal: Signal,
    items: usize,
    data: Data,
    acks: Vec<Ack>,
    holds: Vec<Hold>,
    compressed: Compressed,
    sent_zstd: SentZstd,
}

/// The zstd frames the senders compressed this batch's encoded parts into,
/// in order, while nothing has changed them: zstd data is one or more
/// frames (RFC 8878), so their concatenation is the batch compressed, and a
/// forwarding hop sends it without compressing again. `None` once any part
/// came without its frame or the data changed.
#[derive(Debug, Clone, Default)]
struct SentZstd(Option<Vec<Bytes>>);

impl SentZstd {
    fn join(&self) -> Option<Bytes> {
        self.0.as_deref().map(join)
    }
}

/// `parts` one after another: one part as it is, several in one copy.
fn join(parts: &[Bytes]) -> Bytes {
    match parts {
        [one] => one.clone(),
        _ => {
            let mut buf = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
            for p in parts {
                buf.extend_from_slice(p);
            }
            buf.freeze()
        }
    }
}

/// The batch's encoded request compressed, per codec, shared by every copy
/// of the batch: several exporters that send the same bytes with the same
/// codec compress them once. Any change to the batch starts a new cache.
#[derive(Debug, Clone, Default)]
struct Compressed(std::sync::Arc<[tokio::sync::OnceCell<Bytes>; 4]>);

impl Compressed {
    fn slot(
        &self,
        codec: crate::compress::Codec,
        transport: crate::compress::Transport,
    ) -> Option<&tokio::sync::OnceCell<Bytes>> {
        use crate::compress::{Codec, Transport};
        let i = match (codec, transport) {
            (Codec::Gzip, _) => 0,
            (Codec::Zstd, _) => 1,
            (Codec::Snappy, Transport::Http) => 2,
            (Codec::Snappy, Transport::Grpc) => 3,
            (Codec::None, _) => return None,
        };
        self.0.get(i)
    }
}

/// Something a batch keeps alive until every copy of it is gone (a memory
/// limiter permit: the bytes count against the budget while queued).
pub type Hold = std::sync::Arc<dyn std::any::Any + Send + Sync>;

impl Batch {
    /// A batch from one encoded request whose items were already counted
    /// (see [`crate::wire::scan`]).
    pub fn from_encoded(signal: Signal, bytes: Bytes, items: usize) -> Self {
        Batch {
            signal,
            items,
            data: Data::Encoded(vec![bytes]),
            acks: Vec::new(),
            holds: Vec::new(),
            compressed: Compressed::default(),
            sent_zstd: SentZstd::default(),
        }
    }

    /// A batch of decoded spans.
    pub fn from_traces(resource_spans: Vec<ResourceSpans>) -> Self {
        let items = count_spans(&resource_spans);
        Batch {
            signal: Signal::Traces,
            items,
            data: Data::Traces(resource_spans),
            acks: Vec::new(),
            holds: Vec::new(),
            compressed: Compressed::default(),
            sent_zstd: SentZstd::default(),
        }
    }

    /// A batch of decoded log records.
    pub fn from_logs(resource_logs: Vec<ResourceLogs>) -> Self {
        let items = count_logs(&resource_logs);
        Batch {
            signal: Signal::Logs,
            items,
            data: Data::Logs(resource_logs),
            acks: Vec::new(),
            holds: Vec::new(),
            compressed: Compressed::default(),
            sent_zstd: SentZstd::default(),
        }
    }

    /// A batch of decoded metrics.
    pub fn from_metrics(resource_metrics: Vec<ResourceMetrics>) -> Self {
        let items = count_data_points(&resource_metrics);
        Batch {
            signal: Signal::Metrics,
            items,
            data: Data::Metrics(resource_metrics),
            acks: Vec::new(),
            holds: Vec::new(),
            compressed: Compressed::default(),
            sent_zstd: SentZstd::default(),
        }
    }

    /// The zstd frame(s) the sender compressed this batch's one encoded
    /// request into, exactly as received (nothing repaired or changed since):
    /// an exporter sending zstd sends them instead of compressing again.
    pub fn with_sent_zstd(mut self, frames: Bytes) -> Self {
        self.sent_zstd = match &self.data {
            Data::Encoded(parts) if parts.len() == 1 => SentZstd(Some(vec![frames])),
            _ => SentZstd(None),
        };
        self
    }

    /// Attach an acknowledgement: it fires when every copy of this batch
    /// (and of batches it is merged into) has been delivered or given up.
    pub fn with_ack(mut self, ack: Ack) -> Self {
        self.acks.push(ack);
        self
    }

    /// The acknowledgements this batch carries (components that hold part
    /// of a batch back keep clones of them with what they hold).
    pub fn acks(&self) -> &[Ack] {
        &self.acks
    }

    /// Keep `hold` alive as long as this batch (or one it is merged into) is.
    pub fn with_hold(mut self, hold: Hold) -> Self {
        self.holds.push(hold);
        self
    }

    /// Mark every acknowledgement of this batch as failed (an exporter gave up).
    pub fn mark_failed(&self) {
        for a in &self.acks {
            a.fail();
        }
    }

    /// The signal this batch carries.
    pub fn signal(&self) -> Signal {
        self.signal
    }

    /// The number of items (spans, log records or data points).
    pub fn items(&self) -> usize {
        self.items
    }

    /// Whether the batch holds no item and no resource.
    pub fn is_empty(&self) -> bool {
        match &self.data {
            Data::Encoded(parts) => parts.iter().all(|p| p.is_empty()),
            Data::Traces(v) => v.is_empty(),
            Data::Logs(v) => v.is_empty(),
            Data::Metrics(v) => v.is_empty(),
        }
    }

    /// The data, as it is held now.
    pub fn data(&self) -> &Data {
        &self.data
    }

    /// The size in bytes of the encoded request (exact when encoded, computed otherwise).
    pub fn encoded_len(&self) -> usize {
        match &self.data {
            Data::Encoded(parts) => parts.iter().map(Bytes::len).sum(),
            Data::Traces(v) => v
                .iter()
                .map(|r| prost::encoding::message::encoded_len(1, r))
                .sum(),
            Data::Logs(v) => v
                .iter()
                .map(|r| prost::encoding::message::encoded_len(1, r))
                .sum(),
            Data::Metrics(v) => v
                .iter()
                .map(|r| prost::encoding::message::encoded_len(1, r))
                .sum(),
        }
    }

    /// The batch as one encoded `Export*ServiceRequest`. Encoded parts are
    /// concatenated (one copy, no decode); decoded data is encoded.
    pub fn to_encoded(&self) -> Bytes {
        match &self.data {
            Data::Encoded(parts) => join(parts),
            Data::Traces(v) => encode_traces(v),
            Data::Logs(v) => encode_logs(v),
            Data::Metrics(v) => encode_metrics(v),
        }
    }

    /// The encoded parts, without concatenating them (for writers that can
    /// send several buffers).
    pub fn encoded_parts(&self) -> Vec<Bytes> {
        match &self.data {
            Data::Encoded(parts) => parts.clone(),
            _ => vec![self.to_encoded()],
        }
    }

    /// The encoded request compressed with `codec` for `transport`,
    /// compressed on first use by this or any copy of this batch and shared
    /// by all of them. The work runs on the calling task: exporters with
    /// several consumers compress several batches at once.
    pub async fn compressed(
        &self,
        codec: crate::compress::Codec,
        transport: crate::compress::Transport,
    ) -> Result<Bytes, crate::compress::CompressError> {
        let make = || match self.sent_zstd.join() {
            Some(sent) if codec == crate::compress::Codec::Zstd => Ok(sent),
            _ => codec.compress(transport, &self.encoded_parts()),
        };
        match self.compressed.slot(codec, transport) {
            None => make(),
            Some(cell) => cell.get_or_try_init(|| async { make() }).await.cloned(),
        }
    }

    fn decode_in_place(&mut self) -> Result<(), CoreError> {
        self.compressed = Compressed::default();
        self.sent_zstd = SentZstd::default();
        let Data::Encoded(parts) = &self.data else {
            return Ok(());
        };
        let data = match self.signal {
            // No decoded form: profiles are read by `to_profiles_request`.
            Signal::Profiles => return Ok(()),
            Signal::Traces => {
                let mut all = Vec::new();
                for p in parts {
                    all.extend(ExportTraceServiceRequest::decode(p.clone())?.resource_spans);
                }
                Data::Traces(all)
            }
            Signal::Logs => {
                let mut all = Vec::new();
                for p in parts {
                    all.extend(ExportLogsServiceRequest::decode(p.clone())?.resource_logs);
                }
                Data::Logs(all)
            }
            Signal::Metrics => {
                let mut all = Vec::new();
                for p in parts {
                    all.extend(ExportMetricsServiceRequest::decode(p.clone())?.resource_metrics);
                }
                Data::Metrics(all)
            }
        };
        self.data = data;
        Ok(())
    }

    /// The decoded spans, decoding them on first use. `None` if this is not a traces batch.
    pub fn traces_mut(&mut self) -> Result<Option<&mut Vec<ResourceSpans>>, CoreError> {
        self.decode_in_place()?;
        Ok(match &mut self.data {
            Data::Traces(v) => Some(v),
            _ => None,
        })
    }

    /// The decoded log records, decoding them on first use.
    pub fn logs_mut(&mut self) -> Result<Option<&mut Vec<ResourceLogs>>, CoreError> {
        self.decode_in_place()?;
        Ok(match &mut self.data {
            Data::Logs(v) => Some(v),
            _ => None,
        })
    }

    /// The decoded metrics, decoding them on first use.
    pub fn metrics_mut(&mut self) -> Result<Option<&mut Vec<ResourceMetrics>>, CoreError> {
        self.decode_in_place()?;
        Ok(match &mut self.data {
            Data::Metrics(v) => Some(v),
            _ => None,
        })
    }

    /// A traces batch of `resource_spans` that shares this batch's
    /// acknowledgements and holds: each fires only once both batches (and
    /// their copies) are delivered. Used by processors that hold part of a
    /// batch back (e.g. until more evidence arrives).
    pub fn sibling_traces(&self, resource_spans: Vec<ResourceSpans>) -> Batch {
        let mut b = Batch::from_traces(resource_spans);
        b.acks = self.acks.clone();
        b.holds = self.holds.clone();
        b
    }

    /// Recount items after a component changed decoded data.
    pub fn recount(&mut self) {
        self.compressed = Compressed::default();
        self.sent_zstd = SentZstd::default();
        self.items = match &self.data {
            Data::Encoded(_) => self.items,
            Data::Traces(v) => count_spans(v),
            Data::Logs(v) => count_logs(v),
            Data::Metrics(v) => count_data_points(v),
        };
    }

    /// Split into batches of at most `max` items (spans, log records; for
    /// metrics, whole resources), each holding the acknowledgements and
    /// holds of the whole: the source hears back once every part is done.
    pub fn split_max(self, max: usize) -> Result<Vec<Batch>, CoreError> {
        if self.items <= max || max == 0 || self.signal == Signal::Profiles {
            return Ok(vec![self]);
        }
        let parts = crate::partition::chunks(self.signal, &self.to_encoded(), max)?;
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let items = match self.signal {
                Signal::Metrics => crate::wire::scan(self.signal, &p.bytes)?.items,
                _ => p.items,
            };
            let mut b = Batch::from_encoded(self.signal, Bytes::from(p.bytes), items);
            b.acks = self.acks.clone();
            b.holds = self.holds.clone();
            out.push(b);
        }
        Ok(out)
    }

    /// Append another batch of the same signal. Two encoded batches are
    /// joined without decoding; otherwise both are decoded.
    pub fn append(&mut self, mut other: Batch) -> Result<(), CoreError> {
        debug_assert_eq!(self.signal, other.signal);
        if self.signal == Signal::Profiles {
            // Each request's samples index its own dictionary.
            return Err(CoreError::Unmergeable(Signal::Profiles));
        }
        self.compressed = Compressed::default();
        self.sent_zstd = match (self.sent_zstd.0.take(), other.sent_zstd.0.take()) {
            (Some(mut a), Some(b)) => {
                a.extend(b);
                SentZstd(Some(a))
            }
            _ => SentZstd(None),
        };
        self.items += other.items;
        self.acks.append(&mut other.acks);
        self.holds.append(&mut other.holds);
        match (&mut self.data, other.data) {
            (Data::Encoded(a), Data::Encoded(b)) => a.extend(b),
            (Data::Traces(a), Data::Traces(b)) => a.extend(b),
            (Data::Logs(a), Data::Logs(b)) => a.extend(b),
            (Data::Metrics(a), Data::Metrics(b)) => a.extend(b),
            (_, data) => {
                let mut other = Batch {
                    signal: self.signal,
                    items: 0,
                    data,
                    acks: Vec::new(),
                    holds: Vec::new(),
                    compressed: Compressed::default(),
                    sent_zstd: SentZstd::default(),
                };
                self.decode_in_place()?;
                other.decode_in_place()?;
                match (&mut self.data, other.data) {
                    (Data::Traces(a), Data::Traces(b)) => a.extend(b),
                    (Data::Logs(a), Data::Logs(b)) => a.extend(b),
                    (Data::Metrics(a), Data::Metrics(b)) => a.extend(b),
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Decode into a full traces request (for exporters that write JSON).
    pub fn to_traces_request(&self) -> Result<ExportTraceServiceRequest, CoreError> {
        Ok(match &self.data {
            Data::Traces(v) => ExportTraceServiceRequest {
                resource_spans: v.clone(),
            },
            _ => ExportTraceServiceRequest::decode(self.to_encoded())?,
        })
    }

    /// Decode into a full logs request.
    pub fn to_logs_request(&self) -> Result<ExportLogsServiceRequest, CoreError> {
        Ok(match &self.data {
            Data::Logs(v) => ExportLogsServiceRequest {
                resource_logs: v.clone(),
            },
            _ => ExportLogsServiceRequest::decode(self.to_encoded())?,
        })
    }

    /// Decode into a full profiles request (`None` for another signal).
    pub fn to_profiles_request(&self) -> Result<Option<ExportProfilesServiceRequest>, CoreError> {
        if self.signal != Signal::Profiles {
            return Ok(None);
        }
        Ok(Some(ExportProfilesServiceRequest::decode(
            self.to_encoded(),
        )?))
    }

    /// Decode into a full metrics request.
    pub fn to_metrics_request(&self) -> Result<ExportMetricsServiceRequest, CoreError> {
        Ok(match &self.data {
            Data::Metrics(v) => ExportMetricsServiceRequest {
                resource_metrics: v.clone(),
            },
            _ => ExportMetricsServiceRequest::decode(self.to_encoded())?,
        })
    }
}

fn encode_traces(v: &[ResourceSpans]) -> Bytes {
    let mut buf = BytesMut::new();
    for rs in v {
        prost::encoding::message::encode(1, rs, &mut buf);
    }
    buf.freeze()
}

fn encode_logs(v: &[ResourceLogs]) -> Bytes {
    let mut buf = BytesMut::new();
    for rl in v {
        prost::encoding::message::encode(1, rl, &mut buf);
    }
    buf.freeze()
}

fn encode_metrics(v: &[ResourceMetrics]) -> Bytes {
    let mut buf = BytesMut::new();
    for rm in v {
        prost::encoding::message::encode(1, rm, &mut buf);
    }
    buf.freeze()
}

/// The number of spans.
pub fn count_spans(v: &[ResourceSpans]) -> usize {
    v.iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum()
}

/// The number of log records.
pub fn count_logs(v: &[ResourceLogs]) -> usize {
    v.iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len())
        .sum()
}

/// The number of metric data points.
pub fn count_data_points(v: &[ResourceMetrics]) -> usize {
    v.iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(metric::Data::Gauge(g)) => g.data_points.len(),
            Some(metric::Data::Sum(s)) => s.data_points.len(),
            Some(metric::Data::Histogram(h)) => h.data_points.len(),
            Some(metric::Data::ExponentialHistogram(h)) => h.data_points.len(),
            Some(metric::Data::Summary(s)) => s.data_points.len(),
            None => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_fires_when_every_copy_is_gone() {
        let (ack, mut rx) = Ack::new();
        let b = Batch::from_logs(vec![]).with_ack(ack);
        let copy = b.clone();
        let mut merged = Batch::from_logs(vec![]);
        merged.append(b).expect("append");
        assert!(rx.try_recv().is_err(), "still held");
        drop(copy);
        assert!(rx.try_recv().is_err(), "still held by the merged batch");
        drop(merged);
        assert_eq!(rx.try_recv(), Ok(true));

        let (ack, mut rx) = Ack::new();
        let b = Batch::from_logs(vec![]).with_ack(ack);
        let copy = b.clone();
        copy.mark_failed();
        drop(copy);
        drop(b);
        assert_eq!(rx.try_recv(), Ok(false), "one copy failed");
    }
}

#[cfg(test)]
mod compressed_tests {
    use super::*;
    use crate::compress::{Codec, Transport};

    #[tokio::test]
    async fn copies_of_a_batch_compress_once_and_a_change_starts_over() {
        let part = Bytes::from(vec![7u8; 100_000]);
        let a = Batch::from_encoded(Signal::Traces, part.clone(), 1);
        let b = a.clone();
        let ga = a
            .compressed(Codec::Gzip, Transport::Grpc)
            .await
            .expect("gzip");
        let gb = b
            .compressed(Codec::Gzip, Transport::Http)
            .await
            .expect("gzip");
        assert_eq!(
            ga.as_ptr(),
            gb.as_ptr(),
            "the second exporter reuses the bytes"
        );
        let za = a
            .compressed(Codec::Zstd, Transport::Grpc)
            .await
            .expect("zstd");
        assert_ne!(za, ga, "one entry per codec");
        // Snappy is framed over gRPC and a block over HTTP: two entries.
        let sg = a
            .compressed(Codec::Snappy, Transport::Grpc)
            .await
            .expect("snappy");
        let sh = b
            .compressed(Codec::Snappy, Transport::Http)
            .await
            .expect("snappy");
        assert_ne!(sg, sh);
        let mut c = b.clone();
        c.append(Batch::from_encoded(Signal::Traces, part, 1))
            .expect("append");
        let gc = c
            .compressed(Codec::Gzip, Transport::Grpc)
            .await
            .expect("gzip");
        assert_ne!(gc.as_ptr(), ga.as_ptr(), "a changed batch compresses again");
        assert_eq!(
            Codec::Gzip.decompress(&gc, 1 << 20).expect("inflate").len(),
            200_000
        );
        let again = b
            .compressed(Codec::Gzip, Transport::Grpc)
            .await
            .expect("gzip");
        assert_eq!(
            again.as_ptr(),
            ga.as_ptr(),
            "the unchanged copies still share"
        );
    }

    /// Requests that came zstd-compressed leave as the senders' frames,
    /// joined, while nothing changes them; gzip is still compressed here.
    #[tokio::test]
    async fn the_senders_zstd_frames_are_the_batch_compressed_until_a_change() {
        let spans = |first: u64| {
            traces_request(
                (first..first + 50)
                    .map(|i| opentelemetry_proto::tonic::trace::v1::Span {
                        trace_id: (u128::from(i) + 1).to_be_bytes().to_vec(),
                        span_id: (i + 1).to_be_bytes().to_vec(),
                        name: format!("op-{i}"),
                        ..Default::default()
                    })
                    .collect(),
            )
        };
        let (p1, p2) = (spans(0), spans(50));
        // As a sender compresses: another level than causeway's own.
        let f1 = Bytes::from(zstd::bulk::compress(&p1, 5).expect("zstd"));
        let f2 = Bytes::from(zstd::bulk::compress(&p2, 5).expect("zstd"));
        let mut b = Batch::from_encoded(Signal::Traces, p1.clone(), 50).with_sent_zstd(f1.clone());
        b.append(Batch::from_encoded(Signal::Traces, p2.clone(), 50).with_sent_zstd(f2.clone()))
            .expect("append");
        let z = b
            .compressed(Codec::Zstd, Transport::Http)
            .await
            .expect("zstd");
        assert_eq!(z, [f1.clone(), f2.clone()].concat(), "the frames, joined");
        let whole = [p1.clone(), p2.clone()].concat();
        assert_eq!(Codec::Zstd.decompress(&z, 1 << 20).expect("inflate"), whole);
        // Other codecs compress the encoded parts.
        let g = b
            .compressed(Codec::Gzip, Transport::Grpc)
            .await
            .expect("gzip");
        assert_eq!(Codec::Gzip.decompress(&g, 1 << 20).expect("inflate"), whole);

        // A part without its frame: compressed here.
        let mut mixed = Batch::from_encoded(Signal::Traces, p1.clone(), 50).with_sent_zstd(f1);
        mixed
            .append(Batch::from_encoded(Signal::Traces, p2.clone(), 50))
            .expect("append");
        let z = mixed
            .compressed(Codec::Zstd, Transport::Grpc)
            .await
            .expect("zstd");
        assert!(!z.windows(f2.len()).any(|w| w == &f2[..]));
        assert_eq!(Codec::Zstd.decompress(&z, 1 << 20).expect("inflate"), whole);

        // A change to the spans: compressed here, with the change.
        let mut changed = b.clone();
        changed.traces_mut().expect("decode").expect("traces")[0].scope_spans[0].spans[0].name =
            "renamed".into();
        let z = changed
            .compressed(Codec::Zstd, Transport::Grpc)
            .await
            .expect("zstd");
        let inflated = Codec::Zstd.decompress(&z, 1 << 20).expect("inflate");
        let req = ExportTraceServiceRequest::decode(inflated).expect("decode");
        assert_eq!(
            req.resource_spans[0].scope_spans[0].spans[0].name,
            "renamed"
        );
        assert_eq!(count_spans(&req.resource_spans), 100);
    }
}

/// The attribute `k` = `v`.
pub fn attribute(
    k: &str,
    v: opentelemetry_proto::tonic::common::v1::any_value::Value,
) -> opentelemetry_proto::tonic::common::v1::KeyValue {
    opentelemetry_proto::tonic::common::v1::KeyValue {
        key: k.into(),
        value: Some(opentelemetry_proto::tonic::common::v1::AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

/// The string attribute `k` = `v`.
pub fn text_attribute(k: &str, v: &str) -> opentelemetry_proto::tonic::common::v1::KeyValue {
    attribute(
        k,
        opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(v.into()),
    )
}

/// The integer attribute `k` = `v`.
pub fn int_attribute(k: &str, v: i64) -> opentelemetry_proto::tonic::common::v1::KeyValue {
    attribute(
        k,
        opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(v),
    )
}

/// An OTLP traces request of `spans` under one resource and scope, encoded.
pub fn traces_request(spans: Vec<opentelemetry_proto::tonic::trace::v1::Span>) -> Bytes {
    use opentelemetry_proto::tonic::trace::v1::ScopeSpans;
    Bytes::from(
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec(),
    )
}
