package control

import (
	"testing"

	"github.com/converge-run/converge/db/pgtest"
)

// TestMain starts the private Postgres the drainer's notify test uses (only
// when a test asks for a database).
func TestMain(m *testing.M) { pgtest.Main(m) }
