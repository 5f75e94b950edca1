//! The arguments of the module's commands: the numbers' bounds and text (SPEC C2, C3),
//! [`WindowMode`] and [`Charge`], checked before anything is sent.

use crate::error::Error;

/// Largest capacity, rate and n the module accepts: 2^53.
pub const MAX_NUMBER: f64 = 9_007_199_254_740_992.0;

/// Smallest rate the module accepts (tokens per second).
pub const MIN_RATE: f64 = 1e-9;

/// TB.WINDOW's counting mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WindowMode {
    /// Fixed windows aligned to multiples of the window since the epoch.
    Fixed,
    /// The weighted estimate over the current and the previous window (the default).
    #[default]
    Sliding,
    /// A sorted set of admitted requests: exact in every window-long interval.
    Log,
}

impl WindowMode {
    pub(super) fn arg(self) -> &'static str {
        match self {
            WindowMode::Fixed => "FIXED",
            WindowMode::Sliding => "SLIDING",
            WindowMode::Log => "LOG",
        }
    }
}

/// One bucket of a multi-key call: TB.MTAKE, or the refunds of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Charge {
    /// The bucket's key.
    pub key: String,
    /// Bucket size (the burst).
    pub capacity: f64,
    /// Tokens added per second.
    pub rate: f64,
    /// Tokens to take (or give back).
    pub n: f64,
}

/// The module's number syntax: plain decimal (Rust's shortest round-trip `Display`, which
/// never uses an exponent), and `0` rather than `-0`.
pub(crate) fn num(x: f64) -> String {
    if x == 0.0 {
        "0".to_owned()
    } else {
        format!("{x}")
    }
}

pub(crate) fn check_shape(capacity: f64, rate: f64) -> Result<(), Error> {
    if !(capacity > 0.0 && capacity <= MAX_NUMBER) {
        return Err(Error::InvalidArgument {
            name: "capacity",
            value: capacity,
            rule: "> 0 and <= 2^53",
        });
    }
    if !((MIN_RATE..=MAX_NUMBER).contains(&rate)) {
        return Err(Error::InvalidArgument {
            name: "rate",
            value: rate,
            rule: ">= 1e-9 and <= 2^53 tokens per second",
        });
    }
    Ok(())
}

pub(crate) fn check_n(n: f64) -> Result<(), Error> {
    if (0.0..=MAX_NUMBER).contains(&n) {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            name: "n",
            value: n,
            rule: ">= 0 and <= 2^53",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_sent_as_plain_decimals() {
        assert_eq!(num(1e-9), "0.000000001");
        assert_eq!(num(1000.0 / 3600.0), "0.2777777777777778");
        assert_eq!(num(10.0), "10");
        assert_eq!(num(-0.0), "0");
        assert_eq!(num(MAX_NUMBER), "9007199254740992");
    }

    #[test]
    fn out_of_range_arguments_are_refused_before_sending() {
        assert!(check_shape(0.0, 1.0).is_err());
        assert!(check_shape(f64::NAN, 1.0).is_err());
        assert!(check_shape(1.0, 1e-10).is_err());
        assert!(check_shape(1.0, f64::INFINITY).is_err());
        assert!(check_shape(MAX_NUMBER, MIN_RATE).is_ok());
        assert!(check_n(-1.0).is_err());
        assert!(check_n(f64::NAN).is_err());
        assert!(check_n(0.0).is_ok());
    }
}
