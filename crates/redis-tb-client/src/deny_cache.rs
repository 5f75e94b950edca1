//! The local deny cache: after Redis refuses a request, its enforced violated buckets are
//! remembered until the time Redis said a retry could succeed; a later request needing one
//! of them (same capacity and rate, a cost at least as large) is refused locally, without a
//! Redis call. It only ever short-circuits refusals, so it never admits more than Redis
//! would; it can refuse what Redis would now admit (a refund made on another instance, an
//! operator deleting a key) for at most the `retry_after` Redis gave.
//!
//! Bounded: at most `max_entries`; on a full cache expired entries go first, then the one
//! that expires soonest. A hash map plus an ordered index by expiry: O(log n) per operation.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

/// One remembered refusal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Entry {
    pub(crate) capacity: f64,
    pub(crate) rate: f64,
    pub(crate) cost: f64,
    /// Refuse until then (local monotonic clock): now + retry_after at the refusal.
    pub(crate) deny_until: Instant,
    /// The bucket is full again then: now + reset_after at the refusal.
    pub(crate) reset_at: Instant,
    seq: u64,
}

impl Entry {
    pub(crate) fn new(
        capacity: f64,
        rate: f64,
        cost: f64,
        deny_until: Instant,
        reset_at: Instant,
    ) -> Entry {
        Entry {
            capacity,
            rate,
            cost,
            deny_until,
            reset_at,
            seq: 0,
        }
    }
}

#[derive(Default)]
struct Inner {
    map: HashMap<String, Entry>,
    by_expiry: BTreeMap<(Instant, u64), String>,
    seq: u64,
}

impl Inner {
    fn remove(&mut self, key: &str) -> Option<Entry> {
        let e = self.map.remove(key)?;
        self.by_expiry.remove(&(e.deny_until, e.seq));
        Some(e)
    }
}

pub(crate) struct DenyCache {
    max_entries: usize,
    inner: Mutex<Inner>,
}

impl DenyCache {
    pub(crate) fn new(max_entries: usize) -> DenyCache {
        DenyCache {
            max_entries,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Poisoning only means a panic elsewhere while holding the lock; the maps are
        // still consistent enough to use (at worst an entry is missing from one of them).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// For each `(key, capacity, rate, cost)`: the cached refusal that answers it now, if
    /// any. Expired entries met on the way are dropped.
    pub(crate) fn lookup<'a, I>(&self, wanted: I, now: Instant) -> Vec<(usize, Entry)>
    where
        I: IntoIterator<Item = (usize, &'a str, f64, f64, f64)>,
    {
        let mut hits = Vec::new();
        let mut inner = self.lock();
        if inner.map.is_empty() {
            return hits;
        }
        for (i, key, capacity, rate, cost) in wanted {
            let Some(e) = inner.map.get(key).copied() else {
                continue;
            };
            if now >= e.deny_until {
                inner.remove(key);
                continue;
            }
            if e.capacity == capacity && e.rate == rate && cost >= e.cost {
                hits.push((i, e));
            }
        }
        hits
    }

    /// Remembers a refusal of `key` (replacing an older one).
    pub(crate) fn insert(&self, key: &str, mut entry: Entry) {
        if self.max_entries == 0 {
            return;
        }
        let mut inner = self.lock();
        inner.remove(key);
        while inner.map.len() >= self.max_entries {
            // The soonest expiry first: an expired entry if there is one, else the entry
            // closest to expiring anyway.
            let Some((&(until, seq), _)) = inner.by_expiry.iter().next() else {
                break;
            };
            let Some(old) = inner.by_expiry.remove(&(until, seq)) else {
                break;
            };
            inner.map.remove(&old);
        }
        inner.seq = inner.seq.wrapping_add(1);
        entry.seq = inner.seq;
        inner
            .by_expiry
            .insert((entry.deny_until, entry.seq), key.to_owned());
        inner.map.insert(key.to_owned(), entry);
    }

    /// Forgets `key` (a refund through this layer gave tokens back).
    pub(crate) fn remove(&self, key: &str) {
        let mut inner = self.lock();
        if !inner.map.is_empty() {
            inner.remove(key);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn entry(now: Instant, secs: u64, cost: f64) -> Entry {
        Entry::new(10.0, 1.0, cost, now + Duration::from_secs(secs), now)
    }

    #[test]
    fn a_refusal_answers_the_same_shape_with_a_cost_at_least_as_large() {
        let now = Instant::now();
        let c = DenyCache::new(10);
        c.insert("k", entry(now, 5, 2.0));
        let ask = |cap, rate, cost| c.lookup([(0, "k", cap, rate, cost)], now).len();
        assert_eq!(ask(10.0, 1.0, 2.0), 1);
        assert_eq!(ask(10.0, 1.0, 3.0), 1);
        assert_eq!(ask(10.0, 1.0, 1.0), 0, "a smaller cost goes to Redis");
        assert_eq!(
            ask(20.0, 1.0, 2.0),
            0,
            "another limit (plan change) goes to Redis"
        );
        assert_eq!(ask(10.0, 2.0, 2.0), 0);
        assert_eq!(c.lookup([(0, "other", 10.0, 1.0, 2.0)], now).len(), 0);
        c.remove("k");
        assert_eq!(ask(10.0, 1.0, 2.0), 0, "a refund through this layer clears");
    }

    #[test]
    fn expired_entries_answer_nothing_and_are_dropped() {
        let now = Instant::now();
        let c = DenyCache::new(10);
        c.insert("k", entry(now, 1, 1.0));
        let later = now + Duration::from_secs(1);
        assert!(c.lookup([(0, "k", 10.0, 1.0, 1.0)], later).is_empty());
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn bounded_evicting_the_soonest_expiry() {
        let now = Instant::now();
        let c = DenyCache::new(3);
        c.insert("a", entry(now, 30, 1.0));
        c.insert("b", entry(now, 10, 1.0));
        c.insert("c", entry(now, 20, 1.0));
        c.insert("d", entry(now, 40, 1.0));
        assert_eq!(c.len(), 3);
        let keys = |k| c.lookup([(0, k, 10.0, 1.0, 1.0)], now).len();
        assert_eq!((keys("a"), keys("b"), keys("c"), keys("d")), (1, 0, 1, 1));
        // Replacing a key does not grow the cache.
        c.insert("a", entry(now, 50, 1.0));
        assert_eq!(c.len(), 3);
        for i in 0..1000 {
            c.insert(&format!("k{i}"), entry(now, 60 + i, 1.0));
        }
        assert_eq!(c.len(), 3);
        let inner = c.lock();
        assert_eq!(
            inner.by_expiry.len(),
            3,
            "the index stays in step with the map"
        );
    }

    #[test]
    fn size_zero_holds_nothing() {
        let now = Instant::now();
        let c = DenyCache::new(0);
        c.insert("a", entry(now, 30, 1.0));
        assert_eq!(c.len(), 0);
    }
}
