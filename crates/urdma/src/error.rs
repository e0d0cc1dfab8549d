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

impl Error {
    /// The errno value a libibverbs caller expects for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::InvalidArgument(_) | Error::WrongState(_) | Error::BadTransition { .. } => {
                libc::EINVAL
            }
            Error::Exhausted(_) => libc::ENOMEM,
            Error::NotFound(_) => libc::ENOENT,
            Error::Busy(_) => libc::EBUSY,
            Error::CqOverrun => libc::EOVERFLOW,
            Error::NotSupported(_) => libc::EOPNOTSUPP,
            Error::Timeout => libc::ETIMEDOUT,
            Error::Io(e) => e.raw_os_error().unwrap_or(match e.kind() {
                std::io::ErrorKind::PermissionDenied => libc::EACCES,
                std::io::ErrorKind::AddrInUse => libc::EADDRINUSE,
                std::io::ErrorKind::AddrNotAvailable => libc::EADDRNOTAVAIL,
                std::io::ErrorKind::InvalidInput => libc::EINVAL,
                std::io::ErrorKind::TimedOut => libc::ETIMEDOUT,
                _ => libc::EIO,
            }),
        }
    }

    pub(crate) fn inval(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }
}
