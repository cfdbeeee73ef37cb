//! Real Redis servers for the tests (Debian's `redis-server`, installed by `.ci/run`): one node,
//! or a Redis Cluster of three masters, on loopback ports, each with a data directory of its
//! own. Servers can be stopped and started again on the same port and directory (fault
//! tests). Everything is killed when the handle is dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::scratch;

fn server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into())
}

fn cli_bin() -> String {
    std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".into())
}

/// A loopback port that is free, and (for a cluster node) whose bus port (+10000) is free too.
fn port(cluster: bool) -> u16 {
    loop {
        let p = super::free_port();
        if !cluster {
            return p;
        }
        if p < 55_000 && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

/// One `redis-server` process.
pub struct Node {
    pub port: u16,
    dir: PathBuf,
    cluster: bool,
    child: Option<Child>,
}

impl Node {
    fn new(cluster: bool) -> Node {
        let dir = scratch(if cluster {
            "redis-cluster-node"
        } else {
            "redis"
        });
        std::fs::create_dir_all(&dir).unwrap();
        let mut n = Node {
            port: port(cluster),
            dir,
            cluster,
            child: None,
        };
        n.start();
        n
    }

    /// Starts (or starts again) the server, and waits until it answers.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "node already running");
        let mut cmd = Command::new(server_bin());
        cmd.current_dir(&self.dir)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--dir", self.dir.to_str().unwrap()])
            .args(["--logfile", "redis.log"]);
        if self.cluster {
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
            .args(["--cluster-node-timeout", "2000"]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (install Debian's redis-server; .ci/run does)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cli(&["PING"]).trim() != "PONG" {
            assert!(
                Instant::now() < deadline,
                "redis-server on {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (as a crash would: no shutdown, no save).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this node; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(cli_bin())
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(if self.cluster { &["-c"][..] } else { &[][..] })
            .args(args)
            .stderr(Stdio::null())
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One Redis server.
pub struct Redis {
    pub node: Node,
}

impl Redis {
    pub fn start() -> Redis {
        Redis {
            node: Node::new(false),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.node.addr())
    }

    pub fn cli(&self, args: &[&str]) -> String {
        self.node.cli(args)
    }
}

/// A Redis Cluster of three masters (no replicas).
pub struct Cluster {
    pub nodes: Vec<Node>,
}

impl Cluster {
    pub fn start() -> Cluster {
        let nodes: Vec<Node> = (0..3).map(|_| Node::new(true)).collect();
        let addrs: Vec<String> = nodes.iter().map(Node::addr).collect();
        let out = Command::new(cli_bin())
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let c = Cluster { nodes };
        c.wait_ok();
        c
    }

    /// Waits until every running node says the cluster is ok.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self
                .nodes
                .iter()
                .filter(|n| n.child.is_some())
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The seed list for `redis_cluster`, as TOML.
    pub fn toml_list(&self) -> String {
        let list: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("\"{}\"", n.addr()))
            .collect();
        format!("[{}]", list.join(", "))
    }
}
