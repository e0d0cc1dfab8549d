//! The protocol between drivers and the NIC agent.
//!
//! A driver connects to the agent's Unix socket (`SOCK_SEQPACKET`, one
//! message per packet) and says [`Request::Hello`], passing two file
//! descriptors: its own `/proc/self/mem` (the agent's only way to its
//! registered memory) and one end of a socket pair on which the agent sends
//! [`Event`]s; the agent answers [`Value::Agent`] with its settings. Then each [`Request`] is answered by one [`Response`], except
//! [`Request::Doorbell`], which is not answered. Work requests do not travel
//! on the socket: a driver writes them into work queue rings in shared
//! memory ([`crate::wq`]) and rings a doorbell only when the NIC asked for
//! one (a new request could go out at once); completions come back through CQ
//! rings in shared memory. Rings travel as descriptors: a CQ's with
//! [`Request::CreateCq`], a QP's send and receive queues (the receive queue
//! only without an SRQ) with [`Request::CreateQp`], an SRQ's with
//! a `CreateSrq` [`Request::Verb`]. Messages are bincode-encoded; the agent bounds every
//! message by [`MAX_MESSAGE`] and decodes with that limit.

use crate::engine::SrqAttr;
use crate::error::Error;
use crate::types::{AccessFlags, AsyncEvent, QpType};
use crate::verbs::{QpAttr, QpCap};
use bincode::Options;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

/// Protocol version; a driver and an agent of different versions refuse
/// each other at [`Request::Hello`].
pub const VERSION: u32 = 10;

/// What the agent answers a [`Request::Hello`]: itself, and its values of
/// the settings of the NIC, which a program compares with its own
/// ([`crate::config::check_agent`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    /// The agent's process.
    pub pid: u32,
    /// How long it runs on once no program uses it (None: until stopped).
    pub linger_ms: Option<u64>,
    /// Its settings of the NIC: (file key, value as the file writes it).
    pub settings: Vec<(String, String)>,
}

/// Largest message either side sends or accepts.
pub const MAX_MESSAGE: usize = 256 << 10;

/// What a driver asks of the NIC.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// First message of a session; passes the memory file and the event socket.
    Hello {
        /// [`VERSION`] of the driver.
        version: u32,
        /// Random bytes the driver keeps, which the NIC's cross-memory
        /// reads check ([`crate::procmem`]); None: reads take the file.
        sentinel: Option<crate::procmem::Sentinel>,
    },
    /// Open (or share) the device on `addr`; answers [`Value::Device`].
    OpenDevice {
        /// Device name.
        name: String,
        /// Its address.
        addr: IpAddr,
        /// Its UDP port.
        port: u16,
    },
    /// An engine command that is plain data, as the engine takes it
    /// ([`crate::engine::command::Verb`]); answers as the command does
    /// ([`Value::Number`], [`Value::Done`], [`Value::QpAttr`],
    /// [`Value::SrqAttr`], [`Value::Flag`]), but `CreateSrq`, which
    /// answers [`Value::Srq`] and comes with the descriptor of its ring,
    /// as a `ModifySrq` of a new capacity does.
    Verb(crate::engine::command::Verb),
    /// Register `len` bytes of the driver's memory at `addr` (with
    /// `shared`: the passed memfd's first `len` bytes instead).
    RegMr {
        /// The PD.
        pd: u32,
        /// Access rights.
        access: AccessFlags,
        /// Address known to peers.
        iova: u64,
        /// Address in the driver's process.
        addr: u64,
        /// Length.
        len: u64,
        /// The memory is the memfd passed with the request.
        shared: bool,
        /// Re-register the driver's MR of this key (`ibv_rereg_mr`).
        rekey: Option<u32>,
    },
    /// Reserve a CQ number for a CQ about to be created.
    ReserveCq,
    /// Create a CQ whose ring is the passed descriptor.
    CreateCq {
        /// Number from [`Request::ReserveCq`].
        cqn: u32,
        /// Completions the ring holds.
        capacity: u32,
    },
    /// Replace a CQ's ring by the passed descriptor (the program holds its
    /// consumers off meanwhile): the completions waiting move into it.
    ResizeCq {
        /// The CQ.
        cqn: u32,
        /// Completions the new ring holds.
        capacity: u32,
    },
    /// Destroy a CQ no QP uses.
    DestroyCq {
        /// The CQ.
        cqn: u32,
    },
    /// Raise the CQ's completion events on a CQ of the kernel (one the
    /// driver created through uverbs, with the kernel's completion
    /// channel) instead of sending them to the driver.
    BindCq {
        /// The CQ.
        cqn: u32,
        /// The kernel's CQ.
        kernel: super::kernel::KernelObject,
    },
    /// Raise the QP's asynchronous events on a QP of the kernel (one the
    /// driver created through uverbs) instead of sending them to the
    /// driver.
    BindQp {
        /// The QP.
        qpn: u32,
        /// The kernel's QP.
        kernel: super::kernel::KernelObject,
    },
    /// Raise the SRQ's asynchronous events on an SRQ of the kernel.
    BindSrq {
        /// The SRQ.
        srqn: u32,
        /// The kernel's SRQ.
        kernel: super::kernel::KernelObject,
    },
    /// Create a QP.
    CreateQp {
        /// The PD.
        pd: u32,
        /// Transport.
        qp_type: QpType,
        /// Capacities.
        cap: QpCap,
        /// Signal every send WR.
        sq_sig_all: bool,
        /// Send CQ.
        send_cq: u32,
        /// Receive CQ.
        recv_cq: u32,
        /// SRQ, if any.
        srq: Option<u32>,
    },
    /// A call on the device's communication manager; answers
    /// [`Value::CmId`].
    Cm(crate::cm::CmOp),
    /// New work in the rings of an idle QP (not answered).
    Doorbell {
        /// The QP.
        qpn: u32,
    },
    /// Capture the device's traffic, for as long as the session lasts,
    /// into the passed file (opened by the driver, so the agent writes
    /// nowhere the driver could not).
    Capture {
        /// Largest file size in bytes.
        limit: u64,
    },
    /// Device counters.
    Counters,
    /// Counters of one QP.
    QpCounters {
        /// The QP.
        qpn: u32,
    },
}

impl Request {
    /// True for the requests the agent does not answer.
    pub fn is_post(&self) -> bool {
        matches!(self, Request::Doorbell { .. })
    }
}

/// A successful answer.
#[derive(Debug, Serialize, Deserialize)]
pub enum Value {
    /// Nothing to return.
    Done,
    /// The answer to [`Request::Hello`].
    Agent(AgentInfo),
    /// What a CM call answers: a new connection's ID, if it made one.
    CmId(Option<u32>),
    /// A number (PD, QP, SRQ, CQ, key).
    Number(u32),
    /// The device: its bound address and GID table.
    Device {
        /// Address and UDP port the NIC bound.
        local: SocketAddr,
        /// Port 1's GID table: the address each entry stands for.
        gids: Vec<SocketAddr>,
    },
    /// QP attributes.
    QpAttr(QpAttr),
    /// SRQ number and attributes.
    Srq(u32, SrqAttr),
    /// SRQ attributes.
    SrqAttr(SrqAttr),
    /// Yes or no.
    Flag(bool),
    /// Counter values in table order (absent: no such QP).
    Counters(Option<Vec<u64>>),
}

/// An error as it crosses the channel: the variant of [`Error`] and its text.
#[derive(Debug, Serialize, Deserialize)]
pub enum WireError {
    /// [`Error::InvalidArgument`]
    Invalid(String),
    /// [`Error::WrongState`]
    WrongState(crate::types::QpState),
    /// [`Error::BadTransition`]
    BadTransition(crate::types::QpState, crate::types::QpState, String),
    /// [`Error::Exhausted`]
    Exhausted(String),
    /// [`Error::NotFound`]
    NotFound(String),
    /// [`Error::Busy`]
    Busy(String),
    /// [`Error::CqOverrun`]
    CqOverrun,
    /// [`Error::NotSupported`]
    NotSupported(String),
    /// [`Error::Timeout`]
    Timeout,
    /// [`Error::Io`]: errno and text.
    Io(i32, String),
}

impl From<&Error> for WireError {
    fn from(e: &Error) -> Self {
        match e {
            Error::InvalidArgument(s) => WireError::Invalid(s.clone()),
            Error::WrongState(s) => WireError::WrongState(*s),
            Error::BadTransition { from, to, reason } => {
                WireError::BadTransition(*from, *to, reason.clone())
            }
            Error::Exhausted(s) => WireError::Exhausted(s.clone()),
            Error::NotFound(s) => WireError::NotFound(s.clone()),
            Error::Busy(s) => WireError::Busy(s.clone()),
            Error::CqOverrun => WireError::CqOverrun,
            Error::NotSupported(s) => WireError::NotSupported(s.clone()),
            Error::Timeout => WireError::Timeout,
            Error::Io(io) => WireError::Io(e.errno(), io.to_string()),
        }
    }
}

impl From<WireError> for Error {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Invalid(s) => Error::InvalidArgument(s),
            WireError::WrongState(s) => Error::WrongState(s),
            WireError::BadTransition(from, to, reason) => Error::BadTransition { from, to, reason },
            WireError::Exhausted(s) => Error::Exhausted(s),
            WireError::NotFound(s) => Error::NotFound(s),
            WireError::Busy(s) => Error::Busy(s),
            WireError::CqOverrun => Error::CqOverrun,
            WireError::NotSupported(s) => Error::NotSupported(s),
            WireError::Timeout => Error::Timeout,
            WireError::Io(errno, text) => {
                tracing::debug!(errno, text, "error from the NIC");
                Error::Io(std::io::Error::from_raw_os_error(errno))
            }
        }
    }
}

/// The answer to a request.
pub type Response = Result<Value, WireError>;

/// What the agent tells a driver without being asked.
#[derive(Debug, Serialize, Deserialize)]
pub enum Event {
    /// An armed CQ received a completion that fires it.
    CqFired(u32),
    /// An asynchronous event on one of the driver's objects.
    Async(AsyncEvent),
    /// An event of one of the driver's CM connections.
    Cm(crate::cm::CmEvent),
}

fn options() -> impl Options {
    bincode::DefaultOptions::new().with_limit(MAX_MESSAGE as u64)
}

/// Encode a message.
pub fn encode<T: Serialize>(msg: &T) -> std::io::Result<Vec<u8>> {
    let v = options()
        .serialize(msg)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    if v.len() > MAX_MESSAGE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "message too large",
        ));
    }
    Ok(v)
}

/// Decode a message, never allocating beyond [`MAX_MESSAGE`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> std::io::Result<T> {
    options()
        .deserialize(bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::command::{ModifyQp, Verb};
    use crate::types::QpAttrMask;

    /// An engine command crosses as it is, unknown mask bits kept, so
    /// that the agent's check of them sees what the driver sent.
    #[test]
    fn verbs_cross_as_the_engine_takes_them() {
        let mask = QpAttrMask::STATE | QpAttrMask::from_bits_retain(1 << 31);
        let r = Request::Verb(Verb::ModifyQp(ModifyQp {
            qpn: 0x42,
            attr: QpAttr::default(),
            mask,
        }));
        let back: Request = decode(&encode(&r).unwrap()).unwrap();
        let Request::Verb(Verb::ModifyQp(c)) = back else {
            panic!("another request came back: {back:?}");
        };
        assert_eq!((c.qpn, c.mask.bits()), (0x42, mask.bits()));
        assert!(QpAttrMask::from_bits(c.mask.bits()).is_none());
    }

    #[test]
    fn requests_round_trip_and_garbage_is_an_error() {
        let r = Request::RegMr {
            pd: 3,
            access: AccessFlags::REMOTE_WRITE,
            iova: 1 << 40,
            addr: 0x1000,
            len: 4096,
            shared: false,
            rekey: None,
        };
        let back: Request = decode(&encode(&r).unwrap()).unwrap();
        assert!(matches!(
            back,
            Request::RegMr {
                pd: 3,
                len: 4096,
                ..
            }
        ));
        for junk in [
            &[][..],
            &[0xff; 9][..],
            &[14, 0xff, 0xff, 0xff, 0xff, 0x0f][..],
        ] {
            assert!(decode::<Request>(junk).is_err());
        }
        let e: Error = WireError::from(&Error::Busy("cq".into())).into();
        assert_eq!(e.errno(), libc::EBUSY);
        let e: Error =
            WireError::from(&Error::Io(std::io::Error::from_raw_os_error(libc::EFAULT))).into();
        assert_eq!(e.errno(), libc::EFAULT);
    }
}

/// An object whose asynchronous events go to the session that made it
/// (or to the kernel object it is bound to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Object {
    /// A QP.
    Qp(u32),
    /// A CQ.
    Cq(u32),
    /// An SRQ.
    Srq(u32),
}
