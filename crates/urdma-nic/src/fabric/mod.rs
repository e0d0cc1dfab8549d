//! Fabrics: how datagrams leave and reach a device's engine.

pub(crate) mod alarm;
pub mod batch;
pub mod capture;
pub mod embedded;
pub mod stats;
pub mod udp;
