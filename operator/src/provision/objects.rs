//! Deployment, Service, ConfigMap, PodDisruptionBudget and RBAC of one proxy.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    Lifecycle, LifecycleHandler, ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec, SleepAction, TopologySpreadConstraint, Volume,
    VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
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

/// Infrastructure labels and annotations, which can add to but never replace Turna's labels.
fn with_infrastructure(
    ours: &BTreeMap<String, String>,
    infrastructure: Option<&ir::Infrastructure>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut labels = infrastructure.map(|i| i.labels.clone()).unwrap_or_default();
    labels.extend(ours.clone());
    let annotations = infrastructure.map(|i| i.annotations.clone()).unwrap_or_default();
    (labels, annotations)
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
    let (labels, annotations) = with_infrastructure(&ours, infrastructure);
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
    let delay = s.proxy.shutdown_delay.map(|d| d.as_secs() as i64).filter(|d| *d > 0);
    let container = Container {
        name: "proxy".into(),
        image: Some(input.image.into()),
        args: Some(args),
        env: Some(vec![
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
        ]),
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
    let mut pod_annotations = annotations.clone();
    pod_annotations.insert(CONFIG_HASH_ANNOTATION.into(), config_hash);
    let deployment = Deployment {
        metadata: meta(&n.proxy, &namespace, &ours),
        spec: Some(DeploymentSpec {
            replicas: Some(s.proxy.replicas as i32),
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
                    topology_spread_constraints: Some(vec![
                        spread("kubernetes.io/hostname"),
                        spread("topology.kubernetes.io/zone"),
                    ]),
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
    let mut service_annotations = annotations.clone();
    service_annotations.insert(
        GATEWAY_ANNOTATION.into(),
        format!("{}/{}", n.gateway_namespace, n.gateway_name),
    );
    let mut load_balancer_ip = None;
    if !requested.is_empty() {
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
            ..meta(&n.proxy, &namespace, &labels)
        },
        spec: Some(ServiceSpec {
            type_: Some(s.proxy.service_type.clone()),
            selector: Some(selector.clone()),
            load_balancer_ip,
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

    let pod_disruption_budget = (s.proxy.replicas > 1).then(|| PodDisruptionBudget {
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
    Objects {
        namespace,
        deployment,
        service,
        config_map,
        pod_disruption_budget,
        service_account,
        role,
        role_binding,
        cluster_role_binding,
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
fn proxy_config(input: &ProxyInput<'_>) -> String {
    let s = input.settings;
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
            "limits": s.limits,
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
            }),
            ..ir::Proxy::default()
        }
    }

    fn objects(settings: &Kubernetes) -> Objects {
        let names = Names::new("demo", "web", "turna-system/turna");
        let proxy = ir_proxy();
        build(&ProxyInput {
            names: &names,
            settings,
            proxy: &proxy,
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
}
