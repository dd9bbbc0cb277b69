// Package workerproto holds the broker↔worker protocol: the protobuf package
// converge.worker.v1 (WorkerService) and its generated Go + Connect code under
// gen/. Regenerate with `go generate ./workerproto` (or `just generate`); the
// tools come from the tools/ module, nothing is downloaded at generate time.
package workerproto

//go:generate go tool -modfile=../tools/go.mod buf generate
