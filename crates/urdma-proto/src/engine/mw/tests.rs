use super::*;
use crate::memory::VecMemory;
use crate::types::AccessFlags as A;

const PD: u32 = 1;
const QP: u32 = 0x11;
const MR_KEY: u32 = 0x7700;
const BASE: u64 = 0x1_0000;

fn mrs(access: A) -> MrTable {
    let mr = MrEntry::new(MR_KEY, PD, access, BASE, VecMemory::new(4096));
    MrTable::from_iter([(MR_KEY, Arc::new(mr))])
}

fn window(kind: MwType) -> (MwTable, u32) {
    let rkey = 0x0042_0001;
    let mw = Mw {
        pd: PD,
        kind,
        rkey,
        bound: None,
    };
    (MwTable::from_iter([(index_of(rkey), mw)]), rkey)
}

fn bind_req(rkey: u32, addr: u64, len: u64, access: A) -> BindMw {
    BindMw {
        mw_rkey: rkey,
        new_rkey: rkey + 1,
        lkey: MR_KEY,
        addr,
        len,
        access: access.bits(),
    }
}

#[test]
fn a_bind_checks_the_window_the_key_the_rights_and_the_region() {
    let all = A::LOCAL_WRITE | A::MW_BIND;
    let (mut mws, rkey) = window(MwType::Type2);
    let m = mrs(all);
    let ok = bind_req(rkey, BASE + 16, 64, A::REMOTE_WRITE);
    let refused = |b: BindMw, m: &MrTable, mws: &mut MwTable| {
        assert_eq!(bind(mws, m, QP, PD, &b), Err(WcStatus::MwBindErr), "{b:?}");
        assert!(mws[&index_of(rkey)].bound.is_none(), "nothing changed");
    };
    refused(
        BindMw {
            mw_rkey: rkey + 5,
            ..ok
        },
        &m,
        &mut mws,
    );
    refused(
        BindMw {
            new_rkey: rkey + 0x100,
            ..ok
        },
        &m,
        &mut mws,
    );
    refused(
        BindMw {
            access: A::MW_BIND.bits(),
            ..ok
        },
        &m,
        &mut mws,
    );
    refused(
        BindMw {
            lkey: MR_KEY + 1,
            ..ok
        },
        &m,
        &mut mws,
    );
    refused(
        BindMw {
            addr: BASE + 4096 - 32,
            ..ok
        },
        &m,
        &mut mws,
    );
    refused(ok, &mrs(A::LOCAL_WRITE), &mut mws);
    refused(ok, &mrs(A::MW_BIND), &mut mws);
    assert_eq!(
        bind(&mut mws, &m, QP, PD + 1, &ok),
        Err(WcStatus::MwBindErr)
    );
    assert_eq!(bind(&mut mws, &m, QP, PD, &ok), Ok(()));
    assert_eq!(mws[&index_of(rkey)].rkey, rkey + 1);
    // A bound type 2 window is not bound again.
    let again = BindMw {
        mw_rkey: rkey + 1,
        new_rkey: rkey + 2,
        ..ok
    };
    assert_eq!(bind(&mut mws, &m, QP, PD, &again), Err(WcStatus::MwBindErr));
}

#[test]
fn a_remote_access_is_held_to_the_window_and_its_qp() {
    let m = mrs(A::LOCAL_WRITE | A::MW_BIND);
    let (mut mws, rkey) = window(MwType::Type2);
    let b = bind_req(rkey, BASE + 1024, 256, A::REMOTE_WRITE);
    bind(&mut mws, &m, QP, PD, &b).unwrap();
    let key = b.new_rkey;
    let at = |va, len, need, qp| lookup(&mws, &m, key, (qp, PD), va, len, need);
    let (mr, off) = at(BASE + 1024 + 8, 8, A::REMOTE_WRITE, QP)
        .unwrap()
        .unwrap();
    assert_eq!((mr.lkey, off), (MR_KEY, 1024 + 8));
    assert_eq!(
        at(BASE + 1024 + 250, 8, A::REMOTE_WRITE, QP)
            .unwrap()
            .map(|r| r.1),
        Err(MrCheckError::OutOfBounds)
    );
    assert_eq!(
        at(BASE + 1000, 8, A::REMOTE_WRITE, QP)
            .unwrap()
            .map(|r| r.1),
        Err(MrCheckError::OutOfBounds)
    );
    assert_eq!(
        at(BASE + 1024, 8, A::REMOTE_READ, QP).unwrap().map(|r| r.1),
        Err(MrCheckError::NoAccess)
    );
    assert_eq!(
        at(BASE + 1024, 8, A::REMOTE_WRITE, QP + 1)
            .unwrap()
            .map(|r| r.1),
        Err(MrCheckError::WrongPd)
    );
    assert!(
        lookup(&mws, &m, MR_KEY, (QP, PD), BASE, 8, A::empty()).is_none(),
        "a region's key"
    );
    // The old key no longer names it; a remote invalidation must come
    // through its QP.
    assert!(lookup(&mws, &m, rkey, (QP, PD), BASE + 1024, 8, A::REMOTE_WRITE).is_none());
    assert!(!invalidate(&mut mws, QP + 1, PD, key, true));
    assert!(invalidate(&mut mws, QP, PD, key, true));
    let gone = lookup(&mws, &m, key, (QP, PD), BASE + 1024, 8, A::REMOTE_WRITE);
    assert_eq!(gone.unwrap().map(|r| r.1), Err(MrCheckError::UnknownKey));
}

#[test]
fn a_type_1_window_is_taken_back_by_a_zero_length_bind_only() {
    let m = mrs(A::LOCAL_WRITE | A::MW_BIND);
    let (mut mws, rkey) = window(MwType::Type1);
    let b = bind_req(rkey, BASE, 64, A::REMOTE_READ);
    // The QP, the window and the region share one PD, for type 1 too
    // (another program's QP cannot move the window).
    assert_eq!(bind(&mut mws, &m, QP, PD + 1, &b), Err(WcStatus::MwBindErr));
    let unbind_foreign = BindMw {
        len: 0,
        lkey: 0,
        ..b
    };
    assert_eq!(
        bind(&mut mws, &m, QP, PD + 1, &unbind_foreign),
        Err(WcStatus::MwBindErr)
    );
    bind(&mut mws, &m, QP, PD, &b).unwrap();
    // Any QP of the PD reaches a type 1 window.
    assert!(
        lookup(&mws, &m, b.new_rkey, (QP + 7, PD), BASE, 8, A::REMOTE_READ)
            .unwrap()
            .is_ok()
    );
    assert!(
        !invalidate(&mut mws, QP, PD, b.new_rkey, false),
        "no invalidation of type 1"
    );
    let unbind = BindMw {
        mw_rkey: b.new_rkey,
        new_rkey: b.new_rkey + 1,
        lkey: 0,
        addr: 0,
        len: 0,
        access: 0,
    };
    assert_eq!(bind(&mut mws, &m, QP, PD, &unbind), Ok(()));
    assert!(mws[&index_of(rkey)].bound.is_none());
}

#[test]
fn a_destroyed_qp_takes_its_type_2_windows_back_and_a_late_local_invalidation_succeeds() {
    let m = mrs(A::LOCAL_WRITE | A::MW_BIND);
    let (mut mws, rkey) = window(MwType::Type2);
    let b = bind_req(rkey, BASE, 64, A::REMOTE_WRITE);
    bind(&mut mws, &m, QP, PD, &b).unwrap();
    forget_qp(&mut mws, QP + 1);
    assert!(
        mws[&index_of(rkey)].bound.is_some(),
        "another QP's destruction"
    );
    forget_qp(&mut mws, QP);
    assert!(mws[&index_of(rkey)].bound.is_none());
    // Already taken back: a local invalidation still succeeds, a remote
    // one does not.
    assert!(!invalidate(&mut mws, QP, PD, b.new_rkey, true));
    assert!(invalidate(&mut mws, QP, PD, b.new_rkey, false));
}
