//! TB.THROTTLE key max_burst count_per_period period [quantity]: redis-cell's
//! CL.THROTTLE, arguments and reply, on TB.TAKE's bucket and the server's clock (also
//! registered as CL.THROTTLE when the module is loaded with that argument).

use crate::algo::throttle::{cell_reply, throttle};
use crate::binding::stats::Outcome;
use crate::binding::store::Access;
use crate::error::TbError;
use crate::parse::args::parse_throttle;

use super::{Call, Clock, settle};

pub fn run(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<4>()?;
    let args = parse_throttle(raw.get(..count).unwrap_or(&[]))?;
    let clock = Clock::server();
    let (decision, _) = settle(call, key, Access::Write, &clock, |now, stored| {
        throttle(args.limit, args.quantity, now, stored)
    })?;
    call.reply()
        .integers(&cell_reply(&decision, args.limit).as_array());
    Ok(Outcome::of(decision.allowed))
}
