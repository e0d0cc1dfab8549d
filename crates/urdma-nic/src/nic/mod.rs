//! The NIC as its own agent.
//!
//! A urdma NIC is one per address, shared by every process of the host:
//! the agent ([`agent`]) runs the engines and owns UDP port 4791 of the
//! addresses it serves; drivers (the Rust API, the drop-in libibverbs, the
//! provider) reach it through a command socket ([`urdma_abi::proto`],
//! [`urdma_abi::channel`]) accepted by [`acceptor`], one [`session`] each,
//! completion rings in shared memory ([`urdma_abi::cq::CqShared`]) and
//! their own `/proc/self/mem`, which they pass to the agent as its only
//! way to their registered memory. The kernel module's NIC file
//! ([`kernel_chan`]) brings kernel consumers to the same engines.

pub mod acceptor;
pub mod agent;
mod cm_local;
pub mod cm_routes;
pub mod devices;
pub mod event_sink;
pub mod kernel_chan;
mod kernel_msg;
pub mod kernel_rc;
pub mod memfile;
pub mod session;

use urdma_abi::{addr, channel, kernel, proto};
