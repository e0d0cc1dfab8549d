//! The modify_qp state machine: which transitions IBTA allows for each
//! transport and which attributes each requires or permits.

use crate::error::{Error, Result};
use crate::types::{QpAttrMask as M, QpState as S, QpType};

/// Required and optional attribute masks of one transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransitionRule {
    /// Attributes that must be present.
    pub required: M,
    /// Attributes that may be present.
    pub optional: M,
}

const fn rule(required: M, optional: M) -> TransitionRule {
    TransitionRule { required, optional }
}

/// The rule for `from -> to` on `qp_type`, or None if IBTA forbids it.
pub fn transition_rule(qp_type: QpType, from: S, to: S) -> Option<TransitionRule> {
    use QpType::*;
    let none = M::empty();
    Some(match (from, to) {
        (_, S::Reset) | (_, S::Err) => rule(none, none),
        (S::Reset, S::Init) => match qp_type {
            Ud => rule(M::PKEY_INDEX.union(M::PORT).union(M::QKEY), none),
            Rc | Uc => rule(M::PKEY_INDEX.union(M::PORT).union(M::ACCESS_FLAGS), none),
        },
        (S::Init, S::Init) => match qp_type {
            Ud => rule(none, M::PKEY_INDEX.union(M::PORT).union(M::QKEY)),
            Rc | Uc => rule(none, M::PKEY_INDEX.union(M::PORT).union(M::ACCESS_FLAGS)),
        },
        (S::Init, S::Rtr) => match qp_type {
            Ud => rule(none, M::PKEY_INDEX.union(M::QKEY)),
            Uc => rule(
                M::AV.union(M::PATH_MTU).union(M::DEST_QPN).union(M::RQ_PSN),
                M::ALT_PATH.union(M::ACCESS_FLAGS).union(M::PKEY_INDEX),
            ),
            Rc => rule(
                M::AV
                    .union(M::PATH_MTU)
                    .union(M::DEST_QPN)
                    .union(M::RQ_PSN)
                    .union(M::MAX_DEST_RD_ATOMIC)
                    .union(M::MIN_RNR_TIMER),
                M::ALT_PATH.union(M::ACCESS_FLAGS).union(M::PKEY_INDEX),
            ),
        },
        (S::Rtr, S::Rts) => match qp_type {
            Ud => rule(M::SQ_PSN, M::CUR_STATE.union(M::QKEY)),
            Uc => rule(
                M::SQ_PSN,
                M::CUR_STATE
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PATH_MIG_STATE),
            ),
            Rc => rule(
                M::SQ_PSN
                    .union(M::TIMEOUT)
                    .union(M::RETRY_CNT)
                    .union(M::RNR_RETRY)
                    .union(M::MAX_QP_RD_ATOMIC),
                M::CUR_STATE
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::MIN_RNR_TIMER)
                    .union(M::PATH_MIG_STATE),
            ),
        },
        (S::Rts, S::Rts) => match qp_type {
            Ud => rule(none, M::CUR_STATE.union(M::QKEY)),
            Uc => rule(
                none,
                M::CUR_STATE
                    .union(M::ACCESS_FLAGS)
                    .union(M::ALT_PATH)
                    .union(M::PATH_MIG_STATE),
            ),
            Rc => rule(
                none,
                M::CUR_STATE
                    .union(M::ACCESS_FLAGS)
                    .union(M::ALT_PATH)
                    .union(M::PATH_MIG_STATE)
                    .union(M::MIN_RNR_TIMER),
            ),
        },
        (S::Rts, S::Sqd) => rule(none, M::EN_SQD_ASYNC_NOTIFY),
        (S::Sqd, S::Rts) => match qp_type {
            Ud => rule(none, M::CUR_STATE.union(M::QKEY)),
            Uc => rule(
                none,
                M::CUR_STATE
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PATH_MIG_STATE),
            ),
            Rc => rule(
                none,
                M::CUR_STATE
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::MIN_RNR_TIMER)
                    .union(M::PATH_MIG_STATE),
            ),
        },
        (S::Sqd, S::Sqd) => match qp_type {
            Ud => rule(none, M::PKEY_INDEX.union(M::QKEY)),
            Uc => rule(
                none,
                M::AV
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::PATH_MIG_STATE),
            ),
            Rc => rule(
                none,
                M::PORT
                    .union(M::AV)
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::MIN_RNR_TIMER)
                    .union(M::PATH_MIG_STATE)
                    .union(M::TIMEOUT)
                    .union(M::RETRY_CNT)
                    .union(M::RNR_RETRY)
                    .union(M::MAX_QP_RD_ATOMIC)
                    .union(M::MAX_DEST_RD_ATOMIC),
            ),
        },
        (S::Sqe, S::Rts) => match qp_type {
            Rc => return None,
            Uc => rule(none, M::CUR_STATE.union(M::ACCESS_FLAGS)),
            Ud => rule(none, M::CUR_STATE.union(M::QKEY)),
        },
        _ => return None,
    })
}

/// Check a modify_qp request: the transition exists and the mask holds
/// every required attribute and nothing else. Returns the target state.
pub fn check_transition(qp_type: QpType, cur: S, mask: M, target: S, cur_claim: S) -> Result<S> {
    let to = if mask.contains(M::STATE) { target } else { cur };
    let fail = |reason: String| Error::BadTransition {
        from: cur,
        to,
        reason,
    };
    if mask.contains(M::CUR_STATE) && cur_claim != cur {
        return Err(fail(format!(
            "cur_qp_state {cur_claim:?} is not the QP's state"
        )));
    }
    let r =
        transition_rule(qp_type, cur, to).ok_or_else(|| fail("transition not allowed".into()))?;
    let given = mask.difference(M::STATE);
    let missing = r.required.difference(given);
    if !missing.is_empty() {
        return Err(fail(format!("missing required attributes {missing:?}")));
    }
    let extra = given.difference(r.required.union(r.optional));
    if !extra.is_empty() {
        return Err(fail(format!("attributes not allowed here {extra:?}")));
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_connect_sequence() {
        let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
        assert_eq!(
            check_transition(QpType::Rc, S::Reset, init, S::Init, S::Reset).unwrap(),
            S::Init
        );
        let rtr = M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER;
        assert_eq!(
            check_transition(QpType::Rc, S::Init, rtr, S::Rtr, S::Reset).unwrap(),
            S::Rtr
        );
        let rts =
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
        assert_eq!(
            check_transition(QpType::Rc, S::Rtr, rts, S::Rts, S::Reset).unwrap(),
            S::Rts
        );
    }

    #[test]
    fn missing_extra_and_forbidden() {
        let e = check_transition(QpType::Rc, S::Reset, M::STATE | M::PORT, S::Init, S::Reset);
        assert!(matches!(e, Err(Error::BadTransition { .. })));
        let e = check_transition(
            QpType::Rc,
            S::Reset,
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS | M::SQ_PSN,
            S::Init,
            S::Reset,
        );
        assert!(e.is_err());
        assert!(check_transition(QpType::Rc, S::Reset, M::STATE, S::Rts, S::Reset).is_err());
        assert!(check_transition(QpType::Rc, S::Init, M::STATE, S::Rts, S::Reset).is_err());
        assert!(check_transition(QpType::Rc, S::Sqe, M::STATE, S::Rts, S::Reset).is_err());
        // Wrong claim of the current state.
        assert!(
            check_transition(QpType::Rc, S::Rts, M::STATE | M::CUR_STATE, S::Rts, S::Rtr).is_err()
        );
    }

    #[test]
    fn reset_and_error_always_reachable() {
        for from in [S::Reset, S::Init, S::Rtr, S::Rts, S::Sqd, S::Sqe, S::Err] {
            assert!(check_transition(QpType::Rc, from, M::STATE, S::Err, from).is_ok());
            assert!(check_transition(QpType::Ud, from, M::STATE, S::Reset, from).is_ok());
        }
    }

    #[test]
    fn ud_needs_qkey_not_access() {
        let m = M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY;
        assert!(check_transition(QpType::Ud, S::Reset, m, S::Init, S::Reset).is_ok());
        assert!(check_transition(QpType::Rc, S::Reset, m, S::Init, S::Reset).is_err());
        assert!(check_transition(QpType::Ud, S::Init, M::STATE, S::Rtr, S::Reset).is_ok());
    }
}
