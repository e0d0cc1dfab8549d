//! The urdma NIC: what an RDMA NIC is to a host, in software.
//!
//! - [`nic`]: the agent, the process that is the NIC of a host (of a
//!   network namespace): it owns UDP port 4791 of the addresses it
//!   serves, runs one engine per address and serves every process's
//!   drivers over the command protocol of [`urdma_abi::proto`]; its
//!   sessions, one per driver connection; the kernel module's NIC file
//!   and the kernel's RC connections.
//! - [`fabric`]: how datagrams leave and reach an engine: the UDP socket
//!   and its receive thread, internal loopback between the devices of one
//!   NIC, packet capture, counters, and the NIC a program embeds
//!   ([`fabric::embedded::EmbeddedNic`]).
//!
//! The engine itself (the protocol state machine) is `urdma-proto`'s;
//! the rings and the command protocol shared with drivers are
//! `urdma-abi`'s.

pub mod fabric;
pub mod nic;

use urdma_abi::{config, cq, device, events, mem, procmem, rundir, shm, wq};
use urdma_abi::{kernel, proto};
use urdma_proto::error::{Error, Result};
use urdma_proto::{bufpool, cm, engine, error, mr, types, verbs};
