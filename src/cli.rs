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
enum Command {
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
        /// Spool roots (directories containing .clawsweeper-repair/action-events).
        #[arg(required = true)]
        spools: Vec<PathBuf>,
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
    };
    let result = match cli.command {
        Command::Seal {
            output,
            json,
            spools,
        } => {
            let output = output.or_else(|| {
                env.get("CLAWSWEEPER_ACTION_LEDGER_OUTPUT_ROOT")
                    .filter(|s| !s.trim().is_empty())
                    .map(PathBuf::from)
            });
            run_seal(&mut out, output, json, &spools)
        }
        Command::Publish {
            repo,
            ref_name,
            layout: _,
            json,
            sources,
        } => run_publish(&mut out, env, &repo, &ref_name, json, &sources),
    };
    match result {
        Ok(()) => 0,
        Err(Failure { code, message }) => {
            let _ = writeln!(out.stderr, "error: {message}");
            code
        }
    }
}

struct Printer<'a> {
    stdout: &'a mut dyn Write,
    stderr: &'a mut dyn Write,
    quiet: bool,
}

impl Printer<'_> {
    fn data(&mut self, line: &str) {
        let _ = writeln!(self.stdout, "{line}");
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

fn publish_failure(source: &std::path::Path, e: publish::Error) -> Failure {
    use publish::Error as E;
    let code = match &e {
        E::BindingConflict { .. }
        | E::PayloadConflict(_)
        | E::IdentityConflict(_)
        | E::HistoryCycle(_)
        | E::Provenance { .. }
        | E::Contention { .. } => 1,
        E::Seal(seal::Error::LateEvents(_) | seal::Error::Unsealed { .. }) => 1,
        _ => 2,
    };
    Failure {
        code,
        message: format!("{}: {e}; the ledger ref was not changed", source.display()),
    }
}

fn path_list(paths: &[String]) -> Value {
    Value::Array(paths.iter().map(Value::str).collect())
}

fn run_seal(
    out: &mut Printer,
    output: Option<PathBuf>,
    json: bool,
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
        let spool = Spool::open(root).map_err(|e| seal_failure(e.into()))?;
        let report = seal::seal(
            &spool,
            output_root.as_ref(),
            now_ms(),
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

/// The wall clock in milliseconds since the epoch (recorded in lock files only).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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

fn run_publish(
    out: &mut Printer,
    env: &Env,
    repo: &std::path::Path,
    ref_name: &str,
    json: bool,
    sources: &[PathBuf],
) -> Result<(), Failure> {
    let mut options = Options::new(signature(env)?);
    options.ref_name = ref_name.to_owned();
    let store = Store::open_or_init_bare(repo, ref_name).map_err(|e: store::Error| {
        Failure::input(format!(
            "cannot open state repository {}: {e}",
            repo.display()
        ))
    })?;
    for source in sources {
        let root = crate::files::absolute_root(source).map_err(Failure::input)?;
        let publication =
            publish::publish(&store, &root, &options).map_err(|e| publish_failure(source, e))?;
        print_publication(out, source, ref_name, json, &publication);
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

/// Reads the process environment into an [`Env`] (for `main`).
pub fn process_env() -> Env {
    std::env::vars().collect()
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
        let code = run(argv, &env, &mut out, &mut err);
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
