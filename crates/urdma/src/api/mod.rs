//! The safe Rust API: Arc-owned handles over one device's engine.
//!
//! Buffers are registered memory owned by an [`Mr`]; work requests name
//! them through [`MrSlice`]s. A slice handed to the engine keeps its region
//! alive, and [`Mr::read_at`] / [`Mr::write_at`] refuse ranges that a
//! posted work request is still using, so a buffer can be neither freed nor
//! reused while in flight.

mod cq;
mod device;
mod mr;
mod qp;
mod wr;

#[cfg(all(test, feature = "embedded"))]
mod progress_tests;
#[cfg(all(test, feature = "embedded"))]
mod timer_tests;
#[cfg(all(test, feature = "embedded"))]
mod write_pair;

pub use crate::verbs::{connect_steps, ConnectOptions, Endpoint};
pub use cq::Cq;
pub use device::{
    device_attr_for, gid_for, node_guid, port_attr_for, Device, DeviceConfig, GID_TABLE_LEN,
};
pub use mr::{Mr, MrSlice, Pd, RemoteBuf};
pub use qp::{Qp, QpInitAttr};
pub use wr::{RecvWr, SendWr};
