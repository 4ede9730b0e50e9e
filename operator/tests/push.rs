//! IR push against a real kube-apiserver: the operator's reconcile loop publishes each Gateway's
//! IR, its push server checks the proxy's ServiceAccount token with a TokenReview, and a proxy in
//! `proxy` mode receives its IR (and later versions) and serves traffic to a local backend named
//! in an ExternalName Service for localhost (the API server refuses loopback EndpointSlice
//! addresses, and tests send traffic to loopback only). Tokens of other ServiceAccounts are refused.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use common::{LOOPBACK, backend, eventually, free_port};

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use operator::modes::proxy;
use operator::provision::{Names, controller_id};
use operator::push::{client, protocol, server};
use operator::settings::Kubernetes;

fn plane() -> &'static control_plane::ControlPlane {
    control_plane::ControlPlane::shared_with(control_plane::Options::default())
}

/// `GET path` over a fresh connection: status code and body.
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    common::get(addr, "push.test", path).await
}

/// A token of ServiceAccount `ns/name` (created here), written to a file in `dir`.
async fn token_file(client: &kube::Client, ns: &str, name: &str, dir: &Path) -> std::path::PathBuf {
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    let account = ServiceAccount {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("create ServiceAccount");
    let token = common::service_account_token(client, ns, name, None).await;
    let path = dir.join(name);
    std::fs::write(&path, token).expect("write token");
    path
}

fn objects(ns: &str, class: &str, port: u16, backend: SocketAddr, path: &str) -> String {
    common::class_and_gateway(
        class,
        common::CONTROLLER_NAME,
        ns,
        &format!("[{{name: http, port: {port}, protocol: HTTP}}]"),
    ) + &common::route_to_loopback(ns, Some(path), backend)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proxy_receives_its_gateways_ir_and_other_identities_are_refused() {
    let client = common::client(&plane().kubeconfig()).await;
    let ns = plane().fresh_namespace("push");
    let home = plane().fresh_namespace("push-home");
    let class = format!("turna-{ns}");
    let backend = backend("app").await;
    let port = free_port().await;
    plane()
        .apply_yaml(&objects(&ns, &class, port, backend, "/"))
        .expect("apply objects");

    let settings = Kubernetes {
        gateway_class: class.clone(),
        controller_id: format!("test/{class}"),
        port_offset: 0,
        debounce: Duration::from_millis(50),
        // The backend is an ExternalName Service for localhost: the API server refuses
        // loopback addresses in EndpointSlices, and tests send traffic to loopback only.
        backend: operator::settings::Backend {
            allow_external_name: true,
            ..Default::default()
        },
        status: operator::settings::Status {
            leader_election: operator::settings::LeaderElection {
                disabled: true,
                ..Default::default()
            },
            ..Default::default()
        },
        proxy: operator::settings::Proxy {
            namespace: home.clone(),
            image: "turna:test".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let hub = server::Hub::default();
    let metrics = Arc::new(operator::metrics::Metrics::default());
    let options = operator::reconcile::Options {
        push: Some(hub.clone()),
        metrics: metrics.clone(),
        ..Default::default()
    };
    let controller = tokio::spawn(operator::reconcile::run_with(
        client.clone(),
        settings.clone(),
        options,
        std::future::pending(),
    ));

    let certificate = server::Certificate::generate(&["127.0.0.1".into()]).expect("push certificate");
    let listener = server::bind((LOOPBACK, 0).into()).await.expect("bind push");
    let push_addr = listener.local_addr().expect("push address");
    let push = tokio::spawn(server::serve(
        listener,
        certificate.clone(),
        server::Server {
            client: client.clone(),
            hub,
            controller_id: controller_id(&settings),
            shared_service_account: settings.proxy.service_account.clone(),
            placement: server::Placement::new(&settings, None),
            metrics: metrics.clone(),
        },
    ));

    let names = Names::new(&ns, "web", &controller_id(&settings));
    let tokens = tempfile::tempdir().expect("tempdir");
    let push_options = |token_file| client::Options {
        url: format!("https://{push_addr}").parse().expect("url"),
        ca_pem: certificate.ca_pem.clone(),
        token_file,
        endpoints: None,
    };
    let proxy_settings = Kubernetes {
        certificate_secret: format!("{home}/{}", names.bundle),
        health_address: "127.0.0.1:0".into(),
        address: "127.0.0.1".into(),
        ..Default::default()
    };
    let own = token_file(&client, &home, &names.proxy, tokens.path()).await;
    let running = proxy::start(
        client.clone(),
        proxy::Options {
            settings: proxy_settings,
            push: push_options(own.clone()),
        },
    )
    .await
    .expect("proxy starts");

    let gateway = SocketAddr::new(LOOPBACK, port);
    let answer = eventually("traffic through the proxy", || async {
        running.dataplane().local_addr(port).await?;
        get(gateway, "/hello").await.filter(|(code, _)| *code == 200)
    })
    .await;
    assert_eq!(answer.1, "app /hello");
    assert_eq!(get(running.health_address(), "/ready").await.map(|r| r.0), Some(200));

    // A new version of the IR reaches the connected proxy.
    plane()
        .apply_yaml(&objects(&ns, &class, port, backend, "/moved"))
        .expect("apply changed route");
    eventually("the changed route", || async {
        let moved = get(gateway, "/moved/x").await?;
        let old = get(gateway, "/hello").await?;
        (moved == (200, "app /moved/x".into()) && old.0 == 404).then_some(())
    })
    .await;
    assert!(
        metrics.encode().contains("turna_operator_connected_proxies 1"),
        "{}",
        metrics.encode()
    );
    // The proxy took the change as a delta (and served it above).
    assert!(
        metrics
            .encode()
            .contains(r#"turna_operator_ir_pushes_total{form="delta"} 1"#),
        "{}",
        metrics.encode()
    );

    // A stream that did not ask for deltas gets whole IRs only; one that did gets the changes
    // since the version it has, which make the same IR.
    let whole_path = protocol::STREAM_PATH.to_string();
    let delta_path = format!("{}?{}", protocol::STREAM_PATH, protocol::DELTAS_QUERY);
    let rules_path = format!("{delta_path}&{}", protocol::RULES_QUERY);
    let mut wholes = Lines::open(&push_options(own.clone()), &whole_path).await;
    let mut deltas = Lines::open(&push_options(own.clone()), &delta_path).await;
    let mut rule_deltas = Lines::open(&push_options(own.clone()), &rules_path).await;
    let (first, mut base, rules_base) = (wholes.next().await, deltas.next().await, rule_deltas.next().await);
    assert_eq!(first, base, "both streams start with the whole IR");
    assert_eq!(first, rules_base);
    plane()
        .apply_yaml(&objects(&ns, &class, port, backend, "/again"))
        .expect("apply changed route");
    let (whole, changes, rule_changes) = (wholes.next().await, deltas.next().await, rule_deltas.next().await);
    assert!(whole.proxy.is_some() && whole.delta.is_none(), "{whole:?}");
    assert_eq!(changes.base, Some(base.version));
    assert_eq!(changes.version, whole.version);
    let mut patched = base.proxy.take().expect("a whole IR");
    let mut rules_patched = patched.clone();
    let host_delta = changes.delta.expect("a delta");
    assert!(
        !host_delta.virtual_hosts.is_empty() && host_delta.rules.is_empty(),
        "{host_delta:?}"
    );
    host_delta.apply(&mut patched).expect("applies");
    assert_eq!(Some(patched), whole.proxy);
    // The route changed within its virtual host: the stream that asked for rules gets them.
    assert_eq!(
        (rule_changes.version, rule_changes.base),
        (whole.version, Some(rules_base.version))
    );
    let rule_delta = rule_changes.delta.expect("a delta");
    assert!(
        rule_delta.virtual_hosts.is_empty() && !rule_delta.rules.is_empty(),
        "{rule_delta:?}"
    );
    rule_delta.apply(&mut rules_patched).expect("applies");
    assert_eq!(Some(rules_patched), whole.proxy);
    eventually("the proxy serving the second change", || async {
        (get(gateway, "/again/x").await? == (200, "app /again/x".into())).then_some(())
    })
    .await;

    // Another ServiceAccount is authenticated but serves no Gateway; one named like the proxy
    // outside the proxy namespace (here the Gateway's) does not either; a bad token is not even
    // authenticated.
    let intruder = token_file(&client, &home, "intruder", tokens.path()).await;
    let elsewhere = tokens.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("dir");
    let namesake = token_file(&client, &ns, &names.proxy, &elsewhere).await;
    for token in [intruder, namesake] {
        let refused = client::request(
            &push_options(token.clone()),
            http::Method::GET,
            protocol::STREAM_PATH,
            Bytes::new(),
        )
        .await
        .expect("push server answers");
        assert_eq!(refused.status(), http::StatusCode::FORBIDDEN, "{}", token.display());
    }
    let bogus = tokens.path().join("bogus");
    std::fs::write(&bogus, "not-a-token").expect("write");
    let refused = client::request(
        &push_options(bogus),
        http::Method::GET,
        protocol::STREAM_PATH,
        Bytes::new(),
    )
    .await
    .expect("push server answers");
    assert_eq!(refused.status(), http::StatusCode::UNAUTHORIZED);

    push.abort();
    controller.abort();
    running.serve(async {}).await;
}

/// The messages of one push stream, read line by line.
struct Lines {
    body: hyper::body::Incoming,
    buffer: Vec<u8>,
}

impl Lines {
    async fn open(options: &client::Options, path: &str) -> Lines {
        let response = client::request(options, http::Method::GET, path, Bytes::new())
            .await
            .expect("push server answers");
        assert_eq!(response.status(), http::StatusCode::OK);
        Lines {
            body: response.into_body(),
            buffer: Vec::new(),
        }
    }

    async fn next(&mut self) -> protocol::Message {
        use http_body_util::BodyExt;
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return serde_json::from_slice(&line).expect("a message");
            }
            let frame = tokio::time::timeout(Duration::from_secs(30), self.body.frame())
                .await
                .expect("a message within 30 s")
                .expect("the stream goes on")
                .expect("a frame");
            if let Ok(data) = frame.into_data() {
                self.buffer.extend_from_slice(&data);
            }
        }
    }
}

/// A Pod `name` in `ns` running as ServiceAccount `account` with `labels` (never scheduled here).
async fn pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
    account: &str,
    labels: std::collections::BTreeMap<String, String>,
) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
    let pod = Pod {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(PodSpec {
            service_account_name: Some(account.into()),
            containers: vec![Container {
                name: "proxy".into(),
                image: Some("turna:test".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create Pod")
}

/// A token of ServiceAccount `ns/account` bound to `pod`, written to `dir/file`.
async fn pod_token(
    client: &kube::Client,
    ns: &str,
    account: &str,
    pod: &k8s_openapi::api::core::v1::Pod,
    dir: &Path,
    file: &str,
) -> std::path::PathBuf {
    let bound = k8s_openapi::api::authentication::v1::BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
    };
    let token = common::service_account_token(client, ns, account, Some(bound)).await;
    let path = dir.join(file);
    std::fs::write(&path, token).expect("write token");
    path
}

/// On a current-thread runtime, as `turna proxy` runs with one core (`modes::proxy::runtime`):
/// the controller beside it too.
#[tokio::test(flavor = "current_thread")]
async fn proxies_sharing_a_service_account_are_told_apart_by_their_pod() {
    let client = common::client(&plane().kubeconfig()).await;
    let ns = plane().fresh_namespace("shared");
    let home = plane().fresh_namespace("shared-home");
    let class = format!("turna-{ns}");
    let backend = backend("shared").await;
    let port = free_port().await;
    plane()
        .apply_yaml(&objects(&ns, &class, port, backend, "/"))
        .expect("apply objects");
    let account = "turna-proxy-shared";
    let mut settings = Kubernetes {
        gateway_class: class.clone(),
        controller_id: format!("test/{class}"),
        port_offset: 0,
        debounce: Duration::from_millis(50),
        backend: operator::settings::Backend {
            allow_external_name: true,
            ..Default::default()
        },
        ..Default::default()
    };
    settings.status.leader_election.disabled = true;
    settings.proxy.namespace = home.clone();
    settings.proxy.image = "turna:test".into();
    settings.proxy.service_account = account.into();
    let started = operator::modes::controller::start(
        client.clone(),
        operator::modes::controller::Options {
            push_address: (LOOPBACK, 0).into(),
            push_names: vec!["127.0.0.1".into()],
            namespace: Some(home.clone()),
            ..operator::modes::controller::Options::from_env(settings.clone(), (LOOPBACK, 0).into())
        },
    )
    .await
    .expect("controller starts");
    let push_addr = started.push_address();
    let ca_pem = started.ca_pem().to_string();
    let controller = tokio::spawn(started.run(std::future::pending()));

    let names = Names::new(&ns, "web", &controller_id(&settings));
    let tokens = tempfile::tempdir().expect("tempdir");
    let push_options = |token_file| client::Options {
        url: format!("https://{push_addr}").parse().expect("url"),
        ca_pem: ca_pem.clone(),
        token_file,
        endpoints: None,
    };
    for namespace in [&home, &ns] {
        Api::<ServiceAccount>::namespaced(client.clone(), namespace)
            .create(
                &PostParams::default(),
                &ServiceAccount {
                    metadata: kube::api::ObjectMeta {
                        name: Some(account.into()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .expect("create the shared ServiceAccount");
    }
    // A proxy pod of the Gateway, as its Deployment labels it, in the proxy namespace.
    let proxy_pod = pod(&client, &home, "proxy", account, names.selector()).await;
    let own = pod_token(&client, &home, account, &proxy_pod, tokens.path(), "proxy").await;
    let running = proxy::start(
        client.clone(),
        proxy::Options {
            settings: Kubernetes {
                certificate_secret: format!("{home}/{}", names.bundle),
                health_address: "127.0.0.1:0".into(),
                address: "127.0.0.1".into(),
                ..Default::default()
            },
            push: push_options(own),
        },
    )
    .await
    .expect("proxy starts");
    let gateway = SocketAddr::new(LOOPBACK, port);
    eventually("traffic through the proxy with the shared ServiceAccount", || async {
        running.dataplane().local_addr(port).await?;
        get(gateway, "/hello")
            .await
            .filter(|r| *r == (200, "shared /hello".into()))
    })
    .await;

    // Refused: a pod that is no proxy, the same labels outside the proxy namespace, and a token
    // bound to no pod.
    let stranger = pod(&client, &home, "stranger", account, Default::default()).await;
    let stranger = pod_token(&client, &home, account, &stranger, tokens.path(), "stranger").await;
    let outside = pod(&client, &ns, "proxy", account, names.selector()).await;
    let outside = pod_token(&client, &ns, account, &outside, tokens.path(), "outside").await;
    let unbound = common::service_account_token(&client, &home, account, None).await;
    let unbound_file = tokens.path().join("unbound");
    std::fs::write(&unbound_file, unbound).expect("write token");
    for token in [stranger, outside, unbound_file] {
        let refused = client::request(
            &push_options(token.clone()),
            http::Method::GET,
            protocol::STREAM_PATH,
            Bytes::new(),
        )
        .await
        .expect("push server answers");
        assert_eq!(refused.status(), http::StatusCode::FORBIDDEN, "{}", token.display());
    }

    controller.abort();
    running.serve(async {}).await;
}
