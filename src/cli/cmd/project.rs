//! `project`: a view folded from the ledger's events ([`crate::project`]), printed, saved,
//! brought up to date from a saved file, or compared with a legacy projection.
//!
//! It reads the revision as `log` does (`--ref`, or `--rev`). Bad input (a view flag the view
//! does not have, a `--from` or `--compare` file that is not what it should be) exits 2 and
//! writes nothing; differences found by `--compare` exit 1.

use std::io::Write as _;

use crate::cli::args::ProjectArgs;
use crate::cli::output::{Failure, Printer};
use crate::project::{self, Kind, Limits, Request};
use crate::store::Store;

/// Runs `project` with its flags.
pub(in crate::cli) fn run(
    out: &mut Printer,
    env: &crate::cli::Env,
    args: &ProjectArgs,
) -> Result<(), Failure> {
    let kind = Kind::from_name(&args.view).expect("clap lists the views");
    if args.markdown && kind != Kind::ReviewHistory {
        return Err(Failure::input(format!(
            "--markdown: the {} view has no Markdown form (review-history has)",
            args.view
        )));
    }
    if args.dot && kind != Kind::Evidence {
        return Err(Failure::input(format!(
            "--dot: the {} view has no graph (evidence has)",
            args.view
        )));
    }
    let filter = crate::cli::cmd::log::filter(
        args.subject.clone(),
        None,
        None,
        args.event_type.clone(),
        args.producer.clone(),
        args.since.clone(),
        args.until.clone(),
    )?;
    let read_file = |flag: &str, path: &std::path::Path| {
        std::fs::read_to_string(path)
            .map_err(|e| Failure::input(format!("{flag} {}: {e}", path.display())))
    };
    // Bytes: the saved form is binary (`project::saved`), or the JSON document of before.
    let from = match &args.from {
        Some(path) => Some((
            path.display().to_string(),
            std::fs::read(path)
                .map_err(|e| Failure::input(format!("--from {}: {e}", path.display())))?,
        )),
        None => None,
    };
    let legacy = match &args.compare {
        Some(path) => {
            let text = read_file("--compare", path)?;
            let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                Failure::input(format!("--compare {}: not JSON: {e}", path.display()))
            })?;
            Some(value)
        }
        None => None,
    };
    let unreadable = |e: &dyn std::fmt::Display| {
        Failure::input(format!(
            "cannot fold the {} view of {}: {e}",
            args.view,
            args.repo.display()
        ))
    };
    let read = crate::cli::cmd::verify::Read::of(&args.ref_name, args.rev.as_deref());
    let (store, commit, name) = match &args.remote {
        None => {
            let store = Store::open(&args.repo).map_err(|e| unreadable(&e))?;
            let commit = read
                .resolve(&store)
                .map_err(|e| unreadable(&read.explain(&store, &e)))?;
            (store, commit, read.name().to_owned())
        }
        Some(url) => {
            let url = crate::cli::settings::absolute_url(url);
            let ref_name = args.remote_ref.as_deref().unwrap_or(&args.ref_name);
            let timeout = crate::cli::settings::remote_timeout(env)?;
            let store =
                Store::open_or_init_bare(&args.repo, &args.ref_name).map_err(|e| unreadable(&e))?;
            let remote = |e: &dyn std::fmt::Display| {
                Failure::input(format!("cannot read {url} {ref_name}: {e}"))
            };
            let tip = crate::store::remote::remote_tip(store.git_dir(), &url, ref_name, timeout)
                .map_err(|e| remote(&e))?
                .ok_or_else(|| remote(&"no such ref on the remote (nothing published yet?)"))?;
            crate::store::remote::fetch(store.git_dir(), &url, ref_name, timeout)
                .map_err(|e| remote(&e))?;
            (store, tip, format!("{url} {ref_name}"))
        }
    };
    // Only the forms written: a large view's document or lines cost memory in proportion.
    let forms = project::Forms {
        json: args.json || legacy.is_some(),
        text: !(args.json || args.markdown || args.dot) && legacy.is_none(),
        markdown: args.markdown,
        dot: args.dot,
    };
    let request = Request {
        kind,
        commit,
        filter: &filter,
        limits: Limits {
            entries: args.limit,
        },
        from: from.as_ref().map(|(f, b)| (f.as_str(), b.as_slice())),
    };
    // A document printed is written as it is serialized, never held whole (unless compared);
    // so is the saved form.
    let streamed = args.json && legacy.is_none();
    let failed = |e| match e {
        project::Error::Document { .. }
        | project::Error::NotDescendant { .. }
        | project::Error::Saved { .. } => Failure::input(e),
        other => unreadable(&other),
    };
    let save_failed =
        |path: &std::path::Path, e| Failure::input(format!("--save {}: {e}", path.display()));
    let rendered = match &args.save {
        _ if streamed && args.save.is_none() => {
            let mut sink = std::io::BufWriter::with_capacity(1 << 16, Raw(out));
            let rendered = project::project_into(&store, &request, forms, &mut sink);
            sink.flush().expect("Raw takes every write");
            rendered.map_err(failed)?
        }
        Some(path) => {
            // The fold's own failure leaves the file as it was, and is reported as the fold's.
            let mut folded = None;
            let saved = crate::durable::replace_file_with(path, None, |file| {
                let rendered = if streamed {
                    let mut sink = std::io::BufWriter::with_capacity(1 << 16, Raw(&mut *out));
                    let rendered =
                        project::project_saving(&store, &request, forms, Some(&mut sink), file);
                    sink.flush().expect("Raw takes every write");
                    rendered
                } else {
                    project::project_saving(&store, &request, forms, None, file)
                };
                let ok = rendered.is_ok();
                folded = Some(rendered);
                if ok {
                    Ok(())
                } else {
                    Err(std::io::Error::other("the fold failed"))
                }
            });
            match (folded, saved) {
                (Some(Err(e)), _) => return Err(failed(e)),
                (_, Err(e)) => return Err(save_failed(path, e)),
                (Some(Ok(rendered)), Ok(())) => rendered,
                (None, Ok(())) => unreachable!("a saved file was written by the fold"),
            }
        }
        None => project::project_forms(&store, &request, forms).map_err(failed)?,
    };
    let since = from
        .as_ref()
        .map(|(f, _)| format!(" ({} new since the checkpoint of {f})", rendered.folded))
        .unwrap_or_default();
    let summary = format!(
        "{} of {} ({}): {} event(s) folded{since}, {} left out by the limit",
        args.view,
        name,
        commit.to_hex(),
        rendered.events,
        rendered.truncated,
    );
    if let Some(legacy) = legacy {
        let doc: serde_json::Value =
            serde_json::from_str(&rendered.json).expect("the fold writes JSON");
        let differences = project::compare(&legacy, &doc);
        for d in &differences {
            out.data(&d.to_string());
        }
        out.note(&summary);
        if !differences.is_empty() {
            return Err(Failure::refused(format!(
                "{} difference(s) between {} and the fold",
                differences.len(),
                args.compare.as_ref().expect("compared").display()
            )));
        }
        out.note("the legacy projection equals the fold");
        return Ok(());
    }
    if streamed {
        out.note(&summary);
        return Ok(());
    }
    let text = if args.markdown {
        rendered.markdown.unwrap_or_default()
    } else if args.dot {
        rendered.dot.unwrap_or_default()
    } else if args.json {
        rendered.json
    } else {
        rendered.text
    };
    out.raw(text.as_bytes());
    out.note(&summary);
    Ok(())
}

/// The printer's stdout as an [`std::io::Write`]: a failed write is remembered by the printer
/// (and reported at the end), so writing here never fails.
struct Raw<'p, 'a>(&'p mut Printer<'a>);

impl std::io::Write for Raw<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.raw(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
