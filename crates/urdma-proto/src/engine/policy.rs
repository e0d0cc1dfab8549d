//! The engine's policies: what its owner (the NIC) sets from its
//! configuration and from what its socket can do, in one struct.

use super::device_window;

/// How an engine runs its RC QPs. `Policy::default()` is what
/// [`super::Engine::new`] starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Offer and accept selective retransmission
    /// ([`super::Engine::set_selective`]).
    pub selective: bool,
    /// The device's packets are ECN-capable and CE marks are answered
    /// ([`super::Engine::set_ecn`]).
    pub ecn: bool,
    /// Packets the device's RC QPs have in flight together
    /// ([`super::Engine::set_device_window`]).
    pub device_window: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            selective: true,
            ecn: true,
            device_window: device_window::DEVICE_WINDOW,
        }
    }
}

impl super::Engine {
    /// Run under `policy` from now on.
    pub fn set_policy(&mut self, policy: Policy) {
        self.set_selective(policy.selective);
        self.set_ecn(policy.ecn);
        self.set_device_window(policy.device_window);
    }

    /// The policy the engine runs under.
    pub fn policy(&self) -> Policy {
        Policy {
            selective: self.selective,
            ecn: self.ecn,
            device_window: self.device_window,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::DeviceAttr;

    #[test]
    fn a_new_engine_runs_the_default_policy_and_takes_another() {
        let local = "127.0.0.1:4791".parse().unwrap();
        let mut e = super::super::Engine::new(local, DeviceAttr::default(), Some(1));
        assert_eq!(e.policy(), Policy::default());
        let p = Policy {
            selective: false,
            ecn: false,
            device_window: 1,
        };
        e.set_policy(p);
        // The window is held to its floor.
        assert_eq!(
            e.policy(),
            Policy {
                device_window: device_window::MIN_DEVICE_WINDOW,
                ..p
            }
        );
    }
}
