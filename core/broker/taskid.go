package broker

import (
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/pipeline"
)

// taskID identifies one stage dispatch and carries what a broker needs to
// apply a completion redelivered after its waiter is gone.
type taskID struct {
	key        pipeline.TaskKey
	epoch      int64
	generation int64
	stage      string
	final      bool
	finalizer  string
}

// String is the id as it travels: its fields, '|'-separated, built in one
// buffer (every stage dispatch makes one).
func (t taskID) String() string {
	fin := url.QueryEscape(t.finalizer)
	var b strings.Builder
	// "v1|", then each field and its '|': a shard of up to three digits, a
	// uuid's 36 characters, two int64s of up to 20 characters, "0" or "1".
	b.Grow(len("v1|") + 4 + 37 + len(t.key.TaskType) + 1 + 37 + 2*21 + len(t.stage) + 1 + 2 + len(fin))
	b.WriteString("v1|")
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], int64(t.key.ShardID), 10))
	b.WriteByte('|')
	writeUUID(&b, t.key.ResourceID)
	b.WriteByte('|')
	b.WriteString(string(t.key.TaskType))
	b.WriteByte('|')
	writeUUID(&b, t.key.OpID)
	b.WriteByte('|')
	b.Write(strconv.AppendInt(num[:0], t.epoch, 10))
	b.WriteByte('|')
	b.Write(strconv.AppendInt(num[:0], t.generation, 10))
	b.WriteByte('|')
	b.WriteString(t.stage)
	if t.final {
		b.WriteString("|1|")
	} else {
		b.WriteString("|0|")
	}
	b.WriteString(fin)
	return b.String()
}

// writeUUID writes u in its canonical 36-character form (as u.String()
// spells it, without the string of its own).
func writeUUID(b *strings.Builder, u uuid.UUID) {
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	b.Write(s[:])
}

func parseTaskID(s string) (taskID, error) {
	f := strings.Split(s, "|")
	if len(f) == 11 && strings.HasPrefix(f[10], "a") {
		f = f[:10] // a re-dispatch attempt (attemptID) of the same stage
	}
	if len(f) != 10 || f[0] != "v1" {
		return taskID{}, fmt.Errorf("malformed task id %q", s)
	}
	var t taskID
	var err error
	if t.key.ShardID, err = strconv.Atoi(f[1]); err != nil {
		return taskID{}, fmt.Errorf("task id %q: shard: %w", s, err)
	}
	if t.key.ResourceID, err = uuid.Parse(f[2]); err != nil {
		return taskID{}, fmt.Errorf("task id %q: resource: %w", s, err)
	}
	t.key.TaskType = pipeline.TaskType(f[3])
	if t.key.OpID, err = uuid.Parse(f[4]); err != nil {
		return taskID{}, fmt.Errorf("task id %q: op: %w", s, err)
	}
	if t.epoch, err = strconv.ParseInt(f[5], 10, 64); err != nil {
		return taskID{}, fmt.Errorf("task id %q: epoch: %w", s, err)
	}
	if t.generation, err = strconv.ParseInt(f[6], 10, 64); err != nil {
		return taskID{}, fmt.Errorf("task id %q: generation: %w", s, err)
	}
	t.stage, t.final = f[7], f[8] == "1"
	if t.finalizer, err = url.QueryUnescape(f[9]); err != nil {
		return taskID{}, fmt.Errorf("task id %q: finalizer: %w", s, err)
	}
	return t, nil
}

// kvOf is a task's (kind, version).
func kvOf(t pipeline.Task) manifest.KindVersion {
	return manifest.KindVersion{Kind: t.Resource.Kind, Version: t.Resource.Version}
}
