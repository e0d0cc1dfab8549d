//! urdma's protocol core: the RoCEv2 engine of a device, the connection
//! manager behind QP 1 and the verbs state machine, with no I/O.
//!
//! Nothing here opens a socket, reads a clock or touches memory outside
//! its own: the engine ([`engine::Engine`]) is fed datagrams, commands and
//! the time, and returns datagrams to send, completions and timer
//! deadlines. It reaches registered memory through [`memory::Memory`],
//! puts completions into [`sink::CompletionSink`]s and takes work requests
//! from [`work::WorkSource`]s; the NIC (the `urdma-abi` and `urdma-nic`
//! crates) implements them over shared memory and other processes'
//! memory, the simulator (module `sim`, with feature `sim`) and the tests
//! over plain buffers.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(unreachable_pub))]

pub mod bufpool;
pub mod cm;
pub mod engine;
pub mod error;
pub mod memory;
pub mod mr;
pub mod rng;
#[cfg(feature = "sim")]
pub mod sim;
pub mod sink;
pub mod types;
pub mod verbs;
pub mod work;

pub use error::{Error, Result};
