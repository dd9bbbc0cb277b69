// Package migrations embeds the goose SQL migrations: the schema and every
// plpgsql function that schedules, gates and cascades work.
package migrations

import "embed"

// FS holds the numbered goose migration files.
//
//go:embed *.sql
var FS embed.FS
