//! Deployment, Service, ConfigMap, PodDisruptionBudget, HorizontalPodAutoscaler and RBAC of one
//! proxy.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec, MetricTarget,
    ResourceMetricSource,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    Lifecycle, LifecycleHandler, LocalObjectReference, ObjectFieldSelector, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec, SleepAction,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use translator::ir;

use super::names::Names;
use crate::settings::Kubernetes;

/// Where the proxy config file is mounted.
pub const CONFIG_PATH: &str = "/etc/turna/turna.yaml";
/// Annotation of the proxy Service naming its Gateway as `namespace/name` in full (labels are
/// truncated to 63 characters); Gateway addresses are read back through it.
pub const GATEWAY_ANNOTATION: &str = "turna.rakunlabs.com/gateway";
/// Pod annotation holding the hash of the proxy ConfigMap's data: a config change rolls the Deployment.
pub const CONFIG_HASH_ANNOTATION: &str = "turna.rakunlabs.com/config-hash";

/// What one proxy is built from.
pub struct ProxyInput<'a> {
    pub names: &'a Names,
    pub settings: &'a Kubernetes,
    pub proxy: &'a ir::Proxy,
    /// Image of the proxy containers (`proxy.image` or the controller pod's).
    pub image: &'a str,
    /// Namespace of the controller (bundle Secret, Role).
    pub controller_namespace: &'a str,
    /// The installation's identity (`controller_id`, or the one derived from the settings).
    pub controller_id: &'a str,
    /// Where the proxy gets its IR; `None` leaves the proxy without push arguments.
    pub push: Option<&'a Push>,
}

/// The controller's IR push endpoint, as proxies are told about it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Push {
    /// `https://host:port`.
    pub url: String,
    /// The CA certificate (PEM) proxies pin; stored in the proxy ConfigMap.
    pub ca_pem: String,
    /// The controller Service (`namespace/name`) whose EndpointSlices proxies read to reach a
    /// controller replica without cluster DNS or kube-proxy.
    pub service: Option<String>,
}

/// ConfigMap key (and file next to [`CONFIG_PATH`]) of the push CA.
pub const PUSH_CA_KEY: &str = "push-ca.crt";

/// The objects of one proxy.
#[derive(Clone, Debug)]
pub struct Objects {
    /// Namespace of the Deployment, Service, ConfigMap, PDB (and ServiceAccount).
    pub namespace: String,
    pub deployment: Deployment,
    pub service: Service,
    pub config_map: ConfigMap,
    pub pod_disruption_budget: Option<PodDisruptionBudget>,
    /// With `autoscaling` in the proxy parameters.
    pub horizontal_pod_autoscaler: Option<HorizontalPodAutoscaler>,
    /// With `proxy.cluster_role`: the proxy's own ServiceAccount and its bindings.
    pub service_account: Option<ServiceAccount>,
    pub role: Option<Role>,
    pub role_binding: Option<RoleBinding>,
    pub cluster_role_binding: Option<ClusterRoleBinding>,
}

fn meta(name: &str, namespace: &str, labels: &BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        labels: Some(labels.clone()),
        ..ObjectMeta::default()
    }
}

/// Labels or annotations.
type Map = BTreeMap<String, String>;

/// Labels and annotations from the proxy parameters (`extra`), then the Gateway's
/// infrastructure (which wins over the parameters), then Turna's own labels, which nothing
/// replaces.
fn with_infrastructure(
    ours: &Map,
    infrastructure: Option<&ir::Infrastructure>,
    extra: (Option<&Map>, Option<&Map>),
) -> (Map, Map) {
    let mut labels = extra.0.cloned().unwrap_or_default();
    labels.extend(infrastructure.map(|i| i.labels.clone()).unwrap_or_default());
    labels.extend(ours.clone());
    let mut annotations = extra.1.cloned().unwrap_or_default();
    annotations.extend(infrastructure.map(|i| i.annotations.clone()).unwrap_or_default());
    (labels, annotations)
}

/// `proxy.image_pull_secrets` as a pod's `imagePullSecrets` (none when empty).
fn pull_secrets(names: &[String]) -> Option<Vec<LocalObjectReference>> {
    (!names.is_empty()).then(|| {
        names
            .iter()
            .map(|name| LocalObjectReference { name: name.clone() })
            .collect()
    })
}

/// Whole seconds of a Gateway API duration, rounded up (`None` when it does not parse).
fn seconds(duration: &str) -> Option<i64> {
    translator::duration::parse_ms(duration).map(|ms| ms.div_ceil(1000) as i64)
}

/// Builds every object of one proxy.
pub fn build(input: &ProxyInput<'_>) -> Objects {
    let s = input.settings;
    let n = input.names;
    let namespace = if s.proxy.gateway_namespace {
        n.gateway_namespace.clone()
    } else if !s.proxy.namespace.is_empty() {
        s.proxy.namespace.clone()
    } else {
        input.controller_namespace.to_string()
    };
    let ours = n.labels();
    let infrastructure = input.proxy.infrastructure.as_ref();
    let parameters = infrastructure.and_then(|i| i.parameters.as_ref());
    let pod_meta = parameters.and_then(|p| p.pod.as_ref());
    let (labels, annotations) = with_infrastructure(
        &ours,
        infrastructure,
        (pod_meta.map(|m| &m.labels), pod_meta.map(|m| &m.annotations)),
    );
    let service_parameters = parameters.and_then(|p| p.service.as_ref());
    let (service_labels, service_annotations) = with_infrastructure(
        &ours,
        infrastructure,
        (
            service_parameters.map(|s| &s.labels),
            service_parameters.map(|s| &s.annotations),
        ),
    );
    let replicas = parameters.and_then(|p| p.replicas).unwrap_or(s.proxy.replicas as i32);
    let autoscaled = parameters.is_some_and(|p| p.autoscaling.is_some());
    let own_service_account = !s.proxy.cluster_role.is_empty();
    let service_account_name = if own_service_account {
        n.proxy.clone()
    } else {
        s.proxy.service_account.clone()
    };

    let mut config_data = BTreeMap::from([("turna.yaml".to_string(), proxy_config(input))]);
    let mut args = vec!["proxy".to_string(), "--config".into(), CONFIG_PATH.into()];
    if let Some(push) = input.push {
        config_data.insert(PUSH_CA_KEY.into(), push.ca_pem.clone());
        args.extend(["--operator".into(), push.url.clone()]);
        args.extend(["--operator-ca".into(), format!("/etc/turna/{PUSH_CA_KEY}")]);
        if let Some(service) = &push.service {
            args.extend(["--operator-service".into(), service.clone()]);
        }
    }
    let config_hash = super::names::hash(&serde_json::to_string(&config_data).unwrap_or_default(), 16);
    let config_map = ConfigMap {
        metadata: meta(&n.proxy, &namespace, &ours),
        data: Some(config_data),
        ..ConfigMap::default()
    };

    let mut ports: Vec<ContainerPort> = input
        .proxy
        .ports
        .iter()
        .map(|p| ContainerPort {
            container_port: i32::from(p.bind_port),
            protocol: Some(transport(p.transport).into()),
            ..ContainerPort::default()
        })
        .collect();
    ports.push(ContainerPort {
        name: Some("health".into()),
        container_port: i32::from(s.proxy.health_port),
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    });
    let probe = |path: &str| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("health".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(5),
        ..Probe::default()
    };
    let field = |path: &str| EnvVarSource {
        field_ref: Some(ObjectFieldSelector {
            field_path: path.into(),
            ..ObjectFieldSelector::default()
        }),
        ..EnvVarSource::default()
    };
    let delay = match parameters.and_then(|p| p.shutdown_delay.as_deref()) {
        Some(d) => seconds(d),
        None => s.proxy.shutdown_delay.map(|d| d.as_secs() as i64),
    }
    .filter(|d| *d > 0);
    let mut env = vec![
        EnvVar {
            name: "POD_NAME".into(),
            value_from: Some(field("metadata.name")),
            ..EnvVar::default()
        },
        EnvVar {
            name: "POD_NAMESPACE".into(),
            value_from: Some(field("metadata.namespace")),
            ..EnvVar::default()
        },
        // Small pages from the first allocation: a proxy's heap on huge pages took several
        // times the memory it holds.
        EnvVar {
            name: allocator::WITHOUT_HUGE_PAGES_ENV.0.into(),
            value: Some(allocator::WITHOUT_HUGE_PAGES_ENV.1.into()),
            ..EnvVar::default()
        },
    ];
    if let Some(level) = parameters.and_then(|p| p.log_level) {
        env.push(EnvVar {
            name: "RUST_LOG".into(),
            value: Some(level.as_str().into()),
            ..EnvVar::default()
        });
    }
    let container = Container {
        name: "proxy".into(),
        image: Some(
            parameters
                .and_then(|p| p.image.clone())
                .unwrap_or_else(|| input.image.into()),
        ),
        args: Some(args),
        env: Some(env),
        resources: parameters.and_then(|p| p.resources.clone()),
        ports: Some(ports),
        readiness_probe: Some(probe("/ready")),
        liveness_probe: Some(probe("/healthz")),
        lifecycle: delay.map(|seconds| Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction { seconds }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "config".into(),
            mount_path: "/etc/turna".into(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    let selector = n.selector();
    let spread = |key: &str| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: "ScheduleAnyway".into(),
        label_selector: Some(LabelSelector {
            match_labels: Some(selector.clone()),
            ..LabelSelector::default()
        }),
        ..TopologySpreadConstraint::default()
    };
    // Where annotation-based Prometheus discovery finds the proxy's metrics; the Gateway's and
    // the parameters' annotations may say otherwise.
    let mut pod_annotations: BTreeMap<String, String> = [
        ("prometheus.io/scrape", "true".to_string()),
        ("prometheus.io/port", s.proxy.health_port.to_string()),
        ("prometheus.io/path", "/metrics".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    pod_annotations.extend(annotations.clone());
    pod_annotations.insert(CONFIG_HASH_ANNOTATION.into(), config_hash);
    let deployment = Deployment {
        metadata: meta(&n.proxy, &namespace, &ours),
        spec: Some(DeploymentSpec {
            // An autoscaled Deployment's replicas are the HorizontalPodAutoscaler's to set.
            replicas: (!autoscaled).then_some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    annotations: Some(pod_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(service_account_name.clone()),
                    containers: vec![container],
                    termination_grace_period_seconds: Some(delay.unwrap_or(0) + 30),
                    topology_spread_constraints: Some(
                        parameters
                            .and_then(|p| p.topology_spread_constraints.clone())
                            .unwrap_or_else(|| {
                                vec![spread("kubernetes.io/hostname"), spread("topology.kubernetes.io/zone")]
                            }),
                    ),
                    image_pull_secrets: parameters
                        .and_then(|p| p.image_pull_secrets.clone())
                        .or_else(|| pull_secrets(&s.proxy.image_pull_secrets)),
                    node_selector: parameters.and_then(|p| p.node_selector.clone()),
                    tolerations: parameters.and_then(|p| p.tolerations.clone()),
                    affinity: parameters.and_then(|p| p.affinity.clone()),
                    priority_class_name: parameters.and_then(|p| p.priority_class_name.clone()),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65532),
                        ..PodSecurityContext::default()
                    }),
                    volumes: Some(vec![Volume {
                        name: "config".into(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: n.proxy.clone(),
                            ..ConfigMapVolumeSource::default()
                        }),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    };

    let requested: Vec<&String> = infrastructure
        .map(|i| i.addresses.iter().filter(|a| !a.is_empty()).collect())
        .unwrap_or_default();
    let mut service_annotations = service_annotations;
    service_annotations.insert(
        GATEWAY_ANNOTATION.into(),
        format!("{}/{}", n.gateway_namespace, n.gateway_name),
    );
    // Only `Cluster` addresses asked for (GEP-5093): a ClusterIP Service, without what only a
    // load balancer takes (the API server refuses externalTrafficPolicy on one).
    let cluster_only = infrastructure.is_some_and(|i| i.cluster_only);
    let mut load_balancer_ip = None;
    if !requested.is_empty() && !cluster_only {
        if s.proxy.addresses_annotation.is_empty() {
            load_balancer_ip = requested.first().map(|a| a.to_string());
        } else {
            service_annotations.insert(
                s.proxy.addresses_annotation.clone(),
                requested.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(","),
            );
        }
    }
    let service = Service {
        metadata: ObjectMeta {
            annotations: Some(service_annotations),
            ..meta(&n.proxy, &namespace, &service_labels)
        },
        spec: Some(ServiceSpec {
            type_: Some(if cluster_only {
                "ClusterIP".into()
            } else {
                service_parameters
                    .and_then(|p| p.kind)
                    .map_or_else(|| s.proxy.service_type.clone(), |t| t.as_str().into())
            }),
            external_traffic_policy: service_parameters
                .and_then(|p| p.external_traffic_policy)
                .filter(|_| !cluster_only)
                .map(|p| p.as_str().into()),
            load_balancer_class: service_parameters
                .and_then(|p| p.load_balancer_class.clone())
                .filter(|_| !cluster_only),
            selector: Some(selector.clone()),
            load_balancer_ip,
            cluster_ip: infrastructure.and_then(|i| i.cluster_ip.clone()),
            ports: Some(
                input
                    .proxy
                    .ports
                    .iter()
                    .map(|p| ServicePort {
                        name: Some(format!("{}-{}", transport(p.transport).to_lowercase(), p.port)),
                        port: i32::from(p.port),
                        target_port: Some(IntOrString::Int(i32::from(p.bind_port))),
                        protocol: Some(transport(p.transport).into()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };

    let most = parameters
        .and_then(|p| p.autoscaling.as_ref())
        .map_or(replicas, |a| a.max_replicas);
    let pod_disruption_budget = (most > 1).then(|| PodDisruptionBudget {
        metadata: meta(&n.proxy, &namespace, &ours),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector.clone()),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    });

    let horizontal_pod_autoscaler = parameters
        .and_then(|p| p.autoscaling.as_ref())
        .map(|a| autoscaler(a, &n.proxy, &namespace, &ours));

    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: service_account_name.clone(),
        namespace: Some(namespace.clone()),
        ..Subject::default()
    };
    let (service_account, role, role_binding, cluster_role_binding) = if own_service_account {
        let sa_labels = if s.proxy.gateway_namespace {
            labels.clone()
        } else {
            ours.clone()
        };
        let sa_annotations = if s.proxy.gateway_namespace {
            annotations.clone()
        } else {
            BTreeMap::new()
        };
        (
            Some(ServiceAccount {
                metadata: ObjectMeta {
                    annotations: Some(sa_annotations),
                    ..meta(&n.proxy, &namespace, &sa_labels)
                },
                automount_service_account_token: Some(true),
                ..ServiceAccount::default()
            }),
            Some(Role {
                metadata: meta(&n.proxy, input.controller_namespace, &ours),
                rules: Some(proxy_rules(input)),
            }),
            Some(RoleBinding {
                metadata: meta(&n.proxy, input.controller_namespace, &ours),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: n.proxy.clone(),
                },
                subjects: Some(vec![subject.clone()]),
            }),
            Some(ClusterRoleBinding {
                metadata: ObjectMeta {
                    name: Some(format!("turna-proxy:{}:{}", namespace, n.proxy)),
                    labels: Some(ours.clone()),
                    ..ObjectMeta::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: s.proxy.cluster_role.clone(),
                },
                subjects: Some(vec![subject]),
            }),
        )
    } else {
        (None, None, None, None)
    };
    let mut objects = Objects {
        namespace,
        deployment,
        service,
        config_map,
        pod_disruption_budget,
        horizontal_pod_autoscaler,
        service_account,
        role,
        role_binding,
        cluster_role_binding,
    };
    let owners = Owners::of(input.proxy, n);
    let metas = [
        Some(&mut objects.deployment.metadata),
        Some(&mut objects.service.metadata),
        Some(&mut objects.config_map.metadata),
        objects.pod_disruption_budget.as_mut().map(|o| &mut o.metadata),
        objects.horizontal_pod_autoscaler.as_mut().map(|o| &mut o.metadata),
        objects.service_account.as_mut().map(|o| &mut o.metadata),
        objects.role.as_mut().map(|o| &mut o.metadata),
        objects.role_binding.as_mut().map(|o| &mut o.metadata),
        objects.cluster_role_binding.as_mut().map(|o| &mut o.metadata),
    ];
    for meta in metas.into_iter().flatten() {
        owners.own(meta);
    }
    objects
}

/// Who owns a proxy's objects, so that Kubernetes garbage collection removes them with it, even
/// while no controller runs: the Gateway for objects in its own namespace (owners must be in the
/// namespace of what they own, or cluster-scoped), the GatewayClass for the rest (the
/// controller namespace's and cluster-scoped ones). Turna's own label-based collection stays for
/// objects made before owner references.
#[derive(Clone, Debug, Default)]
pub struct Owners {
    gateway_namespace: String,
    gateway: Option<OwnerReference>,
    class: Option<OwnerReference>,
}

impl Owners {
    pub fn of(proxy: &ir::Proxy, names: &Names) -> Owners {
        let Some(uids) = proxy.infrastructure.as_ref().and_then(|i| i.owners.as_ref()) else {
            return Owners::default();
        };
        let reference = |kind: &str, name: &str, uid: &str| OwnerReference {
            api_version: format!("{}/v1", translator::GROUP),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            // Not a blocking owner: that would need the finalizers of Gateways and classes.
            block_owner_deletion: None,
            controller: Some(true),
        };
        Owners {
            gateway_namespace: names.gateway_namespace.clone(),
            gateway: Some(reference("Gateway", &names.gateway_name, &uids.gateway_uid)),
            class: Some(reference("GatewayClass", &uids.gateway_class, &uids.gateway_class_uid)),
        }
    }

    /// Sets the owner of the object of `meta`, by its namespace.
    pub fn own(&self, meta: &mut ObjectMeta) {
        let owner = match meta.namespace.as_deref() {
            Some(namespace) if namespace == self.gateway_namespace => self.gateway.as_ref(),
            _ => self.class.as_ref(),
        };
        meta.owner_references = owner.map(|o| vec![o.clone()]);
    }
}

/// What a proxy with its own ServiceAccount may do in the controller namespace: read its bundle
/// Secret, and find the controller's push endpoints when its Service lives there.
fn proxy_rules(input: &ProxyInput<'_>) -> Vec<PolicyRule> {
    let mut rules = vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["secrets".into()]),
        resource_names: Some(vec![input.names.bundle.clone()]),
        verbs: vec!["get".into(), "list".into(), "watch".into()],
        ..PolicyRule::default()
    }];
    let service_namespace = input
        .push
        .and_then(|p| p.service.as_deref())
        .and_then(|s| s.split_once('/'))
        .map(|(ns, _)| ns);
    if service_namespace == Some(input.controller_namespace) {
        rules.push(PolicyRule {
            api_groups: Some(vec!["discovery.k8s.io".into()]),
            resources: Some(vec!["endpointslices".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..PolicyRule::default()
        });
    }
    rules
}

fn transport(t: ir::Transport) -> &'static str {
    match t {
        ir::Transport::Tcp => "TCP",
        ir::Transport::Udp => "UDP",
    }
}

/// The proxy's own configuration file: proxy mode, its Gateway and its bundle Secret.
/// The HorizontalPodAutoscaler of the proxy Deployment `name`: the average CPU and memory use
/// targets asked for (the API's default, 80% CPU, when neither is).
fn autoscaler(
    a: &translator::parameters::api::Autoscaling,
    name: &str,
    namespace: &str,
    labels: &Map,
) -> HorizontalPodAutoscaler {
    let target = |resource: &str, percent: i32| MetricSpec {
        type_: "Resource".into(),
        resource: Some(ResourceMetricSource {
            name: resource.into(),
            target: MetricTarget {
                type_: "Utilization".into(),
                average_utilization: Some(percent),
                ..MetricTarget::default()
            },
        }),
        ..MetricSpec::default()
    };
    let metrics: Vec<MetricSpec> = [
        a.target_cpu_utilization_percentage.map(|p| target("cpu", p)),
        a.target_memory_utilization_percentage.map(|p| target("memory", p)),
    ]
    .into_iter()
    .flatten()
    .collect();
    HorizontalPodAutoscaler {
        metadata: meta(name, namespace, labels),
        spec: HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: name.into(),
            },
            min_replicas: a.min_replicas,
            max_replicas: a.max_replicas,
            metrics: (!metrics.is_empty()).then_some(metrics),
            ..HorizontalPodAutoscalerSpec::default()
        },
        ..HorizontalPodAutoscaler::default()
    }
}

fn proxy_config(input: &ProxyInput<'_>) -> String {
    let s = input.settings;
    // The proxy settings of its TurnaProxy over the installation's.
    let parameters = input.proxy.infrastructure.as_ref().and_then(|i| i.parameters.as_ref());
    let limits = match parameters.and_then(|p| p.limits.as_ref()) {
        Some(l) => s.limits.with_parameters(l),
        None => s.limits.clone(),
    };
    let passive_health = match parameters.and_then(|p| p.passive_health.as_ref()) {
        Some(p) => s.passive_health.with_parameters(p),
        None => s.passive_health.clone(),
    };
    let client_address = match parameters.and_then(|p| p.client_address.as_ref()) {
        Some(c) => s.client_address.with_parameters(c),
        None => s.client_address.clone(),
    };
    let access_log = parameters.and_then(|p| p.access_log).unwrap_or(s.access_log);
    let access_log_format = parameters
        .and_then(|p| p.access_log_format)
        .unwrap_or(s.access_log_format);
    let gateway = format!("{}/{}", input.names.gateway_namespace, input.names.gateway_name);
    let config = serde_json::json!({
        "providers": {"kubernetes": {
            "mode": "proxy",
            "controller_name": s.controller_name,
            "controller_id": input.controller_id,
            "gateways": [gateway],
            "certificate_secret": format!("{}/{}", input.controller_namespace, input.names.bundle),
            "port_offset": s.port_offset,
            "health_address": format!(":{}", s.proxy.health_port),
            "backend": {
                "retry": s.backend.retry,
                "use_service_ip": s.backend.use_service_ip,
                "allow_external_name": s.backend.allow_external_name,
            },
            "limits": limits,
            "access_log": access_log,
            "access_log_format": access_log_format,
            "passive_health": passive_health,
            "client_address": client_address,
        }}
    });
    serde_yaml::to_string(&config).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::names;
    use crate::settings::Proxy as ProxySettings;
    use std::time::Duration;

    fn ir_proxy() -> ir::Proxy {
        ir::Proxy {
            ports: vec![
                ir::Port {
                    transport: ir::Transport::Tcp,
                    port: 80,
                    bind_port: 8080,
                    listeners: vec![],
                    frontend_validation: None,
                },
                ir::Port {
                    transport: ir::Transport::Udp,
                    port: 80,
                    bind_port: 8080,
                    listeners: vec![],
                    frontend_validation: None,
                },
            ],
            infrastructure: Some(ir::Infrastructure {
                labels: BTreeMap::from([
                    ("team".into(), "a".into()),
                    (names::MANAGED_BY.0.into(), "someone-else".into()),
                ]),
                annotations: BTreeMap::from([("lb.example.com/kind".into(), "internal".into())]),
                addresses: vec!["10.0.0.7".into(), String::new()],
                cluster_ip: None,
                cluster_only: false,
                parameters: None,
                owners: None,
            }),
            ..ir::Proxy::default()
        }
    }

    fn objects(settings: &Kubernetes) -> Objects {
        objects_of(settings, &ir_proxy())
    }

    fn objects_of(settings: &Kubernetes, proxy: &ir::Proxy) -> Objects {
        let names = Names::new("demo", "web", "turna-system/turna");
        build(&ProxyInput {
            names: &names,
            settings,
            proxy,
            image: "turna:1",
            controller_namespace: "turna-system",
            controller_id: "turna-system/turna",
            push: Some(&Push {
                url: "https://turna.turna-system.svc:9443".into(),
                ca_pem: "CA".into(),
                service: Some("turna-system/turna".into()),
            }),
        })
    }

    #[test]
    fn proxy_parameters_size_schedule_and_expose_the_proxies() {
        use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        use translator::parameters::TurnaProxySpec;
        use translator::parameters::api::{
            Autoscaling, ExternalTrafficPolicy, LogLevel, Metadata, ServiceParameters, ServiceType,
        };

        let mut proxy = ir_proxy();
        let infrastructure = proxy.infrastructure.as_mut().expect("infrastructure");
        infrastructure.parameters = Some(TurnaProxySpec {
            replicas: Some(4),
            image: Some("registry.example.com/turna:2".into()),
            image_pull_secrets: Some(vec![LocalObjectReference {
                name: "registry".into(),
            }]),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".into(), Quantity("250m".into()))])),
                ..ResourceRequirements::default()
            }),
            node_selector: Some(BTreeMap::from([("pool".into(), "edge".into())])),
            tolerations: Some(vec![Toleration {
                key: Some("edge".into()),
                operator: Some("Exists".into()),
                ..Toleration::default()
            }]),
            priority_class_name: Some("gateway-critical".into()),
            pod: Some(Metadata {
                // The Gateway's infrastructure label `team` wins over the parameters'.
                labels: BTreeMap::from([("team".into(), "b".into()), ("tier".into(), "edge".into())]),
                annotations: BTreeMap::from([("scrape".into(), "yes".into())]),
            }),
            service: Some(ServiceParameters {
                kind: Some(ServiceType::NodePort),
                external_traffic_policy: Some(ExternalTrafficPolicy::Local),
                load_balancer_class: Some("example.com/lb".into()),
                labels: BTreeMap::from([("exposed".into(), "yes".into())]),
                ..ServiceParameters::default()
            }),
            shutdown_delay: Some("1500ms".into()),
            log_level: Some(LogLevel::Debug),
            ..TurnaProxySpec::default()
        });
        let o = objects_of(&Kubernetes::default(), &proxy);
        let spec = o.deployment.spec.as_ref().expect("spec");
        assert_eq!(spec.replicas, Some(4));
        let template = spec.template.metadata.as_ref().expect("template metadata");
        let labels = template.labels.as_ref().expect("labels");
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(labels.get("tier").map(String::as_str), Some("edge"));
        assert_eq!(
            labels.get(names::MANAGED_BY.0).map(String::as_str),
            Some(names::MANAGED_BY.1)
        );
        assert!(template.annotations.as_ref().is_some_and(|a| a.contains_key("scrape")));
        let pod = spec.template.spec.as_ref().expect("pod");
        assert_eq!(
            pod.node_selector
                .as_ref()
                .and_then(|n| n.get("pool"))
                .map(String::as_str),
            Some("edge")
        );
        assert_eq!(pod.tolerations.as_ref().map(Vec::len), Some(1));
        assert_eq!(pod.priority_class_name.as_deref(), Some("gateway-critical"));
        assert_eq!(
            pod.image_pull_secrets.as_ref().map(|s| s[0].name.as_str()),
            Some("registry")
        );
        let container = &pod.containers[0];
        assert_eq!(container.image.as_deref(), Some("registry.example.com/turna:2"));
        assert!(
            container
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .is_some_and(|r| r.contains_key("cpu"))
        );
        let env = container.env.as_ref().expect("env");
        assert!(
            env.iter()
                .any(|e| e.name == "RUST_LOG" && e.value.as_deref() == Some("debug"))
        );
        assert!(
            env.iter()
                .any(|e| e.name == "MIMALLOC_ALLOW_THP" && e.value.as_deref() == Some("0"))
        );
        let sleep = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|p| p.sleep.as_ref())
            .map(|s| s.seconds);
        assert_eq!(sleep, Some(2), "1500ms rounds up to whole seconds");
        let service = o.service.spec.as_ref().expect("service");
        assert_eq!(service.type_.as_deref(), Some("NodePort"));
        assert_eq!(service.external_traffic_policy.as_deref(), Some("Local"));
        assert_eq!(service.load_balancer_class.as_deref(), Some("example.com/lb"));
        let service_labels = o.service.metadata.labels.as_ref().expect("labels");
        assert_eq!(service_labels.get("exposed").map(String::as_str), Some("yes"));
        assert!(
            o.pod_disruption_budget.is_some(),
            "4 replicas keep a PodDisruptionBudget"
        );

        // Autoscaled: the Deployment leaves replicas to the autoscaler.
        let parameters = proxy
            .infrastructure
            .as_mut()
            .and_then(|i| i.parameters.as_mut())
            .expect("parameters");
        parameters.autoscaling = Some(Autoscaling {
            min_replicas: Some(2),
            max_replicas: 8,
            target_cpu_utilization_percentage: Some(70),
            ..Autoscaling::default()
        });
        let o = objects_of(&Kubernetes::default(), &proxy);
        assert_eq!(o.deployment.spec.as_ref().and_then(|s| s.replicas), None);
        let hpa = o.horizontal_pod_autoscaler.expect("an autoscaler").spec;
        assert_eq!((hpa.min_replicas, hpa.max_replicas), (Some(2), 8));
        assert_eq!(
            hpa.scale_target_ref.name,
            o.deployment.metadata.name.clone().unwrap_or_default()
        );
        let metrics = hpa.metrics.expect("metrics");
        assert_eq!(metrics.len(), 1);
        let cpu = metrics[0].resource.as_ref().expect("a resource metric");
        assert_eq!((cpu.name.as_str(), cpu.target.average_utilization), ("cpu", Some(70)));
        assert!(
            o.pod_disruption_budget.is_some(),
            "up to 8 replicas keep a PodDisruptionBudget"
        );
    }

    #[test]
    fn service_exposes_each_listener_port_and_protocol() {
        let o = objects(&Kubernetes::default());
        assert_eq!(o.namespace, "turna-system");
        let spec = o.service.spec.expect("spec");
        let ports = spec.ports.expect("ports");
        let shape: Vec<(String, i32, String)> = ports
            .iter()
            .map(|p| {
                (
                    p.name.clone().unwrap_or_default(),
                    p.port,
                    p.protocol.clone().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [("tcp-80".into(), 80, "TCP".into()), ("udp-80".into(), 80, "UDP".into())]
        );
        assert_eq!(ports[0].target_port, Some(IntOrString::Int(8080)));
        assert_eq!(spec.load_balancer_ip.as_deref(), Some("10.0.0.7"));
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        let labels = o.service.metadata.labels.expect("labels");
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(
            labels.get(names::MANAGED_BY.0).map(String::as_str),
            Some(names::MANAGED_BY.1),
            "ours win"
        );
        assert_eq!(labels.get(names::GATEWAY_NAME_LABEL).map(String::as_str), Some("web"));
    }

    #[test]
    fn config_change_rolls_the_deployment() {
        let hash = |o: Objects| {
            o.deployment
                .spec
                .expect("spec")
                .template
                .metadata
                .expect("meta")
                .annotations
                .expect("annotations")[CONFIG_HASH_ANNOTATION]
                .clone()
        };
        let before = hash(objects(&Kubernetes::default()));
        assert_eq!(before, hash(objects(&Kubernetes::default())), "stable");
        let changed = Kubernetes {
            port_offset: 9000,
            ..Kubernetes::default()
        };
        assert_ne!(before, hash(objects(&changed)));
    }

    #[test]
    fn proxies_get_the_controller_limits() {
        let mut settings = Kubernetes::default();
        settings.limits.max_connections = 123;
        settings.limits.idle_timeout = Duration::from_millis(1500);
        let o = objects(&settings);
        let text = &o.config_map.data.as_ref().expect("data")["turna.yaml"];
        // What `turna proxy --config` reads.
        let file: crate::settings::File = serde_yaml::from_str(text).expect("a settings file");
        let proxy = file.providers.kubernetes.validate().expect("valid");
        assert_eq!(proxy.limits, settings.limits);
        let limits = proxy.dataplane_settings([0, 0, 0, 0].into()).limits;
        assert_eq!(limits.max_connections, 123);
        assert_eq!(limits.idle_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn cluster_only_addresses_make_a_cluster_ip_service_whatever_the_type_configured() {
        use translator::parameters::TurnaProxySpec;
        use translator::parameters::api::{ExternalTrafficPolicy, ServiceParameters, ServiceType};
        let mut proxy = ir_proxy();
        let infrastructure = proxy.infrastructure.as_mut().expect("infrastructure");
        infrastructure.addresses.clear();
        infrastructure.cluster_only = true;
        infrastructure.cluster_ip = Some("10.96.0.42".into());
        infrastructure.parameters = Some(TurnaProxySpec {
            service: Some(ServiceParameters {
                kind: Some(ServiceType::NodePort),
                external_traffic_policy: Some(ExternalTrafficPolicy::Local),
                load_balancer_class: Some("example.com/lb".into()),
                ..ServiceParameters::default()
            }),
            ..TurnaProxySpec::default()
        });
        let settings = Kubernetes {
            proxy: ProxySettings {
                addresses_annotation: "metallb.io/loadBalancerIPs".into(),
                ..ProxySettings::default()
            },
            ..Kubernetes::default()
        };
        let o = objects_of(&settings, &proxy);
        let spec = o.service.spec.expect("spec");
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.42"));
        assert_eq!(spec.external_traffic_policy, None, "refused on a ClusterIP Service");
        assert_eq!(spec.load_balancer_class, None);
        assert_eq!(spec.load_balancer_ip, None);
        let annotations = o.service.metadata.annotations.expect("annotations");
        assert!(!annotations.contains_key("metallb.io/loadBalancerIPs"));
    }

    #[test]
    fn addresses_annotation_replaces_load_balancer_ip() {
        let settings = Kubernetes {
            proxy: ProxySettings {
                addresses_annotation: "metallb.io/loadBalancerIPs".into(),
                ..ProxySettings::default()
            },
            ..Kubernetes::default()
        };
        let o = objects(&settings);
        assert_eq!(o.service.spec.expect("spec").load_balancer_ip, None);
        let annotations = o.service.metadata.annotations.expect("annotations");
        assert_eq!(
            annotations.get("metallb.io/loadBalancerIPs").map(String::as_str),
            Some("10.0.0.7")
        );
    }

    #[test]
    fn replicas_spread_and_drain_safely() {
        let mut settings = Kubernetes::default();
        assert!(objects(&settings).pod_disruption_budget.is_none());
        settings.proxy.replicas = 2;
        let o = objects(&settings);
        assert!(o.pod_disruption_budget.is_some());
        let pod = o.deployment.spec.expect("spec").template.spec.expect("pod");
        assert_eq!(pod.topology_spread_constraints.expect("spread").len(), 2);
        let sleep = pod.containers[0]
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|p| p.sleep.as_ref());
        assert_eq!(sleep.map(|s| s.seconds), Some(5));
        assert_eq!(pod.service_account_name.as_deref(), Some("turna-proxy"));
    }

    #[test]
    fn gateway_placement_with_own_service_account() {
        let settings = Kubernetes {
            proxy: ProxySettings {
                gateway_namespace: true,
                cluster_role: "turna-reader".into(),
                ..ProxySettings::default()
            },
            ..Kubernetes::default()
        };
        let o = objects(&settings);
        assert_eq!(o.namespace, "demo");
        let sa = o.service_account.expect("own ServiceAccount");
        assert_eq!(sa.metadata.namespace.as_deref(), Some("demo"));
        assert_eq!(
            sa.metadata.labels.expect("labels").get("team").map(String::as_str),
            Some("a")
        );
        let role = o.role.expect("role");
        assert_eq!(
            role.metadata.namespace.as_deref(),
            Some("turna-system"),
            "the Role stays next to the bundle Secret"
        );
        let rules = role.rules.expect("rules");
        assert_eq!(
            rules[1].resources.as_deref(),
            Some(&["endpointslices".to_string()][..]),
            "the push endpoints of the controller Service"
        );
        let rule = &rules[0];
        assert_eq!(
            rule.resource_names.as_deref(),
            Some(
                &[format!(
                    "{}-certs",
                    o.deployment.metadata.name.clone().unwrap_or_default()
                )][..]
            )
        );
        assert_eq!(o.cluster_role_binding.expect("binding").role_ref.name, "turna-reader");
    }

    #[test]
    fn proxies_are_told_where_to_get_their_ir_and_which_ca_to_pin() {
        let o = objects(&Kubernetes::default());
        let data = o.config_map.data.as_ref().expect("data");
        assert_eq!(data.get(PUSH_CA_KEY).map(String::as_str), Some("CA"));
        let pod = o
            .deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("pod");
        let args = pod.containers[0].args.clone().unwrap_or_default();
        assert_eq!(
            args,
            [
                "proxy",
                "--config",
                CONFIG_PATH,
                "--operator",
                "https://turna.turna-system.svc:9443",
                "--operator-ca",
                "/etc/turna/push-ca.crt",
                "--operator-service",
                "turna-system/turna"
            ]
        );
    }

    #[test]
    fn the_configured_pull_secrets_reach_every_proxy_pod_unless_its_parameters_name_others() {
        let pulled_with = |o: &Objects| -> Vec<String> {
            let pod = o
                .deployment
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .expect("pod");
            pod.image_pull_secrets
                .iter()
                .flatten()
                .map(|s| s.name.clone())
                .collect()
        };
        assert!(pulled_with(&objects(&Kubernetes::default())).is_empty());
        let mut settings = Kubernetes::default();
        settings.proxy.image_pull_secrets = vec!["regcred".into(), "mirror".into()];
        // Its own ServiceAccount (proxy.cluster_role) carries none: the pod names them.
        settings.proxy.cluster_role = "turna-reader".into();
        assert_eq!(pulled_with(&objects(&settings)), ["regcred", "mirror"]);

        let mut proxy = ir_proxy();
        proxy.infrastructure.as_mut().expect("infrastructure").parameters =
            Some(translator::parameters::TurnaProxySpec {
                image_pull_secrets: Some(vec![LocalObjectReference {
                    name: "registry".into(),
                }]),
                ..Default::default()
            });
        assert_eq!(pulled_with(&objects_of(&settings, &proxy)), ["registry"]);
    }

    #[test]
    fn a_turna_proxy_sets_the_proxy_settings_over_the_installations() {
        use translator::parameters::api::{Limits, PassiveHealth};
        let mut settings = Kubernetes::default();
        settings.limits.max_connections = 123;
        settings.passive_health.eject_after = 7;
        let read = |o: &Objects| {
            let text = &o.config_map.data.as_ref().expect("data")["turna.yaml"];
            // What `turna proxy --config` reads.
            let file: crate::settings::File = serde_yaml::from_str(text).expect("a settings file");
            file.providers.kubernetes.validate().expect("valid")
        };
        let plain = read(&objects(&settings));
        assert!(!plain.access_log);
        assert_eq!(plain.passive_health, settings.passive_health);

        let mut proxy = ir_proxy();
        proxy.infrastructure.as_mut().expect("infrastructure").parameters =
            Some(translator::parameters::TurnaProxySpec {
                access_log: Some(true),
                access_log_format: Some(translator::parameters::api::AccessLogFormat::Text),
                passive_health: Some(PassiveHealth {
                    cool_down: Some("2s".into()),
                    ..PassiveHealth::default()
                }),
                limits: Some(Limits {
                    idle_timeout: Some("7s".into()),
                    http2_max_concurrent_streams: Some(50),
                    ..Limits::default()
                }),
                ..Default::default()
            });
        let tuned = read(&objects_of(&settings, &proxy));
        assert!(tuned.access_log);
        assert_eq!(tuned.access_log_format, crate::settings::AccessLogFormat::Text);
        assert_eq!(tuned.passive_health.eject_after, 7, "unset: the installation's");
        assert_eq!(tuned.passive_health.cool_down, Duration::from_secs(2));
        assert_eq!(tuned.limits.max_connections, 123, "unset: the installation's");
        assert_eq!(tuned.limits.idle_timeout, Duration::from_secs(7));
        assert_eq!(tuned.limits.http2_max_concurrent_streams, 50);
        let dataplane = tuned.dataplane_settings([0, 0, 0, 0].into());
        let log = dataplane.access_log.expect("access log on");
        assert_eq!(log.format, dataplane::access_log::Format::Text);
        assert_eq!(log.path, None, "proxies write to standard output");
        assert_eq!(dataplane.passive_health.cool_down, Duration::from_secs(2));

        // Where clients' addresses come from: the installation's trusted hops, the Gateway's
        // PROXY protocol ports.
        settings.client_address.trusted_hops = 2;
        let mut proxy = ir_proxy();
        proxy.infrastructure.as_mut().expect("infrastructure").parameters =
            Some(translator::parameters::TurnaProxySpec {
                client_address: Some(translator::parameters::api::ClientAddress {
                    proxy_protocol_ports: Some(vec![443, 80]),
                    trusted_hops: None,
                }),
                ..Default::default()
            });
        let behind = read(&objects_of(&settings, &proxy)).dataplane_settings([0, 0, 0, 0].into());
        assert_eq!(behind.client_address.proxy_protocol_ports, [80, 443].into());
        assert_eq!(behind.client_address.trusted_hops, 2, "unset: the installation's");
    }
}
