//! Pod status as the kubelet reports it: phase, conditions, addresses and container statuses.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, HostIP,
    PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// What a container is doing, as the worker tracks it.
#[derive(Debug, Clone)]
pub enum Run {
    Waiting { reason: String, message: String },
    Running { started_at: Time },
    Terminated(Termination),
}

/// How a container run ended.
#[derive(Debug, Clone)]
pub struct Termination {
    pub exit_code: i32,
    pub reason: String,
    pub started_at: Time,
    pub finished_at: Time,
}

/// One container's view for the status.
#[derive(Debug, Clone)]
pub struct ContainerView {
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub container_id: Option<String>,
    pub run: Run,
    pub ready: bool,
    pub restart_count: i32,
    pub last: Option<Termination>,
}

/// Conditions keep their lastTransitionTime while their status does not change.
#[derive(Debug, Default)]
pub struct ConditionClock {
    since: BTreeMap<&'static str, (bool, Time)>,
}

impl ConditionClock {
    /// Starts the clock of `type_` at `since` (e.g. PodScheduled, set by the scheduler).
    pub fn seed(&mut self, type_: &'static str, ok: bool, since: Time) {
        self.since.entry(type_).or_insert((ok, since));
    }

    fn condition(&mut self, type_: &'static str, ok: bool, now: &Time) -> PodCondition {
        let entry = self.since.entry(type_).or_insert_with(|| (ok, now.clone()));
        if entry.0 != ok {
            *entry = (ok, now.clone());
        }
        PodCondition {
            type_: type_.to_string(),
            status: if ok { "True" } else { "False" }.to_string(),
            last_transition_time: Some(entry.1.clone()),
            ..Default::default()
        }
    }
}

/// The inputs of [`build`].
pub struct PodView<'a> {
    pub pod_ip: Option<String>,
    pub host_ip: String,
    pub start_time: Time,
    pub sandbox_ready: bool,
    pub containers: &'a [ContainerView],
    /// All containers finished and none will restart.
    pub finished: bool,
}

/// The status to write.
pub fn build(view: &PodView<'_>, clock: &mut ConditionClock, now: &Time) -> PodStatus {
    let all_ready = !view.containers.is_empty() && view.containers.iter().all(|c| c.ready);
    let any_running = view.containers.iter().any(|c| matches!(c.run, Run::Running { .. }));
    let phase = if view.finished {
        let failed = view
            .containers
            .iter()
            .any(|c| matches!(&c.run, Run::Terminated(t) if t.exit_code != 0));
        if failed { "Failed" } else { "Succeeded" }
    } else if any_running
        || view
            .containers
            .iter()
            .any(|c| c.restart_count > 0 || matches!(c.run, Run::Terminated(_)))
    {
        "Running"
    } else {
        "Pending"
    };
    let conditions = vec![
        clock.condition("PodReadyToStartContainers", view.sandbox_ready, now),
        clock.condition("Initialized", true, now),
        clock.condition("ContainersReady", all_ready, now),
        clock.condition("Ready", all_ready, now),
        clock.condition("PodScheduled", true, now),
    ];
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        host_ip: Some(view.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: view.host_ip.clone(),
        }]),
        pod_ip: view.pod_ip.clone(),
        pod_ips: view.pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        start_time: Some(view.start_time.clone()),
        container_statuses: Some(view.containers.iter().map(container_status).collect()),
        ..Default::default()
    }
}

fn terminated(t: &Termination, container_id: Option<String>) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: t.exit_code,
            reason: Some(t.reason.clone()),
            started_at: Some(t.started_at.clone()),
            finished_at: Some(t.finished_at.clone()),
            container_id,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_status(c: &ContainerView) -> ContainerStatus {
    let state = match &c.run {
        Run::Waiting { reason, message } => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: (!message.is_empty()).then(|| message.clone()),
            }),
            ..Default::default()
        },
        Run::Running { started_at } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started_at.clone()),
            }),
            ..Default::default()
        },
        Run::Terminated(t) => terminated(t, c.container_id.clone()),
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: c.image_id.clone(),
        container_id: c.container_id.clone(),
        ready: c.ready,
        started: Some(matches!(c.run, Run::Running { .. })),
        restart_count: c.restart_count,
        state: Some(state),
        last_state: c.last.as_ref().map(|t| terminated(t, None)),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn view(run: Run, ready: bool) -> ContainerView {
        ContainerView {
            name: "c".into(),
            image: "i".into(),
            image_id: "local:///bin/i".into(),
            container_id: Some("turna://1".into()),
            run,
            ready,
            restart_count: 0,
            last: None,
        }
    }

    #[test]
    fn phases_and_ready_transitions() {
        let t0 = Time(Timestamp::from_second(1_000).unwrap());
        let t1 = Time(Timestamp::from_second(2_000).unwrap());
        let mut clock = ConditionClock::default();
        let waiting = [view(
            Run::Waiting {
                reason: "ContainerCreating".into(),
                message: String::new(),
            },
            false,
        )];
        let pv = |containers, finished| PodView {
            pod_ip: Some("10.244.1.1".into()),
            host_ip: "10.244.0.1".into(),
            start_time: t0.clone(),
            sandbox_ready: true,
            containers,
            finished,
        };
        let s = build(&pv(&waiting, false), &mut clock, &t0);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let running = [view(Run::Running { started_at: t0.clone() }, true)];
        let s = build(&pv(&running, false), &mut clock, &t1);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let ready = s.conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(ready.last_transition_time, Some(t1.clone()));
        let s = build(&pv(&running, false), &mut clock, &t0);
        let ready = s.conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            ready.last_transition_time,
            Some(t1.clone()),
            "unchanged status keeps its time"
        );
        let done = [view(
            Run::Terminated(Termination {
                exit_code: 1,
                reason: "Error".into(),
                started_at: t0.clone(),
                finished_at: t1.clone(),
            }),
            false,
        )];
        let s = build(&pv(&done, true), &mut clock, &t1);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.pod_ips.unwrap()[0].ip, "10.244.1.1");
    }
}
