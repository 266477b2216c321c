//! The client around the kinds, on real servers: how it connects (ACL users, RESP2, a
//! `ConnectionInfo`), its subscription listener, bad input, and its end (dropped, shut down).

mod acl;
mod bad_input;
mod client_closed;
mod connection_info;
mod listener;
mod resp2;
mod shutdown;
