//! The C ABI driven in-process, as a C program would drive it: two urdma
//! devices (127.0.0.1 and 127.0.0.2, from a configuration file), RC QPs
//! connected to each other doing SEND, RDMA WRITE/READ and both atomics
//! through the context's operation table, the `ibv_wr_*` interface with an
//! extended CQ, and UD with an address handle built from the received GRH.

use std::ffi::CStr;
use std::ptr::null_mut;
use std::time::{Duration, Instant};
use urdma_verbs::sys::*;
use urdma_verbs::{ah, context, cq, device, pd, qp};

const ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

struct Side {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    buf: Vec<u64>,
    mr: *mut ibv_mr,
    gid: ibv_gid,
}

fn side(dev: *mut ibv_device) -> Side {
    // SAFETY: every call gets live handles and buffers that outlive it.
    unsafe {
        let ctx = context::open_device(dev);
        assert!(!ctx.is_null());
        let pd = pd::alloc_pd(ctx);
        let cq = cq::create_cq(ctx, 64, null_mut(), null_mut(), 0);
        let mut buf = vec![0u64; 1024];
        let mr = pd::reg_mr(pd, buf.as_mut_ptr().cast(), 8192, ACCESS as i32);
        assert!(!pd.is_null() && !cq.is_null() && !mr.is_null());
        let mut gid: ibv_gid = std::mem::zeroed();
        assert_eq!(urdma_verbs::query::query_gid(ctx, 1, 0, &mut gid), 0);
        Side {
            ctx,
            pd,
            cq,
            buf,
            mr,
            gid,
        }
    }
}

fn new_qp(s: &Side, t: ibv_qp_type, send_ops: u64) -> *mut ibv_qp {
    // SAFETY: plain C data; zero is valid.
    let mut a: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    a.send_cq = s.cq;
    a.recv_cq = s.cq;
    a.cap = ibv_qp_cap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    };
    a.qp_type = t;
    a.pd = s.pd;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    if send_ops != 0 {
        a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        a.send_ops_flags = send_ops;
    }
    // SAFETY: live context and attributes.
    let q = unsafe { qp::create_qp_ex(s.ctx, &mut a) };
    assert!(!q.is_null());
    q
}

fn modify(q: *mut ibv_qp, a: &mut ibv_qp_attr, mask: u32) {
    // SAFETY: live QP and attributes.
    assert_eq!(
        unsafe { qp::modify_qp(q, a, mask as i32) },
        0,
        "mask {mask:#x}"
    );
}

fn connect(q: *mut ibv_qp, t: ibv_qp_type, dest: u32, dgid: ibv_gid) {
    // SAFETY: plain C data; zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = ACCESS;
    a.qkey = 0x1111;
    let m = if t == IBV_QPT_UD {
        IBV_QP_QKEY
    } else {
        IBV_QP_ACCESS_FLAGS
    };
    modify(
        q,
        &mut a,
        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | m,
    );
    a.qp_state = IBV_QPS_RTR;
    if t == IBV_QPT_UD {
        modify(q, &mut a, IBV_QP_STATE);
    } else {
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = dest;
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = 1;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        a.ah_attr.grh.dgid = dgid;
        modify(
            q,
            &mut a,
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
        );
    }
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    let m = if t == IBV_QPT_UD {
        IBV_QP_STATE | IBV_QP_SQ_PSN
    } else {
        IBV_QP_STATE
            | IBV_QP_SQ_PSN
            | IBV_QP_TIMEOUT
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_MAX_QP_RD_ATOMIC
    };
    modify(q, &mut a, m);
}

/// Wait for one completion through the context's poll_cq operation.
fn wait(c: *mut ibv_cq) -> ibv_wc {
    let deadline = Instant::now() + Duration::from_secs(10);
    // SAFETY: c is a live CQ; the operation table was filled at open.
    let poll = unsafe { (*(*c).context).ops.poll_cq.unwrap() };
    loop {
        // SAFETY: plain C data; zero is valid.
        let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
        // SAFETY: one writable ibv_wc.
        let n = unsafe { poll(c, 1, &mut wc) };
        assert!(n >= 0);
        if n == 1 {
            assert_eq!(wc.status, IBV_WC_SUCCESS, "wr_id {}", wc.wr_id);
            return wc;
        }
        assert!(Instant::now() < deadline, "no completion");
    }
}

fn post_send(q: *mut ibv_qp, wr: &mut ibv_send_wr) {
    let mut bad = null_mut();
    // SAFETY: live QP; the operation table was filled at open.
    let r = unsafe { ((*(*q).context).ops.post_send.unwrap())(q, wr, &mut bad) };
    assert_eq!(r, 0);
}

fn post_recv(q: *mut ibv_qp, sge: &mut ibv_sge, id: u64) {
    // SAFETY: plain C data; zero is valid.
    let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = id;
    wr.sg_list = sge;
    wr.num_sge = 1;
    let mut bad = null_mut();
    // SAFETY: live QP; the operation table was filled at open.
    let r = unsafe { ((*(*q).context).ops.post_recv.unwrap())(q, &mut wr, &mut bad) };
    assert_eq!(r, 0);
}

fn sge(s: &Side, word: usize, len: u32) -> ibv_sge {
    ibv_sge {
        addr: &s.buf[word] as *const u64 as u64,
        length: len,
        // SAFETY: the MR is live.
        lkey: unsafe { (*s.mr).lkey },
    }
}

fn rc(a: &mut Side, b: &mut Side) {
    let (qa, qb) = (new_qp(a, IBV_QPT_RC, 0), new_qp(b, IBV_QPT_RC, 0));
    // SAFETY: live QPs.
    let (na, nb) = unsafe { ((*qa).qp_num, (*qb).qp_num) };
    connect(qa, IBV_QPT_RC, nb, b.gid);
    connect(qb, IBV_QPT_RC, na, a.gid);
    // SAFETY: plain C data; zero is valid.
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.send_flags = IBV_SEND_SIGNALED;

    // SEND with immediate: a word 0 -> b word 8.
    a.buf[0] = 0x1234_5678;
    post_recv(qb, &mut sge(b, 8, 8), 1);
    let mut s = sge(a, 0, 8);
    wr.sg_list = &mut s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.__bindgen_anon_1.imm_data = 77u32.to_be();
    post_send(qa, &mut wr);
    wait(a.cq);
    let wc = wait(b.cq);
    assert_eq!(
        (wc.opcode, wc.byte_len, wc.wc_flags),
        (IBV_WC_RECV, 8, IBV_WC_WITH_IMM)
    );
    // SAFETY: WITH_IMM says imm_data is the member written.
    assert_eq!(unsafe { wc.__bindgen_anon_1.imm_data }, 77u32.to_be());
    assert_eq!(b.buf[8], 0x1234_5678);

    // RDMA WRITE a word 1 -> b word 16, inline.
    a.buf[1] = 0xdead_beef;
    let mut s = sge(a, 1, 8);
    wr.sg_list = &mut s;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    wr.wr.rdma.remote_addr = &b.buf[16] as *const u64 as u64;
    // SAFETY: the MR is live.
    wr.wr.rdma.rkey = unsafe { (*b.mr).rkey };
    post_send(qa, &mut wr);
    wait(a.cq);
    assert_eq!(b.buf[16], 0xdead_beef);

    // RDMA READ b word 16 -> a word 2.
    let mut s = sge(a, 2, 8);
    wr.sg_list = &mut s;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    post_send(qa, &mut wr);
    assert_eq!(wait(a.cq).byte_len, 8);
    assert_eq!(a.buf[2], 0xdead_beef);

    // Fetch-and-add, then compare-and-swap, on b word 24.
    b.buf[24] = 40;
    let mut s = sge(a, 3, 8);
    wr.sg_list = &mut s;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.wr.atomic.remote_addr = &b.buf[24] as *const u64 as u64;
    // SAFETY: the MR is live.
    wr.wr.atomic.rkey = unsafe { (*b.mr).rkey };
    wr.wr.atomic.compare_add = 2;
    post_send(qa, &mut wr);
    wait(a.cq);
    assert_eq!((a.buf[3], b.buf[24]), (40, 42));
    wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.wr.atomic.compare_add = 42;
    wr.wr.atomic.swap = 7;
    post_send(qa, &mut wr);
    wait(a.cq);
    assert_eq!((a.buf[3], b.buf[24]), (42, 7));
    // SAFETY: live QPs, no outstanding work.
    unsafe { assert_eq!(qp::destroy_qp(qa) + qp::destroy_qp(qb), 0) };
}

fn wr_api(a: &mut Side, b: &mut Side) {
    let ops = u64::from(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND);
    let (qa, qb) = (new_qp(a, IBV_QPT_RC, ops), new_qp(b, IBV_QPT_RC, 0));
    // SAFETY: live QPs.
    let (na, nb) = unsafe { ((*qa).qp_num, (*qb).qp_num) };
    connect(qa, IBV_QPT_RC, nb, b.gid);
    connect(qb, IBV_QPT_RC, na, a.gid);
    // SAFETY: live QPs, contexts and buffers; the function pointers were
    // set at creation (send_ops_flags given).
    unsafe {
        assert!(qp::qp_to_qp_ex(qb).is_null());
        let x = qp::qp_to_qp_ex(qa);
        assert!(!x.is_null());
        a.buf[4] = 99;
        (*x).wr_id = 5;
        (*x).wr_flags = IBV_SEND_SIGNALED;
        ((*x).wr_start.unwrap())(x);
        ((*x).wr_rdma_write.unwrap())(x, (*b.mr).rkey, &b.buf[32] as *const u64 as u64);
        ((*x).wr_set_sge.unwrap())(x, (*a.mr).lkey, &a.buf[4] as *const u64 as u64, 8);
        assert_eq!(((*x).wr_complete.unwrap())(x), 0);
    }
    assert_eq!(wait(a.cq).wr_id, 5);
    assert_eq!(b.buf[32], 99);

    // The completion seen through an extended CQ.
    // SAFETY: plain C data; zero is valid.
    let mut ca: ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
    ca.cqe = 4;
    ca.wc_flags = u64::from(IBV_WC_EX_WITH_BYTE_LEN);
    // SAFETY: live context and attributes.
    let cx = unsafe { cq::create_cq_ex(a.ctx, &mut ca) };
    assert!(!cx.is_null());
    // SAFETY: cx is live; the poll callbacks were set at creation.
    unsafe {
        let mut pa: ibv_poll_cq_attr = std::mem::zeroed();
        assert_eq!(((*cx).start_poll.unwrap())(cx, &mut pa), libc::ENOENT);
        assert_eq!(cq::destroy_cq(cx.cast()), 0);
        assert_eq!(qp::destroy_qp(qa) + qp::destroy_qp(qb), 0);
    }
}

fn ud(a: &mut Side, b: &mut Side) {
    let (qa, qb) = (new_qp(a, IBV_QPT_UD, 0), new_qp(b, IBV_QPT_UD, 0));
    connect(qa, IBV_QPT_UD, 0, b.gid);
    connect(qb, IBV_QPT_UD, 0, a.gid);
    // SAFETY: plain C data; zero is valid.
    let mut av: ibv_ah_attr = unsafe { std::mem::zeroed() };
    av.is_global = 1;
    av.port_num = 1;
    av.grh.dgid = b.gid;
    // SAFETY: live PD and attributes.
    let h = unsafe { ah::create_ah(a.pd, &mut av) };
    assert!(!h.is_null());
    // 40 bytes of GRH then the payload.
    post_recv(qb, &mut sge(b, 100, 48), 9);
    a.buf[5] = 0x5555;
    let mut s = sge(a, 5, 8);
    // SAFETY: plain C data; zero is valid.
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.sg_list = &mut s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = h;
    // SAFETY: live QP.
    wr.wr.ud.remote_qpn = unsafe { (*qb).qp_num };
    wr.wr.ud.remote_qkey = 0x1111;
    post_send(qa, &mut wr);
    wait(a.cq);
    let mut wc = wait(b.cq);
    assert_eq!((wc.byte_len, wc.wc_flags & IBV_WC_GRH), (48, IBV_WC_GRH));
    // SAFETY: live QP.
    assert_eq!(wc.src_qp, unsafe { (*qa).qp_num });
    assert_eq!(b.buf[105], 0x5555);
    // The reply address comes from the GRH: a's GID.
    // SAFETY: plain C data; zero is valid.
    let mut back: ibv_ah_attr = unsafe { std::mem::zeroed() };
    let grh = &mut b.buf[100] as *mut u64 as *mut ibv_grh;
    // SAFETY: live context; wc, grh and back are valid.
    unsafe {
        assert_eq!(ah::init_ah_from_wc(b.ctx, 1, &mut wc, grh, &mut back), 0);
        assert_eq!(back.grh.dgid.raw, a.gid.raw);
        assert_eq!(ah::destroy_ah(h), 0);
        assert_eq!(qp::destroy_qp(qa) + qp::destroy_qp(qb), 0);
    }
}

#[test]
fn two_devices_in_one_process() {
    let port = 20000 + (std::process::id() % 20000) as u16;
    let cfg =
        std::env::temp_dir().join(format!("urdma-verbs-loopback-{}.toml", std::process::id()));
    let text = format!(
        "[[device]]\naddr = \"127.0.0.1\"\nport = {port}\n\
         [[device]]\naddr = \"127.0.0.2\"\nport = {port}\n"
    );
    std::fs::write(&cfg, text).unwrap();
    // The only test of this process: nothing else reads the environment.
    std::env::remove_var("URDMA_ADDR");
    std::env::set_var("URDMA_CONFIG", &cfg);
    let mut n = 0;
    // SAFETY: n is a live int.
    let list = unsafe { device::get_device_list(&mut n) };
    std::fs::remove_file(&cfg).unwrap();
    assert_eq!(n, 2);
    // SAFETY: the list holds n + 1 entries.
    let (d0, d1) = unsafe { (*list, *list.add(1)) };
    // SAFETY: live device.
    let name = unsafe { CStr::from_ptr(device::get_device_name(d1)) };
    assert_eq!(name.to_str().unwrap(), "urdma1");
    let (mut a, mut b) = (side(d0), side(d1));
    rc(&mut a, &mut b);
    wr_api(&mut a, &mut b);
    ud(&mut a, &mut b);
    for s in [a, b] {
        // SAFETY: live objects, destroyed children first.
        unsafe {
            assert_eq!(pd::dereg_mr(s.mr), 0);
            assert_eq!(cq::destroy_cq(s.cq), 0);
            assert_eq!(pd::dealloc_pd(s.pd), 0);
            assert_eq!(context::close_device(s.ctx), 0);
        }
        drop(s.buf);
    }
    // SAFETY: the list from get_device_list.
    unsafe { device::free_device_list(list) };
}
