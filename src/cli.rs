//! The command line: argument parsing (clap), resolution of environment inputs, and one printer.
//!
//! Data goes to stdout, diagnostics and summaries to stderr. Exit codes (design.md §9): 0 success,
//! 1 the command ran and found a conflict or a refusal, 2 usage, input or I/O error.
//! The environment and the clock are read here only and passed to the library as values.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::canonical::{self, Value};
use crate::publish::{self, Options, Publication, Status};
use crate::record;
use crate::seal;
use crate::spool::Spool;
use crate::store::{self, Signature, Store};

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

/// The hook shipped in `hooks/pre-receive`.
const PRE_RECEIVE: &str = include_str!("../hooks/pre-receive");

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
        /// Spool roots (directories containing .clawsweeper-repair/action-events).
        #[arg(required = true)]
        spools: Vec<PathBuf>,
    },
    /// Verify the ledger at a revision, or a push range; exit 1 when there are findings.
    Verify {
        /// The state repository.
        #[arg(long, default_value = "./state.git")]
        repo: PathBuf,
        /// The revision to verify (commit id, ref name, HEAD, with ~N or ^).
        #[arg(long, default_value = "HEAD", conflicts_with = "range")]
        rev: String,
        /// Verify a push instead: `OLD..NEW` (OLD all zeros for a new ref).
        #[arg(long)]
        range: Option<String>,
        /// One JSON object per finding plus a summary object on stdout.
        #[arg(long)]
        json: bool,
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
        /// Tree layout; only `reference` exists in this version.
        #[arg(long, default_value = "reference", value_parser = ["reference"])]
        layout: String,
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
        /// Sealed spool roots or finalized shard roots, published in the order given.
        #[arg(required = true)]
        sources: Vec<PathBuf>,
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
        Command::Record { spool, input } => run_record(&mut out, env, stdin, spool, &input),
        Command::Seal {
            output,
            json,
            interrupt_open_attempts,
            reason,
            spools,
        } => {
            let output = output.or_else(|| {
                env.get("CLAWSWEEPER_ACTION_LEDGER_OUTPUT_ROOT")
                    .filter(|s| !s.trim().is_empty())
                    .map(PathBuf::from)
            });
            let interrupt = interrupt_open_attempts
                .then(|| crate::interrupt::Reason::parse(&reason))
                .flatten();
            run_seal(&mut out, output, json, interrupt, &spools)
        }
        Command::Verify {
            repo,
            rev,
            range,
            json,
        } => run_verify(&mut out, env, &repo, &rev, range.as_deref(), json),
        Command::Hooks {
            command: HooksCommand::Install { repo, ref_name },
        } => run_hooks_install(&mut out, &repo, &ref_name),
        Command::Publish {
            repo,
            ref_name,
            layout: _,
            remote,
            remote_ref,
            max_attempts,
            json,
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
                max_attempts,
                json,
                &sources,
            )
        }
    };
    let code = match result {
        Ok(()) => 0,
        Err(Failure { code, message }) => {
            let _ = writeln!(out.stderr, "error: {message}");
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
        | seal::Error::Unsealed { .. } => 1,
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
        | E::Contention { .. } => 1,
        E::Seal(
            seal::Error::LateEvents(_) | seal::Error::Unsealed { .. } | seal::Error::OrphanSeal(_),
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
) -> Result<(), Failure> {
    let root = spool
        .or_else(|| {
            env.get("CLAWSWEEPER_ACTION_LEDGER_ROOT")
                .filter(|s| !s.trim().is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("."));
    let root = crate::files::absolute_root(&root).map_err(Failure::input)?;
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
    let value =
        canonical::parse(text.trim_end()).map_err(|e| Failure::input(format!("{source}: {e}")))?;
    let now_ms = now_ms();
    let result = match (value.get("phase"), value.get("scope")) {
        (Some(_), None) => record::record_phase(&root, &value, env, now_ms),
        (None, Some(_)) => record::record_action(&root, &value, env, now_ms),
        _ => {
            return Err(Failure::input(format!(
                "{source}: the input must have either `phase` (phase API) or `scope` (action API)"
            )));
        }
    };
    match result {
        Ok(Some(event)) => {
            out.data(&event.json);
            out.note(&format!(
                "recorded {} {} in {}",
                event.event_type(),
                event.event_id,
                root.display()
            ));
            Ok(())
        }
        Ok(None) => {
            out.note("recording is disabled (set CLAWSWEEPER_ACTION_LEDGER_FORCE=1 to enable)");
            Ok(())
        }
        Err(e) => Err(Failure {
            code: if e.is_conflict() { 1 } else { 2 },
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
        std::fs::write(&path, &script)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
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
) -> Result<(), Failure> {
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
            let report =
                crate::verify::verify_range(&store, old, new).map_err(|e| unreadable(&e))?;
            (report, format!("push {range}"))
        }
        None => {
            let commit = resolve(rev)?;
            let report =
                crate::verify::verify_revision(&store, commit).map_err(|e| unreadable(&e))?;
            (report, format!("{rev} ({})", commit.to_hex()))
        }
    };
    for f in &report.findings {
        if json {
            out.data(&canonical::to_canonical_unchecked(&Value::object([
                ("type", Value::str("finding")),
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
            ("shards", Value::from(report.shards as i64)),
            ("events", Value::from(report.events as i64)),
            ("bindings", Value::from(report.bindings as i64)),
        ])));
    }
    out.note(&format!(
        "verified {what}: {} shard(s), {} event(s), {} binding(s), {} finding(s)",
        report.shards,
        report.events,
        report.bindings,
        report.findings.len()
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
    interrupt: Option<crate::interrupt::Reason>,
    spools: &[PathBuf],
) -> Result<(), Failure> {
    // Opened once: every spool's shards go into this directory, whatever its path turns into.
    let output_root = match &output {
        Some(dir) => Some(
            crate::files::Root::open_or_create(dir, seal::OUTPUT_ROOT_LABEL)
                .map_err(Failure::input)?,
        ),
        None => None,
    };
    for root in spools {
        if let Some(reason) = interrupt {
            let written = crate::interrupt::interrupt_open_attempts(root, reason, now_ms())
                .map_err(|e| Failure {
                    code: match &e {
                        crate::interrupt::Error::Record(r) if r.is_conflict() => 1,
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
        let spool = Spool::open(root).map_err(|e| seal_failure(e.into()))?;
        let report = seal::seal(
            &spool,
            output_root.as_ref(),
            now_ms().max(0) as u64,
            &seal::Options::default(),
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
    max_attempts: u32,
    json: bool,
    sources: &[PathBuf],
) -> Result<(), Failure> {
    let mut options = Options::new(signature(env)?);
    options.ref_name = ref_name.to_owned();
    options.max_attempts = max_attempts;
    let store = Store::open_or_init_bare(repo, ref_name).map_err(|e: store::Error| {
        Failure::input(format!(
            "cannot open state repository {}: {e}",
            repo.display()
        ))
    })?;
    for (i, source) in sources.iter().enumerate() {
        let root = crate::files::absolute_root(source).map_err(Failure::input)?;
        // The library follows the reference (a root without shards imports nothing); a user who
        // names a directory that holds neither a spool nor shards has made a mistake.
        if !root.join(crate::spool::SPOOL_DIR).is_dir()
            && !root.join(crate::shard::EVENTS_ROOT).is_dir()
        {
            return Err(publish_failure(
                source,
                i,
                publish::Error::UnknownSource(root),
            ));
        }
        let publication = publish::publish_to(&store, &root, &options, target)
            .map_err(|e| publish_failure(source, i, e))?;
        let shown_ref = match target {
            publish::Target::Local => ref_name.to_owned(),
            publish::Target::Remote { url, ref_name } => format!("{url} {ref_name}"),
        };
        print_publication(out, source, &shown_ref, json, &publication);
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files;
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
            run_cli(tmp, &["publish", "--layout", "fanout", "x"])
        );
    }
}
