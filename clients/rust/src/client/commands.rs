//! The module's commands on a [`TbClient`]: one round trip each, the arguments checked
//! before sending, the reply typed.

use redis::{Cmd, Value};

use crate::error::Error;

use super::args::{Charge, MAX_NUMBER, WindowMode, check_n, check_shape, num};
use super::connection::TbClient;
use super::replies::{
    Acquired, HoldReply, MultiReply, Reply, Reservation, SettleReply, Throttle, flag, number,
    numbers, parse_acquire, parse_hold, parse_settle, parse_throttle,
};

impl TbClient {
    /// `TB.TAKE key capacity rate n` on the server's clock.
    pub async fn take(&self, key: &str, capacity: f64, rate: f64, n: f64) -> Result<Reply, Error> {
        check_shape(capacity, rate)?;
        check_n(n)?;
        let mut cmd = redis::cmd("TB.TAKE");
        cmd.arg(key).arg(num(capacity)).arg(num(rate)).arg(num(n));
        let v = self.call(&cmd).await?;
        self.reply4(&v, "TB.TAKE")
    }

    /// `TB.MTAKE`: every bucket's tokens or none, in one round trip.
    pub async fn mtake(&self, charges: &[Charge]) -> Result<MultiReply, Error> {
        if charges.is_empty() {
            return Err(Error::NoBuckets {
                command: "TB.MTAKE",
            });
        }
        let mut cmd = redis::cmd("TB.MTAKE");
        cmd.arg(charges.len());
        for c in charges {
            check_shape(c.capacity, c.rate)?;
            check_n(c.n)?;
            cmd.arg(c.key.as_str());
        }
        for c in charges {
            cmd.arg(num(c.capacity)).arg(num(c.rate)).arg(num(c.n));
        }
        let v = self.call(&cmd).await?;
        self.multi_reply(&v, charges.len())
    }

    /// The reply of TB.MTAKE sent from a command the caller encoded (the limiter, with its
    /// policies' numbers formatted once, awaits [`TbClient::call`] itself: one async level
    /// less on the request path): `keys` buckets. With one bucket the command is TB.TAKE
    /// (the same decision; a reply half the size to parse), and its reply is given in
    /// TB.MTAKE's shape.
    pub(crate) fn mtake_reply(&self, v: &Value, keys: usize) -> Result<MultiReply, Error> {
        if keys == 1 {
            let r = self.reply4(v, "TB.TAKE")?;
            return Ok(MultiReply {
                allowed: r.allowed,
                remaining: r.remaining,
                retry_after: r.retry_after,
                reset_after: r.reset_after,
                buckets: vec![r],
            });
        }
        self.multi_reply(v, keys)
    }

    /// `TB.PEEK key capacity rate`: the bucket as it stands; writes nothing.
    pub async fn peek(&self, key: &str, capacity: f64, rate: f64) -> Result<Reply, Error> {
        check_shape(capacity, rate)?;
        let mut cmd = redis::cmd("TB.PEEK");
        cmd.arg(key).arg(num(capacity)).arg(num(rate));
        let v = self.call(&cmd).await?;
        self.reply4(&v, "TB.PEEK")
    }

    /// `TB.REFUND key capacity rate n`: gives `n` tokens back, never above capacity.
    pub async fn refund(
        &self,
        key: &str,
        capacity: f64,
        rate: f64,
        n: f64,
    ) -> Result<Reply, Error> {
        check_shape(capacity, rate)?;
        check_n(n)?;
        let mut cmd = redis::cmd("TB.REFUND");
        cmd.arg(key).arg(num(capacity)).arg(num(rate)).arg(num(n));
        let v = self.call(&cmd).await?;
        self.reply4(&v, "TB.REFUND")
    }

    /// One TB.REFUND per charge, pipelined in one round trip on the module (one call each
    /// on the scripts).
    pub async fn refund_many(&self, charges: &[Charge]) -> Result<Vec<Reply>, Error> {
        if charges.is_empty() {
            return Ok(Vec::new());
        }
        if self.inner.transport.is_some()
            || self
                .backend()
                .is_none_or(|b| b.backend != super::backend::Backend::Module)
        {
            // The scripts (SPEC E): one call each, so that each has E3's reload and retry
            // (and a transport, which takes one command at a time).
            let mut out = Vec::with_capacity(charges.len());
            for c in charges {
                check_shape(c.capacity, c.rate)?;
                check_n(c.n)?;
                let mut cmd = redis::cmd("TB.REFUND");
                cmd.arg(c.key.as_str())
                    .arg(num(c.capacity))
                    .arg(num(c.rate))
                    .arg(num(c.n));
                let v = self.call(&cmd).await?;
                out.push(self.reply4(&v, "TB.REFUND")?);
            }
            return Ok(out);
        }
        let mut pipe = redis::pipe();
        for c in charges {
            check_shape(c.capacity, c.rate)?;
            check_n(c.n)?;
            pipe.cmd("TB.REFUND")
                .arg(c.key.as_str())
                .arg(num(c.capacity))
                .arg(num(c.rate))
                .arg(num(c.n));
        }
        let mut conn = self.connection().await?;
        let limit = self.inner.config.call_timeout;
        let v = match tokio::time::timeout(limit, pipe.query_async::<Value>(&mut conn)).await {
            Err(_) => Err(self.timeout(limit)),
            Ok(r) => r.map_err(|e| self.classify(e)),
        };
        let v = self.after_call(v)?;
        match v {
            Value::Array(items) if items.len() == charges.len() => items
                .iter()
                .map(|item| self.reply4(item, "TB.REFUND"))
                .collect(),
            other => Err(self.unexpected("TB.REFUND", format!("pipeline reply {other:?}"))),
        }
    }

    /// `TB.WINDOW key limit window n [now] MODE`: at most `limit` per `window` seconds
    /// (`n` the cost, 0 reports), `now` in Unix seconds or the server's clock. The reply
    /// has TB.TAKE's shape.
    pub async fn window(
        &self,
        key: &str,
        limit: f64,
        window: f64,
        n: f64,
        now: Option<f64>,
        mode: WindowMode,
    ) -> Result<Reply, Error> {
        let positive = |name, value: f64| {
            if value > 0.0 && value <= MAX_NUMBER {
                Ok(())
            } else {
                Err(Error::InvalidArgument {
                    name,
                    value,
                    rule: "> 0 and <= 2^53",
                })
            }
        };
        positive("limit", limit)?;
        positive("window", window)?;
        check_n(n)?;
        let mut cmd = redis::cmd("TB.WINDOW");
        cmd.arg(key).arg(num(limit)).arg(num(window)).arg(num(n));
        if let Some(now) = now {
            if !(now.is_finite() && now >= 0.0) {
                return Err(Error::InvalidArgument {
                    name: "now",
                    value: now,
                    rule: ">= 0 Unix seconds and finite",
                });
            }
            cmd.arg(num(now));
        }
        cmd.arg(mode.arg());
        let v = self.call(&cmd).await?;
        self.reply4(&v, "TB.WINDOW")
    }

    /// `TB.ACQUIRE key limit lease_ms [TAKE numkeys key.. capacity rate n..]` (SPEC N2): one
    /// of `limit` slots as a lease of `lease_ms` on the server's clock, and with `charges`
    /// every bucket's tokens too, all or nothing (TB.MTAKE's layout; empty: no TAKE).
    pub async fn acquire(
        &self,
        key: &str,
        limit: u32,
        lease_ms: u64,
        charges: &[Charge],
    ) -> Result<Acquired, Error> {
        let mut cmd = redis::cmd("TB.ACQUIRE");
        cmd.arg(key).arg(limit).arg(lease_ms);
        if !charges.is_empty() {
            cmd.arg("TAKE").arg(charges.len());
            for c in charges {
                check_shape(c.capacity, c.rate)?;
                check_n(c.n)?;
                cmd.arg(c.key.as_str());
            }
            for c in charges {
                cmd.arg(num(c.capacity)).arg(num(c.rate)).arg(num(c.n));
            }
        }
        self.acquire_encoded(&cmd, charges.len()).await
    }

    /// `TB.PEEK key LEASES`: `(in_flight, ms)`, the live leases and the ms until the
    /// earliest expires (0 when none); writes nothing.
    pub async fn peek_leases(&self, key: &str) -> Result<(f64, f64), Error> {
        let mut cmd = redis::cmd("TB.PEEK");
        cmd.arg(key).arg("LEASES");
        let v = self.call(&cmd).await?;
        let [leases, ms] = numbers(&v).map_err(|d| self.unexpected("TB.PEEK LEASES", d))?;
        Ok((leases, ms))
    }

    /// `TB.PEEK key HOLDS`: `(holds, amount, ms)`, a bucket's live holds, the sum they
    /// charged and the ms until the earliest expires (0 when none); writes nothing.
    pub async fn peek_holds(&self, key: &str) -> Result<(f64, f64, f64), Error> {
        let mut cmd = redis::cmd("TB.PEEK");
        cmd.arg(key).arg("HOLDS");
        let v = self.call(&cmd).await?;
        let [holds, amount, ms] = numbers(&v).map_err(|d| self.unexpected("TB.PEEK HOLDS", d))?;
        Ok((holds, amount, ms))
    }

    /// TB.ACQUIRE from a command the caller encoded (SPEC N2): `keys` buckets after TAKE
    /// (0: the form without TAKE).
    pub(crate) async fn acquire_encoded(&self, cmd: &Cmd, keys: usize) -> Result<Acquired, Error> {
        let v = self.call(cmd).await?;
        parse_acquire(&v, keys).map_err(|detail| self.unexpected("TB.ACQUIRE", detail))
    }

    /// TB.WINDOW from a command the caller encoded (SPEC W2), in TB.MTAKE's shape.
    pub(crate) async fn window_encoded(&self, cmd: &Cmd) -> Result<MultiReply, Error> {
        let v = self.call(cmd).await?;
        let r = self.reply4(&v, "TB.WINDOW")?;
        Ok(MultiReply {
            allowed: r.allowed,
            remaining: r.remaining,
            retry_after: r.retry_after,
            reset_after: r.reset_after,
            buckets: vec![r],
        })
    }

    /// `TB.RELEASE key lease_id`: `(released, in_flight)` (SPEC N4).
    pub async fn release(&self, key: &str, id: &str) -> Result<(bool, f64), Error> {
        let mut cmd = redis::cmd("TB.RELEASE");
        cmd.arg(key).arg(id);
        let v = self.call(&cmd).await?;
        match &v {
            Value::Array(items) if items.len() == 2 => Ok((
                flag(&items[0]).map_err(|d| self.unexpected("TB.RELEASE", d))?,
                number(&items[1]).map_err(|d| self.unexpected("TB.RELEASE", d))?,
            )),
            other => Err(self.unexpected("TB.RELEASE", format!("{other:?}"))),
        }
    }

    /// `TB.RENEW key lease_id lease_ms`: `(renewed, in_flight, ms)` (SPEC N5).
    pub async fn renew(
        &self,
        key: &str,
        id: &str,
        lease_ms: u64,
    ) -> Result<(bool, f64, f64), Error> {
        let mut cmd = redis::cmd("TB.RENEW");
        cmd.arg(key).arg(id).arg(lease_ms);
        let v = self.call(&cmd).await?;
        match &v {
            Value::Array(items) if items.len() == 3 => {
                let bad = |d| self.unexpected("TB.RENEW", d);
                Ok((
                    flag(&items[0]).map_err(bad)?,
                    number(&items[1]).map_err(bad)?,
                    number(&items[2]).map_err(bad)?,
                ))
            }
            other => Err(self.unexpected("TB.RENEW", format!("{other:?}"))),
        }
    }

    /// `TB.HOLD key capacity rate estimate ttl_ms` (SPEC G1).
    pub async fn hold(
        &self,
        key: &str,
        capacity: f64,
        rate: f64,
        estimate: f64,
        ttl_ms: u64,
    ) -> Result<HoldReply, Error> {
        check_shape(capacity, rate)?;
        check_n(estimate)?;
        let mut cmd = redis::cmd("TB.HOLD");
        cmd.arg(key)
            .arg(num(capacity))
            .arg(num(rate))
            .arg(num(estimate))
            .arg(ttl_ms);
        let v = self.call(&cmd).await?;
        parse_hold(&v).map_err(|d| self.unexpected("TB.HOLD", d))
    }

    /// `TB.SETTLE key capacity rate hold_id actual max_wait` (SPEC G3): an excess over the
    /// estimate leaves a debt of at most `max_wait x rate` (the limiter sends `capacity /
    /// rate`: at most one bucket).
    pub async fn settle(
        &self,
        key: &str,
        capacity: f64,
        rate: f64,
        id: &str,
        actual: f64,
        max_wait: f64,
    ) -> Result<SettleReply, Error> {
        check_shape(capacity, rate)?;
        check_n(actual)?;
        check_max_wait(max_wait)?;
        let mut cmd = redis::cmd("TB.SETTLE");
        cmd.arg(key)
            .arg(num(capacity))
            .arg(num(rate))
            .arg(id)
            .arg(num(actual))
            .arg(num(max_wait));
        let v = self.call(&cmd).await?;
        parse_settle(&v).map_err(|d| self.unexpected("TB.SETTLE", d))
    }

    /// `TB.THROTTLE key max_burst count_per_period period quantity` (redis-cell's
    /// `CL.THROTTLE`), on TB.TAKE's engine.
    pub async fn throttle(
        &self,
        key: &str,
        max_burst: u64,
        count_per_period: f64,
        period: f64,
        quantity: i64,
    ) -> Result<Throttle, Error> {
        let invalid = |name, value: f64, rule| Error::InvalidArgument { name, value, rule };
        if max_burst as f64 >= MAX_NUMBER {
            return Err(invalid("max_burst", max_burst as f64, "< 2^53"));
        }
        if !(count_per_period > 0.0 && count_per_period.is_finite()) {
            return Err(invalid(
                "count_per_period",
                count_per_period,
                "> 0 and finite",
            ));
        }
        if !(period > 0.0 && period.is_finite()) {
            return Err(invalid("period", period, "> 0 seconds and finite"));
        }
        if quantity.unsigned_abs() > 1u64 << 53 {
            return Err(invalid("quantity", quantity as f64, "within +-2^53"));
        }
        let mut cmd = redis::cmd("TB.THROTTLE");
        cmd.arg(key)
            .arg(max_burst)
            .arg(num(count_per_period))
            .arg(num(period))
            .arg(quantity);
        let v = self.call(&cmd).await?;
        parse_throttle(&v).map_err(|detail| self.unexpected("TB.THROTTLE", detail))
    }

    /// `TB.RESERVE key capacity rate n max_wait`: take now, or reserve and wait up to
    /// `max_wait` seconds.
    pub async fn reserve(
        &self,
        key: &str,
        capacity: f64,
        rate: f64,
        n: f64,
        max_wait: f64,
    ) -> Result<Reservation, Error> {
        check_shape(capacity, rate)?;
        check_n(n)?;
        check_max_wait(max_wait)?;
        let mut cmd = redis::cmd("TB.RESERVE");
        cmd.arg(key)
            .arg(num(capacity))
            .arg(num(rate))
            .arg(num(n))
            .arg(num(max_wait));
        let v = self.call(&cmd).await?;
        let r = self.reply4(&v, "TB.RESERVE")?;
        Ok(Reservation {
            allowed: r.allowed,
            remaining: r.remaining,
            wait: r.retry_after,
            reset_after: r.reset_after,
        })
    }
}

/// TB.RESERVE's and TB.SETTLE's `max_wait`: seconds, finite, not negative.
fn check_max_wait(max_wait: f64) -> Result<(), Error> {
    if max_wait.is_finite() && max_wait >= 0.0 {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        name: "max_wait",
        value: max_wait,
        rule: ">= 0 seconds and finite",
    })
}
