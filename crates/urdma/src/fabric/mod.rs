//! Fabrics: how datagrams leave and reach a device's engine.

pub(crate) mod alarm;
pub mod batch;
pub mod capture;
pub mod embedded;
pub mod events;
pub mod loopback;
pub use urdma_proto::sim;
pub mod stats;
pub mod udp;

#[cfg(test)]
mod timer_tests;
#[cfg(test)]
mod write_pair;
