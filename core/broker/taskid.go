package broker

import (
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

func (t taskID) String() string {
	final := "0"
	if t.final {
		final = "1"
	}
	return strings.Join([]string{"v1", strconv.Itoa(t.key.ShardID), t.key.ResourceID.String(), string(t.key.TaskType),
		t.key.OpID.String(), strconv.FormatInt(t.epoch, 10), strconv.FormatInt(t.generation, 10), t.stage, final,
		url.QueryEscape(t.finalizer)}, "|")
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
