//! The local deny cache: after Redis refuses a request, its enforced violated buckets are
//! remembered until the time Redis said a retry could succeed; a later request needing one
//! of them (same capacity and rate, a cost at least as large) is refused locally, without a
//! Redis call. It only ever short-circuits refusals, so it never admits more than Redis
//! would; it can refuse what Redis would now admit (a refund made on another instance, an
//! operator deleting a key) for at most the `retry_after` Redis gave.
//!
//! Single flight: when an entry's deny-until has passed, the first request that finds it
//! becomes the probe (the entry is marked probing, with the time) and asks Redis; requests
//! finding it while it is probing are refused locally (`retry_after` 0). The probe's answer
//! renews the entry (refused, or admitted with fewer tokens left than its cost: Redis
//! would refuse the next such request, until `(cost - remaining) / rate` from then) or
//! removes it (admitted otherwise, store error, request dropped: the [`Probe`] guard
//! removes it on drop). A probing mark older than `probe_timeout` lets the
//! next request probe.
//!
//! Bounded: at most `max_entries`; on a full cache expired entries go first, then the one
//! that expires soonest. A hash map plus an ordered index by expiry: O(log n) per operation.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A time on the limiter's monotonic clock (SPEC T1).
type Instant = Duration;

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
    /// Since when a request (the probe) has been asking Redis about this expired entry.
    probing: Option<Instant>,
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
            probing: None,
        }
    }
}

#[derive(Default)]
struct Inner {
    /// SPEC R9: each entry holds its key once (the index shares the map's `Arc<str>`).
    map: HashMap<Arc<str>, Entry>,
    by_expiry: BTreeMap<(Instant, u64), Arc<str>>,
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
    /// A probing mark older than this no longer holds other requests back.
    probe_timeout: Duration,
    inner: Mutex<Inner>,
}

/// What [`DenyCache::lookup`] found: the cached refusals answering the request now, or
/// (when there are none) the expired entries this request is the probe for.
pub(crate) struct Lookup<'a> {
    pub(crate) hits: Vec<(usize, Entry)>,
    pub(crate) probe: Probe<'a>,
}

/// The entries a request probes. Dropped (answer handled, or the request cancelled), it
/// removes those still marked as probed by it; [`DenyCache::insert`] of a renewed refusal
/// first replaces the entry, so a renewal stays.
pub(crate) struct Probe<'a> {
    cache: Option<&'a DenyCache>,
    /// Key, the entry's seq and the probing mark it was given.
    keys: Vec<(String, u64, Instant)>,
}

impl Probe<'_> {
    pub(crate) fn none() -> Probe<'static> {
        Probe {
            cache: None,
            keys: Vec::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Gives the claims back (SPEC R6): the probe never reached Redis (the breaker is
    /// open), so the entries stay as they were and the next check may probe.
    pub(crate) fn release(mut self) {
        let Some(cache) = self.cache else {
            return;
        };
        let mut inner = cache.lock();
        for (key, seq, mark) in self.keys.drain(..) {
            if let Some(e) = inner.map.get_mut(key.as_str())
                && e.seq == seq
                && e.probing == Some(mark)
            {
                e.probing = None;
            }
        }
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        let Some(cache) = self.cache else {
            return;
        };
        if self.keys.is_empty() {
            return;
        }
        let mut inner = cache.lock();
        for (key, seq, mark) in self.keys.drain(..) {
            let ours = inner
                .map
                .get(key.as_str())
                .is_some_and(|e| e.seq == seq && e.probing == Some(mark));
            if ours {
                inner.remove(&key);
            }
        }
    }
}

impl DenyCache {
    pub(crate) fn new(max_entries: usize, probe_timeout: Duration) -> DenyCache {
        DenyCache {
            max_entries,
            probe_timeout,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Poisoning only means a panic elsewhere while holding the lock; the maps are
        // still consistent enough to use (at worst an entry is missing from one of them).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// For each `(key, capacity, rate, cost)`: the cached refusal that answers it now, if
    /// any. An expired entry being probed by another request answers it too (its
    /// `deny_until` has passed: `retry_after` 0). Without any hit, this request becomes
    /// the probe of each expired matching entry not being probed (or probed for longer
    /// than `probe_timeout`); expired entries another shape meets are dropped.
    pub(crate) fn lookup<'a, 'k, I>(&'a self, wanted: I, now: Instant) -> Lookup<'a>
    where
        I: IntoIterator<Item = (usize, &'k str, f64, f64, f64)>,
    {
        let mut hits = Vec::new();
        let mut expired = Vec::new();
        let mut inner = self.lock();
        if inner.map.is_empty() {
            return Lookup {
                hits,
                probe: Probe::none(),
            };
        }
        for (i, key, capacity, rate, cost) in wanted {
            let Some(e) = inner.map.get(key).copied() else {
                continue;
            };
            let matches = e.capacity == capacity && e.rate == rate && cost >= e.cost;
            if now < e.deny_until {
                if matches {
                    hits.push((i, e));
                }
                continue;
            }
            let probed = e
                .probing
                .is_some_and(|since| now.saturating_sub(since) < self.probe_timeout);
            match (matches, probed) {
                (true, true) => hits.push((i, e)),
                (true, false) => expired.push(key),
                (false, true) => {}
                (false, false) => {
                    inner.remove(key);
                }
            }
        }
        let mut probe = Probe {
            cache: Some(self),
            keys: Vec::new(),
        };
        if hits.is_empty() {
            for key in expired {
                if let Some(e) = inner.map.get_mut(key) {
                    e.probing = Some(now);
                    probe.keys.push((key.to_owned(), e.seq, now));
                }
            }
        }
        Lookup { hits, probe }
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
            inner.map.remove(&*old);
        }
        inner.seq = inner.seq.wrapping_add(1);
        entry.seq = inner.seq;
        let key: Arc<str> = Arc::from(key);
        inner
            .by_expiry
            .insert((entry.deny_until, entry.seq), key.clone());
        inner.map.insert(key, entry);
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

    fn entry(now: Instant, secs: u64, cost: f64) -> Entry {
        Entry::new(10.0, 1.0, cost, now + Duration::from_secs(secs), now)
    }

    #[test]
    fn a_refusal_answers_the_same_shape_with_a_cost_at_least_as_large() {
        let now = Duration::from_secs(100);
        let c = DenyCache::new(10, Duration::from_secs(1));
        c.insert("k", entry(now, 5, 2.0));
        let ask = |cap, rate, cost| c.lookup([(0, "k", cap, rate, cost)], now).hits.len();
        assert_eq!(ask(10.0, 1.0, 2.0), 1);
        assert_eq!(ask(10.0, 1.0, 3.0), 1);
        assert_eq!(ask(10.0, 1.0, 1.0), 0, "a smaller cost goes to Redis");
        assert_eq!(
            ask(20.0, 1.0, 2.0),
            0,
            "another limit (plan change) goes to Redis"
        );
        assert_eq!(ask(10.0, 2.0, 2.0), 0);
        assert_eq!(c.lookup([(0, "other", 10.0, 1.0, 2.0)], now).hits.len(), 0);
        c.remove("k");
        assert_eq!(ask(10.0, 1.0, 2.0), 0, "a refund through this layer clears");
    }

    #[test]
    fn expired_entries_answer_nothing_and_are_dropped() {
        let now = Duration::from_secs(100);
        let c = DenyCache::new(10, Duration::from_secs(1));
        c.insert("k", entry(now, 1, 1.0));
        let later = now + Duration::from_secs(1);
        assert!(c.lookup([(0, "k", 10.0, 1.0, 1.0)], later).hits.is_empty());
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn bounded_evicting_the_soonest_expiry() {
        let now = Duration::from_secs(100);
        let c = DenyCache::new(3, Duration::from_secs(1));
        c.insert("a", entry(now, 30, 1.0));
        c.insert("b", entry(now, 10, 1.0));
        c.insert("c", entry(now, 20, 1.0));
        c.insert("d", entry(now, 40, 1.0));
        assert_eq!(c.len(), 3);
        let keys = |k| c.lookup([(0, k, 10.0, 1.0, 1.0)], now).hits.len();
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
        let now = Duration::from_secs(100);
        let c = DenyCache::new(0, Duration::from_secs(1));
        c.insert("a", entry(now, 30, 1.0));
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn one_probe_after_expiry_others_refused_until_its_answer() {
        let now = Duration::from_secs(100);
        let c = DenyCache::new(10, Duration::from_secs(1));
        c.insert("k", entry(now, 1, 1.0));
        let later = now + Duration::from_secs(1);
        let first = c.lookup([(0, "k", 10.0, 1.0, 1.0)], later);
        assert!(first.hits.is_empty());
        assert!(!first.probe.is_empty(), "the first request probes");
        for _ in 0..5 {
            let other = c.lookup([(0, "k", 10.0, 1.0, 1.0)], later);
            assert_eq!(other.hits.len(), 1, "refused while the probe is out");
            assert!(other.probe.is_empty());
            assert_eq!(other.hits[0].1.deny_until, now + Duration::from_secs(1));
        }
        // Another shape is not answered, and does not disturb the probe.
        let small = c.lookup([(0, "k", 10.0, 1.0, 0.5)], later);
        assert!(small.hits.is_empty() && small.probe.is_empty());
        drop(small);
        assert_eq!(c.len(), 1);
        // Refused again: renewed (the insert replaces the probed entry, the drop keeps it).
        c.insert("k", entry(later, 2, 1.0));
        drop(first);
        assert_eq!(c.len(), 1);
        assert_eq!(c.lookup([(0, "k", 10.0, 1.0, 1.0)], later).hits.len(), 1);
        // Admitted (or cancelled): the probe's drop removes the entry.
        let after = later + Duration::from_secs(2);
        let probe = c.lookup([(0, "k", 10.0, 1.0, 1.0)], after);
        assert!(!probe.probe.is_empty());
        drop(probe);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_stale_probe_lets_the_next_request_probe() {
        let now = Duration::from_secs(100);
        let c = DenyCache::new(10, Duration::from_secs(1));
        c.insert("k", entry(now, 1, 1.0));
        let t1 = now + Duration::from_secs(1);
        let stuck = c.lookup([(0, "k", 10.0, 1.0, 1.0)], t1);
        assert!(!stuck.probe.is_empty());
        let t2 = t1 + Duration::from_secs(1);
        let next = c.lookup([(0, "k", 10.0, 1.0, 1.0)], t2);
        assert!(next.hits.is_empty());
        assert!(!next.probe.is_empty(), "the stale mark is taken over");
        // The stale probe's late drop does not remove the new probe's entry.
        drop(stuck);
        assert_eq!(c.len(), 1);
        drop(next);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_request_with_a_live_hit_probes_nothing() {
        let now = Duration::from_secs(100);
        let c = DenyCache::new(10, Duration::from_secs(1));
        c.insert("a", entry(now, 1, 1.0));
        c.insert("b", entry(now, 5, 1.0));
        let later = now + Duration::from_secs(1);
        let l = c.lookup([(0, "a", 10.0, 1.0, 1.0), (1, "b", 10.0, 1.0, 1.0)], later);
        assert_eq!(l.hits.len(), 1);
        assert!(
            l.probe.is_empty(),
            "refused locally: no Redis call to probe with"
        );
        drop(l);
        let a = c.lookup([(0, "a", 10.0, 1.0, 1.0)], later);
        assert!(!a.probe.is_empty(), "still free to probe");
    }
}
