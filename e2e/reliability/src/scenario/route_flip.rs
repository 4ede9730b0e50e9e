//! Route change under traffic: one HTTPRoute flips between two backends (different Services,
//! ports and target ports; a header modifier on one side; a rule added and removed) while the
//! load runs. Every answer must be a 200 from a state the route had (never a mix: backend B
//! without B's header), no connection may go back to the old state once it saw the new one, and
//! the old state must stop answering soon after the change.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Result;

use super::{Suite, plain_load, until_served};
use crate::fixture;
use crate::load::{self, Mode, Outcome};
use crate::report::{Report, ms, quantile};

/// The two states of the route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Everything to Service `a` (port 8080, pods on 3000).
    A,
    /// `/extra` to Service `b` (port 9090, pods on 3100) by a rule of its own; everything else to
    /// `b` with the request header `x-flip: b`.
    B,
}

const HEADER: &str = "x-flip";
/// How long the old state may still answer after a change was applied.
const STALE_LIMIT: Duration = Duration::from_millis(500);

fn route(ns: &str, state: State) -> String {
    let rules = match state {
        State::A => "  - matches: [{path: {type: PathPrefix, value: /}}]\n    backendRefs: [{name: a, port: 8080}]\n"
            .to_string(),
        State::B => format!(
            "  - matches: [{{path: {{type: PathPrefix, value: /extra}}}}]\n    backendRefs: [{{name: b, port: 9090}}]\n  - matches: [{{path: {{type: PathPrefix, value: /}}}}]\n    filters: [{{type: RequestHeaderModifier, requestHeaderModifier: {{set: [{{name: {HEADER}, value: b}}]}}}}]\n    backendRefs: [{{name: b, port: 9090}}]\n"
        ),
    };
    fixture::http_route(ns, "flip", "gw", "flip.example", &rules)
}

/// The state an answer shows for target 0 (`/`) or 1 (`/extra/x`), if it shows one.
fn shows(target: usize, answer: &load::Answer) -> Option<State> {
    match (answer.service.as_str(), answer.header.as_deref(), target) {
        ("a", None, _) => Some(State::A),
        ("b", Some("b"), 0) | ("b", None, 1) => Some(State::B),
        _ => None,
    }
}

pub async fn run(suite: &Suite, ns: &str, report: &mut Report) -> Result<()> {
    let c = &suite.cluster;
    c.fresh_namespace(ns).await?;
    c.apply(&fixture::echo_backend(ns, "a", 2, 8080, 3000)).await?;
    c.apply(&fixture::echo_backend(ns, "b", 2, 9090, 3100)).await?;
    c.apply(&fixture::gateway(ns, "gw", &fixture::http_listener("http", 80)))
        .await?;
    c.apply(&route(ns, State::A)).await?;
    c.deployment_settled(ns, "a", Duration::from_secs(120)).await?;
    c.deployment_settled(ns, "b", Duration::from_secs(120)).await?;
    let address = c.gateway_address(ns, "gw").await?;
    let targets = vec![
        fixture::target("/", address, 80, "flip.example", "/"),
        fixture::target("/extra", address, 80, "flip.example", "/extra/x"),
    ];
    until_served(&targets[0], Duration::from_secs(60), None, |a| a.service == "a").await?;

    let mut plan = plain_load(suite, targets.clone());
    plan.echo_header = Some(HEADER.into());
    let running = load::start(plan);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // When each state was sent and when the API server answered, on the load's clock: a proxy
    // may serve a change before its apply returns (the push is faster than the answer).
    let mut flips = vec![Flip {
        sent: Duration::ZERO,
        at: Duration::ZERO,
        state: State::A,
    }];
    for k in 0..suite.options.flips {
        let state = if k % 2 == 0 { State::B } else { State::A };
        let sent = running.now();
        c.apply(&route(ns, state)).await?;
        flips.push(Flip {
            sent,
            at: running.now(),
            state,
        });
        // Served by every replica, on both paths, then a little longer under the new state.
        for (t, target) in targets.iter().enumerate() {
            until_served(target, Duration::from_secs(30), Some(HEADER), |a| {
                shows(t, a) == Some(state)
            })
            .await?;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let outcomes = running.stop().await;
    judge(report, &flips, &outcomes);
    Ok(())
}

/// One change of the route: sent at `sent`, accepted by the API server at `at`.
#[derive(Clone, Copy, Debug)]
struct Flip {
    sent: Duration,
    at: Duration,
    state: State,
}

fn judge(report: &mut Report, flips: &[Flip], outcomes: &[Outcome]) {
    // The flip in force when a request was sent (accepted before it); requests answered once
    // the next flip was on its way are left out of the state checks (either state is right
    // for them).
    let in_force = |t: Duration| flips.iter().rposition(|f| f.at <= t).unwrap_or(0);
    let next_sent = |k: usize| flips.get(k + 1).map_or(Duration::MAX, |f| f.sent);
    let mut torn = Vec::new();
    let mut stale_ages = Vec::new();
    let mut first_new: HashMap<usize, Duration> = HashMap::new();
    // Per connection: the flip and whether it already answered in the new state.
    let mut seen_new: HashMap<u64, usize> = HashMap::new();
    let mut regressions = 0;
    for o in outcomes {
        let Some(answer) = o.answer().filter(|_| o.ok()) else {
            continue;
        };
        let Some(state) = shows(o.target, answer) else {
            torn.push(format!(
                "{} {}: service {:?} header {:?}",
                o.mode.name(),
                o.target,
                answer.service,
                answer.header
            ));
            continue;
        };
        let k = in_force(o.sent);
        if o.done >= next_sent(k) {
            continue;
        }
        let Flip {
            at, state: expected, ..
        } = flips[k];
        let reused = matches!(o.mode, Mode::KeepAlive | Mode::H2c);
        if state == expected {
            let first = first_new.entry(k).or_insert(o.sent);
            *first = (*first).min(o.sent);
            if reused {
                seen_new.insert(o.connection, k);
            }
        } else {
            stale_ages.push(o.sent - at);
            if reused && seen_new.get(&o.connection) == Some(&k) {
                regressions += 1;
            }
        }
    }
    report.no_failures("all modes", outcomes);
    for mode in Mode::PLAIN {
        let of_mode: Vec<&Outcome> = outcomes.iter().filter(|o| o.mode == mode).collect();
        report.no_failures(mode.name(), of_mode.iter().copied());
    }
    report.check(
        "answers mixing the two states",
        torn.len().to_string(),
        "0",
        torn.is_empty(),
    );
    report.notes.extend(torn.into_iter().take(5));
    let changes = flips.len() - 1;
    let propagated = (1..flips.len()).filter(|k| first_new.contains_key(k)).count();
    report.check(
        "flips seen through the load",
        format!("{propagated} of {changes}"),
        format!("{changes}"),
        propagated == changes && changes > 0,
    );
    report.check(
        "connections that went back to the old state",
        regressions.to_string(),
        "0",
        regressions == 0,
    );
    let latest_stale = stale_ages.iter().max().copied().unwrap_or_default();
    report.check(
        "latest answer of the old state after a flip",
        ms(latest_stale),
        format!("<= {}", ms(STALE_LIMIT)),
        latest_stale <= STALE_LIMIT,
    );
    let mut first: Vec<Duration> = (1..flips.len())
        .filter_map(|k| first_new.get(&k).map(|t| *t - flips[k].at))
        .collect();
    first.sort();
    report.measure(
        "first answer of the new state after a flip (median / max)",
        format!(
            "{} / {}",
            ms(quantile(&first, 0.5)),
            ms(first.last().copied().unwrap_or_default())
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Answer;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// An answer of `service` (with or without the flip header) on `connection` at `sent` ms.
    fn answer(sent: u64, connection: u64, service: &str, header: bool) -> Outcome {
        Outcome {
            sent: at(sent),
            done: at(sent + 1),
            mode: Mode::KeepAlive,
            target: 0,
            connection,
            client_retry: false,
            result: Ok(Answer {
                status: 200,
                service: service.into(),
                header: header.then(|| "b".to_string()),
                ..Default::default()
            }),
        }
    }

    /// A flip sent 5 ms before the API server accepted it at `ms`.
    fn flip(ms: u64, state: State) -> Flip {
        Flip {
            sent: at(ms.saturating_sub(5)),
            at: at(ms),
            state,
        }
    }

    fn check<'a>(report: &'a Report, measure: &str) -> &'a crate::report::Check {
        report.checks.iter().find(|c| c.measure.starts_with(measure)).unwrap()
    }

    #[test]
    fn a_clean_flip_passes() {
        let flips = [flip(0, State::A), flip(1000, State::B)];
        let mut outcomes = vec![
            answer(10, 1, "a", false),
            answer(1005, 1, "a", false),
            answer(1020, 1, "b", true),
            answer(1030, 2, "b", true),
        ];
        // The same from every mode of the load, on connections of their own.
        for (n, mode) in [Mode::NewConnection, Mode::H2c].into_iter().enumerate() {
            for o in outcomes.clone() {
                outcomes.push(Outcome {
                    mode,
                    connection: o.connection + 10 * (n as u64 + 1),
                    ..o
                });
            }
        }
        let mut report = Report::new("t");
        judge(&mut report, &flips, &outcomes);
        assert!(report.passed(), "{:#?}", report.checks);
        assert_eq!(check(&report, "latest answer of the old state").value, "5.0 ms");
    }

    #[test]
    fn torn_answers_regressions_and_late_stale_answers_fail() {
        let flips = [flip(0, State::A), flip(1000, State::B)];
        // B without its header: a mix of the two states.
        let mut report = Report::new("t");
        judge(&mut report, &flips, &[answer(1020, 1, "b", false)]);
        assert_eq!(check(&report, "answers mixing").pass, Some(false));
        // A connection that saw B, then A again.
        let mut report = Report::new("t");
        judge(
            &mut report,
            &flips,
            &[answer(1010, 1, "b", true), answer(1020, 1, "a", false)],
        );
        assert_eq!(check(&report, "connections that went back").pass, Some(false));
        // The old state a second after the flip.
        let mut report = Report::new("t");
        judge(
            &mut report,
            &flips,
            &[answer(1010, 1, "b", true), answer(2000, 2, "a", false)],
        );
        assert_eq!(check(&report, "latest answer of the old state").pass, Some(false));
        // A flip nobody saw.
        let mut report = Report::new("t");
        judge(&mut report, &flips, &[answer(1500, 1, "a", false)]);
        assert_eq!(check(&report, "flips seen").pass, Some(false));
    }

    #[test]
    fn the_next_state_served_before_its_apply_returned_is_no_regression() {
        // Flip 2 (back to A) was sent at 1995 and accepted at 2000; a proxy may serve it in
        // between, on a connection that saw B.
        let flips = [flip(0, State::A), flip(1000, State::B), flip(2000, State::A)];
        let mut report = Report::new("t");
        judge(
            &mut report,
            &flips,
            &[
                answer(1010, 1, "b", true),
                answer(1997, 1, "a", false),
                answer(2010, 1, "a", false),
            ],
        );
        assert_eq!(check(&report, "connections that went back").pass, Some(true));
        assert_eq!(check(&report, "latest answer of the old state").value, "0.0 ms");
    }
}
