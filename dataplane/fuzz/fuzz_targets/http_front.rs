//! The HTTP front of the proxy: arbitrary bytes from a client, as HTTP/1.1 or detected (HTTP/1.1
//! or h2c by the preface), through the proxy's own service with a table of routes that match
//! paths, regexes, headers, query parameters and methods, redirect, rewrite, modify headers,
//! answer CORS, mirror, time out and retry. Its backends have no endpoints, so nothing leaves the
//! process: every request is answered by the proxy itself, never a panic.
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use dataplane::http::{HttpService, ListenerContext, MAX_MIRRORS_IN_FLIGHT};
use dataplane::metrics::Metrics;
use dataplane::table::Table;
use dataplane::listener::Deadlines;
use dataplane::{Limits, Material, PassiveHealth};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;
use translator::{Config, Snapshot, translate};

/// The routes the requests meet: one Gateway listener on port 80.
const ROUTES: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: turna}
spec: {controllerName: rakunlabs.com/turna}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: turna
  listeners:
    - {name: http, port: 80, protocol: HTTP}
    - {name: wildcard, port: 80, protocol: HTTP, hostname: "*.example.com"}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [example.com, "*.example.com"]
  rules:
    - matches: [{path: {type: Exact, value: /exact}}]
      backendRefs: [{name: app, port: 80}]
    - matches: [{path: {type: PathPrefix, value: /redirect}}]
      filters:
        - type: RequestRedirect
          requestRedirect:
            scheme: https
            hostname: www.example.com
            statusCode: 301
            path: {type: ReplacePrefixMatch, replacePrefixMatch: /moved}
    - matches: [{path: {type: PathPrefix, value: /rewrite}}]
      filters:
        - type: URLRewrite
          urlRewrite:
            hostname: internal.example.com
            path: {type: ReplacePrefixMatch, replacePrefixMatch: /}
      backendRefs: [{name: app, port: 80}]
    - matches: [{path: {type: RegularExpression, value: "/re/[a-z]+/[0-9]{1,3}"}}]
      backendRefs: [{name: app, port: 80}]
    - matches:
        - headers: [{name: x-tenant, value: a}, {name: x-version, type: RegularExpression, value: "v[0-9]+"}]
          queryParams: [{name: debug, value: "1"}]
          method: POST
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier:
            set: [{name: x-set, value: "1"}]
            add: [{name: x-add, value: "2"}]
            remove: [x-remove]
        - type: ResponseHeaderModifier
          responseHeaderModifier:
            set: [{name: x-response, value: "3"}]
        - type: RequestMirror
          requestMirror: {backendRef: {name: mirror, port: 80}, percent: 50}
      backendRefs: [{name: app, port: 80, weight: 3}, {name: missing, port: 80, weight: 1}]
      timeouts: {request: 2s, backendRequest: 1s}
      retry: {codes: [503], attempts: 2, backoff: 10ms}
    - matches: [{path: {type: PathPrefix, value: /cors}}]
      filters:
        - type: CORS
          cors:
            allowOrigins: ["https://a.example.com", "http://*.example.com"]
            allowMethods: [GET, POST]
            allowHeaders: [x-tenant]
            exposeHeaders: [x-response]
            allowCredentials: true
            maxAge: 60
      backendRefs: [{name: app, port: 80}]
    - matches: [{path: {type: PathPrefix, value: /extension}}]
      filters: [{type: ExtensionRef, extensionRef: {group: example.com, kind: Foo, name: x}}]
    - backendRefs: [{name: app, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: grpc, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [grpc.example.org]
  rules:
    - matches: [{method: {service: pkg.Svc, method: Get}, headers: [{name: x-tenant, value: a}]}]
      backendRefs: [{name: app, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: default}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: mirror, namespace: default}
spec: {ports: [{port: 80}]}
"#;

/// How long a connection may wait for the proxy: longer than any timeout, retry or backoff of
/// the routes, so that only a connection waiting for its client reaches it.
const IDLE: Duration = Duration::from_secs(30);

struct Front {
    runtime: Runtime,
    context: Arc<ListenerContext>,
}

fn front() -> &'static Front {
    static FRONT: OnceLock<Front> = OnceLock::new();
    FRONT.get_or_init(|| {
        let snapshot = Snapshot::from_yaml(ROUTES).expect("routes load");
        let output = translate(&snapshot, &Config::default());
        let proxy = output.proxies.first().expect("one proxy");
        let metrics = Arc::new(Metrics::default());
        let table = Table::build(
            proxy,
            &Material::default(),
            &Table::default(),
            &metrics,
            PassiveHealth::default(),
        )
        .expect("the routes validate");
        // The clock stands still until every task waits, then jumps to the next timer: timeouts
        // end stalled exchanges at once.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        let context = Arc::new(ListenerContext {
            table: Arc::new(ArcSwap::from_pointee(table)),
            port: 80,
            scheme: "http",
            mirror_slots: Arc::new(tokio::sync::Semaphore::new(MAX_MIRRORS_IN_FLIGHT)),
            metrics,
            access_log: false,
            // The proxy's default limits: what a client meets on a listener.
            limits: Limits::default(),
            deadlines: Deadlines::start(),
        });
        Front { runtime, context }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let front = front();
    // Weighted backends and mirror shares draw from the thread's generator: the same input
    // takes the same path on every run.
    fastrand::seed(0);
    let peer = SocketAddr::from(([192, 0, 2, 1], 40000));
    front.runtime.block_on(async {
        let (mut client, server) = tokio::io::duplex(16 * 1024);
        let service = HttpService::new(front.context.clone(), peer, None);
        let connection = tokio::spawn(async move {
            let io = TokioIo::new(server);
            // The listener serves known HTTP/1.1 with hyper's HTTP/1.1 connection, the rest
            // through hyper-util's detection.
            if mode % 2 == 0 {
                let _ = http1::Builder::new()
                    .serve_connection(io, service)
                    .with_upgrades()
                    .await;
            } else {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(io, service)
                    .await;
            }
        });
        let (mut read, mut write) = tokio::io::split(&mut client);
        let mut answer = Vec::new();
        let exchange = async {
            // Every request of the input is answered before the client closes its side: a
            // connection reading the end of its input stops serving (hyper's default).
            let send = async {
                let _ = write.write_all(bytes).await;
            };
            let receive = async {
                let mut buffer = [0u8; 8192];
                // Until the connection ends or waits for more input (the clock stands still
                // while anything else can run).
                while let Ok(Ok(n @ 1..)) = tokio::time::timeout(IDLE, read.read(&mut buffer)).await {
                    answer.extend_from_slice(&buffer[..n]);
                }
            };
            tokio::join!(send, receive);
            let _ = write.shutdown().await;
            let _ = tokio::time::timeout(IDLE, read.read_to_end(&mut answer)).await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(600), exchange).await;
        connection.abort();
        let _ = connection.await;
    });
});
