//! The dashboard's sessions: in memory, bounded, each with an expiry on the server's clock and
//! its own CSRF token.
//!
//! A session remembers the SHA-256 digest of the key it was opened with, never the key: every
//! request looks the digest up in the keys in force ([`crate::server::Access`]), so a key removed
//! or demoted by a reload (SIGHUP) ends or demotes its sessions at once.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::server::auth::ct_eq;
use crate::time::Timestamp;

/// How long a session lasts from its login (8 hours: a working day, then log in again).
pub const SESSION_TTL_MS: i64 = 8 * 60 * 60 * 1000;

/// Most sessions kept at once; a login beyond it first drops the expired ones, then the one
/// closest to its expiry (a flood of logins cannot grow the heap).
pub const MAX_SESSIONS: usize = 1024;

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The kernel gave no random bytes for the session id or the CSRF token.
    #[error("no random session id could be drawn: {0}")]
    Random(#[from] crate::writer::files::Error),
}

/// One open session.
#[derive(Clone, Debug)]
pub struct Session {
    /// The digest of the key the session was opened with; `None` without authentication
    /// (`--insecure-no-auth`: the principal `anonymous`, an operator).
    pub digest: Option<[u8; 32]>,
    /// The token every state-changing form of this session carries.
    pub csrf: String,
    /// When the session ends.
    pub expires: Timestamp,
}

/// The open sessions, by session id.
#[derive(Debug, Default)]
pub struct Sessions {
    open: Mutex<HashMap<String, Session>>,
}

/// A random, unguessable token: two UUID v4 (244 random bits) from the crate's one random-id
/// helper, hyphens removed.
fn token() -> Result<String, SessionError> {
    let a = crate::writer::files::uuid_v4()?;
    let b = crate::writer::files::uuid_v4()?;
    Ok(format!("{a}{b}").replace('-', ""))
}

impl Sessions {
    /// No sessions.
    #[cfg(test)]
    pub fn new() -> Sessions {
        Sessions::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens a session for the key of `digest` at `now`: its id (the cookie's value) and the
    /// session.
    ///
    /// # Errors
    /// [`SessionError::Random`].
    pub fn open(
        &self,
        digest: Option<[u8; 32]>,
        now: Timestamp,
    ) -> Result<(String, Session), SessionError> {
        let id = token()?;
        let session = Session {
            digest,
            csrf: token()?,
            expires: now.saturating_add_millis(SESSION_TTL_MS),
        };
        let mut open = self.lock();
        if open.len() >= MAX_SESSIONS {
            open.retain(|_, s| s.expires > now);
        }
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
        {
            open.remove(&oldest);
        }
        open.insert(id.clone(), session.clone());
        Ok((id, session))
    }

    /// The session of id `id`, when it is open at `now` (an expired one is dropped).
    pub fn get(&self, id: &str, now: Timestamp) -> Option<Session> {
        let mut open = self.lock();
        let session = open.get(id)?.clone();
        if session.expires <= now {
            open.remove(id);
            return None;
        }
        Some(session)
    }

    /// Ends session `id` (logout); unknown ids are ignored.
    pub fn close(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The number of sessions kept (expired ones not yet dropped included).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no session is kept.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `presented` is the session's CSRF token `expected` (constant time).
pub fn csrf_ok(expected: &str, presented: &str) -> bool {
    ct_eq(expected.as_bytes(), presented.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_are_bounded_and_close() {
        let sessions = Sessions::new();
        let t0 = Timestamp::from_millis(1_000_000);
        let (id, s) = sessions.open(None, t0).unwrap();
        assert_eq!(id.len(), 64);
        assert_ne!(id, s.csrf);
        assert!(sessions.get(&id, t0).is_some());
        assert!(csrf_ok(&s.csrf, &s.csrf) && !csrf_ok(&s.csrf, "") && !csrf_ok(&s.csrf, &id));
        let end = t0.saturating_add_millis(SESSION_TTL_MS);
        assert!(sessions.get(&id, end).is_none(), "expired");
        assert!(sessions.is_empty(), "an expired session is dropped");
        let (id, _) = sessions.open(None, t0).unwrap();
        sessions.close(&id);
        assert!(sessions.get(&id, t0).is_none());
        for i in 0..(MAX_SESSIONS + 10) {
            sessions
                .open(None, t0.saturating_add_millis(i as i64))
                .unwrap();
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
    }
}
