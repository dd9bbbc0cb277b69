// Package gql is the datadriven demo's GraphQL client (genqlient), used by
// the jobsaga reactor to apply the next resource of its chain through the
// API — a worker has no database.
package gql

//go:generate go tool genqlient genqlient.yaml
