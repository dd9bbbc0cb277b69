package pipeline

import (
	"testing"
	"unsafe"
)

// A known value is the known string itself, with no allocation; any other
// is copied out of the driver's memory, which pgx reuses.
func TestKnownText(t *testing.T) { //nolint:paralleltest // AllocsPerRun
	var got string
	k := &knownText{&got, []string{"reconcile", "delete"}}
	buf := []byte("delete")
	if n := testing.AllocsPerRun(100, func() { _ = k.ScanBytes(buf) }); n != 0 {
		t.Fatalf("a known value allocated %v times", n)
	}
	if got != "delete" || unsafe.StringData(got) != unsafe.StringData(k.known[1]) {
		t.Fatalf("got %q, not the known string", got)
	}
	buf = []byte("operate")
	_ = k.ScanBytes(buf)
	copy(buf, "XXXXXXX") // the driver reuses its buffer
	if got != "operate" {
		t.Fatalf("an unknown value reads %q once the buffer is reused", got)
	}
}
