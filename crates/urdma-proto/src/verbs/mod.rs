//! The verbs layer: object attributes and IB semantics (QP state machine,
//! attribute masks, limits), independent of the engine.

pub mod attr;
pub mod connect;
pub mod gid;
pub mod modify;

pub use attr::{AddressVector, DeviceAttr, PortAttr, QpAttr, QpCap, MAX_MSG_SZ};
pub use connect::{connect_steps, ConnectOptions, Endpoint};
pub use gid::Gid;
