// Package migrations embeds the versioned goose migrations: the schema's DDL
// (tables, indexes, partitions, types, triggers). The functions they name
// live in db/functions, applied by db/migrate before these.
package migrations

import "embed"

// FS holds the numbered goose migration files.
//
//go:embed *.sql
var FS embed.FS
