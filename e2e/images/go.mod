// Turna e2e images: the binaries that stand in for the container images the conformance suite
// deploys (the node agent maps image repositories to them through e2e/cluster/images.yaml).
// Built by e2e/scripts/build-images.sh into ~/.cache/turna/images/<version>/.
module github.com/turna/turna/e2e/images

go 1.27.0

// registry.k8s.io/gateway-api/conformance/echo-basic:v0.1.0 (and :v0.2.0, whose source the
// Go module proxy does not serve; see README.md).
tool sigs.k8s.io/gateway-api-conformance-images/echo-basic

require (
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260523011958-0a33c5d7ca68 // indirect
	google.golang.org/grpc v1.82.1 // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
	sigs.k8s.io/gateway-api-conformance-images v0.1.0 // indirect
)
