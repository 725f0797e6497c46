//! causeway: a telemetry pipeline daemon that tells an SRE why a request was slow.

use anyhow::Context as _;
use causeway_core::config::{self, Config};
use causeway_core::registry::Registry;
use causeway_core::telemetry;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// jemalloc, as Vector and TiKV ship: far fewer cycles per allocation than
/// glibc's malloc on the daemon's pattern (every held span its own block,
/// freed on another thread seconds later), with a background thread that
/// returns freed pages to the system so that RSS, which the memory limiter
/// reads, follows what is really in use. Measured in BENCHMARKS.md.
#[cfg(all(target_os = "linux", not(target_env = "msvc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod demo;
mod self_telemetry;
use self_telemetry::LogFormat;

#[derive(Parser)]
#[command(
    name = "causeway",
    version,
    about = "A telemetry pipeline daemon that tells an SRE why a request was slow."
)]
struct Cli {
    /// The pipeline file (default `pipeline.yaml`; `demo` has its own).
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
    /// Log level or filter (`info`, `debug`, `causeway_core=debug,info`); overrides service.telemetry.logs.level.
    #[arg(long, global = true, env = "CAUSEWAY_LOG")]
    log_level: Option<String>,
    /// Log format; overrides service.telemetry.logs.encoding.
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon (the default).
    Run,
    /// Check a pipeline file: exit 0 when valid, 1 with every error listed.
    Validate,
    /// Print the JSON Schema (draft-07) of the pipeline file, for editors'
    /// YAML language servers; with `--keys`, one component's key table.
    Schema {
        /// A component type's Markdown key table instead
        /// (`receivers/otlp`, `processors/correlate`, …).
        #[arg(long, value_name = "SECTION/TYPE")]
        keys: Option<String>,
    },
    /// Run the pipeline with a built-in traffic generator that injects faults,
    /// and print the root-cause summaries; everything stays in the file sink.
    Demo {
        /// How long to run.
        #[arg(long, default_value = "40")]
        seconds: u64,
        /// Where the demo writes its traces, logs and metrics (default: a new
        /// directory under the system's temporary directory).
        #[arg(long)]
        data: Option<PathBuf>,
    },
}

fn registry() -> Registry {
    let mut r = Registry::new();
    causeway_receivers::register(&mut r);
    causeway_processors::register(&mut r);
    causeway_exporters::register(&mut r);
    causeway_extensions::register(&mut r);
    r
}

/// `causeway schema`: the whole file's schema, or one component's key table.
fn schema(registry: &Registry, keys: Option<&str>) -> ExitCode {
    use causeway_core::registry::Kind;
    let Some(keys) = keys else {
        let schema = config::schema::pipeline_file(registry);
        println!(
            "{}",
            serde_json::to_string_pretty(&schema).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    };
    let kind = match keys.split_once('/') {
        Some(("receivers", ty)) => Some((Kind::Receiver, ty)),
        Some(("processors", ty)) => Some((Kind::Processor, ty)),
        Some(("exporters", ty)) => Some((Kind::Exporter, ty)),
        Some(("extensions", ty)) => Some((Kind::Extension, ty)),
        _ => None,
    };
    match kind.and_then(|(kind, ty)| config::schema::key_table(registry, kind, ty)) {
        Some(table) => {
            print!("{table}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "causeway schema --keys {keys}: no such component (write e.g. `receivers/otlp`)"
            );
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    // rustls' provider for every HTTP client (exporters, the daemon's own OTLP telemetry).
    causeway_core::tls::install_crypto_provider();
    let mut cli = Cli::parse();
    let registry = registry();
    if let Some(Command::Schema { keys }) = &cli.command {
        return schema(&registry, keys.as_deref());
    }
    // `demo` without --config runs its own pipeline, from any directory.
    let builtin = match (&mut cli.command, &cli.config) {
        (Some(Command::Demo { data, .. }), None) => {
            let dir = data.get_or_insert_with(demo::default_data_dir).clone();
            match demo::pipeline(&dir) {
                Ok(text) => Some(text),
                Err(e) => {
                    eprintln!("causeway demo: {e:#}");
                    return ExitCode::from(1);
                }
            }
        }
        _ => None,
    };
    let path = cli.config.clone().unwrap_or_else(|| {
        PathBuf::from(if builtin.is_some() {
            "the built-in demo pipeline"
        } else {
            "pipeline.yaml"
        })
    });
    let loaded = match &builtin {
        Some(text) => config::load_str(text, "(demo pipeline)", &registry, &|n| {
            std::env::var(n).ok()
        })
        .map_err(causeway_core::CoreError::InvalidConfig),
        None => config::load_file(&path, &registry),
    };
    let config = match loaded {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::from(1);
        }
    };
    match cli.command.as_ref().unwrap_or(&Command::Run) {
        Command::Validate => {
            for w in &config.warnings {
                eprintln!("warning: {w}");
            }
            println!(
                "{}: valid ({} pipelines)",
                path.display(),
                config.pipelines.len()
            );
            ExitCode::SUCCESS
        }
        Command::Schema { .. } => ExitCode::SUCCESS,
        Command::Run | Command::Demo { .. } => {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("cannot start the runtime: {e}");
                    return ExitCode::from(1);
                }
            };
            match runtime.block_on(run(&cli, &path, config, registry)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "causeway stopped.");
                    eprintln!("causeway: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

async fn run(cli: &Cli, path: &Path, config: Config, registry: Registry) -> anyhow::Result<()> {
    let demo = match &cli.command {
        Some(Command::Demo { seconds, .. }) => {
            Some((Duration::from_secs(*seconds), demo::endpoints(&config)?))
        }
        _ => None,
    };
    let tcfg = &config.file.service.telemetry;
    // The demo prints its findings on stdout: only warnings go to stderr.
    let level = cli
        .log_level
        .clone()
        .or_else(|| tcfg.logs.level.clone())
        .unwrap_or_else(|| if demo.is_some() { "warn" } else { "info" }.into());
    let format = cli
        .log_format
        .unwrap_or(match tcfg.logs.encoding.as_deref() {
            Some("json") => LogFormat::Json,
            _ => LogFormat::Text,
        });
    let mut providers = self_telemetry::init_logging(&level, format, tcfg)?;
    for w in &config.warnings {
        tracing::warn!(config = %path.display(), "{w}");
    }

    let metrics = telemetry::Registry::new();
    metrics.set_collector_names(tcfg.metrics.collector_names);
    let stop_telemetry = CancellationToken::new();
    let (page, server) = serve_telemetry(&config, &metrics, &stop_telemetry).await?;

    let running = causeway_core::topology::start(&config, &registry, &metrics)
        .await
        .context("cannot start the pipelines")?;
    providers.start_metrics(tcfg, &metrics)?;
    metrics.set_ready(true);
    tracing::info!(
        config = %path.display(),
        pipelines = config.pipelines.len(),
        version = env!("CARGO_PKG_VERSION"),
        "causeway started."
    );

    match demo {
        None => wait_for_signal().await?,
        Some((length, (http, logs))) => run_demo(length, http, &logs, page, path).await?,
    }
    metrics.set_ready(false);
    let timeout = config.file.service.shutdown_timeout.get();
    tracing::info!(
        timeout_ms = timeout.as_millis() as u64,
        "Shutting down: draining pipelines and flushing exporters."
    );
    if running.shutdown(timeout).await {
        tracing::info!("Shutdown complete; everything accepted was delivered or counted.");
    } else {
        tracing::error!(
            timeout_ms = timeout.as_millis() as u64,
            "Shutdown timeout reached; undelivered items were dropped (see causeway_exporter_send_failed_items_total)."
        );
    }
    stop_telemetry.cancel();
    if let Some(h) = server {
        if let Err(error) = h.await {
            tracing::warn!(%error, "Telemetry server task failed.");
        }
    }
    providers.shutdown();
    Ok(())
}

/// The telemetry server (`/metrics`, health, and the page when `ui` is
/// on), if the configuration serves one: the page's address and the
/// server's task.
async fn serve_telemetry(
    config: &Config,
    metrics: &telemetry::Registry,
    stop_telemetry: &CancellationToken,
) -> anyhow::Result<(
    Option<std::net::SocketAddr>,
    Option<tokio::task::JoinHandle<()>>,
)> {
    let tcfg = &config.file.service.telemetry;
    let mut page = None;
    let server = match &telemetry_address(config) {
        Some(addr) => {
            let auth = match &tcfg.metrics.auth {
                Some(a) => a
                    .authenticator()
                    .map_err(|e| anyhow::anyhow!("service.telemetry.metrics.auth: {e}"))?,
                None => None,
            };
            let (local, handle) = telemetry::serve_with(
                addr,
                config.file.service.telemetry.metrics.tls.as_ref(),
                metrics.clone(),
                stop_telemetry.clone(),
                telemetry::Serve {
                    ui: tcfg.ui,
                    auth,
                    connections: tcfg.metrics.connections,
                },
            )
            .await?;
            if tcfg.ui {
                page = Some(local);
                tracing::info!(address = %local, "Telemetry server listening (/ the page, /api, /metrics, /healthz, /readyz).");
            } else {
                tracing::info!(address = %local, "Telemetry server listening (/metrics, /healthz, /readyz).");
            }
            Some(handle)
        }
        None => None,
    };
    Ok((page, server))
}

/// The demo: `length` of generated traffic into `http`, the root causes
/// printed from `logs` as they are found, then a table of them.
async fn run_demo(
    length: Duration,
    http: String,
    logs: &Path,
    page: Option<std::net::SocketAddr>,
    path: &Path,
) -> anyhow::Result<()> {
    println!(
        "causeway demo: {}s of traffic with injected faults (rate limiting, open circuits, timeouts, consumer lag, cache misses, CPU saturation, slow TLS, queueing) through {path}.\nRoot causes as they are found:\n",
        length.as_secs(),
        path = path.display()
    );
    if let Some(local) = page {
        println!("Watch it on the page: http://{local}/\n");
    }
    let stop = CancellationToken::new();
    let stop_traffic = CancellationToken::new();
    let generator = {
        let stop = stop_traffic.clone();
        tokio::task::spawn_blocking(move || demo::generate(http, stop))
    };
    let printer = tokio::spawn(demo::print(logs.to_path_buf(), stop.clone()));
    tokio::select! {
        r = wait_for_signal() => r?,
        _ = tokio::time::sleep(length) => {}
    }
    // Traces still held for their decision are analysed within
    // decision_wait: give the last ones that long before stopping.
    stop_traffic.cancel();
    let (sent, faulty) = generator.await.unwrap_or((0, 0));
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.cancel();
    let found = printer.await.unwrap_or_default();
    let dir = logs
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    println!(
        "\n{sent} traces sent, {faulty} with an injected fault; {} root causes found:\n\n{}",
        found.total(),
        found.table()
    );
    println!(
        "Where the data went ({dir}):\n  traces.jsonl   every kept trace as OTLP JSON, rca.* attributes on its root span\n  logs.jsonl     one RCA log record per analysed trace (cause, culprit, evidence)\n  metrics.jsonl  causeway.rca.traces by cause and route, and the host's metrics"
    );
    Ok(())
}

/// Where `/metrics` is served: `service.telemetry.metrics` (`level: none`
/// disables it; a `pull` reader or `address` sets it), default 127.0.0.1:8888.
fn telemetry_address(config: &Config) -> Option<String> {
    let t = &config.file.service.telemetry;
    causeway_core::exposure::telemetry(&t.metrics, t.ui).map(|e| e.address)
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    tokio::select! {
        _ = term.recv() => tracing::info!(signal = "SIGTERM", "Signal received."),
        _ = int.recv() => tracing::info!(signal = "SIGINT", "Signal received."),
    }
    Ok(())
}
