//! Every run-time setting of urdma in one struct, [`Settings`], loaded
//! once per process: the defaults, then the configuration file
//! (`URDMA_CONFIG`, else `/etc/urdma.toml`), then the environment, then
//! what the process itself sets ([`set`]: `urdma agent --set`, the
//! `urdma` command's options). A file key names the same setting as the
//! environment variable of its name in capitals after `URDMA_`: `ecn = 0`
//! in the file is `URDMA_ECN=0`. [`KNOBS`] describes each one: who reads
//! it, its default, what it does (docs/configuration.md is its table).
//!
//! A value that does not parse is reported once (a warning naming the
//! setting) and the default used; only `URDMA_PORT` is an error, as a
//! device on another port than the one asked for would be.

use super::values::{self, Loopback, NicMode};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Who reads a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The NIC: the agent, or a program's own NIC (`URDMA_NIC=embedded`).
    /// A program on a running agent is told when it asks for another value.
    Agent,
    /// The drivers in programs (the Rust API, the drop-in libraries).
    Program,
    /// Programs and the agent alike.
    Both,
    /// The `urdma` command (the agent included, which is `urdma agent`).
    Cli,
}

impl Reader {
    /// Whether the agent reads settings of this kind, so that a program
    /// passes them to an agent it starts.
    pub fn agent_reads(self) -> bool {
        matches!(self, Reader::Agent | Reader::Both)
    }
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Its default.
    Default,
    /// The configuration file at this path.
    File(PathBuf),
    /// Its environment variable.
    Env,
    /// Set by the process ([`set`]: `urdma agent --set`, an option).
    Set,
}

/// A setting's value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

impl<T> Setting<T> {
    fn default_of(value: T) -> Self {
        Setting {
            value,
            source: Source::Default,
        }
    }
}

/// A setting as [`KNOBS`] lists it.
pub struct Knob {
    /// Its key in the configuration file.
    pub key: &'static str,
    /// Its environment variable.
    pub env: &'static str,
    /// Who reads it.
    pub reader: Reader,
    /// Whether the configuration file may hold it (not so `URDMA_CONFIG`,
    /// which names the file).
    pub in_file: bool,
    /// What it does, in one line.
    pub doc: &'static str,
    parse: fn(&mut Settings, &str, Source) -> Result<(), String>,
    show: fn(&Settings) -> String,
    source: fn(&Settings) -> &Source,
}

impl Knob {
    /// The value of this setting in `s`, as the file and the environment
    /// write it (empty: unset).
    pub fn show(&self, s: &Settings) -> String {
        (self.show)(s)
    }

    /// Where this setting's value in `s` came from.
    pub fn source<'a>(&self, s: &'a Settings) -> &'a Source {
        (self.source)(s)
    }

    /// Its default, as the file and the environment write it.
    pub fn default_text(&self) -> String {
        self.show(&Settings::default())
    }
}

impl std::fmt::Debug for Knob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Knob").field("key", &self.key).finish()
    }
}

/// Define [`Settings`], its defaults and [`KNOBS`] from one list.
macro_rules! settings {
    ($( #[doc = $doc:literal] $key:ident: $ty:ty = $default:expr,
        $env:literal, $reader:ident, $in_file:literal, $parse:path, $show:path; )*) => {
        /// Every run-time setting, with where each value came from.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Settings {
            $( #[doc = $doc] pub $key: Setting<$ty>, )*
            /// Values that did not parse: (file key, what was wrong).
            pub problems: Vec<(&'static str, String)>,
        }

        impl Default for Settings {
            fn default() -> Self {
                Settings {
                    $( $key: Setting::default_of($default), )*
                    problems: Vec::new(),
                }
            }
        }

        /// Every setting, in the order of docs/configuration.md.
        pub const KNOBS: &[Knob] = &[ $( Knob {
            key: stringify!($key),
            env: $env,
            reader: Reader::$reader,
            in_file: $in_file,
            doc: $doc.trim_ascii(),
            parse: |s, text, source| {
                s.$key = Setting { value: $parse(text)?, source };
                Ok(())
            },
            show: |s| $show(&s.$key.value),
            source: |s| &s.$key.source,
        }, )* ];
    };
}

settings! {
    /// The address of the one device programs see (none: every address).
    addr: Option<String> = None, "URDMA_ADDR", Both, true, values::text, values::show_text;
    /// The UDP port of devices that name none.
    port: u16 = urdma_wire::ROCEV2_UDP_PORT, "URDMA_PORT", Both, true, values::port, u16::to_string;
    /// The configuration file (none: /etc/urdma.toml if it exists).
    config: Option<PathBuf> = None, "URDMA_CONFIG", Both, false, values::path, values::show_path;
    /// Send ECN-capable packets and answer congestion marks (1) or not (0).
    ecn: bool = true, "URDMA_ECN", Agent, true, values::switch, values::show_switch;
    /// Offer selective retransmission to urdma peers (1) or only go-back-N (0).
    selective: bool = true, "URDMA_SELECTIVE", Agent, true, values::switch, values::show_switch;
    /// Read payloads from programs' memory 64 KiB at a time (1), packet by packet (0), or as the kernel suits (auto).
    stage: Option<bool> = None, "URDMA_STAGE", Agent, true, values::auto_switch, values::show_auto_switch;
    /// Microseconds the NIC's threads keep polling for more work (0 to 10000).
    busy_poll_us: u64 = values::DEFAULT_BUSY_POLL_US, "URDMA_BUSY_POLL_US", Agent, true, values::busy_poll_us, u64::to_string;
    /// Send runs of datagrams with UDP GSO (1) or one by one (0).
    gso: bool = true, "URDMA_GSO", Agent, true, values::switch, values::show_switch;
    /// Traffic between devices of one NIC stays inside it (internal) or takes UDP sockets (udp).
    loopback: Loopback = Loopback::Internal, "URDMA_LOOPBACK", Agent, true, values::loopback, Loopback::to_string;
    /// Folder of the published counters (none: /run/urdma for root, else $XDG_RUNTIME_DIR/urdma or /tmp/urdma-UID).
    stats_dir: Option<PathBuf> = None, "URDMA_STATS_DIR", Agent, true, values::path, values::show_path;
    /// The NIC programs use: the shared agent (agent) or one inside the program (embedded).
    nic: NicMode = NicMode::Agent, "URDMA_NIC", Program, true, values::nic, NicMode::to_string;
    /// The abstract socket name where the agent and programs meet (none: the service's, then the user's).
    nic_socket: Option<String> = None, "URDMA_NIC_SOCKET", Both, true, values::text, values::show_text;
    /// The urdma program a program starts the agent with (none: found beside it or on the PATH).
    agent_bin: Option<PathBuf> = None, "URDMA_AGENT_BIN", Program, true, values::path, values::show_path;
    /// File the log of an agent a program starts is appended to (none: discarded).
    agent_log: Option<PathBuf> = None, "URDMA_AGENT_LOG", Program, true, values::path, values::show_path;
    /// Capture the packets of a program's devices into this pcap file (%p: the process id).
    pcap: Option<String> = None, "URDMA_PCAP", Program, true, values::text, values::show_text;
    /// Largest size of a packet capture, in bytes.
    pcap_limit: u64 = super::DEFAULT_PCAP_LIMIT, "URDMA_PCAP_LIMIT", Program, true, values::bytes, u64::to_string;
    /// What the urdma command logs to stderr, as a tracing filter (none: warn).
    log: Option<String> = None, "URDMA_LOG", Cli, true, values::text, values::show_text;
    /// Folder of the drop-in libraries for urdma run (none: beside the urdma program).
    lib_dir: Option<PathBuf> = None, "URDMA_LIB_DIR", Cli, true, values::path, values::show_path;
}

/// The setting of file key `key`.
pub fn knob(key: &str) -> Option<&'static Knob> {
    KNOBS.iter().find(|k| k.key == key)
}

impl Settings {
    /// Load from the configuration file, the environment, and then the
    /// `overrides` (file key, value), each over the one before.
    pub fn load(overrides: &[(String, String)]) -> Settings {
        Settings::load_from(
            |var| std::env::var_os(var).map(|v| v.to_string_lossy().into_owned()),
            |path| std::fs::read_to_string(path).ok(),
            overrides,
        )
    }

    /// [`Settings::load`] with the environment `var` and the files `read`.
    fn load_from(
        var: impl Fn(&str) -> Option<String>,
        read: impl Fn(&std::path::Path) -> Option<String>,
        overrides: &[(String, String)],
    ) -> Settings {
        let mut s = Settings::default();
        let env = |k: &Knob| var(k.env);
        // The file to read is named first.
        let named = overrides.iter().rev().find(|(k, _)| k == "config");
        match named {
            Some((_, v)) => s.apply("config", v, Source::Set),
            None => {
                if let Some(v) = knob("config").and_then(env) {
                    s.apply("config", &v, Source::Env);
                }
            }
        }
        let explicit = s.config.value.clone();
        let path = explicit
            .clone()
            .unwrap_or_else(|| PathBuf::from(super::DEFAULT_CONFIG_FILE));
        // A missing file is reported where devices are looked up.
        if let Some(text) = read(&path) {
            s.read_file(&path, &text);
        }
        for k in KNOBS.iter().filter(|k| k.key != "config") {
            if let Some(v) = env(k) {
                s.apply(k.key, &v, Source::Env);
            }
        }
        for (key, value) in overrides.iter().filter(|(k, _)| k != "config") {
            s.apply(key, value, Source::Set);
        }
        s
    }

    /// Take the settings of configuration file `path` holding `text`.
    fn read_file(&mut self, path: &std::path::Path, text: &str) {
        let table: toml::Table = match toml::from_str(text) {
            Ok(t) => t,
            Err(e) => {
                let e = e.to_string().replace('\n', " ");
                let e = format!(
                    "{}: {} (its settings are not used)",
                    path.display(),
                    e.trim()
                );
                self.problems.push(("config", e));
                return;
            }
        };
        for (key, value) in &table {
            if key == "device" {
                continue;
            }
            let Some(k) = knob(key).filter(|k| k.in_file) else {
                let e = format!("{}: `{key}` is no setting of urdma", path.display());
                self.problems.push(("config", e));
                continue;
            };
            let text = match value {
                toml::Value::Boolean(b) => values::show_switch(b),
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::String(t) => t.clone(),
                other => {
                    let e = format!(
                        "{}: {key} = {other} is not a setting's value (see {})",
                        path.display(),
                        k.env
                    );
                    self.problems.push((k.key, e));
                    continue;
                }
            };
            self.apply(k.key, &text, Source::File(path.to_path_buf()));
        }
    }

    /// Give setting `key` the value `text` from `source`; a value that
    /// does not parse leaves it as it was and is recorded in `problems`.
    fn apply(&mut self, key: &str, text: &str, source: Source) {
        let Some(k) = knob(key) else { return };
        if let Err(why) = (k.parse)(self, text, source.clone()) {
            let given = origin(k, text, &source);
            self.problems.push((
                k.key,
                format!("{given}: {why}; {} stays {}", k.key, k.show(self)),
            ));
        }
    }

    /// The problem recorded for setting `key`, if its value did not parse.
    pub fn problem(&self, key: &str) -> Option<&str> {
        self.problems
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, p)| p.as_str())
    }
}

/// How a value of `k` from `source` reads to the user: `URDMA_ECN=0`,
/// `ecn = 0 in /etc/urdma.toml`, `ecn=0`.
pub fn origin(k: &Knob, text: &str, source: &Source) -> String {
    match source {
        Source::Env => format!("{}={text}", k.env),
        Source::File(p) => format!("{} = {text} in {}", k.key, p.display()),
        Source::Set => format!("{}={text} (set by this program)", k.key),
        Source::Default => format!("the default {}={text}", k.key),
    }
}

/// This process's settings, and the values it set itself.
struct State {
    loaded: Option<Arc<Settings>>,
    overrides: Vec<(String, String)>,
    reported: Vec<String>,
}

static STATE: Mutex<State> = Mutex::new(State {
    loaded: None,
    overrides: Vec::new(),
    reported: Vec::new(),
});

/// This process's settings, loaded on first use. Their problems are
/// reported once, as warnings (on stderr where no log is set up).
pub fn get() -> Arc<Settings> {
    let (s, fresh) = {
        let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
        let s = match &st.loaded {
            Some(s) => return s.clone(),
            None => Arc::new(Settings::load(&st.overrides)),
        };
        st.loaded = Some(s.clone());
        let fresh: Vec<String> = s
            .problems
            .iter()
            .filter(|(k, _)| *k != "port")
            .map(|(_, p)| p.clone())
            .filter(|p| !st.reported.contains(p))
            .collect();
        st.reported.extend(fresh.iter().cloned());
        (s, fresh)
    };
    for p in fresh {
        warn(&p);
    }
    s
}

/// Set `key` (a file key) to `value` for this process, over the file and
/// the environment, as `urdma agent --set` does; before the devices open
/// (the NIC reads its settings once).
pub fn set(key: &str, value: &str) -> crate::Result<()> {
    let k = knob(key).ok_or_else(|| {
        crate::Error::inval(format!(
            "{key} is no setting of urdma (see docs/configuration.md)"
        ))
    })?;
    let mut probe = Settings::default();
    (k.parse)(&mut probe, value, Source::Set)
        .map_err(|why| crate::Error::inval(format!("{key}={value}: {why}")))?;
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    st.overrides.push((key.to_string(), value.to_string()));
    st.loaded = None;
    Ok(())
}

/// Log a warning for the user: through `tracing`, and on stderr too when
/// the process set up no log (a program of the drop-in libraries).
pub fn warn(text: &str) {
    tracing::warn!("{text}");
    if !tracing::dispatcher::has_been_set() {
        eprintln!("urdma: {text}");
    }
}

/// The `urdma agent` arguments that give an agent a program starts this
/// process's settings of the agent (`--set KEY=VALUE` for each one the
/// agent reads, and the agent's log file), so that it depends on no
/// environment it would inherit.
pub fn agent_args(s: &Settings) -> Vec<String> {
    KNOBS
        .iter()
        .filter(|k| k.reader.agent_reads() || k.key == "agent_log")
        .map(|k| (k.key, k.show(s)))
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("--set={k}={v}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn env_of<'a>(vars: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |v| {
            vars.iter()
                .find(|(k, _)| *k == v)
                .map(|(_, x)| x.to_string())
        }
    }

    #[test]
    fn defaults_file_environment_then_overrides() {
        let file = "ecn = 0\nbusy_poll_us = 7\nloopback = \"udp\"\nselective = false\n\
                    [[device]]\naddr = \"127.0.0.1\"\n";
        let read = |p: &Path| (p == Path::new("/x.toml")).then(|| file.to_string());
        let vars = [("URDMA_CONFIG", "/x.toml"), ("URDMA_BUSY_POLL_US", "9")];
        let s = Settings::load_from(env_of(&vars), read, &[("gso".into(), "0".into())]);
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        let file_source = Source::File("/x.toml".into());
        assert_eq!(
            s.ecn,
            Setting {
                value: false,
                source: file_source.clone()
            }
        );
        assert!(!s.selective.value);
        assert_eq!(s.loopback.value, Loopback::Udp);
        assert_eq!(
            s.busy_poll_us,
            Setting {
                value: 9,
                source: Source::Env
            }
        );
        assert_eq!(
            s.gso,
            Setting {
                value: false,
                source: Source::Set
            }
        );
        assert_eq!(s.port, Setting::default_of(4791));
        // Without URDMA_CONFIG: /etc/urdma.toml, here none.
        let s = Settings::load_from(env_of(&[]), |_| None, &[]);
        assert_eq!(s, Settings::default());
        // An override names another file.
        let o = [("config".to_string(), "/x.toml".to_string())];
        assert!(!Settings::load_from(env_of(&[]), read, &o).ecn.value);
    }

    #[test]
    fn bad_values_are_reported_by_name_and_keep_the_default() {
        let file = "ecn = 2\nfrobnicate = 1\nstage = [1]\n";
        let read = |_: &Path| Some(file.to_string());
        let vars = [("URDMA_BUSY_POLL_US", "fast"), ("URDMA_PORT", "0")];
        let s = Settings::load_from(env_of(&vars), read, &[]);
        assert!(s.ecn.value && s.ecn.source == Source::Default);
        assert_eq!(s.busy_poll_us.value, 50);
        let p = s.problem("ecn").unwrap();
        assert_eq!(p, "ecn = 2 in /etc/urdma.toml: not 0 or 1; ecn stays 1");
        let p = s.problem("busy_poll_us").unwrap();
        assert!(
            p.starts_with("URDMA_BUSY_POLL_US=fast: not a number"),
            "{p}"
        );
        assert!(s.problem("port").unwrap().starts_with("URDMA_PORT=0"));
        assert!(s.problem("stage").is_some());
        let unknown = s.problems.iter().any(|(_, p)| p.contains("`frobnicate`"));
        assert!(unknown, "{:?}", s.problems);
        let broken = Settings::load_from(env_of(&[]), |_| Some("ecn = ".into()), &[]);
        assert!(broken.problem("config").is_some());
        assert!(broken.ecn.value);
    }

    #[test]
    fn every_setting_has_an_env_name_of_its_key_and_a_line() {
        for k in KNOBS {
            assert_eq!(k.env, format!("URDMA_{}", k.key.to_uppercase()));
            assert!(!k.doc.is_empty() && !k.doc.contains('\n'), "{}", k.key);
            // The default shows as a value that parses back to it.
            let mut s = Settings::default();
            (k.parse)(&mut s, &k.default_text(), Source::Default).unwrap();
            assert_eq!(s, Settings::default(), "{}", k.key);
        }
    }

    #[test]
    fn the_agent_is_started_with_its_settings_as_arguments() {
        let mut s = Settings::default();
        s.ecn.value = false;
        s.nic_socket.value = Some("urdma-test".into());
        s.pcap.value = Some("/tmp/p.pcap".into());
        let args = agent_args(&s);
        assert!(args.contains(&"--set=ecn=0".to_string()), "{args:?}");
        assert!(args.contains(&"--set=nic_socket=urdma-test".to_string()));
        assert!(args.contains(&"--set=busy_poll_us=50".to_string()));
        // Not the program's own, nor unset ones.
        assert!(!args
            .iter()
            .any(|a| a.contains("pcap") || a.contains("addr")));
    }

    /// docs/configuration.md has a row for each setting: its key, its
    /// variable, who reads it and its default.
    #[test]
    fn the_documentation_lists_every_setting() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
        let doc = std::fs::read_to_string(path).expect("docs/configuration.md");
        for k in KNOBS {
            let key = if k.in_file {
                format!("`{}`", k.key)
            } else {
                "—".into()
            };
            let reader = match k.reader {
                Reader::Agent => "agent",
                Reader::Program => "program",
                Reader::Both => "both",
                Reader::Cli => "urdma",
            };
            let default = match k.default_text() {
                d if d.is_empty() => "unset".to_string(),
                d => format!("`{d}`"),
            };
            let row = format!("| {key} | `{}` | {reader} | {default} |", k.env);
            assert!(
                doc.contains(&row),
                "docs/configuration.md lacks the row {row}"
            );
        }
    }

    #[test]
    fn set_checks_the_key_and_value() {
        assert!(set("no_such_setting", "1").is_err());
        let e = set("ecn", "maybe").unwrap_err().to_string();
        assert!(e.contains("ecn=maybe") && e.contains("0 or 1"), "{e}");
    }
}
