//! The benchmark's control channel: JSON lines over TCP.

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use urdma::api::RemoteBuf;
use urdma::Endpoint;

/// First byte a client writes on its control connection.
const CTRL_TAG: u8 = b'C';
/// First byte a client writes on its data (TCP comparison) connection.
const DATA_TAG: u8 = b'D';

/// Client side: the control and the data connection, each named by its
/// first byte. The server may accept them in either order: a lost
/// handshake ACK lets the second connection complete first.
pub fn name_connections(ctrl: TcpStream, data: TcpStream) -> Result<(TcpStream, TcpStream)> {
    (&ctrl).write_all(&[CTRL_TAG])?;
    (&data).write_all(&[DATA_TAG])?;
    Ok((ctrl, data))
}

/// How long the server waits for a connection's first byte.
const TAG_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// Server side: which of two accepted connections is the control one and
/// which the data one, by the byte the client wrote first on each (within
/// [`TAG_PATIENCE`]).
pub fn sort_connections(a: TcpStream, b: TcpStream) -> Result<(TcpStream, TcpStream)> {
    use std::io::Read;
    let mut tags = [[0u8]; 2];
    for (s, t) in [&a, &b].into_iter().zip(tags.iter_mut()) {
        s.set_read_timeout(Some(TAG_PATIENCE))?;
        let mut r: &TcpStream = s;
        r.read_exact(t)
            .context("reading a connection's first byte")?;
        s.set_read_timeout(None)?;
    }
    match [tags[0][0], tags[1][0]] {
        [CTRL_TAG, DATA_TAG] => Ok((a, b)),
        [DATA_TAG, CTRL_TAG] => Ok((b, a)),
        t => bail!("not a urdma bench client (connections tagged {t:?})"),
    }
}

/// A measurement the client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TestKind {
    /// RDMA WRITE bandwidth.
    WriteBw,
    /// RDMA READ bandwidth.
    ReadBw,
    /// SEND bandwidth.
    SendBw,
    /// RDMA WRITE ping-pong latency.
    WriteLat,
    /// RDMA READ latency.
    ReadLat,
    /// SEND ping-pong latency.
    SendLat,
    /// TCP stream bandwidth on the same path.
    TcpBw,
    /// TCP ping-pong latency on the same path.
    TcpLat,
}

/// Control messages.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Msg {
    /// QP endpoint and buffer of the sender.
    Hello {
        /// QP endpoint.
        endpoint: Endpoint,
        /// Buffer the peer may access.
        buf: RemoteBuf,
    },
    /// Prepare a test.
    Start {
        /// Which test.
        kind: TestKind,
        /// Message size.
        size: usize,
        /// Iterations.
        iters: usize,
    },
    /// The server is ready for the test.
    Ready,
    /// The client finished its side.
    Finish,
    /// The server finished its side.
    Done {
        /// Error text, if the server side failed.
        error: Option<String>,
    },
    /// End of the session.
    Bye,
}

/// A framed JSON-lines channel.
pub struct Channel {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Channel {
    /// Wrap a connected stream.
    pub fn new(s: TcpStream) -> Result<Self> {
        s.set_nodelay(true)?;
        Ok(Channel {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
        })
    }

    /// Send one message.
    pub fn send(&mut self, m: &Msg) -> Result<()> {
        self.send_as(m)
    }

    /// Send one message of any serializable type.
    pub fn send_as<T: Serialize>(&mut self, m: &T) -> Result<()> {
        let mut line = serde_json::to_string(m)?;
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .context("control channel write")?;
        Ok(())
    }

    /// Receive one message.
    pub fn recv(&mut self) -> Result<Msg> {
        self.recv_as()
    }

    /// Receive one message of type `T`.
    pub fn recv_as<T: DeserializeOwned>(&mut self) -> Result<T> {
        let mut line = String::new();
        if self
            .reader
            .read_line(&mut line)
            .context("control channel read")?
            == 0
        {
            bail!("peer closed the control channel");
        }
        serde_json::from_str(&line).with_context(|| format!("bad control message {line:?}"))
    }

    /// Receive and insist on `Ready`.
    pub fn expect_ready(&mut self) -> Result<()> {
        match self.recv()? {
            Msg::Ready => Ok(()),
            Msg::Done { error: Some(e) } => bail!("server: {e}"),
            m => bail!("expected Ready, got {m:?}"),
        }
    }
}
