//! TB.PEEK key capacity rate [now]: the bucket as it stands and whether one token could be
//! taken. Opens the key read-only and writes nothing, so it also runs on replicas.
//! `TB.PEEK key LEASES` reports an in-flight key instead (`lease::peek`), `TB.PEEK key
//! HOLDS` a bucket's outstanding holds (`hold::peek`).

use crate::algo::bucket;
use crate::binding::stats::Outcome;
use crate::binding::store::Access;
use crate::error::{LeaseError, TbError};
use crate::parse::args::parse_peek;

use super::{Call, Clock, on_bucket};

pub fn run(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<3>()?;
    // A word where a bucket's capacity would be: the form it names, and nothing after it.
    let word = raw.first().filter(|_| count >= 1);
    if word.is_some_and(|a| a.eq_ignore_ascii_case(b"LEASES")) {
        if count != 1 {
            return Err(TbError::Lease(LeaseError::PeekLeasesSyntax));
        }
        return super::lease::peek(call, key);
    }
    if word.is_some_and(|a| a.eq_ignore_ascii_case(b"HOLDS")) {
        if count != 1 {
            return Err(TbError::Lease(LeaseError::PeekHoldsSyntax));
        }
        return super::hold::peek(call, key);
    }
    let args = parse_peek(raw.get(..count).unwrap_or(&[]))?;
    let clock = Clock::new(call, args.now, raw.get(2).copied())?;
    on_bucket(call, key, Access::Read, &clock, |now, stored| {
        bucket::peek(args.limit, now, stored)
    })
}
