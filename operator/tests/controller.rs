//! Controller mode against a real kube-apiserver, as `turna controller` runs it
//! (`modes::controller`): the push CA is kept in a Secret so a restarted controller leaves the
//! proxy ConfigMap and Deployment unchanged; a proxy finds the controller through the controller
//! Service's EndpointSlices (read with the proxy's own ServiceAccount token and provisioned Role),
//! keeps serving HTTP and HTTPS while the controller is away, and follows the restarted one;
//! standby replicas serve push too.
//!
//! The API server refuses loopback EndpointSlice addresses, so the controller's push port is
//! reached through a network namespace on this machine (tests/common/netns.rs).

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use common::netns::Netns;
use common::{LOOPBACK, backend, eventually, free_port};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::api::rbac::v1::Role;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use operator::modes::{controller, proxy};
use operator::provision::{Names, controller_id};
use operator::push::authority::Authority;
use operator::push::{client, endpoints};
use operator::settings::Kubernetes;
use tokio::sync::oneshot;

const SERVICE: &str = "turna-controller";

fn plane() -> &'static control_plane::ControlPlane {
    control_plane::ControlPlane::shared_with(control_plane::Options::default())
}

fn objects(ns: &str, class: &str, http: u16, https: u16, backend: SocketAddr, path: &str) -> String {
    let listeners = format!(
        "[{{name: http, port: {http}, protocol: HTTP}}, {{name: https, port: {https}, protocol: HTTPS, \
         hostname: secure.test, tls: {{mode: Terminate, certificateRefs: [{{name: secure}}]}}}}]"
    );
    common::class_and_gateway(class, common::CONTROLLER_NAME, ns, &listeners)
        + &common::route_to_loopback(ns, Some(path), backend)
}

/// A CA and a `kubernetes.io/tls` Secret `secure` in `ns` for `secure.test` signed by it; the CA PEM.
async fn tls_secret(client: &kube::Client, ns: &str) -> String {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA");
    let key = rcgen::KeyPair::generate().expect("key");
    let leaf = rcgen::CertificateParams::new(vec!["secure.test".to_string()])
        .expect("params")
        .signed_by(&key, &ca)
        .expect("certificate");
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("secure".into()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), ByteString(leaf.pem().into_bytes())),
            ("tls.key".to_string(), ByteString(key.serialize_pem().into_bytes())),
        ])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create TLS Secret");
    ca.pem()
}

/// Points the controller Service's EndpointSlice at `address:port` (port name `push`).
async fn endpoint_slice(client: &kube::Client, home: &str, address: &str, port: u16) {
    let slice = EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{SERVICE}-push")),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/service-name".to_string(),
                SERVICE.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(vec![Endpoint {
            addresses: vec![address.into()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                ..EndpointConditions::default()
            }),
            ..Endpoint::default()
        }]),
        ports: Some(vec![EndpointPort {
            name: Some(endpoints::PORT_NAME.into()),
            port: Some(i32::from(port)),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
    };
    Api::<EndpointSlice>::namespaced(client.clone(), home)
        .patch(
            &format!("{SERVICE}-push"),
            &PatchParams::apply("test").force(),
            &Patch::Apply(&slice),
        )
        .await
        .expect("apply EndpointSlice");
}

fn settings(class: &str, home: &str, leader_election: bool) -> Kubernetes {
    Kubernetes {
        gateway_class: class.into(),
        controller_id: format!("test/{class}"),
        port_offset: 0,
        debounce: Duration::from_millis(50),
        backend: operator::settings::Backend {
            allow_external_name: true,
            ..Default::default()
        },
        status: operator::settings::Status {
            leader_election: operator::settings::LeaderElection {
                disabled: !leader_election,
                namespace: home.into(),
                ..Default::default()
            },
            ..Default::default()
        },
        proxy: operator::settings::Proxy {
            namespace: home.into(),
            image: "turna:test".into(),
            // A ServiceAccount and Role per proxy; the ClusterRole need not exist for this.
            cluster_role: "turna-test-reader".into(),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Controller options as a pod in `home` behind Service [`SERVICE`] gets them.
fn options(settings: &Kubernetes, home: &str, identity: &str) -> controller::Options {
    controller::Options {
        settings: settings.clone(),
        reconcile: operator::reconcile::Options {
            identity: identity.into(),
            ..Default::default()
        },
        push_address: (LOOPBACK, 0).into(),
        push_names: Vec::new(),
        // A fixed URL, as the Service port is: the proxy objects must not change with restarts.
        push_url: Some(format!("https://{SERVICE}.{home}.svc:9443")),
        push_service: Some(SERVICE.into()),
        push_ca_secret: None,
        namespace: Some(home.into()),
        pod_ip: None,
    }
}

/// A started controller running until the returned sender fires (or drops).
async fn run(
    client: &kube::Client,
    options: controller::Options,
) -> (SocketAddr, String, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let started = controller::start(client.clone(), options)
        .await
        .expect("controller starts");
    let address = started.push_address();
    let ca = started.ca_pem().to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(started.run(async move {
        let _ = stopped.await;
    }));
    (address, ca, stop, task)
}

/// The resourceVersion of an object, once it exists.
async fn version<K>(api: &Api<K>, name: &str) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(&format!("{name} provisioned"), || async {
        api.get_opt(name).await.ok().flatten()?.meta().resource_version.clone()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn proxies_follow_the_controller_service_and_a_restart_changes_no_proxy_object() {
    let admin = common::client(&plane().kubeconfig()).await;
    let ns = plane().fresh_namespace("ctl");
    let home = plane().fresh_namespace("ctl-home");
    let class = format!("turna-{ns}");
    let backend = backend("app").await;
    let (http, https) = (free_port().await, free_port().await);
    let tls_ca = tls_secret(&admin, &ns).await;
    plane()
        .apply_yaml(&objects(&ns, &class, http, https, backend, "/"))
        .expect("apply objects");
    let settings = settings(&class, &home, false);
    let names = Names::new(&ns, "web", &controller_id(&settings));
    let netns = Netns::new();

    // Controller a, reachable only through its Service's EndpointSlice.
    let (a_address, a_ca, stop_a, a_task) = run(&admin, options(&settings, &home, "a")).await;
    let a_listener = netns.listen(0);
    let a_port = a_listener.local_addr().expect("address").port();
    let a_relay = Netns::relay(a_listener, a_address);
    endpoint_slice(&admin, &home, &netns.address.to_string(), a_port).await;

    let config_maps = Api::<ConfigMap>::namespaced(admin.clone(), &home);
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &home);
    let config_map_version = version(&config_maps, &names.proxy).await;
    let deployment_version = version(&deployments, &names.proxy).await;
    version(&Api::<ServiceAccount>::namespaced(admin.clone(), &home), &names.proxy).await;
    version(&Api::<Role>::namespaced(admin.clone(), &home), &names.proxy).await;
    let config_map = config_maps.get(&names.proxy).await.expect("ConfigMap");
    let data = config_map.data.unwrap_or_default();
    assert_eq!(data.get("push-ca.crt"), Some(&a_ca), "proxies pin the stored push CA");
    let stored = Api::<Secret>::namespaced(admin.clone(), &home)
        .get(&Authority::secret_name(&controller_id(&settings)))
        .await
        .expect("push CA Secret");
    assert_eq!(stored.type_.as_deref(), Some("kubernetes.io/tls"));
    let args = deployments
        .get(&names.proxy)
        .await
        .expect("Deployment")
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].args.clone().unwrap_or_default())
        .unwrap_or_default();
    assert!(
        args.windows(2)
            .any(|w| w == ["--operator-service", &format!("{home}/{SERVICE}")]),
        "{args:?}"
    );

    // The proxy runs with its provisioned ServiceAccount's token, for push and for the API.
    let token = common::service_account_token(&admin, &home, &names.proxy, None).await;
    let tokens = tempfile::tempdir().expect("tempdir");
    let token_file = tokens.path().join("token");
    std::fs::write(&token_file, &token).expect("write token");
    let proxy_client = common::token_client(&plane().kubeconfig(), &token).await;
    let running = proxy::start(
        proxy_client.clone(),
        proxy::Options {
            settings: Kubernetes {
                certificate_secret: format!("{home}/{}", names.bundle),
                health_address: "127.0.0.1:0".into(),
                address: "127.0.0.1".into(),
                ..Default::default()
            },
            push: client::Options {
                // Not resolvable here: only the EndpointSlice leads to the controller.
                url: format!("https://{SERVICE}.{home}.svc:9443").parse().expect("url"),
                ca_pem: data.get("push-ca.crt").cloned().unwrap_or_default(),
                token_file,
                endpoints: Some(endpoints::Resolver::new(proxy_client, &home, SERVICE)),
            },
        },
    )
    .await
    .expect("proxy starts");
    let plain = SocketAddr::new(LOOPBACK, http);
    let secure = SocketAddr::new(LOOPBACK, https);
    eventually("HTTP through the proxy", || async {
        running.dataplane().local_addr(http).await?;
        common::get(plain, "web.test", "/hello")
            .await
            .filter(|r| *r == (200, "app /hello".into()))
    })
    .await;
    eventually("HTTPS through the proxy", || async {
        running.dataplane().local_addr(https).await?;
        common::get_tls(secure, &tls_ca, "secure.test", "/tls")
            .await
            .filter(|r| *r == (200, "app /tls".into()))
    })
    .await;

    // The controller goes away: the proxy keeps serving its last IR, also after a route change.
    let _ = stop_a.send(());
    a_task.await.expect("controller a ends");
    a_relay.abort();
    plane()
        .apply_yaml(&objects(&ns, &class, http, https, backend, "/moved"))
        .expect("apply changed route");
    for _ in 0..10 {
        assert_eq!(
            common::get(plain, "web.test", "/hello").await,
            Some((200, "app /hello".into()))
        );
        assert_eq!(
            common::get_tls(secure, &tls_ca, "secure.test", "/tls").await,
            Some((200, "app /tls".into()))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Controller b starts elsewhere with the same stored CA; the proxy finds it through the
    // EndpointSlice and gets the changed route.
    let (b_address, b_ca, stop_b, b_task) = run(&admin, options(&settings, &home, "b")).await;
    assert_eq!(b_ca, a_ca, "the push CA is kept across restarts");
    let b_listener = netns.listen(0);
    let b_port = b_listener.local_addr().expect("address").port();
    let b_relay = Netns::relay(b_listener, b_address);
    endpoint_slice(&admin, &home, &netns.address.to_string(), b_port).await;
    eventually("the changed route from controller b", || async {
        let moved = common::get(plain, "web.test", "/moved/x").await?;
        let old = common::get(plain, "web.test", "/hello").await?;
        (moved == (200, "app /moved/x".into()) && old.0 == 404).then_some(())
    })
    .await;
    // b has applied the proxy objects by now (it provisions before it can be idle); the
    // ConfigMap and Deployment it applied are the ones a left, so no pod was rolled.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(version(&config_maps, &names.proxy).await, config_map_version);
    assert_eq!(version(&deployments, &names.proxy).await, deployment_version);

    let _ = stop_b.send(());
    b_task.await.expect("controller b ends");
    b_relay.abort();
    running.serve(async {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_starting_together_share_one_push_ca() {
    let admin = common::client(&plane().kubeconfig()).await;
    let home = plane().fresh_namespace("ca");
    for round in 0..5 {
        let name = format!("push-ca-{round}");
        let (a, b, c) = tokio::join!(
            Authority::load_or_create(&admin, &home, &name, "test/ca"),
            Authority::load_or_create(&admin, &home, &name, "test/ca"),
            Authority::load_or_create(&admin, &home, &name, "test/ca"),
        );
        let (a, b, c) = (a.expect("a"), b.expect("b"), c.expect("c"));
        assert_eq!(a.certificate_pem(), b.certificate_pem());
        assert_eq!(a.certificate_pem(), c.certificate_pem());
        let again = Authority::load_or_create(&admin, &home, &name, "test/ca")
            .await
            .expect("again");
        assert_eq!(again.certificate_pem(), a.certificate_pem());
        again
            .issue(&["turna.example".into()])
            .expect("issues from the stored CA");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_replica_serves_push() {
    let admin = common::client(&plane().kubeconfig()).await;
    let ns = plane().fresh_namespace("standby");
    let home = plane().fresh_namespace("standby-home");
    let class = format!("turna-{ns}");
    let backend = backend("standby").await;
    let (http, https) = (free_port().await, free_port().await);
    tls_secret(&admin, &ns).await;
    plane()
        .apply_yaml(&objects(&ns, &class, http, https, backend, "/"))
        .expect("apply objects");
    let settings = settings(&class, &home, true);
    let names = Names::new(&ns, "web", &controller_id(&settings));

    // The leader provisions; the standby, started second, never holds the Lease.
    let leader_metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
    let standby_metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
    let mut leader_options = options(&settings, &home, "leader");
    leader_options.reconcile.metrics = leader_metrics.clone();
    let (_, _, stop_leader, leader_task) = run(&admin, leader_options).await;
    version(&Api::<ServiceAccount>::namespaced(admin.clone(), &home), &names.proxy).await;
    let mut standby_options = options(&settings, &home, "standby");
    standby_options.reconcile.metrics = standby_metrics.clone();
    let (standby_address, ca, stop_standby, standby_task) = run(&admin, standby_options).await;
    assert!(
        leader_metrics.encode().contains("turna_operator_leader 1"),
        "{}",
        leader_metrics.encode()
    );

    // Only the standby is behind the Service.
    let netns = Netns::new();
    let listener = netns.listen(0);
    let port = listener.local_addr().expect("address").port();
    let relay = Netns::relay(listener, standby_address);
    endpoint_slice(&admin, &home, &netns.address.to_string(), port).await;

    let token = common::service_account_token(&admin, &home, &names.proxy, None).await;
    let tokens = tempfile::tempdir().expect("tempdir");
    let token_file = tokens.path().join("token");
    std::fs::write(&token_file, &token).expect("write token");
    let running = proxy::start(
        admin.clone(),
        proxy::Options {
            settings: Kubernetes {
                certificate_secret: format!("{home}/{}", names.bundle),
                health_address: "127.0.0.1:0".into(),
                address: "127.0.0.1".into(),
                ..Default::default()
            },
            push: client::Options {
                url: format!("https://{SERVICE}.{home}.svc:9443").parse().expect("url"),
                ca_pem: ca,
                token_file,
                endpoints: Some(endpoints::Resolver::new(admin.clone(), &home, SERVICE)),
            },
        },
    )
    .await
    .expect("proxy starts");
    let plain = SocketAddr::new(LOOPBACK, http);
    eventually("traffic with the standby's IR", || async {
        running.dataplane().local_addr(http).await?;
        common::get(plain, "web.test", "/s")
            .await
            .filter(|r| *r == (200, "standby /s".into()))
    })
    .await;
    let standby = standby_metrics.encode();
    assert!(standby.contains("turna_operator_leader 0"), "{standby}");
    assert!(standby.contains("turna_operator_connected_proxies 1"), "{standby}");
    let leader = leader_metrics.encode();
    assert!(leader.contains("turna_operator_leader 1"), "{leader}");
    assert!(leader.contains("turna_operator_connected_proxies 0"), "{leader}");

    let _ = stop_standby.send(());
    standby_task.await.expect("standby ends");
    let _ = stop_leader.send(());
    leader_task.await.expect("leader ends");
    relay.abort();
    running.serve(async {}).await;
}
