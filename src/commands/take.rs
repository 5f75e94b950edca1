//! TB.TAKE key capacity rate n [now]: refill, then take n tokens if they are there.

use crate::algo::bucket;
use crate::binding::stats::Outcome;
use crate::binding::store::Access;
use crate::error::TbError;
use crate::parse::args::parse_take;

use super::{Call, Clock, on_bucket};

pub fn run(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<4>()?;
    let args = parse_take(raw.get(..count).unwrap_or(&[]))?;
    let clock = Clock::new(call, args.now, raw.get(3).copied())?;
    on_bucket(call, key, Access::Write, &clock, |now, stored| {
        bucket::take(args.limit, args.n, now, stored)
    })
}
