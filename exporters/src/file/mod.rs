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
use std::io::{BufWriter, Write};
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
        SignalSet::ALL
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
        Ok(BuiltExporter {
            exporter: Arc::new(FileExporter::new(&cfg)?),
            delivery,
        })
    }
}

struct Sink {
    path: PathBuf,
    writer: Option<BufWriter<File>>,
    size: u64,
}

impl Sink {
    fn open(path: PathBuf) -> Result<Self, ExporterError> {
        let err = |source| ExporterError::File {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(err)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Sink {
            path,
            writer: Some(BufWriter::new(file)),
            size,
        })
    }

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
            if self.size > 0 && self.size + line.len() as u64 + 1 > max {
                self.rotate(r)?;
            }
        }
        let w = match self.writer.as_mut() {
            Some(w) => w,
            None => {
                *self = Sink::open(self.path.clone())?;
                self.writer
                    .as_mut()
                    .ok_or_else(|| ExporterError::Encode("file not open".into()))?
            }
        };
        w.write_all(line).map_err(err(&self.path))?;
        w.write_all(b"\n").map_err(err(&self.path))?;
        w.flush().map_err(err(&self.path))?;
        self.size += line.len() as u64 + 1;
        Ok(())
    }

    /// `out.jsonl` → `out-<unix millis>.jsonl`, then prune the oldest backups.
    fn rotate(&mut self, r: &RotationConfig) -> Result<(), ExporterError> {
        let err = |path: &Path| {
            let path = path.display().to_string();
            move |source| ExporterError::File { path, source }
        };
        if let Some(mut w) = self.writer.take() {
            w.flush().map_err(err(&self.path))?;
        }
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

/// One OTLP JSON line for a batch.
pub fn to_json_line(batch: &Batch) -> Result<Vec<u8>, ExporterError> {
    let enc = |e: causeway_core::CoreError| ExporterError::Encode(e.to_string());
    let json = |e: serde_json::Error| ExporterError::Encode(e.to_string());
    match batch.signal() {
        Signal::Traces => {
            serde_json::to_vec(&batch.to_traces_request().map_err(enc)?).map_err(json)
        }
        Signal::Logs => serde_json::to_vec(&batch.to_logs_request().map_err(enc)?).map_err(json),
        Signal::Metrics => {
            serde_json::to_vec(&batch.to_metrics_request().map_err(enc)?).map_err(json)
        }
    }
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
        for s in &self.sinks {
            if let Ok(mut g) = s.lock() {
                if let Some(w) = g.writer.as_mut() {
                    w.flush()?;
                }
            }
        }
        Ok(())
    }
}
