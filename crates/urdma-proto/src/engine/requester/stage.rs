//! The requester's [`Stage`]: a message's payload read ahead of its
//! packets from memory that prefers large reads.

use crate::engine::tx;
use crate::engine::wqe::SendWqe;

/// Bytes of a message's payload read from registered memory at once for
/// the packets that follow: one access (a system call when the memory is
/// another process's) for a run of packets instead of one per packet.
pub(crate) const STAGE_BYTES: usize = 64 * 1024;

/// Payload of the message being sent, read ahead of its packets when its
/// memory prefers large reads ([`crate::memory::Memory::prefers_large_reads`]).
/// Verbs forbid changing a posted buffer before its WR completes, so the
/// bytes stay good for resends of the same WQE. Only the send pointer's
/// packets fill it (a single resend reads its own bytes unless they are
/// here), and it is emptied when its message's last packet leaves, and
/// with the QP's requester state.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    /// The WQE (first PSN, WR id) the bytes belong to, if any.
    owner: Option<(u32, u64)>,
    bytes: tx::ReadAhead,
}

impl Stage {
    /// The key of `wqe`'s bytes.
    fn key(wqe: &SendWqe) -> (u32, u64) {
        (wqe.first_psn, wqe.wr_id)
    }

    /// The `len` payload bytes at message offset `off` of `wqe`: from
    /// here, or read from `sges` (with what follows, up to
    /// [`STAGE_BYTES`]) if `fill`, else None. A failed read leaves
    /// nothing here.
    pub(super) fn bytes(
        &mut self,
        wqe: &SendWqe,
        sges: &[crate::mr::LocalSge],
        (off, len): (usize, usize),
        fill: bool,
    ) -> Result<Option<&[u8]>, tx::PayloadError> {
        let owner = Some(Self::key(wqe));
        if self.owner != owner {
            if !fill {
                return Ok(None);
            }
            *self = Stage {
                owner,
                ..Stage::default()
            };
        }
        if !fill {
            return Ok(self.bytes.get(off, len));
        }
        let ahead = wqe.len.saturating_sub(off).min(STAGE_BYTES).max(len);
        self.bytes
            .get_or_read(off, len, |at, out| crate::mr::gather(sges, at, ahead, out))
            .map_err(|_| tx::PayloadError)
    }

    /// Forget the bytes of `wqe`, if these are its, and give their memory
    /// back.
    pub(super) fn release(&mut self, wqe: &SendWqe) {
        if self.owner == Some(Self::key(wqe)) {
            *self = Stage::default();
        }
    }
}
