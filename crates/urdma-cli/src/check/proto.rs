//! The control messages of `urdma check`, sent as JSON lines.

use super::report::Tally;
use serde::{Deserialize, Serialize};
use urdma::api::RemoteBuf;
use urdma::Endpoint;

/// Control messages of `urdma check`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum Msg {
    /// Client: the run's parameters, its QPs and its buffer.
    Hello {
        seed: u64,
        mtu: usize,
        timeout: u8,
        retry_cnt: u8,
        endpoints: Vec<Endpoint>,
        buf: RemoteBuf,
    },
    /// Server: its QPs (connected to the client's) and its buffer.
    Welcome {
        endpoints: Vec<Endpoint>,
        buf: RemoteBuf,
    },
    /// Server: the session cannot start.
    Refused { error: String },
    /// Client: rounds completed per QP; `aborted` if the client failed.
    Finish { rounds: Vec<u64>, aborted: bool },
    /// Server: what it verified.
    Done { tally: Tally, error: Option<String> },
}
