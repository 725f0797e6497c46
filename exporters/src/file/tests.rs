use super::config::FileExporterConfig;
use super::FileExporter;
use causeway_core::component::Exporter;
use causeway_core::config::decode;
use causeway_core::Batch;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

fn spans(n: usize) -> Batch {
    Batch::from_traces(vec![ResourceSpans {
        scope_spans: vec![ScopeSpans {
            spans: (0..n)
                .map(|i| Span {
                    trace_id: vec![7; 16],
                    span_id: vec![i as u8 + 1; 8],
                    name: format!("span-{i}-{}", "x".repeat(200)),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }])
}

fn config(yaml: &str) -> FileExporterConfig {
    decode(&serde_yaml::from_str(yaml).expect("yaml")).expect("valid")
}

#[tokio::test]
async fn per_signal_files_hold_otlp_json_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exp = FileExporter::new(&config(&format!(
        "path: {}/{{signal}}.jsonl",
        dir.path().display()
    )))
    .expect("open");
    exp.export(&spans(2)).await.expect("export");
    exp.export(&Batch::from_logs(vec![ResourceLogs {
        scope_logs: vec![ScopeLogs {
            log_records: vec![LogRecord::default()],
            ..Default::default()
        }],
        ..Default::default()
    }]))
    .await
    .expect("export");
    let traces = std::fs::read_to_string(dir.path().join("traces.jsonl")).expect("traces");
    let line: serde_json::Value = serde_json::from_str(traces.trim()).expect("json");
    assert_eq!(
        line["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["spanId"],
        "0202020202020202"
    );
    assert_eq!(
        line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"],
        "07070707070707070707070707070707"
    );
    let logs = std::fs::read_to_string(dir.path().join("logs.jsonl")).expect("logs");
    assert_eq!(logs.lines().count(), 1);
    assert!(logs.contains("resourceLogs"));
}

async fn rotate(max_backups: usize) -> (Vec<std::path::PathBuf>, usize, usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("out.jsonl");
    let exp = FileExporter::new(&config(&format!(
        "path: {}\nrotation: {{ max_megabytes: 1, max_backups: {max_backups} }}",
        path.display()
    )))
    .expect("open");
    // ~2,300 lines of ~1.2 KB each: about 2.7 MiB, so 2 rotations at 1 MiB.
    let mut written = 0;
    for _ in 0..2300 {
        exp.export(&spans(4)).await.expect("export");
        written += 1;
    }
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let mut lines = 0;
    for f in &files {
        let size = std::fs::metadata(f).expect("meta").len();
        assert!(size <= 1 << 20, "{f:?} is {size} bytes");
        lines += std::fs::read_to_string(f).expect("read").lines().count();
    }
    (files, lines, written)
}

#[tokio::test]
async fn rotates_by_size_without_losing_or_splitting_lines() {
    let (files, lines, written) = rotate(10).await;
    assert!(files.len() >= 3, "rotated at least twice: {files:?}");
    assert_eq!(lines, written, "no line lost or split across rotation");
}

#[tokio::test]
async fn prunes_backups_beyond_max_backups() {
    let (files, lines, written) = rotate(1).await;
    assert_eq!(files.len(), 2, "current + 1 backup: {files:?}");
    assert!(lines < written);
}

#[tokio::test]
async fn a_torn_last_line_from_a_crash_is_moved_aside_never_continued() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("out.jsonl");
    // A whole line, then half of one: a crash in the middle of a write.
    let whole = "{\"resourceSpans\":[]}\n";
    let torn = "{\"resourceSpans\":[{\"scopeSp";
    std::fs::write(&path, format!("{whole}{torn}")).expect("write");
    let exp = FileExporter::new(&config(&format!("path: {}", path.display()))).expect("open");
    exp.export(&spans(1)).await.expect("export");
    let text = std::fs::read_to_string(&path).expect("read");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0], whole.trim_end());
    for l in &lines {
        serde_json::from_str::<serde_json::Value>(l).expect("every line is whole JSON");
    }
    assert!(text.ends_with('\n'));
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("out.jsonl.torn-")
        })
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(
        std::fs::read_to_string(aside[0].path()).expect("aside"),
        torn
    );
    // A file without a newline at all is all torn; an empty file is left alone.
    let p2 = dir.path().join("two.jsonl");
    std::fs::write(&p2, "x".repeat(200_000)).expect("write");
    let exp = FileExporter::new(&config(&format!("path: {}", p2.display()))).expect("open");
    exp.export(&spans(1)).await.expect("export");
    let text = std::fs::read_to_string(&p2).expect("read");
    assert_eq!(text.lines().count(), 1);
    assert!(text.starts_with("{\"resourceSpans"), "{}", &text[..40]);
}

#[tokio::test]
async fn a_line_larger_than_any_buffer_is_written_whole_with_its_newline() {
    // A line larger than any buffer: written whole, newline included.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.jsonl");
    let exp = FileExporter::new(&config(&format!("path: {}", path.display()))).expect("open");
    let line = super::to_json_line(&spans(250)).expect("line");
    assert!(line.len() > 64 * 1024);
    assert_eq!(line.last(), Some(&b'\n'));
    exp.export(&spans(250)).await.expect("export");
    assert_eq!(std::fs::read(&path).expect("read"), line);
}
