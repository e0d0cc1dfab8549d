//! The engine's command interface: the one way drivers (the Rust API, the
//! C-ABI layer, the simulator) create, modify and destroy objects and post
//! work. Each command is a plain struct; [`Command`] is their union and
//! [`Reply`] the union of their answers, so a command can cross a channel
//! to a NIC in another process as data. [`Engine::call`] is the typed way
//! to run one; [`Engine::execute`] runs any.
//!
//! Polling and arming a CQ are not commands: a CQ ([`crate::sink::CompletionSink`])
//! is memory the engine writes completions into and the driver reads.

use super::mw::MwType;
use super::srq::SrqAttr;
use super::{Engine, RecvRequest, SendRequest};
use crate::error::{Error, Result};
use crate::memory::Memory;
use crate::mr::MrEntry;
use crate::sink::CompletionSink;
use crate::types::{AccessFlags, QpAttrMask, QpType};
use crate::verbs::{QpAttr, QpCap};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What every command answers with.
#[derive(Debug)]
pub enum Reply {
    /// Done, nothing to return.
    Done(()),
    /// A number: PD, QP or SRQ number.
    Number(u32),
    /// A registered memory region.
    Mr(Arc<MrEntry>),
    /// QP attributes.
    QpAttr(QpAttr),
    /// SRQ attributes.
    SrqAttr(SrqAttr),
    /// A yes/no answer.
    Flag(bool),
}

/// A command with a typed answer.
pub trait Request: Into<Command> {
    /// What the command answers with.
    type Output;
    /// Take the typed answer out of a [`Reply`] (None: the wrong kind).
    fn output(reply: Reply) -> Option<Self::Output>;
}

/// Declares one command struct and its typed answer.
macro_rules! command {
    (
        $(#[$doc:meta])*
        $name:ident { $($(#[$fdoc:meta])* $field:ident : $ty:ty),* $(,)? } -> $reply:ident($out:ty)
    ) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name { $($(#[$fdoc])* pub $field: $ty,)* }

        impl From<$name> for Command {
            fn from(c: $name) -> Command {
                Command::$name(c)
            }
        }

        impl Request for $name {
            type Output = $out;
            fn output(reply: Reply) -> Option<$out> {
                match reply {
                    Reply::$reply(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}

/// Declares each command struct, [`Command`], [`Verb`] (the commands
/// that are plain data, which cross to a NIC in another process as they
/// are) and their typed answers.
macro_rules! commands {
    (
        wire {
            $($(#[$wdoc:meta])* $wname:ident { $($wbody:tt)* } -> $wreply:ident($wout:ty);)+
        }
        local {
            $($(#[$ldoc:meta])* $lname:ident { $($lbody:tt)* } -> $lreply:ident($lout:ty);)+
        }
    ) => {
        $(command! {
            $(#[$wdoc])*
            #[derive(Clone, Serialize, Deserialize)]
            $wname { $($wbody)* } -> $wreply($wout)
        })+
        $(command! { $(#[$ldoc])* $lname { $($lbody)* } -> $lreply($lout) })+

        /// Every command the engine takes.
        #[derive(Debug)]
        pub enum Command {
            $($(#[$wdoc])* $wname($wname),)+
            $($(#[$ldoc])* $lname($lname),)+
        }

        /// The commands that are plain data: a driver sends them to the
        /// NIC agent as they are (`Request::Verb` of the agent's protocol).
        #[derive(Debug, Clone, Serialize, Deserialize)]
        pub enum Verb {
            $($(#[$wdoc])* $wname($wname),)+
        }

        impl From<Verb> for Command {
            fn from(v: Verb) -> Command {
                match v {
                    $(Verb::$wname(c) => Command::$wname(c),)+
                }
            }
        }

        impl Command {
            /// The command as plain data, or itself when it holds what
            /// only this process can use (memory, CQs, work requests).
            pub fn into_verb(self) -> std::result::Result<Verb, Box<Command>> {
                match self {
                    $(Command::$wname(c) => Ok(Verb::$wname(c)),)+
                    other => Err(Box::new(other)),
                }
            }
        }
    };
}

commands! {
    wire {
        /// Allocate a protection domain; answers its number.
        AllocPd {} -> Number(u32);
        /// Free a protection domain with no MR or QP left in it.
        DeallocPd {
            /// The PD.
            pd: u32,
        } -> Done(());
        /// Deregister an MR; in-flight work keeps the memory alive until done.
        DeregMr {
            /// Its key.
            key: u32,
        } -> Mr(Arc<MrEntry>);
        /// Allocate a memory window in a PD; answers its R_Key.
        AllocMw {
            /// The PD.
            pd: u32,
            /// Its kind.
            kind: MwType,
        } -> Number(u32);
        /// Free a memory window (named by any R_Key it took).
        DeallocMw {
            /// The window's R_Key.
            rkey: u32,
        } -> Done(());
        /// Modify a QP (`ibv_modify_qp`).
        ModifyQp {
            /// The QP.
            qpn: u32,
            /// New values.
            attr: QpAttr,
            /// Which values.
            mask: QpAttrMask,
        } -> Done(());
        /// Current attributes of a QP.
        QueryQp {
            /// The QP.
            qpn: u32,
        } -> QpAttr(QpAttr);
        /// Destroy a QP; its queued work is dropped without completions.
        DestroyQp {
            /// The QP.
            qpn: u32,
        } -> Done(());
        /// Whether some QP uses a CQ (a CQ in use cannot be destroyed).
        CqInUse {
            /// The CQ.
            cqn: u32,
        } -> Flag(bool);
        /// Create a shared receive queue; answers its number.
        CreateSrq {
            /// The PD.
            pd: u32,
            /// Capacities and limit.
            attr: SrqAttr,
        } -> Number(u32);
        /// Change an SRQ's capacity or arm its limit.
        ModifySrq {
            /// The SRQ.
            srqn: u32,
            /// New capacity.
            max_wr: Option<u32>,
            /// New limit.
            limit: Option<u32>,
        } -> Done(());
        /// Current attributes of an SRQ.
        QuerySrq {
            /// The SRQ.
            srqn: u32,
        } -> SrqAttr(SrqAttr);
        /// Destroy an SRQ no QP uses.
        DestroySrq {
            /// The SRQ.
            srqn: u32,
        } -> Done(());
    }
    local {
        /// Register memory in a PD, visible at `iova`, under a fresh
        /// unpredictable key (or, with `rekey`, under that MR's key, which it
        /// then names instead: `ibv_rereg_mr`); answers the region.
        RegMr {
            /// The PD.
            pd: u32,
            /// Access rights.
            access: AccessFlags,
            /// Address the region is known by in work requests and R_Key accesses.
            iova: u64,
            /// The memory.
            mem: Box<dyn Memory>,
            /// Re-register the MR of this key.
            rekey: Option<u32>,
        } -> Mr(Arc<MrEntry>);
        /// Create a QP in the RESET state; answers its number.
        CreateQp {
            /// The PD.
            pd: u32,
            /// Transport.
            qp_type: QpType,
            /// Queue capacities.
            cap: QpCap,
            /// Signal every send WR.
            sq_sig_all: bool,
            /// CQ of send completions.
            send_cq: Arc<dyn CompletionSink>,
            /// CQ of receive completions.
            recv_cq: Arc<dyn CompletionSink>,
            /// SRQ the QP takes receive WQEs from (same PD), if any.
            srq: Option<u32>,
        } -> Number(u32);
        /// Destroy a QP whose owner is gone (a program that died): a
        /// connected RC peer is told first, so that it does not wait for what
        /// will never come; then as [`DestroyQp`].
        AbandonQp {
            /// The QP.
            qpn: u32,
        } -> Done(());
        /// Post a send work request.
        PostSend {
            /// The QP.
            qpn: u32,
            /// The request.
            wr: SendRequest,
        } -> Done(());
        /// Post a receive work request.
        PostRecv {
            /// The QP.
            qpn: u32,
            /// The request.
            wr: RecvRequest,
        } -> Done(());
        /// Post a receive work request to an SRQ.
        PostSrqRecv {
            /// The SRQ.
            srqn: u32,
            /// The request.
            wr: RecvRequest,
        } -> Done(());
    }
}

impl Engine {
    /// Run one command at time `now` (ns) and answer it. Packets and
    /// events it produces wait in the engine's outputs as after any input.
    pub fn execute(&mut self, now: u64, cmd: Command) -> Result<Reply> {
        use Command as C;
        Ok(match cmd {
            C::AllocPd(AllocPd {}) => Reply::Number(self.alloc_pd()?),
            C::DeallocPd(c) => Reply::Done(self.dealloc_pd(c.pd)?),
            C::RegMr(c) => Reply::Mr(self.reg_mr(c.pd, c.access, c.iova, c.mem, c.rekey)?),
            C::DeregMr(c) => Reply::Mr(self.dereg_mr(c.key)?),
            C::AllocMw(c) => Reply::Number(self.alloc_mw(c.pd, c.kind)?),
            C::DeallocMw(c) => Reply::Done(self.dealloc_mw(c.rkey)?),
            C::CreateQp(c) => Reply::Number(self.create_qp(c)?),
            C::ModifyQp(c) => Reply::Done(self.modify_qp(now, c.qpn, &c.attr, c.mask)?),
            C::QueryQp(c) => Reply::QpAttr(self.query_qp(c.qpn)?),
            C::DestroyQp(c) => Reply::Done(self.destroy_qp(c.qpn)?),
            C::AbandonQp(c) => Reply::Done(self.abandon_qp(now, c.qpn)?),
            C::CqInUse(c) => Reply::Flag(self.cq_in_use(c.cqn)),
            C::CreateSrq(c) => Reply::Number(self.create_srq(c.pd, c.attr)?),
            C::ModifySrq(c) => Reply::Done(self.modify_srq(c.srqn, c.max_wr, c.limit)?),
            C::QuerySrq(c) => Reply::SrqAttr(self.query_srq(c.srqn)?),
            C::DestroySrq(c) => Reply::Done(self.destroy_srq(c.srqn)?),
            C::PostSend(c) => Reply::Done(self.post_send(now, c.qpn, c.wr)?),
            C::PostRecv(c) => Reply::Done(self.post_recv(now, c.qpn, c.wr)?),
            C::PostSrqRecv(c) => Reply::Done(self.post_srq_recv(c.srqn, c.wr)?),
        })
    }

    /// Run one command and answer with its typed result.
    pub fn call<R: Request>(&mut self, now: u64, req: R) -> Result<R::Output> {
        let reply = self.execute(now, req.into())?;
        R::output(reply).ok_or_else(|| Error::inval("the engine answered another command"))
    }
}
