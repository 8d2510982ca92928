//! One HTTP agent per kind of agent in the process, so that files on one
//! host share its connection pool.
//!
//! Agents differ only in what a file's builder may change about them (the
//! proxy and the trusted roots); everything per request (timeouts,
//! headers, redirects) is set on each request. A child forked from the
//! process makes agents of its own: a pooled connection used by parent and
//! child would interleave their bytes.

use std::collections::BTreeMap;

use ureq::Agent;

use crate::sync::{MadeIn, Mutex, ProcessLocal, start_afresh};

/// What makes two files' agents differ.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct AgentKind {
    /// The proxy variables of the environment when the agent was made, if
    /// the agent takes its proxy from there: a process that changes them
    /// gets a new agent for its next files.
    pub proxy_env: Option<Vec<(String, String)>>,
    /// PEM data of the CA certificates trusted beside the built-in roots.
    pub extra_roots: Vec<Vec<u8>>,
}

/// The agents this process made, by kind.
static AGENTS: ProcessLocal<BTreeMap<AgentKind, Agent>> =
    ProcessLocal::new(BTreeMap::new(), start_afresh);

/// The process's agent of `kind`, made by `make` the first time.
pub(crate) fn shared<E>(
    kind: &AgentKind,
    make: impl FnOnce() -> Result<Agent, E>,
) -> Result<Agent, E> {
    let Some(mut agents) = AGENTS.lock() else {
        return make();
    };
    if let Some(agent) = agents.get(kind) {
        return Ok(agent.clone());
    }
    let agent = make()?;
    agents.insert(kind.clone(), agent.clone());
    Ok(agent)
}

/// An agent of the process, found again in a forked child.
#[derive(Debug)]
pub(crate) struct SharedAgent {
    kind: AgentKind,
    made_in: MadeIn,
    agent: Agent,
    /// The agent of a process forked since, once looked up there.
    forked: Mutex<Option<(MadeIn, Agent)>>,
    make: fn(&AgentKind) -> Result<Agent, crate::error::Error>,
}

impl SharedAgent {
    /// The process's agent of `kind` (made by `make` the first time).
    pub(crate) fn new(
        kind: AgentKind,
        make: fn(&AgentKind) -> Result<Agent, crate::error::Error>,
    ) -> Result<SharedAgent, crate::error::Error> {
        let agent = shared(&kind, || make(&kind))?;
        Ok(SharedAgent {
            kind,
            made_in: MadeIn::here(),
            agent,
            forked: Mutex::new(None),
            make,
        })
    }

    /// The agent for a request from this process: in a child forked since
    /// it was made, the child's own.
    /// Whether its requests may go through a proxy (one named in the
    /// environment it was made with).
    pub(crate) fn may_use_a_proxy(&self) -> bool {
        self.kind.proxy_env.as_ref().is_some_and(|vars| {
            vars.iter()
                .any(|(name, value)| !name.eq_ignore_ascii_case("no_proxy") && !value.is_empty())
        })
    }

    pub(crate) fn get(&self) -> Agent {
        if !self.made_in.inherited() {
            return self.agent.clone();
        }
        // Tried, not waited for: a thread of a parent may hold it for good.
        let mut forked = self.forked.try_lock_until(std::time::Instant::now());
        if let Some(Some((made_in, agent))) = forked.as_deref() {
            if !made_in.inherited() {
                return agent.clone();
            }
        }
        let make = self.make;
        let agent = shared(&self.kind, || make(&self.kind))
            // The kind was made once already: it cannot fail now but for
            // the system; a private agent then.
            .unwrap_or_else(|_| Agent::config_builder().build().new_agent());
        if let Some(forked) = forked.as_deref_mut() {
            *forked = Some((MadeIn::here(), agent.clone()));
        }
        agent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    fn kind(roots: &[&[u8]]) -> AgentKind {
        AgentKind {
            proxy_env: None,
            extra_roots: roots.iter().map(|r| r.to_vec()).collect(),
        }
    }

    #[test]
    fn one_agent_is_made_per_kind() {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let make = || {
            MADE.fetch_add(1, Relaxed);
            Ok::<_, ()>(Agent::config_builder().build().new_agent())
        };
        let unique = kind(&[b"one_agent_is_made_per_kind"]);
        shared(&unique, make).unwrap();
        shared(&unique, make).unwrap();
        assert_eq!(MADE.load(Relaxed), 1);
        shared(
            &kind(&[b"one_agent_is_made_per_kind", b"another root"]),
            make,
        )
        .unwrap();
        assert_eq!(MADE.load(Relaxed), 2, "other roots, another agent");
    }

    #[test]
    fn a_kind_that_fails_to_make_is_not_remembered() {
        let failing = kind(&[b"a_kind_that_fails_to_make"]);
        assert!(shared(&failing, || Err::<Agent, _>("no")).is_err());
        let made = AtomicUsize::new(0);
        shared(&failing, || {
            made.fetch_add(1, Relaxed);
            Ok::<_, ()>(Agent::config_builder().build().new_agent())
        })
        .unwrap();
        assert_eq!(made.load(Relaxed), 1);
    }
}
