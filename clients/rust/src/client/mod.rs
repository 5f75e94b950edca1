//! The typed client of the module's commands (SPEC "Names": `TbClient`): the arguments
//! ([`args`]), the replies ([`replies`]), the connection with its timeouts
//! ([`connection`]), and the commands on it ([`commands`]). Each imports only those listed
//! before it; this file holds the re-exports. The starts that check the server are
//! `crate::startup`'s.

mod args;
mod commands;
mod connection;
mod replies;

pub(crate) use args::num;
pub use args::{Charge, MAX_NUMBER, MIN_RATE, WindowMode};
pub(crate) use connection::open_url;
pub use connection::{ClientConfig, TbClient};
pub use replies::{Acquired, HoldReply, MultiReply, Reply, Reservation, SettleReply, Throttle};
