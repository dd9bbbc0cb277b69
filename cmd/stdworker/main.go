// Command stdworker is the database-free default worker: it serves the kinds
// it is told to with a built-in provider each. The default, stdio, runs an
// external program per task (core/stdio), the task as JSON on stdin and the
// outcome as JSON on stdout; stdshell runs a script carried in the
// providerconfig bundle, stdterraform runs terraform/tofu on a module,
// stdcel composes a resource graph from CEL templates and stdstarlark
// composes with a Starlark program. What each kind does comes from its
// default providerconfig, so a new kind needs no Go code and no redeploy.
// See README.md and docs/builtin-providers.md.
//
//	BROKER_URL=http://127.0.0.1:8080 stdworker --kind script --kind vpc/v2 --kind network=stdterraform
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/logging"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/memlimit"
	"github.com/converge-run/converge/core/shutdown"
	"github.com/converge-run/converge/core/stdcel"
	"github.com/converge-run/converge/core/stdio"
	"github.com/converge-run/converge/core/stdshell"
	"github.com/converge-run/converge/core/stdstarlark"
	"github.com/converge-run/converge/core/stdterraform"
	"github.com/converge-run/converge/core/worker"
)

// BuildVersion is stamped by `just build` from git describe.
var BuildVersion = "dev"

func main() {
	if os.Getpid() == 1 {
		// The container's init (the image's entrypoint): the worker runs as
		// its child, and orphans are reaped (asInit).
		os.Exit(asInit(os.Args[1:]))
	}
	// SIGTERM drains the running programs; a second signal exits at once.
	ctx, stop := shutdown.Context(context.Background(), "stdworker", nil)
	err := run(ctx, os.Args[1:], os.Getenv)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stdworker:", err)
		os.Exit(1)
	}
}

// The built-in providers a kind can be served by.
const (
	providerStdio     = "stdio"
	providerShell     = "stdshell"
	providerTerraform = "stdterraform"
	providerCEL       = "stdcel"
	providerStarlark  = "stdstarlark"
)

var builtins = []string{providerStdio, providerShell, providerTerraform, providerCEL, providerStarlark}

// served is one --kind: the (kind, version) and its built-in provider.
type served struct {
	kv       manifest.KindVersion
	provider string
}

// kindList is a repeatable --kind flag ("kind[/version][=provider]", or a
// comma-separated list of them).
type kindList []served

func (k *kindList) String() string {
	parts := make([]string, 0, len(*k))
	for _, s := range *k {
		parts = append(parts, s.kv.String()+"="+s.provider)
	}
	return strings.Join(parts, ",")
}

func (k *kindList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		ref, provider, hasProvider := strings.Cut(s, "=")
		kind, version, _ := strings.Cut(ref, "/")
		if kind == "" {
			return fmt.Errorf("kind %q: want kind[/version][=provider]", s)
		}
		if version == "" {
			version = manifest.DefaultVersion
		}
		if !hasProvider {
			provider = providerStdio
		}
		if !slices.Contains(builtins, provider) {
			return fmt.Errorf("kind %q: unknown provider %q (the built-in providers: %s)", s, provider, strings.Join(builtins, ", "))
		}
		kv := manifest.KindVersion{Kind: kind, Version: version}
		if slices.ContainsFunc(*k, func(o served) bool { return o.kv == kv }) {
			return fmt.Errorf("kind %q: %s is named twice", s, kv)
		}
		*k = append(*k, served{kv: kv, provider: provider})
	}
	return nil
}

// newProvider builds the built-in provider s names.
func newProvider(s served, log zerolog.Logger, getenv func(string) string) worker.Provider {
	switch s.provider {
	case providerShell:
		return stdshell.New(s.kv, log, getenv)
	case providerTerraform:
		return stdterraform.New(s.kv, log, getenv)
	case providerCEL:
		return stdcel.New(s.kv, log)
	case providerStarlark:
		return stdstarlark.New(s.kv, log)
	}
	return stdio.New(s.kv, log)
}

func run(ctx context.Context, args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("stdworker", flag.ContinueOnError)
	var kinds kindList
	if err := kinds.Set(getenv("STDWORKER_KINDS")); err != nil {
		return fmt.Errorf("STDWORKER_KINDS: %w", err)
	}
	fs.Var(&kinds, "kind", "a kind to serve, kind[/version][=provider] with provider one of "+strings.Join(builtins, ", ")+
		" (default stdio); repeatable or comma-separated (env STDWORKER_KINDS)")
	broker := fs.String("broker", getenv("BROKER_URL"), "the broker's URL, http:// or https:// (env BROKER_URL)")
	id := fs.String("id", getenv("WORKER_ID"), "this worker's id (env WORKER_ID; default host-pid-random)")
	parallel := fs.Int("max-parallel", 0, "concurrent tasks (env WORKER_MAX_PARALLEL, default 64)")
	drain := fs.Duration("drain-timeout", 0, "how long running programs may finish on shutdown (env WORKER_DRAIN_TIMEOUT, default 50s)")
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: stdworker --broker URL --kind KIND[/VERSION][=PROVIDER]...\n\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nCredential: WORKER_TOKEN or WORKER_TOKEN_FILE (bearer token). Limits: WORKER_MAX_MESSAGE_BYTES.\n"+
			"TLS (https:// brokers): WORKER_TLS_CERT_FILE, WORKER_TLS_KEY_FILE (client keypair for mTLS),\n"+
			"WORKER_TLS_CA_FILE (CA to verify the broker), TLS_RELOAD_INTERVAL. Probes (/livez, /readyz): WORKER_HEALTH_ADDR.\n"+
			"Profiler (loopback only): WORKER_PPROF_ADDR. Logs: LOG_FORMAT, LOG_LEVEL.\n")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // the usage is printed; asking for it is no failure
		}
		return err
	}
	if *version {
		fmt.Println(BuildVersion)
		return nil
	}
	log, err := logging.FromEnv()
	if err != nil {
		return err
	}
	memlimit.ApplyAndLog(log)
	opts, err := worker.OptionsFrom(getenv)
	if err != nil {
		return err
	}
	opts.WorkerID, opts.Version, opts.Logger = *id, BuildVersion, log.With().Str("component", "stdworker").Logger()
	if *parallel > 0 {
		opts.MaxParallel = *parallel
	}
	if *drain > 0 {
		opts.DrainTimeout = *drain
	}
	if *broker == "" {
		return errors.New("no broker: set --broker or BROKER_URL")
	}
	if len(kinds) == 0 {
		return errors.New("no kinds: name at least one with --kind or STDWORKER_KINDS")
	}
	providers := make([]worker.Provider, 0, len(kinds))
	for _, k := range kinds {
		providers = append(providers, newProvider(k, log, getenv))
	}
	log.Info().Str("broker", *broker).Str("kinds", kinds.String()).Msg("stdworker starting")
	return worker.Serve(ctx, *broker, opts, providers...)
}
