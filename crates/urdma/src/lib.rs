//! urdma: a software RDMA NIC. Verbs programs do RDMA (SEND/RECV, RDMA
//! WRITE, READ, atomics) over ordinary UDP/IP with the RoCEv2 wire format.
//!
//! This crate is the safe Rust API ([`Device`], [`Pd`], [`Mr`], [`Cq`],
//! [`Qp`]) and the driver's way to its NIC ([`nic`]): the host's shared
//! NIC agent, found or started on first use, or, with the `embedded`
//! feature (on by default), a NIC inside the program
//! ([`Device::open_embedded`]). The layers under it are crates of their
//! own, re-exported here:
//! - `urdma-proto`: the verbs semantics ([`verbs`], [`types`]), the
//!   engine, a deterministic protocol state machine fed datagrams, work
//!   requests and the time ([`engine`]), and the connection manager
//!   ([`cm`]);
//! - `urdma-abi`: what drivers and the NIC share: completion and work
//!   rings in shared memory ([`cq`], [`wq`]), the command protocol,
//!   registered memory ([`mem`]) and the configuration ([`config`]);
//! - `urdma-nic` (feature `embedded`): the NIC: agent, fabrics, capture.
//!
//! ```no_run
//! use urdma::{AccessFlags, Device, DeviceConfig, QpInitAttr, SendWr};
//! # fn main() -> urdma::Result<()> {
//! let dev = Device::open(DeviceConfig::new("127.0.0.1".parse().unwrap()))?;
//! let pd = dev.alloc_pd()?;
//! let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//! let cq = dev.create_cq(64)?;
//! let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
//! let me = qp.endpoint();
//! // ... exchange endpoints out of band, then:
//! # let peer = me.clone();
//! qp.connect(&peer, &Default::default())?;
//! qp.post_send(SendWr::write(1, &[mr.slice(0, 64)?], peer_addr(), 0x1234))?;
//! let wc = cq.wait_one(None)?;
//! assert!(wc.status == urdma::WcStatus::Success);
//! # Ok(()) }
//! # fn peer_addr() -> u64 { 0 }
//! ```

pub mod api;
pub mod nic;

pub use urdma_abi::{config, cq, device, events, mem, procmem, rundir, shm, sig, wq};
pub use urdma_proto::{bufpool, cm, engine, error, mr, rng, types, verbs};

pub use api::{
    ConnectOptions, Cq, Device, DeviceConfig, Endpoint, Mr, MrSlice, Pd, Qp, QpInitAttr, RecvWr,
    SendWr, GID_TABLE_LEN,
};
pub use engine::{Counter, Counters};
pub use error::{Error, Result};
pub use types::{
    AccessFlags, AsyncEvent, AsyncEventKind, Mtu, QpAttrMask, QpState, QpType, WcFlags, WcOpcode,
    WcStatus, WorkCompletion,
};
pub use verbs::{AddressVector, DeviceAttr, Gid, PortAttr, QpAttr, QpCap};
