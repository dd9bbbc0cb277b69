package worker

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/converge-run/converge/core/manifest"
)

// defaults caches each kind's default providerconfig: primed by a pull before
// the first task, refreshed by every broker push and every reconnect.
type defaults struct {
	mu  sync.RWMutex
	cfg map[string]ProviderConfig // by kind
}

func newDefaults() *defaults { return &defaults{cfg: map[string]ProviderConfig{}} }

func (d *defaults) get(kind string) (ProviderConfig, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	c, ok := d.cfg[kind]
	return c, ok
}

// set stores cfg and reports whether it changed.
func (d *defaults) set(kind string, cfg ProviderConfig, deleted bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	old, had := d.cfg[kind]
	if deleted {
		delete(d.cfg, kind)
		return had
	}
	if had && old.Revision == cfg.Revision && string(old.Spec) == string(cfg.Spec) && string(old.Data) == string(cfg.Data) {
		return false
	}
	d.cfg[kind] = cfg
	return true
}

// Effective computes the config a task runs with: attached spec keys win over
// the default's, an attached bundle (data) replaces the default's whole.
func Effective(def *ProviderConfig, attached *ProviderConfig) (EffectiveConfig, error) {
	var out EffectiveConfig
	if def != nil {
		out = EffectiveConfig{Name: def.Name, Spec: def.Spec, Data: def.Data}
	}
	if attached == nil {
		return out, nil
	}
	out.Name = attached.Name
	if len(attached.Data) > 0 && string(attached.Data) != "null" {
		out.Data = attached.Data
	}
	if len(attached.Spec) == 0 || string(attached.Spec) == "null" {
		return out, nil
	}
	if len(out.Spec) == 0 || string(out.Spec) == "null" {
		out.Spec = attached.Spec
		return out, nil
	}
	base := map[string]json.RawMessage{}
	if err := json.Unmarshal(out.Spec, &base); err != nil {
		return out, fmt.Errorf("default config %q spec is not an object: %w", def.Name, err)
	}
	over := map[string]json.RawMessage{}
	if err := json.Unmarshal(attached.Spec, &over); err != nil {
		return out, fmt.Errorf("config %q spec is not an object: %w", attached.Name, err)
	}
	for k, v := range over {
		base[k] = v
	}
	merged, err := json.Marshal(base)
	if err != nil {
		return out, fmt.Errorf("merge config %q over the default: %w", attached.Name, err)
	}
	out.Spec = merged
	return out, nil
}

// kvKey is the map key for a served pair.
func kvKey(kv manifest.KindVersion) string { return kv.Kind + "/" + kv.Version }
