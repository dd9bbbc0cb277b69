// Package graph is the served GraphQL schema (schema/*.graphqls, the contract
// in contract/contract.graphqls plus this server's additions) and gqlgen's
// generated executor (generated.go). The resolvers live in /resolvers, the
// HTTP and websocket handler in /core/api.
package graph

//go:generate go -C .. tool gqlgen generate --config gqlgen.yml
