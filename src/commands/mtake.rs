//! TB.MTAKE numkeys key [key ...] capacity rate n [capacity rate n ...] [now]: layered
//! limits in one all-or-nothing call. Every key is checked (type, stored state) before any
//! is written, so an error or a short bucket anywhere leaves every bucket as it was.

use crate::algo::bucket;
use crate::algo::num::format_f64;
use crate::binding::stats::Outcome;
use crate::error::TbError;
use crate::parse::args::{has_duplicates, mtake_layout, parse_now, parse_triples};

use super::{Call, Clock, open_parts, store_parts};

pub fn run(call: &Call) -> Result<Outcome, TbError> {
    if call.argv.len() < 6 {
        return Err(TbError::WrongArity);
    }
    let numkeys = call.bytes(1).ok_or(TbError::WrongArity)?;
    let layout = mtake_layout(numkeys, call.argv.len() - 2)?;
    let keys = call
        .argv
        .get(2..2 + layout.keys)
        .ok_or(TbError::NumKeysMismatch)?;
    let first_triple = 2 + layout.keys;
    let triples: Vec<&[u8]> = (first_triple..first_triple + 3 * layout.keys)
        .filter_map(|i| call.bytes(i))
        .collect();
    let limits = parse_triples(&triples)?;
    let now_text = if layout.has_now {
        call.bytes(first_triple + 3 * layout.keys)
    } else {
        None
    };
    let now = parse_now(now_text)?;
    let names: Vec<&[u8]> = (2..first_triple).filter_map(|i| call.bytes(i)).collect();
    if has_duplicates(&names) {
        return Err(TbError::DuplicateKey);
    }
    let clock = Clock::new(call, now, now_text)?;

    let (buckets, parts) = open_parts(call, keys, &limits)?;
    let (mut total, mut each) = bucket::take_all(&parts, clock.now());
    let texts = store_parts(&buckets, &parts, &mut total, &mut each, &clock);
    drop(buckets);

    let reply = call.reply();
    reply.array(5);
    reply.decision_fields(&total, &format_f64(total.remaining));
    reply.array(each.len());
    for (d, text) in each.iter().zip(&texts) {
        reply.decision(d, text);
    }
    Ok(Outcome::of(total.allowed))
}
