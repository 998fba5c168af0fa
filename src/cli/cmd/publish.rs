//! `publish`: sealed spools or shard roots into the state repository, one commit each.
//!
//! Every source is looked up before the repository is created or anything is published, so a
//! mistyped path publishes nothing. Sources are published in the order given; a failure stops
//! the run and says which sources before it landed. A repository that this run created is
//! removed again when its first publication fails, so a failed first publication leaves
//! nothing behind.

use std::path::{Path, PathBuf};

use crate::canonical::Value;
use crate::ledger::layout::Layout;
use crate::privacy::Profile;
use crate::progress::Progress;
use crate::publish::{self, Options, Publication, Status};
use crate::store::{self, Store};
use crate::writer::seal;

use crate::cli::Env;
use crate::cli::output::{Failure, Printer, line};
use crate::cli::settings::{ExpectedFrom, signature};

/// A publish error as a failure, refused or not as [`publish::Error::is_refusal`] says; the message says whether earlier sources landed, and
/// a provenance refusal names the shard, the flag (or variable) and the rule.
fn publish_failure(
    source: &Path,
    earlier: usize,
    e: publish::Error,
    expected_from: Option<&ExpectedFrom>,
) -> Failure {
    use publish::Error as E;
    let refused = e.is_refusal();
    // A push whose connection broke may have landed: the remote holds its old tip or this
    // whole publication, and running the command again tells (a landed one is unchanged).
    let remote = matches!(&e, E::Remote(r) if r.may_have_landed());
    let source = source.display();
    let e = provenance_detail(&e, expected_from).unwrap_or_else(|| e.to_string());
    Failure::classified(
        refused,
        match (remote, earlier) {
            (true, 0) => format!("{source}: {e}; {REMOTE_EITHER}"),
            (true, _) => format!(
                "{source}: {e}; {REMOTE_EITHER}, and the {earlier} source(s) before it were published"
            ),
            (false, 0) => format!("{source}: {e}; the ledger ref was not changed"),
            (false, _) => format!(
                "{source}: {e}; this source was not published (the {earlier} source(s) before it were)"
            ),
        },
    )
}

/// The message of a refusal by `--expected-*` (the library's, which is the reference's, with
/// the shard, the flag or variable the expected value came from, and the rule); `None` for
/// any other error.
fn provenance_detail(e: &publish::Error, expected_from: Option<&ExpectedFrom>) -> Option<String> {
    use crate::writer::record::RunField;
    use publish::Error as E;
    const PATHS: &str = "--expected-event-paths";
    Some(match e {
        E::Provenance { path, field, .. } => {
            let from = RunField::ALL
                .iter()
                .position(|f| f.name() == *field)
                .and_then(|i| expected_from.map(|from| from[i].clone()))
                .unwrap_or_else(|| "--expected-producer".into());
            format!(
                "{e} (shard {path}; every shard must come from the expected producer run: {field} from {from})"
            )
        }
        E::ManifestFileMissing(_) => {
            format!("{e} ({PATHS}: every listed shard must be in the source)")
        }
        E::ManifestMismatch { .. } => {
            format!("{e} ({PATHS}: a spool's shards must be exactly the listed ones)")
        }
        E::ManifestEmpty | E::ManifestTooLong | E::ManifestOrder | E::ManifestPath(_) => {
            format!("{PATHS}: {e}")
        }
        _ => return None,
    })
}

/// What a transport failure leaves on the remote.
const REMOTE_EITHER: &str = "the remote holds either its old tip or this whole publication";

/// What `publish` prints on stdout, one line per source.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::cli) enum Shape {
    /// The default: `STATUS SOURCE: counts, REF at COMMIT`.
    Summary,
    /// `--manifest`: the reference's import manifest.
    Manifest,
    /// `--json`: a `publication` record.
    Json,
}

/// The resolved flags of one `publish` run.
pub(in crate::cli) struct Request<'a> {
    /// `--repo`: the (cache) repository, created bare when absent.
    pub(in crate::cli) repo: &'a Path,
    /// `--ref`: the local ledger ref.
    pub(in crate::cli) ref_name: &'a str,
    /// Where the commits land: the local ref, or a remote's ref by leased push.
    pub(in crate::cli) target: &'a publish::Target,
    /// `--layout` of a new ledger.
    pub(in crate::cli) layout: Option<Layout>,
    /// `--max-attempts` when the ref moves under a publication.
    pub(in crate::cli) max_attempts: u32,
    /// `--wait` for a pending publication on a remote; `None` with `--direct`.
    pub(in crate::cli) pending_wait: Option<std::time::Duration>,
    /// What stdout gets per source.
    pub(in crate::cli) shape: Shape,
    /// `--privacy`.
    pub(in crate::cli) profile: Profile,
    /// The sources, published in this order.
    pub(in crate::cli) sources: &'a [PathBuf],
    /// `--accept-rewritten-remote`: the remote's tip as it is now becomes the confirmed one.
    pub(in crate::cli) accept_rewritten_remote: bool,
    /// `--expected-producer` and `--expected-FIELD`: the producer run every shard must come
    /// from, and where each field came from.
    pub(in crate::cli) expected: Option<(publish::ExpectedProducer, ExpectedFrom)>,
    /// `--expected-event-paths`: the exact shard paths of each source.
    pub(in crate::cli) expected_event_paths: Option<Vec<String>>,
}

/// Runs `publish`.
pub(in crate::cli) fn run(out: &mut Printer, env: &Env, request: &Request) -> Result<(), Failure> {
    let Request {
        repo,
        ref_name,
        target,
        layout,
        max_attempts,
        pending_wait,
        shape,
        profile,
        sources,
        accept_rewritten_remote,
        ref expected,
        ref expected_event_paths,
    } = *request;
    // A publish's peak memory is what a CI job must budget for: large buffers are returned to
    // the system when freed, not kept in the worker threads' heap arenas.
    store::map_large_allocations();
    let mut options = Options::new(signature(env)?);
    options.land.ref_name = ref_name.to_owned();
    options.land.target = target.clone();
    options.layout = layout;
    options.land.max_attempts = max_attempts;
    options.pending_wait = pending_wait;
    options.privacy = profile;
    options.expected_producer = expected.as_ref().map(|(producer, _)| producer.clone());
    options.expected_event_paths = expected_event_paths.clone();
    let expected_from = expected.as_ref().map(|(_, from)| from);
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
            return Err(publish_failure(source, 0, e, expected_from));
        }
        roots.push(root);
    }
    // Staging directories of an earlier first publication killed while creating the
    // repository: removed when no live creator can own them, and named.
    for path in store::remove_stale_staging(repo, crate::cli::settings::system_now()) {
        out.note(&format!(
            "removed {}, left by a killed creation of the repository",
            path.display()
        ));
    }
    let was_empty_dir = std::fs::read_dir(repo).is_ok_and(|mut d| d.next().is_none());
    // Parent directories that creating the repository would create, deepest first.
    let new_parents: Vec<PathBuf> = repo
        .ancestors()
        .skip(1)
        .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
        .map(Path::to_path_buf)
        .collect();
    let (store, created) =
        Store::open_or_create_bare(repo, ref_name).map_err(|e: store::Error| {
            Failure::input(format!(
                "cannot open state repository {}: {e}",
                repo.display()
            ))
        })?;
    if accept_rewritten_remote
        && let Err(failure) = crate::cli::settings::accept_rewritten(&store, target, ref_name)
    {
        if created {
            drop(store);
            discard_new_repository(repo, was_empty_dir, &new_parents);
        }
        return Err(failure);
    }
    // Whether an earlier source of this run moved the ref (else a failure changed nothing).
    let mut landed = false;
    let meter = out.meter();
    meter.begin("sources", Some(sources.len() as u64));
    // Live projection's drain, resolved at the first spool source with an outbox.
    let mut live = None;
    for (i, (source, root)) in sources.iter().zip(&roots).enumerate() {
        let published = finalize_spool_input(out, env, &mut live, root, profile)
            .and_then(|()| publish::publish(&store, root, &options).map_err(Into::into));
        let publication = match published {
            Ok(p) => p,
            Err(e) => {
                let failure = match e {
                    SourceError::Publish(e) => {
                        publish_failure(source, if landed { i } else { 0 }, *e, expected_from)
                    }
                    SourceError::Other(f) => f,
                };
                if created {
                    drop(store);
                    discard_new_repository(repo, was_empty_dir, &new_parents);
                }
                return Err(failure);
            }
        };
        landed |= publication.status == Status::Created;
        let shown_ref = target.describe(ref_name);
        meter.suspend(|| print_publication(out, source, &shown_ref, shape, &publication));
        meter.advance(1, 0);
    }
    meter.end();
    Ok(())
}

/// Why one source was not published.
enum SourceError {
    /// The publication (or its spool input's seals) failed.
    Publish(Box<publish::Error>),
    /// Live projection's finalization failed otherwise (its settings, the outbox).
    Other(Failure),
}

impl From<publish::Error> for SourceError {
    fn from(e: publish::Error) -> Self {
        SourceError::Publish(Box::new(e))
    }
}

/// Two-pass finalization of a spool source whose outbox holds live-projection requests
/// ([`crate::live::finalize::finalize_sealed`], the procedure `seal` runs): the spool must be
/// sealed apart from its projection-failure-only producers; the outbox is drained under the
/// deadline and those producers are sealed, so the publication carries every failure. A
/// source without an outbox (projection never used) is left exactly as it is.
fn finalize_spool_input(
    out: &mut Printer,
    env: &Env,
    live: &mut Option<crate::cli::settings::LiveDrain>,
    root: &Path,
    profile: Profile,
) -> Result<(), SourceError> {
    use crate::writer::spool::{self, Spool};
    let outbox = root.join(crate::live::outbox::DIR);
    if !root.join(spool::SPOOL_DIR).is_dir() || !outbox.is_dir() {
        return Ok(());
    }
    let spool = Spool::open(root).map_err(|e| publish::Error::Seal(e.into()))?;
    if live.is_none() {
        *live = Some(crate::cli::settings::LiveDrain::from_env(env).map_err(SourceError::Other)?);
    }
    let drain = live.as_ref().expect("resolved above").drain();
    let options = seal::Options {
        privacy: profile,
        ..seal::Options::default()
    };
    match crate::live::finalize::finalize_sealed(
        &spool,
        crate::cli::settings::system_now(),
        &options,
        &drain,
    ) {
        Ok((_, drained)) => {
            for line in &drained.log {
                out.note(line);
            }
            Ok(())
        }
        Err(crate::live::finalize::Error::Seal(e)) => Err(publish::Error::Seal(e).into()),
        Err(other) => Err(SourceError::Other(Failure::input(format!(
            "{}: {other}; the ledger ref was not changed by this source",
            root.display()
        )))),
    }
}

/// Removes the repository that this `publish` created at `repo` when a publication failed and
/// no ref was written to it (no earlier source landed): a failed first publication leaves no
/// repository behind. The repository is renamed aside first and checked there, so that a
/// publisher that wrote a ref to it meanwhile gets it back untouched. A directory that was
/// empty before is left as an empty directory; parent directories made for it (`new_parents`,
/// deepest first) are removed while empty. A repository that existed is never removed.
fn discard_new_repository(repo: &Path, was_empty_dir: bool, new_parents: &[PathBuf]) {
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
fn has_refs(git_dir: &Path) -> bool {
    let packed = match std::fs::metadata(git_dir.join("packed-refs")) {
        Ok(m) => m.len() > 0,
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    };
    packed || holds_file(&git_dir.join("refs"))
}

/// Whether anything but directories is below `dir` (unreadable counts as yes).
fn holds_file(dir: &Path) -> bool {
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

/// One line on stdout for a publication, in the requested shape.
fn print_publication(
    out: &mut Printer,
    source: &Path,
    ref_name: &str,
    shape: Shape,
    p: &Publication,
) {
    let status = match p.status {
        Status::Created => "created",
        Status::Unchanged => "unchanged",
        Status::Empty => "empty",
    };
    let commit = p.commit.map(|c| c.to_hex());
    let summary = if p.status == Status::Empty {
        format!(
            "empty {}: no events (no spool events, no shards); no commit, {} {}",
            source.display(),
            ref_name,
            commit
                .as_ref()
                .map_or("unchanged".to_owned(), |c| format!("stays at {c}")),
        )
    } else {
        format!(
            "{status} {}: {} shard(s) new, {} already present, {} file(s) written, {} at {}",
            source.display(),
            p.manifest.created,
            p.manifest.unchanged,
            p.files_written,
            ref_name,
            commit.as_deref().unwrap_or("(no commit)"),
        )
    };
    match shape {
        Shape::Summary => out.data(&summary),
        Shape::Manifest => {
            out.data(&p.manifest.to_json());
            out.note(&summary);
        }
        Shape::Json => {
            // The manifest is already canonical JSON: spliced in, not parsed again.
            let mut record = line(&Value::object([
                ("type", Value::str("publication")),
                ("source", Value::str(source.display().to_string())),
                ("ref", Value::str(ref_name)),
                ("status", Value::str(status)),
                ("commit", commit.clone().map_or(Value::Null, Value::String)),
                ("attempts", Value::from(i64::from(p.attempts))),
            ]));
            // "manifest" sorts between "commit" and "ref".
            let at = record.find(",\"ref\":").expect("a ref member");
            record.insert_str(at, &format!(",\"manifest\":{}", p.manifest.to_json()));
            out.data(&record);
            out.note(&summary);
        }
    }
}
