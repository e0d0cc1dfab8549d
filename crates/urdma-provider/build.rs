//! Link liburdma-rdmav34.so: against the system libibverbs (the provider
//! registers itself with `verbs_register_driver_34` and initialises its
//! contexts with the library's helpers), with the soname rdma-core looks
//! providers up by, exporting nothing but what the version script keeps.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    // A provider is found by dlopen() and registers from its constructor:
    // it exports no symbols.
    let map = out.join("provider.map");
    std::fs::write(&map, "{\n\tlocal: *;\n};\n").expect("cannot write the version script");
    println!("cargo:rustc-link-lib=dylib=ibverbs");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liburdma-rdmav34.so");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,defs");
}
