//! The urdma kernel module's NIC file (`/dev/urdma`, see
//! `kernel/urdma_abi.h`): how the NIC raises completion events on the
//! kernel's completion channels, and asynchronous events on the kernel's
//! async event files, for CQs, QPs and SRQs that a provider created
//! through uverbs. Only root opens it.

use crate as abi;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::raw::c_char;
use std::sync::{Arc, OnceLock};

/// Path of the NIC file.
pub const PATH: &str = "/dev/urdma";

/// Room for a device name in a command.
const IBDEV_NAME_LEN: usize = abi::URDMA_IBDEV_NAME_LEN as usize;

nix::ioctl_write_ptr_bad!(
    /// `URDMA_IOC_CQ_EVENT`: raise a completion event on a kernel CQ.
    ioc_cq_event, abi::URDMA_IOC_CQ_EVENT, abi::urdma_cq_event);
nix::ioctl_write_ptr_bad!(
    /// `URDMA_IOC_EVENT`: raise an asynchronous event on a kernel object.
    ioc_event, abi::URDMA_IOC_EVENT, abi::urdma_event);

/// A kernel CQ, QP or SRQ that the NIC signals: its device and number.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelObject {
    /// The kernel device's name (`urdma0`).
    pub ibdev: String,
    /// The number the kernel's create_cq, create_qp or create_srq returned.
    pub id: u32,
}

/// The open NIC file.
#[derive(Debug)]
pub struct KernelNic {
    file: File,
}

impl KernelNic {
    /// The process's NIC file, opened on first use (a failed open is
    /// tried again next time: the module may be loaded later); the error
    /// says why it cannot be opened (no module loaded, not root).
    pub fn shared() -> io::Result<Arc<KernelNic>> {
        static NIC: OnceLock<Arc<KernelNic>> = OnceLock::new();
        if let Some(nic) = NIC.get() {
            return Ok(nic.clone());
        }
        let file = File::options()
            .read(true)
            .write(true)
            .open(PATH)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot open {PATH}: {e}")))?;
        Ok(NIC.get_or_init(|| Arc::new(KernelNic { file })).clone())
    }

    /// Raise the asynchronous event `kind` (an `ibv_event_type`: a QP's
    /// event, IBV_EVENT_CQ_ERR or an SRQ's event) on `obj`, an object of
    /// process `pid`.
    pub fn event(&self, obj: &KernelObject, kind: u32, pid: u32) -> io::Result<()> {
        let cmd = abi::urdma_event {
            ibdev: ibdev_field(&obj.ibdev)?,
            type_: kind,
            obj: obj.id,
            pid,
            reserved: 0,
        };
        // SAFETY: as in cq_event.
        unsafe { ioc_event(self.file.as_raw_fd(), &cmd) }
            .map(drop)
            .map_err(io::Error::from)
    }

    /// Raise a completion event on `cq`, a CQ of process `pid`.
    pub fn cq_event(&self, cq: &KernelObject, pid: u32) -> io::Result<()> {
        let cmd = cq_event_cmd(cq, pid)?;
        // SAFETY: the command is a live, fully initialised struct of the
        // layout the ioctl number encodes; the kernel only reads it.
        unsafe { ioc_cq_event(self.file.as_raw_fd(), &cmd) }
            .map(drop)
            .map_err(io::Error::from)
    }
}

/// A CQ notifier ([`crate::cq::CqNotifier`]) that raises each event of a
/// CQ of process `pid` on the kernel's `cq`; fails if the NIC file cannot
/// be opened.
pub fn cq_notifier(cq: KernelObject, pid: u32) -> io::Result<crate::cq::CqNotifier> {
    let nic = KernelNic::shared()?;
    ibdev_field(&cq.ibdev)?;
    Ok(Box::new(move || {
        if let Err(e) = nic.cq_event(&cq, pid) {
            tracing::debug!(ibdev = %cq.ibdev, cq = cq.id, pid, error = %e, "kernel CQ event not raised");
        }
    }))
}

fn cq_event_cmd(cq: &KernelObject, pid: u32) -> io::Result<abi::urdma_cq_event> {
    Ok(abi::urdma_cq_event {
        ibdev: ibdev_field(&cq.ibdev)?,
        cq: cq.id,
        pid,
    })
}

/// A device name as a command carries it: NUL-terminated, checked.
fn ibdev_field(name: &str) -> io::Result<[c_char; IBDEV_NAME_LEN]> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= IBDEV_NAME_LEN || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad kernel device name {name:?}"),
        ));
    }
    let mut field = [0; IBDEV_NAME_LEN];
    for (f, &b) in field.iter_mut().zip(bytes) {
        *f = b as c_char;
    }
    Ok(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_are_checked() {
        let cq = |ibdev: &str| KernelObject {
            ibdev: ibdev.into(),
            id: 1,
        };
        let c = cq_event_cmd(&cq("urdma0"), 42).unwrap();
        let name: Vec<u8> = c.ibdev[..7].iter().map(|&b| b as u8).collect();
        assert_eq!(name, b"urdma0\0");
        assert_eq!((c.cq, c.pid), (1, 42));
        for bad in ["", "a\0b", &"x".repeat(64)] {
            assert!(cq_event_cmd(&cq(bad), 1).is_err(), "{bad:?}");
        }
    }
}
