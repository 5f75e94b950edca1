//! TB.PEEK key capacity rate [now]: the bucket as it stands and whether one token could be
//! taken. Opens the key read-only and writes nothing, so it also runs on replicas.
//! `TB.PEEK key LEASES` reports an in-flight key instead (`lease::peek`), `TB.PEEK key
//! HOLDS` a bucket's outstanding holds (`hold::peek`).

use crate::algo::bucket;
use crate::binding::stats::Outcome;
use crate::binding::store::Access;
use crate::error::TbError;
use crate::parse::args::parse_peek;

use super::{Call, Clock, on_bucket};

pub fn run(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<3>()?;
    if count == 1
        && raw
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(b"LEASES"))
    {
        return super::lease::peek(call, key);
    }
    if count == 1
        && raw
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(b"HOLDS"))
    {
        return super::hold::peek(call, key);
    }
    let args = parse_peek(raw.get(..count).unwrap_or(&[]))?;
    let clock = Clock::new(call, args.now, raw.get(2).copied())?;
    on_bucket(call, key, Access::Read, &clock, |now, stored| {
        bucket::peek(args.limit, now, stored)
    })
}
