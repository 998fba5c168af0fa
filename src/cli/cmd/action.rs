//! `action create | claim | outcome | close | cancel | containment | show | list`: the governed-action commands of execution
//! finality, and the renderings of their results that `run` and `sweep` share.
//!
//! Refusals (a conflict, a used claim, an outcome already set, a lifecycle that forbids the
//! step) exit 1; invalid input and an unavailable repository exit 2. With `--json` a refusal
//! is also a `refusal` object on stdout, with the contract's `code` and, where it has one,
//! `current_status`.

use crate::canonical::{self, Value};
use crate::finality;
use crate::store::Store;

use crate::cli::Env;
use crate::cli::args::{
    ActionCommand, CancelArgs, ClaimArgs, CloseArgs, ContainmentArgs, CreateArgs, ListArgs,
    OutcomeArgs, ShowArgs,
};
use crate::cli::output::{Failure, Printer, commit_value, error_record, line, with_type};
use crate::cli::settings::{
    accept_if_asked, finality_now, finality_options, new_action_id, open_state, state_target,
    uuid_v4,
};
use crate::time::Timestamp;

/// A refused or failed finality operation: with `--json` also a `refusal` object on stdout.
pub(in crate::cli) fn finality_failure(
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
            (
                "error",
                Value::str(crate::store::remote::redact(&e.to_string())),
            ),
        ];
        if let Some(s) = e.current_status() {
            v.push(("current_status", Value::str(s)));
        }
        // What the HTTP 409 of a cancel carries beside `current_status`.
        if let finality::Error::NotCancellable {
            claimed,
            outcome_status,
            ..
        } = e
        {
            v.push(("outcome_status", Value::str(outcome_status.as_str())));
            v.push(("execution_claimed", Value::Bool(*claimed)));
        }
        // What the HTTP 409 of a containment verdict carries.
        if let finality::Error::ContainmentNotAwaiting { status, .. } = e {
            let status = status.map_or(Value::Null, |s| Value::str(s.as_str()));
            v.push(("containment_status", status));
        }
        out.data(&line(&Value::object(v)));
    }
    Failure::classified(e.is_refusal(), format!("{e} ({})", e.code()))
}

/// The `action` object of `show --json` and `create --json`.
fn state_value(st: &finality::State, now: Timestamp) -> Value {
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
    // An operator's decision and containment verdict are shown only where there is one.
    let Value::Object(mut m) = v else {
        return v;
    };
    if let Some(p) = &st.approval {
        m.insert("approval".into(), p.to_value());
    }
    if let Some(c) = &st.containment {
        m.insert("containment".into(), c.to_value());
    }
    // What a legacy close sent beyond its texts, only where it sent something.
    if let Some(o) = st.outcome.as_ref()
        && (o.timestamp_end.is_some() || o.report.is_some())
    {
        let end = o.timestamp_end.map(finality::format_time);
        m.insert(
            "close".into(),
            Value::object([
                ("timestamp_end", end.map_or(Value::Null, Value::str)),
                (
                    "report",
                    o.report
                        .as_ref()
                        .map_or(Value::Null, finality::Details::to_value),
                ),
            ]),
        );
    }
    Value::Object(m)
}

/// Runs an `action` subcommand at the finality clock's now.
pub(in crate::cli) fn run(
    out: &mut Printer,
    env: &Env,
    command: ActionCommand,
) -> Result<(), Failure> {
    let json = command.json();
    let before = out.lines;
    let result = run_command(out, env, command);
    // Under --json every failure answers on stdout: a refusal has its `refusal` record; a
    // failure before the command could answer (an unreadable repository, bad options) gets an
    // `error` record.
    if let Err(f) = &result
        && json
        && out.lines == before
    {
        out.data(&line(&error_record(f)));
    }
    result
}

/// [`run`] without its `error` record.
fn run_command(out: &mut Printer, env: &Env, command: ActionCommand) -> Result<(), Failure> {
    let now = finality_now(env)?;
    match command {
        ActionCommand::Create(a) => create(out, env, now, a),
        ActionCommand::Claim(a) => claim(out, env, now, a),
        ActionCommand::Outcome(a) => outcome(out, env, now, a),
        ActionCommand::Close(a) => close(out, env, now, a),
        ActionCommand::Cancel(a) => cancel(out, env, now, a),
        ActionCommand::Containment(a) => containment(out, env, now, a),
        ActionCommand::Show(a) => show(out, env, now, a),
        ActionCommand::List(a) => list(out, env, now, a),
    }
}

/// Runs `action create`.
fn create(out: &mut Printer, env: &Env, now: Timestamp, a: CreateArgs) -> Result<(), Failure> {
    let CreateArgs {
        state,
        binding,
        id,
        guard_decision,
        verdict,
        containment_ref,
        lifecycle,
        legacy,
        details,
        json,
        command,
    } = a;
    let details = details.as_deref().map(parse_details).transpose()?;
    let id = match id {
        Some(id) => id,
        None => new_action_id()?,
    };
    let action_id = finality::ActionId::parse(&id).ok_or_else(|| {
        Failure::input(format!("--id {id:?} must match ^[A-Za-z0-9_-]{{1,128}}$"))
    })?;
    let input = finality::NewAction {
        action_id,
        agent_id: binding
            .agent(env)
            .ok_or_else(|| Failure::input("--agent (or $ACTION_LEDGER_AGENT_ID) is required"))?,
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
        approval_wait_seconds: None,
        details,
    };
    let options = finality_options(env, &state)?;
    let store = Store::open_or_init_bare(&state.repo, &state.ref_name).map_err(|e| {
        Failure::input(format!(
            "cannot open state repository {}: {e}",
            state.repo.display()
        ))
    })?;
    accept_if_asked(env, &state, &store)?;
    let written = finality::create_action(&store, &options, &input, now)
        .map_err(|e| finality_failure(out, json, "create", &id, &e))?;
    super::sweep::witness(
        out,
        &store,
        &state.ref_name,
        &options.target,
        &written.value.action_id,
        now,
    );
    let st = finality::show_at(&store, &options.target, &state.ref_name, &id)
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

/// `--details JSON`: an object of the detail fields only, each keeping its rule
/// ([`finality::details`]); the first fault exits 2 naming the field and the rule.
fn parse_details(text: &str) -> Result<finality::Details, Failure> {
    parse_fields(
        "--details",
        text,
        |k| finality::details::field(k).is_some(),
        "is not a detail field (see --help)".into(),
        finality::Details::from_request,
    )
}

/// `--report JSON` of `action close`: an object of the report fields only
/// ([`finality::details::REPORT_FIELDS`]), each keeping its rule; the first fault exits 2
/// naming the field and the rule.
fn parse_report(text: &str) -> Result<finality::Details, Failure> {
    parse_fields(
        "--report",
        text,
        finality::details::is_report_field,
        format!(
            "is not a field a close reports ({})",
            finality::details::REPORT_FIELDS.join(", ")
        ),
        finality::Details::report_from_request,
    )
}

/// The JSON object of `flag`: every key one that `known` accepts (else `unknown` is said of
/// it), then each field's rule as `read` checks it.
fn parse_fields(
    flag: &str,
    text: &str,
    known: impl Fn(&str) -> bool,
    unknown: String,
    read: impl Fn(
        &std::collections::BTreeMap<String, Value>,
    ) -> Result<finality::Details, Vec<finality::DetailError>>,
) -> Result<finality::Details, Failure> {
    let value = crate::canonical::parse(text)
        .map_err(|e| Failure::input(format!("{flag} is not JSON: {e}")))?;
    let map = value
        .as_object()
        .ok_or_else(|| Failure::input(format!("{flag} must be a JSON object")))?;
    if let Some(k) = map.keys().find(|k| !known(k)) {
        return Err(Failure::input(format!("{flag}: {k} {unknown}")));
    }
    read(map).map_err(|errors| {
        let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
        Failure::input(format!("{flag}: {}", all.join("; ")))
    })
}

/// Runs `action claim`.
fn claim(out: &mut Printer, env: &Env, now: Timestamp, a: ClaimArgs) -> Result<(), Failure> {
    let ClaimArgs {
        state,
        binding,
        action_id,
        attempt,
        json,
        command,
    } = a;
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
        let store = open_state(env, &state).map_err(|f| Failure::input(f.message))?;
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
        Err(e) => Err(Failure::classified(
            e.is_refusal(),
            format!("{e} ({})", e.code()),
        )),
    }
}

/// Runs `action outcome`.
fn outcome(out: &mut Printer, env: &Env, now: Timestamp, a: OutcomeArgs) -> Result<(), Failure> {
    let OutcomeArgs {
        state,
        action_id,
        status,
        summary,
        error,
        progress,
        attempt,
        principal,
        operator,
        json,
    } = a;
    let by = settler(env, principal, operator)?;
    let progress = progress
        .map(|p| canonical::parse(&p).map_err(|e| Failure::input(format!("--progress: {e}"))))
        .transpose()?;
    let report = finality::OutcomeReport {
        status,
        summary,
        error_message: error,
        progress,
        attempt_id: attempt,
    };
    let options = finality_options(env, &state)?;
    let store = open_state(env, &state)?;
    let written = finality::report_outcome(&store, &options, &action_id, &report, &by, now)
        .map_err(|e| finality_failure(out, json, "outcome", &action_id, &e))?;
    print_reported(out, json, &written);
    Ok(())
}

/// Who settles (`outcome`, `close`): `--operator`, else `--principal` or
/// `$ACTION_LEDGER_PRINCIPAL`; neither is invalid input (exit 2), never an anonymous settler.
fn settler(
    env: &Env,
    principal: Option<String>,
    operator: bool,
) -> Result<finality::Settler, Failure> {
    if operator {
        return Ok(finality::Settler::Operator);
    }
    principal
        .or_else(|| env.get("ACTION_LEDGER_PRINCIPAL").cloned())
        .filter(|p| !p.trim().is_empty())
        .map(finality::Settler::Principal)
        .ok_or_else(|| {
            Failure::input(
                "--principal (or $ACTION_LEDGER_PRINCIPAL) or --operator is required: only the \
                 action's principal or an operator may settle it",
            )
        })
}

/// Runs `action close`.
fn close(out: &mut Printer, env: &Env, now: Timestamp, a: CloseArgs) -> Result<(), Failure> {
    let CloseArgs {
        state,
        action_id,
        status,
        summary,
        error_message,
        timestamp_end,
        report,
        principal,
        operator,
        json,
    } = a;
    let timestamp_end = timestamp_end
        .map(|t| {
            Timestamp::from_iso(&t).ok_or_else(|| {
                Failure::input(format!(
                    "--timestamp-end {t:?} is not YYYY-MM-DDTHH:MM:SS[.fraction] then Z or ±HH:MM"
                ))
            })
        })
        .transpose()?;
    let sent = finality::CloseReport {
        summary,
        error_message,
        timestamp_end,
        report: report.as_deref().map(parse_report).transpose()?,
    };
    let by = settler(env, principal, operator)?;
    let options = finality_options(env, &state)?;
    let store = open_state(env, &state)?;
    let written = finality::close(&store, &options, &action_id, &status, &sent, &by, now)
        .map_err(|e| finality_failure(out, json, "close", &action_id, &e))?;
    print_reported(out, json, &written);
    Ok(())
}

/// Runs `action cancel`.
fn cancel(out: &mut Printer, env: &Env, now: Timestamp, a: CancelArgs) -> Result<(), Failure> {
    let CancelArgs {
        state,
        action_id,
        reason,
        principal,
        operator,
        json,
    } = a;
    let by = settler(env, principal, operator)?;
    let options = finality_options(env, &state)?;
    let store = open_state(env, &state)?;
    let written = finality::cancel(&store, &options, &action_id, &reason, &by, now)
        .map_err(|e| finality_failure(out, json, "cancel", &action_id, &e))?;
    print_reported(out, json, &written);
    Ok(())
}

/// Runs `action containment`.
fn containment(
    out: &mut Printer,
    env: &Env,
    now: Timestamp,
    a: ContainmentArgs,
) -> Result<(), Failure> {
    let ContainmentArgs {
        state,
        action_id,
        verdict,
        reasoning,
        principal,
        json,
    } = a;
    let verdict = finality::ContainmentVerdict::parse(&verdict)
        .ok_or_else(|| Failure::input("the verdict must be promote or discard"))?;
    let operator = principal
        .or_else(|| env.get("ACTION_LEDGER_PRINCIPAL").cloned())
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| {
            Failure::input(
                "--principal (or $ACTION_LEDGER_PRINCIPAL) is required: the operator who resolves",
            )
        })?;
    let options = finality_options(env, &state)?;
    let store = open_state(env, &state)?;
    let written = finality::resolve_containment(
        &store,
        &options,
        &action_id,
        verdict,
        &operator,
        reasoning.as_deref(),
        now,
    )
    .map_err(|e| finality_failure(out, json, "containment", &action_id, &e))?;
    let (resolved, security) = &written.value;
    let status = finality::containment::status(&resolved.state)
        .map_or("-", finality::ContainmentStatus::as_str);
    let grant = resolved
        .promotion
        .as_ref()
        .map(|g| g.action.action_id.as_str().to_owned());
    if json {
        out.data(&line(&Value::object([
            ("type", Value::str("containment")),
            ("action_id", Value::str(action_id.as_str())),
            ("verdict", Value::str(verdict.as_str())),
            ("containment_status", Value::str(status)),
            (
                "promotion_action_id",
                grant.clone().map_or(Value::Null, Value::str),
            ),
            ("commit", commit_value(written.commit)),
        ])));
    } else {
        out.data(&format!(
            "{action_id} {status}{}",
            grant
                .as_ref()
                .map_or(String::new(), |g| format!(" promotion {g}"))
        ));
    }
    if !security.is_clean() {
        out.note(&format!(
            "redacted {} secret(s) or confidential identifier(s) before storing",
            security.findings
        ));
    }
    Ok(())
}

/// Runs `action show`.
fn show(out: &mut Printer, env: &Env, now: Timestamp, a: ShowArgs) -> Result<(), Failure> {
    let ShowArgs {
        state,
        action_id,
        json,
    } = a;
    let store = open_state(env, &state)?;
    let st = finality::show_at(
        &store,
        &state_target(env, &state)?,
        &state.ref_name,
        &action_id,
    )
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
        format!("created:      {}", finality::format_time(a.created_at)),
        format!(
            "claim:        {}",
            st.claim.as_ref().map_or("-".to_owned(), |c| format!(
                "{} at {}",
                c.attempt_id,
                finality::format_time(c.claimed_at)
            ))
        ),
        format!("lifecycle:    {}", st.lifecycle()),
        format!("outcome:      {}", view.status),
    ];
    if let Some(o) = st.outcome.as_ref()
        && (o.timestamp_end.is_some() || o.report.is_some())
    {
        let end = o.timestamp_end.map(finality::format_time);
        let report = o.report.as_ref().map(|r| line(&r.to_value()));
        lines.push(format!(
            "closed with:  end {}, report {}",
            end.as_deref().unwrap_or("-"),
            report.as_deref().unwrap_or("-")
        ));
    }
    if let Some(d) = &a.details {
        let shown = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
        lines.push(format!(
            "goal:         {}",
            shown(d.text("declared_goal").map(str::to_owned))
        ));
        lines.push(format!(
            "act:          {}{}",
            shown(d.act().map(line)),
            if d.act_redacted() { " (redacted)" } else { "" }
        ));
        lines.push(format!(
            "risk:         {}",
            shown(d.risk_score().map(|r| r.to_string()))
        ));
        let systems = d.list("systems_touched");
        lines.push(format!(
            "systems:      {}",
            if systems.is_empty() {
                "-".to_owned()
            } else {
                systems.join(", ")
            }
        ));
        lines.push(format!(
            "reversible:   {}",
            shown(
                d.reversible()
                    .map(|r| if r { "yes" } else { "no" }.to_owned())
            )
        ));
        lines.push(format!(
            "reasoning:    {}",
            shown(d.text("reasoning").map(str::to_owned))
        ));
    }
    if let Some(p) = &st.approval {
        lines.push(format!(
            "approval:     {} by {} at {}",
            p.decision,
            p.decided_by,
            finality::format_time(p.decided_at)
        ));
    }
    if let Some(c) = &st.containment {
        lines.push(format!(
            "containment:  {} by {} at {}{}",
            c.verdict.status(),
            c.resolved_by,
            finality::format_time(c.resolved_at),
            c.promotion_action_id
                .as_ref()
                .map_or(String::new(), |g| format!(" (promotion {g})"))
        ));
    }
    if let Some(o) = &st.outcome {
        lines.push(format!(
            "outcome at:   {}",
            finality::format_time(o.outcome_at)
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
        out.text(&l);
    }
    Ok(())
}

/// Runs `action list`.
fn list(out: &mut Printer, env: &Env, now: Timestamp, a: ListArgs) -> Result<(), Failure> {
    use finality::list::{self, ListError, Path};
    let ListArgs {
        state,
        status,
        exclude_status,
        outcome_status,
        agent,
        action_type,
        containment_status,
        swarm,
        risk_min,
        limit,
        offset,
        json,
    } = a;
    // The server's parameter names, so that both refuse the same input the same way.
    let given = [
        ("status", status),
        ("exclude_status", exclude_status),
        ("outcome_status", outcome_status),
        ("agent_id", agent),
        ("action_type", action_type),
        ("containment_status", containment_status),
        ("swarm_id", swarm),
        ("risk_min", risk_min),
        ("limit", Some(limit)),
        ("offset", Some(offset)),
    ];
    let flag = |name: &str| match name {
        "agent_id" => "--agent".to_owned(),
        "swarm_id" => "--swarm".to_owned(),
        n => format!("--{}", n.replace('_', "-")),
    };
    let q = list::ActionQuery::parse(
        given
            .iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| (*k, v))),
    )
    .map_err(|e| match e {
        ListError::BadParam { param, value, rule } => {
            Failure::input(format!("{} {value:?}: {rule}", flag(&param)))
        }
        e => Failure::input(e),
    })?;
    let store = open_state(env, &state)?;
    let page = list::list_at(&store, &state_target(env, &state)?, &state.ref_name, &q).map_err(
        |e| match e {
            ListError::Read(e) => finality_failure(out, json, "list", "", &e),
            e => Failure::input(e),
        },
    )?;
    let total = page.total.map_or(Value::Null, |n| Value::from(n as i64));
    let order = match page.path {
        Path::PendingIndex => "created_at_desc",
        Path::Walk => "id_hash",
    };
    if json {
        let stats = page.stats.as_ref().map_or(Value::Null, |s| {
            Value::Object(
                s.by_status
                    .iter()
                    .map(|(l, n)| (l.as_str().to_owned(), Value::from(*n as i64)))
                    .collect(),
            )
        });
        out.data(&line(&Value::object([
            ("type", Value::str("action_list")),
            (
                "actions",
                Value::Array(
                    page.actions
                        .iter()
                        .map(|l| state_value(&l.state, now))
                        .collect(),
                ),
            ),
            ("total", total),
            ("stats", stats),
            ("limit", Value::from(q.limit as i64)),
            ("offset", Value::from(q.offset as i64)),
            ("has_more", Value::Bool(page.more)),
            ("order", Value::str(order)),
            ("skipped", crate::cli::output::path_list(&page.skipped)),
            ("misplaced", crate::cli::output::path_list(&page.misplaced)),
        ])));
        return Ok(());
    }
    for l in &page.actions {
        let st = &l.state;
        out.data(&format!(
            "{}  {}  {}  {}  {}",
            st.action.action_id,
            st.lifecycle(),
            st.outcome_status(),
            st.action.agent_id,
            finality::format_time(st.action.created_at)
        ));
    }
    let shown = page.actions.len();
    out.note(&match (page.total, page.more) {
        (Some(t), _) => format!("{shown} of {t} ({order})"),
        (None, _) => format!("{shown} listed, more may follow ({order})"),
    });
    for p in &page.skipped {
        out.note(&format!(
            "skipped {p}: a record does not parse (run verify)"
        ));
    }
    for p in &page.misplaced {
        out.note(&format!(
            "not listed {p}: not at an action's place in this repository's layout (run verify)"
        ));
    }
    Ok(())
}

/// Prints a claim result: with `--json` a `claim` object (on stderr for `run`, whose stdout is
/// the command's), else a note.
pub(in crate::cli) fn print_claim(
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
                Value::str(finality::format_time(w.value.claimed_at)),
            ),
            ("commit", commit_value(w.commit)),
        ]),
        Err(e) => Value::object([
            ("type", Value::str("claim")),
            ("claimed", Value::Bool(false)),
            ("action_id", Value::str(action_id)),
            ("attempt_id", Value::str(attempt)),
            ("code", Value::str(e.code())),
            (
                "error",
                Value::str(crate::store::remote::redact(&e.to_string())),
            ),
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

/// The `outcome` object of a recorded outcome (`--json`).
pub(in crate::cli) fn reported_value(w: &finality::Written<finality::Reported>) -> Value {
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

/// Prints a recorded outcome: the `outcome` object or `ID STATUS LIFECYCLE`, then notes.
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
