//! Where the rotated backups of the followed files may be, whatever the
//! include names: the file's name with a rotation suffix (`.1`, `.1.gz`,
//! `-20261206.zst`, …) in its own directory and in the `olddir` that
//! logrotate's configuration gives it. A reader starved of CPU finds a
//! rotated log compressed before it read the end; the backup carries the
//! rest, and an include of the live file alone (`/var/log/nginx/access.log`,
//! how most configs name a log) would never see it.

use std::path::{Path, PathBuf};

/// The glob patterns of the backups of the files `include` names, in their
/// directories and in the `olddir`s the logrotate configuration files
/// `configs` (files, or directories of them) give them.
pub fn patterns(include: &[String], configs: &[String]) -> Vec<String> {
    let stanzas: Vec<Stanza> = configs
        .iter()
        .flat_map(|c| config_files(Path::new(c)))
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| parse(&text))
        .collect();
    let mut out = Vec::new();
    for pat in include {
        let path = Path::new(pat);
        let (Some(name), dir) = (path.file_name(), path.parent()) else {
            continue;
        };
        let name = name.to_string_lossy();
        let dir = dir
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut dirs = vec![dir.to_path_buf()];
        for s in stanzas.iter().filter(|s| s.covers(pat)) {
            if let Some(o) = &s.olddir {
                let o = if o.is_absolute() {
                    o.clone()
                } else {
                    dir.join(o)
                };
                if !dirs.contains(&o) {
                    dirs.push(o);
                }
            }
        }
        for (i, d) in dirs.into_iter().enumerate() {
            if i == 0 && name.ends_with('*') {
                // `access.log*` matches its own backups already.
                continue;
            }
            for suffix in [".*", "-*"] {
                let p = format!("{}/{name}{suffix}", d.display());
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// A config path: the file, or the regular files of the directory.
fn config_files(path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_file())
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    }
}

/// One stanza of a logrotate configuration: the log patterns it rotates
/// and the directory its backups go to.
#[derive(Debug, PartialEq)]
struct Stanza {
    logs: Vec<String>,
    olddir: Option<PathBuf>,
}

impl Stanza {
    /// Whether the stanza rotates what the include pattern names.
    fn covers(&self, include: &str) -> bool {
        self.logs.iter().any(|l| {
            l == include
                || glob::Pattern::new(l).is_ok_and(|p| p.matches(include))
                || glob::Pattern::new(include).is_ok_and(|p| p.matches(l))
        })
    }
}

/// Strip a quoted or bare word's quotes.
fn unquote(w: &str) -> String {
    w.trim_matches(|c| c == '"' || c == '\'').to_string()
}

/// The stanzas of a logrotate configuration text. A global `olddir`
/// (outside any stanza) applies to the stanzas after it; scripts
/// (`postrotate` … `endscript`) are skipped.
fn parse(text: &str) -> Vec<Stanza> {
    let mut out = Vec::new();
    let mut global_olddir: Option<PathBuf> = None;
    let mut current: Option<Stanza> = None;
    let mut pending: Vec<String> = Vec::new();
    let mut in_script = false;
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if in_script {
            in_script = words[0] != "endscript";
            continue;
        }
        if matches!(
            words[0],
            "postrotate" | "prerotate" | "firstaction" | "lastaction" | "preremove"
        ) {
            in_script = true;
            continue;
        }
        match current.as_mut() {
            Some(s) => {
                if words[0] == "}" {
                    out.extend(current.take());
                } else if words[0] == "olddir" && words.len() > 1 {
                    s.olddir = Some(PathBuf::from(unquote(words[1])));
                } else if words[0] == "noolddir" {
                    s.olddir = None;
                }
            }
            None => {
                if let Some((before, after)) = line.split_once('{') {
                    pending.extend(before.split_whitespace().map(unquote));
                    let mut stanza = Stanza {
                        logs: std::mem::take(&mut pending),
                        olddir: global_olddir.clone(),
                    };
                    // A directive on the same line as the `{`.
                    let rest: Vec<&str> = after.split_whitespace().collect();
                    match rest.as_slice() {
                        ["olddir", dir, ..] => stanza.olddir = Some(PathBuf::from(unquote(dir))),
                        ["noolddir", ..] => stanza.olddir = None,
                        _ => {}
                    }
                    if rest.last() == Some(&"}") {
                        out.push(stanza);
                    } else {
                        current = Some(stanza);
                    }
                } else if words[0] == "olddir" && words.len() > 1 {
                    global_olddir = Some(PathBuf::from(unquote(words[1])));
                } else if words[0] == "noolddir" {
                    global_olddir = None;
                } else if words[0].starts_with('/') || words[0].starts_with('"') {
                    // Log paths on a line of their own, the `{` on the next.
                    pending.extend(words.iter().map(|w| unquote(w)));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stanzas_their_logs_and_olddirs_global_or_their_own() {
        let text = r#"
weekly
olddir /var/log/old   # for all below
/var/log/nginx/*.log {
    daily
    compress
    postrotate
        olddir /not/this
    endscript
}
"/var/log/app/access.log" /var/log/app/error.log
{
    olddir archive
}
/var/log/plain.log { noolddir
}
"#;
        let s = parse(text);
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(s[0].logs, vec!["/var/log/nginx/*.log"]);
        assert_eq!(s[0].olddir, Some(PathBuf::from("/var/log/old")));
        assert_eq!(
            s[1].logs,
            vec!["/var/log/app/access.log", "/var/log/app/error.log"]
        );
        assert_eq!(s[1].olddir, Some(PathBuf::from("archive")));
        assert_eq!(s[2].olddir, None, "noolddir after the global one");
        assert!(s[0].covers("/var/log/nginx/access.log"));
        assert!(!s[0].covers("/var/log/app/access.log"));
    }

    #[test]
    fn the_backups_of_the_live_file_in_its_directory_and_its_olddir() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("nginx");
        std::fs::write(
            &conf,
            "/var/log/nginx/access.log {\n  compress\n  olddir /var/log/nginx/old\n}\n/srv/x.log {\n olddir rotated\n}\n",
        )
        .expect("conf");
        let configs = vec![dir.path().display().to_string(), "/nonexistent".into()];
        let p = patterns(
            &[
                "/var/log/nginx/access.log".into(),
                "/srv/x.log".into(),
                "y.log".into(),
                "/var/log/z.log*".into(),
            ],
            &configs,
        );
        assert_eq!(
            p,
            vec![
                "/var/log/nginx/access.log.*",
                "/var/log/nginx/access.log-*",
                "/var/log/nginx/old/access.log.*",
                "/var/log/nginx/old/access.log-*",
                "/srv/x.log.*",
                "/srv/x.log-*",
                "/srv/rotated/x.log.*",
                "/srv/rotated/x.log-*",
                "./y.log.*",
                "./y.log-*",
            ]
        );
    }
}
