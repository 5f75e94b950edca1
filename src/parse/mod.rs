//! Bytes to validated values, between the binding and the algorithms: a command's
//! arguments (`args`) and a key's stored field texts (`fields`). Pure: no Redis types, so
//! every byte sequence a client or another writer may send is tested without a server.

pub mod args;
pub mod fields;
pub mod lease;
