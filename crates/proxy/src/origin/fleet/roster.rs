//! The members found through Redis (`cache_peers_from_redis`): the roster every worker's
//! [`super::Fleet`] follows, and this instance's announcement.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rampart_config::FleetConfig;

/// The members discovered through Redis (`cache_peers_from_redis`): the list every worker's
/// [`super::Fleet`] follows, replaced as leases come and go.
#[derive(Debug, Default)]
pub struct Roster {
    members: arc_swap::ArcSwap<Vec<SocketAddr>>,
    /// Counts the replacements (workers compare it with theirs on a miss).
    generation: AtomicU64,
}

impl Roster {
    /// The members now are `members` (this instance is added when missing); with `grow_only`,
    /// those listed now are added and none is dropped. Whether they changed.
    pub fn set(&self, mut members: Vec<SocketAddr>, me: SocketAddr, grow_only: bool) -> bool {
        if grow_only {
            members.extend(self.members.load().iter().copied());
        }
        members.sort_unstable();
        members.dedup();
        // At most MAX_MEMBERS, this instance among them.
        members.retain(|&m| m != me);
        members.truncate(MAX_MEMBERS - 1);
        members.push(me);
        members.sort_unstable();
        if **self.members.load() == members {
            return false;
        }
        self.members.store(Arc::new(members));
        self.generation.fetch_add(1, Ordering::Release);
        true
    }

    /// How many times the members were replaced (read before [`Roster::members`]: the
    /// members read after it are at least as new).
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The members now.
    pub fn members(&self) -> Arc<Vec<SocketAddr>> {
        self.members.load_full()
    }
}

/// The members announced through Redis (`cache_peers_from_redis`), and this instance's
/// announcement: renewed until this is dropped.
#[derive(Debug)]
pub struct Discovery {
    pub roster: Arc<Roster>,
    /// The address this instance announces.
    me: SocketAddr,
    _announcement: rampart_redis::members::Announcement,
}

impl Discovery {
    /// Starts announcing this instance when `c` finds its members through Redis (`shared`),
    /// keeping `old`'s members until Redis answers.
    pub fn start(
        c: Option<&FleetConfig>,
        shared: Option<&rampart_redis::Shared>,
        old: Option<Discovery>,
    ) -> Option<Discovery> {
        let c = c.filter(|c| c.discover)?;
        let shared = shared?;
        let me = c.me;
        // The members read so far, unless this instance's address changed.
        let roster = match old.filter(|o| o.me == me) {
            Some(o) => o.roster.clone(),
            None => {
                let r = Roster::default();
                r.set(vec![me], me, false);
                Arc::new(r)
            }
        };
        let r = roster.clone();
        let announcement = shared.announce(
            me.to_string(),
            Arc::new(move |list: Vec<Vec<u8>>, grow_only: bool| {
                // Addresses of this instance's IP version only (connections to peers leave
                // from its own address); anything else in the set is not a member.
                let members: Vec<SocketAddr> = list
                    .iter()
                    .filter_map(|a| std::str::from_utf8(a).ok()?.parse::<SocketAddr>().ok())
                    .filter(|a| {
                        a.is_ipv4() == me.is_ipv4() && !a.ip().is_unspecified() && a.port() != 0
                    })
                    .collect();
                if r.set(members, me, grow_only) {
                    tracing::info!(members = ?r.members(), "the fleet's members changed");
                }
            }),
        );
        Some(Discovery {
            roster,
            me,
            _announcement: announcement,
        })
    }
}

/// Members taken from Redis at most (an instance scores every member on a miss).
pub(super) const MAX_MEMBERS: usize = 256;
