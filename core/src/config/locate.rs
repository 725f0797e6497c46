//! Maps key paths (`exporters.otlp/jaeger.endpoint`) to `line:column` in the
//! YAML text, so that errors found after decoding still say where they are.

use std::collections::HashMap;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// Positions of keys and sequence items.
#[derive(Debug, Default)]
pub(crate) struct Locator {
    positions: HashMap<String, (usize, usize)>,
}

enum Frame {
    Map { path: String, key: Option<String> },
    Seq { path: String, index: usize },
}

struct Builder {
    stack: Vec<Frame>,
    positions: HashMap<String, (usize, usize)>,
}

impl Builder {
    /// The path of the value that starts now, and advance the parent.
    fn value_path(&mut self) -> Option<String> {
        match self.stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Map { path, key }) => key.take().map(|k| super::join_path(path, &k)),
            Some(Frame::Seq { path, index }) => {
                let p = format!("{path}[{index}]");
                *index += 1;
                Some(p)
            }
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let pos = (mark.line(), mark.col() + 1);
        match ev {
            Event::Scalar(text, ..) => {
                if let Some(Frame::Map { path, key }) = self.stack.last_mut() {
                    if key.is_none() {
                        let p = super::join_path(path, &text);
                        self.positions.entry(p).or_insert(pos);
                        *key = Some(text);
                        return;
                    }
                }
                if let Some(p) = self.value_path() {
                    self.positions.entry(p).or_insert(pos);
                }
            }
            Event::MappingStart(..) => {
                let path = self.value_path().unwrap_or_default();
                self.positions.entry(path.clone()).or_insert(pos);
                self.stack.push(Frame::Map { path, key: None });
            }
            Event::SequenceStart(..) => {
                let path = self.value_path().unwrap_or_default();
                self.positions.entry(path.clone()).or_insert(pos);
                self.stack.push(Frame::Seq { path, index: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            Event::Alias(_) => {
                self.value_path();
            }
            _ => {}
        }
    }
}

impl Locator {
    /// Index `text`. A text that does not parse yields an empty locator
    /// (the YAML error itself carries the position).
    pub(crate) fn new(text: &str) -> Self {
        let mut b = Builder {
            stack: Vec::new(),
            positions: HashMap::new(),
        };
        let mut parser = Parser::new_from_str(text);
        if parser.load(&mut b, false).is_err() {
            return Locator::default();
        }
        Locator {
            positions: b.positions,
        }
    }

    /// The position of `path`, or of its nearest ancestor that has one.
    pub(crate) fn find(&self, path: &str) -> Option<(usize, usize)> {
        let mut p = path;
        loop {
            if let Some(pos) = self.positions.get(p) {
                return Some(*pos);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_and_items() {
        let text = "exporters:\n  otlp/jaeger:\n    endpoint: x\nservice:\n  pipelines:\n    traces:\n      receivers: [otlp, foo]\n";
        let l = Locator::new(text);
        assert_eq!(l.find("exporters.otlp/jaeger.endpoint"), Some((3, 5)));
        assert_eq!(l.find("exporters.otlp/jaeger.nope"), Some((2, 3)));
        assert_eq!(
            l.find("service.pipelines.traces.receivers[1]"),
            Some((7, 25))
        );
    }
}
