//! The persistent sending queue in the running daemon: a backend outage
//! with a kill -9 in the middle loses nothing; a corrupt segment is reported
//! and skipped and the rest is delivered.

mod common;

use bytes::Bytes;
use common::*;
use opentelemetry_proto::tonic::trace::v1::Span;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

fn request(r: u64) -> Bytes {
    let spans = (0..50u64)
        .map(|i| Span {
            trace_id: [(r + 1).to_be_bytes(), i.to_be_bytes()].concat(),
            span_id: (r * 1000 + i + 1).to_be_bytes().to_vec(),
            name: format!("s-{r}-{i}"),
            ..Default::default()
        })
        .collect();
    causeway_core::model::traces_request(spans)
}

async fn send(addr: &str, body: Bytes) {
    otlp_grpc_traces(addr, body).await.expect("accepted");
}

fn a_config(grpc: u16, b_grpc: u16, dir: &Path) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{grpc}" }}
exporters:
  otlp/b:
    endpoint: 127.0.0.1:{b_grpc}
    timeout: 1s
    retry_on_failure: {{ initial_interval: 100ms, max_interval: 200ms, max_elapsed_time: 0s }}
    sending_queue:
      storage: "{q}"
      max_size: 64MiB
      fsync: always
service:
  pipelines:
    traces: {{ receivers: [otlp], exporters: [otlp/b] }}
  shutdown_timeout: 2s
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        q = dir.join("queue").display()
    )
}

fn b_config(b_grpc: u16) -> String {
    sink_config(b_grpc, "b.jsonl", &["traces"])
}

/// Wait until the persistent queue holds every request sent (13-byte record
/// header + the request): data accepted by the receiver is in memory until
/// the pipeline writes it to the queue.
fn wait_persisted(d: &Daemon, requests: u64) {
    let expected: usize = (0..requests).map(|r| 13 + request(r).len()).sum();
    wait_for(
        Duration::from_secs(30),
        "every request in the persistent queue",
        || d.metric("causeway_exporter_queue_size{component=\"otlp/b\"}") == Some(expected as f64),
    );
}

fn names(path: &Path) -> Vec<String> {
    spans(&read_jsonl(path))
        .into_iter()
        .map(|(_, _, s)| s["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn outage_and_kill_9_lose_nothing() {
    kill_9_during_an_outage("always").await;
}

/// A kill -9 is a process crash: what was written reached the page cache,
/// which outlives the process, so no fsync mode loses anything to it (the
/// modes differ on a machine crash: the strace tests below show when each
/// syncs).
#[tokio::test(flavor = "multi_thread")]
async fn outage_and_kill_9_lose_nothing_with_fsync_periodic() {
    kill_9_during_an_outage("periodic").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn outage_and_kill_9_lose_nothing_with_fsync_never() {
    kill_9_during_an_outage("never").await;
}

async fn kill_9_during_an_outage(fsync: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_grpc, b_grpc) = (free_port(), free_port());
    let cfg =
        a_config(a_grpc, b_grpc, dir.path()).replace("fsync: always", &format!("fsync: {fsync}"));
    assert!(cfg.contains(&format!("fsync: {fsync}")));
    let mut a = Daemon::start(dir.path(), "a1", &cfg);
    for r in 0..40 {
        send(&format!("127.0.0.1:{a_grpc}"), request(r)).await;
    }
    wait_persisted(&a, 40);
    // The backend is down: everything waits on disk. Kill -9 during the outage.
    a.child.kill().expect("kill -9");
    a.child.wait().expect("wait");
    let b = Daemon::start(dir.path(), "b", &b_config(b_grpc));
    let a = Daemon::start(dir.path(), "a2", &cfg);
    let out = dir.path().join("b.jsonl");
    for _ in 0..600 {
        if names(&out).len() >= 2000 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let n = names(&out).len();
    if n < 2000 {
        let log = a.stderr("a2");
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        panic!(
            "only {n} spans at B; a2 log tail: {tail:#?}; a1: {}",
            a.stderr("a1")
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert!(a.terminate().success());
    assert!(b.terminate().success());
    let got = names(&out);
    let unique: HashSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), 2000, "nothing lost");
    assert_eq!(
        got.len(),
        2000,
        "nothing was delivered before the kill, so nothing repeats"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_segment_is_reported_and_the_rest_delivered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_grpc, b_grpc) = (free_port(), free_port());
    // 1 MiB queue -> 128 KiB segments; 40 requests of ~4 KB fill a couple of segments.
    let cfg = a_config(a_grpc, b_grpc, dir.path()).replace("max_size: 64MiB", "max_size: 1MiB");
    let mut a = Daemon::start(dir.path(), "a1", &cfg);
    for r in 0..100 {
        send(&format!("127.0.0.1:{a_grpc}"), request(r)).await;
    }
    wait_persisted(&a, 100);
    a.child.kill().expect("kill -9");
    a.child.wait().expect("wait");
    let qdir = dir.path().join("queue").join("otlp_b");
    let mut segs: Vec<_> = std::fs::read_dir(&qdir)
        .expect("queue dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    assert!(segs.len() >= 2, "{segs:?}");
    let mut bytes = std::fs::read(&segs[0]).expect("read");
    bytes[200] ^= 0x5a;
    std::fs::write(&segs[0], bytes).expect("corrupt it");
    let b = Daemon::start(dir.path(), "b", &b_config(b_grpc));
    let a = Daemon::start(dir.path(), "a2", &cfg);
    let corrupt = a.metric("causeway_exporter_queue_corrupt_records_total{component=\"otlp/b\"}");
    assert_eq!(corrupt, Some(1.0));
    let out = dir.path().join("b.jsonl");
    wait_for(
        Duration::from_secs(60),
        "the newest request delivered",
        || names(&out).iter().any(|n| n == "s-99-49"),
    );
    let log = a.stderr("a2");
    assert!(a.terminate().success());
    assert!(b.terminate().success());
    assert!(
        log.contains("Persistent queue damaged"),
        "reported in the log"
    );
    let got = names(&out);
    let unique: HashSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "no duplicates");
    assert!(
        got.len() < 100 * 50,
        "the corrupt segment's records were skipped"
    );
    assert!(
        got.len() >= 20 * 50,
        "the records of the other segments were delivered: {}",
        got.len()
    );
    assert!(
        !got.iter().any(|n| n == "s-0-0"),
        "the first record sat in the corrupt segment"
    );
}

/// A with end-to-end acknowledgements, a `batch` processor holding data in
/// memory, and a persistent queue: an answer means "on disk".
fn acked_config(grpc: u16, b_grpc: u16, dir: &Path, acknowledgements: bool) -> String {
    format!(
        r#"
receivers:
  otlp:
    acknowledgements: {acknowledgements}
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{grpc}" }}
processors:
  batch: {{ send_batch_size: 200, timeout: 300ms }}
exporters:
  otlp/b:
    endpoint: 127.0.0.1:{b_grpc}
    timeout: 1s
    retry_on_failure: {{ initial_interval: 100ms, max_interval: 200ms, max_elapsed_time: 0s }}
    sending_queue:
      storage: "{q}"
      max_size: 256MiB
      fsync: always
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [batch], exporters: [otlp/b] }}
  shutdown_timeout: 2s
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        q = dir.join("queue").display()
    )
}

/// Load from 4 concurrent clients; kill -9 once `kill_after` requests were
/// answered OK. Returns the requests answered OK.
async fn load_then_kill(a: &mut Daemon, addr: String, kill_after: usize) -> HashSet<u64> {
    let acked = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for client in 0..4u64 {
        let (acked, stop, addr) = (acked.clone(), stop.clone(), addr.clone());
        tasks.push(tokio::spawn(async move {
            let mut r = client;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if otlp_grpc_traces(&addr, request(r)).await.is_ok() {
                    acked.lock().expect("lock").insert(r);
                }
                r += 4;
            }
        }));
    }
    let start = std::time::Instant::now();
    while acked.lock().expect("lock").len() < kill_after {
        assert!(start.elapsed() < Duration::from_secs(60), "load too slow");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Mid-stream: requests are in flight, some in the batch processor.
    a.child.kill().expect("kill -9");
    a.child.wait().expect("wait");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for t in tasks {
        t.await.expect("client");
    }
    let acked = acked.lock().expect("lock").clone();
    acked
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_under_load_loses_nothing_that_was_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_grpc, b_grpc) = (free_port(), free_port());
    let _b = Daemon::start(dir.path(), "b", &b_config(b_grpc));
    let cfg = acked_config(a_grpc, b_grpc, dir.path(), true);
    let mut a = Daemon::start(dir.path(), "a1", &cfg);
    let acked = load_then_kill(&mut a, format!("127.0.0.1:{a_grpc}"), 150).await;
    assert!(acked.len() >= 150);
    // Restart on the same queue: what was on disk is sent.
    let _a2 = Daemon::start(dir.path(), "a2", &cfg);
    let out = dir.path().join("b.jsonl");
    let want: HashSet<String> = acked
        .iter()
        .flat_map(|r| (0..50).map(move |i| format!("s-{r}-{i}")))
        .collect();
    let mut missing = want.len();
    for _ in 0..300 {
        let got: HashSet<String> = names(&out).into_iter().collect();
        missing = want.difference(&got).count();
        if missing == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        missing, 0,
        "spans of acknowledged requests missing at B after restart"
    );
}

/// strace attached to a running daemon: the file-system syscalls it makes.
struct Strace {
    child: std::process::Child,
    out: std::path::PathBuf,
}

impl Strace {
    fn attach(d: &Daemon, dir: &Path) -> Strace {
        let out = dir.join("strace.txt");
        let err = dir.join("strace.err");
        let pid = d.child.id();
        let child = std::process::Command::new("strace")
            .args([
                "-f",
                "-y",
                "-e",
                "trace=write,fsync,fdatasync,rename,renameat,renameat2",
                "-o",
            ])
            .arg(&out)
            .args(["-p", &pid.to_string()])
            .stderr(std::fs::File::create(&err).expect("strace.err"))
            .spawn()
            .expect("strace (Debian's strace; scripts/test.sh installs it)");
        // Attached once it says so ("Process N attached with M threads":
        // with -f, every thread of the daemon).
        wait_for(Duration::from_secs(20), "strace attached", || {
            std::fs::read_to_string(&err)
                .unwrap_or_default()
                .contains("attached")
        });
        Strace { child, out }
    }

    /// Detach (strace flushes its output) and return the syscalls, in order.
    fn detach(mut self) -> Vec<String> {
        let pid = self.child.id().to_string();
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill");
        self.child.wait().expect("strace exits");
        std::fs::read_to_string(&self.out)
            .expect("strace output")
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Index of the lines: (syscall, the path of its fd or its first path argument).
fn calls(lines: &[String]) -> Vec<(String, String)> {
    lines
        .iter()
        .filter_map(|l| {
            let call = l.split_whitespace().nth(1)?;
            let (name, args) = call.split_once('(')?;
            let path = if let Some(p) = args.split_once('<') {
                p.1.split('>').next()?.to_string()
            } else {
                l.split('"').nth(1).unwrap_or_default().to_string()
            };
            Some((name.to_string(), path))
        })
        .collect()
}

fn fsync_run(mode: &str) -> Vec<(String, String)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_grpc, b_grpc) = (free_port(), free_port());
    // 1 MiB queue → 128 KiB segments: 100 requests of ~4 KB fill several.
    let cfg = a_config(a_grpc, b_grpc, dir.path())
        .replace("max_size: 64MiB", "max_size: 1MiB")
        .replace("fsync: always", &format!("fsync: {mode}"));
    let a = Daemon::start(dir.path(), "a", &cfg);
    let st = Strace::attach(&a, dir.path());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        for r in 0..100 {
            send(&format!("127.0.0.1:{a_grpc}"), request(r)).await;
        }
    });
    wait_persisted(&a, 100);
    let qdir = dir.path().join("queue").join("otlp_b");
    let seg_synced_after_last_write = |lines: &[(String, String)]| {
        let segs: HashSet<&String> = lines
            .iter()
            .filter(|(c, p)| c == "write" && p.ends_with(".seg"))
            .map(|(_, p)| p)
            .collect();
        segs.iter().all(|s| {
            let last_write = lines.iter().rposition(|(c, p)| c == "write" && p == *s);
            let last_sync = lines.iter().rposition(|(c, p)| c == "fdatasync" && p == *s);
            last_sync > last_write
        })
    };
    if mode == "periodic" {
        // Nothing is appended after the burst: its tail is synced by the timer.
        wait_for(Duration::from_secs(10), "the burst's tail synced", || {
            let lines: Vec<String> = std::fs::read_to_string(&st.out)
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect();
            seg_synced_after_last_write(&calls(&lines))
        });
    }
    // The backend comes back: delivery moves the cursor.
    let b = Daemon::start(dir.path(), "b", &b_config(b_grpc));
    let out = dir.path().join("b.jsonl");
    wait_for(Duration::from_secs(60), "every span delivered", || {
        names(&out).len() >= 5000
    });
    let cursor = qdir.join("cursor");
    wait_for(Duration::from_secs(10), "the cursor at the end", || {
        // "<last segment> <its length>": everything delivered.
        let c = std::fs::read_to_string(&cursor).unwrap_or_default();
        let mut segs: Vec<std::path::PathBuf> = std::fs::read_dir(&qdir)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        segs.retain(|p| p.extension().is_some_and(|x| x == "seg"));
        segs.sort();
        segs.last().is_some_and(|last| {
            let n: u64 = last
                .file_stem()
                .and_then(|s| s.to_str()?.parse().ok())
                .unwrap_or(u64::MAX);
            let len = std::fs::metadata(last).map(|m| m.len()).unwrap_or(0);
            c.trim() == format!("{n} {len}")
        })
    });
    if mode == "periodic" {
        wait_for(
            Duration::from_secs(10),
            "the cursor's rename synced",
            || {
                let lines: Vec<String> = std::fs::read_to_string(&st.out)
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_string)
                    .collect();
                let c = calls(&lines);
                let dir_s = qdir.display().to_string();
                let last_rename = c.iter().rposition(|(n, _)| n.starts_with("rename"));
                let last_dir_sync = c.iter().rposition(|(n, p)| n == "fsync" && *p == dir_s);
                last_rename.is_some() && last_dir_sync > last_rename
            },
        );
    }
    let lines = calls(&st.detach());
    drop(b);
    drop(a);
    assert!(seg_synced_after_last_write(&lines), "{lines:#?}");
    lines
}

#[test]
fn fsync_always_syncs_each_record_each_new_segments_directory_entry_and_the_cursor_rename() {
    let lines = fsync_run("always");
    let segs: Vec<&String> = {
        let mut v: Vec<&String> = Vec::new();
        for (c, p) in &lines {
            if c == "write" && p.ends_with(".seg") && !v.contains(&p) {
                v.push(p);
            }
        }
        v
    };
    assert!(segs.len() >= 2, "{segs:?}");
    let dir = std::path::Path::new(segs[0])
        .parent()
        .expect("dir")
        .display()
        .to_string();
    // Every record is synced before the next is written.
    let mut unsynced = false;
    for (c, p) in &lines {
        if c == "write" && p.ends_with(".seg") {
            assert!(!unsynced, "a record written before the last was synced");
            unsynced = true;
        } else if c == "fdatasync" && p.ends_with(".seg") {
            unsynced = false;
        }
    }
    // A segment created after the first: the directory is synced before its first record.
    for s in &segs[1..] {
        let first = lines
            .iter()
            .position(|(c, p)| c == "write" && p == *s)
            .expect("written");
        assert!(
            lines[..first]
                .iter()
                .any(|(c, p)| c == "fsync" && *p == dir),
            "no directory fsync before {s}'s first record"
        );
        let prev_seg_write = lines[..first]
            .iter()
            .rposition(|(c, p)| c == "write" && p.ends_with(".seg"))
            .unwrap_or(0);
        assert!(
            lines[prev_seg_write..first]
                .iter()
                .any(|(c, p)| c == "fsync" && *p == dir),
            "the directory was not synced when {s} was created"
        );
    }
    // Every rename of the cursor is followed by a directory fsync.
    let renames: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, (c, p))| c.starts_with("rename") && p.ends_with("cursor.tmp"))
        .map(|(i, _)| i)
        .collect();
    assert!(!renames.is_empty());
    for r in renames {
        assert!(
            lines[r..].iter().any(|(c, p)| c == "fsync" && *p == dir),
            "cursor rename at {r} never made durable"
        );
    }
}

#[test]
fn fsync_periodic_syncs_a_bursts_tail_and_the_cursor_by_a_timer() {
    let lines = fsync_run("periodic");
    // Periodic: far fewer syncs than records.
    let writes = lines
        .iter()
        .filter(|(c, p)| c == "write" && p.ends_with(".seg"))
        .count();
    let syncs = lines
        .iter()
        .filter(|(c, p)| c == "fdatasync" && p.ends_with(".seg"))
        .count();
    assert!(
        writes >= 100 && syncs < writes / 4,
        "{writes} writes, {syncs} syncs"
    );
}

/// The other side of the promise: without acknowledgements an answer means
/// "received", not "on disk", and what sat in the `batch` processor's
/// memory at a kill -9 is lost.
#[tokio::test(flavor = "multi_thread")]
async fn without_acknowledgements_a_kill_9_loses_what_was_in_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_grpc, b_grpc) = (free_port(), free_port());
    let _b = Daemon::start(dir.path(), "b", &b_config(b_grpc));
    // The batch holds everything for 30 s: all answered requests are in memory at the kill.
    let cfg = acked_config(a_grpc, b_grpc, dir.path(), false).replace(
        "batch: { send_batch_size: 200, timeout: 300ms }",
        "batch: { send_batch_size: 1000000, timeout: 30s }",
    );
    assert!(cfg.contains("timeout: 30s"));
    let mut a = Daemon::start(dir.path(), "a1", &cfg);
    let acked = load_then_kill(&mut a, format!("127.0.0.1:{a_grpc}"), 100).await;
    assert!(acked.len() >= 100);
    let a2 = Daemon::start(dir.path(), "a2", &cfg);
    // The restarted daemon has nothing of them to send: its queue is empty.
    wait_for(Duration::from_secs(10), "a2's queue read", || {
        a2.metric("causeway_exporter_queue_size{component=\"otlp/b\"}") == Some(0.0)
    });
    let got: HashSet<String> = names(&dir.path().join("b.jsonl")).into_iter().collect();
    let lost = acked
        .iter()
        .filter(|r| !got.contains(&format!("s-{r}-0")))
        .count();
    assert_eq!(
        lost,
        acked.len(),
        "every answered request was still in the batch processor: lost"
    );
}
