// Package cli is conctl: a kubectl-style command line for converge whose
// every call goes through the genqlient client generated from the served
// GraphQL schema (operations in *.graphql, configuration in genqlient.yaml,
// output in generated.go). Subscriptions ride WSClient, a
// graphql.WebSocketClient on gorilla/websocket with reconnect.
//
// cmd/conctl is a thin main over Main; docs/cli.md is generated from the
// command tree (GenerateMarkdown).
package cli

//go:generate go tool genqlient genqlient.yaml
//go:generate go run ./internal/gendocs -o ../docs/cli.md
