// Package tools pins the heavy code generators (buf and the protobuf/Connect
// plugins) in their own module, so their ~90 dependencies stay out of the
// main module. Run them with `go tool -modfile=tools/go.mod <tool>`.
package tools
