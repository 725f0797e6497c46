//! The `gateway_log` receiver: tails API-gateway / ingress access logs
//! (JSON, Envoy, NGINX, regex) and turns each line into an OTLP log record
//! with `trace_id`/`span_id` set and the gateway's fields as attributes, so
//! they can be joined with traces and exported to Loki.
//!
//! Nothing is lost: files are followed across rename and copy-truncate
//! rotation by fingerprint and inode, and read offsets are checkpointed
//! (write, fsync, rename) only once the lines were **delivered** by every
//! exporter (end-to-end acknowledgement). The checkpoint is rewritten
//! (atomically, by rename) after every delivered batch and fsynced at most
//! once a second. After a kill -9, at most `max_inflight_batches + 1`
//! batches of `max_batch_lines` lines are read again (those in flight, and
//! the one delivered while the checkpoint was being written); after a
//! machine crash, add the lines delivered in the last second. Nothing is skipped.
//! A backup compressed before it was read to its end (gzip, zstd, xz,
//! bzip2, told by their magic) is read from where its content was left,
//! decompressed as a stream.

mod backups;
pub mod config;
mod packed;
pub mod parse;
#[cfg(test)]
mod preset_tests;
pub mod presets;
mod tail;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, Receiver, ReceiverFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::telemetry::{Counter, Gauge};
use causeway_core::topology::Output;
use causeway_core::wire;
use causeway_core::{Ack, Batch, BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use config::{FormatName, GatewayLogConfig, StartAt};
use parse::{Canon, Format, KeyMap};
use tail::{Checkpoint, TailConfig, Tailer};

causeway_core::metrics! {
    /// Gateway log lines read, by outcome.
    pub Lines: counter = "causeway_gateway_log_lines_total";
    /// Files followed by a gateway_log receiver.
    pub OpenFiles: gauge = "causeway_gateway_log_open_files";
    /// Times a gateway_log receiver read its files again from the checkpoint, after an exporter gave up on lines.
    pub Rereads: counter = "causeway_gateway_log_rereads_total";
    /// Gateway log lines read from compressed backups (rotated and compressed before they were read to their end).
    pub CompressedLines: counter = "causeway_gateway_log_compressed_lines_total";
    /// Compressed backups found by a gateway_log receiver, by outcome (resumed, new, skipped, corrupt) and format.
    pub Backups: counter = "causeway_gateway_log_backups_total";
    /// Files whose unread lines were on disk and could no longer be read by a gateway_log receiver, by reason.
    pub Lost: counter = "causeway_gateway_log_files_lost_total";
}

/// Factory of the `gateway_log` receiver.
pub struct GatewayLogFactory;

#[async_trait]
impl ReceiverFactory for GatewayLogFactory {
    fn kind(&self) -> &'static str {
        "gateway_log"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Logs)
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<GatewayLogConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<GatewayLogConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Receiver>, BoxError> {
        let cfg: GatewayLogConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let id = ctx.id.to_string();
        let checkpoint = cfg.storage.as_ref().map(|d| {
            PathBuf::from(d).join(format!("gateway_log-{}.json", id.replace(['/', '\\'], "_")))
        });
        let (restored, problem) = match &checkpoint {
            Some(p) => tail::load_checkpoints(p),
            None => (Vec::new(), None),
        };
        if let Some(problem) = problem {
            tracing::warn!(receiver = %id, %problem, "Checkpoint not loaded; files start by start_at.");
        }
        let format = build_format(&cfg)?;
        let tail_cfg = TailConfig {
            include: cfg.include.clone(),
            backups: backups::patterns(&cfg.include, &cfg.logrotate_configs),
            exclude: cfg
                .exclude
                .iter()
                .filter_map(|p| glob::Pattern::new(p).ok())
                .collect(),
            start_at_end: cfg.start_at == StartAt::End,
            close_idle: Duration::from_secs(1),
            max_line: cfg.max_line_bytes.0 as usize,
            fp_size: cfg.fingerprint_size.0 as usize,
            max_held: cfg.max_held_files,
        };
        let lines = |outcome: &str| {
            ctx.telemetry
                .counter(Lines, &[("component", &id), ("outcome", outcome)])
        };
        let resource = Resource {
            attributes: cfg.resource.iter().map(|(k, v)| kv(k, v)).collect(),
            ..Default::default()
        };
        let scope = InstrumentationScope {
            name: "causeway.gateway_log".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        };
        let mut envelope = Envelope {
            resource: Vec::new(),
            scope: Vec::new(),
        };
        prost::encoding::message::encode(1, &resource, &mut envelope.resource);
        prost::encoding::message::encode(1, &scope, &mut envelope.scope);
        Ok(Box::new(GatewayLogReceiver {
            parsed: lines("parsed"),
            bad: lines("bad"),
            too_long: lines("too_long"),
            rereads: ctx.telemetry.counter(Rereads, &[("component", &id)]),
            compressed_lines: ctx
                .telemetry
                .counter(CompressedLines, &[("component", &id)]),
            telemetry: ctx.telemetry.clone(),
            open_files: ctx.telemetry.gauge(OpenFiles, &[("component", &id)]),
            tailer: Some(Tailer::new(tail_cfg, restored)),
            format: std::sync::Arc::new(format),
            envelope: std::sync::Arc::new(envelope),
            checkpoint,
            limiter: causeway_core::memory::MemoryLimiter::shared(&ctx.shared),
            id,
            cfg,
        }))
    }
}

use causeway_core::model::text_attribute as kv;

pub(crate) fn build_format(cfg: &GatewayLogConfig) -> Result<Format, BoxError> {
    let overrides: Vec<(Canon, String)> = cfg
        .fields
        .iter()
        .filter_map(|(k, v)| Some((Canon::from_name(k)?, v.clone())))
        .collect();
    use presets as p;
    let json = |preset| Format::Json(KeyMap::with_preset(preset, &overrides));
    let re = |r: &str| regex::Regex::new(r);
    Ok(match cfg.format {
        FormatName::Json => json(&[]),
        FormatName::Envoy => Format::Envoy(KeyMap::with_preset(p::ENVOY_JSON, &overrides)),
        FormatName::EnvoyText => Format::Regex(re(p::ENVOY_TEXT)?),
        FormatName::Istio => Format::Regex(re(p::ISTIO_TEXT)?),
        FormatName::Nginx => Format::Nginx(KeyMap::new(&overrides)),
        FormatName::IngressNginx => Format::IngressNginx(
            KeyMap::with_preset(p::INGRESS_NGINX_JSON, &overrides),
            re(p::INGRESS_NGINX_TEXT)?,
        ),
        FormatName::Kong => json(p::KONG),
        FormatName::Apisix => json(p::APISIX),
        FormatName::Traefik => json(p::TRAEFIK),
        FormatName::AwsAlb => Format::AwsAlb(re(p::AWS_ALB)?),
        FormatName::GcpLb => json(p::GCP_LB),
        FormatName::Regex => Format::Regex(re(cfg.regex.as_deref().unwrap_or(""))?),
    })
}

struct GatewayLogReceiver {
    id: String,
    cfg: GatewayLogConfig,
    tailer: Option<Tailer>,
    format: std::sync::Arc<Format>,
    envelope: std::sync::Arc<Envelope>,
    checkpoint: Option<PathBuf>,
    parsed: Counter,
    bad: Counter,
    too_long: Counter,
    open_files: Gauge,
    /// Lines read from compressed backups.
    compressed_lines: Counter,
    /// For the counters by outcome and reason, made as they occur.
    telemetry: causeway_core::telemetry::registry::Registry,
    /// Times the files were read again from the checkpoint after an exporter gave up.
    rereads: Counter,
    /// `service.memory_limiter`: reading pauses (nothing is lost) while memory is over its soft limit.
    limiter: Option<std::sync::Arc<causeway_core::memory::MemoryLimiter>>,
}

struct InFlight {
    done: oneshot::Receiver<bool>,
    /// The outcome, once awaited (a oneshot gives it only once).
    outcome: Option<bool>,
    /// Per file: offset just after the last line of this batch.
    ends: Vec<(u64, u64)>,
}

/// Parsed records (one encoded `ExportLogsServiceRequest`) and bad lines of
/// one chunk, built on the blocking pool.
struct Parsed {
    request: Vec<u8>,
    records: usize,
    ends: Vec<(u64, u64)>,
    bad: Vec<(u64, u64, String, Vec<u8>)>,
    too_long: u64,
}

/// The encoded `resource` field of `ResourceLogs` and `scope` field of `ScopeLogs`.
struct Envelope {
    resource: Vec<u8>,
    scope: Vec<u8>,
}

fn parse_chunk(format: &Format, envelope: &Envelope, lines: Vec<tail::Line>) -> Parsed {
    let observed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut out = Parsed {
        request: Vec::new(),
        records: 0,
        ends: Vec::new(),
        bad: Vec::new(),
        too_long: 0,
    };
    let mut scope_logs = Vec::with_capacity(lines.len() * 640);
    scope_logs.extend_from_slice(&envelope.scope);
    let mut rec = Vec::with_capacity(1024);
    let mut ends: HashMap<u64, u64> = HashMap::new();
    for l in lines {
        let e = ends.entry(l.file).or_insert(0);
        *e = (*e).max(l.end);
        if l.too_long {
            out.too_long += 1;
            out.bad.push((
                l.file,
                l.offset,
                "line longer than max_line_bytes; cut and skipped".into(),
                l.bytes,
            ));
            continue;
        }
        let text = match std::str::from_utf8(&l.bytes) {
            Ok(t) => t,
            Err(e) => {
                out.bad
                    .push((l.file, l.offset, format!("not UTF-8: {e}"), l.bytes));
                continue;
            }
        };
        if text.trim().is_empty() {
            continue;
        }
        match format.parse(text) {
            Ok(f) => {
                rec.clear();
                parse::encode_record(text, &f, observed, &mut rec);
                wire::put_len_prefix(&mut scope_logs, 2, rec.len());
                scope_logs.extend_from_slice(&rec);
                out.records += 1;
            }
            Err(e) => out.bad.push((l.file, l.offset, e.0, l.bytes)),
        }
    }
    out.ends = ends.into_iter().collect();
    if out.records > 0 {
        let resource_logs = envelope.resource.len() + wire::len_field_size(scope_logs.len());
        let mut req = Vec::with_capacity(wire::len_field_size(resource_logs));
        wire::put_len_prefix(&mut req, 1, resource_logs);
        req.extend_from_slice(&envelope.resource);
        wire::put_len_prefix(&mut req, 2, scope_logs.len());
        req.extend_from_slice(&scope_logs);
        out.request = req;
    }
    out
}

impl GatewayLogReceiver {
    /// Count and log what happened to compressed backups and unread files.
    fn account(&self, events: tail::Events) {
        self.compressed_lines.add(events.packed_lines);
        for (outcome, file, format) in events.backups {
            self.telemetry
                .counter(
                    Backups,
                    &[
                        ("component", &self.id),
                        ("outcome", outcome),
                        ("format", format),
                    ],
                )
                .add(1);
            match outcome {
                "corrupt" => {
                    tracing::error!(receiver = %self.id, %file, %format, %outcome, "Compressed backup not read.")
                }
                _ => {
                    tracing::debug!(receiver = %self.id, %file, %format, %outcome, "Compressed backup found.")
                }
            }
        }
        for (reason, file, detail) in events.lost {
            self.telemetry
                .counter(Lost, &[("component", &self.id), ("reason", reason)])
                .add(1);
            tracing::error!(receiver = %self.id, %file, %reason, %detail, "Gateway log lines lost.");
        }
    }

    fn report_bad(&self, tailer: &Tailer, bad: &[(u64, u64, String, Vec<u8>)]) {
        for (i, (file, offset, reason, bytes)) in bad.iter().enumerate() {
            let path = tailer.identity(*file).map(|x| x.1).unwrap_or_default();
            if i < 20 {
                tracing::warn!(receiver = %self.id, file = %path, offset, reason = %reason, "Bad gateway log line skipped.");
            } else if i == 20 {
                tracing::warn!(receiver = %self.id, more = bad.len() - 20, "More bad gateway log lines in this read.");
            }
            if let Some(dl) = &self.cfg.dead_letter {
                let entry = serde_json::json!({
                    "receiver": self.id, "file": path, "offset": offset, "reason": reason,
                    "line": String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]),
                });
                let written = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dl)
                    .and_then(|mut f| writeln!(f, "{entry}"));
                if let Err(error) = written {
                    tracing::warn!(receiver = %self.id, dead_letter = %dl, %error, "Cannot write the dead-letter file.");
                }
            }
        }
    }

    /// An exporter gave up on lines: rewind every file to its checkpoint,
    /// pause `redeliver_delay`, and read on from there (at least once: lines
    /// of batches after the failed one may be delivered twice). `false`
    /// on shutdown.
    async fn reread(
        &self,
        tailer: &mut Tailer,
        inflight: &mut VecDeque<InFlight>,
        committed: &HashMap<u64, Checkpoint>,
        shutdown: &CancellationToken,
    ) -> bool {
        inflight.clear();
        self.rereads.add(1);
        for (id, cp) in committed {
            if !tailer.rewind(*id, cp.offset) {
                tracing::error!(receiver = %self.id, file = %cp.path, offset = cp.offset, "Cannot read a file again from its checkpoint (truncated or closed since); lines after it an exporter gave up on are lost.");
            }
        }
        let delay = self.cfg.redeliver_delay.get();
        tracing::error!(receiver = %self.id, delay = ?delay, files = committed.len(), "An exporter gave up on gateway log lines; the checkpoint stays, and the files are read again from it after a pause.");
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            _ = shutdown.cancelled() => false,
        }
    }

    /// Write the checkpoint (atomically; fsynced at most once a second and at exit).
    fn save(
        &self,
        committed: &HashMap<u64, Checkpoint>,
        last_sync: &mut std::time::Instant,
        force: bool,
    ) {
        let Some(path) = &self.checkpoint else { return };
        let cps: Vec<Checkpoint> = committed.values().cloned().collect();
        let durable = force || last_sync.elapsed() >= Duration::from_secs(1);
        if durable {
            *last_sync = std::time::Instant::now();
        }
        if let Err(error) = tail::save_checkpoints(path, &cps, durable) {
            tracing::error!(receiver = %self.id, checkpoint = %path.display(), %error, "Cannot write the checkpoint.");
        }
    }
}

/// What [`commit_ready`] found.
#[derive(Default)]
struct Commit {
    /// A checkpoint moved.
    changed: bool,
    /// The batch at the front was given up on by an exporter: the
    /// checkpoints stop before it, and its lines must be read again.
    failed: bool,
}

/// Advance checkpoints over the delivered batches at the front of `inflight`, in order.
fn commit_ready(
    inflight: &mut VecDeque<InFlight>,
    tailer: &mut Tailer,
    committed: &mut HashMap<u64, Checkpoint>,
) -> Commit {
    let mut c = Commit::default();
    while let Some(front) = inflight.front_mut() {
        let outcome = match front.outcome {
            Some(o) => Ok(o),
            None => front.done.try_recv(),
        };
        match outcome {
            Ok(true) => {}
            Ok(false) => {
                c.failed = true;
                break;
            }
            Err(oneshot::error::TryRecvError::Empty) => break,
            // The acknowledgement is dropped without an outcome only when
            // nothing was sent (bad lines only): nothing to deliver.
            Err(oneshot::error::TryRecvError::Closed) => {}
        }
        if let Some(f) = inflight.pop_front() {
            for (file, end) in f.ends {
                tailer.set_delivered(file, end);
                if let Some((fp, path)) = tailer.identity(file) {
                    let e = committed.entry(file).or_insert(Checkpoint {
                        fingerprint: fp.clone(),
                        offset: 0,
                        path: path.clone(),
                    });
                    e.offset = e.offset.max(end);
                    e.fingerprint = fp;
                    e.path = path;
                    c.changed = true;
                }
            }
        }
    }
    c
}

#[async_trait]
impl Receiver for GatewayLogReceiver {
    async fn run(
        mut self: Box<Self>,
        out: Output,
        shutdown: CancellationToken,
    ) -> Result<(), BoxError> {
        let mut tailer = self.tailer.take().ok_or("gateway_log: already running")?;
        // New files are opened as they appear, apart from the reading below
        // (which waits for deliveries): see `tail::Holder`. The thread ends
        // with the tailer.
        let holder = tailer.holder();
        let every = self.cfg.poll_interval.get();
        std::thread::Builder::new()
            .name(format!("{}-hold", self.id))
            .spawn(move || {
                while holder.scan() {
                    std::thread::sleep(every);
                }
            })?;
        let mut inflight: VecDeque<InFlight> = VecDeque::new();
        let mut committed: HashMap<u64, Checkpoint> = HashMap::new();
        let mut last_sync = std::time::Instant::now();
        let mut tick = tokio::time::interval(self.cfg.poll_interval.get());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if !tailer.has_more() {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tick.tick() => {}
                }
            } else if shutdown.is_cancelled() {
                break;
            }
            let (t, (lines, errors)) = tokio::task::spawn_blocking(move || {
                let r = tailer.poll();
                (tailer, r)
            })
            .await?;
            tailer = t;
            for error in errors {
                tracing::warn!(receiver = %self.id, %error, "Cannot read a file.");
            }
            self.account(tailer.take_events());
            let mut changed = self.note_new_files(&mut tailer, &mut committed);
            committed.retain(|id, _| tailer.is_known(*id));
            self.open_files.set(tailer.open_files() as i64);
            let mut failed = match self
                .deliver(
                    lines,
                    &mut tailer,
                    &mut inflight,
                    &mut committed,
                    &mut last_sync,
                    &out,
                    &shutdown,
                )
                .await?
            {
                Some(failed) => failed,
                None => break,
            };
            if !failed {
                let c = commit_ready(&mut inflight, &mut tailer, &mut committed);
                changed |= c.changed;
                failed = c.failed;
            }
            if changed {
                self.save(&committed, &mut last_sync, false);
            }
            if failed
                && !self
                    .reread(&mut tailer, &mut inflight, &committed, &shutdown)
                    .await
            {
                break;
            }
        }
        drop(out);
        drain(&mut inflight, &mut tailer, &mut committed).await;
        self.save(&committed, &mut last_sync, true);
        Ok(())
    }
}

impl GatewayLogReceiver {
    /// Start checkpoints for the files the tailer began to follow; whether any did.
    fn note_new_files(
        &self,
        tailer: &mut tail::Tailer,
        committed: &mut HashMap<u64, Checkpoint>,
    ) -> bool {
        let mut changed = false;
        for (id, cp) in tailer.new_files() {
            let content = hex::decode(&cp.fingerprint)
                .map(|fp| tail::content_tag(&fp))
                .unwrap_or_default();
            tracing::debug!(receiver = %self.id, file = %cp.path, offset = cp.offset, id, %content, "Following a file.");
            committed.entry(id).or_insert(cp);
            changed = true;
        }
        changed
    }

    /// Parse and deliver a poll's lines in batches, committing offsets as
    /// batches are delivered and bounding what is in flight. `Some(failed)`:
    /// whether a delivery failed (what was read is read again); `None`:
    /// stopped.
    #[allow(clippy::too_many_arguments)]
    async fn deliver(
        &mut self,
        lines: Vec<tail::Line>,
        tailer: &mut tail::Tailer,
        inflight: &mut VecDeque<InFlight>,
        committed: &mut HashMap<u64, Checkpoint>,
        last_sync: &mut std::time::Instant,
        out: &Output,
        shutdown: &CancellationToken,
    ) -> Result<Option<bool>, BoxError> {
        let mut lines = lines.into_iter().peekable();
        let mut failed = false;
        while lines.peek().is_some() {
            let chunk: Vec<tail::Line> = lines.by_ref().take(self.cfg.max_batch_lines).collect();
            let (format, envelope) = (self.format.clone(), self.envelope.clone());
            let parsed =
                tokio::task::spawn_blocking(move || parse_chunk(&format, &envelope, chunk)).await?;
            self.parsed.add(parsed.records as u64);
            self.bad
                .add((parsed.bad.len() as u64).saturating_sub(parsed.too_long));
            self.too_long.add(parsed.too_long);
            self.report_bad(tailer, &parsed.bad);
            let (ack, done) = Ack::new();
            if parsed.records > 0 {
                let batch =
                    Batch::from_encoded(Signal::Logs, parsed.request.into(), parsed.records)
                        .with_ack(ack);
                // Over the memory limiter's soft limit: wait (the file keeps the data).
                if let Some(l) = &self.limiter {
                    tokio::select! {
                        _ = l.wait_below_soft() => {}
                        _ = shutdown.cancelled() => return Ok(None),
                    }
                }
                // Wait for room: the lines are already read, and the checkpoint
                // does not move until they are delivered.
                if !out.send_until_stopped(batch, shutdown).await {
                    return Ok(None);
                }
            } else {
                drop(ack); // only bad lines: nothing to deliver, the offsets may advance
            }
            inflight.push_back(InFlight {
                done,
                outcome: None,
                ends: parsed.ends,
            });
            let c = commit_ready(inflight, tailer, committed);
            if c.changed {
                self.save(committed, last_sync, false);
            }
            failed |= c.failed;
            // Bound what is in flight (and so what a crash can repeat).
            while !failed && inflight.len() >= self.cfg.max_inflight_batches {
                let Some(front) = inflight.front_mut() else {
                    break;
                };
                tokio::select! {
                    r = &mut front.done => front.outcome = Some(r.unwrap_or(true)),
                    _ = shutdown.cancelled() => return Ok(None),
                }
                let c = commit_ready(inflight, tailer, committed);
                if c.changed {
                    self.save(committed, last_sync, false);
                }
                failed |= c.failed;
            }
            if failed {
                break; // the rest of what was read is read again
            }
        }
        Ok(Some(failed))
    }
}

/// Give in-flight batches a moment to be delivered, so the checkpoint is current.
async fn drain(
    inflight: &mut VecDeque<InFlight>,
    tailer: &mut tail::Tailer,
    committed: &mut HashMap<u64, Checkpoint>,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while let Some(front) = inflight.front_mut() {
        match tokio::time::timeout_at(deadline, &mut front.done).await {
            Ok(r) => front.outcome = Some(r.unwrap_or(true)),
            Err(_) => break,
        }
        if commit_ready(inflight, tailer, committed).failed {
            break; // read again at the next start, from the checkpoint
        }
    }
}
