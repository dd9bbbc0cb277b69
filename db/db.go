// Package db is the database side of converge: the versioned DDL
// (migrations), the function set (functions), the runner that applies both
// (migrate), the private Postgres launcher (pgcluster), the pool settings
// (pgpool) and the test harness (pgtest). schema.sql beside this file is
// generated: what a database holds after migrate.
package db

//go:generate go run ./internal/schemadump -o schema.sql
