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
    about = "An immutable, privacy-bounded action ledger stored natively in Git",
    after_help = "Exit codes: 0 success; 1 the command ran and refused (a conflict with what the \
ledger holds, findings, a strict-privacy refusal, a refused finality step); 2 usage, input or \
I/O error; `run` also 3 (not claimed, the command was not run) and 4 (the command completed, \
its outcome was not recorded). On a refusal or an error the ledger ref is unchanged.\n\n\
Commits are signed by $ACTION_LEDGER_COMMITTER_NAME <$ACTION_LEDGER_COMMITTER_EMAIL> (default \
action-ledger <action-ledger@invalid>) at $SOURCE_DATE_EPOCH seconds (default: the clock)."
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
    ///
    /// The hook runs `verify --range` on every pushed ref, reading the pushed objects from
    /// git's quarantine, and prints the findings to the pusher: the server refuses deletions,
    /// rewrites and invalid additions whoever pushes them, including values of the strict
    /// privacy families. In the server's environment, ACTION_LEDGER_PRIVACY=reference checks
    /// the reference's rules only.
    ///
    /// The hook names no build path. At each push it runs $ACTION_LEDGER_BIN, else the binary
    /// of `git config actionLedger.bin`, else `action-ledger` on PATH, and asks it
    /// `--version`: when none is found, or the one found is older than this binary (the
    /// version written into the hook), every push is refused with what to install. Prints what
    /// it configured and which binary the hook would run from here.
    Install(InstallArgs),
    /// Judge the refs under refs/ledger/ of one push, as the installed pre-receive hook does:
    /// reads the hook's input (`<old> <new> <ref>` lines) on stdin.
    ///
    /// A pending publication (refs/ledger/incoming/<key>) may be created once, with a commit
    /// whose name is its key and that passes the checks of a ledger push; it may be deleted
    /// only once a ledger ref holds every file it adds, or beside its refusal mark. A refusal
    /// mark (refs/ledger/refused/<key>) may only be created, by the push that deletes its
    /// publication. Refs outside refs/ledger/ are left to `verify --range`. Prints each
    /// refusal; exits 1 when any ref is refused.
    Admit(AdmitArgs),
}

/// The flags of `hooks admit`.
#[derive(clap::Args, Debug)]
pub(super) struct AdmitArgs {
    /// The repository that receives the push (in a hook: `$GIT_DIR`).
    #[arg(long, default_value = ".")]
    pub(super) repo: PathBuf,
    #[command(flatten)]
    pub(super) privacy: PrivacyArg,
}

/// The flags of `hooks install`.
#[derive(clap::Args, Debug)]
pub(super) struct InstallArgs {
    /// The bare state repository that receives pushes.
    #[arg(long, default_value = "./state.git")]
    pub(super) repo: PathBuf,
    /// The ledger ref HEAD points at when the repository is created.
    #[arg(long = "ref", default_value = "refs/heads/main")]
    pub(super) ref_name: String,
    /// Set `actionLedger.bin` in the repository's config to this executable (made absolute),
    /// the binary the hook runs when $ACTION_LEDGER_BIN is not set. Without it the config is
    /// left as it is, and the hook falls back to `action-ledger` on the server's PATH.
    #[arg(long, value_name = "PATH")]
    pub(super) bin: Option<PathBuf>,
    /// Install into a repository with a work tree too. Refused by default: git refuses pushes
    /// to a non-bare repository's checked-out branch, so a server repository should be bare.
    #[arg(long)]
    pub(super) allow_non_bare: bool,
}

/// The privacy profile of the commands that write or check events.
#[derive(clap::Args, Debug)]
pub(super) struct PrivacyArg {
    /// Privacy rules: `strict` (the default) also refuses the credential and private-host
    /// families beyond the reference's rules; `reference` applies exactly the reference's
    /// rules (to reproduce it byte for byte on old data). A refusal names the field path, the
    /// family and the rule id, never the value.
    #[arg(long = "privacy", value_name = "PROFILE", default_value = "strict",
          value_parser = PossibleValuesParser::new(["strict", "reference"])
              .map(|s| s.parse::<Profile>().expect("a listed profile")))]
    pub(super) profile: Profile,
}

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Record one event into a spool (phase input with `phase`, or action input with `scope`);
    /// prints the recorded event as one JSON line, or nothing when recording is disabled.
    ///
    /// The input is a JSON object in one of the reference writers' two shapes: the phase API
    /// (`phase`, `status`, `reasonCode`?, `retryable`, `mutation`, `identity`, `component`,
    /// `subject`, and optionally `operation`, `operationIdentity`, `attemptIdentity`,
    /// `parentEventId`, `phaseSeq`, `idempotencyIdentity`, `learning`, `evidence`,
    /// `attributes`, `privacy`, `occurredAt`) or the generic action API (`scope`, `identity`,
    /// `type`, `component`, `subject`, `action{name,status,reasonCode?,retryable,mutation}`
    /// and the same optional fields).
    ///
    /// Recording is enabled by CLAWSWEEPER_ACTION_LEDGER_FORCE=1 and disabled by
    /// CLAWSWEEPER_ACTION_LEDGER_DISABLED=1. The producer comes from GITHUB_REPOSITORY,
    /// GITHUB_SHA, GITHUB_WORKFLOW_REF or GITHUB_WORKFLOW, GITHUB_JOB, GITHUB_RUN_ID,
    /// GITHUB_RUN_ATTEMPT, GITHUB_ACTION and CLAWSWEEPER_ACTION_LEDGER_INVOCATION; the partition
    /// date from CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE or the UTC date of
    /// GITHUB_RUN_STARTED_AT.
    ///
    /// Every text field passes the privacy boundary, and the event and each identity must
    /// pass the canonical limits (depth 64, 10,000 values, an estimated 1 MiB with every
    /// number counted as 24 bytes); a refusal names the limit or rule and the path and writes
    /// nothing. A repeated identical call prints the existing event and says it is unchanged;
    /// different content under the same identity is a conflict (exit 1); a sealed producer
    /// accepts no new event (use a new CLAWSWEEPER_ACTION_LEDGER_INVOCATION).
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
    ///
    /// Per producer, the events are put in causal order and a create-only seal record is
    /// written under `.clawsweeper-repair/action-events/_finalizations/`. Sealing again is a
    /// no-op; a seal that no longer matches its spool (events added after sealing) is refused,
    /// and so, under the strict profile, is a spool with an event the strict rules refuse
    /// (exit 1, nothing sealed). Prints one line per spool (`sealed SPOOL: ...`; with --paths
    /// the reference's `{"paths":[...]}`). A root where nothing was recorded seals and writes
    /// nothing; a root that does not exist is an error (exit 2), and then no spool is sealed.
    Seal {
        /// Directory that receives the shard files (`ledger/v1/events/...`); defaults to
        /// $CLAWSWEEPER_ACTION_LEDGER_OUTPUT_ROOT when set.
        #[arg(long)]
        output: Option<PathBuf>,
        /// Print one JSON object per spool:
        /// `{"type":"seal","v":1,"spool","sealed","already_sealed","shards_created","paths"}`.
        #[arg(long, conflicts_with = "paths")]
        json: bool,
        /// Print the reference's `{"paths":[...]}` per spool (the shard paths; an empty list
        /// when nothing was recorded) instead of the summary line.
        #[arg(long)]
        paths: bool,
        /// First close every open review/apply start with the reference's terminal event, for
        /// jobs that timed out, were cancelled or failed (run it at job end with `if: always()`).
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
    ///
    /// Offline and read-only. Every finding is printed as `path: rule: detail` on stderr; the
    /// rules (stable names such as `shard-order`, `reservation-missing`, `privacy-strict`,
    /// `finality-claim-mismatch`, `deletion-unproven`) are documented in the library
    /// (`cargo doc`, `finding::Rule`). Warnings (`case-collision`: two sibling names equal
    /// after Unicode case folding and NFC) are printed like findings and leave the exit code
    /// alone. Exit 0 clean, 1 findings, 2 unreadable (also: no ledger at that ref yet, named).
    Verify {
        /// The state repository.
        #[arg(long, default_value = "./state.git")]
        repo: PathBuf,
        /// The ledger ref verified when neither --rev nor --range is given: the ref `publish
        /// --ref` writes, read by that name (not through HEAD, which may name another branch).
        /// A ref that does not exist is an error naming it (exit 2).
        #[arg(long = "ref", default_value = "refs/heads/main", conflicts_with_all = ["rev", "range"])]
        ref_name: String,
        /// The revision to verify instead of the tip of --ref: what `git rev-parse` takes (a
        /// commit id or its prefix, HEAD, a branch, tag or remote-tracking name such as
        /// origin/main, with ~N or ^N).
        #[arg(long, conflicts_with = "range")]
        rev: Option<String>,
        /// Verify a push instead: `OLD..NEW`, each a revision as for --rev, read as git reads
        /// it (gitrevisions(7)): an empty side is HEAD (`..NEW` is `HEAD..NEW`), OLD of 40 zeros
        /// is a new ref. `A...B` (a symmetric difference) is refused: a push is OLD..NEW. NEW
        /// must descend from OLD, nothing under `ledger/v1/` or `finality/v1/` may be modified
        /// or deleted (except shard files a compaction's manifest proves, and a manifest
        /// replaced by a superset), and every touched set must be valid; only the changed
        /// subtrees are read.
        #[arg(long)]
        range: Option<String>,
        /// One JSON object per finding plus a summary object on stdout:
        /// `{"type":"finding"|"warning","v":1,"path","rule","detail"}`, then
        /// `{"type":"summary","v":1,"findings","warnings","shards","events","bindings"}`.
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
    ///
    /// Each source is validated as a whole (canonical bytes, path identity, complete and
    /// deterministically packed parts, unique event ids, acyclic parents), then against the
    /// ref's tip (every binding and payload create-only), and lands as one commit with one
    /// compare-and-swap ref update. A replay is `unchanged` and makes no commit; different
    /// content under a published identity is a conflict (exit 1, ref unchanged). A source
    /// without events publishes nothing (`status: "empty"`); a source that does not exist is
    /// an error and nothing is published; an unsealed spool is refused with a hint to run
    /// `seal`. A failed first publication removes the repository it created.
    ///
    /// Stdout: one line per source: `created|unchanged|empty SOURCE: N shard(s) new, ...` (with
    /// --manifest the reference's import manifest, with --json a `publication` record). The
    /// commit's subject names the producer repository, workflow, run id/attempt and job (the
    /// first and how many more when the source holds several) with the counts; its
    /// `Ledger-Manifest-Sha256` trailer is the sha256 of the manifest.
    /// Each publication adds a pack: run `git gc` on the state repository now and then (safe
    /// beside publishers).
    Publish {
        /// The state repository (created bare when absent; its HEAD points at the ledger ref,
        /// so that `git clone` checks the ledger out).
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
        /// caches objects. The remote tip is read (`git ls-remote`) and fetched, and the commit
        /// is built on it. One push then lands it on the ledger ref when the ref did not move,
        /// and parks it as a pending publication (refs/ledger/incoming/<key>) when it did: the
        /// job then waits (--wait) while the first pending job lands every pending publication
        /// with one commit and one atomic push, so that many jobs finishing at once land in a
        /// few rounds. A publication that conflicts is refused on its own (exit 1, naming the
        /// conflict; a mark stays at refs/ledger/refused/<key>). A refusal by the server's hook
        /// is final (exit 1) and shows the hook's findings.
        #[arg(long)]
        remote: Option<String>,
        /// With --remote: how long to wait, in seconds, for a pending publication to be landed
        /// or refused. Past it, exit 1: the publication stays pending for the next publisher or
        /// `maintain`, and running publish again waits for it.
        #[arg(long, value_name = "SECONDS", default_value_t = 600, requires = "remote",
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        wait: u64,
        /// With --remote: no pending publication; one compare-and-swap of the ledger ref per
        /// attempt (--max-attempts), every loser rebuilding on the new tip. For a remote whose
        /// hook predates pending publications (run `hooks install` there to update it).
        #[arg(long, requires = "remote", conflicts_with = "wait")]
        direct: bool,
        /// The ref on the remote (default: the value of --ref).
        #[arg(long)]
        remote_ref: Option<String>,
        /// Build on the remote ref even though it no longer descends from the tip this cache last
        /// confirmed there (its history was rewritten, e.g. by a force push). Without it such a
        /// remote is refused (exit 1) naming both commits; check the new history first (`verify
        /// --range CONFIRMED..TIP` on a clone of the remote). The new tip becomes the confirmed one.
        #[arg(long, requires = "remote")]
        accept_rewritten_remote: bool,
        /// Attempts when the ref moves under a publication (re-validated and rebuilt on the new
        /// tip each time, with jittered exponential backoff); then exit 1, ref unchanged.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        max_attempts: u32,
        /// Print a JSON Lines record per source instead of the summary line:
        /// `{"type":"publication","v":1,"source","ref","status","commit","attempts",
        /// "manifest"}`, status `created`, `unchanged` or `empty`.
        #[arg(long, conflicts_with = "manifest")]
        json: bool,
        /// Print the reference's import manifest per source instead of the summary line
        /// (`{"created","unchanged","eventPaths","reservationPaths","completionPaths","paths"}`;
        /// large: every path of the batch).
        #[arg(long)]
        manifest: bool,
        #[command(flatten)]
        privacy: PrivacyArg,
        #[command(flatten)]
        expected: ExpectedArgs,
        /// Sealed spool roots or finalized shard roots, published in the order given.
        #[arg(required = true)]
        sources: Vec<PathBuf>,
    },
    /// Migrate the finality records to the current layout, and consolidate the state
    /// repository's packs (safe beside readers and publishers).
    ///
    /// A repository whose finality records are in an older layout (`flat`: one 256-way fan-out
    /// level; `nibble`: six 16-way levels) is first moved to the `hex2x2` layout (two 256-way
    /// levels) in one verified commit that changes no record's bytes and adds the pending index
    /// when there was none; the ref moves with one compare-and-swap, so a kill leaves the old
    /// layout or the new one. Then each publication's roll-up of the
    /// smallest packs (as `git repack --geometric=2`, never more than 262,144 objects per
    /// publication) runs without the bound, and a multi-pack index is written over every pack
    /// (git's `multi-pack-index`: one lookup over all packs, read by git and by this tool),
    /// unless the one there already names exactly those packs. Run it from a scheduled job.
    /// Prints what was done.
    ///
    /// First it removes what killed writers left and no live process owns: staging directories
    /// beside the repository (`.NAME.init-*`, of a first publication killed while creating it)
    /// and temporary files in it (`tmp_al_*`), naming each on stderr. A staging directory from
    /// an older version (no process incarnation in its name) whose PID is alive is removed
    /// only once it is an hour old.
    Maintain {
        /// The state repository.
        #[arg(long, default_value = "./state.git")]
        repo: PathBuf,
        /// The ledger ref whose finality records are migrated.
        #[arg(long = "ref", default_value = "refs/heads/main")]
        ref_name: String,
        /// Merge every pack into one (packs with a `.keep` file excepted), not only the small
        /// ones.
        #[arg(long)]
        all: bool,
        /// Instead of the local work: land or refuse every pending publication
        /// (refs/ledger/incoming/*) of this remote state repository, with --repo as the object
        /// cache, as the jobs that parked them would have (those whose `publish --wait` ran out
        /// or that were killed). Prints how many landed, were already landed, were refused and
        /// are left.
        #[arg(long, conflicts_with = "all")]
        remote: Option<String>,
        /// The ledger ref on the remote (default: the value of --ref).
        #[arg(long, requires = "remote")]
        remote_ref: Option<String>,
        /// One JSON object: `{"type":"maintain","layout","migrated","migrated_from",
        /// "records_moved","pending_entries","commit","busy","packs_before","packs_merged",
        /// "packs_after","objects_written","bytes_written","multi_pack_index_objects",
        /// "debris_removed"}` (`commit` and `migrated_from`, the layout the records were in, are
        /// null when nothing was migrated; `multi_pack_index_objects` is null when no
        /// multi-pack index was written;
        /// `debris_removed` lists the paths of killed writers' leftovers removed);
        /// with --remote `{"type":"maintain-remote","landed","already_landed","refused",
        /// "rounds","left"}`.
        #[arg(long)]
        json: bool,
    },
    /// Governed actions (execution finality): create, claim, report an outcome, close, cancel,
    /// resolve a containment, show, list.
    ///
    /// A governed action is started by exactly one caller per attempt, and what happened is
    /// recorded once and never rewritten, in the same state repository as the ledger
    /// (`finality/v1/actions/...`), one commit and one compare-and-swap per operation.
    /// $ACTION_LEDGER_NOW (`YYYY-MM-DDTHH:MM:SS[.mmm]Z`) replaces the clock of the records.
    /// Refusals (EXECUTION_CLAIM_CONFLICT, NOT_FOUND, OUTCOME_ALREADY_SET, LIFECYCLE_CONFLICT,
    /// TERMINAL_STATE, NOT_CANCELLABLE, ATTEMPT_MISMATCH, ACTION_EXISTS, a ref that kept moving)
    /// exit 1; input and I/O errors (INVALID_EXECUTION_CLAIM, AGENT_IDENTITY_REQUIRED,
    /// INVALID_STATUS, INVALID_OUTCOME, EXECUTION_CLAIM_UNAVAILABLE, ...) exit 2. With --json a
    /// refusal is also a `{"type":"refusal","command","action_id","code","error"}` object (with
    /// `current_status` where the contract has one).
    Action {
        #[command(subcommand)]
        command: ActionCommand,
    },
    /// Mark every pending outcome older than the timeout as lost_confirmation (one commit).
    ///
    /// "Reconcile; never presume the effect did not happen": an open lifecycle becomes
    /// `unknown`, `pending_approval` is left as it is, and actions whose lifecycle is
    /// completed, failed, cancelled or blocked are skipped. A report and the sweep race to
    /// exactly one outcome; the sweep never grants authority to run again. Run it from a
    /// scheduled job (the reference sweeps every 15 minutes).
    ///
    /// The timeout is measured on this machine's clock only, from when a sweep here first saw
    /// the action pending (from its creation when `action create` ran here), so another
    /// writer's clock, ahead or behind, cannot make a fresh action stale: the first sweep to see
    /// another writer's action only remembers it (in the repository's git directory). Record
    /// times more than a minute ahead of this clock are reported as clock skew.
    Sweep {
        #[command(flatten)]
        state: StateRepo,
        /// Minutes a pending outcome must have been pending on this clock (since its creation
        /// here, or since a sweep here first saw it) before it is stale (1 to 1440).
        #[arg(long, default_value_t = crate::finality::DEFAULT_TIMEOUT_MINUTES,
              value_parser = clap::value_parser!(u32).range(1..=1440))]
        timeout_minutes: u32,
        /// JSON Lines: one `clock_skew` object per record time from this clock's future, one
        /// `swept` object per action (`sweep_lost` where another writer set the outcome first),
        /// then a `sweep` summary (with `waiting`: pending, not yet timed out here).
        #[arg(long)]
        json: bool,
    },
    /// Claim an action, run CMD, report its outcome; exits with CMD's code (3: not claimed, CMD
    /// not run; 4: CMD completed but the outcome could not be recorded).
    ///
    /// The claim uses the shell act of CMD unless --act is given, so an action created for one
    /// command cannot be claimed to run another. CMD runs with stdin inherited and its stdout
    /// and stderr passed through; the outcome is `completed`, or `failed` ("command exited with
    /// status N", "command killed by signal S": exit 128+S), bound to the attempt. A CMD that
    /// cannot be started is reported failed (exit 127 or 126). On exit 4 reconcile (read the
    /// action back with `action show`), never rerun. An interrupted run leaves the outcome
    /// pending until `sweep` marks it lost_confirmation.
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
        /// Report as JSON Lines on stderr (stdout is CMD's): `claim`, `outcome` (or `refusal`),
        /// then `run` with `exit_code`, `outcome` and `recorded`.
        #[arg(long)]
        json: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Print a shell completion script for bash, zsh, fish, powershell or elvish on stdout.
    ///
    /// For example `action-ledger completions bash > ~/.local/share/bash-completion/completions/action-ledger`.
    Completions {
        /// The shell.
        #[arg(value_parser = ["bash", "zsh", "fish", "powershell", "elvish"])]
        shell: String,
    },
    /// Print the manual page (roff) on stdout, generated from the same definitions as --help.
    ///
    /// For example `action-ledger man > action-ledger.1; man ./action-ledger.1`.
    Man,
    /// Serve the execution finality API over HTTP (guard, actions, claims, outcomes, approvals,
    /// cancel, containment promote/discard, sweep), wire-compatible with the DashClaw clients; writes are group-committed.
    ///
    /// It writes the same records as the CLI, so `action show`, `verify`, `sweep` and the hook
    /// work on what it wrote. Without an API key it refuses to start, unless it listens on
    /// loopback with --insecure-no-auth. $ACTION_LEDGER_CRON_SECRET enables
    /// `GET /api/cron/outcome-sweep` (Authorization: Bearer SECRET). $ACTION_LEDGER_NOW starts
    /// its clock at that time. SIGINT or SIGTERM stop it after the requests in flight (exit 0).
    /// `GET /api/stream` streams the landed changes of actions as Server-Sent Events (what the
    /// SDK's `wait_for_approval` listens to), at most --max-streams at once.
    /// SIGHUP (`systemctl reload`, a log rotation) reads --api-keys and --policy again and puts
    /// both in force together, the key of $ACTION_LEDGER_API_KEY kept; if either file is
    /// malformed (or no key would be left), the old ones stay and one line on stderr says which
    /// file and why. `GET /metrics` (no key needed, like `/healthz`: scrape it from the same host)
    /// answers the request, writer, sweep and reload metrics in the OpenMetrics text format that
    /// Prometheus reads. Each request leaves one JSON line on stderr (`"type":"access"`: method,
    /// route template, status, duration_ms, principal, x-request-id; never a key, body or query
    /// string); --quiet drops it with the other diagnostics. --webhooks FILE also POSTs each
    /// event of the stream, signed as DashClaw signs webhooks, to the endpoints the file lists,
    /// from a durable outbox (written before the batch's commit lands, drained at start; every
    /// landed event once after de-duplication by X-DashClaw-Delivery, across a SIGKILL too,
    /// unless its attempts run out: then it is kept as a dead letter);
    /// SIGHUP reads that file again too.
    /// A batch of records lands as one pack: run `git gc` on the repository now and
    /// then.
    Serve(ServeArgs),
    /// Fold every month older than the retention window into monthly segments, removing its hot
    /// shards in the same commit; a second run changes nothing.
    ///
    /// No event is lost and no history is rewritten: the segments are the month's shard files
    /// concatenated byte for byte (`ledger/v1/segments/YYYY/MM/segment-NNNN.jsonl`, at most
    /// 8 MiB and 4,096 lines each), the month's `manifest.json` proves every removed shard,
    /// and the compaction is an ordinary commit on the tip, landed by compare-and-swap. A
    /// shard that is not exactly canonical event lines is refused, stays hot and is reported
    /// (exit 1). One commit folds at most 256 MiB of shards; a bigger backlog takes several
    /// commits of the same run. A late publication for a compacted month lands hot and is
    /// folded into new segments (never rewritten) under the manifest's next generation.
    Compact {
        #[command(flatten)]
        state: StateRepo,
        /// Months that ended at least this many days before --now are compacted (with 30, March
        /// is compacted from May 1).
        #[arg(long, default_value_t = crate::compact::DEFAULT_RETENTION_DAYS)]
        retention_days: u32,
        /// The current time (YYYY-MM-DD, midnight UTC, or YYYY-MM-DDTHH:MM:SS[.mmm]Z; default:
        /// the clock).
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
    /// Print the ledger's events in canonical order (partition date, shard path, line) or time
    /// order, from hot shards and segments alike.
    ///
    /// One readable line per event in columns (time, type, status, subject, producer, short
    /// ids), and a summary on stderr. With --operation, the operation's events are grouped by
    /// attempt, attempts in causal order (an attempt after the one its first event's parent is
    /// in, else by time), each attempt's events in causal order. It streams shard by shard; every shard passes `verify`'s checks of a
    /// shard, on its own and in its set (its path, parts, entry mode and bindings), before any
    /// of its events is printed (else exit 2, naming the shard and
    /// the rule). Filters combine. Before anything is published to the repository (it holds no
    /// ref at all), it prints nothing and exits 0; a ref that does not exist in a repository
    /// that holds other refs is an error naming it and them (exit 2).
    Log {
        /// The state repository.
        #[arg(long, default_value = "./state.git")]
        repo: PathBuf,
        /// The ledger ref read when --rev is not given: the ref `publish --ref` writes, read by
        /// that name (not through HEAD, which may name another branch).
        #[arg(
            long = "ref",
            default_value = "refs/heads/main",
            conflicts_with = "rev"
        )]
        ref_name: String,
        /// The revision to read instead of the tip of --ref: what `git rev-parse` takes (a
        /// commit id or its prefix, HEAD, a branch, tag or remote-tracking name such as
        /// origin/main, with ~N or ^N).
        #[arg(long)]
        rev: Option<String>,
        /// Print the canonical event lines exactly as stored (byte-identical before and after a
        /// compaction; versioned by their own `schema_version`).
        #[arg(long)]
        json: bool,
        /// `canonical` (partition date, shard path, line) or `time` (occurred_at, then
        /// canonical order; holds the matching events in memory).
        #[arg(long, default_value = "canonical", value_parser = ["canonical", "time"])]
        order: String,
        /// Only events about this subject: OWNER/NAME or OWNER/NAME#NUMBER.
        #[arg(long)]
        subject: Option<String>,
        /// Follow one operation: only events whose operation_id starts with this hex, across
        /// jobs and runs, grouped by attempt in causal order.
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
    /// Fold the ledger's events into a deterministic view: `status` (per lane and operation),
    /// `commands` (per command, as a comment router reads it), `review-history` (per subject,
    /// bounded; --markdown for the marker-backed comment bodies), `notifications` (delivery per
    /// notification), `evidence` (claims to sources; --dot for Graphviz).
    ///
    /// Prints one readable line per entry, or with --json the view as one JSON document
    /// (`schema` `action-ledger.project.<view>.v1`, `revision` the commit folded at, `filter`,
    /// `limits`, `events`, `truncated`, `view`). The
    /// same events give the same bytes whatever the order they were published in and whether
    /// they are hot or compacted. Every shard passes `verify`'s checks of a shard before any of
    /// its events is folded (else exit 2, naming the shard). Read-only: the ledger is never
    /// written.
    ///
    /// --save FILE writes the view in a compact binary saved form (its checkpoint is its
    /// `revision`; the first line names the form's version, a CRC-32 ends it); --from FILE
    /// brings such a file, or a JSON document printed by --json, up to date by folding only
    /// the shards added since its checkpoint (a tree diff), with the file's own filter and
    /// limit; the result equals a full refold. A damaged saved file, or one of another
    /// version, is refused naming the file, the field and the rule (fold again without --from).
    /// --compare FILE compares a legacy projection JSON with the fold instead of printing it:
    /// one line per difference (`JSON-PATH: legacy X, fold Y`; `revision` and `events` are not
    /// compared; a file without `schema` is a bare view, compared with the document's `view`),
    /// exit 1 when there is any, 0 when equal.
    Project(ProjectArgs),
}

/// The flags of `project` (its help text is on the variant).
#[derive(clap::Args, Debug)]
pub(super) struct ProjectArgs {
    /// The view.
    #[arg(value_parser = ["status", "commands", "review-history", "notifications", "evidence"])]
    pub(super) view: String,
    /// The state repository.
    #[arg(long, default_value = "./state.git")]
    pub(super) repo: PathBuf,
    /// The ledger ref read when --rev is not given (as `log --ref`).
    #[arg(
        long = "ref",
        default_value = "refs/heads/main",
        conflicts_with = "rev"
    )]
    pub(super) ref_name: String,
    /// The revision to fold at instead of the tip of --ref (as `log --rev`).
    #[arg(long, conflicts_with = "remote")]
    pub(super) rev: Option<String>,
    /// Fold the tip of this remote state repository (any git URL or path): its ref is read
    /// (`git ls-remote`) and fetched into --repo, which then only caches objects (created bare
    /// when absent).
    #[arg(long)]
    pub(super) remote: Option<String>,
    /// The ref on the remote (default: the value of --ref).
    #[arg(long, requires = "remote")]
    pub(super) remote_ref: Option<String>,
    /// Print the JSON document instead of one line per entry.
    #[arg(long, conflicts_with_all = ["markdown", "dot"])]
    pub(super) json: bool,
    /// review-history only: print the marker-backed comment body of each subject (an HTML
    /// comment marker line `<!-- action-ledger:review-history OWNER/NAME#N -->`, then the
    /// entries, newest first).
    #[arg(long, conflicts_with = "dot")]
    pub(super) markdown: bool,
    /// evidence only: print the graph in Graphviz DOT.
    #[arg(long)]
    pub(super) dot: bool,
    /// Entries kept per key (history entries per subject, attempt ids per operation,
    /// deliveries per notification, claims per subject); what is left out is counted in
    /// `truncated`.
    #[arg(long, default_value_t = crate::project::DEFAULT_ENTRIES,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(super) limit: u32,
    /// Save the view, with its checkpoint, to FILE in the binary saved form (replaced
    /// atomically), for --from.
    #[arg(long, value_name = "FILE")]
    pub(super) save: Option<PathBuf>,
    /// Bring the view saved in FILE up to date (its filter and limit are used: give neither).
    #[arg(long, value_name = "FILE",
          conflicts_with_all = ["subject", "event_type", "producer", "since", "until", "limit"])]
    pub(super) from: Option<PathBuf>,
    /// Compare the legacy projection JSON in FILE with the fold; exit 1 on differences.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["markdown", "dot", "json"])]
    pub(super) compare: Option<PathBuf>,
    /// Only events about this subject: OWNER/NAME or OWNER/NAME#NUMBER.
    #[arg(long)]
    pub(super) subject: Option<String>,
    /// Only events of this type (repeatable: any of them).
    #[arg(long = "type")]
    pub(super) event_type: Vec<String>,
    /// Only events whose producer component is this.
    #[arg(long)]
    pub(super) producer: Option<String>,
    /// Only partition dates on or after this YYYY-MM-DD.
    #[arg(long)]
    pub(super) since: Option<String>,
    /// Only partition dates on or before this YYYY-MM-DD.
    #[arg(long)]
    pub(super) until: Option<String>,
}

/// The provenance `publish` expects of its sources: a job refuses to publish shards that
/// another job wrote.
#[derive(clap::Args, Debug)]
pub(super) struct ExpectedArgs {
    /// Refuse a shard whose producer run is not the current job's: repository, sha, workflow,
    /// job, run id and run attempt as `record` derives them from GITHUB_REPOSITORY, GITHUB_SHA,
    /// GITHUB_WORKFLOW_REF or GITHUB_WORKFLOW, GITHUB_JOB, GITHUB_RUN_ID and
    /// GITHUB_RUN_ATTEMPT (the component is not checked). Each --expected-FIELD flag below
    /// replaces one of them and turns the check on by itself; a field with neither its flag
    /// nor its variable is an error (exit 2). A mismatch names the shard and the field and
    /// publishes nothing (exit 1). Not checked without any of these flags.
    #[arg(long)]
    pub(super) expected_producer: bool,
    /// The expected producer repository (`owner/name`); default $GITHUB_REPOSITORY, lowercased.
    #[arg(long, value_name = "OWNER/NAME")]
    pub(super) expected_repository: Option<String>,
    /// The expected commit the producer ran on; default $GITHUB_SHA.
    #[arg(long, value_name = "SHA")]
    pub(super) expected_sha: Option<String>,
    /// The expected workflow, as stored in the shard's producer (the file name of
    /// $GITHUB_WORKFLOW_REF, else $GITHUB_WORKFLOW, as a machine identifier); default that.
    #[arg(long, value_name = "WORKFLOW")]
    pub(super) expected_workflow: Option<String>,
    /// The expected job; default $GITHUB_JOB. A publishing job that publishes the spool of
    /// another job of its run names that job here (alias --expected-producer-job).
    #[arg(long, visible_alias = "expected-producer-job", value_name = "JOB")]
    pub(super) expected_job: Option<String>,
    /// The expected run id; default $GITHUB_RUN_ID.
    #[arg(long, value_name = "ID")]
    pub(super) expected_run_id: Option<String>,
    /// The expected run attempt (an integer ≥ 1); default $GITHUB_RUN_ATTEMPT.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..=9_007_199_254_740_991))]
    pub(super) expected_run_attempt: Option<i64>,
    /// The exact shard paths each source must hold (`ledger/v1/events/...jsonl`, as `seal
    /// --paths` prints them), sorted and unique, at most 256; repeat the flag or separate them
    /// with commas. From a shard root only the listed files are read and published (a listed
    /// file that is missing is refused); a sealed spool whose shards are not exactly the
    /// listed ones is refused, naming the missing and extra paths (exit 1, nothing published).
    #[arg(long, value_name = "PATH", value_delimiter = ',')]
    pub(super) expected_event_paths: Vec<String>,
}

/// The state repository and ledger ref of the finality commands and `compact`.
#[derive(clap::Args, Debug)]
pub(super) struct StateRepo {
    /// The state repository (with --remote, a cache of objects, created bare when absent).
    #[arg(long, default_value = "./state.git")]
    pub(super) repo: PathBuf,
    /// The ledger ref.
    #[arg(long = "ref", default_value = "refs/heads/main")]
    pub(super) ref_name: String,
    /// Read and write this remote state repository (any git URL or path), as `publish
    /// --remote` does; --repo then only caches objects. The remote tip is read (`git
    /// ls-remote`) and fetched, the commit is built on it and pushed with `git push --atomic
    /// --force-with-lease=REF:TIP`; when the remote moved, the operation is checked again and
    /// rebuilt on the new tip (at most 64 attempts, then exit 1). A refusal by the server's hook
    /// is final (exit 1) and shows the hook's findings.
    #[arg(long)]
    pub(super) remote: Option<String>,
    /// The ref on the remote (default: the value of --ref).
    #[arg(long, requires = "remote")]
    pub(super) remote_ref: Option<String>,
    /// Build on the remote ref even though it no longer descends from the tip this cache last
    /// confirmed there (its history was rewritten, e.g. by a force push). Without it such a
    /// remote is refused (exit 1) naming both commits; check the new history first (`verify
    /// --range CONFIRMED..TIP` on a clone of the remote). The new tip becomes the confirmed one.
    #[arg(long, requires = "remote")]
    pub(super) accept_rewritten_remote: bool,
}

/// Who acts, and on what: the binding a claim is checked against.
#[derive(clap::Args, Debug)]
pub(super) struct Binding {
    /// The agent id (default $ACTION_LEDGER_AGENT_ID); machine text without confidential
    /// identifiers.
    #[arg(long)]
    pub(super) agent: Option<String>,
    /// The principal (default $ACTION_LEDGER_PRINCIPAL); machine text without confidential
    /// identifiers (so no e-mail address).
    #[arg(long)]
    pub(super) principal: Option<String>,
    /// The act as a JSON object (default: the shell act of the command after `--`,
    /// `{"kind":"shell","command":"<argv, quoted>"}`). Only its hash is stored.
    #[arg(long)]
    pub(super) act: Option<String>,
    /// The caller's identity is verified.
    #[arg(long)]
    pub(super) verified: bool,
}

#[derive(Subcommand, Debug)]
pub(super) enum ActionCommand {
    /// Create a governed action; prints its id.
    ///
    /// Records the binding: agent, principal, the act hash (`sha256:` + base64url of the
    /// NFC-normalised canonical JSON of the scrubbed act), the guard decision and verdict,
    /// protocol 1, and the initial lifecycle (`running`; `pending_approval` for
    /// require_approval, `blocked` for block). With --details it also keeps the full action
    /// record (goal, risk, systems, reversible, reasoning, … and the scrubbed act itself),
    /// redacted; a detail breaking its rule exits 2 naming it. An act with a number
    /// canonical JSON cannot write exactly (1e400, -0, integers beyond 2^53-1) is refused
    /// (exit 2). Retrying with the same binding under the same --id exits 0 and writes nothing;
    /// another binding under that id is ACTION_EXISTS.
    Create(CreateArgs),
    /// Claim the execution of an action for one attempt; prints the attempt id.
    ///
    /// Granted once, if the action is running, its outcome pending, never claimed, protocol 1,
    /// the agent, principal and act hash match (give the same --act or `-- CMD ARGS` as at
    /// creation), its guard decision is permissive, and a verified action is claimed by a
    /// --verified caller. Every ineligibility and a lost race is the same
    /// EXECUTION_CLAIM_CONFLICT (no existence oracle); exactly one of any number of concurrent
    /// claimers wins. A claim that could not be checked or written is
    /// EXECUTION_CLAIM_UNAVAILABLE, never a conflict.
    Claim(ClaimArgs),
    /// Report the outcome of an action: completed, partial (with --progress) or failed (with
    /// --error).
    ///
    /// Recorded once: a second report, one after the sweep or after a legacy close is
    /// OUTCOME_ALREADY_SET with the current status; lost_confirmation is refused
    /// (INVALID_STATUS: only the sweep writes it); a blocked, pending_approval, cancelled or
    /// failed lifecycle is LIFECYCLE_CONFLICT. An open lifecycle is closed: completed ->
    /// completed, partial and failed -> failed. Secrets and confidential identifiers in the
    /// summary, error and progress strings are replaced by `[REDACTED]` before storage.
    ///
    /// Only the principal that created (and so claimed) the action, or --operator, may report
    /// it; for any other --principal the action is NOT_FOUND (exit 1), as an unknown id is.
    Outcome(OutcomeArgs),
    /// The legacy close: close a running action as completed, failed, cancelled or blocked,
    /// with the implicit outcome.
    ///
    /// Only the principal that created the action, or --operator, may close it; for any other
    /// --principal the action is NOT_FOUND (exit 1), as an unknown id is.
    Close(CloseArgs),
    /// Cancel an action that was allowed but never executed (as DashClaw's server cancels it):
    /// it must be running, without an outcome and never claimed, and becomes cancelled, once.
    ///
    /// The reason is required and kept, redacted, in the summary ("Deliberately not executed:
    /// <reason>"). A claimed, settled, pending-approval or already cancelled action is
    /// NOT_CANCELLABLE (exit 1). Only the principal that created the action, or --operator, may
    /// cancel it; for any other --principal the action is NOT_FOUND (exit 1), as an unknown id is.
    Cancel(CancelArgs),
    /// Promote or discard a contained action awaiting promotion (as serve's
    /// `POST /api/actions/{id}/containment`, DashClaw's `resolve_containment`).
    ///
    /// An action awaits promotion when its guard verdict is allow_contained and its outcome is
    /// completed; the verdict is recorded once (containment.json). promote needs the action's
    /// containment ref and also creates, in the same commit, a running containment_promote
    /// action for the same agent and principal whose act is `git merge --no-ff <ref>`,
    /// approved by --principal (claimable once within 15 minutes). An action not awaiting
    /// promotion is CONTAINMENT_NOT_AWAITING, a promotion without a ref
    /// CONTAINMENT_REF_MISSING, and the principal that created the action may not resolve it
    /// (SELF_APPROVAL_FORBIDDEN); each exits 1.
    Containment(ContainmentArgs),
    /// Show an action: its binding, claim, lifecycle and outcome (with elapsed_ms).
    ///
    /// elapsed_ms runs from creation to the outcome, or to now while pending, and is never
    /// negative: when clocks of different machines disagree it is clamped to 0 and the largest
    /// skew is named (`clock_skew` with --json). An unknown id is NOT_FOUND.
    Show(ShowArgs),
    /// List actions, filtered and paged as serve's `GET /api/actions` (one line each).
    ///
    /// `--status running`, `pending` or `pending_approval` reads the pending index: newest
    /// first, with the exact total, at the cost of what is pending (`pending_approval` lists
    /// the actions an operator can still decide; one the sweep reconciled first is listed by
    /// `--outcome-status lost_confirmation`). Any other query walks the actions in the order of
    /// the hash of their ids and stops once the page is full: the total is then known only when
    /// the walk reached the end ("more may follow" otherwise). A bad filter, limit or offset
    /// exits 2.
    List(ListArgs),
}

impl ActionCommand {
    /// Whether `--json` was given.
    pub(super) fn json(&self) -> bool {
        match self {
            ActionCommand::Create(a) => a.json,
            ActionCommand::Claim(a) => a.json,
            ActionCommand::Outcome(a) => a.json,
            ActionCommand::Close(a) => a.json,
            ActionCommand::Cancel(a) => a.json,
            ActionCommand::Containment(a) => a.json,
            ActionCommand::Show(a) => a.json,
            ActionCommand::List(a) => a.json,
        }
    }
}

// The flags of `action create` (its help text is on the variant).
#[derive(clap::Args, Debug)]
pub(super) struct CreateArgs {
    #[command(flatten)]
    pub(super) state: StateRepo,
    #[command(flatten)]
    pub(super) binding: Binding,
    /// The action id, `^[A-Za-z0-9_-]{1,128}$` (default: act_ and 32 random hex digits).
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
    /// The full action record: a JSON object of DashClaw's detail fields (declared_goal,
    /// risk_score, systems_touched, reversible, reasoning, idempotency_key, assumptions, …),
    /// each within its limit; with it the record keeps them and the act, redacted (`{}`: the
    /// act alone). Without it nothing but the binding is stored.
    #[arg(long, value_name = "JSON")]
    pub(super) details: Option<String>,
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
    /// The attempt id, `^[A-Za-z0-9_-]{16,128}$` (default: a fresh UUID v4); a repeated attempt
    /// id never grants again.
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
    /// A JSON object (required for partial; at most 8 KiB of canonical JSON, depth at most 64,
    /// no number canonical JSON cannot write exactly).
    #[arg(long)]
    pub(super) progress: Option<String>,
    /// The claiming attempt id, to bind the outcome to it (another one is ATTEMPT_MISMATCH).
    #[arg(long)]
    pub(super) attempt: Option<String>,
    /// Who settles: the principal (default $ACTION_LEDGER_PRINCIPAL). Only the principal that
    /// created the action may settle it; another principal's action is NOT_FOUND, as an
    /// unknown id is.
    #[arg(long)]
    pub(super) principal: Option<String>,
    /// Settle as an operator, who may settle any principal's action (instead of --principal).
    #[arg(long, conflicts_with = "principal")]
    pub(super) operator: bool,
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
    /// The error message (redacted, truncated to 4000 characters).
    #[arg(long, value_name = "TEXT")]
    pub(super) error_message: Option<String>,
    /// When the action ended on the closer's clock (YYYY-MM-DDTHH:MM:SS[.fraction] then Z or
    /// ±HH:MM), kept to the millisecond beside the recorded outcome time.
    #[arg(long, value_name = "TIME")]
    pub(super) timestamp_end: Option<String>,
    /// What the close reports: a JSON object of tokens_in, tokens_out, cost_estimate, model,
    /// duration_ms, side_effects and artifacts_created, each within its limit (redacted).
    #[arg(long, value_name = "JSON")]
    pub(super) report: Option<String>,
    /// Who settles: the principal (default $ACTION_LEDGER_PRINCIPAL). Only the principal that
    /// created the action may settle it; another principal's action is NOT_FOUND, as an
    /// unknown id is.
    #[arg(long)]
    pub(super) principal: Option<String>,
    /// Settle as an operator, who may settle any principal's action (instead of --principal).
    #[arg(long, conflicts_with = "principal")]
    pub(super) operator: bool,
    /// Print a JSON object of type `outcome`.
    #[arg(long)]
    pub(super) json: bool,
}

// The flags of `action cancel` (its help text is on the variant).
#[derive(clap::Args, Debug)]
pub(super) struct CancelArgs {
    #[command(flatten)]
    pub(super) state: StateRepo,
    /// The action id.
    pub(super) action_id: String,
    /// Why the action is not executed (required, not blank; redacted, then cut to 3973
    /// characters: the stored summary adds "Deliberately not executed: " and holds at most
    /// 4000).
    #[arg(long)]
    pub(super) reason: String,
    /// Who cancels: the principal (default $ACTION_LEDGER_PRINCIPAL). Only the principal that
    /// created the action may cancel it; another principal's action is NOT_FOUND, as an
    /// unknown id is.
    #[arg(long)]
    pub(super) principal: Option<String>,
    /// Cancel as an operator, who may cancel any principal's action (instead of --principal).
    #[arg(long, conflicts_with = "principal")]
    pub(super) operator: bool,
    /// Print a JSON object of type `outcome`.
    #[arg(long)]
    pub(super) json: bool,
}

// The flags of `action containment` (its help text is on the variant).
#[derive(clap::Args, Debug)]
pub(super) struct ContainmentArgs {
    #[command(flatten)]
    pub(super) state: StateRepo,
    /// The contained action's id.
    pub(super) action_id: String,
    /// The verdict.
    #[arg(value_parser = ["promote", "discard"])]
    pub(super) verdict: String,
    /// Why (optional; redacted, truncated to 4000 characters).
    #[arg(long)]
    pub(super) reasoning: Option<String>,
    /// The operator who resolves (default $ACTION_LEDGER_PRINCIPAL): recorded as resolved_by
    /// and as the approver of a promotion; it may not be the action's creating principal.
    #[arg(long)]
    pub(super) principal: Option<String>,
    /// Print a JSON object of type `containment`.
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

// The flags of `action list` (its help text is on the variant).
#[derive(clap::Args, Debug)]
pub(super) struct ListArgs {
    #[command(flatten)]
    pub(super) state: StateRepo,
    /// Only actions in this lifecycle (running, pending, pending_approval, blocked, completed,
    /// failed, cancelled, unknown).
    #[arg(long)]
    pub(super) status: Option<String>,
    /// Only actions not in this lifecycle (ignored with --status).
    #[arg(long)]
    pub(super) exclude_status: Option<String>,
    /// Only actions with this outcome status (pending, completed, partial, failed,
    /// lost_confirmation).
    #[arg(long)]
    pub(super) outcome_status: Option<String>,
    /// Only actions of this agent.
    #[arg(long)]
    pub(super) agent: Option<String>,
    /// Only actions whose guard decision record (written by serve) names this action type.
    #[arg(long)]
    pub(super) action_type: Option<String>,
    /// Only contained actions in this containment status (contained, awaiting_promotion,
    /// promoted, discarded).
    #[arg(long)]
    pub(super) containment_status: Option<String>,
    /// Only actions whose request details name this swarm (`swarm_id`); actions without
    /// details never match.
    #[arg(long)]
    pub(super) swarm: Option<String>,
    /// Only actions whose request details give a risk score of at least this (0 to 100);
    /// actions without one never match.
    #[arg(long)]
    pub(super) risk_min: Option<String>,
    /// Most actions listed (1 to 200; more exits 2).
    #[arg(long, default_value = "50")]
    pub(super) limit: String,
    /// Matching actions skipped first (0 to 1000000).
    #[arg(long, default_value = "0")]
    pub(super) offset: String,
    /// Print one JSON object of type `action_list`.
    #[arg(long)]
    pub(super) json: bool,
}

/// The arguments of `serve`.
#[derive(clap::Args, Debug)]
pub(super) struct ServeArgs {
    /// The state repository (created bare when absent; with --remote, a cache of objects).
    #[arg(long, default_value = "./state.git")]
    pub(super) repo: PathBuf,
    /// The ledger ref.
    #[arg(long = "ref", default_value = "refs/heads/main")]
    pub(super) ref_name: String,
    /// Land every commit on this remote state repository (any git URL or path) with a leased
    /// push, as `publish --remote` does; servers sharing a remote see each other's claims.
    #[arg(long)]
    pub(super) remote: Option<String>,
    /// The ref on the remote (default: the value of --ref).
    #[arg(long, requires = "remote")]
    pub(super) remote_ref: Option<String>,
    /// Build on the remote ref even though it no longer descends from the tip this cache last
    /// confirmed there (its history was rewritten, e.g. by a force push). Without it such a
    /// remote is refused (exit 1) naming both commits; check the new history first (`verify
    /// --range CONFIRMED..TIP` on a clone of the remote). The new tip becomes the confirmed one.
    #[arg(long, requires = "remote")]
    pub(super) accept_rewritten_remote: bool,
    /// The address to listen on (`127.0.0.1:0` takes a free port).
    #[arg(long, default_value = "127.0.0.1:8787")]
    pub(super) listen: String,
    /// API keys: one `PRINCIPAL SHA256_HEX_OF_KEY [operator]` a line (keys are stored hashed
    /// only; `operator` may approve and deny). A single key can also come from
    /// $ACTION_LEDGER_API_KEY with its principal in $ACTION_LEDGER_PRINCIPAL.
    #[arg(long)]
    pub(super) api_keys: Option<PathBuf>,
    /// The guard policy (JSON: `{"default", "rules":[{"id", "action_type", "act_kind",
    /// "agent_id", "verdict", "reason", "containment_ref"}]}`, rules tried in order, a rule
    /// matching when every field it names is equal; default: allow everything). A claim is
    /// checked against the current policy again.
    #[arg(long)]
    pub(super) policy: Option<PathBuf>,
    /// Sweep stale outcomes every this many minutes (0: no timer; the cron endpoint still
    /// works).
    #[arg(long, default_value_t = 15)]
    pub(super) sweep_every: u32,
    /// Minutes a pending outcome must have been pending on this server's clock (since its
    /// creation here, or since this server first saw it) before it is stale.
    #[arg(long, default_value_t = crate::finality::DEFAULT_TIMEOUT_MINUTES,
          value_parser = clap::value_parser!(u32).range(1..=1440))]
    pub(super) timeout_minutes: u32,
    /// Seconds an action created without `approval_wait_seconds` waits for an operator's
    /// approval (its creator's own value, 5 to 86400, wins). After the wait plus
    /// `--approval-grace`, on this server's clock since it first saw the action, a sweep
    /// (timer or cron) makes it `expired`: approving or denying it is then refused (410).
    #[arg(long, value_name = "SECONDS",
          default_value_t = crate::finality::approval::DEFAULT_APPROVAL_WAIT_SECONDS,
          value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub(super) approval_timeout: u32,
    /// Seconds added to every approval wait before it expires, so an agent retrying just after
    /// its wait ended still finds the decision.
    #[arg(long, value_name = "SECONDS",
          default_value_t = crate::finality::approval::APPROVAL_RETRY_GRACE_SECONDS,
          value_parser = clap::value_parser!(u32).range(0..=86_400))]
    pub(super) approval_grace: u32,
    /// Serve without authentication (only on a loopback address, only without keys): every
    /// caller is then the operator `anonymous`.
    #[arg(long)]
    pub(super) insecure_no_auth: bool,
    /// Also print `{"type":"listening","url":…}` on stdout when ready.
    #[arg(long)]
    pub(super) json: bool,
    /// Most operations in one commit (1: one commit per operation; for benchmarks).
    #[arg(long, default_value_t = 256, hide = true,
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub(super) max_batch: u32,
    /// Webhooks (JSON: `{"endpoints":[{"name", "url", "secret" | "secret_file", "events":
    /// ["all"] | ["action.created", "action.updated"]}], "retry": {"max_attempts",
    /// "initial_backoff_ms", "max_backoff_ms"}, "timeout_ms"}`): each event of `GET
    /// /api/stream` is POSTed to the endpoints that want it, signed (`X-DashClaw-Signature`:
    /// hex HMAC-SHA256 of the body), with `X-DashClaw-Event` and `X-DashClaw-Delivery` (the same
    /// id on every retry), through a durable outbox in the repository, retried with backoff,
    /// kept as a dead letter when its attempts run out. A malformed file is refused at start;
    /// SIGHUP reads it again.
    #[arg(long, value_name = "FILE")]
    pub(super) webhooks: Option<PathBuf>,
    /// Most `GET /api/stream` (Server-Sent Events) subscribers open at once; past it, 503.
    #[arg(long, default_value_t = crate::server::api::stream::DEFAULT_MAX_STREAMS, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub(super) max_streams: u32,
}
