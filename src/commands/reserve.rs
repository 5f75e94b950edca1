//! TB.RESERVE key capacity rate n max_wait [now]: "wait" rather than "reject": take the
//! tokens now, or go into debt for them if they will be there within max_wait.

use crate::algo::bucket;
use crate::binding::stats::Outcome;
use crate::binding::store::Access;
use crate::error::TbError;
use crate::parse::args::parse_reserve;

use super::{Call, Clock, on_bucket};

pub fn run(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<5>()?;
    let args = parse_reserve(raw.get(..count).unwrap_or(&[]))?;
    let clock = Clock::new(call, args.now, raw.get(4).copied())?;
    on_bucket(call, key, Access::Write, &clock, |now, stored| {
        bucket::reserve(args.limit, args.n, args.max_wait, now, stored)
    })
}
