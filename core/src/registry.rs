//! The set of component factories known to this build.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::component::{ExporterFactory, ExtensionFactory, ProcessorFactory, ReceiverFactory};

/// Kinds of component, as named in the config's top-level sections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `receivers`
    Receiver,
    /// `processors`
    Processor,
    /// `exporters`
    Exporter,
    /// `connectors`
    Connector,
    /// `extensions`
    Extension,
}

impl Kind {
    /// The section name.
    pub fn section(self) -> &'static str {
        match self {
            Kind::Receiver => "receivers",
            Kind::Processor => "processors",
            Kind::Exporter => "exporters",
            Kind::Connector => "connectors",
            Kind::Extension => "extensions",
        }
    }
    /// The singular name.
    pub fn singular(self) -> &'static str {
        match self {
            Kind::Receiver => "receiver",
            Kind::Processor => "processor",
            Kind::Exporter => "exporter",
            Kind::Connector => "connector",
            Kind::Extension => "extension",
        }
    }
}

/// Factories by type. Each component crate registers its own.
#[derive(Default, Clone)]
pub struct Registry {
    receivers: BTreeMap<&'static str, Arc<dyn ReceiverFactory>>,
    processors: BTreeMap<&'static str, Arc<dyn ProcessorFactory>>,
    exporters: BTreeMap<&'static str, Arc<dyn ExporterFactory>>,
    extensions: BTreeMap<&'static str, Arc<dyn ExtensionFactory>>,
    /// What to use instead of a Collector component type this build lacks.
    instead: BTreeMap<String, &'static str>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }
    /// Add a receiver factory.
    pub fn add_receiver(&mut self, f: impl ReceiverFactory + 'static) {
        self.receivers.insert(f.kind(), Arc::new(f));
    }
    /// Add a processor factory.
    pub fn add_processor(&mut self, f: impl ProcessorFactory + 'static) {
        self.processors.insert(f.kind(), Arc::new(f));
    }
    /// Add an exporter factory.
    pub fn add_exporter(&mut self, f: impl ExporterFactory + 'static) {
        self.exporters.insert(f.kind(), Arc::new(f));
    }
    /// Add an extension factory.
    pub fn add_extension(&mut self, f: impl ExtensionFactory + 'static) {
        self.extensions.insert(f.kind(), Arc::new(f));
    }
    /// Say what to use instead of the Collector's `kind` of component `ty`,
    /// which this build does not have; `validate` names it.
    pub fn add_instead(&mut self, kind: Kind, ty: &'static str, hint: &'static str) {
        self.instead
            .insert(format!("{}.{ty}", kind.section()), hint);
    }
    /// What to use instead of an unknown type, when one was registered.
    pub fn instead(&self, kind: Kind, ty: &str) -> Option<&'static str> {
        self.instead
            .get(&format!("{}.{ty}", kind.section()))
            .copied()
    }
    /// An extension factory by type.
    pub fn extension(&self, kind: &str) -> Option<Arc<dyn ExtensionFactory>> {
        self.extensions.get(kind).cloned()
    }
    /// A receiver factory by type.
    pub fn receiver(&self, kind: &str) -> Option<Arc<dyn ReceiverFactory>> {
        self.receivers.get(kind).cloned()
    }
    /// A processor factory by type.
    pub fn processor(&self, kind: &str) -> Option<Arc<dyn ProcessorFactory>> {
        self.processors.get(kind).cloned()
    }
    /// An exporter factory by type.
    pub fn exporter(&self, kind: &str) -> Option<Arc<dyn ExporterFactory>> {
        self.exporters.get(kind).cloned()
    }
    /// The types known for a kind of component.
    pub fn kinds(&self, kind: Kind) -> Vec<&'static str> {
        match kind {
            Kind::Receiver => self.receivers.keys().copied().collect(),
            Kind::Processor => self.processors.keys().copied().collect(),
            Kind::Exporter => self.exporters.keys().copied().collect(),
            Kind::Extension => self.extensions.keys().copied().collect(),
            Kind::Connector => Vec::new(),
        }
    }
}
