//! Cross-check of the generated layouts with a second compiler: gcc
//! compiles a program against the installed verbs.h that prints the size
//! and the offsets the C ABI layer relies on most (the operation tables
//! reached by verbs.h's inline functions, the extended CQ and QP
//! structures), and they must equal what Rust sees. bindgen's own layout
//! assertions (compile-time, in the crate) already pin every structure
//! against clang's view of the same header.

use std::mem::{offset_of, size_of};
use std::process::Command;
use urdma_verbs::sys::*;

const PROGRAM: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include <infiniband/verbs.h>
#define S(t) printf("size %s %zu\n", #t, sizeof(struct t));
#define O(t, f) printf("off %s.%s %zu\n", #t, #f, offsetof(struct t, f));
int main(void)
{
	S(ibv_context) S(verbs_context) S(ibv_cq_ex) S(ibv_qp_ex) S(ibv_wc)
	S(ibv_send_wr) S(ibv_recv_wr) S(ibv_qp_attr) S(ibv_port_attr)
	S(ibv_device_attr_ex) S(ibv_qp_init_attr_ex) S(ibv_device)
	O(ibv_context, ops.poll_cq) O(ibv_context, ops.req_notify_cq)
	O(ibv_context, ops.post_send) O(ibv_context, ops.post_recv)
	O(ibv_context, ops.post_srq_recv) O(ibv_context, async_fd)
	O(ibv_context, abi_compat)
	O(verbs_context, query_port) O(verbs_context, create_cq_ex)
	O(verbs_context, query_device_ex) O(verbs_context, create_qp_ex)
	O(verbs_context, create_srq_ex) O(verbs_context, sz)
	O(verbs_context, context)
	O(ibv_cq_ex, start_poll) O(ibv_cq_ex, read_wc_flags)
	O(ibv_qp_ex, wr_id) O(ibv_qp_ex, wr_flags) O(ibv_qp_ex, wr_send)
	O(ibv_qp_ex, wr_set_sge) O(ibv_qp_ex, wr_complete)
	O(ibv_send_wr, wr.ud.remote_qkey) O(ibv_send_wr, wr.atomic.swap)
	O(ibv_qp_attr, ah_attr) O(ibv_qp_attr, rate_limit)
	return 0;
}
"#;

fn expected() -> Vec<String> {
    let mut v = Vec::new();
    let mut s = |name: &str, n: usize| v.push(format!("size {name} {n}"));
    s("ibv_context", size_of::<ibv_context>());
    s("verbs_context", size_of::<verbs_context>());
    s("ibv_cq_ex", size_of::<ibv_cq_ex>());
    s("ibv_qp_ex", size_of::<ibv_qp_ex>());
    s("ibv_wc", size_of::<ibv_wc>());
    s("ibv_send_wr", size_of::<ibv_send_wr>());
    s("ibv_recv_wr", size_of::<ibv_recv_wr>());
    s("ibv_qp_attr", size_of::<ibv_qp_attr>());
    s("ibv_port_attr", size_of::<ibv_port_attr>());
    s("ibv_device_attr_ex", size_of::<ibv_device_attr_ex>());
    s("ibv_qp_init_attr_ex", size_of::<ibv_qp_init_attr_ex>());
    s("ibv_device", size_of::<ibv_device>());
    let ops = offset_of!(ibv_context, ops);
    let mut o = |name: &str, n: usize| v.push(format!("off {name} {n}"));
    o(
        "ibv_context.ops.poll_cq",
        ops + offset_of!(ibv_context_ops, poll_cq),
    );
    o(
        "ibv_context.ops.req_notify_cq",
        ops + offset_of!(ibv_context_ops, req_notify_cq),
    );
    o(
        "ibv_context.ops.post_send",
        ops + offset_of!(ibv_context_ops, post_send),
    );
    o(
        "ibv_context.ops.post_recv",
        ops + offset_of!(ibv_context_ops, post_recv),
    );
    o(
        "ibv_context.ops.post_srq_recv",
        ops + offset_of!(ibv_context_ops, post_srq_recv),
    );
    o("ibv_context.async_fd", offset_of!(ibv_context, async_fd));
    o(
        "ibv_context.abi_compat",
        offset_of!(ibv_context, abi_compat),
    );
    o(
        "verbs_context.query_port",
        offset_of!(verbs_context, query_port),
    );
    o(
        "verbs_context.create_cq_ex",
        offset_of!(verbs_context, create_cq_ex),
    );
    o(
        "verbs_context.query_device_ex",
        offset_of!(verbs_context, query_device_ex),
    );
    o(
        "verbs_context.create_qp_ex",
        offset_of!(verbs_context, create_qp_ex),
    );
    o(
        "verbs_context.create_srq_ex",
        offset_of!(verbs_context, create_srq_ex),
    );
    o("verbs_context.sz", offset_of!(verbs_context, sz));
    o("verbs_context.context", offset_of!(verbs_context, context));
    o("ibv_cq_ex.start_poll", offset_of!(ibv_cq_ex, start_poll));
    o(
        "ibv_cq_ex.read_wc_flags",
        offset_of!(ibv_cq_ex, read_wc_flags),
    );
    o("ibv_qp_ex.wr_id", offset_of!(ibv_qp_ex, wr_id));
    o("ibv_qp_ex.wr_flags", offset_of!(ibv_qp_ex, wr_flags));
    o("ibv_qp_ex.wr_send", offset_of!(ibv_qp_ex, wr_send));
    o("ibv_qp_ex.wr_set_sge", offset_of!(ibv_qp_ex, wr_set_sge));
    o("ibv_qp_ex.wr_complete", offset_of!(ibv_qp_ex, wr_complete));
    let wr = offset_of!(ibv_send_wr, wr);
    o(
        "ibv_send_wr.wr.ud.remote_qkey",
        wr + offset_of!(ibv_send_wr__bindgen_ty_2__bindgen_ty_3, remote_qkey),
    );
    o(
        "ibv_send_wr.wr.atomic.swap",
        wr + offset_of!(ibv_send_wr__bindgen_ty_2__bindgen_ty_2, swap),
    );
    o("ibv_qp_attr.ah_attr", offset_of!(ibv_qp_attr, ah_attr));
    o(
        "ibv_qp_attr.rate_limit",
        offset_of!(ibv_qp_attr, rate_limit),
    );
    v
}

#[test]
fn gcc_agrees_with_the_generated_layouts() {
    let dir = std::env::temp_dir().join(format!("urdma-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, PROGRAM).unwrap();
    let status = Command::new("gcc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc is needed for the layout cross-check");
    assert!(status.success(), "gcc could not build the layout program");
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let got: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(got, expected());
}
