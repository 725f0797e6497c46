//! The `gateway_log` receiver in the running daemon, with real files:
//! rotation under write loses and repeats nothing; a SIGKILL mid-file loses
//! nothing and repeats within the documented bound; bad lines are reported
//! and the lines around them flow.

mod common;

use common::*;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

fn config(dir: &Path, extra: &str) -> String {
    format!(
        r#"
receivers:
  gateway_log:
    include: ["{d}/access.log*"]
    start_at: beginning
    poll_interval: 50ms
    storage: "{d}/state"
    dead_letter: "{d}/dead.jsonl"
    resource: {{ service.name: edge-gateway }}
{extra}
exporters:
  file: {{ path: "{d}/out.jsonl" }}
service:
  pipelines:
    logs: {{ receivers: [gateway_log], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        d = dir.display()
    )
}

/// How many times each `n` arrived (read a line at a time: the output of
/// the stress tests is hundreds of megabytes).
fn numbers(path: &Path) -> HashMap<u64, u32> {
    use std::io::BufRead;
    let mut m = HashMap::new();
    let Ok(f) = std::fs::File::open(path) else {
        return m;
    };
    for l in std::io::BufReader::new(f).split(b'\n') {
        let Ok(l) = l else { break };
        // A line still being written is not JSON yet: it is read next time.
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&l) else {
            continue;
        };
        for (_, _, r) in log_records(std::slice::from_ref(&v)) {
            let body = r["body"]["stringValue"].as_str().unwrap_or_default();
            if let Ok(b) = serde_json::from_str::<serde_json::Value>(body) {
                if let Some(n) = b["n"].as_u64() {
                    *m.entry(n).or_insert(0) += 1;
                }
            }
        }
    }
    m
}

/// Log records the file exporter delivered, from `/metrics`.
fn sent(d: &Daemon) -> f64 {
    d.metric("causeway_exporter_sent_items_total{component=\"file\",signal=\"logs\"}")
        .unwrap_or(0.0)
}

fn line(n: u64) -> String {
    format!(
        "{{\"n\":{n},\"trace_id\":\"{:032x}\",\"route_id\":\"orders\",\"status_code\":200,\"duration_ms\":12}}\n",
        n + 1
    )
}

// Once quarantined (it failed in 2 of 7 CI runs): a copy-truncate refilled between the tailer's
// truncation check and its read was read as the old file's next lines. The interleaving has its
// own deterministic test (`tail.rs`,
// `a_copy_truncate_refilled_between_the_check_and_the_read_loses_and_repeats_nothing`); this test
// passed 20 runs of 20 in a loop after the fix (RELIABILITY.md).
#[test]
fn rotation_by_rename_and_copy_truncate_under_write_loses_and_repeats_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = Daemon::start(dir.path(), "gw", &config(dir.path(), ""));
    let log = dir.path().join("access.log");
    const TOTAL: u64 = 200_000;
    let writer = {
        let log = log.clone();
        let dir = dir.path().to_path_buf();
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .expect("open");
            let mut rotations = 0;
            for n in 0..TOTAL {
                f.write_all(line(n).as_bytes()).expect("write");
                if n % 200 == 199 {
                    std::thread::sleep(Duration::from_millis(2));
                }
                if n % 33_000 == 32_999 {
                    rotations += 1;
                    let rotated = dir.join(format!("access.log.{rotations}"));
                    if rotations % 2 == 1 {
                        // Rename, then a new file under the old name.
                        std::fs::rename(&log, &rotated).expect("rename");
                        f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&log)
                            .expect("reopen");
                    } else {
                        // Copy, then truncate in place (logrotate copytruncate).
                        std::fs::copy(&log, &rotated).expect("copy");
                        f.set_len(0).expect("truncate");
                    }
                }
            }
            rotations
        })
    };
    let rotations = writer.join().expect("writer");
    assert!(rotations >= 6, "{rotations} rotations");
    let out = dir.path().join("out.jsonl");
    // Progress from the daemon's own counter (parsing the output each time would be slow).
    wait_for(Duration::from_secs(300), "every line delivered", || {
        sent(&d) >= TOTAL as f64
    });
    std::thread::sleep(Duration::from_millis(500)); // a re-read, if any, would show now
    assert!(d.terminate().success());
    let got = numbers(&out);
    let missing: Vec<u64> = (0..TOTAL)
        .filter(|n| !got.contains_key(n))
        .take(10)
        .collect();
    assert!(missing.is_empty(), "missing: {missing:?}");
    let twice: Vec<(&u64, &u32)> = got.iter().filter(|(_, c)| **c > 1).take(10).collect();
    assert!(twice.is_empty(), "read twice: {twice:?}");
}

#[test]
fn sigkill_mid_file_loses_nothing_and_repeats_within_the_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    const TOTAL: u64 = 300_000;
    let mut text = String::new();
    for n in 0..TOTAL {
        text.push_str(&line(n));
    }
    std::fs::write(dir.path().join("access.log"), text).expect("write");
    // Bound on repeats: (max_inflight_batches + 1) x max_batch_lines = 5 x 500.
    let extra = "    max_batch_lines: 500\n    max_inflight_batches: 4";
    let cfg = config(dir.path(), extra);
    let out = dir.path().join("out.jsonl");
    let mut d = Daemon::start(dir.path(), "gw1", &cfg);
    // Kill as soon as about 5% was written out (the output's size says so cheaply).
    wait_for(Duration::from_secs(60), "some lines delivered", || {
        std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0) > 6 << 20
    });
    d.child.kill().expect("SIGKILL");
    d.child.wait().expect("wait");
    let before = numbers(&out).len();
    assert!((before as u64) < TOTAL, "killed before the end ({before})");
    let d = Daemon::start(dir.path(), "gw2", &cfg);
    let need = (TOTAL - before as u64) as f64;
    wait_for(
        Duration::from_secs(300),
        "the rest delivered after the restart",
        || sent(&d) >= need,
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(d.terminate().success());
    let got = numbers(&out);
    assert_eq!(got.len() as u64, TOTAL);
    let repeats: u32 = got.values().map(|c| c - 1).sum();
    assert!(
        repeats <= 2500,
        "{repeats} lines repeated, bound is (4 + 1) x 500"
    );
}

#[test]
fn bad_lines_are_reported_and_lines_around_them_flow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut f = std::fs::File::create(dir.path().join("access.log")).expect("create");
    f.write_all(line(0).as_bytes()).expect("w");
    f.write_all(b"{\"n\": 1, \"status_code\": \n")
        .expect("invalid JSON"); // invalid JSON
    f.write_all(line(2).as_bytes()).expect("w");
    f.write_all(&[0xff, 0xfe, 0x00, 0x01, 0x80, b'\n'])
        .expect("binary garbage");
    f.write_all(line(3).as_bytes()).expect("w");
    let big = format!("{{\"n\":99,\"pad\":\"{}\"}}\n", "x".repeat(10 << 20));
    f.write_all(big.as_bytes()).expect("10 MB line");
    f.write_all(line(4).as_bytes()).expect("w");
    f.write_all(b"{\"n\":5,\"trace_id\":\"ab\n")
        .expect("truncated line");
    f.write_all(line(6).as_bytes()).expect("w");
    f.write_all(b"{\"n\":7,\"status_code\":2")
        .expect("partial last line, no newline yet");
    drop(f);
    let d = Daemon::start(dir.path(), "bad", &config(dir.path(), ""));
    let out = dir.path().join("out.jsonl");
    wait_for(Duration::from_secs(30), "the valid lines", || {
        numbers(&out).len() == 5
    });
    let bad = |o: &str| {
        d.metric(&format!(
            "causeway_gateway_log_lines_total{{component=\"gateway_log\",outcome=\"{o}\"}}"
        ))
    };
    wait_for(Duration::from_secs(10), "bad lines counted", || {
        bad("bad") == Some(3.0) && bad("too_long") == Some(1.0)
    });
    // The partial last line is waited for, then completed.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("access.log"))
        .expect("open");
    f.write_all(b"00}\n").expect("complete it");
    wait_for(Duration::from_secs(30), "the completed line", || {
        numbers(&out).contains_key(&7)
    });
    assert!(d.terminate().success());
    let got = numbers(&out);
    let mut keys: Vec<u64> = got.keys().copied().collect();
    keys.sort();
    assert_eq!(keys, vec![0, 2, 3, 4, 6, 7]);
    let dead: Vec<serde_json::Value> = read_jsonl(&dir.path().join("dead.jsonl"));
    assert_eq!(dead.len(), 4, "{dead:?}");
    let reasons: Vec<&str> = dead.iter().filter_map(|d| d["reason"].as_str()).collect();
    assert!(
        reasons.iter().any(|r| r.contains("invalid JSON")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("not UTF-8")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("longer than max_line_bytes")),
        "{reasons:?}"
    );
    assert!(dead.iter().all(|d| d["file"]
        .as_str()
        .is_some_and(|f| f.ends_with("access.log"))
        && d["offset"].is_u64()));
    // The records carry the resource and the gateway's fields.
    let recs = log_records(&read_jsonl(&out));
    let (res, scope, r) = &recs[0];
    assert_eq!(
        attr(&res["attributes"], "service.name").expect("svc")["stringValue"],
        "edge-gateway"
    );
    assert_eq!(scope["name"], "causeway.gateway_log");
    assert_eq!(
        attr(&r["attributes"], "route_id").expect("route")["stringValue"],
        "orders"
    );
    assert_eq!(r["traceId"].as_str().map(str::len), Some(32));
}

#[test]
fn an_exporter_giving_up_leaves_the_checkpoint_and_the_lines_are_read_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    const TOTAL: u64 = 2000;
    let text: String = (0..TOTAL).map(line).collect();
    std::fs::write(d.join("access.log"), text).expect("write");
    let b_grpc = free_port();
    // No persistent queue: the exporter gives up after 1 s of retries.
    let a = format!(
        r#"
receivers:
  gateway_log:
    include: ["{d}/access.log*"]
    start_at: beginning
    poll_interval: 50ms
    storage: "{d}/state"
    redeliver_delay: 200ms
exporters:
  otlp/b:
    endpoint: 127.0.0.1:{b_grpc}
    timeout: 500ms
    retry_on_failure: {{ initial_interval: 50ms, max_interval: 100ms, max_elapsed_time: 1s }}
service:
  pipelines:
    logs: {{ receivers: [gateway_log], exporters: [otlp/b] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        d = d.display()
    );
    let a = Daemon::start(d, "a", &a);
    // The backend is down for more than two give-ups.
    let rereads = || {
        a.metric("causeway_gateway_log_rereads_total{component=\"gateway_log\"}")
            .unwrap_or(0.0)
    };
    wait_for(Duration::from_secs(30), "two give-ups", || rereads() >= 2.0);
    // The checkpoint did not move past lines nobody took.
    let cp: serde_json::Value = serde_json::from_slice(
        &std::fs::read(d.join("state/gateway_log-gateway_log.json")).expect("checkpoint"),
    )
    .expect("checkpoint JSON");
    let offsets: Vec<u64> = cp
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["offset"].as_u64())
        .collect();
    assert_eq!(offsets, vec![0], "{cp}");
    assert!(a.stderr("a").contains("read again from it"));
    // The backend comes back: every line arrives.
    let b = Daemon::start(
        d,
        "b",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{b_grpc}" }}
exporters:
  file: {{ path: "{d}/out.jsonl" }}
service:
  pipelines:
    logs: {{ receivers: [otlp], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
            d = d.display()
        ),
    );
    let out = d.join("out.jsonl");
    wait_for(Duration::from_secs(60), "every line delivered", || {
        numbers(&out).len() as u64 == TOTAL
    });
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

/// The `n` of every line in the files of `dir` named `access.log*`,
/// decompressing compressed backups (with the tool that wrote them, told by
/// its magic): the lines that reached the disk, each with the file it is in.
fn on_disk(dir: &Path) -> std::collections::HashMap<u64, String> {
    use std::io::Read;
    let mut out = std::collections::HashMap::new();
    let old = dir.join("old");
    let olddir = std::fs::read_dir(&old).into_iter().flatten();
    for e in std::fs::read_dir(dir)
        .expect("dir")
        .chain(olddir)
        .filter_map(Result::ok)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("access.log") {
            continue;
        }
        let bytes = std::fs::read(e.path()).expect("read");
        let tool = if bytes.starts_with(&[0x1f, 0x8b]) {
            Some("gzip")
        } else if bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Some("zstd")
        } else {
            None
        };
        let text = match tool {
            Some(tool) => {
                let out = std::process::Command::new(tool)
                    .args(["-dc", &e.path().display().to_string()])
                    .output()
                    .expect(tool);
                assert!(out.status.success(), "{tool} -dc {name}");
                String::from_utf8(out.stdout).expect("utf-8")
            }
            None => {
                let mut text = String::new();
                bytes.as_slice().read_to_string(&mut text).expect("utf-8");
                text
            }
        };
        for l in text.lines() {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(l) {
                if let Some(n) = v["n"].as_u64() {
                    out.insert(n, name.clone());
                }
            }
        }
    }
    out
}

/// Lines the stress tests' writer appends between two 1 ms pauses (about
/// 5,000 lines a second).
const LINES_PER_MS: u64 = 5;

/// Rotations per run: 120 (three stops of the daemon), or
/// `CAUSEWAY_ROTATIONS`.
fn rotations() -> usize {
    std::env::var("CAUSEWAY_ROTATIONS")
        .ok()
        .and_then(|x| x.parse().ok())
        .unwrap_or(120)
}

/// The real logrotate (Debian), run `rotations` times back to back (one
/// every ~0.2 s) while a writer appends lines, alternating the `modes`
/// (each a logrotate stanza body), with the daemon starved of CPU: held to
/// a quarter of a core (a CPU quota, see `common::starve`), and stopped
/// outright for 8 rotations in every 40, as a throttled quota or a host at
/// 100% does, so that rotations compress logs it never got to. Every line
/// that reached the disk (in the log or a backup, compressed or not)
/// arrives exactly once, no line arrives twice, some were read from
/// compressed backups, and the files the receiver keeps open stay bounded.
/// Nothing here is timed: the wait for the last line lasts as long as
/// delivery makes progress.
fn logrotate_stress(modes: &[&str], rotations: usize) {
    logrotate_stress_with(modes, rotations, "access.log*", 25);
}

/// [`logrotate_stress`] with the include (`access.log*`, or the live
/// `access.log` alone) and the CPU quota (percent of a core) as given.
/// Backups rotated into logrotate's `olddir` (`old/`) are on disk too.
fn logrotate_stress_with(modes: &[&str], rotations: usize, include: &str, percent: u32) {
    // One at a time: each is a whole-machine stress test (a writer, the
    // real logrotate, a starved daemon), and two at once on two cores
    // measure the machine more than the reader.
    let _turn = common::alone();
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let log = d.join("access.log");
    std::fs::write(&log, "").expect("create");
    // Files opened ahead of the reader (rotated logs it has not reached,
    // held so that compression cannot take them away): as many as the
    // reader is behind, at most `max_held_files`. Beyond, and for what
    // rotates while the daemon gets no CPU at all, compressed backups are
    // read (the include matches them: `access.log*`).
    const MAX_HELD: usize = 64;
    std::fs::create_dir(d.join("old")).expect("olddir");
    let confs: Vec<std::path::PathBuf> = (0..modes.len())
        .map(|i| d.join(format!("logrotate-{i}.conf")))
        .collect();
    let confs_yaml: Vec<String> = confs
        .iter()
        .map(|c| format!("{:?}", c.display().to_string()))
        .collect();
    let mut cfg = config(
        d,
        &format!(
            "    max_held_files: {MAX_HELD}\n    logrotate_configs: [{}]",
            confs_yaml.join(", ")
        ),
    )
    .replace("access.log*", include);
    // CAUSEWAY_GW_DEBUG=<dir>: the receiver's debug log (every file it
    // follows, every backup it finds), kept in <dir> when the test fails.
    let debug = std::env::var("CAUSEWAY_GW_DEBUG").ok();
    if debug.is_some() {
        cfg = cfg.replace(
            "  telemetry: {",
            "  telemetry: { logs: { level: \"info,causeway_receivers::gateway_log=debug\" }, ",
        );
    }
    let keep_log = |why: &str| {
        if let Some(to) = &debug {
            let to = Path::new(to).join(format!("gw-{}.stderr", std::process::id()));
            std::fs::copy(d.join("gw.stderr"), &to).ok();
            eprintln!("{why}: the daemon's log is in {}", to.display());
        }
    };
    // logrotate is configured before the daemon starts, as on a host: the
    // receiver reads the `olddir` of the stanzas that rotate its log.
    for (p, m) in confs.iter().zip(modes) {
        std::fs::write(
            p,
            format!(
                "{} {{\n  rotate 100000\n  missingok\n  nomail\n{m}\n}}\n",
                log.display()
            ),
        )
        .expect("conf");
    }
    let daemon = Daemon::start(d, "gw", &cfg);
    let pid = daemon.child.id();
    let starved = common::starve::Starved::start(pid, percent);
    eprintln!("the daemon is starved by {}", starved.how);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (log, stop) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::os::unix::fs::MetadataExt;
            let open = || {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .expect("open")
            };
            let mut f = open();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                f.write_all(line(n).as_bytes()).expect("write");
                n += 1;
                if n % LINES_PER_MS == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                    // A gateway reopens its log once logrotate renamed it away
                    // and created the new one (`create`), as NGINX does on
                    // USR1: it never creates the file itself, which would race
                    // logrotate's own create ("File exists").
                    let moved = std::fs::metadata(&log)
                        .map(|m| m.ino() != f.metadata().map(|x| x.ino()).unwrap_or(0))
                        .unwrap_or(false);
                    if moved {
                        if let Ok(g) = std::fs::OpenOptions::new().append(true).open(&log) {
                            f = g;
                        }
                    }
                }
            }
            n
        })
    };
    let state = d.join("logrotate.state");
    let mut most_open = 0.0f64;
    let mut frozen = None;
    for i in 0..rotations {
        // The daemon gets no CPU at all for 8 rotations in every 40.
        match i % 40 {
            30 => frozen = Some(common::starve::Frozen::start(pid)),
            38 => frozen = None,
            _ => {}
        }
        let st = std::process::Command::new("logrotate")
            .arg("-f")
            .arg("-s")
            .arg(&state)
            .arg(&confs[i % confs.len()])
            .status()
            .expect("logrotate (Debian's; scripts/test.sh installs it)");
        assert!(st.success(), "logrotate failed");
        std::thread::sleep(Duration::from_millis(150)); // the rotation period under test
        if frozen.is_none() {
            most_open = most_open.max(
                daemon
                    .metric("causeway_gateway_log_open_files{component=\"gateway_log\"}")
                    .unwrap_or(0.0),
            );
        }
    }
    drop(frozen);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let written = writer.join().expect("writer");
    let disk = on_disk(d);
    let out = d.join("out.jsonl");
    // Wait while delivery makes progress (a starved reader is slow, not
    // stuck): until as many lines were sent as are on disk, or nothing
    // more was sent for 120 s.
    let (mut last, mut since) = (-1.0, std::time::Instant::now());
    loop {
        let now = sent(&daemon);
        if now >= disk.len() as f64 {
            break;
        }
        if now > last {
            (last, since) = (now, std::time::Instant::now());
        }
        if since.elapsed() > Duration::from_secs(120) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    {
        let got = numbers(&out);
        let mut missing: Vec<(&u64, &String)> =
            disk.iter().filter(|(n, _)| !got.contains_key(n)).collect();
        if !missing.is_empty() {
            missing.sort();
            let ls: Vec<String> = std::fs::read_dir(d)
                .map(|r| {
                    r.filter_map(Result::ok)
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            keep_log("lines missing");
            panic!(
                "no progress for 120 s, and {} of {} lines on disk not delivered (first: {:?}; last: {:?}); {} delivered; {} sent; files: {ls:?}",
                missing.len(),
                disk.len(),
                &missing[..missing.len().min(10)],
                missing.last(),
                got.len(),
                sent(&daemon)
            );
        }
    }
    let compressed = daemon
        .metric("causeway_gateway_log_compressed_lines_total{component=\"gateway_log\"}")
        .unwrap_or(0.0);
    // Every rotated file drained, delivered and closed: only the live log
    // (and one backup not yet idle) stay open.
    common::wait_for(Duration::from_secs(120), "the drained files closed", || {
        daemon
            .metric("causeway_gateway_log_open_files{component=\"gateway_log\"}")
            .is_some_and(|n| n <= 2.0)
    });
    let fds = std::fs::read_dir(format!("/proc/{}/fd", daemon.child.id()))
        .map(|x| x.count())
        .unwrap_or(0);
    assert!(daemon.terminate().success());
    let got = numbers(&out);
    let mut twice: Vec<(&u64, &u32, Option<&String>)> = got
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(n, c)| (n, c, disk.get(n)))
        .collect();
    twice.sort();
    if !twice.is_empty() {
        keep_log("lines read twice");
    }
    assert!(
        twice.is_empty(),
        "{} lines read twice: {:?} … {:?}",
        twice.len(),
        &twice[..twice.len().min(5)],
        twice.last()
    );
    assert!(got.keys().all(|n| *n < written));
    let lost_by_copytruncate = written - disk.len() as u64;
    eprintln!(
        "{rotations} rotations ({modes:?}), starved by {}: {written} lines written, {} on disk ({lost_by_copytruncate} lost between a copy and its truncation), {} delivered, {compressed} of them read from compressed backups; at most {most_open} files open; {fds} fds at the end",
        starved.how,
        disk.len(),
        got.len()
    );
    assert!(
        compressed > 0.0,
        "no line was read from a compressed backup: the test did not exercise that path"
    );
    assert!(
        most_open <= (MAX_HELD + 8) as f64,
        "{most_open} files open at once (held ahead at most {MAX_HELD})"
    );
    assert!(fds < 200, "{fds} file descriptors open");
}

#[test]
fn real_logrotate_create_and_copytruncate_with_delaycompress_lose_and_repeat_nothing() {
    logrotate_stress(
        &[
            "  create\n  compress\n  delaycompress",
            "  copytruncate\n  compress\n  delaycompress",
        ],
        rotations(),
    );
}

/// `compresscmd` zstd instead of gzip: the backups are told by their magic.
#[test]
fn real_logrotate_with_a_zstd_compresscmd_loses_and_repeats_nothing() {
    logrotate_stress(
        &["  create\n  compress\n  compresscmd /usr/bin/zstd\n  compressext .zst\n  compressoptions -q"],
        rotations(),
    );
}

/// The include of the live file alone (`access.log`, how most configs name
/// a log) under a tenth of a core, `create` + `compress`, every other
/// rotation into logrotate's `olddir`: the backups are found beside the
/// log and in the olddir (read from the logrotate configuration), every
/// line on disk arrives once.
#[test]
fn real_logrotate_compress_with_the_live_file_alone_included_at_a_tenth_of_a_core() {
    logrotate_stress_with(
        &["  create\n  compress", "  create\n  compress\n  olddir old"],
        rotations(),
        "access.log",
        10,
    );
}
