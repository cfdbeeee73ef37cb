//! What only the dashboard shows: the latest refused requests, and the hosts and paths of
//! requests while a dashboard watches.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::SystemTime;

use super::Metrics;

/// A refused request, for the dashboard.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub time: SystemTime,
    pub client: IpAddr,
    pub host: String,
    pub path: String,
    pub reason: &'static str,
}

/// How many refusals each worker keeps for the dashboard.
const RECENT_REFUSALS: usize = 50;
/// How many (host, path) pairs each worker keeps while a dashboard watches.
const RECENT_REQUESTS: usize = 2048;

impl Metrics {
    /// Keeps a refused request for the dashboard's list.
    pub fn remember_refusal(&self, r: Refusal) {
        let mut q = self
            .worker()
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if q.len() == RECENT_REFUSALS {
            q.pop_front();
        }
        q.push_back(r);
    }

    /// The latest refusals, newest first.
    pub fn refusals(&self, n: usize) -> Vec<Refusal> {
        let mut all: Vec<Refusal> = self
            .workers
            .iter()
            .flat_map(|w| {
                w.0.refusals
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort_by_key(|r| std::cmp::Reverse(r.time));
        all.truncate(n);
        all
    }

    /// Whether a dashboard is watching (then requests' hosts and paths are kept).
    pub fn watched(&self) -> bool {
        self.watchers.load(Relaxed) > 0
    }

    /// A dashboard starts watching; it stops when the guard is dropped.
    pub fn watch(&'static self) -> Watching {
        self.watchers.fetch_add(1, Relaxed);
        Watching(self)
    }

    /// A request's host and path, kept while a dashboard watches.
    pub fn seen(&self, host: &str, path: &str) {
        let mut q = self.worker().seen.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == RECENT_REQUESTS {
            q.pop_front();
        }
        q.push_back((host.into(), path.into()));
    }

    /// The most frequent hosts and paths among the requests kept while watching, the hosts as
    /// the cache keys them (without `:port`, so `example.com` and `example.com:8080` are one).
    pub fn top(&self, n: usize) -> (Ranking, Ranking) {
        let mut hosts: HashMap<&str, u64> = HashMap::new();
        let mut paths: HashMap<String, u64> = HashMap::new();
        let guards: Vec<_> = self
            .workers
            .iter()
            .map(|w| w.0.seen.lock().unwrap_or_else(|p| p.into_inner()))
            .collect();
        for q in &guards {
            for (h, p) in q.iter() {
                let h = without_port(h);
                *hosts.entry(h).or_default() += 1;
                *paths.entry(format!("{h}{p}")).or_default() += 1;
            }
        }
        let top = |m: Vec<(String, u64)>| {
            let mut v = m;
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v.truncate(n);
            v
        };
        (
            top(hosts.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
            top(paths.into_iter().collect()),
        )
    }
}

/// `host[:port]` without the port: `[::1]:8080` → `[::1]`, `a.test:80` → `a.test`; a bare
/// IPv6 address (more than one `:`) is left as it is.
fn without_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.split_once(':') {
        Some((name, port)) if !port.contains(':') => name,
        _ => host,
    }
}

/// Names with their counts, most frequent first.
pub type Ranking = Vec<(String, u64)>;

/// Ends a dashboard's watch when dropped.
#[derive(Debug)]
pub struct Watching(&'static Metrics);

impl Drop for Watching {
    fn drop(&mut self) {
        if self.0.watchers.fetch_sub(1, Relaxed) == 1 {
            for w in self.0.workers.iter() {
                w.0.seen.lock().unwrap_or_else(|p| p.into_inner()).clear();
            }
        }
    }
}

#[cfg(test)]
mod host_tests {
    use super::without_port;

    #[test]
    fn dashboard_hosts_are_shown_without_their_port() {
        assert_eq!(without_port("example.com:8080"), "example.com");
        assert_eq!(without_port("example.com"), "example.com");
        assert_eq!(without_port("127.0.0.1:41234"), "127.0.0.1");
        assert_eq!(without_port("[::1]:8443"), "[::1]");
        assert_eq!(without_port("::1"), "::1");
    }
}
