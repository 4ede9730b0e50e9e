//! Owner references against a real kube-apiserver with kube-controller-manager (its garbage
//! collector): every provisioned object is owned by its Gateway (objects in the Gateway's
//! namespace) or its GatewayClass (the controller namespace's and cluster-scoped ones), so
//! Kubernetes removes a deleted Gateway's proxy while no Turna controller runs.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use common::eventually;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::discovery::ApiResource;
use operator::provision::{Names, controller_id};
use operator::settings::Kubernetes;

fn plane() -> &'static control_plane::ControlPlane {
    control_plane::ControlPlane::shared_with(control_plane::Options {
        crds: true,
        controllers: true,
        scheduler: false,
    })
}

fn gateway_api(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: translator::GROUP.into(),
        version: "v1".into(),
        api_version: format!("{}/v1", translator::GROUP),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The single owner of object `name` of `api`, once it exists.
async fn owner<K>(api: &Api<K>, name: &str) -> OwnerReference
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(&format!("{name} with an owner"), || async {
        let object = api.get_opt(name).await.ok()??;
        let owners = object.meta().owner_references.clone()?;
        (owners.len() == 1).then(|| owners[0].clone())
    })
    .await
}

async fn gone<K>(api: &Api<K>, name: &str, what: &str)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    common::within(Duration::from_secs(60), what, || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_collects_a_deleted_gateways_proxy_without_the_controller() {
    let cp = plane();
    let ns = cp.fresh_namespace("owned");
    let home = cp.fresh_namespace("owned-home");
    let class = format!("turna-{ns}");
    let client = common::client(&cp.kubeconfig()).await;
    cp.apply_yaml(&format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: {class}}}
spec: {{controllerName: rakunlabs.com/turna}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
"#
    ))
    .expect("apply");
    // Proxies in the Gateway's namespace, each with its own ServiceAccount: objects on both
    // sides of the owner rule.
    let settings = Kubernetes {
        gateway_class: class.clone(),
        controller_id: format!("test/{class}"),
        debounce: Duration::from_millis(50),
        status: operator::settings::Status {
            leader_election: operator::settings::LeaderElection {
                disabled: true,
                ..Default::default()
            },
            ..Default::default()
        },
        proxy: operator::settings::Proxy {
            namespace: home.clone(),
            gateway_namespace: true,
            cluster_role: "turna-proxy-reader".into(),
            image: "turna:test".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let names = Names::new(&ns, "web", &controller_id(&settings));
    let controller = tokio::spawn(operator::reconcile::run(client.clone(), settings));

    let gateways = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &gateway_api("Gateway", "gateways"));
    let classes = Api::<DynamicObject>::all_with(client.clone(), &gateway_api("GatewayClass", "gatewayclasses"));
    let gateway_uid = gateways.get("web").await.expect("Gateway").metadata.uid.expect("uid");
    let class_uid = classes.get(&class).await.expect("class").metadata.uid.expect("uid");

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    for (what, owner) in [
        ("Deployment", owner(&deployments, &names.proxy).await),
        ("Service", owner(&services, &names.proxy).await),
        ("ConfigMap", owner(&config_maps, &names.proxy).await),
        ("ServiceAccount", owner(&accounts, &names.proxy).await),
    ] {
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Gateway", gateway_uid.as_str()),
            "{what}"
        );
        assert_eq!(owner.name, "web");
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &home);
    let bundle = owner(&secrets, &names.bundle).await;
    assert_eq!(
        (bundle.kind.as_str(), bundle.uid.as_str()),
        ("GatewayClass", class_uid.as_str())
    );
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding_name = format!("turna-proxy:{ns}:{}", names.proxy);
    let binding = owner(&bindings, &binding_name).await;
    assert_eq!(binding.uid, class_uid);

    // No controller any more: Kubernetes alone removes the deleted Gateway's proxy, and the
    // class's objects once the class goes.
    controller.abort();
    let _ = controller.await;
    gateways
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the Gateway");
    gone(&deployments, &names.proxy, "the Deployment collected").await;
    gone(&services, &names.proxy, "the Service collected").await;
    gone(&config_maps, &names.proxy, "the ConfigMap collected").await;
    gone(&accounts, &names.proxy, "the ServiceAccount collected").await;
    classes
        .delete(&class, &DeleteParams::default())
        .await
        .expect("delete the class");
    gone(&secrets, &names.bundle, "the bundle Secret collected").await;
    gone(&bindings, &binding_name, "the ClusterRoleBinding collected").await;
}
