//! Lease and hold ids: 64 bits from a ChaCha20 stream keyed by 32 bytes of the operating
//! system's randomness (the binding reads them once, at load). Pure: the key is passed in.
//!
//! An id must reveal nothing: not another holder's id (a victim's lease could then be
//! released, renewed for a year, or a hold settled for 2^53), and not how many were
//! granted between two of them. A counter mixed by a fixed bijection (SplitMix64, the
//! earlier generator) reveals both to anyone who inverts the mix; a keystream of a cipher
//! whose key never leaves the process reveals neither, so every id is as good as an
//! independent uniform draw. Uniqueness on a key is checked by the caller (ZADD NX, the
//! holds list), which draws again on the 2^-64 collision.

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// The bytes of randomness an id source is keyed with.
pub const SEED_LEN: usize = 32;

/// A stream of ids.
pub struct IdSource {
    rng: ChaCha20Rng,
}

impl IdSource {
    /// A source keyed by `seed`, which must come from the operating system's randomness
    /// (never the clock, a pid or a counter: those are guessable).
    pub fn new(seed: [u8; SEED_LEN]) -> IdSource {
        IdSource {
            rng: ChaCha20Rng::from_seed(seed),
        }
    }

    /// The next id.
    pub fn next_id(&mut self) -> u64 {
        self.rng.next_u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64's output function, the earlier generator's mix, and its inverse: what an
    /// attacker ran on their own id to find everyone else's.
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unshift(z: u64, s: u32) -> u64 {
        let mut x = z;
        for _ in 0..(64 / s + 1) {
            x = z ^ (x >> s);
        }
        x
    }

    fn unmix(z: u64) -> u64 {
        // The inverses of 0x94d049bb133111eb and 0xbf58476d1ce4e5b9 modulo 2^64.
        let mut x = unshift(z, 31);
        x = x.wrapping_mul(0x3196_42b2_d24d_8ec3);
        x = unshift(x, 27);
        x = x.wrapping_mul(0x96de_1b17_3f11_9089);
        unshift(x, 30)
    }

    const STEP: u64 = 0x9e37_79b9_7f4a_7c15;
    /// STEP's inverse modulo 2^64 (STEP is odd): `d * STEP_INV` is the k with `k * STEP = d`.
    const STEP_INV: u64 = 0xf1de_83e1_9937_733d;

    #[test]
    fn the_inverse_is_right_so_the_prediction_below_is_a_real_one() {
        for c in [0u64, 1, 42, STEP, u64::MAX, 0x0123_4567_89ab_cdef] {
            assert_eq!(unmix(mix(c)), c);
        }
        assert_eq!(STEP.wrapping_mul(STEP_INV), 1);
        // The earlier generator's count of grants between two ids, read off as k.
        let (a, b) = (mix(99), mix(99u64.wrapping_add(STEP.wrapping_mul(7))));
        assert_eq!(unmix(b).wrapping_sub(unmix(a)).wrapping_mul(STEP_INV), 7);
        // Against the earlier generator the attack works: from one id, the next ones.
        let start = 0x5eed_u64;
        let ids: Vec<u64> = (0..5).map(|i| mix(start.wrapping_add(STEP * i))).collect();
        let predicted = mix(unmix(ids[0]).wrapping_add(STEP));
        assert_eq!(predicted, ids[1]);
    }

    #[test]
    fn an_id_does_not_predict_the_next_one_nor_count_those_between() {
        let mut source = IdSource::new([7; SEED_LEN]);
        let ids: Vec<u64> = (0..10_000).map(|_| source.next_id()).collect();
        for pair in ids.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            // The earlier generator's prediction of the next id fails...
            assert_ne!(mix(unmix(a).wrapping_add(STEP)), b);
            // ... and the difference of two ids' counters is no small multiple of the step
            // (how the count of grants in between was read off).
            let d = unmix(b).wrapping_sub(unmix(a));
            assert!(d.wrapping_mul(STEP_INV) > 1_000_000, "{a:x} {b:x}");
        }
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "ids repeat");
    }

    #[test]
    fn every_bit_of_an_id_is_balanced() {
        let mut source = IdSource::new([1; SEED_LEN]);
        let n = 20_000u32;
        let mut ones = [0u32; 64];
        for _ in 0..n {
            let id = source.next_id();
            for (bit, count) in ones.iter_mut().enumerate() {
                *count += u32::from((id >> bit) & 1 == 1);
            }
        }
        // Binomial(20000, 1/2): sd ~71; 6 sd either side fails a fair bit once in ~10^8.
        for (bit, &count) in ones.iter().enumerate() {
            assert!(
                (n / 2 - 430..=n / 2 + 430).contains(&count),
                "bit {bit}: {count} of {n}"
            );
        }
    }

    #[test]
    fn sources_with_different_keys_give_different_streams() {
        let mut a = IdSource::new([1; SEED_LEN]);
        let mut b = IdSource::new([2; SEED_LEN]);
        let xs: Vec<u64> = (0..100).map(|_| a.next_id()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_id()).collect();
        assert!(xs.iter().all(|x| !ys.contains(x)));
    }
}
