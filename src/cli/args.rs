//! The command-line grammar: clap types, one variant per command.
//!
//! The doc comments here are the `--help` text, so they carry the per-flag detail: defaults,
//! units, the environment variables a flag falls back to, and what the flag changes. Values
//! are resolved (environment, clock) in `settings` and executed in `cmd`.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand};

use crate::privacy::Profile;

#[derive(Parser, Debug)]
#[command(
    name = "action-ledger",
    version,
    about = "An immutable, privacy-bounded action ledger stored natively in Git"
)]
pub(super) struct Cli {
    /// Print nothing on stderr except errors.
    #[arg(short, long, global = true)]
    pub(super) quiet: bool,
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Subcommand, Debug)]
pub(super) enum HooksCommand {
    /// Install the pre-receive hook into a bare repository (created when absent) and set
    /// receive.denyDeletes, receive.denyNonFastForwards and receive.fsckObjects.
    Install {
        /// The bare state repository that receives pushes.
        #[arg(long, default_value = "./state.git")]
        repo: PathBuf,
        /// The ledger ref HEAD points at when the repository is created.
        #[arg(long = "ref", default_value = "refs/heads/main")]
        ref_name: String,
    },
}

/// The privacy profile of the commands that write or check events.
#[derive(clap::Args, Debug)]
pub(super) struct PrivacyArg {
    /// Privacy rules: `strict` (the default) also refuses the credential and private-host
    /// families beyond the reference's rules (README, Privacy); `reference` applies exactly the
    /// reference's rules.
    #[arg(long = "privacy", value_name = "PROFILE", default_value = "strict",
          value_parser = PossibleValuesParser::new(["strict", "reference"])
              .map(|s| s.parse::<Profile>().expect("a listed profile")))]
    pub(super) profile: Profile,
}

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Record one event into a spool (phase input with `phase`, or action input with `scope`);
    /// prints the recorded event as one JSON line, or nothing when recording is disabled.
    Record {
        /// Spool root; defaults to $CLAWSWEEPER_ACTION_LEDGER_ROOT, else the current directory.
        #[arg(long)]
        spool: Option<PathBuf>,
        /// JSON input file, or `-` for stdin (the default).
        #[arg(long, default_value = "-")]
        input: String,
        #[command(flatten)]
        privacy: PrivacyArg,
    },
    /// Seal (finalize) spools: write each producer's seal record; with --output also write the
    /// shard files the reference would write there.
    Seal {
        /// Directory that receives the shard files (`ledger/v1/events/...`); defaults to
        /// $CLAWSWEEPER_ACTION_LEDGER_OUTPUT_ROOT when set.
        #[arg(long)]
        output: Option<PathBuf>,
        /// Print one JSON object per spool instead of the reference's `{"paths":[...]}`.
        #[arg(long)]
        json: bool,
        /// First close every open review/apply start with a terminal event (runtime §7.3), for
        /// jobs that timed out, were cancelled or failed.
        #[arg(long)]
        interrupt_open_attempts: bool,
        /// Why the job ended early (with --interrupt-open-attempts).
        #[arg(long, default_value = "timeout", value_parser = ["timeout", "cancelled", "workflow_failed"], requires = "interrupt_open_attempts")]
        reason: String,
        #[command(flatten)]
        privacy: PrivacyArg,
        /// Spool roots (directories containing .clawsweeper-repair/action-events).
        #[arg(required = true)]
        spools: Vec<PathBuf>,
    },
    /// Verify the ledger at a revision, or a push range; exit 1 when there are findings.
    Verify {
        /// The state repository.
        #[arg(long, default_value = "./state.git")]
        repo: PathBuf,
        /// The revision to verify: what `git rev-parse` takes (a commit id or its prefix, HEAD,
        /// a branch, tag or remote-tracking name such as origin/main, with ~N or ^N).
        #[arg(long, default_value = "HEAD", conflicts_with = "range")]
        rev: String,
        /// Verify a push instead: `OLD..NEW`, each a revision as for --rev (OLD all zeros for
        /// a new ref).
        #[arg(long)]
        range: Option<String>,
        /// One JSON object per finding plus a summary object on stdout.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        privacy: PrivacyArg,
    },
    /// Server-side hooks for a state repository.
    Hooks {
        #[command(subcommand)]
        command: HooksCommand,
    },
    /// Publish sealed spools or shard roots into the state repository, one commit each.
    Publish {
        /// The state repository (created bare when absent).
        #[arg(long, default_value = "./state.git")]
        repo: PathBuf,
        /// The ledger ref.
        #[arg(long = "ref", default_value = "refs/heads/main")]
        ref_name: String,
        /// Tree layout of a new ledger: `fanout` (default; binding files under two hex-prefix
        /// levels) or `reference` (the reference's flat directories, byte-identical to its
        /// importer). An existing ledger keeps its layout; naming another one is refused.
        #[arg(long, value_parser = ["reference", "fanout"])]
        layout: Option<String>,
        /// Publish to this remote state repository (any git URL or path); --repo then only
        /// caches objects. Pushed with a lease on the fetched tip, retried when the remote moved.
        #[arg(long)]
        remote: Option<String>,
        /// The ref on the remote (default: the value of --ref).
        #[arg(long)]
        remote_ref: Option<String>,
        /// Attempts when the ref moves under a publication.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        max_attempts: u32,
        /// Print a JSON Lines record per source (type "publication", manifest fields plus
        /// source, status, commit, attempts) instead of the bare reference manifest.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        privacy: PrivacyArg,
        /// Sealed spool roots or finalized shard roots, published in the order given.
        #[arg(required = true)]
        sources: Vec<PathBuf>,
    },
    /// Governed actions (execution finality): create, claim, report an outcome, close, show.
    Action {
        #[command(subcommand)]
        command: ActionCommand,
    },
    /// Mark every pending outcome older than the timeout as lost_confirmation (one commit).
    Sweep {
        #[command(flatten)]
        state: StateRepo,
        /// Minutes after creation before a pending outcome is stale.
        #[arg(long, default_value_t = crate::finality::DEFAULT_TIMEOUT_MINUTES,
              value_parser = clap::value_parser!(u32).range(1..=1440))]
        timeout_minutes: u32,
        /// JSON Lines: one `swept` object per action, then a `sweep` summary.
        #[arg(long)]
        json: bool,
    },
    /// Claim an action, run CMD, report its outcome; exits with CMD's code (3: not claimed, CMD
    /// not run; 4: CMD completed but the outcome could not be recorded).
    Run {
        #[command(flatten)]
        state: StateRepo,
        #[command(flatten)]
        binding: Binding,
        /// The action to claim.
        #[arg(long)]
        action: String,
        /// The attempt id (default: a fresh UUID v4).
        #[arg(long)]
        attempt: Option<String>,
        /// Report as JSON Lines on stderr (stdout is CMD's).
        #[arg(long)]
        json: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Serve the execution-finality API over HTTP (guard, actions, claims, outcomes, approvals,
    /// sweep), wire-compatible with the DashClaw clients; writes are group-committed.
    Serve {
        /// The state repository (created bare when absent; with --remote, a cache of objects).
        #[arg(long, default_value = "./state.git")]
        repo: PathBuf,
        /// The ledger ref.
        #[arg(long = "ref", default_value = "refs/heads/main")]
        ref_name: String,
        /// Land every commit on this remote state repository (any git URL or path) with a leased
        /// push, as `publish --remote` does; servers sharing a remote see each other's claims.
        #[arg(long)]
        remote: Option<String>,
        /// The ref on the remote (default: the value of --ref).
        #[arg(long, requires = "remote")]
        remote_ref: Option<String>,
        /// The address to listen on (`127.0.0.1:0` takes a free port).
        #[arg(long, default_value = "127.0.0.1:8787")]
        listen: String,
        /// API keys: one `PRINCIPAL SHA256_HEX_OF_KEY [operator]` a line. A single key can also
        /// come from $ACTION_LEDGER_API_KEY with its principal in $ACTION_LEDGER_PRINCIPAL.
        #[arg(long)]
        api_keys: Option<PathBuf>,
        /// The guard policy (JSON: ordered rules and a default; default: allow everything).
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Sweep stale outcomes every this many minutes (0: no timer; the cron endpoint still
        /// works).
        #[arg(long, default_value_t = 15)]
        sweep_every: u32,
        /// Minutes after creation before a pending outcome is stale.
        #[arg(long, default_value_t = crate::finality::DEFAULT_TIMEOUT_MINUTES,
              value_parser = clap::value_parser!(u32).range(1..=1440))]
        timeout_minutes: u32,
        /// Serve without authentication (only on a loopback address, only without keys).
        #[arg(long)]
        insecure_no_auth: bool,
        /// Also print `{"type":"listening","url":…}` on stdout when ready.
        #[arg(long)]
        json: bool,
        /// Most operations in one commit (1: one commit per operation; for benchmarks).
        #[arg(long, default_value_t = 256, hide = true,
              value_parser = clap::value_parser!(u32).range(1..=65_536))]
        max_batch: u32,
    },
    /// Fold every month older than the retention window into monthly segments, removing its hot
    /// shards in the same commit (design.md §7); a second run changes nothing.
    Compact {
        #[command(flatten)]
        state: StateRepo,
        /// Months that ended more than this many days before --now are compacted.
        #[arg(long, default_value_t = crate::compact::DEFAULT_RETENTION_DAYS)]
        retention_days: u32,
        /// The current time (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS[.mmm]Z; default: the clock).
        #[arg(long)]
        now: Option<String>,
        /// Print what would be folded; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// JSON Lines: one `month` object per folded month, `refusal` objects, a `compaction`
        /// summary.
        #[arg(long)]
        json: bool,
    },
    /// Print the ledger's events in canonical order (partition date, shard path, line), from hot
    /// shards and segments alike.
    Log {
        /// The state repository.
        #[arg(long, default_value = "./state.git")]
        repo: PathBuf,
        /// The revision to read: what `git rev-parse` takes (a commit id or its prefix, HEAD,
        /// a branch, tag or remote-tracking name such as origin/main, with ~N or ^N).
        #[arg(long, default_value = "HEAD")]
        rev: String,
        /// Print the canonical event lines exactly as stored.
        #[arg(long)]
        json: bool,
        /// Only events about this subject: OWNER/NAME or OWNER/NAME#NUMBER.
        #[arg(long)]
        subject: Option<String>,
        /// Only events whose operation_id starts with this hex.
        #[arg(long)]
        operation: Option<String>,
        /// Only events whose attempt_id starts with this hex.
        #[arg(long)]
        attempt: Option<String>,
        /// Only events of this type (repeatable: any of them).
        #[arg(long = "type")]
        event_type: Vec<String>,
        /// Only events whose producer component is this.
        #[arg(long)]
        producer: Option<String>,
        /// Only partition dates on or after this YYYY-MM-DD.
        #[arg(long)]
        since: Option<String>,
        /// Only partition dates on or before this YYYY-MM-DD.
        #[arg(long)]
        until: Option<String>,
    },
}

/// The state repository and ledger ref of the finality commands.
#[derive(clap::Args, Debug)]
pub(super) struct StateRepo {
    /// The state repository.
    #[arg(long, default_value = "./state.git")]
    pub(super) repo: PathBuf,
    /// The ledger ref.
    #[arg(long = "ref", default_value = "refs/heads/main")]
    pub(super) ref_name: String,
}

/// Who acts, and on what: the binding a claim is checked against.
#[derive(clap::Args, Debug)]
pub(super) struct Binding {
    /// The agent id (default $ACTION_LEDGER_AGENT_ID).
    #[arg(long)]
    pub(super) agent: Option<String>,
    /// The principal (default $ACTION_LEDGER_PRINCIPAL).
    #[arg(long)]
    pub(super) principal: Option<String>,
    /// The act as a JSON object (default: the shell act of the command after `--`).
    #[arg(long)]
    pub(super) act: Option<String>,
    /// The caller's identity is verified.
    #[arg(long)]
    pub(super) verified: bool,
}

#[derive(Subcommand, Debug)]
pub(super) enum ActionCommand {
    /// Create a governed action; prints its id.
    Create(CreateArgs),
    /// Claim the execution of an action for one attempt; prints the attempt id.
    Claim(ClaimArgs),
    /// Report the outcome of an action: completed, partial (with --progress) or failed (with
    /// --error).
    Outcome(OutcomeArgs),
    /// The legacy close: close a running action as completed, failed, cancelled or blocked,
    /// with the implicit outcome.
    Close(CloseArgs),
    /// Show an action: its binding, claim, lifecycle and outcome (with elapsed_ms).
    Show(ShowArgs),
}

// The flags of `action create` (its help text is on the variant).
#[derive(clap::Args, Debug)]
pub(super) struct CreateArgs {
    #[command(flatten)]
    pub(super) state: StateRepo,
    #[command(flatten)]
    pub(super) binding: Binding,
    /// The action id (default: act_ and 32 random hex digits).
    #[arg(long)]
    pub(super) id: Option<String>,
    /// The guard decision that authorised the action (a claim needs one).
    #[arg(long)]
    pub(super) guard_decision: Option<String>,
    /// That decision's verdict.
    #[arg(long, default_value = "allow",
          value_parser = ["allow", "warn", "allow_contained", "require_approval", "block"])]
    pub(super) verdict: String,
    /// The containment ref of a contained action (for allow_contained).
    #[arg(long)]
    pub(super) containment_ref: Option<String>,
    /// The initial lifecycle (default: from the verdict).
    #[arg(long, value_parser = ["running", "pending", "pending_approval", "blocked",
          "completed", "failed", "cancelled"])]
    pub(super) lifecycle: Option<String>,
    /// Create a legacy action without the execution_claims capability (never claimable).
    #[arg(long)]
    pub(super) legacy: bool,
    /// Print a JSON object of type `action`.
    #[arg(long)]
    pub(super) json: bool,
    /// The command the action stands for (its act, unless --act is given).
    #[arg(last = true)]
    pub(super) command: Vec<String>,
}

// The flags of `action claim` (its help text is on the variant).
#[derive(clap::Args, Debug)]
pub(super) struct ClaimArgs {
    #[command(flatten)]
    pub(super) state: StateRepo,
    #[command(flatten)]
    pub(super) binding: Binding,
    /// The action id.
    pub(super) action_id: String,
    /// The attempt id (default: a fresh UUID v4).
    #[arg(long)]
    pub(super) attempt: Option<String>,
    /// Print a JSON object of type `claim`.
    #[arg(long)]
    pub(super) json: bool,
    /// The command the action stands for (its act, unless --act is given).
    #[arg(last = true)]
    pub(super) command: Vec<String>,
}

// The flags of `action outcome` (its help text is on the variant).
#[derive(clap::Args, Debug)]
pub(super) struct OutcomeArgs {
    #[command(flatten)]
    pub(super) state: StateRepo,
    /// The action id.
    pub(super) action_id: String,
    /// completed, partial or failed.
    pub(super) status: String,
    /// A summary (redacted, truncated to 4000 characters).
    #[arg(long)]
    pub(super) summary: Option<String>,
    /// The error message (required for failed).
    #[arg(long)]
    pub(super) error: Option<String>,
    /// A JSON object (required for partial; at most 8 KiB).
    #[arg(long)]
    pub(super) progress: Option<String>,
    /// The claiming attempt id, to bind the outcome to it.
    #[arg(long)]
    pub(super) attempt: Option<String>,
    /// Print a JSON object of type `outcome`.
    #[arg(long)]
    pub(super) json: bool,
}

// The flags of `action close` (its help text is on the variant).
#[derive(clap::Args, Debug)]
pub(super) struct CloseArgs {
    #[command(flatten)]
    pub(super) state: StateRepo,
    /// The action id.
    pub(super) action_id: String,
    /// completed, failed, cancelled or blocked.
    pub(super) status: String,
    /// A summary (redacted, truncated to 4000 characters).
    #[arg(long)]
    pub(super) summary: Option<String>,
    /// Print a JSON object of type `outcome`.
    #[arg(long)]
    pub(super) json: bool,
}

// The flags of `action show` (its help text is on the variant).
#[derive(clap::Args, Debug)]
pub(super) struct ShowArgs {
    #[command(flatten)]
    pub(super) state: StateRepo,
    /// The action id.
    pub(super) action_id: String,
    /// Print a JSON object of type `action`.
    #[arg(long)]
    pub(super) json: bool,
}
