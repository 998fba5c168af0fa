//! The status values of the records, each a closed enum with the exact strings written in the
//! files and on the wire: the lifecycle of an action, its durable outcome, the verdict of the
//! guard decision that authorised it, and which path wrote an outcome. The rules that tie them
//! together (which lifecycles accept an outcome, how an outcome closes a lifecycle, which
//! lifecycles the sweep skips, the implicit outcome of a legacy close) live here as methods, so
//! the operations and `verify` apply one table.

use std::fmt;

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            /// The contract's string for this value.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// The value named by the contract's string `s`.
            pub fn parse(s: &str) -> Option<$name> {
                match s { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum! {
    /// The lifecycle `status` of an action. `unknown` and `expired` are server-only.
    Lifecycle {
        /// Open; the only claimable lifecycle.
        Running = "running",
        /// Open.
        Pending = "pending",
        /// Waiting for an operator's approval or denial (`serve`'s approve and deny routes; the
        /// CLI never approves).
        PendingApproval = "pending_approval",
        /// Created from a `block` verdict.
        Blocked = "blocked",
        /// Closed.
        Completed = "completed",
        /// Closed.
        Failed = "failed",
        /// Closed.
        Cancelled = "cancelled",
        /// Set by the sweep (server only).
        Unknown = "unknown",
        /// Nobody approved in time: set by the sweep's approval expiry (server only).
        Expired = "expired",
    }
}

impl Lifecycle {
    /// The values a client may give at creation (the reference's creation validator).
    pub fn is_client_settable(self) -> bool {
        !matches!(self, Lifecycle::Unknown | Lifecycle::Expired)
    }

    /// `running` or `pending`: an outcome write closes it.
    pub fn is_open(self) -> bool {
        matches!(self, Lifecycle::Running | Lifecycle::Pending)
    }

    /// The lifecycles the sweep treats as implicitly confirmed and skips (`expired`: nothing
    /// ran, and nothing can run any more).
    pub fn is_sweep_excluded(self) -> bool {
        matches!(
            self,
            Lifecycle::Completed
                | Lifecycle::Failed
                | Lifecycle::Cancelled
                | Lifecycle::Blocked
                | Lifecycle::Expired
        )
    }

    /// The lifecycles for which a caller may not report an outcome.
    pub fn refuses_outcome(self) -> bool {
        matches!(
            self,
            Lifecycle::Blocked
                | Lifecycle::PendingApproval
                | Lifecycle::Cancelled
                | Lifecycle::Failed
                | Lifecycle::Expired
        )
    }

    /// The lifecycle after an outcome write (the reference's closure table): an open lifecycle is
    /// closed, anything else is left as it is.
    pub fn closed_by(self, status: OutcomeStatus) -> Lifecycle {
        if !self.is_open() {
            return self;
        }
        match status {
            OutcomeStatus::Pending => self,
            OutcomeStatus::Completed => Lifecycle::Completed,
            OutcomeStatus::Partial | OutcomeStatus::Failed => Lifecycle::Failed,
            OutcomeStatus::LostConfirmation => Lifecycle::Unknown,
        }
    }

    /// The implicit outcome of a legacy close to this lifecycle, for the four close
    /// statuses `completed`, `failed`, `cancelled`, `blocked`.
    pub fn legacy_outcome(self) -> Option<OutcomeStatus> {
        match self {
            Lifecycle::Completed => Some(OutcomeStatus::Completed),
            Lifecycle::Failed | Lifecycle::Cancelled | Lifecycle::Blocked => {
                Some(OutcomeStatus::Failed)
            }
            _ => None,
        }
    }
}

string_enum! {
    /// The durable outcome `outcome_status` of an action.
    OutcomeStatus {
        /// No outcome yet (no `outcome.json`).
        Pending = "pending",
        /// The effect happened.
        Completed = "completed",
        /// Part of the effect happened; never upgraded later.
        Partial = "partial",
        /// The attempt failed (it may still have partially applied).
        Failed = "failed",
        /// No outcome was reported in time: the result is unknown; reconcile (sweep only).
        LostConfirmation = "lost_confirmation",
    }
}

string_enum! {
    /// The verdict of the guard decision that authorised the action (an opaque input here).
    Verdict {
        /// Permissive.
        Allow = "allow",
        /// Permissive.
        Warn = "warn",
        /// Permissive for a contained action only.
        AllowContained = "allow_contained",
        /// Needs an operator; the action is born `pending_approval`.
        RequireApproval = "require_approval",
        /// Never claimable; the action is born `blocked`.
        Block = "block",
    }
}

impl Verdict {
    /// `allow`, `warn` or `allow_contained`.
    pub fn is_permissive(self) -> bool {
        matches!(
            self,
            Verdict::Allow | Verdict::Warn | Verdict::AllowContained
        )
    }

    /// The lifecycle an action starts in under this verdict.
    pub fn initial_lifecycle(self) -> Lifecycle {
        match self {
            Verdict::RequireApproval => Lifecycle::PendingApproval,
            Verdict::Block => Lifecycle::Blocked,
            _ => Lifecycle::Running,
        }
    }
}

string_enum! {
    /// Which path wrote an outcome.
    Source {
        /// A caller's report ([`report_outcome`](super::report_outcome)).
        Outcome = "outcome",
        /// The implicit mapping of a legacy close ([`close`](super::close)).
        LegacyClose = "legacy_close",
        /// The stale-outcome sweep ([`sweep`](fn@super::sweep)).
        Sweep = "sweep",
    }
}
