//! Reading and differencing /proc: CPU time by mode, load, memory, disk IO
//! time and pressure stall information.

use std::collections::BTreeMap;
use std::path::Path;

/// CPU modes of /proc/stat's `cpu` line, in its order, with OTel's `cpu.mode` names.
pub const CPU_MODES: [&str; 8] = [
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "interrupt",
    "softirq",
    "steal",
];

/// Clock ticks a second of /proc/stat (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// One reading of /proc.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Seconds of CPU time by mode, summed over CPUs.
    pub cpu: Option<[f64; 8]>,
    /// Number of CPUs (`cpuN` lines).
    pub cpus: usize,
    /// 1, 5 and 15 minute load averages.
    pub load: Option<[f64; 3]>,
    /// /proc/meminfo values in bytes, by key (`MemTotal`, `MemAvailable`, `AnonPages`, ...).
    pub mem: BTreeMap<String, u64>,
    /// Seconds each disk spent doing IO (`io_ticks`), by device.
    pub disk_io_time: BTreeMap<String, f64>,
    /// Pressure stall `some avg10` (percent) for cpu, memory and io, when the kernel has PSI.
    pub pressure: BTreeMap<&'static str, f64>,
    /// /proc/net/dev counters by device: bytes, packets, errors, drops, each
    /// received then transmitted.
    pub network: BTreeMap<String, NetCounters>,
    /// /proc/vmstat counters (`pgpgin`, `pgpgout`, `pswpin`, `pswpout`, `pgfault`, `pgmajfault`).
    pub vmstat: BTreeMap<String, u64>,
    /// Swap devices from /proc/swaps: (size, used) in bytes.
    pub swaps: BTreeMap<String, (u64, u64)>,
}

/// One interface's counters: `[receive, transmit]` each.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NetCounters {
    /// Bytes.
    pub bytes: [u64; 2],
    /// Packets.
    pub packets: [u64; 2],
    /// Errors.
    pub errors: [u64; 2],
    /// Dropped packets.
    pub dropped: [u64; 2],
}

/// Problems met reading; each names its file.
pub type Problems = Vec<String>;

/// A file of `/proc` and what reads it into the reading.
type Parse = fn(&str, &mut Reading, &Path, &mut Problems);

/// The files read, each by its parser.
const FILES: [(&str, Parse); 7] = [
    ("stat", stat),
    ("loadavg", loadavg),
    ("meminfo", meminfo),
    ("diskstats", diskstats),
    ("net/dev", net_dev),
    ("vmstat", vmstat),
    ("swaps", swaps),
];

/// Read `<root>/proc`.
pub fn read(root: &Path) -> (Reading, Problems) {
    let proc = root.join("proc");
    let mut r = Reading::default();
    let mut problems = Vec::new();
    for (name, parse) in FILES {
        let file = proc.join(name);
        match std::fs::read_to_string(&file) {
            Ok(s) => parse(&s, &mut r, &file, &mut problems),
            Err(e) => problems.push(format!("{}: {e}", file.display())),
        }
    }
    for res in ["cpu", "memory", "io"] {
        // Absent on kernels without PSI: not a problem.
        if let Ok(s) = std::fs::read_to_string(proc.join("pressure").join(res)) {
            let avg10 = s
                .lines()
                .find(|l| l.starts_with("some"))
                .and_then(|l| {
                    l.split_whitespace()
                        .find_map(|kv| kv.strip_prefix("avg10="))
                })
                .and_then(|v| v.parse::<f64>().ok());
            if let Some(v) = avg10 {
                r.pressure.insert(res, v);
            }
        }
    }
    (r, problems)
}

/// `stat`: the CPUs' time by mode (in all) and how many there are.
fn stat(s: &str, r: &mut Reading, file: &Path, problems: &mut Problems) {
    for line in s.lines() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("cpu") => {
                let v: Vec<f64> = f.take(8).filter_map(|x| x.parse().ok()).collect();
                if v.len() >= 4 {
                    let mut modes = [0.0; 8];
                    for (i, x) in v.iter().enumerate() {
                        modes[i] = x / USER_HZ;
                    }
                    r.cpu = Some(modes);
                } else {
                    problems.push(format!("{}: malformed cpu line", file.display()));
                }
            }
            Some(k) if k.starts_with("cpu") => r.cpus += 1,
            _ => {}
        }
    }
}

/// `loadavg`: the load averages.
fn loadavg(s: &str, r: &mut Reading, _file: &Path, _problems: &mut Problems) {
    let v: Vec<f64> = s
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    if let [a, b, c] = v[..] {
        r.load = Some([a, b, c]);
    }
}

/// `meminfo`: memory by field, in bytes.
fn meminfo(s: &str, r: &mut Reading, _file: &Path, _problems: &mut Problems) {
    for line in s.lines() {
        let Some((k, rest)) = line.split_once(':') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let Some(v) = f.next().and_then(|x| x.parse::<u64>().ok()) else {
            continue;
        };
        let bytes = if f.next() == Some("kB") {
            v.saturating_mul(1024)
        } else {
            v
        };
        r.mem.insert(k.trim().to_string(), bytes);
    }
}

/// `diskstats`: each disk's time doing IO (loop and RAM disks aside).
fn diskstats(s: &str, r: &mut Reading, _file: &Path, _problems: &mut Problems) {
    for line in s.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // major minor name reads ... io_ticks is the 10th stat field (index 12).
        if f.len() < 13 {
            continue;
        }
        let name = f[2];
        if name.starts_with("loop") || name.starts_with("ram") {
            continue;
        }
        if let Ok(ms) = f[12].parse::<f64>() {
            r.disk_io_time.insert(name.to_string(), ms / 1000.0);
        }
    }
}

/// `net/dev`: each interface's counters.
// "  eth0: rx_bytes rx_packets rx_errs rx_drop rx_fifo rx_frame rx_compressed
//  rx_multicast tx_bytes tx_packets tx_errs tx_drop ..." after two header lines.
fn net_dev(s: &str, r: &mut Reading, file: &Path, problems: &mut Problems) {
    for line in s.lines().skip(2) {
        let Some((dev, rest)) = line.split_once(':') else {
            continue;
        };
        let v: Vec<u64> = rest
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() < 12 {
            problems.push(format!(
                "{}: malformed line for {}",
                file.display(),
                dev.trim()
            ));
            continue;
        }
        r.network.insert(
            dev.trim().to_string(),
            NetCounters {
                bytes: [v[0], v[8]],
                packets: [v[1], v[9]],
                errors: [v[2], v[10]],
                dropped: [v[3], v[11]],
            },
        );
    }
}

/// `vmstat`: paging and faults.
fn vmstat(s: &str, r: &mut Reading, _file: &Path, _problems: &mut Problems) {
    for line in s.lines() {
        let mut f = line.split_whitespace();
        if let (Some(k), Some(Ok(v))) = (f.next(), f.next().map(str::parse::<u64>)) {
            if matches!(
                k,
                "pgpgin" | "pgpgout" | "pswpin" | "pswpout" | "pgfault" | "pgmajfault"
            ) {
                r.vmstat.insert(k.to_string(), v);
            }
        }
    }
}

/// `swaps`: each swap device's size and use.
// "Filename Type Size Used Priority", sizes in KiB.
fn swaps(s: &str, r: &mut Reading, _file: &Path, _problems: &mut Problems) {
    for line in s.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [name, _, size, used, ..] = f[..] {
            if let (Ok(size), Ok(used)) = (size.parse::<u64>(), used.parse::<u64>()) {
                r.swaps.insert(name.to_string(), (size * 1024, used * 1024));
            }
        }
    }
}

/// CPU utilization by mode between two readings (fractions of all CPUs' time, summing to 1).
pub fn cpu_utilization(prev: &Reading, cur: &Reading) -> Option<[f64; 8]> {
    let (a, b) = (prev.cpu?, cur.cpu?);
    let mut d = [0.0; 8];
    for i in 0..8 {
        d[i] = (b[i] - a[i]).max(0.0);
    }
    let total: f64 = d.iter().sum();
    if total <= 0.0 {
        return None;
    }
    Some(d.map(|x| x / total))
}

/// Fraction of the interval each disk was busy.
pub fn disk_utilization(prev: &Reading, cur: &Reading, seconds: f64) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    if seconds <= 0.0 {
        return out;
    }
    for (dev, t) in &cur.disk_io_time {
        if let Some(p) = prev.disk_io_time.get(dev) {
            out.insert(dev.clone(), ((t - p).max(0.0) / seconds).min(1.0));
        }
    }
    out
}
