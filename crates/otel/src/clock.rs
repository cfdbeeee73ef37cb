//! Span times: requests are timed with the monotonic clock (`Instant`, which the proxy reads
//! anyway) and exported as Unix nanoseconds. The wall clock is read once per export interval by
//! the exporter thread, not per request: [`WallClock`] keeps the Unix time of a fixed instant,
//! so a step or slew of the system clock reaches the spans within one interval.
//!
//! (rustix's `clock_gettime`, which would save the arithmetic on a `Duration`, is not used: it
//! finds the vDSO by reading the ELF auxiliary vector itself, which faults under valgrind, where
//! rampart's instructions are counted.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime};

/// The Unix time of a fixed monotonic instant, refreshed by [`WallClock::refresh`].
#[derive(Debug)]
pub(crate) struct WallClock {
    anchor: Instant,
    unix_at_anchor: AtomicU64,
}

impl WallClock {
    pub(crate) fn new() -> WallClock {
        let c = WallClock {
            anchor: Instant::now(),
            unix_at_anchor: AtomicU64::new(0),
        };
        c.refresh();
        c
    }

    /// Reads both clocks again.
    pub(crate) fn refresh(&self) {
        let now = Instant::now();
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let since = now.saturating_duration_since(self.anchor).as_nanos() as u64;
        self.unix_at_anchor
            .store(wall.saturating_sub(since), Ordering::Relaxed);
    }

    /// The clock as it reads now, for one request.
    #[inline]
    pub(crate) fn clock(&self) -> Clock {
        Clock {
            anchor: self.anchor,
            unix_at_anchor: self.unix_at_anchor.load(Ordering::Relaxed),
        }
    }
}

/// Unix nanoseconds for `Instant`s (a copy of [`WallClock`]'s reading).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    anchor: Instant,
    unix_at_anchor: u64,
}

impl Clock {
    /// `t` as nanoseconds since the Unix epoch.
    #[inline]
    pub(crate) fn nanos(&self, t: Instant) -> u64 {
        // In u64 (`as_nanos` is a u128 multiplication).
        let nanos =
            |d: std::time::Duration| d.as_secs() * 1_000_000_000 + u64::from(d.subsec_nanos());
        match t.checked_duration_since(self.anchor) {
            Some(d) => self.unix_at_anchor + nanos(d),
            None => self
                .unix_at_anchor
                .saturating_sub(nanos(self.anchor.duration_since(t))),
        }
    }

    /// Now, as nanoseconds since the Unix epoch.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.nanos(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn instants_read_as_the_wall_clock() {
        let wall = WallClock::new();
        let before = Instant::now() - Duration::from_millis(5);
        let c = wall.clock();
        let unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        // Within a few milliseconds of the system's clock, and ordered as the instants are.
        assert!(c.now().abs_diff(unix) < 50_000_000);
        assert!(c.nanos(before) < c.now());
        let (now, then) = (c.now(), c.nanos(before));
        assert!(now - then >= 5_000_000, "{now} {then} {c:?} {before:?}");
    }
}
