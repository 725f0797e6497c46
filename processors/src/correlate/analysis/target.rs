//! The target of a client call whose span does not carry `server.address`:
//! read from `url.full` (or the older `http.url`), else from the address a
//! client library wrote into its error (a gRPC target `ipv4:127.0.0.1:50051`,
//! `ipv6:[::1]:50051`, `dns:///host:443`, `unix:/path`; an HTTP client's
//! `host='h', port=p`, `ECONNREFUSED 127.0.0.1:8080`, `dial tcp h:p`,
//! `Connection refused: host/1.2.3.4:p`). With it, a call that never
//! reached its callee is named by what it meant to reach, never by its
//! caller.

/// A call's target: a host (or a unix socket path) and its port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Host name, address, or socket path.
    pub host: String,
    /// Port, when the text gives one (or the scheme implies it).
    pub port: Option<i64>,
}

/// The host and port of a URL (`scheme://[user@]host[:port]/…`).
pub fn of_url(url: &str) -> Option<Target> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = split_host_port(authority)?;
    let port = port.or(match scheme.to_ascii_lowercase().as_str() {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    });
    Some(Target { host, port })
}

/// The address a client's error text names, if it names one.
pub fn of_error(text: &str) -> Option<Target> {
    // Most spans say nothing: no marker is searched for in an empty text.
    if text.is_empty() {
        return None;
    }
    let word = |marker: &str| {
        after(text, marker)
            .and_then(|w| split_host_port(w.trim_end_matches(':')))
            .map(Target::from)
    };
    grpc_target(text)
        .or_else(|| python_pool(text))
        .or_else(|| word("ECONNREFUSED "))
        .or_else(|| word("ECONNRESET "))
        .or_else(|| word("dial tcp "))
        .or_else(|| java_refused(text))
}

/// The word after `marker` in `text`, if any.
fn after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let at = text.find(marker)? + marker.len();
    text[at..]
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | ')' | '"' | '\'' | ';'))
        .next()
        .filter(|w| !w.is_empty())
}

/// gRPC's resolved targets (`ipv4:`, `ipv6:`, `dns:`, `unix:`), as grpcio
/// and grpc-go write them into UNAVAILABLE's details.
fn grpc_target(text: &str) -> Option<Target> {
    for scheme in ["ipv4:", "ipv6:", "dns:", "unix:"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(scheme) {
            let at = from + i;
            from = at + scheme.len();
            // A word of its own: not the tail of another word.
            if at > 0 && text[..at].ends_with(|c: char| c.is_ascii_alphanumeric()) {
                continue;
            }
            let word = text[from..]
                .split(|c: char| c.is_whitespace() || matches!(c, ',' | '"' | '\'' | ';' | ')'))
                .next()
                .unwrap_or("");
            if scheme == "unix:" {
                if word.len() > 1 {
                    return Some(Target {
                        host: format!("unix:{word}"),
                        port: None,
                    });
                }
                continue;
            }
            // `ipv4:127.0.0.1:50051: Failed to connect`: the port ends at
            // the first character that is not a digit.
            let word = word.trim_start_matches('/');
            if let Some(t) = split_host_port(word.trim_end_matches(':')) {
                return Some(t.into());
            }
        }
    }
    None
}

/// urllib3's `HTTPConnectionPool(host='127.0.0.1', port=8080)`.
fn python_pool(text: &str) -> Option<Target> {
    let host = text
        .split_once("host='")?
        .1
        .split('\'')
        .next()
        .filter(|h| !h.is_empty())?;
    let port = text
        .split_once("port=")
        .and_then(|(_, p)| digits(p.trim_start_matches('\'')));
    Some(Target {
        host: host.to_string(),
        port,
    })
}

/// Java's `Connection refused: localhost/127.0.0.1:8080` (the name asked
/// for, then the address with its port: the address is kept).
fn java_refused(text: &str) -> Option<Target> {
    let w = after(text, "Connection refused: ")?;
    let w = w.rsplit_once('/').map_or(w, |(_, addr)| addr);
    split_host_port(w).map(Target::from)
}

/// Leading decimal digits as a port.
fn digits(s: &str) -> Option<i64> {
    let d: String = s.chars().take_while(char::is_ascii_digit).collect();
    d.parse().ok().filter(|p| (1..=65535).contains(p))
}

/// `host:port`, `[v6]:port`, or a bare host (no port). The port ends at
/// the first character that is not a digit.
fn split_host_port(w: &str) -> Option<(String, Option<i64>)> {
    let w = w.trim();
    if w.is_empty() {
        return None;
    }
    if let Some(rest) = w.strip_prefix('[') {
        let (host, tail) = rest.split_once(']')?;
        let port = tail.strip_prefix(':').and_then(digits);
        return Some((format!("[{host}]"), port));
    }
    match w.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && !host.contains(':') => {
            let p = digits(port);
            let ok = host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
            ok.then(|| (host.to_string(), p))
        }
        None if w
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')) =>
        {
            Some((w.to_string(), None))
        }
        _ => None,
    }
}

impl From<(String, Option<i64>)> for Target {
    fn from((host, port): (String, Option<i64>)) -> Self {
        Target { host, port }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(host: &str, port: Option<i64>) -> Option<Target> {
        Some(Target {
            host: host.into(),
            port,
        })
    }

    #[test]
    fn urls_name_their_host_and_port() {
        assert_eq!(
            of_url("http://pricing:8080/quote?x=1"),
            t("pricing", Some(8080))
        );
        assert_eq!(
            of_url("https://u:p@api.example.com/x"),
            t("api.example.com", Some(443))
        );
        assert_eq!(of_url("http://[::1]:9000/"), t("[::1]", Some(9000)));
        assert_eq!(of_url("not a url"), None);
    }

    #[test]
    fn client_errors_name_the_address_they_failed_to_reach() {
        // grpcio (Python), as its _InactiveRpcError prints.
        let grpcio = "<_InactiveRpcError of RPC that terminated with:\n\tstatus = StatusCode.UNAVAILABLE\n\tdetails = \"failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:45123: Failed to connect to remote host: Connection refused\"";
        assert_eq!(of_error(grpcio), t("127.0.0.1", Some(45123)));
        assert_eq!(
            of_error("dns:///inventory:50051 unreachable"),
            t("inventory", Some(50051))
        );
        assert_eq!(
            of_error("last error: ipv6:[::1]:7000: refused"),
            t("[::1]", Some(7000))
        );
        assert_eq!(
            of_error("connect to unix:/run/app.sock failed"),
            t("unix:/run/app.sock", None)
        );
        // requests/urllib3 (Python).
        let urllib3 = "HTTPConnectionPool(host='127.0.0.1', port=39001): Max retries exceeded with url: /quote";
        assert_eq!(of_error(urllib3), t("127.0.0.1", Some(39001)));
        // Node, Go, Java.
        assert_eq!(
            of_error("connect ECONNREFUSED 127.0.0.1:8081"),
            t("127.0.0.1", Some(8081))
        );
        assert_eq!(
            of_error("Get \"http://x\": dial tcp 127.0.0.1:9: connect: connection refused"),
            t("127.0.0.1", Some(9))
        );
        assert_eq!(
            of_error("java.net.ConnectException: Connection refused: localhost/127.0.0.1:8082"),
            t("127.0.0.1", Some(8082))
        );
        // Words that only look like a scheme, and errors naming nothing.
        assert_eq!(of_error("the sipv4:x server"), None);
        assert_eq!(of_error("boom"), None);
    }
}
