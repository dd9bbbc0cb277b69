package stack

import (
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// credentials are the secrets a stack provisions so its default local path
// is authenticated: the worker plane's worker and mesh tokens (converge
// gets WORKER_TOKENS_FILE and MESH_TOKENS_FILE, the worker
// WORKER_TOKEN_FILE) and, when asked for, an admin API token
// (API_TOKENS_FILE). They live in a private temporary directory removed by
// Stop.
type credentials struct {
	dir         string
	adminToken  string
	workerToken string
	convergeEnv []string
	workerEnv   []string
}

func token() string {
	b := make([]byte, 24)
	_, _ = crand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// provision writes the token files into a fresh 0700 directory.
func provision(apiToken bool) (*credentials, error) {
	dir, err := ownedTempDir(credentialsPrefix)
	if err != nil {
		return nil, fmt.Errorf("credentials directory: %w", err)
	}
	workerToken := token()
	c := &credentials{dir: dir, workerToken: workerToken}
	files := map[string]string{
		"worker-tokens": workerToken + " stack-worker\n",
		"worker-token":  workerToken + "\n",
		"mesh-tokens":   token() + " stack-mesh\n",
	}
	if apiToken {
		c.adminToken = token()
		files["api-tokens"] = c.adminToken + " admin stack-admin\n"
		c.convergeEnv = append(c.convergeEnv, "API_TOKENS_FILE="+filepath.Join(dir, "api-tokens"))
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	c.convergeEnv = append(c.convergeEnv, "WORKER_TOKENS_FILE="+filepath.Join(dir, "worker-tokens"),
		"MESH_TOKENS_FILE="+filepath.Join(dir, "mesh-tokens"))
	c.workerEnv = []string{"WORKER_TOKEN_FILE=" + filepath.Join(dir, "worker-token")}
	return c, nil
}

// remove deletes the credentials directory.
func (c *credentials) remove() error {
	if c == nil {
		return nil
	}
	return os.RemoveAll(c.dir)
}
