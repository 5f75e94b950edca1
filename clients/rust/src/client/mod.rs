//! The typed client of the module's commands (SPEC "Names": `TbClient`): the arguments
//! ([`args`]), the replies ([`replies`]), the script library ([`lua`]) and the backends
//! ([`backend`], SPEC E), the connection with its timeouts ([`connection`]), the calls
//! through the backend chosen ([`scripts`]), and the commands on it ([`commands`]). Each
//! imports only those listed before it; this file holds the re-exports. The starts that
//! check the server are `crate::startup`'s.

mod args;
mod backend;
mod commands;
mod connection;
pub mod lua;
mod replies;
mod scripts;

pub(crate) use args::num;
pub use args::{Charge, MAX_NUMBER, MIN_RATE, WindowMode};
pub use backend::{Backend, BackendSetting, Chosen, ScriptsVia};
pub(crate) use connection::open_url;
pub use connection::{ClientConfig, Sent, TbClient, Transport};
pub use replies::{Acquired, HoldReply, MultiReply, Reply, Reservation, SettleReply, Throttle};
