// The load generators and backends of dataplane/bench/protocols.sh that no Debian package
// provides: grpc-go's benchmark service and a client for it, TLS 1.3 handshakes without
// resumption, a TCP/TLS byte source and sink, and a UDP echo server and client.
module github.com/turna/turna/dataplane/bench/load

go 1.27.0

require google.golang.org/grpc v1.82.1

require (
	golang.org/x/net v0.53.0 // indirect
	golang.org/x/sys v0.43.0 // indirect
	golang.org/x/text v0.36.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260414002931-afd174a4e478 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
