//! The `file` exporter: OTLP JSON lines, one `Export*ServiceRequest` per
//! line (the format of the Collector's file exporter, readable by its
//! `otlpjsonfile` receiver), with size-based rotation. The default
//! pipeline's embedded sink.

pub mod config;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{
    BuildContext, BuiltExporter, Delivered, ExportError, Exporter, ExporterFactory,
};
use causeway_core::config::{decode, ConfigError, DeliveryConfig};
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::ExporterError;
use config::{FileExporterConfig, RotationConfig};

/// Factory of the `file` exporter.
pub struct FileExporterFactory;

#[async_trait]
impl ExporterFactory for FileExporterFactory {
    fn kind(&self) -> &'static str {
        "file"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::WITH_PROFILES
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<FileExporterConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<FileExporterConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        _ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError> {
        let cfg: FileExporterConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let mut delivery = DeliveryConfig::default();
        // One writer: concurrent consumers would only contend for the file lock.
        delivery.queue.num_consumers = 1;
        // No per-attempt timeout (as the Collector's file exporter): a
        // write goes on in its thread when its attempt is timed out, so a
        // retry would write the batch a second time. A starved or stopped
        // daemon (CI saw a batch of 1,000 lines twice) only writes late.
        delivery.timeout = std::time::Duration::ZERO;
        Ok(BuiltExporter {
            exporter: Arc::new(FileExporter::new(&cfg)?),
            delivery,
        })
    }
}

struct Sink {
    path: PathBuf,
    file: Option<File>,
    size: u64,
}

/// Where the last complete line of `file` (of `len` bytes) ends: just after
/// its last newline, 0 when it has none.
fn complete_len(file: &mut File, len: u64) -> std::io::Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut end = len;
    let mut buf = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let n = usize::try_from(end - start).unwrap_or(buf.len());
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

impl Sink {
    /// Open (creating) `path` for appending. A torn last line, left by a
    /// crash in the middle of a write, is moved aside to
    /// `<path>.torn-<unix millis>` and cut off: new lines never continue it.
    fn open(path: PathBuf) -> Result<Self, ExporterError> {
        let err = |source| ExporterError::File {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)
            .map_err(err)?;
        let mut size = file.metadata().map_err(err)?.len();
        if size > 0 {
            let whole = complete_len(&mut file, size).map_err(err)?;
            if whole < size {
                use std::io::{Read, Seek, SeekFrom};
                let mut torn = Vec::new();
                file.seek(SeekFrom::Start(whole)).map_err(err)?;
                file.read_to_end(&mut torn).map_err(err)?;
                let millis = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or(0);
                let aside = PathBuf::from(format!("{}.torn-{millis}", path.display()));
                std::fs::write(&aside, &torn).map_err(|source| ExporterError::File {
                    path: aside.display().to_string(),
                    source,
                })?;
                file.set_len(whole).map_err(err)?;
                file.sync_all().map_err(err)?;
                tracing::warn!(path = %path.display(), bytes = torn.len(), aside = %aside.display(), "The file ended in a torn line (a crash during a write): moved aside and cut off.");
                size = whole;
            }
        }
        Ok(Sink {
            path,
            file: Some(file),
            size,
        })
    }

    /// Append `line` and its newline in one write. A write that fails part
    /// way is cut back off, so a retry never lands after half a line.
    fn write_line(
        &mut self,
        line: &[u8],
        rotation: Option<&RotationConfig>,
    ) -> Result<(), ExporterError> {
        let err = |path: &Path| {
            let path = path.display().to_string();
            move |source| ExporterError::File { path, source }
        };
        if let Some(r) = rotation {
            let max = r.max_megabytes.saturating_mul(1 << 20);
            if self.size > 0 && self.size + line.len() as u64 > max {
                self.rotate(r)?;
            }
        }
        if self.file.is_none() {
            *self = Sink::open(self.path.clone())?;
        }
        let f = self
            .file
            .as_mut()
            .ok_or_else(|| ExporterError::Encode("file not open".into()))?;
        if let Err(e) = f.write_all(line) {
            if let Err(cut) = f.set_len(self.size) {
                // The next open moves the torn line aside.
                tracing::warn!(path = %self.path.display(), error = %cut, "Cannot cut back a line written in part.");
                self.file = None;
            }
            return Err(err(&self.path)(e));
        }
        self.size += line.len() as u64;
        Ok(())
    }

    /// `out.jsonl` → `out-<unix millis>.jsonl`, then prune the oldest backups.
    fn rotate(&mut self, r: &RotationConfig) -> Result<(), ExporterError> {
        let err = |path: &Path| {
            let path = path.display().to_string();
            move |source| ExporterError::File { path, source }
        };
        self.file = None;
        let stem = self
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let ext = self
            .path
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        let dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let mut n = 0;
        let mut target = dir.join(format!("{stem}-{millis}{ext}"));
        while target.exists() {
            n += 1;
            target = dir.join(format!("{stem}-{millis}.{n}{ext}"));
        }
        std::fs::rename(&self.path, &target).map_err(err(&self.path))?;
        if r.max_backups > 0 {
            let prefix = format!("{stem}-");
            let dir_read = if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir.clone()
            };
            let mut backups: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&dir_read)
                .map_err(err(&dir_read))?
                .filter_map(Result::ok)
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.starts_with(&prefix) && name.ends_with(&ext)
                })
                .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
                .collect();
            backups.sort();
            while backups.len() > r.max_backups {
                let (_, old) = backups.remove(0);
                std::fs::remove_file(&old).map_err(err(&old))?;
            }
        }
        *self = Sink::open(self.path.clone())?;
        Ok(())
    }
}

/// Writes batches as OTLP JSON lines.
pub struct FileExporter {
    sinks: Vec<Arc<Mutex<Sink>>>,
    per_signal: bool,
    rotation: Option<RotationConfig>,
}

impl FileExporter {
    /// Open (creating) the file or files.
    pub fn new(cfg: &FileExporterConfig) -> Result<Self, ExporterError> {
        let per_signal = cfg.path.contains("{signal}");
        let sinks = if per_signal {
            Signal::ALL
                .iter()
                .map(|s| {
                    Sink::open(PathBuf::from(cfg.path.replace("{signal}", s.as_str())))
                        .map(|x| Arc::new(Mutex::new(x)))
                })
                .collect::<Result<Vec<_>, _>>()?
        } else {
            vec![Arc::new(Mutex::new(Sink::open(PathBuf::from(&cfg.path))?))]
        };
        Ok(FileExporter {
            sinks,
            per_signal,
            rotation: cfg.rotation.clone(),
        })
    }
}

/// One OTLP JSON line for a batch, its newline included.
pub fn to_json_line(batch: &Batch) -> Result<Vec<u8>, ExporterError> {
    let enc = |e: causeway_core::CoreError| ExporterError::Encode(e.to_string());
    let json = |e: serde_json::Error| ExporterError::Encode(e.to_string());
    let mut line = match batch.signal() {
        Signal::Traces => {
            serde_json::to_vec(&batch.to_traces_request().map_err(enc)?).map_err(json)
        }
        Signal::Logs => serde_json::to_vec(&batch.to_logs_request().map_err(enc)?).map_err(json),
        Signal::Metrics => {
            serde_json::to_vec(&batch.to_metrics_request().map_err(enc)?).map_err(json)
        }
        Signal::Profiles => serde_json::to_vec(&profiles_json(batch).map_err(enc)?).map_err(json),
    }?;
    line.push(b'\n');
    Ok(line)
}

/// A profiles batch as OTLP JSON: the generated types write a link's ids
/// as byte arrays, OTLP JSON as hex (as the traces' ids).
pub fn profiles_json(batch: &Batch) -> Result<serde_json::Value, causeway_core::CoreError> {
    let Some(req) = batch.to_profiles_request()? else {
        return Ok(serde_json::Value::Null);
    };
    let mut v = serde_json::to_value(&req).unwrap_or_default();
    if let Some(links) = v
        .pointer_mut("/dictionary/linkTable")
        .and_then(serde_json::Value::as_array_mut)
    {
        for link in links {
            for key in ["traceId", "spanId"] {
                let Some(id) = link.get_mut(key) else {
                    continue;
                };
                if let Some(bytes) = id.as_array() {
                    let b: Vec<u8> = bytes
                        .iter()
                        .filter_map(|x| x.as_u64().and_then(|x| u8::try_from(x).ok()))
                        .collect();
                    *id = serde_json::Value::String(hex::encode(b));
                }
            }
        }
    }
    Ok(v)
}

#[async_trait]
impl Exporter for FileExporter {
    async fn export(&self, batch: &Batch) -> Result<Delivered, ExportError> {
        let line = to_json_line(batch).map_err(|e| ExportError::Permanent {
            source: Box::new(e),
        })?;
        let sink = self.sinks[if self.per_signal {
            batch.signal() as usize
        } else {
            0
        }]
        .clone();
        let rotation = self.rotation.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = sink
                .lock()
                .map_err(|_| ExporterError::Encode("file writer poisoned".into()))?;
            guard.write_line(&line, rotation.as_ref())
        })
        .await
        .map_err(|e| ExportError::Retryable {
            source: Box::new(e),
            retry_after: None,
        })?
        .map_err(|e| ExportError::Retryable {
            source: Box::new(e),
            retry_after: None,
        })?;
        Ok(Delivered::default())
    }

    async fn shutdown(&self) -> Result<(), BoxError> {
        // Every line was written whole at export: nothing is buffered.
        Ok(())
    }
}
