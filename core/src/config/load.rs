//! Loading and validating a pipeline file.

use indexmap::IndexMap;
use serde_yaml::Value;
use std::path::Path;

use super::env::expand;
use super::locate::Locator;
use super::{deserialize_all, ComponentId, ConfigError, PipelineFile, PipelineId};
use crate::error::CoreError;
use crate::model::SignalSet;
use crate::registry::{Kind, Registry};

/// A pipeline, with its components resolved.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// Its id.
    pub id: PipelineId,
    /// Receivers, in the order listed.
    pub receivers: Vec<ComponentId>,
    /// Processors, in order.
    pub processors: Vec<ComponentId>,
    /// Exporters.
    pub exporters: Vec<ComponentId>,
}

/// A loaded, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The raw file, after substitution.
    pub file: PipelineFile,
    /// Receiver sections by id.
    pub receivers: IndexMap<ComponentId, Value>,
    /// Processor sections by id.
    pub processors: IndexMap<ComponentId, Value>,
    /// Exporter sections by id.
    pub exporters: IndexMap<ComponentId, Value>,
    /// Extensions to start (those listed in `service.extensions`), in order.
    pub extensions: IndexMap<ComponentId, Value>,
    /// The memory budget enforced at the receivers: the lowest of
    /// `service.memory_limiter` and the `memory_limiter` processors in use.
    pub memory_limiter: Option<crate::memory::MemoryLimiterConfig>,
    /// Pipelines in file order.
    pub pipelines: Vec<Pipeline>,
    /// Things that are allowed but probably mistakes (unused components).
    pub warnings: Vec<String>,
}

/// Load and validate a file, reading `${env:…}` from the process environment.
pub fn load_file(path: &Path, registry: &Registry) -> Result<Config, CoreError> {
    let text = std::fs::read_to_string(path).map_err(|source| CoreError::ReadConfig {
        path: path.to_path_buf(),
        source,
    })?;
    load_str(&text, &path.display().to_string(), registry, &|name| {
        std::env::var(name).ok()
    })
    .map_err(CoreError::InvalidConfig)
}

/// Load and validate a text; `source` names it in error locations.
pub fn load_str(
    text: &str,
    source: &str,
    registry: &Registry,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, Vec<ConfigError>> {
    let mut value = parse_yaml(text, source)?;
    let locator = Locator::new(text);
    let locate = |mut errors: Vec<ConfigError>| {
        for e in &mut errors {
            if e.location.is_none() {
                if let Some((line, col)) = locator.find(&e.path) {
                    e.location = Some(format!("{source}:{line}:{col}"));
                }
            }
        }
        errors
    };

    let mut errors = Vec::new();
    expand(&mut value, "", env, &mut errors);
    if !errors.is_empty() {
        return Err(locate(errors));
    }
    let file: PipelineFile = deserialize_all(value).map_err(locate)?;

    let receivers = check_section(Kind::Receiver, &file.receivers, registry, &mut errors);
    let processors = check_section(Kind::Processor, &file.processors, registry, &mut errors);
    let exporters = check_section(Kind::Exporter, &file.exporters, registry, &mut errors);
    check_section(Kind::Connector, &file.connectors, registry, &mut errors);
    let defined_extensions =
        check_section(Kind::Extension, &file.extensions, registry, &mut errors);

    service_errors(&file, &mut errors);
    let extensions = listed_extensions(&file, &defined_extensions, &mut errors);

    authenticator_errors(&exporters, &extensions, registry, &mut errors);

    let pipelines = resolve_pipelines(
        &file,
        (&receivers, &processors, &exporters),
        registry,
        &mut errors,
    );

    let (exposed, insecure) = exposure(&file, &extensions, registry);
    errors.extend(exposed);

    if !errors.is_empty() {
        return Err(locate(errors));
    }

    let mut warnings = extension_warnings(&defined_extensions, &extensions, registry);
    warnings.extend(insecure);
    let memory_limiter = memory_budget(&file, &processors, &pipelines, registry, &mut warnings);
    warnings.extend(unused_warnings(
        (&receivers, &processors, &exporters),
        &pipelines,
        registry,
    ));
    warnings.extend(late_data_warnings(
        (&receivers, &processors),
        &pipelines,
        registry,
    ));

    Ok(Config {
        file,
        receivers,
        processors,
        exporters,
        extensions,
        memory_limiter,
        pipelines,
        warnings,
    })
}

/// The receivers, processors and exporters defined, by id.
type Sections<'a> = (
    &'a IndexMap<ComponentId, Value>,
    &'a IndexMap<ComponentId, Value>,
    &'a IndexMap<ComponentId, Value>,
);

/// The YAML of a config (empty: an empty map), or its syntax error with
/// where it is (and a hint when a line is indented with a tab).
fn parse_yaml(text: &str, source: &str) -> Result<Value, Vec<ConfigError>> {
    match serde_yaml::from_str(text) {
        Ok(Value::Null) => Ok(Value::Mapping(Default::default())),
        Ok(v) => Ok(v),
        Err(e) => {
            let mut err = ConfigError::new(
                "",
                format!("invalid YAML: {}", strip_location(&e.to_string())),
            );
            if let Some(loc) = e.location() {
                err.location = Some(format!("{source}:{}:{}", loc.line(), loc.column()));
            }
            // YAML forbids tabs in indentation; its parser says only that
            // something is unexpected.
            if let Some(n) = text
                .lines()
                .position(|l| l.trim_start_matches(' ').starts_with('\t'))
            {
                err.message.push_str(&format!(
                    " (line {} is indented with a tab: YAML indents with spaces only)",
                    n + 1
                ));
            }
            Err(vec![err])
        }
    }
}

/// The `service` section's own checks (telemetry auth and TLS, the memory limiter).
fn service_errors(file: &PipelineFile, errors: &mut Vec<ConfigError>) {
    if let Some(a) = &file.service.telemetry.metrics.auth {
        errors.extend(a.errors("service.telemetry.metrics.auth"));
    }
    if let Some(t) = &file.service.telemetry.metrics.tls {
        errors.extend(t.errors("service.telemetry.metrics.tls"));
    }
    if let Some(m) = &file.service.memory_limiter {
        errors.extend(
            m.errors()
                .into_iter()
                .map(|e| e.under("service.memory_limiter")),
        );
    }
}

/// `service.extensions`, each defined under `extensions` and listed once.
fn listed_extensions(
    file: &PipelineFile,
    defined: &IndexMap<ComponentId, Value>,
    errors: &mut Vec<ConfigError>,
) -> IndexMap<ComponentId, Value> {
    let mut extensions = IndexMap::new();
    for (i, ext) in file.service.extensions.iter().enumerate() {
        let path = format!("service.extensions[{i}]");
        match ext.parse::<ComponentId>() {
            Err(msg) => errors.push(ConfigError::new(path, msg)),
            Ok(id) => match defined.get(&id) {
                None => errors.push(ConfigError::new(
                    path,
                    format!("extension {ext:?} is not defined under `extensions`"),
                )),
                Some(_) if extensions.contains_key(&id) => {
                    errors.push(ConfigError::new(path, format!("{ext:?} is listed twice")))
                }
                Some(cfg) => {
                    extensions.insert(id, cfg.clone());
                }
            },
        }
    }

    extensions
}

/// `auth: {authenticator: id}` (at any depth: `protocol.otlp.auth` of the
/// load-balancing exporter), the Collector's way for an exporter to use an
/// authenticator extension: it must be one, and started.
fn authenticator_errors(
    exporters: &IndexMap<ComponentId, Value>,
    extensions: &IndexMap<ComponentId, Value>,
    registry: &Registry,
    errors: &mut Vec<ConfigError>,
) {
    for (id, cfg) in exporters {
        let mut refs = Vec::new();
        authenticators(cfg, &format!("exporters.{id}"), &mut refs);
        for (path, name) in refs {
            match name.parse::<ComponentId>() {
                Ok(ext) if extensions.contains_key(&ext) => {
                    if !registry
                        .extension(ext.kind())
                        .is_some_and(|f| f.authenticates())
                    {
                        errors.push(ConfigError::new(
                            path,
                            format!("extension {name:?} is not an authenticator (use bearertokenauth or basicauth)"),
                        ));
                    }
                }
                _ => errors.push(ConfigError::new(
                    path,
                    format!("{name:?} is not an extension listed in service.extensions"),
                )),
            }
        }
    }
}

/// The pipelines of `service.pipelines`, each component resolved to one
/// defined, carrying a signal of the pipeline, listed once.
fn resolve_pipelines(
    file: &PipelineFile,
    (receivers, processors, exporters): Sections<'_>,
    registry: &Registry,
    errors: &mut Vec<ConfigError>,
) -> Vec<Pipeline> {
    let mut pipelines = Vec::new();
    if file.service.pipelines.is_empty() {
        errors.push(ConfigError::new(
            "service.pipelines",
            "at least one pipeline is required",
        ));
    }
    for (pid, p) in &file.service.pipelines {
        let base = format!("service.pipelines.{pid}");
        let id = match PipelineId::parse(pid) {
            Ok(id) => id,
            Err(msg) => {
                errors.push(ConfigError::new(base, msg));
                continue;
            }
        };
        let l = Listing {
            base: &base,
            pid,
            id: &id,
            registry,
        };
        let r = l.resolve(Kind::Receiver, &p.receivers, receivers, true, errors);
        let pr = l.resolve(Kind::Processor, &p.processors, processors, false, errors);
        let ex = l.resolve(Kind::Exporter, &p.exporters, exporters, true, errors);
        pipelines.push(Pipeline {
            id,
            receivers: r,
            processors: pr,
            exporters: ex,
        });
    }

    pipelines
}

/// One pipeline's lists, resolved against the defined components.
struct Listing<'a> {
    /// `service.pipelines.<id>`.
    base: &'a str,
    pid: &'a str,
    id: &'a PipelineId,
    registry: &'a Registry,
}

impl Listing<'_> {
    /// A list of `kind` (its section's names) as component ids: each
    /// defined, listed once, taking the pipeline's signals (an exporter
    /// able to export each); every problem in `errors` at its path.
    fn resolve(
        &self,
        kind: Kind,
        list: &[String],
        known: &IndexMap<ComponentId, Value>,
        required: bool,
        errors: &mut Vec<ConfigError>,
    ) -> Vec<ComponentId> {
        let (base, pid, id, registry) = (self.base, self.pid, self.id, self.registry);
        let field = kind.section();
        if required && list.is_empty() {
            errors.push(ConfigError::new(
                format!("{base}.{field}"),
                format!("a pipeline needs at least one {}", kind.singular()),
            ));
        }
        let mut out = Vec::new();
        for (i, name) in list.iter().enumerate() {
            let path = format!("{base}.{field}[{i}]");
            let Ok(cid) = name.parse::<ComponentId>() else {
                errors.push(ConfigError::new(
                    path,
                    format!("invalid component id {name:?}"),
                ));
                continue;
            };
            if !known.contains_key(&cid) {
                let defined: Vec<String> = known.keys().map(ToString::to_string).collect();
                errors.push(ConfigError::new(
                    path,
                    format!(
                        "{} {name:?} is not defined under `{field}` (defined: [{}])",
                        kind.singular(),
                        defined.join(", ")
                    ),
                ));
                continue;
            }
            if out.contains(&cid) {
                errors.push(ConfigError::new(path, format!("{name:?} is listed twice")));
                continue;
            }
            let signals = match kind {
                Kind::Receiver => registry.receiver(cid.kind()).map(|f| f.signals()),
                Kind::Processor => registry.processor(cid.kind()).map(|f| f.signals()),
                Kind::Exporter => registry.exporter(cid.kind()).map(|f| f.signals()),
                _ => None,
            };
            if let Some(signals) = signals {
                if signals.intersect(id.signals).is_empty() {
                    errors.push(ConfigError::new(
                        path,
                        format!(
                            "{} {name:?} accepts {signals} but pipeline {pid:?} carries {}",
                            kind.singular(),
                            id.signals
                        ),
                    ));
                    continue;
                }
            }
            if let (Kind::Exporter, Some(f)) = (kind, registry.exporter(cid.kind())) {
                for signal in id.signals.iter() {
                    if let Some(why) = f.cannot_export(&known[&cid], signal) {
                        errors.push(ConfigError::new(
                                path.clone(),
                                format!(
                                    "exporter {name:?} cannot export the {signal} of pipeline {pid:?}: {why}"
                                ),
                            ));
                    }
                }
            }
            out.push(cid);
        }
        out
    }
}

/// Listeners that serve data beyond loopback need TLS and credentials:
/// the errors, and the warnings of those `insecure_expose` allows.
fn exposure(
    file: &PipelineFile,
    extensions: &IndexMap<ComponentId, Value>,
    registry: &Registry,
) -> (Vec<ConfigError>, Vec<String>) {
    let mut listeners: Vec<(String, crate::exposure::Exposed)> = Vec::new();
    if let Some(e) =
        crate::exposure::telemetry(&file.service.telemetry.metrics, file.service.telemetry.ui)
    {
        listeners.push((String::new(), e));
    }
    for (id, cfg) in extensions {
        if let Some(f) = registry.extension(id.kind()) {
            listeners.extend(
                f.exposes(cfg)
                    .into_iter()
                    .map(|e| (format!("extensions.{id}"), e)),
            );
        }
    }
    crate::exposure::check(&listeners, file.service.insecure_expose)
}

/// Extensions defined and not listed, and what each listed one warns of.
fn extension_warnings(
    defined_extensions: &IndexMap<ComponentId, Value>,
    extensions: &IndexMap<ComponentId, Value>,
    registry: &Registry,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for (id, cfg) in defined_extensions {
        match (extensions.get(id), registry.extension(id.kind())) {
            (None, _) => warnings.push(format!(
                "extension {id} is defined but not listed in service.extensions; it will not run"
            )),
            (Some(_), Some(f)) => warnings.extend(
                f.warnings(cfg)
                    .into_iter()
                    .map(|w| format!("extension {id}: {w}")),
            ),
            (Some(_), None) => {}
        }
    }
    warnings
}

/// Components no pipeline uses, and signals that reach no exporter.
fn unused_warnings(
    (receivers, processors, exporters): Sections<'_>,
    pipelines: &[Pipeline],
    registry: &Registry,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for (kind, ids) in [
        (Kind::Receiver, receivers.keys().collect::<Vec<_>>()),
        (Kind::Processor, processors.keys().collect()),
        (Kind::Exporter, exporters.keys().collect()),
    ] {
        for id in ids {
            let used = pipelines.iter().any(|p| match kind {
                Kind::Receiver => p.receivers.contains(id),
                Kind::Processor => p.processors.contains(id),
                _ => p.exporters.contains(id),
            });
            if !used {
                warnings.push(format!(
                    "{} {id} is defined but used by no pipeline; it will not run",
                    kind.singular()
                ));
            }
        }
    }
    for p in pipelines {
        let exported = p.exporters.iter().fold(SignalSet::NONE, |acc, e| {
            let s = registry
                .exporter(e.kind())
                .map_or(SignalSet::NONE, |f| f.signals());
            SignalSet::of(&acc.iter().chain(s.iter()).collect::<Vec<_>>())
        });
        for r in &p.receivers {
            let produced = registry
                .receiver(r.kind())
                .map_or(SignalSet::NONE, |f| f.signals());
            for s in produced.intersect(p.id.signals).iter() {
                if !exported.contains(s) {
                    warnings.push(format!(
                        "pipeline {}: {s} from receiver {r} reach no exporter and will be dropped",
                        p.id
                    ));
                }
            }
        }
    }

    warnings
}

/// Every `auth.authenticator` under `v`, with its key path.
fn authenticators(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    let Value::Mapping(m) = v else { return };
    for (k, child) in m {
        let Some(k) = k.as_str() else { continue };
        let p = format!("{path}.{k}");
        if k == "auth" {
            if let Some(name) = child.get("authenticator").and_then(Value::as_str) {
                out.push((format!("{p}.authenticator"), name.to_string()));
            }
        } else {
            authenticators(child, &p, out);
        }
    }
}

/// A processor that waits for late data (profiles, say) less long than a
/// receiver of one of its pipelines takes to deliver it: what arrives
/// after the wait explains nothing.
fn late_data_warnings(
    (receivers, processors): (&IndexMap<ComponentId, Value>, &IndexMap<ComponentId, Value>),
    pipelines: &[Pipeline],
    registry: &Registry,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for p in pipelines {
        for pid in &p.processors {
            let Some((wait, key)) = processors
                .get(pid)
                .and_then(|cfg| registry.processor(pid.kind())?.late_data_wait(cfg))
            else {
                continue;
            };
            for rid in &p.receivers {
                let Some(lag) = receivers
                    .get(rid)
                    .and_then(|cfg| registry.receiver(rid.kind())?.delivery_lag(cfg))
                else {
                    continue;
                };
                if lag > wait {
                    let w = format!(
                        "receiver {rid} delivers what it covers up to {} after it; processor {pid} waits at most {} for it (`{key}`): traces analysed before it arrives are not explained by it. Set `{key}` to at least {}",
                        humantime::format_duration(lag),
                        humantime::format_duration(wait),
                        humantime::format_duration(lag)
                    );
                    if !warnings.contains(&w) {
                        warnings.push(w);
                    }
                }
            }
        }
    }
    warnings
}

/// The one memory budget of the process: the lowest limit asked for by
/// `service.memory_limiter` and the processors in use (a Collector config
/// may carry a `memory_limiter` processor in every pipeline); when none is,
/// [`crate::memory::DEFAULT_SHARE_PERCENT`] of the memory available.
fn memory_budget(
    file: &PipelineFile,
    processors: &IndexMap<ComponentId, Value>,
    pipelines: &[Pipeline],
    registry: &Registry,
    warnings: &mut Vec<String>,
) -> Option<crate::memory::MemoryLimiterConfig> {
    let mut asked: Vec<(String, crate::memory::MemoryLimiterConfig)> = Vec::new();
    if let Some(m) = &file.service.memory_limiter {
        asked.push(("service.memory_limiter".into(), m.clone()));
    }
    for (id, cfg) in processors {
        if !pipelines.iter().any(|p| p.processors.contains(id)) {
            continue;
        }
        if let Some(m) = registry.processor(id.kind()).and_then(|f| f.admission(cfg)) {
            asked.push((format!("processor {id}"), m));
        }
    }
    let Some(lowest) = asked.iter().min_by_key(|(_, m)| m.limit.0).cloned() else {
        // None configured: a share of the memory available, so that every
        // receiver is under a budget by default (README, "Limits").
        return crate::memory::default_budget(crate::memory::available_memory());
    };
    if asked.iter().any(|(_, m)| m.limit.0 != lowest.1.limit.0) {
        warnings.push(format!(
            "several memory limits are set ({}); causeway enforces one for the whole process, at the receivers: the lowest, from {}",
            asked
                .iter()
                .map(|(w, m)| format!("{w}: {}", m.limit))
                .collect::<Vec<_>>()
                .join(", "),
            lowest.0
        ));
    }
    Some(lowest.1)
}

fn check_section(
    kind: Kind,
    section: &IndexMap<String, Value>,
    registry: &Registry,
    errors: &mut Vec<ConfigError>,
) -> IndexMap<ComponentId, Value> {
    let mut out = IndexMap::new();
    for (name, cfg) in section {
        let path = format!("{}.{name}", kind.section());
        let id = match name.parse::<ComponentId>() {
            Ok(id) => id,
            Err(msg) => {
                errors.push(ConfigError::new(path, msg));
                continue;
            }
        };
        let validated = match kind {
            Kind::Receiver => registry.receiver(id.kind()).map(|f| f.validate(cfg)),
            Kind::Processor => registry.processor(id.kind()).map(|f| f.validate(cfg)),
            Kind::Exporter => registry.exporter(id.kind()).map(|f| f.validate(cfg)),
            Kind::Extension => registry.extension(id.kind()).map(|f| f.validate(cfg)),
            Kind::Connector => None,
        };
        match validated {
            None => {
                let valid = registry.kinds(kind);
                let list = if valid.is_empty() {
                    format!("no {} types are available in this build", kind.singular())
                } else {
                    format!("valid values: [{}]", valid.join(", "))
                };
                let instead = registry
                    .instead(kind, id.kind())
                    .map(|h| format!("; {h}"))
                    .unwrap_or_default();
                errors.push(ConfigError::new(
                    path,
                    format!(
                        "unknown type {:?} for id {name:?} ({list}){instead}",
                        id.kind()
                    ),
                ));
            }
            Some(Err(errs)) => errors.extend(errs.into_iter().map(|e| e.under(&path))),
            Some(Ok(())) => {}
        }
        // Inserted even when invalid, so pipelines naming it do not get a second,
        // misleading "not defined" error.
        out.insert(id, cfg.clone());
    }
    out
}

fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::{
        BuildContext, BuiltExporter, ExporterFactory, Receiver, ReceiverFactory,
    };
    use crate::error::BoxError;
    use crate::model::Signal;
    use async_trait::async_trait;

    struct MetricsOnly;
    #[async_trait]
    impl ReceiverFactory for MetricsOnly {
        fn schema(&self, _: &mut schemars::SchemaGenerator) -> schemars::Schema {
            schemars::json_schema!(true)
        }
        fn kind(&self) -> &'static str {
            "scraper"
        }
        fn signals(&self) -> SignalSet {
            SignalSet::only(Signal::Metrics)
        }
        fn validate(&self, _: &Value) -> Result<(), Vec<ConfigError>> {
            Ok(())
        }
        async fn build(&self, _: BuildContext, _: &Value) -> Result<Box<dyn Receiver>, BoxError> {
            Err("not in this test".into())
        }
    }

    struct LogsOnly;
    #[async_trait]
    impl ExporterFactory for LogsOnly {
        fn schema(&self, _: &mut schemars::SchemaGenerator) -> schemars::Schema {
            schemars::json_schema!(true)
        }
        fn kind(&self) -> &'static str {
            "logsink"
        }
        fn signals(&self) -> SignalSet {
            SignalSet::only(Signal::Logs)
        }
        fn validate(&self, _: &Value) -> Result<(), Vec<ConfigError>> {
            Ok(())
        }
        async fn build(&self, _: BuildContext, _: &Value) -> Result<BuiltExporter, BoxError> {
            Err("not in this test".into())
        }
    }

    fn registry() -> Registry {
        let mut r = Registry::new();
        r.add_receiver(MetricsOnly);
        r.add_exporter(LogsOnly);
        r
    }

    #[test]
    fn components_that_take_none_of_a_pipelines_signals_are_errors() {
        let text = "receivers:\n  scraper:\nexporters:\n  logsink:\nservice:\n  pipelines:\n    traces:\n      receivers: [scraper]\n      exporters: [logsink]\n";
        let errs = load_str(text, "p.yaml", &registry(), &|_| None).expect_err("invalid");
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(msgs[0].starts_with("p.yaml:8:19: service.pipelines.traces.receivers[0]: receiver \"scraper\" accepts [metrics] but pipeline \"traces\" carries [traces]"), "{msgs:?}");
        assert!(
            msgs[1].contains("exporter \"logsink\" accepts [logs]"),
            "{msgs:?}"
        );
    }

    #[test]
    fn with_no_memory_limit_configured_the_budget_is_the_default_share() {
        let text = "receivers:\n  scraper:\nexporters:\n  logsink:\nservice:\n  pipelines:\n    all:\n      receivers: [scraper]\n      exporters: [logsink]\n";
        let cfg = load_str(text, "p.yaml", &registry(), &|_| None).expect("valid");
        let want = crate::memory::default_budget(crate::memory::available_memory());
        assert_eq!(
            cfg.memory_limiter.as_ref().map(|m| m.limit.0),
            want.as_ref().map(|m| m.limit.0)
        );
        assert!(cfg.memory_limiter.is_some() || want.is_none());
        let with = format!("{text}  memory_limiter: {{ limit: 64MiB }}\n");
        let cfg = load_str(&with, "p.yaml", &registry(), &|_| None).expect("valid");
        assert_eq!(cfg.memory_limiter.map(|m| m.limit.0), Some(64 << 20));
    }

    #[test]
    fn all_pipelines_warn_about_signals_no_exporter_takes() {
        let text = "receivers:\n  scraper:\nexporters:\n  logsink:\nservice:\n  pipelines:\n    all:\n      receivers: [scraper]\n      exporters: [logsink]\n";
        let cfg = load_str(text, "p.yaml", &registry(), &|_| None).expect("valid");
        assert_eq!(cfg.warnings.len(), 1, "{:?}", cfg.warnings);
        assert!(cfg.warnings[0].contains("metrics from receiver scraper reach no exporter"));
    }

    #[test]
    fn connectors_and_extensions_are_checked() {
        let text = "receivers:\n  scraper:\nexporters:\n  logsink:\nconnectors:\n  count:\nextensions:\n  health_check:\nservice:\n  extensions: [health_check, pprof]\n  pipelines:\n    all: { receivers: [scraper], exporters: [logsink] }\n";
        let errs = load_str(text, "p.yaml", &registry(), &|_| None).expect_err("invalid");
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert!(
            msgs.iter()
                .any(|m| m.contains("connectors.count: unknown type \"count\"")
                    && m.contains("no connector types")),
            "{msgs:?}"
        );
        assert!(
            msgs.iter()
                .any(|m| m.contains("service.extensions[1]: extension \"pprof\" is not defined")),
            "{msgs:?}"
        );
    }
}
