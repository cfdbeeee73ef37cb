//! The memory store's tags: how many stored objects carry each, the tag purges in force
//! (bans that look-ups of tagged objects honour); the store's reclaimer walks the store to take
//! what they reach.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use crate::object::Object;

/// How long a tag purge still answers lookups after its reclaim walk: objects fetched before
/// the purge but stored after the walk passed their place (a slow origin) are still purged.
const TAG_BAN_AFTER_WALK: Duration = Duration::from_secs(600);

/// How long the tag reclaimer works before it pauses (four times as long).
pub(crate) const RECLAIM_SLICE: Duration = Duration::from_micros(250);

/// What the store knows of tags (objects without tags never touch it).
#[derive(Default)]
pub(crate) struct TagState {
    /// Stored objects carrying each tag.
    pub(crate) counts: std::sync::Mutex<HashMap<u64, u32>>,
    /// Tag purges in force: an object carrying the tag received at or before `at` is purged.
    pub(crate) bans: std::sync::RwLock<HashMap<u64, TagBan>>,
    /// `bans.len()`, read without the lock on every lookup of a tagged object.
    pub(crate) live: AtomicUsize,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct TagBan {
    /// The latest hard purge: objects received at or before it are gone.
    hard: Option<SystemTime>,
    /// The latest soft purge: objects received at or before it are stale.
    soft: Option<SystemTime>,
    /// Set once the reclaim walk is done: the ban is forgotten then.
    pub(crate) until: Option<std::time::Instant>,
}

impl TagBan {
    /// When it was last renewed.
    fn latest(&self) -> Option<SystemTime> {
        self.hard.max(self.soft)
    }
}

/// What the tag purges say of an object.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TagVerdict {
    Keep,
    Stale,
    Gone,
}

impl TagState {
    pub(crate) fn entered(&self, o: &Object) {
        if o.tags.is_empty() {
            return;
        }
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        for t in o.tags.iter() {
            *c.entry(*t).or_insert(0) += 1;
        }
    }

    pub(crate) fn left(&self, o: &Object) {
        if o.tags.is_empty() {
            return;
        }
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        for t in o.tags.iter() {
            if let std::collections::hash_map::Entry::Occupied(mut e) = c.entry(*t) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
    }

    pub(crate) fn verdict(&self, o: &Object) -> TagVerdict {
        if o.tags.is_empty() || self.live.load(Ordering::Relaxed) == 0 {
            return TagVerdict::Keep;
        }
        let bans = self.bans.read().unwrap_or_else(|p| p.into_inner());
        let mut v = TagVerdict::Keep;
        for t in o.tags.iter() {
            let Some(b) = bans.get(t) else { continue };
            if b.hard.is_some_and(|at| o.response_time <= at) {
                return TagVerdict::Gone;
            }
            if b.soft.is_some_and(|at| o.response_time <= at) {
                v = TagVerdict::Stale;
            }
        }
        v
    }

    pub(crate) fn ban(&self, tag: u64, soft: bool) {
        let mut bans = self.bans.write().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        bans.retain(|_, b| b.until.is_none_or(|u| u > now));
        // A later soft purge does not soften an earlier hard one: each keeps its own time.
        let b = bans.entry(tag).or_insert(TagBan {
            hard: None,
            soft: None,
            until: None,
        });
        let at = Some(SystemTime::now());
        if soft {
            b.soft = at;
        } else {
            b.hard = at;
        }
        b.until = None;
        self.live.store(bans.len(), Ordering::Relaxed);
    }

    /// The walk for `tags` is done: their bans are forgotten after [`TAG_BAN_AFTER_WALK`].
    pub(crate) fn walked(&self, tags: &[u64], started: SystemTime) {
        let mut bans = self.bans.write().unwrap_or_else(|p| p.into_inner());
        let until = std::time::Instant::now() + TAG_BAN_AFTER_WALK;
        for t in tags {
            // A ban renewed after the walk started waits for its own walk.
            if let Some(b) = bans.get_mut(t).filter(|b| b.latest() <= Some(started)) {
                b.until = Some(until);
            }
        }
    }
}
