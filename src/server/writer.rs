//! The single writer: takes every operation queued at that moment and lands them as one commit
//! ([`crate::finality::batch::land`]). It runs on its own thread, never on the async executor;
//! requests wait for their answer on a oneshot channel. After each landed batch the packs are
//! rolled up on a second thread, so that answers never wait for a roll-up: for `serve`, that
//! thread is the owner of the roll-up after a commit, and the writer lands with
//! [`RollUp::Caller`](crate::store::RollUp::Caller) so that the landing loop does not run one.

use std::sync::Arc;
use std::sync::mpsc;

use crate::canonical::Value;
use crate::finality::Options;
use crate::finality::batch::{self, BatchError, Op};
use crate::store::Store;

use super::Clock;
pub use super::api::stream::Event;
use super::metrics::Metrics;

/// A successful answer of an operation: HTTP status and JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// JSON body.
    pub body: Value,
    /// Send `Cache-Control: no-store` (claims).
    pub no_store: bool,
    /// What the operation changed, told to `GET /api/stream`'s subscribers once (and only if)
    /// its batch landed ([`crate::server::api::stream`]), and queued for the webhooks that want
    /// them ([`crate::server::webhooks`]).
    pub events: Vec<Event>,
    /// How many webhook deliveries the writer queued for [`Answer::events`] once its batch
    /// landed (set by the writer; what the sweep reports as `webhooks_fired`).
    pub webhooks_queued: usize,
}

impl Answer {
    /// `status` with `body`.
    pub fn new(status: u16, body: Value) -> Answer {
        Answer {
            status,
            body,
            no_store: false,
            events: Vec::new(),
            webhooks_queued: 0,
        }
    }

    /// This answer, telling the stream's subscribers `event` when it lands.
    #[must_use]
    pub fn with_event(mut self, event: Event) -> Answer {
        self.events.push(event);
        self
    }
}

/// What a queued operation is answered with.
pub type Reply = Result<Answer, BatchError>;

/// The writer opens its repository again after this many batches (see where it is used).
const REOPEN_EVERY: u32 = 1024;

/// A batch, a roll-up or a sweep's scan that takes at least this long is logged with its
/// duration: the operator's first clue when clients time out (a slow disk, a large roll-up, a
/// starved CPU).
pub(crate) const SLOW: std::time::Duration = std::time::Duration::from_secs(1);

struct Job {
    op: Op<'static, Answer>,
    tx: tokio::sync::oneshot::Sender<Reply>,
}

/// The handle requests submit operations through.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
    metrics: Arc<Metrics>,
}

/// The writer thread; join it after the last [`Writer`] is dropped.
pub struct Handle(std::thread::JoinHandle<()>);

impl Handle {
    /// Waits for the writer to land what was queued and stop.
    pub fn join(self) {
        let _ = self.0.join();
    }
}

/// The pack roll-up of the served repository, on a thread of its own: a roll-up can take
/// seconds (it copies up to [`PUBLISH_ROLLUP_MAX`](crate::store::PUBLISH_ROLLUP_MAX) objects),
/// and run inside the writer it held every request of the next batch for that long (under
/// load, past the clients' timeouts). The writer asks for one after each landed batch; requests
/// made while one runs are folded into the next. Consolidation is safe beside the writer's
/// reads and commits (`store::consolidate`).
struct RollUpThread {
    tx: Option<mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RollUpThread {
    /// Starts the thread. A roll-up that fails (it changes nothing then: the next one retries)
    /// or takes at least [`SLOW`] is logged.
    fn start(
        repo: std::path::PathBuf,
        log: super::Log,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<RollUpThread> {
        let (tx, rx) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("action-ledger-rollup".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    let started = std::time::Instant::now();
                    // Opened afresh each time: it lists the packs on disk now, and holds no
                    // mapping of packs it rolled up.
                    let done = Store::open(&repo).and_then(|store| {
                        store.consolidate_packs(crate::store::Rollup::Geometric {
                            max_objects: crate::store::PUBLISH_ROLLUP_MAX,
                        })
                    });
                    let took = started.elapsed();
                    metrics.rollup(took);
                    match done {
                        Err(e) => log(&format!("pack roll-up failed (the next one retries): {e}")),
                        Ok(c) if took >= SLOW => log(&format!(
                            "slow pack roll-up: {} of {} pack(s) merged, {} object(s), {} byte(s), in {} ms",
                            c.merged,
                            c.packs_before,
                            c.objects,
                            c.bytes,
                            took.as_millis()
                        )),
                        Ok(_) => {}
                    }
                }
            })?;
        Ok(RollUpThread {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Asks for a roll-up; one already asked for and not started covers this one.
    fn request(&self) {
        if let Some(tx) = &self.tx {
            let _ = tx.try_send(());
        }
    }
}

impl Drop for RollUpThread {
    /// Lets a running roll-up finish (it is kill-safe, but a clean stop leaves no debris).
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Writer {
    /// Starts the writer thread on the repository at `repo` (opened on that thread: repository
    /// handles stay on the thread that opened them). A batch takes at most `max_batch`
    /// operations, gathered for at most `linger` after the first. Its queue, batches and
    /// roll-ups are counted in `metrics`. Batches land on `options.target`, and the writer's
    /// own roll-up thread rolls the packs up after each landed batch, whatever
    /// `options.roll_up` says. The events of a landed batch are written to the
    /// `webhooks` outbox (when configured) before any of its requests is answered, then sent to
    /// `events`.
    ///
    /// # Errors
    /// When the thread cannot be spawned or the repository cannot be opened.
    // Each is a setting of its own, passed once from `App::start`.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        repo: std::path::PathBuf,
        options: Options,
        clock: Arc<dyn Clock>,
        max_batch: usize,
        linger: std::time::Duration,
        log: super::Log,
        metrics: Arc<Metrics>,
        events: Arc<super::api::stream::Feed>,
        webhooks: Option<Arc<super::webhooks::Webhooks>>,
    ) -> std::io::Result<(Writer, Handle)> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (opened_tx, opened_rx) = mpsc::channel::<Result<(), String>>();
        let max_batch = max_batch.max(1);
        let options = Options {
            roll_up: crate::store::RollUp::Caller,
            ..options
        };
        let roll_up = RollUpThread::start(repo.clone(), log.clone(), metrics.clone())?;
        let counted = metrics.clone();
        let thread = std::thread::Builder::new()
            .name("action-ledger-writer".into())
            .spawn(move || {
                let mut store = match Store::open(&repo) {
                    Ok(s) => {
                        let _ = opened_tx.send(Ok(()));
                        s
                    }
                    Err(e) => {
                        let _ = opened_tx.send(Err(format!("{}: {e}", repo.display())));
                        return;
                    }
                };
                let mut last_batch = 0;
                let mut batches = 0u32;
                while let Ok(first) = rx.recv() {
                    // Each landed batch of more than a few records adds a pack, and an open
                    // repository has room for a fixed number of pack indices (sized when it was
                    // opened): open it again from time to time, sized for what is on disk now,
                    // and when the process's mapped pack pages passed their budget (opening it
                    // again unmaps them, `Store::mappings_stale`).
                    batches = batches.wrapping_add(1);
                    if (batches.is_multiple_of(REOPEN_EVERY) || store.mappings_stale())
                        && let Ok(fresh) = Store::open(&repo)
                    {
                        store = fresh;
                    }
                    // Under load, requests arrive in waves (the clients answered by the last
                    // batch all send their next request at once): wait up to `linger` for the
                    // rest of the wave, so that a batch is not landed with the first two of
                    // sixty. A lone client (batches of one) does not wait.
                    let wait = if last_batch > 1 {
                        linger
                    } else {
                        std::time::Duration::ZERO
                    };
                    let deadline = std::time::Instant::now() + wait;
                    let mut jobs = vec![first];
                    while jobs.len() < max_batch {
                        match rx.try_recv() {
                            Ok(job) => jobs.push(job),
                            Err(mpsc::TryRecvError::Disconnected) => break,
                            Err(mpsc::TryRecvError::Empty) => {
                                let left =
                                    deadline.saturating_duration_since(std::time::Instant::now());
                                if left.is_zero() {
                                    break;
                                }
                                match rx.recv_timeout(left) {
                                    Ok(job) => jobs.push(job),
                                    Err(_) => break,
                                }
                            }
                        }
                    }
                    last_batch = jobs.len();
                    counted.dequeued(jobs.len());
                    let (mut ops, txs): (Vec<_>, Vec<_>) =
                        jobs.into_iter().map(|j| (j.op, j.tx)).unzip();
                    // A planner that panics (a bug) must not take the writer down with it: the
                    // batch did not land, and every request of it is told so.
                    let started = std::time::Instant::now();
                    // The webhooks' deliveries of each commit, staged in their outbox before
                    // its compare-and-swap.
                    let mut staging = webhooks.as_deref().map(super::webhooks::Webhooks::staging);
                    // What landed (and what may have), kept before anything else can panic.
                    let mut outcome = None;
                    let landed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        let mut before = |commit, answers: &[Option<&Answer>]| {
                            if let Some(staging) = &mut staging {
                                staging.before_landing(
                                    commit,
                                    answers.iter().enumerate().flat_map(|(i, a)| {
                                        a.iter()
                                            .flat_map(move |a| a.events.iter().map(move |e| (i, e)))
                                    }),
                                );
                            }
                        };
                        let (results, landed) = batch::land_with(
                            &store,
                            &options,
                            &mut ops,
                            &mut || clock.now(),
                            &mut before,
                        );
                        outcome = Some((landed.commit, landed.unsettled));
                        if landed.commit.is_some() {
                            roll_up.request();
                        }
                        let took = started.elapsed();
                        counted.batch(results.len(), landed.commit.is_some(), took);
                        if took >= SLOW {
                            log(&format!(
                                "slow batch: {} operation(s), {} tip(s) planned on, {} in {} ms",
                                results.len(),
                                landed.attempts,
                                if landed.commit.is_some() {
                                    "landed"
                                } else {
                                    "nothing landed"
                                },
                                took.as_millis()
                            ));
                        }
                        results
                    }));
                    // A panic before the landing's end leaves its fate to be looked for: the
                    // last staged commit may have landed.
                    let (commit, unsettled) = outcome
                        .unwrap_or_else(|| (None, staging.as_ref().and_then(|s| s.last_commit())));
                    let mut results = landed.unwrap_or_else(|_| {
                        (0..txs.len())
                            .map(|_| {
                                Err(BatchError::Unavailable {
                                    reason: "internal error while planning the batch".into(),
                                })
                            })
                            .collect()
                    });
                    let committed = commit.is_some();
                    // Only what landed is told: an operation that refused, or a batch that did
                    // not land, emits nothing. The webhooks' deliveries of the commit that
                    // landed are confirmed (sent in the background), those of every other
                    // commit removed, before any request of the batch is answered. A send never
                    // blocks (the channel is a ring: a slow subscriber lags and is dropped,
                    // `api::stream`).
                    let mut landed: Vec<(usize, Event)> = Vec::new();
                    for (i, result) in results.iter_mut().enumerate() {
                        if let Ok(answer) = result {
                            let told = std::mem::take(&mut answer.events);
                            if committed {
                                landed.extend(told.into_iter().map(|e| (i, e)));
                            }
                        }
                    }
                    if let Some(staging) = staging {
                        for (i, n) in staging.after_landing(commit, unsettled) {
                            if let Some(Ok(answer)) = results.get_mut(i) {
                                answer.webhooks_queued += n;
                            }
                        }
                    }
                    // Deliveries kept for a commit whose landing failed: a landed commit's
                    // history tells whether it landed before this one.
                    if let (Some(hooks), Some(tip)) = (&webhooks, commit)
                        && hooks.has_undecided()
                    {
                        hooks.settle_undecided(&mut |c| {
                            store.is_ancestor(c, tip).map_err(|e| e.to_string())
                        });
                    }
                    for (_, event) in landed {
                        events.send(event);
                    }
                    // Requests that did not land are answered 503 with the reason; the
                    // operator reads the cause (a full disk, an I/O error) in the log.
                    if let Some(reason) = results.iter().find_map(|r| match r {
                        Err(BatchError::Unavailable { reason }) => Some(reason),
                        _ => None,
                    }) {
                        log(&format!(
                            "a batch of {} operation(s) did not land: {reason}",
                            results.len()
                        ));
                    }
                    for (tx, result) in txs.into_iter().zip(results) {
                        // The client may be gone; its operation landed (or not) all the same.
                        let _ = tx.send(result);
                    }
                }
            })?;
        match opened_rx.recv() {
            Ok(Ok(())) => Ok((Writer { tx, metrics }, Handle(thread))),
            Ok(Err(e)) => Err(std::io::Error::other(e)),
            Err(_) => Err(std::io::Error::other("the writer thread stopped at start")),
        }
    }

    /// Queues `op` and waits until the batch that holds it landed (or failed).
    pub async fn submit(&self, op: Op<'static, Answer>) -> Reply {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let gone = || BatchError::Unavailable {
            reason: "the writer has stopped".into(),
        };
        self.metrics.queued(1);
        if self.tx.send(Job { op, tx }).is_err() {
            self.metrics.dequeued(1);
            return Err(gone());
        }
        rx.await.map_err(|_| gone())?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_operation_does_not_stop_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("state.git");
        drop(Store::open_or_init_bare(&repo, "refs/heads/main").unwrap());
        let options = Options::new(crate::store::Signature {
            name: "t".into(),
            email: "t@invalid".into(),
            time_seconds: 0,
        });
        let clock: Arc<dyn Clock> = Arc::new(|| Timestamp::from_millis(1_772_366_400_000));
        let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let logged = lines.clone();
        let (writer, handle) = Writer::start(
            repo,
            options,
            clock,
            8,
            std::time::Duration::ZERO,
            Arc::new(move |line: &str| logged.lock().unwrap().push(line.to_owned())),
            Arc::new(Metrics::new()),
            Arc::new(crate::server::api::stream::Feed::new("test".into())),
            None,
        )
        .unwrap();
        let r = writer
            .submit(Box::new(|_, _| -> Result<Answer, crate::finality::Error> {
                panic!("a bug in a planner")
            }))
            .await;
        assert!(matches!(r, Err(BatchError::Unavailable { .. })), "{r:?}");
        // The operator is told why, not only the client.
        assert_eq!(
            lines.lock().unwrap().as_slice(),
            ["a batch of 1 operation(s) did not land: internal error while planning the batch"]
        );
        let r = writer
            .submit(Box::new(|_, _| Ok(Answer::new(200, Value::Null))))
            .await;
        assert_eq!(r.unwrap().status, 200);
        drop(writer);
        handle.join();
    }
}
