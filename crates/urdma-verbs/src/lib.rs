//! The libibverbs C ABI over the urdma engine.
//!
//! This crate maps the verbs object model of `<infiniband/verbs.h>` onto
//! urdma's engine: every object handed to C (`ibv_context`, `ibv_pd`,
//! `ibv_mr`, `ibv_cq`/`ibv_cq_ex`, `ibv_qp`/`ibv_qp_ex`, `ibv_srq`,
//! `ibv_ah`, `ibv_comp_channel`) is a `#[repr(C)]` Rust object whose first
//! field is the verbs structure, laid out by bindgen from the installed
//! header ([`sys`]), so the pointer C holds is the object itself.
//!
//! Contexts are allocated as `struct verbs_context` with their operation
//! tables filled, so the inline verbs of verbs.h (`ibv_post_send`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_query_port`,
//! `ibv_create_cq_ex`, `ibv_create_qp_ex`, the `ibv_wr_*` and
//! `ibv_start_poll` families) reach this layer directly.
//!
//! The `libibverbs` crate exports these entry points as
//! `libibverbs.so.1` with libibverbs' symbol versions; a provider for a
//! kernel device can reuse the same layer.
//!
//! # Safety contract of the entry points
//! The `extern "C"` functions follow the libibverbs documentation: the
//! caller passes pointers to objects of the documented types, buffers of
//! the documented sizes and, for registered memory, memory that stays
//! mapped until deregistration. Within that contract they validate every
//! handle (NULL, wrong kind and destroyed handles are refused through
//! [`handles`]), every attribute and value, set `errno` and return the
//! failure value libibverbs documents; they do not panic (a panic would
//! be a bug: [`util::guard`] turns it into `EIO` rather than unwinding
//! into C).

#![allow(clippy::missing_safety_doc)]

pub mod ah;
pub mod channel;
pub mod cm;
pub mod context;
pub mod cq;
pub mod device;
pub mod events;
pub mod gid;
pub mod handles;
pub mod limits;
pub mod misc;
pub mod mw;
pub mod parent_domain;
pub mod pd;
pub mod post;
pub mod qp;
pub mod qpex;
pub mod query;
pub mod srq;
pub mod strings;
pub mod stubs;
pub mod sys;
pub mod util;
