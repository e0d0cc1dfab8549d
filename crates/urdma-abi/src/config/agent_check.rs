//! The settings of the NIC agent a program uses, and what the program
//! asked for: the agent, already running, reads its settings once, so a
//! program whose settings of the NIC differ is told that they do not
//! apply, and what to do about it.

use super::settings::{self, Knob, Reader, Settings};
use crate::proto::AgentInfo;
use std::time::Duration;

/// What the agent tells each program at its Hello: its process, how long
/// it lingers once idle, and its values of the settings of the NIC.
pub fn agent_info(s: &Settings, linger: Option<Duration>) -> AgentInfo {
    AgentInfo {
        pid: std::process::id(),
        linger_ms: linger.map(|l| l.as_millis().min(u128::from(u64::MAX)) as u64),
        settings: agent_knobs()
            .map(|k| (k.key.to_string(), k.show(s)))
            .collect(),
    }
}

/// The settings the agent reads and a program may not choose for itself.
fn agent_knobs() -> impl Iterator<Item = &'static Knob> {
    settings::KNOBS.iter().filter(|k| k.reader == Reader::Agent)
}

/// One warning for each setting of the NIC on which `mine` differs from
/// the running agent's, `theirs`: what is ignored, what the agent has,
/// and how to apply it.
pub fn differences(mine: &Settings, theirs: &AgentInfo) -> Vec<String> {
    let mut out = Vec::new();
    for k in agent_knobs() {
        let Some((_, their)) = theirs.settings.iter().find(|(key, _)| key == k.key) else {
            // An agent of another build that has no such setting.
            continue;
        };
        let my = k.show(mine);
        if &my == their {
            continue;
        }
        let given = settings::origin(k, &my, k.source(mine));
        let pid = theirs.pid;
        let fix = match theirs.linger_ms {
            Some(ms) => format!(
                "stop it (kill {pid}; it also exits by itself {} s after its last program \
                 closes) and start the program again to apply it",
                ms.div_ceil(1000)
            ),
            None => format!(
                "it runs until stopped: restart it with {}={my} (`urdma agent --set {}={my}`, \
                 or `{} = {my}` in its configuration file) to apply it",
                k.env, k.key, k.key
            ),
        };
        let shown = |v: &str| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.to_string()
            }
        };
        out.push(format!(
            "{given} is ignored: the running NIC agent (pid {pid}) has {}={}; {fix}",
            k.key,
            shown(their)
        ));
    }
    out
}

/// Warn, once per process for each setting, of the settings of this
/// process that the running agent `theirs` does not have.
pub fn check_agent(theirs: &AgentInfo) {
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mine = settings::get();
    for w in differences(&mine, theirs) {
        let mut done = WARNED.lock().unwrap_or_else(|e| e.into_inner());
        if done.contains(&w) {
            continue;
        }
        done.push(w.clone());
        drop(done);
        settings::warn(&w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Source;

    fn agent_with(s: &Settings, linger: Option<Duration>) -> AgentInfo {
        AgentInfo {
            pid: 4321,
            ..agent_info(s, linger)
        }
    }

    #[test]
    fn the_same_settings_warn_of_nothing() {
        let s = Settings::default();
        let theirs = agent_with(&s, Some(Duration::from_secs(5)));
        assert!(differences(&s, &theirs).is_empty());
        // Settings the agent does not read are not compared.
        let mut other = Settings::default();
        other.pcap.value = Some("/tmp/x.pcap".into());
        other.addr.value = Some("127.0.0.9".into());
        assert!(differences(&other, &theirs).is_empty());
    }

    #[test]
    fn each_differing_setting_is_named_with_what_to_do() {
        let mut agent = Settings::default();
        agent.ecn.value = true;
        agent.busy_poll_us.value = 0;
        let theirs = agent_with(&agent, Some(Duration::from_secs(5)));
        let mut mine = Settings::default();
        mine.ecn.value = false;
        mine.ecn.source = Source::Env;
        let w = differences(&mine, &theirs);
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(
            w[0],
            "URDMA_ECN=0 is ignored: the running NIC agent (pid 4321) has ecn=1; stop it \
             (kill 4321; it also exits by itself 5 s after its last program closes) and \
             start the program again to apply it"
        );
        assert!(
            w[1].starts_with(
                "the default busy_poll_us=50 is ignored: the running NIC agent \
                              (pid 4321) has busy_poll_us=0;"
            ),
            "{}",
            w[1]
        );
        let file = std::path::PathBuf::from("/etc/urdma.toml");
        mine.selective.value = false;
        mine.selective.source = Source::File(file);
        let service = agent_with(&agent, None);
        let w = differences(&mine, &service);
        let sel = w.iter().find(|w| w.contains("selective")).unwrap();
        assert!(
            sel.starts_with("selective = 0 in /etc/urdma.toml is ignored"),
            "{sel}"
        );
        assert!(sel.contains("urdma agent --set selective=0"), "{sel}");
    }

    #[test]
    fn settings_an_agent_lacks_are_not_compared() {
        let theirs = AgentInfo {
            pid: 1,
            linger_ms: None,
            settings: vec![("ecn".into(), "1".into())],
        };
        let mut mine = Settings::default();
        mine.gso.value = false;
        assert!(differences(&mine, &theirs).is_empty());
    }
}
