package app

import (
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/config"
)

// planeCredentials loads the worker plane's token files (nil without any)
// and says how the plane is protected — at every log level, since an open
// plane lets anyone who reaches the broker run and complete tasks.
func planeCredentials(cfg config.Config, log zerolog.Logger) (*auth.Plane, error) {
	if !cfg.HasBroker() {
		return nil, nil
	}
	if !cfg.WorkerPlaneAuth() {
		log.Log().Str("level", "warn").Msg("the worker plane is open (no WORKER_TOKENS_FILE, MESH_TOKENS_FILE or TLS_CLIENT_CA_FILE): " +
			"anyone who reaches the broker may serve work and relay stages")
		return nil, nil
	}
	if cfg.WorkerTokens == "" && cfg.MeshTokens == "" {
		return nil, nil // client certificates only
	}
	if cfg.MeshTokens == "" && cfg.TLSClientCAFile == "" {
		log.Warn().Msg("WORKER_TOKENS_FILE is set without MESH_TOKENS_FILE: peer brokers cannot relay stages to this one")
	}
	return auth.NewPlane(cfg.WorkerTokens, cfg.MeshTokens, cfg.TLSReload, log,
		auth.TokenFile{Setting: "API_TOKENS_FILE", Path: cfg.APITokensFile}) // one credential, one audience
}
