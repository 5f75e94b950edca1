//! The module's replies, typed (SPEC "Names": `Reply`, `MultiReply`, `Reservation`,
//! `Throttle`, `Acquired`, `HoldReply`, `SettleReply`): read alike from RESP2's bulk
//! strings and RESP3's doubles, a malformed reply an error and never a panic.

use redis::Value;

/// One bucket's reply: `[allowed, remaining, retry_after, reset_after]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reply {
    /// Whether the tokens were taken (TB.PEEK: whether one token is there).
    pub allowed: bool,
    /// Tokens left, full precision (negative while reservations are outstanding).
    pub remaining: f64,
    /// Seconds until the request would be admitted: 0 when allowed, -1 when never.
    pub retry_after: f64,
    /// Seconds until the bucket is full.
    pub reset_after: f64,
}

impl Reply {
    /// Refused, and no wait will help (`n > capacity`).
    pub fn never(&self) -> bool {
        !self.allowed && self.retry_after < 0.0
    }
}

/// TB.MTAKE's reply: the aggregate, then one [`Reply`] per bucket in call order.
#[derive(Clone, Debug, PartialEq)]
pub struct MultiReply {
    /// Whether every bucket had its tokens (and all were taken).
    pub allowed: bool,
    /// The smallest per-bucket remaining.
    pub remaining: f64,
    /// 0 when allowed; -1 if any bucket can never admit; else the largest wait.
    pub retry_after: f64,
    /// The largest per-bucket reset_after.
    pub reset_after: f64,
    /// Per bucket: after the deduction when allowed, as it stands when refused (its
    /// `allowed` then says whether this bucket alone had enough).
    pub buckets: Vec<Reply>,
}

/// TB.RESERVE's reply.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reservation {
    /// Whether the tokens were taken (now, or reserved ahead).
    pub allowed: bool,
    /// Tokens left; negative while reservations are outstanding.
    pub remaining: f64,
    /// When allowed: seconds to wait before going ahead (0 = now). When refused: seconds
    /// after which the same reservation would be accepted, -1 when never.
    pub wait: f64,
    /// Seconds until the bucket is full.
    pub reset_after: f64,
}

/// TB.ACQUIRE's reply (SPEC N2): `[granted, in_flight, id or nil, ms]`, with TAKE the
/// buckets' aggregate and one reply per bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct Acquired {
    /// The lease was granted (and every bucket charged).
    pub granted: bool,
    /// Live leases after the call.
    pub in_flight: f64,
    /// The lease id, `None` when refused.
    pub id: Option<String>,
    /// Granted: ms until the lease expires; refused: ms until a slot frees (an upper
    /// bound), 0 when a bucket refused.
    pub ms: f64,
    /// With TAKE: the buckets, in call order (empty without TAKE).
    pub buckets: Vec<Reply>,
}

/// TB.HOLD's reply (SPEC G1): TB.TAKE's four fields and the hold id (`None` when refused).
#[derive(Clone, Debug, PartialEq)]
pub struct HoldReply {
    /// TB.TAKE's four fields.
    pub reply: Reply,
    /// The hold id, `None` when refused.
    pub id: Option<String>,
}

/// TB.SETTLE's reply (SPEC G3): `[settled, remaining, charged, reset_after]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SettleReply {
    /// Whether the hold was settled (false: settled already or expired; nothing changed).
    pub settled: bool,
    /// Tokens left.
    pub remaining: f64,
    /// Actual minus estimate, as the module bounded it.
    pub charged: f64,
    /// Seconds until the bucket is full.
    pub reset_after: f64,
}

/// TB.THROTTLE's reply (redis-cell's `CL.THROTTLE`): whole numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle {
    /// Whether the request was refused.
    pub limited: bool,
    /// `max_burst + 1`.
    pub limit: i64,
    /// Requests left.
    pub remaining: i64,
    /// Seconds until a retry can succeed; -1 when allowed.
    pub retry_after: i64,
    /// Seconds until the limit is whole again.
    pub reset_after: i64,
}

/// Decodes `[allowed, remaining, retry_after, reset_after]` (RESP2 bulk texts or RESP3
/// doubles).
pub(crate) fn parse_reply(v: &Value) -> Result<Reply, String> {
    match v {
        Value::Array(items) if items.len() == 4 => Ok(Reply {
            allowed: flag(&items[0])?,
            remaining: number(&items[1])?,
            retry_after: number(&items[2])?,
            reset_after: number(&items[3])?,
        }),
        other => Err(format!("expected a 4-element array, got {other:?}")),
    }
}

/// Decodes TB.MTAKE's `[allowed, remaining, retry_after, reset_after, [per key ...]]`.
pub(crate) fn parse_multi_reply(v: &Value, keys: usize) -> Result<MultiReply, String> {
    let Value::Array(items) = v else {
        return Err(format!("expected an array, got {v:?}"));
    };
    let [allowed, remaining, retry_after, reset_after, per_key] = items.as_slice() else {
        return Err(format!("expected 5 elements, got {}", items.len()));
    };
    let Value::Array(per_key) = per_key else {
        return Err(format!("expected the per-key array, got {per_key:?}"));
    };
    if per_key.len() != keys {
        return Err(format!(
            "expected {keys} per-key replies, got {}",
            per_key.len()
        ));
    }
    Ok(MultiReply {
        allowed: flag(allowed)?,
        remaining: number(remaining)?,
        retry_after: number(retry_after)?,
        reset_after: number(reset_after)?,
        buckets: per_key.iter().map(parse_reply).collect::<Result<_, _>>()?,
    })
}

fn id_of(v: &Value) -> Result<Option<String>, String> {
    match v {
        Value::Nil => Ok(None),
        Value::BulkString(b) => std::str::from_utf8(b)
            .map(|s| Some(s.to_owned()))
            .map_err(|_| format!("non-UTF-8 id {b:?}")),
        Value::SimpleString(s) => Ok(Some(s.clone())),
        other => Err(format!("expected an id or nil, got {other:?}")),
    }
}

/// Decodes TB.ACQUIRE's reply (SPEC N2), with `keys` buckets after TAKE.
pub(crate) fn parse_acquire(v: &Value, keys: usize) -> Result<Acquired, String> {
    let Value::Array(items) = v else {
        return Err(format!("expected an array, got {v:?}"));
    };
    let (head, buckets) = match (items.as_slice(), keys) {
        ([g, n, id, ms], 0) => ([g, n, id, ms], Vec::new()),
        ([g, n, id, ms, _, Value::Array(per_key)], k) if per_key.len() == k => (
            [g, n, id, ms],
            per_key.iter().map(parse_reply).collect::<Result<_, _>>()?,
        ),
        _ => return Err(format!("unexpected TB.ACQUIRE reply {v:?}")),
    };
    let [g, n, id, ms] = head;
    Ok(Acquired {
        granted: flag(g)?,
        in_flight: number(n)?,
        id: id_of(id)?,
        ms: number(ms)?,
        buckets,
    })
}

/// Decodes TB.HOLD's five fields.
pub(crate) fn parse_hold(v: &Value) -> Result<HoldReply, String> {
    match v {
        Value::Array(items) if items.len() == 5 => Ok(HoldReply {
            reply: Reply {
                allowed: flag(&items[0])?,
                remaining: number(&items[1])?,
                retry_after: number(&items[2])?,
                reset_after: number(&items[3])?,
            },
            id: id_of(&items[4])?,
        }),
        other => Err(format!("expected a 5-element array, got {other:?}")),
    }
}

/// Decodes TB.SETTLE's four fields.
pub(crate) fn parse_settle(v: &Value) -> Result<SettleReply, String> {
    match v {
        Value::Array(items) if items.len() == 4 => Ok(SettleReply {
            settled: flag(&items[0])?,
            remaining: number(&items[1])?,
            charged: number(&items[2])?,
            reset_after: number(&items[3])?,
        }),
        other => Err(format!("expected a 4-element array, got {other:?}")),
    }
}

/// Decodes TB.THROTTLE's five integers.
pub(crate) fn parse_throttle(v: &Value) -> Result<Throttle, String> {
    let int = |v: &Value| match v {
        Value::Int(i) => Ok(*i),
        other => Err(format!("expected an integer, got {other:?}")),
    };
    match v {
        Value::Array(items) if items.len() == 5 => Ok(Throttle {
            limited: flag(&items[0])?,
            limit: int(&items[1])?,
            remaining: int(&items[2])?,
            retry_after: int(&items[3])?,
            reset_after: int(&items[4])?,
        }),
        other => Err(format!("expected a 5-element array, got {other:?}")),
    }
}

pub(super) fn flag(v: &Value) -> Result<bool, String> {
    match v {
        Value::Int(0) | Value::Boolean(false) => Ok(false),
        Value::Int(1) | Value::Boolean(true) => Ok(true),
        other => Err(format!("expected 0 or 1, got {other:?}")),
    }
}

/// A reply that is an array of exactly `N` numbers (TB.PEEK LEASES and HOLDS).
pub(super) fn numbers<const N: usize>(v: &Value) -> Result<[f64; N], String> {
    match v {
        Value::Array(items) if items.len() == N => {
            let mut out = [0.0; N];
            for (slot, item) in out.iter_mut().zip(items) {
                *slot = number(item)?;
            }
            Ok(out)
        }
        other => Err(format!("expected {N} numbers, got {other:?}")),
    }
}

pub(super) fn number(v: &Value) -> Result<f64, String> {
    let text = match v {
        Value::Double(d) => return finite(*d),
        Value::Int(i) => return Ok(*i as f64),
        Value::BulkString(b) => {
            std::str::from_utf8(b).map_err(|_| format!("non-UTF-8 number {b:?}"))?
        }
        Value::SimpleString(s) => s.as_str(),
        other => return Err(format!("expected a number, got {other:?}")),
    };
    let d = text
        .parse::<f64>()
        .map_err(|_| format!("not a number: {text:?}"))?;
    finite(d)
}

fn finite(d: f64) -> Result<f64, String> {
    if d.is_finite() {
        Ok(d)
    } else {
        Err(format!("non-finite number {d}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn resp2_reply_with_bulk_numbers_decodes() {
        let v = Value::Array(vec![Value::Int(0), bulk("0.5"), bulk("1.5"), bulk("4.75")]);
        let r = parse_reply(&v).unwrap();
        assert_eq!(
            r,
            Reply {
                allowed: false,
                remaining: 0.5,
                retry_after: 1.5,
                reset_after: 4.75
            }
        );
        assert!(!r.never());
    }

    #[test]
    fn resp3_reply_with_doubles_decodes() {
        let v = Value::Array(vec![
            Value::Int(0),
            Value::Double(9.0),
            Value::Double(-1.0),
            Value::Double(0.0),
        ]);
        assert!(parse_reply(&v).unwrap().never());
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for v in [
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(2), bulk("1"), bulk("0"), bulk("0")]),
            Value::Array(vec![Value::Int(1), bulk("x"), bulk("0"), bulk("0")]),
            Value::Array(vec![Value::Int(1), bulk("inf"), bulk("0"), bulk("0")]),
            Value::Array(vec![
                Value::Int(1),
                Value::BulkString(vec![0xff]),
                bulk("0"),
                bulk("0"),
            ]),
            Value::Array(vec![Value::Int(1), Value::Nil, bulk("0"), bulk("0")]),
        ] {
            assert!(parse_reply(&v).is_err(), "{v:?}");
        }
    }

    #[test]
    fn mtake_reply_decodes_and_checks_the_key_count() {
        let one = Value::Array(vec![Value::Int(1), bulk("2"), bulk("0"), bulk("3")]);
        let v = Value::Array(vec![
            Value::Int(1),
            bulk("2"),
            bulk("0"),
            bulk("3"),
            Value::Array(vec![one.clone(), one]),
        ]);
        let r = parse_multi_reply(&v, 2).unwrap();
        assert!(r.allowed);
        assert_eq!(r.buckets.len(), 2);
        assert!(parse_multi_reply(&v, 3).is_err());
        assert!(parse_multi_reply(&Value::Array(vec![Value::Int(1)]), 1).is_err());
    }
}
