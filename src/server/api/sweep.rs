//! The stale-outcome sweep: `GET /api/cron/outcome-sweep` (authorised by `Authorization:
//! Bearer <cron secret>`, compared by digest in constant time; 503 when no secret is
//! configured) and the optional timer. Both scan for candidates on a read thread and land them
//! through the writer like any other write.
//!
//! The timeout is measured on this server's clock from when it first saw an action pending (at
//! creation for the actions it created), never from another writer's `created_at`
//! ([`crate::finality::sweep`](mod@crate::finality::sweep)): servers whose clocks disagree can share one remote. Record
//! times well ahead of this clock are logged and answered (`clock_skew`), never acted on.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;

use super::App;
use super::respond::{STORE_UNAVAILABLE, answer, error, error_with, with_internal};
use crate::canonical::Value;
use crate::finality::{
    self,
    batch::{self, BatchError, Overlay},
};
use crate::server::auth;
use crate::server::writer::{Answer, Reply};
use crate::time::Timestamp;

/// Starts the timer sweep when configured.
pub fn spawn_sweeper(app: &Arc<App>) -> Option<tokio::task::JoinHandle<()>> {
    let every = app.settings.sweep_every?;
    let app = app.clone();
    Some(tokio::spawn(async move {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        loop {
            interval.tick().await;
            match run_sweep(&app).await {
                Ok(a) => {
                    let n = a
                        .body
                        .get("rows_swept")
                        .and_then(Value::as_f64)
                        .unwrap_or(0.0);
                    if n > 0.0 {
                        (app.settings.log)(&format!(
                            "sweep: {n} stale outcome(s) to lost_confirmation"
                        ));
                    }
                }
                Err(e) => {
                    (app.settings.log)(&crate::store::remote::redact(&format!("sweep failed: {e}")))
                }
            }
        }
    }))
}

/// Scans the tip for stale outcomes on a read thread ([`batch::sweep_scan`], a cost that grows
/// with the repository), then lands the candidates that are still stale through the writer
/// ([`batch::sweep_candidates`]): requests queued behind the sweep wait for its candidates, not
/// for a walk of every action. Counted in the metrics (runs by result, actions swept).
pub(super) async fn run_sweep(app: &Arc<App>) -> Reply {
    let reply = sweep_once(app).await;
    let swept = reply.as_ref().ok().map(|a| {
        a.body
            .get("rows_swept")
            .and_then(Value::as_f64)
            .unwrap_or(0.0) as u64
    });
    app.metrics.sweep(swept);
    reply
}

async fn sweep_once(app: &Arc<App>) -> Reply {
    let minutes = f64::from(app.settings.timeout_minutes);
    let expiry = app.settings.approval_expiry;
    let started = std::time::Instant::now();
    let watch = app.clone();
    let scan = super::reads::read(app, move |ov, now| {
        let mut observations = watch.observations();
        watch.merge_saved_observations(&mut observations);
        let scan = batch::sweep_scan(ov, minutes, &expiry, now, &mut observations, &|| {
            watch.is_stopping()
        });
        let seen = observations.clone();
        drop(observations);
        watch.save_observations(&seen);
        scan
    })
    .await?;
    let Some(scan) = scan else {
        return Err(BatchError::Unavailable {
            reason: "the server is stopping: the sweep was abandoned".into(),
        });
    };
    for n in &scan.clock_skew {
        (app.settings.log)(&format!("sweep: clock skew: {n}"));
    }
    let took = started.elapsed();
    if took >= crate::server::writer::SLOW {
        (app.settings.log)(&format!(
            "slow sweep scan: {} action(s), {} candidate(s), in {} ms",
            scan.scanned,
            scan.candidates.len(),
            took.as_millis()
        ));
    }
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
            let report = batch::sweep_candidates(ov, &scan, minutes, now)?;
            // Each action the sweep closed or expired is told to the stream, as it reads now.
            let mut events = Vec::new();
            let changed = report.swept.iter().map(|s| &s.action_id);
            for id in changed.chain(report.expired.iter()) {
                if let Some(state) = ov.state(id)? {
                    let row = super::reads::action_view(
                        &state,
                        super::reads::decision_of(ov, &state).as_ref(),
                    );
                    events.push(crate::server::writer::Event::updated(&state, row));
                }
            }
            let mut answer = Answer::new(
                200,
                Value::object([
                    ("ok", Value::Bool(true)),
                    ("orgs_scanned", Value::from(1)),
                    ("rows_swept", Value::from(report.swept.len() as i64)),
                    ("webhooks_fired", Value::from(0)),
                    (
                        "timeout_minutes",
                        Value::from(i64::from(report.timeout_minutes)),
                    ),
                    (
                        "swept",
                        Value::Array(
                            report
                                .swept
                                .iter()
                                .map(|s| Value::str(s.action_id.as_str()))
                                .collect(),
                        ),
                    ),
                    (
                        "expired",
                        Value::Array(
                            report
                                .expired
                                .iter()
                                .map(|id| Value::str(id.as_str()))
                                .collect(),
                        ),
                    ),
                    ("skipped", Value::from(report.skipped.len() as i64)),
                    ("waiting", Value::from(report.waiting as i64)),
                    (
                        "clock_skew",
                        Value::Array(
                            report
                                .clock_skew
                                .iter()
                                .map(finality::ClockNotice::to_value)
                                .collect(),
                        ),
                    ),
                ]),
            );
            answer.events = events;
            Ok(answer)
        },
    );
    // `webhooks_fired`: the deliveries the writer queued for the sweep's events once they
    // landed (one per event and endpoint that wants it; 0 without --webhooks).
    let mut answer = app.writer.submit(op).await?;
    let fired = Value::from(answer.webhooks_queued as i64);
    if let Value::Object(body) = &mut answer.body {
        body.push("webhooks_fired".into(), fired);
    }
    Ok(answer)
}

pub(super) async fn cron_sweep(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let Some(want) = app.cron_digest else {
        return error(503, "ACTION_LEDGER_CRON_SECRET not configured");
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes)
        .and_then(|v| v.strip_prefix(b"Bearer "))
        .unwrap_or_default();
    if !auth::ct_eq(&auth::sha256(presented), &want) || presented.is_empty() {
        return error(401, "Unauthorized");
    }
    // Every failure is 500 "Sweep failed", as the reference answers. A store that cannot be read
    // or written (the repository, the remote) is said to be unavailable, with what to do (retry
    // later), never as the caller's error and never in the server's terms: the details go to the
    // server's log.
    match run_sweep(&app).await {
        Ok(a) => answer(a),
        Err(BatchError::Refused(e)) if !is_unavailable(&e) => error_with(
            500,
            "Sweep failed",
            [
                ("code", Value::str(e.code())),
                ("reason", Value::str(e.to_string())),
            ],
        ),
        Err(e) => with_internal(
            error_with(
                500,
                "Sweep failed",
                [
                    ("code", Value::str("LEDGER_UNAVAILABLE")),
                    ("reason", Value::str(STORE_UNAVAILABLE)),
                ],
            ),
            &e.to_string(),
        ),
    }
}

/// Whether a finality error says the store (the repository or the remote) could not be read
/// or written, rather than anything about the request.
fn is_unavailable(e: &finality::Error) -> bool {
    use finality::Error as E;
    matches!(
        e,
        E::Store(_)
            | E::Remote(_)
            | E::RemoteRefused(_)
            | E::RemoteRewritten(_)
            | E::Contention { .. }
            | E::RefLocked { .. }
            | E::Corrupt { .. }
            | E::ClaimUnavailable { .. }
    )
}
