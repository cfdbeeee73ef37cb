//! Connections: one multiplexed connection to a Redis server (redis-rs's `ConnectionManager`,
//! which reconnects after an error), or a Redis Cluster connection (which follows the slot map
//! and reconnects to nodes itself). Both pipeline the commands of every worker on one socket
//! per node.

use std::time::Duration;

use rampart_config::RedisEndpoint;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// Longest wait for a TCP (and TLS) connection to a node.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait for any answer on an established connection (the request path has its own,
/// shorter limit); a connection that stays silent longer is replaced.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where Redis is, checked and ready to connect (made once per configuration: the sizes of
/// the two clients do not matter).
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Endpoint {
    Node(redis::Client),
    Cluster(ClusterClient),
}

impl Endpoint {
    pub(crate) fn parse(e: &RedisEndpoint) -> redis::RedisResult<Endpoint> {
        Ok(match e {
            RedisEndpoint::Node(url) => Endpoint::Node(redis::Client::open(url.as_str())?),
            RedisEndpoint::Cluster(nodes) => Endpoint::Cluster(
                ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .retries(1)
                    .build()?,
            ),
        })
    }

    /// The connection the request path shares. Must run inside the Redis thread's runtime
    /// (the connection's tasks are spawned there). Connects lazily.
    pub(crate) fn connect(&self) -> redis::RedisResult<Conn> {
        self.connect_with(RESPONSE_TIMEOUT)
    }

    /// A connection of its own, for blocking commands (`XREAD BLOCK`), whose answers may take
    /// up to `response` to come.
    pub(crate) fn connect_with(&self, response: Duration) -> redis::RedisResult<Conn> {
        Ok(match self {
            Endpoint::Node(client) => Conn::Node(
                client.get_connection_manager_lazy(
                    ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(CONNECT_TIMEOUT))
                        .set_response_timeout(Some(response))
                        .set_number_of_retries(2)
                        .set_max_delay(Duration::from_millis(500)),
                )?,
            ),
            Endpoint::Cluster(client) => Conn::Cluster(
                client.get_pending_async_connection_with_config(
                    ClusterConfig::new()
                        .set_connection_timeout(CONNECT_TIMEOUT)
                        .set_response_timeout(response),
                ),
            ),
        })
    }
}

/// A connection to a server or a cluster; clones share it.
#[derive(Clone)]
pub enum Conn {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
