//! Signals and the code urdma runs inside a program's process.
//!
//! A program's signal handler may `longjmp` out of whatever it
//! interrupted. Two rules keep that from wedging the libraries: their
//! helper threads never take the program's asynchronous signals (a
//! handler run there would jump into another thread's stack), and a call
//! holds asynchronous signals back while it holds a lock ([`Deferred`]),
//! so that a handler runs only where no lock of the libraries is held,
//! typically while the call sleeps.

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use std::sync::OnceLock;

/// Every signal but those an instruction raises (a fault or a trap),
/// which cannot usefully wait.
fn asynchronous() -> &'static SigSet {
    static SET: OnceLock<SigSet> = OnceLock::new();
    SET.get_or_init(|| {
        let mut s = SigSet::all();
        for sig in [
            Signal::SIGSEGV,
            Signal::SIGBUS,
            Signal::SIGFPE,
            Signal::SIGILL,
            Signal::SIGTRAP,
            Signal::SIGSYS,
        ] {
            s.remove(sig);
        }
        s
    })
}

/// Let a write to a closed pipe end this process quietly, as it ends a C
/// command (`urdma devices | head`). Rust starts with SIGPIPE ignored, so
/// `println!` to a closed pipe panics. Only for commands that write to
/// their output and hold no socket a peer can close.
pub fn default_sigpipe() {
    // SAFETY: SIG_DFL installs no handler, so no code of ours can run in
    // signal context; the caller is a printing command with no socket.
    let _ =
        unsafe { nix::sys::signal::signal(Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl) };
}

/// Block the asynchronous signals in the calling thread for good: the
/// first call of a helper thread that runs inside a program's process.
pub fn block_in_helper_thread() {
    if let Err(e) = asynchronous().thread_block() {
        tracing::debug!(error = %e, "signals not blocked in a helper thread");
    }
}

/// Asynchronous signals held back in the calling thread while this
/// lives; on drop the thread's mask is what it was, and a signal that
/// came meanwhile is handled then.
#[must_use = "signals are held back only while the value lives"]
pub struct Deferred {
    old: Option<SigSet>,
}

impl Deferred {
    /// Hold the asynchronous signals back.
    pub fn new() -> Deferred {
        Deferred {
            old: asynchronous().thread_swap_mask(SigmaskHow::SIG_BLOCK).ok(),
        }
    }
}

impl Default for Deferred {
    fn default() -> Deferred {
        Deferred::new()
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        if let Some(old) = self.old.take() {
            let _ = old.thread_set_mask();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::{raise, sigaction, SaFlags, SigAction, SigHandler};
    use std::sync::atomic::{AtomicUsize, Ordering};

    static SEEN: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn count(_: i32) {
        SEEN.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn a_signal_waits_until_deferral_ends() {
        let act = SigAction::new(
            SigHandler::Handler(count),
            SaFlags::empty(),
            SigSet::empty(),
        );
        // SAFETY: the handler only touches an atomic.
        let prev = unsafe { sigaction(Signal::SIGUSR2, &act) }.unwrap();
        {
            let _held = Deferred::new();
            raise(Signal::SIGUSR2).unwrap();
            assert_eq!(SEEN.load(Ordering::SeqCst), 0, "handled while deferred");
            let mask = SigSet::thread_get_mask().unwrap();
            assert!(mask.contains(Signal::SIGUSR2));
            assert!(!mask.contains(Signal::SIGSEGV));
        }
        assert_eq!(
            SEEN.load(Ordering::SeqCst),
            1,
            "handled once deferral ended"
        );
        assert!(!SigSet::thread_get_mask().unwrap().contains(Signal::SIGUSR2));
        // SAFETY: restoring the disposition there was.
        unsafe { sigaction(Signal::SIGUSR2, &prev) }.unwrap();
    }

    #[test]
    fn a_helper_thread_blocks_them_for_good() {
        let mask = std::thread::spawn(|| {
            block_in_helper_thread();
            SigSet::thread_get_mask().unwrap()
        })
        .join()
        .unwrap();
        assert!(mask.contains(Signal::SIGTERM) && mask.contains(Signal::SIGINT));
        assert!(!mask.contains(Signal::SIGSEGV));
    }
}
