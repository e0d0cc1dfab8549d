//! Generate the verbs structure layouts from the installed headers.
//!
//! The project carries no copy of the libibverbs headers: `bindgen` reads
//! `<infiniband/verbs.h>` (and the kernel ABI headers the `ibv_copy_*`
//! helpers convert from) at build time. bindgen's layout assertions pin
//! every size and offset against what clang computes from the same header,
//! so a header whose layout differs fails the build instead of the program.
//!
//! `URDMA_VERBS_INCLUDE` adds an include directory searched first.

use std::env;
use std::path::PathBuf;

const WRAPPER: &str = "#include <infiniband/verbs.h>\n\
                       #include <infiniband/sa.h>\n\
                       #include <rdma/ib_user_verbs.h>\n\
                       #include <rdma/ib_user_sa.h>\n";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=URDMA_VERBS_INCLUDE");
    let mut clang_args = Vec::new();
    if let Ok(dir) = env::var("URDMA_VERBS_INCLUDE") {
        clang_args.push(format!("-I{dir}"));
    }
    for h in [
        "/usr/include/infiniband/verbs.h",
        "/usr/include/infiniband/sa.h",
    ] {
        println!("cargo:rerun-if-changed={h}");
    }
    let bindings = bindgen::Builder::default()
        .header_contents("urdma_verbs_wrapper.h", WRAPPER)
        .clang_args(&clang_args)
        .allowlist_type("ibv_.*")
        .allowlist_type("verbs_.*")
        .allowlist_type("ib_uverbs_qp_attr")
        .allowlist_type("ib_uverbs_ah_attr")
        .allowlist_type("ib_user_path_rec")
        .allowlist_var("IBV_.*")
        .allowlist_type("ib_uverbs_query_port_flags")
        .allowlist_type("ib_uverbs_access_flags")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .generate_comments(false)
        .layout_tests(true)
        .derive_default(true)
        .derive_debug(false)
        .generate_cstr(true)
        .use_core()
        .generate()
        .expect(
            "bindgen could not read <infiniband/verbs.h>: install libibverbs-dev and libclang-dev",
        );
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("verbs_sys.rs");
    bindings
        .write_to_file(&out)
        .expect("cannot write the generated bindings");
}
