//! The command line: argument parsing (clap), resolution of environment inputs, and one printer.
//!
//! Data goes to stdout, diagnostics and summaries to stderr. Exit codes (design.md §9): 0 success,
//! 1 the command ran and found a conflict or a refusal, 2 usage, input or I/O error.
//! The environment and the clock are read here only and passed to the library as values.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand};

use crate::canonical::{self, Value};
use crate::finality;
use crate::privacy::Profile;
use crate::publish::{self, Options, Publication, Status};
use crate::store::{self, Signature, Store};
use crate::writer::record;
use crate::writer::seal;
use crate::writer::spool::Spool;

/// Environment variables the CLI consults, captured once so tests can inject them.
pub type Env = BTreeMap<String, String>;

#[derive(Parser, Debug)]
#[command(
    name = "action-ledger",
    version,
    about = "An immutable, privacy-bounded action ledger stored natively in Git"
)]
struct Cli {
    /// Print nothing on stderr except errors.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum HooksCommand {
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
struct PrivacyArg {
    /// Privacy rules: `strict` (the default) also refuses the credential and private-host
    /// families beyond the reference's rules (README, Privacy); `reference` applies exactly the
    /// reference's rules.
    #[arg(long = "privacy", value_name = "PROFILE", default_value = "strict",
          value_parser = PossibleValuesParser::new(["strict", "reference"])
              .map(|s| s.parse::<Profile>().expect("a listed profile")))]
    profile: Profile,
}

/// The hook shipped in `hooks/pre-receive`.
const PRE_RECEIVE: &str = include_str!("../../hooks/pre-receive");

#[derive(Subcommand, Debug)]
enum Command {
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
struct StateRepo {
    /// The state repository.
    #[arg(long, default_value = "./state.git")]
    repo: PathBuf,
    /// The ledger ref.
    #[arg(long = "ref", default_value = "refs/heads/main")]
    ref_name: String,
}

/// Who acts, and on what: the binding a claim is checked against.
#[derive(clap::Args, Debug)]
struct Binding {
    /// The agent id (default $ACTION_LEDGER_AGENT_ID).
    #[arg(long)]
    agent: Option<String>,
    /// The principal (default $ACTION_LEDGER_PRINCIPAL).
    #[arg(long)]
    principal: Option<String>,
    /// The act as a JSON object (default: the shell act of the command after `--`).
    #[arg(long)]
    act: Option<String>,
    /// The caller's identity is verified.
    #[arg(long)]
    verified: bool,
}

#[derive(Subcommand, Debug)]
enum ActionCommand {
    /// Create a governed action; prints its id.
    Create {
        #[command(flatten)]
        state: StateRepo,
        #[command(flatten)]
        binding: Binding,
        /// The action id (default: act_ and 32 random hex digits).
        #[arg(long)]
        id: Option<String>,
        /// The guard decision that authorised the action (a claim needs one).
        #[arg(long)]
        guard_decision: Option<String>,
        /// That decision's verdict.
        #[arg(long, default_value = "allow",
              value_parser = ["allow", "warn", "allow_contained", "require_approval", "block"])]
        verdict: String,
        /// The containment ref of a contained action (for allow_contained).
        #[arg(long)]
        containment_ref: Option<String>,
        /// The initial lifecycle (default: from the verdict).
        #[arg(long, value_parser = ["running", "pending", "pending_approval", "blocked",
              "completed", "failed", "cancelled"])]
        lifecycle: Option<String>,
        /// Create a legacy action without the execution_claims capability (never claimable).
        #[arg(long)]
        legacy: bool,
        /// Print a JSON object of type `action`.
        #[arg(long)]
        json: bool,
        /// The command the action stands for (its act, unless --act is given).
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Claim the execution of an action for one attempt; prints the attempt id.
    Claim {
        #[command(flatten)]
        state: StateRepo,
        #[command(flatten)]
        binding: Binding,
        /// The action id.
        action_id: String,
        /// The attempt id (default: a fresh UUID v4).
        #[arg(long)]
        attempt: Option<String>,
        /// Print a JSON object of type `claim`.
        #[arg(long)]
        json: bool,
        /// The command the action stands for (its act, unless --act is given).
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Report the outcome of an action: completed, partial (with --progress) or failed (with
    /// --error).
    Outcome {
        #[command(flatten)]
        state: StateRepo,
        /// The action id.
        action_id: String,
        /// completed, partial or failed.
        status: String,
        /// A summary (redacted, truncated to 4000 characters).
        #[arg(long)]
        summary: Option<String>,
        /// The error message (required for failed).
        #[arg(long)]
        error: Option<String>,
        /// A JSON object (required for partial; at most 8 KiB).
        #[arg(long)]
        progress: Option<String>,
        /// The claiming attempt id, to bind the outcome to it.
        #[arg(long)]
        attempt: Option<String>,
        /// Print a JSON object of type `outcome`.
        #[arg(long)]
        json: bool,
    },
    /// The legacy close: close a running action as completed, failed, cancelled or blocked,
    /// with the implicit outcome.
    Close {
        #[command(flatten)]
        state: StateRepo,
        /// The action id.
        action_id: String,
        /// completed, failed, cancelled or blocked.
        status: String,
        /// A summary (redacted, truncated to 4000 characters).
        #[arg(long)]
        summary: Option<String>,
        /// Print a JSON object of type `outcome`.
        #[arg(long)]
        json: bool,
    },
    /// Show an action: its binding, claim, lifecycle and outcome (with elapsed_ms).
    Show {
        #[command(flatten)]
        state: StateRepo,
        /// The action id.
        action_id: String,
        /// Print a JSON object of type `action`.
        #[arg(long)]
        json: bool,
    },
}

/// Runs the CLI with explicit arguments, environment and output streams; returns the exit code.
pub fn run(
    args: impl IntoIterator<Item = String>,
    env: &Env,
    stdin: &mut dyn std::io::Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let text = e.render().to_string();
            if code == 0 {
                let _ = write!(stdout, "{text}");
            } else {
                let _ = write!(stderr, "{text}");
            }
            return code;
        }
    };
    let mut out = Printer {
        stdout,
        stderr,
        quiet: cli.quiet,
        broken: None,
    };
    let result = match cli.command {
        Command::Record {
            spool,
            input,
            privacy,
        } => run_record(&mut out, env, stdin, spool, &input, privacy.profile),
        Command::Seal {
            output,
            json,
            interrupt_open_attempts,
            reason,
            privacy,
            spools,
        } => {
            let output = output.or_else(|| {
                env.get("CLAWSWEEPER_ACTION_LEDGER_OUTPUT_ROOT")
                    .filter(|s| !s.trim().is_empty())
                    .map(PathBuf::from)
            });
            let interrupt = interrupt_open_attempts
                .then(|| crate::writer::interrupt::Reason::parse(&reason))
                .flatten();
            run_seal(&mut out, output, json, interrupt, privacy.profile, &spools)
        }
        Command::Verify {
            repo,
            rev,
            range,
            json,
            privacy,
        } => run_verify(
            &mut out,
            env,
            &repo,
            &rev,
            range.as_deref(),
            json,
            privacy.profile,
        ),
        Command::Hooks {
            command: HooksCommand::Install { repo, ref_name },
        } => run_hooks_install(&mut out, &repo, &ref_name),
        Command::Publish {
            repo,
            ref_name,
            layout,
            remote,
            remote_ref,
            max_attempts,
            json,
            privacy,
            sources,
        } => {
            let target = match remote {
                Some(url) => publish::Target::Remote {
                    url: absolute_url(&url),
                    ref_name: remote_ref.unwrap_or_else(|| ref_name.clone()),
                },
                None => publish::Target::Local,
            };
            run_publish(
                &mut out,
                env,
                &repo,
                &ref_name,
                &target,
                layout
                    .as_deref()
                    .and_then(crate::ledger::layout::Layout::from_name),
                max_attempts,
                json,
                privacy.profile,
                &sources,
            )
        }
        Command::Action { command } => run_action(&mut out, env, command),
        Command::Sweep {
            state,
            timeout_minutes,
            json,
        } => run_sweep(&mut out, env, &state, timeout_minutes, json),
        Command::Run {
            state,
            binding,
            action,
            attempt,
            json,
            command,
        } => run_governed(
            &mut out, env, &state, &binding, &action, attempt, json, &command,
        ),
        Command::Serve {
            repo,
            ref_name,
            remote,
            remote_ref,
            listen,
            api_keys,
            policy,
            sweep_every,
            timeout_minutes,
            insecure_no_auth,
            json,
            max_batch,
        } => run_serve(
            &mut out,
            env,
            ServeArgs {
                repo,
                ref_name,
                remote,
                remote_ref,
                listen,
                api_keys,
                policy,
                sweep_every,
                timeout_minutes,
                insecure_no_auth,
                json,
                max_batch,
            },
        ),
        Command::Compact {
            state,
            retention_days,
            now,
            dry_run,
            json,
        } => run_compact(
            &mut out,
            env,
            &state,
            retention_days,
            now.as_deref(),
            dry_run,
            json,
        ),
        Command::Log {
            repo,
            rev,
            json,
            subject,
            operation,
            attempt,
            event_type,
            producer,
            since,
            until,
        } => log_filter(
            subject, operation, attempt, event_type, producer, since, until,
        )
        .and_then(|filter| run_log(&mut out, &repo, &rev, json, &filter)),
    };
    let code = match result {
        Ok(()) => 0,
        Err(Failure { code, message }) => {
            if !message.is_empty() {
                let _ = writeln!(out.stderr, "error: {message}");
            }
            code
        }
    };
    match out.broken.take() {
        Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            let _ = writeln!(out.stderr, "error: cannot write output: {e}");
            code.max(2)
        }
        _ => code,
    }
}

struct Printer<'a> {
    stdout: &'a mut dyn Write,
    stderr: &'a mut dyn Write,
    quiet: bool,
    /// The first failed write of data; reported at the end (a closed pipe is not an error).
    broken: Option<std::io::Error>,
}

impl Printer<'_> {
    fn data(&mut self, line: &str) {
        if self.broken.is_none()
            && let Err(e) = writeln!(self.stdout, "{line}").and_then(|()| self.stdout.flush())
        {
            self.broken = Some(e);
        }
    }
    /// Bytes of a child's standard output, passed through unchanged.
    fn raw(&mut self, bytes: &[u8]) {
        if self.broken.is_none()
            && let Err(e) = self
                .stdout
                .write_all(bytes)
                .and_then(|()| self.stdout.flush())
        {
            self.broken = Some(e);
        }
    }
    fn note(&mut self, line: &str) {
        if !self.quiet {
            let _ = writeln!(self.stderr, "{line}");
        }
    }
}

struct Failure {
    code: i32,
    message: String,
}

impl Failure {
    fn input(e: impl std::fmt::Display) -> Failure {
        Failure {
            code: 2,
            message: e.to_string(),
        }
    }
}

fn seal_failure(e: seal::Error) -> Failure {
    let code = match &e {
        seal::Error::LateEvents(_)
        | seal::Error::ShardConflict { .. }
        | seal::Error::Unsealed { .. }
        | seal::Error::StrictPrivacy { .. } => 1,
        _ => 2,
    };
    Failure {
        code,
        message: e.to_string(),
    }
}

fn publish_failure(source: &std::path::Path, earlier: usize, e: publish::Error) -> Failure {
    use publish::Error as E;
    let code = match &e {
        E::BindingConflict { .. }
        | E::PayloadConflict(_)
        | E::IdentityConflict(_)
        | E::HistoryCycle(_)
        | E::Provenance { .. }
        | E::RemoteRefused(_)
        | E::StrictPrivacy { .. }
        | E::Contention { .. } => 1,
        E::Seal(
            seal::Error::LateEvents(_) | seal::Error::Unsealed { .. } | seal::Error::OrphanSeal(_),
        ) => 1,
        E::Layout(
            crate::ledger::layout::Error::Mismatch { .. }
            | crate::ledger::layout::Error::UnknownRecord,
        ) => 1,
        _ => 2,
    };
    Failure {
        code,
        message: if earlier == 0 {
            format!("{}: {e}; the ledger ref was not changed", source.display())
        } else {
            format!(
                "{}: {e}; this source was not published (the {earlier} source(s) before it were)",
                source.display()
            )
        },
    }
}

fn run_record(
    out: &mut Printer,
    env: &Env,
    stdin: &mut dyn std::io::Read,
    spool: Option<PathBuf>,
    input: &str,
    profile: Profile,
) -> Result<(), Failure> {
    let root = spool
        .or_else(|| {
            env.get("CLAWSWEEPER_ACTION_LEDGER_ROOT")
                .filter(|s| !s.trim().is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("."));
    let root = crate::writer::files::absolute_root(&root).map_err(Failure::input)?;
    if !root.is_dir() {
        return Err(Failure::input(format!(
            "spool root {} does not exist or is not a directory",
            root.display()
        )));
    }
    let mut text = String::new();
    let source = if input == "-" {
        stdin
            .read_to_string(&mut text)
            .map_err(|e| Failure::input(format!("cannot read stdin: {e}")))?;
        "stdin".to_owned()
    } else {
        text = std::fs::read_to_string(input)
            .map_err(|e| Failure::input(format!("cannot read {input}: {e}")))?;
        input.to_owned()
    };
    let value = canonical::parse_input(text.trim_end())
        .map_err(|e| Failure::input(format!("{source}: {e}")))?;
    let now_ms = now_ms();
    let options = record::Options { privacy: profile };
    let result = match (value.get("phase"), value.get("scope")) {
        (Some(_), None) => record::record_phase_outcome(&root, &value, env, now_ms, &options),
        (None, Some(_)) => record::record_action_outcome(&root, &value, env, now_ms, &options),
        _ => {
            return Err(Failure::input(format!(
                "{source}: the input must have either `phase` (phase API) or `scope` (action API)"
            )));
        }
    };
    match result {
        Ok(Some((event, outcome))) => {
            out.data(&event.json);
            out.note(&match outcome {
                record::Outcome::Recorded => format!(
                    "recorded {} {} in {}",
                    event.event_type(),
                    event.event_id,
                    root.display()
                ),
                record::Outcome::Unchanged => format!(
                    "unchanged: {} {} is already recorded in {} (the same event; nothing written)",
                    event.event_type(),
                    event.event_id,
                    root.display()
                ),
            });
            Ok(())
        }
        Ok(None) => {
            out.note("recording is disabled (set CLAWSWEEPER_ACTION_LEDGER_FORCE=1 to enable)");
            Ok(())
        }
        Err(e) => Err(Failure {
            code: if e.is_conflict() || matches!(e, record::Error::StrictPrivacy(_)) {
                1
            } else {
                2
            },
            message: format!("{source}: {e}; nothing was recorded"),
        }),
    }
}

fn run_hooks_install(
    out: &mut Printer,
    repo: &std::path::Path,
    ref_name: &str,
) -> Result<(), Failure> {
    let store = Store::open_or_init_bare(repo, ref_name)
        .map_err(|e| Failure::input(format!("cannot open {}: {e}", repo.display())))?;
    // The installed hook calls this very binary unless ACTION_LEDGER_BIN says otherwise.
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.into_os_string().into_string().ok())
        .map(|p| format!("'{}'", p.replace('\'', "'\\''")))
        .unwrap_or_else(|| "action-ledger".to_owned());
    let script = PRE_RECEIVE.replacen(
        "bin=${ACTION_LEDGER_BIN:-action-ledger}",
        &format!("bin=${{ACTION_LEDGER_BIN:-{exe}}}"),
        1,
    );
    let hooks = store.git_dir().join("hooks");
    let path = hooks.join("pre-receive");
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&hooks)?;
        crate::durable::replace_file(&path, script.as_bytes(), Some(0o755))
    };
    write().map_err(|e| Failure::input(format!("cannot write {}: {e}", path.display())))?;
    store
        .set_config_true(&[
            "receive.denyDeletes",
            "receive.denyNonFastForwards",
            "receive.fsckObjects",
        ])
        .map_err(|e| Failure::input(format!("cannot configure {}: {e}", repo.display())))?;
    out.note(&format!(
        "installed {} and set receive.denyDeletes, receive.denyNonFastForwards, receive.fsckObjects",
        path.display()
    ));
    Ok(())
}

fn run_verify(
    out: &mut Printer,
    env: &Env,
    repo: &std::path::Path,
    rev: &str,
    range: Option<&str>,
    json: bool,
    profile: Profile,
) -> Result<(), Failure> {
    let options = crate::verify::Options { privacy: profile };
    let unreadable = |e: &dyn std::fmt::Display| Failure {
        code: 2,
        message: format!("cannot verify {}: {e}", repo.display()),
    };
    // In a pre-receive hook the pushed objects are still in git's quarantine directory.
    let mut quarantine: Vec<PathBuf> = Vec::new();
    if let Some(dir) = env.get("GIT_OBJECT_DIRECTORY").filter(|d| !d.is_empty()) {
        quarantine.push(PathBuf::from(dir));
    }
    if let Some(dirs) = env.get("GIT_ALTERNATE_OBJECT_DIRECTORIES") {
        quarantine.extend(dirs.split(':').filter(|d| !d.is_empty()).map(PathBuf::from));
    }
    let store = Store::open(repo)
        .and_then(|s| s.with_object_dirs(&quarantine))
        .map_err(|e| unreadable(&e))?;
    let resolve = |r: &str| store.resolve(r).map_err(|e| unreadable(&e));
    let (report, what) = match range {
        Some(range) => {
            let (old, new) = range
                .split_once("..")
                .ok_or_else(|| Failure::input(format!("--range wants OLD..NEW, got {range}")))?;
            let old = if old.bytes().all(|b| b == b'0') {
                None
            } else {
                Some(resolve(old)?)
            };
            let new = resolve(new)?;
            let report = crate::verify::verify_range_with(&store, old, new, &options)
                .map_err(|e| unreadable(&e))?;
            (report, format!("push {range}"))
        }
        None => {
            let commit = resolve(rev)?;
            let report = crate::verify::verify_revision_with(&store, commit, &options)
                .map_err(|e| unreadable(&e))?;
            (report, format!("{rev} ({})", commit.to_hex()))
        }
    };
    // Warnings print like findings (type "warning" in JSON) and leave the exit code alone.
    let findings = report.findings.iter().map(|f| ("finding", f));
    let warnings = report.warnings.iter().map(|f| ("warning", f));
    for (kind, f) in findings.chain(warnings) {
        if json {
            out.data(&canonical::to_canonical_unchecked(&Value::object([
                ("type", Value::str(kind)),
                ("path", Value::str(&f.path)),
                ("rule", Value::str(f.rule.code())),
                ("detail", Value::str(&f.detail)),
            ])));
        }
        let _ = writeln!(out.stderr, "{}: {}: {}", f.path, f.rule, f.detail);
    }
    if json {
        out.data(&canonical::to_canonical_unchecked(&Value::object([
            ("type", Value::str("summary")),
            ("findings", Value::from(report.findings.len() as i64)),
            ("warnings", Value::from(report.warnings.len() as i64)),
            ("shards", Value::from(report.shards as i64)),
            ("events", Value::from(report.events as i64)),
            ("bindings", Value::from(report.bindings as i64)),
        ])));
    }
    out.note(&format!(
        "verified {what}: {} shard(s), {} event(s), {} binding(s), {} finding(s){}",
        report.shards,
        report.events,
        report.bindings,
        report.findings.len(),
        match report.warnings.len() {
            0 => String::new(),
            n => format!(", {n} warning(s)"),
        }
    ));
    if report.is_clean() {
        Ok(())
    } else {
        Err(Failure {
            code: 1,
            message: format!("{} finding(s)", report.findings.len()),
        })
    }
}

fn path_list(paths: &[String]) -> Value {
    Value::Array(paths.iter().map(Value::str).collect())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn run_seal(
    out: &mut Printer,
    output: Option<PathBuf>,
    json: bool,
    interrupt: Option<crate::writer::interrupt::Reason>,
    profile: Profile,
    spools: &[PathBuf],
) -> Result<(), Failure> {
    // Every root is opened before anything is written, so that a mistyped path seals nothing.
    let opened = spools
        .iter()
        .map(|root| Spool::open(root).map_err(|e| seal_failure(e.into())))
        .collect::<Result<Vec<_>, _>>()?;
    // Opened once: every spool's shards go into this directory, whatever its path turns into.
    let output_root = match &output {
        Some(dir) => Some(
            crate::writer::files::Root::open_or_create(dir, seal::OUTPUT_ROOT_LABEL)
                .map_err(Failure::input)?,
        ),
        None => None,
    };
    for (root, spool) in spools.iter().zip(opened) {
        if let Some(reason) = interrupt {
            let written = crate::writer::interrupt::interrupt_open_attempts(root, reason, now_ms())
                .map_err(|e| Failure {
                    code: match &e {
                        crate::writer::interrupt::Error::Record(r) if r.is_conflict() => 1,
                        _ => 2,
                    },
                    message: format!("{}: interruption recovery failed: {e}", root.display()),
                })?;
            out.note(&format!(
                "closed {written} open attempt(s) in {} as {}",
                root.display(),
                reason.code()
            ));
        }
        let report = seal::seal(
            &spool,
            output_root.as_ref(),
            now_ms().max(0) as u64,
            &seal::Options {
                privacy: profile,
                ..seal::Options::default()
            },
        )
        .map_err(seal_failure)?;
        let line = if json {
            Value::object([
                ("type", Value::str("seal")),
                ("spool", Value::str(spool.root().display().to_string())),
                ("sealed", Value::from(report.sealed as i64)),
                ("already_sealed", Value::from(report.already_sealed as i64)),
                ("shards_created", Value::from(report.shards_created as i64)),
                ("paths", path_list(&report.shard_paths)),
            ])
        } else {
            Value::object([("paths", path_list(&report.shard_paths))])
        };
        out.data(&canonical::to_canonical_unchecked(&line));
        if report.sealed + report.already_sealed == 0 {
            out.note(&format!(
                "nothing to seal in {}: no events were recorded; nothing written",
                spool.root().display()
            ));
            continue;
        }
        out.note(&format!(
            "sealed {}: {} producer(s) sealed now, {} already sealed, {} shard(s){}",
            spool.root().display(),
            report.sealed,
            report.already_sealed,
            report.shard_paths.len(),
            match &output {
                Some(dir) => format!(", {} written to {}", report.shards_created, dir.display()),
                None => String::new(),
            }
        ));
    }
    Ok(())
}

/// Commit identity: `ACTION_LEDGER_COMMITTER_NAME` / `_EMAIL` or a fixed non-personal identity;
/// time from `SOURCE_DATE_EPOCH` or the clock.
fn signature(env: &Env) -> Result<Signature, Failure> {
    let time_seconds = match env.get("SOURCE_DATE_EPOCH") {
        Some(s) => s.trim().parse::<i64>().map_err(|_| {
            Failure::input(format!(
                "SOURCE_DATE_EPOCH must be an integer number of seconds: {s}"
            ))
        })?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0),
    };
    Ok(Signature {
        name: env
            .get("ACTION_LEDGER_COMMITTER_NAME")
            .cloned()
            .unwrap_or_else(|| "action-ledger".into()),
        email: env
            .get("ACTION_LEDGER_COMMITTER_EMAIL")
            .cloned()
            .unwrap_or_else(|| "action-ledger@invalid".into()),
        time_seconds,
    })
}

/// A remote given as a local path is made absolute: git runs in the cache repository.
fn absolute_url(url: &str) -> String {
    let looks_local = !(url.contains("://") || (url.contains('@') && url.contains(':')));
    match std::path::Path::new(url) {
        p if looks_local && p.is_relative() => std::env::current_dir()
            .map(|d| d.join(p).to_string_lossy().into_owned())
            .unwrap_or_else(|_| url.to_owned()),
        _ => url.to_owned(),
    }
}

#[allow(clippy::too_many_arguments)] // one call site; the knobs are the command's flags
fn run_publish(
    out: &mut Printer,
    env: &Env,
    repo: &std::path::Path,
    ref_name: &str,
    target: &publish::Target,
    layout: Option<crate::ledger::layout::Layout>,
    max_attempts: u32,
    json: bool,
    profile: Profile,
    sources: &[PathBuf],
) -> Result<(), Failure> {
    let mut options = Options::new(signature(env)?);
    options.ref_name = ref_name.to_owned();
    options.layout = layout;
    options.max_attempts = max_attempts;
    options.privacy = profile;
    // Every source is looked up before the repository is created or anything is published, so
    // that a mistyped path publishes nothing. A directory without events publishes nothing.
    let mut roots = Vec::with_capacity(sources.len());
    for source in sources {
        let root = crate::writer::files::absolute_root(source).map_err(Failure::input)?;
        let absent = match std::fs::metadata(&root) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some(publish::Error::MissingSource(root.clone()))
            }
            Ok(m) if !m.is_dir() => Some(publish::Error::SourceNotADirectory(root.clone())),
            _ => None, // the library reports anything else through the opened root
        };
        if let Some(e) = absent {
            return Err(publish_failure(source, 0, e));
        }
        roots.push(root);
    }
    let was_empty_dir = std::fs::read_dir(repo).is_ok_and(|mut d| d.next().is_none());
    // Parent directories that creating the repository would create, deepest first.
    let new_parents: Vec<PathBuf> = repo
        .ancestors()
        .skip(1)
        .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
        .map(std::path::Path::to_path_buf)
        .collect();
    let (store, created) =
        Store::open_or_create_bare(repo, ref_name).map_err(|e: store::Error| {
            Failure::input(format!(
                "cannot open state repository {}: {e}",
                repo.display()
            ))
        })?;
    // Whether an earlier source of this run moved the ref (else a failure changed nothing).
    let mut landed = false;
    for (i, (source, root)) in sources.iter().zip(&roots).enumerate() {
        let publication = match publish::publish_to(&store, root, &options, target) {
            Ok(p) => p,
            Err(e) => {
                let failure = publish_failure(source, if landed { i } else { 0 }, e);
                if created {
                    drop(store);
                    discard_new_repository(repo, was_empty_dir, &new_parents);
                }
                return Err(failure);
            }
        };
        landed |= publication.status == Status::Created;
        let shown_ref = match target {
            publish::Target::Local => ref_name.to_owned(),
            publish::Target::Remote { url, ref_name } => format!("{url} {ref_name}"),
        };
        print_publication(out, source, &shown_ref, json, &publication);
    }
    Ok(())
}

/// Removes the repository that this `publish` created at `repo` when a publication failed and
/// no ref was written to it (no earlier source landed): a failed first publication leaves no
/// repository behind. The repository is renamed aside first and checked there, so that a
/// publisher that wrote a ref to it meanwhile gets it back untouched. A directory that was
/// empty before is left as an empty directory; parent directories made for it (`new_parents`,
/// deepest first) are removed while empty. A repository that existed is never removed.
fn discard_new_repository(repo: &std::path::Path, was_empty_dir: bool, new_parents: &[PathBuf]) {
    let Some(name) = repo.file_name() else {
        return;
    };
    let aside = repo.with_file_name(format!(
        ".{}.discard-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    if std::fs::rename(repo, &aside).is_err() {
        return;
    }
    if has_refs(&aside) {
        let _ = std::fs::rename(&aside, repo);
        return;
    }
    let _ = std::fs::remove_dir_all(&aside);
    if was_empty_dir {
        let _ = std::fs::create_dir(repo);
    }
    for parent in new_parents {
        if std::fs::remove_dir(parent).is_err() {
            break;
        }
    }
}

/// Whether the bare repository at `git_dir` holds any ref (a loose ref file below `refs/` or a
/// non-empty `packed-refs`); unreadable counts as holding one, so nothing is removed.
fn has_refs(git_dir: &std::path::Path) -> bool {
    let packed = match std::fs::metadata(git_dir.join("packed-refs")) {
        Ok(m) => m.len() > 0,
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    };
    packed || holds_file(&git_dir.join("refs"))
}

/// Whether anything but directories is below `dir` (unreadable counts as yes).
fn holds_file(dir: &std::path::Path) -> bool {
    match std::fs::read_dir(dir) {
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        Ok(entries) => entries.into_iter().any(|e| match e {
            Ok(e) => match e.file_type() {
                Ok(t) if t.is_dir() => holds_file(&e.path()),
                _ => true,
            },
            Err(_) => true,
        }),
    }
}

fn print_publication(
    out: &mut Printer,
    source: &std::path::Path,
    ref_name: &str,
    json: bool,
    p: &Publication,
) {
    let status = match p.status {
        Status::Created => "created",
        Status::Unchanged => "unchanged",
        Status::Empty => "empty",
    };
    if json {
        let m = &p.manifest;
        let line = format!(
            "{{\"type\":\"publication\",\"source\":{},\"ref\":{},\"status\":\"{status}\",\"commit\":{},\"attempts\":{},\"manifest\":{}}}",
            canonical::to_canonical_unchecked(&Value::str(source.display().to_string())),
            canonical::to_canonical_unchecked(&Value::str(ref_name)),
            p.commit
                .map_or("null".to_owned(), |c| format!("\"{}\"", c.to_hex())),
            p.attempts,
            m.to_json()
        );
        out.data(&line);
    } else {
        out.data(&p.manifest.to_json());
    }
    if p.status == Status::Empty {
        out.note(&format!(
            "nothing published from {}: it holds no events (no spool events, no shards); no commit, {} {}",
            source.display(),
            ref_name,
            p.commit
                .map_or("unchanged".to_owned(), |c| format!("stays at {}", c.to_hex())),
        ));
        return;
    }
    out.note(&format!(
        "{status} {}: {} shard(s) new, {} already present, {} file(s) written, {} at {}",
        source.display(),
        p.manifest.created,
        p.manifest.unchanged,
        p.files_written,
        ref_name,
        p.commit.map_or("(no commit)".to_owned(), |c| c.to_hex()),
    ));
}

// ---------------------------------------------------------------------------------------------
// Execution finality (design.md §8): action, sweep, run

/// The clock of the finality records: `ACTION_LEDGER_NOW` (`YYYY-MM-DDTHH:MM:SS[.mmm]Z`) when
/// set, else the system clock.
fn finality_now(env: &Env) -> Result<i64, Failure> {
    match env.get("ACTION_LEDGER_NOW").filter(|s| !s.is_empty()) {
        None => Ok(now_ms()),
        Some(s) => finality::parse_time(s)
            .or_else(|| {
                (s.len() == 20 && s.ends_with('Z'))
                    .then(|| crate::event::timestamp_epoch_seconds(s))
                    .flatten()
                    .map(|secs| secs * 1000)
            })
            .ok_or_else(|| {
                Failure::input(format!(
                    "ACTION_LEDGER_NOW must be YYYY-MM-DDTHH:MM:SS[.mmm]Z, got {s}"
                ))
            }),
    }
}

fn finality_options(env: &Env, state: &StateRepo) -> Result<finality::Options, Failure> {
    let mut options = finality::Options::new(signature(env)?);
    options.ref_name = state.ref_name.clone();
    Ok(options)
}

fn open_state(state: &StateRepo) -> Result<Store, Failure> {
    Store::open(&state.repo).map_err(|e| {
        Failure::input(format!(
            "cannot open state repository {}: {e}",
            state.repo.display()
        ))
    })
}

/// Random bytes from the kernel's generator.
fn random_bytes<const N: usize>() -> Result<[u8; N], Failure> {
    let mut buf = [0u8; N];
    let mut filled = 0;
    while filled < N {
        filled +=
            rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty())
                .map_err(|e| Failure::input(format!("cannot read random bytes: {e}")))?;
    }
    Ok(buf)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh UUID v4 (a valid attempt id).
fn uuid_v4() -> Result<String, Failure> {
    let mut b = random_bytes::<16>()?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

impl Binding {
    fn agent(&self, env: &Env) -> Option<String> {
        self.agent
            .clone()
            .or_else(|| env.get("ACTION_LEDGER_AGENT_ID").cloned())
    }

    fn principal(&self, env: &Env) -> Option<String> {
        self.principal
            .clone()
            .or_else(|| env.get("ACTION_LEDGER_PRINCIPAL").cloned())
    }

    /// `--act` (a JSON object), else the shell act of `command`, else none.
    fn act(&self, command: &[String]) -> Result<Option<Value>, Failure> {
        match &self.act {
            Some(text) => {
                let v =
                    canonical::parse(text).map_err(|e| Failure::input(format!("--act: {e}")))?;
                if !matches!(v, Value::Object(_)) {
                    return Err(Failure::input("--act must be a JSON object"));
                }
                if let Err(finality::Error::InvalidInput { reason, .. }) = finality::check_act(&v) {
                    return Err(Failure::input(format!("--act: {reason}")));
                }
                Ok(Some(v))
            }
            None if command.is_empty() => Ok(None),
            None => Ok(Some(finality::shell_act(command))),
        }
    }
}

fn line(v: &Value) -> String {
    canonical::to_canonical_unchecked(v)
}

fn with_type(
    kind: &str,
    v: Value,
    extra: impl IntoIterator<Item = (&'static str, Value)>,
) -> Value {
    let Value::Object(mut m) = v else {
        return v;
    };
    m.insert("type".into(), Value::str(kind));
    m.extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v)));
    Value::Object(m)
}

fn commit_value(c: Option<store::CommitId>) -> Value {
    c.map_or(Value::Null, |c| Value::str(c.to_hex()))
}

/// A refused or failed finality operation: with `--json` also a `refusal` object on stdout.
fn finality_failure(
    out: &mut Printer,
    json: bool,
    command: &str,
    action_id: &str,
    e: &finality::Error,
) -> Failure {
    if json {
        let mut v = vec![
            ("type", Value::str("refusal")),
            ("command", Value::str(command)),
            ("action_id", Value::str(action_id)),
            ("code", Value::str(e.code())),
            ("error", Value::str(e.to_string())),
        ];
        if let Some(s) = e.current_status() {
            v.push(("current_status", Value::str(s)));
        }
        out.data(&line(&Value::object(v)));
    }
    Failure {
        code: if e.is_refusal() { 1 } else { 2 },
        message: format!("{e} ({})", e.code()),
    }
}

fn state_value(st: &finality::State, now: i64) -> Value {
    let v = Value::object([
        ("type", Value::str("action")),
        ("action", st.action.to_value()),
        (
            "claim",
            st.claim
                .as_ref()
                .map_or(Value::Null, finality::Claim::to_value),
        ),
        ("lifecycle", Value::str(st.lifecycle().as_str())),
        ("outcome", st.view(now).to_value()),
    ]);
    // An operator's decision (written by `serve`) is shown only where there is one.
    match (v, &st.approval) {
        (Value::Object(mut m), Some(p)) => {
            m.insert("approval".into(), p.to_value());
            Value::Object(m)
        }
        (v, _) => v,
    }
}

fn run_action(out: &mut Printer, env: &Env, command: ActionCommand) -> Result<(), Failure> {
    let now = finality_now(env)?;
    match command {
        ActionCommand::Create {
            state,
            binding,
            id,
            guard_decision,
            verdict,
            containment_ref,
            lifecycle,
            legacy,
            json,
            command,
        } => {
            let id = match id {
                Some(id) => id,
                None => format!("act_{}", hex(&random_bytes::<16>()?)),
            };
            let action_id = finality::ActionId::parse(&id).ok_or_else(|| {
                Failure::input(format!("--id {id:?} must match ^[A-Za-z0-9_-]{{1,128}}$"))
            })?;
            let input = finality::NewAction {
                action_id,
                agent_id: binding.agent(env).ok_or_else(|| {
                    Failure::input("--agent (or $ACTION_LEDGER_AGENT_ID) is required")
                })?,
                principal: binding.principal(env).ok_or_else(|| {
                    Failure::input("--principal (or $ACTION_LEDGER_PRINCIPAL) is required")
                })?,
                act: binding.act(&command)?,
                guard_decision_id: guard_decision,
                verdict: finality::Verdict::parse(&verdict).expect("clap checked the verdict"),
                client_capabilities: if legacy {
                    Vec::new()
                } else {
                    vec![finality::EXECUTION_CLAIMS.to_owned()]
                },
                identity_verified: binding.verified,
                containment_ref,
                lifecycle: lifecycle.as_deref().and_then(finality::Lifecycle::parse),
            };
            let options = finality_options(env, &state)?;
            let store = Store::open_or_init_bare(&state.repo, &state.ref_name).map_err(|e| {
                Failure::input(format!(
                    "cannot open state repository {}: {e}",
                    state.repo.display()
                ))
            })?;
            let written = finality::create_action(&store, &options, &input, now)
                .map_err(|e| finality_failure(out, json, "create", &id, &e))?;
            let st = finality::show(&store, &state.ref_name, &id)
                .map_err(|e| finality_failure(out, json, "create", &id, &e))?;
            if json {
                out.data(&line(&with_type(
                    "action",
                    state_value(&st, now),
                    [
                        ("created", Value::Bool(written.commit.is_some())),
                        ("commit", commit_value(written.commit)),
                    ],
                )));
            } else {
                out.data(&id);
            }
            let a = &written.value;
            out.note(&format!(
                "{} action {id} (lifecycle {}, {}) {}",
                if written.commit.is_some() {
                    "created"
                } else {
                    "unchanged:"
                },
                a.lifecycle,
                if a.execution_protocol.is_some() {
                    "protocol 1"
                } else {
                    "legacy without protocol: never claimable"
                },
                written
                    .commit
                    .map_or("already recorded".to_owned(), |c| format!("at {c}")),
            ));
            Ok(())
        }
        ActionCommand::Claim {
            state,
            binding,
            action_id,
            attempt,
            json,
            command,
        } => {
            let attempt = match attempt {
                Some(a) => a,
                None => uuid_v4()?,
            };
            let request = finality::ClaimRequest {
                attempt_id: attempt.clone(),
                agent_id: binding.agent(env),
                principal: binding.principal(env),
                act: binding.act(&command)?,
                verified: binding.verified,
            };
            let result = finality_options(env, &state).and_then(|options| {
                let store = open_state(&state).map_err(|f| Failure {
                    code: 2,
                    message: f.message,
                })?;
                Ok(finality::claim(&store, &options, &action_id, &request, now))
            });
            let result = match result {
                Ok(r) => r,
                Err(f) => Err(finality::Error::ClaimUnavailable {
                    action_id: action_id.clone(),
                    reason: f.message,
                }),
            };
            print_claim(out, json, false, &action_id, &attempt, result.as_ref());
            match result {
                Ok(w) => {
                    if !json {
                        out.data(w.value.attempt_id.as_str());
                    }
                    Ok(())
                }
                Err(e) => Err(Failure {
                    code: if e.is_refusal() { 1 } else { 2 },
                    message: format!("{e} ({})", e.code()),
                }),
            }
        }
        ActionCommand::Outcome {
            state,
            action_id,
            status,
            summary,
            error,
            progress,
            attempt,
            json,
        } => {
            let progress = progress
                .map(|p| {
                    canonical::parse(&p).map_err(|e| Failure::input(format!("--progress: {e}")))
                })
                .transpose()?;
            let report = finality::OutcomeReport {
                status,
                summary,
                error_message: error,
                progress,
                attempt_id: attempt,
            };
            let options = finality_options(env, &state)?;
            let store = open_state(&state)?;
            let written = finality::report_outcome(&store, &options, &action_id, &report, now)
                .map_err(|e| finality_failure(out, json, "outcome", &action_id, &e))?;
            print_reported(out, json, &written);
            Ok(())
        }
        ActionCommand::Close {
            state,
            action_id,
            status,
            summary,
            json,
        } => {
            let options = finality_options(env, &state)?;
            let store = open_state(&state)?;
            let written = finality::close(
                &store,
                &options,
                &action_id,
                &status,
                summary.as_deref(),
                now,
            )
            .map_err(|e| finality_failure(out, json, "close", &action_id, &e))?;
            print_reported(out, json, &written);
            Ok(())
        }
        ActionCommand::Show {
            state,
            action_id,
            json,
        } => {
            let store = open_state(&state)?;
            let st = finality::show(&store, &state.ref_name, &action_id)
                .map_err(|e| finality_failure(out, json, "show", &action_id, &e))?;
            if json {
                out.data(&line(&state_value(&st, now)));
                return Ok(());
            }
            let a = &st.action;
            let view = st.view(now);
            let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
            let mut lines = vec![
                format!("action:       {}", a.action_id),
                format!("agent:        {}", a.agent_id),
                format!("principal:    {}", a.created_by),
                format!("act hash:     {}", opt(&a.act_content_hash)),
                format!(
                    "decision:     {} ({})",
                    opt(&a.guard_decision_id),
                    a.guard_verdict
                ),
                format!(
                    "protocol:     {}",
                    a.execution_protocol
                        .map_or("none (legacy)".to_owned(), |p| p.to_string())
                ),
                format!("created:      {}", finality::format_time(a.created_at_ms)),
                format!(
                    "claim:        {}",
                    st.claim.as_ref().map_or("-".to_owned(), |c| format!(
                        "{} at {}",
                        c.attempt_id,
                        finality::format_time(c.claimed_at_ms)
                    ))
                ),
                format!("lifecycle:    {}", st.lifecycle()),
                format!("outcome:      {}", view.status),
            ];
            if let Some(p) = &st.approval {
                lines.push(format!(
                    "approval:     {} by {} at {}",
                    p.decision,
                    p.decided_by,
                    finality::format_time(p.decided_at_ms)
                ));
            }
            if let Some(o) = &st.outcome {
                lines.push(format!(
                    "outcome at:   {}",
                    finality::format_time(o.outcome_at_ms)
                ));
                lines.push(format!("source:       {}", o.source));
                if let Some(a) = &o.attempt_id {
                    lines.push(format!("reported by:  {a}"));
                }
                lines.push(format!("summary:      {}", opt(&o.summary)));
                lines.push(format!("error:        {}", opt(&o.error_message)));
                if let Some(p) = &o.progress {
                    lines.push(format!("progress:     {}", line(p)));
                }
            }
            lines.push(format!("elapsed_ms:   {}", view.elapsed_ms));
            if let Some(skew) = &view.clock_skew {
                lines.push(format!("clock skew:   {skew}"));
            }
            for l in lines {
                out.data(&l);
            }
            Ok(())
        }
    }
}

/// Prints a claim result: with `--json` a `claim` object (on stderr for `run`, whose stdout is
/// the command's), else a note.
fn print_claim(
    out: &mut Printer,
    json: bool,
    to_stderr: bool,
    action_id: &str,
    attempt: &str,
    result: Result<&finality::Written<finality::Claim>, &finality::Error>,
) {
    let v = match result {
        Ok(w) => Value::object([
            ("type", Value::str("claim")),
            ("claimed", Value::Bool(true)),
            ("action_id", Value::str(action_id)),
            ("attempt_id", Value::str(w.value.attempt_id.as_str())),
            (
                "claimed_at",
                Value::str(finality::format_time(w.value.claimed_at_ms)),
            ),
            ("commit", commit_value(w.commit)),
        ]),
        Err(e) => Value::object([
            ("type", Value::str("claim")),
            ("claimed", Value::Bool(false)),
            ("action_id", Value::str(action_id)),
            ("attempt_id", Value::str(attempt)),
            ("code", Value::str(e.code())),
            ("error", Value::str(e.to_string())),
        ]),
    };
    if json {
        if to_stderr {
            let _ = writeln!(out.stderr, "{}", line(&v));
        } else {
            out.data(&line(&v));
        }
    } else if let Ok(w) = result {
        out.note(&format!(
            "claimed {action_id} for attempt {} at {}",
            w.value.attempt_id,
            w.commit.map_or("-".to_owned(), |c| c.to_hex())
        ));
    }
}

fn reported_value(w: &finality::Written<finality::Reported>) -> Value {
    let r = &w.value;
    with_type(
        "outcome",
        r.view.to_value(),
        [
            ("lifecycle", Value::str(r.outcome.lifecycle.as_str())),
            ("source", Value::str(r.outcome.source.as_str())),
            (
                "attempt_id",
                r.outcome
                    .attempt_id
                    .as_ref()
                    .map_or(Value::Null, |a| Value::str(a.as_str())),
            ),
            ("security", r.security.to_value()),
            ("commit", commit_value(w.commit)),
        ],
    )
}

fn print_reported(out: &mut Printer, json: bool, w: &finality::Written<finality::Reported>) {
    let r = &w.value;
    if json {
        out.data(&line(&reported_value(w)));
    } else {
        out.data(&format!(
            "{} {} {}",
            r.outcome.action_id, r.outcome.status, r.outcome.lifecycle
        ));
    }
    if !r.security.is_clean() {
        out.note(&format!(
            "redacted {} secret(s) or confidential identifier(s) before storing",
            r.security.findings
        ));
    }
    if let Some(skew) = &r.view.clock_skew {
        out.note(&format!("clock skew: {skew}; elapsed_ms is never negative"));
    }
    out.note(&format!(
        "recorded outcome {} of {} (lifecycle {}) at {}",
        r.outcome.status,
        r.outcome.action_id,
        r.outcome.lifecycle,
        w.commit.map_or("-".to_owned(), |c| c.to_hex())
    ));
}

fn run_sweep(
    out: &mut Printer,
    env: &Env,
    state: &StateRepo,
    timeout_minutes: u32,
    json: bool,
) -> Result<(), Failure> {
    let now = finality_now(env)?;
    let options = finality_options(env, state)?;
    let store = open_state(state)?;
    let written = finality::sweep(&store, &options, f64::from(timeout_minutes), now)
        .map_err(|e| finality_failure(out, json, "sweep", "", &e))?;
    let r = &written.value;
    for s in &r.swept {
        if json {
            out.data(&line(&Value::object([
                ("type", Value::str("swept")),
                ("action_id", Value::str(s.action_id.as_str())),
                ("agent_id", Value::str(s.agent_id.as_str())),
                (
                    "created_at",
                    Value::str(finality::format_time(s.created_at_ms)),
                ),
                (
                    "outcome_at",
                    Value::str(finality::format_time(s.outcome_at_ms)),
                ),
                ("status", Value::str("lost_confirmation")),
                ("lifecycle", Value::str(s.lifecycle.as_str())),
            ])));
        } else {
            out.data(&format!(
                "{} lost_confirmation {}",
                s.action_id, s.lifecycle
            ));
        }
    }
    for (id, status) in &r.lost {
        if json {
            out.data(&line(&Value::object([
                ("type", Value::str("sweep_lost")),
                ("action_id", Value::str(id.as_str())),
                ("current_status", Value::str(status.as_str())),
            ])));
        }
        out.note(&format!(
            "{id}: another writer set the outcome first (current status {status})"
        ));
    }
    for dir in &r.skipped {
        out.note(&format!(
            "{dir}: skipped, its records are not valid (run verify)"
        ));
    }
    if json {
        out.data(&line(&Value::object([
            ("type", Value::str("sweep")),
            ("swept", Value::from(r.swept.len() as i64)),
            ("lost", Value::from(r.lost.len() as i64)),
            ("skipped", Value::from(r.skipped.len() as i64)),
            ("timeout_minutes", Value::from(i64::from(r.timeout_minutes))),
            ("commit", commit_value(written.commit)),
        ])));
    }
    out.note(&format!(
        "swept {} pending outcome(s) older than {} minute(s) to lost_confirmation{}",
        r.swept.len(),
        r.timeout_minutes,
        written.commit.map_or(String::new(), |c| format!(" at {c}"))
    ));
    Ok(())
}

/// Runs `command` with stdin inherited, passing its stdout and stderr through as they come.
fn run_child(out: &mut Printer, command: &[String]) -> std::io::Result<std::process::ExitStatus> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = std::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (tx, rx) = std::sync::mpsc::channel::<(bool, Vec<u8>)>();
    fn pump(mut r: impl Read, is_err: bool, tx: std::sync::mpsc::Sender<(bool, Vec<u8>)>) {
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 || tx.send((is_err, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    }
    let mut pumps = Vec::new();
    if let Some(o) = child.stdout.take() {
        let tx = tx.clone();
        pumps.push(std::thread::spawn(move || pump(o, false, tx)));
    }
    if let Some(e) = child.stderr.take() {
        let tx = tx.clone();
        pumps.push(std::thread::spawn(move || pump(e, true, tx)));
    }
    drop(tx);
    for (is_err, chunk) in rx {
        if is_err {
            let _ = out
                .stderr
                .write_all(&chunk)
                .and_then(|()| out.stderr.flush());
        } else {
            out.raw(&chunk);
        }
    }
    for p in pumps {
        let _ = p.join();
    }
    child.wait()
}

/// The governed helper (execution-finality.md §3 steps 6–9): claim, run, report.
#[allow(clippy::too_many_arguments)]
fn run_governed(
    out: &mut Printer,
    env: &Env,
    state: &StateRepo,
    binding: &Binding,
    action_id: &str,
    attempt: Option<String>,
    json: bool,
    command: &[String],
) -> Result<(), Failure> {
    let attempt = match attempt {
        Some(a) => a,
        None => uuid_v4()?,
    };
    let request = finality::ClaimRequest {
        attempt_id: attempt.clone(),
        agent_id: binding.agent(env),
        principal: binding.principal(env),
        act: binding.act(command)?,
        verified: binding.verified,
    };
    let now = finality_now(env)?;
    let options = finality_options(env, state)?;
    // Exit 3: no claim was granted, so the command is not run.
    let claimed = match Store::open(&state.repo) {
        Ok(store) => {
            finality::claim(&store, &options, action_id, &request, now).map(|w| (store, w))
        }
        Err(e) => Err(finality::Error::ClaimUnavailable {
            action_id: action_id.to_owned(),
            reason: format!("cannot open state repository {}: {e}", state.repo.display()),
        }),
    };
    let (store, claim) = match claimed {
        Ok(c) => c,
        Err(e) => {
            print_claim(out, json, true, action_id, &attempt, Err(&e));
            return Err(Failure {
                code: 3,
                message: format!("{e} ({}); the command was not run", e.code()),
            });
        }
    };
    print_claim(out, json, true, action_id, &attempt, Ok(&claim));
    let status = run_child(out, command);
    let report = |out: &mut Printer, report: finality::OutcomeReport| {
        let now = finality_now(env).unwrap_or_else(|_| now_ms());
        let result = finality::report_outcome(&store, &options, action_id, &report, now);
        if json {
            let v = match &result {
                Ok(w) => reported_value(w),
                Err(e) => Value::object([
                    ("type", Value::str("refusal")),
                    ("command", Value::str("outcome")),
                    ("action_id", Value::str(action_id)),
                    ("code", Value::str(e.code())),
                    ("error", Value::str(e.to_string())),
                ]),
            };
            let _ = writeln!(out.stderr, "{}", line(&v));
        } else if let Ok(w) = &result
            && let Some(skew) = &w.value.view.clock_skew
        {
            out.note(&format!("clock skew: {skew}; elapsed_ms is never negative"));
        }
        result
    };
    let attempt_id = Some(claim.value.attempt_id.as_str().to_owned());
    let attempt_text = claim.value.attempt_id.as_str().to_owned();
    // (exit code, outcome reported, whether it was recorded, failure message)
    let (code, outcome, recorded, message) = match status {
        Ok(st) if st.success() => {
            let result = report(
                out,
                finality::OutcomeReport {
                    status: "completed".into(),
                    summary: Some("command exited with status 0".into()),
                    attempt_id,
                    ..finality::OutcomeReport::default()
                },
            );
            match result {
                Ok(_) => {
                    out.note(&format!(
                        "{action_id}: command completed; outcome completed recorded"
                    ));
                    (0, "completed", true, String::new())
                }
                // Never a failed outcome: the command did run to completion (§3 step 8).
                Err(e) => (
                    4,
                    "completed",
                    false,
                    format!(
                        "the command completed, but its outcome could not be recorded: {e} ({}); reconcile action {action_id} (attempt {attempt_text}) before doing anything else, and never rerun it blindly",
                        e.code(),
                    ),
                ),
            }
        }
        Ok(st) => {
            use std::os::unix::process::ExitStatusExt;
            let (code, what) = match (st.code(), st.signal()) {
                (Some(c), _) => (c, format!("command exited with status {c}")),
                (None, Some(s)) => (128 + s, format!("command killed by signal {s}")),
                (None, None) => (1, "command ended without a status".to_owned()),
            };
            let result = report(
                out,
                finality::OutcomeReport {
                    status: "failed".into(),
                    error_message: Some(what.clone()),
                    attempt_id,
                    ..finality::OutcomeReport::default()
                },
            );
            match result {
                Ok(_) => {
                    out.note(&format!("{action_id}: {what}; outcome failed recorded"));
                    (code, "failed", true, String::new())
                }
                // The command's failure is what the caller hears about; the report's is attached.
                Err(e) => (
                    code,
                    "failed",
                    false,
                    format!(
                        "{action_id}: {what}, and the failed outcome could not be recorded: {e} ({}); reconcile action {action_id} (attempt {attempt_text})",
                        e.code()
                    ),
                ),
            }
        }
        Err(spawn) => {
            let what = format!("could not start {}: {spawn}", command[0]);
            let result = report(
                out,
                finality::OutcomeReport {
                    status: "failed".into(),
                    error_message: Some(what.clone()),
                    attempt_id,
                    ..finality::OutcomeReport::default()
                },
            );
            let code = if spawn.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            match result {
                Ok(_) => (code, "failed", true, what),
                Err(e) => (
                    code,
                    "failed",
                    false,
                    format!(
                        "{what}, and the failed outcome could not be recorded: {e} ({}); reconcile action {action_id} (attempt {attempt_text})",
                        e.code()
                    ),
                ),
            }
        }
    };
    if json {
        let v = Value::object([
            ("type", Value::str("run")),
            ("action_id", Value::str(action_id)),
            ("attempt_id", Value::str(attempt_text.as_str())),
            ("exit_code", Value::from(i64::from(code))),
            ("outcome", Value::str(outcome)),
            ("recorded", Value::Bool(recorded)),
        ]);
        let _ = writeln!(out.stderr, "{}", line(&v));
    }
    if code == 0 {
        Ok(())
    } else {
        Err(Failure { code, message })
    }
}

// ---------------------------------------------------------------------------------------------
// serve

struct ServeArgs {
    repo: PathBuf,
    ref_name: String,
    remote: Option<String>,
    remote_ref: Option<String>,
    listen: String,
    api_keys: Option<PathBuf>,
    policy: Option<PathBuf>,
    sweep_every: u32,
    timeout_minutes: u32,
    insecure_no_auth: bool,
    json: bool,
    max_batch: u32,
}

/// The server's clock: the system clock, or one that starts at `ACTION_LEDGER_NOW` and advances
/// with the system clock.
fn serve_clock(env: &Env) -> Result<std::sync::Arc<dyn crate::server::Clock>, Failure> {
    let offset = match env.get("ACTION_LEDGER_NOW").filter(|s| !s.is_empty()) {
        None => 0,
        Some(_) => finality_now(env)? - now_ms(),
    };
    Ok(std::sync::Arc::new(move || now_ms() + offset))
}

fn run_serve(out: &mut Printer, env: &Env, a: ServeArgs) -> Result<(), Failure> {
    use crate::server::{self, auth::Keys, policy::Policy};
    use std::net::ToSocketAddrs;
    let mut keys = match &a.api_keys {
        Some(path) => Keys::load(path).map_err(Failure::input)?,
        None => Keys::new(),
    };
    if let Some(key) = env.get("ACTION_LEDGER_API_KEY").filter(|k| !k.is_empty()) {
        let principal = env
            .get("ACTION_LEDGER_PRINCIPAL")
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                Failure::input(
                    "ACTION_LEDGER_API_KEY is set without ACTION_LEDGER_PRINCIPAL: name the key's principal",
                )
            })?;
        keys.add_clear(key, principal, false)
            .map_err(|e| Failure::input(format!("ACTION_LEDGER_API_KEY: {e}")))?;
    }
    let addr = a
        .listen
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| {
            Failure::input(format!(
                "--listen {}: not an address (HOST:PORT, e.g. 127.0.0.1:8787)",
                a.listen
            ))
        })?;
    match (keys.is_empty(), a.insecure_no_auth) {
        (true, false) => {
            return Err(Failure::input(
                "no API key configured: give --api-keys FILE or ACTION_LEDGER_API_KEY with ACTION_LEDGER_PRINCIPAL (for a loopback development server only: --insecure-no-auth)",
            ));
        }
        (true, true) if !server::is_loopback(&addr) => {
            return Err(Failure::input(format!(
                "--insecure-no-auth is only allowed on a loopback address, not {addr}"
            )));
        }
        (false, true) => {
            return Err(Failure::input(
                "--insecure-no-auth contradicts the configured API keys: drop one of them",
            ));
        }
        _ => {}
    }
    let policy = match &a.policy {
        Some(path) => Policy::load(path).map_err(Failure::input)?,
        None => Policy::default(),
    };
    let mut options = finality::Options::new(signature(env)?);
    options.ref_name = a.ref_name.clone();
    options.max_attempts = 32;
    let target = match &a.remote {
        Some(url) => finality::batch::Target::Remote {
            url: absolute_url(url),
            ref_name: a.remote_ref.clone().unwrap_or_else(|| a.ref_name.clone()),
        },
        None => finality::batch::Target::Local,
    };
    let quiet = out.quiet;
    let settings = server::Settings {
        repo: a.repo.clone(),
        options,
        target,
        keys,
        insecure_no_auth: a.insecure_no_auth,
        policy,
        cron_secret: env
            .get("ACTION_LEDGER_CRON_SECRET")
            .filter(|s| !s.is_empty())
            .cloned(),
        timeout_minutes: a.timeout_minutes,
        sweep_every: (a.sweep_every > 0)
            .then(|| std::time::Duration::from_secs(u64::from(a.sweep_every) * 60)),
        max_batch: a.max_batch as usize,
        batch_linger: std::time::Duration::from_millis(5),
        client_timeout: std::time::Duration::from_secs(30),
        clock: serve_clock(env)?,
        // Straight to file descriptor 2: `main` holds the lock of `std::io::stderr` for the whole
        // run, so `eprintln!` from the server's threads would wait for it forever.
        log: std::sync::Arc::new(move |line: &str| {
            if !quiet {
                use std::os::fd::AsFd as _;
                let _ =
                    rustix::io::write(std::io::stderr().as_fd(), format!("{line}\n").as_bytes());
            }
        }),
    };
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| Failure::input(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Failure::input(format!("cannot listen on {addr}: {e}")))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::input(format!("cannot start the async runtime: {e}")))?;
    // Opening the repository and starting the writer are Git work: done here, before serving.
    let started = server::start(settings).map_err(Failure::input)?;
    let url = format!("http://{bound}");
    let (insecure, json) = (a.insecure_no_auth, a.json);
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| Failure::input(format!("cannot listen on {bound}: {e}")))?;
        if insecure {
            out.note("warning: serving WITHOUT authentication (--insecure-no-auth): every caller is the operator `anonymous`");
        }
        out.note(&format!("listening on {url}"));
        if json {
            out.data(&line(&Value::object([
                ("type", Value::str("listening")),
                ("url", Value::str(url.as_str())),
            ])));
        }
        server::serve(started, listener, server::shutdown_signal())
            .await
            .map_err(Failure::input)
    })?;
    out.note("stopped");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Compaction and log (design.md §7)

/// `--now`: `YYYY-MM-DD` (midnight UTC) or a timestamp; default the clock.
fn compact_now(now: Option<&str>) -> Result<i64, Failure> {
    let Some(s) = now else {
        return Ok(now_ms() / 1000);
    };
    let date = (s.len() == 10)
        .then(|| crate::event::timestamp_epoch_seconds(&format!("{s}T00:00:00Z")))
        .flatten();
    date.or_else(|| crate::event::timestamp_epoch_seconds(s))
        .ok_or_else(|| {
            Failure::input(format!(
                "--now must be YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS[.mmm]Z, got {s}"
            ))
        })
}

fn compact_failure(e: crate::compact::Error) -> Failure {
    use crate::compact::Error as E;
    let code = match &e {
        E::Contention { .. } | E::RefLocked { .. } => 1,
        _ => 2,
    };
    Failure {
        code,
        message: format!("{e}; the ledger ref was not changed by the failed step"),
    }
}

fn month_value(m: &crate::compact::MonthFold) -> Value {
    Value::object([
        ("type", Value::str("month")),
        ("month", Value::str(m.month.to_string())),
        ("generation", Value::from(i64::from(m.generation))),
        ("shards", Value::from(m.shards as i64)),
        ("events", Value::from(m.events as i64)),
        ("bytes", Value::from(m.bytes as i64)),
        ("segments", path_list(&m.segments)),
        ("removed", Value::from(m.removed.len() as i64)),
        ("manifest", Value::str(m.month.manifest_path())),
        (
            "manifest_sha256",
            m.manifest_sha256
                .as_ref()
                .map_or(Value::Null, |d| Value::str(d.as_str())),
        ),
    ])
}

fn month_line(m: &crate::compact::MonthFold) -> String {
    let names: Vec<&str> = m
        .segments
        .iter()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    let mut line = format!(
        "{}: folded {} shard(s), {} event(s), {} byte(s) into {} (manifest generation {})",
        m.month,
        m.shards,
        m.events,
        m.bytes,
        if names.is_empty() {
            "no new segment".to_owned()
        } else {
            names.join(", ")
        },
        m.generation
    );
    let proven = m.removed.len() - m.shards;
    if proven > 0 {
        line.push_str(&format!(
            "; removed {proven} hot copy(ies) the manifest already proved"
        ));
    }
    line
}

fn run_compact(
    out: &mut Printer,
    env: &Env,
    state: &StateRepo,
    retention_days: u32,
    now: Option<&str>,
    dry_run: bool,
    json: bool,
) -> Result<(), Failure> {
    let mut options = crate::compact::Options::new(signature(env)?, compact_now(now)?);
    options.ref_name = state.ref_name.clone();
    options.retention_days = retention_days;
    let store = open_state(state)?;
    let (status, months, refused, commits, tip, attempts, remaining) = if dry_run {
        let tip = store.tip(&state.ref_name).map_err(Failure::input)?;
        let snap = store.snapshot(tip).map_err(Failure::input)?;
        let plan = crate::compact::plan(&snap, &options).map_err(compact_failure)?;
        (
            "dry-run",
            plan.months,
            plan.refused,
            Vec::new(),
            tip,
            0,
            plan.remaining,
        )
    } else {
        let c = crate::compact::compact(&store, &options).map_err(compact_failure)?;
        let status = match c.status {
            crate::compact::Status::Created => "created",
            crate::compact::Status::Unchanged => "unchanged",
        };
        (status, c.months, c.refused, c.commits, c.tip, c.attempts, 0)
    };
    for m in &months {
        if json {
            out.data(&line(&month_value(m)));
        } else {
            out.data(&month_line(m));
        }
    }
    for r in &refused {
        if json {
            out.data(&line(&Value::object([
                ("type", Value::str("refusal")),
                ("path", Value::str(&r.path)),
                ("reason", Value::str(&r.reason)),
            ])));
        }
        let _ = writeln!(out.stderr, "{}: not compacted: {}", r.path, r.reason);
    }
    let removed: usize = months.iter().map(|m| m.removed.len()).sum();
    let segments: usize = months.iter().map(|m| m.segments.len()).sum();
    if json {
        let commit_list: Vec<String> = commits.iter().map(|c| c.to_hex()).collect();
        out.data(&line(&Value::object([
            ("type", Value::str("compaction")),
            ("status", Value::str(status)),
            ("ref", Value::str(&state.ref_name)),
            ("commits", path_list(&commit_list)),
            (
                "commit",
                commit_value(
                    tip.filter(|_| status != "dry-run")
                        .or(commits.last().copied()),
                ),
            ),
            ("attempts", Value::from(i64::from(attempts))),
            ("months", Value::from(months.len() as i64)),
            ("removed", Value::from(removed as i64)),
            ("segments", Value::from(segments as i64)),
            ("refused", Value::from(refused.len() as i64)),
            ("remaining", Value::from(remaining as i64)),
        ])));
    }
    let at = tip.map_or("(no commit)".to_owned(), |c| c.to_hex());
    out.note(&match status {
        "dry-run" => format!(
            "dry run at {at}: would remove {removed} shard file(s) and add {segments} segment(s) in {} month(s){}; nothing written",
            months.len(),
            if remaining > 0 {
                format!(", {remaining} more shard(s) in further commits")
            } else {
                String::new()
            }
        ),
        "created" => format!(
            "compacted {} month(s): removed {removed} shard file(s), added {segments} segment(s) in {} commit(s); {} at {at}",
            months.len(),
            commits.len(),
            state.ref_name
        ),
        _ => format!("nothing to compact: {} unchanged at {at}", state.ref_name),
    });
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Failure {
            code: 1,
            message: format!(
                "{} shard(s) could not be compacted and stay hot (see above)",
                refused.len()
            ),
        })
    }
}

/// Resolves the `log` flags into a filter.
fn log_filter(
    subject: Option<String>,
    operation: Option<String>,
    attempt: Option<String>,
    event_types: Vec<String>,
    producer: Option<String>,
    since: Option<String>,
    until: Option<String>,
) -> Result<crate::log::Filter, Failure> {
    let (repository, number) = match subject {
        None => (None, None),
        Some(s) => {
            let (repo, number) = match s.split_once('#') {
                Some((r, n)) => (
                    r.to_owned(),
                    Some(n.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        Failure::input(format!(
                            "--subject {s}: the number after # must be a positive integer"
                        ))
                    })?),
                ),
                None => (s.clone(), None),
            };
            let repo = crate::identity::normalize_repository(&repo).map_err(|e| {
                Failure::input(format!(
                    "--subject {s}: {e}; give OWNER/NAME or OWNER/NAME#NUMBER"
                ))
            })?;
            (Some(repo), number)
        }
    };
    let hex = |flag: &str, v: Option<String>| -> Result<Option<String>, Failure> {
        match v {
            Some(x)
                if x.is_empty() || !x.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
            {
                Err(Failure::input(format!(
                    "{flag} {x}: give lowercase hex (a prefix is enough)"
                )))
            }
            other => Ok(other),
        }
    };
    let date = |flag: &str, v: Option<String>| -> Result<Option<String>, Failure> {
        match v {
            Some(d) if crate::identity::calendar_date(&d, flag).is_err() || d.len() != 10 => Err(
                Failure::input(format!("{flag} {d}: give a date as YYYY-MM-DD")),
            ),
            other => Ok(other),
        }
    };
    Ok(crate::log::Filter {
        repository,
        number,
        operation: hex("--operation", operation)?,
        attempt: hex("--attempt", attempt)?,
        event_types,
        producer,
        since: date("--since", since)?,
        until: date("--until", until)?,
    })
}

fn run_log(
    out: &mut Printer,
    repo: &std::path::Path,
    rev: &str,
    json: bool,
    filter: &crate::log::Filter,
) -> Result<(), Failure> {
    let unreadable = |e: &dyn std::fmt::Display| Failure {
        code: 2,
        message: format!("cannot read the log of {}: {e}", repo.display()),
    };
    let store = Store::open(repo).map_err(|e| unreadable(&e))?;
    let commit = match store.resolve(rev) {
        Ok(commit) => commit,
        // Nothing published yet: an empty log, not an error.
        Err(e @ store::Error::NoLedger { .. }) => {
            out.note(&format!("log of {rev}: {e}; nothing to show"));
            return Ok(());
        }
        Err(e) => return Err(unreadable(&e)),
    };
    let snap = store.snapshot(Some(commit)).map_err(|e| unreadable(&e))?;
    let view = crate::view::View::new(&snap);
    let stats = crate::log::stream(&view, filter, &mut |entry| {
        if json {
            out.data(entry.json);
        } else {
            out.data(&crate::log::human(entry));
        }
        if out.broken.is_some() {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    })
    .map_err(|e| unreadable(&e))?;
    out.note(&format!(
        "log of {rev} ({}): {} of {} event(s) from {} shard(s)",
        commit.to_hex(),
        stats.matched,
        stats.events,
        stats.shards
    ));
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::writer::files;
    use std::path::Path;

    /// Writes the spool of the reference vector `single_event` (one review.item event, its
    /// partition marker; not sealed) below `root`.
    fn fixture_spool(root: &Path) {
        let vectors =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/conformance/shards.json");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(vectors).unwrap()).unwrap();
        let case = doc["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "single_event")
            .unwrap();
        for f in case["expected"]["spool_files_before"].as_array().unwrap() {
            let p = root.join(f["path"].as_str().unwrap());
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, f["bytes"].as_str().unwrap()).unwrap();
        }
    }

    /// Runs the CLI in-process; returns exit code, stdout and stderr as one text with the
    /// temporary directory and commit ids filtered.
    fn run_cli(tmp: &Path, args: &[&str]) -> String {
        let env = Env::from([("SOURCE_DATE_EPOCH".to_owned(), "1768480496".to_owned())]);
        let mut out = Vec::new();
        let mut err = Vec::new();
        let argv = std::iter::once("action-ledger".to_owned()).chain(
            args.iter()
                .map(|a| a.replace("[TMP]", &tmp.display().to_string())),
        );
        let code = run(argv, &env, &mut std::io::empty(), &mut out, &mut err);
        let text = format!(
            "exit: {code}\n--- stdout\n{}--- stderr\n{}",
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap()
        );
        let text = text.replace(&tmp.display().to_string(), "[TMP]");
        let re = regex::Regex::new(r"\b[0-9a-f]{40}\b").unwrap();
        re.replace_all(&text, "[COMMIT]").into_owned()
    }

    #[test]
    fn seal_then_publish_then_replay() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        fixture_spool(&tmp.join("spool"));
        insta::assert_snapshot!(
            "publish_unsealed",
            run_cli(
                tmp,
                &["publish", "--repo", "[TMP]/state.git", "[TMP]/spool"]
            )
        );
        insta::assert_snapshot!(
            "seal",
            run_cli(tmp, &["seal", "--output", "[TMP]/out", "[TMP]/spool"])
        );
        insta::assert_snapshot!(
            "seal_again_json",
            run_cli(tmp, &["seal", "--json", "[TMP]/spool"])
        );
        insta::assert_snapshot!(
            "publish",
            run_cli(
                tmp,
                &["publish", "--repo", "[TMP]/state.git", "[TMP]/spool"]
            )
        );
        insta::assert_snapshot!(
            "publish_replay_json",
            run_cli(
                tmp,
                &[
                    "publish",
                    "--json",
                    "--repo",
                    "[TMP]/state.git",
                    "[TMP]/out"
                ]
            )
        );
        // The repository is fanout (the default for a new one): another layout is refused and
        // changes nothing; naming its own layout is fine.
        insta::assert_snapshot!(
            "publish_layout_mismatch",
            run_cli(
                tmp,
                &[
                    "publish",
                    "--layout",
                    "reference",
                    "--repo",
                    "[TMP]/state.git",
                    "[TMP]/spool"
                ]
            )
        );
        insta::assert_snapshot!(
            "publish_layout_same",
            run_cli(
                tmp,
                &[
                    "publish",
                    "--layout",
                    "fanout",
                    "--repo",
                    "[TMP]/state.git",
                    "[TMP]/spool"
                ]
            )
        );
    }

    #[test]
    fn refusals_and_usage_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        fixture_spool(&tmp.join("spool"));
        let event = walkdir::WalkDir::new(tmp.join("spool"))
            .into_iter()
            .map(|e| e.unwrap().into_path())
            .find(|p| {
                p.extension().is_some_and(|x| x == "json") && !p.to_string_lossy().contains("/_")
            })
            .unwrap();
        let text = std::fs::read_to_string(&event).unwrap();
        std::fs::write(&event, text.replacen("{\"action\":{", "{\"action\": {", 1)).unwrap();
        insta::assert_snapshot!("seal_non_canonical", run_cli(tmp, &["seal", "[TMP]/spool"]));
        insta::assert_snapshot!(
            "publish_missing_source",
            run_cli(
                tmp,
                &["publish", "--repo", "[TMP]/state.git", "[TMP]/nowhere"]
            )
        );
        insta::assert_snapshot!("usage_no_sources", run_cli(tmp, &["publish"]));
        insta::assert_snapshot!(
            "usage_bad_layout",
            run_cli(tmp, &["publish", "--layout", "flat", "x"])
        );
    }

    #[test]
    fn serve_refuses_to_start_on_bad_settings() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        let digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        std::fs::write(tmp.join("keys"), format!("bot {digest}\n")).unwrap();
        std::fs::write(tmp.join("bad-keys"), format!("bot {digest} admin\n")).unwrap();
        std::fs::write(
            tmp.join("bad-policy.json"),
            r#"{"rules":[{"verdict":"maybe"}]}"#,
        )
        .unwrap();
        let serve = |env: &[(&str, &str)], args: &[&str]| {
            let env: Env = env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let argv = ["action-ledger", "serve", "--repo", "[TMP]/state.git"]
                .iter()
                .chain(args)
                .map(|a| a.replace("[TMP]", &tmp.display().to_string()));
            let code = run(argv, &env, &mut std::io::empty(), &mut out, &mut err);
            let text = format!(
                "$ serve {}\nexit: {code}\n{}{}",
                args.join(" "),
                String::from_utf8(out).unwrap(),
                String::from_utf8(err).unwrap()
            );
            text.replace(&tmp.display().to_string(), "[TMP]")
        };
        let key = [("ACTION_LEDGER_API_KEY", "k1")];
        let cases = [
            serve(&[], &["--listen", "127.0.0.1:0"]),
            serve(&[], &["--listen", "0.0.0.0:0", "--insecure-no-auth"]),
            serve(&[], &["--api-keys", "[TMP]/keys", "--insecure-no-auth"]),
            serve(&[], &["--api-keys", "[TMP]/bad-keys"]),
            serve(&[], &["--api-keys", "[TMP]/missing-keys"]),
            serve(&key, &[]),
            serve(
                &[],
                &[
                    "--api-keys",
                    "[TMP]/keys",
                    "--policy",
                    "[TMP]/bad-policy.json",
                ],
            ),
            serve(&[], &["--api-keys", "[TMP]/keys", "--listen", "nowhere"]),
            serve(&[], &["--api-keys", "[TMP]/keys", "--timeout-minutes", "0"]),
            serve(
                &[],
                &["--remote-ref", "refs/heads/x", "--api-keys", "[TMP]/keys"],
            ),
        ];
        insta::assert_snapshot!("serve_refusals", cases.join("\n"));
        assert!(
            !tmp.join("state.git").exists(),
            "nothing is created on a refusal"
        );
    }

    /// The writer environment of a CI job (fixed clock, forced recording, one partition date,
    /// the `GITHUB_*` producer variables); shared with the boundary tests.
    pub(crate) fn writer_env() -> Env {
        [
            ("SOURCE_DATE_EPOCH", "1768480496"),
            ("CLAWSWEEPER_ACTION_LEDGER_FORCE", "1"),
            ("CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE", "2026-01-15"),
            ("GITHUB_REPOSITORY", "openclaw/clawsweeper"),
            ("GITHUB_WORKFLOW", "ClawSweeper Review"),
            ("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567"),
            ("GITHUB_JOB", "review"),
            ("GITHUB_RUN_ID", "2234567890"),
            ("GITHUB_RUN_ATTEMPT", "1"),
            ("GITHUB_ACTION", "run-review"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    /// Runs the CLI in-process with the writer environment of a CI job and `stdin`; the output
    /// is filtered as in [`run_cli`].
    fn run_writer(tmp: &Path, stdin: &str, args: &[&str]) -> String {
        let env = writer_env();
        let mut out = Vec::new();
        let mut err = Vec::new();
        let argv = std::iter::once("action-ledger".to_owned()).chain(
            args.iter()
                .map(|a| a.replace("[TMP]", &tmp.display().to_string())),
        );
        let code = run(argv, &env, &mut stdin.as_bytes(), &mut out, &mut err);
        let text = format!(
            "exit: {code}\n--- stdout\n{}--- stderr\n{}",
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap()
        );
        let text = text.replace(&tmp.display().to_string(), "[TMP]");
        let re = regex::Regex::new(r"\b[0-9a-f]{40}\b").unwrap();
        re.replace_all(&text, "[COMMIT]").into_owned()
    }

    /// A value the reference accepts and the strict profile refuses: a (synthetic) Slack
    /// incoming-webhook URL in `subject.subjectId`.
    const WEBHOOK_EVENT: &str = r#"{"phase":"review.item","status":"started","component":"review-runner","identity":{"item":7},"subject":{"repository":"openclaw/openclaw","kind":"issue","number":7,"subjectId":"https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"},"retryable":true,"mutation":false}"#;

    /// The strict profile end to end: record and seal refuse and write nothing; with
    /// `--privacy reference` the event is recorded and sealed; publish refuses it (exit 1, ref
    /// unchanged) unless given `--privacy reference`; verify then reports it as a
    /// `privacy-strict` finding, and not under `--privacy reference`.
    #[test]
    fn strict_privacy_refusals_and_findings() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        std::fs::create_dir_all(tmp.join("spool")).unwrap();
        fixture_spool(&tmp.join("clean"));
        let code = |text: &str| text.lines().next().unwrap().to_owned();
        assert_eq!(
            code(&run_cli(tmp, &["seal", "[TMP]/clean"])),
            "exit: 0",
            "the clean fixture seals"
        );
        assert_eq!(
            code(&run_cli(
                tmp,
                &["publish", "--repo", "[TMP]/state.git", "[TMP]/clean"]
            )),
            "exit: 0"
        );
        let store = Store::open(&tmp.join("state.git")).unwrap();
        let tip = store.tip("refs/heads/main").unwrap();

        insta::assert_snapshot!(
            "record_strict_refused",
            run_writer(tmp, WEBHOOK_EVENT, &["record", "--spool", "[TMP]/spool"])
        );
        assert_eq!(std::fs::read_dir(tmp.join("spool")).unwrap().count(), 0);
        let recorded = run_writer(
            tmp,
            WEBHOOK_EVENT,
            &["record", "--privacy", "reference", "--spool", "[TMP]/spool"],
        );
        assert_eq!(code(&recorded), "exit: 0", "{recorded}");

        insta::assert_snapshot!(
            "seal_strict_refused",
            run_cli(tmp, &["seal", "[TMP]/spool"])
        );
        assert!(
            !walkdir::WalkDir::new(tmp.join("spool"))
                .into_iter()
                .any(|e| e
                    .unwrap()
                    .path()
                    .to_string_lossy()
                    .contains("_finalizations/")),
            "a refused seal wrote a seal record"
        );
        let sealed = run_cli(tmp, &["seal", "--privacy", "reference", "[TMP]/spool"]);
        assert_eq!(code(&sealed), "exit: 0", "{sealed}");

        insta::assert_snapshot!(
            "publish_strict_refused",
            run_cli(
                tmp,
                &["publish", "--repo", "[TMP]/state.git", "[TMP]/spool"]
            )
        );
        assert_eq!(store.tip("refs/heads/main").unwrap(), tip, "the ref moved");
        let published = run_cli(
            tmp,
            &[
                "publish",
                "--privacy",
                "reference",
                "--repo",
                "[TMP]/state.git",
                "[TMP]/spool",
            ],
        );
        assert_eq!(code(&published), "exit: 0", "{published}");

        insta::assert_snapshot!(
            "verify_strict_finding",
            run_cli(tmp, &["verify", "--repo", "[TMP]/state.git"])
        );
        insta::assert_snapshot!(
            "verify_strict_finding_json",
            run_cli(
                tmp,
                &["-q", "verify", "--json", "--repo", "[TMP]/state.git"]
            )
        );
        let range = format!("{}..refs/heads/main", tip.unwrap().to_hex());
        let pushed = run_cli(
            tmp,
            &["verify", "--repo", "[TMP]/state.git", "--range", &range],
        );
        assert_eq!(code(&pushed), "exit: 1", "{pushed}");
        assert!(pushed.contains(": privacy-strict: event "), "{pushed}");
        insta::assert_snapshot!(
            "verify_reference_clean",
            run_cli(
                tmp,
                &[
                    "verify",
                    "--privacy",
                    "reference",
                    "--repo",
                    "[TMP]/state.git"
                ]
            )
        );
        insta::assert_snapshot!(
            "usage_bad_privacy",
            run_cli(tmp, &["verify", "--privacy", "lenient"])
        );
    }

    /// Two producers that differ only in case (`Review`, `review`) give sibling directories
    /// that a case-insensitive file system folds into one: `verify` reports the pair as a
    /// warning (type "warning" in JSON) and still exits 0, for the revision and for the push
    /// that brings the second one.
    #[test]
    fn verify_warns_of_names_that_differ_only_in_case() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        let event = |component: &str| {
            format!(
                r#"{{"phase":"review.item","status":"started","component":"{component}","identity":{{"item":7}},"subject":{{"repository":"openclaw/openclaw","kind":"issue","number":7}},"retryable":true,"mutation":false}}"#
            )
        };
        let code = |text: &str| text.lines().next().unwrap().to_owned();
        for (spool, component) in [("upper", "Review"), ("lower", "review")] {
            std::fs::create_dir_all(tmp.join(spool)).unwrap();
            let spool = format!("[TMP]/{spool}");
            let out = run_writer(tmp, &event(component), &["record", "--spool", &spool]);
            assert_eq!(code(&out), "exit: 0", "{out}");
            let out = run_cli(tmp, &["seal", &spool]);
            assert_eq!(code(&out), "exit: 0", "{out}");
        }
        let repo = ["--repo", "[TMP]/state.git"];
        let out = run_cli(tmp, &["publish", repo[0], repo[1], "[TMP]/upper"]);
        assert_eq!(code(&out), "exit: 0", "{out}");
        let store = Store::open(&tmp.join("state.git")).unwrap();
        let first = store.tip("refs/heads/main").unwrap().unwrap();
        let out = run_cli(tmp, &["verify", repo[0], repo[1]]);
        assert_eq!(code(&out), "exit: 0", "{out}");
        assert!(!out.contains("warning"), "{out}");
        let out = run_cli(tmp, &["publish", repo[0], repo[1], "[TMP]/lower"]);
        assert_eq!(code(&out), "exit: 0", "{out}");
        insta::assert_snapshot!(
            "verify_case_collision",
            run_cli(tmp, &["verify", repo[0], repo[1]])
        );
        insta::assert_snapshot!(
            "verify_case_collision_json",
            run_cli(tmp, &["-q", "verify", "--json", repo[0], repo[1]])
        );
        let range = format!("{}..main", first.to_hex());
        insta::assert_snapshot!(
            "verify_case_collision_range",
            run_cli(tmp, &["verify", repo[0], repo[1], "--range", &range])
        );
    }

    /// Runs the CLI in-process with the finality clock and identity in the environment; the
    /// output is filtered as in [`run_cli`].
    fn run_finality(tmp: &Path, now: &str, args: &[&str]) -> String {
        let env = Env::from([
            ("SOURCE_DATE_EPOCH".to_owned(), "1772366400".to_owned()),
            ("ACTION_LEDGER_NOW".to_owned(), now.to_owned()),
            ("ACTION_LEDGER_AGENT_ID".to_owned(), "deploy-bot".to_owned()),
            ("ACTION_LEDGER_PRINCIPAL".to_owned(), "ci-key-7".to_owned()),
        ]);
        let mut out = Vec::new();
        let mut err = Vec::new();
        let argv = std::iter::once("action-ledger".to_owned()).chain(
            args.iter()
                .map(|a| a.replace("[TMP]", &tmp.display().to_string())),
        );
        let code = run(argv, &env, &mut std::io::empty(), &mut out, &mut err);
        let text = format!(
            "exit: {code}\n--- stdout\n{}--- stderr\n{}",
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap()
        );
        let text = text.replace(&tmp.display().to_string(), "[TMP]");
        let re = regex::Regex::new(r"\b[0-9a-f]{40}\b").unwrap();
        re.replace_all(&text, "[COMMIT]").into_owned()
    }

    const T0: &str = "2026-03-01T12:00:00.000Z";
    const T1: &str = "2026-03-01T12:00:01.500Z";
    const LATER: &str = "2026-03-01T13:00:00.000Z";

    #[test]
    fn action_commands() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        let repo = "[TMP]/state.git";
        let create = |id: &str, extra: &[&str]| {
            let mut args = vec!["action", "create", "--repo", repo, "--id", id];
            args.extend_from_slice(extra);
            run_finality(tmp, T0, &args)
        };
        insta::assert_snapshot!(
            "action_create",
            create(
                "act_deploy",
                &["--guard-decision", "gd_42", "--", "./deploy.sh", "prod"]
            )
        );
        insta::assert_snapshot!(
            "action_create_json_blocked",
            create(
                "act_blocked",
                &["--json", "--guard-decision", "gd_43", "--verdict", "block"]
            )
        );
        insta::assert_snapshot!(
            "action_create_exists",
            create("act_deploy", &["--guard-decision", "gd_other"])
        );
        let claim = |attempt: &str, extra: &[&str]| {
            let mut args = vec![
                "action",
                "claim",
                "--repo",
                repo,
                "act_deploy",
                "--attempt",
                attempt,
            ];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", "./deploy.sh", "prod"]);
            run_finality(tmp, T0, &args)
        };
        insta::assert_snapshot!(
            "action_claim_other_act",
            run_finality(
                tmp,
                T0,
                &[
                    "action",
                    "claim",
                    "--json",
                    "--repo",
                    repo,
                    "act_deploy",
                    "--attempt",
                    "attempt-0000000000",
                    "--",
                    "./deploy.sh",
                    "staging"
                ]
            )
        );
        insta::assert_snapshot!(
            "action_claim_json",
            claim("attempt-0000000001", &["--json"])
        );
        insta::assert_snapshot!("action_claim_conflict", claim("attempt-0000000002", &[]));
        insta::assert_snapshot!("action_claim_invalid_attempt", claim("short", &["--json"]));
        insta::assert_snapshot!(
            "action_claim_no_repo",
            run_finality(
                tmp,
                T0,
                &[
                    "action",
                    "claim",
                    "--repo",
                    "[TMP]/none.git",
                    "act_deploy",
                    "--attempt",
                    "attempt-0000000003"
                ]
            )
        );
        insta::assert_snapshot!(
            "action_outcome_json",
            run_finality(
                tmp,
                T1,
                &[
                    "action",
                    "outcome",
                    "--json",
                    "--repo",
                    repo,
                    "act_deploy",
                    "completed",
                    "--attempt",
                    "attempt-0000000001",
                    "--summary",
                    "deployed v2 with token=oc_live_fixture"
                ]
            )
        );
        insta::assert_snapshot!(
            "action_outcome_already_set_json",
            run_finality(
                tmp,
                T1,
                &[
                    "action",
                    "outcome",
                    "--json",
                    "--repo",
                    repo,
                    "act_deploy",
                    "failed",
                    "--error",
                    "late"
                ]
            )
        );
        insta::assert_snapshot!(
            "action_outcome_lost_confirmation",
            run_finality(
                tmp,
                T1,
                &[
                    "action",
                    "outcome",
                    "--repo",
                    repo,
                    "act_deploy",
                    "lost_confirmation"
                ]
            )
        );
        insta::assert_snapshot!(
            "action_outcome_blocked",
            run_finality(
                tmp,
                T1,
                &[
                    "action",
                    "outcome",
                    "--repo",
                    repo,
                    "act_blocked",
                    "completed"
                ]
            )
        );
        insta::assert_snapshot!(
            "action_show",
            run_finality(
                tmp,
                LATER,
                &["action", "show", "--repo", repo, "act_deploy"]
            )
        );
        insta::assert_snapshot!(
            "action_show_json",
            run_finality(
                tmp,
                LATER,
                &["action", "show", "--json", "--repo", repo, "act_deploy"]
            )
        );
        insta::assert_snapshot!(
            "action_show_missing",
            run_finality(
                tmp,
                LATER,
                &["action", "show", "--repo", repo, "act_nothing"]
            )
        );
        create("act_legacy", &["--guard-decision", "gd_44"]);
        insta::assert_snapshot!(
            "action_close_cancelled",
            run_finality(
                tmp,
                T1,
                &[
                    "action",
                    "close",
                    "--repo",
                    repo,
                    "act_legacy",
                    "cancelled",
                    "--summary",
                    "operator stopped it"
                ]
            )
        );
        create("act_stale", &["--guard-decision", "gd_45"]);
        create(
            "act_waiting",
            &["--guard-decision", "gd_46", "--verdict", "require_approval"],
        );
        insta::assert_snapshot!(
            "sweep_json",
            run_finality(tmp, LATER, &["sweep", "--json", "--repo", repo])
        );
        insta::assert_snapshot!(
            "sweep_again",
            run_finality(
                tmp,
                LATER,
                &["sweep", "--repo", repo, "--timeout-minutes", "30"]
            )
        );
        insta::assert_snapshot!(
            "sweep_bad_timeout",
            run_finality(
                tmp,
                LATER,
                &["sweep", "--repo", repo, "--timeout-minutes", "0"]
            )
        );
        insta::assert_snapshot!(
            "verify_finality_clean",
            run_finality(tmp, LATER, &["verify", "--repo", repo])
        );
    }

    #[test]
    fn run_wraps_a_command() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        let repo = "[TMP]/state.git";
        let script = "echo to-stdout; echo to-stderr >&2";
        let ok = ["sh", "-c", script];
        let mut args = vec![
            "action",
            "create",
            "--repo",
            repo,
            "--id",
            "act_ok",
            "--guard-decision",
            "gd_1",
            "--",
        ];
        args.extend_from_slice(&ok);
        run_finality(tmp, T0, &args);
        let run_args =
            |id: &'static str, attempt: &'static str, json: bool, cmd: &[&'static str]| {
                let mut a = vec!["run", "--repo", repo, "--action", id, "--attempt", attempt];
                if json {
                    a.push("--json");
                }
                a.push("--");
                a.extend_from_slice(cmd);
                a
            };
        insta::assert_snapshot!(
            "run_completed",
            run_finality(
                tmp,
                T1,
                &run_args("act_ok", "attempt-0000000001", false, &ok)
            )
        );
        // A second run is refused before the command starts: the marker is never written.
        let marker = ["sh", "-c", "touch [TMP]/ran-again"];
        insta::assert_snapshot!(
            "run_refused",
            run_finality(
                tmp,
                T1,
                &run_args("act_ok", "attempt-0000000002", false, &marker)
            )
        );
        assert!(!tmp.join("ran-again").exists());
        let fail = ["sh", "-c", "echo partial-output; exit 7"];
        let mut args = vec![
            "action",
            "create",
            "--repo",
            repo,
            "--id",
            "act_fail",
            "--guard-decision",
            "gd_2",
            "--",
        ];
        args.extend_from_slice(&fail);
        run_finality(tmp, T0, &args);
        insta::assert_snapshot!(
            "run_failed_json",
            run_finality(
                tmp,
                T1,
                &run_args("act_fail", "attempt-0000000003", true, &fail)
            )
        );
        let missing = ["[TMP]/no-such-program"];
        let mut args = vec![
            "action",
            "create",
            "--repo",
            repo,
            "--id",
            "act_missing",
            "--guard-decision",
            "gd_3",
            "--",
        ];
        args.extend_from_slice(&missing);
        run_finality(tmp, T0, &args);
        insta::assert_snapshot!(
            "run_not_found",
            run_finality(
                tmp,
                T1,
                &run_args("act_missing", "attempt-0000000004", false, &missing)
            )
        );
        // The command completes but takes the repository's objects with it: exit 4, reconcile.
        let broken = "[TMP]/broken.git";
        let sabotage = ["mv", "[TMP]/broken.git/objects", "[TMP]/objects.gone"];
        let mut args = vec![
            "action",
            "create",
            "--repo",
            broken,
            "--id",
            "act_lost",
            "--guard-decision",
            "gd_4",
            "--",
        ];
        args.extend_from_slice(&sabotage);
        run_finality(tmp, T0, &args);
        let mut args = vec![
            "run",
            "--repo",
            broken,
            "--action",
            "act_lost",
            "--attempt",
            "attempt-0000000005",
            "--",
        ];
        args.extend_from_slice(&sabotage);
        insta::assert_snapshot!("run_unconfirmed", run_finality(tmp, T1, &args));
        insta::assert_snapshot!(
            "run_verify_clean",
            run_finality(tmp, T1, &["verify", "--repo", repo])
        );
    }

    /// `action create`, `action claim` and `run` refuse an act with a lossy number (exit 2),
    /// naming its path, before anything is written or run.
    #[test]
    fn lossy_numbers_in_an_act_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        let repo = "[TMP]/state.git";
        let create = |act: &str| {
            run_finality(
                tmp,
                T0,
                &[
                    "action",
                    "create",
                    "--repo",
                    repo,
                    "--id",
                    "act_n",
                    "--guard-decision",
                    "gd_1",
                    "--act",
                    act,
                ],
            )
        };
        let refused_create = [
            create(r#"{"kind":"shell","n":1e400}"#),
            create(r#"{"kind":"http","request":{"retries":-1e400}}"#),
        ];
        assert!(!tmp.join("state.git").exists(), "no repository created");
        assert!(create(r#"{"kind":"shell","n":1}"#).starts_with("exit: 0"));
        let claim = run_finality(
            tmp,
            T0,
            &[
                "action",
                "claim",
                "--repo",
                repo,
                "act_n",
                "--attempt",
                "attempt-0000000001",
                "--json",
                "--act",
                r#"{"kind":"shell","n":[1,1e401]}"#,
            ],
        );
        let run = run_finality(
            tmp,
            T0,
            &[
                "run",
                "--repo",
                repo,
                "--action",
                "act_n",
                "--attempt",
                "attempt-0000000002",
                "--act",
                r#"{"kind":"shell","n":-0}"#,
                "--",
                "touch",
                "[TMP]/ran",
            ],
        );
        assert!(!tmp.join("ran").exists(), "the command was not run");
        insta::assert_snapshot!(
            "act_lossy_numbers",
            [refused_create[0].as_str(), &refused_create[1], &claim, &run].join("\n")
        );
        let show = run_finality(tmp, T0, &["action", "show", "--repo", repo, "act_n"]);
        assert!(show.contains("claim:        -\n"), "{show}");
    }

    /// `action create --id X` retried later with the same binding exits 0, prints the id and
    /// keeps the first creation time without a commit; another binding is `ACTION_EXISTS`.
    #[test]
    fn action_create_retry_is_idempotent() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        let repo = "[TMP]/state.git";
        let create = |now: &str, extra: &[&str]| {
            let mut args = vec![
                "action",
                "create",
                "--repo",
                repo,
                "--id",
                "act_retry",
                "--guard-decision",
                "gd_1",
                "--containment-ref",
                "ctr_9",
                "--verdict",
                "allow_contained",
            ];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", "./deploy.sh", "prod"]);
            run_finality(tmp, now, &args)
        };
        let tip = || {
            let store = Store::open(&tmp.join("state.git")).unwrap();
            store.tip("refs/heads/main").unwrap()
        };
        assert!(create(T0, &[]).starts_with("exit: 0"));
        let first = tip();
        insta::assert_snapshot!(
            "action_create_retry",
            [create(T1, &[]), create(LATER, &["--json"])].join("\n")
        );
        assert_eq!(tip(), first, "no commit");
        insta::assert_snapshot!(
            "action_create_retry_other_binding",
            [
                create(T1, &["--agent", "other-bot"]),
                create(T1, &["--json", "--lifecycle", "pending"]),
            ]
            .join("\n")
        );
        assert_eq!(tip(), first, "no commit");
    }

    /// An outcome recorded by a clock behind the creator's: `elapsed_ms` is 0, not negative, and
    /// `action outcome`, `action show` and their `--json` say that the clocks disagreed.
    #[test]
    fn clock_skew_is_reported_and_elapsed_never_negative() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        let repo = "[TMP]/state.git";
        let (at_1210, at_1200) = ("2026-03-01T12:10:00.000Z", "2026-03-01T12:00:30.000Z");
        for id in ["act_skew", "act_json", "act_ok", "act_run"] {
            let mut args = vec![
                "action",
                "create",
                "--repo",
                repo,
                "--id",
                id,
                "--guard-decision",
                "gd_1",
            ];
            if id == "act_run" {
                args.extend_from_slice(&["--", "true"]);
            }
            assert!(run_finality(tmp, at_1210, &args).starts_with("exit: 0"));
        }
        let claim = [
            "action",
            "claim",
            "--repo",
            repo,
            "act_skew",
            "--attempt",
            "attempt-0000000001",
        ];
        assert!(run_finality(tmp, at_1210, &claim).starts_with("exit: 0"));
        let outcome = |id: &str, json: bool, now: &str| {
            let mut args = vec!["action", "outcome", "--repo", repo, id, "completed"];
            if json {
                args.push("--json");
            }
            run_finality(tmp, now, &args)
        };
        let show = |id: &str, json: bool| {
            let mut args = vec!["action", "show", "--repo", repo, id];
            if json {
                args.push("--json");
            }
            run_finality(tmp, LATER, &args)
        };
        insta::assert_snapshot!(
            "action_clock_skew",
            [
                outcome("act_skew", false, at_1200),
                outcome("act_json", true, at_1200),
                show("act_skew", false),
                show("act_skew", true),
            ]
            .join("\n")
        );
        let run = run_finality(
            tmp,
            at_1200,
            &[
                "run",
                "--repo",
                repo,
                "--action",
                "act_run",
                "--attempt",
                "attempt-0000000002",
                "--",
                "true",
            ],
        );
        assert!(
            run.starts_with("exit: 0")
                && run.contains("clock skew: claimed_at is 570000 ms before created_at"),
            "{run}"
        );
        // Clocks in order: no skew is reported.
        let ok = outcome("act_ok", true, "2026-03-01T12:10:01.000Z");
        assert!(
            ok.contains(r#""elapsed_ms":1000,"#) && !ok.contains("skew"),
            "{ok}"
        );
        let (text, json) = (show("act_ok", false), show("act_ok", true));
        assert!(
            text.contains("elapsed_ms:   1000\n") && !text.contains("skew"),
            "{text}"
        );
        assert!(!json.contains("skew"), "{json}");
    }

    /// Each refusal of `action outcome --progress` names its own rule: a lossy number (with
    /// its path), depth, size, invalid JSON.
    #[test]
    fn progress_refusals_name_their_rule() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        let repo = "[TMP]/state.git";
        let created = run_finality(
            tmp,
            T0,
            &[
                "action",
                "create",
                "--repo",
                repo,
                "--id",
                "act_p",
                "--guard-decision",
                "gd_1",
            ],
        );
        assert!(created.starts_with("exit: 0"), "{created}");
        let outcome = |extra: &[&str], progress: &str| {
            let mut args = vec!["action", "outcome", "--repo", repo, "act_p", "partial"];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--progress", progress]);
            run_finality(tmp, T1, &args)
        };
        let deep = format!("{}1{}", r#"{"d":"#.repeat(65), "}".repeat(65));
        let large = format!(r#"{{"log":"{}"}}"#, "x".repeat(8200));
        insta::assert_snapshot!(
            "action_outcome_progress_refusals",
            [
                outcome(&[], r#"{"a":1e21}"#),
                outcome(&["--json"], r#"{"a":{"b":[1,-1e400]}}"#),
                outcome(&[], r#"{"step":-0}"#),
                outcome(&[], &deep),
                outcome(&[], &large),
                outcome(&[], r#"{"a":}"#),
                outcome(&[], "[1,2]"),
            ]
            .join("\n")
        );
        let show = run_finality(tmp, T1, &["action", "show", "--repo", repo, "act_p"]);
        assert!(show.contains("outcome:      pending\n"), "{show}");
    }

    /// Copies day1 job 008 (two shards, 63 events) below `root`.
    fn fixture_job(root: &Path) {
        let job = Path::new(env!("CARGO_MANIFEST_DIR")).join(
            "testdata/corpus/day1/shards/008-openclaw-clawsweeper-repair-worker-r13550308979-a1",
        );
        for e in walkdir::WalkDir::new(&job) {
            let e = e.unwrap();
            let to = root.join(e.path().strip_prefix(&job).unwrap());
            if e.file_type().is_dir() {
                std::fs::create_dir_all(&to).unwrap();
            } else {
                std::fs::copy(e.path(), &to).unwrap();
            }
        }
    }

    /// `log` on a revision with a shard whose lines end in `\r\n` (committed with plumbing):
    /// it exits 2 naming the shard and the rule `verify` reports, and prints no event of it.
    #[test]
    fn log_refuses_a_shard_that_verify_refuses() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        fixture_job(&tmp.join("job"));
        let published = run_cli(
            tmp,
            &["-q", "publish", "--repo", "[TMP]/state.git", "[TMP]/job"],
        );
        assert!(published.starts_with("exit: 0"), "{published}");
        let store = Store::open(&tmp.join("state.git")).unwrap();
        let tip = store.tip("refs/heads/main").unwrap().unwrap();
        let snap = store.snapshot(Some(tip)).unwrap();
        let first = snap.list_files(crate::ledger::shard::EVENTS_ROOT).unwrap()[0].clone();
        let text = String::from_utf8(snap.read(&first, u64::MAX).unwrap().unwrap()).unwrap();
        let crlf = text.replace('\n', "\r\n").into_bytes();
        let sig = Signature {
            name: "tester".into(),
            email: "tester@invalid".into(),
            time_seconds: 1_768_480_496,
        };
        let bad = store
            .write_commit_with(Some(tip), &[(first, crlf)], &[], true, "crlf", &sig)
            .unwrap();
        store
            .update_ref("refs/heads/main", Some(tip), bad, "crlf")
            .unwrap();
        insta::assert_snapshot!(
            "log_crlf_shard",
            run_cli(tmp, &["log", "--json", "--repo", "[TMP]/state.git"])
        );
        insta::assert_snapshot!(
            "verify_crlf_shard",
            run_cli(tmp, &["-q", "verify", "--repo", "[TMP]/state.git"])
        );
    }

    /// Before anything is published the ledger ref does not exist: `log` prints nothing and
    /// exits 0, `verify` says so and exits 2, for every way of naming it. `--rev` and `--range`
    /// take what `git rev-parse` takes (remote-tracking names, tags, `~N`, abbreviated ids).
    #[test]
    fn no_ledger_yet_and_revision_forms() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        Store::open_or_init_bare(&tmp.join("state.git"), "refs/heads/main").unwrap();
        let repo = ["--repo", "[TMP]/state.git"];
        insta::assert_snapshot!("log_no_ledger", run_cli(tmp, &["log", repo[0], repo[1]]));
        insta::assert_snapshot!(
            "verify_no_ledger",
            run_cli(tmp, &["verify", repo[0], repo[1]])
        );
        let zero = "0".repeat(40);
        for args in [
            vec!["log", "--json", "--rev", "main"],
            vec!["log", "--rev", "HEAD~2"],
            vec!["log", "--rev", "refs/heads/main"],
            vec!["log", "--rev", "@"],
            vec!["verify", "--rev", "main"],
            vec!["verify", "--rev", "HEAD~2"],
            vec!["verify", "--rev", "refs/heads/main"],
            vec!["verify", "--range", &format!("{zero}..HEAD")],
        ] {
            let mut all = args.clone();
            all.extend(repo);
            let out = run_cli(tmp, &all);
            let want = if args[0] == "log" {
                "exit: 0"
            } else {
                "exit: 2"
            };
            assert!(out.starts_with(want), "{args:?}: {out}");
            assert!(
                out.contains("there is no ledger at refs/heads/main yet"),
                "{args:?}: {out}"
            );
            assert!(out.contains("--- stdout\n--- stderr"), "{args:?}: {out}");
        }

        fixture_job(&tmp.join("job"));
        let out = run_cli(tmp, &["-q", "publish", repo[0], repo[1], "[TMP]/job"]);
        assert!(out.starts_with("exit: 0"), "{out}");
        let store = Store::open(&tmp.join("state.git")).unwrap();
        let tip = store.tip("refs/heads/main").unwrap().unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(tmp.join("state.git"))
                .args(args)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@invalid")
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        };
        git(&["update-ref", "refs/remotes/origin/main", &tip.to_hex()]);
        git(&["tag", "-a", "v1", "-m", "release", &tip.to_hex()]);
        insta::assert_snapshot!(
            "verify_rev_origin_main",
            run_cli(tmp, &["verify", repo[0], repo[1], "--rev", "origin/main"])
        );
        let short = &tip.to_hex()[..10];
        for rev in ["v1", short, "origin/main~0", "HEAD^{commit}"] {
            let out = run_cli(
                tmp,
                &[
                    "log",
                    repo[0],
                    repo[1],
                    "--rev",
                    rev,
                    "--type",
                    "repair.plan",
                ],
            );
            assert!(out.starts_with("exit: 0"), "{rev}: {out}");
            assert!(out.contains("repair.plan"), "{rev}: {out}");
        }
        let range = format!("{zero}..v1");
        let out = run_cli(tmp, &["-q", "verify", repo[0], repo[1], "--range", &range]);
        assert!(out.starts_with("exit: 0"), "{out}");
        insta::assert_snapshot!(
            "verify_unknown_revision",
            run_cli(tmp, &["verify", repo[0], repo[1], "--rev", "origin/nope"])
        );
        insta::assert_snapshot!(
            "log_other_ref_not_yet",
            run_cli(tmp, &["log", repo[0], repo[1], "--rev", "refs/heads/next"])
        );
    }

    #[test]
    fn compact_and_log() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        fixture_job(&tmp.join("job"));
        let repo = ["--repo", "[TMP]/state.git"];
        let with = |cmd: &[&str], rest: &[&str]| -> Vec<String> {
            cmd.iter()
                .chain(&repo)
                .chain(rest)
                .map(|s| (*s).to_owned())
                .collect()
        };
        let cli = |args: Vec<String>| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_cli(tmp, &args)
        };
        let published = cli(with(&["-q", "publish"], &["[TMP]/job"]));
        assert!(published.starts_with("exit: 0"), "{published}");
        let log_human = with(&["log"], &["--operation", "c1a023ed15b2"]);
        let log_json = with(
            &["log", "--json"],
            &["--subject", "openclaw/openclaw#41979"],
        );
        let log_all = with(&["-q", "log", "--json"], &[]);
        let (before_human, before_json, before_all) = (
            cli(log_human.clone()),
            cli(log_json.clone()),
            cli(log_all.clone()),
        );
        insta::assert_snapshot!("log_operation", before_human);
        insta::assert_snapshot!("log_subject_json", before_json);
        assert_eq!(before_all.lines().count(), 63 + 3);
        let window = ["--now", "2026-05-01", "--retention-days", "1"];
        insta::assert_snapshot!(
            "compact_inside_window",
            cli(with(
                &["compact"],
                &["--now", "2026-04-15T12:00:00Z", "--retention-days", "30"]
            ))
        );
        insta::assert_snapshot!(
            "compact_dry_run",
            cli(with(&["compact", "--dry-run"], &window))
        );
        insta::assert_snapshot!("compact", cli(with(&["compact"], &window)));
        insta::assert_snapshot!(
            "compact_again_json",
            cli(with(&["compact", "--json"], &window))
        );
        // Readers see the same ledger.
        assert_eq!(cli(log_human), before_human);
        assert_eq!(cli(log_json), before_json);
        assert_eq!(cli(log_all), before_all);
        insta::assert_snapshot!("compact_verify", cli(with(&["verify"], &[])));
        insta::assert_snapshot!(
            "compact_replay",
            cli(with(&["-q", "publish"], &["[TMP]/job"]))
        );
        insta::assert_snapshot!(
            "log_usage_errors",
            [
                cli(with(&["log"], &["--subject", "not a repo"])),
                cli(with(&["log"], &["--operation", "XYZ"])),
                cli(with(&["log"], &["--since", "2026-02-30"])),
                cli(with(&["compact"], &["--now", "yesterday"])),
            ]
            .join("\n")
        );
    }

    /// Every path below `root` (directories with a trailing `/`), for "nothing was written".
    fn listing(root: &Path) -> Vec<String> {
        walkdir::WalkDir::new(root)
            .into_iter()
            .map(|e| e.unwrap())
            .map(|e| {
                let rel = e.path().strip_prefix(root).unwrap().display().to_string();
                if e.file_type().is_dir() {
                    format!("{rel}/")
                } else {
                    rel
                }
            })
            .collect()
    }

    /// Roots of jobs that recorded nothing: an empty directory, one with other state under
    /// `.clawsweeper-repair`, an empty spool directory, only the reserved directories, only a
    /// staging file of an interrupted write.
    const EMPTY_ROOTS: [(&str, &[&str]); 5] = [
        ("bare", &[]),
        ("other", &[".clawsweeper-repair/action-ledger-state/"]),
        ("spooldir", &[".clawsweeper-repair/action-events/"]),
        (
            "reserved",
            &[
                ".clawsweeper-repair/action-events/_locks/",
                ".clawsweeper-repair/action-events/_partitions/",
                ".clawsweeper-repair/action-events/_finalizations/",
            ],
        ),
        (
            "staging",
            &[".clawsweeper-repair/action-events/openclaw-openclaw-5dcd5a46c4da/x.json.1.tmp"],
        ),
    ];

    fn empty_roots(tmp: &Path) {
        for (name, entries) in EMPTY_ROOTS {
            let root = tmp.join(name);
            std::fs::create_dir_all(&root).unwrap();
            for e in entries {
                let p = root.join(e);
                if e.ends_with('/') {
                    std::fs::create_dir_all(p).unwrap();
                } else {
                    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                    std::fs::write(p, "partial").unwrap();
                }
            }
        }
    }

    /// A job that recorded nothing (`if: always()` post-job steps): `seal` of such a root exits
    /// 0, prints `{"paths":[]}` (zero counts with `--json`) and writes nothing; so does
    /// interruption recovery. A root that does not exist stays an error that says so.
    #[test]
    fn seal_of_a_job_that_recorded_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        empty_roots(tmp);
        let before = listing(tmp);
        let roots: Vec<String> = EMPTY_ROOTS
            .iter()
            .map(|(name, _)| format!("[TMP]/{name}"))
            .collect();
        let with = |args: &[&str]| -> Vec<String> {
            args.iter()
                .map(|a| a.to_string())
                .chain(roots.iter().cloned())
                .collect()
        };
        let cli = |args: Vec<String>| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_cli(tmp, &args)
        };
        insta::assert_snapshot!("seal_empty", cli(with(&["seal"])));
        insta::assert_snapshot!("seal_empty_json", cli(with(&["seal", "--json"])));
        insta::assert_snapshot!(
            "seal_empty_interrupted",
            cli(with(&[
                "-q",
                "seal",
                "--interrupt-open-attempts",
                "--reason",
                "cancelled"
            ]))
        );
        assert_eq!(listing(tmp), before, "sealing nothing wrote something");
        let out = cli(with(&["-q", "seal", "--output", "[TMP]/out"]));
        assert!(out.starts_with("exit: 0"), "{out}");
        assert_eq!(listing(&tmp.join("out")), ["/"], "shards of nothing");
        insta::assert_snapshot!(
            "seal_missing_root",
            run_cli(
                tmp,
                &[
                    "seal",
                    "--output",
                    "[TMP]/out2",
                    "[TMP]/bare",
                    "[TMP]/nowhere"
                ]
            )
        );
        assert!(!tmp.join("out2").exists(), "a refused seal made its output");
        std::fs::write(tmp.join("file"), "x").unwrap();
        insta::assert_snapshot!("seal_file_root", run_cli(tmp, &["seal", "[TMP]/file"]));
    }

    /// `publish` of roots without events exits 0, makes no commit (not even the layout record
    /// of a new ledger), prints an empty manifest and says nothing was published (`status:
    /// "empty"`); among other sources, the others are still published. A source that does not
    /// exist, or is not a directory, is an error that says so, and then nothing is published.
    #[test]
    fn publish_of_sources_without_events() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        empty_roots(tmp);
        std::fs::create_dir_all(tmp.join("shards/ledger/v1/events")).unwrap();
        fixture_spool(&tmp.join("job"));
        let sealed = run_cli(tmp, &["seal", "[TMP]/job"]);
        assert!(sealed.starts_with("exit: 0"), "{sealed}");
        let mut empties: Vec<String> = EMPTY_ROOTS
            .iter()
            .map(|(name, _)| format!("[TMP]/{name}"))
            .collect();
        empties.push("[TMP]/shards".into());
        let cli = |args: Vec<String>| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_cli(tmp, &args)
        };
        let publish = |repo: &str, extra: &[&str], sources: &[String]| {
            let mut args: Vec<String> = ["publish", "--repo", repo]
                .iter()
                .chain(extra)
                .map(|a| a.to_string())
                .collect();
            args.extend(sources.iter().cloned());
            cli(args)
        };
        for layout in ["fanout", "reference"] {
            let repo = format!("[TMP]/{layout}.git");
            let text = publish(&repo, &["--layout", layout], &empties);
            insta::assert_snapshot!(format!("publish_empty_{layout}"), text);
            let store = Store::open(&tmp.join(format!("{layout}.git"))).unwrap();
            assert_eq!(store.tip("refs/heads/main").unwrap(), None, "{layout}");
        }
        insta::assert_snapshot!(
            "publish_empty_json",
            publish("[TMP]/fanout.git", &["-q", "--json"], &empties[..2])
        );
        // Among other sources: the job is published, before and after empty ones.
        let mixed: Vec<String> = [&empties[0], "[TMP]/job", &empties[2]]
            .iter()
            .map(|s| s.to_string())
            .collect();
        insta::assert_snapshot!(
            "publish_empty_among_others",
            publish("[TMP]/mixed.git", &["--json"], &mixed)
        );
        let store = Store::open(&tmp.join("mixed.git")).unwrap();
        let tip = store.tip("refs/heads/main").unwrap().expect("published");
        // Once the ledger exists, an empty source leaves its tip where it is.
        let again = publish("[TMP]/mixed.git", &["--json"], &empties[..1]);
        assert!(again.contains("\"status\":\"empty\""), "{again}");
        assert!(
            again.contains(&"\"commit\":\"[COMMIT]\"".to_string()),
            "{again}"
        );
        assert_eq!(store.tip("refs/heads/main").unwrap(), Some(tip));
        // Missing or non-directory sources are errors, found before anything is published.
        std::fs::write(tmp.join("file"), "x").unwrap();
        let missing: Vec<String> = ["[TMP]/job", "[TMP]/nowhere"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        insta::assert_snapshot!(
            "publish_missing_among_others",
            publish("[TMP]/typo.git", &[], &missing)
        );
        insta::assert_snapshot!(
            "publish_file_source",
            publish("[TMP]/typo.git", &[], &["[TMP]/file".to_string()])
        );
        assert!(!tmp.join("typo.git").exists(), "a repository was created");
    }

    /// A failed `publish` leaves no repository that it created behind (missing source, file
    /// source, unsealed spool, strict privacy refusal, non-canonical shards, a failing second
    /// source after an empty first one), keeps a repository that existed (even an empty one),
    /// leaves a directory that was empty as an empty directory, and keeps a repository an
    /// earlier source of the same run published into.
    #[test]
    fn failed_publish_leaves_no_new_repository() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        fixture_spool(&tmp.join("unsealed"));
        fixture_spool(&tmp.join("job"));
        let sealed = run_cli(
            tmp,
            &["-q", "seal", "--output", "[TMP]/shards", "[TMP]/job"],
        );
        assert!(sealed.starts_with("exit: 0"), "{sealed}");
        // A shard root whose shard has a non-canonical line.
        let shard = walkdir::WalkDir::new(tmp.join("shards"))
            .into_iter()
            .map(|e| e.unwrap().into_path())
            .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .unwrap();
        let bad = tmp
            .join("bad")
            .join(shard.strip_prefix(tmp.join("shards")).unwrap());
        std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
        let text = std::fs::read_to_string(&shard).unwrap();
        std::fs::write(&bad, text.replacen("{\"action\":{", "{\"action\": {", 1)).unwrap();
        // A sealed spool with a value the strict profile refuses.
        std::fs::create_dir_all(tmp.join("webhook")).unwrap();
        for args in [
            &[
                "record",
                "--privacy",
                "reference",
                "--spool",
                "[TMP]/webhook",
            ][..],
            &["seal", "--privacy", "reference", "[TMP]/webhook"],
        ] {
            let out = run_writer(tmp, WEBHOOK_EVENT, args);
            assert!(out.starts_with("exit: 0"), "{out}");
        }
        std::fs::create_dir_all(tmp.join("empty")).unwrap();
        std::fs::write(tmp.join("file"), "x").unwrap();
        let failing: [(&str, &[&str]); 7] = [
            ("missing source", &["[TMP]/nowhere"]),
            ("file source", &["[TMP]/file"]),
            ("unsealed spool", &["[TMP]/unsealed"]),
            ("strict privacy", &["[TMP]/webhook"]),
            ("non-canonical shard", &["[TMP]/bad"]),
            ("empty, then unsealed", &["[TMP]/empty", "[TMP]/unsealed"]),
            ("empty, then missing", &["[TMP]/empty", "[TMP]/nowhere"]),
        ];
        for (what, sources) in failing {
            for repo in ["new.git", "sub/dir/new.git"] {
                let mut args = vec!["publish", "--repo"];
                let repo_arg = format!("[TMP]/{repo}");
                args.push(&repo_arg);
                args.extend(sources);
                let out = run_cli(tmp, &args);
                assert!(!out.starts_with("exit: 0"), "{what}: {out}");
                assert!(!tmp.join(repo).exists(), "{what}: {repo} was left behind");
                assert!(
                    !tmp.join("sub").exists(),
                    "{what}: its parents were left behind"
                );
            }
            // An existing empty directory stays, empty.
            std::fs::create_dir_all(tmp.join("was-empty.git")).unwrap();
            let mut args = vec!["publish", "--repo", "[TMP]/was-empty.git"];
            args.extend(sources);
            assert!(!run_cli(tmp, &args).starts_with("exit: 0"), "{what}");
            assert_eq!(listing(&tmp.join("was-empty.git")), ["/"], "{what}");
        }
        // After a source that published nothing, the ref was not changed, and the message says so.
        insta::assert_snapshot!(
            "publish_empty_then_unsealed",
            run_cli(
                tmp,
                &[
                    "publish",
                    "--repo",
                    "[TMP]/new.git",
                    "[TMP]/empty",
                    "[TMP]/unsealed"
                ]
            )
        );
        assert!(!tmp.join("new.git").exists());
        // A repository that existed is kept, with or without a ledger.
        Store::open_or_init_bare(&tmp.join("existing.git"), "refs/heads/main").unwrap();
        let out = run_cli(
            tmp,
            &["publish", "--repo", "[TMP]/existing.git", "[TMP]/unsealed"],
        );
        assert!(out.starts_with("exit: 1"), "{out}");
        assert!(Store::open(&tmp.join("existing.git")).is_ok());
        // A repository an earlier source of this run published into is kept.
        let out = run_cli(
            tmp,
            &[
                "publish",
                "--repo",
                "[TMP]/kept.git",
                "[TMP]/job",
                "[TMP]/unsealed",
            ],
        );
        insta::assert_snapshot!("publish_second_source_fails", out);
        let store = Store::open(&tmp.join("kept.git")).unwrap();
        assert!(store.tip("refs/heads/main").unwrap().is_some());
    }

    /// A repeated identical `record` says the event is unchanged instead of "recorded": phase
    /// and generic inputs, and an exact replay after the producer was sealed; a different event
    /// after the seal is refused. Stdout (the event, with the clock's `recorded_at`) is left out.
    #[test]
    fn repeated_record_says_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        std::fs::create_dir_all(tmp.join("spool")).unwrap();
        let phase = r#"{"phase":"review.item","status":"started","component":"review-runner","identity":{"item":5},"subject":{"repository":"openclaw/openclaw","kind":"issue","number":5},"retryable":true,"mutation":false}"#;
        let generic = r#"{"scope":"review","identity":"x","type":"review.started","component":"review","subject":{"repository":"openclaw/openclaw","kind":"cluster","clusterId":"c1"},"action":{"name":"review","status":"started","retryable":true,"mutation":false}}"#;
        let other = phase.replace("\"item\":5", "\"item\":6");
        let record = ["record", "--spool", "[TMP]/spool"];
        let without_stdout = |text: String| {
            let (head, rest) = text.split_once("--- stdout\n").unwrap();
            let (_, stderr) = rest.split_once("--- stderr\n").unwrap();
            format!("{head}{stderr}")
        };
        let mut steps = Vec::new();
        for (what, input) in [
            ("phase", phase),
            ("phase again", phase),
            ("generic", generic),
            ("generic again", generic),
        ] {
            steps.push(format!(
                "{what}: {}",
                without_stdout(run_writer(tmp, input, &record))
            ));
        }
        let sealed = run_cli(tmp, &["-q", "seal", "[TMP]/spool"]);
        assert!(sealed.starts_with("exit: 0"), "{sealed}");
        for (what, input) in [
            ("phase after the seal", phase),
            ("another after the seal", &other),
        ] {
            steps.push(format!(
                "{what}: {}",
                without_stdout(run_writer(tmp, input, &record))
            ));
        }
        insta::assert_snapshot!("record_repeated", steps.join("\n"));
    }

    /// A malformed producer lock (non-canonical, empty, not JSON) refuses `seal` and `record`
    /// with the way out: the file may be removed when no writer is running.
    #[test]
    fn malformed_producer_lock_says_it_may_be_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = &files::absolute_root(tmp.path()).unwrap();
        let phase = r#"{"phase":"review.item","status":"started","component":"review-runner","identity":{"item":5},"subject":{"repository":"openclaw/openclaw","kind":"issue","number":5},"retryable":true,"mutation":false}"#;
        std::fs::create_dir_all(tmp.join("spool")).unwrap();
        let recorded = run_writer(tmp, phase, &["record", "--spool", "[TMP]/spool"]);
        assert!(recorded.starts_with("exit: 0"), "{recorded}");
        // The producer's lock sits beside its partition marker, under the same digest.
        let marker = walkdir::WalkDir::new(tmp.join("spool"))
            .into_iter()
            .map(|e| e.unwrap().into_path())
            .find(|p| p.to_string_lossy().contains("/_partitions/"))
            .unwrap();
        let digest = marker.file_stem().unwrap().to_string_lossy().into_owned();
        let lock = tmp.join(format!(
            "spool/{}/_locks/{digest}.lock",
            crate::writer::spool::SPOOL_DIR
        ));
        let mut outputs = Vec::new();
        for content in ["{\"pid\": 1}\n", "", "not a lock\n"] {
            std::fs::write(&lock, content).unwrap();
            outputs.push(run_cli(tmp, &["seal", "[TMP]/spool"]));
            outputs.push(run_writer(
                tmp,
                phase,
                &["record", "--spool", "[TMP]/spool"],
            ));
        }
        insta::assert_snapshot!("malformed_producer_lock", outputs.join("\n"));
    }
}
