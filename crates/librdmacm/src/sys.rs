//! The rdma_cm and verbs layouts of the installed headers (bindgen).
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    clippy::all
)]
include!(concat!(env!("OUT_DIR"), "/rdma_cma.rs"));
