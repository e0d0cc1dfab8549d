//! Errors returned by the verbs layer and the Rust API.

use crate::types::QpState;

/// Result alias used throughout urdma.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from a verbs call. Each variant maps to the errno a C verbs
/// caller would see (see [`Error::errno`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An argument is out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The QP is in a state that does not allow the operation.
    #[error("operation not allowed in QP state {0:?}")]
    WrongState(QpState),
    /// A modify_qp transition or attribute mask IBTA does not allow.
    #[error("invalid QP transition {from:?} -> {to:?}: {reason}")]
    BadTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// What is wrong with the attribute mask or values.
        reason: String,
    },
    /// A queue or table is full (send queue, receive queue, key space).
    #[error("resource exhausted: {0}")]
    Exhausted(String),
    /// A key or handle does not name a live object.
    #[error("no such object: {0}")]
    NotFound(String),
    /// The object is still referenced (e.g. a PD with MRs, a CQ with QPs).
    #[error("object busy: {0}")]
    Busy(String),
    /// The completion queue overflowed; completions were lost and the CQ is in error.
    #[error("completion queue overrun")]
    CqOverrun,
    /// The operation is not supported by urdma.
    #[error("not supported: {0}")]
    NotSupported(String),
    /// A wait timed out.
    #[error("timed out")]
    Timeout,
    /// An operating system error (socket, memory allocation).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The Linux errno values the verbs ABI reports (the same on every Linux
/// architecture urdma builds for; the NIC's tests hold them against the
/// C library's).
pub mod errno {
    /// Operation not permitted.
    pub const EACCES: i32 = 13;
    /// Object busy.
    pub const EBUSY: i32 = 16;
    /// No such object.
    pub const ENOENT: i32 = 2;
    /// I/O error.
    pub const EIO: i32 = 5;
    /// Out of memory (a queue or table is full).
    pub const ENOMEM: i32 = 12;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// Address in use.
    pub const EADDRINUSE: i32 = 98;
    /// Address not available.
    pub const EADDRNOTAVAIL: i32 = 99;
    /// Value too large (a CQ overrun).
    pub const EOVERFLOW: i32 = 75;
    /// Operation not supported.
    pub const EOPNOTSUPP: i32 = 95;
    /// Timed out.
    pub const ETIMEDOUT: i32 = 110;
}

impl Error {
    /// The errno value a libibverbs caller expects for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::InvalidArgument(_) | Error::WrongState(_) | Error::BadTransition { .. } => {
                errno::EINVAL
            }
            Error::Exhausted(_) => errno::ENOMEM,
            Error::NotFound(_) => errno::ENOENT,
            Error::Busy(_) => errno::EBUSY,
            Error::CqOverrun => errno::EOVERFLOW,
            Error::NotSupported(_) => errno::EOPNOTSUPP,
            Error::Timeout => errno::ETIMEDOUT,
            Error::Io(e) => e.raw_os_error().unwrap_or(match e.kind() {
                std::io::ErrorKind::PermissionDenied => errno::EACCES,
                std::io::ErrorKind::AddrInUse => errno::EADDRINUSE,
                std::io::ErrorKind::AddrNotAvailable => errno::EADDRNOTAVAIL,
                std::io::ErrorKind::InvalidInput => errno::EINVAL,
                std::io::ErrorKind::TimedOut => errno::ETIMEDOUT,
                _ => errno::EIO,
            }),
        }
    }

    /// An [`Error::InvalidArgument`] saying `msg`.
    pub fn inval(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }
}
