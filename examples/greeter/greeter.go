// Package greeter is the provider docs/implementing-a-provider.md builds:
// the greeting kind, from zero. Its test runs the guide's own code.
package greeter

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/core/worker/schema"
)

// Kind is the kind this provider serves.
const Kind = "greeting"

// Spec is a greeting's desired state.
type Spec struct {
	Name  string `json:"name" jsonschema:"minLength=1,maxLength=63,description=who to greet"`
	Shout bool   `json:"shout,omitempty"`
}

// Status is what a reconcile reports.
type Status struct {
	Message string `json:"message"`
}

// Config is the kind's providerconfig spec: how, not what.
type Config struct {
	Salutation string `json:"salutation,omitempty" jsonschema:"maxLength=20,description=the word to greet with (default Hello)"`
}

// Manifest is the kind's CRD, its schemas derived from the types above.
func Manifest() manifest.KindManifest {
	return manifest.KindManifest{
		Kind:         Kind,
		Description:  "Greets spec.name; the providerconfig picks the salutation.",
		SpecSchema:   schema.MustOf[Spec](),
		StatusSchema: schema.MustOf[Status](),
		ConfigSchema: schema.MustOf[Config](),
		Reactions: []manifest.ReactionDecl{{Name: "work", Trigger: manifest.TriggerSpecChange,
			Emits: manifest.Mask(manifest.OutcomeStatus, manifest.OutcomeConditions)}},
		TaskDeadlineSecs: 30,
	}
}

// Provider serves greeting/v1.
type Provider struct{}

// Kind is the one (kind, version) served.
func (Provider) Kind() manifest.KindVersion {
	return manifest.KindVersion{Kind: Kind, Version: manifest.DefaultVersion}
}

// OnConfig has nothing to dial: the salutation is read per task.
func (Provider) OnConfig(worker.ProviderConfig) {}

// Ready is always true: there is no client to wait for.
func (Provider) Ready() bool { return true }

// Work runs the "work" reaction: it computes the greeting.
func (Provider) Work(_ context.Context, req worker.Request) (worker.Outcome, error) {
	var spec Spec
	if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("spec: %w", err))
	}
	cfg := Config{Salutation: "Hello"}
	if len(req.Config.Spec) > 0 && string(req.Config.Spec) != "null" {
		if err := json.Unmarshal(req.Config.Spec, &cfg); err != nil {
			return worker.Outcome{}, worker.Terminal(fmt.Errorf("providerconfig %q: %w", req.Config.Name, err))
		}
	}
	msg := fmt.Sprintf("%s, %s!", cfg.Salutation, spec.Name)
	if spec.Shout {
		msg = strings.ToUpper(msg)
	}
	status, err := json.Marshal(Status{Message: msg})
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	return worker.Outcome{Status: status}, nil
}
