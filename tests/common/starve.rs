//! Starving a process of CPU, as a busy host or a sidecar's small CPU quota
//! does: a CPU quota on a cgroup made for it (cgroup v2 `cpu.max`, else
//! cgroup v1 `cpu.cfs_quota_us`), else pinned with `taskset` to one core
//! that a busy loop shares. Which one ran is in [`Starved::how`].

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A process held under a CPU quota; the quota goes with the value (the
/// cgroup is removed once the process has left it, the hog is killed).
pub struct Starved {
    /// What starves it, for the test's output.
    pub how: String,
    cgroup: Option<PathBuf>,
    hog: Option<Child>,
}

/// Where the cgroup v2 hierarchy and the v1 `cpu` controller are mounted.
fn mounts() -> (Option<PathBuf>, Option<PathBuf>) {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let (mut v2, mut v1) = (None, None);
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        if f[2] == "cgroup2" && v2.is_none() {
            v2 = Some(PathBuf::from(f[1]));
        }
        if f[2] == "cgroup" && f[3].split(',').any(|o| o == "cpu") && v1.is_none() {
            v1 = Some(PathBuf::from(f[1]));
        }
    }
    (v2, v1)
}

/// A cgroup `dir` made with `files` written in order (the last one,
/// `cgroup.procs`, moves the process in); removed again when one fails.
fn cgroup(dir: PathBuf, files: &[(&str, String)]) -> Option<PathBuf> {
    std::fs::create_dir_all(&dir).ok()?;
    if files
        .iter()
        .all(|(f, v)| std::fs::write(dir.join(f), v).is_ok())
    {
        Some(dir)
    } else {
        std::fs::remove_dir(&dir).ok();
        None
    }
}

/// A child cgroup of this process's own under `root` (v2) with `cpu.max`.
fn v2(root: &Path, pid: u32, percent: u32) -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let parent = root.join(rel.trim_start_matches('/'));
    if !parent.join("cgroup.subtree_control").exists() {
        return None;
    }
    // The cpu controller may not be enabled for children here; try once.
    std::fs::write(parent.join("cgroup.subtree_control"), "+cpu").ok();
    cgroup(
        parent.join(format!("causeway-starve-{pid}")),
        &[
            ("cpu.max", format!("{} 100000", percent * 1000)),
            ("cgroup.procs", pid.to_string()),
        ],
    )
}

/// A cgroup under the v1 `cpu` controller with `cpu.cfs_quota_us`.
fn v1(root: &Path, pid: u32, percent: u32) -> Option<PathBuf> {
    cgroup(
        root.join(format!("causeway-starve-{pid}")),
        &[
            ("cpu.cfs_period_us", "100000".to_string()),
            ("cpu.cfs_quota_us", (percent * 1000).to_string()),
            ("cgroup.procs", pid.to_string()),
        ],
    )
}

impl Starved {
    /// Hold process `pid` (all its threads, and those it starts) to
    /// `percent` of one core.
    pub fn start(pid: u32, percent: u32) -> Starved {
        let (m2, m1) = mounts();
        let quota = m2
            .as_deref()
            .and_then(|r| v2(r, pid, percent))
            .map(|d| ("cgroup v2 cpu.max", d))
            .or_else(|| {
                m1.as_deref()
                    .and_then(|r| v1(r, pid, percent))
                    .map(|d| ("cgroup v1 cpu.cfs_quota_us", d))
            });
        if let Some((what, dir)) = quota {
            return Starved {
                how: format!("{what} {percent}% of a core ({})", dir.display()),
                cgroup: Some(dir),
                hog: None,
            };
        }
        // No cgroup to write: one core, shared with a busy loop.
        let pinned = Command::new("taskset")
            .args(["-a", "-p", "-c", "0", &pid.to_string()])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(pinned, "taskset (util-linux) could not pin pid {pid}");
        let hog = Command::new("taskset")
            .args(["-c", "0", "sh", "-c", "while :; do :; done"])
            .spawn()
            .expect("a busy loop on core 0");
        Starved {
            how: "taskset to core 0, shared with a busy loop".into(),
            cgroup: None,
            hog: Some(hog),
        }
    }
}

impl Drop for Starved {
    fn drop(&mut self) {
        if let Some(mut hog) = self.hog.take() {
            hog.kill().ok();
            hog.wait().ok();
        }
        if let Some(dir) = &self.cgroup {
            // Its processes go back to the parent, and it is removed.
            if let (Some(parent), Ok(procs)) = (
                dir.parent(),
                std::fs::read_to_string(dir.join("cgroup.procs")),
            ) {
                for pid in procs.split_whitespace() {
                    std::fs::write(parent.join("cgroup.procs"), pid).ok();
                }
            }
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

/// Stop process `pid` (SIGSTOP) until the value is dropped (SIGCONT): a
/// process a throttled quota or a busy host gives no CPU at all for a while.
pub struct Frozen(u32);

impl Frozen {
    pub fn start(pid: u32) -> Frozen {
        signal(pid, "-STOP");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}
