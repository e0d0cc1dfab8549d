//! Work request builders.

use super::mr::MrSlice;
use crate::engine::SendOp;
use crate::engine::{RecvRequest, SendData, SendRequest};

/// A send work request (SEND, WRITE, READ or atomic).
#[derive(Clone, Debug)]
pub struct SendWr {
    wr_id: u64,
    op: SendOp,
    sgl: Vec<MrSlice>,
    inline: Option<Vec<u8>>,
    remote_addr: u64,
    rkey: u32,
    signaled: bool,
    solicited: bool,
    fence: bool,
}

impl SendWr {
    fn new(wr_id: u64, op: SendOp, sgl: &[MrSlice], remote_addr: u64, rkey: u32) -> Self {
        SendWr {
            wr_id,
            op,
            sgl: sgl.to_vec(),
            inline: None,
            remote_addr,
            rkey,
            signaled: true,
            solicited: false,
            fence: false,
        }
    }

    /// SEND the gather list.
    pub fn send(wr_id: u64, sgl: &[MrSlice]) -> Self {
        Self::new(wr_id, SendOp::Send, sgl, 0, 0)
    }

    /// SEND with immediate data.
    pub fn send_imm(wr_id: u64, sgl: &[MrSlice], imm: u32) -> Self {
        Self::new(wr_id, SendOp::SendImm(imm), sgl, 0, 0)
    }

    /// SEND bytes copied at post time (inline).
    pub fn send_inline(wr_id: u64, data: &[u8]) -> Self {
        let mut w = Self::new(wr_id, SendOp::Send, &[], 0, 0);
        w.inline = Some(data.to_vec());
        w
    }

    /// SEND the gather list and invalidate the peer's R_Key `rkey` (a type
    /// 2 memory window bound through the peer QP).
    pub fn send_inv(wr_id: u64, sgl: &[MrSlice], rkey: u32) -> Self {
        Self::new(wr_id, SendOp::SendInv(rkey), sgl, 0, 0)
    }

    /// Bind a memory window (see [`crate::engine::mw::BindMw`]); executed
    /// in send-queue order, with no packet.
    pub fn bind_mw(wr_id: u64, bind: crate::engine::mw::BindMw) -> Self {
        Self::new(wr_id, SendOp::BindMw(bind), &[], 0, 0)
    }

    /// Take back the type 2 memory window of `rkey`; executed in
    /// send-queue order, with no packet.
    pub fn local_inv(wr_id: u64, rkey: u32) -> Self {
        Self::new(wr_id, SendOp::LocalInv(rkey), &[], 0, 0)
    }

    /// RDMA WRITE the gather list to `remote_addr`.
    pub fn write(wr_id: u64, sgl: &[MrSlice], remote_addr: u64, rkey: u32) -> Self {
        Self::new(wr_id, SendOp::Write, sgl, remote_addr, rkey)
    }

    /// RDMA WRITE with immediate data.
    pub fn write_imm(wr_id: u64, sgl: &[MrSlice], remote_addr: u64, rkey: u32, imm: u32) -> Self {
        Self::new(wr_id, SendOp::WriteImm(imm), sgl, remote_addr, rkey)
    }

    /// RDMA WRITE of bytes copied at post time.
    pub fn write_inline(wr_id: u64, data: &[u8], remote_addr: u64, rkey: u32) -> Self {
        let mut w = Self::new(wr_id, SendOp::Write, &[], remote_addr, rkey);
        w.inline = Some(data.to_vec());
        w
    }

    /// RDMA READ from `remote_addr` into the scatter list.
    pub fn read(wr_id: u64, sgl: &[MrSlice], remote_addr: u64, rkey: u32) -> Self {
        Self::new(wr_id, SendOp::Read, sgl, remote_addr, rkey)
    }

    /// Atomic compare-and-swap; the original value lands in `result` (8 bytes).
    pub fn compare_swap(
        wr_id: u64,
        result: &MrSlice,
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> Self {
        Self::new(
            wr_id,
            SendOp::CompSwap { compare, swap },
            std::slice::from_ref(result),
            remote_addr,
            rkey,
        )
    }

    /// Atomic fetch-and-add; the original value lands in `result` (8 bytes).
    pub fn fetch_add(wr_id: u64, result: &MrSlice, remote_addr: u64, rkey: u32, add: u64) -> Self {
        Self::new(
            wr_id,
            SendOp::FetchAdd { add },
            std::slice::from_ref(result),
            remote_addr,
            rkey,
        )
    }

    /// Do not generate a completion on success.
    pub fn unsignaled(mut self) -> Self {
        self.signaled = false;
        self
    }

    /// Set the solicited event bit.
    pub fn solicited(mut self) -> Self {
        self.solicited = true;
        self
    }

    /// Start only once every READ and atomic posted before it has
    /// completed (`IBV_SEND_FENCE`).
    pub fn fenced(mut self) -> Self {
        self.fence = true;
        self
    }

    pub(crate) fn into_request(self) -> SendRequest {
        let data = match self.inline {
            Some(b) => SendData::Inline(b),
            None => SendData::Sges(self.sgl.iter().map(|s| s.sge()).collect()),
        };
        SendRequest {
            wr_id: self.wr_id,
            op: self.op,
            data,
            remote_va: self.remote_addr,
            rkey: self.rkey,
            signaled: self.signaled,
            solicited: self.solicited,
            ud: None,
            fence: self.fence,
        }
    }
}

/// A receive work request.
#[derive(Clone, Debug)]
pub struct RecvWr {
    wr_id: u64,
    sgl: Vec<MrSlice>,
}

impl RecvWr {
    /// Receive into the scatter list.
    pub fn new(wr_id: u64, sgl: &[MrSlice]) -> Self {
        RecvWr {
            wr_id,
            sgl: sgl.to_vec(),
        }
    }

    pub(crate) fn into_request(self) -> RecvRequest {
        RecvRequest {
            wr_id: self.wr_id,
            sges: self.sgl.iter().map(|s| s.sge()).collect(),
        }
    }
}
