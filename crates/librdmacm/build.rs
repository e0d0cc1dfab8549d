//! Link librdmacm.so.1: the rdma_cm structure layouts from the installed
//! `<rdma/rdma_cma.h>` (bindgen; its layout assertions pin every offset),
//! the soname, and the version nodes of Debian 12's library.
//!
//! Every exported function carries its version through a `.symver`
//! directive next to its definition (`src/lib.rs`); the version script
//! only declares the nodes, their order, and hides everything else.

use std::env;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The version nodes of librdmacm.so.1, each with the node it extends.
const NODES: &[(&str, Option<&str>)] = &[
    ("RDMACM_1.0", None),
    ("RDMACM_1.1", Some("RDMACM_1.0")),
    ("RDMACM_1.2", Some("RDMACM_1.1")),
    ("RDMACM_1.3", Some("RDMACM_1.2")),
];

/// The libibverbs entry points this library calls.
const VERBS: &[&str] = &[
    "ibv_get_device_list",
    "ibv_free_device_list",
    "ibv_open_device",
    "ibv_query_device",
    "ibv_query_gid",
    "ibv_alloc_pd",
    "ibv_create_comp_channel",
    "ibv_destroy_comp_channel",
    "ibv_create_cq",
    "ibv_destroy_cq",
    "ibv_create_qp",
    "ibv_destroy_qp",
    "ibv_modify_qp",
    "ibv_create_srq",
    "ibv_destroy_srq",
    "ibv_query_port",
    "ibv_reg_mr",
    "ibv_dereg_mr",
    "ibv_get_cq_event",
    "ibv_ack_cq_events",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=/usr/include/rdma/rdma_cma.h");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));

    let mut b = bindgen::Builder::default()
        .header_contents(
            "urdma_rdmacm_wrapper.h",
            "#include <rdma/rdma_cma.h>\n#include <infiniband/sa.h>\n",
        )
        .allowlist_type("rdma_.*")
        .allowlist_type("ibv_qp_attr_mask")
        .allowlist_type("ibv_qp_init_attr_ex")
        .allowlist_type("ibv_srq_init_attr_ex")
        .allowlist_type("ibv_sa_path_rec")
        .allowlist_type("ibv_device_attr")
        .allowlist_type("verbs_context")
        .allowlist_type("_compat_ibv_port_attr")
        .allowlist_type("ibv_port_attr")
        .allowlist_type("ibv_access_flags")
        .allowlist_type("ibv_qp_init_attr_mask")
        .allowlist_type("ibv_srq_init_attr_mask")
        .allowlist_type("ibv_event_type")
        .allowlist_type("ibv_ece")
        .allowlist_type("ibv_send_flags")
        .allowlist_type("ibv_wc_flags")
        .allowlist_var("RDMA_.*")
        .allowlist_var("RAI_.*")
        .allowlist_var("IBV_.*")
        .derive_default(true)
        .prepend_enum_name(false)
        .layout_tests(true);
    for f in VERBS {
        b = b.allowlist_function(f);
    }
    b.generate()
        .expect("bindgen cannot read <rdma/rdma_cma.h> (install librdmacm-dev)")
        .write_to_file(out.join("rdma_cma.rs"))
        .expect("cannot write the bindings");

    let mut map = String::new();
    for (i, (node, parent)) in NODES.iter().enumerate() {
        let local = if i == 0 { "\tlocal: *;\n" } else { "" };
        let parent = parent.map(|p| format!(" {p}")).unwrap_or_default();
        let _ = writeln!(map, "{node} {{\n{local}}}{parent};");
    }
    let map_path = out.join("librdmacm.map");
    std::fs::write(&map_path, map).expect("cannot write the version script");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map_path.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    // libibverbs.so.1: urdma's under `urdma run`, which defines the
    // device's CM entry points this library looks up.
    // (The unit tests link the system's: they open no device.)
    println!("cargo:rustc-link-lib=dylib=ibverbs");
}
