//! The floor as a peer: the suite's own fixed-response server (`rampart-bench floor`), the
//! yardstick every other program's CPU per request is divided by.

use std::io;

use super::config::prepare_dir;
use super::{Launch, Peer, Setup};

/// `rampart-bench floor` (see `src/floor.rs`): one read and one write per request, the cost below
/// which no HTTP server on this machine can go. Reports divide every program's CPU per request
/// by the floor's from the same run.
#[derive(Debug, Clone, Copy)]
pub struct Floor;

impl Peer for Floor {
    fn name(&self) -> &'static str {
        "floor"
    }
    fn label(&self) -> String {
        "floor: fixed-response epoll server (one read, one write per request)".to_owned()
    }
    fn binary(&self) -> &'static str {
        "rampart-bench"
    }
    fn install_hint(&self) -> &'static str {
        "built with rampart-bench"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        false
    }
    fn is_floor(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        prepare_dir(setup.dir)?;
        Ok(Launch {
            program: std::env::current_exe()?.to_string_lossy().into_owned(),
            args: vec![
                "floor".to_owned(),
                "--listen".to_owned(),
                format!("127.0.0.1:{}", setup.port),
            ],
        })
    }
}
